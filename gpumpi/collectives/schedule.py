"""Collective schedules (L1): the data a schedule builder returns, and a reference simulator.

Theory of operation
===================
Every collective is a *schedule*: a list of rounds, built by a pure function of (rank, size,
root, sizes, op traits) -- one module per collective in this package, chosen by ``select`` --
and carried out by one executor (``collectives._execute``, L5) for the blocking,
nonblocking and persistent forms alike.

Buffers and units
-----------------
A schedule names memory by buffer id and *unit* ranges ``[lo, hi)``:

* ``SBUF`` (0): the send buffer, ``RBUF`` (1): the receive buffer, ``TMP + k`` (2, 3, ...):
  temporaries of ``Schedule.tmp[k]`` units the executor allocates in the memory kind of
  the collective's data.
* A unit is one element of the packed stream for reductions (so a split never cuts an
  element) and one byte for data movement.  The executor multiplies by the unit size.
* Every buffer is seen *packed*: the blocks of a collective lie one after the other,
  block ``i`` at the prefix sum of the block sizes before it (``n * i`` for the
  uniform collectives).  The executor maps unit ranges to memory: directly for
  contiguous user buffers, block by block for the vector forms (their displacements),
  and through a packed temporary for non-contiguous datatypes.  **Builders of vector
  forms (``counts`` arguments) never produce a range that crosses or splits a block of a
  user buffer**; the uniform forms may merge and split ranges freely.

Steps
-----
Steps are tuples (cheap to build, to compare in tests and to walk in the executor):

* ``(SEND, peer, buf, lo, hi)``: send units ``[lo, hi)`` of ``buf`` to communicator rank ``peer``.
* ``(RECV, peer, buf, lo, hi)``: receive exactly ``hi - lo`` units from ``peer`` into them.
* ``(RED, src, slo, dst, dlo, n, left)``: reduce ``n`` units: ``left`` true ->
  ``dst = src op dst`` (``src`` is the left operand: MPI's ``(invec, inoutvec)``), false ->
  ``dst = dst op src``.  Rank order is kept by always passing the lower ranks' partial
  result as the left operand, so non-commutative operations come out right.
* ``(COPY, src, slo, dst, dlo, n)``: copy ``n`` units.

A round is a tuple of steps.  The executor posts every ``SEND``/``RECV`` of a round at
once, waits for all of them, then runs the round's ``RED``/``COPY`` steps in order, then
starts the next round.  So a round's local steps see its received data, and memory a
round sends from is not overwritten until the round is over.  Local work that must
precede a round's communication goes in a round of its own.  Messages between a pair
of ranks match in the order they are posted (MPI's non-overtaking rule, one tag per
collective call), which :func:`simulate` checks.

Buffer contents per collective (``inplace``: MPI_IN_PLACE at this rank)
-----------------------------------------------------------------------
========================  ===================================================================
``barrier``               no buffers
``bcast``                 ``RBUF[0:n]`` everywhere (root: the data)
``gather(v)``             ``SBUF[0:n]`` own block; root ``RBUF`` = all blocks.  ``inplace``
                          (root only): own block already in ``RBUF``, no ``SBUF``.
``scatter(v)``            root ``SBUF`` = all blocks; ``RBUF[0:n]`` own block.  ``inplace``
                          (root only): root's ``RBUF`` is not written.
``allgather(v)``          ``SBUF[0:n]``; ``RBUF`` all blocks.  ``inplace``: own block in ``RBUF``.
``alltoall(v/w)``         ``SBUF`` blocks to send (block ``j`` to rank ``j``), ``RBUF`` blocks
                          received (block ``j`` from rank ``j``).  ``inplace``: ``RBUF`` holds
                          the data to send and is overwritten (builders use a temporary).
``reduce``                ``SBUF[0:n]`` input; root ``RBUF[0:n]`` result; non-root ``RBUF`` is
                          never touched.  ``inplace`` (root only): input in ``RBUF``.
``allreduce``             ``SBUF[0:n]`` input (``inplace``: in ``RBUF``); ``RBUF[0:n]`` result.
``reduce_scatter_block``  ``SBUF[0:size*n]`` input; ``RBUF[0:n]`` this rank's block of the result.
                          ``inplace``: input in ``RBUF[0:size*n]``, result in ``RBUF[0:n]``.
``reduce_scatter``        as ``reduce_scatter_block`` with ``counts`` per rank.
``scan``                  ``SBUF[0:n]`` input (``inplace``: ``RBUF``); ``RBUF`` = x0 op ... op x_rank.
``exscan``                as ``scan`` but x0 op ... op x_(rank-1); rank 0's ``RBUF`` untouched.
========================  ===================================================================

Builders never touch memory a collective does not define (a non-root's ``RBUF`` in
``reduce``, rank 0's ``RBUF`` in ``exscan``), and never read ``SBUF`` where ``inplace``.
"""

