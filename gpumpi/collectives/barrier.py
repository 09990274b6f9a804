"""Barrier schedules (L1): the dissemination barrier.

Theory of operation
===================
Dissemination (Hensgen, Finkel and Manber): in round ``k`` (``k = 1, 2, 4, ... < size``)
every rank sends an empty message to ``rank + k`` and waits for one from ``rank - k``
(mod ``size``).  After ``ceil(log2 size)`` rounds every rank has heard, directly or
through a chain, from every other rank, so none leaves before all have entered.  It
needs no power of two and no root.  The messages are zero-unit ranges of ``RBUF``
(the executor sends an empty message for an empty range; the barrier has no buffers,
so ``RBUF`` may be of zero units).
"""

from __future__ import annotations

from ._common import check
from .schedule import RBUF, RECV, SEND, Schedule

__all__ = ["dissemination"]


def dissemination(rank: int, size: int) -> Schedule:
    """Dissemination barrier (MPI_Barrier): ceil(log2 size) rounds of empty messages."""
    check("barrier", rank, size)
    s = Schedule(algorithm="dissemination")
    k = 1
    while k < size:
        s.add((SEND, (rank + k) % size, RBUF, 0, 0), (RECV, (rank - k) % size, RBUF, 0, 0))
        k <<= 1
    return s
