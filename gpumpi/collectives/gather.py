"""Gather schedules (L1): linear and binomial gather, linear gatherv.

Theory of operation
===================
Every rank contributes ``SBUF[0:n]``; the root's ``RBUF`` receives block ``i`` (rank
``i``'s) at ``i * n`` (gatherv: at the prefix sum of ``counts``).  With ``inplace`` (root
only) the root's block is already in place and it has no ``SBUF``.

* ``linear``: every rank sends to the root, which posts all receives at once.  One
  round; the root handles ``size - 1`` messages.  ``gatherv`` is linear only: a
  non-root knows only its own count, and the vector form's blocks may not be merged.
* ``binomial``: ranks relative to the root (``_common.tree``); a subtree is a run of
  relative ranks, so an inner node gathers its subtree's blocks into a temporary in
  relative order (own block first) and sends it to its parent as one message.  At the
  root the run of relative ranks can wrap past rank ``size - 1`` to rank 0; a child whose
  run wraps sends it as two messages, cut where the wrap is, so the root receives
  straight into ``RBUF``.  ``ceil(log2 size)`` latencies; ``n (size - 1)`` units reach the
  root as before, inner nodes forward their subtrees.
"""

from __future__ import annotations

from ._common import check, check_counts, prefix, split_at, subtree, tree
from .schedule import COPY, RBUF, RECV, SBUF, SEND, Schedule

__all__ = ["linear", "binomial", "linear_v"]


def linear(rank: int, size: int, *, root: int = 0, n: int = 0, inplace: bool = False) -> Schedule:
    """Linear gather (MPI_Gather) of ``n`` units per rank to ``root``."""
    check("gather", rank, size, root, n)
    s = Schedule(algorithm="linear")
    if n == 0:
        return s
    if rank == root:
        steps = [(RECV, i, RBUF, i * n, (i + 1) * n) for i in range(size) if i != root]
        if not inplace:
            steps.append((COPY, SBUF, 0, RBUF, root * n, n))
        s.add(*steps)
    else:
        s.add((SEND, root, SBUF, 0, n))
    return s


def binomial(rank: int, size: int, *, root: int = 0, n: int = 0, inplace: bool = False) -> Schedule:
    """Binomial-tree gather (MPI_Gather) of ``n`` units per rank to ``root``."""
    check("gather", rank, size, root, n)
    s = Schedule(algorithm="binomial")
    if n == 0:
        return s
    vr = (rank - root) % size
    parent, children = tree(vr, size)
    wrap = size - root  # the relative rank that is rank 0
    if vr == 0:
        steps = []
        for m in children:
            for a, b in split_at(m, m + subtree(m, size), wrap):
                lo = (a + root) % size * n
                steps.append((RECV, (root + m) % size, RBUF, lo, lo + (b - a) * n))
        if not inplace:
            steps.append((COPY, SBUF, 0, RBUF, root * n, n))
        s.add(*steps)
        return s
    sz = subtree(vr, size)
    buf = SBUF
    if children:
        buf = s.new_tmp(sz * n)
        steps = [(RECV, (rank + m) % size, buf, m * n, (m + subtree(vr + m, size)) * n) for m in children]
        steps.append((COPY, SBUF, 0, buf, 0, n))
        s.add(*steps)
    to = (rank - parent) % size
    runs = split_at(vr, vr + sz, wrap) if parent == vr else [(vr, vr + sz)]
    s.add(*[(SEND, to, buf, (a - vr) * n, (b - vr) * n) for a, b in runs])
    return s


def linear_v(rank: int, size: int, *, root: int = 0, n: int = 0, counts=None, inplace: bool = False) -> Schedule:
    """Linear gatherv (MPI_Gatherv): ``counts`` (root only) per rank; ``n`` is this rank's count."""
    check("gatherv", rank, size, root, n)
    s = Schedule(algorithm="linear")
    if rank != root:
        if n:
            s.add((SEND, root, SBUF, 0, n))
        return s
    counts = check_counts("gatherv", counts, size)
    offs = prefix(counts)
    steps = [(RECV, i, RBUF, offs[i], offs[i + 1]) for i in range(size) if i != root and counts[i]]
    if not inplace and counts[root]:
        steps.append((COPY, SBUF, 0, RBUF, offs[root], counts[root]))
    s.add(*steps)
    return s
