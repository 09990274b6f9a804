"""BufferView normalisation: NumPy, the buffer protocol, DLPack, the CUDA array interface, backends."""

import array
import ctypes
import mmap
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumpi import _arrays as A
from gpumpi import _backends, _device
from gpumpi import datatypes as D
from gpumpi.testing import DLPackOnly
from gpumpi._arrays import DEVICE, HOST, SIM, BufferView, NotABufferError, as_buffer, datatype_of, lookup_dtype


class FakeCAI:
    """Host memory exposed through __cuda_array_interface__ (mpi4py's FakeGPUArray)."""

    def __init__(self, a, readonly=False, mask=None, typestr=None, stream=None):
        self.a, self.readonly, self.mask, self.typestr, self.stream = a, readonly, mask, typestr, stream

    @property
    def __cuda_array_interface__(self):
        a = self.a
        return {
            "data": (a.ctypes.data if a.size else None, self.readonly),
            "typestr": self.typestr or a.dtype.str,
            "shape": a.shape,
            "strides": None if a.flags.c_contiguous else a.strides,
            "mask": self.mask,
            "stream": self.stream,
            "version": 3,
        }


class FakeCUDADLPack:
    """A NumPy array that claims, through DLPack, to live on CUDA device ``device_id``."""

    def __init__(self, a, device_id=0, versioned=True):
        self.a, self.device_id, self.versioned = a, device_id, versioned

    def __dlpack_device__(self):
        return (2, self.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, copy=None, dl_device=None):
        assert stream == -1  # never ask the producer to synchronize (mpi4py's rule)
        if not self.versioned:
            if max_version is not None:
                raise TypeError("old producer")
            return self.a.__dlpack__()
        return self.a.__dlpack__(max_version=max_version, copy=copy)


def _no_driver():
    return _device.cuda_pointer_attributes(0) is None


needs_no_driver = pytest.mark.skipif(not _no_driver(), reason="a CUDA driver is present: CAI memory is real")


def check_view(v, obj_bytes: bytes, *, addr=None, readonly=None, kind=HOST):
    assert isinstance(v, BufferView)
    assert v.nbytes == len(obj_bytes)
    assert v.kind == kind
    if addr is not None:
        assert v.addr == addr
    if readonly is not None:
        assert v.readonly is readonly
    assert v.mem.format == "B" and v.mem.ndim == 1 and v.mem.tobytes() == obj_bytes
    assert v.mem.readonly is v.readonly
    # the address is the memory: read it back independently
    assert ctypes.string_at(v.addr, v.nbytes) == obj_bytes


@pytest.mark.parametrize("a", [
    np.arange(10, dtype="i4"),
    np.arange(12.0).reshape(3, 4),
    np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    np.arange(20, dtype="i2")[4:9],
    np.array(3.5),
    np.empty(0, dtype="f8"),
    np.zeros(3, dtype="i4,f8"),
])
def test_numpy_contiguous(a):
    v = as_buffer(a, False, "Recv")
    check_view(v, a.tobytes(order="A"), addr=a.ctypes.data, readonly=False)
    assert v.obj is a and v.format == a.dtype and v.itemsize == a.itemsize and v.device is None


def test_numpy_mem_aliases_the_array():
    a = np.zeros(4, dtype="u1")
    v = as_buffer(a, False, "Recv")
    v.mem[1:3] = b"\x07\x08"
    assert a.tolist() == [0, 7, 8, 0]


def test_numpy_noncontiguous_and_readonly_are_rejected():
    a = np.arange(10.0)
    with pytest.raises(BufferError, match=r"^Send: buffer is not contiguous \(shape \(5,\), strides \(16,\)"):
        as_buffer(a[::2], True, "Send")
    r = a.copy()
    r.flags.writeable = False
    with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
        as_buffer(r, False, "Recv")
    v = as_buffer(r, True, "Send")
    assert v.readonly and v.mem.readonly


