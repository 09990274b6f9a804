"""Flattening (L1 pure core): layout trees, the canonical form, type signatures, the naive typemap.

Theory of operation
===================
Every datatype's byte layout is first turned into a small **layout tree** that
describes the packed byte stream of one element, in typemap order, without ever
listing more than the constructors listed:

* ``("B", n)`` -- a block of ``n`` contiguous bytes;
* ``("R", c, s, X)`` -- ``c >= 2`` copies of shape ``X``, copy ``i`` shifted by
  ``i * s`` bytes (``s`` may be negative or zero);
* ``("S", ((0, X0), (d1, X1), ...))`` -- a sequence, item ``k`` shifted by ``dk``.

A *node* is ``(offset, shape)``; ``None`` is the empty layout.  Shapes are plain
tuples, so "same shape" is tuple equality and "same layout up to a shift" is
"same shape".  Trees are built bottom-up by three smart constructors that keep
them normalised, so that different constructions of one layout meet in one
tree:

* :func:`rep` drops single copies, merges a repeated block whose stride is its
  length into one block, and folds ``R(c, c2*s2, R(c2, s2, X))`` into
  ``R(c*c2, s2, X)``;
* :func:`seq` splices nested sequences and merges neighbours left to right on a
  stack: adjacent blocks join, ``R(c, s, X)`` followed by ``X`` one stride later
  grows to ``R(c+1, s, X)`` (and the mirror case, and ``R + R``), and two equal
  shapes become ``R(2, d, X)``; every merge is retried against the item below it,
  so an indexed list of equally spaced blocks becomes exactly the vector's tree.

The **canonical form** of ``count`` elements (element ``i`` shifted by ``i *
extent``) is read off the normalised tree:

* :class:`Contiguous` ``(start, nbytes)`` -- one run (``(0, 0)`` when empty);
* :class:`Strided` ``(start, blocklen, counts, strides)`` -- a regular grid of
  up to three dimensions over one block size (TEMPI's representation), counts
  and strides listed outermost first like NumPy's shape and strides, with no two
  consecutive blocks adjacent (those are merged);
* :class:`Blocks` ``(offsets, lengths)`` -- everything else: the merged list of
  byte runs in typemap order (``array('q')``), materialised on first use from the
  tree it keeps, so classifying a huge type costs nothing.

Because merging adjacent runs is part of the definition, the form is a function
of the byte stream, not of the construction: a vector, the equivalent subarray,
indexed, hindexed and struct types reach the same form.  Where a pure grid tree
would have runs that touch across a row (``R(2, 12, R(2, 8, B4))``), the form is
computed from the merged list instead, which is also what :func:`classify_runs`
does for any explicit list.

The **type signature** (:func:`signature`) is the run-length list ``[(basic,
n), ...]`` of basic types of one element, pair types split into their two
parts; it serves ``MPI_Get_elements`` (:func:`elements_in`) and external32
conversion.  :func:`typemap` is an independent, deliberately naive interpreter
of the constructor definitions (one entry per basic element), used by the tests
as the reference every optimised path is checked against.

Nothing here imports NumPy; trees are cached per handle in ``datatype._rec.cache``.
"""

from __future__ import annotations

import itertools
from array import array
from typing import NamedTuple

from ..constants import (
    COMBINER_CONTIGUOUS,
    COMBINER_DARRAY,
    COMBINER_DUP,
    COMBINER_F90_COMPLEX,
    COMBINER_F90_INTEGER,
    COMBINER_F90_REAL,
    COMBINER_HINDEXED,
    COMBINER_HINDEXED_BLOCK,
    COMBINER_HVECTOR,
    COMBINER_INDEXED,
    COMBINER_INDEXED_BLOCK,
    COMBINER_NAMED,
    COMBINER_RESIZED,
    COMBINER_STRUCT,
    COMBINER_SUBARRAY,
    COMBINER_VALUE_INDEX,
    COMBINER_VECTOR,
    DISTRIBUTE_BLOCK,
    DISTRIBUTE_CYCLIC,
    DISTRIBUTE_DFLT_DARG,
    ORDER_C,
    UNDEFINED,
)

__all__ = [
    "Contiguous",
    "Strided",
    "Blocks",
    "canonical",
    "classify_runs",
    "tree",
    "rep",
    "seq",
    "shift",
    "runs",
    "pure_grid",
    "segments",
    "signature",
    "elements_in",
    "typemap",
    "typemap_bytes",
    "darray_runs",
    "subarray_dims",
]

