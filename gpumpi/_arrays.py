"""Array backends and BufferView (L2): every buffer is normalised once, at the API edge.

Theory of operation
===================
:func:`as_buffer` turns anything mpi4py accepts as a buffer into a
:class:`BufferView`: the address of the first byte, the byte count, whether the
memory is read-only, the element format (for datatype inference), the memory
kind and device, and the owner object, kept alive as long as the view.

Probing order, as mpi4py's ``PyMPI_GetBuffer``: an exact ``numpy.ndarray`` first
(the hot path), then a converter chosen once per Python type:

* ``numpy.ndarray`` subclasses: the NumPy converter;
* types whose top-level module selects a library in the array-library registry
  (:mod:`gpumpi._backends`; built in: ``cupy`` reads ``__cuda_array_interface__``
  first; ``numba`` too, and takes numba-cuda simulator arrays, which have no such
  interface, as simulated device memory): the library's probing chain, or the
  converter a loader registered with :func:`register_backend` returns on first
  use, so nothing here imports cupy or numba;
* anything else (PyTorch and JAX tensors, CAI/DLPack wrappers): the buffer
  protocol, then DLPack (``__dlpack__`` + ``__dlpack_device__``), then the CUDA
  array interface.

:func:`as_buffer` returns contiguous memory: C- or Fortran-contiguous buffers
(``BufferError`` otherwise), writable when ``readonly`` is false (``BufferError``).
``BufferView.readonly`` reports the memory itself, whatever access was asked for.
With ``strided=True`` a non-contiguous CAI or DLPack array (any device type) is a
:class:`StridedView` instead: the address of its first element,
its shape and byte strides (negative and zero strides included) and the bytes it
touches; :mod:`gpumpi._buffers` turns it into a message with an automatic
derived datatype, as it does strided NumPy views.  Masked arrays, unknown byte
orders and malformed interfaces stay ``BufferError``.

DLPack is consumed by gpumpi itself, on every device type (CPU included), with
ctypes and never through NumPy (:func:`_from_dlpack`): the capsule is renamed
``used_dltensor[_versioned]`` and the view's owner, a :class:`DLPackOwner`,
calls the producer's deleter exactly once when the last view of the memory is
released; a read-only tensor (versioned flag) is refused where writable memory
is asked for.

Memory kinds: ``'host'`` (addressable by the CPU: NumPy, the buffer protocol,
DLPack CPU/CUDA-host, CAI pointers the CUDA driver calls host memory, pageable
or pinned), ``'device'`` (CUDA device or managed memory, per the driver, with the
pointer's own device ordinal) and ``'sim'`` (CAI/DLPack-CUDA pointers when no
CUDA driver is present or under :func:`gpumpi._device.set_device_mode` ``("sim")``, numba-cuda
simulator arrays, and types with a true ``__gpumpi_sim__`` attribute: simulated
device memory, addressable from the host).  The kind comes from the device
adapter's pointer classification (:func:`gpumpi._device.cuda.driver_pointer_info`,
shared with ``CupyAdapter.pointer_info``: the one place that knows CUDA's
pointer constants), through :func:`gpumpi._device.cuda_pointer_attributes`; the device of sim
memory is that of the simulated allocation holding it
(``SimAdapter.pointer_info``), else the DLPack device, else 0.  A pointer on
another device than the current one is accepted, as CUDA-aware MPI libraries
accept it: its copies name it by address (unified addressing), so
``BufferView.device`` is the pointer's device, not the current device.
``BufferView.mem`` is a 1-D ``'B'`` memoryview of the bytes for host and sim
memory (built on first use; ``None`` for device memory).

Dangling pointers: the bytes a CAI/DLPack host or sim buffer touches must lie
inside one live simulated allocation, or else in mapped host memory
(``msync`` answers ``ENOMEM`` for unmapped pages); otherwise ``BufferError``
(``"... no memory is mapped at ... (freed device memory?)"``) before anything
reads them, where reading would crash the process.  A freed range that has been
mapped again (by a new allocation, or host memory) cannot be told from live
memory, as with CUDA, whose driver reports freed device pointers as unknown host
memory; ``'device'`` memory is not checked here.

The NumPy hot path reads the data pointer and flags straight from the
``PyArrayObject`` header (``data`` at offset 16, ``flags`` at offset 64 on 64-bit
little-endian CPython, read through two read-only memoryviews of the address
space): ``ndarray.__array_interface__`` and ``ndarray.ctypes`` cost microseconds
each.  The layout is checked against ``ndarray.ctypes.data``/``ndarray.flags`` on
sample arrays at import; if it does not match, the slow attributes are used.
This module is the one definition of that header for all of gpumpi: the offsets
(:data:`NP_DATA_OFFSET`, :data:`NP_FLAGS_OFFSET`, ...), the flag bits
(:data:`NP_C_CONTIGUOUS`, ...), the two word views (:data:`PEEK_DATA`,
:data:`PEEK_FLAGS`, valid where :data:`PEEK_OK`) and :func:`ndarray_addr_flags`; the
compiled code that reads array headers itself (:mod:`gpumpi.ipc.fastring`, the host
atomics) takes its offsets from here.
Nothing derived from an object is cached: per-type converters and the datatype
of each builtin (immortal) NumPy dtype are.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import operator
import sys
import warnings

import numpy as np

from . import _backends, _device
from ._device import DEVICE, HOST, SIM
from .datatypes._core import Datatype
from .datatypes.predefined import TypeDict, lookup_format

__all__ = [
    "BufferView",
    "StridedView",
    "NotABufferError",
    "as_buffer",
    "register_backend",
    "datatype_of",
    "lookup_dtype",
    "HOST",
    "SIM",
    "DEVICE",
    "BYTES_DATA_OFFSET",
    "NP_DATA_OFFSET",
    "NP_ND_OFFSET",
    "NP_DIMS_OFFSET",
    "NP_FLAGS_OFFSET",
    "NP_C_CONTIGUOUS",
    "NP_F_CONTIGUOUS",
    "NP_ALIGNED",
    "NP_WRITEABLE",
    "PEEK_OK",
    "PEEK_DATA",
    "PEEK_FLAGS",
    "ndarray_addr_flags",
    "DATATYPE_BY_DTYPE_ID",
]

def _p(call: str) -> str:
    return f"{call}: " if call else ""


class NotABufferError(TypeError):
    """The object exposes no buffer protocol, DLPack or CUDA array interface."""


_ndarray = np.ndarray
_new = object.__new__
_id = id


# -- NumPy's array header: the one definition in gpumpi ------------------------------------

#: Byte offsets, from an ndarray object's address (its ``id``), of the ``PyArrayObject`` fields
#: gpumpi reads straight from memory (NumPy's C struct, the same in NumPy 1 and 2 on 64-bit
#: CPython): ``char *data``, ``int nd``, ``npy_intp *dimensions``, ``int flags``.  Data and flags
#: are checked on sample arrays at import (:data:`PEEK_OK`); nd and dimensions, which only the
#: host atomics read, by their ``gpumpi.kernels.atomics.ndarray_layout``.
NP_DATA_OFFSET, NP_ND_OFFSET, NP_DIMS_OFFSET, NP_FLAGS_OFFSET = 16, 24, 32, 64
#: Bits of the ``flags`` word: NumPy's ``NPY_ARRAY_C_CONTIGUOUS``, ``NPY_ARRAY_F_CONTIGUOUS``,
#: ``NPY_ARRAY_ALIGNED`` and ``NPY_ARRAY_WRITEABLE``.
NP_C_CONTIGUOUS, NP_F_CONTIGUOUS, NP_ALIGNED, NP_WRITEABLE = 0x1, 0x2, 0x100, 0x400


class BufferView:
    """A buffer normalised for communication: address, bytes, format, memory kind, owner."""

    __slots__ = ("obj", "addr", "nbytes", "readonly", "format", "itemsize", "kind", "device", "stream", "_mem")

    def __init__(self, obj, addr: int, nbytes: int, readonly: bool, format, itemsize: int,
                 kind: str = HOST, device: int | None = None, stream=None, mem=None) -> None:
        self.obj = obj  # owner, kept alive: the array, exporter, or DLPack capsule
        self.addr = addr  # int address of the first byte
        self.nbytes = nbytes
        self.readonly = readonly
        self.format = format  # PEP 3118 format str, or a numpy.dtype for NumPy arrays
        self.itemsize = itemsize
        self.kind = kind  # 'host' | 'sim' | 'device'
        self.device = device  # device ordinal for 'device'/'sim', None for 'host'
        self.stream = stream  # producer stream from __cuda_array_interface__, else None
        self._mem = mem

    @property
    def mem(self) -> memoryview | None:
        """1-D ``'B'`` memoryview of the ``nbytes`` bytes (host and sim memory; None on a device)."""
        m = self._mem
        if m is None and self.kind != DEVICE:
            m = self._mem = _make_mem(self)
        return m

    def __repr__(self) -> str:
        return (f"<BufferView {self.kind} addr={self.addr:#x} nbytes={self.nbytes} "
                f"format={self.format!r} readonly={self.readonly} owner={type(self.obj).__name__}>")


def raw_mem(addr: int, nbytes: int, readonly: bool, owner) -> memoryview:
    """A memoryview over raw host-addressable bytes; the owner rides along with it."""
    if nbytes == 0:
        return memoryview(b"") if readonly else memoryview(bytearray())
    arr = (ctypes.c_char * nbytes).from_address(addr)
    arr._owner = owner
    m = memoryview(arr).cast("B")
    return m.toreadonly() if readonly else m


def _make_mem(view: BufferView) -> memoryview:
    obj = view.obj
    if isinstance(obj, _ndarray):
        return nd_bytes(obj)
    return raw_mem(view.addr, view.nbytes, view.readonly, obj)


def nd_bytes(a) -> memoryview:
    """1-D ``'B'`` memoryview of a contiguous ndarray's bytes, in memory order."""
    try:
        return memoryview(a).cast("B")
    except TypeError:  # Fortran order: the transpose is C-ordered over the same bytes
        try:
            return memoryview(a.T).cast("B")
        except (TypeError, ValueError):
            pass
    except ValueError:  # no buffer format (datetimes)
        pass
    addr, fl = ndarray_addr_flags(a)
    return raw_mem(addr, a.nbytes, not fl & NP_WRITEABLE, a)


