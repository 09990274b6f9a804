"""The device: adapter selection, the CUDA driver, the device mode and the simulator switch (L2).

Theory of operation
===================
Everything gpumpi does with device memory, streams and events goes through an
*adapter*.  Two classes share one interface (addresses and sizes are Python
ints; streams and events are adapter objects):

* :class:`~gpumpi._device.cuda.CupyAdapter` (:mod:`gpumpi._device.cuda`, the
  one module that calls CUDA): the real thing, through ``cupy.cuda.runtime``
  (imported lazily) and, for pointer attributes, ``cuPointerGetAttributes`` in
  ``libcuda`` through ctypes;
* :class:`~gpumpi._device.sim.SimAdapter` (:mod:`gpumpi._device.sim`): a
  faithful model on the host, which CI uses to test every device path (IPC
  protocol and caching, staging, stream ordering).

What both raise and return (:class:`CudaError`, :class:`IpcUnsupported`,
:class:`StaleHandle`, :class:`PointerInfo`, the memory kinds) is in
:mod:`gpumpi._device.base`, below both.

Interface (both classes; ``s``: a stream or None for :meth:`current_stream`)::

    name                                    "sim" | "cupy"
    device_count() current_device() set_device(i)
    alloc(n) -> addr        free(addr)      device memory (free takes any device kind)
    alloc_managed(n)        alloc_pool(n, stream=None)   memory CUDA IPC cannot export
    alloc_host(n) -> addr   free_host(addr) page-locked host memory
    host_register(addr, n)  host_unregister(addr)  page-lock existing host memory (staging slabs)
    pointer_info(addr) -> PointerInfo(kind, device, base, size, ipc_capable)
    ipc_export(addr) -> (handle: 64 bytes, offset)   ipc_open(handle) -> base   ipc_close(base)
    memcpy(dst, src, n, stream=None)        asynchronous, any direction (cudaMemcpyDefault)
    stream_create() stream_synchronize(s) stream_wait_event(s, e) current_stream()
    check_stream(s) -> s                    TypeError unless s is a stream this adapter can use
    event_create(interprocess=False) event_record(e, s=None) event_query(e) -> bool
    event_synchronize(e) event_destroy(e) ipc_event_export(e) -> bytes ipc_event_open(b) -> event
    launch_host_func(s, fn)                 run fn() in stream order (cudaLaunchHostFunc)
    synchronize()                           run / wait for everything (tests, teardown)
    host_view(addr, n) -> memoryview        sim only (device memory is host memory there)

An IPC handle names a whole *allocation*, so :meth:`ipc_export` returns the
handle of the allocation that contains ``addr`` and the offset of ``addr`` in
it; the peer adds the offset to what :meth:`ipc_open` returns.  Exporting the
same allocation twice gives the same bytes; a freed allocation reallocated at
the same address gets different ones.  Opening a handle twice in one process
returns the same base, reference counted (as CUDA does); :meth:`ipc_close`
unmaps at zero.  Pool (``cudaMallocAsync``) and managed memory, host memory and
memory opened from another process's handle cannot be exported:
:class:`IpcUnsupported`, so callers fall back to staging.  A process cannot open
its own handles (CUDA fails with "invalid device context"): IpcUnsupported too.

Selection
---------
:func:`adapter` returns the process's active adapter: the simulated one when
the device mode is ``'sim'`` (:func:`set_device_mode`, ``GPUMPI_DEVICE=sim``)
or when no usable CUDA driver is present (:func:`cuda_driver`), else the CuPy
one.  :func:`sim_adapter` always returns the process's simulated adapter
(:class:`gpumpi.testing.SimDeviceArray` allocates from it);
:func:`adapter_for` returns the adapter of a buffer's memory kind (``'sim'``:
the simulated one, ``'device'``: the active one).  Each is made on first use,
once per process; a forked child makes fresh ones (see
:mod:`gpumpi._device.sim`, *Fork*).

The device mode (:func:`set_device_mode`, :func:`device_mode`) says how
device-interface pointers are classified (:mod:`gpumpi._arrays`): ``'auto'``
asks the CUDA driver (:func:`cuda_pointer_attributes`), ``'sim'`` treats them
all as simulated device memory; ``'none'`` behaves as ``'auto'`` here.

The simulator switch: numba reads ``NUMBA_ENABLE_CUDASIM`` once, when
``numba.cuda`` is first imported, so whether the device kernels run on
numba-cuda's simulator is decided before that, by :func:`use_simulator`, the
one place gpumpi writes the variable: the first time kernels are wanted for
simulated device memory, and only when there is no usable CUDA driver (then
``numba.cuda`` can only be the simulator).  It never calls into the driver
earlier than that: a process that initialised CUDA before forking ranks would
leave them without a usable GPU.

Layering: nothing here imports numpy, cupy or numba at module level (``import
gpumpi`` and ``from gpumpi import MPI`` stay light); :mod:`gpumpi._arrays` sits
above this package and asks it for the driver, the mode and the simulated
device, never the other way round.
"""

from __future__ import annotations

import os
import sys
import threading