F90_TYPES = (COMBINER_F90_INTEGER, COMBINER_F90_REAL, COMBINER_F90_COMPLEX)
_NAMED_LIKE = (COMBINER_NAMED, COMBINER_VALUE_INDEX)


# -- the canonical form -----------------------------------------------------------------------


class Contiguous(NamedTuple):
    """One run of ``nbytes`` bytes at byte offset ``start`` (``(0, 0)``: nothing)."""

    start: int
    nbytes: int


class Strided(NamedTuple):
    """``prod(counts)`` blocks of ``blocklen`` bytes on a grid of up to three dimensions.

    Block ``(i0, i1, ...)`` starts at ``start + sum(i_k * strides[k])``; blocks are
    packed in C order (last index fastest); ``counts``/``strides`` are outermost first.
    """

    start: int
    blocklen: int
    counts: tuple
    strides: tuple

    @property
    def nbytes(self) -> int:
        n = self.blocklen
        for c in self.counts:
            n *= c
        return n


class Blocks:
    """A general list of byte runs ``(offsets[i], lengths[i])`` in typemap order, merged.

    ``offsets`` and ``lengths`` are ``array('q')``, computed on first access from the
    layout tree kept in ``node`` (consumers that can work from the tree, like the host
    plans, never materialise the list).
    """

    __slots__ = ("node", "nbytes", "_offsets", "_lengths")

    def __init__(self, offsets=None, lengths=None, *, node=None, nbytes=None) -> None:
        self.node = node
        if offsets is not None:
            self._offsets = array("q", offsets)
            self._lengths = array("q", lengths)
            self.nbytes = sum(self._lengths) if nbytes is None else nbytes
        else:
            self._offsets = self._lengths = None
            self.nbytes = _shape_nbytes(node[1]) if nbytes is None else nbytes

    def _materialise(self) -> None:
        offs, lens = runs(self.node)
        self._offsets, self._lengths = array("q", offs), array("q", lens)

    @property
    def offsets(self) -> array:
        if self._offsets is None:
            self._materialise()
        return self._offsets

    @property
    def lengths(self) -> array:
        if self._lengths is None:
            self._materialise()
        return self._lengths

    def __len__(self) -> int:
        return len(self.offsets)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Blocks):
            return NotImplemented
        return self.offsets == other.offsets and self.lengths == other.lengths

    def __ne__(self, other) -> bool:
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    __hash__ = None

    def __repr__(self) -> str:
        offs, lens = self.offsets, self.lengths
        head = ", ".join(f"({o}, {n})" for o, n in zip(offs[:6], lens[:6]))
        more = f", ... {len(offs) - 6} more" if len(offs) > 6 else ""
        return f"Blocks([{head}{more}], nbytes={self.nbytes})"


# -- tree construction --------------------------------------------------------------------------


def shift(node, d: int):
    """``node`` moved by ``d`` bytes."""
    if node is None or not d:
        return node
    return (node[0] + d, node[1])


def rep(c: int, s: int, node):
    """``c`` copies of ``node`` at stride ``s``, normalised."""
    if node is None or c <= 0:
        return None
    if c == 1:
        return node
    off, sh = node
    kind = sh[0]
    if kind == "B":
        if s == sh[1]:
            return (off, ("B", c * s))
    elif kind == "R":
        c2, s2 = sh[1], sh[2]
        if s == c2 * s2:
            return rep(c * c2, s2, (off, sh[3]))
    return (off, ("R", c, s, sh))


def _combine(a, b):
    """Merge node ``a`` with the node ``b`` that follows it in typemap order, or None."""
    ao, ash = a
    bo, bsh = b
    ak, bk = ash[0], bsh[0]
    if ak == "B" and bk == "B":
        if ao + ash[1] == bo:
            return (ao, ("B", ash[1] + bsh[1]))
    if ak == "R":
        c, s, x = ash[1], ash[2], ash[3]
        if x == bsh and bo == ao + c * s:
            return (ao, ("R", c + 1, s, x))
        if bk == "R" and bsh[2] == s and bsh[3] == x and bo == ao + c * s:
            return (ao, ("R", c + bsh[1], s, x))
    if bk == "R" and bsh[3] == ash and bo == ao + bsh[2]:
        return (ao, ("R", bsh[1] + 1, bsh[2], ash))
    if ash == bsh:
        return rep(2, bo - ao, a)
    return None


