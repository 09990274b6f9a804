"""The ``mpi`` transport and the mpi4py bootstrap, under MPICH's ``mpiexec`` from pip.

Every body runs on ranks started by ``mpiexec`` (:func:`gpumpi.testing.run_mpiexec`),
grouped into pretend nodes (``GPUMPI_SIM_NODES``) so that ranks of one machine talk through
the ``mpi`` transport as ranks of other nodes would.  The expectations are independent:
NumPy patterns computed on the receiving side, the MPI standard's ordering rule per source,
and the DESIGN rule that a pair of one node never touches MPI and a pair of two nodes never
touches shared memory (counted on the transports: MPI frames and transfers sent per peer,
the bytes each ring carried).  The full suites (p2p, collectives, communicators) run the
same way with ``GPUMPI_TEST_MPIEXEC=2 pytest ...``; this module is the part CI always runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpumpi.testing import SimDeviceArray, mpiexec_path, run_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]

if mpiexec_path() is None:
    pytest.skip("needs mpiexec (pip install mpich mpi4py)", allow_module_level=True)


def pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 131 + seed * 7) % 251).astype(np.uint8)


SIZES = [0, 1, 8, 4096, 65536, 65537, 300_000, (1 << 20) + 3, 3 << 20]


def _counters():
    """Per peer: frames and bulk transfers that went through MPI, bytes through our ring."""
    from gpumpi import _runtime as rt

    eng = rt.ENGINE
    far = eng.tr.far
    sent = dict(far.count) if far is not None else {}
    rings = {}
    for p, w in enumerate(eng.tr.out):
        if w is not None:
            rings[p] = int(w.ctl[8])  # producer position: bytes ever written into ring (me, p)
    moved = {}
    for lst in eng.world.regions.values():
        for t in lst:
            if t.name == "mpi":
                for p, k in t.count.items():
                    moved[p] = moved.get(p, 0) + k
    return sent, rings, moved


def _every_pair_both_protocols():
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    before = _counters()
    for size in SIZES:
        reqs = []
        outs = {p: pattern(size, r * 16 + p) for p in range(n)}
        for p in range(n):
            reqs.append(c.Isend(outs[p], p, tag=7))
        for p in range(n):
            got = np.empty(size, np.uint8)
            st = MPI.Status()
            c.Recv(got, p, 7, st)
            assert np.array_equal(got, pattern(size, p * 16 + r)), (size, p)
            assert st.Get_source() == p and st.Get_count(MPI.BYTE) == size
        MPI.Request.Waitall(reqs)
    sent, rings, moved = _counters()
    me = rt.node_of(r)
    for p in range(n):
        if p == r:
            continue
        if rt.node_of(p) == me:  # one node: rings only, never MPI
            assert sent.get(p, 0) == 0 and moved.get(p, 0) == 0, (p, sent, moved)
            assert rings[p] > before[1][p], p
        else:  # two nodes: MPI only, no ring exists
            assert p not in rings, p
            assert sent.get(p, 0) > before[0].get(p, 0), (p, sent)
            assert moved.get(p, 0) > before[2].get(p, 0), (p, moved)  # the rendezvous sizes went DIRECT
    return [rt.node_of(p) for p in range(n)]


@pytest.mark.parametrize("n,nodes", [(1, 2), (2, 2), (3, 2), (4, 2), (4, 4), (4, 1)])
def test_pairs_use_the_transport_of_their_placement(n, nodes):
    got = run_mpiexec(_every_pair_both_protocols, n, nodes=nodes, timeout=90)
    expect = [r * min(nodes, n) // n for r in range(n)]
    assert got == [expect] * n


def _chunked_and_typed():
    """Large messages cut into GPUMPI_MPI_CHUNK pieces, derived datatypes, truncation, Ssend."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    peer = n - 1 - r
    for size in (65535, 65536, 3 * 65536 + 5, 1 << 20):
        got = np.zeros(size, np.uint8)
        c.Sendrecv(pattern(size, r), peer, 1, got, peer, 1)
        assert np.array_equal(got, pattern(size, peer))
    # a strided type: every other double of a 2-D array's column block
    a = np.arange(200_000, dtype=np.float64).reshape(1000, 200) + r
    vec = MPI.DOUBLE.Create_vector(1000, 50, 200).Commit()
    out = np.zeros((1000, 50))
    rq = c.Irecv([out, MPI.DOUBLE], peer, 2)
    c.Send([a[:, 3:], 1, vec], peer, 2)
    rq.Wait()
    vec.Free()
    assert np.array_equal(out, (np.arange(200_000, dtype=np.float64).reshape(1000, 200) + peer)[:, 3:53])
    # truncation: the receive fails, the sender completes, nothing else moves
    if r < peer:
        c.Send(pattern(300_000, 9), peer, 3)
    elif r > peer:
        small = np.zeros(1000, np.uint8)
        with pytest.raises(MPI.Exception) as e:
            c.Recv(small, peer, 3)
        assert e.value.Get_error_class() == MPI.ERR_TRUNCATE
    # synchronous sends of both sizes complete after the match
    for size in (8, 300_000):
        if r < peer:
            c.Ssend(pattern(size, 4), peer, 4)
        elif r > peer:
            got = np.empty(size, np.uint8)
            c.Recv(got, peer, 4)
            assert np.array_equal(got, pattern(size, 4))
    c.Barrier()
    return True


