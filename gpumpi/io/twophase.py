"""Two-phase collective I/O plans (L2): who writes or reads which part of the file.

Theory of operation
===================
ROMIO's collective buffering: when the processes' accesses interleave in the file, each
process sends its pieces to *aggregators*, each of which owns one contiguous *file domain*,
and the aggregators make a few large accesses instead of every process making many small
ones.  Everything here is arithmetic on NumPy arrays of pieces ``(offsets, lengths)``; the
collectives and the file calls are ``gpumpi.file``'s.

* :func:`interleaved` -- whether the processes' ranges ``[lo, hi)`` overlap (ROMIO's
  "automatic" test): when they do not, independent access is already large and contiguous
  per process.
* :func:`domains` -- ``naggr + 1`` boundaries splitting ``[lo, hi)`` evenly.
* :func:`cut` -- a process's pieces (in stream order, which a view keeps in file order) cut
  at the domain boundaries, with each piece's domain: because the order is kept, the bytes a
  process sends to one aggregator are one contiguous slice of its data stream.
* :func:`merged` -- runs of an aggregator's received pieces joined where they touch (the
  accesses it makes).
* :func:`pieces` -- a view's pieces of a stream range as arrays (whole filetype copies by
  broadcasting: no Python step per piece).
* :func:`byte_index` -- the byte positions of pieces relative to a base (the scatter of
  received bytes into a domain buffer, or the gather of what a process asked for).
"""

from __future__ import annotations

import numpy as np

__all__ = ["byte_index", "cut", "domains", "interleaved", "merged", "pieces"]

_I8 = np.int64


def interleaved(ranges) -> bool:
    """Whether any two of the non-empty ``(lo, hi)`` ranges overlap."""
    rs = sorted(r for r in ranges if r is not None and r[1] > r[0])
    return any(b[0] < a[1] for a, b in zip(rs, rs[1:]))


def domains(lo: int, hi: int, naggr: int) -> np.ndarray:
    """``naggr + 1`` nondecreasing boundaries from ``lo`` to ``hi``: domain ``a`` is
    ``[bounds[a], bounds[a + 1])``."""
    if naggr < 1:
        raise ValueError(f"domains: at least one aggregator ({naggr})")
    span = max(hi - lo, 0)
    return np.array([lo + span * a // naggr for a in range(naggr + 1)], dtype=_I8)


def cut(offs: np.ndarray, lens: np.ndarray, bounds: np.ndarray):
    """``(offs, lens, dom)`` of pieces cut at the domain boundaries (``dom``: each piece's
    domain), in the same order."""
    offs, lens = np.asarray(offs, _I8), np.asarray(lens, _I8)
    if not len(offs):
        return offs, lens, np.zeros(0, _I8)
    inner = bounds[1:-1]
    first = np.searchsorted(inner, offs, side="right")
    last = np.searchsorted(inner, offs + lens - 1, side="right")
    if (first == last).all():
        return offs, lens, first.astype(_I8)
    parts = last - first + 1  # pieces each one becomes
    k = np.repeat(np.arange(len(offs)), parts)
    dom = (first[k] + np.arange(len(k)) - np.repeat(np.cumsum(parts) - parts, parts)).astype(_I8)
    start = np.maximum(offs[k], bounds[dom])
    end = np.minimum(offs[k] + lens[k], bounds[dom + 1])
    return start, end - start, dom


def merged(offs: np.ndarray, lens: np.ndarray):
    """The runs ``(offs, lens)`` of pieces, sorted by offset, joined where they touch or overlap."""
    if not len(offs):
        return np.zeros(0, _I8), np.zeros(0, _I8)
    order = np.argsort(offs, kind="stable")
    o, e = offs[order], offs[order] + lens[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(o), bool)
    new[0] = True
    new[1:] = o[1:] > reach[:-1]
    starts = o[new]
    ends = np.maximum.reduceat(e, np.flatnonzero(new))
    return starts, ends - starts


def byte_index(offs: np.ndarray, lens: np.ndarray, base: int) -> np.ndarray:
    """The positions, relative to ``base``, of every byte of the pieces, in piece order."""
    total = int(lens.sum())
    if not total:
        return np.zeros(0, _I8)
    starts = np.cumsum(lens) - lens
    return np.arange(total, dtype=_I8) + np.repeat(offs - base - starts, lens)


def pieces(view, p: int, n: int):
    """``(offs, lens)`` of ``view.pieces(p, n)`` as int64 arrays, adjacent pieces joined."""
    if n <= 0:
        return np.zeros(0, _I8), np.zeros(0, _I8)
    tsize = view.tsize
    if view.contiguous or n < 4 * tsize:
        pl = view.pieces(p, n)
        return np.array([o for o, _ in pl], _I8), np.array([m for _, m in pl], _I8)
    head = (-p) % tsize  # up to the first whole copy
    k0 = (p + head) // tsize
    whole = (n - head) // tsize
    tail = n - head - whole * tsize
    ro, rl = np.array(view.offs, _I8), np.array(view.lens, _I8)
    base = view.disp + (k0 + np.arange(whole, dtype=_I8)) * view.textent
    mo = (base[:, None] + ro[None, :]).ravel()
    ml = np.broadcast_to(rl, (whole, len(rl))).ravel()
    parts_o, parts_l = [mo], [ml]
    if head:
        h = view.pieces(p, head)
        parts_o.insert(0, np.array([o for o, _ in h], _I8))
        parts_l.insert(0, np.array([m for _, m in h], _I8))
    if tail:
        t = view.pieces(p + head + whole * tsize, tail)
        parts_o.append(np.array([o for o, _ in t], _I8))
        parts_l.append(np.array([m for _, m in t], _I8))
    o, ln = np.concatenate(parts_o), np.concatenate(parts_l)
    touch = o[1:] == o[:-1] + ln[:-1]
    if not touch.any():
        return o, ln
    start = np.flatnonzero(np.concatenate(([True], ~touch)))
    return o[start], np.add.reduceat(ln, start)
