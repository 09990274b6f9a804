"""Collective operations on global arrays: fill, copy, arithmetic, reductions, matrices, ghosts (L6).

Theory of operation
===================
Every function here is collective over the group of the array(s) it names (they must all be on
one group): every member calls it with the same arguments.  Arguments are checked before any
communication, identically on every member, so a bad call raises everywhere.  The implicit
syncs of GA (Manual §6.4) open and close each operation: ``synchronization.sync_in`` / ``sync_out`` for
arrays on the default group, a flush plus a barrier of the array's own group otherwise; both
honour ``mask_sync``.

Owner computes.  Each process computes the part of the destination patch it owns
(``local_data.local_patch``) and writes it through the view of its own memory; the source elements
that match it come from ``transfers.fetch`` (one-sided gets, plain copies where the owner's memory
is mapped here).  Elements of two patches match by their position in C order: element ``k``
of ``op(A[alo:ahi])`` goes with element ``k`` of ``B[blo:bhi]``, so patches may differ in shape
as long as they hold as many elements.  ``op`` is nothing or, with ``trans``/``ta``/``tb``, the
transpose of the patch: its dimensions in reverse order (NumPy's ``.T``; GA's copy_patch reverses
the indices the same way), dimensions of extent 1 not counting.  Where the two patches,
without their unit dimensions, have the same logical shape the matching elements form a box of
the source and one fetch brings them (then a transpose if one side is transposed); otherwise
the destination's linear indices are mapped to source subscripts and ``transfers.gather`` brings
them element by element (correct, and slow, like GA's scatter fallback).

Reductions (``dot``, the norms, ``select_elem``, ``step_max``) reduce each process's own block
locally, then combine over the group communicator (``allgather`` summed in rank order, so every
member gets the same bits, or ``Allreduce``).  Decisions that depend on data (``step_max`` with
a negative element, ``pack`` onto too short an array) are agreed before anyone raises.

Aliasing.  When an operation reads an array it also writes (``add(A, B, A)`` on different
patches, ``copy`` between disjoint patches of one array, ``symmetrize``, a matrix product into
one of its factors), every process first fetches everything it needs, then the group barriers,
then everyone writes.  GA's own restrictions stay: ``copy`` and ``transpose`` from an array
into itself (overlapping patches) raise :class:`GAError`.

Ghost cells.  ``update_ghosts`` fills the caller's ghost layers from the visible data of the
blocks they shadow, always wrapping periodically (GA's rule), corners included: per dimension
the ghost-extended range ``[blo - w, bhi + w)`` is reduced modulo the extent and cut into runs
of consecutive indices; every product of runs but the block itself is one in-bounds patch,
fetched and copied into the caller's memory (its ghosts are private, so nobody else writes
them).  ``update_ghost_dir`` does one side of one dimension, with corners if asked.

Type rules.  Scalars (``fill``, ``scale``, ``add_constant``, ``alpha``/``beta``...) are
converted to the array's type (a float into an integer array truncates, as C does); a complex
scalar for a real array is a ``TypeError``.  Operands must have one type (``TypeError``) and as
many elements (``ValueError``).  Messages read ``"<call>: <problem> (<values>)"``.

Choices where GA's source, its manual and ga4py differ, are silent, or fall short:

* ``elem_divide`` and ``recip`` by zero give IEEE results (NumPy's ``inf``/``nan``) for
  floating types; integer division truncates toward zero, as C does, and gives 0 for a zero
  divisor (GA calls ``ga_error``; the manual promises ``GA_NEGATIVE_INFINITY``);
* ``elem_maximum``/``elem_minimum`` on complex arrays follow the manual: ``c.real`` is the
  larger (smaller) modulus, ``c.imag`` 0 (GA's source keeps the whole element of larger or
  smaller modulus instead);
* ``dot`` on complex arrays does not conjugate (GA's ``zdot``: the sum of ``a * b``);
* ``norm1`` and ``norm_infinity`` give GA's numbers, whose core works in Fortran order: in the
  C view ``norm1`` is the largest row sum of ``|a|`` and ``norm_infinity`` the largest column
  sum (NumPy's ``inf`` and ``1`` matrix norms); for a 1-D array, ``sum |x|`` and ``max |x|``;
* ``select_elem`` on complex arrays returns a Python complex (ga4py: a dict ``real``/``imag``);
  complex elements compare by modulus; ties go to the lowest index in C order;
* ``step_max`` returns ``numpy.finfo(float).max`` when no element bounds the step (GA: 1e307);
* ``gop`` reduces the whole array (ga4py: only ``len(X)`` elements of an N-D array); ``"*"`` on
  complex values is the complex product (GA multiplies real and imaginary parts apart);
  ``max``/``min``/``absmax``/``absmin`` on complex values act on real and imaginary parts
  apart, as GA does;
* ``pack``/``unpack`` accept ``lo=None``/``hi=None`` (ga4py's defaults never reach C there);
* ``update_ghost_dir`` takes a 0-based dimension in C order;
* arrays and patches of different shapes but as many elements match in C order everywhere,
  whole-array forms included (the manual's rule; GA's core reshapes in Fortran order, and its
  whole-array ``GA_Copy`` wants equal shapes);
* ``copy`` between disjoint patches of one array is allowed, as GA's source does (the manual
  forbids copies within one array); overlapping patches raise :class:`GAError`;
* ``symmetrize`` takes floating and complex types (GA: double only), integer arrays raise;
* the arrays of one operation must live on one processor group (GA also copies between nested
  groups).
"""

from __future__ import annotations

import itertools
import sys
import time

import numpy as np

from . import _layout as L
from . import buffers, groups, local_data, state, synchronization, transfers
from .handles import arr
from .state import GAError

# --- helpers -------------------------------------------------------------------------------------
_TYPE_NAMES = {state.C_CHAR: "C_CHAR", state.C_INT: "C_INT", state.C_LONG: "C_LONG", state.C_FLOAT: "C_FLOAT",
               state.C_DBL: "C_DBL", state.C_LDBL: "C_LDBL", state.C_SCPL: "C_SCPL", state.C_DCPL: "C_DCPL",
               state.C_LDCPL: "C_LDCPL", state.C_LONGLONG: "C_LONGLONG"}
#: the element types GA's typed calls (dot, gop) dispatch on
_NUMERIC = tuple(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128))
_FLOATING = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _tname(a) -> str:
    return _TYPE_NAMES.get(a.gtype, str(a.dtype))


#: ``x`` as a NumPy array (a device array is copied to the host)
_host = buffers.to_host


def _as_xp(x, xp):
    """``x`` as an array of the array module ``xp``."""
    if xp is np:
        return _host(x)
    return xp.asarray(x)


def _done(xp) -> None:
    """Writes through a device view are complete before anyone else reads them."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def _fetch(a, lo, hi, xp):
    return _as_xp(transfers.fetch(a, tuple(lo), tuple(hi)), xp)


def _arrays(call: str, *handles):
    """The arrays behind ``handles``, checked to live on one processor group."""
    arrs = [arr(h, call) for h in handles]
    g = arrs[0].group
    for x in arrs[1:]:
        if x.group is not g:
            raise ValueError(f"{call}: the arrays live on different processor groups "
                             f"({', '.join(str(y.group.handle) for y in arrs)})")
    return arrs


def _same_type(call: str, *arrs) -> None:
    if any(x.dtype != arrs[0].dtype for x in arrs[1:]):
        raise TypeError(f"{call}: the arrays differ in type ({', '.join(_tname(x) for x in arrs)})")


def _scalar(a, value, call: str, what: str, default=None):
    """``value`` as a NumPy scalar of ``a``'s type (``default`` for None; no default: ValueError)."""
    if value is None:
        if default is None:
            raise ValueError(f"{call}: {what} required (None)")
        value = default
    try:
        v = np.asarray(value)
    except Exception:
        raise TypeError(f"{call}: {what} must be a number ({value!r})") from None
    if v.size != 1:
        raise ValueError(f"{call}: {what} must be a scalar ({value!r})")
    if v.dtype.kind not in "biufc":
        raise TypeError(f"{call}: {what} must be a number ({value!r})")
    if v.dtype.kind == "c" and a.dtype.kind != "c":
        raise TypeError(f"{call}: complex {what} for a {_tname(a)} array ({value!r})")
    with np.errstate(invalid="ignore", over="ignore"):
        return v.reshape(()).astype(a.dtype)[()]


