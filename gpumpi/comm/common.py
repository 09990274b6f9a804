"""What every face of a communicator shares (L5): argument checks, the class registry, the
topology records.

Theory of operation
===================
The communicator classes are split by face (``base``, ``p2p``, ``objects``,
``collectives``, ``intra``, ``topo``, ``inter``).  A face that makes another face's
objects (a split makes an ``Intracomm``, ``Create_cart`` a ``Cartcomm``, ``Get_parent`` an
``Intercomm``) finds its class in :data:`CLASSES`, which the defining modules fill as
``gpumpi.comm`` imports them, so no face imports one above it and the base names none of
its subclasses.  :data:`TOPOLOGIES` holds each context's topology record
(:mod:`gpumpi.topology`): a duplicate keeps it, ``Free`` forgets it.
"""

from __future__ import annotations



from .. import topology as _topology
from ..constants import (
    COMM_TYPE_HW_GUIDED,
    COMM_TYPE_HW_UNGUIDED,
    COMM_TYPE_RESOURCE_GUIDED,
    COMM_TYPE_SHARED,
    UNDEFINED,
)
from ..info import Info

__all__ = ["CLASSES", "GROUP_TAGS", "IDUP_TAGS", "SPLIT_TYPES", "TOPOLOGIES", "comm_world", "graph_args", "idup_tag",
           "info_arg", "info_items", "int_arg", "periods_arg", "topo_comm", "weights_arg"]

#: communicator classes by kind ("comm", "intra", "inter", "cart", "graph", "distgraph"),
#: filled by the modules that define them
CLASSES: dict = {}

def int_arg(v, call: str, what: str) -> int:
    """An integer argument: ints and index-able objects; floats truncate, as mpi4py's C ints do."""
    if type(v) is int:
        return v
    if isinstance(v, float):
        return int(v)
    try:
        return v.__index__()
    except AttributeError:
        raise TypeError(f"{call}: {what} must be an integer ({type(v).__name__})") from None


def info_arg(info, call: str, none_ok: bool = True) -> None:
    if (info is None and none_ok) or isinstance(info, Info):
        return
    raise TypeError(f"{call}: info must be an Info{' or None' if none_ok else ''} ({type(info).__name__})")


def info_items(info):
    """The hints of ``info`` as a dict (None or INFO_NULL: none)."""
    return None if info is None or not info else dict(info.items())


def comm_world() -> "Intracomm":
    return CLASSES["comm"]._htable.find(0x44000000)  # COMM_WORLD (gpumpi.MPI sets it up)


SPLIT_TYPES = (UNDEFINED, COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED)
# negative tags on a parent's collective context for agreements outside its call order:
# Create_group -2 - tag (tag < 2**29), Idup attempts from -(IDUP_TAGS), Create_from_group
# (on COMM_WORLD) from -(GROUP_TAGS); ANY_TAG (-1) and user tags never collide with them
IDUP_TAGS = (1 << 29) + 2


def idup_tag(t: int, attempt: int) -> int:
    """The tag of an Idup's agreement attempt (``t``: the call's collective tag): negative, so
    never a user's or another call's, and four apart per call so that a rank one attempt ahead
    never matches the previous attempt's messages."""
    return -(IDUP_TAGS + (((t & 0x07FFFFFF) << 2) | (attempt & 3)))

GROUP_TAGS = (1 << 30) + 4






# --- topologies: the records (gpumpi.topology) by context id, and the topology classes ----------
TOPOLOGIES: dict = {}  # context id -> topology record of this process (Cart, Graph, DistGraph)


def topo_comm(parent: "Intracomm", cls, n: int, call: str, record):
    """Collective: a new ``cls`` communicator of the parent's first ``n`` processes (rank order
    kept: gpumpi does not reorder), with topology ``record(rank)``; COMM_NULL beyond them."""
    ctx = parent._agree_ctx(call)
    if parent._rank >= n:
        return cls()
    c = parent._new(ctx, parent._rw[:n], cls)
    TOPOLOGIES[ctx] = record(parent._rank)
    return c


def periods_arg(periods, ndims: int, call: str) -> list:
    """mpi4py: None is all False, a bool is that for every dimension, else ``ndims`` ints."""
    if periods is None:
        periods = False
    if isinstance(periods, bool):
        return [int(periods)] * ndims
    return _topology.ints(periods, call, "periods", ndims)


def graph_args(index, edges, call: str) -> tuple:
    """``(index, edges)``; an index in the standard form (leading 0, last = number of edges)
    loses its 0 (mpi4py's extension)."""
    index = _topology.ints(index, call, "index")
    edges = _topology.ints(edges, call, "edges")
    if index and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    return index, edges


def weights_arg(weights, n: int, call: str):
    """mpi4py's ``asarray_weights``: None/UNWEIGHTED -> None, WEIGHTS_EMPTY -> [], else ``n`` ints."""
    if weights is None or weights is _topology.UNWEIGHTED:
        return None
    if weights is _topology.WEIGHTS_EMPTY:
        if n > 0:
            raise ValueError(f"{call}: empty weights but nonzero degree")
        return []
    return _topology.ints(weights, call, "weights", n)


