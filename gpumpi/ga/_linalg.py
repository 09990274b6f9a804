"""Solvers and eigensolvers on global arrays (GA's third-party interfaces, Manual §6.3) (L6).

Theory of operation
===================
GA hands these to ScaLAPACK and PeIGS; gpumpi gathers the operands on the group's first
process, solves there with NumPy (``numpy.linalg``: Cholesky, LU by ``solve``, ``eigh``), puts
the results back with one-sided puts, and broadcasts the return code (and eigenvalues) so
every member returns the same.  That is exact and simple, and bounded by one process's
memory and speed: the right tool for the moderate matrices GA programs solve on the side, not
for distributed dense linear algebra.  Device arrays are gathered to the host the same way.

Return codes follow GA: ``llt_solve`` and ``spd_invert`` return 0 on success and, for a
matrix that is not positive definite, the order of the leading minor that is not (LAPACK's
``info``; NumPy does not report it, so it is found by trying the leading minors); ``solve``
returns 0 when Cholesky was used and 1 when it fell back to LU.  A singular matrix in
``lu_solve`` or in ``solve``'s fallback raises ``numpy.linalg.LinAlgError`` on every member.
"""

from __future__ import annotations

import numpy as np

from .groups import group_comm
from .handles import arr
from .synchronization import sync_in, sync_out
from .transfers import fetch, store


def _square(g_a, call: str):
    a = arr(g_a, call)
    if a.ndim != 2 or a.dims[0] != a.dims[1]:
        raise ValueError(f"{call}: a square 2-D array is required ({list(a.dims)})")
    if a.dtype.kind not in "fc":
        raise TypeError(f"{call}: floating or complex arrays only ({a.dtype})")
    return a


def _whole(a):
    x = fetch(a, (0,) * a.ndim, a.dims)
    return x if isinstance(x, np.ndarray) else x.get()


def _on_root(arrays, call: str, work):
    """Run ``work(*whole arrays)`` on the group's first process; every member gets its result
    (or the exception it raised)."""
    comm = group_comm(arrays[0])
    sync_in()
    out = err = None
    if comm.Get_rank() == 0:
        try:
            out = work(*[_whole(a) for a in arrays])
        except Exception as e:  # noqa: BLE001 -- re-raised on every member below
            err = e
    out, err = comm.bcast((out, err), 0)
    sync_out()
    if err is not None:
        raise err
    return out


def _chol_info(m) -> int:
    """LAPACK's ``info`` for a failed Cholesky: the order of the first leading minor that is not
    positive definite."""
    for k in range(1, m.shape[0] + 1):
        try:
            np.linalg.cholesky(m[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return 0


def llt_solve(g_a, g_b) -> int:
    """Solve ``A X = B`` for symmetric positive definite ``A`` by Cholesky; ``B`` becomes ``X``
    (GA_Llt_solve). 0, or the order of the leading minor of ``A`` that is not positive definite."""
    a = _square(g_a, "llt_solve")
    b = arr(g_b, "llt_solve")

    def work(A, B):
        try:
            L = np.linalg.cholesky(A)
        except np.linalg.LinAlgError:
            return _chol_info(A)
        y = np.linalg.solve(L, B.reshape(A.shape[0], -1))
        store(b, np.linalg.solve(L.conj().T, y).reshape(B.shape).astype(b.dtype), (0,) * b.ndim, b.dims)
        return 0

    return _on_root([a, b], "llt_solve", work)


def lu_solve(g_a, g_b, trans: bool = False) -> None:
    """Solve ``op(A) X = B`` (``op``: transpose if ``trans``) by LU; ``B`` becomes ``X`` (GA_Lu_solve)."""
    a = _square(g_a, "lu_solve")
    b = arr(g_b, "lu_solve")

    def work(A, B):
        M = A.T if trans else A
        store(b, np.linalg.solve(M, B.reshape(A.shape[0], -1)).reshape(B.shape).astype(b.dtype),
                    (0,) * b.ndim, b.dims)

    _on_root([a, b], "lu_solve", work)


def solve(g_a, g_b) -> int:
    """Solve ``A X = B``: Cholesky if ``A`` is positive definite (returns 0), else LU (returns 1);
    ``B`` becomes ``X`` (GA_Solve)."""
    a = _square(g_a, "solve")
    b = arr(g_b, "solve")

    def work(A, B):
        rhs = B.reshape(A.shape[0], -1)
        try:
            L = np.linalg.cholesky(A)
            x, used = np.linalg.solve(L.conj().T, np.linalg.solve(L, rhs)), 0
        except np.linalg.LinAlgError:
            x, used = np.linalg.solve(A, rhs), 1
        store(b, x.reshape(B.shape).astype(b.dtype), (0,) * b.ndim, b.dims)
        return used

    return _on_root([a, b], "solve", work)


def spd_invert(g_a) -> int:
    """Replace symmetric positive definite ``A`` by its inverse (GA_Spd_invert): 0, or the order
    of the leading minor that is not positive definite (``A`` unchanged)."""
    a = _square(g_a, "spd_invert")

    def work(A):
        try:
            L = np.linalg.cholesky(A)
        except np.linalg.LinAlgError:
            return _chol_info(A)
        Li = np.linalg.inv(L)
        store(a, (Li.conj().T @ Li).astype(a.dtype), (0, 0), a.dims)
        return 0

    return _on_root([a], "spd_invert", work)


def _evalues(evalues, n: int, dt):
    if evalues is None:
        return np.empty(n, np.dtype(dt).type(0).real.dtype)
    ev = np.asarray(evalues)
    if ev.ndim != 1 or ev.size < n:
        raise ValueError(f"diag: evalues must be 1-D with at least {n} elements ({ev.shape})")
    return ev


def diag(g_a, g_s, g_v, evalues=None):
    """All eigenpairs of ``A v = lambda S v`` (A symmetric, S symmetric positive definite),
    eigenvalues ascending into ``evalues`` (returned), eigenvectors as the columns of ``V``
    (GA_Diag).  ``A`` and ``S`` are unchanged."""
    a = _square(g_a, "diag")
    s = _square(g_s, "diag")
    v = _square(g_v, "diag")
    ev = _evalues(evalues, a.dims[0], a.dtype)

    def work(A, S, V):
        L = np.linalg.cholesky(S)
        Li = np.linalg.inv(L)
        w, y = np.linalg.eigh(Li @ A @ Li.conj().T)
        store(v, (Li.conj().T @ y).astype(v.dtype), (0, 0), v.dims)
        return w

    w = _on_root([a, s, v], "diag", work)
    ev[: w.size] = w
    return ev


def diag_reuse(control, g_a, g_s, g_v, evalues=None):
    """GA_Diag_reuse: :func:`diag` (the factorization of ``S`` is not kept between calls here,
    so ``control`` changes nothing but is checked: 0 first call, >0 reuse, <0 free)."""
    int(control)
    return diag(g_a, g_s, g_v, evalues)


def diag_std(g_a, g_v, evalues=None):
    """All eigenpairs of symmetric ``A`` (GA_Diag_std): eigenvalues ascending (returned),
    eigenvectors as the columns of ``V``; ``A`` unchanged."""
    a = _square(g_a, "diag_std")
    v = _square(g_v, "diag_std")
    ev = _evalues(evalues, a.dims[0], a.dtype)

    def work(A, V):
        w, y = np.linalg.eigh(A)
        store(v, y.astype(v.dtype), (0, 0), v.dims)
        return w

    w = _on_root([a, v], "diag_std", work)
    ev[: w.size] = w
    return ev
