"""Context ids agreed by the members of a new communicator, safe under threads (L5).

Theory of operation
===================
Every communicator owns a block of four context ids (``ctx`` point-to-point, ``ctx + 1``
collectives, ``ctx + 2`` partitioned, ``ctx + 3`` object device parts).  A new
communicator's block must be unused at every member, and ids are never reused (so a stale
copy of a freed handle is detectable, and a late message to a freed communicator can never
match a new one).  Each process therefore keeps one counter, ``Engine.next_ctx``: every id
at or above it is free there.

*Agreement.*  The members run an element-wise max over one value each (``allmax``):
each proposes its ``next_ctx``; the maximum is free at every member, which then moves its
counter past it.

*Threads.*  Two creations running at once in one process (on different parent
communicators, from two threads; or a nonblocking ``Idup`` still in flight while the
program creates another communicator) could both take the same maximum.  So, as MPICH
does with its context-id mask, a process lends its counter to one creation at a time:
that creation is the *owner* for one agreement attempt.  A creation that is not the owner
proposes :data:`BUSY`; an attempt that sees ``BUSY`` anywhere agrees on nothing, and all
its members try again (they all saw the same maximum, so they all retry together).  When
the counter is free, the waiting creation with the lowest *key* takes it; the key is a
tuple every member of a creation computes alike (the parent's context id, or for
group-based creations a hash of the group and tag).  The creation with the globally lowest
key among those waiting becomes the owner at each of its members as soon as their current
attempts end, so it succeeds at its next attempt; then the next lowest, and so on: no
livelock.  Single-threaded programs always own the counter: one attempt per creation.

Attempts are blocking (:func:`allocate`) or driven by the engine (:class:`Allocation`,
for ``Idup``: every attempt is a nonblocking max and the next one starts from the engine's
ready queue, never inside a frame handler).
"""

from __future__ import annotations

import threading

from . import _runtime as _rt

#: Proposal of a creation that does not hold the counter this attempt.
BUSY = (1 << 31) - 1
FIRST = 8  # 0..3: COMM_WORLD, 4..7: COMM_SELF

_lock = threading.Lock()
_owner = None  # key of the creation holding the counter for its attempt in flight
_waiting: dict = {}  # key -> number of creations with that key waiting


def _engine():
    eng = _rt.ENGINE
    if getattr(eng, "next_ctx", None) is None:
        eng.next_ctx = FIRST
    return eng


def propose(key) -> int:
    """This process's proposal for one attempt of the creation ``key``: its counter if the
    creation may hold it now, else :data:`BUSY`."""
    global _owner
    eng = _engine()
    with _lock:
        if _owner is None and key == min(_waiting):
            _owner = key
        return eng.next_ctx if _owner == key else BUSY


def settle(key, agreed: int, nblocks: int) -> bool:
    """End one attempt with the agreed maximum: True when it gave a context id (the counter
    moves past its ``nblocks`` blocks), False when the members must try again."""
    global _owner
    eng = _engine()
    with _lock:
        if _owner == key:
            _owner = None
        if agreed >= BUSY:
            return False
        eng.next_ctx = max(eng.next_ctx, agreed + 4 * nblocks)
        _leave(key)
        return True


def _enter(key) -> None:
    with _lock:
        _waiting[key] = _waiting.get(key, 0) + 1


def _leave(key) -> None:
    n = _waiting.get(key, 0) - 1
    if n > 0:
        _waiting[key] = n
    else:
        _waiting.pop(key, None)


def abandon(key) -> None:
    """A creation stops (an error during its agreement): release whatever it held."""
    global _owner
    with _lock:
        if _owner == key:
            _owner = None
        _leave(key)


def allocate(allmax, key, nblocks: int = 1) -> int:
    """Agree on the first context id of ``nblocks`` fresh blocks of four, blocking.

    ``allmax(values: tuple) -> sequence`` is the element-wise maximum over every member of
    the new communicator (collective over them, blocking); ``key`` is the same tuple of ints
    at every member and differs from any creation that may run at the same time in this
    process."""
    _enter(key)
    try:
        while True:
            agreed = allmax((propose(key),))[0]
            if settle(key, agreed, nblocks):
                return agreed
    except BaseException:
        abandon(key)
        raise


def allocate_with(allgather, key, values: tuple = (), nblocks: int = 1):
    """:func:`allocate` through an all-gather that also carries each member's ``values``:
    ``allgather(row) -> [row of each member]``; returns ``(ctx, rows)`` (the rows without the
    proposals), so a creation that needs an exchange anyway (``Split``'s colors and keys)
    agrees in the same one."""
    _enter(key)
    n = len(values)
    try:
        while True:
            rows = allgather(tuple(values) + (propose(key),))
            agreed = max(r[n] for r in rows)
            if settle(key, agreed, nblocks):
                return agreed, [r[:n] for r in rows]
    except BaseException:
        abandon(key)
        raise


class Allocation:
    """A nonblocking :func:`allocate` driven by the engine (``Idup``).

    ``start_max(values, attempt) -> (xfer, result)`` posts one nonblocking maximum and returns
    the operation and a function giving its result once the operation has completed;
    ``attempt`` counts the attempts (0, 1, ...) so that they can use distinct tags.
    ``done(ctx, err, errmsg)`` is called once, from the engine's ready queue."""

    def __init__(self, start_max, key, done, nblocks: int = 1) -> None:
        self.start_max, self.key, self.done, self.nblocks = start_max, key, done, nblocks
        self.attempt = 0
        self.x = self.result = None
        _enter(key)

    def start(self) -> None:
        try:
            self.x, self.result = self.start_max((propose(self.key),), self.attempt)
        except BaseException:
            abandon(self.key)
            raise
        self._watch()

    def _watch(self) -> None:
        from .request import after

        # run advance() from the engine's ready queue once the attempt's operation completes
        after(self.x, lambda: _rt.ENGINE.ready.append(self))

    def advance(self) -> None:
        x = self.x
        if x.err:
            abandon(self.key)
            self.done(-1, x.err, x.errmsg)
            return
        agreed = self.result()[0]
        if settle(self.key, agreed, self.nblocks):
            self.done(agreed, 0, "")
            return
        self.attempt += 1
        try:
            self.x, self.result = self.start_max((propose(self.key),), self.attempt)
        except Exception as e:  # noqa: BLE001
            from .errors import ERR_OTHER
            from .errors import Exception as MPIException

            abandon(self.key)
            code = e.Get_error_class() if isinstance(e, MPIException) else ERR_OTHER
            self.done(-1, code, str(e))
            return
        self._watch()