def test_numpy_subclass_goes_through_numpy():
    m = np.arange(8.0).view(np.recarray)
    v = as_buffer(m, True, "Send")
    assert v.addr == m.ctypes.data and v.nbytes == 64 and v.obj is m


@given(st.integers(0, 40), st.integers(0, 5), st.integers(1, 4), st.sampled_from(["i1", "f8", "c16", "u2"]),
       st.booleans())
def test_numpy_fast_header_read_matches_numpy(n, start, step, dtype, fortran):
    base = np.arange(start + n * step + 1, dtype=dtype)
    a = base[start:start + n * step:step]
    if fortran and n % 2 == 0 and n:
        a = a.reshape(2, -1).T  # a Fortran-ordered view when a is contiguous
    if a.flags.c_contiguous or a.flags.f_contiguous:
        assert as_buffer(a, False, "x").addr == a.ctypes.data
    else:
        with pytest.raises(BufferError):
            as_buffer(a, False, "x")


def test_buffer_protocol_objects():
    ba = bytearray(b"hello")
    check_view(as_buffer(ba, False, "Recv"), b"hello", readonly=False)
    check_view(as_buffer(b"abc", True, "Send"), b"abc", readonly=True)
    arr = array.array("d", [1.0, 2.0])
    v = as_buffer(arr, False, "Recv")
    check_view(v, arr.tobytes(), addr=arr.buffer_info()[0], readonly=False)
    assert v.format == "d" and v.itemsize == 8 and datatype_of(v) is D.DOUBLE
    mm = mmap.mmap(-1, 4096)
    mm[:4] = b"wxyz"
    v = as_buffer(mm, False, "Recv")
    assert v.nbytes == 4096 and v.mem[:4].tobytes() == b"wxyz"
    del v
    cbuf = (ctypes.c_int * 3)(1, 2, 3)
    v = as_buffer(cbuf, False, "Recv")
    assert v.addr == ctypes.addressof(cbuf) and datatype_of(v) is D.INT
    mv = memoryview(bytearray(16)).cast("d")
    v = as_buffer(mv, False, "Recv")
    assert v.format == "d" and v.nbytes == 16 and datatype_of(v) is D.DOUBLE
    v = as_buffer(np.float64(2.5), True, "Send")
    assert v.readonly and v.mem.tobytes() == np.float64(2.5).tobytes()


def test_buffer_protocol_pins_resizable_exporters():
    ba = bytearray(8)
    v = as_buffer(ba, False, "Recv")
    with pytest.raises(BufferError):
        ba.extend(b"more")  # the view holds an export: the address cannot move
    del v


