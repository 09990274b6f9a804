"""Scan and exscan schedules (L1): recursive doubling with a partial buffer.

Theory of operation
===================
Input ``SBUF[0:n]`` (``inplace``: ``RBUF``).  ``scan`` leaves ``x0 op ... op x_rank`` in
``RBUF[0:n]``; ``exscan`` leaves ``x0 op ... op x_(rank-1)`` and never writes rank 0's ``RBUF``.

Recursive doubling (MPICH's, Hillis-Steele style): a rank keeps a *partial* result, the
reduction over its aligned block of ``2 mask`` ranks so far, and its *result*.  At each
``mask = 1, 2, 4, ...`` it exchanges its partial with ``rank ^ mask`` (when that rank
exists).  A partner below contributes the block just below everything already in the
result, so it is combined on the left of both partial and result; a partner above only
extends the partial, on the right.  Rank order is kept, so non-commutative operations
are served.  ``ceil(log2 size)`` rounds of ``n`` units.  The partial starts as the input
(sent straight from it) and gets a temporary of its own only when it first changes and
is sent again; exscan's result is the first received partial (a COPY) and grows from
there, so rank 0, which never has a partner below, never writes it.
"""

from __future__ import annotations

from ._common import check
from .schedule import COPY, RBUF, RECV, RED, SBUF, SEND, Schedule

__all__ = ["recursive_doubling", "recursive_doubling_ex"]


def _rd(call, rank, size, n, inplace, exclusive, algorithm):
    check(call, rank, size, 0, n)
    s = Schedule(algorithm=algorithm)
    if n == 0:
        return s
    own = RBUF if inplace else SBUF
    have = not exclusive  # whether RBUF already holds a result to extend
    if have and not inplace:
        # scan's result starts as the input (the copy runs after the first round's messages)
        first_local = [(COPY, SBUF, 0, RBUF, 0, n)]
    else:
        first_local = []
    masks = []
    m = 1
    while m < size:
        if rank ^ m < size:
            masks.append(m)
        m <<= 1
    if not masks:
        s.add(*first_local)
        return s
    t = s.new_tmp(n)
    part = own
    for idx, m in enumerate(masks):
        d = rank ^ m
        last = idx == len(masks) - 1
        steps = [(SEND, d, part, 0, n), (RECV, d, t, 0, n)]
        if not last:
            if part == own:
                part = s.new_tmp(n)
                steps.append((COPY, own, 0, part, 0, n))
            steps.append((RED, t, 0, part, 0, n, d < rank))
        if idx == 0:
            steps += first_local
        if d < rank:
            steps.append((RED, t, 0, RBUF, 0, n, True) if have else (COPY, t, 0, RBUF, 0, n))
            have = True
        s.add(*steps)
    return s


def recursive_doubling(rank: int, size: int, *, n: int = 0, commute: bool = True,
                       inplace: bool = False) -> Schedule:
    """Recursive-doubling inclusive scan (MPI_Scan) of ``n`` units; rank order kept."""
    return _rd("scan", rank, size, n, inplace, False, "recursive_doubling")


def recursive_doubling_ex(rank: int, size: int, *, n: int = 0, commute: bool = True,
                          inplace: bool = False) -> Schedule:
    """Recursive-doubling exclusive scan (MPI_Exscan) of ``n`` units; rank 0's RBUF untouched."""
    return _rd("exscan", rank, size, n, inplace, True, "recursive_doubling")
