"""The simulated device (gpumpi._device.sim) as a model of CUDA.

The simulated adapter is what every device path is tested with, so these tests
hold it to CUDA's rules: pointer attributes of interior pointers, IPC handles
that name whole allocations and go stale when freed, streams that run only when
observed (so a missing ordering step reads stale data), interprocess events.
Cross-process cases run in a forked child and in two ranks of ``run_ranks``.
The same cases on the real device (CupyAdapter) are in ``test_cuda_adapter.py``.
"""

import gc
import os
import traceback

import numpy as np
import pytest

from gpumpi import _arrays
from gpumpi._device import (
    HANDLE_SIZE,
    IpcUnsupported,
    PointerInfo,
    SimAdapter,
    StaleHandle,
    sim_adapter,
)
from gpumpi.testing import SimDeviceArray, run_ranks

PAGE = os.sysconf("SC_PAGE_SIZE")


def pattern(n, seed=0):
    return ((np.arange(n, dtype=np.int64) * 7 + seed * 13 + 1) % 251).astype(np.uint8)


def ptr(a):
    return a.__array_interface__["data"][0]


def in_child(fn, meanwhile=None):
    """Run ``fn()`` in a forked child, and ``meanwhile()`` here while it runs; re-raise the
    child's failure here with its traceback."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(r)
        try:
            fn()
            msg = b"ok"
        except BaseException:
            msg = traceback.format_exc().encode()
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    try:
        if meanwhile is not None:
            meanwhile()
    finally:
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
    out = b"".join(chunks).decode()
    assert out == "ok", f"child failed (status {status}):\n{out}"


# -- memory and pointer attributes ---------------------------------------------------------


def test_alloc_pointer_info_interior_and_free():
    a = SimAdapter()
    d = a.alloc(1000)
    assert d % PAGE == 0
    for off in (0, 1, 500, 999):
        assert a.pointer_info(d + off) == PointerInfo("device", 0, d, 1000, True)
    assert a.pointer_info(d + 1000).kind == "host"  # one past the end: no allocation
    h = np.zeros(10)
    assert a.pointer_info(ptr(h)) == PointerInfo("host", None, None, None)
    assert a.device_count() == 1 and a.current_device() == 0
    a.free(d)
    assert a.pointer_info(d) == PointerInfo("host", None, None, None)
    with pytest.raises(ValueError, match="free: cannot free"):
        a.free(d)
    with pytest.raises(ValueError, match="free: cannot free"):
        a.free(ptr(h))
    a.free(0)  # as cudaFree(NULL)
    assert a.alloc(0) == 0
    with pytest.raises(ValueError, match=r"alloc: nbytes must be >= 0 \(-1\)"):
        a.alloc(-1)
    with pytest.raises(TypeError, match="alloc: nbytes must be an integer"):
        a.alloc(1.5)


def test_host_managed_pool_kinds_and_export_refused():
    a = SimAdapter(ndevices=2)
    a.set_device(1)
    hp = a.alloc_host(100)
    m = a.alloc_managed(100)
    p = a.alloc_pool(100)
    d = a.alloc(100)
    assert a.pointer_info(hp + 3) == PointerInfo("host", None, hp, 100)
    assert a.pointer_info(m + 3) == PointerInfo("managed", 1, m, 100)
    assert a.pointer_info(p + 3) == PointerInfo("pool", 1, p, 100)
    assert a.pointer_info(d + 3) == PointerInfo("device", 1, d, 100, True)
    for addr, what in ((m, "managed"), (p, "pool"), (hp, "host"), (ptr(np.zeros(3)), "host")):
        with pytest.raises(IpcUnsupported, match=f"ipc_export: {what} memory cannot be exported"):
            a.ipc_export(addr + 1)
    with pytest.raises(ValueError, match="set_device: no such device"):
        a.set_device(2)
    with pytest.raises(ValueError, match="host memory"):
        a.free(hp)
    with pytest.raises(ValueError, match="device memory"):
        a.free_host(d)
    # usable memory: copies work on every kind
    src = pattern(100)
    for addr in (hp, m, p, d):
        a.memcpy(addr, ptr(src), 100)
    a.synchronize()
    for addr in (hp, m, p, d):
        assert bytes(a.host_view(addr, 100)) == src.tobytes()
    a.free_host(hp)
    for addr in (m, p, d):
        a.free(addr)
        assert a.pointer_info(addr).kind == "host"


def test_handles_name_allocations_and_change_after_realloc():
    a = SimAdapter()
    d = a.alloc(3 * PAGE + 5)
    h0, off0 = a.ipc_export(d)
    h1, off1 = a.ipc_export(d + 3 * PAGE + 4)
    assert isinstance(h0, bytes) and len(h0) == HANDLE_SIZE
    assert h0 == h1 and (off0, off1) == (0, 3 * PAGE + 4)
    seen = {h0}
    for _ in range(5):  # free + realloc, usually at the same address: never the same handle
        a.free(d)
        d = a.alloc(3 * PAGE + 5)
        h, _ = a.ipc_export(d)
        assert h not in seen
        seen.add(h)
    with pytest.raises(IpcUnsupported, match="exported by this process"):
        a.ipc_open(h)
    with pytest.raises(ValueError, match="ipc_open: handle must be 64 bytes"):
        a.ipc_open(h[:10])
    with pytest.raises(ValueError, match="not a simulated-device memory handle"):
        a.ipc_open(bytes(64))
    a.free(d)


def test_memcpy_checks_bounds_and_streams():
    a = SimAdapter()
    d = a.alloc(100)
    h = np.zeros(200, np.uint8)
    with pytest.raises(ValueError, match="memcpy: destination runs past the end of its allocation"):
        a.memcpy(d + 50, ptr(h), 51)
    with pytest.raises(ValueError, match="memcpy: source runs past the end of its allocation"):
        a.memcpy(ptr(h), d, 101)
    with pytest.raises(TypeError, match="memcpy: not a stream of this SimAdapter"):
        a.memcpy(d, ptr(h), 10, stream=SimAdapter().stream_create())
    with pytest.raises(ValueError, match="host_view: range runs past the end"):
        a.host_view(d, 101)
    a.free(d)


# -- streams and events --------------------------------------------------------------------


def test_enqueued_copy_is_invisible_until_its_stream_runs():
    a = SimAdapter()
    d = a.alloc(64)
    src, out = pattern(64), np.zeros(64, np.uint8)
    a.memcpy(d, ptr(src), 64)  # default stream: queued like any other
    assert bytes(a.host_view(d, 64)) == bytes(64)
    s = a.stream_create()
    a.memcpy(ptr(out), d, 64, s)
    a.stream_synchronize(s)  # s ran first: the default stream had not filled d yet
    assert not out.any()
    a.stream_synchronize(None)
    assert bytes(a.host_view(d, 64)) == src.tobytes()
    a.memcpy(ptr(out), d, 64, s)
    assert not out.any()
    a.synchronize()
    assert np.array_equal(out, src)
    a.free(d)


def test_stream_wait_event_orders_two_streams():
    a = SimAdapter()
    d = a.alloc(256)
    src = pattern(256, 3)
    s1, s2 = a.stream_create(), a.stream_create()
    e = a.event_create()
    # without the wait, s2 reads d before s1 fills it
    out = np.zeros(256, np.uint8)
    a.memcpy(d, ptr(src), 256, s1)
    a.memcpy(ptr(out), d, 256, s2)
    a.stream_synchronize(s2)
    assert not out.any()
    a.synchronize()
    # with it, synchronizing s2 alone runs s1 up to the record, and no further
    d2 = a.alloc(256)
    out[:] = 0
    a.memcpy(d2, ptr(src), 256, s1)
    a.event_record(e, s1)
    later = np.zeros(256, np.uint8)
    a.memcpy(ptr(later), d2, 256, s1)  # after the record: must not run
    a.stream_wait_event(s2, e)
    a.memcpy(ptr(out), d2, 256, s2)
    a.stream_synchronize(s2)
    assert np.array_equal(out, src)
    assert not later.any()
    a.stream_synchronize(s1)
    assert np.array_equal(later, src)
    # waiting on an event never recorded is a no-op
    a.stream_wait_event(s2, a.event_create())
    a.stream_synchronize(s2)
    a.free(d)
    a.free(d2)


def test_event_query_and_synchronize_run_up_to_the_record():
    a = SimAdapter()
    d = a.alloc(32)
    s = a.stream_create()
    e = a.event_create()
    assert a.event_query(e)  # never recorded: complete (cudaEventQuery)
    src = pattern(32)
    tail = np.zeros(32, np.uint8)
    a.memcpy(d, ptr(src), 32, s)
    a.event_record(e, s)
    a.memcpy(ptr(tail), d, 32, s)
    assert bytes(a.host_view(d, 32)) == bytes(32)
    assert a.event_query(e)
    assert bytes(a.host_view(d, 32)) == src.tobytes() and not tail.any()
    a.event_record(e, s)
    a.event_synchronize(e)
    assert np.array_equal(tail, src)
    lag = SimAdapter(query_lag=2)
    s, e = lag.stream_create(), lag.event_create()
    ran = []
    lag.launch_host_func(s, lambda: ran.append(1))
    lag.event_record(e, s)
    assert [lag.event_query(e) for _ in range(3)] == [False, False, True]
    assert ran == [1]
    a.free(d)


def test_host_funcs_run_in_stream_order_and_free_drains_queues():
    a = SimAdapter()
    s = a.stream_create()
    order = []
    d = a.alloc(16)
    keep = np.zeros(16, np.uint8)
    src = pattern(16)  # host memory of a queued copy must outlive the copy
    a.launch_host_func(s, lambda: order.append("first"))
    a.memcpy(d, ptr(src), 16, s)
    a.launch_host_func(s, lambda: order.append("second"))
    assert order == []
    a.synchronize()
    assert order == ["first", "second"]
    a.memcpy(ptr(keep), d, 16, s)
    a.free(d)  # as cudaFree: runs queued work first, so the copy read d before it went away
    assert np.array_equal(keep, pattern(16))
    with pytest.raises(TypeError, match="launch_host_func: fn must be callable"):
        a.launch_host_func(s, 3)


def test_ipc_event_export_needs_interprocess():
    a = SimAdapter()
    with pytest.raises(IpcUnsupported, match="interprocess=True"):
        a.ipc_event_export(a.event_create())
    e = a.event_create(interprocess=True)
    h = a.ipc_event_export(e)
    assert len(h) == HANDLE_SIZE and a.ipc_event_export(e) == h
    with pytest.raises(IpcUnsupported, match="exported by this process"):
        a.ipc_event_open(h)
    with pytest.raises(ValueError, match="not a simulated-device event handle"):
        a.ipc_event_open(a.ipc_export(a.alloc(8))[0])
    a.event_destroy(e)
    with pytest.raises(ValueError, match="event_query: the event was destroyed"):
        a.event_query(e)


# -- across processes: a forked child ---------------------------------------------------------


def test_export_open_in_forked_child():
    a = SimAdapter()
    n = 2 * PAGE + 100
    d = a.alloc(n)
    src = pattern(n)
    a.memcpy(d, ptr(src), n)
    a.synchronize()
    h, off = a.ipc_export(d + 100)
    ev = a.event_create(interprocess=True)
    he = a.ipc_event_export(ev)

    def child():
        with pytest.raises(RuntimeError, match="used in forked child"):
            a.alloc(1)  # the parent's adapter is detached in the child
        c = sim_adapter()
        assert c is not a
        base = c.ipc_open(h)
        assert base != d  # mapped anew, not the inherited mapping
        assert c.pointer_info(base + off) == PointerInfo("device", 0, base, n, False)
        assert bytes(c.host_view(base + off, n - 100)) == src[100:].tobytes()
        with pytest.raises(IpcUnsupported, match="cannot be exported again"):
            c.ipc_export(base)
        s = c.stream_create()
        ff = np.full(10, 255, np.uint8)  # host memory of a queued copy must outlive the copy
        c.memcpy(base + off, ptr(ff), 10, s)
        e = c.ipc_event_open(he)
        c.event_record(e, s)  # interprocess: s runs up to the record now
        c.ipc_close(base)

    in_child(child)
    assert a.event_query(ev)
    got = np.frombuffer(a.host_view(d, n), np.uint8)
    assert (got[100:110] == 255).all() and np.array_equal(got[110:], src[110:])
    assert np.array_equal(got[:100], src[:100])
    a.free(d)

    def child_after_free():
        with pytest.raises(StaleHandle):
            sim_adapter().ipc_open(h)

    in_child(child_after_free)


def test_interprocess_event_pending_in_another_process():
    """A peer sees recorded-but-not-completed while the recorder's stream runs, and waits for it."""
    a = SimAdapter()
    d = a.alloc(64)
    h, _ = a.ipc_export(d)
    ev = a.event_create(interprocess=True)
    he = a.ipc_event_export(ev)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    src = pattern(64, 5)

    def child():
        os.close(to_child_w)
        os.close(to_parent_r)
        c = sim_adapter()
        e = c.ipc_event_open(he)
        base = c.ipc_open(h)
        assert c.event_query(e)  # never recorded
        os.write(to_parent_w, b"r")  # go: record
        assert os.read(to_child_r, 1) == b"m"  # the parent's stream is mid-way to the record
        assert not c.event_query(e)
        out = np.zeros(64, np.uint8)
        s = c.stream_create()
        c.stream_wait_event(s, e)
        c.memcpy(ptr(out), base, 64, s)
        os.write(to_parent_w, b"c")  # let the parent's stream finish
        c.stream_synchronize(s)  # waits for the parent's record
        assert np.array_equal(out, src)
        assert c.event_query(e)
        c.event_synchronize(e)
        c.ipc_close(base)

    def parent_side():
        os.close(to_child_r)
        os.close(to_parent_w)
        assert os.read(to_parent_r, 1) == b"r"
        s = a.stream_create()
        a.memcpy(d, ptr(src), 64, s)

        def hold():  # runs inside event_record's flush, before the record completes
            os.write(to_child_w, b"m")
            assert os.read(to_parent_r, 1) == b"c"

        a.launch_host_func(s, hold)
        a.event_record(ev, s)

    try:
        in_child(child, parent_side)
    finally:
        os.close(to_child_w)
        os.close(to_parent_r)
    a.free(d)


