"""Array backends on device memory: classification, strided device views, numba and DLPack, bad pointers.

Without a GPU every device backend is the simulated device: SimDeviceArray (CAI over
simulated allocations), numba-cuda's simulator arrays (no CAI: NumPy memory behind
``__cuda_ndarray__``) and a DLPack wrapper claiming ``kDLCUDA`` over simulated memory
(how PyTorch and JAX tensors arrive).  Non-contiguous device views become messages
with an automatic derived datatype, as strided NumPy views do; the multi-rank bodies
send around a ring (rank r to r+1), and expectations are NumPy arrays computed on
the receiving side from the sender's seed, with sentinels (-1) where a strided
receive must leave bytes alone.  Tests that need a real GPU through CuPy are marked
``gpu`` and run in fresh processes under the launcher (a forked rank cannot use a
CUDA context its parent initialised).
"""

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpumpi import _arrays as A
from gpumpi import datatypes as D
from gpumpi._arrays import SIM, BufferView, StridedView, as_buffer
from gpumpi._buffers import message_simple, message_vector
from gpumpi.datatypes import plan
from gpumpi.testing import WORLD_SIZES, DLPackOnly, SimDeviceArray, run_ranks


def _libcuda_loads() -> bool:
    # loading is not initialising: the parent must not cuInit, or forked ranks lose CUDA
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


needs_no_driver = pytest.mark.skipif(_libcuda_loads(), reason="a CUDA driver is present: CAI memory is real")


def values(shape, seed):
    return (np.arange(int(np.prod(shape)), dtype=np.int64) * 7 + seed * 1000).astype(np.float64).reshape(shape)


def _peers(c):
    return (c.rank + 1) % c.size, (c.rank - 1) % c.size


#: strided views of a 2-D C array: column, every other row, reversed rows, a reversed and
#: strided corner, a 2-D column block, a reversed column
VIEWS = {
    "column": np.s_[:, 3],
    "rows": np.s_[::2],
    "reversed": np.s_[::-1],
    "corner": np.s_[::-1, ::-2],
    "block": np.s_[:, 1:3],
    "column_reversed": np.s_[::-1, 0],
}


class CAI:
    """A bare __cuda_array_interface__ over any address (how foreign device arrays arrive)."""

    def __init__(self, ptr, shape, typestr="<f8", strides=None, owner=None):
        self.owner = owner
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": tuple(shape), "typestr": typestr,
                                         "strides": strides, "version": 3, "stream": None}


class SimCAI(CAI):
    __gpumpi_sim__ = True


class DLPackOnDevice:
    """A tensor claiming kDLCUDA device 0 (PyTorch, JAX), its DLPack export a NumPy array over
    simulated device memory; ``keep`` holds the allocation."""

    def __init__(self, arr, keep):
        self.a, self.keep = arr, keep

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, copy=None, dl_device=None):
        return self.a.__dlpack__(max_version=max_version, copy=copy)


def dlpack_of(d):
    """A DLPack tensor over SimDeviceArray ``d`` (same memory, shape and strides)."""
    return DLPackOnDevice(d._arr, d)


def _packed(m):
    """The bytes a message moves, packed on the host from its memory (host and sim)."""
    out = np.zeros(m.nbytes, np.uint8)
    plan.pack_into(m.mem, m.lo, m.datatype, m.count, out)
    return out


