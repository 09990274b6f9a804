"""The array-library registry (L2): which library an array belongs to, and what gpumpi does with it.

Theory of operation
===================
One :class:`Backend` per array library says, in one place, everything gpumpi
knows about that library's arrays:

* ``modules``: the top-level module names whose types select it (a type's
  ``__module__`` up to the first dot; ``numba_cuda`` is numba-cuda's own
  package).  Two libraries are selected otherwise: ``numpy`` by type
  (``numpy.ndarray`` and its subclasses, wherever they are defined) and ``sim``
  by a true ``__gpumpi_sim__`` class attribute (:class:`gpumpi.testing.SimDeviceArray`);
  ``generic`` is what every other type gets;
* ``buffer``: how :func:`gpumpi._arrays.as_buffer` reads one, the name of one of
  its probing chains (``"ndarray"``: the NumPy header; ``"cai"``: the CUDA array
  interface first, then the generic chain; ``"numba"``: the CUDA array interface,
  then numba-cuda simulator arrays, then the generic chain; ``"protocols"``: the
  buffer protocol, then DLPack, then the CUDA array interface, as mpi4py probes),
  or, for a library registered with :func:`register_converter`, a loader called
  once, on first use, that returns a converter ``(obj, readonly, call) -> BufferView``;
* ``is_device(tp)``: whether arrays of type ``tp`` are device arrays, which object
  messages (:mod:`gpumpi._pickle`) send out of band, device to device; for
  those, ``contiguous``, ``empty``, ``to_host`` and ``from_host`` make a
  contiguous array to send, allocate one to receive into, and copy through host
  memory (collectives, buffered sends).  The names of device libraries
  (``"sim"``, ``"cupy"``, ``"numba"``) travel in object messages: they are part
  of the wire format.

Nothing here imports numpy, cupy or numba: a library is imported by its own
functions when they are called, that is once one of its arrays exists.  The
memory *kind* of a buffer (host, device, simulated) is not the library's to say:
:mod:`gpumpi._arrays` decides it per pointer (the CUDA array interface and DLPack
can carry host memory too).

:mod:`gpumpi._arrays` keeps a converter per type and :mod:`gpumpi._pickle` a kind
per type, both read from here once per type.
"""

from __future__ import annotations

__all__ = ["Backend", "BACKENDS", "NUMPY", "GENERIC", "by_module", "device_empty", "device_kind", "register_converter"]


class Backend:
    """One array library (see the module docstring for the fields)."""

    __slots__ = ("name", "modules", "buffer", "is_device", "contiguous", "empty", "to_host", "from_host")

    def __init__(self, name: str, modules: tuple = (), buffer="protocols", is_device=None, contiguous=None,
                 empty=None, to_host=None, from_host=None) -> None:
        self.name = name
        self.modules = modules  # top-level module names that select it
        self.buffer = buffer  # a chain name of gpumpi._arrays, or a loader() -> converter
        self.is_device = is_device or _never  # tp -> bool
        self.contiguous = contiguous  # a -> (contiguous array, "C" or "F")
        self.empty = empty  # (cls, shape, dtype, order) -> array
        self.to_host = to_host  # a -> numpy.ndarray
        self.from_host = from_host  # (cls, numpy.ndarray) -> array

    def __repr__(self) -> str:
        return f"<Backend {self.name} modules={self.modules} buffer={self.buffer!r}>"


def _never(tp) -> bool:
    return False


# -- device arrays in object messages ----------------------------------------------------------


def _as_strided(a):
    """A part sent as it is: a strided device view is a derived-datatype message whose
    elements the device pack kernels gather in C order; the receiver's array is C-contiguous."""
    return a, "C"


def _sim_empty(cls, shape, dtype, order):
    return cls.empty(shape, dtype)


def _cupy_is_device(tp) -> bool:
    import cupy

    return issubclass(tp, cupy.ndarray)


def _cupy_contiguous(a):
    import cupy

    if a.flags.c_contiguous:
        return a, "C"
    if a.flags.f_contiguous:
        return a, "F"
    return cupy.ascontiguousarray(a), "C"  # a copy kernel on the array's device


def _cupy_empty(cls, shape, dtype, order):
    import cupy

    return cupy.empty(shape, dtype, order=order)


def _cupy_from_host(cls, host):
    import cupy

    return cupy.asarray(host)


