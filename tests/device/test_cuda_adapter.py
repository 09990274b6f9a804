"""The real device (gpumpi._device.cuda): CupyAdapter on a GPU, the cases the simulated device models.

These tests run wherever cupy imports and a CUDA device is present (``gpu``) and
skip otherwise; the simulated device's own tests are in ``test_sim.py``, and the
CuPy API checks that need no GPU in ``test_cupy_api.py``.
"""

import numpy as np
import pytest

from gpumpi._device import HANDLE_SIZE, IpcUnsupported, PointerInfo


def pattern(n, seed=0):
    return ((np.arange(n, dtype=np.int64) * 7 + seed * 13 + 1) % 251).astype(np.uint8)


def ptr(a):
    return a.__array_interface__["data"][0]


# -- the real device (CupyAdapter) ---------------------------------------------------------


def _cupy_adapter():
    try:
        import cupy
    except ImportError:
        pytest.skip("cupy is not installed (pip install gpumpi[cuda])")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver / no device
        pytest.skip(f"no CUDA device ({exc})")
    if n < 1:
        pytest.skip("no CUDA device")
    from gpumpi._device import CupyAdapter

    return CupyAdapter()


@pytest.mark.gpu
def test_gpu_pointer_info_kinds_and_export():
    a = _cupy_adapter()
    d = a.alloc(1000)
    info = a.pointer_info(d + 10)
    assert (info.kind, info.device, info.base, info.ipc_capable) == ("device", a.current_device(), d, True)
    assert info.size >= 1000
    h0, off0 = a.ipc_export(d)
    h1, off1 = a.ipc_export(d + 10)
    assert h0 == h1 and len(h0) == HANDLE_SIZE and (off0, off1) == (0, 10)
    assert a.pointer_info(ptr(np.zeros(4))) == PointerInfo("host", None, None, None)
    hp, m, p = a.alloc_host(100), a.alloc_managed(100), a.alloc_pool(100)
    a.synchronize()
    assert a.pointer_info(hp).kind == "host" and a.pointer_info(hp).base == hp
    assert a.pointer_info(m).kind == "managed"
    assert a.pointer_info(p).kind == "pool"
    for addr in (hp, m, p):
        with pytest.raises(IpcUnsupported):
            a.ipc_export(addr)
    with pytest.raises(NotImplementedError, match="host_view"):
        a.host_view(d, 1)
    a.free_host(hp)
    a.free(m)
    a.free(p)
    a.free(d)
    a.synchronize()


@pytest.mark.gpu
def test_gpu_streams_and_events_order_copies():
    a = _cupy_adapter()
    n = 1 << 20
    d = a.alloc(n)
    src, out = pattern(n), np.zeros(n, np.uint8)
    s1, s2 = a.stream_create(), a.stream_create()
    e = a.event_create()
    assert a.event_query(e)
    a.memcpy(d, ptr(src), n, s1)
    a.event_record(e, s1)
    a.stream_wait_event(s2, e)
    a.memcpy(ptr(out), d, n, s2)
    a.stream_synchronize(s2)
    assert np.array_equal(out, src)
    a.event_synchronize(e)
    assert a.event_query(e)
    ran = []
    a.launch_host_func(s1, lambda: ran.append(1))
    a.stream_synchronize(s1)
    assert ran == [1]
    a.free(d)


def _gpu_child(h, off, he, n):  # runs in a spawned process
    from gpumpi._device import CupyAdapter

    a = CupyAdapter()
    base = a.ipc_open(h)
    assert a.ipc_open(h) == base  # CUDA reference-counts reopens
    out = np.zeros(n, np.uint8)
    a.memcpy(ptr(out), base + off, n)
    a.synchronize()
    e = a.ipc_event_open(he)
    ff = np.full(n, 255, np.uint8)
    a.memcpy(base + off, ptr(ff), n)
    a.event_record(e)
    a.event_synchronize(e)
    a.ipc_close(base)
    a.ipc_close(base)
    return out.tobytes()


@pytest.mark.gpu
def test_gpu_ipc_in_spawned_process():
    import concurrent.futures
    import multiprocessing as mp

    a = _cupy_adapter()
    n = 4096
    d = a.alloc(n + 64)
    src = pattern(n + 64)
    a.memcpy(d, ptr(src), n + 64)
    a.synchronize()
    h, off = a.ipc_export(d + 64)
    e = a.event_create(interprocess=True)
    he = a.ipc_event_export(e)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        got = ex.submit(_gpu_child, h, off, he, n).result(timeout=120)
    assert got == src[64:].tobytes()
    out = np.zeros(n, np.uint8)
    a.memcpy(ptr(out), d + 64, n)
    a.synchronize()
    assert (out == 255).all()
    a.free(d)
