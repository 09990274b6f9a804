"""Global Arrays runtime: arrays on windows, groups, one-sided operations, synchronization (L6).

Theory of operation
===================
An array is one RMA window over its group's communicator: every member allocates its own
block (plus its ghost layers) as window memory -- shared host memory (``Win.Allocate``) or
device memory (``memory="device"``) -- and opens a shared passive-target epoch on every
member (``Lock_all``, ``MODE_NOCHECK``) that lasts as long as the array.  The distribution
(:mod:`gpumpi.ga._layout`) is the same pure data on every member, so ``locate``,
``locate_region`` and ``distribution`` are local arithmetic, and every one-sided operation is
carried out by the caller alone, at call time, whatever its targets are doing:

* a patch is split by ``locate_region`` into one piece per owner; each piece is one transfer:
  a NumPy (or CuPy) slice assignment where the owner's memory is mapped here (host memory on
  this node: ``Win.Shared_query``), else one ``Win.Put``/``Get``/``Accumulate`` whose origin
  and target are subarray datatypes (``Create_subarray``; strided patches: vector types);
* ``acc`` (and ``scatter_acc``, ``strided_acc``, ``periodic_acc``) add ``alpha * buffer``
  atomically with respect to every other accumulate: where every member maps every member's
  memory (host arrays on one node) the caller takes the owner's *accumulate lock* (an int64
  word per member in a small side window, compare-and-swap, holder rank + 1, so a dead holder
  is noticed) and adds in place with NumPy at memory bandwidth -- GA's own (ARMCI) way; else
  it is ``Win.Accumulate(SUM)``, element-wise atomic (device atomics, or the window's own
  lock, see :mod:`gpumpi._rma`).  The members agree on the way at ``allocate``, so every
  accumulate to one array goes the same way.  Accumulates are *not* atomic with respect to
  concurrent puts and gets of the same elements, nor to ``read_inc`` of the same element
  (GA's rules);
* ``read_inc`` is one ``Win.Fetch_and_op(SUM)``: a true atomic instruction on the owner's element.

Operations are complete when they return (the copies are done, the device synchronized), so
``nbput``/``nbget``/``nbacc`` complete at once and ``nbwait`` only retires the handle;
``fence`` flushes the windows touched since ``init_fence``; ``sync`` flushes every window
and is a barrier of the default group.  Collective array operations (:mod:`gpumpi.ga._ops`)
sync at entry and exit unless ``mask_sync`` turned one of them off for the next one.

Groups (``pgroup_*``) are communicators: the world group is a private duplicate of
``COMM_WORLD``; ``pgroup_create`` makes one with ``Create_group`` (only members need to
call it); ``pgroup_set_default`` changes which one ``nodeid``, ``nnodes``, ``sync``,
``brdcst``, ``gop`` and new arrays use.  Mutexes are int64 words in a window of the
default group, taken with ``Compare_and_swap`` (holder rank + 1), so a waiter sees a dead
holder and fails instead of waiting forever.

State is per process (this module's ``S``), reset in a forked rank when its runtime
initialises (``_runtime.on_init``).  ``terminate`` destroys the live arrays collectively; at
``MPI.Finalize`` without it the local state is only dropped (a collective there could wait
on a rank that is leaving for another reason).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math

import numpy as np

from .. import _runtime as _rt
from . import _layout as L

# --- types (GA's MT_* codes: tools/ma/macommon.h) ----------------------------------------------
C_CHAR, C_INT, C_LONG, C_FLOAT, C_DBL, C_LDBL, C_SCPL, C_DCPL, C_LDCPL = range(1000, 1009)
F_BYTE, F_INT, F_LOG, F_REAL, F_DBL, F_SCPL, F_DCPL, C_LONGLONG = range(1009, 1017)

_DTYPES = {
    C_CHAR: np.dtype(np.int8), C_INT: np.dtype(np.int32), C_LONG: np.dtype(np.int64),
    C_LONGLONG: np.dtype(np.int64), C_FLOAT: np.dtype(np.float32), C_DBL: np.dtype(np.float64),
    C_LDBL: np.dtype(np.longdouble), C_SCPL: np.dtype(np.complex64), C_DCPL: np.dtype(np.complex128),
    C_LDCPL: np.dtype(np.clongdouble), F_BYTE: np.dtype(np.int8), F_INT: np.dtype(np.int32),
    F_LOG: np.dtype(np.int32), F_REAL: np.dtype(np.float32), F_DBL: np.dtype(np.float64),
    F_SCPL: np.dtype(np.complex64), F_DCPL: np.dtype(np.complex128),
}
#: the code ``inquire_type`` reports for a dtype given as such (the C names first)
_CODES = {}
for _c in (C_CHAR, C_INT, C_LONG, C_FLOAT, C_DBL, C_LDBL, C_SCPL, C_DCPL, C_LDCPL):
    _CODES.setdefault(_DTYPES[_c], _c)
_INTEGER = (np.dtype(np.int32), np.dtype(np.int64))

WORLD_PROC_GROUP = -1


class GAError(RuntimeError):
    """A Global Arrays usage error that GA itself treats as fatal (``ga_error``): a destroyed or
    unknown handle, an access not released, a mutex locked twice, a fence never initialised."""


def dtype(gtype) -> np.dtype:
    """The NumPy dtype of a GA type code (ga4py ``ga.dtype``); a NumPy dtype passes through."""
    if isinstance(gtype, (int, np.integer)) and not isinstance(gtype, bool):
        try:
            return _DTYPES[int(gtype)]
        except KeyError:
            raise ValueError(f"dtype: unknown GA type ({gtype})") from None
    try:
        dt = np.dtype(gtype)
    except TypeError:
        raise TypeError(f"dtype: not a GA type or NumPy dtype ({gtype!r})") from None
    if dt not in _CODES:
        raise ValueError(f"dtype: no GA type for {dt}")
    return dt


# --- process-wide state ----------------------------------------------------------------------
class _State:
    def __init__(self) -> None:
        self.initialized = False
        self.arrays: dict = {}
        self.next_handle = 1
        self.groups: dict = {}
        self.next_group = 1
        self.default = WORLD_PROC_GROUP
        self.fence_depth = 0
        self.fenced: set = set()
        self.mutexes = None
        self.mask = [True, True]  # sync at entry, at exit of the next collective operation
        self.nb: dict = {}
        self.next_nb = 1
        self.limit = 0  # bytes of array memory allowed (0: no limit)
        self.used = 0


S = _State()


class _Group:
    """A processor group: its communicator (None in a process outside it) and its world ranks."""

    __slots__ = ("handle", "comm", "ranks")

    def __init__(self, handle: int, comm, ranks) -> None:
        self.handle, self.comm, self.ranks = handle, comm, tuple(ranks)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def me(self) -> int:
        return self.comm.Get_rank() if self.comm is not None else -1


_MPI = []


def _mpi():
    if not _MPI:
        from .. import MPI

        _MPI.append(MPI)
    return _MPI[0]


def initialize() -> None:
    """Start GA in this process (GA_Initialize; ga4py calls it at import, as ``gpumpi.ga`` does).
    Collective over the world; idempotent."""
    if S.initialized:
        return
    MPI = _mpi()
    world = MPI.COMM_WORLD.Dup()
    world.Set_name("gpumpi.ga world")
    S.groups[WORLD_PROC_GROUP] = _Group(WORLD_PROC_GROUP, world, range(world.Get_size()))
    S.initialized = True


def initialized() -> bool:
    """Whether GA is initialised in this process (GA_Initialized)."""
    return S.initialized


def terminate() -> None:
    """Destroy every live array and the mutexes, then stop GA (GA_Terminate). Collective."""
    if not S.initialized:
        return
    for h in sorted(S.arrays):
        destroy(h)
    if S.mutexes is not None:
        destroy_mutexes()
    _drop_state()


def _drop_state() -> None:
    """Forget everything (no communication): a new world, or MPI finalizing without terminate."""
    global S
    S = _State()


def _after_init(engine) -> None:
    # a new world (a forked rank, or MPI initialised again): the old state describes nothing
    if S.initialized:
        _drop_state()
        initialize()


def _at_finalize(engine) -> None:
    _drop_state()


def _started() -> _State:
    if not S.initialized:
        initialize()
    return S


def _group(p, call: str) -> _Group:
    st = _started()
    if p is None:
        p = WORLD_PROC_GROUP
    if p == MIRROR and MIRROR not in st.groups:
        pgroup_get_mirror()
    try:
        return st.groups[int(p)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{call}: unknown processor group ({p!r})") from None


def _default() -> _Group:
    st = _started()
    return st.groups[st.default]


def _member(g: _Group, call: str):
    if g.comm is None:
        raise GAError(f"{call}: this process is not a member of processor group {g.handle}")
    return g.comm


# --- process information ----------------------------------------------------------------------
def nodeid() -> int:
    """This process's rank in the default group (GA_Nodeid)."""
    return _default().me


def nnodes() -> int:
    """Size of the default group (GA_Nnodes)."""
    return _default().size


# --- processor groups ---------------------------------------------------------------------------
def _new_group(comm, ranks) -> int:
    st = _started()
    h = st.next_group
    st.next_group += 1
    st.groups[h] = _Group(h, comm, ranks)
    return h


def pgroup_create(list) -> int:
    """A processor group of the given world ranks (GA_Pgroup_create).  Collective over its
    members (other processes may call it too and get a handle of a group they are not in)."""
    ranks = _ints(list, None, "pgroup_create", "list")
    world = _group(WORLD_PROC_GROUP, "pgroup_create")
    if not ranks or len(set(ranks)) != len(ranks) or min(ranks) < 0 or max(ranks) >= world.size:
        raise ValueError(f"pgroup_create: ranks must be distinct world ranks ({list(ranks)}, world size {world.size})")
    comm = None
    if world.me in ranks:
        grp = world.comm.Get_group().Incl(ranks)
        comm = world.comm.Create_group(grp, tag=_tag(ranks))
        grp.Free()
    return _new_group(comm, ranks)