def test_large_and_typed_messages_between_nodes():
    assert run_mpiexec(_chunked_and_typed, 2, nodes=2, env={"GPUMPI_MPI_CHUNK": "65536"}) == [True, True]


def _device_between_nodes():
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    peer = n - 1 - r
    for size in (8, 70_000, 1 << 20, (3 << 20) + 1):
        src = SimDeviceArray.from_numpy(pattern(size, r))
        dst = SimDeviceArray.from_numpy(np.zeros(size, np.uint8))
        host = np.zeros(size, np.uint8)
        c.Sendrecv(src, peer, 5, dst, peer, 5)
        assert np.array_equal(dst.get(), pattern(size, peer)), size
        c.Sendrecv(src, peer, 6, host, peer, 6)  # device to host
        assert np.array_equal(host, pattern(size, peer)), size
        dst2 = SimDeviceArray.from_numpy(np.zeros(size, np.uint8))
        c.Sendrecv(pattern(size, r + 1), peer, 7, dst2, peer, 7)  # host to device
        assert np.array_equal(dst2.get(), pattern(size, peer + 1)), size
    dev = next(t for t in rt.ENGINE.world.regions["device"] if t.name == "mpi")
    return dev.cuda


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("aware", ["0", "1"], ids=["staged", "cuda-aware"])
def test_device_buffers_between_nodes(aware, n):
    """Device data through pinned host staging (the library is not CUDA-aware), and as device
    pointers (``GPUMPI_MPI_CUDA=1``: simulated device memory is host memory, so MPICH can
    take it as it is) -- each chunked into pieces smaller than the messages."""
    env = {"GPUMPI_DEVICE": "sim", "GPUMPI_MPI_CUDA": aware, "GPUMPI_MPI_CHUNK": "262144"}
    assert run_mpiexec(_device_between_nodes, n, nodes=2, env=env) == [aware == "1"] * n


