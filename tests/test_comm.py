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


def _free_then_complete():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    d = c.Dup()
    b = np.zeros(4)
    req = d.Irecv(b, (r - 1) % n, 1)
    d2 = MPI.Comm(d)  # the sender's handle of the same communicator
    c.Barrier()
    d2.Send(np.arange(4.0) * (r + 1), (r + 1) % n, 1)
    d.Free()
    req.Wait()
    assert (b == np.arange(4.0) * ((r - 1) % n + 1)).all()
    return True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_comm_free_lets_a_pending_receive_complete(n):
    """Comm.Free dropped the communicator's posted receives: a receive posted before Free waited
    forever for a message sent on the communicator."""
    assert run_ranks(_free_then_complete, n, timeout=60) == [True] * n


def _dup_split_argument_checks():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    for call, f in (("Comm.Dup", lambda: MPI.COMM_NULL.Dup()), ("Comm.Split", lambda: MPI.COMM_NULL.Split(0, 0))):
        with pytest.raises(MPI.Exception) as info:
            f()
        assert info.value.Get_error_class() == MPI.ERR_COMM and str(info.value).startswith(call)
    with pytest.raises(TypeError, match=r"^Comm.Split: color must be an integer \(str\)"):
        c.Split("red", 0)
    with pytest.raises(TypeError, match=r"^Comm.Split: key must be an integer \(NoneType\)"):
        c.Split(0, None)
    with pytest.raises(TypeError, match=r"^Comm.Dup: info must be an Info or None \(int\)"):
        c.Dup(5)
    with pytest.raises(TypeError, match=r"^Comm.Dup_with_info: info must be an Info \(NoneType\)"):
        c.Dup_with_info(None)
    # nothing was agreed by the refused calls: the next collective ones still line up
    d = c.Split(c.rank % 2, -c.rank)
    e = c.Dup(MPI.INFO_NULL)
    assert d.size == len(range(c.rank % 2, c.size, 2)) and e.size == c.size
    d.Free()
    e.Free()
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_dup_and_split_check_their_arguments(n):
    """COMM_NULL.Dup() raised AttributeError; Split("red") a ValueError naming no call; Dup(5)
    ignored its info."""
    assert run_ranks(_dup_split_argument_checks, n, timeout=60) == [True] * n