def _tag(ranks) -> int:
    h = 0
    for r in ranks:
        h = (h * 1000003 + r + 1) & 0x3FFFFFFF
    return h


def pgroup_destroy(pgroup) -> bool:
    """Free a processor group (GA_Pgroup_destroy); the world and default groups stay."""
    st = _started()
    p = int(pgroup)
    if p == WORLD_PROC_GROUP or p == st.default or p not in st.groups:
        return False
    if any(a.group is not None and a.group.handle == p for a in st.arrays.values()):
        raise GAError(f"pgroup_destroy: arrays still live on processor group {p}")
    g = st.groups.pop(p)
    if g.comm is not None:
        g.comm.Free()
    return True


def pgroup_get_default() -> int:
    """GA_Pgroup_get_default."""
    return _started().default


def pgroup_get_world() -> int:
    """GA_Pgroup_get_world."""
    _started()
    return WORLD_PROC_GROUP


def pgroup_get_mirror() -> int:
    """The mirror group (GA_Pgroup_get_mirror): an array created on it is mirrored -- one copy
    per node, distributed among that node's processes; one-sided operations reach the caller's
    node's copy only, and :func:`merge_mirrored` sums the copies."""
    st = _started()
    if MIRROR not in st.groups:
        MPI = _mpi()
        world = _group(WORLD_PROC_GROUP, "pgroup_get_mirror")
        node = world.comm.Split_type(MPI.COMM_TYPE_SHARED, world.me)
        ranks = node.allgather(world.me)
        st.groups[MIRROR] = _Group(MIRROR, node, ranks)
    return MIRROR


MIRROR = 0  # (a handle pgroup_create never returns: they start at 1)


def pgroup_set_default(pgroup: int = -1) -> None:
    """Make ``pgroup`` the default group (GA_Pgroup_set_default; -1: the world).  Every member
    must call it."""
    st = _started()
    p = WORLD_PROC_GROUP if pgroup is None or int(pgroup) < 0 else int(pgroup)
    g = _group(p, "pgroup_set_default")
    _member(g, "pgroup_set_default")
    st.default = p


def pgroup_nnodes(pgroup: int = -1) -> int:
    """Size of a group (GA_Pgroup_nnodes; -1: the default group)."""
    return _pg(pgroup, "pgroup_nnodes").size


def pgroup_nodeid(pgroup: int = -1) -> int:
    """This process's rank in a group, -1 if not a member (GA_Pgroup_nodeid)."""
    return _pg(pgroup, "pgroup_nodeid").me


def pgroup_sync(pgroup: int = -1) -> None:
    """Complete this process's GA operations and barrier the group (GA_Pgroup_sync)."""
    st = _started()
    g = _pg(pgroup, "pgroup_sync")
    for a in st.arrays.values():
        if a.allocated and a.group.comm is not None:
            a.win.Flush_all()
    _member(g, "pgroup_sync").Barrier()


def pgroup_absolute_id(pgroup, pid) -> int:
    """The world rank of member ``pid`` of a group (GA_Pgroup_absolute_id)."""
    g = _pg(pgroup, "pgroup_absolute_id")
    pid = int(pid)
    if not 0 <= pid < g.size:
        raise ValueError(f"pgroup_absolute_id: member {pid} out of range (group size {g.size})")
    return g.ranks[pid]


