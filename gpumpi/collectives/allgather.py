"""Allgather schedules (L1): ring, recursive doubling and Bruck allgather; ring allgatherv.

Theory of operation
===================
Every rank contributes ``SBUF[0:n]`` (``inplace``: its block already at ``RBUF[rank * n]``)
and ends with all blocks in ``RBUF``, block ``i`` at ``i * n`` (allgatherv: at the prefix
sum of ``counts``).

* ``ring``: in step ``k`` rank ``r`` sends block ``r - k`` to ``r + 1`` and receives block
  ``r - k - 1`` from ``r - 1``.  ``size - 1`` rounds of one block: bandwidth-optimal, for
  large messages.  The first step sends straight from ``SBUF`` and copies the own block
  into place after it.  ``ring_v`` (allgatherv) is the same with per-rank counts: every
  message is one block of the vector form; empty blocks are skipped on both sides.
* ``recursive_doubling``: with ``p`` the largest power of two not above ``size`` and
  ``r = size - p``, ranks ``p + i`` (``i < r``) first hand their block to rank ``i``.  Then
  ranks ``0 .. p-1`` double: at mask ``m`` rank ``i`` exchanges with ``i ^ m`` the blocks of
  its aligned group of ``m`` ranks plus those groups' extra blocks (two ranges of
  ``RBUF``).  Last, ranks ``i < r`` send the whole result to ``p + i``.  ``log2 p``
  rounds (two more when ``size`` is not a power of two): for small messages.
* ``bruck``: a temporary holds the blocks in the order ``rank, rank + 1, ...``; in step
  ``k = 1, 2, 4, ...`` a rank sends its first ``min(k, size - k)`` blocks to ``rank - k`` and
  appends those of ``rank + k``.  ``ceil(log2 size)`` rounds for any size; a final
  rotation copies the temporary into ``RBUF``.
"""

from __future__ import annotations

from ._common import check, check_counts, pof2_floor, prefix
from .schedule import COPY, RBUF, RECV, SBUF, SEND, Schedule

__all__ = ["ring", "recursive_doubling", "bruck", "ring_v"]


def _own(rank, n, inplace):
    return (RBUF, rank * n) if inplace else (SBUF, 0)


def ring(rank: int, size: int, *, n: int = 0, inplace: bool = False) -> Schedule:
    """Ring allgather (MPI_Allgather) of ``n`` units per rank."""
    check("allgather", rank, size, 0, n)
    s = ring_v(rank, size, counts=[n] * size, inplace=inplace)
    return s


def ring_v(rank: int, size: int, *, counts=None, inplace: bool = False) -> Schedule:
    """Ring allgatherv (MPI_Allgatherv): block ``i`` of ``counts[i]`` units from rank ``i``."""
    check("allgatherv", rank, size)
    counts = check_counts("allgatherv", counts, size)
    offs = prefix(counts)
    s = Schedule(algorithm="ring")
    c = counts[rank]
    copy = [] if inplace or c == 0 else [(COPY, SBUF, 0, RBUF, offs[rank], c)]
    right, left = (rank + 1) % size, (rank - 1) % size
    for k in range(size - 1):
        sb, rb = (rank - k) % size, (rank - k - 1) % size
        steps = []
        if counts[sb]:
            if k == 0 and not inplace:
                steps.append((SEND, right, SBUF, 0, c))
            else:
                steps.append((SEND, right, RBUF, offs[sb], offs[sb + 1]))
        if counts[rb]:
            steps.append((RECV, left, RBUF, offs[rb], offs[rb + 1]))
        if k == 0:
            steps += copy
        s.add(*steps)
    if size == 1:
        s.add(*copy)
    return s


def recursive_doubling(rank: int, size: int, *, n: int = 0, inplace: bool = False) -> Schedule:
    """Recursive-doubling allgather (MPI_Allgather) of ``n`` units per rank; any size."""
    check("allgather", rank, size, 0, n)
    s = Schedule(algorithm="recursive_doubling")
    if n == 0:
        return s
    p = pof2_floor(size)
    r = size - p
    ob, olo = _own(rank, n, inplace)
    if rank >= p:
        s.add((SEND, rank - p, ob, olo, olo + n))
        s.add((RECV, rank - p, RBUF, 0, size * n))  # carries this rank's own block too
        return s
    steps = []
    if rank < r:
        steps.append((RECV, rank + p, RBUF, (rank + p) * n, (rank + p + 1) * n))
    if not inplace:
        steps.append((COPY, SBUF, 0, RBUF, rank * n, n))
    s.add(*steps)
    mask = 1
    while mask < p:
        peer = rank ^ mask
        steps = []
        for who, kind in ((rank, SEND), (peer, RECV)):
            g = who & ~(mask - 1)
            steps.append((kind, peer, RBUF, g * n, (g + mask) * n))
            if g < r:
                steps.append((kind, peer, RBUF, (g + p) * n, (min(g + mask, r) + p) * n))
        s.add(*steps)
        mask <<= 1
    if rank < r:
        s.add((SEND, rank + p, RBUF, 0, size * n))
    return s


def bruck(rank: int, size: int, *, n: int = 0, inplace: bool = False) -> Schedule:
    """Bruck allgather (MPI_Allgather) of ``n`` units per rank: ceil(log2 size) rounds, any size."""
    check("allgather", rank, size, 0, n)
    s = Schedule(algorithm="bruck")
    if n == 0:
        return s
    ob, olo = _own(rank, n, inplace)
    if size == 1:
        if not inplace:
            s.add((COPY, SBUF, 0, RBUF, 0, n))
        return s
    t = s.new_tmp(size * n)
    k = 1
    while k < size:
        cnt = min(k, size - k)
        to, frm = (rank - k) % size, (rank + k) % size
        if k == 1:
            steps = [(SEND, to, ob, olo, olo + n), (RECV, frm, t, n, 2 * n), (COPY, ob, olo, t, 0, n)]
        else:
            steps = [(SEND, to, t, 0, cnt * n), (RECV, frm, t, k * n, (k + cnt) * n)]
        k <<= 1
        if k >= size:  # the rotation into place: t[j] is the block of rank + j
            head = size - rank
            if head > 1:
                steps.append((COPY, t, n, RBUF, (rank + 1) * n, (head - 1) * n))
            if rank:
                steps.append((COPY, t, head * n, RBUF, 0, rank * n))
            if not inplace:
                steps.append((COPY, SBUF, 0, RBUF, rank * n, n))
        s.add(*steps)
    return s
