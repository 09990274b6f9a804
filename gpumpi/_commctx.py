"""Per-communicator state of mpi4py's pure-Python layers: locks and private contexts (L5).

Theory of operation
===================
mpi4py keeps two things per communicator in attributes, and its pure-Python modules
(``mpi4py.util.pkl5``) and tests reach them through private functions of ``MPI``:

* a *lock table* (``MPI._comm_lock_table``, ``MPI._comm_lock``): a dict of
  ``threading.Lock`` by key, created on first use; mpi4py's object collectives hold
  ``table["bcast"]`` (etc.) while they run, so that threads sharing a communicator do not
  interleave the messages of two calls;
* a *context* (``MPI._commctx_intra``): a duplicate of the communicator, made (a
  collective ``Dup``) the first time it is asked for, and a tag that counts up with every
  request (wrapping at the tag upper bound), so that layered collectives built of
  point-to-point messages (pkl5's ``gather``, ``scatter``, ...) never match user messages
  or each other.

A communicator's context id is unique in its process for the communicator's lifetime and
never reused, so both are kept here by context id; ``Comm.Free`` calls :func:`forget`,
which frees the duplicate too, as mpi4py's attribute delete callback does.
"""

from __future__ import annotations

import threading

from .constants import TAG_UB_VALUE

_mutex = threading.Lock()
_tables: dict = {}  # context id -> {key: threading.Lock}
_ctxs: dict = {}  # context id -> [duplicate communicator, next tag]


def lock_table(comm) -> dict:
    """The lock table of ``comm`` (mpi4py ``MPI._comm_lock_table``)."""
    key = comm._ctx
    with _mutex:
        t = _tables.get(key)
        if t is None:
            t = _tables[key] = {}
        return t


def lock(comm, key=None):
    """The lock of ``comm`` for ``key``, created on first use (mpi4py ``MPI._comm_lock``)."""
    ctx = comm._ctx
    with _mutex:
        t = _tables.get(ctx)
        if t is None:
            t = _tables[ctx] = {}
        lk = t.get(key)
        if lk is None:
            lk = t[key] = threading.Lock()
        return lk


def commctx_intra(comm):
    """``(duplicate, tag)``: ``comm``'s private duplicate (made collectively on first use)
    and the next tag on it (mpi4py ``MPI._commctx_intra``)."""
    ctx = comm._ctx
    with lock(comm, "@commctx_intra"):
        ent = _ctxs.get(ctx)
        if ent is None:
            ent = _ctxs[ctx] = [comm.Dup(), 0]
        if ent[1] >= TAG_UB_VALUE:
            ent[1] = 0
        tag = ent[1]
        ent[1] += 1
        return ent[0], tag


def commctx_inter(comm):
    """``(duplicate, tag, localcomm, low_group)`` of intercommunicator ``comm`` (mpi4py
    ``MPI._commctx_inter``, as its ``PyMPI_Commctx_inter``): the private duplicate, the next tag
    on it, an intracommunicator of the local group (made on first use through a merge, as mpi4py
    does) and whether this is the low group (the smaller one; equal sizes: the group merged first)."""
    ctx = comm._ctx
    with lock(comm, "@commctx_inter"):
        ent = _ctxs.get(ctx)
        if ent is None:
            ent = _ctxs[ctx] = [comm.Dup(), 0]
        if len(ent) == 2:
            ls, rs = comm.Get_size(), comm.Get_remote_size()
            merged = comm.Merge(ls > rs)
            low = 0 if ls > rs else 1 if ls < rs else int(merged.Get_rank() < ls)
            group = comm.Get_group()
            ent += [merged.Create(group), low]
            group.Free()
            merged.Free()
        if ent[1] >= TAG_UB_VALUE:
            ent[1] = 0
        tag = ent[1]
        ent[1] += 1
        return ent[0], tag, ent[2], bool(ent[3])


def forget(ctx: int) -> None:
    """Drop the state of the communicator with context id ``ctx`` (it is being freed)."""
    with _mutex:
        _tables.pop(ctx, None)
        ent = _ctxs.pop(ctx, None)
    if ent is not None:
        for c in [ent[0]] + ent[2:3]:  # the duplicate, and an intercommunicator's local communicator
            if c:
                c.Free()
