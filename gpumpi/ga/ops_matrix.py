"""Global Arrays matrix operations: ``transpose``, ``symmetrize``, ``gemm``/``matmul_patch``, diagonals, scaling (L6).

Theory of operation
===================
Owner computes (:mod:`gpumpi.ga.ops_common`): a matrix product is computed by the owners of
``C``'s patch, each fetching the rows of ``op(A)`` and the columns of ``op(B)`` its part needs
and multiplying them locally (NumPy or CuPy ``matmul``); a product into one of its own factors
fetches everything first, then barriers, then writes.  ``transpose`` is a copy with the
source transposed.  The diagonal operations touch the diagonal elements of the caller's
block, fetching the matching part of the vector; ``get_diag`` is computed by the vector's
owners, with a ``gather`` of the diagonal elements.

Choices where GA's source, its manual and ga4py differ, are silent, or fall short:

* ``symmetrize`` takes floating and complex types (GA: double only), integer arrays raise;
* ``transpose`` of an array into itself raises :class:`GAError` (GA's rule).
"""

from __future__ import annotations

import numpy as np

from .buffers import patch_bounds, xp_of
from .handles import arr
from .local_data import local_patch
from .ops_common import (
    FLOATING,
    Patch,
    arrays_of,
    as_scalar,
    as_xp,
    barrier,
    elementwise,
    fetch_as,
    finish_writes,
    same_type,
    type_name,
)
from .state import GAError
from .synchronization import enter_op, leave_op
from .transfers import gather

__all__ = [
    "add_diagonal", "gemm", "get_diag", "matmul_patch", "scale_cols", "scale_rows", "set_diagonal", "shift_diagoal",
    "shift_diagonal", "symmetrize", "transpose", "zero_diagonal",
]


# --- matrices ------------------------------------------------------------------------------------
def _need_2d(call: str, *arrs) -> None:
    for x in arrs:
        if x.ndim != 2:
            raise ValueError(f"{call}: array {x.handle} must be 2-D ({x.ndim} dimensions)")


def transpose(g_a, g_b) -> None:
    """``B = A^T`` for 2-D arrays (GA_Transpose); ``B``'s extents are ``A``'s reversed. Collective."""
    call = "transpose"
    a, b = arrays_of(call, g_a, g_b)
    if a is b:
        raise GAError(f"{call}: the arrays have to be different (array {a.handle})")
    _need_2d(call, a, b)
    same_type(call, a, b)
    if b.dims != a.dims[::-1]:
        raise ValueError(f"{call}: B's extents must be A's reversed (A {list(a.dims)}, B {list(b.dims)})")
    src = Patch(a, (0, 0), a.dims, True, call)
    dst = Patch(b, (0, 0), b.dims, False, call)
    elementwise(call, dst, dst.lo, dst.hi, [src], lambda x, xp: x)


def symmetrize(g_a) -> None:
    """``A = (A + A^T) / 2`` over the last two dimensions, which must be equal (GA_Symmetrize).
    Collective.  Floating and complex types (GA: double only)."""
    call = "symmetrize"
    a = arr(g_a, call)
    if a.ndim < 2 or a.dims[-1] != a.dims[-2]:
        raise ValueError(f"{call}: the last two extents must be equal ({list(a.dims)})")
    if a.dtype not in FLOATING:
        raise TypeError(f"{call}: only floating and complex arrays ({type_name(a)})")
    enter_op(a)
    got = local_patch(a, (0,) * a.ndim, a.dims)
    xp = xp_of(a)
    t = None
    if got is not None:
        view, plo, phi = got
        tlo = plo[:-2] + (plo[-1], plo[-2])
        thi = phi[:-2] + (phi[-1], phi[-2])
        t = xp.swapaxes(fetch_as(a, tlo, thi, xp), -1, -2)
    barrier(a)
    if got is not None:
        view = got[0]
        view[...] = (view + t) * a.dtype.type(0.5)
        finish_writes(xp)
    leave_op(a)


def _mat_types(call: str, a) -> None:
    if a.dtype not in FLOATING:
        raise TypeError(f"{call}: {type_name(a)} not supported")


