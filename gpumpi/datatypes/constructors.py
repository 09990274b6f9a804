"""Datatype constructors (L1 pure core): argument checking and the bounds MPICH 5 computes.

Theory of operation
===================
Each ``Datatype.Create_*`` method lands here.  A constructor checks its arguments
the way mpi4py and MPICH do (non-integers: ``TypeError``; list length mismatch:
``ValueError("expecting N items, got M")``; negative counts: ``ERR_COUNT``; null
or freed types: ``ERR_TYPE``; out-of-range subarrays, invalid distributions and
storage orders: ``ERR_ARG``; a darray rank outside the grid: ``ERR_RANK``), then
computes the layout -- ``size``, ``lb``/``extent``, ``true_lb``/``true_extent`` --
with the formulas of MPICH 5 and its type engine (yaksa), so every number reads
as in mpi4py on MPICH:

* a block of ``bl`` copies of a type at displacement ``d`` spans
  ``[lb + d, ub + d + (bl-1)*extent)`` (the ends swap roles when the extent is
  negative); a vector adds ``stride * (count-1)`` on the side the stride's sign
  points to (:func:`_vector_bounds`); true bounds shift with the bounds;
* contiguous, vector, indexed and block-indexed types of a zero-size type or of
  zero count are *zero-length*: every number 0 (``MPII_Type_zerolen``); a zero
  blocklength alone does not make a vector zero-length (its bounds still span the
  strides), indexed/struct entries of zero blocklength are skipped;
* a struct is padded: its extent is rounded up to the largest alignment of its
  entries -- unless all of its entries are the *same type for the engine*, when
  it is built as an hindexed type and left unpadded.  "The same type" is
  ``_yid``: equal for predefined types of one kind and size (``INT`` and
  ``UNSIGNED``, ``LONG`` and ``INT64_T``...), for a type and its ``Dup``, and for
  layouts the engine reduces to their input (``Create_contiguous(1)``, a one-block
  vector or indexed type of blocklength 1 at displacement 0, a resize to the same
  bounds); every other derived type is a new identity;
* subarray and darray types have ``lb = 0`` and ``extent = prod(sizes) *
  extent(oldtype)`` (MPI-4 sections 5.1.3 and 5.1.13: the resized extent), true
  bounds from the elements present (both 0 when none);
* resized types keep size and true bounds; Dup keeps everything and copies
  attributes through their copy callbacks.

Fortran-parameterised types (``Create_f90_*``) are predefined, unnamed, cached
per argument tuple and map to MPICH's sizes; ``Match_size`` returns the named
Fortran type of a size, including ``REAL2``/``INTEGER16``/``COMPLEX4`` that
MPICH has but mpi4py exposes as null.
"""

from __future__ import annotations

import itertools
import operator

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
    COMBINER_VECTOR,
    DISTRIBUTE_BLOCK,
    DISTRIBUTE_CYCLIC,
    DISTRIBUTE_DFLT_DARG,
    DISTRIBUTE_NONE,
    ORDER_C,
    ORDER_F,
    TYPECLASS_COMPLEX,
    TYPECLASS_INTEGER,
    TYPECLASS_LOGICAL,
    TYPECLASS_REAL,
)
from ..errors import ERR_ARG, ERR_COUNT, ERR_OTHER, ERR_RANK, ERR_TYPE, error
from ._core import F90_TYPES, Datatype, next_handle

__all__ = ["dup", "contiguous", "vector", "indexed", "indexed_block", "struct", "subarray", "darray",
           "resized", "f90_integer", "f90_real", "f90_complex", "match_size", "rebuild"]

#: identity shared by every zero-length type (the engine's null type)
_ZEROLEN_YID = ("null",)


# -- argument helpers ---------------------------------------------------------------------------


