"""Communicators (MPI_Comm), the base face (L5): handles, queries, attributes, error
handlers, info, lifecycle, and the agreement of new context ids.

Theory of operation
===================
A communicator is a context id plus a group.  Context ``ctx`` carries
point-to-point traffic, ``ctx + 1`` collective traffic, ``ctx + 2`` partitioned
traffic, ``ctx + 3`` the device parts of object messages, so the four never match
each other's messages.  New context ids are agreed collectively: every member
proposes its next free id, all take the maximum, then move their next free id past
it -- no member has used it before.

``Comm`` gathers its faces as bases: point-to-point (:mod:`.p2p`), object messages
(:mod:`.objects`) and collectives (:mod:`.collectives`); the classes of the other kinds
(:mod:`.intra`, :mod:`.topo`, :mod:`.inter`) derive from it and are found through
:data:`.common.CLASSES`.  API modules validate and delegate: what they need of the
running engine is a verb of :mod:`gpumpi._services`.
"""

from __future__ import annotations

import struct


from .. import _commattr
from .. import _commctx
from .. import _ctxid
from .. import keyval as _keyval
from .. import _p2p
from .._services import (FREED, abort, free_context, wait, world_rank, world_size)
from ..constants import (
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
from ..errors import (
    ERR_ARG,
    ERR_COMM,
    ERR_ERRHANDLER,
    ERR_KEYVAL,
    ERR_RANK,
    ERR_TAG,
    ERRORS_RETURN,
    Errhandler,
    error,
    last_used_code as _last_used_code,
)
from ..errors import Exception as MPIException
from .._handles import Handle, Table
from ..group import Group
from ..info import Info
from .common import CLASSES, TOPOLOGIES, info_arg, \
    info_items, int_arg
from .collectives import Collectives
from .objects import Objects
from .p2p import PointToPoint

STANDARD, SYNCHRONOUS, READY, BUFFERED = _p2p.STANDARD, _p2p.SYNCHRONOUS, _p2p.READY, _p2p.BUFFERED

__all__ = ["COMM_NULL", "Comm"]


class Comm(PointToPoint, Objects, Collectives, Handle):
    """Communication context (MPI_Comm)."""

    __slots__ = ("_ctx", "_w", "_rank", "_size", "_group", "_errh", "_name", "_cseq", "_bpool",
                 "_rw", "_info", "__weakref__")
    _hnull = 0x04000000
    _htable = Table("Comm", 0)
    _inter = False  # an intercommunicator class (Intercomm sets it)

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
        elif comm._inter and comm._ctx >= 0 and isinstance(self, CLASSES["intra"]):
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
        if self._ctx in FREED:
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
        t = TOPOLOGIES.get(self._ctx)
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
            return world_size()
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
        self._errh.call(self, int_arg(errorcode, "Comm.Call_errhandler", "errorcode"))

    def Abort(self, errorcode: int = 0) -> None:
        """Terminate every process of the job (MPI_Abort)."""
        abort(int(errorcode))

    # --- lifecycle ------------------------------------------------------------------------
    def Free(self) -> None:
        """Free the communicator (MPI_Comm_free)."""
        self._check("Comm.Free")
        if self._ctx in (0, 4):
            raise error(ERR_COMM, f"Comm.Free: cannot free a predefined communicator ({self._name})")
        _keyval.on_free(self)  # attribute delete callbacks, newest first, while the handle is valid
        _commctx.forget(self._ctx)  # its lock table and private duplicate (mpi4py's attributes)
        free_context(self._ctx)  # copies of this handle are stale now (context ids are never reused)
        Comm._htable.live.pop(self._hval(), None)
        TOPOLOGIES.pop(self._ctx, None)
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
        return CLASSES["intra"].Dup(self, info)

    def Split(self, color: int = 0, key: int = 0) -> "Comm":
        """Split into disjoint communicators (MPI_Comm_split); through a plain ``Comm`` handle
        of an intracommunicator as through its ``Intracomm`` handle."""
        try:
            self._check("Comm.Split")
        except MPIException as e:
            self._raise(e)
        if self.Is_inter():
            raise NotImplementedError("Comm.Split: split an intercommunicator through its Intercomm handle")
        return CLASSES["intra"].Split(self, color, key)

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
        cls = cls or CLASSES["intra"]
        c = cls.__new__(cls)
        c._setup(ctx, world, world_rank())
        c._errh = self._errh
        c._info = info_items(info)
        return c

    def _dup_into(self, c, ctx: int, info) -> "Intracomm":
        c._setup(ctx, self._rw, self._rw[self._rank])
        c._errh = self._errh
        c._info = dict(self._info or {}) if info is None else info_items(info)
        t = TOPOLOGIES.get(self._ctx)
        if t is not None:  # a duplicate keeps the topology, whatever class the handle has
            TOPOLOGIES[ctx] = t
        _keyval.on_dup(self, c, "Comm.Dup")  # attribute copy callbacks (frees c if one fails)
        return c


    def _split_checked(self, color, key):
        """MPI_Comm_split's checks (color, key), then the split of this communicator's kind."""
        try:
            call = "Comm.Split"
            self._check(call)
            color, key = int_arg(color, call, "color"), int_arg(key, call, "key")
            if color < 0 and color != UNDEFINED:
                raise error(ERR_ARG, f"{call}: color must be non-negative or UNDEFINED ({color})")
            return self._split(color, key, call)
        except MPIException as e:
            self._raise(e)

    def _split(self, color: int, key: int, call: str, info=None) -> "Intracomm":
        ctx, rows = self._agree(call, (color, key))
        if color == UNDEFINED:
            return CLASSES["intra"]()
        members = sorted((v[1], r) for r, v in enumerate(rows) if v[0] == color)
        return self._new(ctx, [self._rw[r] for _, r in members], info=info)


    # --- point-to-point: posting ----------------------------------------------------------
    @classmethod
    def Get_parent(cls) -> "Intercomm":
        """The parent intercommunicator (MPI_Comm_get_parent): a null Intercomm, since gpumpi
        never spawns processes (MPI: COMM_NULL for a process that was not spawned)."""
        return CLASSES["inter"]()

    def Disconnect(self) -> None:
        """Disconnect (MPI_Comm_disconnect): free the communicator, as MPICH does
        (``MPID_Comm_disconnect`` is ``MPIR_Comm_free_impl``, with no barrier).  The standard
        calls it collective, but real programs disconnect on one side and merely drop the
        communicator on the other (distwq's workers disconnect the communicator their broker
        never does): a barrier here hung them; operations in flight on it complete as after
        ``Free``."""
        call = "Comm.Disconnect"
        try:
            self._check(call)
            if self._ctx in (0, 4):
                raise error(ERR_COMM, f"{call}: cannot disconnect a predefined communicator ({self._name})")
        except MPIException as e:
            self._raise(e)
        self.Free()

    # --- info hints -----------------------------------------------------------------------
    def Set_info(self, info) -> None:
        """Set the communicator's info hints (MPI_Comm_set_info); gpumpi keeps them and
        reports them back, and acts on none."""
        self._check("Comm.Set_info")
        info_arg(info, "Comm.Set_info", none_ok=False)
        self._info = info_items(info)

    def Get_info(self) -> Info:
        """A new Info with the communicator's hints (MPI_Comm_get_info); ``Free`` it when done."""
        self._check("Comm.Get_info")
        return Info.Create(self._info)

    info = property(Get_info, Set_info)


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
        for x in xs:
            if not x.done:
                wait(x)
            if x.err:
                raise error(x.err, x.errmsg)



Comm._hbase = Comm
CLASSES["comm"] = Comm
#: Null communicator (MPI_COMM_NULL).
COMM_NULL = Comm._htable.constant(Comm(), "COMM_NULL")