def test_buffer_protocol_errors():
    with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
        as_buffer(b"abc", False, "Recv")
    with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
        as_buffer(memoryview(b"abc"), False, "Recv")
    with pytest.raises(BufferError, match="^Send: buffer is not contiguous"):
        as_buffer(memoryview(bytearray(8))[::2], True, "Send")
    with pytest.raises(NotABufferError, match="^Send: expecting a buffer"):
        as_buffer(5, True, "Send")
    with pytest.raises(TypeError):
        as_buffer(None, True, "Send")
    f = memoryview(np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    v = as_buffer(f, True, "Send")
    assert v.mem.tobytes() == np.asfortranarray(np.arange(6.0).reshape(2, 3)).tobytes(order="F")


@needs_no_driver
def test_cai_without_driver_is_sim_memory():
    a = np.arange(6, dtype="f8")
    obj = FakeCAI(a, stream=7)
    v = as_buffer(obj, False, "Recv")
    check_view(v, a.tobytes(), addr=a.ctypes.data, readonly=False, kind=SIM)
    assert v.obj is obj and v.format == "d" and v.itemsize == 8 and v.stream == 7 and v.device == 0
    v.mem[:8] = np.float64(-1).tobytes()
    assert a[0] == -1
    assert datatype_of(v) is D.DOUBLE


@needs_no_driver
def test_cai_layouts_and_errors():
    f = np.asfortranarray(np.arange(12, dtype="i4").reshape(3, 4))
    assert as_buffer(FakeCAI(f), True, "Send").nbytes == 48
    with pytest.raises(BufferError, match=r"^Send: __cuda_array_interface__: buffer is not contiguous"):
        as_buffer(FakeCAI(np.arange(12.0).reshape(3, 4)[:, ::2]), True, "Send")
    with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
        as_buffer(FakeCAI(np.arange(3.0), readonly=True), False, "Recv")
    assert as_buffer(FakeCAI(np.arange(3.0), readonly=True), True, "Send").readonly
    with pytest.raises(BufferError, match="cannot handle masked arrays"):
        as_buffer(FakeCAI(np.arange(3.0), mask=np.zeros(3, bool)), True, "Send")
    with pytest.raises(BufferError, match="unrecognized byte order"):
        as_buffer(FakeCAI(np.arange(3.0), typestr="!f8"), True, "Send")
    big = as_buffer(FakeCAI(np.arange(3.0).astype(">f8")), True, "Send")
    assert big.format == ">d"
    with pytest.raises(BufferError, match="non-native byte order"):
        datatype_of(big, "Send")
    empty = as_buffer(FakeCAI(np.empty(0, "f4")), False, "Recv")
    assert empty.addr == 0 and empty.nbytes == 0 and empty.mem.tobytes() == b""
    odd = as_buffer(FakeCAI(np.zeros(2, "V3")), True, "Send")  # no C type: bytes, like mpi4py
    assert odd.format == "B" and odd.itemsize == 1 and datatype_of(odd) is D.BYTE


@pytest.mark.parametrize("typestr,expect", [("<i4", "INT"), ("<u8", "UNSIGNED_LONG"), ("|b1", "C_BOOL"),
                                            ("<f2", "FLOAT16_T"), ("<c16", "C_DOUBLE_COMPLEX"),
                                            ("|u1", "BYTE"), ("<f16", "LONG_DOUBLE")])
def test_cai_format_inference(typestr, expect):
    a = np.zeros(4, dtype=typestr)
    assert datatype_of(as_buffer(FakeCAI(a), True, "Send")) is getattr(D, expect)


def test_dlpack_cpu_is_read_by_gpumpi():
    a = np.arange(5, dtype="i8")
    v = as_buffer(DLPackOnly(a), False, "Recv")
    check_view(v, a.tobytes(), addr=a.ctypes.data, readonly=False)
    assert isinstance(v.obj, A.DLPackOwner)
    r = a.copy()
    r.flags.writeable = False
    with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
        as_buffer(DLPackOnly(r), False, "Recv")
    with pytest.raises(BufferError, match="not contiguous"):
        as_buffer(DLPackOnly(a[::2]), True, "Send")
    sv = as_buffer(DLPackOnly(a[::2]), True, "Send", strided=True)
    assert isinstance(sv, A.StridedView) and sv.strides == (16,) and sv.kind == HOST
    assert bytes(sv.mem) == a[:5].tobytes()[: 8 * 5]


# -- a DLPack producer built with ctypes, which counts its deleter calls ------------------------

# private prototypes (``pythonapi[name]`` is a new function object; ``pythonapi.name`` is shared)
_py_new = ctypes.pythonapi["PyCapsule_New"]
_py_new.restype = ctypes.py_object
_py_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_py_name = ctypes.pythonapi["PyCapsule_GetName"]
_py_name.restype = ctypes.c_char_p
_py_name.argtypes = [ctypes.py_object]
_py_ptr = ctypes.pythonapi["PyCapsule_GetPointer"]
_py_ptr.restype = ctypes.c_void_p
_py_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
# the capsule destructor gets a dying capsule, which must not become a Python reference
_dt_valid = ctypes.pythonapi["PyCapsule_IsValid"]
_dt_valid.restype = ctypes.c_int
_dt_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_dt_ptr = ctypes.pythonapi["PyCapsule_GetPointer"]
_dt_ptr.restype = ctypes.c_void_p
_dt_ptr.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_CAPSULE_DTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_LIVE: dict = {}  # managed address -> producer, until its deleter ran


@_DELETER
def _counting_deleter(addr):
    p = _LIVE.pop(addr)
    p.deleted += 1


@_CAPSULE_DTOR
def _capsule_dtor(cap):
    # the producer's side of the protocol: a capsule nobody consumed frees its tensor
    for name in (b"dltensor_versioned", b"dltensor"):
        if _dt_valid(cap, name):
            _counting_deleter(_dt_ptr(cap, name))
            return


class CtypesDLPack:
    """A DLPack producer of host memory ``a`` built with ctypes (as C producers are): it
    records the ``stream`` it was asked for and counts the calls of its deleter."""

    def __init__(self, a, device_type=1, versioned=True, readonly=False, copied=False, byte_offset=0,
                 shape=None, strides=None, dtype=None, device_id=0):
        self.a, self.device_type, self.device_id, self.versioned = a, device_type, device_id, versioned
        self.readonly, self.copied, self.byte_offset = readonly, copied, byte_offset
        self.shape = a.shape if shape is None else shape
        self.strides = strides
        self.dtype = dtype
        self.deleted = 0
        self.streams = []
        self.capsules = []

    def __dlpack_device__(self):
        return (self.device_type, self.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, copy=None, dl_device=None):
        if not self.versioned and max_version is not None:
            raise TypeError("a DLPack 0.x producer")
        self.streams.append(stream)
        a = self.a
        m = A._DLManagedTensorVersioned() if self.versioned else A._DLManagedTensor()
        t = m.dl_tensor
        t.data = a.ctypes.data
        t.device.device_type, t.device.device_id = self.device_type, self.device_id
        t.ndim = len(self.shape)
        self._shape = (ctypes.c_int64 * max(1, t.ndim))(*self.shape)
        t.shape = self._shape
        if self.strides is not None:
            self._strides = (ctypes.c_int64 * max(1, t.ndim))(*self.strides)
            t.strides = self._strides
        code = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}[a.dtype.kind]
        t.dtype.code, t.dtype.bits, t.dtype.lanes = self.dtype or (code, a.itemsize * 8, 1)
        t.byte_offset = self.byte_offset
        m.deleter = ctypes.cast(_counting_deleter, ctypes.c_void_p)
        if self.versioned:
            m.major, m.minor = 1, 0
            m.flags = (1 if self.readonly else 0) | (2 if self.copied else 0)
        addr = ctypes.addressof(m)
        self._m = m  # the struct lives as long as the producer
        _LIVE[addr] = self
        name = b"dltensor_versioned" if self.versioned else b"dltensor"
        cap = _py_new(addr, name, ctypes.cast(_capsule_dtor, ctypes.c_void_p))
        self.capsules.append(cap)
        return cap