def _storm():
    """Every rank sends numbered messages of mixed sizes to every other; receivers take them
    with ANY_SOURCE/ANY_TAG: nothing lost, and per source in the order sent (MPI's rule)."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    rng = np.random.default_rng(r)
    count = 60
    sizes = [int(s) for s in rng.choice([0, 8, 1000, 70_000, 200_000], size=count * n)]
    reqs = []
    k = 0
    for i in range(count):
        for p in range(n):
            if p == r:
                continue
            size = sizes[k]
            k += 1
            buf = np.full(size + 8, 0, np.uint8)
            buf[:8] = np.frombuffer(np.int64(i).tobytes(), np.uint8)
            buf[8:] = pattern(size, r + i)
            reqs.append(c.Isend(buf, p, tag=i % 5))
    seen = {p: [] for p in range(n) if p != r}
    big = np.empty(200_008, np.uint8)
    st = MPI.Status()
    for _ in range(count * (n - 1)):
        c.Recv(big, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
        src, m = st.Get_source(), st.Get_count(MPI.BYTE)
        i = int(np.frombuffer(big[:8].tobytes(), np.int64)[0])
        assert st.Get_tag() == i % 5
        assert np.array_equal(big[8:m], pattern(m - 8, src + i)), (src, i)
        seen[src].append(i)
    MPI.Request.Waitall(reqs)
    for p, got in seen.items():
        assert got == list(range(count)), (p, got[:10])
    c.Barrier()
    return True


@pytest.mark.parametrize("n", [3, 4])
def test_wildcard_storm_across_nodes_loses_and_reorders_nothing(n):
    assert run_mpiexec(_storm, n, nodes=2, timeout=100) == [True] * n


def _compiled_far_path(eager):
    """Blocking Send/Recv between nodes once the compiled path (fastmpi) is in: every size
    around the far eager limit and the data message limit, specific and wildcard sources
    (a rank of this node and one of the other sending), a truncation and a type mismatch
    (left to the engine, which reports them), and Isend/Irecv mixed in; the data is the
    NumPy pattern, and the compiled path must have been the one that moved the small ones."""
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    eng = rt.ENGINE
    peer = {0: n - 1, n - 1: 0}.get(r)  # ranks 0 and n-1 are on two nodes
    sizes = [0, 1, 8, eager - 1, eager, eager + 1, 65536, (1 << 20) + 3, (3 << 18) + 5]
    if peer is not None:
        for k, size in enumerate(sizes * 2):
            out = pattern(size, r * 8 + k)
            got = np.full(size, 255, np.uint8)
            if r == 0:
                c.Send(out, peer, tag=k)
                c.Recv(got, peer, tag=k)
            else:
                c.Recv(got, peer, tag=k)
                c.Send(out, peer, tag=k)
            assert np.array_equal(got, pattern(size, peer * 8 + k)), (size, k)
        assert eng.mtab is not None, "the compiled path between nodes is not in use"
        sent = eng.tr.far.count[peer]
        for _ in range(50):  # one frame per small message, sent by the compiled path
            c.Send(np.zeros(8, np.uint8), peer, tag=99)
            c.Recv(np.zeros(8, np.uint8), peer, tag=99)
        assert eng.tr.far.count[peer] == sent + 50
        # a message too long for the buffer, and one of another type: the engine's errors
        for size in (100, 300_000):
            if r == 0:
                c.Send(pattern(size, 1), peer, tag=5)
            else:
                small = np.zeros(size // 2, np.uint8)
                try:
                    c.Recv(small, peer, tag=5)
                except MPI.Exception as e:
                    assert e.Get_error_class() == MPI.ERR_TRUNCATE
                else:
                    raise AssertionError("no truncation error")
                assert np.array_equal(small, pattern(size, 1)[: size // 2])
        if r == 0:
            c.Send([np.arange(10, dtype=np.float64), MPI.DOUBLE], peer, tag=6)
        else:
            try:
                c.Recv([np.zeros(10, np.int64), MPI.INT64_T], peer, tag=6)
            except MPI.Exception as e:
                assert e.Get_error_class() == MPI.ERR_TYPE
            else:
                raise AssertionError("no type mismatch error")
        # objects: the compiled send and recv between nodes (one frame a small object), every size
        # around the limits (a pickle pushed ahead, one of the general path), specific and wildcard
        objs = [None, {"k": 1, "v": [1.5]}, b"x" * (eager - 64), b"y" * (eager + 100), list(range(3000)),
                b"z" * 300_000]
        for k, o in enumerate(objs * 2):
            st = MPI.Status()
            if r == 0:
                c.send(o, peer, tag=k)
                got = c.recv(None, peer if k % 2 else MPI.ANY_SOURCE, k, st)
            else:
                got = c.recv(None, MPI.ANY_SOURCE if k % 2 else peer, k, st)
                c.send(got, peer, tag=k)
            assert got == o and st.Get_source() == peer and st.Get_tag() == k, (k, st.Get_source())
        sent = eng.tr.far.count[peer]
        for i in range(30):
            if r == 0:
                c.send({"i": i}, peer, 9)
                assert c.recv(None, peer, 9) == {"i": -i}
            else:
                c.send({"i": -c.recv(None, MPI.ANY_SOURCE, 9)["i"]}, peer, 9)
        assert eng.tr.far.count[peer] == sent + 30
    c.Barrier()
    # wildcard receives on rank 0, from every other rank (its node's and the other's)
    count = 20
    if r == 0:
        seen = {p: 0 for p in range(1, n)}
        buf = np.empty(70_000, np.uint8)
        st = MPI.Status()
        for _ in range(count * (n - 1)):
            c.Recv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
            src, i, m = st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)
            assert i == seen[src], (src, i, seen[src])
            assert np.array_equal(buf[:m], pattern(m, src + i))
            seen[src] += 1
    else:
        for i in range(count):
            size = (8, eager + 100, 65536)[i % 3]
            if i % 2:
                c.Send(pattern(size, r + i), 0, tag=i)
            else:
                c.Isend(pattern(size, r + i), 0, tag=i).Wait()
    c.Barrier()
    return True


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("eager", [4096, 0])
def test_compiled_path_between_nodes(eager, n):
    env = {"GPUMPI_FASTPATH": "on", "GPUMPI_MPI_EAGER": str(eager), "GPUMPI_MPI_CHUNK": "1048576"}
    assert run_mpiexec(_compiled_far_path, n, nodes=2, args=(max(eager, 1),), env=env, timeout=100) == [True] * n


def test_python_twins_between_nodes():
    # the same with the compiled layer's methods off (their Python twins: the Numba calls from Python)
    env = {"GPUMPI_FASTPATH": "on", "GPUMPI_MPI_EAGER": "4096", "GPUMPI_MPI_CHUNK": "1048576", "GPUMPI_COMPILED": "0"}
    assert run_mpiexec(_compiled_far_path, 3, nodes=2, args=(4096,), env=env, timeout=100) == [True] * 3


def _nonblocking_pushed(eager, chunk):
    """Isend/Irecv windows between nodes of messages above the far eager limit, which the
    compiled path pushes ahead (Engine.isend_far) and takes into lazily posted receives
    (Engine._pending), their MPI requests in slots tested together: every byte, status and
    per-source order right, next to eager messages, a rank of the receiver's own node, a
    wildcard, the general path's receives, a probe, a cancel, a truncation and a type
    mismatch; and the slots really carried the pushed messages."""
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    eng = rt.ENGINE
    far = n - 1  # rank 0's partner on the other node
    sizes = [eager + 1, 8, 65536 + 7, chunk, 3, chunk + 5, eager]  # chunk + 5: two data messages (the engine's)
    win = len(sizes) * 3
    rounds = 6
    c.Barrier()
    if r == 0:
        for k in range(rounds):
            reqs, bufs = [], []
            for j in range(win):
                size = sizes[j % len(sizes)]
                b = np.full(size, 255, np.uint8)
                bufs.append((far, j, b))
                src = MPI.ANY_SOURCE if (k == rounds - 1 and j % 5 == 0) else far
                reqs.append(c.Irecv(b, src, 7))
            if n > 2:  # a rank of this node sends too, on another tag, into general receives
                b1 = np.full(chunk, 255, np.uint8)
                reqs.append(c.Irecv([b1, chunk, MPI.BYTE], 1, 8))
                bufs.append((1, k, b1))
            sts = [MPI.Status() for _ in reqs]
            MPI.Request.Waitall(reqs, sts)
            for (p, j, b), st in zip(bufs, sts):
                size = sizes[j % len(sizes)] if p == far else chunk
                seed = k * 100 + j
                assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)) == (p, 7 if p == far else 8, size), \
                    (k, j, size)
                assert np.array_equal(b, pattern(size, seed)), (k, j, size)
            c.Send(np.zeros(1, np.uint8), far, 9)
        assert eng.mslots is not None, "the compiled path between nodes is not in use"
    elif r == far:
        for k in range(rounds):
            reqs = [c.Isend(pattern(sizes[j % len(sizes)], k * 100 + j), 0, 7) for j in range(win)]
            MPI.Request.Waitall(reqs)
            c.Recv(np.zeros(1, np.uint8), 0, 9)
        assert eng.mslots is not None, "the compiled path between nodes is not in use"
    elif r == 1:
        for k in range(rounds):
            c.Isend(pattern(chunk, k * 100 + k), 0, 8).Wait()
    c.Barrier()
    # the compiled path carried the pushed messages: on a second pass, neither side's general
    # path (Engine.isend, Engine._post_lazy) saw one, and no slot stays held
    if r in (0, far) and eng.mslots is not None:
        general = []
        isend, post_lazy = eng.isend, eng._post_lazy
        eng.isend = lambda *a, **k: general.append("isend") or isend(*a, **k)
        eng._post_lazy = lambda x: general.append("post") or post_lazy(x)
        try:
            if r == 0:
                bs = [np.zeros(chunk, np.uint8) for _ in range(8)]
                MPI.Request.Waitall([c.Irecv(b, far, 3) for b in bs])
                assert all(np.array_equal(b, pattern(chunk, i)) for i, b in enumerate(bs))
            else:
                MPI.Request.Waitall([c.Isend(pattern(chunk, i), 0, 3) for i in range(8)])
        finally:
            del eng.isend, eng._post_lazy
        assert general == [], general
        assert not eng.mslots.owner and eng.nslotted == 0, "a slot is still held"
    c.Barrier()
    # matching order against the general path, a probe, a cancel and the errors, pushed messages
    if r == far:
        c.Recv(np.zeros(1, np.uint8), 0, 1)
        c.Send(pattern(eager + 10, 1), 0, 2)
        c.Send(pattern(eager + 20, 2), 0, 2)
        c.Recv(np.zeros(1, np.uint8), 0, 1)
        c.Send(pattern(eager + 30, 3), 0, 3)
        c.Send(pattern(eager + 40, 4), 0, 3)
        c.Recv(np.zeros(1, np.uint8), 0, 1)
        c.Send(pattern(eager + 50, 5), 0, 4)
        c.Send(pattern(eager + 60, 6), 0, 5)  # truncated
        c.Send([np.arange((eager + 80) // 8, dtype=np.float64), MPI.DOUBLE], 0, 6)  # another type
    elif r == 0:
        a, b = np.zeros(eager + 10, np.uint8), np.zeros(eager + 20, np.uint8)
        ra = c.Irecv(a, far, 2)
        rb = c.Irecv([b, 1, MPI.Datatype.Create_contiguous(MPI.BYTE, eager + 20).Commit()], far, 2)  # general
        c.Send(np.zeros(1, np.uint8), far, 1)
        MPI.Request.Waitall([ra, rb])
        assert np.array_equal(a, pattern(eager + 10, 1)) and np.array_equal(b, pattern(eager + 20, 2))
        p = np.zeros(eager + 30, np.uint8)
        rp = c.Irecv(p, far, 3)
        c.Send(np.zeros(1, np.uint8), far, 1)
        st = MPI.Status()
        c.Probe(far, 3, st)
        assert st.Get_count(MPI.BYTE) == eager + 40  # the first message is the lazy receive's
        rp.Wait()
        assert np.array_equal(p, pattern(eager + 30, 3))
        q = np.zeros(eager + 40, np.uint8)
        c.Recv(q, far, 3)
        assert np.array_equal(q, pattern(eager + 40, 4))
        rc = c.Irecv(np.zeros(eager + 50, np.uint8), far, 4)
        rc.Cancel()
        rc.Wait(st)
        assert st.Is_cancelled()
        c.Send(np.zeros(1, np.uint8), far, 1)
        got = np.zeros(eager + 50, np.uint8)
        c.Recv(got, far, 4)
        assert np.array_equal(got, pattern(eager + 50, 5))
        small = np.zeros(eager + 2, np.uint8)
        rt_, rm = c.Irecv(small, far, 5), c.Irecv(np.zeros((eager + 80) // 8, np.int64), far, 6)
        with pytest.raises(MPI.Exception) as ei:
            rt_.Wait()
        assert ei.value.Get_error_class() == MPI.ERR_TRUNCATE
        assert np.array_equal(small, pattern(eager + 60, 6)[: eager + 2])
        with pytest.raises(MPI.Exception) as ei:
            rm.Wait()
        assert ei.value.Get_error_class() == MPI.ERR_TYPE
    c.Barrier()
    return True


@pytest.mark.parametrize("n", [2, 3, 4])
def test_nonblocking_pushed_messages_between_nodes(n):
    env = {"GPUMPI_FASTPATH": "on", "GPUMPI_MPI_EAGER": "4096", "GPUMPI_MPI_CHUNK": "262144"}
    assert run_mpiexec(_nonblocking_pushed, n, nodes=2, args=(4096, 262144), env=env, timeout=100) == [True] * n


def _communicators_and_collectives():
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    node = c.Split_type(MPI.COMM_TYPE_SHARED)
    members = node.allgather(r)
    assert members == [p for p in range(n) if rt.node_of(p) == rt.node_of(r)]
    for size in (1, 1000, 300_000):
        a = np.arange(size, dtype=np.float64) * (r + 1)
        out = np.empty_like(a)
        c.Allreduce(a, out, MPI.SUM)
        assert np.allclose(out, np.arange(size) * (n * (n + 1) / 2))
        b = np.arange(size, dtype=np.float64) if r == 1 % n else np.zeros(size)
        c.Bcast(b, root=1 % n)
        assert np.array_equal(b, np.arange(size, dtype=np.float64))
        g = np.empty((n, size))
        c.Allgather(np.full(size, float(r)), g)
        assert np.array_equal(g, np.repeat(np.arange(n, dtype=float)[:, None], size, 1))
    for _ in range(300):  # small calls in a loop: the compiled collectives must stay off between nodes
        x = np.array([float(r)])
        y = np.empty(1)
        c.Allreduce(x, y, MPI.SUM)
        assert y[0] == n * (n - 1) / 2
        c.Barrier()
    assert c.allgather({"r": r}) == [{"r": p} for p in range(n)]
    # a window over one node and one over ranks of several nodes (MPI RMA) both work
    for comm in (node, c):
        w = MPI.Win.Allocate(8 * comm.size, 8, comm=comm)
        w.Fence()
        w.Put(np.array([float(r)]), 0, target=comm.rank)
        w.Fence()
        if comm.rank == 0:
            assert np.array_equal(np.frombuffer(w.tomemory(), np.float64), np.array(comm.allgather(float(r))))
        else:
            comm.allgather(float(r))
        w.Free()
    # a shared window needs members that share memory
    with pytest.raises(MPI.Exception) as e:
        MPI.Win.Allocate_shared(8, 8, comm=c)
    assert e.value.Get_error_class() == MPI.ERR_RMA_SHARED
    node.Free()
    c.Barrier()
    return True


def test_communicators_collectives_and_windows_across_nodes():
    assert run_mpiexec(_communicators_and_collectives, 4, nodes=2) == [True] * 4


def _hierarchical_collectives(count):
    """Barrier/Bcast/Reduce/Allreduce over 2 nodes of 3 ranks: only the leaders (each node's
    lowest rank; a root leads its own node) send anything through MPI, and the results are
    NumPy's."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    c.Barrier()
    sent0 = sum(_counters()[0].values())
    for size in (1, count):
        a = np.arange(size, dtype=np.float64) + r
        out = np.empty(size)
        c.Allreduce(a, out, MPI.SUM)
        assert np.array_equal(out, n * np.arange(size) + n * (n - 1) / 2)
        out[:] = 0
        c.Reduce(a, out if r == 0 else None, MPI.SUM, root=0)
        if r == 0:
            assert np.array_equal(out, n * np.arange(size) + n * (n - 1) / 2)
        b = np.arange(size, dtype=np.float64) if r == 0 else np.zeros(size)
        c.Bcast(b, root=0)
        assert np.array_equal(b, np.arange(size, dtype=np.float64))
        c.Barrier()
    return sum(_counters()[0].values()) - sent0