def _push(out: list, node) -> None:
    while out:
        merged = _combine(out[-1], node)
        if merged is None:
            break
        out.pop()
        node = merged
    out.append(node)


def seq(nodes):
    """The concatenation of ``nodes`` (None entries skipped), normalised."""
    out: list = []
    for node in nodes:
        if node is None:
            continue
        off, sh = node
        if sh[0] == "S":
            for d, child in sh[1]:
                _push(out, (off + d, child))
        else:
            _push(out, node)
    if not out:
        return None
    if len(out) == 1:
        return out[0]
    o0 = out[0][0]
    return (o0, ("S", tuple((o - o0, sh) for o, sh in out)))


def _shape_nbytes(sh) -> int:
    kind = sh[0]
    if kind == "B":
        return sh[1]
    if kind == "R":
        return sh[1] * _shape_nbytes(sh[3])
    return sum(_shape_nbytes(child) for _, child in sh[1])


def _cache(datatype) -> dict:
    return datatype._rec.cache


def tree(datatype):
    """The normalised layout tree of one element of ``datatype`` (None: no bytes)."""
    c = _cache(datatype)
    try:
        return c["tree"]
    except KeyError:
        pass
    t = _build(datatype)
    c["tree"] = t
    return t


def _regular(block, disps: list, unit: int):
    """Equal blocks at evenly spaced displacements: the repetition ``seq`` would reach one
    block at a time, found with one C-level comparison; None when the spacing varies."""
    if block is None or not disps or block[1][0] == "S":
        return None  # seq splices the children of a sequence one by one: keep its merges
    if len(disps) == 1:
        return shift(block, disps[0] * unit)
    step = disps[1] - disps[0]
    if step:
        even = disps == list(range(disps[0], disps[0] + len(disps) * step, step))
    else:
        even = disps.count(disps[0]) == len(disps)
    if not even:
        return None
    return shift(rep(len(disps), step * unit, block), disps[0] * unit)


def _build(dt):
    comb = dt._combiner
    if not dt._size:
        return None
    if comb in _NAMED_LIKE or comb in F90_TYPES:
        return seq((off, ("B", n)) for off, n in dt._segs)
    if comb == COMBINER_DUP or comb == COMBINER_RESIZED:
        return tree(dt._base)
    if comb == COMBINER_STRUCT:
        kw = dt._kw
        return seq(shift(rep(bl, t._extent, tree(t)), d)
                   for bl, d, t in zip(kw["blocklengths"], kw["displacements"], kw["datatypes"]))
    base = dt._base
    kw = dt._kw
    x = tree(base)
    ext = base._extent
    if comb == COMBINER_CONTIGUOUS:
        return rep(kw["count"], ext, x)
    if comb == COMBINER_VECTOR:
        return rep(kw["count"], kw["stride"] * ext, rep(kw["blocklength"], ext, x))
    if comb == COMBINER_HVECTOR:
        return rep(kw["count"], kw["stride"], rep(kw["blocklength"], ext, x))
    if comb in (COMBINER_INDEXED, COMBINER_HINDEXED):
        unit = ext if comb == COMBINER_INDEXED else 1
        bls, disps = kw["blocklengths"], kw["displacements"]
        if bls and bls.count(bls[0]) == len(bls):
            fast = _regular(rep(bls[0], ext, x), disps, unit)
            if fast is not None:
                return fast
        return seq(shift(rep(bl, ext, x), d * unit) for bl, d in zip(bls, disps))
    if comb in (COMBINER_INDEXED_BLOCK, COMBINER_HINDEXED_BLOCK):
        unit = ext if comb == COMBINER_INDEXED_BLOCK else 1
        block = rep(kw["blocklength"], ext, x)
        fast = _regular(block, kw["displacements"], unit)
        if fast is not None:
            return fast
        return seq(shift(block, d * unit) for d in kw["displacements"])
    if comb == COMBINER_SUBARRAY:
        start, dims = subarray_dims(kw["sizes"], kw["subsizes"], kw["starts"], kw["order"])
        node = x
        for count, stride in reversed(dims):
            node = rep(count, stride * ext, node)
        return shift(node, start * ext)
    if comb == COMBINER_DARRAY:
        per_dim, strides = darray_runs(kw["size"], kw["rank"], kw["gsizes"], kw["distribs"], kw["dargs"],
                                       kw["psizes"], kw["order"])
        node = x
        for d in reversed(range(len(per_dim))):
            step = strides[d] * ext
            node = seq(shift(rep(n, step, node), s * step) for s, n in per_dim[d])
        return node
    raise AssertionError(f"flatten: unknown combiner {comb}")