def _collect():
    import gc

    gc.collect()


@pytest.fixture(autouse=True)
def _free_capsules():
    """Capsules a test left with its producer die with the test, not at interpreter exit."""
    yield
    for p in list(_LIVE.values()):
        p.capsules.clear()
    _collect()


@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_consumed_capsule_deleter_runs_once_on_release(versioned):
    a = np.arange(6, dtype="i4")
    p = CtypesDLPack(a, versioned=versioned)
    v = as_buffer(p, False, "Recv")
    cap = p.capsules.pop()
    used = b"used_dltensor_versioned" if versioned else b"used_dltensor"
    assert _py_name(cap) == used  # consumed
    assert p.streams == [None]  # host memory: no stream
    check_view(v, a.tobytes(), addr=a.ctypes.data, readonly=False)
    mem = v.mem
    del v
    _collect()
    assert p.deleted == 0  # a memoryview of the bytes still holds the tensor
    mem[:4] = np.int32(7).tobytes()
    assert a[0] == 7
    del mem
    _collect()
    assert p.deleted == 1
    del cap  # the producer's destructor sees a used capsule: no second call
    _collect()
    assert p.deleted == 1


def test_dlpack_not_consumed_when_refused():
    a = np.arange(4, dtype="f8")
    p = CtypesDLPack(a, readonly=True)
    with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
        as_buffer(p, False, "Recv")
    cap = p.capsules.pop()
    assert _py_name(cap) == b"dltensor_versioned"  # left to its producer
    assert p.deleted == 0
    del cap
    _collect()
    assert p.deleted == 1  # by the producer's capsule destructor, once
    v = as_buffer(p, True, "Send")  # read-only memory is a fine send buffer
    assert v.readonly and v.mem.readonly and bytes(v.mem) == a.tobytes()
    del v
    p.capsules.clear()
    _collect()
    assert p.deleted == 2
    q = CtypesDLPack(a, copied=True)
    with pytest.raises(BufferError, match="exported a copy"):
        as_buffer(q, False, "Recv")
    assert as_buffer(q, True, "Send").nbytes == 32


