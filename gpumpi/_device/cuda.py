"""The real device: CupyAdapter and the CUDA driver, the one module that calls CUDA (L2).

Theory of operation
===================
:class:`CupyAdapter` implements the adapter interface (:mod:`gpumpi._device`)
with ``cupy.cuda.runtime``, imported when the adapter is made, never at import
time: streams are CuPy streams (or anything with ``__cuda_stream__`` or ``ptr``,
or a raw ``cudaStream_t`` int); events are owned raw ``cudaEvent_t`` objects,
destroyed on collection; memory is raw (``cudaMalloc``), outside CuPy's pool.
Runtime failures become :class:`~gpumpi._device.base.CudaError` naming the call.

Pointer attributes come from the driver, not the runtime: :func:`cuda_driver`
loads ``libcuda.so.1`` through ctypes and initialises it (``cuInit``) once per
process, and :func:`driver_pointer_info` asks ``cuPointerGetAttributes`` for
seven attributes in one call.  It is the one place that knows CUDA's pointer
constants: ``CupyAdapter.pointer_info`` and
:func:`gpumpi._device.cuda_pointer_attributes` (how buffers are classified)
both answer with it.  Without a driver or without a GPU, :func:`cuda_driver` is
None and nothing here is used: the simulated device stands in
(:mod:`gpumpi._device.sim`).

``tests/device/test_cupy_api.py`` reads the runtime calls from this file and
checks them against the installed CuPy (names, argument order, constants),
wherever cupy imports, GPU or not.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref

from .base import DEVICE, HANDLE_SIZE, HOST, MANAGED, POOL, CudaError, IpcUnsupported, PointerInfo, checked_address, checked_nbytes

__all__ = ["CupyAdapter", "cuda_driver", "driver_pointer_info"]

# -- the CUDA driver ------------------------------------------------------------------------

_CUDA_SUCCESS = 0
_driver: list = []  # [] untried, [None] absent, [lib] loaded


def cuda_driver():
    """libcuda (ctypes), initialised; None without a driver or without a GPU."""
    if not _driver:
        lib = None
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuInit.argtypes = [ctypes.c_uint]
            lib.cuInit.restype = ctypes.c_int
            f = lib.cuPointerGetAttributes
            f.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p),
                          ctypes.c_uint64]
            f.restype = ctypes.c_int
            lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
            lib.cuDevicePrimaryCtxRetain.restype = ctypes.c_int
            lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
            lib.cuCtxSetCurrent.restype = ctypes.c_int
            if lib.cuInit(0) != _CUDA_SUCCESS:  # e.g. CUDA_ERROR_NO_DEVICE: a driver without GPUs
                lib = None
        except (OSError, AttributeError):
            lib = None
        _driver.append(lib)
    return _driver[0]


# -- pointer attributes ---------------------------------------------------------------------

# CUpointer_attribute values (cuda.h; cuda-python driver.PointerAttribute)
_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10
_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
_CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
_CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17
# CUmemorytype
_CU_MEMORYTYPE_HOST, _CU_MEMORYTYPE_DEVICE, _CU_MEMORYTYPE_UNIFIED = 1, 2, 4
_CUDA_ERROR_INVALID_VALUE, _CUDA_ERROR_INVALID_CONTEXT = 1, 201
_cudaErrorNotReady = 600

_ATTRS = (_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, _CU_POINTER_ATTRIBUTE_IS_MANAGED, _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
          _CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, _CU_POINTER_ATTRIBUTE_RANGE_SIZE,
          _CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, _CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)


def _make_primary_current(lib) -> None:
    """Make device 0's primary context current on this thread (what the runtime does first)."""
    ctx = ctypes.c_void_p()
    if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0:
        lib.cuCtxSetCurrent(ctx)


