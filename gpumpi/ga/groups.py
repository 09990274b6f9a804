"""Global Arrays processor groups: looking them up, ``nodeid``/``nnodes``, ``pgroup_*``, the mirror group, nodes (L6).

Theory of operation
===================
Groups (``pgroup_*``) are communicators: the world group is a private duplicate of
``COMM_WORLD`` (made by :func:`gpumpi.ga.state.initialize`); ``pgroup_create`` makes one with
``Create_group`` (only members need to call it; a process outside gets a handle whose
communicator is None); ``pgroup_split``/``pgroup_split_irreg`` make them with ``Split``;
``pgroup_set_default`` changes which one ``nodeid``, ``nnodes``, ``sync``, ``brdcst``, ``gop``
and new arrays use.  The mirror group (handle :data:`MIRROR`, made on first use) is each
node's processes: an array on it is one copy per node (:mod:`gpumpi.ga.mirrored`).

Handles: ``-1`` (:data:`~gpumpi.ga.state.WORLD_PROC_GROUP`) is the world; where a call takes
``pgroup=-1`` for "the default group" it goes through :func:`group_or_default`, elsewhere
through :func:`group_by_handle`.  :func:`member_comm` is a group's communicator in a member,
and a :class:`~gpumpi.ga.state.GAError` elsewhere.
"""

from __future__ import annotations

from .state import WORLD_PROC_GROUP, GAArray, GAError, GAGroup, as_ints, mpi, started

__all__ = [
    "MIRROR",
    "cluster_nnodes", "cluster_nodeid", "cluster_nprocs", "cluster_proc_nodeid", "cluster_procid",
    "default_comm", "default_group", "group_by_handle", "group_comm", "group_or_default", "member_comm",
    "nnodes", "nodeid",
    "pgroup_absolute_id", "pgroup_create", "pgroup_destroy", "pgroup_get_default", "pgroup_get_mirror",
    "pgroup_get_world", "pgroup_nnodes", "pgroup_nodeid", "pgroup_set_default", "pgroup_split",
    "pgroup_split_irreg",
]