def test_dlpack_get_address_reads_without_consuming():
    from gpumpi import MPI

    a = np.arange(4, dtype="i2")
    p = CtypesDLPack(a)
    assert MPI.Get_address(p) == a.ctypes.data
    cap = p.capsules.pop()
    assert _py_name(cap) == b"dltensor_versioned" and p.deleted == 0
    p.__dlpack__ = lambda *_a, **_k: cap  # one capsule, read twice
    assert MPI.Get_address(p) == MPI.Get_address(p) == a.ctypes.data
    del p.__dlpack__
    del cap
    _collect()
    assert p.deleted == 1


@needs_no_driver
@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_cuda_is_sim_memory_and_never_asks_for_a_sync(versioned):
    a = np.arange(6, dtype="f4")
    p = CtypesDLPack(a, device_type=A.kDLCUDA, device_id=0, versioned=versioned)
    v = as_buffer(p, False, "Recv")
    assert p.streams == [-1] and v.kind == SIM and v.device == 0
    check_view(v, a.tobytes(), addr=a.ctypes.data, readonly=False, kind=SIM)
    del v
    p.capsules.clear()
    _collect()
    assert p.deleted == 1


def test_dlpack_layout_and_dtype_codes():
    a = np.arange(8, dtype="u1")
    v = as_buffer(CtypesDLPack(a, byte_offset=3, shape=(5,)), True, "Send")
    assert v.addr == a.ctypes.data + 3 and bytes(v.mem) == bytes(range(3, 8))
    b = np.arange(12, dtype="i4")
    sv = as_buffer(CtypesDLPack(b, shape=(3, 2), strides=(4, 2)), True, "Send", strided=True)
    assert isinstance(sv, A.StridedView) and sv.shape == (3, 2) and sv.strides == (16, 8)
    assert sv.format == np.dtype("i4")
    with pytest.raises(BufferError, match="dlpack: buffer is not contiguous"):
        as_buffer(CtypesDLPack(b, shape=(3, 2), strides=(4, 2)), True, "Send")
    assert as_buffer(CtypesDLPack(b, shape=(2, 3), strides=(1, 2)), True, "Send").nbytes == 24  # Fortran
    c = np.zeros(4, "u4")
    assert as_buffer(CtypesDLPack(c, dtype=(3, 32, 1)), True, "x").format == "B"  # opaque handle: bytes
    assert as_buffer(CtypesDLPack(c, dtype=(1, 16, 2)), True, "x").format == "B"  # lanes: bytes
    v = as_buffer(CtypesDLPack(c, dtype=(2, 32, 2), shape=(2,)), True, "x")  # float x 2 lanes: complex
    assert (v.format, v.itemsize, v.nbytes) == ("Zf", 8, 16)
    assert as_buffer(CtypesDLPack(np.zeros(2, "?")), True, "x").format == "?"
    assert datatype_of(as_buffer(CtypesDLPack(np.zeros(2, "f2")), True, "x")) is D.FLOAT16 if hasattr(
        D, "FLOAT16") else True