from . import cuda, sim
from .base import (
    DEVICE,
    HANDLE_SIZE,
    HOST,
    MANAGED,
    POOL,
    SIM,
    CudaError,
    IpcUnsupported,
    PointerInfo,
    StaleHandle,
)
from .cuda import CupyAdapter, cuda_driver, driver_pointer_info
from .sim import SimAdapter, SimEvent, SimStream

__all__ = [
    "IpcUnsupported",
    "StaleHandle",
    "CudaError",
    "PointerInfo",
    "SimAdapter",
    "SimStream",
    "SimEvent",
    "CupyAdapter",
    "adapter",
    "adapter_for",
    "sim_adapter",
    "cupy_adapter",
    "cuda_driver",
    "cuda_pointer_attributes",
    "driver_pointer_info",
    "set_device_mode",
    "device_mode",
    "use_simulator",
    "HANDLE_SIZE",
    "HOST",
    "DEVICE",
    "MANAGED",
    "POOL",
    "SIM",
]

# -- the process's adapters ----------------------------------------------------------------

_INSTANCES: dict = {}
_INSTANCES_LOCK = threading.Lock()


def _forget_adapters() -> None:
    """In a forked child (after its SimAdapters were detached): make fresh adapters on next use."""
    global _INSTANCES_LOCK
    _INSTANCES_LOCK = threading.Lock()  # another thread may have held it at the fork
    _INSTANCES.pop("sim", None)
    _INSTANCES.pop("cupy", None)  # a forked CUDA context is unusable anyway


sim.AFTER_FORK_IN_CHILD.append(_forget_adapters)


def _instance(name: str, cls):
    a = _INSTANCES.get(name)
    if a is None:
        with _INSTANCES_LOCK:
            a = _INSTANCES.get(name)
            if a is None:
                a = _INSTANCES[name] = cls()
    return a


def sim_adapter() -> SimAdapter:
    """The process's simulated adapter (created on first use; a fresh one after fork)."""
    return _instance("sim", SimAdapter)


def cupy_adapter() -> CupyAdapter:
    """The process's CuPy adapter (ImportError naming ``gpumpi[cuda]`` when cupy is missing)."""
    return _instance("cupy", CupyAdapter)


def adapter():
    """The active adapter: simulated in device mode 'sim' or without a usable CUDA driver, else CuPy."""
    if _mode[0] == "sim" or cuda_driver() is None:
        return sim_adapter()
    return cupy_adapter()


def adapter_for(kind: str):
    """The adapter of memory of buffer kind ``kind``: ``'sim'``, the simulated one; ``'device'``,
    the active one (:func:`adapter`).  ValueError for host memory, which has none."""
    if kind == SIM:
        return sim_adapter()
    if kind == DEVICE:
        return adapter()
    raise ValueError(f"adapter_for: no device adapter for {kind!r} memory (expected 'sim' or 'device')")


# -- the device mode -------------------------------------------------------------------------

_mode = ["auto"]


def set_device_mode(mode: str) -> None:
    """How device-interface pointers are classified: ``'auto'`` (ask the CUDA driver; the
    default; ``'none'`` behaves the same here) or ``'sim'`` (always simulated device memory)."""
    if mode not in ("auto", "sim", "none"):
        raise ValueError(f"set_device_mode: unknown mode {mode!r} (expected 'auto', 'sim' or 'none')")
    _mode[0] = mode


def device_mode() -> str:
    """The device mode :func:`set_device_mode` set: ``'auto'``, ``'sim'`` or ``'none'``."""
    return _mode[0]


# -- the CUDA driver -------------------------------------------------------------------------


def cuda_pointer_attributes(addr: int) -> tuple[str, int | None] | None:
    """Ask the CUDA driver what ``addr`` is: ``('host', None)`` or ``('device', ordinal)``.

    Returns None when no CUDA driver (or no GPU) is present.  The driver's answer is
    :func:`gpumpi._device.cuda.driver_pointer_info`'s (``CupyAdapter.pointer_info`` gives the
    same): pointers CUDA does not know (pageable host memory) and pinned host
    memory are host memory; device, managed and pool memory are device memory, on
    the pointer's own device.  ``BufferError`` when the driver call fails.
    """
    lib = cuda_driver()
    if lib is None:
        return None
    try:
        info = cuda.driver_pointer_info(lib, addr)
    except CudaError as exc:
        raise BufferError(str(exc)) from None
    if info.kind == HOST:
        return (HOST, None)
    return (DEVICE, info.device)


# -- the simulator switch --------------------------------------------------------------------


def use_simulator() -> None:
    """Switch numba-cuda's simulator on (``NUMBA_ENABLE_CUDASIM=1``) if ``numba.cuda`` is not
    imported yet and can only be the simulator here (no usable CUDA driver); a value the
    user set is kept.  Called before the device kernels are first wanted for simulated
    device memory; the kernels then ask ``numba.cuda`` itself whether it is the simulator.

    Numba reads its environment when ``numba`` is imported and again before each compilation
    (``numba.core.config.reload_config``); ``numba.cuda`` takes its mode from that
    configuration.  A process that imported ``numba`` earlier (and whose kernels came from
    the disk cache, so nothing compiled since) would keep the old value: the configuration
    is read again here."""
    if "numba.cuda" not in sys.modules and cuda_driver() is None:
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
        cfg = sys.modules.get("numba.core.config")
        if cfg is not None:
            cfg.reload_config()
