"""Requests (gpumpi.request): argument checking of the completion calls, at 1-3 ranks."""

import numpy as np
import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(90)

MULTI = ["Waitall", "Testall", "Get_status_all", "Waitany", "Testany", "Get_status_any", "Waitsome", "Testsome",
         "Get_status_some"]


def _bad_request_lists():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for name in MULTI:
        fn = getattr(MPI.Request, name)
        for bad, what in (([None], "item 0 is NoneType"), ([MPI.REQUEST_NULL, 5], "item 1 is int"),
                          (7, "(int)")):
            with pytest.raises(TypeError) as info:
                fn(bad)
            assert str(info.value).startswith(f"Request.{name}: expected a sequence of "), info.value
            assert what in str(info.value)
    # a pending receive survives a bad call and completes afterwards
    b = np.zeros(4)
    req = c.Irecv(b, (r - 1) % n, 6)
    with pytest.raises(TypeError, match="^Request.Waitall"):
        MPI.Request.Waitall([req, None])
    with pytest.raises(TypeError, match="^Request.Waitall: statuses must hold Status objects"):
        MPI.Request.Waitall([req], ["bogus"])
    with pytest.raises(TypeError, match="^Request.Waitany: status must be a Status or None"):
        MPI.Request.Waitany([req], "bogus")
    with pytest.raises(TypeError, match="^Request.Wait: status must be a Status or None"):
        req.Wait("bogus")
    c.Send(np.arange(4.0), (r + 1) % n, 6)
    sts = [MPI.Status()]
    MPI.Request.Waitall([req], sts)
    assert (b == np.arange(4.0)).all() and sts[0].Get_source() == (r - 1) % n
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_multi_completion_calls_name_themselves_on_bad_lists(n):
    """Waitall([None]) raised AttributeError; every Wait*/Test*/Get_status* form now raises a
    TypeError naming the call, and checks its statuses before completing anything."""
    assert run_ranks(_bad_request_lists, n, timeout=60) == [True] * n


def _startall_is_all_or_nothing():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    a, b = np.arange(4.0), np.zeros(4)
    s = c.Send_init(a, (r + 1) % n, 7)
    rv = c.Recv_init(b, (r - 1) % n, 7)
    plain = c.Isend(a, (r + 1) % n, 8)
    for bad, exc, text in (([s, None], TypeError, "expected a sequence of Prequest objects (item 1 is NoneType)"),
                           ([s, plain], TypeError, "item 1 is Request"),
                           ([s, s], MPI.Exception, "more than once")):
        with pytest.raises(exc) as info:
            MPI.Prequest.Startall(bad)
        assert str(info.value).startswith("Prequest.Startall: ") and text in str(info.value), info.value
        assert not s._x  # nothing was started
    freed = c.Send_init(a, (r + 1) % n, 9)
    freed.Free()
    with pytest.raises(MPI.Exception) as info:
        MPI.Prequest.Startall([s, freed])
    assert info.value.Get_error_class() == MPI.ERR_REQUEST and not s._x
    MPI.Prequest.Startall([rv, s])
    with pytest.raises(MPI.Exception) as info:
        MPI.Prequest.Startall([s])  # already active
    assert info.value.Get_error_class() == MPI.ERR_REQUEST
    MPI.Request.Waitall([rv, s])
    assert (b == a).all()
    plain.Wait()
    c.Recv(np.zeros(4), (r - 1) % n, 8)
    s.Free()
    rv.Free()
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_startall_checks_every_request_before_starting_any(n):
    """Startall([req, None]) started req, then raised AttributeError."""
    assert run_ranks(_startall_is_all_or_nothing, n, timeout=60) == [True] * n


def _pready_checks_every_partition_first():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    a = np.arange(8.0) + r
    b = np.zeros(8)
    ps = c.Psend_init(a, 4, (r + 1) % n, 3)
    pr = c.Precv_init(b, 4, (r - 1) % n, 3)
    MPI.Prequest.Startall([pr, ps])
    for f, exc, text in ((lambda: ps.Pready_list([0, 9]), MPI.Exception, "out of range (9"),
                         (lambda: ps.Pready_list([1, 1]), MPI.Exception, "already marked ready (1)"),
                         (lambda: ps.Pready_range(2, 1), MPI.Exception, "empty range"),
                         (lambda: ps.Pready_range(3, 4), MPI.Exception, "out of range (4"),
                         (lambda: ps.Pready("0"), TypeError, "partition must be an integer (str)"),
                         (lambda: ps.Pready_list(5), TypeError, "expected a sequence of partitions (int)")):
        with pytest.raises(exc) as info:
            f()
        assert text in str(info.value), info.value
    assert not any(ps._ready)  # nothing left with a refused call
    c.Barrier()
    assert not pr.Parrived(0) and not pr.Parrived(1)
    c.Barrier()
    ps.Pready_range(0, 3)
    MPI.Request.Waitall([ps, pr])
    assert (b == np.arange(8.0) + (r - 1) % n).all()
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_pready_checks_every_partition_before_sending_any(n):
    """Pready_list([0, 9]) sent partition 0 and then raised; Pready_range(2, 1) did nothing
    silently (MPICH: an error)."""
    assert run_ranks(_pready_checks_every_partition_first, n, timeout=60) == [True] * n
