"""RMA misuse: every erroneous call raises MPI.Exception with the MPI error class for it (or
ValueError where mpi4py checks the arguments itself), and leaves the window as it was: each
body ends by checking that the window still works and that no erroneous call wrote anything.

Error classes follow the MPI standard.  MPICH 5 under mpi4py agrees on every check it makes;
it does not check the target range, an op not defined for the type (it aborts inside the
reduction), mismatched basic types or request-based operations in a Fence epoch, and reports
a bad lock type as ERR_ARG; the classes below for those are the standard's:

* ERR_RMA_SYNC: an operation or Flush outside an epoch, Unlock(_all) without Lock(_all), a
  second Lock on the same target or Lock_all, Lock inside Lock_all, Fence inside a lock epoch,
  Complete without Start, Wait/Test without Post, a second Start, a target outside the Start
  group, Rput/Rget in a Fence epoch, Free inside an epoch;
* ERR_RMA_RANGE: target bytes outside the target's window (a negative displacement may also
  be ERR_DISP, as MPICH says);
* ERR_RANK, ERR_LOCKTYPE, ERR_OP (an op not defined for the type, a user-defined op, NO_OP in
  Accumulate), ERR_TYPE (Compare_and_swap on a floating type, origin and target of different
  basic types), ERR_RMA_FLAVOR (Attach/Detach/Shared_query where the flavor has none),
  ERR_WIN (a freed window), ERR_SIZE / ERR_DISP (Allocate with a negative size or unit).
"""

import numpy as np
import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(120)
W = 8  # float64 elements per window


def _expect(MPI, classes, call, what, failures=None):
    """Call ``call``; it must raise MPI.Exception of one of ``classes``.  A disagreement is
    appended to ``failures`` (every one is reported at the end of the body) or raised."""
    classes = (classes,) if isinstance(classes, int) else tuple(classes)
    try:
        call()
    except MPI.Exception as e:
        got = e.Get_error_class()
        if got in classes:
            return
        msg = f"{what}: error class {got}, expected one of {classes} ({e})"
    else:
        msg = f"{what}: no error, expected error class(es) {classes}"
    if failures is None:
        raise AssertionError(msg)
    failures.append(msg)


def _report(failures):
    assert not failures, "\n".join(failures)


def _window(MPI, c, flavor):
    if flavor == "allocate":
        win = MPI.Win.Allocate(W * 8, 8, MPI.INFO_NULL, c)
        view = np.frombuffer(win.tomemory(), np.float64)
    else:
        view = np.zeros(W)
        win = MPI.Win.Create(view, 8, MPI.INFO_NULL, c)
    win.Lock(c.rank)
    view[:] = np.arange(W) + 10 * c.rank
    win.Unlock(c.rank)
    c.Barrier()
    return win, view


def _still_works(MPI, c, win, view):
    """The window is unchanged by every erroneous call and still moves data."""
    r, n = c.rank, c.size
    c.Barrier()
    win.Lock(r, MPI.LOCK_SHARED)
    before = view.copy()
    win.Unlock(r)
    assert np.array_equal(before, np.arange(W) + 10 * r), ("an erroneous call wrote", before)
    c.Barrier()
    win.Fence()
    win.Put(np.array([-1.0 - r]), (r + 1) % n, W - 1)
    win.Fence()
    assert view[W - 1] == -1.0 - (r - 1) % n
    win.Free()


