"""RMA under contention, with exact results: atomic counters, overlapping accumulates, a
compare-and-swap spin lock, passive target against a target that never calls MPI, and a lock
holder that dies.

The MPI rules these rest on:

* Fetch_and_op, Compare_and_swap and Accumulate are element-wise atomic with respect to each
  other (same basic type, same op or NO_OP/REPLACE), from any number of origins at once;
* accumulate operations from one origin to one target location are ordered (the default
  ``accumulate_ordering`` is ``rar,raw,war,waw``), so the values one rank fetches from a
  counter increase;
* Flush completes an origin's operations at the target, so a Put flushed before an atomic
  release is seen by whoever acquires next;
* passive target is truly one-sided (gpumpi's promise, DESIGN.md section 12): a target busy
  in ``time.sleep`` delays nobody.

Every expected value is computed with NumPy or integer arithmetic independently of gpumpi.
"""

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from gpumpi.testing import device_windows_across_nodes, one_node_only, run_ranks

pytestmark = pytest.mark.timeout(240)
SIM = {"GPUMPI_DEVICE": "sim"}


def _window(MPI, c, flavor, nelem, dt, everywhere=False):
    """A window with ``nelem`` elements of ``dt`` at rank 0 (at every rank if ``everywhere``),
    zeroed; returns (win, read() of my elements as NumPy, keep-alive list)."""
    dt = np.dtype(dt)
    mine = nelem if (c.rank == 0 or everywhere) else 0
    keep = []
    if flavor == "allocate":
        win = MPI.Win.Allocate(mine * dt.itemsize, dt.itemsize, MPI.INFO_NULL, c)
        view = np.frombuffer(win.tomemory(), dt)
        read, write = view.copy, view.fill
    elif flavor == "create-numpy":
        a = np.zeros(max(mine, 1), dt)[:mine]  # private memory: never mapped by peers
        keep.append(a)
        win = MPI.Win.Create(a, dt.itemsize, MPI.INFO_NULL, c)
        read, write = a.copy, a.fill
    elif flavor == "create-allocmem":
        m = MPI.Alloc_mem(max(mine, 1) * dt.itemsize)
        keep.append(m)
        view = np.frombuffer(m, dt)[:mine]
        win = MPI.Win.Create(view, dt.itemsize, MPI.INFO_NULL, c)
        read, write = view.copy, view.fill
    elif flavor == "allocate-sim":
        win = MPI.Win.Allocate(mine * dt.itemsize, dt.itemsize, MPI.INFO_NULL, c, memory="device")
        tm = win.tomemory()
        read = lambda: tm.get().view(dt)  # noqa: E731
        write = lambda v: tm.set(np.full(mine, v, dt).view(np.uint8))  # noqa: E731
    elif flavor == "create-sim":
        from gpumpi.testing import SimDeviceArray

        d = SimDeviceArray.zeros(mine, dt)
        keep.append(d)
        win = MPI.Win.Create(d, dt.itemsize, MPI.INFO_NULL, c)
        read = d.get
        write = lambda v: d.set(np.full(mine, v, dt))  # noqa: E731
    else:
        raise AssertionError(flavor)
    win.Lock(c.rank, MPI.LOCK_EXCLUSIVE)
    write(0)
    win.Unlock(c.rank)
    c.Barrier()
    return win, read, keep


def _read_own(MPI, win, read, rank):
    win.Lock(rank, MPI.LOCK_SHARED)
    v = read()
    win.Unlock(rank)
    return v


# --- one counter, every rank Fetch_and_op(+1) ----------------------------------------------------
def _counter(flavor, count, mode):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    win, read, keep = _window(MPI, c, flavor, 1, np.int64)
    one = np.ones(1, np.int64)
    fetched = np.full(count, -1, np.int64)
    if mode == "lock_all":
        win.Lock_all()
    else:
        win.Lock(0, MPI.LOCK_SHARED)
    for i in range(count):
        # distinct result buffers: one Flush at the end completes them all
        win.Fetch_and_op(one, fetched[i : i + 1], 0, 0, MPI.SUM)
        if i % 1000 == 999:
            win.Flush(0)
    if mode == "lock_all":
        win.Unlock_all()
    else:
        win.Unlock(0)
    c.Barrier()
    total = int(_read_own(MPI, win, read, 0)[0]) if c.rank == 0 else None
    c.Barrier()
    win.Free()
    del keep
    return total, fetched


def _check_counter(got, count, n):
    total = got[0][0]
    assert total == count * n, total
    for r, (_, f) in enumerate(got):
        assert np.all(np.diff(f) > 0), f"rank {r}: fetched values not increasing"
    allf = np.sort(np.concatenate([f for _, f in got]))
    assert np.array_equal(allf, np.arange(count * n)), "fetched values are not a permutation of range(count*size)"


@pytest.mark.parametrize("mode, n", [("lock_all", 2), ("lock_all", 3), ("lock_shared", 3)])
@pytest.mark.parametrize("flavor", ["allocate", "create-numpy", "create-allocmem"])
def test_fetch_and_op_counter(flavor, mode, n):
    count = 10_000
    got = run_ranks(_counter, n, timeout=180, args=(flavor, count, mode))
    _check_counter(got, count, n)


