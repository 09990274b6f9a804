"""Communicator calls (gpumpi.comm): Bcast's checks against the root's message, at 1-4 ranks."""

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, run_ranks

pytestmark = pytest.mark.timeout(120)


def _bcast_mismatch(bad, size, root):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    want = np.arange(size, dtype="d")
    if r == bad:
        buf = [np.zeros(2 * size, "i"), MPI.INT]  # the same bytes, another type
    else:
        buf = [want.copy() if r == root else np.zeros(size), MPI.DOUBLE]
    try:
        c.Bcast(buf, root)
    except MPI.Exception as e:
        return e.Get_error_class(), str(e)
    assert (buf[0] == want).all()
    return "ok"


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("size", [4, 100_000])  # eager and rendezvous
def test_bcast_type_mismatch_raises_on_that_rank_only_and_hangs_nobody(n, size):
    """A rank whose type differs from the root's raises ERR_TYPE; a rank with children in the
    tree forwarded nothing and its subtree waited forever."""
    for root in range(n):
        for bad in range(n):
            if bad == root:
                continue
            got = run_ranks(_bcast_mismatch, n, timeout=60, args=(bad, size, root))
            for r, res in enumerate(got):
                if r == bad:
                    assert res[0] == 3 and "Bcast: type signature mismatch" in res[1], res  # ERR_TYPE
                    assert "f8" in res[1] and "i4" in res[1], res
                else:
                    assert res == "ok", (root, bad, r, res)


def _bcast_size_mismatch(bad, root):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    buf = np.arange(8.0) if r == root else np.zeros(4 if r == bad else 8)
    try:
        c.Bcast(buf, root)
    except MPI.Exception as e:
        return e.Get_error_class()
    return "ok"


@pytest.mark.parametrize("n", WORLD_SIZES[1:])
def test_bcast_truncation_raises_and_hangs_nobody(n):
    from gpumpi import MPI

    for bad in range(1, n):
        got = run_ranks(_bcast_size_mismatch, n, timeout=60, args=(bad, 0))
        assert got[bad] == MPI.ERR_TRUNCATE
        assert got[0] == "ok"