# -- classification (one process) ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_strided_sim_views_are_messages_with_automatic_datatypes(name):
    host = values((7, 6), 3)
    d = SimDeviceArray.from_numpy(host)
    view = d[VIEWS[name]]
    want = host[VIEWS[name]]
    with pytest.raises(BufferError, match=r"^Send: __cuda_array_interface__: buffer is not contiguous"):
        as_buffer(view, True, "Send")
    sv = as_buffer(view, True, "Send", strided=True)
    assert type(sv) is StridedView and (sv.kind, sv.device) == (SIM, 0)
    assert (sv.addr, sv.shape, sv.strides, sv.nbytes) == (view.ptr, want.shape, want.strides, want.nbytes)
    for spec in (view, [view, D.DOUBLE], [view, want.size, D.DOUBLE], [view, (want.size, 0), "d"]):
        m = message_simple(spec, False, 0, call="Recv")
        assert (m.kind, m.device) == (SIM, 0) and type(m.view) is StridedView
        assert m.nbytes == want.nbytes and not m.contiguous
        assert m.addr + m.lo >= d.ptr and m.addr + m.lo + m.span <= d.ptr + host.nbytes
        assert np.array_equal(_packed(m).view(np.float64), want.ravel())  # C order, as NumPy
    # the same layout as the same NumPy view: one rule for both
    mh = message_simple(host[VIEWS[name]], True, 0)
    md = message_simple(view, True, 0)
    assert (md.count, md.lo, md.span, md.addr - d.ptr) == (mh.count, mh.lo, mh.span, mh.addr - host.ctypes.data)
    assert md.datatype.Get_true_extent() == mh.datatype.Get_true_extent()


def test_strided_sim_views_with_explicit_derived_datatypes():
    host = values((5, 6), 1)
    d = SimDeviceArray.from_numpy(host)
    col = D.DOUBLE.Create_vector(5, 1, 6).Commit()
    m = message_simple([d[:, 1:], 1, col], True, 0, call="Send")  # a pointer to d[0, 1], as in C
    assert (m.addr, m.count, m.kind) == (d.ptr + 8, 1, SIM)
    assert np.array_equal(_packed(m).view(np.float64), host[:, 1])
    streamed = SimCAI(d.ptr, (5,), strides=(48,), owner=d)
    streamed.__cuda_array_interface__["stream"] = 7  # the producer's stream rides along (CAI v3)
    assert as_buffer(streamed, True, strided=True).stream == 7
    wide = D.DOUBLE.Create_vector(5, 3, 6).Commit()  # the last row's third element is past the view
    with pytest.raises(ValueError, match=r"^Send: message: count 1 of datatype .* needs bytes \[0, 216\) from the "
                                         r"first element, the array view spans \[0, 208\)"):
        message_simple([d[:, 4:], 1, wide], True, 0, call="Send")
    with pytest.raises(ValueError, match="a non-contiguous array moves all its 5 elements"):
        message_simple([d[:, 2], 3, D.DOUBLE], True, 0, call="Send")
    with pytest.raises(BufferError, match="^Gather: buffer is not contiguous .* collectives need contiguous"):
        message_simple(d[:, 2], True, 0, blocks=2, call="Gather")
    with pytest.raises(BufferError, match="^Gatherv: __cuda_array_interface__: buffer is not contiguous"):
        message_vector(d[:, 2], True, 0, 2, call="Gatherv")
    col.Free()
    wide.Free()


def test_unusable_strided_interfaces_stay_buffer_errors():
    d = SimDeviceArray.zeros((4, 6))
    with pytest.raises(BufferError, match=r"^Send: __cuda_array_interface__: typestr '<x8' is not understood"):
        message_simple(SimCAI(d.ptr, (4,), "<x8", strides=(48,), owner=d), True, 0, call="Send")
    with pytest.raises(BufferError, match=r"^Send: __cuda_array_interface__: 1 strides for 2 dimensions"):
        message_simple(SimCAI(d.ptr, (4, 2), strides=(48,), owner=d), True, 0, call="Send")
    masked = SimCAI(d.ptr, (4,), strides=(48,), owner=d)
    masked.__cuda_array_interface__["mask"] = d
    with pytest.raises(BufferError, match="cannot handle masked arrays"):
        message_simple(masked, True, 0, call="Send")
    ro = SimCAI(d.ptr, (4,), strides=(48,), owner=d)
    ro.__cuda_array_interface__["data"] = (d.ptr, True)
    with pytest.raises(BufferError, match=r"^Recv: buffer is not writable"):
        message_simple(ro, False, 0, call="Recv")
    assert message_simple(ro, True, 0, call="Send").view.readonly


def test_cpu_dlpack_strided_arrays_are_host_messages():
    a = values((5, 4), 4)
    m = message_simple(DLPackOnly(a[::-2, 1:3]), True, 0, call="Send")
    assert m.kind == "host" and m.device is None and not m.contiguous
    assert np.array_equal(_packed(m).view(np.float64), a[::-2, 1:3].ravel())


