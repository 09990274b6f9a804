"""Reduce-scatter schedules (L1): ring and pairwise (commutative), reduce + scatterv (any op).

Theory of operation
===================
Input ``SBUF[0:sum(counts)]`` (``inplace``: in ``RBUF``), block ``i`` of ``counts[i]`` units at
the prefix sum; rank ``i`` ends with block ``i`` of ``x0 op ... op x_(size-1)`` in
``RBUF[0:counts[i]]``.  MPI_Reduce_scatter's buffers have no displacements (one contiguous
input, one result block), so ``reduce_scatterv`` may move the whole input as one range;
``ring`` and ``pairwise`` move one block per message anyway.

* ``ring``: the partial result for block ``b`` starts at rank ``b + 1`` and travels right
  around the ring, each rank reducing its own contribution in, and completes at rank ``b``
  after ``size - 1`` steps.  Two temporaries alternate (receive into one while the other
  is sent).  Commutative operations only (the order is rotated).
* ``pairwise`` (MPICH's long-message algorithm): in step ``k`` a rank sends its input block
  for ``rank + k`` straight from the input and reduces the block it receives from
  ``rank - k`` into its accumulator.  No forwarding, so blocks never wait on each other;
  commutative operations only.  With ``inplace`` the accumulator is a temporary (the
  result block overlaps input still to be sent) copied out at the end.
* ``reduce_scatterv``: a binomial reduce of the whole input to rank 0 in rank order
  (``reduce.emit_tree_reduce``) into a temporary, then a linear scatter of the blocks.
  Serves non-commutative operations, and short messages (``log2 size + 1`` latencies).

``reduce_scatter_block`` is the same with ``counts = [n] * size`` (its module wraps these).
"""

from __future__ import annotations

from ._common import check, check_counts, prefix
from .reduce import emit_tree_reduce
from .schedule import COPY, RBUF, RECV, RED, SBUF, SEND, Schedule

__all__ = ["ring", "pairwise", "reduce_scatterv"]


def _start(call, rank, size, counts, inplace, algorithm):
    check(call, rank, size)
    counts = check_counts(call, counts, size)
    s = Schedule(algorithm=algorithm)
    own = RBUF if inplace else SBUF
    c = counts[rank]
    trivial = sum(counts) == 0 or size == 1
    if size == 1 and c and not inplace:
        s.add((COPY, SBUF, 0, RBUF, 0, c))
    return s, counts, prefix(counts), own, trivial


def _commutative(call, algorithm, commute, size):
    if not commute:
        raise ValueError(f"{call}: the {algorithm} algorithm needs a commutative operation (size {size})")


def ring(rank: int, size: int, *, counts=None, commute: bool = True, inplace: bool = False,
         call: str = "reduce_scatter") -> Schedule:
    """Ring reduce-scatter (MPI_Reduce_scatter) of blocks of ``counts`` units; commutative operations only."""
    _commutative(call, "ring", commute, size)
    s, counts, offs, own, trivial = _start(call, rank, size, counts, inplace, "ring")
    if trivial:
        return s
    most = max(counts)
    t = (s.new_tmp(most), s.new_tmp(most))
    right, left = (rank + 1) % size, (rank - 1) % size
    for k in range(size - 1):
        sb, rb = (rank - 1 - k) % size, (rank - 2 - k) % size
        cur, prev = t[k % 2], t[(k + 1) % 2]
        steps = []
        if counts[sb]:
            steps.append((SEND, right, own, offs[sb], offs[sb + 1]) if k == 0 else (SEND, right, prev, 0, counts[sb]))
        c = counts[rb]
        if c:
            steps.append((RECV, left, cur, 0, c))
            steps.append((RED, own, offs[rb], cur, 0, c, False))
            if k == size - 2:  # rb is this rank's block: done
                steps.append((COPY, cur, 0, RBUF, 0, c))
        s.add(*steps)
    return s


def pairwise(rank: int, size: int, *, counts=None, commute: bool = True, inplace: bool = False,
             call: str = "reduce_scatter") -> Schedule:
    """Pairwise-exchange reduce-scatter (MPI_Reduce_scatter) of blocks of ``counts`` units; commutative only."""
    _commutative(call, "pairwise", commute, size)
    s, counts, offs, own, trivial = _start(call, rank, size, counts, inplace, "pairwise")
    if trivial:
        return s
    c = counts[rank]
    acc = s.new_tmp(c) if inplace and c else RBUF
    t = s.new_tmp(c) if c else None
    for k in range(1, size):
        to, frm = (rank + k) % size, (rank - k) % size
        steps = []
        if counts[to]:
            steps.append((SEND, to, own, offs[to], offs[to + 1]))
        if c:
            steps.append((RECV, frm, t, 0, c))
            if k == 1:
                steps.append((COPY, own, offs[rank], acc, 0, c))
            steps.append((RED, t, 0, acc, 0, c, False))
            if k == size - 1 and acc != RBUF:
                steps.append((COPY, acc, 0, RBUF, 0, c))
        s.add(*steps)
    return s


def reduce_scatterv(rank: int, size: int, *, counts=None, commute: bool = True, inplace: bool = False,
                    call: str = "reduce_scatter") -> Schedule:
    """Reduce-scatter (MPI_Reduce_scatter) as a rank-order binomial reduce to rank 0 and a linear scatterv."""
    s, counts, offs, own, trivial = _start(call, rank, size, counts, inplace, "reduce_scatterv")
    if trivial:
        return s
    total = offs[-1]
    if rank == 0:
        a = s.new_tmp(total)
        emit_tree_reduce(s, rank, size, 0, total, own, a)
        steps = [(SEND, i, a, offs[i], offs[i + 1]) for i in range(1, size) if counts[i]]
        if counts[0]:
            steps.append((COPY, a, 0, RBUF, 0, counts[0]))
        s.add(*steps)
    else:
        emit_tree_reduce(s, rank, size, 0, total, own, None)
        if counts[rank]:
            s.add((RECV, 0, RBUF, 0, counts[rank]))
    return s
