"""Communicators (MPI_Comm): the API surface of point-to-point and the first collectives (L5).

Theory of operation
===================
A communicator is a context id plus a group.  Context ``ctx`` carries
point-to-point traffic, ``ctx + 1`` collective traffic, ``ctx + 2`` partitioned
traffic, ``ctx + 3`` the device parts of object messages, so the four never match
each other's messages.  New context ids are agreed collectively: every member
proposes its next free id, all take the maximum, then move their next free id past
it -- no member has used it before.

This module validates and delegates.  Every buffer call parses its buffer spec once
(``_buffers``), validates ranks, tags and the communicator (raising ``MPI.Exception``
with the error class and a message naming the call and the values), then hands the
parsed message to the one buffer path (``_p2p``) with the context id and world rank.
Blocking calls are the nonblocking call plus a wait.  Lowercase calls move Python
objects (``_objects``); matched probes return a ``message.Message``; partitioned
requests live in ``_partitioned``.  Errors pass through the communicator's error
handler before they are raised.
"""

from __future__ import annotations

import struct
import warnings

from . import _commattr
from . import _commctx
from . import keyval as _keyval
from .collectives import _calls
from .collectives import _execute as _coll_exec
from .collectives import _lower
from ._buffers import _is_integral
from . import _objects
from . import _p2p
from . import _pickle
from . import _runtime as _rt
from ._buffers import message_simple
from ._partitioned import PartRequest, partitions_of
from ._progress import SENT
from .constants import (
    ANY_SOURCE,
    ANY_TAG,
    APPNUM,
    CONGRUENT,
    IDENT,
    IO,
    LASTUSEDCODE,
    PROC_NULL,
    SIMILAR,
    TAG_UB,
    TAG_UB_VALUE,
    UNDEFINED,
    UNEQUAL,
    UNIVERSE_SIZE,
    WTIME_IS_GLOBAL,
)
from .datatypes.flatten import sigcode as _sigcode
from .errors import (
    ERR_ARG,
    ERR_COMM,
    ERR_COUNT,
    ERR_ERRHANDLER,
    ERR_KEYVAL,
    ERR_RANK,
    ERR_ROOT,
    ERR_TAG,
    ERRORS_RETURN,
    Errhandler,
    error,
    last_used_code as _last_used_code,
)
from .errors import Exception as MPIException
from ._handles import Handle, Table
from .group import Group
from .info import Info
from .message import Message
from .op import SUM, Op
from .request import Prequest, Request, check_status, done_xfer, joint, part_done
from .status import Status
from numpy import ndarray as _ndarray

STANDARD, SYNCHRONOUS, READY, BUFFERED = _p2p.STANDARD, _p2p.SYNCHRONOUS, _p2p.READY, _p2p.BUFFERED
_msg = _p2p._msg


