"""Intercommunicator collective schedules (L1): MPICH's algorithms, built from the intra ones.

Theory of operation
===================
An intercommunicator joins a *local* group (``size`` ranks, this rank is ``rank``) and a
*remote* group (``rsize`` ranks).  A schedule step names its peer as an integer:

* ``p >= 0``: rank ``p`` of the REMOTE group (the intercommunicator's own collective
  context, as point-to-point on an intercommunicator addresses the remote group);
* ``~p`` (negative): rank ``p`` of the LOCAL group, through the intercommunicator's private
  local intracommunicator (the executor sends those on its collective context, with the
  same per-call tag).

So one schedule mixes local phases and leader exchanges.  The local phases are the
intracommunicator schedules ``select`` builds for the local group (``embed`` copies their
rounds with peers turned into ``~p`` and buffers renamed), so the local algorithms and their
selection are shared with intracommunicators.  The leaders are local rank 0 of each group.

Root rules (MPI): in a rooted collective the root passes ``ROOT``, the other ranks of its
group ``PROC_NULL`` (they do nothing), and the other group passes the root's rank in the
root's group.  ``IN_PLACE`` does not exist on intercommunicators.

Algorithms (MPICH's ``*_inter_*``):

* barrier: local barrier, the leaders exchange an empty message, a local binomial
  release (empty messages down the tree from the leader).
* bcast: the root sends to remote rank 0, which broadcasts in its group.
* gather: the other group gathers to its leader, which sends all blocks to the root in one
  message.  gatherv: every rank sends straight to the root (only the root knows the counts).
* scatter: the root sends all blocks to remote rank 0, which scatters in its group.
  scatterv: the root sends each block straight to its rank.
* allgather: local gather to the leader, the leaders exchange, local bcast of what arrived.
  allgatherv: every rank sends its block to the remote leader, the leader broadcasts each
  block locally (the vector receive buffer keeps its blocks where they are).
* alltoall(v/w): pairwise over ``max(size, rsize)`` steps: step ``i`` sends to remote rank
  ``(rank + i) % max`` and receives from ``(rank - i) % max``, skipping ranks that do not
  exist.
* reduce: the other group reduces to its leader (rank order kept by the intra reduce),
  which sends the result to the root.
* allreduce: local reduce to the leader, the leaders exchange, local bcast.
* reduce_scatter(_block): local reduce of the whole input to the leader, the leaders
  exchange, the leader scatters the remote group's result by this group's counts.

Units as in ``schedule``: data movement counts bytes, reductions the op's unit.  Each
group passes its own sizes: ``n`` is what this rank sends (or the root's receive block) and
``rn`` the size of a block that arrives from each remote rank, so the two groups may move
different amounts each way (MPI allows it; mpi4py's tests do it).
"""

from __future__ import annotations

from ..constants import PROC_NULL, ROOT
from . import hier, select
from ._common import check_counts, prefix, tree
from .schedule import RBUF, RECV, SBUF, SEND, Schedule

__all__ = ["barrier", "bcast", "gather", "gatherv", "scatter", "scatterv", "allgather", "allgatherv",
           "alltoall", "alltoallv", "reduce", "allreduce", "reduce_scatter", "reduce_scatter_block", "embed",
           "local", "flatten", "role"]


def local(p: int) -> int:
    """The peer id of local rank ``p`` (module docstring)."""
    return ~p


def _check(call: str, rank: int, size: int, rsize: int, n: int = 0) -> None:
    if size < 1 or rsize < 1 or not 0 <= rank < size:
        raise ValueError(f"{call}: rank outside the group (rank {rank}, size {size}, remote size {rsize})")
    if n < 0:
        raise ValueError(f"{call}: negative count ({n})")


def role(call: str, root: int, rsize: int) -> str:
    """``"root"``, ``"idle"`` (PROC_NULL in the root's group) or ``"leaf"`` (the other group)."""
    if root == ROOT:
        return "root"
    if root == PROC_NULL:
        return "idle"
    if not 0 <= root < rsize:
        raise ValueError(f"{call}: root outside the remote group (root {root}, remote size {rsize})")
    return "leaf"


class _Local:
    """Group rank ``p`` of the local group as a peer id: ``~p`` (the module docstring)."""

    def __getitem__(self, p: int) -> int:
        return ~p


_LOCAL = _Local()


def embed(s: Schedule, sub: Schedule, bmap: dict) -> None:
    """Append the rounds of intra schedule ``sub`` (of the local group) to ``s``: its peers
    become local peers (``~p``), ``SBUF``/``RBUF`` become ``bmap``'s buffers, its temporaries
    new temporaries of ``s``."""
    hier.embed(s, sub, _LOCAL, bmap)