# -- across processes: two ranks of the launcher --------------------------------------------


def _ranks_memory():
    from gpumpi import MPI

    comm = MPI.COMM_WORLD
    a = sim_adapter()
    n = PAGE + 200
    if comm.rank == 0:
        d = a.alloc(n)
        src = pattern(n, 1)
        a.memcpy(d, ptr(src), n)
        a.synchronize()
        h, off = a.ipc_export(d + 100)
        assert off == 100
        comm.send((h, off), 1)
        assert comm.recv(source=1) == "written"
        got = np.frombuffer(a.host_view(d, n), np.uint8)
        assert (got[100:110] == 255).all() and np.array_equal(got[110:], src[110:])
        a.free(d)
        d2 = a.alloc(n)
        h2, _ = a.ipc_export(d2)
        assert h2 != h
        comm.send(h2, 1)
        assert comm.recv(source=1) == "opened"
        a.free(d2)
        comm.send("freed", 1)
        assert comm.recv(source=1) == "done"
        return d == d2
    h, off = comm.recv(source=0)
    base = a.ipc_open(h)
    assert a.pointer_info(base + off + 5) == PointerInfo("device", 0, base, n, False)
    assert bytes(a.host_view(base + off, 10)) == pattern(n, 1)[100:110].tobytes()
    assert a.ipc_open(h) == base  # reference counted, as CUDA
    a.ipc_close(base)
    ff = np.full(10, 255, np.uint8)
    a.memcpy(base + off, ptr(ff), 10)  # still mapped after one close
    a.synchronize()
    a.ipc_close(base)
    assert a.pointer_info(base).kind == "host"
    with pytest.raises(ValueError, match="ipc_close: .* is not the base of memory opened with ipc_open"):
        a.ipc_close(base)
    comm.send("written", 0)
    h2 = comm.recv(source=0)
    with pytest.raises(StaleHandle):  # the first allocation was freed (and perhaps reallocated)
        a.ipc_open(h)
    b2 = a.ipc_open(h2)
    comm.send("opened", 0)
    assert comm.recv(source=0) == "freed"
    with pytest.raises(StaleHandle, match="the exporter freed"):  # cached mapping, dead allocation
        a.ipc_open(h2)
    a.ipc_close(b2)
    with pytest.raises(StaleHandle):
        a.ipc_open(h2)
    comm.send("done", 0)
    return None