def test_dlpack_malformed():
    a = np.arange(4, dtype="i4")
    with pytest.raises(BufferError, match="shape item is negative"):
        as_buffer(CtypesDLPack(a, shape=(-1,)), True, "x")
    p = CtypesDLPack(a)
    p.__dlpack_device__ = lambda: (None, 0)
    with pytest.raises(TypeError, match="device type must be an integer"):
        as_buffer(p, True, "x")
    p.__dlpack_device__ = lambda: (1,)
    with pytest.raises(ValueError):
        as_buffer(p, True, "x")
    p.__dlpack_device__ = lambda: (7, 0)
    with pytest.raises(BufferError, match="unsupported device type 7"):
        as_buffer(p, True, "x")
    del p.__dlpack_device__
    p.__dlpack__ = lambda *_a, **_k: None
    with pytest.raises(BufferError, match="invalid capsule object"):
        as_buffer(p, True, "x")
    del p.__dlpack__
    q = CtypesDLPack(a)
    cap = q.__dlpack__(max_version=(1, 0))
    A._DLManagedTensorVersioned.from_address(_py_ptr(cap, b"dltensor_versioned")).major = 0
    q.__dlpack__ = lambda *_a, **_k: cap
    with pytest.raises(BufferError, match="unexpected version 0"):
        as_buffer(q, True, "x")
    del q.__dlpack__


@needs_no_driver
@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_cuda_without_driver_is_sim_memory(versioned):
    a = np.arange(6, dtype="f4")
    v = as_buffer(FakeCUDADLPack(a, device_id=1, versioned=versioned), False, "Recv")
    check_view(v, a.tobytes(), addr=a.ctypes.data, readonly=False, kind=SIM)
    assert v.device == 1 and v.format == "f" and v.itemsize == 4 and datatype_of(v) is D.FLOAT
    v.mem[:4] = np.float32(9).tobytes()
    assert a[0] == 9


@needs_no_driver
def test_dlpack_cuda_checks():
    r = np.arange(4.0)
    r.flags.writeable = False
    with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
        as_buffer(FakeCUDADLPack(r), False, "Recv")
    assert as_buffer(FakeCUDADLPack(r), True, "Send").readonly
    with pytest.raises(BufferError, match="dlpack: buffer is not contiguous"):
        as_buffer(FakeCUDADLPack(np.arange(8.0)[::2]), True, "Send")
    f = np.asfortranarray(np.arange(6, dtype="c16").reshape(2, 3))
    v = as_buffer(FakeCUDADLPack(f), True, "Send")
    assert v.nbytes == 96 and v.format == "Zd" and datatype_of(v) is D.C_DOUBLE_COMPLEX
    assert datatype_of(as_buffer(FakeCUDADLPack(np.zeros(2, "?")), True, "x")) is D.C_BOOL


def test_dlpack_unsupported_device():
    class Vulkan(FakeCUDADLPack):
        def __dlpack_device__(self):
            return (7, 0)

    with pytest.raises(BufferError, match="^Send: dlpack: unsupported device type 7"):
        as_buffer(Vulkan(np.arange(3.0)), True, "Send")


def test_device_mode_sim_and_driver_answer(monkeypatch):
    a = np.arange(3.0)
    monkeypatch.setattr(_device.cuda, "_driver", [None])  # no driver
    assert as_buffer(FakeCAI(a), True, "x").kind == SIM
    fake = {"answer": (DEVICE, 3)}
    monkeypatch.setattr(_device, "cuda_pointer_attributes", lambda addr: fake["answer"])
    v = as_buffer(FakeCAI(a), True, "x")
    assert (v.kind, v.device, v.mem) == (DEVICE, 3, None)
    fake["answer"] = (HOST, None)
    assert as_buffer(FakeCAI(a), True, "x").kind == HOST  # host memory behind CAI is host memory
    try:
        _device.set_device_mode("sim")
        assert as_buffer(FakeCAI(a), True, "x").kind == SIM
    finally:
        _device.set_device_mode("auto")
    with pytest.raises(ValueError, match="set_device_mode: unknown mode"):
        _device.set_device_mode("gpu")


