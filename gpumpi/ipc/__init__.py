"""Transports (L4): how bytes move between the ranks of a job.

``base`` is the interface and the registry; importing this package imports every
transport module, and each registers itself there: ``shm`` (frames over per-pair rings,
and the host push fallback), ``cma`` (host regions by cross-memory attach), ``self`` (a
rank to itself), ``cuda_ipc`` (device regions by CUDA IPC handles), ``staging`` (device
data pushed through page-locked slabs), ``mpi`` (frames and data for ranks on other nodes,
through an MPI library via mpi4py).  ``jobseg``, ``ring`` and ``slab`` are the shared
memory they are built on.
"""

from . import cma, cuda_ipc, mpi, shm, staging  # noqa: F401  (each registers itself)
from . import self as _self  # noqa: F401
