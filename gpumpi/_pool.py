"""Staging pools: reusable buffers for packed and staged messages (L2).

Theory of operation
===================
A fresh multi-megabyte buffer costs a page fault per 4 KiB on first touch (on a
device, an allocation call), more than the pack itself, so buffers come back to a
pool when their operation completes.  Sizes are rounded up to powers of two (at
least 4 KiB); a pool keeps at most ``KEEP`` buffers per size class and ``CAP``
bytes in all, and hands the rest to ``free``.  The host pool (:data:`HOST`) holds
NumPy byte arrays; a device pool (:func:`device`) holds addresses from an adapter.
"""

from __future__ import annotations

import numpy as _np


class Pool:
    """Reusable buffers in power-of-two size classes (see the module docstring)."""

    KEEP, CAP = 4, 256 << 20

    def __init__(self, alloc=lambda n: _np.empty(n, dtype=_np.uint8), free=None) -> None:
        self.alloc, self.release = alloc, free
        self.free: dict = {}
        self.kept = 0

    def get(self, n: int):
        k = max(12, (n - 1).bit_length())
        lst = self.free.get(k)
        if lst:
            try:
                a = lst.pop()
                self.kept -= 1 << k
                return a
            except IndexError:  # another thread took it
                pass
        return self.alloc(1 << k)

    def put(self, a, n: int | None = None) -> None:
        """Return ``a``, a buffer :meth:`get` gave for ``n`` bytes (host arrays know their size)."""
        k = max(12, ((a.nbytes if n is None else n) - 1).bit_length())
        lst = self.free.setdefault(k, [])
        if len(lst) < self.KEEP and self.kept + (1 << k) <= self.CAP:
            self.kept += 1 << k
            lst.append(a)
        elif self.release is not None:
            self.release(a)


#: The host pool: NumPy byte arrays.
HOST = Pool()

_device_pools: dict = {}  # adapter -> its device Pool (a forked rank has new adapters)


def device(ad) -> Pool:
    """The pool of device buffers of adapter ``ad`` (allocated and freed by it)."""
    p = _device_pools.get(ad)
    if p is None:
        p = _device_pools[ad] = Pool(ad.alloc, ad.free)
    return p