# --- synchronization misuse -> ERR_RMA_SYNC ----------------------------------------------------
def _sync_errors(flavor):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt = (r + 1) % n
    win, view = _window(MPI, c, flavor)
    S = MPI.ERR_RMA_SYNC
    x, y = np.zeros(1), np.zeros(1)
    i1, i2, i3 = (np.zeros(1, np.int64) for _ in range(3))
    bad = []
    # operations and flushes outside any epoch
    for what, call in [
        ("Put", lambda: win.Put(x, nxt)),
        ("Get", lambda: win.Get(x, nxt)),
        ("Accumulate", lambda: win.Accumulate(x, nxt, op=MPI.SUM)),
        ("Get_accumulate", lambda: win.Get_accumulate(x, y, nxt)),
        ("Fetch_and_op", lambda: win.Fetch_and_op(x, y, nxt)),
        ("Compare_and_swap", lambda: win.Compare_and_swap(i1, i2, i3, nxt)),
        ("Rput", lambda: win.Rput(x, nxt)),
        ("Rget", lambda: win.Rget(x, nxt)),
        ("Flush", lambda: win.Flush(nxt)),
        ("Flush_all", lambda: win.Flush_all()),
        ("Flush_local", lambda: win.Flush_local(nxt)),
        ("Unlock without Lock", lambda: win.Unlock(nxt)),
        ("Unlock_all without Lock_all", lambda: win.Unlock_all()),
        ("Complete without Start", lambda: win.Complete()),
        ("Wait without Post", lambda: win.Wait()),
        ("Test without Post", lambda: win.Test()),
    ]:
        _expect(MPI, S, call, what + " outside an epoch", bad)
    # lock epochs
    win.Lock(nxt, MPI.LOCK_SHARED)
    _expect(MPI, S, lambda: win.Lock(nxt, MPI.LOCK_SHARED), "Lock twice on the same target", bad)
    _expect(MPI, S, lambda: win.Lock(nxt, MPI.LOCK_EXCLUSIVE), "Lock exclusive while holding a shared lock", bad)
    _expect(MPI, S, lambda: win.Fence(), "Fence inside a lock epoch", bad)
    _expect(MPI, S, lambda: win.Lock_all(), "Lock_all inside a lock epoch", bad)
    _expect(MPI, S, lambda: win.Free(), "Free inside a lock epoch", bad)
    win.Unlock(nxt)  # the erroneous calls left the one lock epoch as it was
    _expect(MPI, S, lambda: win.Unlock(nxt), "Unlock after the epoch ended", bad)
    win.Lock_all()
    _expect(MPI, S, lambda: win.Lock_all(), "Lock_all twice", bad)
    _expect(MPI, S, lambda: win.Lock(nxt), "Lock inside Lock_all", bad)
    _expect(MPI, S, lambda: win.Unlock(nxt), "Unlock inside Lock_all", bad)
    win.Unlock_all()
    # PSCW: a second Start, a target outside the Start group
    world = c.Get_group()
    g_nxt, g_prv = world.Incl([nxt]), world.Incl([(r - 1) % n])
    win.Post(g_prv)
    win.Start(g_nxt)
    _expect(MPI, S, lambda: win.Start(g_nxt), "Start twice", bad)
    if n > 1:
        _expect(MPI, S, lambda: win.Put(x, r), "Put to a rank outside the Start group", bad)
    win.Complete()
    win.Wait()
    for g in (world, g_nxt, g_prv):
        g.Free()
    _report(bad)
    _still_works(MPI, c, win, view)
    return True


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("flavor", ["allocate", "create-numpy"])
def test_synchronization_misuse_raises_err_rma_sync(flavor, n):
    assert run_ranks(_sync_errors, n, timeout=60, args=(flavor,)) == [True] * n


# --- request-based operations belong to passive-target epochs ---------------------------------
def _requests_in_active_epochs(flavor):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt = (r + 1) % n
    win, view = _window(MPI, c, flavor)
    bad = []
    x = np.zeros(1)
    win.Fence(MPI.MODE_NOPRECEDE)
    for what, call in [
        ("Rput", lambda: win.Rput(x, nxt, 0)),
        ("Rget", lambda: win.Rget(x, nxt, 0)),
        ("Raccumulate", lambda: win.Raccumulate(x, nxt, 0, MPI.SUM)),
        ("Rget_accumulate", lambda: win.Rget_accumulate(x, np.zeros(1), nxt, 0, MPI.SUM)),
    ]:
        _expect(MPI, MPI.ERR_RMA_SYNC, call, what + " in a Fence epoch", bad)
    win.Fence(MPI.MODE_NOSUCCEED)
    _report(bad)
    _still_works(MPI, c, win, view)
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_request_operations_in_a_fence_epoch_raise_err_rma_sync(n):
    """MPI-3.1 11.3.5: request-based RMA operations are only valid in a passive-target epoch."""
    assert run_ranks(_requests_in_active_epochs, n, timeout=60, args=("allocate",)) == [True] * n


