"""Global Arrays 1-D operations with inclusive bounds: ``enum``, ``scan_add``, ``scan_copy``, ``pack``, ``unpack`` (L6).

Theory of operation
===================
These take ga4py's scalar bounds ``lo`` .. ``hi`` *inclusive* (defaults: the whole array).
Each process computes its own block of the destination: a scan fetches the source and mask
from the start of the range to the end of its block (its values depend on everything before
it); ``pack`` counts the mask's non-zero elements collectively, then the owners of
``dst[0:count]`` fetch the elements that land there; ``unpack`` the reverse: the owners of
the destination range count the mask's non-zero elements before their block and fetch the
source elements that land in it.  Decisions that
depend on data (``pack`` onto too short an array) are agreed before anyone raises.

Choices where GA's source, its manual and ga4py differ, are silent, or fall short:

* ``pack``/``unpack`` accept ``lo=None``/``hi=None`` (ga4py's defaults never reach C there).
"""

from __future__ import annotations

import numpy as np

from .buffers import to_host, xp_of
from .groups import group_comm
from .handles import arr
from .local_data import local_patch
from .ops_common import arrays_of, as_scalar, as_xp, barrier, finish_writes, same_type
from .state import GAError
from .synchronization import enter_op, leave_op
from .transfers import fetch

__all__ = [
    "enum", "pack", "scan_add", "scan_copy", "unpack",
]


# --- 1-D vector operations (C-inclusive scalar bounds) ----------------------------------------------
def _range1(a, lo, hi, call: str):
    """ga4py's scalar bounds of a 1-D array: ``lo`` (default 0) .. ``hi`` inclusive (default the
    last index), as a half-open ``(lo, hi + 1)``."""
    if a.ndim != 1:
        raise ValueError(f"{call}: only 1-D arrays (array {a.handle} has {a.ndim} dimensions)")
    n = a.dims[0]
    try:
        lo = 0 if lo is None else int(lo)
        hi = n - 1 if hi is None else int(hi)
    except (TypeError, ValueError):
        raise TypeError(f"{call}: lo and hi must be integers ({lo!r}, {hi!r})") from None
    if lo < 0 or hi >= n or hi < lo - 1:
        raise ValueError(f"{call}: bounds outside the array (lo {lo}, hi {hi} inclusive, extent {n})")
    return lo, hi + 1


def enum(g_a, lo=None, hi=None, start=None, inc=None) -> None:
    """``a[i] = start + (i - lo) * inc`` for ``lo <= i <= hi`` (inclusive; GA_Patch_enum);
    ``start`` and ``inc`` default to 1. Collective."""
    call = "enum"
    a = arr(g_a, call)
    lo, hi1 = _range1(a, lo, hi, call)
    s = as_scalar(a, start, call, "start", default=1)
    d = as_scalar(a, inc, call, "inc", default=1)
    enter_op(a)
    got = local_patch(a, (lo,), (hi1,)) if hi1 > lo else None
    if got is not None:
        view, plo, phi = got
        xp = xp_of(a)
        view[...] = (xp.arange(plo[0] - lo, phi[0] - lo).astype(a.dtype) * d + s).astype(a.dtype)
        finish_writes(xp)
    leave_op(a)


def _scan_arrays(call: str, g_src, g_dst, g_msk):
    src, dst, msk = arrays_of(call, g_src, g_dst, g_msk)
    if src is dst:
        raise GAError(f"{call}: source and destination must be different arrays (array {src.handle})")
    same_type(call, src, dst)
    for x in (src, dst, msk):
        if x.ndim != 1:
            raise ValueError(f"{call}: only 1-D arrays (array {x.handle} has {x.ndim} dimensions)")
    if not src.dims == dst.dims == msk.dims:
        raise ValueError(f"{call}: the arrays differ in length ({src.dims[0]}, {dst.dims[0]}, {msk.dims[0]})")
    return src, dst, msk


def _scan(call, g_src, g_dst, g_msk, lo, hi, compute) -> None:
    src, dst, msk = _scan_arrays(call, g_src, g_dst, g_msk)
    lo, hi1 = _range1(dst, lo, hi, call)
    enter_op(dst)
    got = local_patch(dst, (lo,), (hi1,)) if hi1 > lo else None
    res = None
    if got is not None:
        view, plo, phi = got
        end = phi[0]  # this block's values depend on the range up to its end
        s = to_host(fetch(src, (lo,), (end,)))
        m = to_host(fetch(msk, (lo,), (end,))) != 0
        out, touched = compute(s, m)
        res = out[plo[0] - lo:], touched[plo[0] - lo:]
    if msk is dst:
        barrier(dst)
    if got is not None:
        view = got[0]
        xp = xp_of(dst)
        vals, sel = res
        if sel.all():
            view[...] = as_xp(vals, xp)
        elif sel.any():
            idx = np.flatnonzero(sel)
            view[as_xp(idx, xp)] = as_xp(vals[idx], xp)
        finish_writes(xp)
    leave_op(dst)


