"""Buffer collectives on simulated device memory (``sim``), at 1-4 ranks, against NumPy.

A representative subset of the host matrix (test_coll_buffers.py) on
``gpumpi.testing.SimDeviceArray`` buffers: every collective blocking, a nonblocking and a
persistent batch, IN_PLACE, mixed host/device send and receive buffers, and a check
that device reductions never copy the data through host memory (the sim adapter's
``memcpy`` is wrapped to record the memory kinds of every copy).
"""

import numpy as np
import pytest

from gpumpi.testing import one_node_only, run_ranks

pytestmark = pytest.mark.timeout(120)

NS = [1, 2, 3, 4]


def vals(rank, count, dt, seed=0):
    g = np.random.default_rng([seed, rank, count])
    return g.integers(-3, 4, count).astype(dt)


def eq(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    assert np.array_equal(got, want), (what, got[:20], want[:20])


def _mk(kind, a):
    from gpumpi.testing import SimDeviceArray

    return SimDeviceArray.from_numpy(a) if kind == "sim" else np.array(a)


def _get(a):
    return a if isinstance(a, np.ndarray) else a.get()


def _every_collective(skind, rkind, sizes):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for k in sizes:
        every = [vals(p, k, "f8", k) for p in range(n)]
        what = (skind, rkind, k)
        for root in range(n):
            b = _mk(rkind, every[r] if r == root else np.zeros(k))
            c.Bcast(b, root)
            eq(_get(b), every[root], ("Bcast", root) + what)
            rb = _mk(rkind, np.zeros(n * k))
            c.Gather(_mk(skind, every[r]), rb, root)
            if r == root:
                eq(_get(rb), np.concatenate(every), ("Gather", root) + what)
            rb = _mk(rkind, np.zeros(k))
            c.Scatter(_mk(skind, np.concatenate(every)), rb, root)
            eq(_get(rb), every[r], ("Scatter", root) + what)
            rb = _mk(rkind, np.zeros(k))
            c.Reduce(_mk(skind, every[r]), rb, MPI.SUM, root)
            if r == root:
                eq(_get(rb), sum(every), ("Reduce", root) + what)
        rb = _mk(rkind, np.zeros(n * k))
        c.Allgather(_mk(skind, every[r]), rb)
        eq(_get(rb), np.concatenate(every), ("Allgather",) + what)
        rows = [vals(p, n * k, "f8", k + 1) for p in range(n)]
        rb = _mk(rkind, np.zeros(n * k))
        c.Alltoall(_mk(skind, rows[r]), rb)
        eq(_get(rb), np.concatenate([rows[q][r * k:(r + 1) * k] for q in range(n)]), ("Alltoall",) + what)
        # vector forms: irregular counts, gaps, zero counts
        counts = [(3 * p + 1) % 4 * max(k // 4, 1) if k else 0 for p in range(n)]
        displs = [sum(counts[:p]) + 2 * p for p in range(n)]
        span = displs[-1] + counts[-1] + 1
        mine = vals(r, counts[r], "f8", k + 2)
        want = np.zeros(span)
        for p in range(n):
            want[displs[p]:displs[p] + counts[p]] = vals(p, counts[p], "f8", k + 2)
        rb = _mk(rkind, np.zeros(span))
        c.Allgatherv(_mk(skind, mine), [rb, counts, displs, MPI.DOUBLE])
        eq(_get(rb), want, ("Allgatherv",) + what)
        rb = _mk(rkind, np.zeros(span))
        c.Gatherv(_mk(skind, mine), [rb, counts, displs, MPI.DOUBLE], 0)
        if r == 0:
            eq(_get(rb), want, ("Gatherv",) + what)
        rb = _mk(rkind, np.zeros(counts[r]))
        c.Scatterv([_mk(skind, want), counts, displs, MPI.DOUBLE], rb, n - 1)
        eq(_get(rb), mine, ("Scatterv",) + what)
        sc = [(r + 2 * p) % 3 for p in range(n)]
        rc = [(q + 2 * r) % 3 for q in range(n)]
        sd = [sum(sc[:p]) + p for p in range(n)]
        rd = [sum(rc[p + 1:]) + (n - p) for p in range(n)]
        sbuf = np.zeros(sum(sc) + n)
        for p in range(n):
            sbuf[sd[p]:sd[p] + sc[p]] = vals(r * 10 + p, sc[p], "f8", k)
        want = np.zeros(sum(rc) + n + 1)
        for q in range(n):
            want[rd[q]:rd[q] + rc[q]] = vals(q * 10 + r, rc[q], "f8", k)
        rb = _mk(rkind, np.zeros(want.size))
        c.Alltoallv([_mk(skind, sbuf), sc, sd, MPI.DOUBLE], [rb, rc, rd, MPI.DOUBLE])
        eq(_get(rb), want, ("Alltoallv",) + what)
        rb = _mk(rkind, np.zeros(want.size))
        c.Alltoallw([_mk(skind, sbuf), sc, [8 * d for d in sd], [MPI.DOUBLE] * n],
                    [rb, rc, [8 * d for d in rd], [MPI.DOUBLE] * n])
        eq(_get(rb), want, ("Alltoallw",) + what)
        # reductions
        for opname, f in (("SUM", np.add), ("MAX", np.maximum), ("PROD", np.multiply)):
            op = getattr(MPI, opname)
            tot = every[0].copy()
            pre = [tot.copy()]
            for e in every[1:]:
                tot = f(tot, e)
                pre.append(tot.copy())
            rb = _mk(rkind, np.zeros(k))
            c.Allreduce(_mk(skind, every[r]), rb, op)
            eq(_get(rb), tot, ("Allreduce", opname) + what)
            rb = _mk(rkind, np.zeros(k))
            c.Scan(_mk(skind, every[r]), rb, op)
            eq(_get(rb), pre[r], ("Scan", opname) + what)
            rb = _mk(rkind, np.zeros(k))
            c.Exscan(_mk(skind, every[r]), rb, op)
            if r:
                eq(_get(rb), pre[r - 1], ("Exscan", opname) + what)
        blocks = [vals(p, n * k, "i4", k + 3) for p in range(n)]
        rb = _mk(rkind, np.zeros(k, "i4"))
        c.Reduce_scatter_block(_mk(skind, blocks[r]), rb, MPI.BXOR)
        full = blocks[0].copy()
        for b_ in blocks[1:]:
            full ^= b_
        eq(_get(rb), full[r * k:(r + 1) * k], ("Reduce_scatter_block",) + what)
        rc = [(p * 5 + 3) % 4 * k for p in range(n)]
        lo = sum(rc[:r])
        ins = [vals(p, sum(rc), "f8", k + 4) for p in range(n)]
        rb = _mk(rkind, np.zeros(rc[r]))
        c.Reduce_scatter(_mk(skind, ins[r]), rb, rc, MPI.SUM)
        eq(_get(rb), sum(ins)[lo:lo + rc[r]], ("Reduce_scatter",) + what)
        # IN_PLACE (all-device only: IN_PLACE has one buffer)
        if skind == rkind:
            rb = _mk(rkind, every[r])
            c.Allreduce(MPI.IN_PLACE, rb, MPI.SUM)
            eq(_get(rb), sum(every), ("Allreduce in place",) + what)
            tmp = np.zeros(n * k)
            tmp[r * k:(r + 1) * k] = every[r]
            rb = _mk(rkind, tmp)
            c.Allgather(MPI.IN_PLACE, rb)
            eq(_get(rb), np.concatenate(every), ("Allgather in place",) + what)
            rb = _mk(rkind, every[r])
            c.Scan(MPI.IN_PLACE, rb, MPI.SUM)
            eq(_get(rb), sum(every[:r + 1]), ("Scan in place",) + what)
            for root in range(n):
                rb = _mk(rkind, every[r])
                c.Reduce(MPI.IN_PLACE if r == root else _mk(skind, every[r]), rb, MPI.SUM, root)
                if r == root:
                    eq(_get(rb), sum(every), ("Reduce in place", root) + what)
    return True


@pytest.mark.parametrize("n", NS)
def test_every_collective_on_device_buffers(n):
    assert run_ranks(_every_collective, n, timeout=90, args=("sim", "sim", (0, 1, 7))) == [True] * n


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("pair", [("host", "sim"), ("sim", "host")])
def test_mixed_host_and_device_send_and_receive_buffers(n, pair):
    assert run_ranks(_every_collective, n, timeout=90, args=(pair[0], pair[1], (1, 7))) == [True] * n


@pytest.mark.parametrize("n", [2, 3])
def test_device_collectives_one_mebibyte(n):
    assert run_ranks(_every_collective, n, timeout=60, args=("sim", "sim", (131_072,))) == [True] * n


def _nonblocking_persistent():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    k = 5
    ab, ar = SimDeviceArray.zeros(k), SimDeviceArray.zeros(k)
    gb, gr = SimDeviceArray.zeros(k), SimDeviceArray.zeros(n * k)
    bb = SimDeviceArray.zeros(k)
    rsb, rsr = SimDeviceArray.zeros(n * k), SimDeviceArray.zeros(k)
    for it in range(3):
        every = [vals(p, k, "f8", it) for p in range(n)]
        blocks = [vals(p, n * k, "f8", it + 10) for p in range(n)]
        ab.set(every[r])
        gb.set(every[r])
        bb.set(every[r] if r == n - 1 else np.zeros(k))
        rsb.set(blocks[r])
        reqs = [c.Iallreduce(ab, ar, MPI.SUM), c.Iallgather(gb, gr), c.Ibcast(bb, n - 1),
                c.Ireduce_scatter_block(rsb, rsr, MPI.SUM)]
        MPI.Request.Waitall(reqs[::-1])
        eq(ar.get(), sum(every), ("Iallreduce", it))
        eq(gr.get(), np.concatenate(every), ("Iallgather", it))
        eq(bb.get(), every[n - 1], ("Ibcast", it))
        eq(rsr.get(), sum(blocks)[r * k:(r + 1) * k], ("Ireduce_scatter_block", it))
    ps = [c.Allreduce_init(ab, ar, MPI.MAX), c.Allgather_init(gb, gr), c.Bcast_init(bb, 0),
          c.Reduce_scatter_block_init(rsb, rsr, MPI.SUM)]
    for it in range(3):
        every = [vals(p, k, "f8", it + 20) for p in range(n)]
        blocks = [vals(p, n * k, "f8", it + 30) for p in range(n)]
        ab.set(every[r])
        gb.set(every[r])
        bb.set(every[r] if r == 0 else np.zeros(k))
        rsb.set(blocks[r])
        MPI.Prequest.Startall(ps)
        MPI.Request.Waitall(ps)
        eq(ar.get(), np.max(every, 0), ("Allreduce_init", it))
        eq(gr.get(), np.concatenate(every), ("Allgather_init", it))
        eq(bb.get(), every[0], ("Bcast_init", it))
        eq(rsr.get(), sum(blocks)[r * k:(r + 1) * k], ("Reduce_scatter_block_init", it))
    for p in ps:
        p.Free()
    return True


@pytest.mark.parametrize("n", NS)
def test_nonblocking_and_persistent_on_device_buffers(n):
    assert run_ranks(_nonblocking_persistent, n, timeout=60) == [True] * n


def _reductions_stay_on_device(count):
    from gpumpi import MPI
    from gpumpi._device import sim_adapter
    from gpumpi.testing import SimDeviceArray

    ad = sim_adapter()
    copies = []
    real = ad.memcpy

    def memcpy(dst, src, nb, stream=None):
        copies.append((ad.pointer_info(src).kind, ad.pointer_info(dst).kind, nb))
        return real(dst, src, nb, stream)

    ad.memcpy = memcpy
    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    every = [vals(p, n * count, "f8", 5) for p in range(n)]
    calls = {
        "Allreduce": (lambda s, d: c.Allreduce(s, d, MPI.SUM), count, sum(every)[:count]),
        "Reduce": (lambda s, d: c.Reduce(s, d, MPI.SUM, n - 1), count, sum(every)[:count] if r == n - 1 else None),
        "Reduce_scatter": (lambda s, d: c.Reduce_scatter(s, d, [count] * n, MPI.SUM), count,
                           sum(every)[r * count:(r + 1) * count]),
        "Reduce_scatter_block": (lambda s, d: c.Reduce_scatter_block(s, d, MPI.SUM), count,
                                 sum(every)[r * count:(r + 1) * count]),
    }
    seen = {}
    for name, (call, rcount, want) in calls.items():
        scount = rcount if name in ("Allreduce", "Reduce") else n * count
        s = SimDeviceArray.from_numpy(every[r][:scount])
        d = SimDeviceArray.zeros(rcount)
        ad.synchronize()
        del copies[:]
        call(s, d)
        bad = [(a, b, nb) for a, b, nb in copies if a == "device" and b != "device"]
        seen[name] = list(copies)
        # rendezvous sizes: the data never came up to host memory (eager messages of device data
        # are staged through host memory by the point-to-point layer, by design)
        if count * 8 > 65536:
            assert not bad, (name, count, bad)
        if want is not None:
            eq(d.get(), want, (name, count))
    ad.memcpy = real
    return True


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("count", [7, 300_000])  # eager (results only), and 2.4 MB: rendezvous
def test_device_reductions_never_copy_data_to_host(n, count):
    one_node_only(n, "device-to-device copying (CUDA IPC)")
    assert run_ranks(_reductions_stay_on_device, n, timeout=60, args=(count,)) == [True] * n


def _strided_device_types():
    from gpumpi import MPI
    from gpumpi.kernels import pack as K
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    calls = []
    real_pack, real_unpack = K.device_pack, K.device_unpack
    K.device_pack = lambda *a, **k: calls.append("pack") or real_pack(*a, **k)
    K.device_unpack = lambda *a, **k: calls.append("unpack") or real_unpack(*a, **k)
    vec = MPI.DOUBLE.Create_vector(8, 1, 2).Commit()  # every other double of 16
    x = np.arange(16, dtype="d") * (r + 1)
    src = SimDeviceArray.from_numpy(x)
    out = SimDeviceArray.from_numpy(np.full(16, -1.0))
    c.Allreduce([src, 1, vec], [out, 1, vec], MPI.SUM)
    got = np.asarray(out.get())
    want = np.full(16, -1.0)
    want[::2] = np.arange(16, dtype="d")[::2] * n * (n + 1) / 2
    assert np.array_equal(got, want), got  # the holes keep their values
    g = SimDeviceArray.from_numpy(np.full(16 * n, -1.0))
    c.Allgather([src, 1, vec], [g, 8, MPI.DOUBLE])
    exp = np.concatenate([np.arange(16, dtype="d")[::2] * (p + 1) for p in range(n)])
    assert np.array_equal(np.asarray(g.get())[:8 * n], exp)
    vec.Free()
    return calls


@pytest.mark.parametrize("n", [1, 2, 3])
def test_non_contiguous_device_buffers_are_packed_on_the_device(n):
    """Derived datatypes over simulated device buffers: packed and unpacked by the pack kernels
    (numba's simulator), holes untouched, results right."""
    for calls in run_ranks(_strided_device_types, n, timeout=90):
        assert calls.count("pack") >= 2 and calls.count("unpack") >= 1, calls


def _stream_keyword():
    from gpumpi import MPI
    from gpumpi._device import sim_adapter
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    ad = sim_adapter()
    s = ad.stream_create()
    buf = SimDeviceArray.from_numpy(np.arange(5.0) if c.rank == 0 else np.zeros(5))
    c.Bcast(buf, 0, stream=s)
    assert np.array_equal(np.asarray(buf.get()), np.arange(5.0))
    out = SimDeviceArray.from_numpy(np.zeros(5))
    c.Iallreduce(buf, out, MPI.SUM, stream=s).Wait()
    assert np.array_equal(np.asarray(out.get()), np.arange(5.0) * c.size)
    with pytest.raises(TypeError):
        c.Allreduce(buf, out, MPI.SUM, stream="not a stream")
    c.Allreduce(np.ones(2), np.zeros(2), MPI.SUM, stream=s)  # host memory: the stream has nothing to order
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_collectives_take_a_stream_keyword(n):
    assert run_ranks(_stream_keyword, n, timeout=60, env={"GPUMPI_DEVICE": "sim"}) == [True] * n