class StridedView(BufferView):
    """A non-contiguous array (``as_buffer(..., strided=True)``).

    ``addr`` is its first element (as a NumPy view's data pointer); ``shape`` and
    ``strides`` (bytes, any sign) its layout; ``format`` its numpy.dtype; ``nbytes``
    the bytes of its elements; ``lo``/``span`` the bytes it touches,
    ``[addr + lo, addr + lo + span)`` (``lo`` <= 0); ``mem`` a memoryview of exactly
    those (host and sim memory; None on a device).  ``why`` says why it is not a
    plain buffer (the ``BufferError`` text of contiguous-only callers).
    """

    __slots__ = ("shape", "strides", "lo", "span", "why")

    def __init__(self, obj, addr: int, readonly: bool, dtype, shape: tuple, strides: tuple, why: str,
                 kind: str = HOST, device: int | None = None, stream=None) -> None:
        count = 1
        for n in shape:
            count *= n
        item = dtype.itemsize
        super().__init__(obj, addr, count * item, readonly, dtype, item, kind, device, stream)
        self.shape = shape
        self.strides = strides
        self.lo, self.span = _extent_of(shape, strides, item)
        self.why = why

    @property
    def mem(self) -> memoryview | None:
        """1-D ``'B'`` memoryview of the touched bytes ``[addr + lo, addr + lo + span)``."""
        m = self._mem
        if m is None and self.kind != DEVICE:
            m = self._mem = raw_mem(self.addr + self.lo, self.span, self.readonly, self.obj)
        return m

    def __repr__(self) -> str:
        return (f"<StridedView {self.kind} addr={self.addr:#x} shape={self.shape} strides={self.strides} "
                f"dtype={self.format} readonly={self.readonly} owner={type(self.obj).__name__}>")


