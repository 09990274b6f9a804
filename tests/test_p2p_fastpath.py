"""The compiled small-message path (Engine.send_fast / recv_fast, gpumpi.ipc.fastring) at 1-4 ranks.

Each body checks that the fast path really carried the messages it should (the general
receive path is made to fail loudly where it must not be needed) and that everything it must
not serve -- truncation, type mismatches, wildcards over queued messages, synchronous and
rendezvous messages, failures, threads -- keeps the general engine's exact semantics.
"""

import time

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, run_ranks

ON = {"GPUMPI_FASTPATH": "on"}


def _count_general_receives(eng) -> list:
    """Count the receives the general path serves from now on (the list's length)."""
    used = []
    general = eng.irecv

    def counted(*a, **k):
        used.append(a[4])  # the tag
        return general(*a, **k)

    eng.irecv = counted
    return used


def _ring_fast():
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    eng = rt.ENGINE
    c.Barrier()
    nxt, prv = (r + 1) % n, (r - 1) % n
    saved = eng.irecv
    general = _count_general_receives(eng)
    try:
        for i in range(300):
            size = (i * 37) % 700
            a = (np.arange(size, dtype=np.int32) * 3 + i + r) % 1000
            b = np.full(size, -1, np.int32)
            st = MPI.Status()
            if n == 1:
                c.Send(a, 0, i % 5)
                c.Recv([b, MPI.INT], 0, i % 5, st)
                src = 0
            else:
                c.Sendrecv(a, nxt, i % 5, b, prv, i % 5, st)
                src = prv
            assert np.array_equal(b, (np.arange(size, dtype=np.int32) * 3 + i + src) % 1000)
            assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT)) == (src, i % 5, size)
    finally:
        eng.irecv = saved
    assert eng.frecv is not None
    # a few may meet frames a progress pass queued earlier (after the Barrier: a faster rank's
    # next message); the rest must be the compiled path's
    assert len(general) <= 30, f"{len(general)} of 300 receives took the general path"
    return r


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_fast_path_carries_small_messages(n):
    assert run_ranks(_ring_fast, n, timeout=90, env=ON) == list(range(n))


def _fallbacks():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    if r == 0:
        c.Send(np.arange(10, dtype="f8"), 1, 1)  # truncated by the receiver
        c.Send(np.arange(4, dtype="f8"), 1, 2)  # received as int32: a type mismatch
        c.Ssend(np.arange(3, dtype="i8"), 1, 3)  # synchronous: the general path
        c.Send(np.arange(50000, dtype="i8"), 1, 4)  # rendezvous
        for k in range(20):
            c.Send(np.array([k], "i8"), 1, 5 + k % 2)  # tags 5 and 6 interleaved
        c.Send(np.array([99], "i8"), 1, 7)
        return "sent"
    if r != 1:
        return "idle"
    with pytest.raises(MPI.Exception) as ei:
        c.Recv(np.zeros(5), 0, 1)
    assert ei.value.Get_error_class() == MPI.ERR_TRUNCATE
    with pytest.raises(MPI.Exception) as ei:
        c.Recv(np.zeros(4, "i4"), 0, 2)
    assert ei.value.Get_error_class() == MPI.ERR_TYPE
    b = np.zeros(3, "i8")
    c.Recv(b, 0, 3)
    assert b.tolist() == [0, 1, 2]
    big = np.zeros(50000, "i8")
    c.Recv(big, 0, 4)
    assert np.array_equal(big, np.arange(50000))
    while not c.Iprobe(0, 7):  # everything before tag 7 waits now, unexpected
        time.sleep(0.001)
    got6 = []
    one = np.zeros(1, "i8")
    for _ in range(10):  # tag 6 first: non-overtaking per tag, from the unexpected queue
        c.Recv(one, 0, 6)
        got6.append(int(one[0]))
    got5 = []
    for _ in range(10):
        c.Recv(one, MPI.ANY_SOURCE, 5)
        got5.append(int(one[0]))
    st = MPI.Status()
    c.Recv(one, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
    assert (int(one[0]), st.Get_tag()) == (99, 7)
    assert got6 == list(range(1, 20, 2)) and got5 == list(range(0, 20, 2))
    return "checked"


@pytest.mark.parametrize("fast", ["on", "auto", "off"])
def test_fallbacks_keep_mpi_semantics(fast):
    assert run_ranks(_fallbacks, 3, timeout=60, env={"GPUMPI_FASTPATH": fast}) == ["sent", "checked", "idle"]


def _many_senders():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    per = 400
    if r:
        for k in range(per):
            c.Send(np.array([r, k], "i8"), 0, k % 3)
        return None
    seen = {p: [] for p in range(1, n)}
    b = np.zeros(2, "i8")
    st = MPI.Status()
    for _ in range(per * (n - 1)):
        c.Recv(b, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
        assert st.Get_source() == b[0] and st.Get_tag() == b[1] % 3
        seen[int(b[0])].append(int(b[1]))
    assert all(v == list(range(per)) for v in seen.values())  # in order per sender, none lost
    return sum(len(v) for v in seen.values())


@pytest.mark.parametrize("fast", ["on", "auto"])
def test_wildcard_receives_from_many_senders(fast):
    assert run_ranks(_many_senders, 4, timeout=90, env={"GPUMPI_FASTPATH": fast})[0] == 1200


def _threads_fast():
    import threading

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    comms = [c.Dup() for _ in range(3)]
    errors = []

    def worker(t):
        try:
            cc = comms[t]
            a = np.zeros(4, "i8")
            st = MPI.Status()
            for k in range(300):
                out = np.array([r, t, k, 7], "i8")
                cc.Sendrecv(out, (r + 1) % n, k + t, a, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
                assert a.tolist() == [(r - 1) % n, t, k, 7], a
                # each thread's status is its own message's, though all threads share the engine
                assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT64_T)) == ((r - 1) % n, k + t, 4)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    return r


@pytest.mark.parametrize("n", [2, 3])
def test_threads_share_the_fast_path(n):
    assert run_ranks(_threads_fast, n, timeout=90, env=ON) == list(range(n))


def _dies_while_spinning():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    if c.rank == 1:
        import os

        time.sleep(0.3)  # rank 0 is spinning in recv_fast by now
        os._exit(3)
    with pytest.raises(MPI.Exception) as ei:
        c.Recv(np.zeros(1), 1, 0)
    assert ei.value.Get_error_class() == MPI.ERR_PROC_FAILED
    return "noticed"


def test_dead_peer_ends_a_fast_receive():
    from gpumpi.testing import RanksFailed

    t0 = time.monotonic()
    with pytest.raises(RanksFailed) as ei:
        run_ranks(_dies_while_spinning, 2, timeout=30, env=ON)
    assert time.monotonic() - t0 < 15
    assert "3" in str(ei.value)