# --- arguments: range, rank, lock type, op, datatype --------------------------------------------
def _argument_errors(flavor, group):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt = (r + 1) % n
    win, view = _window(MPI, c, flavor)
    bad = []
    win.Lock(nxt, MPI.LOCK_EXCLUSIVE)
    if group == "range":
        R = MPI.ERR_RMA_RANGE
        vec = MPI.DOUBLE.Create_vector(3, 2, 4).Commit()
        for what, call in [
            ("Put of W+1 elements", lambda: win.Put(np.zeros(W + 1), nxt)),
            ("Put past the end", lambda: win.Put(np.zeros(2), nxt, W - 1)),
            ("Get past the end", lambda: win.Get(np.zeros(3), nxt, (W - 2, 3, MPI.DOUBLE))),
            ("Accumulate past the end", lambda: win.Accumulate(np.zeros(1), nxt, W, MPI.SUM)),
            ("Get_accumulate past the end", lambda: win.Get_accumulate(np.zeros(2), np.zeros(2), nxt, W - 1)),
            ("Fetch_and_op at disp W", lambda: win.Fetch_and_op(np.zeros(1), np.zeros(1), nxt, W)),
            ("Compare_and_swap at disp W", lambda: win.Compare_and_swap(*(np.zeros(1, np.int64),) * 3, nxt, W)),
            ("Rput past the end", lambda: win.Rput(np.zeros(2), nxt, W - 1)),
            # a vector whose last block falls outside: 3 blocks of 2, stride 4 -> elements 0..9
            ("Put of a vector past the end", lambda: win.Put(np.zeros(6), nxt, (0, 1, vec))),
        ]:
            _expect(MPI, R, call, what, bad)
        vec.Free()
        for what, call in [("Put at a negative displacement", lambda: win.Put(np.zeros(1), nxt, -1)),
                           ("Get at a negative displacement", lambda: win.Get(np.zeros(1), nxt, -3))]:
            _expect(MPI, (R, MPI.ERR_DISP), call, what, bad)
    elif group == "rank":
        for rank in (n, n + 5, -7):
            _expect(MPI, MPI.ERR_RANK, lambda: win.Put(np.zeros(1), rank), f"Put to rank {rank}", bad)
            _expect(MPI, MPI.ERR_RANK, lambda: win.Fetch_and_op(np.zeros(1), np.zeros(1), rank),
                    f"Fetch_and_op at rank {rank}", bad)
        _expect(MPI, MPI.ERR_RANK, lambda: win.Lock(n), "Lock on rank size", bad)
    elif group == "locktype":
        win.Unlock(nxt)
        _expect(MPI, MPI.ERR_LOCKTYPE, lambda: win.Lock(nxt, 12345), "Lock with a bad lock type", bad)
        win.Lock(nxt, MPI.LOCK_EXCLUSIVE)  # the bad Lock left no epoch behind
    elif group == "op":
        # logical ops are defined for integer and logical types, bitwise ones for integer and
        # byte types, MAXLOC/MINLOC for pair types; Accumulate takes predefined ops but NO_OP
        user = MPI.Op.Create(lambda a, b, t: None, True)
        for what, call in [
            ("BAND on DOUBLE", lambda: win.Accumulate(np.zeros(1), nxt, 0, MPI.BAND)),
            ("LAND on DOUBLE", lambda: win.Accumulate(np.zeros(1), nxt, 0, MPI.LAND)),
            ("LXOR on DOUBLE", lambda: win.Accumulate(np.zeros(1), nxt, 0, MPI.LXOR)),
            ("MAXLOC on DOUBLE", lambda: win.Accumulate(np.zeros(2), nxt, 0, MPI.MAXLOC)),
            ("BOR in Fetch_and_op on DOUBLE", lambda: win.Fetch_and_op(np.zeros(1), np.zeros(1), nxt, 0, MPI.BOR)),
            ("LOR in Fetch_and_op on DOUBLE", lambda: win.Fetch_and_op(np.zeros(1), np.zeros(1), nxt, 0, MPI.LOR)),
            ("BXOR in Get_accumulate on DOUBLE",
             lambda: win.Get_accumulate(np.zeros(1), np.zeros(1), nxt, 0, MPI.BXOR)),
            ("a user-defined op", lambda: win.Accumulate(np.zeros(1), nxt, 0, user)),
            ("NO_OP in Accumulate", lambda: win.Accumulate(np.zeros(1), nxt, 0, MPI.NO_OP)),
        ]:
            _expect(MPI, MPI.ERR_OP, call, what, bad)
        user.Free()
    elif group == "type":
        for what, call in [
            ("Compare_and_swap on DOUBLE",
             lambda: win.Compare_and_swap(np.ones(1), np.zeros(1), np.zeros(1), nxt, 0)),
            ("Put DOUBLE to INT64_T", lambda: win.Put([np.zeros(2), 2, MPI.DOUBLE], nxt, (0, 2, MPI.INT64_T))),
            ("Get DOUBLE into INT64_T",
             lambda: win.Get([np.zeros(2, np.int64), 2, MPI.INT64_T], nxt, (0, 2, MPI.DOUBLE))),
            ("Accumulate INT into DOUBLE",
             lambda: win.Accumulate([np.zeros(4, np.int32), 4, MPI.INT], nxt, (0, 2, MPI.DOUBLE), MPI.SUM)),
            ("Get_accumulate with an INT64_T result of a DOUBLE target",
             lambda: win.Get_accumulate([np.zeros(1), 1, MPI.DOUBLE], [np.zeros(1, np.int64), 1, MPI.INT64_T],
                                        nxt, (0, 1, MPI.DOUBLE))),
        ]:
            _expect(MPI, MPI.ERR_TYPE, call, what, bad)
    elif group == "count":
        # mpi4py's own checks: one element in Fetch_and_op and Compare_and_swap
        i1 = np.zeros(1, np.int64)
        for what, call in [
            ("Fetch_and_op of 2 elements", lambda: win.Fetch_and_op(np.zeros(2), np.zeros(2), nxt)),
            ("Fetch_and_op with a 2-element result", lambda: win.Fetch_and_op(np.zeros(1), np.zeros(2), nxt)),
            ("Compare_and_swap of 2 elements",
             lambda: win.Compare_and_swap(np.zeros(2, np.int64), i1, i1.copy(), nxt)),
            ("Compare_and_swap with a 2-element result",
             lambda: win.Compare_and_swap(i1, i1.copy(), np.zeros(2, np.int64), nxt)),
        ]:
            try:
                call()
            except ValueError:
                continue
            except MPI.Exception as e:
                bad.append(f"{what}: MPI.Exception {e}, expected ValueError")
            else:
                bad.append(f"{what}: no error, expected ValueError")
    else:
        raise AssertionError(group)
    win.Unlock(nxt)
    _report(bad)
    _still_works(MPI, c, win, view)
    return True


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("group", ["range", "rank", "locktype", "op", "type", "count"])
@pytest.mark.parametrize("flavor", ["allocate", "create-numpy"])
def test_bad_arguments_raise_their_error_class(flavor, group, n):
    assert run_ranks(_argument_errors, n, timeout=60, args=(flavor, group)) == [True] * n


