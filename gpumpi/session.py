"""MPI sessions (MPI_Session, MPI-4 section 11.3) (L5).

Theory of operation
===================
A session is a local handle onto the MPI runtime: it names the *process sets* the
runtime offers, builds groups from them, and carries an error handler, an info and
a buffer for buffered sends.  gpumpi's runtime is the world model's (it starts when
``gpumpi.MPI`` is imported), so a session is a small record over it:

* process sets: ``mpi://WORLD`` (every process of the job) and ``mpi://SELF``
  (this process), in that order, as MPICH lists them; their info has ``mpi_size``;
* ``Create_group``/``Group.Create_from_session_pset`` give the world ranks of the set
  as a :class:`~gpumpi.group.Group`; a communicator comes from
  ``Intracomm.Create_from_group`` (collective over the group, not the session);
* the handle is an MPICH-looking int32 from the ``Session`` handle table; every
  reference (``Session(s)``, ``fromhandle``) shares one record, so ``Finalize``
  through one reference leaves the others stale (``ERR_SESSION``), and this one
  ``SESSION_NULL``;
* errors in a call on a live session go through the session's error handler; the
  default is ``ERRORS_RETURN`` (mpi4py sets its ``rc.errors`` handler on every new
  session, over the one ``Init`` is given, as here); calls on ``SESSION_NULL`` or a
  finalized session raise ``ERR_SESSION``;
* the attached buffer is the session's own ``{"pool": ...}`` holder, the same
  machinery as ``Comm.Attach_buffer`` (``gpumpi._p2p``); communicators built from the
  session's groups can fall back to it for buffered sends.
"""

from __future__ import annotations

import operator
import sys

from . import _p2p
from . import _runtime as _rt
from ._handles import Handle, Table
from .constants import BUFFER_AUTOMATIC, THREAD_FUNNELED, THREAD_MULTIPLE, THREAD_SERIALIZED, THREAD_SINGLE
from .errors import (
    ERR_ARG,
    ERR_ERRHANDLER,
    ERR_SESSION,
    ERRORS_ABORT,
    ERRORS_ARE_FATAL,
    ERRORS_RETURN,
    Errhandler,
    error,
)
from .errors import Exception as MPIException
from .group import Group
from .info import INFO_NULL, Info

__all__ = ["Session", "SESSION_NULL", "PSETS"]