# --- looking groups up ---------------------------------------------------------------------------
def group_by_handle(p, call: str) -> GAGroup:
    """The group of handle ``p`` (None: the world); ValueError for an unknown handle."""
    st = started()
    if p is None:
        p = WORLD_PROC_GROUP
    if p == MIRROR and MIRROR not in st.groups:
        pgroup_get_mirror()
    try:
        return st.groups[int(p)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{call}: unknown processor group ({p!r})") from None


def group_or_default(pgroup, call: str) -> GAGroup:
    """The group of handle ``pgroup``, the default group for None or a negative handle."""
    p = started().default if pgroup is None or int(pgroup) < 0 else int(pgroup)
    return group_by_handle(p, call)


def default_group() -> GAGroup:
    """The default group (``pgroup_set_default``)."""
    st = started()
    return st.groups[st.default]


def member_comm(g: GAGroup, call: str):
    """``g``'s communicator; GAError if this process is not a member."""
    if g.comm is None:
        raise GAError(f"{call}: this process is not a member of processor group {g.handle}")
    return g.comm


def default_comm():
    """The default group's communicator."""
    return member_comm(default_group(), "ga")


def group_comm(a: GAArray):
    """The communicator of ``a``'s group (this process must be a member)."""
    return member_comm(a.group, "ga")


# --- process information ----------------------------------------------------------------------
def nodeid() -> int:
    """This process's rank in the default group (GA_Nodeid)."""
    return default_group().me


def nnodes() -> int:
    """Size of the default group (GA_Nnodes)."""
    return default_group().size


# --- processor groups ---------------------------------------------------------------------------
def _new_group(comm, ranks) -> int:
    st = started()
    h = st.next_group
    st.next_group += 1
    st.groups[h] = GAGroup(h, comm, ranks)
    return h


def pgroup_create(list) -> int:
    """A processor group of the given world ranks (GA_Pgroup_create).  Collective over its
    members (other processes may call it too and get a handle of a group they are not in)."""
    ranks = as_ints(list, None, "pgroup_create", "list")
    world = group_by_handle(WORLD_PROC_GROUP, "pgroup_create")
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
    st = started()
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
    return started().default


def pgroup_get_world() -> int:
    """GA_Pgroup_get_world."""
    started()
    return WORLD_PROC_GROUP


def pgroup_get_mirror() -> int:
    """The mirror group (GA_Pgroup_get_mirror): an array created on it is mirrored -- one copy
    per node, distributed among that node's processes; one-sided operations reach the caller's
    node's copy only, and :func:`merge_mirrored` sums the copies."""
    st = started()
    if MIRROR not in st.groups:
        MPI = mpi()
        world = group_by_handle(WORLD_PROC_GROUP, "pgroup_get_mirror")
        node = world.comm.Split_type(MPI.COMM_TYPE_SHARED, world.me)
        ranks = node.allgather(world.me)
        st.groups[MIRROR] = GAGroup(MIRROR, node, ranks)
    return MIRROR


MIRROR = 0  # (a handle pgroup_create never returns: they start at 1)


def pgroup_set_default(pgroup: int = -1) -> None:
    """Make ``pgroup`` the default group (GA_Pgroup_set_default; -1: the world).  Every member
    must call it."""
    st = started()
    p = WORLD_PROC_GROUP if pgroup is None or int(pgroup) < 0 else int(pgroup)
    g = group_by_handle(p, "pgroup_set_default")
    member_comm(g, "pgroup_set_default")
    st.default = p


def pgroup_nnodes(pgroup: int = -1) -> int:
    """Size of a group (GA_Pgroup_nnodes; -1: the default group)."""
    return group_or_default(pgroup, "pgroup_nnodes").size


def pgroup_nodeid(pgroup: int = -1) -> int:
    """This process's rank in a group, -1 if not a member (GA_Pgroup_nodeid)."""
    return group_or_default(pgroup, "pgroup_nodeid").me


def pgroup_absolute_id(pgroup, pid) -> int:
    """The world rank of member ``pid`` of a group (GA_Pgroup_absolute_id)."""
    g = group_or_default(pgroup, "pgroup_absolute_id")
    pid = int(pid)
    if not 0 <= pid < g.size:
        raise ValueError(f"pgroup_absolute_id: member {pid} out of range (group size {g.size})")
    return g.ranks[pid]


def pgroup_split(pgroup, num_group) -> int:
    """Split a group into ``num_group`` groups of consecutive members (GA_Pgroup_split);
    returns this process's new group. Collective over ``pgroup``."""
    g = group_or_default(pgroup, "pgroup_split")
    k = int(num_group)
    if not 1 <= k <= g.size:
        raise ValueError(f"pgroup_split: number of groups must be 1..{g.size} ({k})")
    per = -(-g.size // k)
    return pgroup_split_irreg(pgroup, g.me // per)


def pgroup_split_irreg(pgroup, color) -> int:
    """Split a group by ``color`` (GA_Pgroup_split_irreg); returns this process's new group.
    Collective over ``pgroup``."""
    g = group_or_default(pgroup, "pgroup_split_irreg")
    comm = member_comm(g, "pgroup_split_irreg")
    color = int(color)
    if color < 0:
        raise ValueError(f"pgroup_split_irreg: color must be >= 0 ({color})")
    sub = comm.Split(color, g.me)
    everyone = comm.allgather((color, g.ranks[g.me]))
    mine = [w for c, w in everyone if c == color]
    return _new_group(sub, mine)


# --- cluster (node) information --------------------------------------------------------------
def _nodes() -> list:
    from .._services import node_of

    world = group_by_handle(WORLD_PROC_GROUP, "cluster")
    return [node_of(r) for r in world.ranks]


def cluster_nnodes() -> int:
    """Number of nodes (GA_Cluster_nnodes)."""
    return len(set(_nodes()))


def cluster_nodeid(proc: int = -1) -> int:
    """The node of ``proc`` (default: this process) (GA_Cluster_nodeid / GA_Cluster_proc_nodeid)."""
    p = group_by_handle(WORLD_PROC_GROUP, "cluster_nodeid").me if proc is None or int(proc) < 0 else int(proc)
    return cluster_proc_nodeid(p)


def cluster_proc_nodeid(proc: int) -> int:
    """GA_Cluster_proc_nodeid."""
    nodes = _nodes()
    p = int(proc)
    if not 0 <= p < len(nodes):
        raise ValueError(f"cluster_proc_nodeid: process {p} out of range (world size {len(nodes)})")
    return nodes[p]


def cluster_nprocs(node: int) -> int:
    """Processes on ``node`` (GA_Cluster_nprocs); a negative ``node`` is this process's node, as
    ARMCI's ``armci_domain_nprocs`` reads it."""
    nodes = _nodes()
    node = int(node)
    if node < 0:
        node = cluster_nodeid()
    return sum(1 for n in nodes if n == node)


def cluster_procid(node: int, proc: int) -> int:
    """World rank of the ``proc``-th process of ``node`` (GA_Cluster_procid)."""
    members = [r for r, n in enumerate(_nodes()) if n == int(node)]
    if not 0 <= int(proc) < len(members):
        raise ValueError(f"cluster_procid: process {proc} out of range ({len(members)} on node {node})")
    return members[int(proc)]