def pgroup_split(pgroup, num_group) -> int:
    """Split a group into ``num_group`` groups of consecutive members (GA_Pgroup_split);
    returns this process's new group. Collective over ``pgroup``."""
    g = _pg(pgroup, "pgroup_split")
    k = int(num_group)
    if not 1 <= k <= g.size:
        raise ValueError(f"pgroup_split: number of groups must be 1..{g.size} ({k})")
    per = -(-g.size // k)
    return pgroup_split_irreg(pgroup, g.me // per)


def pgroup_split_irreg(pgroup, color) -> int:
    """Split a group by ``color`` (GA_Pgroup_split_irreg); returns this process's new group.
    Collective over ``pgroup``."""
    g = _pg(pgroup, "pgroup_split_irreg")
    comm = _member(g, "pgroup_split_irreg")
    color = int(color)
    if color < 0:
        raise ValueError(f"pgroup_split_irreg: color must be >= 0 ({color})")
    sub = comm.Split(color, g.me)
    everyone = comm.allgather((color, g.ranks[g.me]))
    mine = [w for c, w in everyone if c == color]
    return _new_group(sub, mine)


def _pg(pgroup, call: str) -> _Group:
    p = _started().default if pgroup is None or int(pgroup) < 0 else int(pgroup)
    return _group(p, call)


# --- cluster (node) information --------------------------------------------------------------
def _nodes() -> list:
    from .. import _runtime as rt

    world = _group(WORLD_PROC_GROUP, "cluster")
    return [rt.node_of(r) for r in world.ranks]


def cluster_nnodes() -> int:
    """Number of nodes (GA_Cluster_nnodes)."""
    return len(set(_nodes()))


def cluster_nodeid(proc: int = -1) -> int:
    """The node of ``proc`` (default: this process) (GA_Cluster_nodeid / GA_Cluster_proc_nodeid)."""
    p = _group(WORLD_PROC_GROUP, "cluster_nodeid").me if proc is None or int(proc) < 0 else int(proc)
    return cluster_proc_nodeid(p)


def cluster_proc_nodeid(proc: int) -> int:
    """GA_Cluster_proc_nodeid."""
    nodes = _nodes()
    p = int(proc)
    if not 0 <= p < len(nodes):
        raise ValueError(f"cluster_proc_nodeid: process {p} out of range (world size {len(nodes)})")
    return nodes[p]


def cluster_nprocs(node: int) -> int:
    """Processes on ``node`` (GA_Cluster_nprocs)."""
    return sum(1 for n in _nodes() if n == int(node))


def cluster_procid(node: int, proc: int) -> int:
    """World rank of the ``proc``-th process of ``node`` (GA_Cluster_procid)."""
    members = [r for r, n in enumerate(_nodes()) if n == int(node)]
    if not 0 <= int(proc) < len(members):
        raise ValueError(f"cluster_procid: process {proc} out of range ({len(members)} on node {node})")
    return members[int(proc)]


# --- misc ---------------------------------------------------------------------------------------
def wtime() -> float:
    """Seconds from an arbitrary origin (GA_Wtime)."""
    return _mpi().Wtime()


def error(message, code: int = 1) -> None:
    """Print ``message`` and abort the whole job with ``code`` (GA_Error)."""
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    _mpi().COMM_WORLD.Abort(int(code)) if not message else _abort(str(message), int(code))


def _abort(message: str, code: int) -> None:
    import sys

    sys.stderr.write(f"GA error: {message}\n")
    sys.stderr.flush()
    _mpi().COMM_WORLD.Abort(code)


def slices(lo, hi) -> list:
    """``[slice(l, h), ...]`` (ga4py ``zip``, which ``gpumpi.ga`` exports under that name)."""
    return [slice(int(l), int(h)) for l, h in zip(lo, hi)]


_debug = [0]


def set_debug(debug) -> None:
    """GA_Set_debug."""
    _debug[0] = int(bool(debug))


def get_debug() -> int:
    """GA_Get_debug."""
    return _debug[0]


# --- arrays -----------------------------------------------------------------------------------
class _Array:
    """One global array: its description, then (once allocated) its window and views."""

    __slots__ = ("handle", "name", "gtype", "dtype", "dims", "chunk", "irreg", "ghosts", "group", "memory",
                 "layout", "win", "me", "views", "local", "mem", "accesses", "allocated", "plans", "acclock", "rinc",
                 "lockaddr", "lockkeep")

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.name = ""
        self.gtype = None
        self.dtype = None
        self.dims = None
        self.chunk = None
        self.irreg = None
        self.ghosts = None
        self.group = None
        self.memory = "host"
        self.layout = None
        self.win = None
        self.me = -1
        self.views = None
        self.local = None
        self.mem = None
        self.accesses = 0
        self.allocated = False
        self.plans = {}
        self.acclock = None
        self.rinc = {}
        self.lockaddr = None
        self.lockkeep = None

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def memshape(self, proc: int) -> tuple:
        """Extents of ``proc``'s window memory: its block plus the ghost layers."""
        if not self.layout.owns(proc):
            return (0,) * self.ndim
        return tuple(n + 2 * w for n, w in zip(self.layout.local_shape(proc), self.ghosts))


def _arr(g_a, call: str, allocated: bool = True) -> _Array:
    st = _started()
    try:
        a = st.arrays[int(g_a)]
    except (KeyError, TypeError, ValueError):
        raise GAError(f"{call}: invalid array handle ({g_a!r}): never created or already destroyed") from None
    if allocated and not a.allocated:
        raise GAError(f"{call}: array {a.handle} is not allocated yet (call allocate)")
    return a


def _ints(v, n: int | None, call: str, what: str) -> tuple:
    """``v`` (an integer, or a sequence or array of them) as a tuple of ints, ``n`` long if given."""
    tv = type(v)
    try:
        if tv is tuple or tv is list:
            t = tuple([x if type(x) is int else int(x) for x in v])
        elif tv is np.ndarray:
            t = tuple(int(x) for x in v.reshape(-1).tolist())
        elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            t = (int(v),)
        else:
            t = tuple(int(x) for x in np.asarray(v).reshape(-1).tolist())
    except (TypeError, ValueError):
        raise TypeError(f"{call}: {what} must be integers ({v!r})") from None
    if n is not None and len(t) != n:
        raise ValueError(f"{call}: {what} must have one entry per dimension ({list(t)}, {n} dimensions)")
    return t


def create_handle() -> int:
    """A new array handle to describe with ``set_*`` and ``allocate`` (GA_Create_handle)."""
    st = _started()
    h = st.next_handle
    st.next_handle += 1
    st.arrays[h] = _Array(h)
    return h


def set_data(g_a, dims, gtype) -> None:
    """Give a new handle its extents and element type (GA_Set_data; the one setter required)."""
    a = _arr(g_a, "set_data", False)
    _unallocated(a, "set_data")
    dims = _ints(dims, None, "set_data", "dims")
    if not 1 <= len(dims) <= L.MAX_DIM:
        raise ValueError(f"set_data: 1 to {L.MAX_DIM} dimensions ({len(dims)})")
    if min(dims) < 1:
        raise ValueError(f"set_data: extents must be positive ({list(dims)})")
    a.dtype = dtype(gtype)
    a.gtype = int(gtype) if isinstance(gtype, (int, np.integer)) else _CODES[a.dtype]
    a.dims = dims


def _unallocated(a: _Array, call: str) -> None:
    if a.allocated:
        raise GAError(f"{call}: array {a.handle} is already allocated")


def set_array_name(g_a, name) -> None:
    """GA_Set_array_name."""
    a = _arr(g_a, "set_array_name", False)
    a.name = str(name)


def set_chunk(g_a, chunk) -> None:
    """Minimum block extents (GA_Set_chunk; -1 or None: GA chooses)."""
    a = _arr(g_a, "set_chunk", False)
    _unallocated(a, "set_chunk")
    _need_data(a, "set_chunk")
    a.chunk = None if chunk is None else _ints(chunk, a.ndim, "set_chunk", "chunk")


def set_irreg_distr(g_a, map, block) -> None:
    """Irregular distribution: ``block[d]`` blocks along d starting at ``map`` (GA_Set_irreg_distr)."""
    a = _arr(g_a, "set_irreg_distr", False)
    _unallocated(a, "set_irreg_distr")
    _need_data(a, "set_irreg_distr")
    a.irreg = (_ints(block, a.ndim, "set_irreg_distr", "block"), _ints(map, None, "set_irreg_distr", "map"))


def set_ghosts(g_a, width) -> None:
    """Ghost layers on each side of every block (GA_Set_ghosts)."""
    a = _arr(g_a, "set_ghosts", False)
    _unallocated(a, "set_ghosts")
    _need_data(a, "set_ghosts")
    w = _ints(width, a.ndim, "set_ghosts", "width")
    if min(w) < 0:
        raise ValueError(f"set_ghosts: widths must be >= 0 ({list(w)})")
    a.ghosts = w


def set_pgroup(g_a, pgroup) -> None:
    """The processor group the array lives on (GA_Set_pgroup; default: the default group)."""
    a = _arr(g_a, "set_pgroup", False)
    _unallocated(a, "set_pgroup")
    a.group = _group(pgroup, "set_pgroup")


def set_memory_dev(g_a, device) -> None:
    """Where the array's memory lives: ``"host"`` or ``"device"`` (GA_Set_memory_dev; gpumpi
    also takes ``True``/``False``)."""
    a = _arr(g_a, "set_memory_dev", False)
    _unallocated(a, "set_memory_dev")
    kind = {True: "device", False: "host"}.get(device, device) if isinstance(device, bool) else str(device).lower()
    if kind in ("gpu", "cuda"):
        kind = "device"
    if kind not in ("host", "device"):
        raise ValueError(f"set_memory_dev: memory must be 'host' or 'device' ({device!r})")
    a.memory = kind


def _need_data(a: _Array, call: str) -> None:
    if a.dims is None:
        raise GAError(f"{call}: array {a.handle} has no data description yet (call set_data first)")


def allocate(g_a) -> bool:
    """Allocate a described array on its group (GA_Allocate). Collective over the group."""
    MPI = _mpi()
    a = _arr(g_a, "allocate", False)
    _unallocated(a, "allocate")
    _need_data(a, "allocate")
    st = S
    g = a.group if a.group is not None else _default()
    a.group = g
    comm = _member(g, "allocate")
    if a.ghosts is None:
        a.ghosts = (0,) * a.ndim
    if a.irreg is not None:
        block, mp = a.irreg
        a.layout = L.irregular(a.dims, g.size, block, mp)
    else:
        a.layout = L.regular(a.dims, g.size, a.chunk)
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
    return True


#: whether one-sided operations copy directly to and from members' memory mapped here (host
#: arrays on this node); False sends every transfer through the window's datatype path (tests)
DIRECT = True


def _map_views(a: _Array) -> None:
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


def _make(setup) -> int:
    """A new array: ``setup(handle)`` describes it (``set_*``), then it is allocated; 0 if
    allocation was refused (memory limit); on any error the handle is forgotten."""
    h = create_handle()
    try:
        setup(h)
        if allocate(h):
            return h
    except BaseException:
        S.arrays.pop(h, None)
        raise
    S.arrays.pop(h, None)
    return 0


def _described(gtype, dims, name, pgroup, chunk=None, width=None, block=None, map=None, memory=None):
    """The ``setup`` of :func:`_make` for the ``create*`` family (and :class:`GlobalArray`)."""

    def setup(h: int) -> None:
        set_data(h, dims, gtype)
        set_array_name(h, name)
        if width is not None:
            set_ghosts(h, width)
        if chunk is not None:
            set_chunk(h, chunk)
        if block is not None or map is not None:
            set_irreg_distr(h, map, block)
        set_pgroup(h, pgroup if pgroup is not None and int(pgroup) >= 0 else S.default)
        if memory is not None:
            set_memory_dev(h, memory)

    return setup


def create(gtype, dims, name: str = "", chunk=None, pgroup: int = -1) -> int:
    """Create a regularly distributed array (NGA_Create; ga4py ``create``). Collective."""
    return _make(_described(gtype, dims, name, pgroup, chunk=chunk))


def create_irreg(gtype, dims, block, map, name: str = "", pgroup: int = -1) -> int:
    """Create an irregularly distributed array (NGA_Create_irreg; ga4py ``create_irreg``). Collective."""
    return _make(_described(gtype, dims, name, pgroup, block=block, map=map))


def create_ghosts(gtype, dims, width, name: str = "", chunk=None, pgroup: int = -1) -> int:
    """Create a regular array with ghost layers (NGA_Create_ghosts). Collective."""
    return _make(_described(gtype, dims, name, pgroup, chunk=chunk, width=width))


def create_ghosts_irreg(gtype, dims, width, block, map, name: str = "", pgroup: int = -1) -> int:
    """Create an irregular array with ghost layers (NGA_Create_ghosts_irreg). Collective."""
    return _make(_described(gtype, dims, name, pgroup, width=width, block=block, map=map))


def duplicate(g_a, name: str = "") -> int:
    """A new array with ``g_a``'s type, shape, distribution, ghosts, group and memory; its
    contents are not copied (GA_Duplicate). Collective."""
    a = _arr(g_a, "duplicate")

    def setup(h: int) -> None:
        b = S.arrays[h]
        b.name, b.gtype, b.dtype, b.dims = str(name), a.gtype, a.dtype, a.dims
        b.chunk, b.ghosts, b.group, b.memory = a.chunk, a.ghosts, a.group, a.memory
        b.irreg = (a.layout.grid, tuple(itertools.chain.from_iterable(a.layout.starts)))

    return _make(setup)


def destroy(g_a) -> None:
    """Free an array (GA_Destroy). Collective over its group."""
    a = _arr(g_a, "destroy", False)
    if a.accesses:
        raise GAError(f"destroy: array {a.handle} has {a.accesses} access(es) not released")
    if a.allocated:
        _member(a.group, "destroy")
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
        S.used -= int(np.prod(a.memshape(a.me), dtype=np.int64)) * a.dtype.itemsize
    S.fenced.discard(a.handle)
    del S.arrays[a.handle]


def deallocate(g_a) -> None:
    """GA_Deallocate: the same as :func:`destroy` here (a handle is not reused)."""
    destroy(g_a)


def valid_handle(g_a) -> bool:
    """Whether ``g_a`` is a live array (GA_Valid_handle)."""
    try:
        _arr(g_a, "valid_handle", False)
        return True
    except GAError:
        return False


def check_handle(g_a, string: str = "") -> None:
    """Raise :class:`GAError` with ``string`` if ``g_a`` is not a live array (GA_Check_handle)."""
    if not valid_handle(g_a):
        raise GAError(f"{string or 'check_handle'}: invalid array handle ({g_a!r})")


# --- inquiry ----------------------------------------------------------------------------------
def inquire(g_a) -> tuple:
    """``(type, dims)`` (NGA_Inquire)."""
    a = _arr(g_a, "inquire", False)
    _need_data(a, "inquire")
    return a.gtype, np.array(a.dims, dtype=np.int64)


def inquire_dims(g_a):
    return inquire(g_a)[1]


def inquire_type(g_a) -> int:
    return inquire(g_a)[0]


def inquire_dtype(g_a) -> np.dtype:
    a = _arr(g_a, "inquire_dtype", False)
    _need_data(a, "inquire_dtype")
    return a.dtype


def inquire_name(g_a) -> str:
    return _arr(g_a, "inquire_name", False).name


def ndim(g_a) -> int:
    a = _arr(g_a, "ndim", False)
    _need_data(a, "ndim")
    return a.ndim


def has_ghosts(g_a) -> bool:
    a = _arr(g_a, "has_ghosts")
    return any(a.ghosts)


def ghost_widths(g_a):
    """The ghost widths of ``g_a`` (NGA_Get_ghost_width is per dim)."""
    return np.array(_arr(g_a, "ghost_widths").ghosts, dtype=np.int64)


def memory_kind(g_a) -> str:
    """``"host"`` or ``"device"``: where ``g_a``'s memory lives (gpumpi)."""
    return _arr(g_a, "memory_kind").memory


def get_pgroup(g_a) -> int:
    return _arr(g_a, "get_pgroup").group.handle


def get_pgroup_size(g_a) -> int:
    return _arr(g_a, "get_pgroup_size").group.size


# --- locality ---------------------------------------------------------------------------------
def distribution(g_a, iproc: int = -1) -> tuple:
    """The block of process ``iproc`` (default: the caller) as half-open ``(lo, hi)``; a process
    without a block gets ``lo = hi = -1`` everywhere (NGA_Distribution)."""
    a = _arr(g_a, "distribution")
    p = a.me if iproc is None or int(iproc) < 0 else int(iproc)
    if not 0 <= p < a.group.size:
        raise ValueError(f"distribution: process {p} out of range (group size {a.group.size})")
    lo, hi = a.layout.distribution(p)
    return np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)


def locate(g_a, subscript) -> int:
    """The owner of one element, or -1 if it is out of bounds (NGA_Locate)."""
    a = _arr(g_a, "locate")
    return a.layout.locate(_ints(subscript, a.ndim, "locate", "subscript"))


def locate_region(g_a, lo, hi) -> tuple:
    """``(map, procs)``: ``map[i] = (lo, hi)`` of the i-th piece of the patch, owned by
    ``procs[i]`` (NGA_Locate_region; half-open)."""
    a = _arr(g_a, "locate_region")
    lo, hi = L.check_patch("locate_region", a.dims, lo, hi)
    pieces = a.layout.locate_region(lo, hi)
    m = np.array([[plo, phi] for _, plo, phi in pieces], dtype=np.int64).reshape(len(pieces), 2, a.ndim)
    return m, np.array([p for p, _, _ in pieces], dtype=np.int64)


def locate_nnodes(g_a, lo, hi) -> int:
    """How many processes own part of the patch (NGA_Locate_nnodes)."""
    return len(locate_region(g_a, lo, hi)[1])


def proc_topology(g_a, proc: int):
    """Coordinates of ``proc`` in the array's process grid, -1s if it owns no block."""
    a = _arr(g_a, "proc_topology")
    return np.array(a.layout.proc_topology(int(proc)), dtype=np.int64)


def get_proc_grid(g_a):
    """Blocks along each dimension (GA_Get_proc_grid)."""
    return np.array(_arr(g_a, "get_proc_grid").layout.grid, dtype=np.int64)


def nblock(g_a):
    """Blocks along each dimension (GA_Nblock)."""
    return get_proc_grid(g_a)


def compare_distr(g_a, g_b) -> bool:
    """Whether the two arrays are distributed identically (GA_Compare_distr == 0)."""
    a, b = _arr(g_a, "compare_distr"), _arr(g_b, "compare_distr")
    return a.dims == b.dims and a.layout.grid == b.layout.grid and a.layout.starts == b.layout.starts and \
        a.group.ranks == b.group.ranks


# --- buffers ----------------------------------------------------------------------------------
def _is_device(x) -> bool:
    return hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray)