def test_ipc_memory_between_ranks():
    reused, _ = run_ranks(_ranks_memory, 2, timeout=30)
    assert reused in (True, False)


def _ranks_events():
    from gpumpi import MPI

    comm = MPI.COMM_WORLD
    a = sim_adapter()
    n = 512
    if comm.rank == 0:
        d = a.alloc(n)
        e = a.event_create(interprocess=True)
        comm.send((a.ipc_export(d)[0], a.ipc_event_export(e)), 1)
        assert comm.recv(source=1) == "opened"
        s = a.stream_create()
        src = pattern(n, 2)
        a.memcpy(d, ptr(src), n, s)  # queued: rank 1 must not see it yet
        comm.send("queued", 1)
        assert comm.recv(source=1) == "checked"
        a.event_record(e, s)
        comm.send("recorded", 1)
        assert comm.recv(source=1) == "recorded back"
        assert a.event_query(e)  # rank 1 recorded the same event on its stream
        out = np.zeros(n, np.uint8)
        s2 = a.stream_create()
        a.stream_wait_event(s2, e)
        a.memcpy(ptr(out), d, n, s2)
        a.stream_synchronize(s2)
        assert np.array_equal(out, pattern(n, 3))
        a.event_destroy(e)
        comm.send("destroyed", 1)
        assert comm.recv(source=1) == "done"
        a.free(d)
        return
    hd, he = comm.recv(source=0)
    base = a.ipc_open(hd)
    ev = a.ipc_event_open(he)
    assert a.event_query(ev)  # never recorded
    comm.send("opened", 0)
    assert comm.recv(source=0) == "queued"
    assert bytes(a.host_view(base, n)) == bytes(n)
    comm.send("checked", 0)
    assert comm.recv(source=0) == "recorded"
    assert a.event_query(ev)
    out = np.zeros(n, np.uint8)
    s = a.stream_create()
    a.stream_wait_event(s, ev)
    a.memcpy(ptr(out), base, n, s)
    a.stream_synchronize(s)
    assert np.array_equal(out, pattern(n, 2))
    src = pattern(n, 3)
    a.memcpy(base, ptr(src), n, s)
    a.event_record(ev, s)  # record the opened event: rank 0 waits on it
    comm.send("recorded back", 0)
    assert comm.recv(source=0) == "destroyed"
    with pytest.raises(StaleHandle):
        a.ipc_event_open(he)
    a.event_destroy(ev)
    a.ipc_close(base)
    comm.send("done", 0)