from __future__ import annotations

SBUF, RBUF, TMP = 0, 1, 2
SEND, RECV, RED, COPY = "s", "r", "red", "cp"
COMM_STEPS = (SEND, RECV)

__all__ = ["Schedule", "SBUF", "RBUF", "TMP", "SEND", "RECV", "RED", "COPY", "simulate", "ScheduleError"]


class ScheduleError(AssertionError):
    """A schedule that cannot run: unmatched messages, size mismatches, deadlock, bad ranges."""


class Schedule:
    """Rounds of steps (see the module docstring) and the sizes of the temporaries, in units.

    ``algorithm`` names what built it (reports, tests, ``gpumpi bench``).
    """

    __slots__ = ("rounds", "tmp", "algorithm")

    def __init__(self, rounds=(), tmp=(), algorithm: str = "") -> None:
        self.rounds = [tuple(r) for r in rounds if r]
        self.tmp = tuple(tmp)
        self.algorithm = algorithm

    def __repr__(self) -> str:
        return f"<Schedule {self.algorithm} rounds={len(self.rounds)} tmp={self.tmp}>"

    def new_tmp(self, units: int) -> int:
        """Add a temporary of ``units`` units; its buffer id."""
        self.tmp = self.tmp + (units,)
        return TMP + len(self.tmp) - 1

    def add(self, *steps) -> None:
        """Append a round of ``steps`` (no-op when empty)."""
        if steps:
            self.rounds.append(tuple(steps))

    def steps(self):
        for r in self.rounds:
            yield from r


def _rng(bufs, b, lo, hi, rank, what):
    if b not in bufs:
        raise ScheduleError(f"rank {rank}: {what} names buffer {b}, which this rank does not have")
    if not 0 <= lo <= hi <= len(bufs[b]):
        raise ScheduleError(f"rank {rank}: {what} range [{lo}, {hi}) outside buffer {b} of {len(bufs[b])} units")
    return bufs[b][lo:hi]


def _add(a, b):
    return [x + y for x, y in zip(a, b)]


def _garbage(units: int) -> list:
    return [None] * units  # a schedule must write a temporary before it reads it


