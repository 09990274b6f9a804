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


def _count_general_receives(eng, behind=None) -> list:
    """Count the receives the general path serves from now on (the list's length); with a list
    ``behind``, a receive posted while a message already waits in the matcher on its context
    (MPI's order sends it there: the message came first) is counted in ``behind`` instead."""
    used = []
    general = eng.irecv

    def counted(*a, **k):
        q = eng.matcher._ctx.get(a[5])  # the context
        (behind if behind is not None and q is not None and q.unexpected else used).append(a[4])  # the tag
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


@pytest.mark.parametrize("compiled", ["1", "0"])  # the compiled layer's twins, or the Python ones
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_fast_path_carries_small_messages(n, compiled):
    assert run_ranks(_ring_fast, n, timeout=90, env=dict(ON, GPUMPI_COMPILED=compiled)) == list(range(n))


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


@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("fast", ["on", "auto", "off"])
def test_fallbacks_keep_mpi_semantics(fast, compiled):
    env = {"GPUMPI_FASTPATH": fast, "GPUMPI_COMPILED": compiled}
    assert run_ranks(_fallbacks, 3, timeout=60, env=env) == ["sent", "checked", "idle"]


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


def _lazy_irecv():
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    eng = rt.ENGINE
    flushed = []
    unlazy = eng._unlazy

    def counted():
        flushed.extend(x.tag for x in eng.lazy)
        unlazy()

    eng._unlazy = counted
    win, rounds = 32, 20
    # 1. windows of Irecv from every other rank (a wildcard receive for the last one): in order per
    # source, every byte and status right, and nearly all completed by the compiled looks
    if r == 0:
        got = {p: [] for p in range(1, n)}
        for k in range(rounds):
            reqs, bufs = [], []
            for p in range(1, n):
                for j in range(win):
                    b = np.full(j % 7 + 1, -1, "i8")
                    bufs.append((p, j, b))
                    reqs.append(c.Irecv([b, MPI.INT64_T], MPI.ANY_SOURCE if p == n - 1 else p, 10 + p))
            sts = [MPI.Status() for _ in reqs]
            MPI.Request.Waitall(reqs, sts)
            for (p, j, b), st in zip(bufs, sts):
                assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT64_T)) == (p, 10 + p, j % 7 + 1)
                assert b.tolist() == [p * 1000 + k * 100 + j] * (j % 7 + 1)
                got[p].append((k, j))
            c.Send(np.zeros(1, "i8"), 1 + k % (n - 1) if n > 1 else 0, 99) if n > 1 else None
            if n > 1:
                for p in range(1, n):
                    if p != 1 + k % (n - 1):
                        c.Send(np.zeros(1, "i8"), p, 99)
        assert all(v == [(k, j) for k in range(rounds) for j in range(win)] for v in got.values())
    else:
        for k in range(rounds):
            for j in range(win):
                c.Send(np.full(j % 7 + 1, r * 1000 + k * 100 + j, "i8"), 0, 10 + r)
            c.Recv(np.zeros(1, "i8"), 0, 99)
    stream_flushed = len(flushed)
    c.Barrier()
    if n == 1:
        assert stream_flushed == 0
        return "alone"
    if r == 1:
        two = np.zeros(2, "i8")
        # 2. a lazy receive comes before a general one posted after it (same source and tag)
        c.Recv(two, 0, 1)  # rank 0 posted both
        c.Send(np.array([1, 1], "i8"), 0, 2)
        c.Send(np.array([2, 2, 2], "i8"), 0, 2)
        # 3. a probe sees the message after the one a lazy receive already matched
        c.Recv(two, 0, 1)
        c.Send(np.array([3], "i8"), 0, 3)
        c.Send(np.arange(5, dtype="i8"), 0, 3)
        # 4. a cancelled lazy receive takes nothing: the message goes to the next receive
        c.Recv(two, 0, 1)
        c.Send(np.array([4, 4], "i8"), 0, 4)
        # 5. truncation and a type mismatch, found when the lazy receives complete
        c.Send(np.arange(6, dtype="i8"), 0, 5)
        c.Send(np.arange(2, dtype="f8"), 0, 6)
        return "sent"
    if r != 0:
        return "idle"
    a, b = np.zeros(2, "i8"), np.zeros(3, "i8")
    ra = c.Irecv(a, 1, 2)
    rb = c.Irecv([b, 1, MPI.Datatype.Create_contiguous(MPI.INT64_T, 3).Commit()], 1, 2)  # the general path
    c.Send(np.zeros(2, "i8"), 1, 1)
    MPI.Request.Waitall([ra, rb])
    assert a.tolist() == [1, 1] and b.tolist() == [2, 2, 2]
    p = np.zeros(1, "i8")
    rp = c.Irecv(p, 1, 3)
    c.Send(np.zeros(2, "i8"), 1, 1)
    st = MPI.Status()
    c.Probe(1, 3, st)
    assert st.Get_count(MPI.INT64_T) == 5  # the first message is the lazy receive's
    rp.Wait()
    assert p.tolist() == [3]
    five = np.zeros(5, "i8")
    c.Recv(five, 1, 3)
    assert five.tolist() == [0, 1, 2, 3, 4]
    rc = c.Irecv(np.zeros(2, "i8"), 1, 4)
    rc.Cancel()
    rc.Wait(st)
    assert st.Is_cancelled()
    c.Send(np.zeros(2, "i8"), 1, 1)
    got = np.zeros(2, "i8")
    c.Recv(got, 1, 4)
    assert got.tolist() == [4, 4]
    rt_, rm = c.Irecv(np.zeros(4, "i8"), 1, 5), c.Irecv(np.zeros(2, "i4"), 1, 6)
    with pytest.raises(MPI.Exception) as ei:
        rt_.Wait()
    assert ei.value.Get_error_class() == MPI.ERR_TRUNCATE
    with pytest.raises(MPI.Exception) as ei:
        rm.Wait()
    assert ei.value.Get_error_class() == MPI.ERR_TYPE
    # with one sender, the stream above came through the compiled looks, a few receives aside
    # (those that met a frame a progress pass had queued: the Barrier's, a faster rank's); with
    # more, a look for one source that finds another's frame first gives the lazy receives to
    # the matcher (MPI's order across sources is the matcher's), so only the results count
    if n == 2:
        assert stream_flushed <= rounds * win // 10, f"{stream_flushed} receives went to the matcher"
    return "checked"


