"""Reduce schedules (L1): binomial tree and Rabenseifner (reduce-scatter + gather).

Theory of operation
===================
Every rank's input is ``SBUF[0:n]`` (the root's is in ``RBUF`` with ``inplace``); the root
ends with ``x0 op x1 op ... op x_(size-1)`` in ``RBUF[0:n]``; a non-root's ``RBUF`` is never
touched (partial results live in temporaries).

* ``binomial``: on the binomial tree (``_common.tree``) every node combines its own input
  with its children's subtree results, in increasing child order, and sends the result
  to its parent.  A subtree is a run of consecutive relative ranks, so with the tree
  rooted at rank 0 the left-to-right order is rank order: non-commutative operations
  use the tree rooted at 0 and rank 0 then sends the result to the root (one more
  message); commutative ones root the tree at ``root``.  All children's messages of a
  node are received in one round (into a temporary each) and reduced in order.
  ``ceil(log2 size)`` latencies, ``n`` units per message: for short messages.
* ``rabenseifner`` (MPICH's reduce_scatter_gather): the fold to ``p`` ranks, a
  recursive-halving reduce-scatter (``_common.halving``) that leaves virtual rank ``v``
  with one of ``p`` pieces fully reduced, then a binomial gather of the pieces (the
  halving's windows replayed backwards) to the root's virtual rank (to its fold partner
  when the root sat out, which then forwards it).  About ``2 n`` units through each rank
  instead of ``n log2 size``: for long messages.  The fold and the halving keep rank
  order, so it serves non-commutative operations as well.
"""

from __future__ import annotations

from ._common import (check, fold_in, halving, halving_tmp_units, newrank, oldrank, pieces,
                      pof2_floor, tree)
from .schedule import COPY, RBUF, RECV, RED, SBUF, SEND, Schedule

__all__ = ["binomial", "rabenseifner", "emit_tree_reduce"]


def emit_tree_reduce(s: Schedule, rank: int, size: int, root: int, n: int, own, res) -> None:
    """Append a binomial-tree reduction of ``n`` units to ``root``; ``own`` and ``res`` are buffer ids.

    ``own[0:n]`` is this rank's input, ``res[0:n]`` receives the result at the root (``res``
    is ignored elsewhere).  Order: relative-rank order (rank order when ``root`` is 0).
    """
    if n == 0:
        return
    vr = (rank - root) % size
    parent, children = tree(vr, size)
    if not children:
        if vr:
            s.add((SEND, (rank - parent) % size, own, 0, n))
        elif own != res:
            s.add((COPY, own, 0, res, 0, n))
        return
    k = len(children)
    peers = [(rank + m) % size for m in children]
    if vr == 0 and own == res:  # inplace at the root: the input is already the accumulator
        t = s.new_tmp(k * n)
        steps = [(RECV, q, t, i * n, (i + 1) * n) for i, q in enumerate(peers)]
        steps += [(RED, t, i * n, res, 0, n, False) for i in range(k)]
        s.add(*steps)
        return
    if vr == 0:  # the first child's result lands in RBUF, the input is folded in from the left
        acc = res
        t = s.new_tmp((k - 1) * n) if k > 1 else None
        steps = [(RECV, peers[0], acc, 0, n)] + [(RECV, q, t, i * n, (i + 1) * n) for i, q in enumerate(peers[1:])]
        rest = [(t, i * n) for i in range(k - 1)]
    else:
        acc = s.new_tmp(k * n)
        steps = [(RECV, q, acc, i * n, (i + 1) * n) for i, q in enumerate(peers)]
        rest = [(acc, i * n) for i in range(1, k)]
    steps.append((RED, own, 0, acc, 0, n, True))
    steps += [(RED, b, lo, acc, 0, n, False) for b, lo in rest]
    s.add(*steps)
    if vr:
        s.add((SEND, (rank - parent) % size, acc, 0, n))


def binomial(rank: int, size: int, *, root: int = 0, n: int = 0, commute: bool = True,
             inplace: bool = False) -> Schedule:
    """Binomial-tree reduce (MPI_Reduce) of ``n`` units to ``root``; rank order kept when not ``commute``."""
    check("reduce", rank, size, root, n)
    s = Schedule(algorithm="binomial")
    if n == 0:
        return s
    own = RBUF if inplace and rank == root else SBUF
    if commute or root == 0:
        emit_tree_reduce(s, rank, size, root, n, own, RBUF)
        return s
    if rank == 0:
        t = s.new_tmp(n)
        emit_tree_reduce(s, rank, size, 0, n, own, t)
        s.add((SEND, root, t, 0, n))
    else:
        emit_tree_reduce(s, rank, size, 0, n, own, None)
    if rank == root:
        s.add((RECV, 0, RBUF, 0, n))
    return s


def rabenseifner(rank: int, size: int, *, root: int = 0, n: int = 0, commute: bool = True,
                 inplace: bool = False) -> Schedule:
    """Reduce-scatter + gather reduce (MPI_Reduce, Rabenseifner's) of ``n`` units to ``root``: long messages."""
    check("reduce", rank, size, root, n)
    s = Schedule(algorithm="rabenseifner")
    if n == 0:
        return s
    own = RBUF if inplace and rank == root else SBUF
    if size == 1:
        if own != RBUF:
            s.add((COPY, own, 0, RBUF, 0, n))
        return s
    p = pof2_floor(size)
    r = size - p
    v = newrank(rank, r)
    vroot = newrank(root, r)
    relay = vroot < 0  # the root sat out: its fold partner gathers and forwards
    if relay:
        vroot = newrank(root + 1, r)
    if v < 0:
        s.add((SEND, rank + 1, own, 0, n))
        if rank == root:
            s.add((RECV, rank + 1, RBUF, 0, n))
        return s
    acc = RBUF if rank == root else s.new_tmp(n)
    fold_in(s, rank, r, n, own, acc)
    offs = pieces(n, p)
    rt = s.new_tmp(halving_tmp_units(p, offs)) if p > 1 else None
    wins = halving(s, v, p, r, offs, acc, rt)
    # binomial gather of the pieces to vroot: the halving's steps backwards
    d = v ^ vroot
    i = len(wins) - 2
    while i >= 0:
        mask = 1 << i
        if d >= 2 * mask:  # already sent its part
            break
        peer = oldrank(v ^ mask, r)
        (klo, khi), (wlo, whi) = wins[i + 1], wins[i]
        if d & mask:
            if offs[khi] > offs[klo]:
                s.add((SEND, peer, acc, offs[klo], offs[khi]))
            break
        glo, ghi = (khi, whi) if klo == wlo else (wlo, klo)
        if offs[ghi] > offs[glo]:
            s.add((RECV, peer, acc, offs[glo], offs[ghi]))
        i -= 1
    if relay and v == vroot:
        s.add((SEND, root, acc, 0, n))
    return s