def _host_buffer(a: _Array, buffer, shape, call: str, writable: bool):
    """``buffer`` as an array of ``a``'s dtype and ``shape`` (a flat buffer of the right size is
    reshaped; a non-contiguous or differently typed one is copied -- for reading only)."""
    n = math.prod(shape)
    if _is_device(buffer):
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


def _slices(lo, hi, origin=None) -> tuple:
    if origin is None:
        return tuple(slice(l, h) for l, h in zip(lo, hi))
    return tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, origin))


def _target(a: _Array, proc: int, plo, phi) -> tuple:
    """Slices of ``proc``'s window memory holding the global patch ``[plo, phi)``."""
    blo, _ = a.layout.block(a.layout.coords(proc))
    return tuple(slice(l - b + w, h - b + w) for l, h, b, w in zip(plo, phi, blo, a.ghosts))


@functools.lru_cache(maxsize=512)
def _subarray(dtype_str: str, sizes: tuple, subsizes: tuple, starts: tuple, skips: tuple | None = None):
    """A committed datatype for the box ``starts + [0, subsizes) * skips`` of a C-order array of
    ``sizes`` (MPI subarray; with ``skips``, nested strided vectors)."""
    MPI = _mpi()
    base = _basic(np.dtype(dtype_str))
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


def _basic(dt: np.dtype):
    """The predefined datatype of a NumPy dtype."""
    from ..datatypes.predefined import TypeDict

    return TypeDict[dt.char]


def _box(a: _Array, shape, lo, sub, skips=None):
    return [_subarray(a.dtype.str, tuple(shape), tuple(sub), tuple(lo), None if skips is None else tuple(skips))]


def _touch(a: _Array) -> None:
    if S.fence_depth:
        S.fenced.add(a.handle)


def _device_sync(a: _Array) -> None:
    if a.memory == "device":
        a.win.Flush_local_all()


# --- one-sided operations ---------------------------------------------------------------------
class _Piece:
    """One owner's part of a patch: where it sits in the patch's buffer (``src``) and in the
    owner's window memory (``tgt``), and its extents."""

    __slots__ = ("proc", "src", "tgt", "sub")

    def __init__(self, proc: int, src: tuple, tgt: tuple, sub: tuple) -> None:
        self.proc, self.src, self.tgt, self.sub = proc, src, tgt, sub

    def types(self, a: _Array, shape):
        """Subarray datatypes of the piece in the patch buffer and in the owner's memory."""
        return (_box(a, shape, [x.start for x in self.src], self.sub)[0],
                _box(a, a.memshape(self.proc), [x.start for x in self.tgt], self.sub)[0])


_PLANS = 256  # patches remembered per array


def _plan(a: _Array, lo, hi) -> list:
    """The pieces of the patch ``[lo, hi)``, one per owner (remembered: codes that move the
    same patches again and again -- halos, task blocks -- skip the distribution math)."""
    key = (lo, hi)
    plan = a.plans.get(key)
    if plan is None:
        if len(a.plans) >= _PLANS:
            a.plans.clear()
        plan = a.plans[key] = _pieces_of(a, lo, hi)
    return plan


def _pieces_of(a: _Array, lo, hi) -> list:
    """:meth:`Layout.locate_region` for a checked, non-empty patch, with each piece's slices
    (the layout's block bounds are searched once per dimension)."""
    lay = a.layout
    ranges = []  # per dimension: (block, piece lo, piece hi, block lo) of each block touched
    for l, h, b in zip(lo, hi, lay._bounds):
        k0 = bisect.bisect_right(b, l) - 1
        k1 = bisect.bisect_right(b, h - 1) - 1
        ranges.append([(k, max(l, b[k]), min(h, b[k + 1]), b[k]) for k in range(k0, k1 + 1)])
    gs = lay._gstrides
    w = a.ghosts
    out = []
    for combo in itertools.product(*ranges):
        proc = sum(c[0] * g for c, g in zip(combo, gs))
        src = tuple(slice(c[1] - o, c[2] - o) for c, o in zip(combo, lo))
        tgt = tuple(slice(c[1] - c[3] + x, c[2] - c[3] + x) for c, x in zip(combo, w))
        out.append(_Piece(proc, src, tgt, tuple(c[2] - c[1] for c in combo)))
    return out


def _do_put(a: _Array, buf, lo, hi) -> None:
    shape = None
    dev = _is_device(buf)
    for pc in _plan(a, lo, hi):
        v = a.views[pc.proc]
        if v is not None and not dev:
            v[pc.tgt] = buf[pc.src]
            continue
        shape = shape or tuple(h - l for l, h in zip(lo, hi))
        ot, tt = pc.types(a, shape)
        a.win.Put([buf, 1, ot], pc.proc, target=(0, 1, tt))
    _touch(a)


def _do_get(a: _Array, buf, lo, hi) -> None:
    shape = None
    dev = _is_device(buf)
    for pc in _plan(a, lo, hi):
        v = a.views[pc.proc]
        if v is not None and not dev:
            buf[pc.src] = v[pc.tgt]
            continue
        shape = shape or tuple(h - l for l, h in zip(lo, hi))
        ot, tt = pc.types(a, shape)
        a.win.Get([buf, 1, ot], pc.proc, target=(0, 1, tt))


def _do_acc(a: _Array, buf, lo, hi) -> None:
    MPI = _mpi()
    shape = tuple(h - l for l, h in zip(lo, hi))
    dev = _is_device(buf)
    for pc in _plan(a, lo, hi):
        if a.acclock is not None and not dev:
            _lock_acc(a, pc.proc, "acc")
            try:
                a.views[pc.proc][pc.tgt] += buf[pc.src]
            finally:
                _unlock_acc(a, pc.proc)
            continue
        ot, tt = pc.types(a, shape)
        a.win.Accumulate([buf, 1, ot], pc.proc, target=(0, 1, tt), op=MPI.SUM)
    _touch(a)


def _take(win, owner: int, disp: int, group: _Group, call: str) -> None:
    """Take the lock word ``disp`` of ``owner`` in ``win`` (compare-and-swap 0 -> rank + 1),
    progressing and backing off while another process holds it; a holder that failed makes
    this an ``ERR_PROC_FAILED`` error instead of a wait without end."""
    me = group.me
    mine, zero, res = _LOCKBUF[0], _LOCKBUF[1], _LOCKBUF[2]
    mine[0] = me + 1
    spins = 0
    while True:
        win.Compare_and_swap(mine, zero, res, owner, disp)
        if res[0] == 0:
            return
        holder = int(res[0]) - 1
        eng = _rt.ENGINE
        if eng is not None and eng.failed and group.ranks[holder] in eng.failed:
            from ..errors import ERR_PROC_FAILED, error

            raise error(ERR_PROC_FAILED, f"{call}: the lock of process {owner} is held by failed process {holder}")
        spins += 1
        if eng is not None:
            with eng.lock:
                eng.progress()
            eng.backoff(spins)


