"""Point-to-point over real processes (shm transport), at 1-4 ranks.

Every body runs on each rank of a forked world (``run_ranks``) and checks its
data against a NumPy expectation computed independently on the receiving side.
"""

import threading
import time

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, DLPackOnly, run_ranks

SIZES = [0, 1, 8, 1000, 20000, 300_000, 3 << 20]  # eager, rendezvous, multi-chunk


def pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 131 + seed * 7) % 251).astype(np.uint8)


def _ring_send_recv():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for size in SIZES:
        out = pattern(size, r)
        got = np.empty(size, np.uint8)
        req = c.Isend(out, (r + 1) % n, tag=size % 1000)
        st = MPI.Status()
        c.Recv(got, (r - 1) % n, size % 1000, st)
        req.Wait()
        assert np.array_equal(got, pattern(size, (r - 1) % n)), size
        assert st.Get_source() == (r - 1) % n and st.Get_tag() == size % 1000
        assert st.Get_count(MPI.BYTE) == size
    return r


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_ring_all_sizes(n):
    assert run_ranks(_ring_send_recv, n, timeout=60) == list(range(n))


def _typed_messages():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    if n == 1:
        a = np.arange(10, dtype=np.float64)
        b = np.zeros(10)
        c.Sendrecv(a, 0, 1, b, 0, 1)
        assert np.array_equal(a, b)
        return
    if r == 0:
        c.Send([np.arange(10, dtype="i"), MPI.INT], 1, 3)
        c.Send([np.arange(20, dtype="d"), 5, MPI.DOUBLE], 1, 4)
        c.Send([np.arange(20, dtype="d"), (5, 2), MPI.DOUBLE], 1, 5)
        c.Send(np.arange(6, dtype=np.complex128), 1, 6)
    elif r == 1:
        x = np.zeros(10, "i")
        st = MPI.Status()
        c.Recv([x, MPI.INT], 0, 3, st)
        assert np.array_equal(x, np.arange(10)) and st.Get_count(MPI.INT) == 10
        y = np.zeros(20)
        c.Recv([y, 5, MPI.DOUBLE], 0, 4, st)
        assert np.array_equal(y[:5], np.arange(5)) and not y[5:].any()
        assert st.Get_count(MPI.DOUBLE) == 5 and st.Get_elements(MPI.DOUBLE) == 5
        y[:] = 0
        c.Recv([y, 5, MPI.DOUBLE], 0, 5)
        assert np.array_equal(y[:5], np.arange(2, 7))  # displacement 2 (in extents)
        z = np.zeros(6, np.complex128)
        c.Recv(z, 0, 6, st)
        assert np.array_equal(z, np.arange(6)) and st.Get_count(MPI.DOUBLE) == 12
        assert st.Get_count(MPI.INT) == 24 and st.Get_count(MPI.DOUBLE_COMPLEX) == 6


@pytest.mark.parametrize("n", [1, 2])
def test_buffer_specs_and_counts(n):
    run_ranks(_typed_messages, n)


def _wildcards():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    if r != 0:
        c.Send(np.full(4, r, "i"), 0, tag=100 + r)
        return
    seen = set()
    buf = np.zeros(4, "i")
    for _ in range(n - 1):
        st = MPI.Status()
        c.Recv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
        assert (buf == st.source).all() and st.tag == 100 + st.source
        seen.add(st.source)
    assert seen == set(range(1, n))


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_wildcards(n):
    run_ranks(_wildcards, n)


