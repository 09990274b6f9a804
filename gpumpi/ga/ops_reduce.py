"""Global Arrays reductions to a value: ``dot``, ``norm1``, ``norm_infinity``, ``select_elem``, ``step_max`` (L6).

Theory of operation
===================
Reductions reduce each process's own block locally, then combine over the group
communicator (``allgather`` summed in rank order, so every member gets the same bits, or
``Allreduce``); every member returns the value.  Decisions that depend on data (``step_max``
with a negative element) are agreed before anyone raises.

Choices where GA's source, its manual and ga4py differ, are silent, or fall short:

* ``dot`` on complex arrays does not conjugate (GA's ``zdot``: the sum of ``a * b``);
* ``norm1`` and ``norm_infinity`` give GA's numbers, whose core works in Fortran order: in the
  C view ``norm1`` is the largest row sum of ``|a|`` and ``norm_infinity`` the largest column
  sum (NumPy's ``inf`` and ``1`` matrix norms); for a 1-D array, ``sum |x|`` and ``max |x|``;
* ``select_elem`` on complex arrays returns a Python complex (ga4py: a dict ``real``/``imag``);
  complex elements compare by modulus; ties go to the lowest index in C order;
* ``step_max`` returns ``numpy.finfo(float).max`` when no element bounds the step (GA: 1e307).
"""

from __future__ import annotations

import numpy as np

from .buffers import to_host, xp_of
from .groups import group_comm
from .handles import arr
from .local_data import local_patch
from .ops_common import NUMERIC, arrays_of, check_sizes, matched, op_patch, patches_given, same_type, type_name
from .state import mpi
from .synchronization import enter_op, leave_op

__all__ = [
    "dot", "norm1", "norm_infinity", "select_elem", "select_elem_max", "select_elem_min", "step_max",
]


# --- reductions ----------------------------------------------------------------------------------
def _sum_all(a, x):
    """The sum over the group of each member's ``x``, added in rank order (the same everywhere)."""
    parts = group_comm(a).allgather(x)
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
    a, b = arrays_of(call, g_a, g_b)
    if a.dtype not in NUMERIC:
        raise TypeError(f"dot: type not supported ({type_name(a)})")
    same_type(call, a, b)
    if not patches_given(alo, ahi, blo, bhi):
        ta = tb = False
    pa, pb = op_patch(a, alo, ahi, ta, call), op_patch(b, blo, bhi, tb, call)
    check_sizes(call, pa, pb)
    enter_op(a)
    got = local_patch(a, pa.lo, pa.hi)
    part = a.dtype.type(0)
    if got is not None:
        view, plo, phi = got
        xp = xp_of(a)
        part = to_host(xp.sum(view * matched(pa, plo, phi, pb, xp)))[()]
    total = _pyscalar(a, _sum_all(a, _pyscalar(a, part)))
    leave_op(a)
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
    MPI = mpi()
    a = arr(g_a, call)
    _norm_check(a, call)
    enter_op(a)
    got = local_patch(a, (0,) * a.ndim, a.dims)
    comm = group_comm(a)
    if a.ndim == 1:
        part = np.zeros(1)
        if got is not None:
            v = to_host(xp_of(a).abs(got[0])).astype(np.float64)
            part[0] = v.sum() if axis == 1 else v.max(initial=0.0)
        out = np.empty(1)
        comm.Allreduce(part, out, op=MPI.SUM if axis == 1 else MPI.MAX)
        result = float(out[0])
    else:
        n = a.dims[1 - axis]  # norm1: one sum per row; norm_infinity: one per column
        part = np.zeros(n)
        if got is not None:
            view, plo, phi = got
            v = to_host(xp_of(a).abs(view)).astype(np.float64)
            part[plo[1 - axis]:phi[1 - axis]] = v.sum(axis=axis)
        out = np.empty(n)
        comm.Allreduce(part, out, op=MPI.SUM)
        result = float(out.max())
    leave_op(a)
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
        raise TypeError(f"{call}: type not supported ({type_name(a)})")
    enter_op(a)
    got = local_patch(a, (0,) * a.ndim, a.dims)
    mine = None
    if got is not None:
        view, plo, phi = got
        xp = xp_of(a)
        key = xp.abs(view) if a.dtype.kind == "c" else view
        i = int(to_host(xp.argmin(key) if op == "min" else xp.argmax(key)))
        loc = np.unravel_index(i, tuple(view.shape))
        sub = tuple(int(p + j) for p, j in zip(plo, loc))
        val = to_host(view[loc])[()]
        k = to_host(key[loc])[()]
        mine = (k.item(), sub, _pyscalar(a, val))  # the key as compared here (complex: |z| in its precision)
    best = None
    for cand in group_comm(a).allgather(mine):
        if cand is None:
            continue
        if best is None or (cand[0] < best[0] if op == "min" else cand[0] > best[0]) or \
                (cand[0] == best[0] and cand[1] < best[1]):
            best = cand
    leave_op(a)
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
    a, b = arrays_of(call, g_a, g_b)
    same_type(call, a, b)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{call}: not available for {type_name(a)} arrays")
    pa, pb = op_patch(a, alo, ahi, False, call), op_patch(b, blo, bhi, False, call)
    check_sizes(call, pa, pb)
    huge = float(np.finfo(np.float64).max)
    enter_op(a)
    if a is b:
        leave_op(a)
        return huge
    got = local_patch(a, pa.lo, pa.hi)
    neg, step = 0, np.inf
    if got is not None:
        view, plo, phi = got
        xp = xp_of(a)
        x = to_host(view).astype(np.float64)
        y = to_host(matched(pa, plo, phi, pb, xp)).astype(np.float64)
        neg = int((x < 0).any())
        bound = y < 0
        if bound.any():
            step = float((-x[bound] / y[bound]).min())
    comm = group_comm(a)
    if any(comm.allgather(neg)):
        leave_op(a)
        raise ValueError(f"{call}: array {a.handle} has a negative element in the patch")
    step = min(comm.allgather(step))
    leave_op(a)
    return huge if step == np.inf else step