def _give(win, owner: int, disp: int, group: _Group) -> int:
    """Release a lock word taken by :func:`_take`; the previous value (rank + 1 if it was ours)."""
    mine, zero, res = _LOCKBUF[0], _LOCKBUF[1], _LOCKBUF[2]
    mine[0] = group.me + 1
    win.Compare_and_swap(zero, mine, res, owner, disp)
    return int(res[0])


_LOCKBUF = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))
_I64 = np.dtype(np.int64)


def _lock_acc(a: _Array, proc: int, call: str) -> None:
    """Take ``proc``'s accumulate lock of ``a``: the CPU's compare-and-swap on the mapped word
    (what ``Win.Compare_and_swap`` does there, without its argument handling), else the window's."""
    addrs = a.lockaddr
    if addrs is None:
        _take(a.acclock, proc, 0, a.group, call)
        return
    cas = (_ATOMICS[0] if _ATOMICS else _atomics()).compare_and_swap
    me = a.group.me + 1
    if cas(addrs[proc], 0, me, _I64) == 0:
        return
    _take(a.acclock, proc, 0, a.group, call)  # held: wait (progressing, watching the holder) there


def _unlock_acc(a: _Array, proc: int) -> None:
    addrs = a.lockaddr
    if addrs is None:
        _give(a.acclock, proc, 0, a.group)
        return
    (_ATOMICS[0] if _ATOMICS else _atomics()).compare_and_swap(addrs[proc], a.group.me + 1, 0, _I64)


def _scaled(a: _Array, buf, alpha, call: str):
    if alpha is None:
        return buf
    al = np.asarray(alpha)
    if al.size != 1:
        raise ValueError(f"{call}: alpha must be a scalar ({alpha!r})")
    if a.dtype.kind != "c" and al.dtype.kind == "c":
        raise TypeError(f"{call}: complex alpha for a {a.dtype} array ({alpha!r})")
    al = al.astype(a.dtype).reshape(())
    if al == 1:
        return buf
    if _is_device(buf):
        out = _xp_like(buf)
        return (buf * al).astype(a.dtype) if out is None else out.multiply(buf, al.item(), dtype=a.dtype)
    return np.multiply(buf, al, dtype=a.dtype)


def _xp_like(x):
    try:
        import cupy

        if isinstance(x, cupy.ndarray):
            return cupy
    except ImportError:
        pass
    return None


def _patch(a: _Array, lo, hi, call: str):
    """ga4py's ``_lohi``: no bounds, the whole array; ``lo`` alone, that one element; ``hi``
    without ``lo``, an error; else the half-open patch, checked against the array."""
    if lo is None and hi is None:
        return (0,) * a.ndim, a.dims
    if lo is None:
        raise ValueError(f"{call}: hi given without lo")
    lo = _ints(lo, a.ndim, call, "lo")
    hi = tuple([x + 1 for x in lo]) if hi is None else _ints(hi, a.ndim, call, "hi")
    for l, h, d in zip(lo, hi, a.dims):
        if l < 0 or h > d or h < l:
            return L.check_patch(call, a.dims, lo, hi)  # (raises, with the message)
    return lo, hi


def put(g_a, buffer, lo=None, hi=None) -> None:
    """``G[lo:hi] = buffer`` (NGA_Put). One-sided; returns once ``buffer`` may be reused."""
    a = _arr(g_a, "put")
    lo, hi = _patch(a, lo, hi, "put")
    shape = tuple(h - l for l, h in zip(lo, hi))
    if not math.prod(shape):
        return
    buf = _host_buffer(a, buffer, shape, "put", False)
    _sim_sync(buf)
    _do_put(a, buf, lo, hi)
    _device_sync(a)


def get(g_a, lo=None, hi=None, buffer=None):
    """``G[lo:hi]`` as an array (NGA_Get): into ``buffer`` if given, else a new NumPy array
    (host arrays) or device array (device arrays)."""
    a = _arr(g_a, "get")
    lo, hi = _patch(a, lo, hi, "get")
    shape = tuple(h - l for l, h in zip(lo, hi))
    if buffer is None:
        buf = _new(a, shape)
        out = buf
    else:
        out = buffer
        buf = _host_buffer(a, buffer, shape, "get", True)
    if math.prod(shape):
        if buffer is not None and not _c_order(buf) and not _all_direct(a, lo, hi, buf):
            # the window's datatype path writes a buffer in its storage order: go through a
            # C-ordered one, then copy into the caller's view
            tmp = _new(a, shape) if not _is_device(buf) else _device_empty(shape, a.dtype)
            _do_get(a, tmp, lo, hi)
            _device_sync(a)
            _assign(buf, (Ellipsis,), tmp)
            return out
        _do_get(a, buf, lo, hi)
        _device_sync(a)
    return out


def _c_order(buf) -> bool:
    if isinstance(buf, np.ndarray):
        return buf.flags.c_contiguous
    if getattr(buf, "__gpumpi_sim__", False):
        return buf._arr.flags.c_contiguous
    return buf.__cuda_array_interface__.get("strides") is None


def _all_direct(a: _Array, lo, hi, buf) -> bool:
    """Whether every piece of the patch is copied straight into ``buf`` (mapped host memory)."""
    return not _is_device(buf) and all(a.views[pc.proc] is not None for pc in _plan(a, lo, hi))


def _new(a: _Array, shape):
    if a.memory == "device":
        return _device_empty(shape, a.dtype)
    return np.empty(shape, a.dtype)


def _device_empty(shape, dt):
    from .._backends import device_empty

    return device_empty(shape, dt, "ga")


def _sim_sync(buf) -> None:
    if getattr(buf, "__gpumpi_sim__", False):
        from .._device import sim_adapter

        sim_adapter().synchronize()


def acc(g_a, buffer, lo=None, hi=None, alpha=None) -> None:
    """``G[lo:hi] += alpha * buffer``, atomic with respect to other accumulates (NGA_Acc)."""
    a = _arr(g_a, "acc")
    lo, hi = _patch(a, lo, hi, "acc")
    shape = tuple(h - l for l, h in zip(lo, hi))
    if not math.prod(shape):
        return
    buf = _scaled(a, _host_buffer(a, buffer, shape, "acc", False), alpha, "acc")
    _sim_sync(buf)
    _do_acc(a, buf, lo, hi)
    _device_sync(a)


def read_inc(g_a, subscript, inc: int = 1) -> int:
    """Atomically add ``inc`` to one element of an integer array and return its old value
    (NGA_Read_inc): one atomic fetch-and-add instruction on the owner's element where it is
    mapped here, else ``Win.Fetch_and_op(SUM)`` (the same instruction, issued by the window)."""
    a = _arr(g_a, "read_inc")
    key = subscript if type(subscript) is tuple else None
    hit = a.rinc.get(key) if key is not None else None
    if hit is None:
        hit = _read_inc_target(a, subscript)
        if key is not None and len(a.rinc) < 4096:
            a.rinc[key] = hit
    proc, disp, addr = hit
    if addr:
        old = (_ATOMICS[0] if _ATOMICS else _atomics()).fetch_and_op(addr, inc, "SUM", a.dtype)
    else:
        MPI = _mpi()
        one = np.array([int(inc)], dtype=a.dtype)
        res = np.empty(1, dtype=a.dtype)
        a.win.Fetch_and_op(one, res, proc, disp, MPI.SUM)
        old = res[0]
    if S.fence_depth:
        _touch(a)
    return int(old)


def _read_inc_target(a: _Array, subscript) -> tuple:
    """``(owner, displacement, address or 0)`` of the element ``read_inc`` updates (checked)."""
    if a.dtype not in _INTEGER:
        raise TypeError(f"read_inc: the array must be C_INT, C_LONG or C_LONGLONG ({a.dtype})")
    sub = _ints(subscript, a.ndim, "read_inc", "subscript")
    proc = a.layout.locate(sub)
    if proc < 0:
        raise ValueError(f"read_inc: subscript out of bounds ({list(sub)}, dims {list(a.dims)})")
    idx = tuple(s.start for s in _target(a, proc, sub, tuple(x + 1 for x in sub)))
    disp = int(np.ravel_multi_index(idx, a.memshape(proc)))
    v = a.views[proc] if a.memory == "host" else None
    addr = v.__array_interface__["data"][0] + disp * a.dtype.itemsize if v is not None else 0
    return proc, disp, addr


_ATOMICS = []


def _atomics():
    if not _ATOMICS:
        from ..kernels import atomics

        _ATOMICS.append(atomics)
    return _ATOMICS[0]


# -- element lists
def _subs(a: _Array, subsarray, call: str):
    s = np.asarray(subsarray, dtype=np.int64)
    if s.ndim == 1:
        if s.size % a.ndim:
            raise ValueError(f"{call}: flat subscripts must hold ndim={a.ndim} entries each ({s.size})")
        s = s.reshape(-1, a.ndim)
    if s.ndim != 2 or s.shape[1] != a.ndim:
        raise ValueError(f"{call}: subscripts must be (n, {a.ndim}) ({list(s.shape)})")
    if s.size and ((s < 0).any() or (s >= np.array(a.dims)).any()):
        bad = s[((s < 0) | (s >= np.array(a.dims))).any(axis=1)][0]
        raise ValueError(f"{call}: subscript out of bounds ({bad.tolist()}, dims {list(a.dims)})")
    return s