def test_contiguous_slices_stay_plain_buffers():
    d = SimDeviceArray.zeros((4, 6))
    for view in (d, d[1:3], d[2], d[:, :]):
        v = as_buffer(view, False, "Recv", strided=True)
        assert type(v) is BufferView and v.kind == SIM and v.addr == view.ptr and v.nbytes == view.nbytes
    m = message_simple(d[1:3], False, 0)
    assert m.contiguous and m.count == 12 and m.addr == d.ptr + 48


@needs_no_driver
def test_dlpack_wrapper_over_simulated_memory_is_sim():
    host = values((4, 5), 2)
    d = SimDeviceArray.from_numpy(host)
    v = as_buffer(dlpack_of(d), False, "Recv")
    assert (v.kind, v.device, v.addr, v.nbytes, v.format) == (SIM, 0, d.ptr, host.nbytes, "d")
    col = dlpack_of(d[:, 2])
    with pytest.raises(BufferError, match=r"^Send: dlpack: buffer is not contiguous \(shape \[4\], strides \[5\]\)"):
        as_buffer(col, True, "Send")
    sv = as_buffer(col, True, "Send", strided=True)
    assert (sv.kind, sv.addr, sv.strides) == (SIM, d.ptr + 16, (40,))
    rev = message_simple(dlpack_of(d[::-1, 1]), True, 0)  # negative strides are fine here
    assert np.array_equal(_packed(rev).view(np.float64), host[::-1, 1])


