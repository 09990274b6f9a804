"""Point-to-point on simulated device memory (``sim``), at 1-4 ranks.

Every memory pair (host->host, host->device, device->host, device->device) and
every protocol (eager through host staging, rendezvous device to device through
IPC handles, the staged fallback for memory IPC cannot export) moves a ring of
messages; expectations are NumPy arrays computed on the receiving side.  The
simulated device runs stream work only when something observes it, so a missing
ordering step in gpumpi shows up here as stale data.
"""

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, one_node_only, run_ranks

SIZES = [0, 3, 5000, 300_000]  # float64: empty, eager, eager (40 KB), IPC rendezvous (2.4 MB)
TRANSPORTS = {"cuda_ipc": {}, "staging": {"GPUMPI_TRANSPORTS": "device:staging"}}


def values(n, seed):
    return np.arange(n, dtype=np.float64) * 3 + seed * 1e6


def _peers(c):
    return (c.rank + 1) % c.size, (c.rank - 1) % c.size


def _memory_pairs():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    tag = 0
    for n in SIZES:
        for skind in ("host", "sim"):
            for rkind in ("host", "sim"):
                tag += 1
                src = values(n, c.rank)
                if skind == "sim":
                    src = SimDeviceArray.from_numpy(src)
                dst = SimDeviceArray.zeros(n) if rkind == "sim" else np.zeros(n)
                st = MPI.Status()
                req = c.Isend(src, nxt, tag)
                c.Recv(dst, prv, tag, st)
                req.Wait()
                got = dst.get() if rkind == "sim" else dst
                assert np.array_equal(got, values(n, prv)), (n, skind, rkind)
                assert st.Get_count(MPI.DOUBLE) == n and st.Get_source() == prv
    return c.rank


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_every_memory_pair(transport, n):
    assert run_ranks(_memory_pairs, n, env=TRANSPORTS[transport], timeout=60) == list(range(n))


def _ordering_and_visibility():
    from gpumpi import MPI
    from gpumpi._device import sim_adapter
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    ad = sim_adapter()
    for n in (100, 300_000):
        src = SimDeviceArray.zeros(n)
        dst = SimDeviceArray.zeros(n)
        fresh = values(n, c.rank)
        # the producer's copy is queued on the current stream, not yet run: gpumpi must order
        # its read after it (staging: same stream; IPC: an event the receiver's copy waits on)
        ad.memcpy(src.ptr, fresh.ctypes.data, fresh.nbytes, ad.current_stream())
        assert not np.frombuffer(ad.host_view(src.ptr, src.nbytes), np.float64).any(), "the copy ran early"
        req = c.Isend(src, nxt, 1)
        c.Recv(dst, prv, 1)
        req.Wait()
        # a completed receive is visible to the host without any further synchronisation
        seen = np.frombuffer(ad.host_view(dst.ptr, dst.nbytes), np.float64)
        assert np.array_equal(seen, values(n, prv)), n
        del fresh


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_send_is_ordered_after_queued_work_and_receive_is_visible(transport, n):
    run_ranks(_ordering_and_visibility, n, env=TRANSPORTS[transport], timeout=60)