def test_fetch_and_op_counter_at_four_ranks():
    count = 10_000
    got = run_ranks(_counter, 4, timeout=180, args=("allocate", count, "lock_all"))
    _check_counter(got, count, 4)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("flavor", ["allocate-sim", "create-sim"])
def test_fetch_and_op_counter_on_sim(flavor, n):
    device_windows_across_nodes(n)
    count = 1000
    got = run_ranks(_counter, n, timeout=180, args=(flavor, count, "lock_all"), env=SIM)
    _check_counter(got, count, n)


# --- every rank accumulates into overlapping regions of rank 0 --------------------------------
NACC, LACC = 1024, 512


def _acc_values(r, k, dt):
    base = np.arange(LACC)
    if dt == np.float64:
        return ((base % 7) + r + k % 3) * 0.5  # halves: exact sums in any order
    return ((base * 3 + r * k) % 101 - 50).astype(np.int32)


def _acc_offset(r, k):
    return (r * 128 + k * 37) % (NACC - LACC)


def _expected_acc(n, rounds, dt):
    exp = np.zeros(NACC, dt)
    for r in range(n):
        for k in range(rounds):
            o = _acc_offset(r, k)
            exp[o : o + LACC] += _acc_values(r, k, dt)
    return exp


def _accumulate(flavor, dtname, rounds, mode):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    dt = np.dtype(dtname).type
    win, read, keep = _window(MPI, c, flavor, NACC, dt)
    mpitype = MPI.DOUBLE if dt == np.float64 else MPI.INT
    if mode == "lock_all":
        win.Lock_all()
        for k in range(rounds):
            win.Accumulate([_acc_values(r, k, dt), LACC, mpitype], 0, _acc_offset(r, k), MPI.SUM)
            if k % 16 == 15:
                win.Flush(0)
        win.Unlock_all()
        c.Barrier()
    elif mode == "lock_shared":
        for k in range(rounds):
            win.Lock(0, MPI.LOCK_SHARED)
            win.Accumulate([_acc_values(r, k, dt), LACC, mpitype], 0, _acc_offset(r, k), MPI.SUM)
            win.Unlock(0)
        c.Barrier()
    else:  # every rank accumulating at once inside each fence epoch
        win.Fence(MPI.MODE_NOPRECEDE)
        for k in range(rounds):
            win.Accumulate([_acc_values(r, k, dt), LACC, mpitype], 0, _acc_offset(r, k), MPI.SUM)
            win.Fence()
        win.Fence(MPI.MODE_NOSUCCEED)
    got = _read_own(MPI, win, read, 0) if r == 0 else None
    c.Barrier()
    win.Free()
    del keep
    return got


@pytest.mark.parametrize("mode", ["lock_all", "lock_shared", "fence"])
@pytest.mark.parametrize("dtname", ["float64", "int32"])
@pytest.mark.parametrize("flavor, n", [("allocate", 2), ("allocate", 4), ("create-numpy", 3)])
def test_overlapping_accumulates_are_exact(flavor, dtname, mode, n):
    rounds = 200 if mode != "fence" else 50
    got = run_ranks(_accumulate, n, timeout=180, args=(flavor, dtname, rounds, mode))
    exp = _expected_acc(n, rounds, np.dtype(dtname).type)
    assert got[0].dtype == exp.dtype and np.array_equal(got[0], exp), np.flatnonzero(got[0] != exp)[:20]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("dtname", ["float64", "int32"])
@pytest.mark.parametrize("flavor", ["allocate-sim", "create-sim"])
def test_overlapping_accumulates_on_sim(flavor, dtname, n):
    device_windows_across_nodes(n)
    rounds = 40
    got = run_ranks(_accumulate, n, timeout=180, args=(flavor, dtname, rounds, "lock_all"), env=SIM)
    exp = _expected_acc(n, rounds, np.dtype(dtname).type)
    assert np.array_equal(got[0], exp), np.flatnonzero(got[0] != exp)[:20]


# --- a compare-and-swap spin lock guarding a non-atomic read-modify-write -------------------
def _spinlock(flavor, rounds):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    win, read, keep = _window(MPI, c, flavor, 2, np.int64)  # [lock word, counter] at rank 0
    one, zero = np.ones(1, np.int64), np.zeros(1, np.int64)
    res, cur = np.zeros(1, np.int64), np.zeros(1, np.int64)
    spins = 0
    win.Lock_all()
    for _ in range(rounds):
        while True:  # acquire: 0 -> 1
            win.Compare_and_swap(one, zero, res, 0, 0)
            win.Flush(0)
            if res[0] == 0:
                break
            assert res[0] == 1, res
            spins += 1
        win.Get(cur, 0, 1)  # not atomic: only the lock keeps the increments from being lost
        win.Flush(0)
        win.Put(cur + 1, 0, 1)
        win.Flush(0)
        win.Accumulate(zero, 0, 0, MPI.REPLACE)  # release (atomic), after the Put completed
        win.Flush(0)
    win.Unlock_all()
    c.Barrier()
    got = _read_own(MPI, win, read, 0) if c.rank == 0 else None
    c.Barrier()
    win.Free()
    del keep
    return got


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("flavor", ["allocate", "create-numpy", "create-allocmem"])
def test_compare_and_swap_spin_lock_loses_no_increment(flavor, n):
    rounds = 300
    got = run_ranks(_spinlock, n, timeout=180, args=(flavor, rounds))
    assert got[0].tolist() == [0, rounds * n], got[0]