# --- flavors, freed windows, bad creation arguments --------------------------------------------
def _flavor_and_lifetime_errors():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    F = MPI.ERR_RMA_FLAVOR
    bad = []
    mem = MPI.Alloc_mem(64)
    for win in (MPI.Win.Create(np.zeros(4), 8, MPI.INFO_NULL, c), MPI.Win.Allocate(32, 8, MPI.INFO_NULL, c)):
        _expect(MPI, F, lambda: win.Attach(mem), "Attach on a non-dynamic window", bad)
        _expect(MPI, F, lambda: win.Detach(mem), "Detach on a non-dynamic window", bad)
        win.Free()
    dyn = MPI.Win.Create_dynamic(MPI.INFO_NULL, c)
    _expect(MPI, F, lambda: dyn.Shared_query(r), "Shared_query on a dynamic window", bad)
    # an address no rank attached: out of the (empty) window
    dyn.Attach(mem)
    addrs = c.allgather(MPI.Get_address(mem))
    c.Barrier()
    nxt = (r + 1) % c.size
    dyn.Lock(nxt)
    _expect(MPI, MPI.ERR_RMA_RANGE, lambda: dyn.Put(np.zeros(1), nxt, addrs[nxt] + 64), "Put past attached memory", bad)
    _expect(MPI, MPI.ERR_RMA_RANGE, lambda: dyn.Put(np.zeros(2), nxt, addrs[nxt] + 56), "Put across the end", bad)
    dyn.Unlock(nxt)
    c.Barrier()
    dyn.Detach(mem)
    dyn.Free()
    MPI.Free_mem(mem)

    # every call on a freed window: ERR_WIN
    win = MPI.Win.Allocate(32, 8, MPI.INFO_NULL, c)
    win.Free()
    for what, call in [
        ("Put", lambda: win.Put(np.zeros(1), 0)),
        ("Get", lambda: win.Get(np.zeros(1), 0)),
        ("Accumulate", lambda: win.Accumulate(np.zeros(1), 0)),
        ("Fetch_and_op", lambda: win.Fetch_and_op(np.zeros(1), np.zeros(1), 0)),
        ("Lock", lambda: win.Lock(0)),
        ("Lock_all", lambda: win.Lock_all()),
        ("Fence", lambda: win.Fence()),
        ("Flush", lambda: win.Flush(0)),
        ("Shared_query", lambda: win.Shared_query(0)),
        ("Attach", lambda: win.Attach(bytearray(8))),
        ("Free", lambda: win.Free()),
    ]:
        _expect(MPI, MPI.ERR_WIN, call, what + " on a freed window", bad)

    # creation arguments
    _expect(MPI, MPI.ERR_SIZE, lambda: MPI.Win.Allocate(-8, 1, MPI.INFO_NULL, c), "Allocate of -8 bytes", bad)
    _expect(MPI, MPI.ERR_SIZE, lambda: MPI.Win.Allocate_shared(-8, 1, MPI.INFO_NULL, c), "Allocate_shared of -8", bad)
    _expect(MPI, (MPI.ERR_DISP, MPI.ERR_ARG), lambda: MPI.Win.Allocate(8, 0, MPI.INFO_NULL, c), "disp_unit 0", bad)
    _report(bad)
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_flavor_freed_window_and_creation_errors(n):
    assert run_ranks(_flavor_and_lifetime_errors, n, timeout=60) == [True] * n