def test_hierarchical_collectives_cross_nodes_only_between_leaders():
    sent = run_mpiexec(_hierarchical_collectives, 6, nodes=2, args=(300_000,), timeout=100)
    assert sent[0] > 0 and sent[3] > 0, sent  # the leaders, 0 and 3
    assert [sent[i] for i in (1, 2, 4, 5)] == [0, 0, 0, 0], sent


# --- windows and Global Arrays over ranks of several nodes (MPI RMA, gpumpi.rma.mpi) -------------
def _windows_across_nodes(flavor):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    N = 32
    if flavor == "allocate":
        w = MPI.Win.Allocate(8 * N, 8, comm=c)
        mem = np.frombuffer(w.tomemory(), np.int64)
    elif flavor == "create":
        mem = np.zeros(N, np.int64)
        w = MPI.Win.Create(mem, 8, comm=c)
    else:
        mem = np.zeros(N, np.int64)
        w = MPI.Win.Create_dynamic(comm=c)
        w.Attach(mem)
    bases = c.allgather(MPI.Get_address(mem)) if flavor == "dynamic" else [0] * n
    unit = 8 if flavor == "dynamic" else 1

    def at(t, i):  # the displacement of element i of rank t
        return bases[t] + i * unit

    assert w.Get_group().Get_size() == n and w.Get_attr(MPI.WIN_CREATE_FLAVOR) == {
        "allocate": MPI.WIN_FLAVOR_ALLOCATE, "create": MPI.WIN_FLAVOR_CREATE, "dynamic": MPI.WIN_FLAVOR_DYNAMIC}[flavor]
    mem[:] = 0
    c.Barrier()
    # fence: every rank puts 100 + its rank into element r of every target, then gets them back
    w.Fence()
    for t in range(n):
        w.Put(np.array([100 + r], np.int64), t, at(t, r))
    w.Fence()
    assert mem[:n].tolist() == [100 + p for p in range(n)]
    got = np.zeros(n, np.int64)
    w.Fence()
    w.Get(got, (r + 1) % n, at((r + 1) % n, 0))
    w.Fence()
    assert got.tolist() == [100 + p for p in range(n)]
    # a strided target (vector type): every other element from 8 on, of the left neighbour
    left = (r - 1) % n
    vec = MPI.INT64_T.Create_vector(4, 1, 2).Commit()
    w.Fence()
    w.Put([np.arange(4, dtype=np.int64) + 10 * r, MPI.INT64_T], left, (at(left, 8), 1, vec))
    w.Fence()
    right = (r + 1) % n
    assert mem[8:16].tolist() == [10 * right, 0, 10 * right + 1, 0, 10 * right + 2, 0, 10 * right + 3, 0]
    back = np.zeros(4, np.int64)
    w.Lock(left, MPI.LOCK_SHARED)
    w.Get([back, MPI.INT64_T], left, (at(left, 8), 1, vec))
    w.Unlock(left)
    assert back.tolist() == (np.arange(4) + 10 * r).tolist()
    vec.Free()
    c.Barrier()
    # passive target atomics at rank 0 from every rank (every target through MPI): a counter of
    # Fetch_and_op (each old value seen once), an exclusive lock around a read-modify-write, and
    # Accumulate -- the totals are exact
    K = 50
    seen = []
    one = np.ones(1, np.int64)
    old = np.zeros(1, np.int64)
    w.Lock_all()
    for _ in range(K):
        w.Fetch_and_op(one, old, 0, at(0, 20), MPI.SUM)
        seen.append(int(old[0]))
        w.Accumulate(np.array([2], np.int64), 0, at(0, 21), MPI.SUM)
    w.Unlock_all()
    for _ in range(K):
        w.Lock(0, MPI.LOCK_EXCLUSIVE)
        cur = np.zeros(1, np.int64)
        w.Get(cur, 0, at(0, 22))
        w.Flush(0)
        w.Put(cur + 1, 0, at(0, 22))
        w.Unlock(0)
    allseen = sorted(sum(c.allgather(seen), []))
    assert allseen == list(range(n * K))
    # compare-and-swap: exactly one rank wins element 23 of the last rank
    res = np.zeros(1, np.int64)
    w.Lock(n - 1, MPI.LOCK_SHARED)
    w.Compare_and_swap(np.array([r + 1], np.int64), np.zeros(1, np.int64), res, n - 1, at(n - 1, 23))
    w.Unlock(n - 1)
    winners = c.allgather(int(res[0]) == 0)
    assert winners.count(True) == 1
    c.Barrier()
    if r == 0:
        assert mem[20] == n * K and mem[21] == 2 * n * K and mem[22] == n * K
    if r == n - 1:
        assert mem[23] == winners.index(True) + 1
    # general active target: every rank exposes to its left neighbour and accesses its right one
    grp = c.Get_group()
    lg, rg = grp.Incl([left]), grp.Incl([right])
    w.Post(lg)
    w.Start(rg)
    w.Put(np.array([1000 + r], np.int64), right, at(right, 24))
    w.Complete()
    w.Wait()
    assert mem[24] == 1000 + left
    for g in (lg, rg, grp):
        g.Free()
    # errors are gpumpi's, before MPI sees the call: outside the window, a bad epoch
    w.Lock(right, MPI.LOCK_SHARED)
    with pytest.raises(MPI.Exception) as e:
        w.Put(np.zeros(2, np.int64), right, at(right, N - 1))
    assert e.value.Get_error_class() == MPI.ERR_RMA_RANGE
    w.Unlock(right)
    with pytest.raises(MPI.Exception) as e:
        w.Put(np.zeros(1, np.int64), right, at(right, 0))
    assert e.value.Get_error_class() == MPI.ERR_RMA_SYNC
    c.Barrier()
    if flavor == "dynamic":
        w.Detach(mem)
    w.Free()
    return True


