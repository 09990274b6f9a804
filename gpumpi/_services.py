"""What the API modules may ask of the runtime (L5): a friend surface, named by verbs.

Theory of operation
===================
The API modules (``comm/``, ``rma/``) validate and delegate; they never import the
engine or the runtime, never read the engine's attributes and never take its lock.
What they need of the process's running engine -- wait for an operation, wait until a
condition holds, run one progress pass, cancel an operation, ask which ranks failed -- is
one function here each, so the engine's inside can change (rooms, the compiled path's
state) without touching the API surface, and ``grep`` tells every place an API module
reaches the runtime.  Two facts are data, read on every call and so not worth a call
frame: :data:`FREED` (the context ids of freed communicators: ``ctx in FREED``) and
:data:`SENT` (the shared completed send).

Each function reads ``_runtime.ENGINE`` when called (it is made at ``Init`` and
replaced after a fork); none keeps state of its own.
"""

from __future__ import annotations

from . import _runtime as _rt
from ._xfer import FREED, SENT  # noqa: F401  (the freed contexts, the shared completed send: API modules read them)

__all__ = ["FREED", "SENT", "abort", "backoff", "cancel", "failed_ranks", "free_context", "node_of", "poll",
           "probe_now", "probe_wait", "wait", "wait_until", "world_rank", "world_size",
           # windows
           "copy_stream", "typecheck", "far_ranks", "mpi_world", "mpi_cuda_aware", "regions"]


def wait(x) -> None:
    """Block until operation ``x`` completes, progressing everything meanwhile."""
    _rt.ENGINE.wait(x)


def wait_until(pred) -> None:
    """Block until ``pred()`` (called under the engine lock, between progress passes) is true."""
    _rt.ENGINE.wait_until(pred)


def poll() -> None:
    """One progress pass (under the engine lock), skipped when nothing can have arrived (or
    before ``Init``)."""
    eng = _rt.ENGINE
    if eng is None:
        return
    with eng.lock:
        if not eng.quiet():
            eng.progress()


def cancel(x) -> None:
    """Cancel operation ``x`` (MPI_Cancel's semantics: a matched receive is not cancelled)."""
    _rt.ENGINE.cancel(x)


def failed_ranks() -> frozenset:
    """The world ranks known to have failed (empty while none has, and before ``Init``)."""
    eng = _rt.ENGINE
    f = eng.failed if eng is not None else None
    return frozenset(f) if f else frozenset()


def backoff(spins: int) -> None:
    """Give the CPU away as a wait's ``spins``-th idle round asks (yield, then short sleeps)."""
    eng = _rt.ENGINE
    if eng is not None:
        eng.backoff(spins)


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


def free_context(ctx: int) -> None:
    """Free the context block ``ctx`` .. ``ctx + 3`` of a communicator (MPI_Comm_free): pending
    operations complete normally (a context with a receive still posted keeps its queues;
    context ids are never reused), and every handle of it is stale from now on."""
    eng = _rt.ENGINE
    with eng.lock:
        for c in (ctx, ctx + 1, ctx + 2, ctx + 3):
            if eng.matcher.pending(c)[0] == 0:
                eng.matcher.drop_context(c)
    eng.freed_ctx.add(ctx)


def probe_wait(ctx: int, source: int, tag: int, take: bool, on_none):
    """Block until a message on context ``ctx`` matches ``source``/``tag`` and return its
    arrival (``take``: off the unexpected queue, for matched probes).  Receives posted lazily
    are given to the matcher first (they come first in MPI order).  ``on_none()`` runs after
    each look that found nothing (it may raise: a failed peer)."""
    eng = _rt.ENGINE
    eng.unlazy()
    look = eng.matcher.take if take else eng.matcher.probe
    found = []

    def ready():
        a = look(ctx, source, tag)
        if a is not None:
            found.append(a)
            return True
        return on_none()

    eng.wait_until(ready)
    return found[0]


def probe_now(ctx: int, source: int, tag: int, take: bool):
    """One progress pass, then the arrival matching ``source``/``tag`` on ``ctx`` or None
    (``take``: off the queue); lazily posted receives are given to the matcher first."""
    eng = _rt.ENGINE
    with eng.lock:
        eng.unlazy()  # (the lock is re-entrant)
        if not eng.quiet():
            eng.progress()
        return (eng.matcher.take if take else eng.matcher.probe)(ctx, source, tag)


# -- windows --

def copy_stream(ad):
    """gpumpi's copy stream on device adapter ``ad`` (made on first use, one per adapter)."""
    return _rt.ENGINE.copy_stream(ad)


def regions(memory: str) -> list:
    """The region transports the engine routes ``memory`` (``"host"``/``"device"``) over, in order of
    preference: windows expose and reach memory through their one-sided ones
    (:func:`gpumpi.ipc.base.expose`)."""
    return _rt.ENGINE.world.regions[memory]


def typecheck() -> bool:
    """Whether datatype signatures are checked against each other (``GPUMPI_TYPECHECK``)."""
    return _rt.ENGINE.typecheck


def far_ranks() -> frozenset:
    """The world ranks on other nodes than this process's (empty on one node, or before ``Init``)."""
    eng = _rt.ENGINE
    return eng.far if eng is not None else frozenset()


def mpi_world():
    """``(mpi4py's MPI, gpumpi's private duplicate of its COMM_WORLD)`` under an MPI launcher, else None."""
    return _rt.ENGINE.world.mpi


def mpi_cuda_aware() -> bool:
    """Whether the MPI library of :func:`mpi_world` takes device pointers (``GPUMPI_MPI_CUDA``, else its answer)."""
    from .ipc import mpi

    world = _rt.ENGINE.world
    return mpi.cuda_aware(world.mpi[0], world.cfg.mpi_cuda)
