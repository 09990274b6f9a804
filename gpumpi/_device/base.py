"""What both device adapters share (L2): errors, pointer attributes, memory kinds, argument checks.

Theory of operation
===================
:mod:`gpumpi._device.cuda` (the real device) and :mod:`gpumpi._device.sim` (the
simulated one) implement one interface (see :mod:`gpumpi._device`); what they
both raise, return and check is defined here, once, below both of them and below
the package's selection code, so that no module of the package imports another
one that imports it back.

Memory kinds, as strings: ``"host"``, ``"device"``, ``"managed"`` and ``"pool"``
are what :class:`PointerInfo` reports for an address; ``"host"``, ``"device"``
and ``"sim"`` are the kinds of a :class:`gpumpi._arrays.BufferView` (which
takes them from here).
"""

from __future__ import annotations

__all__ = [
    "HANDLE_SIZE",
    "HOST",
    "DEVICE",
    "MANAGED",
    "POOL",
    "SIM",
    "IpcUnsupported",
    "StaleHandle",
    "CudaError",
    "PointerInfo",
]

#: bytes in an IPC handle (``cudaIpcMemHandle_t`` / ``cudaIpcEventHandle_t``)
HANDLE_SIZE = 64

DEVICE, HOST, MANAGED, POOL = "device", "host", "managed", "pool"
#: simulated device memory (a buffer's kind; the simulated device's own pointers say "device")
SIM = "sim"


class IpcUnsupported(Exception):
    """This memory or event cannot be shared through IPC here; fall back to staging."""


class StaleHandle(Exception):
    """The IPC handle names an allocation or event its exporter has freed (or a process that is gone)."""


class CudaError(RuntimeError):
    """A CUDA runtime or driver call failed."""


class PointerInfo:
    """What the driver knows about an address.

    ``kind``: ``"device"``, ``"host"``, ``"managed"`` or ``"pool"``; ``device``: the
    ordinal (None for host memory); ``base``/``size``: the allocation containing
    the address (None for pageable host memory, which belongs to no allocation);
    ``ipc_capable``: whether :meth:`ipc_export` can export it.
    """

    __slots__ = ("kind", "device", "base", "size", "ipc_capable")

    def __init__(self, kind: str, device: int | None, base: int | None, size: int | None,
                 ipc_capable: bool = False) -> None:
        self.kind = kind
        self.device = device
        self.base = base
        self.size = size
        self.ipc_capable = ipc_capable

    def __repr__(self) -> str:
        base = "None" if self.base is None else f"{self.base:#x}"
        return (f"PointerInfo(kind={self.kind!r}, device={self.device}, base={base}, size={self.size}, "
                f"ipc_capable={self.ipc_capable})")

    def __eq__(self, other) -> bool:
        if not isinstance(other, PointerInfo):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # mutable value


def _nonneg(call: str, what: str, x) -> int:
    """``x`` as a non-negative int; TypeError/ValueError naming ``call`` and ``what`` otherwise."""
    try:
        v = x.__index__()
    except AttributeError:
        raise TypeError(f"{call}: {what} must be an integer ({type(x).__name__})") from None
    if v < 0:
        raise ValueError(f"{call}: {what} must be >= 0 ({v})")
    return v


def checked_nbytes(call: str, n) -> int:
    return _nonneg(call, "nbytes", n)


def checked_address(call: str, a) -> int:
    return _nonneg(call, "address", a)