def test_interprocess_events_between_ranks():
    run_ranks(_ranks_events, 2, timeout=30)


# -- SimDeviceArray ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["u1", "i4", "f8", "c16", [("a", "i4"), ("b", "f8")]])
def test_sim_device_array_round_trip_and_interface(dtype):
    host = np.zeros((3, 5), dtype)
    host.view(np.uint8)[...] = pattern(host.nbytes).reshape(host.view(np.uint8).shape)
    d = SimDeviceArray.from_numpy(host)
    assert (d.shape, d.dtype, d.strides, d.size, d.nbytes, d.ndim, len(d)) == (
        host.shape, host.dtype, host.strides, host.size, host.nbytes, 2, 3)
    assert np.array_equal(d.get().view(np.uint8), host.view(np.uint8))
    cai = d.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] is None and cai["strides"] is None
    assert cai["shape"] == (3, 5) and cai["typestr"] == host.dtype.str and cai["data"] == (d.ptr, False)
    info = sim_adapter().pointer_info(d.ptr)
    assert info.kind == "device" and info.base == d.ptr and info.size == host.nbytes
    v = _arrays.as_buffer(d, readonly=False)
    assert (v.kind, v.addr, v.nbytes) == ("sim", d.ptr, host.nbytes)
    col = d[:, 1]
    assert col.__cuda_array_interface__["strides"] == (5 * host.itemsize,)
    assert col.ptr == d.ptr + host.itemsize


