"""Global Arrays buffers and patches: the caller's buffers, patch bounds, patches in window memory, datatypes (L6).

Theory of operation
===================
A patch is half-open ``[lo, hi)``; :func:`patch_bounds` reads ga4py's patch arguments (no
bounds: the whole array; ``lo`` alone: one element).  A buffer given to a put or an
accumulate is read as a C-ordered array of the array's type and the patch's shape
(:func:`host_buffer` converts or copies it if it must; a complex buffer for a real array is a
``TypeError``); one given to a get must already have the type and size and be writable, and is
written through a view of the patch's shape, never a copy.  Device buffers (anything with
``__cuda_array_interface__``: CuPy, the simulated device) pass as they are; new ones come from
``gpumpi._backends.device_empty``, the one device allocator (:func:`new_device_buffer`).

A member's window memory is its block plus its ghost layers (``GAArray.memshape``):
:func:`target_slices` is where a global patch sits in it.  Where a transfer goes through the
window instead of a copy into mapped memory, both sides of each piece are MPI subarray
datatypes (``Create_subarray``; strided patches: nested ``hvector`` types), committed once per
shape and cached (:func:`box_types`).

:func:`xp_of` is the array module that computes on an array's memory for the collective
operations: NumPy for host memory and for the simulated device (whose memory the host
reaches), CuPy for device memory.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._layout import check_patch
from .state import GAArray, as_ints, mpi

__all__ = [
    "basic_type", "box_types", "device_sync", "host_buffer", "is_device", "is_sim", "new_device_buffer",
    "new_patch_buffer", "patch_bounds", "patch_slices", "target_slices", "to_host", "xp_like", "xp_of",
]


# --- buffers ----------------------------------------------------------------------------------
def is_device(x) -> bool:
    """Whether ``x`` is a device array (CUDA array interface, not NumPy)."""
    return hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray)


def host_buffer(a: GAArray, buffer, shape, call: str, writable: bool):
    """``buffer`` as an array of ``a``'s dtype and ``shape`` (a flat buffer of the right size is
    reshaped; a non-contiguous or differently typed one is copied -- for reading only)."""
    n = math.prod(shape)
    if is_device(buffer):
        if buffer.dtype != a.dtype:
            raise TypeError(f"{call}: buffer dtype {buffer.dtype} differs from the array's {a.dtype}")
        if buffer.size != n:
            raise ValueError(f"{call}: buffer of {buffer.size} elements for a patch of {n} ({list(shape)})")
        if tuple(buffer.shape) != tuple(shape):
            buffer = buffer.reshape(shape)
        return buffer
    if writable:
        if not isinstance(buffer, np.ndarray):
            raise TypeError(f"{call}: buffer must be a NumPy array ({type(buffer).__name__})")
        if buffer.dtype != a.dtype:
            raise TypeError(f"{call}: buffer dtype {buffer.dtype} differs from the array's {a.dtype}")
        if buffer.size != n:
            raise ValueError(f"{call}: buffer of {buffer.size} elements for a patch of {n} ({list(shape)})")
        if not buffer.flags.writeable:
            raise ValueError(f"{call}: buffer is read-only")
        if tuple(buffer.shape) != tuple(shape):
            try:
                v = buffer.view()
                v.shape = shape  # no copy: the result must land in ``buffer``
                return v
            except AttributeError:
                raise ValueError(f"{call}: buffer of shape {buffer.shape} cannot hold the patch "
                                 f"{list(shape)} without a copy") from None
        return buffer
    b = np.asarray(buffer)
    if b.size != n:
        raise ValueError(f"{call}: buffer of {b.size} elements for a patch of {n} ({list(shape)})")
    if b.dtype != a.dtype:
        if a.dtype.kind != "c" and b.dtype.kind == "c":
            raise TypeError(f"{call}: complex buffer for a {a.dtype} array")
        b = b.astype(a.dtype)
    # C order: the window's datatype path reads a buffer in its storage order
    return np.ascontiguousarray(b).reshape(shape)


def patch_slices(lo, hi, origin=None) -> tuple:
    """Slices of the patch ``[lo, hi)``, relative to ``origin`` if given."""
    if origin is None:
        return tuple(slice(l, h) for l, h in zip(lo, hi))
    return tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, origin))


def target_slices(a: GAArray, proc: int, plo, phi) -> tuple:
    """Slices of ``proc``'s window memory holding the global patch ``[plo, phi)``."""
    blo, _ = a.layout.block(a.layout.coords(proc))
    return tuple(slice(l - b + w, h - b + w) for l, h, b, w in zip(plo, phi, blo, a.ghosts))