def gemm(ta, tb, m, n, k, alpha, g_a, g_b, beta, g_c) -> None:
    """``C[:m, :n] = alpha op(A)[:m, :k] op(B)[:k, :n] + beta C[:m, :n]``, ``op`` the transpose
    when ``ta``/``tb`` (GA_Sgemm/Dgemm/Cgemm/Zgemm). Collective.

    ``alpha`` and ``beta`` are required; float32, float64, complex64 and complex128 arrays
    (others: ``TypeError("gemm: C_INT not supported")`` as in ga4py)."""
    call = "gemm"
    a, b, c = arrays_of(call, g_a, g_b, g_c)
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
    a, b, c = arrays_of(call, g_a, g_b, g_c)
    _need_2d(call, a, b, c)
    same_type(call, a, b, c)
    _mat_types(call, a)
    ta, tb = _trans_flag(transa, call), _trans_flag(transb, call)
    al = as_scalar(a, alpha, call, "alpha", default=1)
    be = as_scalar(a, beta, call, "beta", default=1)
    alo, ahi = patch_bounds(a, alo, ahi, call)
    blo, bhi = patch_bounds(b, blo, bhi, call)
    clo, chi = patch_bounds(c, clo, chi, call)
    ar, ac = ahi[0] - alo[0], ahi[1] - alo[1]
    br, bc = bhi[0] - blo[0], bhi[1] - blo[1]
    M, K = (ac, ar) if ta else (ar, ac)
    K2, N = (bc, br) if tb else (br, bc)
    if K != K2 or (chi[0] - clo[0], chi[1] - clo[1]) != (M, N):
        raise ValueError(f"{call}: shapes do not conform (op(A) {M}x{K}, op(B) {K2}x{N}, "
                         f"C {chi[0] - clo[0]}x{chi[1] - clo[1]})")
    enter_op(c)
    got = local_patch(c, clo, chi)
    xp = xp_of(c)
    res = None
    if got is not None:
        view, plo, phi = got
        r0, r1 = plo[0] - clo[0], phi[0] - clo[0]
        c0, c1 = plo[1] - clo[1], phi[1] - clo[1]
        if ta:
            opa = fetch_as(a, (alo[0], alo[1] + r0), (ahi[0], alo[1] + r1), xp).T
        else:
            opa = fetch_as(a, (alo[0] + r0, alo[1]), (alo[0] + r1, ahi[1]), xp)
        if tb:
            opb = fetch_as(b, (blo[0] + c0, blo[1]), (blo[0] + c1, bhi[1]), xp).T
        else:
            opb = fetch_as(b, (blo[0], blo[1] + c0), (bhi[0], blo[1] + c1), xp)
        prod = xp.matmul(opa, opb) if K else xp.zeros((r1 - r0, c1 - c0), c.dtype)
        res = al * prod if be == 0 else al * prod + be * view
    if c is a or c is b:
        barrier(c)
    if got is not None:
        got[0][...] = res
        finish_writes(xp)
    leave_op(c)


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
        a, v = arrays_of(call, g_a, g_v)
        same_type(call, a, v)
        if v.ndim != 1 or v.dims[0] != min(a.dims):
            raise ValueError(f"{call}: the vector must be 1-D of the diagonal's length "
                             f"({list(v.dims)}, diagonal {min(a.dims)})")
    enter_op(a)
    got = local_patch(a, (0, 0), a.dims)
    if got is not None:
        xp = xp_of(a)
        d = _diag(a, got, xp)
        if d is not None:
            ij, i0, i1 = d
            vals = fetch_as(v, (i0,), (i1,), xp) if v is not None else value
            view = got[0]
            view[ij] = fn(view[ij], vals)
            finish_writes(xp)
    leave_op(a)


def zero_diagonal(g_a) -> None:
    """``A_ii = 0`` (GA_Zero_diagonal). Collective."""
    _diag_op(g_a, None, "zero_diagonal", lambda d, v: 0)


def shift_diagoal(g_a, value=None) -> None:
    """``A_ii += value`` (GA_Shift_diagonal; ga4py's misspelled name; ``value`` None: 1). Collective."""
    a = arr(g_a, "shift_diagonal")
    val = as_scalar(a, value, "shift_diagonal", "value", default=1)
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
    a, v = arrays_of(call, g_a, g_v)
    _need_2d(call, a)
    same_type(call, a, v)
    if v.ndim != 1 or v.dims[0] != min(a.dims):
        raise ValueError(f"{call}: the vector must be 1-D of the diagonal's length "
                         f"({list(v.dims)}, diagonal {min(a.dims)})")
    enter_op(v)
    got = local_patch(v, (0,), v.dims)
    if got is not None:
        view, plo, phi = got
        xp = xp_of(v)
        i = np.arange(plo[0], phi[0], dtype=np.int64)
        view[...] = as_xp(gather(a.handle, np.stack([i, i], axis=1)), xp)
        finish_writes(xp)
    leave_op(v)


def _scale_lines(g_a, g_v, call: str, axis: int) -> None:
    a, v = arrays_of(call, g_a, g_v)
    _need_2d(call, a)
    same_type(call, a, v)
    if v.ndim != 1 or v.dims[0] != a.dims[axis]:
        raise ValueError(f"{call}: the vector must be 1-D with one element per {'row' if axis == 0 else 'column'} "
                         f"({list(v.dims)}, array {list(a.dims)})")
    enter_op(a)
    got = local_patch(a, (0, 0), a.dims)
    if got is not None:
        view, plo, phi = got
        xp = xp_of(a)
        s = fetch_as(v, (plo[axis],), (phi[axis],), xp)
        view *= s[:, None] if axis == 0 else s[None, :]
        finish_writes(xp)
    leave_op(a)


def scale_rows(g_a, g_v) -> None:
    """``A_ij *= v_i`` (GA_Scale_rows: rows of the C view). Collective."""
    _scale_lines(g_a, g_v, "scale_rows", 0)


def scale_cols(g_a, g_v) -> None:
    """``A_ij *= v_j`` (GA_Scale_cols: columns of the C view). Collective."""
    _scale_lines(g_a, g_v, "scale_cols", 1)