def _intra(s: Schedule, coll: str, rank: int, size: int, bmap: dict, **kw) -> None:
    if size > 1:
        embed(s, select.build(coll, rank, size, **kw), bmap)


def _release(s: Schedule, rank: int, size: int) -> None:
    """Empty messages down the binomial tree from local rank 0: nobody leaves before the leader."""
    parent, children = tree(rank, size)
    if parent:
        s.add((RECV, ~(rank - parent), RBUF, 0, 0))
    s.add(*[(SEND, ~(rank + m), RBUF, 0, 0) for m in reversed(children)])


def _bcast_blocks(s: Schedule, rank: int, size: int, offs) -> None:
    """Binomial broadcast from local rank 0 of every non-empty block ``[offs[j], offs[j+1])`` of RBUF."""
    if size == 1:
        return
    parent, children = tree(rank, size)
    blocks = [(offs[j], offs[j + 1]) for j in range(len(offs) - 1) if offs[j + 1] > offs[j]]
    if parent:
        s.add(*[(RECV, ~(rank - parent), RBUF, lo, hi) for lo, hi in blocks])
    s.add(*[(SEND, ~(rank + m), RBUF, lo, hi) for m in reversed(children) for lo, hi in blocks])


# --- data movement -------------------------------------------------------------------------------


def barrier(rank: int, size: int, rsize: int) -> Schedule:
    """Intercommunicator barrier (MPI_Barrier): local barrier, leader exchange, local release."""
    _check("barrier", rank, size, rsize)
    s = Schedule(algorithm="inter_barrier")
    _intra(s, "barrier", rank, size, {RBUF: RBUF})
    if rank == 0:
        s.add((SEND, 0, RBUF, 0, 0), (RECV, 0, RBUF, 0, 0))
    _release(s, rank, size)
    return s


def bcast(rank: int, size: int, rsize: int, *, root: int, n: int = 0) -> Schedule:
    """Intercommunicator broadcast (MPI_Bcast) of ``RBUF[0:n]``: root -> remote 0 -> local bcast."""
    _check("bcast", rank, size, rsize, n)
    s = Schedule(algorithm="inter_bcast")
    r = role("bcast", root, rsize)
    if r == "root":
        s.add((SEND, 0, RBUF, 0, n))
    elif r == "leaf":
        if rank == 0:
            s.add((RECV, root, RBUF, 0, n))
        _intra(s, "bcast", rank, size, {RBUF: RBUF}, root=0, n=n)
    return s


def gather(rank: int, size: int, rsize: int, *, root: int, n: int = 0) -> Schedule:
    """Intercommunicator gather (MPI_Gather) of ``n`` units per rank: the other group gathers
    to its leader, which sends the ``size * n`` units to the root (``RBUF[0:rsize*n]``)."""
    _check("gather", rank, size, rsize, n)
    s = Schedule(algorithm="inter_gather")
    r = role("gather", root, rsize)
    if r == "root":
        s.add((RECV, 0, RBUF, 0, rsize * n))
    elif r == "leaf":
        if size == 1:
            s.add((SEND, root, SBUF, 0, n))
            return s
        t = s.new_tmp(size * n) if rank == 0 else None
        _intra(s, "gather", rank, size, {SBUF: SBUF, RBUF: t}, root=0, n=n)
        if rank == 0:
            s.add((SEND, root, t, 0, size * n))
    return s


def gatherv(rank: int, size: int, rsize: int, *, root: int, n: int = 0, counts=None) -> Schedule:
    """Intercommunicator gatherv (MPI_Gatherv): every rank of the other group sends
    ``SBUF[0:n]`` to the root, which receives block ``j`` (``counts[j]`` units) from remote ``j``."""
    _check("gatherv", rank, size, rsize, n)
    s = Schedule(algorithm="inter_gatherv")
    r = role("gatherv", root, rsize)
    if r == "root":
        offs = prefix(check_counts("gatherv", counts, rsize))
        s.add(*[(RECV, j, RBUF, offs[j], offs[j + 1]) for j in range(rsize)])
    elif r == "leaf":
        s.add((SEND, root, SBUF, 0, n))
    return s