@functools.lru_cache(maxsize=512)
def _subarray(dtype_str: str, sizes: tuple, subsizes: tuple, starts: tuple, skips: tuple | None = None):
    """A committed datatype for the box ``starts + [0, subsizes) * skips`` of a C-order array of
    ``sizes`` (MPI subarray; with ``skips``, nested strided vectors)."""
    MPI = mpi()
    base = basic_type(np.dtype(dtype_str))
    if skips is None or all(s == 1 for s in skips):
        t = base.Create_subarray(list(sizes), list(subsizes), list(starts), order=MPI.ORDER_C)
    else:
        item = np.dtype(dtype_str).itemsize
        strides = [item] * len(sizes)
        for d in range(len(sizes) - 2, -1, -1):
            strides[d] = strides[d + 1] * sizes[d + 1]
        t = base
        for d in range(len(sizes) - 1, -1, -1):
            t = t.Create_hvector(subsizes[d], 1, strides[d] * skips[d])
        off = sum(s * st for s, st in zip(starts, strides))
        total = strides[0] * sizes[0]
        t = t.Create_hindexed([1], [off]).Create_resized(0, total)
    t.Commit()
    return t


def basic_type(dt: np.dtype):
    """The predefined datatype of a NumPy dtype."""
    from ..datatypes.predefined import TypeDict

    return TypeDict[dt.char]


def box_types(a: GAArray, shape, lo, sub, skips=None):
    """``[datatype]`` of the box ``lo + [0, sub)`` (with ``skips``: strided) of a C-order array of ``shape``."""
    return [_subarray(a.dtype.str, tuple(shape), tuple(sub), tuple(lo), None if skips is None else tuple(skips))]


def device_sync(a: GAArray) -> None:
    """Complete this process's device copies to and from ``a`` (device arrays)."""
    if a.memory == "device":
        a.win.Flush_local_all()


def xp_like(x):
    """CuPy if ``x`` is a CuPy array, else None."""
    try:
        import cupy

        if isinstance(x, cupy.ndarray):
            return cupy
    except ImportError:
        pass
    return None


def patch_bounds(a: GAArray, lo, hi, call: str):
    """ga4py's ``_lohi``: no bounds, the whole array; ``lo`` alone, that one element; ``hi``
    without ``lo``, an error; else the half-open patch, checked against the array."""
    if lo is None and hi is None:
        return (0,) * a.ndim, a.dims
    if lo is None:
        raise ValueError(f"{call}: hi given without lo")
    lo = as_ints(lo, a.ndim, call, "lo")
    hi = tuple([x + 1 for x in lo]) if hi is None else as_ints(hi, a.ndim, call, "hi")
    for l, h, d in zip(lo, hi, a.dims):
        if l < 0 or h > d or h < l:
            return check_patch(call, a.dims, lo, hi)  # (raises, with the message)
    return lo, hi


def new_patch_buffer(a: GAArray, shape):
    """A new array for a patch of ``a``: NumPy, or a device array for device arrays."""
    if a.memory == "device":
        return new_device_buffer(shape, a.dtype)
    return np.empty(shape, a.dtype)


def new_device_buffer(shape, dt):
    """A new device array (``gpumpi._backends.device_empty``: simulated or CuPy)."""
    from .._backends import device_empty

    return device_empty(shape, dt, "ga")


def to_host(x):
    """``x`` as a NumPy array (a device array is copied to the host)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):
        return x.get()
    return np.asarray(x)


def is_sim(a: GAArray) -> bool:
    """Whether ``a``'s memory is on the simulated device."""
    return a.memory == "device" and getattr(a.local, "__gpumpi_sim__", False)


def xp_of(a: GAArray):
    """The array module that computes on ``a``'s memory: NumPy (host memory, and the simulated
    device, whose memory the host reaches), else CuPy."""
    if a.memory == "host" or is_sim(a):
        return np
    import cupy

    return cupy