def _non_overtaking():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    sizes = [8, 50_000, 16, 200_000, 0, 4, 70_000] * 5
    if r == 1:
        reqs = [c.Isend(np.full(s, i % 256, np.uint8), 0, tag=7) for i, s in enumerate(sizes)]
        MPI.Request.Waitall(reqs)
    elif r == 0:
        time.sleep(0.05)  # let messages pile up in the unexpected queue
        for i, s in enumerate(sizes):
            b = np.empty(s, np.uint8)
            st = MPI.Status()
            c.Recv(b, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
            assert st.Get_count() == s and (b == i % 256).all(), i


def test_non_overtaking():
    run_ranks(_non_overtaking, 2)


def _truncation():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    for size in (100, 500_000):
        if r == 0:
            c.Send(pattern(size, 1), 1, 9)
            c.Send(np.arange(3, dtype="i"), 1, 10)  # the channel still works afterwards
        elif r == 1:
            small = np.zeros(size // 2, np.uint8)
            with pytest.raises(MPI.Exception) as ei:
                c.Recv(small, 0, 9)
            assert ei.value.Get_error_class() == MPI.ERR_TRUNCATE
            assert "Recv" in str(ei.value) and str(size) in str(ei.value)
            assert np.array_equal(small, pattern(size, 1)[: size // 2])
            x = np.zeros(3, "i")
            c.Recv(x, 0, 10)
            assert list(x) == [0, 1, 2]


def test_truncation():
    run_ranks(_truncation, 2)


def _ssend_waits_for_match():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    for size in (8, 400_000):
        if c.rank == 0:
            req = c.Issend(np.ones(size, np.uint8), 1, 5)
            time.sleep(0.2)
            assert not req.Test(), "Issend completed before the receive was posted"
            c.send("go", 1, 6)
            req.Wait()
        else:
            assert c.recv(source=0, tag=6) == "go"
            b = np.zeros(size, np.uint8)
            c.Recv(b, 0, 5)
            assert b.all()
        c.Barrier()


def test_ssend_completes_after_match():
    run_ranks(_ssend_waits_for_match, 2)


def _cancel():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    # receive cancel
    req = c.Irecv(np.zeros(4, "i"), MPI.ANY_SOURCE, 77)
    req.Cancel()
    st = MPI.Status()
    req.Wait(st)
    assert st.Is_cancelled()
    # send cancel of an unmatched synchronous send (eager and rendezvous)
    for size in (8, 300_000):
        if r == 0:
            req = c.Issend(np.ones(size, np.uint8), 1, 78)
            req.Cancel()
            st = MPI.Status()
            req.Wait(st)
            assert st.Is_cancelled()
        c.Barrier()
        if r == 1:
            assert not c.Iprobe(0, 78), "a cancelled send was still delivered"
        c.Barrier()


def test_cancel():
    run_ranks(_cancel, 2)


def _persistent():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for size in (16, 100_000):
        sbuf = np.zeros(size, np.uint8)
        rbuf = np.zeros(size, np.uint8)
        sreq = c.Send_init(sbuf, (r + 1) % n, 3)
        rreq = c.Recv_init(rbuf, (r - 1) % n, 3)
        for it in range(5):
            sbuf[:] = (it + r) % 256
            MPI.Prequest.Startall([rreq, sreq])
            MPI.Request.Waitall([sreq, rreq])
            assert (rbuf == (it + (r - 1) % n) % 256).all()
        with pytest.raises(MPI.Exception):
            sreq.Start()
            sreq.Start()  # already active
        rreq.Start()  # receive the extra message started above
        MPI.Request.Waitall([sreq, rreq])
        sreq.Free()
        rreq.Free()
        with pytest.raises(MPI.Exception):
            sreq.Start()


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_persistent(n):
    run_ranks(_persistent, n)


def _partitioned():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    parts = 4
    for psize in (10, 50_000):
        if r == 0:
            buf = np.zeros(parts * psize, np.uint8)
            req = c.Psend_init(buf, parts, 1, tag=2)
            for it in range(2):
                req.Start()
                for p in reversed(range(parts)):
                    buf[p * psize : (p + 1) * psize] = p + 10 * it
                    req.Pready(p)
                req.Wait()
            req.Free()
        elif r == 1:
            buf = np.zeros(parts * psize, np.uint8)
            req = c.Precv_init(buf, parts, 0, tag=2)
            for it in range(2):
                req.Start()
                while not all(req.Parrived(p) for p in range(parts)):
                    time.sleep(0.001)
                req.Wait()
                for p in range(parts):
                    assert (buf[p * psize : (p + 1) * psize] == p + 10 * it).all()
            req.Free()


def test_partitioned():
    run_ranks(_partitioned, 2)


def _bsend():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    if r == 0:
        with pytest.raises(MPI.Exception) as ei:
            c.Bsend(np.ones(10, np.uint8), 1)
        assert ei.value.Get_error_class() == MPI.ERR_BUFFER
        MPI.Attach_buffer(bytearray(3 * (100_000 + MPI.BSEND_OVERHEAD)))
        for i in range(3):
            c.Bsend(np.full(100_000, i, np.uint8), 1, i)
        with pytest.raises(MPI.Exception) as ei:
            c.Bsend(np.ones(100_000, np.uint8), 1, 9)  # buffer full
        assert ei.value.Get_error_class() == MPI.ERR_BUFFER
        c.send("go", 1, 99)
        buf = MPI.Detach_buffer()
        assert len(buf) == 3 * (100_000 + MPI.BSEND_OVERHEAD)
    else:
        assert c.recv(source=0, tag=99) == "go"
        for i in range(3):
            b = np.zeros(100_000, np.uint8)
            c.Recv(b, 0, i)
            assert (b == i).all()


def test_bsend():
    run_ranks(_bsend, 2)


def _probe():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    if r == 0:
        c.Send(np.arange(7, dtype="d"), 1, 4)
        c.Send(np.arange(300_000, dtype="i"), 1, 5)
        c.send({"a": 1}, 1, 6)
    elif r == 1:
        st = MPI.Status()
        c.Probe(0, 4, st)
        assert st.Get_count(MPI.DOUBLE) == 7
        b = np.empty(7)
        c.Recv(b, 0, 4)
        assert np.array_equal(b, np.arange(7))
        while not c.Iprobe(0, 5, st):
            time.sleep(0.001)
        msg = c.Mprobe(0, 5, st)
        assert st.Get_count(MPI.INT) == 300_000
        x = np.empty(300_000, "i")
        msg.Recv(x)
        assert np.array_equal(x, np.arange(300_000))
        m = None
        while m is None:
            m = c.improbe(0, 6)
        assert m.recv() == {"a": 1}
    assert c.Iprobe(MPI.PROC_NULL)
    assert c.Mprobe(MPI.PROC_NULL) == MPI.MESSAGE_NO_PROC


def test_probe():
    run_ranks(_probe, 2)


def _objects():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    big = np.arange(1 << 20, dtype=np.float64) * (r + 1)
    obj = {"rank": r, "arr": big, "small": np.arange(3), "s": "x" * 10}
    req = c.isend(obj, (r + 1) % n, 11)
    got = c.recv(source=(r - 1) % n, tag=11)
    req.wait()
    src = (r - 1) % n
    assert got["rank"] == src and np.array_equal(got["arr"], np.arange(1 << 20) * (src + 1.0))
    assert got["arr"].flags.aligned and got["arr"].flags.writeable
    rq = c.irecv(source=(r - 1) % n, tag=12)
    c.send([r] * 3, (r + 1) % n, 12)
    assert rq.wait() == [src] * 3
    assert c.sendrecv(("hi", r), (r + 1) % n, 13, None, (r - 1) % n, 13) == ("hi", src)
    data = c.bcast({"root": np.ones(100_000)} if r == 0 else None, root=0)
    assert data["root"].sum() == 100_000
    val = c.bcast(r if r == n - 1 else None, root=n - 1)
    assert val == n - 1


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_object_api(n):
    run_ranks(_objects, n)


def _sendrecv():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for size in (5, 200_000):
        a = np.full(size, r, "i")
        b = np.full(size, -1, "i")
        st = MPI.Status()
        c.Sendrecv(a, (r + 1) % n, 1, b, (r - 1) % n, 1, st)
        assert (b == (r - 1) % n).all() and st.source == (r - 1) % n
        c.Sendrecv_replace(a, (r + 1) % n, 2, (r - 1) % n, 2)
        assert (a == (r - 1) % n).all()
        a[:] = r
        req = c.Isendrecv(a, (r + 1) % n, 3, b, (r - 1) % n, 3)
        req.Wait(st)
        assert (b == (r - 1) % n).all() and st.tag == 3
        req = c.Isendrecv_replace(a, (r + 1) % n, 4, (r - 1) % n, 4)
        req.Wait()
        assert (a == (r - 1) % n).all()
    # PROC_NULL peers complete at once with an empty status
    st = MPI.Status()
    c.Sendrecv(np.zeros(1), MPI.PROC_NULL, 0, np.zeros(1), MPI.PROC_NULL, 0, st)
    assert st.source == MPI.PROC_NULL and st.Get_count() == 0


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_sendrecv(n):
    run_ranks(_sendrecv, n)


def _multi_completion():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    peers = [p for p in range(n) if p != r] or [r]
    bufs = [np.zeros(4, "i") for _ in peers]
    rreqs = [c.Irecv(b, p, 21) for b, p in zip(bufs, peers)]
    sreqs = [c.Isend(np.full(4, r, "i"), p, 21) for p in peers]
    done = set()
    while len(done) < len(rreqs):
        st = MPI.Status()
        i = MPI.Request.Waitany(rreqs, st)
        assert i not in done and rreqs[i] == MPI.REQUEST_NULL
        assert (bufs[i] == peers[i]).all() and st.source == peers[i]
        done.add(i)
    assert MPI.Request.Waitany(rreqs) == MPI.UNDEFINED
    statuses = []
    assert MPI.Request.Waitall(sreqs, statuses)
    assert len(statuses) == len(sreqs)
    assert MPI.Request.Testall(sreqs)
    assert MPI.Request.Waitsome(sreqs) is None
    # Waitsome / Testsome
    rreqs = [c.Irecv(b, p, 22) for b, p in zip(bufs, peers)]
    for p in peers:
        c.Send(np.full(4, r + 100, "i"), p, 22)
    seen = []
    while len(seen) < len(rreqs):
        idx = MPI.Request.Waitsome(rreqs)
        seen += idx
    assert sorted(seen) == list(range(len(peers)))
    assert all((b == p + 100).all() for b, p in zip(bufs, peers))
    flag, objs = MPI.Request.testall([c.isend(r, p, 23) for p in peers])
    got = [c.recv(source=p, tag=23) for p in peers]
    assert got == peers


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_multi_completion(n):
    run_ranks(_multi_completion, n)


def _bad_input():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    buf = np.zeros(4, "i")

    def klass(f):
        with pytest.raises(MPI.Exception) as ei:
            f()
        return ei.value.Get_error_class(), str(ei.value)

    assert klass(lambda: c.Send(buf, n))[0] == MPI.ERR_RANK
    assert klass(lambda: c.Send(buf, -5))[0] == MPI.ERR_RANK
    assert klass(lambda: c.Recv(buf, n + 3))[0] == MPI.ERR_RANK
    cls, msg = klass(lambda: c.Send(buf, 0, tag=-3))
    assert cls == MPI.ERR_TAG and "Send" in msg and "-3" in msg
    assert klass(lambda: c.Isend(buf, 0, tag=MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) + 1))[0] == MPI.ERR_TAG
    assert klass(lambda: MPI.COMM_NULL.Send(buf, 0))[0] == MPI.ERR_COMM
    with pytest.raises(ValueError):
        c.Send([buf, -1, MPI.INT], 0)
    with pytest.raises((TypeError, ValueError, KeyError, BufferError)):
        c.Send(object(), 0)
    with pytest.raises((TypeError, ValueError, BufferError)):
        c.Recv(b"readonly", 0)  # receive into read-only memory
    assert klass(lambda: MPI.REQUEST_NULL.Free())[0] == MPI.ERR_REQUEST
    assert klass(lambda: MPI.REQUEST_NULL.Cancel())[0] == MPI.ERR_REQUEST
    assert MPI.REQUEST_NULL.Wait()  # MPI: waiting on a null request returns at once
    # nothing was sent by the failed calls: the channel is clean
    c.Barrier()
    assert not c.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)


@pytest.mark.parametrize("compiled", ["1", "0"])  # the compiled layer's twins, or the Python ones
@pytest.mark.parametrize("n", [1, 3])
def test_bad_input(n, compiled):
    run_ranks(_bad_input, n, env={"GPUMPI_COMPILED": compiled, "GPUMPI_FASTPATH": "on"})


def _threads():
    from gpumpi import MPI

    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    errors = []

    def worker(t):
        try:
            for i in range(20):
                size = 10 if i % 2 else 60_000
                out = np.full(size, (t * 31 + i) % 256, np.uint8)
                got = np.empty(size, np.uint8)
                c.Sendrecv(out, (r + 1) % n, 1000 + t, got, (r - 1) % n, 1000 + t)
                assert (got == (t * 31 + i) % 256).all()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("n", [2, 3])
def test_thread_multiple(n):
    run_ranks(_threads, n)


def _comm_management():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    d = w.Dup()
    assert d.size == n and d.rank == r and w.Compare(d) == MPI.CONGRUENT and w.Compare(w) == MPI.IDENT
    # messages on the duplicate do not match receives on the original
    if n > 1:
        if r == 0:
            d.Send(np.array([1], "i"), 1, 0)
            w.Send(np.array([2], "i"), 1, 0)
        elif r == 1:
            x = np.zeros(1, "i")
            w.Recv(x, 0, 0)
            assert x[0] == 2
            d.Recv(x, 0, 0)
            assert x[0] == 1
    s = w.Split(r % 2, -r)
    members = [q for q in range(n) if q % 2 == r % 2]
    assert s.size == len(members) and s.rank == sorted(members, reverse=True).index(r)
    assert s.group.Translate_ranks(None, w.group) == sorted(members, reverse=True)
    s.Barrier()
    tot = s.bcast(r if s.rank == 0 else None, root=0)
    assert tot == max(members)
    u = w.Split(MPI.UNDEFINED if r == 0 else 0, 0)
    assert (u == MPI.COMM_NULL) == (r == 0)
    s.Free()
    assert s == MPI.COMM_NULL
    d.Free()
    with pytest.raises(MPI.Exception):
        w.Free()
    assert MPI.COMM_SELF.size == 1 and MPI.COMM_SELF.rank == 0
    assert w.Get_group().Get_size() == n


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_comm_management(n):
    run_ranks(_comm_management, n)


def _eight():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for it in range(10):
        x = np.empty(1000, "i")
        c.Sendrecv(np.full(1000, r + it, "i"), (r + 1) % n, 0, x, (r - 1) % n, 0)
        assert (x == (r - 1) % n + it).all()
        c.Barrier()
    big = c.bcast(np.arange(500_000) if r == 3 else None, root=3)
    assert big[-1] == 499_999


def test_eight_ranks_on_two_cores():
    run_ranks(_eight, 8, timeout=120)


def _grequest():
    from gpumpi import MPI

    calls = []

    def query(status, *a):
        calls.append(("query", a))
        status.Set_source(5)
        status.Set_tag(9)

    def free(*a):
        calls.append(("free", a))

    def cancel(completed, *a):
        calls.append(("cancel", completed))

    g = MPI.Grequest.Start(query, free, cancel, args=(1, 2))
    assert not g.Test()
    threading.Timer(0.05, g.Complete).start()
    st = MPI.Status()
    g.Wait(st)
    assert st.source == 5 and st.tag == 9
    assert calls == [("query", (1, 2)), ("free", (1, 2))]
    assert g == MPI.REQUEST_NULL


def test_grequest():
    run_ranks(_grequest, 1)


def _environment():
    from gpumpi import MPI

    assert MPI.Is_initialized() and not MPI.Is_finalized()
    assert MPI.Is_thread_main()
    t0 = MPI.Wtime()
    time.sleep(0.01)
    assert 0.009 < MPI.Wtime() - t0 < 1.0 and 0 < MPI.Wtick() < 1e-3
    assert MPI.Get_processor_name()
    assert MPI.Get_version() >= (3, 1)
    assert "gpumpi" in MPI.Get_library_version() and MPI.get_vendor()[0] == "gpumpi"
    mem = MPI.Alloc_mem(1 << 20)
    a = np.frombuffer(mem, np.uint8)
    a[:] = 3
    c = MPI.COMM_WORLD
    if c.size > 1:
        c.Sendrecv(mem, (c.rank + 1) % c.size, 0, np.empty(1 << 20, np.uint8), MPI.ANY_SOURCE, 0)
    del a
    MPI.Free_mem(mem)
    with pytest.raises(MPI.Exception):
        MPI.Free_mem(bytearray(3))
    assert c.Get_attr(MPI.TAG_UB) >= 32767


@pytest.mark.parametrize("n", [1, 2])
def test_environment(n):
    run_ranks(_environment, n)


def _peer_dies():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    if c.rank == 1:
        import os

        os._exit(3)
    with pytest.raises(MPI.Exception) as ei:
        c.Recv(np.zeros(1), 1, 0)
    assert ei.value.Get_error_class() == MPI.ERR_PROC_FAILED
    return "noticed"


def test_dead_peer_does_not_hang():
    from gpumpi.testing import RanksFailed

    t0 = time.monotonic()
    with pytest.raises(RanksFailed) as ei:
        run_ranks(_peer_dies, 2, timeout=30)
    assert time.monotonic() - t0 < 10
    text = str(ei.value)
    assert "3" in text


class _CAI:
    """A device-array stand-in: __cuda_array_interface__ over host memory (no CUDA driver here)."""

    def __init__(self, arr):
        self.arr = arr
        self.__cuda_array_interface__ = {
            "data": (arr.ctypes.data, False), "shape": arr.shape, "typestr": arr.dtype.str,
            "strides": None, "version": 3,
        }


def _cai_buffers():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for size in (10, 100_000):
        src = _CAI(np.arange(size, dtype=np.float32) + r)
        dst = _CAI(np.zeros(size, np.float32))
        st = MPI.Status()
        c.Sendrecv(src, (r + 1) % n, 0, dst, (r - 1) % n, 0, st)
        assert np.array_equal(dst.arr, np.arange(size, dtype=np.float32) + (r - 1) % n)
        assert st.Get_count(MPI.FLOAT) == size


@pytest.mark.parametrize("n", [1, 2])
def test_cuda_array_interface_buffers_without_a_driver(n):
    run_ranks(_cai_buffers, n)


def _split_copy():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    eng = MPI._rt.ENGINE
    if MPI._rt.node_of(0) != MPI._rt.node_of(1):  # under mpiexec with pretend nodes (GPUMPI_TEST_MPIEXEC)
        pytest.skip("cross-memory attach joins the ranks of one node; these two are on two")
    sizes = [300_000, 1 << 20, (5 << 20) + 3, 700_001]
    for i, size in enumerate(sizes):
        if r == 0:
            c.Send(pattern(size, i), 1, i)
        else:
            full = i != 2
            b = np.zeros(size if full else size - 12345, np.uint8)
            if full:
                c.Recv(b, 0, i)
                assert np.array_equal(b, pattern(size, i)), size
            else:
                with pytest.raises(MPI.Exception) as ei:
                    c.Recv(b, 0, i)
                assert ei.value.Get_error_class() == MPI.ERR_TRUNCATE
                assert np.array_equal(b, pattern(size, i)[: size - 12345])
    if r == 1:
        assert eng.region("host", "cma").proven  # the later messages took the two-sided copy
    # an object message with several out-of-band arrays takes it too
    obj = [np.arange(300_000) * (r + 1), np.ones(200_000, np.float32)]
    got = c.sendrecv(obj, 1 - r, 50, None, 1 - r, 50)
    assert np.array_equal(got[0], np.arange(300_000) * (2 - r)) and got[1].sum() == 200_000


def test_two_sided_copy_of_large_messages():
    run_ranks(_split_copy, 2)


def _send_modes():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    MPI.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    for size in (4, 90_000):
        out = np.full(size, r, "i")
        got = np.empty(size, "i")
        reqs = [c.Irecv(got, prv, 1)]
        c.Barrier()  # the receive is posted everywhere: ready mode is legal
        c.Rsend(out, nxt, 1)
        MPI.Request.Waitall(reqs)
        assert (got == prv).all()
        for mode, tag in (("Ssend", 2), ("Bsend", 3)):
            rq = c.Irecv(got, prv, tag)
            getattr(c, mode)(out, nxt, tag)
            rq.Wait()
            assert (got == prv).all(), mode
        for mode, tag in (("Issend", 4), ("Ibsend", 5), ("Irsend", 6), ("Isend", 7)):
            got[:] = -1
            rq = c.Irecv(got, prv, tag)
            c.Barrier()
            sq = getattr(c, mode)(out, nxt, tag)
            MPI.Request.Waitall([sq, rq])
            assert (got == prv).all(), mode
    for mode, tag in (("ssend", 8), ("bsend", 9)):
        rq = c.irecv(source=prv, tag=tag)
        getattr(c, mode)({"from": r}, nxt, tag)
        assert rq.wait() == {"from": prv}
    for mode, tag in (("issend", 10), ("ibsend", 11)):
        sq = getattr(c, mode)([r], nxt, tag)
        assert c.recv(source=prv, tag=tag) == [prv]
        sq.wait()
    MPI.Detach_buffer()
    # message handles from Improbe, received without blocking
    c.send(("m", r), nxt, 12)
    msg = c.mprobe(prv, 12)
    assert msg.irecv().wait() == ("m", prv)
    c.Send(np.full(3, r, "d"), nxt, 13)
    st = MPI.Status()
    m = c.Mprobe(prv, 13, st)
    buf = np.empty(3)
    m.Irecv(buf).Wait()
    assert (buf == prv).all() and st.Get_count(MPI.DOUBLE) == 3
    with pytest.raises(MPI.Exception):
        MPI.MESSAGE_NULL.Recv(buf)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_send_modes_and_message_handles(n):
    run_ranks(_send_modes, n)


def _request_queries():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    if r == 0:
        b = np.zeros(5, "i")
        rq = c.Irecv(b, 1, 3)
        st = MPI.Status()
        assert not rq.Get_status(st)
        assert MPI.Request.Testany([rq]) == (MPI.UNDEFINED, False)
        assert MPI.Request.Testsome([rq]) == []
        assert not MPI.Request.Get_status_all([rq])
        c.send("go", 1, 4)
        while not rq.Get_status(st):
            time.sleep(0.001)
        assert st.source == 1 and st.tag == 3 and st.Get_count(MPI.INT) == 5
        assert rq != MPI.REQUEST_NULL  # Get_status does not free it
        assert MPI.Request.Get_status_any([rq]) == (0, True)
        assert MPI.Request.Get_status_some([rq]) == [0]
        idx, flag = MPI.Request.Testany([rq], st)
        assert (idx, flag) == (0, True) and rq == MPI.REQUEST_NULL
        assert (b == 7).all()
        assert MPI.Request.Testany([MPI.REQUEST_NULL]) == (MPI.UNDEFINED, True)
        assert MPI.Request.Testsome([MPI.REQUEST_NULL]) is None
        assert MPI.REQUEST_NULL.Test()
    elif r == 1:
        assert c.recv(source=0, tag=4) == "go"
        c.Send(np.full(5, 7, "i"), 0, 3)


def test_request_queries():
    run_ranks(_request_queries, 2)


def _errhandlers():
    from gpumpi import MPI

    c = MPI.COMM_WORLD.Dup()
    seen = []
    eh = MPI.Comm.Create_errhandler(lambda comm, code: seen.append((comm.Get_name(), code)))
    c.Set_name("mine")
    c.Set_errhandler(eh)
    assert c.Get_errhandler() == eh
    with pytest.raises(MPI.Exception):
        c.Send(np.zeros(1), 99)
    assert seen == [("mine", MPI.ERR_RANK)]
    d = c.Dup()
    assert d.Get_errhandler() == eh  # inherited by new communicators
    with pytest.raises(MPI.Exception):
        d.Recv(np.zeros(1), 0, tag=-7)
    assert seen[-1][1] == MPI.ERR_TAG
    c.Set_errhandler(MPI.ERRORS_RETURN)
    assert c.Call_errhandler(MPI.ERR_OTHER) is None  # ERRORS_RETURN returns (MPI_Comm_call_errhandler)
    with pytest.raises(MPI.Exception):
        c.Set_errhandler(MPI.ERRHANDLER_NULL)


def test_user_error_handlers():
    run_ranks(_errhandlers, 2)


def _window_of_queued_eager_sends():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    n, window = 16384, 64
    s = np.full(n, 5, np.uint8)
    b = np.empty(n, np.uint8)
    for _ in range(30):  # ring of 64 KiB: most frames wait for room, racing the receiver
        if r == 0:
            reqs = [c.Isend(s, 1, 100) for _ in range(window)]
        else:
            reqs = [c.Irecv(b, 0, 100) for _ in range(window)]
        MPI.Request.Waitall(reqs)
        if r == 1:
            assert (b == 5).all()
        c.Sendrecv(b[:4], 1 - r, 101, b[4:8], 1 - r, 101)


def test_window_of_queued_eager_sends_completes():
    # regression: a frame written after a failed try had its completion token lost
    run_ranks(_window_of_queued_eager_sends, 2, env={"GPUMPI_RING_SIZE": "65536"}, timeout=60)


class _ForeignCAI:
    """Host memory behind a CUDA array interface in non-native byte order (refused: BufferError)."""

    def __init__(self, a):
        self.a = a
        foreign = ">" if np.little_endian else "<"
        self.__cuda_array_interface__ = {"data": (a.ctypes.data, False), "typestr": foreign + "i4",
                                         "shape": a.shape, "strides": None, "version": 3}


def _failed_calls_leave_nothing_posted():
    from gpumpi import MPI

    for c in (MPI.COMM_SELF, MPI.COMM_WORLD):
        me = c.rank
        good = np.arange(4, dtype="i4")
        bad_send = _ForeignCAI(np.zeros(4, "i4"))
        calls = [
            # (call, raises) -- every one fails in its send part, after its receive parsed
            (lambda: c.Sendrecv(bad_send, me, 0, np.zeros(4, "i4"), me, MPI.ANY_TAG), BufferError),
            (lambda: c.Sendrecv(good, me, -5, np.zeros(4, "i4"), me, MPI.ANY_TAG), MPI.Exception),
            (lambda: c.Sendrecv(good, c.size, 0, np.zeros(4, "i4"), me, MPI.ANY_TAG), MPI.Exception),
            (lambda: c.Sendrecv(good, me, 0, np.zeros(4, "i4"), me, MPI.ANY_TAG, status=42), TypeError),
            (lambda: c.Isendrecv(bad_send, me, 0, np.zeros(4, "i4"), me, MPI.ANY_TAG), BufferError),
            (lambda: c.Isendrecv(good, me, -5, np.zeros(4, "i4"), me, MPI.ANY_TAG), MPI.Exception),
            (lambda: c.Sendrecv_replace(np.zeros(4, "i4"), me, -5, me, MPI.ANY_TAG), MPI.Exception),
            (lambda: c.Sendrecv_replace(np.zeros(4, "i4"), c.size, 0, me, MPI.ANY_TAG), MPI.Exception),
            (lambda: c.Isendrecv_replace(np.zeros(4, "i4"), me, -5, me, MPI.ANY_TAG), MPI.Exception),
        ]
        for i, (call, raises) in enumerate(calls):
            with pytest.raises(raises):
                call()
            # a message to ourselves stays unexpected: no receive was left posted to swallow it
            req = c.Isend(np.full(4, i, "i4"), me, 100 + i)
            assert c.Iprobe(me, 100 + i), f"call {i} left a receive posted"
            got = np.zeros(4, "i4")
            c.Recv(got, me, 100 + i)
            req.Wait()
            assert (got == i).all()
            r = np.zeros(4, "i4")
            c.Sendrecv(good, me, 7, r, me, 7)  # and a correct call completes
            assert (r == good).all()
        c.Barrier()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_failed_sendrecv_family_leaves_nothing_posted(n):
    run_ranks(_failed_calls_leave_nothing_posted, n, timeout=60)


def _attach_any_writable_buffer():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    me, n = c.rank, c.size
    for make in (bytearray, lambda k: DLPackOnly(np.zeros(k, np.uint8))):
        buf = make(1000 + MPI.BSEND_OVERHEAD)
        MPI.Attach_buffer(buf)
        c.Bsend(np.full(10, me, "i4"), (me + 1) % n, 3)
        got = np.zeros(10, "i4")
        c.Recv(got, (me - 1) % n, 3)
        assert (got == (me - 1) % n).all()
        assert MPI.Detach_buffer() is buf
    ro = np.zeros(100, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="^Attach_buffer: buffer is not writable"):
        MPI.Attach_buffer(DLPackOnly(ro))
    with pytest.raises(TypeError, match="^Attach_buffer: expected a writable buffer"):
        MPI.Attach_buffer(42)


@pytest.mark.parametrize("n", [1, 2])
def test_attach_buffer_takes_dlpack(n):
    run_ranks(_attach_any_writable_buffer, n, timeout=60)


def _message_handles():
    import pickle

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    noproc = MPI.MESSAGE_NO_PROC
    noproc.Recv(None)
    noproc.Irecv(None).Wait()
    assert noproc, "receiving from the predefined MESSAGE_NO_PROC must not turn it into MESSAGE_NULL"
    m = MPI.Message(noproc)
    m.Recv(None)
    assert m == MPI.MESSAGE_NULL
    for h in (MPI.MESSAGE_NULL, MPI.MESSAGE_NO_PROC):
        assert pickle.loads(pickle.dumps(h)) is h
        copy = pickle.loads(pickle.dumps(MPI.Message(h)))
        assert copy is not h and copy == h
    assert MPI.Message.Iprobe(c, c.rank, 4) is None
    req = c.Isend(np.arange(3, dtype="i4"), c.rank, 4)
    m = MPI.Message.Probe(c, c.rank, 4)
    with pytest.raises(ValueError):
        pickle.dumps(m)
    got = np.zeros(3, "i4")
    m.Recv(got)
    req.Wait()
    assert list(got) == [0, 1, 2]
    req = c.Isend(np.arange(3, dtype="i4"), c.rank, 5)
    c.Probe(c.rank, 5)
    m = MPI.Message.Iprobe(c, c.rank, 5)
    assert isinstance(m, MPI.Message) and m
    m.Recv(got)
    req.Wait()


@pytest.mark.parametrize("n", [1, 2])
def test_message_handles(n):
    run_ranks(_message_handles, n, timeout=60)


def _bad_status_loses_nothing():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for size in (3, 200_000):  # eager and rendezvous
        out = np.arange(size, dtype=float)
        sreq = c.Isend(out, (r + 1) % n, 2)
        b = np.zeros(size)
        for call, f in (("Recv", lambda: c.Recv(b, (r - 1) % n, 2, status="bogus")),
                        ("Probe", lambda: c.Probe((r - 1) % n, 2, status="bogus")),
                        ("Iprobe", lambda: c.Iprobe((r - 1) % n, 2, status=0)),
                        ("Mprobe", lambda: c.Mprobe((r - 1) % n, 2, status=[])),
                        ("Improbe", lambda: c.Improbe((r - 1) % n, 2, status=object()))):
            with pytest.raises(TypeError, match=f"^{call}: status must be a Status or None"):
                f()
        assert (b == 0).all()
        msg = c.Mprobe((r - 1) % n, 2)  # the message is still there
        with pytest.raises(TypeError, match="^Message.Recv: status"):
            msg.Recv(b, status="bogus")
        with pytest.raises((TypeError, ValueError, BufferError)):
            msg.Recv(b"read-only bytes")  # a bad buffer is refused before the message leaves the handle
        st = MPI.Status()
        msg.Recv(b, st)
        assert (b == np.arange(size)).all() and st.Get_source() == (r - 1) % n
        sreq.Wait()
        c.Barrier()
    return True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_status_or_buffer_is_refused_before_the_message_is_taken(n):
    """Recv(status="bogus") consumed the message, then raised AttributeError; Message.Recv with a
    bad buffer lost the matched message."""
    assert run_ranks(_bad_status_loses_nothing, n, timeout=60) == [True] * n


def test_attach_buffer_none_is_buffer_automatic_as_in_mpi4py():
    from gpumpi import MPI

    MPI.Attach_buffer(None)
    assert MPI.Detach_buffer() is MPI.BUFFER_AUTOMATIC
    c = MPI.COMM_SELF.Dup()
    c.Attach_buffer(None)
    c.bsend("x", 0, 3)  # an automatic buffer takes any size
    assert c.recv(source=0, tag=3) == "x"
    assert c.Detach_buffer() is MPI.BUFFER_AUTOMATIC
    c.Free()
