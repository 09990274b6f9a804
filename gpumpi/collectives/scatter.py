"""Scatter schedules (L1): linear and binomial scatter, linear scatterv.

Theory of operation
===================
The root's ``SBUF`` holds block ``i`` for rank ``i`` at ``i * n`` (scatterv: at the
prefix sum of ``counts``); every rank receives its block into ``RBUF[0:n]``.  With
``inplace`` (root only) the root's ``RBUF`` is not written (it has none).

* ``linear``: the root posts a send to every rank at once.  ``scatterv`` is linear only
  (a non-root knows only its own count; the vector blocks may not be merged).
* ``binomial``: the mirror of the binomial gather (see ``gather``): an inner node receives
  its subtree's blocks (relative order, own block first) into a temporary, then sends
  each child its subtree's run and copies its own block out.  A child of the root whose
  run wraps past rank ``size - 1`` receives it as two messages cut at the wrap, so the
  root sends straight from ``SBUF``.
"""

from __future__ import annotations

from ._common import check, check_counts, prefix, split_at, subtree, tree
from .schedule import COPY, RBUF, RECV, SBUF, SEND, Schedule

__all__ = ["linear", "binomial", "linear_v"]


def linear(rank: int, size: int, *, root: int = 0, n: int = 0, inplace: bool = False) -> Schedule:
    """Linear scatter (MPI_Scatter) of ``n`` units per rank from ``root``."""
    check("scatter", rank, size, root, n)
    s = Schedule(algorithm="linear")
    if n == 0:
        return s
    if rank == root:
        steps = [(SEND, i, SBUF, i * n, (i + 1) * n) for i in range(size) if i != root]
        if not inplace:
            steps.append((COPY, SBUF, root * n, RBUF, 0, n))
        s.add(*steps)
    else:
        s.add((RECV, root, RBUF, 0, n))
    return s


def binomial(rank: int, size: int, *, root: int = 0, n: int = 0, inplace: bool = False) -> Schedule:
    """Binomial-tree scatter (MPI_Scatter) of ``n`` units per rank from ``root``."""
    check("scatter", rank, size, root, n)
    s = Schedule(algorithm="binomial")
    if n == 0:
        return s
    vr = (rank - root) % size
    parent, children = tree(vr, size)
    wrap = size - root
    if vr == 0:
        steps = []
        for m in reversed(children):
            for a, b in split_at(m, m + subtree(m, size), wrap):
                lo = (a + root) % size * n
                steps.append((SEND, (root + m) % size, SBUF, lo, lo + (b - a) * n))
        if not inplace:
            steps.append((COPY, SBUF, root * n, RBUF, 0, n))
        s.add(*steps)
        return s
    sz = subtree(vr, size)
    frm = (rank - parent) % size
    if not children:
        s.add((RECV, frm, RBUF, 0, n))
        return s
    buf = s.new_tmp(sz * n)
    runs = split_at(vr, vr + sz, wrap) if parent == vr else [(vr, vr + sz)]
    s.add(*[(RECV, frm, buf, (a - vr) * n, (b - vr) * n) for a, b in runs])
    steps = [(SEND, (rank + m) % size, buf, m * n, (m + subtree(vr + m, size)) * n) for m in reversed(children)]
    steps.append((COPY, buf, 0, RBUF, 0, n))
    s.add(*steps)
    return s


def linear_v(rank: int, size: int, *, root: int = 0, n: int = 0, counts=None, inplace: bool = False) -> Schedule:
    """Linear scatterv (MPI_Scatterv): ``counts`` (root only) per rank; ``n`` is this rank's count."""
    check("scatterv", rank, size, root, n)
    s = Schedule(algorithm="linear")
    if rank != root:
        if n:
            s.add((RECV, root, RBUF, 0, n))
        return s
    counts = check_counts("scatterv", counts, size)
    offs = prefix(counts)
    steps = [(SEND, i, SBUF, offs[i], offs[i + 1]) for i in range(size) if i != root and counts[i]]
    if not inplace and counts[root]:
        steps.append((COPY, SBUF, offs[root], RBUF, 0, counts[root]))
    s.add(*steps)
    return s