def _owners(a: _Array, s):
    """Owner of each subscript row, and its flat index in the owner's window memory."""
    lay = a.layout
    coords = np.empty_like(s)
    for d in range(a.ndim):
        coords[:, d] = np.searchsorted(np.array(lay.starts[d]), s[:, d], side="right") - 1
    proc = np.ravel_multi_index(coords.T, lay.grid) if s.size else np.zeros(0, np.int64)
    return proc, coords


def _local_flat(a: _Array, proc: int, rows):
    blo, _ = a.layout.block(a.layout.coords(proc))
    loc = rows - np.array(blo) + np.array(a.ghosts)
    return np.ravel_multi_index(loc.T, a.memshape(proc)).astype(np.int64)


def _indexed(a: _Array, flat):
    base = _basic(a.dtype)
    t = base.Create_indexed_block(1, flat.tolist())
    t.Commit()
    return t


def scatter(g_a, values, subsarray) -> None:
    """``G[subs[k]] = values[k]`` (NGA_Scatter)."""
    _scatter(g_a, values, subsarray, None, "scatter")


def scatter_acc(g_a, values, subsarray, alpha=None) -> None:
    """``G[subs[k]] += alpha * values[k]``, atomic like ``acc``; repeated subscripts add up
    (NGA_Scatter_acc)."""
    _scatter(g_a, values, subsarray, alpha if alpha is not None else 1, "scatter_acc")


def _scatter(g_a, values, subsarray, alpha, call: str) -> None:
    MPI = _mpi()
    a = _arr(g_a, call)
    s = _subs(a, subsarray, call)
    n = s.shape[0]
    v = _host_buffer(a, values, (n,), call, False)
    if _is_device(v):
        v = _to_host(v)
    if alpha is not None:
        v = _scaled(a, v, alpha, call)
    proc, _ = _owners(a, s)
    for p in np.unique(proc).tolist():
        sel = proc == p
        rows, vals = s[sel], np.ascontiguousarray(v[sel])
        flat = _local_flat(a, p, rows)
        if alpha is not None:  # duplicates add up: one accumulate per distinct element
            flat, inv = np.unique(flat, return_inverse=True)
            summed = np.zeros(flat.size, a.dtype)
            np.add.at(summed, inv.reshape(-1), vals)
            vals = summed
            if a.acclock is not None:  # the way every accumulate to this array goes
                _lock_acc(a, p, call)
                try:
                    a.views[p].reshape(-1)[flat] += vals
                finally:
                    _unlock_acc(a, p)
                continue
            t = _indexed(a, flat)
            a.win.Accumulate([vals, 1, _basic(a.dtype).Create_contiguous(vals.size).Commit()], p,
                             target=(0, 1, t), op=MPI.SUM)
            continue
        view = a.views[p]
        if view is not None:
            view.reshape(-1)[flat] = vals
        else:
            t = _indexed(a, flat)
            a.win.Put(vals, p, target=(0, 1, t))
    _device_sync(a)
    _touch(a)


def gather(g_a, subsarray, values=None):
    """``values[k] = G[subs[k]]`` (NGA_Gather): a new NumPy array unless ``values`` is given."""
    a = _arr(g_a, "gather")
    s = _subs(a, subsarray, "gather")
    n = s.shape[0]
    out = np.empty(n, a.dtype) if values is None else _host_buffer(a, values, (n,), "gather", True)
    proc, _ = _owners(a, s)
    for p in np.unique(proc).tolist():
        sel = np.flatnonzero(proc == p)
        flat = _local_flat(a, p, s[sel])
        view = a.views[p]
        if view is not None:
            out[sel] = view.reshape(-1)[flat]
        else:
            tmp = np.empty(sel.size, a.dtype)
            a.win.Get(tmp, p, target=(0, 1, _indexed(a, flat)))
            out[sel] = tmp
    _device_sync(a)
    return out


def _to_host(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):
        return x.get()
    return np.asarray(x)


# -- periodic and strided patches
def _periodic(g_a, lo, hi, call: str):
    a = _arr(g_a, call)
    lo = _ints(lo, a.ndim, call, "lo")
    hi = _ints(hi, a.ndim, call, "hi")
    pieces = L.periodic_pieces(a.dims, lo, hi)
    return a, lo, hi, tuple(h - l for l, h in zip(lo, hi)), pieces


def periodic_get(g_a, lo, hi, buffer=None):
    """``G[lo:hi]`` with indices wrapping around every dimension (NGA_Periodic_get)."""
    a, lo, hi, shape, pieces = _periodic(g_a, lo, hi, "periodic_get")
    out = _new(a, shape) if buffer is None else buffer
    buf = out if buffer is None else _host_buffer(a, buffer, shape, "periodic_get", True)
    for plo, phi, boff in pieces:
        sub = tuple(h - l for l, h in zip(plo, phi))
        part = np.empty(sub, a.dtype) if not _is_device(buf) else _device_empty(sub, a.dtype)
        _do_get(a, part, plo, phi)
        _assign(buf, tuple(slice(b, b + n) for b, n in zip(boff, sub)), part)
    _device_sync(a)
    return out


def _assign(dst, idx, src) -> None:
    if getattr(dst, "__gpumpi_sim__", False):
        from .._device import sim_adapter

        sim_adapter().synchronize()
        dst._arr[idx] = src._arr if getattr(src, "__gpumpi_sim__", False) else src
        return
    dst[idx] = src


def _part(buf, idx):
    """A contiguous copy of ``buf[idx]`` (host or device)."""
    if getattr(buf, "__gpumpi_sim__", False):
        from .._device import sim_adapter
        from .._device.simarray import SimDeviceArray

        sim_adapter().synchronize()
        return SimDeviceArray.from_numpy(np.ascontiguousarray(buf._arr[idx]))
    xp = _xp_like(buf)
    return (xp if xp is not None else np).ascontiguousarray(buf[idx])


def periodic_put(g_a, buffer, lo, hi) -> None:
    """``G[lo:hi] = buffer`` with wrapping indices (NGA_Periodic_put)."""
    a, lo, hi, shape, pieces = _periodic(g_a, lo, hi, "periodic_put")
    buf = _host_buffer(a, buffer, shape, "periodic_put", False)
    for plo, phi, boff in pieces:
        sub = tuple(h - l for l, h in zip(plo, phi))
        _do_put(a, _part(buf, tuple(slice(b, b + n) for b, n in zip(boff, sub))), plo, phi)
    _device_sync(a)


def periodic_acc(g_a, buffer, lo, hi, alpha=None) -> None:
    """``G[lo:hi] += alpha * buffer`` with wrapping indices (NGA_Periodic_acc)."""
    a, lo, hi, shape, pieces = _periodic(g_a, lo, hi, "periodic_acc")
    buf = _scaled(a, _host_buffer(a, buffer, shape, "periodic_acc", False), alpha, "periodic_acc")
    for plo, phi, boff in pieces:
        sub = tuple(h - l for l, h in zip(plo, phi))
        _do_acc(a, _part(buf, tuple(slice(b, b + n) for b, n in zip(boff, sub))), plo, phi)
    _device_sync(a)