@pytest.mark.parametrize("n, flavor", [(4, "allocate"), (3, "create"), (2, "dynamic"), (4, "dynamic")])
def test_windows_across_nodes(n, flavor):
    """A window over ranks of two nodes is carried by MPI RMA: each synchronization mode, a
    datatype target, atomics exact from every rank, and gpumpi's own error checks."""
    assert run_mpiexec(_windows_across_nodes, n, nodes=2, args=(flavor,), timeout=100) == [True] * n


def _complex_accumulate():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    w = MPI.Win.Allocate(16 * 4, 16, comm=c)
    mem = np.frombuffer(w.tomemory(), np.complex128)
    mem[:] = 0
    c.Barrier()
    w.Lock_all()
    for i in range(20):  # complex: the accumulate lock's way (read, add, write), still exact
        w.Accumulate(np.full(4, complex(1, r), np.complex128), 0, 0, MPI.SUM)
    w.Unlock_all()
    c.Barrier()
    ok = True
    if r == 0:
        ok = np.array_equal(mem, np.full(4, complex(20 * n, 20 * n * (n - 1) / 2)))
    w.Free()
    return ok


def test_complex_accumulates_across_nodes_are_exact():
    assert run_mpiexec(_complex_accumulate, 4, nodes=2, timeout=100) == [True] * 4


