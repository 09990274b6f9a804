"""Global Arrays message passing on plain buffers: ``gop``, ``brdcst`` and their ``pgroup_*`` forms (L6).

Theory of operation
===================
No global array is involved: ``gop`` is one ``Allreduce`` of a C-contiguous buffer over the
default group (``pgroup_gop``: a given group), in place when the buffer is a writable NumPy
array of a supported type, and returns it; ``brdcst`` is one ``Bcast`` of the buffer's bytes.  Absolute
reductions take absolute values first; on complex values ``max``/``min``/``absmax``/``absmin``
act on the real and imaginary parts apart (the buffer viewed as reals).

Choices where GA's source, its manual and ga4py differ, are silent, or fall short:

* ``gop`` reduces the whole array (ga4py: only ``len(X)`` elements of an N-D array); ``"*"`` on
  complex values is the complex product (GA multiplies real and imaginary parts apart);
  ``max``/``min``/``absmax``/``absmin`` on complex values act on real and imaginary parts
  apart, as GA does.
"""

from __future__ import annotations

import numpy as np

from .groups import default_comm, group_or_default, member_comm
from .ops_common import NUMERIC
from .state import mpi

__all__ = [
    "brdcst", "gop", "gop_absmax", "gop_absmin", "gop_add", "gop_max", "gop_min", "gop_multiply", "pgroup_brdcst",
    "pgroup_gop", "pgroup_gop_absmax", "pgroup_gop_absmin", "pgroup_gop_add", "pgroup_gop_max", "pgroup_gop_min",
    "pgroup_gop_multiply",
]


# --- message passing: gop and brdcst --------------------------------------------------------------
_GOPS = ("+", "*", "max", "min", "absmax", "absmin", "or")


def _gop(comm, X, op, call: str):
    MPI = mpi()
    if isinstance(op, bytes):
        op = op.decode()
    if op not in _GOPS:
        raise ValueError(f"{call}: unknown operation ({op!r}; one of {', '.join(_GOPS)})")
    x = X if isinstance(X, np.ndarray) else np.asarray(X)
    if not x.flags.c_contiguous:
        raise ValueError(f"{call}: the buffer must be contiguous")
    if x.dtype not in NUMERIC:
        raise TypeError(f"{call}: type not supported ({x.dtype})")
    if op == "or" and x.dtype.kind != "i":
        raise TypeError(f"{call}: 'or' needs an integer type ({x.dtype})")
    if not x.flags.writeable:
        x = x.copy()
    flat = x.reshape(-1)
    work = flat.view(flat.real.dtype) if x.dtype.kind == "c" and op not in ("+", "*") else flat
    if op in ("absmax", "absmin"):
        np.abs(work, out=work)
    mop = {"+": MPI.SUM, "*": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "absmax": MPI.MAX, "absmin": MPI.MIN,
           "or": MPI.BOR}[op]
    out = np.empty_like(work)
    comm.Allreduce(work, out, op=mop)
    work[...] = out
    return x


def gop(X, op):
    """Reduce ``X`` element-wise over the default group and return it (GA_Igop/Lgop/Fgop/Dgop/
    Cgop/Zgop). Collective.

    ``op``: ``"+"``, ``"*"``, ``"max"``, ``"min"``, ``"absmax"``, ``"absmin"`` (absolute values
    reduced), ``"or"`` (integers). A C-contiguous writable NumPy array of a supported type is
    reduced in place and returned; anything else is converted and the new array returned."""
    return _gop(default_comm(), X, op, "gop")


def gop_add(X):
    """``gop(X, "+")`` (GA_Dgop with "+")."""
    return gop(X, "+")


def gop_multiply(X):
    """``gop(X, "*")`` (GA_Dgop with "*")."""
    return gop(X, "*")


def gop_max(X):
    """``gop(X, "max")`` (GA_Dgop with "max")."""
    return gop(X, "max")


def gop_min(X):
    """``gop(X, "min")`` (GA_Dgop with "min")."""
    return gop(X, "min")


def gop_absmax(X):
    """``gop(X, "absmax")`` (GA_Dgop with "absmax")."""
    return gop(X, "absmax")


def gop_absmin(X):
    """``gop(X, "absmin")`` (GA_Dgop with "absmin")."""
    return gop(X, "absmin")


def _brdcst(comm, buffer, root, call: str):
    x = buffer if isinstance(buffer, np.ndarray) else np.asarray(buffer)
    if not x.flags.c_contiguous:
        raise ValueError(f"{call}: the buffer must be contiguous")
    if not x.flags.writeable:
        x = x.copy()
    root = int(root)
    if not 0 <= root < comm.Get_size():
        raise ValueError(f"{call}: root out of range ({root}, group size {comm.Get_size()})")
    if x.nbytes:
        comm.Bcast(x.reshape(-1).view(np.uint8), root=root)
    return x


def brdcst(buffer, root: int = 0):
    """Broadcast ``buffer``'s bytes from ``root`` over the default group and return the array
    (GA_Brdcst). Collective."""
    return _brdcst(default_comm(), buffer, root, "brdcst")


def _pgroup_comm(pgroup, call: str):
    return member_comm(group_or_default(pgroup, call), call)


def pgroup_gop(pgroup, X, op):
    """:func:`gop` over processor group ``pgroup`` (GA_Pgroup_dgop etc.; -1: the default group)."""
    return _gop(_pgroup_comm(pgroup, "pgroup_gop"), X, op, "pgroup_gop")


def pgroup_gop_add(pgroup, X):
    """``pgroup_gop(pgroup, X, "+")``."""
    return pgroup_gop(pgroup, X, "+")


def pgroup_gop_multiply(pgroup, X):
    """``pgroup_gop(pgroup, X, "*")``."""
    return pgroup_gop(pgroup, X, "*")


def pgroup_gop_max(pgroup, X):
    """``pgroup_gop(pgroup, X, "max")``."""
    return pgroup_gop(pgroup, X, "max")


def pgroup_gop_min(pgroup, X):
    """``pgroup_gop(pgroup, X, "min")``."""
    return pgroup_gop(pgroup, X, "min")


def pgroup_gop_absmax(pgroup, X):
    """``pgroup_gop(pgroup, X, "absmax")``."""
    return pgroup_gop(pgroup, X, "absmax")


def pgroup_gop_absmin(pgroup, X):
    """``pgroup_gop(pgroup, X, "absmin")``."""
    return pgroup_gop(pgroup, X, "absmin")


def pgroup_brdcst(pgroup, buffer, root: int = 0):
    """:func:`brdcst` over processor group ``pgroup`` (GA_Pgroup_brdcst; ``root`` is a rank in it)."""
    return _brdcst(_pgroup_comm(pgroup, "pgroup_brdcst"), buffer, root, "pgroup_brdcst")
