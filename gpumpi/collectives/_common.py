"""Helpers the schedule builders share (L1): argument checks, splits, trees, the fold.

Theory of operation
===================
The builders of this package are pure functions of (rank, size, root, counts, op
traits).  What several of them need lives here:

* ``check``/``check_counts``: argument validation with messages that name the call.
* ``pieces(n, k)``: the offsets of ``n`` units split in ``k`` nearly equal pieces (the
  first ``n % k`` one unit larger); ``prefix(counts)``: the offsets of blocks.
* ``tree(vr, size)``: the binomial tree on *relative* ranks ``vr = (rank - root) % size``
  (MPICH's): ``vr``'s parent is ``vr - lowbit(vr)``, its children are ``vr + m`` for
  ``m = 1, 2, 4, ... < lowbit(vr)`` (every power of two below ``size`` at the root),
  and the subtree of ``vr`` is the relative ranks ``[vr, vr + lowbit(vr))`` cut at
  ``size``.  So a subtree is a contiguous run of relative ranks, which is what lets
  gather/scatter move a whole subtree as one range and a reduction keep rank order.
* The *fold* for algorithms that want a power of two ``p <= size`` of ranks (recursive
  doubling, Rabenseifner): with ``r = size - p``, the ranks below ``2r`` pair up, each even
  rank handing its data to the odd rank above it and sitting out; the others are
  renumbered ``rank - r``.  Pairs are adjacent and the even (lower) rank is the left
  operand, and virtual rank order is rank order, so non-commutative operations keep
  their order.  ``newrank``/``oldrank`` map between the numberings.
* ``halving``: the recursive-halving reduce-scatter on the ``p`` virtual ranks with the
  distance *doubling* (mask 1, 2, 4, ...): at each step a rank keeps one half of its
  current window of pieces (the half its mask bit selects), sends the other half to its
  partner ``v ^ mask`` and reduces the partner's half into its own.  The ranks whose
  partial results meet are always two adjacent aligned blocks of virtual ranks, so
  passing the lower block as the left operand keeps rank order.  It returns each step's
  window, which the allgather (allreduce) and gather (reduce) phases replay backwards.
* ``concat``: schedules one after the other, temporaries renumbered.
"""

from __future__ import annotations

from .schedule import COPY, RECV, RED, SEND, TMP, Schedule


def check(call: str, rank: int, size: int, root: int = 0, n: int = 0) -> None:
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"{call}: rank outside the communicator (rank {rank}, size {size})")
    if not 0 <= root < size:
        raise ValueError(f"{call}: root outside the communicator (root {root}, size {size})")
    if n < 0:
        raise ValueError(f"{call}: negative count ({n})")


def check_counts(call: str, counts, size: int, name: str = "counts") -> list:
    if counts is None:
        raise ValueError(f"{call}: {name} required (size {size})")
    counts = list(counts)
    if len(counts) != size:
        raise ValueError(f"{call}: {name} needs one entry per rank ({len(counts)} entries, size {size})")
    if any(c < 0 for c in counts):
        raise ValueError(f"{call}: negative entry in {name} ({counts})")
    return counts


def pieces(n: int, k: int) -> list:
    """Offsets (``k + 1`` of them) of ``n`` units split in ``k`` nearly equal pieces."""
    q, r = divmod(n, k)
    offs = [0]
    for i in range(k):
        offs.append(offs[-1] + q + (1 if i < r else 0))
    return offs


def prefix(counts) -> list:
    """Offsets (``len(counts) + 1`` of them) of blocks of ``counts`` units laid end to end."""
    offs = [0]
    for c in counts:
        offs.append(offs[-1] + c)
    return offs


def pof2_floor(size: int) -> int:
    """The largest power of two not above ``size``."""
    return 1 << (size.bit_length() - 1)


def lowbit(v: int) -> int:
    return v & -v


def tree(vr: int, size: int):
    """(parent mask or 0 at the root, child masks ascending) of relative rank ``vr``."""
    if vr == 0:
        top = size
        parent = 0
    else:
        top = parent = lowbit(vr)
    children = []
    m = 1
    while m < top and vr + m < size:
        children.append(m)
        m <<= 1
    return parent, children


def subtree(vr: int, size: int) -> int:
    """Number of ranks in the subtree of relative rank ``vr``."""
    return size if vr == 0 else min(lowbit(vr), size - vr)


def newrank(rank: int, r: int) -> int:
    """Virtual rank after the fold of ``r`` extra ranks (-1: sits out)."""
    if rank < 2 * r:
        return rank // 2 if rank % 2 else -1
    return rank - r