def _gsync(a) -> None:
    """Complete every outstanding operation and barrier ``a``'s group (GA_Pgroup_sync)."""
    for x in list(state.S.arrays.values()):
        if x.allocated and x.group.comm is not None:
            x.win.Flush_all()
    groups.group_comm(a).Barrier()


def _on_default(a) -> bool:
    return a.group.handle == state.S.default


def _enter(a) -> None:
    """The sync at the start of a collective operation on ``a`` (unless masked)."""
    if _on_default(a):
        synchronization.sync_in()
        return
    st = state.S
    if st.mask[0]:
        _gsync(a)
    st.mask[0] = True


def _leave(a) -> None:
    """The sync at the end of a collective operation on ``a`` (unless masked)."""
    if _on_default(a):
        synchronization.sync_out()
        return
    st = state.S
    if st.mask[1]:
        _gsync(a)
    st.mask[1] = True


def _barrier(a) -> None:
    """Between the reads and the writes of an operation whose output aliases an input."""
    groups.group_comm(a).Barrier()


def _patches_given(*bounds) -> bool:
    return any(b is not None for b in bounds)


# -- matching the elements of two patches
class _Patch:
    """A patch of an array with its ``op``: ``axes`` are the patch's dimensions of extent other
    than 1 in the order of ``op(patch)`` (reversed for a transpose), ``lshape`` their extents."""

    __slots__ = ("a", "lo", "hi", "axes", "lshape", "size")

    def __init__(self, a, lo, hi, trans: bool, call: str) -> None:
        self.a, self.lo, self.hi = a, tuple(lo), tuple(hi)
        axes = [d for d, (l, h) in enumerate(zip(lo, hi)) if h - l != 1]
        if trans:
            axes.reverse()
        self.axes = axes
        self.lshape = tuple(hi[d] - lo[d] for d in axes)
        self.size = L.patch_size(lo, hi)


def _patch(a, lo, hi, trans, call: str) -> _Patch:
    lo, hi = buffers.patch_bounds(a, lo, hi, call)
    return _Patch(a, lo, hi, bool(trans), call)


def _check_sizes(call: str, *patches) -> None:
    if any(p.size != patches[0].size for p in patches[1:]):
        raise ValueError(f"{call}: the patches differ in element count ({', '.join(str(p.size) for p in patches)})")


def _matched(dst: _Patch, plo, phi, src: _Patch, xp):
    """The elements of ``src`` that match the sub-box ``[plo, phi)`` of ``dst``'s patch, as an
    array of ``xp`` shaped like the sub-box (module docstring: matching by C-order position)."""
    sub = tuple(h - l for l, h in zip(plo, phi))
    if dst.lshape == src.lshape:  # one box of src, its axes permuted
        blo, bhi = list(src.lo), [l + 1 for l in src.lo]
        for dd, sd in zip(dst.axes, src.axes):
            blo[sd] = src.lo[sd] + plo[dd] - dst.lo[dd]
            bhi[sd] = src.lo[sd] + phi[dd] - dst.lo[dd]
        v = _fetch(src.a, blo, bhi, xp)
        ss = sorted(src.axes)
        v = v.reshape(tuple(bhi[d] - blo[d] for d in ss))
        v = v.transpose([ss.index(d) for d in src.axes])  # the order of op(src)
        ds = sorted(dst.axes)
        v = v.transpose([dst.axes.index(d) for d in ds])  # the order of dst's dimensions
        return v.reshape(sub)
    grids = np.meshgrid(*[np.arange(l, h, dtype=np.int64) for l, h in zip(plo, phi)], indexing="ij")
    if dst.axes:
        k = np.ravel_multi_index([grids[d] - dst.lo[d] for d in dst.axes], dst.lshape)
    else:
        k = np.zeros(sub, np.int64)
    subs = np.empty(k.shape + (src.a.ndim,), np.int64)
    for d in range(src.a.ndim):
        subs[..., d] = src.lo[d]
    if src.axes:
        for sd, c in zip(src.axes, np.unravel_index(k, src.lshape)):
            subs[..., sd] += c
    vals = transfers.gather(src.a.handle, subs.reshape(-1, src.a.ndim))
    return _as_xp(vals.reshape(sub), xp)


# --- whole arrays and patches: in place ------------------------------------------------------------
def _in_place(g_a, lo, hi, call: str, fn, check=None) -> None:
    a = arr(g_a, call)
    lo, hi = buffers.patch_bounds(a, lo, hi, call)
    args = check(a) if check is not None else ()
    _enter(a)
    got = local_data.local_patch(a, lo, hi)
    if got is not None:
        xp = buffers.xp_of(a)
        fn(got[0], xp, *args)
        _done(xp)
    _leave(a)


def zero(g_a, lo=None, hi=None) -> None:
    """Set the array, or the patch ``[lo, hi)``, to zero (GA_Zero / NGA_Zero_patch). Collective."""
    def fn(v, xp):
        v[...] = 0
    _in_place(g_a, lo, hi, "zero", fn)


def fill(g_a, value, lo=None, hi=None) -> None:
    """Set every element of the array or patch to ``value`` (GA_Fill / NGA_Fill_patch). Collective."""
    def fn(v, xp, val):
        v[...] = val
    _in_place(g_a, lo, hi, "fill", fn, lambda a: (_scalar(a, value, "fill", "value"),))


def scale(g_a, value, lo=None, hi=None) -> None:
    """Multiply the array or patch by ``value`` (GA_Scale / NGA_Scale_patch). Collective."""
    def fn(v, xp, val):
        v *= val
    _in_place(g_a, lo, hi, "scale", fn, lambda a: (_scalar(a, value, "scale", "value"),))


def add_constant(g_a, alpha, lo=None, hi=None) -> None:
    """Add ``alpha`` to every element of the array or patch (GA_Add_constant /
    GA_Add_constant_patch). Collective."""
    def fn(v, xp, val):
        v += val
    _in_place(g_a, lo, hi, "add_constant", fn, lambda a: (_scalar(a, alpha, "add_constant", "alpha"),))


def abs_value(g_a, lo=None, hi=None) -> None:
    """Replace every element by its absolute value; complex elements by their modulus, imaginary
    part 0 (GA_Abs_value / GA_Abs_value_patch). Collective."""
    def fn(v, xp):
        v[...] = xp.abs(v)
    _in_place(g_a, lo, hi, "abs_value", fn)