def _extent_of(shape, strides, itemsize: int) -> tuple[int, int]:
    """``(lo, span)``: the bytes elements of (shape, strides) touch, relative to the first element."""
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n == 0:
            return 0, 0
        step = (n - 1) * s
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi + itemsize - lo


def strided_nd(a, readonly: bool, call: str) -> StridedView:
    """A StridedView of a non-contiguous host NumPy array (strided NumPy views)."""
    addr, fl = ndarray_addr_flags(a)
    ro = not fl & NP_WRITEABLE
    if ro and not readonly:
        raise BufferError(f"{_p(call)}buffer is not writable (read-only {type(a).__name__})")
    return StridedView(a, addr, ro, a.dtype, a.shape, a.strides,
                       f"buffer is not contiguous (shape {a.shape}, strides {a.strides}, itemsize {a.itemsize})")


# -- NumPy ---------------------------------------------------------------------------------


def _peek_tables():
    """Word views of memory at offsets :data:`NP_DATA_OFFSET` and :data:`NP_FLAGS_OFFSET` from every
    address: ``T[id(a) >> 3]`` reads the ``data`` pointer / ``flags`` word of ndarray ``a``, if the
    PyArrayObject layout checks out."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8 or sys.byteorder != "little":
        return None, None
    from_memory = ctypes.pythonapi.PyMemoryView_FromMemory
    from_memory.restype = ctypes.py_object
    from_memory.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
    data = from_memory(NP_DATA_OFFSET, 1 << 62, 0x100).cast("Q")  # 0x100: PyBUF_READ
    flags = from_memory(NP_FLAGS_OFFSET, 1 << 62, 0x100).cast("Q")
    ro = np.arange(4.0)
    ro.flags.writeable = False
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    for a in (np.arange(6.0), np.zeros((3, 4), order="F"), base[:, ::2], base[1:], ro, np.empty(0), base.T):
        i = id(a) >> 3
        fl = flags[i]
        if (data[i] != a.ctypes.data
                or bool(fl & NP_C_CONTIGUOUS) != a.flags.c_contiguous
                or bool(fl & NP_F_CONTIGUOUS) != a.flags.f_contiguous
                or bool(fl & NP_WRITEABLE) != a.flags.writeable):
            return None, None
    return data, flags


#: ``PEEK_DATA[id(a) >> 3]`` / ``PEEK_FLAGS[id(a) >> 3]``: the data address / flags word of ndarray
#: ``a`` read from its header (word views of the address space), where :data:`PEEK_OK`; else None
PEEK_DATA, PEEK_FLAGS = _peek_tables()
#: whether this interpreter's ndarray header has the layout checked above (the peeks are valid)
PEEK_OK = PEEK_DATA is not None


def _bytes_offset():
    """Offset from a ``bytes`` object's address to its first byte (``PyBytesObject.ob_sval``:
    ``bytes.__basicsize__`` less the terminating NUL), checked on a sample; None where it does not hold."""
    if sys.implementation.name != "cpython":
        return None
    off = bytes.__basicsize__ - 1
    b = bytes(range(7, 47))
    return off if ctypes.string_at(id(b) + off, len(b)) == b else None


#: ``id(b) + BYTES_DATA_OFFSET`` is the address of the first byte of ``bytes`` object ``b`` (its
#: contents are immutable and live as long as it does); None where CPython's layout is not there
BYTES_DATA_OFFSET = _bytes_offset()


def ndarray_addr_flags(a) -> tuple[int, int]:
    """``(data address, flags word)`` of ndarray ``a``: peeked from its header where :data:`PEEK_OK`,
    else from NumPy's attributes (then only the ``NP_*_CONTIGUOUS`` and ``NP_WRITEABLE`` bits)."""
    if PEEK_OK:
        i = id(a) >> 3
        return PEEK_DATA[i], PEEK_FLAGS[i]
    f = a.flags
    return (a.__array_interface__["data"][0],
            (f.c_contiguous and NP_C_CONTIGUOUS) | (f.f_contiguous and NP_F_CONTIGUOUS)
            | (f.writeable and NP_WRITEABLE))