def _streams(mode):
    from gpumpi import MPI
    from gpumpi._device import sim_adapter
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    ad = sim_adapter()
    side = ad.stream_create()
    for n in (100, 300_000):  # eager (host staging) and rendezvous (IPC or staging pipeline)
        fresh = values(n, c.rank)
        # stream=: the producer's copy is queued on another stream, which the send must follow
        src = SimDeviceArray.zeros(n)
        dst = SimDeviceArray.zeros(n)
        ad.memcpy(src.ptr, fresh.ctypes.data, fresh.nbytes, side)
        req = c.Isend(src, nxt, 1, stream=side)
        c.Recv(dst, prv, 1)
        req.Wait()
        expect = values(n, prv)
        assert np.array_equal(dst.get(), expect if mode == "safe" else np.zeros(n)), (n, mode)
        ad.synchronize()
        # the receive waits for the consumer's queued read of its buffer (no write-after-read race)
        old = values(n, -1)
        dst.set(old)
        snap = np.zeros(n)
        ad.memcpy(snap.ctypes.data, dst.ptr, dst.nbytes, ad.current_stream())  # queued, not run
        req = c.Isend(src, nxt, 2)
        c.Recv(dst, prv, 2)
        req.Wait()
        ad.synchronize()
        assert np.array_equal(dst.get(), expect), n
        if mode == "safe":
            assert np.array_equal(snap, old), n  # the queued read saw the old contents
        # GPUMPI_STREAM_MODE=none: as on mpi4py, synchronizing first is the user's job
        ad.memcpy(src.ptr, fresh.ctypes.data, fresh.nbytes, side)
        ad.stream_synchronize(side)
        req = c.Isend(src, nxt, 3)
        c.Recv(dst, prv, 3)
        req.Wait()
        assert np.array_equal(dst.get(), expect), n
        del fresh
    # a stream of the wrong kind is refused with a clear error
    with pytest.raises(TypeError, match="not a stream"):
        c.Isend(SimDeviceArray.zeros(4), nxt, 9, stream=object())


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("mode", ["safe", "none"])
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_stream_keyword_and_stream_modes(transport, mode, n):
    run_ranks(_streams, n, args=(mode,), env={**TRANSPORTS[transport], "GPUMPI_STREAM_MODE": mode}, timeout=60)


def _ipc_cache():
    from gpumpi import MPI
    from gpumpi import _runtime as rt
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    n = 200_000
    src = SimDeviceArray.from_numpy(values(n, c.rank))
    dst = SimDeviceArray.zeros(n)
    opened = len(rt.ENGINE.region("device", "cuda_ipc").mem)
    for it in range(3):  # one open per allocation, however many messages
        src.set(values(n, c.rank + it))
        req = c.Isend(src, nxt, 2)
        c.Recv(dst, prv, 2)
        req.Wait()
        assert np.array_equal(dst.get(), values(n, prv + it))
    if c.size > 1:
        assert len(rt.ENGINE.region("device", "cuda_ipc").mem) == opened + 1
    # free and reallocate (often at the same address): the new allocation has a new handle,
    # and the receiver reads the new data, never a stale mapping
    del src
    src2 = SimDeviceArray.from_numpy(values(n, c.rank + 7))
    req = c.Isend(src2, nxt, 3)
    c.Recv(dst, prv, 3)
    req.Wait()
    assert np.array_equal(dst.get(), values(n, prv + 7))
    if c.size > 1:
        assert len(rt.ENGINE.region("device", "cuda_ipc").mem) == opened + 2


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_ipc_handles_are_opened_once_per_allocation(n):
    one_node_only(n, "CUDA IPC")
    run_ranks(_ipc_cache, n, timeout=60)


class _PoolArray:
    """Simulated stream-ordered-pool (cudaMallocAsync) or managed memory, which IPC cannot export."""

    __gpumpi_sim__ = True

    def __init__(self, n, memory):
        from gpumpi._device import sim_adapter

        self.ad = sim_adapter()
        self.n = n
        alloc = self.ad.alloc_pool if memory == "pool" else self.ad.alloc_managed
        self.ptr = alloc(max(8 * n, 1))
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f8", "data": (self.ptr, False),
                                         "version": 3, "strides": None, "stream": None}

    def view(self):
        return np.frombuffer(self.ad.host_view(self.ptr, 8 * self.n), np.float64)


def _pool_fallback(memory):
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    n = 300_000
    src = _PoolArray(n, memory)
    src.view()[:] = values(n, c.rank)
    dst = SimDeviceArray.zeros(n)
    req = c.Isend(src, nxt, 4)
    c.Recv(dst, prv, 4)
    req.Wait()
    assert np.array_equal(dst.get(), values(n, prv))
    back = _PoolArray(n, memory)
    req = c.Isend(dst, prv, 5)
    c.Recv(back, nxt, 5)
    req.Wait()
    assert np.array_equal(back.view(), values(n, c.rank))


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("memory", ["pool", "managed"])
def test_pool_and_managed_memory_fall_back_to_staging(memory, n):
    run_ranks(_pool_fallback, n, args=(memory,), timeout=60)