@pytest.mark.parametrize("n, compiled", [(n, "1") for n in WORLD_SIZES] + [(2, "0")])
def test_irecv_fast_path_keeps_matching_order(n, compiled):
    """Irecv of whole NumPy arrays completes by compiled looks (Engine.recv_lazy; the compiled
    layer's Irecv, Waitall and drain, or their Python twins), and MPI's matching order holds
    against general receives, probes, cancels and errors."""
    want = {1: ["alone"], 2: ["checked", "sent"]}.get(n, ["checked", "sent"] + ["idle"] * (n - 2))
    assert run_ranks(_lazy_irecv, n, timeout=90, env=dict(ON, GPUMPI_COMPILED=compiled)) == want


def _irecv_only():
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r = c.rank
    eng = rt.ENGINE
    win, rounds = 32, 12  # 384 receives: the compiled path starts after 256 eligible calls (auto)
    c.Barrier()
    if r != 1:  # rank 0 sends; ranks 2 and 3 only join the Barriers
        for k in range(rounds):
            if r == 0:
                MPI.Request.Waitall([c.Isend(np.full(3, k * 100 + j, "i8"), 1, 7) for j in range(win)])
            c.Barrier()
        return "sent" if r == 0 else "idle"
    behind: list = []  # a progress pass (of the Barrier) may queue the next round's first messages
    general = _count_general_receives(eng, behind)
    for k in range(rounds):
        bufs = [np.full(3, -1, "i8") for _ in range(win)]
        reqs = [c.Irecv(b, 0, 7) for b in bufs]
        sts = [MPI.Status() for _ in reqs]
        MPI.Request.Waitall(reqs, sts)
        assert all(not q for q in reqs)  # complete: REQUEST_NULL, however they were served
        for j, (b, st) in enumerate(zip(bufs, sts)):
            assert b.tolist() == [k * 100 + j] * 3
            assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT64_T)) == (0, 7, 3)
        c.Barrier()
    # the receiver posted nothing but Irecv: those calls count toward the compiled path, which
    # then serves the rest, but those posted behind a message a progress pass had queued
    assert eng.frecv is not None
    assert len(general) <= 256 + 32, \
        f"{len(general)} of {win * rounds} receives took the general path ({len(behind)} more behind a message)"
    assert len(general) + len(behind) < win * rounds
    return "received"


@pytest.mark.parametrize("n", [k for k in WORLD_SIZES if k >= 2])
def test_irecv_alone_turns_the_fast_path_on(n):
    """A rank that only posts Irecv (no Send or Recv of its own) gets the compiled path too."""
    assert run_ranks(_irecv_only, n, timeout=60, env={"GPUMPI_FASTPATH": "auto"}) == \
        ["sent", "received"] + ["idle"] * (n - 2)