# --- passive target on a target that sleeps without calling MPI -------------------------------
SLEEP = 2.0


def _sleeping_target(flavor):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    win, read, keep = _window(MPI, c, flavor, 16, np.float64)
    if r == 0:  # the target: a known pattern, then no MPI call for SLEEP seconds
        win.Lock(0, MPI.LOCK_EXCLUSIVE)
        if flavor == "allocate":
            np.frombuffer(win.tomemory(), np.float64)[:] = np.arange(16.0)
        else:
            keep[0][:] = np.arange(16.0)
        win.Unlock(0)
    c.Barrier()
    if r == 0:
        time.sleep(SLEEP)
        c.Barrier()
        got = _read_own(MPI, win, read, 0)
        win.Free()
        expect = np.arange(16.0)
        for s in range(1, n):
            expect[s] = 100.0 + s
        expect[15] += sum(range(1, n))
        assert np.array_equal(got, expect), got
        return None
    t0 = time.monotonic()
    win.Lock(0, MPI.LOCK_EXCLUSIVE)
    win.Put(np.array([100.0 + r]), 0, r)
    got = np.zeros(2)
    win.Get(got, 0, 8)
    win.Unlock(0)
    win.Lock(0, MPI.LOCK_SHARED)
    back, old = np.zeros(1), np.zeros(1)
    win.Get(back, 0, r)
    win.Fetch_and_op(np.array([float(r)]), old, 0, 15, MPI.SUM)
    win.Unlock(0)
    dt = time.monotonic() - t0
    assert np.array_equal(got, [8.0, 9.0]) and back[0] == 100.0 + r, (got, back)
    assert old[0] >= 15.0
    assert dt < 1.0, f"passive target waited for the sleeping target: {dt:.2f} s"
    c.Barrier()
    win.Free()
    del keep
    return dt


@pytest.mark.parametrize("n", [3])
@pytest.mark.parametrize("flavor", ["create-numpy", "allocate"])
def test_passive_target_does_not_wait_for_a_sleeping_target(flavor, n):
    # across nodes the MPI library carries the operations, and MPICH progresses them only while
    # the target is inside an MPI call (no asynchronous progress thread by default)
    one_node_only(n, "passive target progress without the target (memory mapped here)")
    got = run_ranks(_sleeping_target, n, timeout=60, args=(flavor,))
    assert all(dt < 1.0 for dt in got[1:]), got


# --- a lock holder that dies ----------------------------------------------------------------------
_DIES = """
    import os, sys, time
    import numpy as np
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    if sys.argv[1] == "allocate":
        win = MPI.Win.Allocate(64, 8, MPI.INFO_NULL, c)
    else:
        mem = np.zeros(8)
        win = MPI.Win.Create(mem, 8, MPI.INFO_NULL, c)
    c.Barrier()
    if c.rank == 1:
        win.Lock(0, MPI.LOCK_EXCLUSIVE)
        win.Put(np.ones(1), 0, 0)
        win.Flush(0)  # the lock is certainly held now
        c.Send(np.zeros(1), 2, 7)
        time.sleep(0.3)
        os._exit(3)  # inside the exclusive epoch
    elif c.rank == 2:
        c.Recv(np.zeros(1), 1, 7)
        t0 = time.monotonic()
        try:
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Put(np.full(1, 2.0), 0, 1)
            win.Unlock(0)
        except MPI.Exception as e:
            print("NOTICED", e.Get_error_class() == MPI.ERR_PROC_FAILED, f"{time.monotonic() - t0:.2f}", flush=True)
        else:
            print("NOT NOTICED: the lock of a dead holder was granted", flush=True)
        c.Send(np.zeros(1), 0, 8)
    else:
        c.Recv(np.zeros(1), 2, 8)
        print("TARGET DONE", flush=True)
    os._exit(0)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("flavor", ["allocate", "create-numpy"])
def test_a_dead_lock_holder_fails_the_waiter(tmp_path, flavor):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(_DIES))
    cmd = [sys.executable, "-m", "gpumpi", "--grace", "20", "-n", "3", str(prog), flavor]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=80, env=dict(os.environ))
    dt = time.monotonic() - t0
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("NOTICED", "NOT NOTICED", "TARGET"))]
    noticed = [ln for ln in lines if ln.startswith("NOTICED")]
    assert noticed and noticed[0].split()[1] == "True", (p.stdout, p.stderr)
    assert float(noticed[0].split()[2]) < 10.0, noticed
    assert "TARGET DONE" in lines, (p.stdout, p.stderr)
    assert dt < 30, dt
