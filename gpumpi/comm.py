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
import zlib

import numpy as _np

from . import _commattr
from . import _commctx
from . import _ctxid
from . import keyval as _keyval
from .collectives import _calls
from .collectives import _execute as _coll_exec
from .collectives import _lean
from .collectives import _lower
from ._buffers import _is_integral
from . import _objects
from . import _p2p
from . import _pickle
from . import _runtime as _rt
from . import topology as _topology
from ._buffers import host_fast, message_simple
from ._partitioned import PartRequest, partitions_of
from ._progress import SENT
from .constants import (
    ANY_SOURCE,
    ANY_TAG,
    APPNUM,
    COMM_TYPE_HW_GUIDED,
    COMM_TYPE_HW_UNGUIDED,
    COMM_TYPE_RESOURCE_GUIDED,
    COMM_TYPE_SHARED,
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
    ERR_GROUP,
    ERR_ERRHANDLER,
    ERR_KEYVAL,
    ERR_RANK,
    ERR_ROOT,
    ERR_TAG,
    ERR_TOPOLOGY,
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
from .op import MAX as _MAX, SUM, Op
from .request import Prequest, Request, all_of, check_status, done_xfer, joint, part_done
from .status import Status
from numpy import ndarray as _ndarray

#: the operation of every Isend the fast path completed at once (shared: nothing writes a
#: completed operation; each request still has a handle of its own)
_SENT_NOW = done_xfer()

STANDARD, SYNCHRONOUS, READY, BUFFERED = _p2p.STANDARD, _p2p.SYNCHRONOUS, _p2p.READY, _p2p.BUFFERED
_msg = _p2p._msg


class Comm(Handle):
    """Communication context (MPI_Comm)."""

    __slots__ = ("_ctx", "_w", "_rank", "_size", "_group", "_errh", "_name", "_cseq", "_bpool",
                 "_rw", "_info", "__weakref__")
    _hnull = 0x04000000
    _htable = Table("Comm", 0)

    def __new__(cls, comm: "Comm | None" = None):
        # mpi4py's Comm.__new__ (its __cinit__) copies the communicator it is given, so a
        # subclass whose __new__ passes another one (mpi4py's test_subclass MyCartcomm passes a
        # new Cartcomm) gets that one, whatever __init__ later receives
        self = super().__new__(cls)
        self._init_from(comm)
        return self

    def _init_from(self, comm) -> None:
        if comm is None:
            self._set_null()
        elif not isinstance(comm, Comm):
            raise TypeError(f"{type(self).__name__}: expecting a Comm (got {type(comm).__name__})")
        elif isinstance(self, Intracomm) and isinstance(comm, Intercomm) and comm._ctx >= 0:
            raise TypeError(f"{type(self).__name__}: expecting an intracommunicator (got Intercomm)")
        else:
            self._copy_from(comm)

    def _hinit(self, src) -> None:
        self._init_from(src)  # fromhandle's new reference: the copy is __new__'s here, not __init__'s

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
        self._info = None

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
        self._info = None
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
        """Whether this is an intercommunicator (MPI_Comm_test_inter): also through a plain
        ``Comm`` handle (an intercommunicator's peers are its remote group, never its own)."""
        self._check("Comm.Is_inter")
        return self._w != self._rw

    def Is_intra(self) -> bool:
        """Whether this is an intracommunicator."""
        return not self.Is_inter()

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    @property
    def is_topo(self) -> bool:
        """Whether the communicator has a topology."""
        return self.Get_topology() != UNDEFINED

    def Get_topology(self) -> int:
        """Topology type (MPI_Topo_test): CART, GRAPH, DIST_GRAPH, or UNDEFINED."""
        self._check("Comm.Get_topology")
        t = _TOPOS.get(self._ctx)
        return UNDEFINED if t is None else t.kind

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
        _TOPOS.pop(self._ctx, None)
        eng.freed_ctx.add(self._ctx)  # copies of this handle are stale now (context ids are never reused)
        self._set_null()

    def Clone(self) -> "Comm":
        """Clone the communicator (MPI_Comm_dup): a duplicate of this communicator's own type."""
        return self.Dup()

    def Dup(self, info=None) -> "Comm":
        """Duplicate the communicator (MPI_Comm_dup); through a plain ``Comm`` handle of an
        intracommunicator, a ``Comm`` (as mpi4py); of an intercommunicator: use its
        ``Intercomm`` handle."""
        try:
            self._check("Comm.Dup")
        except MPIException as e:
            self._raise(e)
        if self.Is_inter():
            raise NotImplementedError("Comm.Dup: duplicate an intercommunicator through its Intercomm handle")
        return Intracomm.Dup(self, info)

    def Split(self, color: int = 0, key: int = 0) -> "Comm":
        """Split into disjoint communicators (MPI_Comm_split); through a plain ``Comm`` handle
        of an intracommunicator as through its ``Intracomm`` handle."""
        try:
            self._check("Comm.Split")
        except MPIException as e:
            self._raise(e)
        if self.Is_inter():
            raise NotImplementedError("Comm.Split: split an intercommunicator through its Intercomm handle")
        return Intracomm.Split(self, color, key)

    # --- agreement among the members (gpumpi._ctxid) ----------------------------------------
    def _allgather_ints(self, values: tuple, call: str, members=None, tag=None) -> list:
        """Small all-gather of integer tuples (gather to the first member, then broadcast) on
        the collective context.  ``members``: the communicator ranks taking part, in order
        (default: all); ``tag``: the tag (default: the next collective tag, which every rank
        of the communicator takes; a subset must pass its own)."""
        members = range(self._size) if members is None else members
        n = len(members)
        k = len(values)
        fmt = struct.Struct(f"<{k}q")
        if tag is None:
            tag = self._ctag()
        if n == 1:
            return [tuple(values)]
        first = members[0]
        if self._rank == first:
            out = [tuple(values)] + [None] * (n - 1)
            bufs = [bytearray(fmt.size) for _ in range(n - 1)]
            xs = [self._crecv(memoryview(bufs[i - 1]), members[i], tag, call) for i in range(1, n)]
            self._cwait(xs)
            for i in range(1, n):
                out[i] = fmt.unpack(bufs[i - 1])
            flat = memoryview(b"".join(fmt.pack(*v) for v in out))
            self._cwait([self._csend(flat, members[i], tag, call) for i in range(1, n)])
            return out
        self._cwait([self._csend(memoryview(fmt.pack(*values)), first, tag, call)])
        flat = bytearray(fmt.size * n)
        self._cwait([self._crecv(memoryview(flat), first, tag, call)])
        return [fmt.unpack_from(flat, fmt.size * i) for i in range(n)]

    def _agree(self, call: str, values: tuple = (), nblocks: int = 1, members=None, tag=None, key=None):
        """A fresh context id agreed by ``members`` (default: every rank), with every member's
        ``values``: ``(ctx, rows)``, rows in member order, one exchange per attempt."""
        if key is None:
            key = (self._ctx, 0, self._ctag())
        return _ctxid.allocate_with(lambda v: self._allgather_ints(v, call, members, tag), key, values, nblocks)

    def _agree_ctx(self, call: str) -> int:
        """A fresh context id for a new communicator, agreed by every rank (collective)."""
        return self._agree(call)[0]

    def _new(self, ctx: int, world, cls=None, info=None) -> "Intracomm":
        """The new communicator of context ``ctx`` over ``world`` ranks, with this one's error
        handler (MPI: a new communicator inherits its parent's)."""
        c = (cls or Intracomm).__new__(cls or Intracomm)
        c._setup(ctx, world, _rt.ENGINE.rank)
        c._errh = self._errh
        c._info = _info_items(info)
        return c

    def _dup_into(self, c, ctx: int, info) -> "Intracomm":
        c._setup(ctx, self._rw, self._rw[self._rank])
        c._errh = self._errh
        c._info = dict(self._info or {}) if info is None else _info_items(info)
        t = _TOPOS.get(self._ctx)
        if t is not None:  # a duplicate keeps the topology, whatever class the handle has
            _TOPOS[ctx] = t
        _keyval.on_dup(self, c, "Comm.Dup")  # attribute copy callbacks (frees c if one fails)
        return c


    def _split(self, color: int, key: int, call: str, info=None) -> "Intracomm":
        ctx, rows = self._agree(call, (color, key))
        if color == UNDEFINED:
            return Intracomm()
        members = sorted((v[1], r) for r, v in enumerate(rows) if v[0] == color)
        return self._new(ctx, [self._rw[r] for _, r in members], info=info)


    # --- point-to-point: posting ----------------------------------------------------------
    @classmethod
    def Get_parent(cls) -> "Intercomm":
        """The parent intercommunicator (MPI_Comm_get_parent): a null Intercomm, since gpumpi
        never spawns processes (MPI: COMM_NULL for a process that was not spawned)."""
        return Intercomm()

    def Disconnect(self) -> None:
        """Disconnect (MPI_Comm_disconnect): collective; once every member has called it
        (a barrier), the communicator is freed, so every message sent on it before was
        posted by its sender."""
        call = "Comm.Disconnect"
        try:
            self._check(call)
            if self._ctx in (0, 4):
                raise error(ERR_COMM, f"{call}: cannot disconnect a predefined communicator ({self._name})")
        except MPIException as e:
            self._raise(e)
        self.Barrier()
        self.Free()

    # --- info hints -----------------------------------------------------------------------
    def Set_info(self, info) -> None:
        """Set the communicator's info hints (MPI_Comm_set_info); gpumpi keeps them and
        reports them back, and acts on none."""
        self._check("Comm.Set_info")
        _info_arg(info, "Comm.Set_info", none_ok=False)
        self._info = _info_items(info)

    def Get_info(self) -> Info:
        """A new Info with the communicator's hints (MPI_Comm_get_info); ``Free`` it when done."""
        self._check("Comm.Get_info")
        return Info.Create(self._info)

    info = property(Get_info, Set_info)

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
            # the fast path: a whole contiguous NumPy array (bare or [array, predefined type]) to a
            # valid rank with a valid tag, sent by one compiled call (Engine.send_fast)
            h = host_fast(buf, False)
            if h is not None and type(dest) is int and type(tag) is int and 0 <= dest < len(self._w) and \
                    0 <= tag <= TAG_UB_VALUE and self._ctx >= 0:
                eng = _rt.ENGINE
                if self._ctx not in eng.freed_ctx and \
                        (eng.send_fast(self._w[dest], self._rank, self._ctx, tag, h[0], h[1], h[2]) or
                         eng.mtab is not None and eng.push_far(self._w[dest], self._rank, self._ctx, tag, h[0], h[1],
                                                               h[2])):
                    return
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
            # the fast path: into a whole contiguous NumPy array (bare or [array, predefined type])
            # from a valid rank or ANY_SOURCE with a valid tag (Engine.recv_fast)
            h = host_fast(buf, True)
            if h is not None and type(source) is int and type(tag) is int and self._ctx >= 0 and \
                    -2 <= source < len(self._w) and source != -1 and -1 <= tag <= TAG_UB_VALUE:
                eng = _rt.ENGINE
                o = None if self._ctx in eng.freed_ctx else \
                    eng.recv_fast(source, source if source < 0 else self._w[source], tag, self._ctx, h[0], h[1], h[2])
                if o is not None:
                    if status is not None:
                        src, tg, n, _ = o.tolist()
                        status._fill(src, tg, n)
                    return
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
        h = host_fast(buf, False)  # the fast path of Send: written now, the request is complete
        if h is not None and type(dest) is int and type(tag) is int and 0 <= dest < len(self._w) and \
                0 <= tag <= TAG_UB_VALUE and self._ctx >= 0:
            eng = _rt.ENGINE
            if self._ctx not in eng.freed_ctx:
                if eng.send_fast(self._w[dest], self._rank, self._ctx, tag, h[0], h[1], h[2]):
                    return Request._of(_SENT_NOW, self, None, buf)
                if eng.mtab is not None:  # to another node, pushed ahead by the compiled path
                    x = eng.isend_far(self._w[dest], self._rank, self._ctx, tag, h[0], h[1], h[2])
                    if x is not None:
                        return Request._of(x, self, None, buf)
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
        # the fast path: a whole contiguous NumPy array, every argument valid (Engine.recv_lazy:
        # completed now by a message already here, or posted lazily)
        h = host_fast(buf, True)
        if h is not None and type(source) is int and type(tag) is int and self._ctx >= 0 and \
                -2 <= source < len(self._w) and source != -1 and -1 <= tag <= TAG_UB_VALUE:
            eng = _rt.ENGINE
            if self._ctx not in eng.freed_ctx:
                x = eng.recv_lazy(source, source if source < 0 else self._w[source], tag, self._ctx, h[0], h[1], h[2],
                                  buf)
                if x is not None:
                    return Request._of(x, self, None, buf)
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
            # the fast path: whole contiguous NumPy arrays, every argument valid; the send is
            # written first (eager: it completes at once), then the receive (Engine.recv_fast,
            # else the general path)
            hs = host_fast(sendbuf, False)
            n = len(self._w)
            if hs is not None and (status is None or type(status) is Status) and type(dest) is int and \
                    type(sendtag) is int and type(source) is int and type(recvtag) is int and self._ctx >= 0 and \
                    0 <= dest < n and 0 <= sendtag <= TAG_UB_VALUE and -2 <= source < n and source != -1 and \
                    -1 <= recvtag <= TAG_UB_VALUE:
                hr = host_fast(recvbuf, True)
                eng = _rt.ENGINE
                if hr is not None and self._ctx not in eng.freed_ctx and \
                        eng.send_fast(self._w[dest], self._rank, self._ctx, sendtag, hs[0], hs[1], hs[2]):
                    o = eng.recv_fast(source, source if source < 0 else self._w[source], recvtag, self._ctx,
                                      hr[0], hr[1], hr[2])
                    if o is not None:
                        if status is not None:
                            src, tg, nb, _ = o.tolist()
                            status._fill(src, tg, nb)
                        return
                    self._wait(self._irecv(recvbuf, source, recvtag, "Sendrecv", stream), status, "Sendrecv")
                    return
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
        eng.unlazy()  # receives posted lazily come first
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
            if eng.lazy:
                eng._unlazy()  # receives posted lazily come first
            if not eng.quiet():
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

    def Iflush_buffer(self) -> Request:
        """Nonblocking flush of this communicator's buffer (MPI_Comm_iflush_buffer): a request
        that completes once every buffered message has left it."""
        self._check("Comm.Iflush_buffer")
        return Request._of(_p2p._iflush(self._bpool), self)

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
        if isinstance(self, Intercomm):  # the inter form of the same parser (mpi4py's inter branches)
            prep = _calls.INTER[prep.__name__]
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
        if _lean.ENABLED and not isinstance(self, Intercomm):  # small calls in a tight loop (collectives._lean)
            try:
                if _lean.barrier(self):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.barrier, "Barrier")

    def Bcast(self, buf, root: int = 0, *, stream=None) -> None:
        """Broadcast data from one process to all others (MPI_Bcast)."""
        if stream is None and _lean.ENABLED and not isinstance(self, Intercomm):
            try:
                if _lean.bcast(self, buf, root):
                    return
            except MPIException as e:
                self._raise(e)
                return
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
        if stream is None and _lean.ENABLED and not isinstance(self, Intercomm):
            try:
                if _lean.reduce(self, sendbuf, recvbuf, op, root):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.reduce, "Reduce", sendbuf, recvbuf, op, root, stream=stream)

    def Allreduce(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Reduce to all processes (MPI_Allreduce)."""
        if stream is None and _lean.ENABLED and not isinstance(self, Intercomm):
            try:
                if _lean.allreduce(self, sendbuf, recvbuf, op):
                    return
            except MPIException as e:
                self._raise(e)
                return
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
            if isinstance(self, Intercomm):  # MPICH's inter algorithms on objects (_lower.INTER)
                fn = _lower.INTER[call]
                if call == "bcast":
                    with _commctx.lock(self, "bcast"):
                        return fn(self, *args, call)
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

    def _ctag_back(self) -> None:
        """Give back the tag :meth:`_ctag` just took (for a call that then did not run)."""
        self._cseq = (self._cseq - 1) & 0x1FFFFFFF

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

    # --- constructors -------------------------------------------------------------------------
    def Dup(self, info=None) -> "Intracomm":
        """Duplicate the communicator (MPI_Comm_dup); ``info`` given: MPI_Comm_dup_with_info.
        The duplicate keeps the group, error handler and info hints (and a topology's)."""
        try:
            self._check("Comm.Dup")
            _info_arg(info, "Comm.Dup")
            ctx = self._agree_ctx("Comm.Dup")
            return self._dup_into(type(self).__new__(type(self)), ctx, info)
        except MPIException as e:
            self._raise(e)

    Clone = Dup

    def Dup_with_info(self, info) -> "Intracomm":
        """Duplicate with new info hints (MPI_Comm_dup_with_info)."""
        _info_arg(info, "Comm.Dup_with_info", none_ok=False)
        return self.Dup(info)

    def Idup(self, info=None) -> tuple:
        """Nonblocking duplicate (MPI_Comm_idup; with ``info``: MPI_Comm_idup_with_info).

        Returns ``(comm, request)``: ``comm`` is usable once ``request`` completes.  The
        context id is agreed by nonblocking maxima driven by the engine, so the call never
        waits for the other ranks."""
        call = "Comm.Idup"
        try:
            self._check(call)
            _info_arg(info, call)
            c = type(self).__new__(type(self))
            c._set_null()
            t = self._ctag()  # in call order on every rank
            send, recv = _np.zeros(1, _np.int64), _np.zeros(1, _np.int64)
            coll = _calls.allreduce(self, send, recv, _MAX, call)
            j = joint(1)

            def start_max(values, attempt):
                send[0] = values[0]
                coll.tag = _idup_tag(t, attempt)
                return _coll_exec.start(coll), lambda: (int(recv[0]),)

            def done(ctx, err, errmsg):
                if not err:
                    try:
                        self._dup_into(c, ctx, info)
                    except MPIException as e:  # a copy callback failed: the request fails
                        j.err, j.errmsg = e.Get_error_class(), str(e)
                else:
                    j.err, j.errmsg = err, errmsg
                part_done(j, j)

            # part_done(j, j) reads j's own fields: give it a status of a collective
            j.st_source, j.st_tag, j.st_nbytes = -1, -1, 0
            _ctxid.Allocation(start_max, (self._ctx, 0, t), done).start()
            return c, Request._of(j, self, None, (coll, send, recv))
        except MPIException as e:
            self._raise(e)

    def Idup_with_info(self, info) -> tuple:
        """Nonblocking duplicate with new info hints (MPI_Comm_idup_with_info)."""
        _info_arg(info, "Comm.Idup_with_info", none_ok=False)
        return self.Idup(info)

    def Split(self, color: int = 0, key: int = 0) -> "Intracomm":
        """Split into disjoint communicators by color, ordered by key then rank
        (MPI_Comm_split); ``color=UNDEFINED`` gives COMM_NULL."""
        try:
            call = "Comm.Split"
            self._check(call)
            color, key = _int_arg(color, call, "color"), _int_arg(key, call, "key")
            if color < 0 and color != UNDEFINED:
                raise error(ERR_ARG, f"{call}: color must be non-negative or UNDEFINED ({color})")
            return self._split(color, key, call)
        except MPIException as e:
            self._raise(e)

    def Split_type(self, split_type: int, key: int = 0, info=None) -> "Intracomm":
        """Split by a hardware resource (MPI_Comm_split_type).

        ``COMM_TYPE_SHARED``: the ranks that share memory (one node).
        ``COMM_TYPE_HW_GUIDED`` and ``COMM_TYPE_RESOURCE_GUIDED``: the resource named by the
        info key ``"mpi_hw_resource_type"``; gpumpi knows ``"mpi_shared_memory"`` (the node),
        and gives COMM_NULL for any other (as MPI requires for unknown resources).
        ``COMM_TYPE_HW_UNGUIDED``: the next smaller level of the hierarchy, naming it in
        ``info``; gpumpi knows only the node, so this is COMM_NULL unless the communicator
        spans several nodes.  ``UNDEFINED``: COMM_NULL."""
        call = "Comm.Split_type"
        try:
            self._check(call)
            split_type, key = _int_arg(split_type, call, "split_type"), _int_arg(key, call, "key")
            _info_arg(info, call)
            if split_type not in _SPLIT_TYPES:
                raise error(ERR_ARG, f"{call}: invalid split_type ({split_type})")
            node = _rt.node_of(self._rw[self._rank])
            color = UNDEFINED
            if split_type == COMM_TYPE_SHARED:
                color = node
            elif split_type in (COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED):
                if info is not None and info and info.Get("mpi_hw_resource_type") == "mpi_shared_memory":
                    color = node
            elif split_type == COMM_TYPE_HW_UNGUIDED:
                nodes = {_rt.node_of(w) for w in self._rw}
                if len(nodes) > 1:
                    color = node
            ctx, rows = self._agree(call, (color, key))
            if color == UNDEFINED:
                return Intracomm()
            if split_type == COMM_TYPE_HW_UNGUIDED and info is not None and info:
                info.Set("mpi_hw_resource_type", "mpi_shared_memory")
            members = sorted((v[1], r) for r, v in enumerate(rows) if v[0] == color)
            return self._new(ctx, [self._rw[r] for _, r in members])
        except MPIException as e:
            self._raise(e)

    def _subgroup(self, group, call: str) -> list:
        """Communicator ranks of ``group``'s members, in group order; ERR_GROUP unless the
        group is a subgroup of this communicator's."""
        if not isinstance(group, Group):
            raise TypeError(f"{call}: expecting a Group (got {type(group).__name__})")
        group._check(call)
        index = {w: r for r, w in enumerate(self._rw)}
        try:
            return [index[w] for w in group._ranks]
        except KeyError:
            raise error(ERR_GROUP, f"{call}: the group is not a subgroup of the communicator's "
                                   f"(group size {len(group._ranks)}, communicator size {self._size})") from None

    def Create(self, group) -> "Intracomm":
        """A communicator of the members of ``group`` (MPI_Comm_create): collective over this
        communicator; COMM_NULL on ranks outside the group.  As MPI-2.2 allows, ranks may pass
        different groups as long as those are disjoint: each group gets its communicator."""
        call = "Comm.Create"
        try:
            self._check(call)
            members = self._subgroup(group, call)
            ctx, _ = self._agree(call)
            if self._rank not in members:
                return Intracomm()
            return self._new(ctx, [self._rw[r] for r in members])
        except MPIException as e:
            self._raise(e)

    def Create_group(self, group, tag: int = 0) -> "Intracomm":
        """A communicator of the members of ``group`` (MPI_Comm_create_group): collective over
        the group's members only; ``tag`` tells apart concurrent calls on one communicator."""
        call = "Comm.Create_group"
        try:
            self._check(call)
            tag = self._stag(tag, call)
            members = self._subgroup(group, call)
            if self._rank not in members:
                raise error(ERR_GROUP, f"{call}: the calling process is not in the group (rank {self._rank})")
            ctx, _ = self._agree(call, (), members=members, tag=-(2 + (tag & 0x1FFFFFFF)),
                                 key=(self._ctx, 1, tag))
            return self._new(ctx, [self._rw[r] for r in members])
        except MPIException as e:
            self._raise(e)

    @classmethod
    def Create_from_group(cls, group, stringtag: str = "org.mpi4py", info=None, errhandler=None) -> "Intracomm":
        """A communicator of the members of ``group`` without a parent communicator
        (MPI_Comm_create_from_group): collective over the group's members, who pass the same
        ``stringtag``; concurrent calls over overlapping groups pass different ones."""
        call = "Intracomm.Create_from_group"
        if not isinstance(group, Group):
            raise TypeError(f"{call}: expecting a Group (got {type(group).__name__})")
        if not isinstance(stringtag, str):
            raise TypeError(f"{call}: stringtag must be a str ({type(stringtag).__name__})")
        _info_arg(info, call)
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler or None (got {type(errhandler).__name__})")
        world = _world()
        group._check(call)
        if group._me < 0 or group._me not in group._index:
            raise error(ERR_GROUP, f"{call}: the calling process is not in the group (size {len(group._ranks)})")
        h = zlib.crc32(stringtag.encode())
        ctx, _ = world._agree(call, (), members=list(group._ranks), tag=-(_GROUP_TAGS + (h & 0x1FFFFFFF)),
                              key=(-1, 2, h))
        c = world._new(ctx, group._ranks, info=info)
        if errhandler is not None:
            c._errh = Errhandler(errhandler)
        return c

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

    # --- topology constructors (math in gpumpi.topology; the classes at the end of this file) ----
    def Create_cart(self, dims, periods=None, reorder: bool = False) -> "Cartcomm":
        """Create a Cartesian topology communicator (MPI_Cart_create).

        ``reorder`` is accepted and not used: rank ``r`` keeps rank ``r`` (as ``Cart_map``
        says); ranks beyond the grid get ``COMM_NULL``.
        """
        call = "Intracomm.Create_cart"
        try:
            self._check(call)
            dims = _topology.ints(dims, call, "dims")
            periods = _periods_arg(periods, len(dims), call)
            n = _topology.cart_check(dims, self._size, call)
            return _topo_comm(self, Cartcomm, n, call, lambda r: _topology.Cart(dims, periods, r))
        except MPIException as e:
            self._raise(e)

    def Create_graph(self, index, edges, reorder: bool = False) -> "Graphcomm":
        """Create a graph topology communicator (MPI_Graph_create).

        ``index`` may also be the standard adjacency form with a leading 0 (mpi4py's
        extension); ``reorder`` is not used (ranks keep their order).
        """
        call = "Intracomm.Create_graph"
        try:
            self._check(call)
            index, edges = _graph_args(index, edges, call)
            n = _topology.graph_nodes(index, edges, self._size, call)
            return _topo_comm(self, Graphcomm, n, call, lambda r: _topology.Graph(index, edges, r))
        except MPIException as e:
            self._raise(e)

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None, destweights=None,
                                   info=None, reorder: bool = False) -> "Distgraphcomm":
        """Create a distributed graph communicator from each process's own neighbors
        (MPI_Dist_graph_create_adjacent); ``reorder`` is not used."""
        call = "Intracomm.Create_dist_graph_adjacent"
        try:
            self._check(call)
            _info_arg(info, call)
            srcs = [] if sources is None else _topology.ints(sources, call, "sources")
            sw = _weights_arg(sourceweights, len(srcs), call)
            dsts = [] if destinations is None else _topology.ints(destinations, call, "destinations")
            dw = _weights_arg(destweights, len(dsts), call)
            weighted = _topology.adjacent_check(srcs, dsts, sw, dw, self._size, call)
            rec = _topology.DistGraph(srcs, dsts, sw or (), dw or (), weighted)
            return _topo_comm(self, Distgraphcomm, self._size, call, lambda r: rec)
        except MPIException as e:
            self._raise(e)

    def Create_dist_graph(self, sources, degrees, destinations, weights=None, info=None,
                          reorder: bool = False) -> "Distgraphcomm":
        """Create a distributed graph communicator from edges any process may name
        (MPI_Dist_graph_create): an all-gather of the edge lists; ``reorder`` is not used."""
        call = "Intracomm.Create_dist_graph"
        try:
            self._check(call)
            _info_arg(info, call)
            srcs = _topology.ints(sources, call, "sources")
            degs = _topology.ints(degrees, call, "degrees", len(srcs))
            dsts = _topology.ints(destinations, call, "destinations", sum(degs))
            ws = _weights_arg(weights, len(dsts), call)
            bad = None
            try:
                _topology.dist_graph_check(srcs, degs, dsts, ws, self._size, call)
            except MPIException as e:  # still take part in the exchange, so no process waits
                bad = e
            specs = _lower.allgather(self, None if bad else (srcs, degs, dsts, ws), call)
            if bad is not None:
                raise bad
            if any(sp is None for sp in specs):
                raise error(ERR_ARG, f"{call}: another process passed an invalid edge list "
                                     f"(ranks {[r for r, sp in enumerate(specs) if sp is None]})")
            ins, inw, outs, outw = _topology.dist_graph_adjacency(specs, self._rank)
            rec = _topology.DistGraph(ins, outs, inw, outw, ws is not None)
            return _topo_comm(self, Distgraphcomm, self._size, call, lambda r: rec)
        except MPIException as e:
            self._raise(e)

    def Cart_map(self, dims, periods=None) -> int:
        """This process's rank in a Cartesian grid, or UNDEFINED (MPI_Cart_map; no reordering)."""
        call = "Intracomm.Cart_map"
        try:
            self._check(call)
            dims = _topology.ints(dims, call, "dims")
            _periods_arg(periods, len(dims), call)
            return _topology.cart_map(dims, self._size, self._rank, call)
        except MPIException as e:
            self._raise(e)

    def Graph_map(self, index, edges) -> int:
        """This process's rank in a graph, or UNDEFINED (MPI_Graph_map; no reordering)."""
        call = "Intracomm.Graph_map"
        try:
            self._check(call)
            index, edges = _graph_args(index, edges, call)
            return _topology.graph_map(index, edges, self._size, self._rank, call)
        except MPIException as e:
            self._raise(e)

    def Create_intercomm(self, local_leader: int, peer_comm, remote_leader: int, tag: int = 0) -> "Intercomm":
        """Create an intercommunicator joining this group and another (MPI_Intercomm_create).

        Collective over this communicator and, at the same time, over the other group's.  The
        leaders (``local_leader`` here, ``remote_leader``: its rank in ``peer_comm``) exchange
        the groups over ``peer_comm`` with ``tag`` (point-to-point: no other message with that
        tag may be pending between them); ``peer_comm`` and ``remote_leader`` matter at the
        leader only.  The groups must be disjoint.

        Raises:
            MPI.Exception: ERR_RANK for a leader out of range (a bad remote leader fails the
                whole local group), ERR_COMM when the groups overlap, ERR_TAG for a bad tag.
        """
        call = "Intracomm.Create_intercomm"
        try:
            self._check(call)
            leader = _int_arg(local_leader, call, "local_leader")
            if not 0 <= leader < self._size:
                raise error(ERR_RANK, f"{call}: invalid local leader ({leader}, communicator size {self._size})")
            return _intercomm_create(self, leader, peer_comm, remote_leader, self._stag(tag, call), call)
        except MPIException as e:
            self._raise(e)



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


def _info_items(info):
    """The hints of ``info`` as a dict (None or INFO_NULL: none)."""
    return None if info is None or not info else dict(info.items())


def _world() -> "Intracomm":
    return Comm._htable.find(0x44000000)  # COMM_WORLD (gpumpi.MPI sets it up)


_SPLIT_TYPES = (UNDEFINED, COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED)
# negative tags on a parent's collective context for agreements outside its call order:
# Create_group -2 - tag (tag < 2**29), Idup attempts from -(_IDUP_TAGS), Create_from_group
# (on COMM_WORLD) from -(_GROUP_TAGS); ANY_TAG (-1) and user tags never collide with them
_IDUP_TAGS = (1 << 29) + 2


def _idup_tag(t: int, attempt: int) -> int:
    """The tag of an Idup's agreement attempt (``t``: the call's collective tag): negative, so
    never a user's or another call's, and four apart per call so that a rank one attempt ahead
    never matches the previous attempt's messages."""
    return -(_IDUP_TAGS + (((t & 0x07FFFFFF) << 2) | (attempt & 3)))

_GROUP_TAGS = (1 << 30) + 4





# --- topologies: the records (gpumpi.topology) by context id, and the topology classes ----------
_TOPOS: dict = {}  # context id -> topology record of this process (Cart, Graph, DistGraph)


def _topo_comm(parent: "Intracomm", cls, n: int, call: str, record):
    """Collective: a new ``cls`` communicator of the parent's first ``n`` processes (rank order
    kept: gpumpi does not reorder), with topology ``record(rank)``; COMM_NULL beyond them."""
    ctx = parent._agree_ctx(call)
    if parent._rank >= n:
        return cls()
    c = parent._new(ctx, parent._rw[:n], cls)
    _TOPOS[ctx] = record(parent._rank)
    return c


def _periods_arg(periods, ndims: int, call: str) -> list:
    """mpi4py: None is all False, a bool is that for every dimension, else ``ndims`` ints."""
    if periods is None:
        periods = False
    if isinstance(periods, bool):
        return [int(periods)] * ndims
    return _topology.ints(periods, call, "periods", ndims)


def _graph_args(index, edges, call: str) -> tuple:
    """``(index, edges)``; an index in the standard form (leading 0, last = number of edges)
    loses its 0 (mpi4py's extension)."""
    index = _topology.ints(index, call, "index")
    edges = _topology.ints(edges, call, "edges")
    if index and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    return index, edges


def _weights_arg(weights, n: int, call: str):
    """mpi4py's ``asarray_weights``: None/UNWEIGHTED -> None, WEIGHTS_EMPTY -> [], else ``n`` ints."""
    if weights is None or weights is _topology.UNWEIGHTED:
        return None
    if weights is _topology.WEIGHTS_EMPTY:
        if n > 0:
            raise ValueError(f"{call}: empty weights but nonzero degree")
        return []
    return _topology.ints(weights, call, "weights", n)


class Topocomm(Intracomm):
    """Topology intracommunicator: the neighbor collectives of every topology."""

    __slots__ = ()
    _kinds = (_topology.CART, _topology.GRAPH, _topology.DIST_GRAPH)
    _expect = "a topology communicator"

    def _init_from(self, comm) -> None:
        super()._init_from(comm)
        if comm is not None and self._ctx >= 0:
            t = _TOPOS.get(self._ctx)
            if t is None:
                raise TypeError("expecting a topology communicator")
            if t.kind not in self._kinds:
                raise TypeError(f"expecting {self._expect}")

    def _topo(self, call: str):
        self._check(call)
        return _TOPOS[self._ctx]

    # --- neighbors ---------------------------------------------------------------------------
    @property
    def degrees(self) -> tuple:
        """Number of incoming and outgoing neighbors."""
        return self._topo("Topocomm.degrees").degrees()

    @property
    def indegree(self) -> int:
        """Number of incoming neighbors."""
        return self.degrees[0]

    @property
    def outdegree(self) -> int:
        """Number of outgoing neighbors."""
        return self.degrees[1]

    @property
    def inoutedges(self) -> tuple:
        """Incoming and outgoing neighbors (in neighbor-collective order)."""
        ins, outs, _ = self._topo("Topocomm.inoutedges").neighbors()
        return ins, outs

    @property
    def inedges(self) -> list:
        """Incoming neighbors."""
        return self.inoutedges[0]

    @property
    def outedges(self) -> list:
        """Outgoing neighbors."""
        return self.inoutedges[1]

    def _nbrs(self) -> tuple:
        """Return ``(sources, destinations, recv_order)`` for the neighbor collectives (gpumpi.topology)."""
        return _TOPOS[self._ctx].neighbors()

    # --- neighbor collectives: schedules of gpumpi.collectives.neighbor ----------------------
    def Neighbor_allgather(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather one block from every incoming neighbor (MPI_Neighbor_allgather)."""
        return self._coll_block(_calls.neighbor_allgather, "Neighbor_allgather", False, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_allgatherv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather a block of its own size from every incoming neighbor (MPI_Neighbor_allgatherv)."""
        return self._coll_block(_calls.neighbor_allgather, "Neighbor_allgatherv", True, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_alltoall(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Send block ``j`` to outgoing neighbor ``j``, receive one from each incoming one (MPI_Neighbor_alltoall)."""
        return self._coll_block(_calls.neighbor_alltoall, "Neighbor_alltoall", False, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_alltoallv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Neighbor all-to-all with per-neighbor counts and displacements (MPI_Neighbor_alltoallv)."""
        return self._coll_block(_calls.neighbor_alltoall, "Neighbor_alltoallv", True, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_alltoallw(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Neighbor all-to-all with per-neighbor datatypes and byte displacements (MPI_Neighbor_alltoallw)."""
        return self._coll_block(_calls.neighbor_alltoallw, "Neighbor_alltoallw", sendbuf, recvbuf, stream=stream)

    def Ineighbor_allgather(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor allgather (MPI_Ineighbor_allgather)."""
        return self._coll_req(_calls.neighbor_allgather, "Ineighbor_allgather", False, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_allgatherv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor allgatherv (MPI_Ineighbor_allgatherv)."""
        return self._coll_req(_calls.neighbor_allgather, "Ineighbor_allgatherv", True, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_alltoall(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor all-to-all (MPI_Ineighbor_alltoall)."""
        return self._coll_req(_calls.neighbor_alltoall, "Ineighbor_alltoall", False, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_alltoallv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor all-to-all vector (MPI_Ineighbor_alltoallv)."""
        return self._coll_req(_calls.neighbor_alltoall, "Ineighbor_alltoallv", True, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_alltoallw(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor all-to-all general (MPI_Ineighbor_alltoallw)."""
        return self._coll_req(_calls.neighbor_alltoallw, "Ineighbor_alltoallw", sendbuf, recvbuf, stream=stream)

    def Neighbor_allgather_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor allgather (MPI_Neighbor_allgather_init)."""
        return self._coll_init(_calls.neighbor_allgather, "Neighbor_allgather_init", False, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_allgatherv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor allgatherv (MPI_Neighbor_allgatherv_init)."""
        return self._coll_init(_calls.neighbor_allgather, "Neighbor_allgatherv_init", True, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_alltoall_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor all-to-all (MPI_Neighbor_alltoall_init)."""
        return self._coll_init(_calls.neighbor_alltoall, "Neighbor_alltoall_init", False, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_alltoallv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor all-to-all vector (MPI_Neighbor_alltoallv_init)."""
        return self._coll_init(_calls.neighbor_alltoall, "Neighbor_alltoallv_init", True, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_alltoallw_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor all-to-all general (MPI_Neighbor_alltoallw_init)."""
        return self._coll_init(_calls.neighbor_alltoallw, "Neighbor_alltoallw_init", sendbuf, recvbuf,
                               info=info, stream=stream)

    def neighbor_allgather(self, sendobj) -> list:
        """Gather a Python object from every incoming neighbor (MPI_Neighbor_allgather of pickles);
        None for a PROC_NULL neighbor."""
        def run(c, o, call):
            with _commctx.lock(c, "neighbor_allgather"):
                return _lower.neighbor_allgather(c, o, call)

        return self._ocoll(run, "neighbor_allgather", sendobj)

    def neighbor_alltoall(self, sendobj) -> list:
        """Send item ``j`` of a sequence to outgoing neighbor ``j``, receive one from each incoming
        neighbor (MPI_Neighbor_alltoall of pickles); None for a PROC_NULL neighbor."""
        def run(c, o, call):
            with _commctx.lock(c, "neighbor_alltoall"):
                return _lower.neighbor_alltoall(c, o, call)

        return self._ocoll(run, "neighbor_alltoall", sendobj)


class Cartcomm(Topocomm):
    """Cartesian topology intracommunicator (MPI_Cart_create)."""

    __slots__ = ()
    _kinds = (_topology.CART,)
    _expect = "a Cartesian communicator"

    def Get_dim(self) -> int:
        """Number of dimensions (MPI_Cartdim_get)."""
        return len(self._topo("Cartcomm.Get_dim").dims)

    dim = property(Get_dim, doc="Number of dimensions.")
    ndim = property(Get_dim, doc="Number of dimensions.")

    def Get_topo(self) -> tuple:
        """Return ``(dims, periods, coords)`` of this process (MPI_Cart_get)."""
        t = self._topo("Cartcomm.Get_topo")
        return list(t.dims), list(t.periods), list(t.coords)

    topo = property(Get_topo, doc="Topology information.")
    dims = property(lambda self: self.Get_topo()[0], doc="Dimensions.")
    periods = property(lambda self: self.Get_topo()[1], doc="Periodicity.")
    coords = property(lambda self: self.Get_topo()[2], doc="Coordinates.")

    def Get_cart_rank(self, coords) -> int:
        """Rank at ``coords``, wrapped on periodic dimensions (MPI_Cart_rank)."""
        call = "Cartcomm.Get_cart_rank"
        try:
            t = self._topo(call)
            coords = _topology.ints(coords, call, "coords", len(t.dims))
            r = _topology.cart_rank(t.dims, t.periods, coords)
            if r == PROC_NULL:
                raise error(ERR_ARG, f"{call}: coordinates outside a non-periodic dimension "
                                     f"({coords}, dims {list(t.dims)})")
            return r
        except MPIException as e:
            self._raise(e)

    def Get_coords(self, rank: int) -> list:
        """Coordinates of ``rank`` (MPI_Cart_coords)."""
        call = "Cartcomm.Get_coords"
        try:
            t = self._topo(call)
            rank = _int_arg(rank, call, "rank")
            if not 0 <= rank < self._size:
                raise error(ERR_RANK, f"{call}: invalid rank ({rank}, communicator size {self._size})")
            return _topology.cart_coords(t.dims, rank)
        except MPIException as e:
            self._raise(e)

    def Shift(self, direction: int, disp: int) -> tuple:
        """Return the ``(source, dest)`` ranks of a shift by ``disp`` along ``direction`` (MPI_Cart_shift)."""
        call = "Cartcomm.Shift"
        try:
            t = self._topo(call)
            direction, disp = _int_arg(direction, call, "direction"), _int_arg(disp, call, "disp")
            if not t.dims:
                raise error(ERR_TOPOLOGY, f"{call}: the grid has zero dimensions")
            if not 0 <= direction < len(t.dims):
                raise error(ERR_ARG, f"{call}: invalid direction ({direction}, {len(t.dims)} dimensions)")
            return _topology.cart_shift(t.dims, t.periods, t.coords, direction, disp, self._rank)
        except MPIException as e:
            self._raise(e)

    def Sub(self, remain_dims) -> "Cartcomm":
        """Collective: the sub-grid of the kept dimensions that holds this process (MPI_Cart_sub).

        With no dimension kept every process gets a zero-dimensional grid of its own
        (MPI-4.1 section 8.5.6)."""
        call = "Cartcomm.Sub"
        try:
            t = self._topo(call)
            remain = _topology.ints(remain_dims, call, "remain_dims", len(t.dims))
            color, _, sdims, speriods = _topology.cart_sub(t.dims, t.periods, t.coords, remain)
            members = []
            for q in range(self._size):
                qc, qk, _, _ = _topology.cart_sub(t.dims, t.periods, _topology.cart_coords(t.dims, q), remain)
                if qc == color:
                    members.append((qk, q))
            members.sort()
            world = [self._rw[q] for _, q in members]
            ctx = self._agree_ctx(call)
            c = Cartcomm.__new__(Cartcomm)
            c._setup(ctx, world, self._rw[self._rank])
            c._errh = self._errh
            _TOPOS[ctx] = _topology.Cart(sdims, speriods, c._rank)
            return c
        except MPIException as e:
            self._raise(e)


class Graphcomm(Topocomm):
    """General graph topology intracommunicator (MPI_Graph_create)."""

    __slots__ = ()
    _kinds = (_topology.GRAPH,)
    _expect = "a general graph communicator"

    def Get_dims(self) -> tuple:
        """Return ``(nnodes, nedges)`` (MPI_Graphdims_get)."""
        t = self._topo("Graphcomm.Get_dims")
        return len(t.index), len(t.edges)

    dims = property(Get_dims, doc="Number of nodes and edges.")
    nnodes = property(lambda self: self.Get_dims()[0], doc="Number of nodes.")
    nedges = property(lambda self: self.Get_dims()[1], doc="Number of edges.")

    def Get_topo(self) -> tuple:
        """Return ``(index, edges)`` (MPI_Graph_get)."""
        t = self._topo("Graphcomm.Get_topo")
        return list(t.index), list(t.edges)

    topo = property(Get_topo, doc="Topology information.")
    index = property(lambda self: self.Get_topo()[0], doc="Index.")
    edges = property(lambda self: self.Get_topo()[1], doc="Edges.")

    def _node(self, rank, call: str):
        t = self._topo(call)
        rank = _int_arg(rank, call, "rank")
        if not 0 <= rank < len(t.index):
            raise error(ERR_RANK, f"{call}: invalid rank ({rank}, {len(t.index)} nodes)")
        return _topology.graph_neighbors(t.index, t.edges, rank)

    def Get_neighbors_count(self, rank: int) -> int:
        """Number of neighbors of ``rank`` (MPI_Graph_neighbors_count)."""
        try:
            return len(self._node(rank, "Graphcomm.Get_neighbors_count"))
        except MPIException as e:
            self._raise(e)

    def Get_neighbors(self, rank: int) -> list:
        """Neighbors of ``rank`` (MPI_Graph_neighbors)."""
        try:
            return self._node(rank, "Graphcomm.Get_neighbors")
        except MPIException as e:
            self._raise(e)

    nneighbors = property(lambda self: self.Get_neighbors_count(self.Get_rank()), doc="Number of neighbors.")
    neighbors = property(lambda self: self.Get_neighbors(self.Get_rank()), doc="Neighbors.")


class Distgraphcomm(Topocomm):
    """Distributed graph topology intracommunicator (MPI_Dist_graph_create(_adjacent))."""

    __slots__ = ()
    _kinds = (_topology.DIST_GRAPH,)
    _expect = "a distributed graph communicator"

    def Get_dist_neighbors_count(self) -> tuple:
        """Return ``(indegree, outdegree, weighted)`` (MPI_Dist_graph_neighbors_count)."""
        t = self._topo("Distgraphcomm.Get_dist_neighbors_count")
        return len(t.sources), len(t.destinations), t.weighted

    def Get_dist_neighbors(self) -> tuple:
        """Return ``(sources, destinations, (sourceweights, destweights) or None)`` (MPI_Dist_graph_neighbors)."""
        t = self._topo("Distgraphcomm.Get_dist_neighbors")
        w = (list(t.sourceweights), list(t.destweights)) if t.weighted else None
        return list(t.sources), list(t.destinations), w


class Intercomm(Comm):
    """Intercommunicator (MPI_Comm of two groups).

    Point-to-point ranks and collectives address the REMOTE group (``_w``); ``Get_size`` and
    ``Get_rank`` are about the local group (``_rw``).  ``_local`` is a private
    intracommunicator of the local group (the context block after the intercommunicator's):
    the local phases of collectives run on it, and the intercommunicator's collective tags
    are its tags, so the two never cross."""

    __slots__ = ("_local",)

    def _init_from(self, comm) -> None:
        if isinstance(comm, Comm) and comm._ctx >= 0 and not isinstance(comm, Intercomm):
            raise TypeError(f"Intercomm: expecting an intercommunicator (got {type(comm).__name__})")
        super()._init_from(comm)

    def _set_null(self) -> None:
        super()._set_null()
        self._local = None

    def _copy_from(self, comm: "Comm") -> None:
        super()._copy_from(comm)
        self._local = comm._local

    def _ctag(self) -> int:
        return self._local._ctag()

    def Is_inter(self) -> bool:
        """Return whether this is an intercommunicator: always (MPI_Comm_test_inter)."""
        self._check("Comm.Is_inter")
        return True

    is_inter = property(Is_inter)

    # --- queries --------------------------------------------------------------------------
    def Get_remote_size(self) -> int:
        """Number of processes of the remote group (MPI_Comm_remote_size)."""
        self._check("Intercomm.Get_remote_size")
        return len(self._w)

    def Get_remote_group(self) -> Group:
        """The remote group (MPI_Comm_remote_group)."""
        self._check("Intercomm.Get_remote_group")
        return Group._of(self._w, self._rw[self._rank])

    remote_size = property(Get_remote_size)
    remote_group = property(Get_remote_group)

    def Compare(self, comm: "Comm") -> int:
        """IDENT, CONGRUENT, SIMILAR or UNEQUAL (MPI_Comm_compare): both groups compared."""
        self._check("Comm.Compare")
        comm._check("Comm.Compare")
        if not isinstance(comm, Intercomm):
            return UNEQUAL
        if self._ctx == comm._ctx:
            return IDENT
        if self._rw == comm._rw and self._w == comm._w:
            return CONGRUENT
        if set(self._rw) == set(comm._rw) and set(self._w) == set(comm._w):
            return SIMILAR
        return UNEQUAL

    # --- lifecycle ------------------------------------------------------------------------
    def Free(self) -> None:
        """Free the intercommunicator (MPI_Comm_free) and its private local communicator."""
        lc = self._local
        super().Free()
        if lc is not None and lc._ctx >= 0 and lc._ctx not in _rt.ENGINE.freed_ctx:
            lc.Free()

    def _agree(self, kind: int, call: str, nblocks: int = 2) -> int:
        """A fresh context id agreed by both groups (the key, as Intracomm._agree's: parent
        context, kind of creation -- 5 and up on intercommunicators -- and the call's tag)."""
        return _ctxid.allocate(lambda v: _lower.allmax_inter(self, v, call), (self._ctx, 4 + kind, self._ctag()),
                               nblocks)

    def Dup(self, info=None) -> "Intercomm":
        """Duplicate the intercommunicator (MPI_Comm_dup): same groups, a new context."""
        try:
            self._check("Comm.Dup")
            _info_arg(info, "Comm.Dup")
            ctx = self._agree(1, "Comm.Dup")
            c = _new_inter(ctx, self._rw, self._w, self._rw[self._rank], self._errh)
            c._info = dict(self._info or {}) if info is None else _info_items(info)
            _keyval.on_dup(self, c, "Comm.Dup")  # attribute copy callbacks (frees c if one fails)
            return c
        except MPIException as e:
            self._raise(e)

    Clone = Dup

    def Idup(self, info=None) -> tuple:
        """Nonblocking duplicate (MPI_Comm_idup; with ``info``: MPI_Comm_idup_with_info).

        Returns ``(comm, request)``; ``comm`` is usable once ``request`` completes.  Each
        agreement attempt is two nonblocking maxima at once: over the local group (on the
        private local communicator) and across (an intercommunicator allreduce gives each
        group the other's maximum), so the call never waits for the other ranks."""
        call = "Comm.Idup"
        try:
            self._check(call)
            _info_arg(info, call)
            c = Intercomm.__new__(Intercomm)
            c._set_null()
            t = self._ctag()  # in call order on every rank of both groups
            s1, r1, s2, r2 = (_np.zeros(1, _np.int64) for _ in range(4))
            local = _calls.allreduce(self._local, s1, r1, _MAX, call)
            across = _calls.INTER["allreduce"](self, s2, r2, _MAX, call)
            j = joint(1)
            j.st_source, j.st_tag, j.st_nbytes = -1, -1, 0

            def start_max(values, attempt):
                s1[0] = s2[0] = values[0]
                local.tag = across.tag = _idup_tag(t, attempt)
                x = all_of([_coll_exec.start(local), _coll_exec.start(across)], None)
                return x, lambda: (max(int(r1[0]), int(r2[0])),)

            def done(ctx, err, errmsg):
                if not err:
                    try:
                        _new_inter(ctx, self._rw, self._w, self._rw[self._rank], self._errh, c)
                        c._info = dict(self._info or {}) if info is None else _info_items(info)
                        _keyval.on_dup(self, c, "Comm.Dup")
                    except MPIException as e:  # a copy callback failed: the request fails
                        j.err, j.errmsg = e.Get_error_class(), str(e)
                else:
                    j.err, j.errmsg = err, errmsg
                part_done(j, j)

            _ctxid.Allocation(start_max, (self._ctx, 9, t), done, nblocks=2).start()
            return c, Request._of(j, self, None, (local, across, s1, r1, s2, r2))
        except MPIException as e:
            self._raise(e)

    def Idup_with_info(self, info) -> tuple:
        """Nonblocking duplicate with new info hints (MPI_Comm_idup_with_info)."""
        _info_arg(info, "Comm.Idup_with_info", none_ok=False)
        return self.Idup(info)

    def Dup_with_info(self, info) -> "Intercomm":
        """Duplicate with new info hints (MPI_Comm_dup_with_info)."""
        _info_arg(info, "Comm.Dup_with_info", none_ok=False)
        return self.Dup(info)

    def Split(self, color: int = 0, key: int = 0) -> "Intercomm":
        """Split both groups by color (MPI_Comm_split): the local ranks of one color, ordered by
        key, joined with the remote ranks of the same color; COMM_NULL for UNDEFINED or a color
        the other group does not have."""
        try:
            call = "Comm.Split"
            self._check(call)
            color, key = _int_arg(color, call, "color"), _int_arg(key, call, "key")
            if color < 0 and color != UNDEFINED:
                raise error(ERR_ARG, f"{call}: color must be non-negative or UNDEFINED ({color})")
            return self._split(color, key, call)
        except MPIException as e:
            self._raise(e)

    def _split(self, color: int, key: int, call: str) -> "Intercomm":
        mine = _lower.allgather(self._local, (color, key), call)
        theirs = _lower.allgather_inter(self, (color, key), call)
        ctx = self._agree(2, call)
        if color == UNDEFINED:
            return Intercomm()
        local = [self._rw[r] for _, r in sorted((k, r) for r, (c, k) in enumerate(mine) if c == color)]
        remote = [self._w[r] for _, r in sorted((k, r) for r, (c, k) in enumerate(theirs) if c == color)]
        if not remote:
            return Intercomm()
        return _new_inter(ctx, local, remote, self._rw[self._rank], self._errh)

    def Split_type(self, split_type: int, key: int = 0, info=None) -> "Intercomm":
        """Split both groups by node (MPI_Comm_split_type): COMM_TYPE_SHARED joins the ranks of
        each group that share this node's memory with those of the other group on it
        (gpumpi's ranks all run on one node: the bootstrap has no multi-node mode yet);
        UNDEFINED gives COMM_NULL."""
        try:
            call = "Comm.Split_type"
            self._check(call)
            split_type, key = _int_arg(split_type, call, "split_type"), _int_arg(key, call, "key")
            _info_arg(info, call)
            if split_type == UNDEFINED:
                return self._split(UNDEFINED, key, call)
            if split_type != COMM_TYPE_SHARED:
                raise NotImplementedError(f"{call}: split type {split_type} is not supported on intercommunicators "
                                          f"(COMM_TYPE_SHARED and UNDEFINED are)")
            return self._split(0, key, call)  # one color: the bootstrap runs every rank on one node
        except MPIException as e:
            self._raise(e)

    def Create(self, group: Group) -> "Intercomm":
        """The intercommunicator of a subgroup of each group (MPI_Comm_create): every process
        passes a subgroup of its local group; COMM_NULL outside it, or when either is empty."""
        try:
            call = "Comm.Create"
            self._check(call)
            if not isinstance(group, Group):
                raise TypeError(f"{call}: expecting a Group (got {type(group).__name__})")
            group._check(call)
            mine = tuple(group._ranks)
            if not set(mine) <= set(self._rw):
                raise error(ERR_GROUP, f"{call}: the group is not a subgroup of the local group ({list(mine)})")
            theirs = _lower.allgather_inter(self, mine, call)[0]
            ctx = self._agree(3, call)
            me = self._rw[self._rank]
            if me not in mine or not theirs:
                return Intercomm()
            return _new_inter(ctx, mine, theirs, me, self._errh)
        except MPIException as e:
            self._raise(e)

    def Merge(self, high: bool = False) -> Intracomm:
        """Merge both groups into one intracommunicator (MPI_Intercomm_merge): the group that
        passes ``high=False`` comes first (equal values: the group holding the lower world rank)."""
        try:
            call = "Intercomm.Merge"
            self._check(call)
            high = bool(high)
            rhigh = bool(_lower.allgather_inter(self, high, call)[0])
            ctx = self._agree(4, call, nblocks=1)
            local_first = high < rhigh or (high == rhigh and self._rw[0] < self._w[0])
            return self._new(ctx, self._rw + self._w if local_first else self._w + self._rw)
        except MPIException as e:
            self._raise(e)

    @classmethod
    def Create_from_groups(cls, local_group, local_leader: int, remote_group, remote_leader: int,
                           stringtag: str = "org.mpi4py", info=None, errhandler=None) -> "Intercomm":
        """An intercommunicator of two disjoint groups without a parent communicator
        (MPI_Intercomm_create_from_groups): collective over both groups' members, who pass the
        same ``stringtag``.  The leaders are checked for range; the members of both groups
        agree on the context directly, so the leaders play no further part."""
        call = "Intercomm.Create_from_groups"
        for what, g in (("local_group", local_group), ("remote_group", remote_group)):
            if not isinstance(g, Group):
                raise TypeError(f"{call}: {what} must be a Group (got {type(g).__name__})")
        if not isinstance(stringtag, str):
            raise TypeError(f"{call}: stringtag must be a str ({type(stringtag).__name__})")
        _info_arg(info, call)
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler or None (got {type(errhandler).__name__})")
        world = _world()
        try:
            local_group._check(call)
            remote_group._check(call)
            for what, g, ld in (("local", local_group, local_leader), ("remote", remote_group, remote_leader)):
                ld = _int_arg(ld, call, f"{what}_leader")
                if not 0 <= ld < len(g._ranks):
                    raise error(ERR_RANK, f"{call}: invalid {what} leader ({ld}, group size {len(g._ranks)})")
            me = _rt.ENGINE.rank
            if me not in local_group._index:
                raise error(ERR_GROUP, f"{call}: the calling process is not in the local group "
                                       f"(world rank {me})")
            both = set(local_group._ranks) & set(remote_group._ranks)
            if both:
                raise error(ERR_GROUP, f"{call}: the groups overlap (world ranks {sorted(both)})")
            h = zlib.crc32(stringtag.encode())
            members = sorted(set(local_group._ranks) | set(remote_group._ranks))
            ctx, _ = world._agree(call, (), nblocks=2, members=members, tag=-(_GROUP_TAGS + (h & 0x1FFFFFFF)),
                                  key=(-1, 3, h))
            c = _new_inter(ctx, local_group._ranks, remote_group._ranks, me,
                           world._errh if errhandler is None else Errhandler(errhandler))
            c._info = _info_items(info)
            return c
        except MPIException as e:
            world._raise(e)


def _new_inter(ctx: int, local, remote, me: int, errh, c: "Intercomm | None" = None) -> Intercomm:
    """An intercommunicator on context block ``ctx``, its local communicator on ``ctx + 4``
    (``c``: the object to set up, as Idup's, made before its context was agreed)."""
    c = Intercomm.__new__(Intercomm) if c is None else c
    c._setup(ctx, local, me, remote=remote)
    lc = Intracomm.__new__(Intracomm)
    lc._setup(ctx + 4, local, me)
    c._local = lc
    c._errh = errh
    return c


def _leader_swap(peer_comm, rl: int, tag: int, values, call: str) -> tuple:
    """The leaders of Create_intercomm swap integer tuples over ``peer_comm`` (its point-to-point
    context, ``tag``), sized by the message."""
    wpeer = peer_comm._w[rl]
    r = _p2p.recv_bytes(None, rl, wpeer, tag, peer_comm._ctx, call)
    s = _p2p.send_bytes(memoryview(struct.pack(f"<{len(values)}q", *values)), wpeer, peer_comm._rank, tag,
                        peer_comm._ctx, call)
    peer_comm._cwait([x for x in (s, r) if x is not None and x is not SENT])
    data = bytes(r.mem)
    return struct.unpack(f"<{len(data) // 8}q", data)


def _intercomm_create(local: Intracomm, leader: int, peer_comm, remote_leader, tag: int, call: str) -> Intercomm:
    """MPI_Intercomm_create (Intracomm.Create_intercomm): the leaders swap their groups, the
    local groups learn the other group from their leader, then both agree on a context."""
    me = local._rw[local._rank]
    is_leader = local._rank == leader
    hdr = bad = None
    if is_leader:
        try:
            if not isinstance(peer_comm, Comm):
                raise TypeError(f"{call}: peer_comm must be a Comm (got {type(peer_comm).__name__})")
            peer_comm._check(call)
            rl = peer_comm._peer(remote_leader, call, "remote leader")
            if peer_comm._w[rl] in local._rw:
                raise error(ERR_COMM, f"{call}: the remote leader (rank {rl} of peer_comm) is in the local group")
            got = _leader_swap(peer_comm, rl, tag, (local._ctx,) + local._rw, call)
            hdr = (0, "", got[0], got[1:])
        except MPIException as e:
            hdr = (e.Get_error_class(), str(e), 0, ())
        except TypeError as e:
            hdr, bad = (ERR_ARG, str(e), 0, ()), e
    hdr = _lower.bcast(local, hdr, leader, call)  # the whole local group fails alike
    code, msg, rctx, remote = hdr
    if bad is not None:
        raise bad
    if code:
        raise error(code, msg)
    if set(remote) & set(local._rw):
        raise error(ERR_COMM, f"{call}: the local and remote groups overlap (world ranks "
                              f"{sorted(set(remote) & set(local._rw))})")

    def allmax(values):
        v = _lower.allreduce(local, tuple(values), _lower._tmax, call)
        if is_leader:
            v = _lower._tmax(v, _leader_swap(peer_comm, rl, tag, v, call))
        return _lower.bcast(local, v, leader, call)

    ctx = _ctxid.allocate(allmax, (min(local._ctx, rctx), 3, max(local._ctx, rctx), tag), nblocks=2)
    return _new_inter(ctx, local._rw, remote, me, local._errh)


Comm._hbase = Comm
#: Null communicator (MPI_COMM_NULL).
COMM_NULL = Comm._htable.constant(Comm(), "COMM_NULL")
