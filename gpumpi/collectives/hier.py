"""Hierarchical collectives for communicators over several nodes (L1, pure).

Theory of operation
===================
Ranks of one node reach each other through shared memory (rings, cross-memory attach, CUDA
IPC); ranks of different nodes through the network (the ``mpi`` transport, DESIGN section
14).  A hierarchical schedule keeps inside a node every transfer that can stay there and
crosses nodes only between one *leader* per node:

* ``allreduce``: reduce inside every node to its leader, allreduce among the leaders, then
  broadcast inside every node from its leader;
* ``reduce``: reduce inside every node to its leader (the root leads its own node), then
  among the leaders to the root;
* ``bcast``: broadcast among the leaders from the root (which leads its own node), then
  inside every node;
* ``barrier``: every member tells its leader, the leaders run a dissemination barrier, every
  leader tells its members.

``nodes`` is the node of every rank of the communicator (the same list at every rank): a
node's members are its ranks in rank order, its leader the lowest of them (the root's node:
the root), the leaders in node order.  Each phase is the flat schedule the selection table
picks for the phase's group (``flat``: :func:`gpumpi.collectives.select.build` on one node),
its peers mapped to communicator ranks, its buffers to the call's (:func:`embed`).

Reductions combine every node's ranks in rank order, then the nodes in node order: that is
rank order when every node's ranks are contiguous (:func:`contiguous`), so a non-commutative
operation takes these schedules only then (the selection table's rule).  A non-root leader
of ``reduce`` keeps its node's partial result in a temporary (a non-root's receive buffer is
not the collective's to write).
"""

from __future__ import annotations

from .schedule import COPY, RBUF, RECV, SBUF, SEND, TMP, Schedule

__all__ = ["allreduce", "reduce", "bcast", "barrier", "contiguous", "embed", "layout"]

#: the algorithms of the phases inside a node: binomial trees, the fewest rounds (shared memory
#: moves the bytes at memory speed, so the splitting algorithms' volume savings buy nothing there)
_NODE_REDUCE, _NODE_BCAST = "binomial", "binomial"


def contiguous(nodes) -> bool:
    """Whether every node's ranks are one contiguous run of ranks."""
    seen = set()
    prev = None
    for x in nodes:
        if x != prev:
            if x in seen:
                return False
            seen.add(x)
            prev = x
    return True


def layout(rank: int, nodes, root: int = -1):
    """``(members of rank's node, rank's index among them, leaders, index of rank's leader
    among the leaders)``: a node's leader is its lowest rank, or ``root`` in root's node."""
    order = list(dict.fromkeys(nodes))  # nodes in the order of their lowest ranks
    mine = nodes[rank]
    members = [r for r, x in enumerate(nodes) if x == mine]
    leaders = []
    for x in order:
        lead = root if root >= 0 and nodes[root] == x else next(r for r, y in enumerate(nodes) if y == x)
        leaders.append(lead)
    return members, members.index(rank), leaders, order.index(mine)


def embed(s: Schedule, sub: Schedule, peers, bmap: dict) -> None:
    """Append the rounds of ``sub`` (a schedule of a group of ``s``'s ranks) to ``s``: group rank
    ``p`` becomes ``peers[p]``, ``SBUF``/``RBUF`` become ``bmap``'s buffers, its temporaries new
    temporaries of ``s``."""
    m = dict(bmap)
    for k, units in enumerate(sub.tmp):
        m[TMP + k] = s.new_tmp(units)
    for rnd in sub.rounds:
        out = []
        for st in rnd:
            if st[0] in (SEND, RECV):
                out.append((st[0], peers[st[1]], m[st[2]], st[3], st[4]))
            else:
                st = list(st)
                st[1], st[3] = m[st[1]], m[st[3]]
                out.append(tuple(st))
        s.add(*out)