def driver_pointer_info(lib, addr: int, activate=None) -> PointerInfo:
    """What the CUDA driver knows about ``addr``: ``cuPointerGetAttributes`` (one call, seven
    attributes) through ``lib``, libcuda as :func:`cuda_driver` loads it.

    The one place that reads CUDA's pointer attributes: ``CupyAdapter.pointer_info``
    and :func:`gpumpi._device.cuda_pointer_attributes` both answer with it.  Pointers
    CUDA does not know (pageable host memory, freed memory) are ``"host"`` with no
    allocation; pinned host memory is ``"host"``; managed and pool memory have their
    own kinds.  ``activate()`` makes a context current when the thread has none
    (default: device 0's primary context).  CudaError when the driver fails.
    """
    n = len(_ATTRS)
    attrs = (ctypes.c_int * n)(*_ATTRS)
    slots = (ctypes.c_uint64 * n)()  # 8 zeroed bytes each: fits every attribute's type
    ptrs = (ctypes.c_void_p * n)(*[ctypes.addressof(slots) + 8 * i for i in range(n)])
    rc = lib.cuPointerGetAttributes(n, attrs, ptrs, addr)
    if rc == _CUDA_ERROR_INVALID_CONTEXT:  # no context on this thread yet: make the primary one current
        if activate is None:
            _make_primary_current(lib)
        else:
            activate()
        rc = lib.cuPointerGetAttributes(n, attrs, ptrs, addr)
    if rc == _CUDA_ERROR_INVALID_VALUE:  # a driver older than CUDA 11.3: no MEMPOOL_HANDLE attribute
        rc = lib.cuPointerGetAttributes(n - 1, attrs, ptrs, addr)
    if rc != 0:
        raise CudaError(f"pointer_info: cuPointerGetAttributes failed (CUDA error {rc}, addr {addr:#x})")
    memtype, managed, ordinal, start, size, ipc_ok, pool = (slots[i] for i in range(n))
    ordinal = ctypes.c_int32(ordinal & 0xFFFFFFFF).value
    if memtype == 0:  # unregistered (pageable) host memory
        return PointerInfo(HOST, None, None, None)
    if managed & 0xFF:
        return PointerInfo(MANAGED, ordinal, start, size)
    if pool:
        return PointerInfo(POOL, ordinal, start, size)
    if memtype == _CU_MEMORYTYPE_HOST:
        return PointerInfo(HOST, None, start, size)
    return PointerInfo(DEVICE, ordinal, start, size, bool(ipc_ok & 0xFF))


# -- the adapter ----------------------------------------------------------------------------


class _CudaEvent:
    """A raw ``cudaEvent_t`` owned by :class:`CupyAdapter` (destroyed on collection)."""

    __slots__ = ("ptr", "interprocess", "remote", "_fin", "__weakref__")

    def __init__(self, runtime, ptr: int, interprocess: bool, remote: bool) -> None:
        self.ptr = ptr
        self.interprocess = interprocess
        self.remote = remote
        self._fin = weakref.finalize(self, _destroy_cuda_event, runtime, ptr, os.getpid())

    def __repr__(self) -> str:
        return f"<CUDA event {self.ptr:#x}{' interprocess' if self.interprocess else ''}>"


def _destroy_cuda_event(runtime, ptr: int, pid: int) -> None:
    if os.getpid() == pid:
        try:
            runtime.eventDestroy(ptr)
        except Exception:  # interpreter shutdown, context gone
            pass