def test_sim_device_array_views_zeros_and_lifetime():
    d = SimDeviceArray.zeros((4, 6), "f4")
    assert not d.get().any()
    row = d[2]
    row.set(np.arange(6, dtype="f4"))
    assert np.array_equal(d.get()[2], np.arange(6))
    assert d[2, 3].shape == () and d[2, 3].get() == 3
    with pytest.raises(TypeError, match="only basic slicing"):
        d[[0, 1]]
    with pytest.raises(TypeError, match="implicit conversion"):
        np.asarray(d)
    with pytest.raises(ValueError, match=r"set: shape mismatch \(array \(5,\), device array \(6,\)\)"):
        row.set(np.zeros(5))
    # a queued copy into the array is visible to get(), which synchronizes first
    a = sim_adapter()
    sevens = np.full(6, 7, "f4")
    a.memcpy(row.ptr, ptr(sevens), 24, a.stream_create())
    assert (d.get()[2] == 7).all()
    empty = SimDeviceArray.empty((0, 3))
    assert empty.ptr == 0 and empty.get().shape == (0, 3)
    base = d.ptr
    del d
    gc.collect()
    assert a.pointer_info(base).kind == "device"  # the row view keeps the allocation alive
    del row
    gc.collect()
    assert a.pointer_info(base).kind == "host"
