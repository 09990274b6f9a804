"""What the API modules may ask of the runtime (L5): a friend surface, named by verbs.

Theory of operation
===================
The API modules (``comm/``, ``rma/``) validate and delegate; they never import the
engine or the runtime, never read the engine's attributes and never take its lock.
What they need of the process's running engine -- wait for an operation, wait until a
condition holds, run one progress pass, cancel an operation, ask whether a context was
freed or which ranks failed -- is one function here each, so the engine's inside can
change (rooms, the compiled path's state) without touching the API surface, and
``grep`` tells every place an API module reaches the runtime.

Each function reads ``_runtime.ENGINE`` when called (it is made at ``Init`` and
replaced after a fork); none keeps state of its own.
"""

from __future__ import annotations

from . import _runtime as _rt

__all__ = ["cancel", "context_freed", "failed_ranks", "node_of", "poll", "wait", "wait_until", "world_rank",
           "world_size", "abort"]


def wait(x) -> None:
    """Block until operation ``x`` completes, progressing everything meanwhile."""
    _rt.ENGINE.wait(x)


def wait_until(pred) -> None:
    """Block until ``pred()`` (called under the engine lock, between progress passes) is true."""
    _rt.ENGINE.wait_until(pred)


def poll() -> None:
    """One progress pass (under the engine lock), skipped when nothing can have arrived."""
    eng = _rt.ENGINE
    with eng.lock:
        if not eng.quiet():
            eng.progress()


def cancel(x) -> None:
    """Cancel operation ``x`` (MPI_Cancel's semantics: a matched receive is not cancelled)."""
    _rt.ENGINE.cancel(x)


def context_freed(ctx: int) -> bool:
    """Whether context ``ctx`` was freed (through any handle of its communicator)."""
    return ctx in _rt.ENGINE.freed_ctx


def failed_ranks() -> frozenset:
    """The world ranks known to have failed (empty while none has)."""
    f = _rt.ENGINE.failed
    return frozenset(f) if f else frozenset()


def world_rank() -> int:
    """This process's rank in the world."""
    return _rt.ENGINE.rank


def world_size() -> int:
    """The number of processes in the world."""
    return _rt.ENGINE.size


def node_of(world_rank: int) -> int:
    """The node (0-based) that world rank ``world_rank`` runs on."""
    return _rt.node_of(world_rank)


def abort(code: int = 1, message: str | None = None) -> None:
    """End the whole job with ``code`` (MPI_Abort)."""
    _rt.abort(code, message)