@needs_no_driver
def test_numba_simulator_arrays_are_sim(tmp_path):
    # numba reads NUMBA_ENABLE_CUDASIM at import: classify in a fresh interpreter
    code = textwrap.dedent("""
        import os
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        import numpy as np
        from numba import cuda
        from gpumpi._arrays import as_buffer, StridedView
        from gpumpi._buffers import message_simple
        a = np.arange(24.0).reshape(4, 6)
        d = cuda.to_device(a)
        assert not hasattr(d, "__cuda_array_interface__")  # the simulator has none
        v = as_buffer(d, False, "Recv")
        assert (v.kind, v.device, v.nbytes, v.stream) == ("sim", 0, 192, None), v
        assert v.addr == d._ary.ctypes.data
        col = d[:, 1]
        try:
            as_buffer(col, True, "Send")
        except BufferError as e:
            assert str(e).startswith("Send: numba: buffer is not contiguous"), e
        else:
            raise AssertionError("no BufferError")
        assert type(as_buffer(col, True, "Send", strided=True)) is StridedView
        m = message_simple(col, True, 0)
        assert (m.kind, m.count, m.addr) == ("sim", 4, d._ary.ctypes.data + 8)
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


@needs_no_driver
def test_one_classification_for_adapter_and_buffers(monkeypatch):
    from gpumpi import _device

    d = SimDeviceArray.zeros(8)
    host = np.zeros(8)
    ad = _device.sim_adapter()
    managed = ad.alloc_managed(64)
    try:
        assert _device.adapter() is ad  # no driver: the active adapter is the simulated one
        for ptr in (d.ptr, host.ctypes.data, managed):
            assert A._device_pointer_kind(ptr, None) == (SIM, 0)
            assert as_buffer(CAI(ptr, (8,)), True).kind == SIM
        # with a driver, the kind is the driver's, through the same helper as CupyAdapter.pointer_info
        infos = {d.ptr: _device.PointerInfo("device", 1, d.ptr, 64, True),
                 managed: _device.PointerInfo("managed", 0, managed, 64),
                 host.ctypes.data: _device.PointerInfo("host", None, None, None)}
        monkeypatch.setattr(_device.cuda, "_driver", [object()])
        monkeypatch.setattr(_device.cuda, "driver_pointer_info", lambda lib, addr, activate=None: infos[addr])
        assert _device.cuda_pointer_attributes(d.ptr) == ("device", 1)
        assert _device.cuda_pointer_attributes(managed) == ("device", 0)
        assert _device.cuda_pointer_attributes(host.ctypes.data) == ("host", None)
        v = as_buffer(CAI(d.ptr, (8,)), True)
        assert (v.kind, v.device, v.mem) == ("device", 1, None)
        assert as_buffer(CAI(host.ctypes.data, (8,)), True).kind == "host"
        assert as_buffer(d, True).kind == SIM  # declared simulated memory never asks the driver
        _device.set_device_mode("sim")
        try:
            assert as_buffer(CAI(d.ptr, (8,)), True).kind == SIM
        finally:
            _device.set_device_mode("auto")
    finally:
        ad.free(managed)


def test_bad_pointers_are_buffer_errors():
    from gpumpi._device import sim_adapter

    ad = sim_adapter()
    p = ad.alloc(512)
    ok = SimCAI(p, (64,))
    assert as_buffer(ok, False).kind == SIM
    with pytest.raises(BufferError, match=r"^Send: __cuda_array_interface__: bytes .* run past the end of their "
                                          r"simulated allocation"):
        as_buffer(SimCAI(p, (65,)), True, "Send")
    with pytest.raises(BufferError, match="run past the end"):
        message_simple(SimCAI(p + 16, (32,), strides=(16,)), True, 0, call="Send")  # ends 520 bytes in
    ad.free(p)
    for obj in (SimCAI(p, (64,)), CAI(p, (64,)), SimCAI(p, (16,), strides=(32,))):
        with pytest.raises(BufferError, match=r"^Send: __cuda_array_interface__: no memory is mapped at "
                                              r"\[0x[0-9a-f]+, 0x[0-9a-f]+\) \(freed device memory\?\)"):
            message_simple(obj, True, 0, call="Send")


# -- strided device views between ranks --------------------------------------------------------


def _strided_pairs():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    tag = 0
    # every view eagerly; three of them large (every other row: 72 KB packed, rendezvous)
    for shape, names in (((6, 5), sorted(VIEWS)), ((3000, 6), ["rows", "corner", "column_reversed"])):
        for skind, rkind in (("sim", "sim"), ("sim", "host"), ("host", "sim")):
            src = values(shape, c.rank)
            if skind == "sim":
                src = SimDeviceArray.from_numpy(src)
            for name in names:
                idx = VIEWS[name]
                tag += 1
                dst = np.full(shape, -1.0)
                if rkind == "sim":
                    dst = SimDeviceArray.from_numpy(dst)
                st = MPI.Status()
                req = c.Isend(src[idx], nxt, tag)
                c.Recv(dst[idx], prv, tag, st)
                req.Wait()
                want = np.full(shape, -1.0)
                want[idx] = values(shape, prv)[idx]
                got = dst.get() if rkind == "sim" else dst
                assert np.array_equal(got, want), (shape, skind, rkind, name)
                assert st.Get_count(MPI.DOUBLE) == want[idx].size
        # explicit derived types on device views, both sides; a strided view into a contiguous one
        rows, cols = shape
        col = MPI.DOUBLE.Create_vector(rows, 1, cols).Commit()
        src = SimDeviceArray.from_numpy(values(shape, c.rank))
        dst = SimDeviceArray.from_numpy(np.full(shape, -1.0))
        req = c.Isend([src[:, 1:], 1, col], nxt, 100)
        c.Recv([dst[:, 3:], 1, col], prv, 100)
        req.Wait()
        want = np.full(shape, -1.0)
        want[:, 3] = values(shape, prv)[:, 1]
        assert np.array_equal(dst.get(), want)
        flat = SimDeviceArray.zeros(rows)
        req = c.Isend(src[::-1, 2], nxt, 101)
        c.Recv(flat, prv, 101)
        req.Wait()
        assert np.array_equal(flat.get(), values(shape, prv)[::-1, 2])
        col.Free()
    return c.rank


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_strided_device_views_between_ranks(n):
    assert run_ranks(_strided_pairs, n, timeout=90) == list(range(n))


# -- numba simulator arrays and DLPack tensors ------------------------------------------------


def _numba_and_dlpack():
    if "numba.cuda" not in sys.modules:
        from gpumpi._device import cuda_driver

        if cuda_driver() is None:
            os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    from numba import cuda
    from numba.cuda.core import config

    if not config.ENABLE_CUDASIM:
        pytest.skip("numba.cuda drives a real GPU here (the gpu tests cover it)")
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    for shape in ((4, 6), (12000, 3)):
        # numba -> numba, contiguous and strided
        src = cuda.to_device(values(shape, c.rank))
        dst = cuda.to_device(np.full(shape, -1.0))
        req = c.Isend(src, nxt, 1)
        c.Recv(dst, prv, 1)
        req.Wait()
        assert np.array_equal(dst.copy_to_host(), values(shape, prv))
        dst = cuda.to_device(np.full(shape, -1.0))
        req = c.Isend(src[::-1, 1], nxt, 2)
        c.Recv(dst[:, 2], prv, 2)
        req.Wait()
        want = np.full(shape, -1.0)
        want[:, 2] = values(shape, prv)[::-1, 1]
        assert np.array_equal(dst.copy_to_host(), want)
        # DLPack tensor -> SimDeviceArray, SimDeviceArray -> strided DLPack tensor, numba -> DLPack
        d = SimDeviceArray.from_numpy(values(shape, c.rank))
        out = SimDeviceArray.from_numpy(np.full(shape, -1.0))
        req = c.Isend(dlpack_of(d), nxt, 3)
        c.Recv(out, prv, 3)
        req.Wait()
        assert np.array_equal(out.get(), values(shape, prv))
        out = SimDeviceArray.from_numpy(np.full(shape, -1.0))
        req = c.Isend(d[:, 0], nxt, 4)
        c.Recv(dlpack_of(out[::-1, 1]), prv, 4)
        req.Wait()
        want = np.full(shape, -1.0)
        want[::-1, 1] = values(shape, prv)[:, 0]
        assert np.array_equal(out.get(), want)
        out = SimDeviceArray.from_numpy(np.full(shape, -1.0))
        req = c.Isend(src[:, 0], nxt, 5)
        c.Recv(dlpack_of(out[:, 2]), prv, 5)
        req.Wait()
        want = np.full(shape, -1.0)
        want[:, 2] = values(shape, prv)[:, 0]
        assert np.array_equal(out.get(), want)
    return c.rank


@pytest.mark.parametrize("n", [1, 3])
def test_numba_and_dlpack_arrays_between_ranks(n):
    assert run_ranks(_numba_and_dlpack, n, timeout=90) == list(range(n))


# -- bad pointers and other devices -------------------------------------------------------------


def _freed_pointer():
    from gpumpi import MPI
    from gpumpi._device import sim_adapter

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    ad = sim_adapter()
    keep = SimDeviceArray.zeros(64)  # the live neighbour of the dead allocation
    p = ad.alloc(512)
    dead, dead_declared = CAI(p, (64,)), SimCAI(p, (64,))
    ad.free(p)  # unmapped: reading it would kill the process
    for obj in (dead, dead_declared):
        for send in (c.Send, c.Isend, c.Ssend):
            with pytest.raises(BufferError, match=r"no memory is mapped at .*\(freed device memory\?\)"):
                send(obj, nxt, 1)
        for recv in (c.Recv, c.Irecv):
            with pytest.raises(BufferError, match="no memory is mapped"):
                recv(obj, prv, 1)
    # nothing was posted: the ring still works
    req = c.Isend(np.full(64, c.rank, np.float64), nxt, 2)
    c.Recv(keep, prv, 2)
    req.Wait()
    assert (keep.get() == prv).all()
    return c.rank


@pytest.mark.parametrize("n", [1, 2])
def test_freed_device_memory_is_a_buffer_error(n):
    assert run_ranks(_freed_pointer, n, timeout=60) == list(range(n))


def _other_device():
    from gpumpi import _device

    _device._INSTANCES["sim"] = ad = _device.SimAdapter(ndevices=2)  # this rank's device: two GPUs
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    for n in (100, 300_000):  # eager; rendezvous through an IPC handle of a device-1 allocation
        ad.set_device(1)
        src1 = SimDeviceArray.from_numpy(values((n // 4, 4), c.rank))
        dst1 = SimDeviceArray.from_numpy(np.full((n // 4, 4), -1.0))
        ad.set_device(0)
        dst0 = SimDeviceArray.from_numpy(np.full((n // 4, 4), -1.0))
        assert ad.current_device() == 0
        for obj in (src1, src1[:, 2], dlpack_of(src1)):
            assert as_buffer(obj, True, strided=True).device == 1
        assert message_simple(src1[::-1, 1], True, 0).device == 1 and message_simple(dst0, True, 0).device == 0
        # device 1 -> device 1 and device 1 -> device 0 while device 0 is current
        for dst in (dst1, dst0):
            req = c.Isend(src1, nxt, 1)
            c.Recv(dst, prv, 1)
            req.Wait()
            assert np.array_equal(dst.get(), values((n // 4, 4), prv))
        # strided, device 1 into a strided view on device 0
        out = SimDeviceArray.from_numpy(np.full((n // 4, 4), -1.0))
        req = c.Isend(src1[:, 3], nxt, 2)
        c.Recv(out[::-1, 0], prv, 2)
        req.Wait()
        want = np.full((n // 4, 4), -1.0)
        want[::-1, 0] = values((n // 4, 4), prv)[:, 3]
        assert np.array_equal(out.get(), want)
        assert ad.current_device() == 0  # gpumpi did not switch the caller's device
    if c.size > 1:  # the large device-1 sends went device to device through its IPC handle
        from gpumpi import _runtime as rt

        assert len(rt.ENGINE.region("device", "cuda_ipc").mem) == 1  # the one allocation sent large: src1, on device 1
    return c.rank


@pytest.mark.parametrize("n", [1, 2, 3])
def test_pointer_on_another_device_uses_its_own_device(n):
    assert run_ranks(_other_device, n, timeout=60) == list(range(n))


# -- real GPUs (CuPy), in fresh processes ---------------------------------------------------------


@pytest.mark.gpu
def test_gpu_cupy_strided_views(tmp_path):
    pytest.importorskip("cupy", reason="cupy is not installed (pip install gpumpi[cuda])")
    prog = tmp_path / "cupy_strided.py"
    prog.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        import cupy as cp
        try:
            ngpu = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            print(f"SKIP no CUDA GPU ({exc})"); sys.exit(0)
        if not ngpu:
            print("SKIP no CUDA GPU"); sys.exit(0)
        from gpumpi import MPI
        from gpumpi._arrays import as_buffer
        c = MPI.COMM_WORLD
        nxt, prv = (c.rank + 1) % c.size, (c.rank - 1) % c.size
        def values(shape, seed):
            return (np.arange(int(np.prod(shape))) * 7 + seed * 1000).astype(np.float64).reshape(shape)
        for shape in ((6, 5), (3000, 6)):
            src = cp.asarray(values(shape, c.rank))
            sv = as_buffer(src[:, 1], True, "Send", strided=True)
            assert sv.kind == "device" and sv.device == cp.cuda.runtime.getDevice(), sv
            for idx in (np.s_[:, 3], np.s_[::2], np.s_[::-1, ::-2], np.s_[:, 1:3]):
                dst = cp.full(shape, -1.0)
                cp.cuda.get_current_stream().synchronize()
                req = c.Isend(src[idx], nxt, 1)
                c.Recv(dst[idx], prv, 1)
                req.Wait()
                want = np.full(shape, -1.0)
                want[idx] = values(shape, prv)[idx]
                assert np.array_equal(cp.asnumpy(dst), want), idx
        print("ok")
    """))
    p = subprocess.run([sys.executable, "-m", "gpumpi", "-n", "2", str(prog)], capture_output=True, text=True,
                       timeout=240)
    if "SKIP" in p.stdout:
        pytest.skip(p.stdout.split("SKIP", 1)[1].strip().splitlines()[0])
    assert p.returncode == 0 and p.stdout.count("ok") == 2, p.stdout + p.stderr
