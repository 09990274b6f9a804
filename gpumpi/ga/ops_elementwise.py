"""Global Arrays element-wise operations: in place (``fill``, ``scale``...), across arrays (``copy``, ``add``...) (L6).

Theory of operation
===================
The in-place operations are owner computes at its simplest: each process changes the part
of the patch in its own block, through its view, with no communication but the operation's
syncs.  The operations across arrays write ``C[clo:chi] = f(A[alo:ahi], B[blo:bhi], ...)``
by the owners of ``C``'s patch, from the source elements that match each owned part in C
order (:func:`gpumpi.ga.ops_common.elementwise`; aliasing, scalars and types as described
there).  ``randomize`` draws each block on its owner from NumPy's ``default_rng`` seeded with
the rank and the time.

Choices where GA's source, its manual and ga4py differ, are silent, or fall short:

* ``elem_divide`` and ``recip`` by zero give IEEE results (NumPy's ``inf``/``nan``) for
  floating types; integer division truncates toward zero, as C does, and gives 0 for a zero
  divisor (GA calls ``ga_error``; the manual promises ``GA_NEGATIVE_INFINITY``);
* ``elem_maximum``/``elem_minimum`` on complex arrays follow the manual: ``c.real`` is the
  larger (smaller) modulus, ``c.imag`` 0 (GA's source keeps the whole element of larger or
  smaller modulus instead);
* ``copy`` between disjoint patches of one array is allowed, as GA's source does (the manual
  forbids copies within one array); overlapping patches raise :class:`GAError`.
"""

from __future__ import annotations

import time

import numpy as np

from ._layout import intersect
from .buffers import patch_bounds, xp_of
from .handles import arr
from .local_data import local_patch
from .ops_common import (
    arrays_of,
    as_scalar,
    as_xp,
    check_sizes,
    elementwise,
    finish_writes,
    op_patch,
    patches_given,
    same_type,
)
from .state import GAError
from .synchronization import enter_op, leave_op

__all__ = [
    "abs_value", "add", "add_constant", "copy", "elem_divide", "elem_maximum", "elem_minimum", "elem_multiply",
    "fill", "median", "randomize", "recip", "scale", "zero",
]


# --- whole arrays and patches: in place ------------------------------------------------------------
def _in_place(g_a, lo, hi, call: str, fn, check=None) -> None:
    a = arr(g_a, call)
    lo, hi = patch_bounds(a, lo, hi, call)
    args = check(a) if check is not None else ()
    enter_op(a)
    got = local_patch(a, lo, hi)
    if got is not None:
        xp = xp_of(a)
        fn(got[0], xp, *args)
        finish_writes(xp)
    leave_op(a)


def zero(g_a, lo=None, hi=None) -> None:
    """Set the array, or the patch ``[lo, hi)``, to zero (GA_Zero / NGA_Zero_patch). Collective."""
    def fn(v, xp):
        v[...] = 0
    _in_place(g_a, lo, hi, "zero", fn)


def fill(g_a, value, lo=None, hi=None) -> None:
    """Set every element of the array or patch to ``value`` (GA_Fill / NGA_Fill_patch). Collective."""
    def fn(v, xp, val):
        v[...] = val
    _in_place(g_a, lo, hi, "fill", fn, lambda a: (as_scalar(a, value, "fill", "value"),))


def scale(g_a, value, lo=None, hi=None) -> None:
    """Multiply the array or patch by ``value`` (GA_Scale / NGA_Scale_patch). Collective."""
    def fn(v, xp, val):
        v *= val
    _in_place(g_a, lo, hi, "scale", fn, lambda a: (as_scalar(a, value, "scale", "value"),))


