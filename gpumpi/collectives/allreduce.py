"""Allreduce schedules (L1): recursive doubling, ring, Rabenseifner, reduce + bcast.

Theory of operation
===================
Input ``SBUF[0:n]`` (``inplace``: ``RBUF``), result ``x0 op ... op x_(size-1)`` in ``RBUF[0:n]``
everywhere; ``RBUF`` is the accumulator.  ``r = size - p`` with ``p`` the largest power of
two not above ``size``; the *fold* (``_common``) first merges pairs of the ranks below
``2r`` and hands the result back at the end, keeping rank order.

* ``recursive_doubling``: after the fold, ``log2 p`` rounds in which virtual rank ``v``
  exchanges its whole partial result with ``v ^ mask`` and combines, the lower block on
  the left, so rank order is kept.  ``n log2 p`` units per rank: for short messages and
  non-commutative operations.
* ``ring``: the buffer in ``size`` pieces; ``size - 1`` steps of a ring reduce-scatter
  (a rank adds its input to the piece it receives and passes it on) leave rank ``r`` with
  piece ``r + 1`` complete, then ``size - 1`` ring allgather steps.  ``2 n (size-1)/size``
  units per rank, no fold: long messages, commutative operations only (each piece is
  reduced in a rotated order).  Empty pieces (``n < size``) are skipped on both sides.
* ``rabenseifner``: after the fold, a recursive-halving reduce-scatter
  (``_common.halving``) then the same exchanges backwards as a recursive-doubling
  allgather of the pieces.  ``2 n`` units per rank and ``2 log2 p`` rounds: long messages.
  The halving keeps rank order, so non-commutative operations are served too.
* ``reduce_bcast``: binomial reduce to rank 0 (rank order) then binomial bcast: the
  simple fallback, correct for every case.
"""

from __future__ import annotations

from ._common import (check, fold_in, fold_out, halving, halving_tmp_units, newrank, oldrank,
                      pieces, pof2_floor)
from .bcast import emit_binomial
from .reduce import emit_tree_reduce
from .schedule import COPY, RBUF, RECV, RED, SBUF, SEND, Schedule

__all__ = ["recursive_doubling", "ring", "rabenseifner", "reduce_bcast"]


def _start(call, rank, size, n, inplace, algorithm):
    check(call, rank, size, 0, n)
    s = Schedule(algorithm=algorithm)
    own = RBUF if inplace else SBUF
    trivial = n == 0 or size == 1
    if n and size == 1 and not inplace:
        s.add((COPY, SBUF, 0, RBUF, 0, n))
    return s, own, trivial


def recursive_doubling(rank: int, size: int, *, n: int = 0, commute: bool = True,
                       inplace: bool = False) -> Schedule:
    """Recursive-doubling allreduce (MPI_Allreduce) of ``n`` units; any size, rank order kept."""
    s, own, trivial = _start("allreduce", rank, size, n, inplace, "recursive_doubling")
    if trivial:
        return s
    p = pof2_floor(size)
    r = size - p
    v = newrank(rank, r)
    t = fold_in(s, rank, r, n, own, RBUF)
    if v >= 0:
        if t is None:
            t = s.new_tmp(n)
        mask = 1
        while mask < p:
            w = v ^ mask
            peer = oldrank(w, r)
            s.add((SEND, peer, RBUF, 0, n), (RECV, peer, t, 0, n), (RED, t, 0, RBUF, 0, n, w < v))
            mask <<= 1
    fold_out(s, rank, r, n, RBUF)
    return s


def rabenseifner(rank: int, size: int, *, n: int = 0, commute: bool = True,
                 inplace: bool = False) -> Schedule:
    """Rabenseifner allreduce (MPI_Allreduce): recursive-halving reduce-scatter + recursive-doubling allgather."""
    s, own, trivial = _start("allreduce", rank, size, n, inplace, "rabenseifner")
    if trivial:
        return s
    p = pof2_floor(size)
    r = size - p
    v = newrank(rank, r)
    fold_in(s, rank, r, n, own, RBUF)
    if v >= 0:
        offs = pieces(n, p)
        rt = s.new_tmp(halving_tmp_units(p, offs))
        wins = halving(s, v, p, r, offs, RBUF, rt)
        for i in range(len(wins) - 2, -1, -1):
            peer = oldrank(v ^ (1 << i), r)
            (klo, khi), (wlo, whi) = wins[i + 1], wins[i]
            glo, ghi = (khi, whi) if klo == wlo else (wlo, klo)
            steps = []
            if offs[khi] > offs[klo]:
                steps.append((SEND, peer, RBUF, offs[klo], offs[khi]))
            if offs[ghi] > offs[glo]:
                steps.append((RECV, peer, RBUF, offs[glo], offs[ghi]))
            s.add(*steps)
    fold_out(s, rank, r, n, RBUF)
    return s


def ring(rank: int, size: int, *, n: int = 0, commute: bool = True, inplace: bool = False) -> Schedule:
    """Ring allreduce (MPI_Allreduce): ring reduce-scatter + ring allgather; commutative operations only."""
    if not commute:
        raise ValueError(f"allreduce: the ring algorithm needs a commutative operation (size {size}, n {n})")
    s, own, trivial = _start("allreduce", rank, size, n, inplace, "ring")
    if trivial:
        return s
    offs = pieces(n, size)
    t = s.new_tmp(offs[1])
    right, left = (rank + 1) % size, (rank - 1) % size
    for k in range(size - 1):
        sp, rp = (rank - k) % size, (rank - k - 1) % size
        comm, local = [], []
        if offs[sp + 1] > offs[sp]:
            comm.append((SEND, right, own if k == 0 else RBUF, offs[sp], offs[sp + 1]))
        c = offs[rp + 1] - offs[rp]
        if k == 0 and own != RBUF:
            # this rank's input goes to RBUF block by block, except block ``rank`` (sent from
            # SBUF now, received whole in the allgather): no pass over memory the schedule
            # overwrites; block ``rp``'s copy comes right before its reduction, which the
            # executor fuses into one pass (``dst = own op received``)
            for j in range(size):
                if j not in (rank, rp) and offs[j + 1] > offs[j]:
                    local.append((COPY, own, offs[j], RBUF, offs[j], offs[j + 1] - offs[j]))
            if c:
                local.append((COPY, own, offs[rp], RBUF, offs[rp], c))
        if c:
            comm.append((RECV, left, t, 0, c))
            local.append((RED, t, 0, RBUF, offs[rp], c, True))
        s.add(*comm, *local)
    for k in range(size - 1):
        sp, rp = (rank + 1 - k) % size, (rank - k) % size
        steps = []
        if offs[sp + 1] > offs[sp]:
            steps.append((SEND, right, RBUF, offs[sp], offs[sp + 1]))
        if offs[rp + 1] > offs[rp]:
            steps.append((RECV, left, RBUF, offs[rp], offs[rp + 1]))
        s.add(*steps)
    return s


def reduce_bcast(rank: int, size: int, *, n: int = 0, commute: bool = True, inplace: bool = False) -> Schedule:
    """Allreduce (MPI_Allreduce) as a binomial reduce to rank 0 (rank order) and a binomial bcast."""
    s, own, trivial = _start("allreduce", rank, size, n, inplace, "reduce_bcast")
    if trivial:
        return s
    emit_tree_reduce(s, rank, size, 0, n, own, RBUF)
    emit_binomial(s, rank, size, 0, n, RBUF)
    return s