def _logical_accumulates_by_cas():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    out = []
    for dt, T in ((np.int32, MPI.INT32_T), (np.int64, MPI.INT64_T)):
        w = MPI.Win.Allocate(24 * np.dtype(dt).itemsize, np.dtype(dt).itemsize, comm=c)
        impl = w._st.rt
        assert impl.far
        impl.logical_by_cas = True  # Open MPI's way (its osc/rdma ignores these ops), on MPICH too
        took = []
        by_cas = impl._logical_by_cas
        impl._logical_by_cas = lambda *a, **k: took.append(a[5]) or by_cas(*a, **k)
        mem = np.frombuffer(w.tomemory(), dt)
        start = np.arange(-4, 20, dtype=dt) % 5 - 2  # zeros and non-zeros of both signs
        mem[:] = start
        c.Barrier()
        vals = [np.array([(q + j) % 3 for j in range(8)], dt) for q in range(n)]  # every origin's
        vec = T.Create_vector(4, 1, 2).Commit()  # LOR: every other element of its section
        w.Lock_all()  # every origin at once on rank 0's three sections
        w.Accumulate([vals[r], T], 0, [0, 8, T], MPI.LAND)
        w.Accumulate([vals[r][:4], T], 0, [8, 1, vec], MPI.LOR)
        for j in range(8):
            w.Fetch_and_op([vals[r][j:j + 1], T], [np.zeros(1, dt), T], 0, 16 + j, MPI.LXOR)
        w.Unlock_all()
        vec.Free()
        c.Barrier()
        model = start.copy()
        for q in range(n):  # the three operations are commutative: any order gives this
            model[0:8] = np.logical_and(model[0:8], vals[q])
            model[8:16:2] = np.logical_or(model[8:16:2], vals[q][:4])
            model[16:24] = np.logical_xor(model[16:24], vals[q])
        ok = r != 0 or np.array_equal(mem, model)
        c.Barrier()
        if r == 1:  # Get_accumulate returns what it found
            old = np.zeros(8, dt)
            w.Lock(0)
            w.Get_accumulate([np.ones(8, dt), T], [old, T], 0, [0, 8, T], MPI.LAND)
            w.Unlock(0)
            ok = ok and np.array_equal(old, model[0:8])
        c.Barrier()
        if r == 0:
            ok = ok and np.array_equal(mem[0:8], np.logical_and(model[0:8], 1))
        ok = ok and took.count("LAND") == (2 if r == 1 else 1) and took.count("LOR") == 1 and took.count("LXOR") == 8
        w.Free()
        out.append(bool(ok))
    return out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_logical_accumulates_by_compare_and_swap_across_nodes(n):
    """LAND, LOR, LXOR of 4- and 8-byte integers the way gpumpi takes them under Open MPI (whose
    osc/rdma leaves the target unchanged): concurrent origins, strided targets, fetched values."""
    assert run_mpiexec(_logical_accumulates_by_cas, n, nodes=2, timeout=100) == [[True, True]] * n