def add_constant(g_a, alpha, lo=None, hi=None) -> None:
    """Add ``alpha`` to every element of the array or patch (GA_Add_constant /
    GA_Add_constant_patch). Collective."""
    def fn(v, xp, val):
        v += val
    _in_place(g_a, lo, hi, "add_constant", fn, lambda a: (as_scalar(a, alpha, "add_constant", "alpha"),))


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
    v = as_scalar(a, val, "randomize", "val", default=1)
    if a.dtype.kind in "iu" and v < 1:
        raise ValueError(f"randomize: val must be at least 1 for an integer array ({val!r})")
    enter_op(a)
    got = local_patch(a, (0,) * a.ndim, a.dims)
    if got is not None:
        view = got[0]
        xp = xp_of(a)
        rng = np.random.default_rng([a.me, time.time_ns() & 0xFFFFFFFFFFFF])
        shape = tuple(view.shape)
        if a.dtype.kind in "iu":
            out = rng.integers(0, int(v), shape)
        elif a.dtype.kind == "c":
            hi_r, hi_i = (v.real, v.imag) if np.iscomplexobj(np.asarray(val)) else (v.real, v.real)
            out = rng.random(shape) * hi_r + 1j * (rng.random(shape) * hi_i)
        else:
            out = rng.random(shape) * float(v)
        view[...] = as_xp(out.astype(a.dtype), xp)
        finish_writes(xp)
    leave_op(a)


def copy(g_a, g_b, alo=None, ahi=None, blo=None, bhi=None, trans=False) -> None:
    """``B = A``, or ``B[blo:bhi] = op(A[alo:ahi])`` with ``op`` the transpose (dimensions reversed)
    when ``trans`` (GA_Copy / NGA_Copy_patch). Collective.

    The two need one type and as many elements; shapes may differ (element ``k`` of ``A`` in C
    order goes to element ``k`` of ``B``).  The whole-array form ignores ``trans`` (ga4py).  A
    patch copy within one array is allowed between disjoint patches; overlapping patches, and
    the whole-array copy of an array onto itself, raise :class:`GAError` (GA's rule)."""
    call = "copy"
    a, b = arrays_of(call, g_a, g_b)
    whole = not patches_given(alo, ahi, blo, bhi)
    if whole:
        trans = False
    src = op_patch(a, alo, ahi, trans, call)
    dst = op_patch(b, blo, bhi, False, call)
    if a is b and (whole or intersect(src.lo, src.hi, dst.lo, dst.hi) is not None):
        where = "" if whole else f", patches {list(src.lo)}..{list(src.hi)} and {list(dst.lo)}..{list(dst.hi)} overlap"
        raise GAError(f"{call}: source and destination are the same array (array {a.handle}{where})")
    same_type(call, a, b)
    check_sizes(call, src, dst)
    elementwise(call, dst, dst.lo, dst.hi, [src], lambda x, xp: x)


def _three(call, g_a, g_b, g_c, alo, ahi, blo, bhi, clo, chi, fn, extra=None) -> None:
    a, b, c = arrays_of(call, g_a, g_b, g_c)
    same_type(call, a, b, c)
    pa, pb, pc = (op_patch(x, lo, hi, False, call) for x, lo, hi in ((a, alo, ahi), (b, blo, bhi), (c, clo, chi)))
    check_sizes(call, pa, pb, pc)
    args = extra(a) if extra is not None else ()
    elementwise(call, pc, pc.lo, pc.hi, [pa, pb], lambda x, y, xp: fn(x, y, xp, *args))


def add(g_a, g_b, g_c, alpha=None, beta=None, alo=None, ahi=None, blo=None, bhi=None, clo=None, chi=None) -> None:
    """``C = alpha A + beta B`` on the arrays or patches (GA_Add / NGA_Add_patch). Collective.

    ``alpha`` and ``beta`` default to 1 and take ``A``'s type; ``C`` may be ``A`` or ``B``."""
    def extra(a):
        return as_scalar(a, alpha, "add", "alpha", default=1), as_scalar(a, beta, "add", "beta", default=1)

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
    a, b, c, m = arrays_of(call, g_a, g_b, g_c, g_m)
    same_type(call, a, b, c, m)
    ps = [op_patch(x, lo, hi, False, call)
          for x, lo, hi in ((a, alo, ahi), (b, blo, bhi), (c, clo, chi), (m, mlo, mhi))]
    check_sizes(call, *ps)
    elementwise(call, ps[3], ps[3].lo, ps[3].hi, ps[:3], _median3)