def _device_calls():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    n = 100_000
    # persistent requests read the device buffer at every Start
    src = SimDeviceArray.zeros(n)
    dst = SimDeviceArray.zeros(n)
    s = c.Send_init(src, nxt, 1)
    r = c.Recv_init(dst, prv, 1)
    for it in range(2):
        src.set(values(n, c.rank + it))
        MPI.Prequest.Startall([r, s])
        MPI.Request.Waitall([r, s])
        assert np.array_equal(dst.get(), values(n, prv + it))
    s.Free()
    r.Free()
    # synchronous, matched-probe and derived-datatype receives into device memory
    src.set(values(n, c.rank))
    req = c.Issend(src, nxt, 2)
    msg = c.Mprobe(prv, 2)
    msg.Recv(dst)
    req.Wait()
    assert np.array_equal(dst.get(), values(n, prv))
    col = MPI.DOUBLE.Create_vector(n // 2, 1, 2).Commit()
    dst.set(np.full(n, -1.0))
    req = c.Isend(src[: n // 2], nxt, 3)
    c.Recv([dst, 1, col], prv, 3)
    req.Wait()
    got = dst.get()
    assert np.array_equal(got[::2], values(n, prv)[: n // 2]) and (got[1::2] == -1).all()
    # the object API carries device arrays' bytes (as a host copy of the array here)
    req = c.Isend([src, 10, MPI.DOUBLE], nxt, 4)
    part = np.zeros(10)
    c.Recv(part, prv, 4)
    req.Wait()
    assert np.array_equal(part, values(10, prv))
    # Bcast from a device buffer to device and host buffers
    root = c.size - 1
    buf = SimDeviceArray.from_numpy(values(n, c.rank)) if c.rank % 2 else values(n, c.rank)
    c.Bcast(buf, root)
    got = buf.get() if c.rank % 2 else buf
    assert np.array_equal(got, values(n, root))


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_persistent_probe_datatypes_bcast_on_device(n):
    run_ranks(_device_calls, n, timeout=60)


def _bcast_stays_on_device():
    from gpumpi import MPI
    from gpumpi._device import sim_adapter
    from gpumpi.testing import SimDeviceArray

    ad = sim_adapter()
    copies = []
    real = ad.memcpy

    def memcpy(dst, src, n, stream=None):
        copies.append((ad.pointer_info(src).kind, ad.pointer_info(dst).kind, n))
        return real(dst, src, n, stream)

    ad.memcpy = memcpy
    c = MPI.COMM_WORLD
    n = 300_000  # 2.4 MB: a rendezvous on every edge of the tree
    for root in range(c.size):
        buf = SimDeviceArray.from_numpy(values(n, c.rank))
        del copies[:]
        c.Bcast(buf, root)
        assert np.array_equal(buf.get(), values(n, root)), root
        # every byte that moved went device to device: the root's buffer was never staged to the
        # host, no receiver's data came up from a host staging array
        assert all(s == d == "device" for s, d, _ in copies), (root, copies)
        if c.rank != root:
            assert sum(nb for *_, nb in copies) == buf.nbytes, (root, copies)
    return len(copies)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_device_bcast_never_touches_host_memory(n):
    """Bcast goes through the one buffer path: device to device on every edge of the tree."""
    one_node_only(n, "CUDA IPC")
    run_ranks(_bcast_stays_on_device, n, timeout=60)


def _self_sends_in_place():
    from gpumpi import MPI
    from gpumpi._device import sim_adapter
    from gpumpi.ipc import cma
    from gpumpi.testing import SimDeviceArray

    ad = sim_adapter()
    copies, reads = [], []
    real_memcpy, real_read = ad.memcpy, cma.read

    def memcpy(dst, src, n, stream=None):
        copies.append((ad.pointer_info(src).kind, ad.pointer_info(dst).kind, n))
        return real_memcpy(dst, src, n, stream)

    ad.memcpy = memcpy
    cma.read = lambda *a: reads.append(a) or real_read(*a)
    c, me = MPI.COMM_WORLD, MPI.COMM_WORLD.rank
    n = 300_000  # a rendezvous
    for kind in ("sim", "host"):
        src = values(n, me) if kind == "host" else SimDeviceArray.from_numpy(values(n, me))
        dst = np.zeros(n) if kind == "host" else SimDeviceArray.zeros(n)
        del copies[:], reads[:]
        req = c.Isend(src, me, 7)
        c.Recv(dst, me, 7)
        req.Wait()
        assert np.array_equal(dst if kind == "host" else dst.get(), values(n, me)), kind
        # a rank's own memory is copied in place: no cross-memory read of itself, and device data
        # moves in one device-to-device copy (it used to go up to a staging slab and back)
        assert not reads, kind
        if kind == "sim":
            assert [(s_, d_) for s_, d_, _ in copies] == [("device", "device")], copies
    return True


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_messages_to_oneself_are_copied_in_place(n):
    assert run_ranks(_self_sends_in_place, n, timeout=60) == [True] * n


def _device_kernels():
    from gpumpi import MPI
    from gpumpi.kernels import pack as K
    from gpumpi.testing import SimDeviceArray

    calls = {"pack": 0, "unpack": 0}
    real_pack, real_unpack = K.device_pack, K.device_unpack

    def pack(*a, **k):
        calls["pack"] += 1
        return real_pack(*a, **k)

    def unpack(*a, **k):
        calls["unpack"] += 1
        return real_unpack(*a, **k)

    K.device_pack, K.device_unpack = pack, unpack
    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    for rows in (3, 700):  # 72 B (eager) and 16.8 KB packed (above the 4 KiB eager limit set below)
        a = values(rows * 4, c.rank).reshape(rows, 4)
        src = SimDeviceArray.from_numpy(a)
        col = MPI.DOUBLE.Create_vector(rows, 1, 4).Commit()
        # a column out of device memory into a column of device memory: packed and unpacked on
        # the device; the elements between the received ones keep their values
        dst = SimDeviceArray.from_numpy(np.full((rows, 4), -1.0))
        req = c.Isend([src[:, 1:], 1, col], nxt, 1)
        c.Recv([dst[:, 2:], 1, col], prv, 1)
        req.Wait()
        got = dst.get()
        assert np.array_equal(got[:, 2], values(rows * 4, prv).reshape(rows, 4)[:, 1]), rows
        assert (np.delete(got, 2, axis=1) == -1).all(), rows
        # a device column into host memory, and a host column into device memory
        h = np.zeros(rows)
        req = c.Isend([src, 1, col], nxt, 2)
        c.Recv(h, prv, 2)
        req.Wait()
        assert np.array_equal(h, values(rows * 4, prv)[::4]), rows
        dst = SimDeviceArray.from_numpy(np.full((rows, 4), -1.0))
        req = c.Isend(np.ascontiguousarray(a[:, 3]), nxt, 3)
        c.Recv([dst, 1, col], prv, 3)
        req.Wait()
        assert np.array_equal(dst.get()[:, 0], values(rows * 4, prv).reshape(rows, 4)[:, 3]), rows
        col.Free()
    assert calls["pack"] == 4 and calls["unpack"] == 4, calls


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_non_contiguous_device_data_packs_with_device_kernels(transport, n):
    run_ranks(_device_kernels, n, env={**TRANSPORTS[transport], "GPUMPI_EAGER_LIMIT": "4096"}, timeout=120)


def _ipc_event_per_send():
    from gpumpi import MPI
    from gpumpi import _runtime as rt
    from gpumpi._device import sim_adapter
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    ad = sim_adapter()
    n = 300_000  # rendezvous: by IPC handle, with an interprocess event the receiver waits on
    if c.rank == 0:
        s1, s2 = ad.stream_create(), ad.stream_create()
        a, b = SimDeviceArray.from_numpy(values(n, 1)), SimDeviceArray.from_numpy(values(n, 2))
        pool = rt.ENGINE.region("device", "cuda_ipc").events.setdefault(ad, [])
        before = list(pool)
        r1 = c.Isend(a, 1, 1, stream=s1)
        r2 = c.Isend(b, 1, 2, stream=s2)
        # both are in flight: each has an event of its own (a peer waits on an event's latest
        # record, so a shared one re-recorded on s2 would stop ordering the first send after s1)
        assert len(pool) == max(0, len(before) - 2)
        c.Send(np.ones(1), 1, 3)
        MPI.Request.Waitall([r1, r2])
        assert len(pool) == max(2, len(before))  # both back, once their sends completed
        ev = {id(e) for e, _h in pool}
        assert len(ev) == len(pool) and all(h is not None for _e, h in pool)
        c.Send(SimDeviceArray.from_numpy(values(n, 4)), 1, 4)  # reuses one: the pool does not grow
        assert len(pool) == max(2, len(before)) and {id(e) for e, _h in pool} == ev
    elif c.rank == 1:
        c.Recv(np.empty(1), 0, 3)
        for tag, seed in ((2, 2), (1, 1), (4, 4)):
            dst = SimDeviceArray.zeros(n)
            c.Recv(dst, 0, tag)
            assert np.array_equal(dst.get(), values(n, seed)), tag
    return True


def test_every_ipc_send_in_flight_has_its_own_event():
    one_node_only(2, "CUDA IPC")
    assert run_ranks(_ipc_event_per_send, 2, timeout=60) == [True, True]


class _HostCAI:
    """mpi4py's FakeGPUArray: plain host memory (no simulated allocation) behind the CUDA array
    interface, which GPUMPI_DEVICE=sim takes as simulated device memory."""

    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {"data": (a.ctypes.data, False), "typestr": a.dtype.str,
                                         "shape": a.shape, "strides": None, "version": 3}


def _host_cai_is_sim_memory():
    import numpy as np

    from gpumpi import MPI, _arrays

    c = MPI.COMM_WORLD
    me, n = c.rank, c.size
    for size in (0, 5, 300_000):  # eager and rendezvous (device route: staging, not IPC)
        s = np.full(size, me + 1, "i4")
        r = np.full(size + 1, -1, "i4")
        assert _arrays.as_buffer(_HostCAI(s), True).kind == "sim"
        c.Sendrecv(_HostCAI(s), (me + 1) % n, 3, _HostCAI(r), (me - 1) % n, 3)
        assert (r[:size] == (me - 1) % n + 1).all() and r[size] == -1
        r[:] = -1
        MPI.COMM_SELF.Sendrecv(_HostCAI(s), 0, 4, _HostCAI(r), 0, 4)
        assert (r[:size] == me + 1).all() and r[size] == -1
        b = np.full(size, me, "i4")
        c.Sendrecv_replace(_HostCAI(b), (me + 1) % n, 5, (me - 1) % n, 5)
        assert (b == (me - 1) % n).all()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_host_cai_is_sim_memory_under_device_sim(n):
    run_ranks(_host_cai_is_sim_memory, n, timeout=120, env={"GPUMPI_DEVICE": "sim"})


class _OneShotCUDADLPack:
    """Host memory exported once as kDLCUDA DLPack (simulated device memory here); the exporter
    drops the array when it exports it, so only the capsule's tensor keeps the memory alive."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, copy=None, dl_device=None):
        assert stream == -1
        a, self.a = self.a, None
        return a.__dlpack__(max_version=max_version, copy=copy)


def _dlpack_device_messages_keep_their_tensor():
    import gc
    import weakref

    import numpy as np

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    me = c.rank
    size = 300_000  # rendezvous, device to device: the copies name addresses only
    # a receive in flight (its sender waits at the barrier)
    if me == 0:
        r = np.zeros(size, "i4")
        w = weakref.ref(r)
        req = c.Irecv(_OneShotCUDADLPack(r), 1, 6)
        del r
        gc.collect()
        assert w() is not None, "the tensor of a receive in flight was let go"
        c.Barrier()
        req.Wait()
        del req
        gc.collect()
        assert w() is None, "the tensor's deleter did not run once the receive was done"
    else:
        c.Barrier()
        c.Send(np.ones(size, "i4"), 0, 6)
    # a send in flight (its receiver waits at the barrier)
    if me == 1:
        s = np.ones(size, "i4")
        w = weakref.ref(s)
        req = c.Isend(_OneShotCUDADLPack(s), 0, 7)
        del s
        gc.collect()
        assert w() is not None, "the tensor of a send in flight was let go"
        c.Barrier()
        req.Wait()
        del req
        gc.collect()
        assert w() is None, "the tensor's deleter did not run once the send was done"
    else:
        c.Barrier()
        got = np.zeros(size, "i4")
        c.Recv(got, 1, 7)
        assert got.all()


def test_dlpack_device_messages_keep_their_tensor():
    run_ranks(_dlpack_device_messages_keep_their_tensor, 2, timeout=120, env={"GPUMPI_DEVICE": "sim"})
