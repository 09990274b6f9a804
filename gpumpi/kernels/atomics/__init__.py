"""Atomic instructions on raw addresses (L3): the element-wise atomicity of RMA windows, host and device.

Theory of operation
===================
An RMA window on one node is memory that every origin process updates itself: a host
window is a shared mapping (memfd), so the same physical page sits at a *different*
address in each process; a device window is device memory opened through CUDA IPC.
MPI makes ``Accumulate``, ``Get_accumulate``, ``Fetch_and_op`` and ``Compare_and_swap``
atomic per basic element (MPI-4.1 12.7.1), so two origins adding into one element never
lose an update.  Locks would do, but an instruction that the hardware makes atomic is
faster and needs nothing from the target: this package issues those instructions.

It is three modules, and this one re-exports their public names (callers use
``from gpumpi.kernels import atomics`` and ``atomics.<name>``):

* :mod:`._ops`: the operations (:data:`OPS`, by code) and the element types each takes
  (:func:`supported`), shared by both sides;
* :mod:`.host`: the host instructions (Numba ``@intrinsic`` emitting LLVM ``atomicrmw`` /
  ``cmpxchg``): :func:`accumulate`, :func:`fetch_and_op`, :func:`compare_and_swap`, the
  near path's ndarray entry points (:func:`fop_ndarray`, :func:`cas_ndarray`,
  :func:`acc_ndarray`, :func:`ndarray_layout`, :func:`raw`) and the ``int64`` words of locks
  and counters (:func:`load64`, :func:`store64`, :func:`cas64`, :func:`add64`, :func:`fence`);
* :mod:`.device`: the numba.cuda kernels (:func:`device_accumulate`,
  :func:`device_compare_and_swap`, and :func:`kernel_accumulate` /
  :func:`kernel_compare_and_swap` that launch them), which take the host instructions on
  simulated device memory.

Nothing here imports numba at import time: each side builds its compiled code on first use.
"""

from __future__ import annotations

from ._ops import OPS, supported
from .device import device_accumulate, device_compare_and_swap, kernel_accumulate, kernel_compare_and_swap
from .host import (acc_ndarray, accumulate, add64, cas64, cas_ndarray, compare_and_swap, fence, fetch_and_op,
                   fop_ndarray, load64, ndarray_layout, raw, store64)

__all__ = ["OPS", "supported", "accumulate", "fetch_and_op", "compare_and_swap", "fop_ndarray", "cas_ndarray",
           "acc_ndarray", "ndarray_layout", "load64", "store64", "cas64", "add64", "fence", "raw", "device_accumulate",
           "kernel_accumulate", "kernel_compare_and_swap", "device_compare_and_swap"]