def subarray_dims(sizes, subsizes, starts, order) -> tuple[int, list]:
    """Subarray geometry in element units: ``(first element, [(count, stride), ...])``, outermost first."""
    n = len(sizes)
    idx = range(n) if order == ORDER_C else range(n - 1, -1, -1)
    strides = [0] * n
    acc = 1
    for d in reversed(list(idx)):
        strides[d] = acc
        acc *= sizes[d]
    start = sum(s * st for s, st in zip(starts, strides))
    return start, [(subsizes[d], strides[d]) for d in idx]


def _owned_runs(distrib: int, darg: int, gsize: int, psize: int, coord: int) -> list:
    """Global indices one process owns in one dimension, as ascending ``(start, length)`` runs."""
    if distrib == DISTRIBUTE_BLOCK:
        blk = -(-gsize // psize) if darg == DISTRIBUTE_DFLT_DARG else darg
        lo = coord * blk
        n = max(0, min(blk, gsize - lo))
        return [(lo, n)] if n else []
    if distrib == DISTRIBUTE_CYCLIC:
        k = 1 if darg == DISTRIBUTE_DFLT_DARG else darg
        out = []
        lo = coord * k
        while lo < gsize:
            out.append((lo, min(k, gsize - lo)))
            lo += k * psize
        return out
    return [(0, gsize)] if gsize else []  # DISTRIBUTE_NONE


def darray_runs(size, rank, gsizes, distribs, dargs, psizes, order) -> tuple[list, list]:
    """Per dimension (outermost first in memory order) the owned runs, and element strides.

    Process coordinates are row-major in the process grid whatever the array order
    (MPI-4 section 5.1.13); dimension lists come back in packing order: ``[dim 0, ...,
    dim n-1]`` for ``ORDER_C`` and ``[dim n-1, ..., dim 0]`` for ``ORDER_F``.
    """
    n = len(gsizes)
    coords = [0] * n
    r = rank
    for d in range(n - 1, -1, -1):
        coords[d] = r % psizes[d]
        r //= psizes[d]
    runs_d = [_owned_runs(distribs[d], dargs[d], gsizes[d], psizes[d], coords[d]) for d in range(n)]
    start, dims = subarray_dims(gsizes, gsizes, [0] * n, order)
    del start
    order_idx = list(range(n)) if order == ORDER_C else list(range(n - 1, -1, -1))
    return [runs_d[d] for d in order_idx], [st for _, st in dims]


# -- reading the tree ---------------------------------------------------------------------------


def pure_grid(node):
    """``(start, blocklen, counts, strides)`` when ``node`` is repeats over one block, else None."""
    if node is None:
        return None
    off, sh = node
    counts, strides = [], []
    while sh[0] == "R":
        counts.append(sh[1])
        strides.append(sh[2])
        sh = sh[3]
    if sh[0] != "B":
        return None
    return off, sh[1], tuple(counts), tuple(strides)


def _touching(blocklen: int, counts, strides) -> bool:
    """Whether two consecutive blocks of the grid touch across a row (so the list merges them)."""
    k = len(counts)
    for j in range(k - 1):
        tail = sum((counts[i] - 1) * strides[i] for i in range(j + 1, k))
        if strides[j] == tail + blocklen:
            return True
    return False


def _form(node):
    if node is None:
        return Contiguous(0, 0)
    off, sh = node
    if sh[0] == "B":
        return Contiguous(off, sh[1])
    grid = pure_grid(node)
    if grid is not None:
        start, b, counts, strides = grid
        if _touching(b, counts, strides):
            return classify_runs(*runs(node))
        if len(counts) <= 3:
            return Strided(start, b, counts, strides)
    return Blocks(node=node)


def canonical(datatype, count: int = 1):
    """The canonical form of ``count`` elements of ``datatype`` (element ``i`` at ``i * extent``)."""
    datatype._check("canonical")
    if count < 0:
        raise ValueError(f"canonical: negative count ({count})")
    key = ("form", count)
    c = _cache(datatype)
    f = c.get(key)
    if f is None:
        f = _form(rep(count, datatype._extent, tree(datatype)))
        if len(c) < 64:
            c[key] = f
    return f


def _expand(sh, memo: dict):
    key = id(sh)
    hit = memo.get(key)
    if hit is not None:
        return hit
    kind = sh[0]
    if kind == "B":
        out = ([0], [sh[1]])
    elif kind == "R":
        c, s = sh[1], sh[2]
        io, il = _expand(sh[3], memo)
        out = ([i * s + o for i in range(c) for o in io], il * c)
    else:
        offs, lens = [], []
        for d, child in sh[1]:
            co, cl = _expand(child, memo)
            offs.extend(d + o for o in co)
            lens.extend(cl)
        out = (offs, lens)
    memo[key] = out
    return out


def runs(node) -> tuple[list, list]:
    """The merged byte runs ``(offsets, lengths)`` of a tree, in typemap order."""
    if node is None:
        return [], []
    off, sh = node
    offs, lens = _expand(sh, {})
    mo: list = []
    ml: list = []
    for o, n in zip(offs, lens):
        o += off
        if mo and mo[-1] + ml[-1] == o:
            ml[-1] += n
        else:
            mo.append(o)
            ml.append(n)
    return mo, ml


def classify_runs(offsets, lengths):
    """The canonical form of an explicit list of byte runs (merged first; empty runs dropped)."""
    mo: list = []
    ml: list = []
    for o, n in zip(offsets, lengths):
        if n <= 0:
            continue
        if mo and mo[-1] + ml[-1] == o:
            ml[-1] += n
        else:
            mo.append(o)
            ml.append(n)
    nb = len(mo)
    if nb == 0:
        return Contiguous(0, 0)
    if nb == 1:
        return Contiguous(mo[0], ml[0])
    b = ml[0]
    if any(n != b for n in ml):
        return Blocks(mo, ml)
    grid = _grid(mo)
    if grid is None:
        return Blocks(mo, ml)
    counts, strides = grid
    return Strided(mo[0], b, counts, strides)


def _grid(offs: list):
    """Greedy regular-grid decomposition (at most three dimensions) of block offsets, or None.

    The innermost run is the longest arithmetic prefix; rows and planes are the longest
    runs of shifted copies of the first row and plane at one stride each.
    """
    n = len(offs)
    rel = [o - offs[0] for o in offs]
    s1 = rel[1]
    c1 = 2
    while c1 < n and rel[c1] - rel[c1 - 1] == s1:
        c1 += 1
    if c1 == n:
        return (n,), (s1,)

    def same(first: int, length: int) -> bool:
        if first + length > n:
            return False
        base = rel[first]
        return all(rel[first + i] - base == rel[i] for i in range(length))

    if not same(c1, c1):
        return None
    s2 = rel[c1]
    c2 = 2
    while (c2 + 1) * c1 <= n and rel[c2 * c1] - rel[(c2 - 1) * c1] == s2 and same(c2 * c1, c1):
        c2 += 1
    plane = c1 * c2
    if plane == n:
        return (c2, c1), (s2, s1)
    if n % plane or not same(plane, plane):
        return None
    s3 = rel[plane]
    c3 = n // plane
    for k in range(2, c3):
        if rel[k * plane] - rel[(k - 1) * plane] != s3 or not same(k * plane, plane):
            return None
    return (c3, c2, c1), (s3, s2, s1)


def segments(datatype) -> tuple:
    """Merged byte runs ``((offset, length), ...)`` of one element, in typemap order."""
    c = _cache(datatype)
    s = c.get("segments")
    if s is None:
        offs, lens = runs(tree(datatype))
        s = c["segments"] = tuple(zip(offs, lens))
    return s


# -- type signatures ----------------------------------------------------------------------------


def _extend(out: list, sig) -> None:
    for b, n in sig:
        if out and out[-1][0] is b:
            out[-1] = (b, out[-1][1] + n)
        else:
            out.append((b, n))


def _repeat(sig: list, n: int) -> list:
    if n <= 0 or not sig:
        return []
    if len(sig) == 1:
        return [(sig[0][0], sig[0][1] * n)]
    out: list = []
    for _ in range(n):
        _extend(out, sig)
    return out


def signature(datatype) -> list:
    """Run-length type signature of one element: ``[(basic, n), ...]``; pair types split in two."""
    c = _cache(datatype)
    s = c.get("sig")
    if s is None:
        s = c["sig"] = _sig(datatype)
    return s


def _sig(dt) -> list:
    comb = dt._combiner
    if comb in _NAMED_LIKE:
        parts = dt._pair
        if parts is not None:
            return [(parts[0], 1), (parts[1], 1)]
        return [(dt, 1)] if dt._size else []
    if comb in F90_TYPES:
        return signature(dt._base)
    if comb in (COMBINER_DUP, COMBINER_RESIZED):
        return signature(dt._base)
    kw = dt._kw
    if comb == COMBINER_STRUCT:
        out: list = []
        for bl, t in zip(kw["blocklengths"], kw["datatypes"]):
            _extend(out, _repeat(signature(t), bl))
        return out
    return _repeat(signature(dt._base), dt._nelem)


def _code_of(typestr: str) -> int:
    """A 16-bit code (1..65521) of a basic representation, the same in every process."""
    h = 0
    for ch in typestr:
        h = (h * 131 + ord(ch)) % 65521
    return h + 1


_SIG_NAMES: dict = {}


def sigcode(datatype) -> int:
    """Code of the one basic representation (``typestr``) every entry of the type has; 0 for
    none, for mixed types and for 1-byte types (bytes match anything).

    Point-to-point sends carry it so a receive of a different representation (``f8`` sent,
    ``i4`` received) fails with ``ERR_TYPE`` instead of reinterpreting bytes.  Types of the
    same representation (``INT`` and ``INT32_T``, a vector of ``DOUBLE`` and ``DOUBLE``)
    match, as their signatures do on every platform gpumpi runs on.
    """
    c = _cache(datatype)
    code = c.get("sigcode")
    if code is None:
        sig = signature(datatype)
        code = 0
        if sig and all(b._str == sig[0][0]._str for b, _ in sig):
            b = sig[0][0]
            if b._size > 1 and b._str:
                code = _code_of(b._str)
                _SIG_NAMES[code] = b._str
        c["sigcode"] = code
    return code


_SIG_SCANNED: list = []


def sig_name(code: int) -> str:
    """The ``typestr`` behind a signature code (as seen by this process)."""
    name = _SIG_NAMES.get(code)
    if name is None and not _SIG_SCANNED:  # a peer's code: learn every predefined type's, once
        _SIG_SCANNED.append(True)
        from .predefined import PREDEFINED_NAMES, lookup_name

        for pname in PREDEFINED_NAMES:
            try:
                dt = lookup_name(pname)
                c = sigcode(dt)
            except Exception:  # names without a type on this platform
                continue
            if c and c not in _SIG_NAMES:  # a code cached before: record its name here too
                _SIG_NAMES[c] = signature(dt)[0][0]._str
        name = _SIG_NAMES.get(code)
    return name or f"code {code}"


def elements_in(datatype, nbytes: int) -> int:
    """Basic elements in ``nbytes`` packed bytes of ``datatype`` (MPI_Get_elements).

    ``UNDEFINED`` when the bytes end inside a basic element, as MPICH; a zero-size
    type accounts for 0 bytes only.
    """
    size = datatype._size
    if size == 0:
        return 0 if nbytes == 0 else UNDEFINED
    sig = signature(datatype)
    c = _cache(datatype)
    per = c.get("nsig")
    if per is None:
        per = c["nsig"] = sum(n for _, n in sig)
    full, rem = divmod(nbytes, size)
    count = full * per
    for b, n in sig:
        if not rem:
            break
        bs = b._size
        k = min(n, rem // bs)
        count += k
        rem -= k * bs
        if k < n:
            break
    return count if rem == 0 else UNDEFINED


def elements_bytes(datatype, count: int) -> int:
    """Packed bytes of the first ``count`` basic elements of a stream of ``datatype``
    (MPI_Status_set_elements); ``ValueError`` when the type has no elements and ``count > 0``."""
    if count == 0:
        return 0
    sig = signature(datatype)
    c = _cache(datatype)
    per = c.get("nsig")
    if per is None:
        per = c["nsig"] = sum(n for _, n in sig)
    if not per:
        raise ValueError(f"elements_bytes: datatype has no elements (count {count})")
    full, rem = divmod(count, per)
    nbytes = full * datatype._size
    for b, n in sig:
        if not rem:
            break
        k = min(n, rem)
        nbytes += k * b._size
        rem -= k
    return nbytes


# -- the naive reference walk (tests only) ------------------------------------------------------


def typemap(datatype) -> list:
    """The type map ``[(offset, basic), ...]`` of one element, by direct interpretation.

    Independent of the tree code above: each constructor is expanded literally from
    its MPI definition, one entry per basic element (pair types as two entries).
    Meant for tests: its cost is the number of basic elements.
    """
    dt = datatype
    comb = dt._combiner
    if comb in _NAMED_LIKE:
        parts = dt._pair
        if parts is not None:
            value, index = parts
            return [(0, value), (dt._segs[-1][0] + dt._segs[-1][1] - index._size, index)]
        return [(0, dt)] if dt._size else []
    if comb in F90_TYPES:
        return [(0, dt._base)]
    if comb in (COMBINER_DUP, COMBINER_RESIZED):
        return typemap(dt._base)
    kw = dt._kw
    if comb == COMBINER_STRUCT:
        out = []
        for bl, d, t in zip(kw["blocklengths"], kw["displacements"], kw["datatypes"]):
            tm, ext = typemap(t), t._extent
            out += [(d + j * ext + o, b) for j in range(bl) for o, b in tm]
        return out
    base = dt._base
    tm, ext = typemap(base), base._extent
    if comb == COMBINER_CONTIGUOUS:
        return [(i * ext + o, b) for i in range(kw["count"]) for o, b in tm]
    if comb in (COMBINER_VECTOR, COMBINER_HVECTOR):
        stride = kw["stride"] * (ext if comb == COMBINER_VECTOR else 1)
        return [(i * stride + j * ext + o, b)
                for i in range(kw["count"]) for j in range(kw["blocklength"]) for o, b in tm]
    if comb in (COMBINER_INDEXED, COMBINER_HINDEXED, COMBINER_INDEXED_BLOCK, COMBINER_HINDEXED_BLOCK):
        unit = ext if comb in (COMBINER_INDEXED, COMBINER_INDEXED_BLOCK) else 1
        disps = kw["displacements"]
        bls = kw["blocklengths"] if "blocklengths" in kw else [kw["blocklength"]] * len(disps)
        return [(d * unit + j * ext + o, b) for bl, d in zip(bls, disps) for j in range(bl) for o, b in tm]
    if comb == COMBINER_SUBARRAY:
        sizes, order = kw["sizes"], kw["order"]
        ranges = [range(s, s + n) for s, n in zip(kw["starts"], kw["subsizes"])]
        return _array_walk(sizes, ranges, order, tm, ext)
    if comb == COMBINER_DARRAY:
        gsizes, psizes, order = kw["gsizes"], kw["psizes"], kw["order"]
        coords, r = [], kw["rank"]
        for p in reversed(psizes):
            coords.append(r % p)
            r //= p
        coords.reverse()
        owned = []
        for d, g in enumerate(gsizes):
            dist, darg, p = kw["distribs"][d], kw["dargs"][d], psizes[d]
            if dist == DISTRIBUTE_BLOCK:
                blk = -(-g // p) if darg == DISTRIBUTE_DFLT_DARG else darg
                owned.append([i for i in range(g) if i // blk == coords[d]])
            elif dist == DISTRIBUTE_CYCLIC:
                k = 1 if darg == DISTRIBUTE_DFLT_DARG else darg
                owned.append([i for i in range(g) if (i // k) % p == coords[d]])
            else:
                owned.append(list(range(g)))
        return _array_walk(gsizes, owned, order, tm, ext)
    raise AssertionError(f"typemap: unknown combiner {comb}")


def _array_walk(sizes, index_lists, order, tm, ext) -> list:
    n = len(sizes)
    dims = list(range(n)) if order == ORDER_C else list(range(n - 1, -1, -1))
    out = []
    for combo in itertools.product(*(index_lists[d] for d in dims)):
        idx = [0] * n
        for d, i in zip(dims, combo):
            idx[d] = i
        if order == ORDER_C:
            lin = 0
            for d in range(n):
                lin = lin * sizes[d] + idx[d]
        else:
            lin = 0
            for d in range(n - 1, -1, -1):
                lin = lin * sizes[d] + idx[d]
        out += [(lin * ext + o, b) for o, b in tm]
    return out


def typemap_bytes(datatype, count: int = 1) -> list:
    """Byte offsets touched by ``count`` elements, one per packed byte, in packing order."""
    tm, ext = typemap(datatype), datatype._extent
    return [i * ext + o + k for i in range(count) for o, b in tm for k in range(b._size)]
