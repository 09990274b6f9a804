"""gpumpi.ga's solvers and eigensolvers (ga/_linalg) against NumPy, at 1-3 ranks; and the P2
features gpumpi does not provide raise NotImplementedError saying why."""

import numpy as np
import pytest

from gpumpi.testing import run_ranks


def _body():
    from gpumpi import ga

    me = ga.nodeid()
    n = 6
    rng = np.random.default_rng(5)
    M = rng.standard_normal((n, n))
    spd = M @ M.T + n * np.eye(n)
    sym = M + M.T
    rhs = rng.standard_normal((n, 3))
    A, B, S, V = (ga.create(ga.C_DBL, (n, n)) for _ in range(4))
    X = ga.create(ga.C_DBL, (n, 3))
    res = {}

    def load(g, value):
        ga.sync()  # (everyone is done reading it)
        if me == 0:
            ga.put(g, value)
        ga.sync()

    load(A, spd)
    load(X, rhs)
    res["llt"] = ga.llt_solve(A, X)
    res["llt_ok"] = bool(np.allclose(spd @ ga.get(X), rhs))
    load(A, -spd)  # not positive definite at the first minor
    load(X, rhs)
    res["llt_bad"] = ga.llt_solve(A, X)
    res["llt_bad_unchanged"] = bool(np.array_equal(ga.get(X), rhs))
    load(A, sym)
    load(X, rhs)
    res["solve_lu"] = ga.solve(A, X)
    res["solve_lu_ok"] = bool(np.allclose(sym @ ga.get(X), rhs))
    load(A, spd)
    load(X, rhs)
    res["solve_chol"] = ga.solve(A, X)
    load(A, M)
    load(X, rhs)
    ga.lu_solve(A, X, trans=True)
    res["lu_trans_ok"] = bool(np.allclose(M.T @ ga.get(X), rhs))
    load(A, spd)
    res["inv"] = ga.spd_invert(A)
    res["inv_ok"] = bool(np.allclose(ga.get(A) @ spd, np.eye(n)))
    load(A, sym)
    load(S, spd)
    w = ga.diag(A, S, V)
    vec = ga.get(V)
    res["diag_ok"] = bool(np.allclose(sym @ vec, spd @ vec * w) and np.all(np.diff(w) >= 0))
    res["diag_ref"] = bool(np.allclose(w, np.sort(np.linalg.eigvals(np.linalg.solve(spd, sym)).real)))
    ev = np.zeros(n)
    assert ga.diag_reuse(0, A, S, V, ev) is ev
    w2 = ga.diag_std(A, V)
    vec = ga.get(V)
    res["std_ok"] = bool(np.allclose(w2, np.linalg.eigvalsh(sym)) and np.allclose(sym @ vec, vec * w2))
    with pytest.raises(ValueError, match="square"):
        ga.llt_solve(X, X)
    load(A, np.zeros((n, n)))
    with pytest.raises(np.linalg.LinAlgError):
        ga.lu_solve(A, X)
    for name in ("set_block_cyclic", "total_blocks", "access_block", "set_restricted", "register_dtype",
                 "access_ghost_element", "print_file"):
        with pytest.raises(NotImplementedError, match=name):
            getattr(ga, name)(A)
    ga.sync()
    for g in (A, B, S, V, X):
        ga.destroy(g)
    return res


@pytest.mark.parametrize("n", [1, 3])
def test_solvers_and_eigensolvers_match_numpy(n):
    for res in run_ranks(_body, n, timeout=120):
        assert res["llt"] == 0 and res["llt_ok"]
        assert res["llt_bad"] == 1 and res["llt_bad_unchanged"]
        assert res["solve_lu"] == 1 and res["solve_lu_ok"] and res["solve_chol"] == 0
        assert res["lu_trans_ok"] and res["inv"] == 0 and res["inv_ok"]
        assert res["diag_ok"] and res["diag_ref"] and res["std_ok"]