def _int(value, what: str, call: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{call}: {what} must be an integer (got {type(value).__name__})") from None


def _ints(ob, what: str, call: str) -> list:
    """mpi4py ``getarray``: a sized, indexable sequence of integers."""
    try:
        n = len(ob)
    except TypeError:
        raise TypeError(f"{call}: {what} must be a sequence of integers (got {type(ob).__name__})") from None
    if type(ob) in (list, tuple, range) or (hasattr(ob, "dtype") and hasattr(ob, "tolist")):
        values = _fast_ints(ob.tolist() if hasattr(ob, "tolist") else ob)
        if values is not None:
            return values
    return [_int(ob[i], what, call) for i in range(n)]


def _fast_ints(seq) -> list | None:
    """One C-level pass for the common cases (a million blocks in milliseconds); None when an
    item is not an integer, so that the item-by-item pass names it."""
    try:
        return list(map(operator.index, seq))
    except TypeError:
        return None


def _ints_n(ob, n: int, what: str, call: str) -> list:
    """mpi4py ``chkarray``: like :func:`_ints`, with exactly ``n`` items."""
    values = _ints(ob, what, call)
    if len(values) != n:
        raise ValueError(f"{call}: expecting {n} items, got {len(values)} ({what})")
    return values


def _nonneg(value: int, what: str, call: str) -> int:
    if value < 0:
        raise error(ERR_COUNT, f"{call}: negative {what} ({value})")
    return value


def _snapshot(datatype: Datatype) -> Datatype:
    """A private reference to a component that a later Free of the user's object leaves intact."""
    return datatype if datatype._combiner == COMBINER_NAMED or datatype._combiner in F90_TYPES else Datatype(datatype)


# -- bounds (MPICH's MPII_DATATYPE_*_LB_UB) -------------------------------------------------------


def _vector_bounds(cnt: int, stride: int, bl: int, lb: int, ub: int, ext: int) -> tuple[int, int]:
    span = stride * (cnt - 1)
    grow = ext * (bl - 1)
    if stride >= 0 and ext >= 0:
        return lb, ub + grow + span
    if stride < 0 and ext >= 0:
        return lb + span, ub + grow
    if stride >= 0:
        return lb + grow, ub + span
    return lb + grow + span, ub


def _block_bounds(bl: int, disp: int, lb: int, ub: int, ext: int) -> tuple[int, int]:
    if ext >= 0:
        return lb + disp, ub + disp + (bl - 1) * ext
    return lb + disp + (bl - 1) * ext, ub + disp


# -- engine identity (which types the struct shortcut treats as one) -------------------------------


def _contig_yid(n: int, old: Datatype):
    return old._yid if n == 1 else object()


def _hvector_yid(count: int, bl: int, old: Datatype):
    return _contig_yid(bl, old) if count == 1 else object()


def _hblock_yid(bl: int, disps: list, old: Datatype):
    if disps and disps[0] == 0:
        step = disps[1] - disps[0] if len(disps) > 1 else 0
        if _progression(disps, step):
            return _hvector_yid(len(disps), bl, old)
    return object()


def _progression(values: list, step: int) -> bool:
    """Whether ``values`` is ``values[0] + i * step`` (compared at C speed)."""
    if step:
        return values == list(range(values[0], values[0] + len(values) * step, step))
    return values.count(values[0]) == len(values)


def _hindexed_yid(bls: list, disps: list, old: Datatype):
    if bls and bls.count(bls[0]) == len(bls):
        return _hblock_yid(bls[0], disps, old)
    return object()


# -- making types -------------------------------------------------------------------------------


def _derived(combiner: int, kw: dict, *, base=None, size: int, lb: int, ub: int, true_lb: int, true_ub: int,
             align: int, yid, basic, nbasic: int, nelem: int = 0, count=None) -> Datatype:
    dt = Datatype._make(
        handle=next_handle(), name="", size=size, lb=lb, extent=ub - lb, true_lb=true_lb,
        true_extent=true_ub - true_lb, segs=None, combiner=combiner, base=base, count=count, kw=kw,
        nelem=nelem, align=align, yid=yid, basic=basic, nbasic=nbasic, contig=False,
    )
    dt._contig = _contiguous(dt)
    return dt


def _zerolen(combiner: int, kw: dict, base=None, count=None) -> Datatype:
    return _derived(combiner, kw, base=base, size=0, lb=0, ub=0, true_lb=0, true_ub=0, align=1,
                    yid=_ZEROLEN_YID, basic=None, nbasic=0, count=count)


def _contiguous(dt: Datatype) -> bool:
    """Whether ``count`` elements are the ``count * extent`` bytes from ``lb``, in order."""
    size, ext = dt._size, dt._extent
    if size != ext:
        return False
    if size == 0:
        return True
    from . import flatten

    return flatten.tree(dt) == (dt._lb, ("B", size))


def _single(combiner: int, kw: dict, old: Datatype, nelem: int, lb: int, ub: int, yid, count=None) -> Datatype:
    """A type made of ``nelem`` copies of ``old`` with bounds ``[lb, ub)``."""
    return _derived(combiner, kw, base=_snapshot(old), size=nelem * old._size, lb=lb, ub=ub,
                    true_lb=lb + (old._true_lb - old._lb),
                    true_ub=ub + (old._true_lb + old._true_extent - old._lb - old._extent),
                    align=old._align, yid=yid, basic=old._basic if nelem else None,
                    nbasic=nelem * old._nbasic, nelem=nelem, count=count)


def dup(old: Datatype) -> Datatype:
    """MPI_Type_dup: same layout and commit state, attributes copied by their callbacks."""
    call = "Datatype.Dup"
    old._check("Dup")
    new = Datatype._make(
        handle=next_handle(), name="", size=old._size, lb=old._lb, extent=old._extent,
        true_lb=old._true_lb, true_extent=old._true_extent, segs=None, combiner=COMBINER_DUP,
        base=_snapshot(old), kw={}, char=old._char, typestr=old._str, code=old._code,
        align=old._align, yid=old._yid, basic=old._basic, nbasic=old._nbasic,
        committed=old._rec.committed, contig=old._contig,
    )
    from .attributes import DATATYPE

    try:
        DATATYPE.copy_all(old, new, call)
    except Exception:
        new._rec.attrs.clear()  # a failed copy leaves no attributes (and runs no delete callbacks)
        new.Free()
        raise
    return new


def contiguous(old: Datatype, count) -> Datatype:
    """MPI_Type_contiguous."""
    call = "Datatype.Create_contiguous"
    count = _int(count, "count", call)
    old._check("Create_contiguous")
    _nonneg(count, "count", call)
    kw = {"count": count}
    if count == 0 or old._size == 0:
        return _zerolen(COMBINER_CONTIGUOUS, kw, _snapshot(old), count)
    lb, ub = _vector_bounds(count, old._extent, 1, old._lb, old._lb + old._extent, old._extent)
    return _single(COMBINER_CONTIGUOUS, kw, old, count, lb, ub, _contig_yid(count, old), count)


def vector(old: Datatype, count, blocklength, stride, bytes_stride: bool) -> Datatype:
    """MPI_Type_vector (stride in extents) and MPI_Type_create_hvector (stride in bytes)."""
    call = "Datatype.Create_hvector" if bytes_stride else "Datatype.Create_vector"
    count = _int(count, "count", call)
    blocklength = _int(blocklength, "blocklength", call)
    stride = _int(stride, "stride", call)
    old._check(call.split(".")[1])
    _nonneg(count, "count", call)
    _nonneg(blocklength, "blocklength", call)
    comb = COMBINER_HVECTOR if bytes_stride else COMBINER_VECTOR
    kw = {"count": count, "blocklength": blocklength, "stride": stride}
    if count == 0 or old._size == 0:
        return _zerolen(comb, kw, _snapshot(old))
    step = stride if bytes_stride else stride * old._extent
    lb, ub = _vector_bounds(count, step, blocklength, old._lb, old._lb + old._extent, old._extent)
    return _single(comb, kw, old, count * blocklength, lb, ub, _hvector_yid(count, blocklength, old))


def indexed(old: Datatype, blocklengths, displacements, bytes_disp: bool) -> Datatype:
    """MPI_Type_indexed (displacements in extents) and MPI_Type_create_hindexed (bytes)."""
    call = "Datatype.Create_hindexed" if bytes_disp else "Datatype.Create_indexed"
    bls = _ints(blocklengths, "blocklengths", call)
    disps = _ints_n(displacements, len(bls), "displacements", call)
    old._check(call.split(".")[1])
    if bls and min(bls) < 0:
        _nonneg(min(bls), "blocklength", call)
    comb = COMBINER_HINDEXED if bytes_disp else COMBINER_INDEXED
    kw = {"blocklengths": bls, "displacements": disps}
    nelem = sum(bls)
    if nelem == 0 or old._size == 0:
        return _zerolen(comb, kw, _snapshot(old))
    unit = 1 if bytes_disp else old._extent
    byte_disps = disps if unit == 1 else list(map(operator.mul, disps, itertools.repeat(unit)))
    lb, ub = _blocks_bounds(bls, byte_disps, old)
    return _single(comb, kw, old, nelem, lb, ub, _hindexed_yid(bls, byte_disps, old))


def _blocks_bounds(bls, byte_disps, old: Datatype) -> tuple[int, int]:
    """Bounds of the non-empty blocks ``bls[i]`` at ``byte_disps[i]`` (``_block_bounds`` of each),
    in C-level passes: the block with the lowest/highest reach is ``disp + (bl - 1) * ext``
    extreme on the side the extent points to."""
    olb, oext = old._lb, old._extent
    oub = olb + oext
    if bls.count(bls[0]) == len(bls):  # equal blocks: the extreme displacements decide
        lo, hi = _block_bounds(bls[0], min(byte_disps), olb, oub, oext)
        lo2, hi2 = _block_bounds(bls[0], max(byte_disps), olb, oub, oext)
        return min(lo, lo2), max(hi, hi2)
    if 0 in bls:
        keep = [b != 0 for b in bls]
        bls = list(itertools.compress(bls, keep))
        byte_disps = list(itertools.compress(byte_disps, keep))
    reach = list(map(operator.add, byte_disps, map(operator.mul, bls, itertools.repeat(oext))))  # d + bl*ext
    if oext >= 0:
        return olb + min(byte_disps), oub - oext + max(reach)
    return olb - oext + min(reach), oub + max(byte_disps)


def indexed_block(old: Datatype, blocklength, displacements, bytes_disp: bool) -> Datatype:
    """MPI_Type_create_indexed_block and MPI_Type_create_hindexed_block (bytes)."""
    call = "Datatype.Create_hindexed_block" if bytes_disp else "Datatype.Create_indexed_block"
    blocklength = _int(blocklength, "blocklength", call)
    disps = _ints(displacements, "displacements", call)
    old._check(call.split(".")[1])
    _nonneg(blocklength, "blocklength", call)
    comb = COMBINER_HINDEXED_BLOCK if bytes_disp else COMBINER_INDEXED_BLOCK
    kw = {"blocklength": blocklength, "displacements": disps}
    if not disps or old._size == 0:
        return _zerolen(comb, kw, _snapshot(old))
    unit = 1 if bytes_disp else old._extent
    byte_disps = disps if unit == 1 else list(map(operator.mul, disps, itertools.repeat(unit)))
    olb, oext = old._lb, old._extent
    lo, hi = _block_bounds(blocklength, min(byte_disps), olb, olb + oext, oext)
    lo2, hi2 = _block_bounds(blocklength, max(byte_disps), olb, olb + oext, oext)
    lo, hi = min(lo, lo2), max(hi, hi2)
    return _single(comb, kw, old, len(disps) * blocklength, lo, hi, _hblock_yid(blocklength, byte_disps, old))


def struct(blocklengths, displacements, datatypes) -> Datatype:
    """MPI_Type_create_struct, padded to the largest alignment as MPICH does (see module docs)."""
    call = "Datatype.Create_struct"
    bls = _ints(blocklengths, "blocklengths", call)
    n = len(bls)
    disps = _ints_n(displacements, n, "displacements", call)
    try:
        m = len(datatypes)
    except TypeError:
        raise TypeError(f"{call}: datatypes must be a sequence of Datatype (got {type(datatypes).__name__})") from None
    if m != n:
        raise ValueError(f"{call}: expecting {n} items, got {m} (datatypes)")
    types = []
    for i in range(n):
        t = datatypes[i]
        if not isinstance(t, Datatype):
            raise TypeError(f"{call}: expecting a Datatype (got {type(t).__name__})")
        t._check("Create_struct")
        types.append(_snapshot(t))
    for b in bls:
        _nonneg(b, "blocklength", call)
    kw = {"blocklengths": bls, "displacements": disps, "datatypes": types}
    total = sum(b * t._size for b, t in zip(bls, types))
    if total == 0:
        return _zerolen(COMBINER_STRUCT, kw)
    live = [(b, d, t) for b, d, t in zip(bls, disps, types) if b]
    basics = {(t._basic._handle if t._basic is not None else None): t._basic for b, d, t in live if t._size}
    basic = basics.popitem()[1] if len(basics) == 1 else None
    nbasic = sum(b * t._nbasic for b, d, t in live)
    lo = hi = tlo = thi = None
    for b, d, t in live:
        blo, bhi = _block_bounds(b, d, t._lb, t._lb + t._extent, t._extent)
        tl = blo + (t._true_lb - t._lb)
        th = bhi + (t._true_lb + t._true_extent - t._lb - t._extent)
        if lo is None:
            lo, hi, tlo, thi = blo, bhi, tl, th
        else:
            lo, hi, tlo, thi = min(lo, blo), max(hi, bhi), min(tlo, tl), max(thi, th)
    yid0 = types[0]._yid
    if all(t._yid == yid0 for t in types):  # the engine builds an hindexed type: no padding
        align = types[0]._align
        yid = _hindexed_yid(bls, disps, types[0])
    else:
        align = max(t._align for b, d, t in live) or 1
        pad = (hi - lo) % align
        if pad:
            hi += align - pad
        yid = object()
    return _derived(COMBINER_STRUCT, kw, size=total, lb=lo, ub=hi, true_lb=tlo, true_ub=thi, align=align,
                    yid=yid, basic=basic, nbasic=nbasic)


def _order(order, call: str) -> int:
    order = _int(order, "order", call)
    if order not in (ORDER_C, ORDER_F):
        raise error(ERR_ARG, f"{call}: invalid storage order ({order}; ORDER_C or ORDER_F)")
    return order


def _array_type(comb: int, kw: dict, old: Datatype, sizes: list, nelem: int, lo_idx: int, hi_idx: int) -> Datatype:
    """Subarray/darray layout: lb 0, extent prod(sizes)*extent, true bounds from the elements present."""
    ext = old._extent
    total = 1
    for s in sizes:
        total *= s
    size = nelem * old._size
    if size == 0:
        tlo = thi = 0
    else:
        a, b = lo_idx * ext, hi_idx * ext
        tlo = min(a, b) + old._true_lb
        thi = max(a, b) + old._true_lb + old._true_extent
    return _derived(comb, kw, base=_snapshot(old), size=size, lb=0, ub=total * ext, true_lb=tlo, true_ub=thi,
                    align=old._align, yid=object(), basic=old._basic if nelem else None,
                    nbasic=nelem * old._nbasic, nelem=nelem)


def subarray(old: Datatype, sizes, subsizes, starts, order) -> Datatype:
    """MPI_Type_create_subarray (C or Fortran order)."""
    call = "Datatype.Create_subarray"
    sizes = _ints(sizes, "sizes", call)
    ndims = len(sizes)
    subsizes = _ints_n(subsizes, ndims, "subsizes", call)
    starts = _ints_n(starts, ndims, "starts", call)
    order = _order(order, call)
    old._check("Create_subarray")
    if ndims < 1:
        raise error(ERR_ARG, f"{call}: number of dimensions must be positive ({ndims})")
    for what, values in (("size", sizes), ("subsize", subsizes), ("start", starts)):
        for v in values:
            _nonneg(v, what, call)
    for d in range(ndims):
        if subsizes[d] > sizes[d] or starts[d] + subsizes[d] > sizes[d]:
            raise error(ERR_ARG, f"{call}: subarray out of range in dimension {d} (size {sizes[d]}, "
                                 f"subsize {subsizes[d]}, start {starts[d]})")
    kw = {"sizes": sizes, "subsizes": subsizes, "starts": starts, "order": order}
    from .flatten import subarray_dims

    first, dims = subarray_dims(sizes, subsizes, starts, order)
    nelem = 1
    for s in subsizes:
        nelem *= s
    last = first + sum((c - 1) * st for c, st in dims) if nelem else first
    return _array_type(COMBINER_SUBARRAY, kw, old, sizes, nelem, first, last)


def darray(old: Datatype, size, rank, gsizes, distribs, dargs, psizes, order) -> Datatype:
    """MPI_Type_create_darray (MPI-4 section 5.1.13): block, cyclic and undistributed dimensions."""
    call = "Datatype.Create_darray"
    size = _int(size, "size", call)
    rank = _int(rank, "rank", call)
    gsizes = _ints(gsizes, "gsizes", call)
    ndims = len(gsizes)
    distribs = _ints_n(distribs, ndims, "distribs", call)
    dargs = _ints_n(dargs, ndims, "dargs", call)
    psizes = _ints_n(psizes, ndims, "psizes", call)
    order = _order(order, call)
    old._check("Create_darray")
    if size < 1:
        raise error(ERR_ARG, f"{call}: size must be positive ({size})")
    if not 0 <= rank < size:
        raise error(ERR_RANK, f"{call}: rank {rank} is outside [0, {size - 1}]")
    if ndims < 1:
        raise error(ERR_ARG, f"{call}: number of dimensions must be positive ({ndims})")
    grid = 1
    for d in range(ndims):
        g, dist, darg, p = gsizes[d], distribs[d], dargs[d], psizes[d]
        if g < 1:
            raise error(ERR_ARG, f"{call}: gsizes[{d}] must be positive ({g})")
        if p < 1:
            raise error(ERR_ARG, f"{call}: psizes[{d}] must be positive ({p})")
        grid *= p
        if dist not in (DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC, DISTRIBUTE_NONE):
            raise error(ERR_ARG, f"{call}: invalid distribution in dimension {d} ({dist})")
        if darg != DISTRIBUTE_DFLT_DARG and darg < 1:
            raise error(ERR_ARG, f"{call}: invalid distribution argument in dimension {d} ({darg})")
        if dist == DISTRIBUTE_NONE and p != 1:
            raise error(ERR_ARG, f"{call}: DISTRIBUTE_NONE needs psizes[{d}] == 1 (got {p})")
        if dist == DISTRIBUTE_BLOCK and darg != DISTRIBUTE_DFLT_DARG and darg * p < g:
            raise error(ERR_ARG, f"{call}: block size {darg} x {p} processes does not cover gsizes[{d}] = {g}")
    if grid != size:
        raise error(ERR_ARG, f"{call}: process grid {psizes} has {grid} processes, size is {size}")
    kw = {"size": size, "rank": rank, "gsizes": gsizes, "distribs": distribs, "dargs": dargs, "psizes": psizes,
          "order": order}
    from .flatten import darray_runs

    per_dim, strides = darray_runs(size, rank, gsizes, distribs, dargs, psizes, order)
    nelem = 1
    lo_idx = hi_idx = 0
    for runs_d, st in zip(per_dim, strides):
        nelem *= sum(n for _, n in runs_d)
        if runs_d:
            lo_idx += runs_d[0][0] * st
            hi_idx += (runs_d[-1][0] + runs_d[-1][1] - 1) * st
    return _array_type(COMBINER_DARRAY, kw, old, gsizes, nelem, lo_idx, hi_idx)


def resized(old: Datatype, lb, extent) -> Datatype:
    """MPI_Type_create_resized: new bounds, same bytes."""
    call = "Datatype.Create_resized"
    lb = _int(lb, "lb", call)
    extent = _int(extent, "extent", call)
    old._check("Create_resized")
    kw = {"lb": lb, "extent": extent}
    same = lb == old._lb and extent == old._extent
    return _derived(COMBINER_RESIZED, kw, base=_snapshot(old), size=old._size, lb=lb, ub=lb + extent,
                    true_lb=old._true_lb, true_ub=old._true_lb + old._true_extent, align=old._align,
                    yid=old._yid if same else object(), basic=old._basic, nbasic=old._nbasic, nelem=1)


# -- Fortran-parameterised types ------------------------------------------------------------------

_F90_CACHE: dict = {}
_F90_CODES = {
    COMBINER_F90_INTEGER: {1: ("i1", "b"), 2: ("i2", "h"), 4: ("i4", "i"), 8: ("i8", "l"), 16: ("i16", "V")},
    COMBINER_F90_REAL: {2: ("f2", "e"), 4: ("f4", "f"), 8: ("f8", "d"), 16: ("f16", "g")},
    COMBINER_F90_COMPLEX: {4: ("c4", "E"), 8: ("c8", "F"), 16: ("c16", "D"), 32: ("c32", "G")},
}
_MATCH = {
    TYPECLASS_INTEGER: {1: "INTEGER1", 2: "INTEGER2", 4: "INTEGER4", 8: "INTEGER8", 16: "INTEGER16"},
    TYPECLASS_REAL: {2: "REAL2", 4: "REAL4", 8: "REAL8", 16: "REAL16"},
    TYPECLASS_COMPLEX: {4: "COMPLEX4", 8: "COMPLEX8", 16: "COMPLEX16", 32: "COMPLEX32"},
    TYPECLASS_LOGICAL: {4: "LOGICAL"},
}
# MPICH's (max precision, max exponent range) for 2, 4, 8 and 16-byte reals
_REAL_LIMITS = ((3, 4, 2), (6, 37, 4), (15, 307, 8), (33, 4931, 16))


def _named(name: str) -> Datatype:
    from . import predefined

    return predefined.lookup_name(name)


def _f90(comb: int, key: tuple, size: int, kw: dict, typeclass: int) -> Datatype:
    dt = _F90_CACHE.get(key)
    if dt is None:
        matched = _named(_MATCH[typeclass][size])
        typestr, char = _F90_CODES[comb][size]
        dt = Datatype._make(
            handle=next_handle(), name="", size=size, lb=0, extent=size, true_lb=0, true_extent=size,
            segs=((0, size),), combiner=comb, base=matched, kw=kw, char=char, typestr=typestr, code=typestr,
            align=matched._align, yid=matched._yid, nbasic=1, npspec=matched._npspec, committed=True,
        )
        dt._basic = dt
        _F90_CACHE[key] = dt
    return dt


def f90_integer(r) -> Datatype:
    """MPI_Type_create_f90_integer: the smallest integer with ``r`` decimal digits of range."""
    call = "Datatype.Create_f90_integer"
    r = _int(r, "r", call)
    for limit, size in ((2, 1), (4, 2), (9, 4), (18, 8), (38, 16)):
        if r <= limit:
            return _f90(COMBINER_F90_INTEGER, ("i", r), size, {"r": r}, TYPECLASS_INTEGER)
    raise error(ERR_OTHER, f"{call}: no integer type with {r} digits of range is available")


def _real_size(p: int, r: int) -> int | None:
    for pmax, rmax, size in _REAL_LIMITS:
        if p <= pmax and r <= rmax:
            return size
    return None


def f90_real(p, r) -> Datatype:
    """MPI_Type_create_f90_real: the smallest real with precision ``p`` and exponent range ``r``."""
    call = "Datatype.Create_f90_real"
    p, r = _int(p, "p", call), _int(r, "r", call)
    size = _real_size(p, r)
    if size is None:
        raise error(ERR_OTHER, f"{call}: no real type with both {p} digits of precision and an exponent "
                               f"range of {r} is available")
    return _f90(COMBINER_F90_REAL, ("r", p, r), size, {"p": p, "r": r}, TYPECLASS_REAL)


def f90_complex(p, r) -> Datatype:
    """MPI_Type_create_f90_complex: complex of the :func:`f90_real` kind for ``(p, r)``."""
    call = "Datatype.Create_f90_complex"
    p, r = _int(p, "p", call), _int(r, "r", call)
    size = _real_size(p, r)
    if size is None:
        raise error(ERR_OTHER, f"{call}: no complex type with both {p} digits of precision and an exponent "
                               f"range of {r} is available")
    return _f90(COMBINER_F90_COMPLEX, ("c", p, r), 2 * size, {"p": p, "r": r}, TYPECLASS_COMPLEX)


def match_size(typeclass, size) -> Datatype:
    """MPI_Type_match_size: the named Fortran type of ``typeclass`` with ``size`` bytes."""
    call = "Datatype.Match_size"
    typeclass, size = _int(typeclass, "typeclass", call), _int(size, "size", call)
    table = _MATCH.get(typeclass)
    if table is None:
        raise error(ERR_ARG, f"{call}: typeclass is not one of TYPECLASS_REAL, TYPECLASS_INTEGER or "
                             f"TYPECLASS_COMPLEX ({typeclass})")
    name = table.get(size)
    if name is None:
        raise error(ERR_ARG, f"{call}: no datatype of typeclass {typeclass} with size {size}")
    return _named(name)


# -- rebuilding from decode() (pickling) ---------------------------------------------------------


def rebuild(base: Datatype, name: str, kw: dict, committed: bool) -> Datatype:
    """Construct a type again from ``decode()`` output (used to unpickle derived types)."""
    build = {
        "DUP": lambda: base.Dup(),
        "CONTIGUOUS": lambda: base.Create_contiguous(**kw),
        "VECTOR": lambda: base.Create_vector(**kw),
        "HVECTOR": lambda: base.Create_hvector(**kw),
        "INDEXED": lambda: base.Create_indexed(**kw),
        "HINDEXED": lambda: base.Create_hindexed(**kw),
        "INDEXED_BLOCK": lambda: base.Create_indexed_block(**kw),
        "HINDEXED_BLOCK": lambda: base.Create_hindexed_block(**kw),
        "STRUCT": lambda: Datatype.Create_struct(**kw),
        "SUBARRAY": lambda: base.Create_subarray(**kw),
        "DARRAY": lambda: base.Create_darray(**kw),
        "RESIZED": lambda: base.Create_resized(**kw),
        "F90_INTEGER": lambda: Datatype.Create_f90_integer(**kw),
        "F90_REAL": lambda: Datatype.Create_f90_real(**kw),
        "F90_COMPLEX": lambda: Datatype.Create_f90_complex(**kw),
    }.get(name)
    if build is None:
        raise error(ERR_TYPE, f"Datatype: cannot rebuild a {name} datatype")
    dt = build()
    if committed and dt._combiner not in F90_TYPES:
        dt.Commit()
    return dt