def _from_ndarray(a, readonly: bool, call: str) -> BufferView:
    addr, fl = ndarray_addr_flags(a)
    if not fl & (NP_C_CONTIGUOUS | NP_F_CONTIGUOUS):
        raise BufferError(f"{_p(call)}buffer is not contiguous (shape {a.shape}, strides {a.strides}, "
                          f"itemsize {a.itemsize})")
    ro = not fl & NP_WRITEABLE
    if ro and not readonly:
        raise BufferError(f"{_p(call)}buffer is not writable (read-only {type(a).__name__})")
    return BufferView(a, addr, a.nbytes, ro, a.dtype, a.itemsize, HOST)


# -- buffer protocol -----------------------------------------------------------------------


def _from_memoryview(owner, mv: memoryview, readonly: bool, call: str) -> BufferView:
    if mv.readonly and not readonly:
        raise BufferError(f"{_p(call)}buffer is not writable (read-only {type(owner).__name__})")
    if mv.c_contiguous:
        u8 = np.frombuffer(mv, np.uint8)
    elif mv.f_contiguous:
        try:
            u8 = np.asarray(mv).ravel(order="K").view(np.uint8)
        except (ValueError, TypeError) as exc:
            raise BufferError(f"{_p(call)}Fortran-ordered buffer with format {mv.format!r} "
                              f"is not supported ({type(owner).__name__})") from exc
    else:
        raise BufferError(f"{_p(call)}buffer is not contiguous (shape {mv.shape}, strides {mv.strides}, "
                          f"itemsize {mv.itemsize})")
    addr, _ = ndarray_addr_flags(u8)
    return BufferView(owner, addr, mv.nbytes, mv.readonly, mv.format, mv.itemsize, HOST, mem=memoryview(u8))


# -- DLPack --------------------------------------------------------------------------------

kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCMHost, kDLCUDAManaged = 1, 2, 3, 11, 13
kDLInt, kDLUInt, kDLFloat, kDLComplex, kDLBool = 0, 1, 2, 5, 6
_DLPACK_READ_ONLY = 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# private prototypes: ``pythonapi[name]`` is a function object of our own (``pythonapi.name``
# is shared with every other user of ctypes, who may set other argtypes)
_capsule_valid = ctypes.pythonapi["PyCapsule_IsValid"]
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid.restype = ctypes.c_int
_capsule_pointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer.restype = ctypes.c_void_p

_DL_INT = {1: "b", 2: "h", 4: "i", 8: "l"}
_DL_UINT = {1: "B", 2: "H", 4: "I", 8: "L"}
_DL_FLOAT = {2: "e", 4: "f", 8: "d", 16: "g"}
_DL_COMPLEX = {8: "Zf", 16: "Zd", 32: "Zg"}


def _dlpack_format(code: int, bits: int, lanes: int) -> tuple[str, int]:
    """PEP 3118 format and itemsize of a DLPack dtype (mpi4py ``dlpack_get_format``)."""
    if lanes != 1:
        if code == kDLFloat and lanes == 2 and bits in (32, 64, 128):
            return _DL_COMPLEX[bits // 4], bits // 4
        return "B", 1
    nbytes = (bits + 7) // 8
    table = {kDLInt: _DL_INT, kDLUInt: _DL_UINT, kDLFloat: _DL_FLOAT, kDLComplex: _DL_COMPLEX}.get(code)
    fmt = "?" if code == kDLBool and bits == 8 else (table.get(nbytes) if table and bits % 8 == 0 else None)
    return (fmt, nbytes) if fmt else ("B", 1)


def _contig(shape, strides, unit: int, order: str) -> bool:
    """C or Fortran contiguity of (shape, strides); strides and unit in the same measure."""
    size = unit
    dims = range(len(shape)) if order == "F" else range(len(shape) - 1, -1, -1)
    for i in dims:
        if shape[i] > 1 and strides[i] != size:
            return False
        size *= shape[i]
    return True


def _dlpack_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """The NumPy dtype of a DLPack element (the layout of a strided tensor)."""
    nbytes = (bits * lanes + 7) // 8
    if lanes == 2 and code == kDLFloat:
        return np.dtype(f"c{nbytes}")
    if lanes == 1 and bits % 8 == 0:
        if code == kDLBool and bits == 8:
            return np.dtype("?")
        kind = {kDLInt: "i", kDLUInt: "u", kDLFloat: "f", kDLComplex: "c"}.get(code)
        if kind is not None:
            try:
                return np.dtype(f"{kind}{nbytes}")
            except TypeError:
                pass
    return np.dtype(f"V{nbytes}")


_capsule_set_name = ctypes.pythonapi["PyCapsule_SetName"]
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name.restype = ctypes.c_int
_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*deleter)(DLManagedTensor[Versioned] *)
_DLPACK_IS_COPIED = 2
# device types whose memory the CPU addresses: no stream (``__dlpack__(stream=None)``)
_DL_HOST_TYPES = (kDLCPU, kDLCUDAHost, kDLROCMHost)
_DL_TYPES = (kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCMHost, kDLCUDAManaged)