def allreduce(rank: int, size: int, *, nodes, flat, n: int = 0, commute: bool = True, inplace: bool = False) -> Schedule:
    s = Schedule(algorithm="hierarchical")
    members, li, leaders, lx = layout(rank, nodes)
    own = RBUF if inplace else SBUF
    ls = len(members)
    if ls > 1:  # the node's sum at its leader (members[0]), in its RBUF
        sub = flat("reduce", li, ls, root=0, n=n, commute=commute, inplace=inplace and li == 0, algorithm=_NODE_REDUCE)
        embed(s, sub, members, {SBUF: own, RBUF: RBUF})
    elif own != RBUF and n:
        s.add((COPY, SBUF, 0, RBUF, 0, n))
    if li == 0 and len(leaders) > 1:
        embed(s, flat("allreduce", lx, len(leaders), n=n, commute=commute, inplace=True), leaders, {RBUF: RBUF})
    if ls > 1:
        embed(s, flat("bcast", li, ls, root=0, n=n, algorithm=_NODE_BCAST), members, {RBUF: RBUF})
    return s


def reduce(rank: int, size: int, *, nodes, flat, root: int = 0, n: int = 0, commute: bool = True,
           inplace: bool = False) -> Schedule:
    s = Schedule(algorithm="hierarchical")
    members, li, leaders, lx = layout(rank, nodes, root)
    lead = leaders[lx]
    ls = len(members)
    me_root = rank == root
    own = RBUF if inplace and me_root else SBUF
    # the node's partial result at its leader: the root's in RBUF, another leader's in a temporary
    part = own
    if ls > 1:
        part = RBUF if lead == root else (s.new_tmp(n) if rank == lead else None)
        bmap = {SBUF: own, RBUF: part if rank == lead else RBUF}
        sub = flat("reduce", li, ls, root=members.index(lead), n=n, commute=commute,
                    inplace=me_root and inplace, algorithm=_NODE_REDUCE)
        embed(s, sub, members, bmap)
    if rank == lead and len(leaders) > 1:
        rx = leaders.index(root)
        if me_root:
            sub = flat("reduce", lx, len(leaders), root=rx, n=n, commute=commute, inplace=part == RBUF)
            embed(s, sub, leaders, {SBUF: part, RBUF: RBUF})
        else:
            sub = flat("reduce", lx, len(leaders), root=rx, n=n, commute=commute)
            embed(s, sub, leaders, {SBUF: part, RBUF: RBUF})
    elif me_root and part == SBUF and n:  # one rank in all: the root's own input is the result
        s.add((COPY, SBUF, 0, RBUF, 0, n))
    return s


def bcast(rank: int, size: int, *, nodes, flat, root: int = 0, n: int = 0) -> Schedule:
    s = Schedule(algorithm="hierarchical")
    members, li, leaders, lx = layout(rank, nodes, root)
    lead = leaders[lx]
    if rank == lead and len(leaders) > 1:
        embed(s, flat("bcast", lx, len(leaders), root=leaders.index(root), n=n), leaders, {RBUF: RBUF})
    if len(members) > 1:
        embed(s, flat("bcast", li, len(members), root=members.index(lead), n=n, algorithm=_NODE_BCAST), members,
              {RBUF: RBUF})
    return s


def barrier(rank: int, size: int, *, nodes, flat) -> Schedule:
    s = Schedule(algorithm="hierarchical")
    members, li, leaders, lx = layout(rank, nodes)
    lead = members[0]
    if li:
        s.add((SEND, lead, RBUF, 0, 0))
    else:
        s.add(*[(RECV, m, RBUF, 0, 0) for m in members[1:]])
    if li == 0 and len(leaders) > 1:
        embed(s, flat("barrier", lx, len(leaders)), leaders, {RBUF: RBUF})
    if li:
        s.add((RECV, lead, RBUF, 0, 0))
    else:
        s.add(*[(SEND, m, RBUF, 0, 0) for m in members[1:]])
    return s
