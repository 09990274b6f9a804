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
           "world_size", "abort",
           # windows
           "copy_stream", "typecheck", "far_ranks", "mpi_world", "mpi_cuda_aware"]


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


# -- windows --

def copy_stream(ad):
    """gpumpi's copy stream on device adapter ``ad`` (made on first use, one per adapter)."""
    return _rt.ENGINE.copy_stream(ad)


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
