"""Broadcast schedules (L1): binomial tree and scatter-allgather.

Theory of operation
===================
The data is ``RBUF[0:n]`` at every rank (the root's is the source).  Ranks are taken
relative to the root, ``vr = (rank - root) % size`` (see ``_common.tree``).

* ``binomial``: a rank receives the whole buffer from its parent, then sends it to all
  its children at once.  ``ceil(log2 size)`` message latencies, ``n`` units per
  message: the choice for small messages or few ranks.
* ``scatter_allgather`` (van de Geijn; MPICH's long-message bcast): the buffer is cut in
  ``size`` pieces (piece ``j`` belongs to relative rank ``j``); a binomial scatter hands
  every subtree the pieces of its ranks, then a ring allgather (relative rank ``j`` sends
  to ``j + 1``) completes everyone's copy.  About ``2 n`` units move through each rank
  instead of ``n log2 size`` at the root, at the price of ``size - 1`` more rounds.  Every
  piece lives at its final offset, so nothing is copied.  Empty pieces (``n < size``) and
  pieces the receiver already holds from the scatter (its own subtree's) are skipped on
  both sides.
"""

from __future__ import annotations

from ._common import check, pieces, subtree, tree
from .schedule import RBUF, RECV, SEND, Schedule

__all__ = ["binomial", "scatter_allgather", "emit_binomial"]


def emit_binomial(s: Schedule, rank: int, size: int, root: int, n: int, buf: int = RBUF) -> None:
    """Append the rounds of a binomial broadcast of ``buf[0:n]`` from ``root`` to ``s``."""
    if n == 0 or size == 1:
        return
    vr = (rank - root) % size
    parent, children = tree(vr, size)
    if parent:
        s.add((RECV, (rank - parent) % size, buf, 0, n))
    s.add(*[(SEND, (rank + m) % size, buf, 0, n) for m in reversed(children)])


def binomial(rank: int, size: int, *, root: int = 0, n: int = 0) -> Schedule:
    """Binomial-tree broadcast (MPI_Bcast) of ``n`` units from ``root``."""
    check("bcast", rank, size, root, n)
    s = Schedule(algorithm="binomial")
    emit_binomial(s, rank, size, root, n)
    return s


def scatter_allgather(rank: int, size: int, *, root: int = 0, n: int = 0) -> Schedule:
    """Scatter (binomial) + ring allgather broadcast (MPI_Bcast) of ``n`` units: for long messages."""
    check("bcast", rank, size, root, n)
    s = Schedule(algorithm="scatter_allgather")
    if n == 0 or size == 1:
        return s
    offs = pieces(n, size)

    def span(a, b):  # units of the pieces of relative ranks [a, b)
        return offs[a], offs[min(b, size)]

    vr = (rank - root) % size
    parent, children = tree(vr, size)
    if parent:
        lo, hi = span(vr, vr + subtree(vr, size))
        if hi > lo:
            s.add((RECV, (rank - parent) % size, RBUF, lo, hi))
    sends = []
    for m in reversed(children):
        c = vr + m
        lo, hi = span(c, c + subtree(c, size))
        if hi > lo:
            sends.append((SEND, (rank + m) % size, RBUF, lo, hi))
    s.add(*sends)
    right, left = (rank + 1) % size, (rank - 1) % size
    vn = (vr + 1) % size
    sub, subn = subtree(vr, size), subtree(vn, size)
    for k in range(size - 1):
        sp, rp = (vr - k) % size, (vr - k - 1) % size
        steps = []
        # a piece the receiver already holds from the scatter (its subtree's) is not sent again
        if offs[sp + 1] > offs[sp] and (sp - vn) % size >= subn:
            steps.append((SEND, right, RBUF, offs[sp], offs[sp + 1]))
        if offs[rp + 1] > offs[rp] and (rp - vr) % size >= sub:
            steps.append((RECV, left, RBUF, offs[rp], offs[rp + 1]))
        s.add(*steps)
    return s