def _device_window_across_nodes():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    try:
        w = MPI.Win.Allocate(8 * n, 8, comm=c, memory="device")
    except MPI.Exception as e:
        return e.Get_error_class()
    w.Fence()
    w.Put(np.array([float(r)]), 0, r)
    w.Fence()
    ok = True
    if r == 0:
        ok = w.tomemory().get().view(np.float64).tolist() == [float(p) for p in range(n)]
    w.Free()
    return ok


@pytest.mark.parametrize("aware", ["0", "1"])
def test_device_windows_across_nodes_need_a_cuda_aware_mpi(aware):
    """Without device pointers in the MPI library a device window over several nodes is refused
    on every rank alike; with them (GPUMPI_MPI_CUDA=1 on the simulated device) it works."""
    env = {"GPUMPI_DEVICE": "sim", "GPUMPI_MPI_CUDA": aware}
    from gpumpi import MPI

    want = True if aware == "1" else MPI.ERR_UNSUPPORTED_OPERATION
    assert run_mpiexec(_device_window_across_nodes, 3, nodes=2, env=env) == [want] * 3


def _ga_across_nodes():
    from gpumpi import MPI, ga

    ga.initialize()
    me, n = ga.nodeid(), ga.nnodes()
    a = ga.create(ga.C_DBL, (8, 6))
    ga.zero(a)
    if me == 0:
        ga.put(a, np.arange(48.0).reshape(8, 6))
    ga.sync()
    ok = np.array_equal(ga.get(a), np.arange(48.0).reshape(8, 6))
    ga.sync()  # every rank has read before anyone accumulates
    ga.acc(a, np.ones((8, 6)), alpha=me + 1)
    ga.sync()
    ok = ok and np.array_equal(ga.get(a), np.arange(48.0).reshape(8, 6) + n * (n + 1) / 2)
    cnt = ga.create(ga.C_LONG, (1,))
    ga.zero(cnt)
    got = [ga.read_inc(cnt, (0,)) for _ in range(25)]  # every old value handed out once
    allgot = sorted(sum(MPI.COMM_WORLD.allgather(got), []))
    ga.sync()
    ok = ok and int(ga.get(cnt)[0]) == 25 * n and allgot == list(range(25 * n))
    ga.destroy(a)
    ga.destroy(cnt)
    ga.terminate()
    return bool(ok)


