"""Global Arrays handles: describing, allocating and destroying arrays, ``terminate``, the memory cap (L6).

Theory of operation
===================
An array is one RMA window over its group's communicator: every member allocates its own
block (plus its ghost layers) as window memory -- shared host memory (``Win.Allocate``) or
device memory (``memory="device"``) -- and opens a shared passive-target epoch on every
member (``Lock_all``, ``MODE_NOCHECK``) that lasts as long as the array.  The distribution
(:mod:`gpumpi.ga._layout`) is the same pure data on every member, so locating a patch is local
arithmetic (:mod:`gpumpi.ga.inquiry`) and every one-sided operation is carried out by the
caller alone (:mod:`gpumpi.ga.transfers`).

A handle is described first (``set_data``, the one setter required, then ``set_chunk``,
``set_irreg_distr``, ``set_ghosts``, ``set_pgroup``, ``set_memory_dev``), then allocated,
collectively over its group.  ``allocate`` maps here the memory of every member this process
reaches (host memory on this node: ``Win.Shared_query``): the views that transfers copy into
directly (``DIRECT = False`` turns them off, for tests of the window's datatype path).  The
members also agree there on the way every accumulate to the array goes: where every member
maps every member's memory (host arrays on one node) an accumulate lock per member -- an
int64 word in a small side window, also reached through its address for the CPU's
compare-and-swap -- and an in-place add; else the window's element-wise atomic
``Accumulate``.  A member over its memory cap (``set_memory_limit``) makes every member
refuse the allocation (``allocate`` returns False, the ``create*`` family 0).

``create*``, ``duplicate`` and :class:`~gpumpi.ga.GlobalArray` describe and allocate in one
step (:func:`make_array` with the ``setup`` of :func:`described`); a handle that failed is
forgotten.  Handles are never reused (``deallocate`` is ``destroy``); ``terminate`` destroys
every live array and the mutexes, then drops the state (:mod:`gpumpi.ga.state`).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np

from ..rma import keep_memory
from . import state, stats
from ._layout import MAX_DIM, irregular, regular
from .groups import default_group, group_by_handle, member_comm
from .state import TYPE_CODES, GAArray, GAError, as_ints, drop_state, dtype, initialize, mpi, started
from .synchronization import destroy_mutexes

__all__ = [
    "DIRECT",
    "allocate", "arr", "check_handle", "create", "create_ghosts", "create_ghosts_irreg", "create_handle",
    "create_irreg", "deallocate", "described", "destroy", "duplicate", "initialize_ltd", "inquire_memory",
    "make_array", "memory_avail", "memory_limited", "need_data", "set_array_name", "set_chunk", "set_data",
    "set_ghosts", "set_irreg_distr", "set_memory_dev", "set_memory_limit", "set_pgroup", "terminate", "uses_ma",
    "valid_handle",
]


# --- array records by handle ---------------------------------------------------------------------
def arr(g_a, call: str, allocated: bool = True) -> GAArray:
    """The array behind handle ``g_a``; GAError if it was never created or is destroyed, or (with
    ``allocated``) is not allocated yet."""
    st = started()
    try:
        a = st.arrays[int(g_a)]
    except (KeyError, TypeError, ValueError):
        raise GAError(f"{call}: invalid array handle ({g_a!r}): never created or already destroyed") from None
    if allocated and not a.allocated:
        raise GAError(f"{call}: array {a.handle} is not allocated yet (call allocate)")
    return a


def create_handle() -> int:
    """A new array handle to describe with ``set_*`` and ``allocate`` (GA_Create_handle)."""
    st = started()
    h = st.next_handle
    st.next_handle += 1
    st.arrays[h] = GAArray(h)
    return h


def set_data(g_a, dims, gtype) -> None:
    """Give a new handle its extents and element type (GA_Set_data; the one setter required)."""
    a = arr(g_a, "set_data", False)
    _unallocated(a, "set_data")
    dims = as_ints(dims, None, "set_data", "dims")
    if not 1 <= len(dims) <= MAX_DIM:
        raise ValueError(f"set_data: 1 to {MAX_DIM} dimensions ({len(dims)})")
    if min(dims) < 1:
        raise ValueError(f"set_data: extents must be positive ({list(dims)})")
    a.dtype = dtype(gtype)
    a.gtype = int(gtype) if isinstance(gtype, (int, np.integer)) else TYPE_CODES[a.dtype]
    a.dims = dims


def _unallocated(a: GAArray, call: str) -> None:
    if a.allocated:
        raise GAError(f"{call}: array {a.handle} is already allocated")


def set_array_name(g_a, name) -> None:
    """GA_Set_array_name."""
    a = arr(g_a, "set_array_name", False)
    a.name = str(name)


def set_chunk(g_a, chunk) -> None:
    """Minimum block extents (GA_Set_chunk; -1 or None: GA chooses)."""
    a = arr(g_a, "set_chunk", False)
    _unallocated(a, "set_chunk")
    need_data(a, "set_chunk")
    a.chunk = None if chunk is None else as_ints(chunk, a.ndim, "set_chunk", "chunk")


def set_irreg_distr(g_a, map, block) -> None:
    """Irregular distribution: ``block[d]`` blocks along d starting at ``map`` (GA_Set_irreg_distr)."""
    a = arr(g_a, "set_irreg_distr", False)
    _unallocated(a, "set_irreg_distr")
    need_data(a, "set_irreg_distr")
    a.irreg = (as_ints(block, a.ndim, "set_irreg_distr", "block"), as_ints(map, None, "set_irreg_distr", "map"))


def set_ghosts(g_a, width) -> None:
    """Ghost layers on each side of every block (GA_Set_ghosts)."""
    a = arr(g_a, "set_ghosts", False)
    _unallocated(a, "set_ghosts")
    need_data(a, "set_ghosts")
    w = as_ints(width, a.ndim, "set_ghosts", "width")
    if min(w) < 0:
        raise ValueError(f"set_ghosts: widths must be >= 0 ({list(w)})")
    a.ghosts = w


def set_pgroup(g_a, pgroup) -> None:
    """The processor group the array lives on (GA_Set_pgroup; default: the default group)."""
    a = arr(g_a, "set_pgroup", False)
    _unallocated(a, "set_pgroup")
    a.group = group_by_handle(pgroup, "set_pgroup")


def set_memory_dev(g_a, device) -> None:
    """Where the array's memory lives: ``"host"`` or ``"device"`` (GA_Set_memory_dev; gpumpi
    also takes ``True``/``False``)."""
    a = arr(g_a, "set_memory_dev", False)
    _unallocated(a, "set_memory_dev")
    kind = {True: "device", False: "host"}.get(device, device) if isinstance(device, bool) else str(device).lower()
    if kind in ("gpu", "cuda"):
        kind = "device"
    if kind not in ("host", "device"):
        raise ValueError(f"set_memory_dev: memory must be 'host' or 'device' ({device!r})")
    a.memory = kind


def need_data(a: GAArray, call: str) -> None:
    """GAError unless ``a`` has its extents and type (``set_data``)."""
    if a.dims is None:
        raise GAError(f"{call}: array {a.handle} has no data description yet (call set_data first)")


def allocate(g_a) -> bool:
    """Allocate a described array on its group (GA_Allocate). Collective over the group."""
    MPI = mpi()
    a = arr(g_a, "allocate", False)
    _unallocated(a, "allocate")
    need_data(a, "allocate")
    st = state.S
    g = a.group if a.group is not None else default_group()
    a.group = g
    comm = member_comm(g, "allocate")
    if a.ghosts is None:
        a.ghosts = (0,) * a.ndim
    if a.irreg is not None:
        block, mp = a.irreg
        a.layout = irregular(a.dims, g.size, block, mp)
    else:
        a.layout = regular(a.dims, g.size, a.chunk)
    a.me = comm.Get_rank()
    shape = a.memshape(a.me)
    nbytes = int(np.prod(shape, dtype=np.int64)) * a.dtype.itemsize
    if st.limit and st.used + nbytes > st.limit:
        ok = 0
    else:
        ok = 1
    if comm.allreduce(ok, op=MPI.MIN) == 0:  # a member over its memory limit: nobody allocates
        return False
    a.win = MPI.Win.Allocate(nbytes, a.dtype.itemsize, comm=comm, memory=a.memory)
    a.win.Lock_all(MPI.MODE_NOCHECK)
    st.used += nbytes
    stats.memory(st.used)
    _map_views(a)
    # accumulates: where every member maps every member's memory, a per-target lock and an
    # in-place NumPy add (GA's ARMCI way, memory bandwidth); else the window's element-wise
    # atomic Accumulate.  Every member must take the same way, so they agree on it.
    mapped = int(a.memory == "host" and all(v is not None for v in a.views))
    if comm.allreduce(mapped, op=MPI.MIN):
        a.acclock = MPI.Win.Allocate(8, 8, comm=comm)
        np.frombuffer(a.acclock.tomemory(), np.int64)[:] = 0
        comm.Barrier()
        a.acclock.Lock_all(MPI.MODE_NOCHECK)
        words = [np.frombuffer(a.acclock.Shared_query(r)[0], np.int64) for r in range(g.size)]
        if all(w.size for w in words):  # the words themselves, taken with the CPU's compare-and-swap
            a.lockaddr = [w.__array_interface__["data"][0] for w in words]
            a.lockkeep = words
    a.allocated = True
    stats.moved(stats.CREATE, 0, 0, 0)
    return True


#: whether one-sided operations copy directly to and from members' memory mapped here (host
#: arrays on this node); False sends every transfer through the window's datatype path (tests)
DIRECT = True


def _map_views(a: GAArray) -> None:
    """The array of this process's memory, and (host memory) of every member's mapped here."""
    mem = a.win.tomemory()
    shape = a.memshape(a.me)
    if a.memory == "host":
        a.mem = mem
        a.local = np.frombuffer(mem, a.dtype).reshape(shape) if int(np.prod(shape)) else np.empty(shape, a.dtype)
        views = []
        for r in range(a.group.size):
            if r == a.me:
                views.append(a.local)
                continue
            shp = a.memshape(r)
            buf, _ = a.win.Shared_query(r)
            n = int(np.prod(shp))
            views.append(np.frombuffer(buf, a.dtype).reshape(shp) if n and len(buf) >= n * a.dtype.itemsize
                         else None)
        a.views = views if DIRECT else [None] * a.group.size
    else:
        a.mem = mem
        a.local = _device_view(mem, a.dtype, shape)
        a.views = [None] * a.group.size


def _device_view(mem, dt, shape):
    """A device array of ``dt`` and ``shape`` over the bytes of device array ``mem``."""
    from .._device.simarray import SimDeviceArray

    if isinstance(mem, SimDeviceArray):
        n = math.prod(shape)
        raw = mem._arr[: n * dt.itemsize] if n else np.empty(0, np.uint8)
        return SimDeviceArray._view(raw.view(dt).reshape(shape), mem._mem)
    n = math.prod(shape)
    return mem[: n * dt.itemsize].view(dt).reshape(shape)


def make_array(setup) -> int:
    """A new array: ``setup(handle)`` describes it (``set_*``), then it is allocated; 0 if
    allocation was refused (memory limit); on any error the handle is forgotten."""
    h = create_handle()
    try:
        setup(h)
        if allocate(h):
            return h
    except BaseException:
        state.S.arrays.pop(h, None)
        raise
    state.S.arrays.pop(h, None)
    return 0


def described(gtype, dims, name, pgroup, chunk=None, width=None, block=None, map=None, memory=None):
    """The ``setup`` of :func:`make_array` for the ``create*`` family (and :class:`GlobalArray`)."""

    def setup(h: int) -> None:
        set_data(h, dims, gtype)
        set_array_name(h, name)
        if width is not None:
            set_ghosts(h, width)
        if chunk is not None:
            set_chunk(h, chunk)
        if block is not None or map is not None:
            set_irreg_distr(h, map, block)
        set_pgroup(h, pgroup if pgroup is not None and int(pgroup) >= 0 else state.S.default)
        if memory is not None:
            set_memory_dev(h, memory)

    return setup


def create(gtype, dims, name: str = "", chunk=None, pgroup: int = -1) -> int:
    """Create a regularly distributed array (NGA_Create; ga4py ``create``). Collective."""
    return make_array(described(gtype, dims, name, pgroup, chunk=chunk))


def create_irreg(gtype, dims, block, map, name: str = "", pgroup: int = -1) -> int:
    """Create an irregularly distributed array (NGA_Create_irreg; ga4py ``create_irreg``). Collective."""
    return make_array(described(gtype, dims, name, pgroup, block=block, map=map))


def create_ghosts(gtype, dims, width, name: str = "", chunk=None, pgroup: int = -1) -> int:
    """Create a regular array with ghost layers (NGA_Create_ghosts). Collective."""
    return make_array(described(gtype, dims, name, pgroup, chunk=chunk, width=width))


def create_ghosts_irreg(gtype, dims, width, block, map, name: str = "", pgroup: int = -1) -> int:
    """Create an irregular array with ghost layers (NGA_Create_ghosts_irreg). Collective."""
    return make_array(described(gtype, dims, name, pgroup, width=width, block=block, map=map))


def duplicate(g_a, name: str = "") -> int:
    """A new array with ``g_a``'s type, shape, distribution, ghosts, group and memory; its
    contents are not copied (GA_Duplicate). Collective."""
    a = arr(g_a, "duplicate")

    def setup(h: int) -> None:
        b = state.S.arrays[h]
        b.name, b.gtype, b.dtype, b.dims = str(name), a.gtype, a.dtype, a.dims
        b.chunk, b.ghosts, b.group, b.memory = a.chunk, a.ghosts, a.group, a.memory
        b.irreg = (a.layout.grid, tuple(itertools.chain.from_iterable(a.layout.starts)))

    return make_array(setup)


def destroy(g_a) -> None:
    """Free an array (GA_Destroy). Collective over its group."""
    a = arr(g_a, "destroy", False)
    if a.allocated:
        member_comm(a.group, "destroy")
        stats.moved(stats.DESTROY, 0, 0, 0)
        if a.accesses:  # GA frees anyway (pnga_destroy does not look); the views must not dangle
            warnings.warn(f"destroy: array {a.handle} has {a.accesses} access(es) not released; freed as GA does, "
                          f"their views keep this process's memory of it mapped until exit", RuntimeWarning,
                          stacklevel=2)
            keep_memory(a.win)
        a.win.Unlock_all()
        a.views = a.local = a.mem = None
        a.win.Free()
        a.lockkeep = None
        if a.acclock is not None:
            a.acclock.Unlock_all()
            a.acclock.Free()
            a.acclock = None
        a.plans = {}
        a.rinc = {}
        a.lockaddr = a.lockkeep = None
        state.S.used -= int(np.prod(a.memshape(a.me), dtype=np.int64)) * a.dtype.itemsize
    state.S.fenced.discard(a.handle)
    del state.S.arrays[a.handle]


def deallocate(g_a) -> None:
    """GA_Deallocate: the same as :func:`destroy` here (a handle is not reused)."""
    destroy(g_a)


def valid_handle(g_a) -> bool:
    """Whether ``g_a`` is a live array (GA_Valid_handle)."""
    try:
        arr(g_a, "valid_handle", False)
        return True
    except GAError:
        return False


def check_handle(g_a, string: str = "") -> None:
    """Raise :class:`GAError` with ``string`` if ``g_a`` is not a live array (GA_Check_handle)."""
    if not valid_handle(g_a):
        raise GAError(f"{string or 'check_handle'}: invalid array handle ({g_a!r})")


# --- the end of GA ---------------------------------------------------------------------------------
def terminate() -> None:
    """Destroy every live array and the mutexes, then stop GA (GA_Terminate). Collective."""
    if not state.S.initialized:
        return
    for h in sorted(state.S.arrays):
        destroy(h)
    if state.S.mutexes is not None:
        destroy_mutexes()
    drop_state()


# --- memory limits ----------------------------------------------------------------------------
def set_memory_limit(limit: int) -> None:
    """Cap, in bytes, on this process's GA array memory; 0: none (GA_Set_memory_limit)."""
    started().limit = max(0, int(limit))


def initialize_ltd(limit: int) -> None:
    """Initialise with a memory cap (GA_Initialize_ltd)."""
    initialize()
    set_memory_limit(limit)


def inquire_memory() -> int:
    """Bytes of GA array memory this process uses (GA_Inquire_memory)."""
    return started().used


def memory_avail() -> int:
    """Bytes left under the cap, or -1 without one (GA_Memory_avail)."""
    st = started()
    return st.limit - st.used if st.limit else -1


def memory_limited() -> bool:
    """Whether a cap is set (GA_Memory_limited)."""
    return bool(started().limit)


def uses_ma() -> bool:
    """GA's Memory Allocator is not used (GA_Uses_ma)."""
    return False