def _numba_is_device(tp) -> bool:
    # real device arrays export the CUDA array interface; the simulator's wrappers do not
    return hasattr(tp, "__cuda_array_interface__") and hasattr(tp, "copy_to_host")


def _numba_contiguous(a):
    if not a.is_c_contiguous() and a.is_f_contiguous():
        return a, "F"
    return _as_strided(a)


def _numba_empty(cls, shape, dtype, order):
    from numba import cuda

    return cuda.device_array(shape, dtype, order=order)


def _numba_from_host(cls, host):
    from numba import cuda

    return cuda.to_device(host)


# -- the registry -------------------------------------------------------------------------------

#: ``numpy.ndarray`` and its subclasses (selected by type)
NUMPY = Backend("numpy", buffer="ndarray")
#: every other type: the buffer protocol (bytes, array.array, ...), then DLPack, then the CUDA array
#: interface (PyTorch and JAX tensors, CAI and DLPack wrappers)
GENERIC = Backend("generic", buffer="protocols")

#: name -> backend; the device ones' names travel in object messages
BACKENDS: dict = {
    "numpy": NUMPY,
    "cupy": Backend("cupy", ("cupy",), "cai", _cupy_is_device, _cupy_contiguous, _cupy_empty, lambda a: a.get(),
                    _cupy_from_host),
    "numba": Backend("numba", ("numba", "numba_cuda"), "numba", _numba_is_device, _numba_contiguous, _numba_empty,
                     lambda a: a.copy_to_host(), _numba_from_host),
    # types with a true __gpumpi_sim__ (selected by that attribute); as buffers they are CAI objects
    "sim": Backend("sim", (), "protocols", lambda tp: True, _as_strided, _sim_empty, lambda a: a.get(),
                   lambda cls, h: cls.from_numpy(h)),
    "generic": GENERIC,
}

_BY_MODULE: dict = {m: be for be in BACKENDS.values() for m in be.modules}


def by_module(module: str) -> Backend | None:
    """The backend that top-level module ``module``'s types belong to, or None."""
    return _BY_MODULE.get(module)


def device_kind(tp) -> str | None:
    """The name of the device library whose arrays type ``tp`` makes (``"sim"``, ``"cupy"``,
    ``"numba"``), or None: not a device array.  May import the library of ``tp``'s module."""
    if getattr(tp, "__gpumpi_sim__", False):
        return "sim"
    be = _BY_MODULE.get((getattr(tp, "__module__", None) or "").partition(".")[0])
    if be is not None and be.is_device(tp):
        return be.name
    return None


def register_converter(module: str, loader) -> None:
    """Read the types of top-level module ``module`` with the converter ``loader()`` returns
    (called once, on first use; it may import its library).  A library already registered
    for ``module`` keeps its name and what it does in object messages."""
    old = _BY_MODULE.get(module)
    if old is None:
        be = Backend(module, (module,), loader)
    else:
        be = Backend(old.name, (module,), loader, old.is_device, old.contiguous, old.empty, old.to_host,
                     old.from_host)
    _BY_MODULE[module] = be


def device_empty(shape, dtype, call: str, *, zeros: bool = False, kind: str | None = None):
    """A new C-ordered device array: the one place gpumpi allocates device memory of its own
    (Global Arrays, windows, benchmarks).

    ``kind`` ``"sim"`` makes a :class:`gpumpi.testing.SimDeviceArray`, ``"cupy"`` a CuPy array on
    the current device; None picks what this process's device mode gives (the simulated device
    under ``GPUMPI_DEVICE=sim`` or with no CUDA driver, else CuPy).  ``zeros``: filled with zeros.
    Raises ``NotImplementedError`` naming ``call`` when CuPy is needed and not installed.
    """
    if kind is None:
        from . import _device

        kind = "sim" if _device.device_mode() == "sim" or _device.cuda_driver() is None else "cupy"
    if kind == "sim":
        from ._device.simarray import SimDeviceArray

        return (SimDeviceArray.zeros if zeros else SimDeviceArray.empty)(shape, dtype)
    if kind != "cupy":
        raise ValueError(f"{call}: not a device array kind ({kind!r}; expected 'sim' or 'cupy')")
    try:
        import cupy
    except ImportError:
        raise NotImplementedError(f"{call}: device memory needs CuPy (pip install gpumpi[cuda])") from None
    return (cupy.zeros if zeros else cupy.empty)(shape, dtype)