def test_global_arrays_across_nodes():
    assert run_mpiexec(_ga_across_nodes, 4, nodes=2, timeout=100) == [True] * 4


def test_uncaught_exception_aborts_the_whole_job():
    """Failure follows the MPI launcher: the raising rank's traceback, prefixed with its rank,
    then MPI_Abort ends every rank (the others would wait in Barrier forever)."""
    prog = textwrap.dedent("""
        from gpumpi import MPI
        c = MPI.COMM_WORLD
        if c.rank == 1:
            raise RuntimeError("rank one fails")
        c.Barrier()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMPI_")}
    env["GPUMPI_SIM_NODES"] = "2"
    p = subprocess.run([mpiexec_path(), "-n", "3", sys.executable, "-c", prog], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0
    assert "[rank 1] RuntimeError: rank one fails" in p.stderr


def _info():
    import gpumpi

    before = gpumpi.query_gpu_support()  # not initialised yet: the engine it will use
    assert before["engine"] == "mpi" and before["mpi"] == {"library": None, "cuda_aware": None}
    import gpumpi.MPI  # noqa: F401  (initialises)

    q = gpumpi.query_gpu_support()
    return q["engine"], q["nodes"], q["mpi"]["library"].split()[0], q["mpi"]["cuda_aware"]


def _launcher_library() -> str:
    """The first word of the MPI library's version string, from the launcher that starts the
    job (MPICH's Hydra or Open MPI's prterun): independent of what the ranks report."""
    exe = mpiexec_path()
    if exe is None:
        pytest.skip("needs mpiexec (pip install mpich)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    if "HYDRA" in out:
        return "MPICH"
    if "Open MPI" in out:
        return "Open"
    pytest.skip(f"an mpiexec this test does not know ({out.splitlines()[:1]})")


def test_query_reports_the_engine_and_the_library():
    assert run_mpiexec(_info, 2, nodes=2) == [("mpi", 2, _launcher_library(), False)] * 2


def test_launcher_detection_and_settings_are_checked():
    """Which launcher started a process, from the variables MPICH/Intel (PMI), PMIx, Open MPI
    and srun steps set; gpumpirun's own job descriptor wins; bad settings fail at start-up."""
    from gpumpi import _config

    assert _config._read({}).under_mpi is False
    for env, name in [({"PMI_RANK": "0"}, "PMI_RANK"), ({"PMIX_RANK": "3"}, "PMIX_RANK"),
                      ({"OMPI_COMM_WORLD_RANK": "1"}, "OMPI_COMM_WORLD_RANK"),
                      ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "2"}, "SLURM_STEP_ID")]:
        cfg = _config._read(env)
        assert cfg.mpi_env == name and cfg.under_mpi, env
    # an sbatch script (the batch step) is no MPI launch; gpumpirun inside an allocation is gpumpirun's
    assert _config._read({"SLURM_STEP_ID": "4294967294", "SLURM_PROCID": "0"}).under_mpi is False
    assert _config._read({"PMI_RANK": "0", "GPUMPI_JOB_FD": "5"}).under_mpi is False
    with pytest.raises(ValueError, match=r"GPUMPI_SIM_NODES must be >= 0 \(-2\)"):
        _config._read({"GPUMPI_SIM_NODES": "-2"})
    with pytest.raises(ValueError, match="GPUMPI_MPI_CUDA must be auto, 1 or 0"):
        _config._read({"GPUMPI_MPI_CUDA": "maybe"})
    assert _config._read({"GPUMPI_MPI_CUDA": "on"}).mpi_cuda == "1"


def test_the_mpi_librarys_error_classes_are_taken_by_name():
    """An error the MPI library reports (windows across nodes) keeps its class under gpumpi's
    numbers (MPICH's) whatever the library's: Open MPI 5.0.11's values, as its mpi4py has them."""
    from types import SimpleNamespace

    from gpumpi import errors
    from gpumpi.rma import mpi as rma_mpi

    ompi = SimpleNamespace(SUCCESS=0, ERR_GROUP=9, ERR_TRUNCATE=15, ERR_ARG=13, ERR_OTHER=16, ERR_RMA_RANGE=68,
                           ERR_RMA_ATTACH=69, ERR_WIN=53, ERR_ASSERT=22, ERR_RANK=6)
    got = {name: rma_mpi.library_class(ompi, value) for name, value in vars(ompi).items()}
    assert got == {"SUCCESS": errors.ERR_OTHER, "ERR_GROUP": 8, "ERR_TRUNCATE": 14, "ERR_ARG": 12, "ERR_OTHER": 15,
                   "ERR_RMA_RANGE": 55, "ERR_RMA_ATTACH": 56, "ERR_WIN": 45, "ERR_ASSERT": 53, "ERR_RANK": 6}
    assert rma_mpi.library_class(ompi, 1234) == errors.ERR_OTHER  # a class gpumpi does not name
    w = rma_mpi.Window.__new__(rma_mpi.Window)
    w.M = ompi

    class Failed(Exception):
        def Get_error_class(self):
            return 53  # Open MPI's MPI_ERR_WIN

    e = w._failed(Failed("MPI_ERR_WIN: invalid window"), "Win.Create")
    assert e.Get_error_class() == errors.ERR_WIN and "Win.Create: the MPI library failed" in str(e)
