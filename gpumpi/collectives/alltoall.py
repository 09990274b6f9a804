"""All-to-all schedules (L1): pairwise exchange and Bruck alltoall; pairwise alltoallv.

Theory of operation
===================
``SBUF`` block ``j`` goes to rank ``j``; ``RBUF`` block ``j`` comes from rank ``j`` (blocks of
``n`` units; alltoallv: send blocks at the prefix sums of ``scounts``, receive blocks at
those of ``rcounts``).  With ``inplace`` the data to send is in ``RBUF`` and is
overwritten: the builders first copy it to a temporary (block by block for alltoallv,
whose user blocks may not be merged) and send from there.

* ``pairwise``: ``size - 1`` rounds, one partner each: ``rank ^ k`` when ``size`` is a power
  of two (both sides of a pair meet in the same round), else send to ``rank + k`` and
  receive from ``rank - k``.  One block in and one out per round keeps the network
  uncongested: the choice for medium and large blocks.  The own block is a COPY.
* ``bruck``: a temporary ``A`` holds the blocks rotated so that ``A[j]`` goes to
  ``rank + j``.  For each bit ``k`` of ``j``, the blocks whose index has bit ``k`` set go
  (packed into a temporary, one message) to ``rank + k``, which puts them back at the
  same indices; after all bits ``A[j]`` holds the block from ``rank - j``, and a final
  copy puts it at ``RBUF`` block ``rank - j``.  ``ceil(log2 size)`` messages of about
  ``n size / 2`` units each: the choice for small blocks on many ranks.
"""

from __future__ import annotations

from ._common import check, check_counts, prefix
from .schedule import COPY, RBUF, RECV, SBUF, SEND, Schedule

__all__ = ["pairwise", "bruck", "pairwise_v"]


def pairwise(rank: int, size: int, *, n: int = 0, inplace: bool = False) -> Schedule:
    """Pairwise-exchange alltoall (MPI_Alltoall) of ``n`` units per pair."""
    check("alltoall", rank, size, 0, n)
    s = Schedule(algorithm="pairwise")
    if n == 0:
        return s
    src = SBUF
    if inplace:
        if size == 1:
            return s
        src = s.new_tmp(size * n)
        s.add((COPY, RBUF, 0, src, 0, size * n))
    else:
        s.add((COPY, SBUF, rank * n, RBUF, rank * n, n))
    _exchange(s, rank, size, lambda j: (src, j * n, (j + 1) * n), lambda j: (RBUF, j * n, (j + 1) * n))
    return s


def _exchange(s, rank, size, sblock, rblock):
    pof2 = size & (size - 1) == 0
    for k in range(1, size):
        if pof2:
            to = frm = rank ^ k
        else:
            to, frm = (rank + k) % size, (rank - k) % size
        steps = []
        b, lo, hi = sblock(to)
        if hi > lo:
            steps.append((SEND, to, b, lo, hi))
        b, lo, hi = rblock(frm)
        if hi > lo:
            steps.append((RECV, frm, b, lo, hi))
        s.add(*steps)


def pairwise_v(rank: int, size: int, *, scounts=None, rcounts=None, inplace: bool = False) -> Schedule:
    """Pairwise-exchange alltoallv (MPI_Alltoallv): ``scounts[j]`` units to rank ``j``, ``rcounts[j]`` from it.

    With ``inplace`` the send blocks are the receive blocks (``scounts`` is ignored).
    """
    check("alltoallv", rank, size)
    rcounts = check_counts("alltoallv", rcounts, size, "rcounts")
    scounts = rcounts if inplace else check_counts("alltoallv", scounts, size, "scounts")
    if scounts[rank] != rcounts[rank]:
        raise ValueError(f"alltoallv: own block sent and received differ "
                         f"(scounts[{rank}] {scounts[rank]}, rcounts[{rank}] {rcounts[rank]})")
    soffs, roffs = prefix(scounts), prefix(rcounts)
    s = Schedule(algorithm="pairwise")
    src = SBUF
    if inplace:
        copies = [j for j in range(size) if j != rank and rcounts[j]]
        if not copies:
            return s
        src = s.new_tmp(roffs[-1])
        s.add(*[(COPY, RBUF, roffs[j], src, roffs[j], rcounts[j]) for j in copies])
    elif rcounts[rank]:
        s.add((COPY, SBUF, soffs[rank], RBUF, roffs[rank], rcounts[rank]))
    _exchange(s, rank, size, lambda j: (src, soffs[j], soffs[j + 1]), lambda j: (RBUF, roffs[j], roffs[j + 1]))
    return s


def bruck(rank: int, size: int, *, n: int = 0, inplace: bool = False) -> Schedule:
    """Bruck alltoall (MPI_Alltoall) of ``n`` units per pair: ceil(log2 size) rounds."""
    check("alltoall", rank, size, 0, n)
    s = Schedule(algorithm="bruck")
    if n == 0 or (size == 1 and inplace):
        return s
    src = RBUF if inplace else SBUF
    if size == 1:
        s.add((COPY, SBUF, 0, RBUF, 0, n))
        return s
    a = s.new_tmp(size * n)
    bits = []
    k = 1
    while k < size:
        # runs [lo, hi) of indices j with bit k set: [k, 2k), [3k, 4k), ...
        runs = [(lo, min(lo + k, size)) for lo in range(k, size, 2 * k)]
        bits.append((k, runs))
        k <<= 1
    most = max(sum(hi - lo for lo, hi in runs) for _, runs in bits)
    b, c = s.new_tmp(most * n), s.new_tmp(most * n)

    def pack(runs, frm, to):  # copies between A's runs and the packed temporary
        steps, i = [], 0
        for lo, hi in runs:
            if frm == a:
                steps.append((COPY, a, lo * n, to, i * n, (hi - lo) * n))
            else:
                steps.append((COPY, frm, i * n, a, lo * n, (hi - lo) * n))
            i += hi - lo
        return steps, i

    head = size - rank
    steps = [(COPY, src, rank * n, a, 0, head * n)]
    if rank:
        steps.append((COPY, src, 0, a, head * n, rank * n))
    steps += pack(bits[0][1], a, b)[0]
    s.add(*steps)
    for idx, (k, runs) in enumerate(bits):
        cnt = sum(hi - lo for lo, hi in runs)
        steps = [(SEND, (rank + k) % size, b, 0, cnt * n), (RECV, (rank - k) % size, c, 0, cnt * n)]
        steps += pack(runs, c, a)[0]
        if idx + 1 < len(bits):
            steps += pack(bits[idx + 1][1], a, b)[0]
        else:
            for j in range(size):
                if j or not inplace:
                    steps.append((COPY, a, j * n, RBUF, (rank - j) % size * n, n))
        s.add(*steps)
    return s
