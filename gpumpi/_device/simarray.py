"""The simulated device's array type (L2): ``SimDeviceArray``, what ``cupy.ndarray`` is on a GPU.

Theory of operation
===================
A :class:`SimDeviceArray` is a NumPy array over memory of the simulated device
(:mod:`gpumpi._device.sim`), which gpumpi classifies as device memory by its
``__gpumpi_sim__`` attribute and reads through its ``__cuda_array_interface__``.
It lives here, below the runtime, so that the library itself can hand one out
(``Win.tomemory()`` of a device window under ``GPUMPI_DEVICE=sim``); users and
tests know it as :class:`gpumpi.testing.SimDeviceArray`.
"""

from __future__ import annotations

import os
import weakref

__all__ = ["SimDeviceArray"]


class _SimMemory:
    """One allocation on the simulated device, freed when the last array using it goes."""

    __slots__ = ("addr", "nbytes", "__weakref__")

    def __init__(self, adapter, nbytes: int) -> None:
        self.addr = adapter.alloc(nbytes)
        self.nbytes = nbytes
        if self.addr:
            weakref.finalize(self, _free_sim_memory, adapter, self.addr, os.getpid())


def _free_sim_memory(adapter, addr: int, pid: int) -> None:
    if os.getpid() == pid and not adapter._detached:  # a forked child does not free its parent's memory
        adapter.free(addr)


_BASIC_INDEX = (int, slice, type(Ellipsis), type(None))


class SimDeviceArray:
    """A NumPy-backed array in simulated device memory (what ``cupy.ndarray`` is on a GPU).

    Allocated with ``gpumpi._device.sim_adapter().alloc``; gpumpi classifies it as
    simulated device memory (``__gpumpi_sim__``), reading its
    ``__cuda_array_interface__`` (version 3, ``stream`` None).  Host code must go
    through :meth:`get` / :meth:`set`, which synchronize the simulated device
    first; implicit conversion to NumPy raises, as CuPy's does.  Basic slicing
    returns views of the same allocation, freed when the last view is collected.
    """

    __gpumpi_sim__ = True
    __slots__ = ("_arr", "_mem", "__weakref__")

    def __init__(self, shape, dtype=float) -> None:
        import numpy as np

        from . import sim_adapter

        dtype = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, int) or hasattr(shape, "__index__") else tuple(map(int, shape))
        if any(n < 0 for n in shape):
            raise ValueError(f"SimDeviceArray: negative dimensions are not allowed ({shape})")
        nbytes = dtype.itemsize
        for n in shape:
            nbytes *= n
        ad = sim_adapter()
        self._mem = _SimMemory(ad, nbytes)
        if nbytes:
            self._arr = np.frombuffer(ad.host_view(self._mem.addr, nbytes), np.uint8).view(dtype).reshape(shape)
        else:
            self._arr = np.empty(shape, dtype)

    @classmethod
    def _view(cls, arr, mem) -> SimDeviceArray:
        v = object.__new__(cls)
        v._arr = arr
        v._mem = mem
        return v

    @classmethod
    def empty(cls, shape, dtype=float) -> SimDeviceArray:
        """An uninitialised array (``cupy.empty``)."""
        return cls(shape, dtype)

    @classmethod
    def zeros(cls, shape, dtype=float) -> SimDeviceArray:
        """An array of zeros (``cupy.zeros``)."""
        a = cls(shape, dtype)
        a._arr.fill(0)
        return a

    @classmethod
    def from_numpy(cls, a) -> SimDeviceArray:
        """A device copy of a NumPy array (``cupy.asarray``)."""
        import numpy as np

        a = np.asarray(a)
        d = cls(a.shape, a.dtype)
        d.set(a)
        return d

    shape = property(lambda self: self._arr.shape)
    dtype = property(lambda self: self._arr.dtype)
    strides = property(lambda self: self._arr.strides)
    size = property(lambda self: self._arr.size)
    nbytes = property(lambda self: self._arr.nbytes)
    ndim = property(lambda self: self._arr.ndim)

    @property
    def ptr(self) -> int:
        """Address of the first element (0 for an empty array)."""
        return self._arr.__array_interface__["data"][0] if self._arr.size else 0

    @property
    def __cuda_array_interface__(self) -> dict:
        a = self._arr
        return {
            "shape": a.shape,
            "typestr": a.dtype.str,
            "descr": a.dtype.descr,
            "data": (self.ptr, False),
            "strides": None if a.flags.c_contiguous else a.strides,
            "version": 3,
            "stream": None,
        }

    def get(self):
        """A NumPy copy, after running every queued operation of the simulated device."""
        from . import sim_adapter

        sim_adapter().synchronize()
        return self._arr.copy(order="K")

    def set(self, a) -> None:
        """Copy a NumPy array (same shape) in, after running every queued operation."""
        import numpy as np

        from . import sim_adapter

        a = np.asarray(a)
        if a.shape != self._arr.shape:
            raise ValueError(f"set: shape mismatch (array {a.shape}, device array {self._arr.shape})")
        sim_adapter().synchronize()
        self._arr[...] = a

    def reshape(self, *shape) -> SimDeviceArray:
        """The same elements in another shape (``cupy.ndarray.reshape``): a view where the layout
        allows, else a copy on the simulated device."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        v = self._arr.view()
        try:
            v.shape = shape
        except AttributeError:
            return SimDeviceArray.from_numpy(self._arr.reshape(shape))
        return SimDeviceArray._view(v, self._mem)

    def __getitem__(self, index) -> SimDeviceArray:
        idx = index if isinstance(index, tuple) else (index,)
        for i in idx:
            if not isinstance(i, _BASIC_INDEX) and not hasattr(i, "__index__"):
                raise TypeError(f"SimDeviceArray: only basic slicing is supported (index {index!r})")
        if Ellipsis not in idx:
            idx = (*idx, Ellipsis)  # full integer indexing gives a 0-d view, not a scalar copy
        return SimDeviceArray._view(self._arr[idx], self._mem)

    def __len__(self) -> int:
        return len(self._arr)

    def __array__(self, *args, **kwargs):
        raise TypeError("SimDeviceArray: implicit conversion to a NumPy array is not allowed; use .get()")

    def __repr__(self) -> str:
        return f"<SimDeviceArray shape={self.shape} dtype={self.dtype} ptr={self.ptr:#x}>"