def scatter(rank: int, size: int, rsize: int, *, root: int, n: int = 0) -> Schedule:
    """Intercommunicator scatter (MPI_Scatter): the root sends ``SBUF[0:rsize*n]`` to remote 0,
    which scatters ``n`` units to each rank of its group (``RBUF[0:n]``)."""
    _check("scatter", rank, size, rsize, n)
    s = Schedule(algorithm="inter_scatter")
    r = role("scatter", root, rsize)
    if r == "root":
        s.add((SEND, 0, SBUF, 0, rsize * n))
    elif r == "leaf":
        if size == 1:
            s.add((RECV, root, RBUF, 0, n))
            return s
        t = s.new_tmp(size * n) if rank == 0 else None
        if rank == 0:
            s.add((RECV, root, t, 0, size * n))
        _intra(s, "scatter", rank, size, {SBUF: t, RBUF: RBUF}, root=0, n=n)
    return s


def scatterv(rank: int, size: int, rsize: int, *, root: int, n: int = 0, counts=None) -> Schedule:
    """Intercommunicator scatterv (MPI_Scatterv): the root sends block ``j`` of SBUF to remote ``j``."""
    _check("scatterv", rank, size, rsize, n)
    s = Schedule(algorithm="inter_scatterv")
    r = role("scatterv", root, rsize)
    if r == "root":
        offs = prefix(check_counts("scatterv", counts, rsize))
        s.add(*[(SEND, j, SBUF, offs[j], offs[j + 1]) for j in range(rsize)])
    elif r == "leaf":
        s.add((RECV, root, RBUF, 0, n))
    return s


def allgather(rank: int, size: int, rsize: int, *, n: int = 0, rn: int = 0) -> Schedule:
    """Intercommunicator allgather (MPI_Allgather): this rank sends ``SBUF[0:n]``, receives
    ``rn`` units from each remote rank into ``RBUF[0:rsize*rn]``."""
    _check("allgather", rank, size, rsize, n)
    _check("allgather", rank, size, rsize, rn)
    s = Schedule(algorithm="inter_allgather")
    if size == 1:
        src = SBUF
    else:
        src = s.new_tmp(size * n) if rank == 0 else None
        _intra(s, "gather", rank, size, {SBUF: SBUF, RBUF: src}, root=0, n=n)
    if rank == 0:
        s.add((SEND, 0, src, 0, size * n), (RECV, 0, RBUF, 0, rsize * rn))
    _intra(s, "bcast", rank, size, {RBUF: RBUF}, root=0, n=rsize * rn)
    return s


def allgatherv(rank: int, size: int, rsize: int, *, n: int = 0, counts=None) -> Schedule:
    """Intercommunicator allgatherv (MPI_Allgatherv): ``SBUF[0:n]`` to the remote leader; the
    leader receives block ``j`` (``counts[j]`` units) from remote ``j`` and broadcasts each."""
    _check("allgatherv", rank, size, rsize, n)
    offs = prefix(check_counts("allgatherv", counts, rsize))
    s = Schedule(algorithm="inter_allgatherv")
    steps = [(SEND, 0, SBUF, 0, n)]
    if rank == 0:
        steps += [(RECV, j, RBUF, offs[j], offs[j + 1]) for j in range(rsize)]
    s.add(*steps)
    _bcast_blocks(s, rank, size, offs)
    return s


def alltoall(rank: int, size: int, rsize: int, *, n: int = 0, rn: int = 0) -> Schedule:
    """Intercommunicator alltoall (MPI_Alltoall), pairwise: block ``j`` of ``n`` units of SBUF to
    remote ``j``, block ``j`` of ``rn`` units of RBUF from remote ``j``."""
    _check("alltoall", rank, size, rsize, n)
    _check("alltoall", rank, size, rsize, rn)
    return _pairwise("inter_alltoall", rank, size, rsize, prefix([n] * rsize), prefix([rn] * rsize))


def alltoallv(rank: int, size: int, rsize: int, *, scounts=None, rcounts=None) -> Schedule:
    """Intercommunicator alltoallv/w (MPI_Alltoallv), pairwise, blocks by ``scounts``/``rcounts``."""
    _check("alltoallv", rank, size, rsize)
    so = prefix(check_counts("alltoallv", scounts, rsize, "scounts"))
    ro = prefix(check_counts("alltoallv", rcounts, rsize, "rcounts"))
    return _pairwise("inter_alltoallv", rank, size, rsize, so, ro)


def _pairwise(name, rank, size, rsize, so, ro) -> Schedule:
    s = Schedule(algorithm=name)
    m = max(size, rsize)
    for i in range(m):
        dst, src = (rank + i) % m, (rank - i) % m
        steps = []
        if dst < rsize:
            steps.append((SEND, dst, SBUF, so[dst], so[dst + 1]))
        if src < rsize:
            steps.append((RECV, src, RBUF, ro[src], ro[src + 1]))
        s.add(*steps)
    return s