def scan_add(g_src, g_dst, g_msk, lo=None, hi=None, excl=False) -> None:
    """Segmented prefix sums (GA_Scan_add): a non-zero ``msk[i]`` starts a segment at ``i``;
    ``dst[i]`` is the sum of ``src`` from its segment's start to ``i`` (``excl``: to ``i - 1``,
    0 at the start). Bounds are C-inclusive scalars; elements before the first segment are left
    as they are (GA). Collective."""
    def compute(s, m):
        out = np.zeros_like(s)
        starts = np.flatnonzero(m)
        ends = np.append(starts[1:], s.size)
        for a, b in zip(starts.tolist(), ends.tolist()):
            c = np.cumsum(s[a:b], dtype=s.dtype)
            if excl:
                out[a + 1:b] = c[:-1]
            else:
                out[a:b] = c
        return out, np.cumsum(m) > 0

    _scan("scan_add", g_src, g_dst, g_msk, lo, hi, compute)


def scan_copy(g_src, g_dst, g_msk, lo=None, hi=None) -> None:
    """Segmented copy (GA_Scan_copy): ``dst[i]`` is ``src`` at the start of ``i``'s segment (the
    last non-zero ``msk`` at or before ``i``), 0 before the first segment (GA). Bounds are
    C-inclusive scalars. Collective."""
    def compute(s, m):
        last = np.maximum.accumulate(np.where(m, np.arange(s.size), -1)) if s.size else np.zeros(0, int)
        out = np.where(last >= 0, s[np.maximum(last, 0)], np.zeros((), s.dtype)).astype(s.dtype)
        return out, np.ones(s.size, bool)

    _scan("scan_copy", g_src, g_dst, g_msk, lo, hi, compute)


def _count_bits(msk, lo: int, hi1: int) -> int:
    """Non-zero elements of ``msk[lo:hi1]``, counted by their owners and summed (collective)."""
    got = local_patch(msk, (lo,), (hi1,)) if hi1 > lo else None
    mine = 0
    if got is not None:
        mine = int(to_host(xp_of(msk).count_nonzero(got[0])))
    return sum(group_comm(msk).allgather(mine))


def pack(g_src, g_dst, g_msk, lo=None, hi=None) -> int:
    """Copy the elements ``src[i]``, ``lo <= i <= hi`` (inclusive), whose ``msk[i]`` is non-zero
    into ``dst[0], dst[1], ...`` in order; returns how many (GA_Pack). Collective."""
    call = "pack"
    src, dst, msk = arrays_of(call, g_src, g_dst, g_msk)
    _pack_checks(call, src, dst, msk)
    lo, hi1 = _range1(src, lo, hi, call)
    if msk.dims != src.dims:
        raise ValueError(f"{call}: src and msk differ in length ({src.dims[0]}, {msk.dims[0]})")
    enter_op(dst)
    count = _count_bits(msk, lo, hi1)
    if count > dst.dims[0]:
        leave_op(dst)
        raise ValueError(f"{call}: {count} elements do not fit in dst (length {dst.dims[0]})")
    got = local_patch(dst, (0,), (count,)) if count else None
    vals = None
    if got is not None:
        view, plo, phi = got
        pos = np.flatnonzero(to_host(fetch(msk, (lo,), (hi1,))) != 0) + lo
        mine = pos[plo[0]:phi[0]]
        part = to_host(fetch(src, (int(mine[0]),), (int(mine[-1]) + 1,)))
        vals = part[mine - mine[0]]
    if dst is src or dst is msk:
        barrier(dst)
    if got is not None:
        xp = xp_of(dst)
        got[0][...] = as_xp(vals, xp)
        finish_writes(xp)
    leave_op(dst)
    return count


def unpack(g_src, g_dst, g_msk, lo=None, hi=None) -> int:
    """The inverse of :func:`pack`: ``dst[i] = src[k]`` for the ``k``-th ``i``, ``lo <= i <= hi``
    (inclusive), whose ``msk[i]`` is non-zero; other elements stay. Returns how many
    (GA_Unpack). Collective."""
    call = "unpack"
    src, dst, msk = arrays_of(call, g_src, g_dst, g_msk)
    _pack_checks(call, src, dst, msk)
    lo, hi1 = _range1(dst, lo, hi, call)
    if msk.dims != dst.dims:
        raise ValueError(f"{call}: dst and msk differ in length ({dst.dims[0]}, {msk.dims[0]})")
    enter_op(dst)
    count = _count_bits(msk, lo, hi1)
    if count > src.dims[0]:
        leave_op(dst)
        raise ValueError(f"{call}: {count} elements wanted from src (length {src.dims[0]})")
    got = local_patch(dst, (lo,), (hi1,)) if hi1 > lo else None
    work = None
    if got is not None:
        view, plo, phi = got
        m = to_host(fetch(msk, (lo,), (phi[0],))) != 0
        k0 = int(m[:plo[0] - lo].sum())
        sel = np.flatnonzero(m[plo[0] - lo:])
        if sel.size:
            work = sel, to_host(fetch(src, (k0,), (k0 + sel.size,)))
    if dst is src or dst is msk:
        barrier(dst)
    if work is not None:
        xp = xp_of(dst)
        sel, vals = work
        got[0][as_xp(sel, xp)] = as_xp(vals, xp)
        finish_writes(xp)
    leave_op(dst)
    return count


def _pack_checks(call: str, src, dst, msk) -> None:
    same_type(call, src, dst)
    for x in (src, dst, msk):
        if x.ndim != 1:
            raise ValueError(f"{call}: only 1-D arrays (array {x.handle} has {x.ndim} dimensions)")