class DLPackOwner:
    """The owner of a consumed DLPack capsule (the BufferView's ``obj``).

    Consuming renames the capsule ``used_dltensor[_versioned]`` (so the producer's
    capsule destructor leaves the tensor alone); this object keeps the capsule and
    the exporter alive and calls the tensor's deleter exactly once, when it is
    released (the last view or memoryview of the memory gone).
    """

    __slots__ = ("capsule", "exporter", "managed", "_deleter", "__weakref__")

    def __init__(self, capsule, exporter, managed: int, deleter: int | None) -> None:
        self.capsule = capsule  # kept until after the deleter ran: some producers own the struct through it
        self.exporter = exporter
        self.managed = managed  # address of the DLManagedTensor(Versioned)
        self._deleter = deleter

    def release(self) -> None:
        """Call the producer's deleter now (once; later calls do nothing)."""
        d, self._deleter = self._deleter, None
        if d:
            _DL_DELETER(d)(self.managed)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown: ctypes may be gone
            pass

    def __repr__(self) -> str:
        return f"<DLPackOwner of {type(self.exporter).__name__} managed={self.managed:#x}>"


def _dl_index(v, what: str, call: str) -> int:
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{_p(call)}dlpack: __dlpack_device__ {what} must be an integer "
                        f"({type(v).__name__})") from None


def _from_dlpack(obj, readonly: bool, call: str, consume: bool = True) -> BufferView:
    """A DLPack exporter (``__dlpack__`` + ``__dlpack_device__``) on any device type gpumpi
    addresses, read with ctypes (mpi4py ``Py_GetDLPackBuffer``), never through NumPy.

    The exchange protocol: ``__dlpack__(max_version=(1, 0), copy=False)`` first (a versioned
    capsule), ``__dlpack__()`` for DLPack 0.x producers (``TypeError``); ``stream`` is left
    out (None) for host memory (CPU, CUDA/ROCm pinned host), which has no stream, and is -1
    ("no synchronization") for device memory, which gpumpi orders itself after the current
    stream or ``stream=`` (as for CUDA-array-interface objects without a stream).  With
    ``consume`` the capsule is renamed ``used_dltensor[_versioned]`` once every check passed
    and the view's owner is a :class:`DLPackOwner` that calls the deleter when released;
    without (``Get_address``: nothing is kept) the capsule is only read, and left to the
    producer.  A read-only tensor is refused where writable memory is asked for.
    """
    dev = obj.__dlpack_device__()
    dev_type, dev_id = dev  # TypeError/ValueError, as mpi4py, for anything but a pair
    dev_type = _dl_index(dev_type, "device type", call)
    dev_id = _dl_index(dev_id, "device id", call)
    if dev_type not in _DL_TYPES:
        raise BufferError(f"{_p(call)}dlpack: unsupported device type {dev_type} ({type(obj).__name__})")
    host = dev_type in _DL_HOST_TYPES
    kw = {} if host else {"stream": -1}
    try:
        capsule = obj.__dlpack__(max_version=(1, 0), copy=False, **kw)
    except TypeError:  # DLPack 0.x producer
        capsule = obj.__dlpack__(**kw)
    if _capsule_valid(capsule, b"dltensor_versioned"):
        name = b"dltensor_versioned"
        addr_m = _capsule_pointer(capsule, name)
        managed = _DLManagedTensorVersioned.from_address(addr_m)
        if managed.major < 1:
            raise BufferError(f"{_p(call)}dlpack: unexpected version {managed.major}.{managed.minor}")
        ro = bool(managed.flags & _DLPACK_READ_ONLY)
        copied = bool(managed.flags & _DLPACK_IS_COPIED)
    elif _capsule_valid(capsule, b"dltensor"):
        name = b"dltensor"
        addr_m = _capsule_pointer(capsule, name)
        managed = _DLManagedTensor.from_address(addr_m)
        ro = copied = False
    else:
        raise BufferError(f"{_p(call)}dlpack: invalid capsule object ({type(capsule).__name__}, "
                          f"exported by {type(obj).__name__})")
    t = managed.dl_tensor
    ndim = t.ndim
    if ndim < 0:
        raise BufferError(f"{_p(call)}dlpack: number of dimensions is negative ({ndim})")
    if ndim > 0 and not t.shape:
        raise BufferError(f"{_p(call)}dlpack: shape is NULL (ndim {ndim})")
    shape = tuple(t.shape[i] for i in range(ndim))
    if any(s < 0 for s in shape):
        raise BufferError(f"{_p(call)}dlpack: shape item is negative ({list(shape)})")
    if ro and not readonly:
        raise BufferError(f"{_p(call)}buffer is not writable (read-only dlpack {type(obj).__name__})")
    if copied and not readonly:
        raise BufferError(f"{_p(call)}dlpack: the producer exported a copy, which cannot receive data "
                          f"({type(obj).__name__})")
    count = 1
    for s in shape:
        count *= s
    dt = t.dtype
    nbytes_el = (dt.bits * dt.lanes + 7) // 8
    addr = (t.data or 0) + t.byte_offset
    strides = tuple(t.strides[i] for i in range(ndim)) if t.strides else None  # in elements
    if count and strides is not None and not _contig(shape, strides, 1, "C") and not _contig(
            shape, strides, 1, "F"):
        bstrides = tuple(s * nbytes_el for s in strides)
        why = f"dlpack: buffer is not contiguous (shape {list(shape)}, strides {list(strides)})"
        lo, span = _extent_of(shape, bstrides, nbytes_el)
        kind, device = _classify(addr, addr + lo, addr + lo + span, dev_id, host, False, call, "dlpack")
        owner = _consume(capsule, name, obj, addr_m, managed) if consume else capsule
        return StridedView(owner, addr, ro, _dlpack_dtype(dt.code, dt.bits, dt.lanes), shape, bstrides, why,
                           kind, device)
    nbytes = count * nbytes_el
    fmt, fitem = _dlpack_format(dt.code, dt.bits, dt.lanes)
    kind, device = _classify(addr, addr, addr + nbytes, dev_id, host, False, call, "dlpack")
    owner = _consume(capsule, name, obj, addr_m, managed) if consume else capsule
    return BufferView(owner, addr, nbytes, ro, fmt, fitem, kind, device)