def _strided(a: _Array, lo, hi, skip, call: str):
    lo, hi = L.check_patch(call, a.dims, lo, hi)
    skip = _ints(skip, a.ndim, call, "skip")
    shape = L.strided_shape(lo, hi, skip)
    out = []
    for proc, plo, phi in a.layout.locate_region(lo, hi):
        first = tuple(l + -(-(p - l) // s) * s for l, p, s in zip(lo, plo, skip))
        cnt = tuple(max(0, -(-(h - f) // s)) for f, h, s in zip(first, phi, skip))
        if 0 in cnt:
            continue
        bstart = tuple((f - l) // s for f, l, s in zip(first, lo, skip))
        tgt = _target(a, proc, first, tuple(f + 1 for f in first))
        out.append((proc, tuple(t.start for t in tgt), cnt, bstart))
    return shape, skip, out


def strided_get(g_a, lo, hi, skip, buffer=None):
    """Every ``skip[d]``-th element of the patch (NGA_Strided_get)."""
    a = _arr(g_a, "strided_get")
    shape, skip, parts = _strided(a, lo, hi, skip, "strided_get")
    out = _new(a, shape) if buffer is None else buffer
    buf = out if buffer is None else _host_buffer(a, buffer, shape, "strided_get", True)
    for proc, start, cnt, bstart in parts:
        v = a.views[proc]
        bidx = tuple(slice(b, b + c) for b, c in zip(bstart, cnt))
        if v is not None and not _is_device(buf):
            buf[bidx] = v[tuple(slice(s, s + c * k, k) for s, c, k in zip(start, cnt, skip))]
            continue
        a.win.Get([buf, 1, _box(a, shape, bstart, cnt)[0]], proc,
                  target=(0, 1, _box(a, a.memshape(proc), start, cnt, skip)[0]))
    _device_sync(a)
    return out


def strided_put(g_a, buffer, lo, hi, skip) -> None:
    """Write every ``skip[d]``-th element of the patch (NGA_Strided_put)."""
    _strided_write(g_a, buffer, lo, hi, skip, None, "strided_put")


def strided_acc(g_a, buffer, lo, hi, skip, alpha=None) -> None:
    """Accumulate into every ``skip[d]``-th element of the patch (NGA_Strided_acc)."""
    _strided_write(g_a, buffer, lo, hi, skip, 1 if alpha is None else alpha, "strided_acc")


def _strided_write(g_a, buffer, lo, hi, skip, alpha, call: str) -> None:
    MPI = _mpi()
    a = _arr(g_a, call)
    shape, skip, parts = _strided(a, lo, hi, skip, call)
    buf = _host_buffer(a, buffer, shape, call, False)
    if alpha is not None:
        buf = _scaled(a, buf, alpha, call)
    for proc, start, cnt, bstart in parts:
        v = a.views[proc]
        bidx = tuple(slice(b, b + c) for b, c in zip(bstart, cnt))
        tidx = tuple(slice(s, s + c * k, k) for s, c, k in zip(start, cnt, skip))
        if alpha is None and v is not None and not _is_device(buf):
            v[tidx] = buf[bidx]
            continue
        if alpha is not None and a.acclock is not None and not _is_device(buf):
            _lock_acc(a, proc, call)  # (the way every accumulate to this array goes)
            try:
                v[tidx] += buf[bidx]
            finally:
                _unlock_acc(a, proc)
            continue
        origin = [buf, 1, _box(a, shape, bstart, cnt)[0]]
        target = (0, 1, _box(a, a.memshape(proc), start, cnt, skip)[0])
        if alpha is None:
            a.win.Put(origin, proc, target=target)
        else:
            a.win.Accumulate(origin, proc, target=target, op=MPI.SUM)
    _device_sync(a)
    _touch(a)


# -- nonblocking: complete at the call; the handle says so
def _nb_handle() -> int:
    h = S.next_nb
    S.next_nb += 1
    S.nb[h] = True
    return h


def nbput(g_a, buffer, lo=None, hi=None) -> int:
    """Nonblocking put (NGA_NbPut): complete on return here; wait on the handle with ``nbwait``."""
    put(g_a, buffer, lo, hi)
    return _nb_handle()


def nbacc(g_a, buffer, lo=None, hi=None, alpha=None) -> int:
    """Nonblocking accumulate (NGA_NbAcc)."""
    acc(g_a, buffer, lo, hi, alpha)
    return _nb_handle()


def nbget(g_a, lo=None, hi=None, buffer=None) -> tuple:
    """Nonblocking get (NGA_NbGet): ``(buffer, handle)``."""
    return get(g_a, lo, hi, buffer), _nb_handle()


def nbwait(nbhandle) -> None:
    """Complete a nonblocking operation (NGA_NbWait); each handle is waited on once."""
    try:
        del S.nb[int(nbhandle)]
    except (KeyError, TypeError, ValueError):
        raise GAError(f"nbwait: unknown or already completed handle ({nbhandle!r})") from None


def nbtest(nbhandle) -> bool:
    """Whether a nonblocking operation completed (NGA_NbTest): always, here."""
    if int(nbhandle) not in S.nb:
        raise GAError(f"nbtest: unknown or already completed handle ({nbhandle!r})")
    return True


# --- access to local data ---------------------------------------------------------------------
def _user_view(a: _Array, arr):
    return arr


def access(g_a, lo=None, hi=None, proc: int = -1):
    """A zero-copy view of the caller's block (or of ``[lo, hi)`` inside it); ``proc``: another
    process's block mapped on this node (host memory). ``None`` if that process owns nothing
    (NGA_Access). Pair it with :func:`release` or :func:`release_update`."""
    a = _arr(g_a, "access")
    p = a.me if proc is None or int(proc) < 0 else int(proc)
    if not 0 <= p < a.group.size:
        raise ValueError(f"access: process {p} out of range (group size {a.group.size})")
    if not a.layout.owns(p):
        return None
    mem = a.local if p == a.me else a.views[p]
    if mem is None:
        raise GAError(f"access: the block of process {p} is not mapped in this process (another node or device)")
    blo, bhi = a.layout.distribution(p)
    if lo is None and hi is None:
        lo, hi = blo, bhi
    else:
        lo = blo if lo is None else _ints(lo, a.ndim, "access", "lo")
        hi = bhi if hi is None else _ints(hi, a.ndim, "access", "hi")
        if any(l < b or h > e or h < l for l, h, b, e in zip(lo, hi, blo, bhi)):
            raise ValueError(f"access: patch {list(lo)}..{list(hi)} is not inside the block of process {p} "
                             f"({list(blo)}..{list(bhi)})")
    if a.memory == "device":
        _device_sync(a)
    a.accesses += 1
    return mem[_target(a, p, lo, hi)]


def access_ghosts(g_a):
    """A zero-copy view of the caller's block with its ghost layers (NGA_Access_ghosts)."""
    a = _arr(g_a, "access_ghosts")
    if not a.layout.owns(a.me):
        return None
    a.accesses += 1
    return a.local


def _release(g_a, call: str) -> _Array:
    a = _arr(g_a, call)
    if a.accesses <= 0:
        raise GAError(f"{call}: array {a.handle} has no access to release")
    a.accesses -= 1
    return a


def release(g_a, lo=None, hi=None) -> None:
    """End a read-only access (NGA_Release)."""
    _release(g_a, "release")


def release_update(g_a, lo=None, hi=None) -> None:
    """End an access whose data was changed (NGA_Release_update)."""
    a = _release(g_a, "release_update")
    _device_sync(a)
    _touch(a)


def release_ghosts(g_a) -> None:
    _release(g_a, "release_ghosts")


def release_update_ghosts(g_a) -> None:
    a = _release(g_a, "release_update_ghosts")
    _device_sync(a)
    _touch(a)


# --- synchronization --------------------------------------------------------------------------
def sync() -> None:
    """Complete every outstanding GA operation and barrier the default group (GA_Sync)."""
    st = _started()
    for a in st.arrays.values():
        if a.allocated and a.group.comm is not None:
            a.win.Flush_all()
    st.fence_depth = 0
    st.fenced.clear()
    _member(_default(), "sync").Barrier()


def init_fence() -> None:
    """Start tracking this process's operations for :func:`fence` (GA_Init_fence)."""
    _started().fence_depth += 1


def fence() -> None:
    """Wait until every operation since ``init_fence`` is complete at its target (GA_Fence)."""
    st = _started()
    if st.fence_depth <= 0:
        raise GAError("fence: no init_fence to match")
    for h in list(st.fenced):
        a = st.arrays.get(h)
        if a is not None and a.allocated:
            a.win.Flush_all()
    st.fence_depth -= 1
    if not st.fence_depth:
        st.fenced.clear()


def mask_sync(first, last) -> None:
    """Skip the sync at the start (``first`` false) and/or end (``last`` false) of the next
    collective array operation only (GA_Mask_sync)."""
    _started().mask = [bool(first), bool(last)]


def _sync_in() -> None:
    if S.mask[0]:
        sync()
    S.mask[0] = True


def _sync_out() -> None:
    if S.mask[1]:
        sync()
    S.mask[1] = True


# -- mutexes
class _Mutexes:
    __slots__ = ("n", "win", "held", "comm", "group")

    def __init__(self, n: int, group: _Group) -> None:
        comm = group.comm
        self.group = group
        MPI = _mpi()
        self.n = n
        self.comm = comm
        size = comm.Get_size()
        mine = sum(1 for m in range(n) if m % size == comm.Get_rank())
        self.win = MPI.Win.Allocate(8 * mine, 8, comm=comm)
        mem = np.frombuffer(self.win.tomemory(), np.int64) if mine else None
        if mem is not None:
            mem[:] = 0
        comm.Barrier()
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.held: set = set()


def create_mutexes(number: int) -> bool:
    """Create mutexes ``0 .. number-1`` (GA_Create_mutexes); False if a set exists. Collective."""
    st = _started()
    n = int(number)
    if n < 0:
        raise ValueError(f"create_mutexes: negative number ({n})")
    if st.mutexes is not None:
        return False
    _member(_default(), "create_mutexes")
    st.mutexes = _Mutexes(n, _default())
    return True


def destroy_mutexes() -> bool:
    """Free the mutexes (GA_Destroy_mutexes). Collective."""
    st = _started()
    mx = st.mutexes
    if mx is None:
        return False
    if mx.held:
        raise GAError(f"destroy_mutexes: mutexes {sorted(mx.held)} are still locked by this process")
    mx.comm.Barrier()
    mx.win.Unlock_all()
    mx.win.Free()
    st.mutexes = None
    return True


def _mutex(m, call: str):
    mx = S.mutexes
    if mx is None:
        raise GAError(f"{call}: no mutexes (create_mutexes first)")
    m = int(m)
    if not 0 <= m < mx.n:
        raise ValueError(f"{call}: mutex {m} out of range ({mx.n} mutexes)")
    size = mx.comm.Get_size()
    return mx, m, m % size, m // size


def lock(mutex) -> None:
    """Take a mutex, waiting while another process holds it (GA_Lock)."""
    mx, m, owner, disp = _mutex(mutex, "lock")
    if m in mx.held:
        raise GAError(f"lock: mutex {m} is already locked by this process")
    _take(mx.win, owner, disp, mx.group, "lock")
    mx.held.add(m)


def unlock(mutex) -> None:
    """Release a mutex this process holds (GA_Unlock)."""
    mx, m, owner, disp = _mutex(mutex, "unlock")
    if m not in mx.held:
        raise GAError(f"unlock: mutex {m} is not locked by this process")
    mx.win.Flush_all()  # what was written under the mutex is complete before the next holder reads
    prev = _give(mx.win, owner, disp, mx.group)
    mx.held.discard(m)
    if prev != mx.comm.Get_rank() + 1:
        raise GAError(f"unlock: mutex {m} was held by {prev - 1}, not by this process")


# --- memory limits ----------------------------------------------------------------------------
def set_memory_limit(limit: int) -> None:
    """Cap, in bytes, on this process's GA array memory; 0: none (GA_Set_memory_limit)."""
    _started().limit = max(0, int(limit))


def initialize_ltd(limit: int) -> None:
    """Initialise with a memory cap (GA_Initialize_ltd)."""
    initialize()
    set_memory_limit(limit)


def inquire_memory() -> int:
    """Bytes of GA array memory this process uses (GA_Inquire_memory)."""
    return _started().used


def memory_avail() -> int:
    """Bytes left under the cap, or -1 without one (GA_Memory_avail)."""
    st = _started()
    return st.limit - st.used if st.limit else -1


def memory_limited() -> bool:
    """Whether a cap is set (GA_Memory_limited)."""
    return bool(_started().limit)


def uses_ma() -> bool:
    """GA's Memory Allocator is not used (GA_Uses_ma)."""
    return False


# --- computing on local data (for the collective operations) ---------------------------------
def _is_sim(a: _Array) -> bool:
    return a.memory == "device" and getattr(a.local, "__gpumpi_sim__", False)


def xp_of(a: _Array):
    """The array module that computes on ``a``'s memory: NumPy (host memory, and the simulated
    device, whose memory the host reaches), else CuPy."""
    if a.memory == "host" or _is_sim(a):
        return np
    import cupy

    return cupy


def local_block(a: _Array):
    """The caller's visible block of ``a`` as an array of :func:`xp_of` (a view: writes land in
    the array), or None if the caller owns nothing.  Simulated device memory is synchronized."""
    if not a.layout.owns(a.me):
        return None
    mem = a.local
    if _is_sim(a):
        from .._device import sim_adapter

        sim_adapter().synchronize()
        mem = mem._arr
    lo, hi = a.layout.distribution(a.me)
    return mem[_target(a, a.me, lo, hi)]


def local_patch(a: _Array, lo, hi):
    """The part of the caller's block inside the patch ``[lo, hi)``: ``(view, plo, phi)`` with the
    view an array of :func:`xp_of` over ``[plo, phi)``, or None if they do not meet."""
    if not a.layout.owns(a.me):
        return None
    blo, bhi = a.layout.distribution(a.me)
    cut = L.intersect(blo, bhi, lo, hi)
    if cut is None:
        return None
    plo, phi = cut
    if L.patch_size(plo, phi) == 0:
        return None
    view = local_block(a)
    return view[_slices(plo, phi, blo)], plo, phi


def fetch(a: _Array, lo, hi):
    """The patch ``[lo, hi)`` of ``a`` as a new array of :func:`xp_of` (one-sided get)."""
    shape = tuple(h - l for l, h in zip(lo, hi))
    if a.memory == "host" or _is_sim(a):
        out = np.empty(shape, a.dtype)
        if L.patch_size(lo, hi):
            if _is_sim(a):
                tmp = _device_empty(shape, a.dtype)
                _do_get(a, tmp, lo, hi)
                _device_sync(a)
                from .._device import sim_adapter

                sim_adapter().synchronize()
                out[...] = tmp._arr
            else:
                _do_get(a, out, lo, hi)
        return out
    out = _device_empty(shape, a.dtype)
    if L.patch_size(lo, hi):
        _do_get(a, out, lo, hi)
        _device_sync(a)
    return out


def store(a: _Array, values, lo, hi) -> None:
    """Write an array of :func:`xp_of` (or NumPy) to the patch ``[lo, hi)`` (one-sided put)."""
    if not L.patch_size(lo, hi):
        return
    if _is_sim(a):
        from .._device.simarray import SimDeviceArray

        values = SimDeviceArray.from_numpy(np.ascontiguousarray(values))
    elif a.memory == "host":
        values = np.ascontiguousarray(values, dtype=a.dtype)
    _do_put(a, values, lo, hi)
    _device_sync(a)


def group_comm(a: _Array):
    """The communicator of ``a``'s group (this process must be a member)."""
    return _member(a.group, "ga")


def arr(g_a, call: str) -> _Array:
    """The live, allocated array behind handle ``g_a`` (GAError otherwise)."""
    return _arr(g_a, call)


def patch(a: _Array, lo, hi, call: str):
    """ga4py's patch arguments (``_lohi``) for ``a``, checked: ``(lo, hi)`` tuples."""
    return _patch(a, lo, hi, call)


def sync_in() -> None:
    """The implicit sync at the start of a collective array operation (unless masked)."""
    _sync_in()


def sync_out() -> None:
    """The implicit sync at the end of a collective array operation (unless masked)."""
    _sync_out()


def default_comm():
    """The default group's communicator."""
    return _member(_default(), "ga")


# --- mirrored arrays ------------------------------------------------------------------------------
def is_mirrored(g_a) -> bool:
    """Whether ``g_a`` was created on the mirror group (GA_Is_mirrored)."""
    return _arr(g_a, "is_mirrored", False).group is not None and _arr(g_a, "is_mirrored", False).group.handle == MIRROR


def _node_sum(a: _Array, lo, hi):
    """The sum over the nodes' copies of the patch ``[lo, hi)`` of mirrored ``a``, on every process
    (a whole-patch ``Allreduce`` over the world: within a node the blocks are disjoint)."""
    MPI = _mpi()
    shape = tuple(h - l for l, h in zip(lo, hi))
    mine = np.zeros(shape, a.dtype)
    got = local_patch(a, lo, hi)
    if got is not None:
        view, plo, phi = got
        mine[_slices(plo, phi, lo)] = view if xp_of(a) is np else view.get()
    out = np.empty_like(mine)
    _group(WORLD_PROC_GROUP, "merge").comm.Allreduce(mine, out, op=MPI.SUM)
    return out


def merge_mirrored(g_a) -> None:
    """Sum the nodes' copies of a mirrored array: afterwards every copy holds the sum
    (GA_Merge_mirrored). Collective over the world; syncs first."""
    a = _arr(g_a, "merge_mirrored")
    if a.group.handle != MIRROR:
        raise GAError(f"merge_mirrored: array {a.handle} is not mirrored")
    sync()
    total = _node_sum(a, (0,) * a.ndim, a.dims)
    got = local_patch(a, (0,) * a.ndim, a.dims)
    if got is not None:
        view, plo, phi = got
        view[...] = total[_slices(plo, phi, None)] if xp_of(a) is np else xp_of(a).asarray(total[_slices(plo, phi, None)])
    sync()


def merge_distr_patch(g_a, alo, ahi, g_b, blo, bhi) -> None:
    """Sum the nodes' copies of a patch of mirrored ``g_a`` into a patch of distributed ``g_b``
    (NGA_Merge_distr_patch). Collective over the world."""
    a = _arr(g_a, "merge_distr_patch")
    b = _arr(g_b, "merge_distr_patch")
    if a.group.handle != MIRROR:
        raise GAError(f"merge_distr_patch: array {a.handle} is not mirrored")
    alo, ahi = _patch(a, alo, ahi, "merge_distr_patch")
    blo, bhi = _patch(b, blo, bhi, "merge_distr_patch")
    if L.patch_size(alo, ahi) != L.patch_size(blo, bhi):
        raise ValueError(f"merge_distr_patch: patches differ in size ({L.patch_size(alo, ahi)}, "
                         f"{L.patch_size(blo, bhi)})")
    sync()
    total = _node_sum(a, alo, ahi).reshape(tuple(h - l for l, h in zip(blo, bhi)))
    got = local_patch(b, blo, bhi)
    if got is not None:
        view, plo, phi = got
        part = total[_slices(plo, phi, blo)]
        view[...] = part if xp_of(b) is np else xp_of(b).asarray(part)
    sync()


# --- what gpumpi's GA does not do (GA 5 / ga4py P2 features), each with its reason --------------
def _unsupported(name: str, why: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name}: {why}")

    fn.__name__ = name
    fn.__doc__ = f"Not supported: {why}"
    return fn


_BLOCKS = ("block-cyclic and tiled distributions (several blocks per process) are not supported; "
           "every process owns at most one block")
set_block_cyclic = _unsupported("set_block_cyclic", _BLOCKS)
set_block_cyclic_proc_grid = _unsupported("set_block_cyclic_proc_grid", _BLOCKS)
total_blocks = _unsupported("total_blocks", _BLOCKS)
get_block_info = _unsupported("get_block_info", _BLOCKS)
access_block = _unsupported("access_block", _BLOCKS)
access_block_grid = _unsupported("access_block_grid", _BLOCKS)
access_block_segment = _unsupported("access_block_segment", _BLOCKS)
release_block = _unsupported("release_block", _BLOCKS)
release_update_block = _unsupported("release_update_block", _BLOCKS)
release_block_grid = _unsupported("release_block_grid", _BLOCKS)
release_update_block_grid = _unsupported("release_update_block_grid", _BLOCKS)
release_block_segment = _unsupported("release_block_segment", _BLOCKS)
release_update_block_segment = _unsupported("release_update_block_segment", _BLOCKS)
_RESTRICTED = "restricted arrays are not supported; create the array on a processor group (pgroup_create) instead"
set_restricted = _unsupported("set_restricted", _RESTRICTED)
set_restricted_range = _unsupported("set_restricted_range", _RESTRICTED)
_TYPES = "user-registered element types are not supported; use one of the C_* types (NumPy dtypes)"
register_type = _unsupported("register_type", _TYPES)
register_dtype = _unsupported("register_dtype", _TYPES)
deregister_type = _unsupported("deregister_type", _TYPES)
access_ghost_element = _unsupported("access_ghost_element", "use access_ghosts(g_a) instead (as ga4py says)")
release_ghost_element = _unsupported("release_ghost_element", "use access_ghosts / release_ghosts instead")
release_update_ghost_element = _unsupported("release_update_ghost_element",
                                            "use access_ghosts / release_update_ghosts instead")
print_file = _unsupported("print_file", "as in ga4py; use print_patch, whose output goes to sys.stdout")
print_stats = _unsupported("print_stats", "gpumpi's GA keeps no per-call statistics; GPUMPI_PROFILE=1 counts "
                                          "the MPI operations underneath")
