"""Communicator attributes: the "Comm" family of :mod:`gpumpi.keyval` (L5).

Theory of operation
===================
A communicator's attributes belong to its handle, and a communicator handle is its
context id (never reused in a process), so the attribute dicts live here by context
id: every Python reference to one communicator (``Comm(c)``, ``fromhandle``, the
references callbacks get) sees the same attributes, and a freed communicator's dict
is dropped.  Callbacks get a fresh reference of the communicator's gpumpi class
(``Intracomm``, ``Cartcomm``...: mpi4py builds its callback objects from the handle,
not from a user subclass), which becomes ``COMM_NULL`` when the callback returns.

MPI_Finalize frees COMM_SELF first: its attributes are deleted newest first, before
anything else in MPI stops (MPI standard, "Allowing User Functions at Process
Termination"); COMM_WORLD's follow.  The predefined keyvals (``TAG_UB``...) are
answered by ``Comm.Get_attr`` itself.  A (re)initialisation starts with no attributes:
a rank forked from an initialised parent gets new contexts, and the parent's attributes
(context ids restart) must not show on them.
"""

from __future__ import annotations

from . import _runtime as _rt
from .keyval import COMM_FIRST, Kind

#: MPICH's MPI_HOST keyval (mpi4py 4.1.2 exports no ``MPI.HOST``; Get_attr answers it)
HOST = 0x64400003
#: the predefined communicator keyvals (MPICH values; constants.py names the ones mpi4py exports)
PREDEFINED = (0x64400001, HOST, 0x64400005, 0x64400007, 0x64400009, 0x6440000B, 0x6440000D)

_WORLD_CTX, _SELF_CTX = 0, 4

_attrs: dict[int, dict] = {}  # context id -> {keyval: (Keyval, value)}
_predef_refs: dict[int, object] = {}  # COMM_WORLD / COMM_SELF reference for the finalize step


def _attrs_of(comm) -> dict:
    ctx = comm._ctx
    d = _attrs.get(ctx)
    if d is None:
        d = _attrs[ctx] = {}
        if ctx in (_WORLD_CTX, _SELF_CTX):
            _predef_refs.setdefault(ctx, _wrap(comm))
    return d


def _gpumpi_class(obj) -> type:
    for cls in type(obj).__mro__:
        if cls.__module__.startswith("gpumpi."):
            return cls
    return type(obj)  # pragma: no cover - every communicator derives from gpumpi.comm.Comm


def _wrap(comm):
    cls = _gpumpi_class(comm)
    ref = cls.__new__(cls)
    ref._hinit(comm)  # a new reference to the same handle (Handle._hinit)
    return ref


def _nullify(ref) -> None:
    ref._set_null()


def _forget(comm) -> None:
    _attrs.pop(comm._ctx, None)


COMM = Kind("Comm", COMM_FIRST, attrs_of=_attrs_of, wrap=_wrap, nullify=_nullify, predefined=PREDEFINED,
            forget=_forget)


def _init(_engine) -> None:
    """A new runtime (a forked rank re-initialising) has new contexts: attributes inherited
    from the parent process belong to its communicators, not to these."""
    _attrs.clear()
    _predef_refs.clear()


def _finalize(_engine) -> None:
    for ctx in (_SELF_CTX, _WORLD_CTX):
        ref = _predef_refs.pop(ctx, None)
        if ref is not None and _attrs.get(ctx):
            COMM.delete_all(ref)


_rt.on_init(_init)
_rt.on_finalize(_finalize)