def test_registry_loads_backends_lazily(monkeypatch):
    monkeypatch.setattr(_backends, "_BY_MODULE", dict(_backends._BY_MODULE))
    monkeypatch.setattr(A, "_CONVERTERS", {})
    calls = []

    def loader():
        calls.append(1)
        return lambda obj, readonly, call: BufferView(obj, 0, 0, True, "B", 1, SIM, 0)

    FakeArray = type("FakeArray", (), {"__module__": "fakelib.core"})
    A.register_backend("fakelib", loader)
    assert calls == []
    assert as_buffer(FakeArray(), True, "x").kind == SIM
    as_buffer(FakeArray(), True, "x")
    assert calls == [1]


def test_declared_simulated_arrays_are_sim_even_with_a_driver(monkeypatch):
    monkeypatch.setattr(_device, "cuda_pointer_attributes", lambda addr: (HOST, None))
    SimArray = type("SimArray", (FakeCAI,), {"__gpumpi_sim__": True})
    assert as_buffer(SimArray(np.arange(3.0)), True, "x").kind == SIM
    assert as_buffer(FakeCAI(np.arange(3.0)), True, "x").kind == HOST


def test_import_loads_no_gpu_library():
    code = ("import sys, gpumpi._arrays, gpumpi._buffers; "
            "bad = [m for m in ('cupy', 'numba', 'torch', 'jax') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", ["?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "g",
                                   "F", "D", "G", "S1", "U1"])
def test_lookup_dtype_matches_mpi4py_inference(dtype):
    MPI = pytest.importorskip("mpi4py.MPI")
    fmt = memoryview(np.empty(1, dtype)).format
    ref = MPI.BYTE if fmt == "B" else MPI._typedict[fmt]
    assert lookup_dtype(np.dtype(dtype)).handle == ref.handle
    assert datatype_of(as_buffer(np.zeros(2, dtype), True)).handle == ref.handle


def test_lookup_dtype_errors_and_extensions():
    with pytest.raises(BufferError, match="non-native byte order"):
        lookup_dtype(np.dtype(">f8"), "Send")
    with pytest.raises(KeyError, match=r"^\"Send: cannot map 'T\{"):
        lookup_dtype(np.dtype("i4,f8"), "Send")
    with pytest.raises(KeyError, match="cannot map '3w' to MPI datatype"):
        lookup_dtype(np.dtype("U3"))
    assert lookup_dtype(np.dtype("M8[s]")) is D.INT64_T  # mpi4py cannot export datetimes at all
    assert lookup_dtype(np.dtype("q")) is D.LONG_LONG and lookup_dtype(np.dtype("l")) is D.LONG


def test_cai_descr_checked_as_mpi4py():
    import warnings

    a = np.arange(3, dtype="f8")

    class WithDescr(FakeCAI):
        def __init__(self, a, descr):
            super().__init__(a)
            self.descr = descr

        @property
        def __cuda_array_interface__(self):
            d = dict(FakeCAI.__cuda_array_interface__.fget(self))
            d["descr"] = self.descr
            return d

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert as_buffer(WithDescr(a, [("", "<f8")]), True, "Send").nbytes == 24
        assert as_buffer(WithDescr(a, None), True, "Send").nbytes == 24
    with pytest.raises(TypeError, match="^Send: __cuda_array_interface__: descr must be a list"):
        as_buffer(WithDescr(a, 42), True, "Send")
    with pytest.warns(RuntimeWarning, match="ignoring 'descr' key"):
        as_buffer(WithDescr(a, [("", "<f8")] * 2), True, "Send")


def test_cai_misaligned_strides_are_refused():
    a = np.zeros(3, "i4")

    class Strided(FakeCAI):
        @property
        def __cuda_array_interface__(self):
            d = dict(FakeCAI.__cuda_array_interface__.fget(self))
            d["shape"], d["strides"] = (3, 1, 1), (7, 4, 4)  # elements 7 bytes apart: past the array
            return d

    with pytest.raises(BufferError, match="strides are not multiples of the itemsize"):
        as_buffer(Strided(a), False, "Recv", strided=True)