def simulate(schedules, buffers, op=None, new=None):
    """Run ``schedules`` (one per rank) on ``buffers`` without processes; return the buffers.

    ``buffers[r]`` maps buffer ids (``SBUF``, ``RBUF``) to 1-D sequences with slicing
    (lists, NumPy arrays: ``a[lo:hi]``, ``a[lo:hi] = x``, ``.copy()``).  ``op(a, b)`` returns
    ``a op b`` elementwise for two slices (default: addition); ``new(units)`` makes a
    temporary (default: a list of ``None``, so reading a temporary before writing it
    fails).  Messages between a pair match in posting order; a size mismatch, a range
    outside a buffer, a message left unmatched or a deadlock raises ScheduleError.
    """
    op = op or _add
    new = new or _garbage
    n = len(schedules)
    bufs = [dict(b) for b in buffers]
    for r, s in enumerate(schedules):
        for k, units in enumerate(s.tmp):
            bufs[r][TMP + k] = new(units)
    queues = {}  # (src, dst) -> list of payloads in flight
    pos = [0] * n  # the round each rank is in
    pending = [None] * n  # receives of the current round still unmatched: list of [peer, buf, lo, hi]
    for r in range(n):
        pending[r] = _post(r, schedules[r], 0, bufs, queues) if schedules[r].rounds else []
    while True:
        moved = False
        for r in range(n):
            rounds = schedules[r].rounds
            if pos[r] >= len(rounds):
                continue
            left = []
            for peer, b, lo, hi in pending[r]:
                q = queues.get((peer, r))
                if q:
                    data = q.pop(0)
                    if len(data) != hi - lo:
                        raise ScheduleError(f"rank {r}: receive of {hi - lo} units from {peer} matched "
                                            f"a message of {len(data)} (round {pos[r]})")
                    _rng(bufs[r], b, lo, hi, r, "RECV")
                    bufs[r][b][lo:hi] = data
                    moved = True
                else:
                    left.append((peer, b, lo, hi))
            pending[r] = left
            if left:
                continue
            for st in rounds[pos[r]]:
                if st[0] in (RED, COPY) and st[1] == st[3] and st[2] < st[4] + st[5] and st[4] < st[2] + st[5]:
                    raise ScheduleError(f"rank {r}: {st[0]} between overlapping ranges of buffer {st[1]} ({st})")
                if st[0] == RED:
                    _, sb, slo, db, dlo, k, src_left = st
                    a = list(_rng(bufs[r], sb, slo, slo + k, r, "RED src"))
                    d = list(_rng(bufs[r], db, dlo, dlo + k, r, "RED dst"))
                    bufs[r][db][dlo:dlo + k] = op(a, d) if src_left else op(d, a)
                elif st[0] == COPY:
                    _, sb, slo, db, dlo, k = st
                    bufs[r][db][dlo:dlo + k] = list(_rng(bufs[r], sb, slo, slo + k, r, "COPY src"))
            pos[r] += 1
            moved = True
            if pos[r] < len(rounds):
                pending[r] = _post(r, schedules[r], pos[r], bufs, queues)
        if all(pos[r] >= len(schedules[r].rounds) for r in range(n)):
            break
        if not moved:
            stuck = {r: (pos[r], pending[r]) for r in range(n) if pos[r] < len(schedules[r].rounds)}
            raise ScheduleError(f"deadlock: ranks waiting (round, receives): {stuck}")
    extra = {k: len(v) for k, v in queues.items() if v}
    if extra:
        raise ScheduleError(f"messages never received (src, dst): count {extra}")
    return bufs


def _post(r, sched, k, bufs, queues):
    recvs = []
    sends = []
    for st in sched.rounds[k]:
        if st[0] == SEND:
            _, peer, b, lo, hi = st
            if peer == r:
                raise ScheduleError(f"rank {r}: sends to itself (use COPY)")
            queues.setdefault((r, peer), []).append(list(_rng(bufs[r], b, lo, hi, r, "SEND")))
            sends.append((b, lo, hi))
        elif st[0] == RECV:
            _, peer, b, lo, hi = st
            if peer == r:
                raise ScheduleError(f"rank {r}: receives from itself (use COPY)")
            _rng(bufs[r], b, lo, hi, r, "RECV")
            recvs.append((peer, b, lo, hi))
    # The executor posts a round's messages at once: a receive may not land in memory that
    # the same round sends from or that another of its receives lands in.
    for i, (_, b, lo, hi) in enumerate(recvs):
        others = sends + [(rb, rlo, rhi) for _, rb, rlo, rhi in recvs[i + 1:]]
        for ob, olo, ohi in others:
            if ob == b and lo < ohi and olo < hi:
                raise ScheduleError(f"rank {r}: round {k} receives into buffer {b} [{lo}, {hi}), "
                                    f"which the same round also sends from or receives into [{olo}, {ohi})")
    return recvs