_NULL_H = 0x38000000
#: the process sets every session offers, in MPICH's order
PSETS = ("mpi://WORLD", "mpi://SELF")
_THREAD_NAMES = {THREAD_SINGLE: "MPI_THREAD_SINGLE", THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
                 THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED", THREAD_MULTIPLE: "MPI_THREAD_MULTIPLE"}


def _options_errhandler():
    """The error handler mpi4py's ``rc.errors`` puts on new objects (None: leave it), read from
    gpumpi's mpi4py shim when it is in use; gpumpi's own default is ERRORS_RETURN."""
    mod = sys.modules.get("mpi4py")
    errors = "exception"
    if mod is not None and getattr(mod, "__gpumpi__", False):
        errors = getattr(getattr(mod, "rc", None), "errors", "exception")
    return {"exception": ERRORS_RETURN, "fatal": ERRORS_ARE_FATAL, "abort": ERRORS_ABORT}.get(errors)


class _Record:
    """What MPI keeps per session handle."""

    __slots__ = ("live", "errh", "bpool")

    def __init__(self, errh: Errhandler) -> None:
        self.live = True
        self.errh = errh
        self.bpool: dict = {}


def _info_arg(info, call: str) -> None:
    if not isinstance(info, Info):  # (mpi4py: an Info, INFO_NULL for none; not None)
        raise TypeError(f"{call}: expecting an Info (got {type(info).__name__})")


def _cint(v, call: str, what: str) -> int:
    """An integer argument as mpi4py's C ``int``: index-able objects, floats truncated."""
    if isinstance(v, float):
        v = int(v)
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{call}: {what} must be an integer (got {type(v).__name__})") from None
    if not -(1 << 31) <= v < (1 << 31):
        raise OverflowError(f"{call}: {what} does not fit a C int ({v})")
    return v


def _pset_name(name, call: str) -> str:
    if isinstance(name, bytes):
        name = name.decode()
    if not isinstance(name, str):
        raise TypeError(f"{call}: process set name must be a str (got {type(name).__name__})")
    return name


class Session(Handle):
    """Session context (MPI_Session)."""

    __slots__ = ("_h", "_rec", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("Session", -0x48000000)

    def __init__(self, session: "Session | None" = None) -> None:
        if session is None:
            self._h, self._rec = _NULL_H, None
        elif not isinstance(session, Session):
            raise TypeError(f"Session: expecting a Session (got {type(session).__name__})")
        else:
            self._h, self._rec = session._h, session._rec

    def _hval(self) -> int:
        return self._h

    def _hnullify(self) -> None:
        self._h, self._rec = _NULL_H, None

    def _hfree(self) -> None:
        self.Finalize()

    def __repr__(self) -> str:
        if self._rec is None:
            return "<Session SESSION_NULL>"
        return f"<Session {self._h & 0xFFFFFFFF:#x}{'' if self._rec.live else ' finalized'}>"

    # --- validation -----------------------------------------------------------------------
    def _check(self, call: str) -> _Record:
        rec = self._rec
        if rec is None:
            raise error(ERR_SESSION, f"{call}: invalid session (SESSION_NULL)")
        if not rec.live:
            raise error(ERR_SESSION, f"{call}: session has been finalized ({self._h & 0xFFFFFFFF:#x})")
        return rec

    def _raise(self, exc: MPIException):
        """Raise ``exc`` through this session's error handler (directly when it has none)."""
        rec = self._rec
        if rec is None or not rec.live:
            raise exc
        rec.errh._apply(self, exc)

    # --- lifecycle ------------------------------------------------------------------------
    @classmethod
    def Init(cls, info: Info = INFO_NULL, errhandler: Errhandler | None = None) -> "Session":
        """Create a new session (MPI_Session_init).

        ``info`` hints are not used (the thread level is the process's); ``errhandler`` is the session's error handler, replaced as mpi4py does by
        the ``mpi4py.rc.errors`` handler (ERRORS_RETURN unless the shim's rc says otherwise)."""
        call = "Session.Init"
        _info_arg(info, call)
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler (got {type(errhandler).__name__})")
        if _rt.is_finalized():
            raise NotImplementedError(f"{call}: gpumpi cannot start the runtime again after MPI.Finalize")
        _rt.ensure()
        if errhandler is None:
            errh = ERRORS_ARE_FATAL
        elif not errhandler:
            raise error(ERR_ERRHANDLER, f"{call}: null error handler ({errhandler!r})")
        else:
            errh = Errhandler(errhandler)
        opt = _options_errhandler()
        if opt is not None:
            errh = opt
        s = cls.__new__(cls)
        s._h = cls._htable.new()
        s._rec = _Record(errh)
        cls._htable.add(s)
        return s

    def Finalize(self) -> None:
        """Finalize a session (MPI_Session_finalize): this reference becomes SESSION_NULL.

        Buffered messages sent through the session's attached buffer are delivered first."""
        call = "Session.Finalize"
        try:
            rec = self._check(call)
        except MPIException as e:
            self._raise(e)
        _p2p.flush(rec.bpool)
        rec.bpool.pop("pool", None)
        rec.live = False
        self._htable.live.pop(self._h, None)
        self._hnullify()

    # --- process sets ---------------------------------------------------------------------
    def Get_num_psets(self, info: Info = INFO_NULL) -> int:
        """Number of available process sets (MPI_Session_get_num_psets)."""
        call = "Session.Get_num_psets"
        _info_arg(info, call)
        try:
            self._check(call)
        except MPIException as e:
            self._raise(e)
        return len(PSETS)

    def Get_nth_pset(self, n: int, info: Info = INFO_NULL) -> str:
        """Name of the ``n``-th process set (MPI_Session_get_nth_pset)."""
        call = "Session.Get_nth_pset"
        n = _cint(n, call, "n")
        _info_arg(info, call)
        try:
            self._check(call)
            if not 0 <= n < len(PSETS):
                raise error(ERR_ARG, f"{call}: no such process set ({n}; there are {len(PSETS)})")
        except MPIException as e:
            self._raise(e)
        return PSETS[n]

    def _pset_ranks(self, name: str, call: str) -> tuple:
        eng = _rt.ENGINE
        if name == PSETS[0]:
            return tuple(range(eng.size))
        if name == PSETS[1]:
            return (eng.rank,)
        raise error(ERR_ARG, f"{call}: unknown process set ({name!r}; known: {', '.join(PSETS)})")

    def Get_pset_info(self, pset_name: str) -> Info:
        """Info of a process set (MPI_Session_get_pset_info): ``mpi_size``, its number of processes."""
        call = "Session.Get_pset_info"
        name = _pset_name(pset_name, call)
        try:
            self._check(call)
            ranks = self._pset_ranks(name, call)
        except MPIException as e:
            self._raise(e)
        return Info.Create({"mpi_size": str(len(ranks))})

    def Create_group(self, pset_name: str) -> Group:
        """Create a new group from a process set of this session (MPI_Group_from_session_pset)."""
        return self._group(pset_name, "Session.Create_group", Group)

    def _group(self, pset_name, call: str, cls) -> Group:
        name = _pset_name(pset_name, call)
        try:
            self._check(call)
            ranks = self._pset_ranks(name, call)
        except MPIException as e:
            self._raise(e)
        g = Group._of(ranks, _rt.ENGINE.rank)
        if cls is not Group:
            sub = cls.__new__(cls)
            Group.__init__(sub, g)
            g = sub
        return g

    def Get_info(self) -> Info:
        """The hints in use for this session (MPI_Session_get_info), with MPICH's keys:
        ``thread_level`` (the process's), ``strict_finalize`` ("0": Finalize does not wait for
        other processes) and ``mpi_memory_alloc_kinds`` ("mpi,system")."""
        call = "Session.Get_info"
        try:
            self._check(call)
        except MPIException as e:
            self._raise(e)
        level = _THREAD_NAMES.get(_rt.thread_level(), "MPI_THREAD_MULTIPLE")
        return Info.Create({"thread_level": level, "strict_finalize": "0", "mpi_memory_alloc_kinds": "mpi,system"})

    # --- buffered sends -------------------------------------------------------------------
    def Attach_buffer(self, buf) -> None:
        """Attach a user buffer (or BUFFER_AUTOMATIC; None means it too, as in mpi4py) for
        buffered sends (MPI_Session_attach_buffer)."""
        call = "Session.Attach_buffer"
        if buf is None:
            buf = BUFFER_AUTOMATIC
        try:
            rec = self._check(call)
            _p2p.attach(rec.bpool, buf, call)
        except MPIException as e:
            self._raise(e)

    def Detach_buffer(self):
        """Detach the session's buffer once its messages left it (MPI_Session_detach_buffer)."""
        call = "Session.Detach_buffer"
        try:
            rec = self._check(call)
            return _p2p.detach(rec.bpool, call)
        except MPIException as e:
            self._raise(e)

    def Flush_buffer(self) -> None:
        """Block until the buffered messages left the session's buffer (MPI_Session_flush_buffer)."""
        call = "Session.Flush_buffer"
        try:
            rec = self._check(call)
        except MPIException as e:
            self._raise(e)
        _p2p.flush(rec.bpool)

    def Iflush_buffer(self):
        """Nonblocking flush of the session's buffer (MPI_Session_iflush_buffer): a Request."""
        from .request import Request

        call = "Session.Iflush_buffer"
        try:
            rec = self._check(call)
        except MPIException as e:
            self._raise(e)
        return Request._of(_p2p.iflush(rec.bpool), None)

    # --- error handling -------------------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn) -> Errhandler:
        """Create a user error handler ``fn(session, errorcode)`` for sessions
        (MPI_Session_create_errhandler).

        Raises:
            RuntimeError: 32 user handlers for sessions exist already (mpi4py's limit).
        """
        return Errhandler._user(errhandler_fn, "Session", "Session.Create_errhandler")

    def Get_errhandler(self) -> Errhandler:
        """A new reference to the session's error handler (MPI_Session_get_errhandler)."""
        call = "Session.Get_errhandler"
        try:
            rec = self._check(call)
        except MPIException as e:
            self._raise(e)
        return Errhandler(rec.errh)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the session's error handler (MPI_Session_set_errhandler)."""
        call = "Session.Set_errhandler"
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler (got {type(errhandler).__name__})")
        try:
            rec = self._check(call)
            if not errhandler:
                raise error(ERR_ERRHANDLER, f"{call}: null error handler ({errhandler!r})")
            if errhandler._family not in (None, "Session"):
                raise error(ERR_ARG, f"{call}: not an error handler for sessions "
                                     f"(created by {errhandler._family}.Create_errhandler)")
        except MPIException as e:
            self._raise(e)
        rec.errh = Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the session's error handler with ``errorcode`` (MPI_Session_call_errhandler)."""
        call = "Session.Call_errhandler"
        errorcode = _cint(errorcode, call, "errorcode")
        try:
            rec = self._check(call)
        except MPIException as e:
            self._raise(e)
        rec.errh.call(self, errorcode)


Session._hbase = Session
#: Null session (MPI_SESSION_NULL).
SESSION_NULL = Session._htable.constant(Session(), "SESSION_NULL")