# --- reductions ----------------------------------------------------------------------------------


def _local_reduce(s: Schedule, rank: int, size: int, n: int, commute: bool):
    """Reduce ``SBUF[0:n]`` of the local group to its leader; the buffer holding the result there."""
    if size == 1:
        return SBUF
    t = s.new_tmp(n) if rank == 0 else None
    _intra(s, "reduce", rank, size, {SBUF: SBUF, RBUF: t}, root=0, n=n, commute=commute)
    return t


def reduce(rank: int, size: int, rsize: int, *, root: int, n: int = 0, commute: bool = True) -> Schedule:
    """Intercommunicator reduce (MPI_Reduce) of ``n`` units: the other group reduces to its
    leader, which sends the result to the root's ``RBUF[0:n]``."""
    _check("reduce", rank, size, rsize, n)
    s = Schedule(algorithm="inter_reduce")
    r = role("reduce", root, rsize)
    if r == "root":
        s.add((RECV, 0, RBUF, 0, n))
    elif r == "leaf":
        t = _local_reduce(s, rank, size, n, commute)
        if rank == 0:
            s.add((SEND, root, t, 0, n))
    return s


def allreduce(rank: int, size: int, rsize: int, *, n: int = 0, commute: bool = True) -> Schedule:
    """Intercommunicator allreduce (MPI_Allreduce): every rank gets the reduction of the REMOTE
    group's inputs: local reduce, leader exchange, local bcast."""
    _check("allreduce", rank, size, rsize, n)
    s = Schedule(algorithm="inter_allreduce")
    t = _local_reduce(s, rank, size, n, commute)
    if rank == 0:
        s.add((SEND, 0, t, 0, n), (RECV, 0, RBUF, 0, n))
    _intra(s, "bcast", rank, size, {RBUF: RBUF}, root=0, n=n)
    return s


def reduce_scatter(rank: int, size: int, rsize: int, *, counts=None, n: int = 0,
                   commute: bool = True) -> Schedule:
    """Intercommunicator reduce_scatter (MPI_Reduce_scatter): this group's inputs
    (``SBUF[0:n]``) are reduced for the remote group; the remote group's result
    (``sum(counts)`` units) is scattered here by ``counts`` (this group's), ``RBUF[0:counts[rank]]``."""
    _check("reduce_scatter", rank, size, rsize, n)
    counts = check_counts("reduce_scatter", counts, size)
    total = sum(counts)
    s = Schedule(algorithm="inter_reduce_scatter")
    t = _local_reduce(s, rank, size, n, commute)
    u = RBUF if size == 1 else s.new_tmp(total) if rank == 0 else None
    if rank == 0:
        s.add((SEND, 0, t, 0, n), (RECV, 0, u, 0, total))
    if size == 1:
        return s
    if len(set(counts)) == 1:
        _intra(s, "scatter", rank, size, {SBUF: u, RBUF: RBUF}, root=0, n=counts[0])
    else:
        _intra(s, "scatterv", rank, size, {SBUF: u, RBUF: RBUF}, root=0, n=counts[rank],
               counts=tuple(counts) if rank == 0 else None)
    return s


def reduce_scatter_block(rank: int, size: int, rsize: int, *, n: int = 0, commute: bool = True) -> Schedule:
    """Intercommunicator reduce_scatter_block (MPI_Reduce_scatter_block): ``n`` units per rank of
    the result, inputs of ``size * n`` units."""
    s = reduce_scatter(rank, size, rsize, counts=[n] * size, n=size * n, commute=commute)
    s.algorithm = "inter_reduce_scatter_block"
    return s


# --- testing aid ---------------------------------------------------------------------------------


def flatten(scheds_a, scheds_b):
    """The schedules of two groups as intracommunicator schedules of one world of
    ``len(a) + len(b)`` ranks (group A first), for ``schedule.simulate``."""
    na = len(scheds_a)

    def conv(sc, me_base, other_base):
        out = Schedule(tmp=sc.tmp, algorithm=sc.algorithm)
        for rnd in sc.rounds:
            steps = []
            for st in rnd:
                if st[0] in (SEND, RECV):
                    p = st[1]
                    st = (st[0], other_base + p if p >= 0 else me_base + ~p) + tuple(st[2:])
                steps.append(st)
            out.rounds.append(tuple(steps))
        return out

    return ([conv(s, 0, na) for s in scheds_a] + [conv(s, na, 0) for s in scheds_b])