# PyCapsule_SetName keeps the pointer: these bytes live as long as the module
_USED_NAME = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}


def _consume(capsule, name: bytes, exporter, addr_m: int, managed) -> DLPackOwner:
    """Take the tensor: rename the capsule ``used_<name>``, own the deleter call."""
    deleter = managed.deleter
    _capsule_set_name(capsule, _USED_NAME[name])
    return DLPackOwner(capsule, exporter, addr_m, deleter)


# -- CUDA array interface ------------------------------------------------------------------

_CAI_FORMATS = {
    ("b", 1): "?",
    ("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "l",
    ("u", 1): "B", ("u", 2): "H", ("u", 4): "I", ("u", 8): "L",
    ("f", 2): "e", ("f", 4): "f", ("f", 8): "d", ("f", 16): "g",
    ("c", 4): "Ze", ("c", 8): "Zf", ("c", 16): "Zd", ("c", 32): "Zg",
}
_FOREIGN = ">" if sys.byteorder == "little" else "<"


def _from_cai(obj, readonly: bool, call: str) -> BufferView:
    cai = obj.__cuda_array_interface__
    ptr, ro = cai["data"]
    typestr = cai["typestr"]
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    count = 1
    for s in shape:
        count *= s
    if ptr is None and count == 0:
        ptr = 0
    byteorder, itemsize = typestr[:1], int(typestr[2:])
    if byteorder not in ("<", ">", "|"):
        raise BufferError(f"{_p(call)}__cuda_array_interface__: typestr {typestr!r} with unrecognized byte order")
    if cai.get("mask") is not None:
        raise BufferError(f"{_p(call)}__cuda_array_interface__: cannot handle masked arrays")
    if count < 0:
        raise BufferError(f"{_p(call)}__cuda_array_interface__: buffer with negative size "
                          f"(shape:{shape}, size:{count})")
    if strides is not None:
        strides = tuple(strides)
        if len(strides) != len(shape):
            raise BufferError(f"{_p(call)}__cuda_array_interface__: {len(strides)} strides for {len(shape)} "
                              f"dimensions (shape:{shape}, strides:{strides})")
    descr = cai.get("descr")
    if descr is not None:
        if not isinstance(descr, list):
            raise TypeError(f"{_p(call)}__cuda_array_interface__: descr must be a list "
                            f"(got {type(descr).__name__})")
        if len(descr) != 1 or descr[0] != ("", typestr):
            warnings.warn("__cuda_array_interface__: ignoring 'descr' key", RuntimeWarning, stacklevel=4)
    if ro and not readonly:
        raise BufferError(f"{_p(call)}buffer is not writable (read-only __cuda_array_interface__ "
                          f"{type(obj).__name__})")
    sim = getattr(type(obj), "__gpumpi_sim__", False)  # simulated device arrays (gpumpi.testing)
    stream = cai.get("stream")
    if count and strides is not None and not _contig(shape, strides, itemsize, "C") and not _contig(
            shape, strides, itemsize, "F"):
        why = (f"__cuda_array_interface__: buffer is not contiguous "
               f"(shape:{shape}, strides:{strides}, itemsize:{itemsize})")
        if any(st % itemsize for n, st in zip(shape, strides) if n > 1):
            # misaligned elements: no kernel can address them, and such strides are most
            # likely wrong (reaching past the memory the interface stands for)
            raise BufferError(f"{_p(call)}{why}: strides are not multiples of the itemsize")
        try:
            dtype = np.dtype(typestr)
        except TypeError as exc:
            raise BufferError(f"{_p(call)}__cuda_array_interface__: typestr {typestr!r} is not understood "
                              f"(a non-contiguous array needs its element type)") from exc
        lo, span = _extent_of(shape, strides, itemsize)
        kind, device = _classify(ptr, ptr + lo, ptr + lo + span, None, False, sim, call,
                                 "__cuda_array_interface__")
        return StridedView(obj, ptr, bool(ro), dtype, shape, strides, why, kind, device, stream)
    fmt = _CAI_FORMATS.get((typestr[1:2], itemsize), "B")
    if fmt != "B" and byteorder == _FOREIGN:
        fmt = byteorder + fmt
    kind, device = _classify(ptr, ptr, ptr + count * itemsize, None, False, sim, call, "__cuda_array_interface__")
    return BufferView(obj, ptr, count * itemsize, bool(ro), fmt, itemsize if fmt != "B" else 1,
                      kind, device, stream)


def _from_numba_simulator(obj, a, readonly: bool, call: str) -> BufferView:
    """A numba-cuda simulator array (``NUMBA_ENABLE_CUDASIM=1``): host NumPy memory in ``obj._ary``
    standing for device memory, so simulated device memory.  Its ``stream`` is a simulator
    object, not a CUDA stream, and the simulator runs everything at once: no stream is kept."""
    addr, fl = ndarray_addr_flags(a)
    ro = not fl & NP_WRITEABLE
    if ro and not readonly:
        raise BufferError(f"{_p(call)}buffer is not writable (read-only {type(obj).__name__})")
    if a.size and not fl & (NP_C_CONTIGUOUS | NP_F_CONTIGUOUS):
        lo, span = _extent_of(a.shape, a.strides, a.itemsize)
        kind, device = _classify(addr, addr + lo, addr + lo + span, None, False, True, call, "numba")
        return StridedView(obj, addr, ro, a.dtype, a.shape, a.strides,
                           f"numba: buffer is not contiguous (shape {a.shape}, strides {a.strides}, "
                           f"itemsize {a.itemsize})", kind, device)
    kind, device = _classify(addr, addr, addr + a.nbytes, None, False, True, call, "numba")
    return BufferView(obj, addr, a.nbytes, ro, a.dtype, a.itemsize, kind, device)


# -- generic chain and registry ------------------------------------------------------------


def _from_protocols(obj, readonly: bool, call: str, consume: bool = True) -> BufferView:
    """Buffer protocol, then DLPack, then CAI (mpi4py ``PyMPI_GetBuffer``)."""
    try:
        mv = memoryview(obj)
    except Exception as exc:
        tp = type(obj)
        if hasattr(tp, "__dlpack__") and hasattr(tp, "__dlpack_device__"):
            return _from_dlpack(obj, readonly, call, consume)
        if hasattr(obj, "__cuda_array_interface__"):
            return _from_cai(obj, readonly, call)
        if isinstance(exc, TypeError):
            raise NotABufferError(f"{_p(call)}expecting a buffer (buffer protocol, DLPack or "
                                  f"__cuda_array_interface__), got {tp.__name__}") from exc
        raise
    return _from_memoryview(obj, mv, readonly, call)


def _cai_first(obj, readonly: bool, call: str, consume: bool = True) -> BufferView:
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, readonly, call)
    return _from_protocols(obj, readonly, call, consume)


