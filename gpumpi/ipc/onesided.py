"""The remotes one-sided transports hand windows: mapped host memory and device memory (L4).

Theory of operation
===================
A :class:`gpumpi.ipc.base.Remote` is one window member's memory as this rank reaches it.
Several transports reach memory the same two ways, so the two remotes live here once:

* :class:`Mapped` -- host memory the CPU of this process addresses: our own memory, or a
  peer's memfd mapped here (``shm``).  Reads and writes are ``memmove``.  Where every
  origin reaches the memory with the CPU (``atomic``), elements are updated with the host
  atomic instructions of :mod:`gpumpi.kernels.atomics` (``atomicrmw`` or a ``cmpxchg``
  loop), which need an address that is a multiple of the element's size.  A mapped
  remote that is not atomic is the owner's view of memory its peers reach some other
  way (cross-memory attach): its owner must update it as they do.
* :class:`DeviceMemory` -- device memory, ours or a peer's opened by its IPC handle:
  copies on the stream ``stream_of(adapter)`` gives, synchronized before they return;
  accumulates and compare-and-swap are device atomics in kernels launched on the mapped
  memory (the simulated adapter runs them as host instructions on its shared mapping,
  atomic between processes).
"""

from __future__ import annotations

import ctypes

import numpy as np

from .base import Remote

__all__ = ["Mapped", "DeviceMemory", "atomics"]

_ATOMICS: list = []


def atomics():
    """:mod:`gpumpi.kernels.atomics`, imported on first use (it compiles with numba)."""
    if _ATOMICS:
        return _ATOMICS[0]
    from ..kernels import atomics as A

    _ATOMICS.append(A)
    return A


class Mapped(Remote):
    """Host memory mapped in this process at ``base`` (see the module notes)."""

    mapped = True

    def __init__(self, peer: int, base: int, atomic: bool, release=None) -> None:
        super().__init__(peer, base)
        self.atomic = atomic
        self._release = release

    def read(self, segs, dst: int) -> None:
        for a, n in segs:
            ctypes.memmove(dst, a, n)
            dst += n

    def write(self, src: int, segs) -> None:
        for a, n in segs:
            ctypes.memmove(a, src, n)
            src += n

    def supported(self, op: str, dtype) -> bool:
        return self.atomic and atomics().supported(op, dtype)

    def cas_supported(self, dtype, addr: int) -> bool:
        size = np.dtype(dtype).itemsize
        return self.atomic and size in (1, 2, 4, 8) and not addr % size

    def accumulate(self, addr: int, offsets, values, op: str, fetch=None) -> None:
        atomics().accumulate(addr, offsets, values, op, fetch)

    def compare_and_swap(self, addr: int, compare: bytes, value: bytes, dtype) -> bytes:
        dt = np.dtype(dtype)
        old = atomics().compare_and_swap(addr, np.frombuffer(compare, dt)[0], np.frombuffer(value, dt)[0], dt)
        return np.array([old], dt).tobytes()

    def close(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None


class DeviceMemory(Remote):
    """Device memory of adapter ``ad`` at ``base`` (see the module notes)."""

    atomic = True

    def __init__(self, peer: int, ad, base: int, stream_of, release=None) -> None:
        super().__init__(peer, base)
        self.device = ad
        self._stream_of = stream_of
        self._release = release

    def _stream(self):
        return self._stream_of(self.device) if self._stream_of is not None else None

    def read(self, segs, dst: int) -> None:
        ad, s = self.device, self._stream()
        for a, n in segs:
            ad.memcpy(dst, a, n, s)
            dst += n
        ad.stream_synchronize(s)

    def write(self, src: int, segs) -> None:
        ad, s = self.device, self._stream()
        for a, n in segs:
            ad.memcpy(a, src, n, s)
            src += n
        ad.stream_synchronize(s)

    def supported(self, op: str, dtype) -> bool:
        return atomics().supported(op, dtype)

    def cas_supported(self, dtype, addr: int) -> bool:
        return True

    def accumulate(self, addr: int, offsets, values, op: str, fetch=None) -> None:
        """The device kernels on the memory, offsets and values staged in device memory."""
        ad, s = self.device, self._stream()
        n = len(values)
        size = values.dtype.itemsize
        offsets = np.ascontiguousarray(offsets, np.int64)
        values = np.ascontiguousarray(values)
        tmp = ad.alloc(n * 8 + 2 * n * size)
        try:
            o_dev, v_dev = tmp, tmp + n * 8
            f_dev = v_dev + n * size if fetch is not None else None
            ad.memcpy(o_dev, offsets.ctypes.data, n * 8, s)
            ad.memcpy(v_dev, values.ctypes.data, n * size, s)
            atomics().device_accumulate(ad, addr, o_dev, v_dev, n, op, values.dtype, f_dev, s)
            if fetch is not None:
                ad.memcpy(fetch.ctypes.data, f_dev, n * size, s)
            ad.stream_synchronize(s)
        finally:
            ad.free(tmp)

    def compare_and_swap(self, addr: int, compare: bytes, value: bytes, dtype) -> bytes:
        return atomics().device_compare_and_swap(self.device, addr, compare, value, dtype, self._stream())

    def sync(self) -> None:
        self.device.stream_synchronize(self._stream())

    def close(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None
