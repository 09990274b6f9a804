"""Neighbor-collective schedules (L1): MPI_Neighbor_allgather(v) and MPI_Neighbor_alltoall(v/w).

Theory of operation
===================
A neighbor collective is one round of point-to-point steps along the edges of a
topology (``gpumpi.topology`` gives the lists): send block ``j`` of ``SBUF`` to
``destinations[j]`` and receive block ``i`` of ``RBUF`` from ``sources[i]``.  The block
ranges are the caller's (``sblocks[j]``, ``rblocks[i]``: unit ranges ``[lo, hi)``, one
user block each, so the vector forms never see a range cross a block); allgather sends
the same range to every destination.

* ``PROC_NULL`` neighbors get no step: nothing is sent, the receive block is left alone.
* An empty block (``lo == hi``) is not sent or received, as in the other collectives: a
  correct program has the matching block empty on the other side too.
* Several edges to the same peer are several messages; messages between a pair match in
  posting order (``schedule``), so sends are posted in block order and receives in
  ``recv_order`` -- the order that makes them meet the right sends (for a Cartesian
  topology each dimension's ``+1`` block first: what a process sends to its ``-1``
  neighbor arrives in that neighbor's ``+1`` block).
* Edges to the process itself are not messages: the ``k``-th send to itself (in block
  order) is copied into the ``k``-th receive from itself (in ``recv_order``), the
  shorter of the two lengths (:func:`self_pairs` lets the caller report a mismatch).
  The copies are the round's local steps, after its messages: ``SBUF`` is not written.
"""

from __future__ import annotations

from ..constants import PROC_NULL
from .schedule import COPY, RBUF, RECV, SBUF, SEND, Schedule

__all__ = ["exchange", "self_pairs", "uniform_blocks", "prefix_blocks"]


def uniform_blocks(k: int, n: int) -> list:
    """``k`` blocks of ``n`` units, one after the other."""
    return [(i * n, (i + 1) * n) for i in range(k)]


def prefix_blocks(sizes) -> list:
    """Blocks of the given sizes, one after the other."""
    out, acc = [], 0
    for s in sizes:
        out.append((acc, acc + s))
        acc += s
    return out


def self_pairs(rank: int, sources, destinations, recv_order=None) -> list:
    """``(j, i)``: send block ``j`` to itself lands in receive block ``i`` (module docstring)."""
    order = range(len(sources)) if recv_order is None else recv_order
    sends = [j for j, d in enumerate(destinations) if d == rank]
    recvs = [i for i in order if sources[i] == rank]
    if len(sends) != len(recvs):
        raise ValueError(f"neighbor: {len(sends)} edges from this process to itself, "
                         f"{len(recvs)} to it from itself (rank {rank})")
    return list(zip(sends, recvs))


def exchange(rank: int, sources, destinations, sblocks, rblocks, recv_order=None,
             algorithm: str = "neighbor") -> Schedule:
    """One round: SBUF ``sblocks[j]`` to ``destinations[j]``, RBUF ``rblocks[i]`` from
    ``sources[i]``, receives posted in ``recv_order`` (module docstring)."""
    if len(sblocks) != len(destinations) or len(rblocks) != len(sources):
        raise ValueError(f"neighbor: {len(sblocks)} send blocks for {len(destinations)} destinations, "
                         f"{len(rblocks)} receive blocks for {len(sources)} sources")
    order = list(range(len(sources))) if recv_order is None else list(recv_order)
    if sorted(order) != list(range(len(sources))):
        raise ValueError(f"neighbor: recv_order {order} is not a permutation of the {len(sources)} sources")
    steps, local = [], []
    for j, (d, (lo, hi)) in enumerate(zip(destinations, sblocks)):
        if d != PROC_NULL and d != rank and hi > lo:
            steps.append((SEND, d, SBUF, lo, hi))
    for i in order:
        s = sources[i]
        lo, hi = rblocks[i]
        if s != PROC_NULL and s != rank and hi > lo:
            steps.append((RECV, s, RBUF, lo, hi))
    for j, i in self_pairs(rank, sources, destinations, order):
        (slo, shi), (rlo, rhi) = sblocks[j], rblocks[i]
        n = min(shi - slo, rhi - rlo)
        if n:
            local.append((COPY, SBUF, slo, RBUF, rlo, n))
    s = Schedule(algorithm=algorithm)
    s.add(*steps, *local)
    return s