def _numba_first(obj, readonly: bool, call: str, consume: bool = True) -> BufferView:
    """numba.cuda device arrays: the CUDA array interface; simulator arrays (no interface,
    ``__cuda_ndarray__`` and a NumPy ``_ary``): simulated device memory."""
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, readonly, call)
    if getattr(type(obj), "__cuda_ndarray__", False):
        a = getattr(obj, "_ary", None)
        if isinstance(a, _ndarray):
            return _from_numba_simulator(obj, a, readonly, call)
    return _from_protocols(obj, readonly, call, consume)


# the probing chains a library's ``buffer`` names in the registry (gpumpi._backends)
_CHAINS: dict = {
    "ndarray": _from_ndarray,
    "cai": _cai_first,
    "numba": _numba_first,
    "protocols": _from_protocols,
}
_CONVERTERS: dict = {}  # type -> converter(obj, readonly, call) -> BufferView
_PEEKABLE = frozenset((_from_protocols, _cai_first, _numba_first))  # take consume=False


def register_backend(module: str, loader) -> None:
    """Register an array backend for the types defined under top-level module ``module``.

    ``loader()`` is called once, the first time such an object is seen, and returns a
    converter ``(obj, readonly, call) -> BufferView``; it may import its library.
    """
    _backends.register_converter(module, loader)
    _CONVERTERS.clear()


def _resolve(tp):
    own = getattr(tp, "__gpumpi_buffer__", None)  # types that describe their memory themselves (MPI.buffer)
    if own is not None:
        _CONVERTERS[tp] = own
        return own
    if issubclass(tp, _ndarray):
        be = _backends.NUMPY
    else:
        be = _backends.by_module((getattr(tp, "__module__", None) or "").partition(".")[0]) or _backends.GENERIC
    how = be.buffer
    conv = _CHAINS[how] if type(how) is str else how()
    _CONVERTERS[tp] = conv
    return conv


