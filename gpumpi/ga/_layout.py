"""Global Arrays distribution math: which process owns which block of an array (L1, pure).

Theory of operation
===================
Conventions (ga4py's, kept here): C / NumPy order, 0-based indices and half-open
*patches*.  A patch is ``lo, hi`` (tuples of ints, one per dimension) and covers the
elements ``i`` with ``lo[d] <= i[d] < hi[d]``; it is empty when some ``hi[d] == lo[d]``.
GA's C and Fortran calls take inclusive ``hi`` (and Fortran 1-based indices); the
callers of this module translate at the edge, nothing here does.

A :class:`Layout` is the distribution of one array of ``dims`` (1 to :data:`MAX_DIM`
dimensions, every extent at least 1: GA rejects an extent of 0) over the ``nprocs``
processes of its group:

* a process grid: ``grid[d]`` blocks along dimension ``d``;
* per dimension, the first index of each block, ``starts[d]``: strictly increasing,
  ``starts[d][0] == 0``.  Block ``k`` along ``d`` spans ``[starts[d][k], starts[d][k+1])``,
  the last one up to ``dims[d]``; ``grid[d] == len(starts[d])``.

Every process owns at most one block.  Blocks are numbered row-major over the grid
(the last dimension varies fastest): process ``p < prod(grid)`` owns the block at grid
coordinates ``coords(p)``; processes ``prod(grid) <= p < nprocs`` own nothing (their
``distribution`` is ``lo = hi = (-1,) * ndim``, their ``proc_topology`` ``(-1,) * ndim``).
Finding the owner of an index is a bisection of ``starts[d]`` per dimension.

The regular distribution (:func:`regular`, GA ``NGA_Create``)
--------------------------------------------------------------
``chunk[d]`` is the *minimum* block extent along ``d``; ``chunk=None`` or an entry
``<= 0`` means no minimum.  Along ``d`` at most ``maxblk[d]`` blocks are made:
``max(1, dims[d] // chunk[d])`` with a minimum, ``dims[d]`` without one.  The grid
``p`` (one factor per dimension, ``1 <= p[d] <= maxblk[d]``, ``prod(p) <= nprocs``)
is the one that minimizes, in this order:

1. the largest block volume, ``prod(ceil(dims[d] / p[d]))``: the work of the most
   loaded process;
2. the sum of the block extents ``ceil(dims[d] / p[d])``: squarer blocks, less surface
   to exchange with neighbours;
3. then the larger factors go on the earlier (slower) dimensions: the lexicographically
   largest ``p``.

Then, GA's rule, every block along ``d`` is ``b = ceil(dims[d] / p[d])`` long but the
last, which holds what is left: ``starts[d] = (0, b, 2b, ...)`` below ``dims[d]``.  When
the division is uneven there may be fewer than ``p[d]`` blocks (``dims = 10`` over 4:
``b = 3``, blocks 3, 3, 3, 1; ``dims = 5`` over 8: five blocks of 1).  A block other
than the last is ``b >= dims[d] / p[d] >= chunk[d]`` long.

The search is a dynamic program over the dimensions.  The objective is separable:
with ``p[0]`` (so ``b0``) chosen, ``(b0 * V, b0 + S, p[0], rest)`` is ordered like the
rest's own ``(V, S, rest)``, so the best grid of dimensions ``d..`` under a product
budget ``r`` is the best over ``p[d]`` of ``p[d]`` followed by the best grid of
dimensions ``d+1..`` under ``r // p[d]``.  The budgets met are values ``nprocs // k``
(about ``2 * sqrt(nprocs)`` of them), and ``p[d]`` is taken in runs over which both
``ceil(dims[d] / p[d])`` and ``r // p[d]`` stay fixed (``O(sqrt)`` runs), of which only the
largest ``p[d]`` can win (rule 3).  Results are cached (``functools.lru_cache``) on
``(dims, nprocs, chunk)``.

The irregular distribution (:func:`irregular`, GA ``NGA_Create_irreg``)
--------------------------------------------------------------------------
The caller gives ``block[d]`` (blocks along ``d``) and ``map``, the concatenation over
the dimensions of the first index of each block, exactly ga4py's ``create_irreg``.

Patches (``check_patch``, ``periodic_pieces``, ``strided_shape``)
-------------------------------------------------------------------
:func:`check_patch` normalises a user patch (``None`` is the whole extent) and rejects
anything out of bounds.  GA's periodic operations (``NGA_Periodic_get``) take a patch
that may lie up to one array length outside the array on either side and wrap modulo
``dims``: :func:`periodic_pieces` cuts it into ordinary in-bounds patches (at most two
per dimension, so at most ``2 ** ndim``), each with its offset inside the requested
patch.  Strided patches (``NGA_Strided_get``) take ``lo[d], lo[d] + skip[d], ... < hi[d]``.

Errors are ``ValueError`` (``TypeError`` for a value that is not an integer) with a
message ``"<call>: <problem> (<values>)"``, ``call`` being the GA-level operation.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

#: most dimensions a global array may have (GA's ``GA_MAX_DIM``)
MAX_DIM = 7


# --- argument checking ---------------------------------------------------------------------


def _int(call: str, what: str, x: Any) -> int:
    """``x`` as an ``int``: an ``int`` or any object with ``__index__`` (NumPy integers)."""
    if isinstance(x, int):
        return int(x)
    index = getattr(type(x), "__index__", None)
    if index is None:
        raise TypeError(f"{call}: {what} must be integers ({what} has {x!r} of type {type(x).__name__})")
    return int(index(x))


def _ints(call: str, what: str, xs: Any) -> tuple:
    """``xs`` (a sequence of integers) as a tuple of ``int``."""
    if isinstance(xs, (str, bytes)):
        raise TypeError(f"{call}: {what} must be a sequence of integers ({what} {xs!r})")
    try:
        items = list(xs)
    except TypeError:
        raise TypeError(f"{call}: {what} must be a sequence of integers ({what} {xs!r})") from None
    return tuple(_int(call, what, x) for x in items)


def _check_dims(call: str, dims: Any) -> tuple:
    dims = _ints(call, "dims", dims)
    if not 1 <= len(dims) <= MAX_DIM:
        raise ValueError(f"{call}: an array has 1 to {MAX_DIM} dimensions (dims {list(dims)}, {len(dims)} dimensions)")
    for d, n in enumerate(dims):
        if n < 1:
            raise ValueError(f"{call}: every extent must be at least 1 (dims {list(dims)}, extent {n} along dimension {d})")
    return dims


def _check_nprocs(call: str, nprocs: Any) -> int:
    nprocs = _int(call, "nprocs", nprocs)
    if nprocs < 1:
        raise ValueError(f"{call}: nprocs must be at least 1 (nprocs {nprocs})")
    return nprocs


def _check_len(call: str, what: str, xs: tuple, ndim: int) -> None:
    if len(xs) != ndim:
        raise ValueError(f"{call}: {what} must have one entry per dimension ({what} {list(xs)}, {ndim} dimensions)")


# --- the layout ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The distribution of one global array over the processes of its group.

    ``dims``: global extents; ``nprocs``: processes in the group; ``grid``: blocks along each
    dimension; ``starts``: per dimension, the first index of each block.  Build one with
    :func:`regular` or :func:`irregular` (or directly: the structure is checked).
    """

    dims: tuple
    nprocs: int
    grid: tuple
    starts: tuple
    #: per dimension, the block boundaries: ``starts[d] + (dims[d],)``
    _bounds: tuple = field(init=False, repr=False, compare=False)
    #: row-major strides of the grid, in blocks
    _gstrides: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        call = "Layout"
        dims = _check_dims(call, self.dims)
        nprocs = _check_nprocs(call, self.nprocs)
        grid = _ints(call, "grid", self.grid)
        _check_len(call, "grid", grid, len(dims))
        starts = tuple(_ints(call, "starts", s) for s in self.starts)
        _check_len(call, "starts", starts, len(dims))
        for d, (n, g, s) in enumerate(zip(dims, grid, starts)):
            if len(s) != g or g < 1:
                raise ValueError(f"{call}: grid[{d}] must be the number of starts along it (grid {list(grid)}, starts {list(s)})")
            if s[0] != 0 or any(b <= a for a, b in zip(s, s[1:])) or s[-1] >= n:
                raise ValueError(f"{call}: starts along dimension {d} must rise strictly from 0 below the extent "
                                 f"(starts {list(s)}, extent {n})")
        if math.prod(grid) > nprocs:
            raise ValueError(f"{call}: more blocks than processes (grid {list(grid)}, nprocs {nprocs})")
        gstrides = []
        acc = 1
        for g in reversed(grid):
            gstrides.append(acc)
            acc *= g
        for name, value in (("dims", dims), ("nprocs", nprocs), ("grid", grid), ("starts", starts),
                            ("_bounds", tuple(s + (n,) for s, n in zip(starts, dims))),
                            ("_gstrides", tuple(reversed(gstrides)))):
            object.__setattr__(self, name, value)

    @property
    def ndim(self) -> int:
        """Number of dimensions (GA: NGA_Ndim)."""
        return len(self.dims)

    @property
    def nblocks(self) -> int:
        """Number of blocks, ``prod(grid)``: the processes ``0 .. nblocks - 1`` own one each."""
        return math.prod(self.grid)

    def _check_proc(self, call: str, proc: Any) -> int:
        proc = _int(call, "proc", proc)
        if not 0 <= proc < self.nprocs:
            raise ValueError(f"{call}: no such process (proc {proc}, nprocs {self.nprocs})")
        return proc

    def coords(self, proc: int) -> tuple | None:
        """Grid coordinates of the block ``proc`` owns, ``None`` if it owns none
        (GA: NGA_Proc_topology, which gives -1s instead: see :meth:`proc_topology`)."""
        return self._coords("proc_topology", proc)

    def _coords(self, call: str, proc: Any) -> tuple | None:
        proc = self._check_proc(call, proc)
        if proc >= self.nblocks:
            return None
        return tuple((proc // s) % g for s, g in zip(self._gstrides, self.grid))

    def proc_topology(self, proc: int) -> tuple:
        """Grid coordinates of ``proc``'s block, ``(-1,) * ndim`` if it owns none (GA: NGA_Proc_topology)."""
        c = self.coords(proc)
        return (-1,) * self.ndim if c is None else c

    def _check_coords(self, call: str, coords: Any) -> tuple:
        coords = _ints(call, "coords", coords)
        _check_len(call, "coords", coords, self.ndim)
        for c, g in zip(coords, self.grid):
            if not 0 <= c < g:
                raise ValueError(f"{call}: coordinates outside the process grid (coords {list(coords)}, grid {list(self.grid)})")
        return coords

    def proc_of(self, coords: Any) -> int:
        """The process owning the block at grid coordinates ``coords``."""
        coords = self._check_coords("proc_of", coords)
        return sum(c * s for c, s in zip(coords, self._gstrides))

    def block(self, coords: Any) -> tuple:
        """``(lo, hi)`` of the block at grid coordinates ``coords``."""
        coords = self._check_coords("block", coords)
        return (tuple(b[c] for b, c in zip(self._bounds, coords)),
                tuple(b[c + 1] for b, c in zip(self._bounds, coords)))

    def distribution(self, proc: int) -> tuple:
        """``(lo, hi)`` of the block ``proc`` owns, half-open; ``lo = hi = (-1,) * ndim`` if it owns
        none (GA: NGA_Distribution; ga4py's ``distribution``)."""
        c = self._coords("distribution", proc)
        if c is None:
            return (-1,) * self.ndim, (-1,) * self.ndim
        return (tuple(b[k] for b, k in zip(self._bounds, c)), tuple(b[k + 1] for b, k in zip(self._bounds, c)))

    def owns(self, proc: int) -> bool:
        """Whether ``proc`` owns a block."""
        return self._coords("owns", proc) is not None

    def local_shape(self, proc: int) -> tuple:
        """Extents of ``proc``'s block, ``(0,) * ndim`` if it owns none."""
        c = self._coords("local_shape", proc)
        if c is None:
            return (0,) * self.ndim
        return tuple(b[k + 1] - b[k] for b, k in zip(self._bounds, c))

    def locate(self, subscript: Any) -> int:
        """The process owning element ``subscript``, -1 if it lies outside the array (GA: NGA_Locate)."""
        subscript = _ints("locate", "subscript", subscript)
        _check_len("locate", "subscript", subscript, self.ndim)
        proc = 0
        for i, n, b, s in zip(subscript, self.dims, self._bounds, self._gstrides):
            if not 0 <= i < n:
                return -1
            proc += (bisect.bisect_right(b, i) - 1) * s
        return proc

    def locate_region(self, lo: Any, hi: Any) -> list:
        """The pieces of the patch ``[lo, hi)``: ``[(proc, plo, phi), ...]``, one per owner touched,
        in row-major order of the blocks; ``[]`` for an empty patch (some ``hi[d] <= lo[d]``).
        A patch reaching outside the array (``lo[d] < 0`` or ``hi[d] > dims[d]``) is an error
        (GA: NGA_Locate_region)."""
        call = "locate_region"
        lo = _ints(call, "lo", lo)
        hi = _ints(call, "hi", hi)
        _check_len(call, "lo", lo, self.ndim)
        _check_len(call, "hi", hi, self.ndim)
        for d, (l, h, n) in enumerate(zip(lo, hi, self.dims)):
            if not (0 <= l <= n and 0 <= h <= n):
                raise ValueError(f"{call}: patch outside the array (lo {list(lo)}, hi {list(hi)}, dims {list(self.dims)})")
        if any(h <= l for l, h in zip(lo, hi)):
            return []
        ranges = []  # per dimension: (block index, piece lo, piece hi) for each block touched
        for l, h, b in zip(lo, hi, self._bounds):
            k0 = bisect.bisect_right(b, l) - 1
            k1 = bisect.bisect_right(b, h - 1) - 1
            ranges.append([(k, max(l, b[k]), min(h, b[k + 1])) for k in range(k0, k1 + 1)])
        out = []
        for combo in itertools.product(*ranges):
            proc = sum(k * s for (k, _, _), s in zip(combo, self._gstrides))
            out.append((proc, tuple(c[1] for c in combo), tuple(c[2] for c in combo)))
        return out


# --- the regular distribution ----------------------------------------------------------------


def _best_grid(dims: tuple, nprocs: int, maxblk: tuple) -> tuple:
    """The grid ``p`` of the regular distribution (module docstring): lexicographic minimum of
    ``(prod(b), sum(b), -p)`` with ``b[d] = ceil(dims[d] / p[d])``, over ``1 <= p[d] <= maxblk[d]``,
    ``prod(p) <= nprocs``."""
    ndim = len(dims)

    @functools.lru_cache(maxsize=None)
    def best(d: int, r: int) -> tuple:
        # (volume, surface, negated p as a tuple) of the best grid of dimensions d.. within budget r
        if d == ndim:
            return (1, 0, ())
        n = dims[d]
        limit = min(maxblk[d], r)
        top = None
        p = 1
        while p <= limit:
            b = -(-n // p)
            q = r // p
            # the largest p' with the same ceil(n / p') and the same r // p': only it can win (rule 3)
            end = min(limit, r // q, (n - 1) // (b - 1) if b > 1 else limit)
            v, s, negp = best(d + 1, r // end)
            cand = (b * v, b + s, (-end,) + negp)
            if top is None or cand < top:
                top = cand
            p = end + 1
        return top

    return tuple(-x for x in best(0, nprocs)[2])


@functools.lru_cache(maxsize=256)
def _regular(dims: tuple, nprocs: int, chunk: tuple) -> Layout:
    maxblk = tuple(max(1, n // c) if c > 0 else n for n, c in zip(dims, chunk))
    p = _best_grid(dims, nprocs, maxblk)
    starts = tuple(tuple(range(0, n, -(-n // k))) for n, k in zip(dims, p))
    return Layout(dims, nprocs, tuple(len(s) for s in starts), starts)


def regular(dims: Any, nprocs: int, chunk: Any = None) -> Layout:
    """The regular distribution of an array of ``dims`` over ``nprocs`` processes, with blocks at
    least ``chunk[d]`` long along ``d`` (``None`` or an entry ``<= 0``: no minimum); the grid
    rule is in the module docstring (GA: NGA_Create, ga4py ``create(gtype, dims, chunk=...)``)."""
    call = "create"
    dims = _check_dims(call, dims)
    nprocs = _check_nprocs(call, nprocs)
    if chunk is None:
        chunk = (0,) * len(dims)
    else:
        chunk = _ints(call, "chunk", chunk)
        _check_len(call, "chunk", chunk, len(dims))
        chunk = tuple(max(0, c) for c in chunk)
    return _regular(dims, nprocs, chunk)


def irregular(dims: Any, nprocs: int, block: Any, map: Any) -> Layout:  # noqa: A002 (ga4py's name)
    """The distribution with ``block[d]`` blocks along ``d`` starting at the indices in ``map``
    (per dimension in turn, ``sum(block)`` entries) (GA: NGA_Create_irreg, ga4py
    ``create_irreg(gtype, dims, block, map)``)."""
    call = "create_irreg"
    dims = _check_dims(call, dims)
    nprocs = _check_nprocs(call, nprocs)
    block = _ints(call, "block", block)
    _check_len(call, "block", block, len(dims))
    for d, (k, n) in enumerate(zip(block, dims)):
        if not 1 <= k <= n:
            raise ValueError(f"{call}: blocks along a dimension must be from 1 to its extent "
                             f"(block {list(block)}, dims {list(dims)}, dimension {d})")
    mp = _ints(call, "map", map)
    if len(mp) != sum(block):
        raise ValueError(f"{call}: map must have sum(block) entries (map {list(mp)}, block {list(block)})")
    if math.prod(block) > nprocs:
        raise ValueError(f"{call}: more blocks than processes (block {list(block)}, nprocs {nprocs})")
    starts = []
    at = 0
    for d, (k, n) in enumerate(zip(block, dims)):
        s = mp[at:at + k]
        at += k
        if s[0] != 0:
            raise ValueError(f"{call}: the first block along a dimension must start at 0 "
                             f"(map {list(mp)}, starts {list(s)} along dimension {d})")
        if any(b <= a for a, b in zip(s, s[1:])) or s[-1] >= n:
            raise ValueError(f"{call}: block starts must rise strictly below the extent "
                             f"(map {list(mp)}, starts {list(s)} along dimension {d}, extent {n})")
        starts.append(s)
    return Layout(dims, nprocs, block, tuple(starts))


# --- patches ---------------------------------------------------------------------------------


def check_patch(call: str, dims: Any, lo: Any, hi: Any) -> tuple:
    """``(lo, hi)`` as tuples of ``int``, ``lo=None`` meaning all zeros and ``hi=None`` the extents;
    ``ValueError`` naming ``call`` unless ``0 <= lo[d] <= hi[d] <= dims[d]``."""
    dims = tuple(dims)
    ndim = len(dims)
    lo = (0,) * ndim if lo is None else _ints(call, "lo", lo)
    hi = dims if hi is None else _ints(call, "hi", hi)
    _check_len(call, "lo", lo, ndim)
    _check_len(call, "hi", hi, ndim)
    for d, (l, h, n) in enumerate(zip(lo, hi, dims)):
        if l < 0 or h > n:
            raise ValueError(f"{call}: patch outside the array (lo {list(lo)}, hi {list(hi)}, dims {list(dims)})")
        if h < l:
            raise ValueError(f"{call}: hi below lo along dimension {d} (lo {list(lo)}, hi {list(hi)})")
    return lo, hi


def periodic_pieces(dims: Any, lo: Any, hi: Any) -> list:
    """The in-bounds pieces of a patch that wraps around the array: ``[(plo, phi, boff), ...]``,
    at most ``2 ** ndim``, covering the patch once; element ``i`` of a piece is element
    ``boff + (i - plo)`` of the requested patch.  Along each dimension ``-dims[d] <= lo[d]``,
    ``hi[d] <= 2 * dims[d]`` and ``0 <= hi[d] - lo[d] <= dims[d]``; an empty patch has no pieces
    (GA: NGA_Periodic_get, NGA_Periodic_put, NGA_Periodic_acc)."""
    call = "periodic"
    dims = tuple(dims)
    ndim = len(dims)
    lo = _ints(call, "lo", lo)
    hi = _ints(call, "hi", hi)
    _check_len(call, "lo", lo, ndim)
    _check_len(call, "hi", hi, ndim)
    per_dim = []
    for d, (l, h, n) in enumerate(zip(lo, hi, dims)):
        if l < -n or h > 2 * n:
            raise ValueError(f"{call}: patch more than one array length outside the array "
                             f"(lo {list(lo)}, hi {list(hi)}, dims {list(dims)})")
        if h < l:
            raise ValueError(f"{call}: hi below lo along dimension {d} (lo {list(lo)}, hi {list(hi)})")
        if h - l > n:
            raise ValueError(f"{call}: patch longer than the array along dimension {d} "
                             f"(lo {list(lo)}, hi {list(hi)}, dims {list(dims)})")
        segs = []
        k = l // n
        while k * n < h:  # the images of [l, h) in the periods it crosses: two at most
            s, e = max(l, k * n), min(h, (k + 1) * n)
            segs.append((s - k * n, e - k * n, s - l))
            k += 1
        per_dim.append(segs)
    if any(h == l for l, h in zip(lo, hi)):
        return []
    return [(tuple(c[0] for c in combo), tuple(c[1] for c in combo), tuple(c[2] for c in combo))
            for combo in itertools.product(*per_dim)]


def strided_shape(lo: Any, hi: Any, skip: Any) -> tuple:
    """Elements per dimension of the strided patch ``lo[d], lo[d] + skip[d], ... < hi[d]``
    (GA: NGA_Strided_get)."""
    call = "strided"
    lo = _ints(call, "lo", lo)
    hi = _ints(call, "hi", hi)
    skip = _ints(call, "skip", skip)
    _check_len(call, "hi", hi, len(lo))
    _check_len(call, "skip", skip, len(lo))
    for d, (l, h, s) in enumerate(zip(lo, hi, skip)):
        if s < 1:
            raise ValueError(f"{call}: skip must be at least 1 (skip {list(skip)})")
        if h < l:
            raise ValueError(f"{call}: hi below lo along dimension {d} (lo {list(lo)}, hi {list(hi)})")
    return tuple(-(-(h - l) // s) for l, h, s in zip(lo, hi, skip))


def intersect(alo: Any, ahi: Any, blo: Any, bhi: Any) -> tuple | None:
    """``(lo, hi)`` of the common part of two patches, ``None`` if it is empty."""
    call = "intersect"
    alo, ahi, blo, bhi = (_ints(call, w, x) for w, x in (("alo", alo), ("ahi", ahi), ("blo", blo), ("bhi", bhi)))
    for w, x in (("ahi", ahi), ("blo", blo), ("bhi", bhi)):
        _check_len(call, w, x, len(alo))
    lo = tuple(max(a, b) for a, b in zip(alo, blo))
    hi = tuple(min(a, b) for a, b in zip(ahi, bhi))
    if any(h <= l for l, h in zip(lo, hi)):
        return None
    return lo, hi


def patch_size(lo: Any, hi: Any) -> int:
    """Number of elements in the patch ``[lo, hi)`` (0 when empty)."""
    lo = _ints("patch_size", "lo", lo)
    hi = _ints("patch_size", "hi", hi)
    _check_len("patch_size", "hi", hi, len(lo))
    return math.prod(max(0, h - l) for l, h in zip(lo, hi))