def _idiv(x, y, xp):
    """C's integer division (truncating toward zero); 0 for a zero divisor (NumPy's result)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = x // y
        fix = (q * y != x) & ((x < 0) != (y < 0)) & (y != 0)
    return q + fix.astype(q.dtype)


def _divide(x, y, xp):
    if np.dtype(x.dtype).kind in "iu":
        return _idiv(x, y, xp)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return x / y


def recip(g_a, lo=None, hi=None) -> None:
    """Replace every element by its reciprocal (GA_Recip / GA_Recip_patch). Collective.

    A zero element gives IEEE infinity (NumPy's result; GA calls ``ga_error``); integer elements
    get C's ``1 / a`` (1, -1 or 0), and 0 for a zero element."""
    def fn(v, xp):
        v[...] = _divide(xp.ones_like(v), v, xp)
    _in_place(g_a, lo, hi, "recip", fn)


def randomize(g_a, val=None) -> None:
    """Fill the array with random values in ``[0, val)`` (GA_Randomize; ``val`` None: 1).
    Collective.

    Each process draws its own block from NumPy's ``default_rng`` seeded with its rank and the
    time, so the streams differ between processes and runs.  Integer arrays get integers in
    ``[0, val)`` (``val`` at least 1); complex arrays get real and imaginary parts in
    ``[0, val.real)`` and ``[0, val.imag)``, or both in ``[0, val)`` for a real ``val``."""
    a = arr(g_a, "randomize")
    v = _scalar(a, val, "randomize", "val", default=1)
    if a.dtype.kind in "iu" and v < 1:
        raise ValueError(f"randomize: val must be at least 1 for an integer array ({val!r})")
    _enter(a)
    got = local_data.local_patch(a, (0,) * a.ndim, a.dims)
    if got is not None:
        view = got[0]
        xp = buffers.xp_of(a)
        rng = np.random.default_rng([a.me, time.time_ns() & 0xFFFFFFFFFFFF])
        shape = tuple(view.shape)
        if a.dtype.kind in "iu":
            out = rng.integers(0, int(v), shape)
        elif a.dtype.kind == "c":
            hi_r, hi_i = (v.real, v.imag) if np.iscomplexobj(np.asarray(val)) else (v.real, v.real)
            out = rng.random(shape) * hi_r + 1j * (rng.random(shape) * hi_i)
        else:
            out = rng.random(shape) * float(v)
        view[...] = _as_xp(out.astype(a.dtype), xp)
        _done(xp)
    _leave(a)


# --- copy and element-wise operations on several arrays ------------------------------------------
def _elementwise(call: str, out, out_lo, out_hi, srcs, fn) -> None:
    """``out[patch] = fn(*matched sources)`` by the owners of ``out``'s patch. ``srcs`` are
    :class:`_Patch` es; ``fn`` gets their matched values and the array module."""
    a = out.a
    _enter(a)
    got = local_data.local_patch(a, out_lo, out_hi)
    xp = buffers.xp_of(a)
    res = None
    if got is not None:
        view, plo, phi = got
        res = fn(*[_matched(out, plo, phi, s, xp) for s in srcs], xp)
    if any(s.a is a for s in srcs):
        _barrier(a)
    if got is not None:
        got[0][...] = res
        _done(xp)
    _leave(a)


def copy(g_a, g_b, alo=None, ahi=None, blo=None, bhi=None, trans=False) -> None:
    """``B = A``, or ``B[blo:bhi] = op(A[alo:ahi])`` with ``op`` the transpose (dimensions reversed)
    when ``trans`` (GA_Copy / NGA_Copy_patch). Collective.

    The two need one type and as many elements; shapes may differ (element ``k`` of ``A`` in C
    order goes to element ``k`` of ``B``).  The whole-array form ignores ``trans`` (ga4py).  A
    patch copy within one array is allowed between disjoint patches; overlapping patches, and
    the whole-array copy of an array onto itself, raise :class:`GAError` (GA's rule)."""
    call = "copy"
    a, b = _arrays(call, g_a, g_b)
    whole = not _patches_given(alo, ahi, blo, bhi)
    if whole:
        trans = False
    src = _patch(a, alo, ahi, trans, call)
    dst = _patch(b, blo, bhi, False, call)
    if a is b and (whole or L.intersect(src.lo, src.hi, dst.lo, dst.hi) is not None):
        where = "" if whole else f", patches {list(src.lo)}..{list(src.hi)} and {list(dst.lo)}..{list(dst.hi)} overlap"
        raise GAError(f"{call}: source and destination are the same array (array {a.handle}{where})")
    _same_type(call, a, b)
    _check_sizes(call, src, dst)
    _elementwise(call, dst, dst.lo, dst.hi, [src], lambda x, xp: x)


def _three(call, g_a, g_b, g_c, alo, ahi, blo, bhi, clo, chi, fn, extra=None) -> None:
    a, b, c = _arrays(call, g_a, g_b, g_c)
    _same_type(call, a, b, c)
    pa, pb, pc = (_patch(x, lo, hi, False, call) for x, lo, hi in ((a, alo, ahi), (b, blo, bhi), (c, clo, chi)))
    _check_sizes(call, pa, pb, pc)
    args = extra(a) if extra is not None else ()
    _elementwise(call, pc, pc.lo, pc.hi, [pa, pb], lambda x, y, xp: fn(x, y, xp, *args))


def add(g_a, g_b, g_c, alpha=None, beta=None, alo=None, ahi=None, blo=None, bhi=None, clo=None, chi=None) -> None:
    """``C = alpha A + beta B`` on the arrays or patches (GA_Add / NGA_Add_patch). Collective.

    ``alpha`` and ``beta`` default to 1 and take ``A``'s type; ``C`` may be ``A`` or ``B``."""
    def extra(a):
        return _scalar(a, alpha, "add", "alpha", default=1), _scalar(a, beta, "add", "beta", default=1)

    _three("add", g_a, g_b, g_c, alo, ahi, blo, bhi, clo, chi, lambda x, y, xp, al, be: al * x + be * y, extra)


def elem_multiply(g_a, g_b, g_c, alo=None, ahi=None, blo=None, bhi=None, clo=None, chi=None) -> None:
    """``C = A * B`` element-wise (GA_Elem_multiply / GA_Elem_multiply_patch). Collective."""
    _three("elem_multiply", g_a, g_b, g_c, alo, ahi, blo, bhi, clo, chi, lambda x, y, xp: x * y)


def elem_divide(g_a, g_b, g_c, alo=None, ahi=None, blo=None, bhi=None, clo=None, chi=None) -> None:
    """``C = A / B`` element-wise (GA_Elem_divide / GA_Elem_divide_patch). Collective.

    A zero divisor gives IEEE ``inf``/``nan`` (NumPy's result; GA calls ``ga_error``); integer
    arrays divide as C does (toward zero), with 0 for a zero divisor."""
    _three("elem_divide", g_a, g_b, g_c, alo, ahi, blo, bhi, clo, chi, _divide)


def _extremum(x, y, xp, big: bool):
    if np.dtype(x.dtype).kind == "c":  # the manual's rule: c.real = max/min(|a|, |b|), c.imag = 0
        m = xp.maximum(xp.abs(x), xp.abs(y)) if big else xp.minimum(xp.abs(x), xp.abs(y))
        return m.astype(x.dtype)
    return xp.maximum(x, y) if big else xp.minimum(x, y)


def elem_maximum(g_a, g_b, g_c, alo=None, ahi=None, blo=None, bhi=None, clo=None, chi=None) -> None:
    """``C = max(A, B)`` element-wise (GA_Elem_maximum / GA_Elem_maximum_patch). Collective.

    Complex arrays follow the manual: ``c.real = max(|a|, |b|)``, ``c.imag = 0``."""
    _three("elem_maximum", g_a, g_b, g_c, alo, ahi, blo, bhi, clo, chi, lambda x, y, xp: _extremum(x, y, xp, True))


def elem_minimum(g_a, g_b, g_c, alo=None, ahi=None, blo=None, bhi=None, clo=None, chi=None) -> None:
    """``C = min(A, B)`` element-wise (GA_Elem_minimum / GA_Elem_minimum_patch). Collective.

    Complex arrays follow the manual: ``c.real = min(|a|, |b|)``, ``c.imag = 0``."""
    _three("elem_minimum", g_a, g_b, g_c, alo, ahi, blo, bhi, clo, chi, lambda x, y, xp: _extremum(x, y, xp, False))


def _median3(x, y, z, xp):
    """GA's median of three (matrix.c): complex values compare by modulus, ties as GA breaks them."""
    if np.dtype(x.dtype).kind == "c":
        nx, ny, nz = xp.abs(x), xp.abs(y), xp.abs(z)
    else:
        nx, ny, nz = x, y, z
    lo_first = nx < ny  # auxi_median(lo, hi, c) with nlo <= nhi
    l, h = xp.where(lo_first, x, y), xp.where(lo_first, y, x)
    nl, nh = xp.where(lo_first, nx, ny), xp.where(lo_first, ny, nx)
    aux = xp.where((nz < nl) & (nl < nh), l, xp.where((nl <= nz) & (nz <= nh), z, h))
    return xp.where(nx == ny, x, aux)


def median(g_a, g_b, g_c, g_m, alo=None, ahi=None, blo=None, bhi=None, clo=None, chi=None, mlo=None,
           mhi=None) -> None:
    """``M = median(A, B, C)`` element-wise (GA_Median / GA_Median_patch); complex elements compare
    by modulus. ``M`` may be any of the inputs. Collective."""
    call = "median"
    a, b, c, m = _arrays(call, g_a, g_b, g_c, g_m)
    _same_type(call, a, b, c, m)
    ps = [_patch(x, lo, hi, False, call) for x, lo, hi in ((a, alo, ahi), (b, blo, bhi), (c, clo, chi), (m, mlo, mhi))]
    _check_sizes(call, *ps)
    _elementwise(call, ps[3], ps[3].lo, ps[3].hi, ps[:3], _median3)


# --- reductions ----------------------------------------------------------------------------------
def _sum_all(a, x):
    """The sum over the group of each member's ``x``, added in rank order (the same everywhere)."""
    parts = groups.group_comm(a).allgather(x)
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def _pyscalar(a, x):
    if a.dtype.kind in "iu":
        return int(x)
    if a.dtype.kind == "c":
        return complex(x)
    return float(x)


def dot(g_a, g_b, alo=None, ahi=None, blo=None, bhi=None, ta=False, tb=False):
    """The sum of ``op(A) * op(B)`` element-wise: an int, float or complex by ``A``'s type
    (GA_Idot/Ldot/Fdot/Ddot/Cdot/Zdot, NGA_*dot_patch). Collective; every member gets the value.

    ``ta``/``tb`` transpose the patches (dimensions reversed; patch form only, as in ga4py).  Complex values are not
    conjugated (GA's ``zdot``)."""
    call = "dot"
    a, b = _arrays(call, g_a, g_b)
    if a.dtype not in _NUMERIC:
        raise TypeError(f"dot: type not supported ({_tname(a)})")
    _same_type(call, a, b)
    if not _patches_given(alo, ahi, blo, bhi):
        ta = tb = False
    pa, pb = _patch(a, alo, ahi, ta, call), _patch(b, blo, bhi, tb, call)
    _check_sizes(call, pa, pb)
    _enter(a)
    got = local_data.local_patch(a, pa.lo, pa.hi)
    part = a.dtype.type(0)
    if got is not None:
        view, plo, phi = got
        xp = buffers.xp_of(a)
        part = _host(xp.sum(view * _matched(pa, plo, phi, pb, xp)))[()]
    total = _pyscalar(a, _sum_all(a, _pyscalar(a, part)))
    _leave(a)
    return total


def _norm_check(a, call: str) -> None:
    if a.ndim not in (1, 2):
        raise ValueError(f"{call}: only 1-D and 2-D arrays ({a.ndim} dimensions)")


def norm1(g_a) -> float:
    """GA's 1-norm (GA_Norm1): ``sum |x|`` for a vector; for a matrix, the largest sum of ``|a|``
    along a row of the C view (GA's core sums columns in Fortran order). Collective."""
    return _norm(g_a, "norm1", 1)


def norm_infinity(g_a) -> float:
    """GA's infinity norm (GA_Norm_infinity): ``max |x|`` for a vector; for a matrix, the largest
    sum of ``|a|`` down a column of the C view (GA's core sums rows in Fortran order). Collective."""
    return _norm(g_a, "norm_infinity", 0)


def _norm(g_a, call: str, axis: int) -> float:
    MPI = state.mpi()
    a = arr(g_a, call)
    _norm_check(a, call)
    _enter(a)
    got = local_data.local_patch(a, (0,) * a.ndim, a.dims)
    comm = groups.group_comm(a)
    if a.ndim == 1:
        part = np.zeros(1)
        if got is not None:
            v = _host(buffers.xp_of(a).abs(got[0])).astype(np.float64)
            part[0] = v.sum() if axis == 1 else v.max(initial=0.0)
        out = np.empty(1)
        comm.Allreduce(part, out, op=MPI.SUM if axis == 1 else MPI.MAX)
        result = float(out[0])
    else:
        n = a.dims[1 - axis]  # norm1: one sum per row; norm_infinity: one per column
        part = np.zeros(n)
        if got is not None:
            view, plo, phi = got
            v = _host(buffers.xp_of(a).abs(view)).astype(np.float64)
            part[plo[1 - axis]:phi[1 - axis]] = v.sum(axis=axis)
        out = np.empty(n)
        comm.Allreduce(part, out, op=MPI.SUM)
        result = float(out.max())
    _leave(a)
    return result


def select_elem(g_a, op):
    """``(value, index)`` of the smallest (``op="min"``) or largest (``"max"``) element
    (NGA_Select_elem); ``index`` is an int64 array. Collective.

    Complex elements compare by modulus and the value is a Python complex (ga4py: a dict); ties
    go to the lowest index in C order."""
    call = "select_elem"
    if isinstance(op, bytes):
        op = op.decode()
    if op not in ("min", "max"):
        raise ValueError(f"{call}: op must be 'min' or 'max' ({op!r})")
    a = arr(g_a, call)
    if a.dtype.kind not in "iufc":
        raise TypeError(f"{call}: type not supported ({_tname(a)})")
    _enter(a)
    got = local_data.local_patch(a, (0,) * a.ndim, a.dims)
    mine = None
    if got is not None:
        view, plo, phi = got
        xp = buffers.xp_of(a)
        key = xp.abs(view) if a.dtype.kind == "c" else view
        i = int(_host(xp.argmin(key) if op == "min" else xp.argmax(key)))
        loc = np.unravel_index(i, tuple(view.shape))
        sub = tuple(int(p + j) for p, j in zip(plo, loc))
        val = _host(view[loc])[()]
        k = _host(key[loc])[()]
        mine = (k.item(), sub, _pyscalar(a, val))  # the key as compared here (complex: |z| in its precision)
    best = None
    for cand in groups.group_comm(a).allgather(mine):
        if cand is None:
            continue
        if best is None or (cand[0] < best[0] if op == "min" else cand[0] > best[0]) or \
                (cand[0] == best[0] and cand[1] < best[1]):
            best = cand
    _leave(a)
    return best[2], np.array(best[1], dtype=np.int64)


def select_elem_min(g_a):
    """``select_elem(g_a, "min")`` (NGA_Select_elem with "min")."""
    return select_elem(g_a, "min")


def select_elem_max(g_a):
    """``select_elem(g_a, "max")`` (NGA_Select_elem with "max")."""
    return select_elem(g_a, "max")


def step_max(g_a, g_b, alo=None, ahi=None, blo=None, bhi=None) -> float:
    """The largest ``s >= 0`` with ``A + s B >= 0`` element-wise (GA_Step_max /
    GA_Step_max_patch); ``A`` must be non-negative. Collective.

    When no element bounds the step (no negative ``b``, or ``A`` and ``B`` the same array) the
    result is ``numpy.finfo(float).max`` (GA: 1e307).  Complex arrays raise ``TypeError``."""
    call = "step_max"
    a, b = _arrays(call, g_a, g_b)
    _same_type(call, a, b)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{call}: not available for {_tname(a)} arrays")
    pa, pb = _patch(a, alo, ahi, False, call), _patch(b, blo, bhi, False, call)
    _check_sizes(call, pa, pb)
    huge = float(np.finfo(np.float64).max)
    _enter(a)
    if a is b:
        _leave(a)
        return huge
    got = local_data.local_patch(a, pa.lo, pa.hi)
    neg, step = 0, np.inf
    if got is not None:
        view, plo, phi = got
        xp = buffers.xp_of(a)
        x = _host(view).astype(np.float64)
        y = _host(_matched(pa, plo, phi, pb, xp)).astype(np.float64)
        neg = int((x < 0).any())
        bound = y < 0
        if bound.any():
            step = float((-x[bound] / y[bound]).min())
    comm = groups.group_comm(a)
    if any(comm.allgather(neg)):
        _leave(a)
        raise ValueError(f"{call}: array {a.handle} has a negative element in the patch")
    step = min(comm.allgather(step))
    _leave(a)
    return huge if step == np.inf else step


# --- matrices ------------------------------------------------------------------------------------
def _need_2d(call: str, *arrs) -> None:
    for x in arrs:
        if x.ndim != 2:
            raise ValueError(f"{call}: array {x.handle} must be 2-D ({x.ndim} dimensions)")


def transpose(g_a, g_b) -> None:
    """``B = A^T`` for 2-D arrays (GA_Transpose); ``B``'s extents are ``A``'s reversed. Collective."""
    call = "transpose"
    a, b = _arrays(call, g_a, g_b)
    if a is b:
        raise GAError(f"{call}: the arrays have to be different (array {a.handle})")
    _need_2d(call, a, b)
    _same_type(call, a, b)
    if b.dims != a.dims[::-1]:
        raise ValueError(f"{call}: B's extents must be A's reversed (A {list(a.dims)}, B {list(b.dims)})")
    src = _Patch(a, (0, 0), a.dims, True, call)
    dst = _Patch(b, (0, 0), b.dims, False, call)
    _elementwise(call, dst, dst.lo, dst.hi, [src], lambda x, xp: x)


def symmetrize(g_a) -> None:
    """``A = (A + A^T) / 2`` over the last two dimensions, which must be equal (GA_Symmetrize).
    Collective.  Floating and complex types (GA: double only)."""
    call = "symmetrize"
    a = arr(g_a, call)
    if a.ndim < 2 or a.dims[-1] != a.dims[-2]:
        raise ValueError(f"{call}: the last two extents must be equal ({list(a.dims)})")
    if a.dtype not in _FLOATING:
        raise TypeError(f"{call}: only floating and complex arrays ({_tname(a)})")
    _enter(a)
    got = local_data.local_patch(a, (0,) * a.ndim, a.dims)
    xp = buffers.xp_of(a)
    t = None
    if got is not None:
        view, plo, phi = got
        tlo = plo[:-2] + (plo[-1], plo[-2])
        thi = phi[:-2] + (phi[-1], phi[-2])
        t = xp.swapaxes(_fetch(a, tlo, thi, xp), -1, -2)
    _barrier(a)
    if got is not None:
        view = got[0]
        view[...] = (view + t) * a.dtype.type(0.5)
        _done(xp)
    _leave(a)


def _mat_types(call: str, a) -> None:
    if a.dtype not in _FLOATING:
        raise TypeError(f"{call}: {_tname(a)} not supported")


def gemm(ta, tb, m, n, k, alpha, g_a, g_b, beta, g_c) -> None:
    """``C[:m, :n] = alpha op(A)[:m, :k] op(B)[:k, :n] + beta C[:m, :n]``, ``op`` the transpose
    when ``ta``/``tb`` (GA_Sgemm/Dgemm/Cgemm/Zgemm). Collective.

    ``alpha`` and ``beta`` are required; float32, float64, complex64 and complex128 arrays
    (others: ``TypeError("gemm: C_INT not supported")`` as in ga4py)."""
    call = "gemm"
    a, b, c = _arrays(call, g_a, g_b, g_c)
    _need_2d(call, a, b, c)
    _mat_types(call, a)
    if alpha is None or beta is None:
        raise TypeError(f"{call}: alpha and beta are required (alpha {alpha!r}, beta {beta!r})")
    ta, tb = _trans_flag(ta, call), _trans_flag(tb, call)
    m, n, k = (int(x) for x in (m, n, k))
    if min(m, n, k) < 0:
        raise ValueError(f"{call}: m, n and k must be >= 0 ({m}, {n}, {k})")
    ahi = (k, m) if ta else (m, k)
    bhi = (n, k) if tb else (k, n)
    matmul_patch(ta, tb, alpha, beta, g_a, (0, 0), ahi, g_b, (0, 0), bhi, g_c, (0, 0), (m, n))


def _trans_flag(t, call: str) -> bool:
    if isinstance(t, bytes):
        t = t.decode()
    if isinstance(t, str):
        if t not in ("N", "n", "T", "t"):
            raise ValueError(f"{call}: transpose flag must be 'N' or 'T' ({t!r})")
        return t in ("T", "t")
    return bool(t)


def matmul_patch(transa, transb, alpha, beta, g_a, alo, ahi, g_b, blo, bhi, g_c, clo, chi) -> None:
    """``C[clo:chi] = alpha op(A[alo:ahi]) op(B[blo:bhi]) + beta C[clo:chi]`` for 2-D arrays
    (GA_Matmul_patch / NGA_Matmul_patch); ``alpha``/``beta`` None: 1. Collective.

    With ``beta == 0`` the old contents of ``C`` are not read (BLAS's rule)."""
    call = "matmul_patch"
    a, b, c = _arrays(call, g_a, g_b, g_c)
    _need_2d(call, a, b, c)
    _same_type(call, a, b, c)
    _mat_types(call, a)
    ta, tb = _trans_flag(transa, call), _trans_flag(transb, call)
    al = _scalar(a, alpha, call, "alpha", default=1)
    be = _scalar(a, beta, call, "beta", default=1)
    alo, ahi = buffers.patch_bounds(a, alo, ahi, call)
    blo, bhi = buffers.patch_bounds(b, blo, bhi, call)
    clo, chi = buffers.patch_bounds(c, clo, chi, call)
    ar, ac = ahi[0] - alo[0], ahi[1] - alo[1]
    br, bc = bhi[0] - blo[0], bhi[1] - blo[1]
    M, K = (ac, ar) if ta else (ar, ac)
    K2, N = (bc, br) if tb else (br, bc)
    if K != K2 or (chi[0] - clo[0], chi[1] - clo[1]) != (M, N):
        raise ValueError(f"{call}: shapes do not conform (op(A) {M}x{K}, op(B) {K2}x{N}, "
                         f"C {chi[0] - clo[0]}x{chi[1] - clo[1]})")
    _enter(c)
    got = local_data.local_patch(c, clo, chi)
    xp = buffers.xp_of(c)
    res = None
    if got is not None:
        view, plo, phi = got
        r0, r1 = plo[0] - clo[0], phi[0] - clo[0]
        c0, c1 = plo[1] - clo[1], phi[1] - clo[1]
        if ta:
            opa = _fetch(a, (alo[0], alo[1] + r0), (ahi[0], alo[1] + r1), xp).T
        else:
            opa = _fetch(a, (alo[0] + r0, alo[1]), (alo[0] + r1, ahi[1]), xp)
        if tb:
            opb = _fetch(b, (blo[0] + c0, blo[1]), (blo[0] + c1, bhi[1]), xp).T
        else:
            opb = _fetch(b, (blo[0], blo[1] + c0), (bhi[0], blo[1] + c1), xp)
        prod = xp.matmul(opa, opb) if K else xp.zeros((r1 - r0, c1 - c0), c.dtype)
        res = al * prod if be == 0 else al * prod + be * view
    if c is a or c is b:
        _barrier(c)
    if got is not None:
        got[0][...] = res
        _done(xp)
    _leave(c)


# -- diagonals
def _diag(a, got, xp):
    """Row and column indices (in the view) of the diagonal elements in the caller's block."""
    view, plo, phi = got
    i0, i1 = max(plo[0], plo[1]), min(phi[0], phi[1])
    if i1 <= i0:
        return None
    idx = xp.arange(i0, i1)
    return (idx - plo[0], idx - plo[1]), i0, i1


def _diag_op(g_a, g_v, call: str, fn, value=None) -> None:
    a = arr(g_a, call)
    _need_2d(call, a)
    v = None
    if g_v is not None:
        a, v = _arrays(call, g_a, g_v)
        _same_type(call, a, v)
        if v.ndim != 1 or v.dims[0] != min(a.dims):
            raise ValueError(f"{call}: the vector must be 1-D of the diagonal's length "
                             f"({list(v.dims)}, diagonal {min(a.dims)})")
    _enter(a)
    got = local_data.local_patch(a, (0, 0), a.dims)
    if got is not None:
        xp = buffers.xp_of(a)
        d = _diag(a, got, xp)
        if d is not None:
            ij, i0, i1 = d
            vals = _fetch(v, (i0,), (i1,), xp) if v is not None else value
            view = got[0]
            view[ij] = fn(view[ij], vals)
            _done(xp)
    _leave(a)


def zero_diagonal(g_a) -> None:
    """``A_ii = 0`` (GA_Zero_diagonal). Collective."""
    _diag_op(g_a, None, "zero_diagonal", lambda d, v: 0)


def shift_diagoal(g_a, value=None) -> None:
    """``A_ii += value`` (GA_Shift_diagonal; ga4py's misspelled name; ``value`` None: 1). Collective."""
    a = arr(g_a, "shift_diagonal")
    val = _scalar(a, value, "shift_diagonal", "value", default=1)
    _diag_op(g_a, None, "shift_diagonal", lambda d, v: d + v, val)


def shift_diagonal(g_a, value=None) -> None:
    """``A_ii += value`` (GA_Shift_diagonal; ``value`` None: 1). Collective."""
    shift_diagoal(g_a, value)


def set_diagonal(g_a, g_v) -> None:
    """``A_ii = v_i`` (GA_Set_diagonal); ``v`` is 1-D of length ``min(dims)``. Collective."""
    _diag_op(g_a, g_v, "set_diagonal", lambda d, v: v)


def add_diagonal(g_a, g_v) -> None:
    """``A_ii += v_i`` (GA_Add_diagonal). Collective."""
    _diag_op(g_a, g_v, "add_diagonal", lambda d, v: d + v)


def get_diag(g_a, g_v) -> None:
    """``v_i = A_ii`` (GA_Get_diag); ``v`` is 1-D of length ``min(dims)``. Collective."""
    call = "get_diag"
    a, v = _arrays(call, g_a, g_v)
    _need_2d(call, a)
    _same_type(call, a, v)
    if v.ndim != 1 or v.dims[0] != min(a.dims):
        raise ValueError(f"{call}: the vector must be 1-D of the diagonal's length "
                         f"({list(v.dims)}, diagonal {min(a.dims)})")
    _enter(v)
    got = local_data.local_patch(v, (0,), v.dims)
    if got is not None:
        view, plo, phi = got
        xp = buffers.xp_of(v)
        i = np.arange(plo[0], phi[0], dtype=np.int64)
        view[...] = _as_xp(transfers.gather(a.handle, np.stack([i, i], axis=1)), xp)
        _done(xp)
    _leave(v)


def _scale_lines(g_a, g_v, call: str, axis: int) -> None:
    a, v = _arrays(call, g_a, g_v)
    _need_2d(call, a)
    _same_type(call, a, v)
    if v.ndim != 1 or v.dims[0] != a.dims[axis]:
        raise ValueError(f"{call}: the vector must be 1-D with one element per {'row' if axis == 0 else 'column'} "
                         f"({list(v.dims)}, array {list(a.dims)})")
    _enter(a)
    got = local_data.local_patch(a, (0, 0), a.dims)
    if got is not None:
        view, plo, phi = got
        xp = buffers.xp_of(a)
        s = _fetch(v, (plo[axis],), (phi[axis],), xp)
        view *= s[:, None] if axis == 0 else s[None, :]
        _done(xp)
    _leave(a)


def scale_rows(g_a, g_v) -> None:
    """``A_ij *= v_i`` (GA_Scale_rows: rows of the C view). Collective."""
    _scale_lines(g_a, g_v, "scale_rows", 0)


def scale_cols(g_a, g_v) -> None:
    """``A_ij *= v_j`` (GA_Scale_cols: columns of the C view). Collective."""
    _scale_lines(g_a, g_v, "scale_cols", 1)


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
    s = _scalar(a, start, call, "start", default=1)
    d = _scalar(a, inc, call, "inc", default=1)
    _enter(a)
    got = local_data.local_patch(a, (lo,), (hi1,)) if hi1 > lo else None
    if got is not None:
        view, plo, phi = got
        xp = buffers.xp_of(a)
        view[...] = (xp.arange(plo[0] - lo, phi[0] - lo).astype(a.dtype) * d + s).astype(a.dtype)
        _done(xp)
    _leave(a)


def _scan_arrays(call: str, g_src, g_dst, g_msk):
    src, dst, msk = _arrays(call, g_src, g_dst, g_msk)
    if src is dst:
        raise GAError(f"{call}: source and destination must be different arrays (array {src.handle})")
    _same_type(call, src, dst)
    for x in (src, dst, msk):
        if x.ndim != 1:
            raise ValueError(f"{call}: only 1-D arrays (array {x.handle} has {x.ndim} dimensions)")
    if not src.dims == dst.dims == msk.dims:
        raise ValueError(f"{call}: the arrays differ in length ({src.dims[0]}, {dst.dims[0]}, {msk.dims[0]})")
    return src, dst, msk


def _scan(call, g_src, g_dst, g_msk, lo, hi, compute) -> None:
    src, dst, msk = _scan_arrays(call, g_src, g_dst, g_msk)
    lo, hi1 = _range1(dst, lo, hi, call)
    _enter(dst)
    got = local_data.local_patch(dst, (lo,), (hi1,)) if hi1 > lo else None
    res = None
    if got is not None:
        view, plo, phi = got
        end = phi[0]  # this block's values depend on the range up to its end
        s = _host(transfers.fetch(src, (lo,), (end,)))
        m = _host(transfers.fetch(msk, (lo,), (end,))) != 0
        out, touched = compute(s, m)
        res = out[plo[0] - lo:], touched[plo[0] - lo:]
    if msk is dst:
        _barrier(dst)
    if got is not None:
        view = got[0]
        xp = buffers.xp_of(dst)
        vals, sel = res
        if sel.all():
            view[...] = _as_xp(vals, xp)
        elif sel.any():
            idx = np.flatnonzero(sel)
            view[_as_xp(idx, xp)] = _as_xp(vals[idx], xp)
        _done(xp)
    _leave(dst)


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
    got = local_data.local_patch(msk, (lo,), (hi1,)) if hi1 > lo else None
    mine = 0
    if got is not None:
        mine = int(_host(buffers.xp_of(msk).count_nonzero(got[0])))
    return sum(groups.group_comm(msk).allgather(mine))


def pack(g_src, g_dst, g_msk, lo=None, hi=None) -> int:
    """Copy the elements ``src[i]``, ``lo <= i <= hi`` (inclusive), whose ``msk[i]`` is non-zero
    into ``dst[0], dst[1], ...`` in order; returns how many (GA_Pack). Collective."""
    call = "pack"
    src, dst, msk = _arrays(call, g_src, g_dst, g_msk)
    _pack_checks(call, src, dst, msk)
    lo, hi1 = _range1(src, lo, hi, call)
    if msk.dims != src.dims:
        raise ValueError(f"{call}: src and msk differ in length ({src.dims[0]}, {msk.dims[0]})")
    _enter(dst)
    count = _count_bits(msk, lo, hi1)
    if count > dst.dims[0]:
        _leave(dst)
        raise ValueError(f"{call}: {count} elements do not fit in dst (length {dst.dims[0]})")
    got = local_data.local_patch(dst, (0,), (count,)) if count else None
    vals = None
    if got is not None:
        view, plo, phi = got
        pos = np.flatnonzero(_host(transfers.fetch(msk, (lo,), (hi1,))) != 0) + lo
        mine = pos[plo[0]:phi[0]]
        part = _host(transfers.fetch(src, (int(mine[0]),), (int(mine[-1]) + 1,)))
        vals = part[mine - mine[0]]
    if dst is src or dst is msk:
        _barrier(dst)
    if got is not None:
        xp = buffers.xp_of(dst)
        got[0][...] = _as_xp(vals, xp)
        _done(xp)
    _leave(dst)
    return count


def unpack(g_src, g_dst, g_msk, lo=None, hi=None) -> int:
    """The inverse of :func:`pack`: ``dst[i] = src[k]`` for the ``k``-th ``i``, ``lo <= i <= hi``
    (inclusive), whose ``msk[i]`` is non-zero; other elements stay. Returns how many
    (GA_Unpack). Collective."""
    call = "unpack"
    src, dst, msk = _arrays(call, g_src, g_dst, g_msk)
    _pack_checks(call, src, dst, msk)
    lo, hi1 = _range1(dst, lo, hi, call)
    if msk.dims != dst.dims:
        raise ValueError(f"{call}: dst and msk differ in length ({dst.dims[0]}, {msk.dims[0]})")
    _enter(dst)
    count = _count_bits(msk, lo, hi1)
    if count > src.dims[0]:
        _leave(dst)
        raise ValueError(f"{call}: {count} elements wanted from src (length {src.dims[0]})")
    got = local_data.local_patch(dst, (lo,), (hi1,)) if hi1 > lo else None
    work = None
    if got is not None:
        view, plo, phi = got
        m = _host(transfers.fetch(msk, (lo,), (phi[0],))) != 0
        k0 = int(m[:plo[0] - lo].sum())
        sel = np.flatnonzero(m[plo[0] - lo:])
        if sel.size:
            work = sel, _host(transfers.fetch(src, (k0,), (k0 + sel.size,)))
    if dst is src or dst is msk:
        _barrier(dst)
    if work is not None:
        xp = buffers.xp_of(dst)
        sel, vals = work
        got[0][_as_xp(sel, xp)] = _as_xp(vals, xp)
        _done(xp)
    _leave(dst)
    return count


def _pack_checks(call: str, src, dst, msk) -> None:
    _same_type(call, src, dst)
    for x in (src, dst, msk):
        if x.ndim != 1:
            raise ValueError(f"{call}: only 1-D arrays (array {x.handle} has {x.ndim} dimensions)")


# --- message passing: gop and brdcst --------------------------------------------------------------
_GOPS = ("+", "*", "max", "min", "absmax", "absmin", "or")


def _gop(comm, X, op, call: str):
    MPI = state.mpi()
    if isinstance(op, bytes):
        op = op.decode()
    if op not in _GOPS:
        raise ValueError(f"{call}: unknown operation ({op!r}; one of {', '.join(_GOPS)})")
    x = X if isinstance(X, np.ndarray) else np.asarray(X)
    if not x.flags.c_contiguous:
        raise ValueError(f"{call}: the buffer must be contiguous")
    if x.dtype not in _NUMERIC:
        raise TypeError(f"{call}: type not supported ({x.dtype})")
    if op == "or" and x.dtype.kind != "i":
        raise TypeError(f"{call}: 'or' needs an integer type ({x.dtype})")
    if not x.flags.writeable:
        x = x.copy()
    flat = x.reshape(-1)
    work = flat.view(flat.real.dtype) if x.dtype.kind == "c" and op not in ("+", "*") else flat
    if op in ("absmax", "absmin"):
        np.abs(work, out=work)
    mop = {"+": MPI.SUM, "*": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "absmax": MPI.MAX, "absmin": MPI.MIN,
           "or": MPI.BOR}[op]
    out = np.empty_like(work)
    comm.Allreduce(work, out, op=mop)
    work[...] = out
    return x


def gop(X, op):
    """Reduce ``X`` element-wise over the default group and return it (GA_Igop/Lgop/Fgop/Dgop/
    Cgop/Zgop). Collective.

    ``op``: ``"+"``, ``"*"``, ``"max"``, ``"min"``, ``"absmax"``, ``"absmin"`` (absolute values
    reduced), ``"or"`` (integers). A C-contiguous writable NumPy array of a supported type is
    reduced in place and returned; anything else is converted and the new array returned."""
    return _gop(groups.default_comm(), X, op, "gop")


def gop_add(X):
    """``gop(X, "+")`` (GA_Dgop with "+")."""
    return gop(X, "+")


def gop_multiply(X):
    """``gop(X, "*")`` (GA_Dgop with "*")."""
    return gop(X, "*")


def gop_max(X):
    """``gop(X, "max")`` (GA_Dgop with "max")."""
    return gop(X, "max")


def gop_min(X):
    """``gop(X, "min")`` (GA_Dgop with "min")."""
    return gop(X, "min")


def gop_absmax(X):
    """``gop(X, "absmax")`` (GA_Dgop with "absmax")."""
    return gop(X, "absmax")


def gop_absmin(X):
    """``gop(X, "absmin")`` (GA_Dgop with "absmin")."""
    return gop(X, "absmin")


def _brdcst(comm, buffer, root, call: str):
    x = buffer if isinstance(buffer, np.ndarray) else np.asarray(buffer)
    if not x.flags.c_contiguous:
        raise ValueError(f"{call}: the buffer must be contiguous")
    if not x.flags.writeable:
        x = x.copy()
    root = int(root)
    if not 0 <= root < comm.Get_size():
        raise ValueError(f"{call}: root out of range ({root}, group size {comm.Get_size()})")
    if x.nbytes:
        comm.Bcast(x.reshape(-1).view(np.uint8), root=root)
    return x


def brdcst(buffer, root: int = 0):
    """Broadcast ``buffer``'s bytes from ``root`` over the default group and return the array
    (GA_Brdcst). Collective."""
    return _brdcst(groups.default_comm(), buffer, root, "brdcst")


def _pgroup_comm(pgroup, call: str):
    return groups.member_comm(groups.group_or_default(pgroup, call), call)


def pgroup_gop(pgroup, X, op):
    """:func:`gop` over processor group ``pgroup`` (GA_Pgroup_dgop etc.; -1: the default group)."""
    return _gop(_pgroup_comm(pgroup, "pgroup_gop"), X, op, "pgroup_gop")


def pgroup_gop_add(pgroup, X):
    """``pgroup_gop(pgroup, X, "+")``."""
    return pgroup_gop(pgroup, X, "+")


def pgroup_gop_multiply(pgroup, X):
    """``pgroup_gop(pgroup, X, "*")``."""
    return pgroup_gop(pgroup, X, "*")


def pgroup_gop_max(pgroup, X):
    """``pgroup_gop(pgroup, X, "max")``."""
    return pgroup_gop(pgroup, X, "max")


def pgroup_gop_min(pgroup, X):
    """``pgroup_gop(pgroup, X, "min")``."""
    return pgroup_gop(pgroup, X, "min")


def pgroup_gop_absmax(pgroup, X):
    """``pgroup_gop(pgroup, X, "absmax")``."""
    return pgroup_gop(pgroup, X, "absmax")


def pgroup_gop_absmin(pgroup, X):
    """``pgroup_gop(pgroup, X, "absmin")``."""
    return pgroup_gop(pgroup, X, "absmin")


def pgroup_brdcst(pgroup, buffer, root: int = 0):
    """:func:`brdcst` over processor group ``pgroup`` (GA_Pgroup_brdcst; ``root`` is a rank in it)."""
    return _brdcst(_pgroup_comm(pgroup, "pgroup_brdcst"), buffer, root, "pgroup_brdcst")


# --- ghost cells ---------------------------------------------------------------------------------
def _local_memory(a):
    """The caller's whole window memory (block and ghosts) as an array of ``xp_of(a)``."""
    mem = a.local
    if buffers.is_sim(a):
        from .._device import sim_adapter

        sim_adapter().synchronize()
        mem = mem._arr
    return mem


def _runs(blo: int, bhi: int, w: int, n: int, mlo: int, mhi: int) -> list:
    """Positions ``[mlo, mhi)`` of one dimension of the local memory (block ``[blo, bhi)`` with
    ``w`` ghosts a side) as runs ``(mstart, gstart, length, inside)``: the global indices they
    shadow, wrapped modulo ``n``, are consecutive in a run; ``inside``: the block itself."""
    out = []
    for m in range(mlo, mhi):
        g = (blo - w + m) % n
        inside = w <= m < w + (bhi - blo)
        if out and out[-1][1] + out[-1][2] == g and out[-1][3] == inside:
            ms, gs, k, ins = out[-1]
            out[-1] = (ms, gs, k + 1, ins)
        else:
            out.append((m, g, 1, inside))
    return out


def _fill_ghosts(a, ranges) -> None:
    """Copy into the caller's memory, for every product of runs but the block itself, the
    visible elements those positions shadow."""
    mem = _local_memory(a)
    xp = buffers.xp_of(a)
    blo, bhi = a.layout.distribution(a.me)
    runs = [_runs(blo[d], bhi[d], a.ghosts[d], a.dims[d], *ranges[d]) for d in range(a.ndim)]
    for combo in itertools.product(*runs):
        if all(r[3] for r in combo):
            continue
        lo = tuple(r[1] for r in combo)
        hi = tuple(r[1] + r[2] for r in combo)
        mem[tuple(slice(r[0], r[0] + r[2]) for r in combo)] = _fetch(a, lo, hi, xp)
    _done(xp)


def update_ghosts(g_a) -> None:
    """Fill every ghost layer of every block from the blocks it shadows, wrapping periodically,
    corners included (GA_Update_ghosts). Collective."""
    a = arr(g_a, "update_ghosts")
    _enter(a)
    if any(a.ghosts) and a.layout.owns(a.me):
        nb = a.layout.local_shape(a.me)
        _fill_ghosts(a, [(0, n + 2 * w) for n, w in zip(nb, a.ghosts)])
    _leave(a)


def update_ghost_dir(g_a, dimension, dir, flag) -> None:  # noqa: A002 (ga4py's name)
    """Fill the ghost layer on side ``dir`` (-1: low, +1: high) of dimension ``dimension``
    (0-based, C order), wrapping periodically; with ``flag`` the other dimensions' ghost layers
    along it too (corners) (NGA_Update_ghosts_dir). Collective."""
    call = "update_ghost_dir"
    a = arr(g_a, call)
    dimension, dir = int(dimension), int(dir)
    if not 0 <= dimension < a.ndim:
        raise ValueError(f"{call}: dimension out of range ({dimension}, {a.ndim} dimensions)")
    if dir not in (-1, 1):
        raise ValueError(f"{call}: dir must be -1 or +1 ({dir})")
    _enter(a)
    if a.ghosts[dimension] and a.layout.owns(a.me):
        nb = a.layout.local_shape(a.me)
        ranges = []
        for d, (n, w) in enumerate(zip(nb, a.ghosts)):
            if d == dimension:
                ranges.append((0, w) if dir < 0 else (w + n, n + 2 * w))
            else:
                ranges.append((0, n + 2 * w) if flag else (w, w + n))
        _fill_ghosts(a, ranges)
    _leave(a)


update_ghosts_dir = update_ghost_dir


# --- printing ------------------------------------------------------------------------------------
def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _fmt(x) -> str:
    return np.format_float_positional(x, trim="-") if isinstance(x, np.floating) else str(x)


def print_patch(g_a, lo=None, hi=None, pretty=True) -> None:
    """Print the patch ``[lo, hi)`` from process 0 of the array's group (NGA_Print_patch).
    Collective.

    ``pretty``: a header ``array <handle> "<name>" <type> [lo, hi)``, then one line per row of
    the last dimension, led by the row's global subscript; otherwise the bare values, one row a
    line."""
    a = arr(g_a, "print_patch")
    lo, hi = buffers.patch_bounds(a, lo, hi, "print_patch")
    _enter(a)
    if a.me == 0:
        vals = _host(transfers.fetch(a, lo, hi))
        lines = []
        if pretty:
            lines.append(f'array {a.handle} "{a.name}" {_tname(a)} [{list(lo)}, {list(hi)})')
        rows = vals.reshape(-1, vals.shape[-1]) if vals.size else np.zeros((0, 0), a.dtype)
        lead = list(itertools.product(*[range(l, h) for l, h in zip(lo[:-1], hi[:-1])]))
        for idx, row in zip(lead, rows):
            text = " ".join(_fmt(x) for x in row)
            lines.append(f"{list(idx) + [lo[-1]]}: {text}" if pretty else text)
        _out("\n".join(lines) + "\n")
    _leave(a)


def print_stdout(g_a) -> None:
    """Print the whole array from process 0 (GA_Print; ga4py's ``print_stdout``). Collective."""
    print_patch(g_a, None, None, True)


def print_distribution(g_a) -> None:
    """Print which process owns which block, from process 0 of the array's group
    (GA_Print_distribution). Collective."""
    a = arr(g_a, "print_distribution")
    _enter(a)
    if a.me == 0:
        lines = [f'array {a.handle} "{a.name}" {_tname(a)} dims {list(a.dims)} grid {list(a.layout.grid)}']
        for p in range(a.group.size):
            lo, hi = a.layout.distribution(p)
            lines.append(f"  proc {p}: " + (f"[{list(lo)}, {list(hi)})" if a.layout.owns(p) else "owns nothing"))
        _out("\n".join(lines) + "\n")
    _leave(a)


def summarize(verbose) -> None:
    """Print the live arrays (handle, name, type, dims; ``verbose``: also ghosts, memory kind and
    group) from process 0 of the default group (GA_Summarize)."""
    st = state.S
    if not st.initialized or groups.nodeid() != 0:
        return
    lines = [f"GA summary: {sum(1 for x in st.arrays.values() if x.allocated)} array(s)"]
    for h in sorted(st.arrays):
        x = st.arrays[h]
        if not x.allocated:
            continue
        text = f'  array {h} "{x.name}" {_tname(x)} dims {list(x.dims)}'
        if verbose:
            text += f" ghosts {list(x.ghosts)} memory {x.memory} group {x.group.handle} grid {list(x.layout.grid)}"
        lines.append(text)
    _out("\n".join(lines) + "\n")