def oldrank(v: int, r: int) -> int:
    return 2 * v + 1 if v < r else v + r


def fold_in(s: Schedule, rank: int, r: int, n: int, own, acc, left_tmp=None):
    """The fold's first round: even ranks below ``2r`` send ``own``, odd ones reduce it in.

    ``own``/``acc`` are buffer ids (offset 0, ``n`` units).  Every rank that takes part
    after the fold ends the round with its input in ``acc`` (a COPY when they differ).
    Returns the temporary used for the receive (allocated when needed), or ``left_tmp``.
    """
    steps = []
    if rank < 2 * r and rank % 2 == 0:
        s.add((SEND, rank + 1, own, 0, n))
        return left_tmp
    if rank < 2 * r:
        if left_tmp is None:
            left_tmp = s.new_tmp(n)
        steps.append((RECV, rank - 1, left_tmp, 0, n))
    if acc != own:
        steps.append((COPY, own, 0, acc, 0, n))
    if rank < 2 * r:
        steps.append((RED, left_tmp, 0, acc, 0, n, True))
    s.add(*steps)
    return left_tmp


def fold_out(s: Schedule, rank: int, r: int, n: int, buf) -> None:
    """The fold's last round: odd ranks below ``2r`` send ``buf[0:n]`` back to the even one."""
    if rank < 2 * r:
        if rank % 2:
            s.add((SEND, rank - 1, buf, 0, n))
        else:
            s.add((RECV, rank + 1, buf, 0, n))


def halving_windows(v: int, p: int):
    """Windows of pieces ``[lo, hi)`` that virtual rank ``v`` holds before each halving step and after the last."""
    lo, hi = 0, p
    wins = [(lo, hi)]
    mask = 1
    while mask < p:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if v & mask == 0 else (mid, hi)
        wins.append((lo, hi))
        mask <<= 1
    return wins


def halving(s: Schedule, v: int, p: int, r: int, offs, acc, rtmp) -> list:
    """Recursive-halving reduce-scatter of ``acc`` over the ``p`` virtual ranks (see the docstring).

    ``offs`` are the ``p + 1`` piece offsets, ``rtmp`` a temporary of at least half the
    largest window.  Returns the windows (``halving_windows``).
    """
    wins = halving_windows(v, p)
    mask, i = 1, 0
    while mask < p:
        w = v ^ mask
        peer = oldrank(w, r)
        (klo, khi), (wlo, whi) = wins[i + 1], wins[i]
        glo, ghi = (khi, whi) if klo == wlo else (wlo, klo)  # the half given away
        steps = []
        if offs[ghi] > offs[glo]:
            steps.append((SEND, peer, acc, offs[glo], offs[ghi]))
        k = offs[khi] - offs[klo]
        if k:
            steps.append((RECV, peer, rtmp, 0, k))
            steps.append((RED, rtmp, 0, acc, offs[klo], k, w < v))
        s.add(*steps)
        mask <<= 1
        i += 1
    return wins


def halving_tmp_units(p: int, offs) -> int:
    """Units the receive temporary of ``halving`` needs at any virtual rank.

    The largest window kept is a first-step half of ``p // 2`` pieces, and the pieces are
    largest first, so the lower half ``[0, p // 2)`` is the most.
    """
    return offs[p // 2]


def split_at(a: int, b: int, w: int):
    """``[a, b)`` as one or two runs, cut at ``w`` (where relative ranks wrap to rank 0)."""
    if a < w < b:
        return [(a, w), (w, b)]
    return [(a, b)]


def _shift(step, base):
    if base == 0:
        return step
    st = list(step)
    idx = (2,) if st[0] in (SEND, RECV) else (1, 3)
    for i in idx:
        if st[i] >= TMP:
            st[i] += base
    return tuple(st)


def concat(algorithm: str, *scheds: Schedule) -> Schedule:
    """The rounds of ``scheds`` one after the other, their temporaries renumbered."""
    out = Schedule(algorithm=algorithm)
    for sc in scheds:
        base = len(out.tmp)
        out.tmp = out.tmp + tuple(sc.tmp)
        out.rounds.extend(tuple(_shift(st, base) for st in rnd) for rnd in sc.rounds)
    return out


def copy_unless(s: Schedule, src, dst, n: int, dlo: int = 0, slo: int = 0) -> None:
    """A round with one COPY of ``n`` units, unless source and destination are the same memory."""
    if n and (src, slo) != (dst, dlo):
        s.add((COPY, src, slo, dst, dlo, n))