class CupyAdapter:
    """The real device, through ``cupy.cuda.runtime`` and the driver's pointer attributes.

    Streams are CuPy streams (or anything with a ``ptr``, or a raw ``cudaStream_t``
    int); events are owned raw ``cudaEvent_t`` objects.  Memory is raw
    (``cudaMalloc``), outside CuPy's memory pool.
    """

    name = "cupy"

    def __init__(self) -> None:
        try:
            import cupy
        except ImportError as exc:
            raise ImportError("CupyAdapter: a CUDA driver was found but cupy is not installed "
                              "(pip install gpumpi[cuda])") from exc
        self._cupy = cupy
        self._rt = cupy.cuda.runtime
        self._lib = cuda_driver()
        if self._lib is None:
            raise CudaError("CupyAdapter: no usable CUDA driver (libcuda.so.1 did not initialise)")
        self._pool: set[int] = set()
        self._lock = threading.Lock()

    def _call(self, call: str, fn, *args):
        try:
            return fn(*args)
        except self._rt.CUDARuntimeError as exc:
            raise CudaError(f"{call}: {exc}") from exc

    # -- devices --------------------------------------------------------------------------

    def device_count(self) -> int:
        return self._call("device_count", self._rt.getDeviceCount)

    def current_device(self) -> int:
        return self._call("current_device", self._rt.getDevice)

    def set_device(self, i: int) -> None:
        self._call("set_device", self._rt.setDevice, i)

    # -- memory ---------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        n = checked_nbytes("alloc", nbytes)
        return self._call("alloc", self._rt.malloc, n) if n else 0

    def alloc_managed(self, nbytes: int) -> int:
        n = checked_nbytes("alloc_managed", nbytes)
        return self._call("alloc_managed", self._rt.mallocManaged, n) if n else 0

    def alloc_pool(self, nbytes: int, stream=None) -> int:
        n = checked_nbytes("alloc_pool", nbytes)
        if not n:
            return 0
        p = self._call("alloc_pool", self._rt.mallocAsync, n, self._sptr(stream))
        with self._lock:
            self._pool.add(p)
        return p

    def alloc_host(self, nbytes: int) -> int:
        n = checked_nbytes("alloc_host", nbytes)
        return self._call("alloc_host", self._rt.hostAlloc, n, self._rt.hostAllocPortable) if n else 0

    def host_register(self, addr: int, nbytes: int) -> None:
        n = checked_nbytes("host_register", nbytes)
        if n:  # cudaHostRegisterPortable = 1: pinned for every context
            self._call("host_register", self._rt.hostRegister, checked_address("host_register", addr), n, 1)

    def host_unregister(self, addr: int) -> None:
        self._call("host_unregister", self._rt.hostUnregister, checked_address("host_unregister", addr))

    def free(self, addr: int) -> None:
        addr = checked_address("free", addr)
        if not addr:
            return
        with self._lock:
            pool = addr in self._pool
            self._pool.discard(addr)
        if pool:
            self._call("free", self._rt.freeAsync, addr, self._sptr(None))
        else:
            self._call("free", self._rt.free, addr)

    def free_host(self, addr: int) -> None:
        addr = checked_address("free_host", addr)
        if addr:
            self._call("free_host", self._rt.freeHost, addr)

    def pointer_info(self, addr: int) -> PointerInfo:
        """Attributes from ``cuPointerGetAttributes`` (:func:`driver_pointer_info`)."""
        return driver_pointer_info(self._lib, checked_address("pointer_info", addr),
                                   lambda: self._call("pointer_info", self._rt.memGetInfo))

    def host_view(self, addr: int, nbytes: int) -> memoryview:
        raise NotImplementedError("host_view: device memory is not host addressable on a real GPU "
                                  "(memcpy it into host memory)")

    # -- IPC ------------------------------------------------------------------------------

    def ipc_export(self, addr: int) -> tuple[bytes, int]:
        info = self.pointer_info(addr)
        if info.kind == HOST:
            raise IpcUnsupported(f"ipc_export: host memory cannot be exported (addr {addr:#x})")
        if info.kind in (MANAGED, POOL):
            raise IpcUnsupported(f"ipc_export: {info.kind} memory cannot be exported through CUDA IPC "
                                 f"(addr {addr:#x}, allocation {info.base:#x})")
        if not info.ipc_capable:
            raise IpcUnsupported(f"ipc_export: the allocation is not legacy-IPC capable (addr {addr:#x}, "
                                 f"allocation {info.base:#x})")
        return self._call("ipc_export", self._rt.ipcGetMemHandle, info.base), addr - info.base

    def ipc_open(self, handle: bytes) -> int:
        """cudaIpcOpenMemHandle with cudaIpcMemLazyEnablePeerAccess (CUDA reference-counts reopens)."""
        handle = bytes(handle)
        if len(handle) != HANDLE_SIZE:
            raise ValueError(f"ipc_open: handle must be {HANDLE_SIZE} bytes ({len(handle)})")
        return self._call("ipc_open", self._rt.ipcOpenMemHandle, handle, self._rt.cudaIpcMemLazyEnablePeerAccess)

    def ipc_close(self, base: int) -> None:
        self._call("ipc_close", self._rt.ipcCloseMemHandle, checked_address("ipc_close", base))

    # -- streams --------------------------------------------------------------------------

    def _sptr(self, s) -> int:
        if s is None:
            return self._cupy.cuda.get_current_stream().ptr
        if isinstance(s, int):
            return s
        proto = getattr(s, "__cuda_stream__", None)  # the CUDA stream protocol: (version, handle)
        ptr = proto()[1] if proto is not None else getattr(s, "ptr", None)
        if ptr is None:
            raise TypeError(f"not a CUDA stream ({type(s).__name__}; expected a cudaStream_t int, an object "
                            f"with __cuda_stream__ or .ptr)")
        return int(ptr)

    def check_stream(self, s):
        """``s`` if it is usable as a CUDA stream (or None), else TypeError."""
        if s is not None:
            self._sptr(s)
        return s

    def current_stream(self):
        return self._cupy.cuda.get_current_stream()

    def stream_create(self):
        return self._cupy.cuda.Stream(non_blocking=True)

    def stream_synchronize(self, s) -> None:
        self._call("stream_synchronize", self._rt.streamSynchronize, self._sptr(s))

    def synchronize(self) -> None:
        self._call("synchronize", self._rt.deviceSynchronize)

    def memcpy(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        n = checked_nbytes("memcpy", nbytes)
        if n:
            self._call("memcpy", self._rt.memcpyAsync, checked_address("memcpy", dst), checked_address("memcpy", src), n,
                       self._rt.memcpyDefault, self._sptr(stream))

    def launch_host_func(self, s, fn) -> None:
        """cudaLaunchHostFunc; ``fn`` must not call CUDA.

        CuPy's C trampoline calls ``callback(arg)`` on a driver thread and neither reports
        nor survives an exception (it is dropped and the callback leaked), so one raised by
        ``fn`` is printed here.
        """
        if not callable(fn):
            raise TypeError(f"launch_host_func: fn must be callable ({type(fn).__name__})")
        import traceback

        def host_fn(_arg):
            try:
                fn()
            except BaseException:  # must not reach CuPy's trampoline (runtime.pyx _HostFnFunc)
                traceback.print_exc()

        self._call("launch_host_func", self._rt.launchHostFunc, self._sptr(s), host_fn, 0)

    # -- events ---------------------------------------------------------------------------

    def _ev(self, call: str, e) -> _CudaEvent:
        if type(e) is not _CudaEvent:
            raise TypeError(f"{call}: not an event of this CupyAdapter ({e!r})")
        return e

    def event_create(self, interprocess: bool = False) -> _CudaEvent:
        flags = self._rt.eventDisableTiming | (self._rt.eventInterprocess if interprocess else 0)
        ptr = self._call("event_create", self._rt.eventCreateWithFlags, flags)
        return _CudaEvent(self._rt, ptr, bool(interprocess), False)

    def event_destroy(self, e) -> None:
        self._ev("event_destroy", e)._fin()

    def event_record(self, e, s=None) -> None:
        self._call("event_record", self._rt.eventRecord, self._ev("event_record", e).ptr, self._sptr(s))

    def event_query(self, e) -> bool:
        st = self._rt.eventQuery(self._ev("event_query", e).ptr)
        if st == 0:
            return True
        if st == _cudaErrorNotReady:
            return False
        raise CudaError(f"event_query: cudaEventQuery failed (CUDA error {st}, event {e!r})")

    def event_synchronize(self, e) -> None:
        self._call("event_synchronize", self._rt.eventSynchronize, self._ev("event_synchronize", e).ptr)

    def stream_wait_event(self, s, e) -> None:
        self._call("stream_wait_event", self._rt.streamWaitEvent, self._sptr(s),
                   self._ev("stream_wait_event", e).ptr, 0)

    def ipc_event_export(self, e) -> bytes:
        e = self._ev("ipc_event_export", e)
        if not e.interprocess:
            raise IpcUnsupported("ipc_event_export: the event was not created with interprocess=True")
        return self._call("ipc_event_export", self._rt.ipcGetEventHandle, e.ptr)

    def ipc_event_open(self, handle: bytes) -> _CudaEvent:
        handle = bytes(handle)
        if len(handle) != HANDLE_SIZE:
            raise ValueError(f"ipc_event_open: handle must be {HANDLE_SIZE} bytes ({len(handle)})")
        ptr = self._call("ipc_event_open", self._rt.ipcOpenEventHandle, handle)
        return _CudaEvent(self._rt, ptr, True, True)
