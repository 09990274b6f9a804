"""Absolute addresses (L1 pure core): MPI_Get_address, MPI_Aint_add, MPI_Aint_diff.

Theory of operation
===================
An MPI address (``Aint``) is a plain integer: the address of a byte in this
process.  Datatypes built from absolute addresses (``Get_address`` of each
buffer as the displacements of a struct, for instance) describe memory relative
to address zero, and a message names that origin with ``MPI.BOTTOM`` as its
buffer (seed 004, "Absolute Addresses").  ``Aint_add``/``Aint_diff`` are the
portable arithmetic on such integers: 64-bit two's-complement sums and
differences, wrapping like C ``MPI_Aint``.

``Get_address(location)`` is the address of the first byte of a buffer object,
as mpi4py: any object exposing memory (buffer protocol, NumPy, DLPack, CUDA
array interface; contiguous), and 0 for ``BOTTOM`` or ``None``.  Reading an
object's address needs the buffer layer (L2), so the lookup itself is installed
by ``datatypes.plan`` (``_core.install_memory_ops(address=...)``); the MPI facade
re-exports these three functions.
"""

from __future__ import annotations

import operator

from ..constants import BOTTOM
from ._core import memory_op

__all__ = ["Get_address", "Aint_add", "Aint_diff"]

_MASK = (1 << 64) - 1
_SIGN = 1 << 63


def _aint(value, what: str, call: str) -> int:
    if isinstance(value, float):
        value = int(value)  # mpi4py's Aint conversion truncates floats
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{call}: {what} must be an integer (got {type(value).__name__})") from None
    if not -_SIGN <= v < _SIGN:
        raise OverflowError(f"{call}: {what} does not fit in an MPI_Aint ({v})")
    return v


def _wrap(v: int) -> int:
    v &= _MASK
    return v - (1 << 64) if v & _SIGN else v


def Get_address(location) -> int:
    """Get the address of a location in memory (MPI_Get_address); 0 for ``BOTTOM``/``None``."""
    if location is None or location is BOTTOM:
        return 0
    return memory_op("address", "Get_address")(location)


def Aint_add(base: int, disp: int) -> int:
    """Return the sum of base address and displacement (MPI_Aint_add)."""
    return _wrap(_aint(base, "base", "Aint_add") + _aint(disp, "disp", "Aint_add"))


def Aint_diff(addr1: int, addr2: int) -> int:
    """Return the difference between absolute addresses (MPI_Aint_diff)."""
    return _wrap(_aint(addr1, "addr1", "Aint_diff") - _aint(addr2, "addr2", "Aint_diff"))
