"""The RMA epoch rules (gpumpi.rma.epochs), against MPI-4.1 section 12.5."""

import pytest

from gpumpi.rma.epochs import FENCE, FENCE_PENDING, LOCK, LOCK_ALL, NONE, PSCW, Epochs
from gpumpi.constants import LOCK_EXCLUSIVE, LOCK_SHARED, MODE_NOPRECEDE, MODE_NOSUCCEED
from gpumpi.errors import ERR_RMA_SYNC
from gpumpi.errors import Exception as MPIException


def sync_error(fn, *args):
    with pytest.raises(MPIException) as ei:
        fn(*args)
    assert ei.value.Get_error_class() == ERR_RMA_SYNC
    return str(ei.value)


def test_no_epoch_no_operation():
    e = Epochs()
    msg = sync_error(e.operation, 0, "Win.Put")
    assert msg.startswith("Win.Put: no access epoch includes target 0")
    sync_error(e.flush, 0, "Win.Flush")
    sync_error(e.flush, None, "Win.Flush_all")
    sync_error(e.unlock, 0)
    sync_error(e.unlock_all)
    sync_error(e.complete)
    sync_error(e.check_wait)


def test_fence_opens_and_nosucceed_closes():
    e = Epochs()
    e.fence(MODE_NOPRECEDE)
    assert e.access == FENCE_PENDING
    e.operation(3, "Win.Put")
    assert e.access == FENCE
    e.fence(0)
    assert e.access == FENCE_PENDING
    e.fence(MODE_NOSUCCEED)
    assert e.access == NONE
    sync_error(e.operation, 0, "Win.Get")


def test_pending_fence_gives_way_but_used_fence_does_not():
    e = Epochs()
    e.fence(0)
    e.lock(1, LOCK_SHARED)  # mpi4py's tests lock right after a fence
    assert e.access == LOCK
    e.unlock(1)
    assert e.access == NONE
    e.fence(0)
    e.operation(0, "Win.Put")
    sync_error(e.lock, 1, LOCK_EXCLUSIVE)
    sync_error(e.lock_all)
    sync_error(e.start, [1])
    sync_error(e.post, [1])
    assert e.access == FENCE  # failed calls change nothing


def test_lock_epochs():
    e = Epochs()
    e.lock(0, LOCK_EXCLUSIVE)
    e.lock(2, LOCK_SHARED)
    assert e.exclusive == frozenset({0})
    e.operation(0, "Win.Put")
    e.operation(2, "Win.Put")
    sync_error(e.operation, 1, "Win.Put")
    e.flush(2)
    e.flush(None)
    sync_error(e.flush, 1)
    sync_error(e.lock, 0, LOCK_SHARED)  # already locked
    sync_error(e.fence, 0)  # fence inside a lock epoch
    sync_error(e.lock_all)
    sync_error(e.free)
    assert e.unlock(0) == LOCK_EXCLUSIVE
    assert e.unlock(2) == LOCK_SHARED
    assert e.access == NONE
    e.free()


def test_lock_all_epoch():
    e = Epochs()
    e.lock_all()
    assert e.access == LOCK_ALL
    for t in range(4):
        e.operation(t, "Win.Get")
        e.flush(t)
    sync_error(e.lock, 0, LOCK_SHARED)
    sync_error(e.unlock, 0)
    sync_error(e.lock_all)
    e.unlock_all()
    sync_error(e.unlock_all)


def test_pscw():
    e = Epochs()
    e.post([1, 2])
    sync_error(e.post, [1])  # one exposure epoch at a time
    e.start([2])  # access and exposure may overlap
    assert e.access == PSCW
    e.operation(2, "Win.Put")
    sync_error(e.operation, 1, "Win.Put")
    sync_error(e.fence, 0)
    sync_error(e.free)
    assert e.complete() == frozenset({2})
    assert e.check_wait() == frozenset({1, 2})
    e.waited()
    sync_error(e.check_wait)
    e.free()