def as_buffer(obj, readonly: bool, call: str = "", strided: bool = False, consume: bool = True) -> BufferView:
    """Normalise a buffer-like object into a :class:`BufferView` (mpi4py ``getbuffer``).

    ``readonly`` false requires writable memory.  Raises ``BufferError`` for
    non-contiguous or read-only memory and ``TypeError`` for objects that are not
    buffers; messages start with ``call``.  ``strided`` true returns a
    :class:`StridedView` for a non-contiguous CAI or DLPack array instead of raising
    (strided NumPy arrays themselves are for the caller to see first: they raise).
    ``consume`` false only reads a DLPack capsule, for callers that keep nothing
    (``Get_address``): it stays the producer's (see :func:`_from_dlpack`).
    """
    if type(obj) is _ndarray:
        if PEEK_OK:
            i = _id(obj) >> 3
            fl = PEEK_FLAGS[i]
            if fl & 3 and (readonly or fl & NP_WRITEABLE):  # 3: NP_C_CONTIGUOUS | NP_F_CONTIGUOUS
                v = _new(BufferView)
                v.obj = obj
                v.addr = PEEK_DATA[i]
                v.nbytes = obj.nbytes
                v.readonly = not fl & NP_WRITEABLE
                v.format = obj.dtype
                v.itemsize = obj.itemsize
                v.kind = HOST
                v.device = v.stream = v._mem = None
                return v
        return _from_ndarray(obj, readonly, call)
    conv = _CONVERTERS.get(type(obj))
    if conv is None:
        conv = _resolve(type(obj))
    v = conv(obj, readonly, call) if consume or conv not in _PEEKABLE else conv(obj, readonly, call, False)
    if v.__class__ is StridedView and not strided:
        raise BufferError(f"{_p(call)}{v.why}")
    return v


# -- memory kind of device pointers --------------------------------------------------------


def _device_pointer_kind(addr: int, device: int | None) -> tuple[str, int | None]:
    """``(kind, device)`` of a device-interface pointer: the driver's answer, else simulated
    device memory (on the device of the simulated allocation holding it, else ``device`` or 0)."""
    return _classify(addr, addr, addr, device, False, False, "", "")


def _classify(addr: int, lo: int, hi: int, device: int | None, host: bool, sim: bool, call: str,
              what: str) -> tuple[str, int | None]:
    """``(kind, device)`` of the memory an interface puts at ``addr``, touching ``[lo, hi)``.

    ``host``: the interface says host memory (DLPack CUDA-host); ``sim``: the type
    declares simulated device memory; otherwise the driver decides (simulated device
    memory without one).  Host and sim memory must lie in one live simulated
    allocation or in mapped memory (``BufferError``; see the module docstring).
    """
    if host:
        kind = HOST
    elif sim or _device.device_mode() == "sim" or (attrs := _device.cuda_pointer_attributes(addr)) is None:
        kind = SIM
    elif attrs[0] == DEVICE:
        return attrs
    else:
        kind = HOST
    if hi > lo or (kind == SIM and addr):
        info = _device.sim_adapter().pointer_info(lo)
        if info.base is None:
            if hi > lo:
                _check_mapped(lo, hi, call, what)
        elif hi > info.base + info.size:
            raise BufferError(f"{_p(call)}{what}: bytes [{lo:#x}, {hi:#x}) run past the end of their "
                              f"simulated allocation ({info.base:#x}, {info.size} bytes)")
        elif info.device is not None:
            device = info.device
    return (HOST, None) if kind == HOST else (SIM, device or 0)


_libc: list = []
_ENOMEM = errno.ENOMEM


def _check_mapped(lo: int, hi: int, call: str, what: str) -> None:
    """BufferError unless every page of ``[lo, hi)`` is mapped (``msync(MS_ASYNC)``: no I/O,
    only the kernel's range check, ``ENOMEM`` for unmapped pages)."""
    if not _libc:
        lib = None
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            lib.msync.restype = ctypes.c_int
        except (OSError, AttributeError):
            lib = None
        _libc.append(lib)
    lib = _libc[0]
    if lib is None:
        return
    start = lo & ~(mmap.PAGESIZE - 1)
    if lib.msync(start, hi - start, 1) != 0 and ctypes.get_errno() == _ENOMEM:  # 1: MS_ASYNC
        raise BufferError(f"{_p(call)}{what}: no memory is mapped at [{lo:#x}, {hi:#x}) "
                          f"(freed device memory?)")


# -- datatype inference --------------------------------------------------------------------

#: id(builtin NumPy dtype) -> its predefined Datatype, filled by :func:`lookup_dtype` (builtin
#: dtypes are immortal, so their ids are theirs): the hot paths' one dict lookup
DATATYPE_BY_DTYPE_ID: dict[int, Datatype] = {}


def lookup_dtype(dtype, call: str = "") -> Datatype:
    """Map a NumPy dtype to the predefined datatype mpi4py infers for its buffer format.

    ``BufferError`` for non-native byte order, ``KeyError`` when there is none.
    """
    dt = DATATYPE_BY_DTYPE_ID.get(id(dtype))
    if dt is not None:
        return dt
    dtype = np.dtype(dtype)
    if dtype.kind in "mM":  # NumPy exports no buffer format for datetimes
        fmt = ("" if dtype.isnative else dtype.byteorder) + dtype.kind + str(dtype.itemsize)
        dt = TypeDict.get(fmt) if dtype.isnative else None
        if dt is None:
            raise KeyError(f"{_p(call)}cannot map {dtype.str!r} to MPI datatype")
    else:
        dt = lookup_format(memoryview(np.empty(0, dtype)).format, call)
    if dtype.isbuiltin == 1:
        DATATYPE_BY_DTYPE_ID[id(dtype)] = dt
    return dt


def datatype_of(view: BufferView, call: str = "") -> Datatype:
    """The datatype mpi4py infers for a buffer from its element format."""
    fmt = view.format
    if type(fmt) is str:
        return lookup_format(fmt, call)
    return lookup_dtype(fmt, call)