class Comm(Handle):
    """Communication context (MPI_Comm)."""

    __slots__ = ("_ctx", "_w", "_rank", "_size", "_group", "_errh", "_name", "_cseq", "_bpool",
                 "_rw", "__weakref__")
    _hnull = 0x04000000
    _htable = Table("Comm", 0)

    def __new__(cls, comm: "Comm | None" = None):
        # mpi4py's Comm.__new__ takes the communicator to copy (subclasses such as
        # mpi4py.util.pkl5.Comm call it so); the copy itself is __init__'s
        return super().__new__(cls)

    def __init__(self, comm: "Comm | None" = None) -> None:
        if comm is None:
            self._set_null()
        elif not isinstance(comm, Comm):
            raise TypeError(f"{type(self).__name__}: expecting a Comm (got {type(comm).__name__})")
        else:
            self._copy_from(comm)

    # --- handle ---------------------------------------------------------------------------
    def _hval(self) -> int:
        """The handle is a function of the context id, unique in the process (MPICH values
        for the predefined communicators)."""
        ctx = self._ctx
        if ctx < 0:
            return self._hnull
        if ctx == 0:
            return 0x44000000
        if ctx == 4:
            return 0x44000001
        return -0x7C000000 + (ctx & 0x03FFFFFF)

    def _hnullify(self) -> None:
        self._set_null()

    def _set_null(self) -> None:
        self._ctx = -1
        self._w = ()
        self._rw = ()
        self._rank = -1
        self._size = 0
        self._group = None
        self._errh = ERRORS_RETURN
        self._name = "MPI_COMM_NULL"
        self._cseq = 0
        self._bpool = {}

    def _copy_from(self, comm: "Comm") -> None:
        for s in Comm.__slots__[:-1]:
            setattr(self, s, getattr(comm, s))

    def _setup(self, ctx: int, world_ranks, my_world: int, name: str = "", remote=None) -> None:
        self._ctx = ctx
        self._w = tuple(world_ranks) if remote is None else tuple(remote)
        self._rw = tuple(world_ranks)
        self._rank = self._rw.index(my_world)
        self._size = len(self._rw)
        self._group = Group._of(self._rw, my_world)
        self._errh = ERRORS_RETURN
        self._name = name
        self._cseq = 0
        self._bpool = {}
        Comm._htable.add(self)

    def __bool__(self) -> bool:
        return self._ctx >= 0

    def __repr__(self) -> str:
        if self._ctx < 0:
            return f"<{type(self).__name__} COMM_NULL>"
        return f"<{type(self).__name__} {self._name or 'comm'} rank={self._rank} size={self._size}>"

    # --- validation -----------------------------------------------------------------------
    def _check(self, call: str) -> None:
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if self._ctx in _rt.ENGINE.freed_ctx:
            raise error(ERR_COMM, f"{call}: invalid communicator (freed through another handle)")

    def _raise(self, exc: MPIException):
        self._errh._apply(self, exc)

    def _peer(self, rank, call: str, what: str = "rank") -> int:
        if type(rank) is not int:
            try:
                rank = rank.__index__()
            except AttributeError:
                raise TypeError(f"{call}: {what} must be an integer ({type(rank).__name__})") from None
        if 0 <= rank < len(self._w):
            return rank
        raise error(ERR_RANK, f"{call}: invalid {what} ({rank}, communicator size {len(self._w)})")

    def _src(self, source, call: str) -> int:
        if source == ANY_SOURCE:
            return ANY_SOURCE
        return self._peer(source, call, "source")

    @staticmethod
    def _stag(tag, call: str) -> int:
        if type(tag) is not int:
            try:
                tag = tag.__index__()
            except AttributeError:
                raise TypeError(f"{call}: tag must be an integer ({type(tag).__name__})") from None
        if 0 <= tag <= TAG_UB_VALUE:
            return tag
        raise error(ERR_TAG, f"{call}: invalid tag ({tag}, valid 0..{TAG_UB_VALUE})")

    @staticmethod
    def _rtag(tag, call: str) -> int:
        if tag == ANY_TAG:
            return ANY_TAG
        return Comm._stag(tag, call)

    # --- queries --------------------------------------------------------------------------
    def Get_size(self) -> int:
        """Number of processes (MPI_Comm_size)."""
        self._check("Comm.Get_size")
        return self._size

    def Get_rank(self) -> int:
        """Rank of this process (MPI_Comm_rank)."""
        self._check("Comm.Get_rank")
        return self._rank

    def Get_group(self) -> Group:
        """Group of the communicator (MPI_Comm_group)."""
        self._check("Comm.Get_group")
        return self._group.Dup()

    size = property(Get_size)
    rank = property(Get_rank)
    group = property(Get_group)

    def Is_inter(self) -> bool:
        """Whether this is an intercommunicator (MPI_Comm_test_inter)."""
        self._check("Comm.Is_inter")
        return False

    def Is_intra(self) -> bool:
        """Whether this is an intracommunicator."""
        return not self.Is_inter()

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    @property
    def is_topo(self) -> bool:
        return False

    def Get_topology(self) -> int:
        """Topology type (MPI_Topo_test): UNDEFINED for plain communicators."""
        self._check("Comm.Get_topology")
        return UNDEFINED

    topology = property(Get_topology)

    def Compare(self, comm: "Comm") -> int:
        """IDENT, CONGRUENT, SIMILAR or UNEQUAL (MPI_Comm_compare)."""
        self._check("Comm.Compare")
        comm._check("Comm.Compare")
        if self._ctx == comm._ctx and self._w == comm._w:
            return IDENT
        if self._rw == comm._rw and self._w == comm._w:
            return CONGRUENT
        if set(self._rw) == set(comm._rw):
            return SIMILAR
        return UNEQUAL

    def Get_name(self) -> str:
        """Communicator name (MPI_Comm_get_name)."""
        return self._name

    def Set_name(self, name: str) -> None:
        """Set the communicator name (MPI_Comm_set_name)."""
        self._check("Comm.Set_name")
        self._name = str(name)

    name = property(Get_name, Set_name)

    # --- attributes (caching): gpumpi.keyval's "Comm" family, see gpumpi._commattr -------
    _attrkind = _commattr.COMM

    def _predefined_attr(self, keyval: int):
        if keyval == TAG_UB:
            return TAG_UB_VALUE
        if keyval == UNIVERSE_SIZE:
            return _rt.ENGINE.size
        if keyval == WTIME_IS_GLOBAL:
            return 0
        if keyval == APPNUM:
            return 0
        if keyval == IO:
            return ANY_SOURCE  # every process can do I/O
        if keyval == LASTUSEDCODE:
            return _last_used_code()
        if keyval == _commattr.HOST:
            return PROC_NULL  # no process is singled out as "host"
        raise error(ERR_KEYVAL, f"Comm.Get_attr: unknown predefined keyval ({keyval})")  # pragma: no cover

    def Get_attr(self, keyval: int):
        """Retrieve attribute value by key (MPI_Comm_get_attr); None when not set.

        Predefined keyvals: ``TAG_UB``, ``IO``, ``WTIME_IS_GLOBAL``, ``UNIVERSE_SIZE``,
        ``APPNUM``, ``LASTUSEDCODE`` (and MPICH's MPI_HOST, ``PROC_NULL``)."""
        try:
            self._check("Comm.Get_attr")
            return self._attrkind.get_attr(self, keyval, self._predefined_attr)
        except MPIException as e:
            self._raise(e)

    def Set_attr(self, keyval: int, attrval) -> None:
        """Store attribute value associated with a key (MPI_Comm_set_attr).

        A value already set under ``keyval`` is replaced after its delete callback ran."""
        try:
            self._check("Comm.Set_attr")
            self._attrkind.set_attr(self, keyval, attrval)
        except MPIException as e:
            self._raise(e)

    def Delete_attr(self, keyval: int) -> None:
        """Delete attribute value associated with a key (MPI_Comm_delete_attr).

        Raises the delete callback's error (as an ``MPI.Exception``, not through the
        error handler: mpi4py reports it after MPI returned); the value is gone regardless."""
        call = "Comm.Delete_attr"
        try:
            self._check(call)
            self._attrkind.deletable(keyval, call)
        except MPIException as e:
            self._raise(e)
        self._attrkind.delete_attr(self, keyval)

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython: bool = False) -> int:
        """Create a new attribute key for communicators (MPI_Comm_create_keyval).

        ``copy_fn(comm, keyval, value)`` runs on ``Dup`` and returns the duplicate's value
        (``NotImplemented``: not copied; ``True`` instead of a function: copied as is;
        ``None``/``False``: never copied).  ``delete_fn(comm, keyval, value)`` runs when the
        value is replaced, deleted, or its communicator freed.  With ``nopython`` values
        are plain integers, as C attributes."""
        return _commattr.COMM.create_keyval(copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free an attribute key for communicators (MPI_Comm_free_keyval); returns
        KEYVAL_INVALID.  Values already attached stay, with their callbacks."""
        return _commattr.COMM.free_keyval(keyval)

    # --- error handling -------------------------------------------------------------------
    def Get_errhandler(self) -> Errhandler:
        """A new reference to the communicator's error handler (MPI_Comm_get_errhandler);
        ``Free`` it when done."""
        self._check("Comm.Get_errhandler")
        return Errhandler(self._errh)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the error handler (MPI_Comm_set_errhandler)."""
        self._check("Comm.Set_errhandler")
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"Comm.Set_errhandler: expecting an Errhandler (got {type(errhandler).__name__})")
        if not errhandler:
            raise error(ERR_ERRHANDLER, f"Comm.Set_errhandler: null error handler ({errhandler!r})")
        self._errh = Errhandler(errhandler)

    @classmethod
    def Create_errhandler(cls, errhandler_fn) -> Errhandler:
        """Create a user error handler ``fn(comm, errorcode)`` (MPI_Comm_create_errhandler).

        Raises:
            RuntimeError: 32 user handlers for communicators exist already (mpi4py's limit).
        """
        return Errhandler._user(errhandler_fn, "Comm", "Comm.Create_errhandler")

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the error handler with ``errorcode`` (MPI_Comm_call_errhandler).

        ERRORS_RETURN returns, a user handler is called with ``(comm, errorcode)``, the
        fatal handlers end the job."""
        self._check("Comm.Call_errhandler")
        self._errh.call(self, _int_arg(errorcode, "Comm.Call_errhandler", "errorcode"))

    def Abort(self, errorcode: int = 0) -> None:
        """Terminate every process of the job (MPI_Abort)."""
        _rt.abort(int(errorcode))

    # --- lifecycle ------------------------------------------------------------------------
    def Free(self) -> None:
        """Free the communicator (MPI_Comm_free)."""
        self._check("Comm.Free")
        if self._ctx in (0, 4):
            raise error(ERR_COMM, f"Comm.Free: cannot free a predefined communicator ({self._name})")
        _keyval.on_free(self)  # attribute delete callbacks, newest first, while the handle is valid
        eng = _rt.ENGINE
        _commctx.forget(self._ctx)  # its lock table and private duplicate (mpi4py's attributes)
        with eng.lock:
            for c in (self._ctx, self._ctx + 1, self._ctx + 2, self._ctx + 3):
                # pending operations complete normally (MPI_Comm_free): a context with a
                # receive still posted keeps its queues (context ids are never reused)
                if eng.matcher.pending(c)[0] == 0:
                    eng.matcher.drop_context(c)
        Comm._htable.live.pop(self._hval(), None)
        eng.freed_ctx.add(self._ctx)  # copies of this handle are stale now (context ids are never reused)
        self._set_null()

    def Clone(self) -> "Comm":
        """Clone the communicator (MPI_Comm_dup): a duplicate of this communicator's own type."""
        return self.Dup()

    def Dup(self, info=None) -> "Comm":
        """Duplicate the communicator (MPI_Comm_dup); intracommunicators only so far."""
        try:
            self._check("Comm.Dup")
        except MPIException as e:
            self._raise(e)
        raise NotImplementedError(f"Comm.Dup: not supported for {type(self).__name__} yet")

    def Split(self, color: int = 0, key: int = 0) -> "Comm":
        """Split into disjoint communicators (MPI_Comm_split); intracommunicators only so far."""
        try:
            self._check("Comm.Split")
        except MPIException as e:
            self._raise(e)
        raise NotImplementedError(f"Comm.Split: not supported for {type(self).__name__} yet")

    # --- point-to-point: posting ----------------------------------------------------------
    def _send_args(self, buf, dest, tag, call: str, stream=None):
        """Validate a send: ``(message, world dest, tag)``, or None for PROC_NULL; changes nothing."""
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if self._ctx in _rt.ENGINE.freed_ctx:
            raise error(ERR_COMM, f"{call}: invalid communicator (freed through another handle)")
        if dest == PROC_NULL:
            return None
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        m = _msg(buf, True, dest, call)
        _p2p.check_stream(m, stream)
        return m, self._w[dest], tag

    def _post_send(self, args, mode: int, call: str, stream=None):
        if args is None:
            return None
        m, wdest, tag = args
        return _p2p.isend(m, wdest, self._rank, tag, self._ctx, mode, call, stream, self._bpool)

    def _isend(self, buf, dest, tag, mode: int, call: str, stream=None):
        return self._post_send(self._send_args(buf, dest, tag, call, stream), mode, call, stream)

    def _recv_args(self, buf, source, tag, call: str, stream=None):
        """Validate a receive: ``(message, source, world source, tag)``, or None for PROC_NULL."""
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if self._ctx in _rt.ENGINE.freed_ctx:
            raise error(ERR_COMM, f"{call}: invalid communicator (freed through another handle)")
        if source == PROC_NULL:
            return None
        source = self._src(source, call)
        tag = self._rtag(tag, call)
        wpeer = ANY_SOURCE if source == ANY_SOURCE else self._w[source]
        m = _msg(buf, False, source, call)
        _p2p.check_stream(m, stream)
        return m, source, wpeer, tag

    def _post_recv(self, args, call: str, stream=None):
        if args is None:
            return None
        m, source, wpeer, tag = args
        return _p2p.irecv(m, source, wpeer, tag, self._ctx, call, stream)

    def _irecv(self, buf, source, tag, call: str, stream=None):
        return self._post_recv(self._recv_args(buf, source, tag, call, stream), call, stream)

    @staticmethod
    def _status_arg(status, call: str) -> None:
        if status is not None and not isinstance(status, Status):
            raise TypeError(f"{call}: status must be a Status or None (got {type(status).__name__})")

    def _post_pair(self, rargs, sargs, call: str, stream=None, recv_stream=None):
        """Post a validated receive, then a validated send; if the send cannot be posted, the
        receive is withdrawn (cancelled) so that no operation is left behind."""
        r = self._post_recv(rargs, call, recv_stream if recv_stream is not None else stream)
        try:
            s = self._post_send(sargs, STANDARD, call, stream)
        except BaseException:
            if r is not None and not r.done:
                _rt.ENGINE.cancel(r)
            raise
        return r, s

    def _wait(self, x, status, call: str) -> None:
        if x is None:
            if status is not None:
                status._fill(PROC_NULL, ANY_TAG, 0)
            return
        if not x.done:
            _rt.ENGINE.wait(x)
        if status is not None:
            status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
        if x.err:
            self._raise(error(x.err, x.errmsg))

    def _req(self, x, keep=None) -> Request:
        if x is None or x is SENT:  # every request needs a handle of its own
            x = done_xfer()
        return Request._of(x, self, None, keep)

    def _send_wait(self, buf, dest, tag, mode: int, call: str, stream=None) -> None:
        try:
            self._wait(self._isend(buf, dest, tag, mode, call, stream), None, call)
        except MPIException as e:
            self._raise(e)

    def _send_req(self, buf, dest, tag, mode: int, call: str, stream=None) -> Request:
        try:
            return self._req(self._isend(buf, dest, tag, mode, call, stream), buf)
        except MPIException as e:
            self._raise(e)

    # --- blocking sends -------------------------------------------------------------------
    def Send(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Blocking send (MPI_Send).

        ``stream`` (device buffers; every buffer call takes it): the data is read after the
        work queued on that stream (default: the array's own stream, else the current one).
        """
        try:
            # fast path: a NumPy array to a valid rank with a valid tag
            if type(buf) is _ndarray and type(dest) is int and type(tag) is int and \
                    0 <= dest < len(self._w) and 0 <= tag <= TAG_UB_VALUE and self._ctx >= 0:
                m = message_simple(buf, True, dest, 1, "Send")
                mem = m.mem
                if mem is not None and m.contiguous:
                    dt = m.datatype
                    sig = dt._rec.cache.get("sigcode")
                    x = _rt.ENGINE.isend([mem], len(mem), self._w[dest], self._rank, tag, self._ctx, STANDARD,
                                         "Send", (m.addr + m.lo,), _sigcode(dt) if sig is None else sig)
                    if x is not SENT:
                        self._wait(x, None, "Send")
                    return
            self._wait(self._isend(buf, dest, tag, STANDARD, "Send", stream), None, "Send")
        except MPIException as e:
            self._raise(e)

    def Ssend(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Blocking synchronous send: returns after the receive matched (MPI_Ssend)."""
        self._send_wait(buf, dest, tag, SYNCHRONOUS, "Ssend", stream)

    def Bsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Buffered send through the attached buffer (MPI_Bsend)."""
        self._send_wait(buf, dest, tag, BUFFERED, "Bsend", stream)

    def Rsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Ready send: the matching receive must already be posted (MPI_Rsend)."""
        self._send_wait(buf, dest, tag, READY, "Rsend", stream)

    def Recv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None, *,
             stream=None) -> None:
        """Blocking receive (MPI_Recv)."""
        if status is not None:
            check_status(status, "Recv")
        try:
            # fast path: into a NumPy array from a valid rank (or ANY_SOURCE) with a valid tag
            if type(buf) is _ndarray and type(source) is int and type(tag) is int and self._ctx >= 0 and \
                    -2 <= source < len(self._w) and source != -1 and -1 <= tag <= TAG_UB_VALUE:
                m = message_simple(buf, False, source, 1, "Recv")
                mem = m.mem
                if mem is not None and m.contiguous:
                    eng = _rt.ENGINE
                    dt = m.datatype
                    sig = dt._rec.cache.get("sigcode")
                    x = eng.irecv(mem, len(mem), source, ANY_SOURCE if source < 0 else self._w[source], tag,
                                  self._ctx, "Recv", m.addr + m.lo, _sigcode(dt) if sig is None else sig)
                    if not x.done:
                        eng.wait(x)
                    if status is not None:
                        status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
                    if x.err:
                        self._raise(error(x.err, x.errmsg))
                    return
            self._wait(self._irecv(buf, source, tag, "Recv", stream), status, "Recv")
        except MPIException as e:
            self._raise(e)

    # --- nonblocking ----------------------------------------------------------------------
    def Isend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking send (MPI_Isend)."""
        return self._send_req(buf, dest, tag, STANDARD, "Isend", stream)

    def Issend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking synchronous send (MPI_Issend)."""
        return self._send_req(buf, dest, tag, SYNCHRONOUS, "Issend", stream)

    def Ibsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking buffered send (MPI_Ibsend)."""
        return self._send_req(buf, dest, tag, BUFFERED, "Ibsend", stream)

    def Irsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking ready send (MPI_Irsend)."""
        return self._send_req(buf, dest, tag, READY, "Irsend", stream)

    def Irecv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking receive (MPI_Irecv)."""
        try:
            return self._req(self._irecv(buf, source, tag, "Irecv", stream), buf)
        except MPIException as e:
            self._raise(e)

    # --- combined -------------------------------------------------------------------------
    def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None, *, stream=None) -> None:
        """Send and receive in one call (MPI_Sendrecv).

        Every argument (both buffers, ranks, tags, status) is checked before anything is
        posted: a call that raises leaves no operation behind.
        """
        try:
            self._status_arg(status, "Sendrecv")
            rargs = self._recv_args(recvbuf, source, recvtag, "Sendrecv", stream)
            sargs = self._send_args(sendbuf, dest, sendtag, "Sendrecv", stream)
            r, s = self._post_pair(rargs, sargs, "Sendrecv", stream)
            self._wait(s, None, "Sendrecv")
            self._wait(r, status, "Sendrecv")
        except MPIException as e:
            self._raise(e)

    def _replace_args(self, buf, dest, sendtag, source, recvtag, call: str, stream=None):
        """Validate a send-receive through ``buf``: ``(receive args, send args)``, with the send's
        bytes copied out of ``buf`` (the copy is sent as bytes) only once everything checked out."""
        rargs = self._recv_args(buf, source, recvtag, call, stream)
        sargs = self._send_args(buf, dest, sendtag, call, stream)
        if sargs is None:
            return rargs, None, None
        m, wdest, tag = sargs
        mem, _, release = _p2p._out(m, call, stream)
        copy = bytearray(mem)
        if release is not None:
            release()
        return rargs, (_msg(copy, True, dest, call), wdest, tag), copy

    def Sendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                         recvtag: int = ANY_TAG, status: Status | None = None, *, stream=None) -> None:
        """Send and receive through one buffer (MPI_Sendrecv_replace); checks every argument first."""
        try:
            self._status_arg(status, "Sendrecv_replace")
            rargs, sargs, _ = self._replace_args(buf, dest, sendtag, source, recvtag, "Sendrecv_replace", stream)
            r, s = self._post_pair(rargs, sargs, "Sendrecv_replace", None, stream)
            self._wait(s, None, "Sendrecv_replace")
            self._wait(r, status, "Sendrecv_replace")
        except MPIException as e:
            self._raise(e)

    def _isendrecv(self, r, s, keep) -> Request:
        j = joint(2)
        j.st_source, j.st_tag = PROC_NULL, ANY_TAG
        eng = _rt.ENGINE
        with eng.lock:
            for x, is_recv in ((s, False), (r, True)):
                if x is None:
                    x = done_xfer()
                if x.done:
                    part_done(j, x, is_recv)
                else:
                    prev = x.on_done
                    x.on_done = (lambda xx, f=is_recv, p=prev: (p(xx) if p else None, part_done(j, xx, f)))
        return Request._of(j, self, None, keep)

    def Isendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                  recvtag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking send-receive (MPI_Isendrecv); checks every argument before posting."""
        try:
            rargs = self._recv_args(recvbuf, source, recvtag, "Isendrecv", stream)
            sargs = self._send_args(sendbuf, dest, sendtag, "Isendrecv", stream)
            r, s = self._post_pair(rargs, sargs, "Isendrecv", stream)
            return self._isendrecv(r, s, (sendbuf, recvbuf))
        except MPIException as e:
            self._raise(e)

    def Isendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                          recvtag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking send-receive through one buffer (MPI_Isendrecv_replace); checks every
        argument before posting."""
        try:
            rargs, sargs, copy = self._replace_args(buf, dest, sendtag, source, recvtag, "Isendrecv_replace",
                                                    stream)
            r, s = self._post_pair(rargs, sargs, "Isendrecv_replace", None, stream)
            return self._isendrecv(r, s, (buf, copy))
        except MPIException as e:
            self._raise(e)

    # --- probe ----------------------------------------------------------------------------
    def _probe_args(self, source, tag, call):
        self._check(call)
        return self._src(source, call), self._rtag(tag, call)

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Wait for a matching message without receiving it (MPI_Probe)."""
        check_status(status, "Probe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return True
            a = self._probe_wait(source, tag, False, "Probe")
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return True
        except MPIException as e:
            self._raise(e)

    def _probe_wait(self, source, tag, take: bool, call: str):
        """Block until a message matches (``take``: off the queue, for matched probes)."""
        source, tag = self._probe_args(source, tag, call)
        eng = _rt.ENGINE
        look = eng.matcher.take if take else eng.matcher.probe
        found = []
        ctx = self._ctx

        def ready():
            a = look(ctx, source, tag)
            if a is not None:
                found.append(a)
                return True
            return self._failed_peer(source, call)

        eng.wait_until(ready)
        return found[0]

    def _probe_now(self, source, tag, take: bool, call: str):
        """One progress pass, then the matching message or None (``take``: off the queue)."""
        source, tag = self._probe_args(source, tag, call)
        eng = _rt.ENGINE
        with eng.lock:
            eng.progress()
            a = (eng.matcher.take if take else eng.matcher.probe)(self._ctx, source, tag)
        if a is None:
            self._failed_peer(source, call)
        return a

    def _failed_peer(self, source, call) -> bool:
        eng = _rt.ENGINE
        if not eng.failed:
            return False
        if source == ANY_SOURCE or self._w[source] in eng.failed:
            from .errors import ERR_PROC_FAILED

            raise error(ERR_PROC_FAILED, f"{call}: peer process failed (ranks {sorted(eng.failed)})")
        return False

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Check for a matching message (MPI_Iprobe)."""
        check_status(status, "Iprobe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return True
            a = self._probe_now(source, tag, False, "Iprobe")
            if a is None:
                return False
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return True
        except MPIException as e:
            self._raise(e)

    def Mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> "Message":
        """Matched probe: take the message off the queue (MPI_Mprobe)."""
        check_status(status, "Mprobe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return Message._no_proc()
            a = self._probe_wait(source, tag, True, "Mprobe")
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return Message._of(a, self)
        except MPIException as e:
            self._raise(e)

    def Improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Nonblocking matched probe (MPI_Improbe); None when nothing matches."""
        check_status(status, "Improbe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return Message._no_proc()
            a = self._probe_now(source, tag, True, "Improbe")
            if a is None:
                return None
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return Message._of(a, self)
        except MPIException as e:
            self._raise(e)

    # --- persistent -----------------------------------------------------------------------
    def _send_init(self, buf, dest, tag, mode, call, stream=None) -> Prequest:
        self._check(call)
        if dest == PROC_NULL:
            return Prequest._persistent(done_xfer, self, buf)
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        m = _msg(buf, True, dest, call)
        wdest, me, ctx, bpool = self._w[dest], self._rank, self._ctx, self._bpool
        if _p2p._on_device(m):  # packed or staged at every Start
            return Prequest._persistent(lambda: _p2p.isend(m, wdest, me, tag, ctx, mode, call, stream, bpool),
                                        self, buf)
        _p2p._host_mem(m, call)
        sig = _p2p._sig(m.datatype)
        fixed = _p2p._out(m, call) if m.contiguous else None  # non-contiguous data is packed at every Start
        return Prequest._persistent(
            lambda: _p2p.send_out(fixed or _p2p._out(m, call), wdest, me, tag, ctx, mode, call, sig, bpool),
            self, buf)

    def Send_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent standard send (MPI_Send_init)."""
        try:
            return self._send_init(buf, dest, tag, STANDARD, "Send_init", stream)
        except MPIException as e:
            self._raise(e)

    def Ssend_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent synchronous send (MPI_Ssend_init)."""
        try:
            return self._send_init(buf, dest, tag, SYNCHRONOUS, "Ssend_init", stream)
        except MPIException as e:
            self._raise(e)

    def Bsend_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent buffered send (MPI_Bsend_init)."""
        try:
            return self._send_init(buf, dest, tag, BUFFERED, "Bsend_init", stream)
        except MPIException as e:
            self._raise(e)

    def Rsend_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent ready send (MPI_Rsend_init)."""
        try:
            return self._send_init(buf, dest, tag, READY, "Rsend_init", stream)
        except MPIException as e:
            self._raise(e)

    def Recv_init(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG, *, stream=None) -> Prequest:
        """Persistent receive (MPI_Recv_init)."""
        try:
            call = "Recv_init"
            self._check(call)
            if source == PROC_NULL:
                return Prequest._persistent(done_xfer, self, buf)
            source = self._src(source, call)
            tag = self._rtag(tag, call)
            m = _msg(buf, False, source, call)
            if not _p2p._on_device(m):
                _p2p._host_mem(m, call)
            wpeer = ANY_SOURCE if source == ANY_SOURCE else self._w[source]
            ctx = self._ctx
            return Prequest._persistent(lambda: _p2p.irecv(m, source, wpeer, tag, ctx, call, stream), self, buf)
        except MPIException as e:
            self._raise(e)

    # --- partitioned ----------------------------------------------------------------------
    def Psend_init(self, buf, partitions: int, dest: int, tag: int = 0, info=None) -> Prequest:
        """Partitioned send (MPI_Psend_init): each partition leaves when marked ready."""
        try:
            call = "Psend_init"
            self._check(call)
            partitions = partitions_of(partitions, call)
            if dest == PROC_NULL:
                return PartRequest._make(None, partitions, self, buf, send=True, start=done_xfer)
            dest = self._peer(dest, call, "destination")
            tag = self._stag(tag, call)
            mem = _p2p._contiguous_only(_msg(buf, True, dest, call), call)
            if len(mem) % partitions:
                raise error(ERR_COUNT, f"{call}: buffer of {len(mem)} bytes does not split into {partitions} partitions")
            return PartRequest._make(mem, partitions, self, buf, send=True, peer=dest, tag=tag)
        except MPIException as e:
            self._raise(e)

    def Precv_init(self, buf, partitions: int, source: int = ANY_SOURCE, tag: int = ANY_TAG, info=None) -> Prequest:
        """Partitioned receive (MPI_Precv_init)."""
        try:
            call = "Precv_init"
            self._check(call)
            partitions = partitions_of(partitions, call)
            if source == PROC_NULL:
                return PartRequest._make(None, partitions, self, buf, send=False, start=done_xfer)
            if source == ANY_SOURCE or tag == ANY_TAG:
                raise error(ERR_ARG, f"{call}: partitioned receives take no wildcards (source {source}, tag {tag})")
            source = self._peer(source, call, "source")
            tag = self._stag(tag, call)
            mem = _p2p._contiguous_only(_msg(buf, False, source, call), call)
            if len(mem) % partitions:
                raise error(ERR_COUNT, f"{call}: buffer of {len(mem)} bytes does not split into {partitions} partitions")
            return PartRequest._make(mem, partitions, self, buf, send=False, peer=source, tag=tag)
        except MPIException as e:
            self._raise(e)

    # --- object (lowercase) API: pickle-5 messages, device arrays out of band (_objects) ----
    def _osend(self, obj, dest, tag, mode, call):
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if dest == PROC_NULL:
            return None
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        return _objects.isend(obj, dest, self._w, self._rank, tag, self._ctx, mode, call, self._bpool)

    def _orecv(self, source, tag, call, watch: bool = False, mem=None):
        """Post the receive of an object message (into host bytes ``mem``; None: sized by the
        message); ``watch``: post its parts' receives on arrival."""
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if source == PROC_NULL:
            return None
        return _objects.irecv(self._src(source, call), self._rtag(tag, call), self._w, self._ctx, call, watch, mem)

    @staticmethod
    def _obuf(buf, call: str):
        """Turn recv/irecv's buffer argument into a buffer, as mpi4py does: an int (that many
        bytes are allocated) or a writable buffer; the message must fit (else ERR_TRUNCATE)."""
        if _is_integral(buf):
            n = buf.__index__()
            if n < 0:
                raise ValueError(f"{call}: negative buffer size ({n})")
            return memoryview(bytearray(n))
        try:
            mv = memoryview(buf)
        except TypeError:
            raise TypeError(f"{call}: buf must be an int or a writable buffer ({type(buf).__name__})") from None
        if mv.readonly:
            raise BufferError(f"{call}: buf is read-only ({type(buf).__name__})")
        if not mv.c_contiguous:
            raise BufferError(f"{call}: buf is not C-contiguous ({type(buf).__name__})")
        return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv

    def _oload(self, x, call: str, pend=None):
        return _objects.load(x, call, self._w, self._ctx, pend)

    def send(self, obj, dest: int, tag: int = 0) -> None:
        """Send a Python object (MPI_Send of its pickle).

        Device arrays inside it (CuPy, Numba, simulated) travel as messages of their own, device
        to device, and arrive as contiguous device arrays of the same type, shape and dtype,
        allocated on the receiver's current device.
        """
        try:
            self._wait(self._osend(obj, dest, tag, STANDARD, "send"), None, "send")
        except MPIException as e:
            self._raise(e)

    def ssend(self, obj, dest: int, tag: int = 0) -> None:
        """Synchronous send of a Python object (MPI_Ssend)."""
        try:
            self._wait(self._osend(obj, dest, tag, SYNCHRONOUS, "ssend"), None, "ssend")
        except MPIException as e:
            self._raise(e)

    def bsend(self, obj, dest: int, tag: int = 0) -> None:
        """Buffered send of a Python object (MPI_Bsend).

        The whole message goes through the attached buffer: device arrays inside the object are
        copied to host memory (and need room there too), then rebuilt as device arrays on receipt.
        """
        try:
            self._wait(self._osend(obj, dest, tag, BUFFERED, "bsend"), None, "bsend")
        except MPIException as e:
            self._raise(e)

    def isend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking send of a Python object (MPI_Isend); the request completes when the object
        message and the messages of the device arrays inside it (see :meth:`send`) all have."""
        try:
            return self._req(self._osend(obj, dest, tag, STANDARD, "isend"))
        except MPIException as e:
            self._raise(e)

    def issend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking synchronous send of a Python object (MPI_Issend)."""
        try:
            return self._req(self._osend(obj, dest, tag, SYNCHRONOUS, "issend"))
        except MPIException as e:
            self._raise(e)

    def ibsend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking buffered send of a Python object (MPI_Ibsend); device arrays as in :meth:`bsend`."""
        try:
            return self._req(self._osend(obj, dest, tag, BUFFERED, "ibsend"))
        except MPIException as e:
            self._raise(e)

    def recv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Receive a Python object (MPI_Recv of its pickle); an empty message is None.

        gpumpi sizes the receive from the message.  ``buf`` (deprecated, as in mpi4py: it
        warns) receives into that many bytes (an int) or into a writable buffer instead; a
        larger message fails with ERR_TRUNCATE.
        """
        try:
            mem = None
            if buf is not None:
                warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
                if source != PROC_NULL:
                    mem = self._obuf(buf, "recv")
            x = self._orecv(source, tag, "recv", False, mem)
            self._wait(x, status, "recv")
            if x is None:
                return None
            obj = _pickle.loads(_objects.body(x))
            return self._oload(x, "recv", obj) if type(obj) is _pickle.Pending else obj
        except MPIException as e:
            self._raise(e)

    def irecv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking receive of a Python object (MPI_Irecv); ``wait()`` returns it, its device
        arrays received.  ``buf``: receive into that many bytes (an int) or into a writable
        buffer instead of an allocation sized by the message (a larger message fails with
        ERR_TRUNCATE)."""
        try:
            mem = None if buf is None or source == PROC_NULL else self._obuf(buf, "irecv")
            x = self._orecv(source, tag, "irecv", True, mem)
            if x is None:
                return Request._of(done_xfer(), self, None)
            return Request._of(_objects.whole(x, True, self._w, self._ctx), self, lambda _o: self._oload(x, "irecv"),
                               buf)
        except MPIException as e:
            self._raise(e)

    def sendrecv(self, sendobj, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None):
        """Send and receive Python objects (MPI_Sendrecv); ``recvbuf`` as ``buf`` of :meth:`recv`."""
        try:
            mem = None
            if recvbuf is not None:
                warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
                if source != PROC_NULL:
                    mem = self._obuf(recvbuf, "sendrecv")
            r = self._orecv(source, recvtag, "sendrecv", True, mem)  # the peer's parts may wait on ours
            s = self._osend(sendobj, dest, sendtag, STANDARD, "sendrecv")
            self._wait(s, None, "sendrecv")
            self._wait(r, status, "sendrecv")
            return None if r is None else self._oload(r, "sendrecv")
        except MPIException as e:
            self._raise(e)

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Blocking probe for an object message (MPI_Probe)."""
        return self.Probe(source, tag, status)

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Nonblocking probe for an object message (MPI_Iprobe)."""
        return self.Iprobe(source, tag, status)

    def mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> "Message":
        """Matched probe for an object message (MPI_Mprobe)."""
        return self.Mprobe(source, tag, status)

    def improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Nonblocking matched probe for an object message (MPI_Improbe)."""
        return self.Improbe(source, tag, status)

    # --- per-communicator buffer (MPI-4.1) -------------------------------------------------
    def Attach_buffer(self, buf) -> None:
        """Attach a buffer for buffered sends on this communicator (MPI_Comm_attach_buffer)."""
        self._check("Comm.Attach_buffer")
        _p2p._attach(self._bpool, buf, "Comm.Attach_buffer")

    def Detach_buffer(self):
        """Detach this communicator's buffer (MPI_Comm_detach_buffer)."""
        self._check("Comm.Detach_buffer")
        return _p2p._detach(self._bpool, "Comm.Detach_buffer")

    def Flush_buffer(self) -> None:
        """Wait for this communicator's buffered messages (MPI_Comm_flush_buffer)."""
        self._check("Comm.Flush_buffer")
        _p2p._flush(self._bpool)

    # --- collectives (schedules in gpumpi.collectives, one executor for all three forms) -------
    def _root(self, root, call: str) -> int:
        if type(root) is not int:
            try:
                root = root.__index__()
            except AttributeError:
                raise TypeError(f"{call}: root must be an integer ({type(root).__name__})") from None
        if not 0 <= root < self._size:
            raise error(ERR_ROOT, f"{call}: invalid root ({root}, communicator size {self._size})")
        return root

    def _coll_prep(self, prep, call: str, args, stream=None):
        """Validate and prepare a collective call (its tag is taken once the arguments are
        valid: a rank whose arguments fail has not entered the collective, as in MPI)."""
        self._check(call)
        if self.Is_inter():
            raise NotImplementedError(f"{call}: collectives on intercommunicators are not supported yet")
        c = prep(self, *args, call)
        if stream is not None:
            _coll_exec.set_stream(c, stream, call)
        return c

    def _coll_block(self, prep, call: str, *args, stream=None) -> None:
        try:
            _coll_exec.wait(self._coll_prep(prep, call, args, stream))
        except MPIException as e:
            self._raise(e)

    def _coll_req(self, prep, call: str, *args, stream=None) -> Request:
        try:
            c = self._coll_prep(prep, call, args, stream)
            return Request._of(_coll_exec.start(c), self, None, c)
        except MPIException as e:
            self._raise(e)

    def _coll_init(self, prep, call: str, *args, info=None, stream=None) -> Prequest:
        try:
            _info_arg(info, call)
            c = self._coll_prep(prep, call, args, stream)
            return Prequest._persistent(lambda c=c: _coll_exec.start(c), self, c)
        except MPIException as e:
            self._raise(e)

    def Barrier(self) -> None:
        """Barrier synchronization (MPI_Barrier)."""
        return self._coll_block(_calls.barrier, "Barrier")

    def Bcast(self, buf, root: int = 0, *, stream=None) -> None:
        """Broadcast data from one process to all others (MPI_Bcast)."""
        return self._coll_block(_calls.bcast, "Bcast", buf, root, stream=stream)

    def Gather(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Gather data to one process from all processes (MPI_Gather)."""
        return self._coll_block(_calls.gather, "Gather", False, sendbuf, recvbuf, root, stream=stream)

    def Gatherv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Gather varying amounts of data to one process (MPI_Gatherv)."""
        return self._coll_block(_calls.gather, "Gatherv", True, sendbuf, recvbuf, root, stream=stream)

    def Scatter(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Scatter data from one process to all processes (MPI_Scatter)."""
        return self._coll_block(_calls.scatter, "Scatter", False, sendbuf, recvbuf, root, stream=stream)

    def Scatterv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Scatter varying amounts of data from one process (MPI_Scatterv)."""
        return self._coll_block(_calls.scatter, "Scatterv", True, sendbuf, recvbuf, root, stream=stream)

    def Allgather(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather data from all processes to all processes (MPI_Allgather)."""
        return self._coll_block(_calls.allgather, "Allgather", False, sendbuf, recvbuf, stream=stream)

    def Allgatherv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather varying amounts of data from all processes to all (MPI_Allgatherv)."""
        return self._coll_block(_calls.allgather, "Allgatherv", True, sendbuf, recvbuf, stream=stream)

    def Alltoall(self, sendbuf, recvbuf, *, stream=None) -> None:
        """All-to-all scatter/gather (MPI_Alltoall)."""
        return self._coll_block(_calls.alltoall, "Alltoall", False, sendbuf, recvbuf, stream=stream)

    def Alltoallv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """All-to-all with varying counts and displacements (MPI_Alltoallv)."""
        return self._coll_block(_calls.alltoall, "Alltoallv", True, sendbuf, recvbuf, stream=stream)

    def Alltoallw(self, sendbuf, recvbuf, *, stream=None) -> None:
        """All-to-all with varying counts, byte displacements and datatypes (MPI_Alltoallw)."""
        return self._coll_block(_calls.alltoallw, "Alltoallw", sendbuf, recvbuf, stream=stream)

    def Reduce(self, sendbuf, recvbuf, op: Op = SUM, root: int = 0, *, stream=None) -> None:
        """Reduce to root (MPI_Reduce)."""
        return self._coll_block(_calls.reduce, "Reduce", sendbuf, recvbuf, op, root, stream=stream)

    def Allreduce(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Reduce to all processes (MPI_Allreduce)."""
        return self._coll_block(_calls.allreduce, "Allreduce", sendbuf, recvbuf, op, stream=stream)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Reduce, then scatter equal blocks of the result (MPI_Reduce_scatter_block)."""
        return self._coll_block(_calls.reduce_scatter_block, "Reduce_scatter_block", sendbuf, recvbuf, op, stream=stream)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op: Op = SUM, *, stream=None) -> None:
        """Reduce, then scatter blocks of the result by counts (MPI_Reduce_scatter)."""
        return self._coll_block(_calls.reduce_scatter, "Reduce_scatter", sendbuf, recvbuf, recvcounts, op, stream=stream)

    def Ibarrier(self) -> Request:
        """Nonblocking barrier synchronization (MPI_Ibarrier)."""
        return self._coll_req(_calls.barrier, "Ibarrier")

    def Ibcast(self, buf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking broadcast data from one process to all others (MPI_Ibcast)."""
        return self._coll_req(_calls.bcast, "Ibcast", buf, root, stream=stream)

    def Igather(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking gather data to one process from all processes (MPI_Igather)."""
        return self._coll_req(_calls.gather, "Igather", False, sendbuf, recvbuf, root, stream=stream)

    def Igatherv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking gather varying amounts of data to one process (MPI_Igatherv)."""
        return self._coll_req(_calls.gather, "Igatherv", True, sendbuf, recvbuf, root, stream=stream)

    def Iscatter(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking scatter data from one process to all processes (MPI_Iscatter)."""
        return self._coll_req(_calls.scatter, "Iscatter", False, sendbuf, recvbuf, root, stream=stream)

    def Iscatterv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking scatter varying amounts of data from one process (MPI_Iscatterv)."""
        return self._coll_req(_calls.scatter, "Iscatterv", True, sendbuf, recvbuf, root, stream=stream)

    def Iallgather(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking gather data from all processes to all processes (MPI_Iallgather)."""
        return self._coll_req(_calls.allgather, "Iallgather", False, sendbuf, recvbuf, stream=stream)

    def Iallgatherv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking gather varying amounts of data from all processes to all (MPI_Iallgatherv)."""
        return self._coll_req(_calls.allgather, "Iallgatherv", True, sendbuf, recvbuf, stream=stream)

    def Ialltoall(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking all-to-all scatter/gather (MPI_Ialltoall)."""
        return self._coll_req(_calls.alltoall, "Ialltoall", False, sendbuf, recvbuf, stream=stream)

    def Ialltoallv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking all-to-all with varying counts and displacements (MPI_Ialltoallv)."""
        return self._coll_req(_calls.alltoall, "Ialltoallv", True, sendbuf, recvbuf, stream=stream)

    def Ialltoallw(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking all-to-all with varying counts, byte displacements and datatypes (MPI_Ialltoallw)."""
        return self._coll_req(_calls.alltoallw, "Ialltoallw", sendbuf, recvbuf, stream=stream)

    def Ireduce(self, sendbuf, recvbuf, op: Op = SUM, root: int = 0, *, stream=None) -> Request:
        """Nonblocking reduce to root (MPI_Ireduce)."""
        return self._coll_req(_calls.reduce, "Ireduce", sendbuf, recvbuf, op, root, stream=stream)

    def Iallreduce(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking reduce to all processes (MPI_Iallreduce)."""
        return self._coll_req(_calls.allreduce, "Iallreduce", sendbuf, recvbuf, op, stream=stream)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking reduce, then scatter equal blocks of the result (MPI_Ireduce_scatter_block)."""
        return self._coll_req(_calls.reduce_scatter_block, "Ireduce_scatter_block", sendbuf, recvbuf, op, stream=stream)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking reduce, then scatter blocks of the result by counts (MPI_Ireduce_scatter)."""
        return self._coll_req(_calls.reduce_scatter, "Ireduce_scatter", sendbuf, recvbuf, recvcounts, op, stream=stream)

    def Barrier_init(self, info=None) -> Prequest:
        """Persistent barrier synchronization (MPI_Barrier_init)."""
        return self._coll_init(_calls.barrier, "Barrier_init", info=info)

    def Bcast_init(self, buf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent broadcast data from one process to all others (MPI_Bcast_init)."""
        return self._coll_init(_calls.bcast, "Bcast_init", buf, root, info=info, stream=stream)

    def Gather_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent gather data to one process from all processes (MPI_Gather_init)."""
        return self._coll_init(_calls.gather, "Gather_init", False, sendbuf, recvbuf, root, info=info, stream=stream)

    def Gatherv_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent gather varying amounts of data to one process (MPI_Gatherv_init)."""
        return self._coll_init(_calls.gather, "Gatherv_init", True, sendbuf, recvbuf, root, info=info, stream=stream)

    def Scatter_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent scatter data from one process to all processes (MPI_Scatter_init)."""
        return self._coll_init(_calls.scatter, "Scatter_init", False, sendbuf, recvbuf, root, info=info, stream=stream)

    def Scatterv_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent scatter varying amounts of data from one process (MPI_Scatterv_init)."""
        return self._coll_init(_calls.scatter, "Scatterv_init", True, sendbuf, recvbuf, root, info=info, stream=stream)

    def Allgather_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent gather data from all processes to all processes (MPI_Allgather_init)."""
        return self._coll_init(_calls.allgather, "Allgather_init", False, sendbuf, recvbuf, info=info, stream=stream)

    def Allgatherv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent gather varying amounts of data from all processes to all (MPI_Allgatherv_init)."""
        return self._coll_init(_calls.allgather, "Allgatherv_init", True, sendbuf, recvbuf, info=info, stream=stream)

    def Alltoall_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent all-to-all scatter/gather (MPI_Alltoall_init)."""
        return self._coll_init(_calls.alltoall, "Alltoall_init", False, sendbuf, recvbuf, info=info, stream=stream)

    def Alltoallv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent all-to-all with varying counts and displacements (MPI_Alltoallv_init)."""
        return self._coll_init(_calls.alltoall, "Alltoallv_init", True, sendbuf, recvbuf, info=info, stream=stream)

    def Alltoallw_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent all-to-all with varying counts, byte displacements and datatypes (MPI_Alltoallw_init)."""
        return self._coll_init(_calls.alltoallw, "Alltoallw_init", sendbuf, recvbuf, info=info, stream=stream)

    def Reduce_init(self, sendbuf, recvbuf, op: Op = SUM, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent reduce to root (MPI_Reduce_init)."""
        return self._coll_init(_calls.reduce, "Reduce_init", sendbuf, recvbuf, op, root, info=info, stream=stream)

    def Allreduce_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent reduce to all processes (MPI_Allreduce_init)."""
        return self._coll_init(_calls.allreduce, "Allreduce_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def Reduce_scatter_block_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent reduce, then scatter equal blocks of the result (MPI_Reduce_scatter_block_init)."""
        return self._coll_init(_calls.reduce_scatter_block, "Reduce_scatter_block_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def Reduce_scatter_init(self, sendbuf, recvbuf, recvcounts=None, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent reduce, then scatter blocks of the result by counts (MPI_Reduce_scatter_init)."""
        return self._coll_init(_calls.reduce_scatter, "Reduce_scatter_init", sendbuf, recvbuf, recvcounts, op, info=info, stream=stream)

    # --- lowercase (object) collectives: gpumpi.collectives._lower --------------------------
    def _ocoll(self, fn, call: str, *args):
        try:
            self._check(call)
            if self.Is_inter():
                raise NotImplementedError(f"{call}: collectives on intercommunicators are not supported yet")
            return fn(self, *args, call)
        except MPIException as e:
            self._raise(e)

    def barrier(self) -> None:
        """Barrier synchronization (MPI_Barrier; same as Barrier)."""
        self.Barrier()

    def bcast(self, obj=None, root: int = 0):
        """Broadcast a Python object from root (MPI_Bcast of its pickle)."""
        def bcast(c, o, r, call):
            with _commctx.lock(c, "bcast"):  # as mpi4py: threads sharing the communicator take turns
                return _lower.bcast(c, o, r, call)

        return self._ocoll(bcast, "bcast", obj, root)

    def gather(self, sendobj, root: int = 0):
        """Gather Python objects to root, a list in rank order there (MPI_Gather of pickles)."""
        return self._ocoll(_lower.gather, "gather", sendobj, root)

    def scatter(self, sendobj, root: int = 0):
        """Scatter a sequence of Python objects from root (MPI_Scatter of pickles)."""
        return self._ocoll(_lower.scatter, "scatter", sendobj, root)

    def allgather(self, sendobj):
        """Gather Python objects from all, a list in rank order on every rank (MPI_Allgather of pickles)."""
        return self._ocoll(_lower.allgather, "allgather", sendobj)

    def alltoall(self, sendobj):
        """Send item ``j`` of a sequence to rank ``j``, receive one from each (MPI_Alltoall of pickles)."""
        return self._ocoll(_lower.alltoall, "alltoall", sendobj)

    def reduce(self, sendobj, op=SUM, root: int = 0):
        """Reduce Python objects to root with ``op`` (an Op or a callable), in rank order (MPI_Reduce)."""
        return self._ocoll(_lower.reduce, "reduce", sendobj, op, root)

    def allreduce(self, sendobj, op=SUM):
        """Reduce Python objects to all with ``op`` (an Op or a callable), in rank order (MPI_Allreduce)."""
        return self._ocoll(_lower.allreduce, "allreduce", sendobj, op)

    # --- collective plumbing (point-to-point on the collective context) --------------------
    def _ctag(self) -> int:
        self._cseq = (self._cseq + 1) & 0x1FFFFFFF
        return self._cseq

    def _csend(self, mem, dest: int, tag: int, call: str):
        return _p2p.send_bytes(mem, self._w[dest], self._rank, tag, self._ctx + 1, call)

    def _crecv(self, mem, source: int, tag: int, call: str):
        return _p2p.recv_bytes(mem, source, self._w[source], tag, self._ctx + 1, call)

    def _cwait(self, xs) -> None:
        eng = _rt.ENGINE
        for x in xs:
            if not x.done:
                eng.wait(x)
            if x.err:
                raise error(x.err, x.errmsg)


class Intracomm(Comm):
    """Intracommunicator (MPI_Comm of one group)."""

    __slots__ = ()

    def Dup(self, info=None) -> "Intracomm":
        """Duplicate the communicator (MPI_Comm_dup)."""
        try:
            self._check("Comm.Dup")
            _info_arg(info, "Comm.Dup")
            ctx = self._agree_ctx("Comm.Dup")
            c = type(self).__new__(type(self))
            c._setup(ctx, self._rw, self._rw[self._rank])
            c._errh = self._errh
            _keyval.on_dup(self, c, "Comm.Dup")  # attribute copy callbacks (frees c if one fails)
            return c
        except MPIException as e:
            self._raise(e)

    Clone = Dup

    def Dup_with_info(self, info) -> "Intracomm":
        """Duplicate with new info hints (MPI_Comm_dup_with_info)."""
        _info_arg(info, "Comm.Dup_with_info", none_ok=False)
        return self.Dup(info)

    def _allgather_ints(self, values: tuple, call: str) -> list:
        """Small all-gather of integer tuples (gather to 0, then broadcast), collective context."""
        n = self._size
        k = len(values)
        fmt = struct.Struct(f"<{k}q")
        tag = self._ctag()
        if n == 1:
            return [tuple(values)]
        if self._rank == 0:
            out = [tuple(values)] + [None] * (n - 1)
            bufs = [bytearray(fmt.size) for _ in range(n - 1)]
            xs = [self._crecv(memoryview(bufs[r - 1]), r, tag, call) for r in range(1, n)]
            self._cwait(xs)
            for r in range(1, n):
                out[r] = fmt.unpack(bufs[r - 1])
            flat = memoryview(b"".join(fmt.pack(*v) for v in out))
            self._cwait([self._csend(flat, r, tag, call) for r in range(1, n)])
            return out
        self._cwait([self._csend(memoryview(fmt.pack(*values)), 0, tag, call)])
        flat = bytearray(fmt.size * n)
        self._cwait([self._crecv(memoryview(flat), 0, tag, call)])
        return [fmt.unpack_from(flat, fmt.size * r) for r in range(n)]

    def _agree_ctx(self, call: str) -> int:
        eng = _rt.ENGINE
        vals = self._allgather_ints((eng_next_ctx(eng),), call)
        ctx = max(v[0] for v in vals)
        eng.next_ctx = ctx + 4
        return ctx

    def Split(self, color: int = 0, key: int = 0) -> "Intracomm":
        """Split into disjoint communicators by color, ordered by key (MPI_Comm_split)."""
        try:
            call = "Comm.Split"
            self._check(call)
            color, key = _int_arg(color, call, "color"), _int_arg(key, call, "key")
            if color < 0 and color != UNDEFINED:
                raise error(ERR_ARG, f"{call}: color must be non-negative or UNDEFINED ({color})")
            eng = _rt.ENGINE
            vals = self._allgather_ints((color, key, eng_next_ctx(eng)), call)
            ctx = max(v[2] for v in vals)
            eng.next_ctx = ctx + 4
            if color == UNDEFINED:
                return Intracomm()
            members = sorted((v[1], r) for r, v in enumerate(vals) if v[0] == color)
            world = [self._rw[r] for _, r in members]
            c = Intracomm.__new__(Intracomm)
            c._setup(ctx, world, self._rw[self._rank])
            c._errh = self._errh
            return c
        except MPIException as e:
            self._raise(e)

    def Scan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Inclusive prefix reduction (MPI_Scan)."""
        return self._coll_block(_calls.scan, "Scan", sendbuf, recvbuf, op, stream=stream)

    def Exscan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Exclusive prefix reduction (MPI_Exscan)."""
        return self._coll_block(_calls.exscan, "Exscan", sendbuf, recvbuf, op, stream=stream)

    def Iscan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking inclusive prefix reduction (MPI_Iscan)."""
        return self._coll_req(_calls.scan, "Iscan", sendbuf, recvbuf, op, stream=stream)

    def Iexscan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking exclusive prefix reduction (MPI_Iexscan)."""
        return self._coll_req(_calls.exscan, "Iexscan", sendbuf, recvbuf, op, stream=stream)

    def Scan_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent inclusive prefix reduction (MPI_Scan_init)."""
        return self._coll_init(_calls.scan, "Scan_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def Exscan_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent exclusive prefix reduction (MPI_Exscan_init)."""
        return self._coll_init(_calls.exscan, "Exscan_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def scan(self, sendobj, op=SUM):
        """Inclusive prefix reduction of Python objects (MPI_Scan)."""
        return self._ocoll(_lower.scan, "scan", sendobj, op)

    def exscan(self, sendobj, op=SUM):
        """Exclusive prefix reduction of Python objects; None at rank 0 (MPI_Exscan)."""
        return self._ocoll(lambda c, o, p, call: _lower.scan(c, o, p, call, True), "exscan", sendobj, op)

    def Create_intercomm(self, local_leader: int, peer_comm, remote_leader: int, tag: int = 0):
        """Create an intercommunicator (MPI_Intercomm_create)."""
        raise NotImplementedError("Intracomm.Create_intercomm: intercommunicators are not supported yet")



def _int_arg(v, call: str, what: str) -> int:
    """An integer argument: ints and index-able objects; floats truncate, as mpi4py's C ints do."""
    if type(v) is int:
        return v
    if isinstance(v, float):
        return int(v)
    try:
        return v.__index__()
    except AttributeError:
        raise TypeError(f"{call}: {what} must be an integer ({type(v).__name__})") from None


def _info_arg(info, call: str, none_ok: bool = True) -> None:
    if (info is None and none_ok) or isinstance(info, Info):
        return
    raise TypeError(f"{call}: info must be an Info{' or None' if none_ok else ''} ({type(info).__name__})")


def eng_next_ctx(eng) -> int:
    v = getattr(eng, "next_ctx", None)
    if v is None:
        v = eng.next_ctx = 8
    return v





class Topocomm(Intracomm):
    """Topology intracommunicator base class (topologies arrive with their own issue)."""

    __slots__ = ()


class Cartcomm(Topocomm):
    """Cartesian topology communicator (MPI_Cart_create; constructors arrive later)."""

    __slots__ = ()


class Graphcomm(Topocomm):
    """Graph topology communicator (MPI_Graph_create; constructors arrive later)."""

    __slots__ = ()


class Distgraphcomm(Topocomm):
    """Distributed graph topology communicator (constructors arrive later)."""

    __slots__ = ()


class Intercomm(Comm):
    """Intercommunicator (constructors arrive with the communicator issue)."""

    __slots__ = ()

    def Is_inter(self) -> bool:
        """Return whether this is an intercommunicator: always (MPI_Comm_test_inter)."""
        self._check("Comm.Is_inter")
        return True

    @classmethod
    def Create_from_groups(cls, local_group, local_leader: int, remote_group, remote_leader: int,
                           stringtag: str = "org.mpi4py", info=None, errhandler=None) -> "Intercomm":
        """Create an intercommunicator from two groups (MPI_Intercomm_create_from_groups)."""
        raise NotImplementedError("Intercomm.Create_from_groups: intercommunicators are not supported yet")


Comm._hbase = Comm
#: Null communicator (MPI_COMM_NULL).
COMM_NULL = Comm._htable.constant(Comm(), "COMM_NULL")
