"""One-sided communication windows (MPI_Win): the API surface (L5).

Theory of operation
===================
``Win`` is mpi4py's class: a reference to one window handle (:mod:`gpumpi._handles`);
every reference to a window shares one :class:`_State` (name, error handler, info,
attributes and the :class:`gpumpi._rma.Window` runtime).  This module validates
arguments, parses mpi4py's buffer and target specs, and calls the runtime, which
moves the data (see :mod:`gpumpi._rma` for how a window is reached and
synchronized, and :mod:`gpumpi.rma.epochs` for the epoch rules).

Buffer specs are mpi4py's (``_p_msg_rma``): the origin is a simple buffer spec; the
target is ``None`` (displacement 0, the origin's count and type), an integer
displacement, or ``(disp,)``, ``(disp, count)``, ``(disp, count, datatype)``; the
displacement counts ``disp_unit``s (absolute addresses in a dynamic window).
``Fetch_and_op`` and ``Compare_and_swap`` take one element each, of one type
(``ValueError`` otherwise, as mpi4py).  ``PROC_NULL`` targets do nothing.

The near path: a target that the open passive target epoch includes and whose memory this
process maps (``Win.Allocate``, ``Allocate_shared``, ``Create`` on ``Alloc_mem`` memory) is in
``Window.near``, kept by the runtime at every lock epoch change.  To such a target nothing can
fail but the arguments, and every operation completes when issued, so ``Fetch_and_op``,
``Compare_and_swap``, ``Put`` and ``Get`` of the simple kind (NumPy arrays or ``[array, T]`` with
``T`` the predefined type of the elements, int rank and displacement) check in a few Python
operations and make one call into machine code with int arguments; ``Flush_local`` to it
returns at once and ``Flush`` is a memory barrier.  Whatever the near path does not take falls
through to the general path, which checks and reports as it always did.

gpumpi extensions: ``Win.Allocate(..., memory="device")`` (or the info key
``gpumpi_memory=device``) allocates device memory (CuPy on a GPU, the simulated
device under ``GPUMPI_DEVICE=sim``), and ``Win.Create`` of a device array exposes
it; ``tomemory()`` of a device window is a device array of bytes.  The memory
model is ``WIN_UNIFIED`` for every window (the origin's stores reach the target's
memory itself, and ``Flush``/``Sync`` order them).
"""

from __future__ import annotations

import ctypes
import operator
import os

import numpy as np

from .rma import local as _rma
from .rma import origin as _origin
from ._arrays import _DATA, _DT_BY_ID, _FLAGS
from ._buffers import _asdatatype, _extent_for, _is_integral, message_simple
from ._handles import Handle, Table, is_constant
from ._membuffer import buffer
from .constants import (BOTTOM, KEYVAL_INVALID, LOCK_EXCLUSIVE, LOCK_SHARED, MODE_NOCHECK, MODE_NOPRECEDE,
                        MODE_NOPUT, MODE_NOSTORE, MODE_NOSUCCEED, PROC_NULL, WIN_BASE, WIN_CREATE_FLAVOR,
                        WIN_DISP_UNIT, WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_CREATE, WIN_FLAVOR_DYNAMIC,
                        WIN_FLAVOR_SHARED, WIN_MODEL, WIN_SIZE, WIN_UNIFIED)
from .datatypes._core import _PREDEFINED as _PREDEFINED_TYPES
from .datatypes._core import Datatype
from .datatypes.plan import plan_for
from .errors import (ERR_ARG, ERR_ASSERT, ERR_OP, ERR_COMM, ERR_COUNT, ERR_DISP, ERR_ERRHANDLER, ERR_GROUP,
                     ERR_LOCKTYPE, ERR_RANK, ERR_RMA_FLAVOR, ERR_RMA_SHARED, ERR_RMA_SYNC, ERR_SIZE, ERR_TYPE, ERR_WIN, ERRORS_RETURN,
                     Errhandler, error)
from .errors import Exception as MPIException
from .group import Group
from .info import INFO_NULL, Info
from .keyval import WIN_FIRST, Kind
from .op import SUM, Op
from .request import Request, done_xfer

__all__ = ["Win", "WIN_NULL"]

_NULL_H = 0x20000000
_MODES = MODE_NOCHECK | MODE_NOSTORE | MODE_NOPUT | MODE_NOPRECEDE | MODE_NOSUCCEED
#: native scalar types read and written in place by the general Fetch_and_op path (one instruction)
_CTYPES = {np.dtype(t): c for t, c in ((np.int8, ctypes.c_int8), (np.int16, ctypes.c_int16), (np.int32, ctypes.c_int32),
                                       (np.int64, ctypes.c_int64), (np.uint8, ctypes.c_uint8),
                                       (np.uint16, ctypes.c_uint16), (np.uint32, ctypes.c_uint32),
                                       (np.uint64, ctypes.c_uint64), (np.float32, ctypes.c_float),
                                       (np.float64, ctypes.c_double), (np.bool_, ctypes.c_bool))}
_PREDEFINED = (WIN_BASE, WIN_SIZE, WIN_DISP_UNIT, WIN_CREATE_FLAVOR, WIN_MODEL)


class _State:
    """What every reference to one window shares."""

    __slots__ = ("h", "rt", "base", "size", "unit", "flavor", "name", "errh", "info", "attrs", "mem", "keep",
                 "freed", "ucomm", "near")

    def __init__(self) -> None:
        self.h = Win._htable.new()
        self.rt = None
        self.base = self.size = 0
        self.unit = 1
        self.flavor = WIN_FLAVOR_CREATE
        self.name = ""
        self.errh = ERRORS_RETURN
        self.info = None
        self.attrs: dict = {}
        self.mem = None  # what tomemory() returns for device windows (an array of bytes)
        self.keep = None  # the exposed memory's owner, kept alive
        self.freed = False
        self.ucomm = None
        self.near: dict = {}  # the runtime's Window.near once made: the near path's targets


def _wrap(win):
    ref = Win.__new__(Win)
    ref._st = win._st
    return ref


def _nullify(ref) -> None:
    ref._st = None


WIN_ATTRS = Kind("Win", WIN_FIRST, attrs_of=lambda w: w._st.attrs, wrap=_wrap, nullify=_nullify,
                 predefined=_PREDEFINED)


def _index(value, call: str, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{call}: {what} must be an integer ({type(value).__name__})") from None


def _spans_nodes(comm) -> bool:
    """Whether ``comm`` has members on several nodes (an MPI launcher's job): such a window is
    carried by the MPI library's RMA (:mod:`gpumpi._rmampi`) instead of the node's shared memory."""
    from . import _runtime as rt

    eng = rt.ENGINE
    return bool(eng is not None and eng.far and not eng.far.isdisjoint(comm._rw))


def _comm_arg(comm, call: str):
    from .comm import Comm, Intercomm

    if not isinstance(comm, Comm):
        raise TypeError(f"{call}: expecting an Intracomm (got {type(comm).__name__})")
    if comm._ctx < 0:
        raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
    if isinstance(comm, Intercomm) or comm._w != comm._rw:
        raise error(ERR_COMM, f"{call}: windows need an intracommunicator")
    return comm


def _info_dict(info, call: str):
    if info is None or info is INFO_NULL:
        return {}
    if not isinstance(info, Info):
        raise TypeError(f"{call}: info must be an Info ({type(info).__name__})")
    return dict(info.items()) if info else {}


def _done_request(win) -> Request:
    return Request._of(done_xfer())


class Win(Handle):
    """Remote memory access context (MPI_Win)."""

    __slots__ = ("_st", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("Win", -0x60000000)
    _attrkind = WIN_ATTRS

    def __init__(self, win: "Win | None" = None) -> None:
        if win is None:
            self._st = None
        elif not isinstance(win, Win):
            raise TypeError(f"{type(self).__name__}: expecting a Win (got {type(win).__name__})")
        else:
            self._st = win._st

    def _hval(self) -> int:
        st = self._st
        return _NULL_H if st is None else st.h

    def _hnullify(self) -> None:
        self._st = None

    def __repr__(self) -> str:
        st = self._st
        if st is None:
            return "<Win WIN_NULL>"
        return f"<Win {st.name or 'window'} flavor={st.flavor} size={st.size}{' freed' if st.freed else ''}>"

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(self.tomemory())

    # -- checks --------------------------------------------------------------------------------
    def _check(self, call: str) -> _State:
        st = self._st
        if st is None:
            raise error(ERR_WIN, f"{call}: invalid window (WIN_NULL)")
        if st.freed:
            raise error(ERR_WIN, f"{call}: window has been freed (through another reference)")
        return st

    def _raise(self, exc: MPIException):
        st = self._st
        if st is not None:
            st.errh._apply(self, exc)
        raise exc

    def _rank(self, st: _State, rank, call: str, what: str = "target rank") -> int:
        r = _index(rank, call, what)
        if r == PROC_NULL:
            return r
        if not 0 <= r < st.rt.size_n:
            raise error(ERR_RANK, f"{call}: invalid {what} ({r}, window group size {st.rt.size_n})")
        return r

    @staticmethod
    def _assertion(assertion, call: str) -> int:
        a = _index(assertion, call, "assertion")
        if a & ~_MODES:
            raise error(ERR_ASSERT, f"{call}: invalid assertion ({a:#x})")
        return a

    # -- creation ------------------------------------------------------------------------------
    @classmethod
    def _make(cls, comm, flavor: int, local, st: _State, call: str) -> "Win":
        W = None
        dup = comm.Dup()
        try:
            if _spans_nodes(comm):
                from .rma import mpi

                W = mpi.Window(dup, flavor)
            else:
                W = _rma.Window(dup, flavor)
            W.setup(local, call)
        except BaseException:
            if W is not None:
                W.close()
            dup.Free()
            raise
        st.rt = W
        st.near = W.near
        st.flavor = flavor
        st.ucomm = comm
        w = cls.__new__(cls)
        w._st = st
        cls._htable.add(w)
        return w

    @staticmethod
    def _unit(disp_unit, call: str) -> int:
        u = _index(disp_unit, call, "disp_unit")
        if u <= 0:
            raise error(ERR_DISP, f"{call}: disp_unit must be positive ({u})")
        return u

    @classmethod
    def Create(cls, memory, disp_unit: int = 1, info=INFO_NULL, comm=None) -> "Win":
        """Create a window of existing memory (MPI_Win_create): host or device memory, or
        ``BOTTOM``/None for none.  Collective over ``comm`` (default COMM_SELF)."""
        call = "Win.Create"
        comm = _comm_arg(_self() if comm is None else comm, call)
        unit = cls._unit(disp_unit, call)
        st = _State()
        st.info = _info_dict(info, call)
        st.unit = unit
        if memory is None or memory is BOTTOM:
            local = ("none", 0, unit, None)
        else:
            from ._arrays import as_buffer

            v = as_buffer(memory, False, call)
            st.base, st.size, st.keep = v.addr, v.nbytes, v.obj
            local = _describe(v, unit, call)
            if v.kind != "host":
                st.mem = _bytes_of(memory)
        return cls._make(comm, WIN_FLAVOR_CREATE, local, st, call)

    @classmethod
    def Allocate(cls, size: int, disp_unit: int = 1, info=INFO_NULL, comm=None, memory: str | None = None) -> "Win":
        """Create a window of new memory (MPI_Win_allocate): shared host memory, or device memory
        with ``memory="device"`` (or the info key ``gpumpi_memory=device``); gpumpi extension."""
        return cls._allocate(size, disp_unit, info, comm, memory, False, "Win.Allocate")

    @classmethod
    def Allocate_shared(cls, size: int, disp_unit: int = 1, info=INFO_NULL, comm=None) -> "Win":
        """Create a window of shared memory every member loads and stores directly
        (MPI_Win_allocate_shared): one contiguous segment, rank order; see :meth:`Shared_query`."""
        return cls._allocate(size, disp_unit, info, comm, None, True, "Win.Allocate_shared")

    @classmethod
    def _allocate(cls, size, disp_unit, info, comm, memory, shared: bool, call: str) -> "Win":
        from . import _memfd

        comm = _comm_arg(_self() if comm is None else comm, call)
        n = _index(size, call, "size")
        if n < 0:
            raise error(ERR_SIZE, f"{call}: negative size ({n})")
        unit = cls._unit(disp_unit, call)
        st = _State()
        st.info = _info_dict(info, call)
        st.unit = unit
        kind = memory if memory is not None else st.info.get("gpumpi_memory", "host")
        if kind not in ("host", "device"):
            raise ValueError(f"{call}: memory must be 'host' or 'device' ({kind!r})")
        if shared and kind != "host":
            raise error(ERR_ARG, f"{call}: shared windows are host memory")
        if shared and _spans_nodes(comm):
            from . import _runtime as rt

            nodes = sorted({rt.node_of(r) for r in comm._rw})
            raise error(ERR_RMA_SHARED, f"{call}: the members of a shared window must share memory, and this "
                                        f"communicator's are on several nodes ({nodes}); use "
                                        f"Split_type(COMM_TYPE_SHARED)")
        if kind == "device":
            arr = _device_array(n, call)
            from ._arrays import as_buffer

            v = as_buffer(arr, False, call)
            st.base, st.size, st.mem, st.keep = v.addr, n, arr, arr
            local = _describe(v, unit, call) if n else ("none", 0, unit, None)
            return cls._make(comm, WIN_FLAVOR_ALLOCATE, local, st, call)
        if not shared:
            length = _memfd.round_pages(n)
            fd, addr = _memfd.create_mapped(call, "gpumpi-win", length)
            st.base, st.size = addr, n
            try:
                w = cls._make(comm, WIN_FLAVOR_ALLOCATE, ("shm", n, unit, (fd, 0, length, addr)), st, call)
            except BaseException:
                _memfd.unmap(addr, length)
                raise
            finally:
                os.close(fd)
            w._st.rt.maps.append((addr, length))
            return w
        # shared: one segment made by the lowest rank, in rank order, mapped by all
        sizes = comm.allgather(n)
        total = _memfd.round_pages(sum(sizes))
        offs = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist() if sizes else [0]
        if comm._rank == 0:
            fd, addr = _memfd.create_mapped(call, "gpumpi-win-shared", total)
            desc = (os.getpid(), fd)
        else:
            fd = addr = None
            desc = None
        pid, rfd = comm.bcast(desc, 0)
        try:
            if comm._rank != 0:
                mine = _memfd.open_peer(pid, rfd)
                try:
                    addr = _memfd.map_shared(call, total, mine)
                finally:
                    os.close(mine)
            comm.Barrier()
        finally:
            if fd is not None:
                os.close(fd)
        base = addr + offs[comm._rank]
        st.base, st.size = base, n
        # every member's memory is the same file: peers reach it through their own mapping
        local = ("shm-shared", n, unit, (addr, offs))
        try:
            w = cls._make(comm, WIN_FLAVOR_SHARED, local, st, call)
        except BaseException:
            _memfd.unmap(addr, total)
            raise
        w._st.rt.maps.append((addr, total))
        return w

    @classmethod
    def Create_dynamic(cls, info=INFO_NULL, comm=None) -> "Win":
        """Create a window to which memory is attached later (MPI_Win_create_dynamic); target
        displacements are absolute addresses (``MPI.Get_address``)."""
        call = "Win.Create_dynamic"
        comm = _comm_arg(_self() if comm is None else comm, call)
        st = _State()
        st.info = _info_dict(info, call)
        return cls._make(comm, WIN_FLAVOR_DYNAMIC, ("dyn", 0, 1, None), st, call)

    def Attach(self, memory) -> None:
        """Attach memory to a dynamic window (MPI_Win_attach)."""
        call = "Win.Attach"
        st = self._check(call)
        if st.flavor != WIN_FLAVOR_DYNAMIC:
            raise error(ERR_RMA_FLAVOR, f"{call}: only dynamic windows take attached memory (flavor {st.flavor})")
        from ._arrays import as_buffer

        v = as_buffer(memory, False, call)
        if v.kind != "host":
            raise NotImplementedError(f"{call}: gpumpi attaches host memory only to dynamic windows "
                                      f"({v.kind} memory given); expose device memory with Win.Create")
        if v.nbytes:
            st.rt.attach(v.addr, v.nbytes, call)

    def Detach(self, memory) -> None:
        """Detach memory from a dynamic window (MPI_Win_detach)."""
        call = "Win.Detach"
        st = self._check(call)
        if st.flavor != WIN_FLAVOR_DYNAMIC:
            raise error(ERR_RMA_FLAVOR, f"{call}: only dynamic windows have attached memory (flavor {st.flavor})")
        from ._arrays import as_buffer

        v = as_buffer(memory, True, call)
        if v.nbytes:
            st.rt.detach(v.addr, call)

    def Free(self) -> None:
        """Free the window (MPI_Win_free); collective.  Attributes are deleted first."""
        call = "Win.Free"
        st = self._check(call)
        W = st.rt
        W.epochs.free(call)
        from .keyval import on_free

        on_free(self)
        W.comm.Barrier()  # every member is done with every other member's memory
        W.close()
        W.comm.Free()
        st.freed = True
        st.keep = st.mem = None
        self._st = None

    # -- queries -------------------------------------------------------------------------------
    def Get_group(self) -> Group:
        """The group of the window's communicator (MPI_Win_get_group)."""
        st = self._check("Win.Get_group")
        c = st.rt.comm
        return Group._of(c._rw, c._rw[c._rank])

    @property
    def group(self) -> Group:
        """Group of the window."""
        return self.Get_group()

    @property
    def group_size(self) -> int:
        """Size of the window's group."""
        return self._check("Win.group_size").rt.size_n

    @property
    def group_rank(self) -> int:
        """Rank of this process in the window's group."""
        return self._check("Win.group_rank").rt.me

    def Set_info(self, info: Info) -> None:
        """Set the window's info hints (MPI_Win_set_info); kept and reported back."""
        call = "Win.Set_info"
        st = self._check(call)
        if not isinstance(info, Info):
            raise TypeError(f"{call}: info must be an Info ({type(info).__name__})")
        st.info = _info_dict(info, call)

    def Get_info(self) -> Info:
        """A new Info with the window's hints (MPI_Win_get_info)."""
        st = self._check("Win.Get_info")
        return Info.Create(st.info or None)

    info = property(Get_info, Set_info, doc="Info hints")

    def Get_name(self) -> str:
        """The window's name (MPI_Win_get_name)."""
        st = self._st
        if st is None:
            return "MPI_WIN_NULL"
        return st.name

    def Set_name(self, name: str) -> None:
        """Set the window's name (MPI_Win_set_name)."""
        self._check("Win.Set_name").name = str(name)

    name = property(Get_name, Set_name, doc="Print name")

    def _predefined_attr(self, keyval: int):
        st = self._st
        if keyval == WIN_BASE:
            return st.base if st.flavor != WIN_FLAVOR_DYNAMIC else 0
        if keyval == WIN_SIZE:
            return st.size
        if keyval == WIN_DISP_UNIT:
            return st.unit
        if keyval == WIN_CREATE_FLAVOR:
            return st.flavor
        if keyval == WIN_MODEL:
            return WIN_UNIFIED
        raise error(ERR_ARG, f"Win.Get_attr: unknown predefined keyval ({keyval})")  # pragma: no cover

    def Get_attr(self, keyval: int):
        """An attribute's value (MPI_Win_get_attr): ``WIN_BASE``, ``WIN_SIZE``,
        ``WIN_DISP_UNIT``, ``WIN_CREATE_FLAVOR``, ``WIN_MODEL``, or a user keyval's (None if unset)."""
        try:
            self._check("Win.Get_attr")
            return WIN_ATTRS.get_attr(self, keyval, self._predefined_attr)
        except MPIException as e:
            self._raise(e)

    def Set_attr(self, keyval: int, attrval) -> None:
        """Store an attribute value (MPI_Win_set_attr)."""
        try:
            self._check("Win.Set_attr")
            WIN_ATTRS.set_attr(self, keyval, attrval)
        except MPIException as e:
            self._raise(e)

    def Delete_attr(self, keyval: int) -> None:
        """Delete an attribute value (MPI_Win_delete_attr)."""
        call = "Win.Delete_attr"
        try:
            self._check(call)
            WIN_ATTRS.deletable(keyval, call)
        except MPIException as e:
            self._raise(e)
        WIN_ATTRS.delete_attr(self, keyval)

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython: bool = False) -> int:
        """Create an attribute key for windows (MPI_Win_create_keyval); windows are never
        duplicated, so ``copy_fn`` is kept and never called."""
        return WIN_ATTRS.create_keyval(copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free an attribute key for windows (MPI_Win_free_keyval); returns KEYVAL_INVALID."""
        WIN_ATTRS.free_keyval(keyval)
        return KEYVAL_INVALID

    @property
    def attrs(self) -> tuple[int, int, int]:
        """``(base, size, disp_unit)``."""
        st = self._check("Win.attrs")
        return (st.base if st.flavor != WIN_FLAVOR_DYNAMIC else 0, st.size, st.unit)

    @property
    def flavor(self) -> int:
        """Create flavor."""
        return self._check("Win.flavor").flavor

    @property
    def model(self) -> int:
        """Memory model (always ``WIN_UNIFIED``)."""
        self._check("Win.model")
        return WIN_UNIFIED

    def tomemory(self):
        """The window's local memory: an ``MPI.buffer`` (host), or the device array of bytes."""
        st = self._check("Win.tomemory")
        if st.mem is not None:
            return st.mem
        if st.flavor == WIN_FLAVOR_DYNAMIC or not st.size:
            return buffer._make(None, st.base if st.flavor != WIN_FLAVOR_DYNAMIC else 0, 0, False, "host", None)
        return buffer._make(st.keep, st.base, st.size, False, "host", (self._st, st.keep))

    def Shared_query(self, rank: int) -> tuple:
        """Query the process-local address of a member's memory (MPI_Win_shared_query).

        Returns ``(buffer, disp_unit)``; ``PROC_NULL``: the lowest rank with memory.  Memory this
        process cannot address (private memory of another process, device memory) comes back empty."""
        call = "Win.Shared_query"
        st = self._check(call)
        if st.flavor == WIN_FLAVOR_DYNAMIC:
            raise error(ERR_RMA_FLAVOR, f"{call}: a dynamic window has no memory to share")
        W = st.rt
        r = self._rank(st, rank, call, "rank")
        if r == PROC_NULL:
            r = next((g.rank for g in W.regions if g.size), 0)
        g = W.regions[r]
        if g.rank == W.me:
            return self.tomemory(), g.unit
        if g.mode != "direct" or not g.size:
            return buffer._make(None, 0, 0, False, "host", None), g.unit
        return buffer._make(None, g.base, g.size, False, "host", self._st), g.unit

    # -- error handling ------------------------------------------------------------------------
    def Get_errhandler(self) -> Errhandler:
        """A new reference to the window's error handler (MPI_Win_get_errhandler)."""
        return Errhandler(self._check("Win.Get_errhandler").errh)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the window's error handler (MPI_Win_set_errhandler)."""
        call = "Win.Set_errhandler"
        st = self._check(call)
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler (got {type(errhandler).__name__})")
        if not errhandler:
            raise error(ERR_ERRHANDLER, f"{call}: null error handler ({errhandler!r})")
        st.errh = Errhandler(errhandler)

    @classmethod
    def Create_errhandler(cls, errhandler_fn) -> Errhandler:
        """Create a window error handler ``fn(win, errorcode)`` (MPI_Win_create_errhandler)."""
        return Errhandler._user(errhandler_fn, "Win", "Win.Create_errhandler")

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the window's error handler (MPI_Win_call_errhandler)."""
        st = self._check("Win.Call_errhandler")
        st.errh.call(self, _index(errorcode, "Win.Call_errhandler", "errorcode"))

    # -- operations ----------------------------------------------------------------------------
    def _target(self, target, msg, call: str):
        """Parse mpi4py's target spec into ``(disp, count, datatype)``."""
        ocount, otype = (msg.count, msg.datatype) if msg is not None else (0, None)
        if target is None:
            disp, count, dtype = 0, ocount, otype
        elif _is_integral(target):
            disp, count, dtype = operator.index(target), ocount, otype
        elif isinstance(target, (list, tuple)):
            if len(target) > 3:
                raise ValueError(f"{call}: target: expecting 3 items at most")
            disp = operator.index(target[0]) if len(target) >= 1 else 0
            count = operator.index(target[1]) if len(target) >= 2 else ocount
            dtype = _asdatatype(target[2], call) if len(target) >= 3 else otype
        else:
            raise ValueError(f"{call}: target: expecting integral or list/tuple")
        if count < 0:
            raise error(ERR_COUNT, f"{call}: negative target count ({count})")
        if dtype is None:
            raise error(ERR_TYPE, f"{call}: target datatype is null")
        if count:
            _extent_for(dtype, "use it as target datatype", call)
        return disp, count, dtype

    def _prep(self, call: str, origin, target_rank, target, readonly: bool):
        st = self._check(call)
        r = self._rank(st, target_rank, call)
        msg = message_simple(origin, readonly, r, 1, call)
        if r == PROC_NULL:
            return st, r, None, None, None, None
        disp, count, ttype = self._target(target, msg, call)
        plan = plan_for(ttype, count)
        W = st.rt
        W.epochs.operation(r, call)
        if r in W.pending_post:
            W.await_post(r, call)
        g, addr = W.target(r, disp, plan, call)
        return st, r, msg, ttype, plan, (g, addr)

    def Put(self, origin, target_rank: int, target=None) -> None:
        """Put data into a memory window on a remote process (MPI_Put)."""
        st = self._st
        if st is not None and type(target_rank) is int and (target is None or type(target) is int):
            t = st.near.get(target_rank)
            if t is not None:  # the near path: a contiguous array, its bytes at the displacement
                a, at = _spec(origin)
                if type(a) is _NDARRAY:
                    dt = _NPS.get(id(at))
                    if dt is None:
                        dt = _np_near(at)
                    n = a.nbytes
                    off = 0 if target is None else target * t[1]
                    i = id(a) >> 3
                    if a.dtype is dt and _FLAGS[i] & 3 and 0 < n and 0 <= off <= t[2] - n:
                        (_RAW or _raw())[0][0](t[0] + off, _DATA[i], n)
                        return
        call = "Win.Put"
        try:
            st, r, msg, ttype, plan, ga = self._prep(call, origin, target_rank, target, True)
            if r == PROC_NULL:
                return
            _same_size(msg.nbytes, plan.nbytes, call)
            _origin.check_signatures(msg.datatype, ttype, call)
            g = ga[0]
            if plan.kind == "contig" and msg.contiguous and msg.kind == "host" and g.mode == "direct":
                if plan.nbytes:
                    ctypes.memmove(ga[1] + plan.lo, msg.addr + msg.lo, plan.nbytes)  # one copy, no array made
                return
            st.rt.write(g, ga[1], plan, _origin.origin_packed(msg), call)
        except MPIException as e:
            self._raise(e)

    def Get(self, origin, target_rank: int, target=None) -> None:
        """Get data from a memory window on a remote process (MPI_Get)."""
        st = self._st
        if st is not None and type(target_rank) is int and (target is None or type(target) is int):
            t = st.near.get(target_rank)
            if t is not None:  # the near path, as Put's
                a, at = _spec(origin)
                if type(a) is _NDARRAY:
                    dt = _NPS.get(id(at))
                    if dt is None:
                        dt = _np_near(at)
                    n = a.nbytes
                    off = 0 if target is None else target * t[1]
                    i = id(a) >> 3
                    if a.dtype is dt and _FLAGS[i] & 3 and _FLAGS[i] & 0x400 and 0 < n and 0 <= off <= t[2] - n:
                        (_RAW or _raw())[0][0](_DATA[i], t[0] + off, n)
                        return
        call = "Win.Get"
        try:
            st, r, msg, ttype, plan, ga = self._prep(call, origin, target_rank, target, False)
            if r == PROC_NULL:
                return
            _same_size(msg.nbytes, plan.nbytes, call)
            _origin.check_signatures(msg.datatype, ttype, call)
            g = ga[0]
            if plan.kind == "contig" and msg.contiguous and msg.kind == "host" and g.mode == "direct":
                if plan.nbytes:
                    ctypes.memmove(msg.addr + msg.lo, ga[1] + plan.lo, plan.nbytes)
                return
            _origin.origin_unpack(msg, st.rt.read(g, ga[1], plan, call), plan.nbytes)
        except MPIException as e:
            self._raise(e)

    def Accumulate(self, origin, target_rank: int, target=None, op: Op = SUM) -> None:
        """Accumulate data into the target process (MPI_Accumulate); element-wise atomic."""
        st = self._st
        if st is not None and type(target_rank) is int and (target is None or type(target) is int):
            t = st.near.get(target_rank)
            if t is not None and _acc_near(t, origin, target, op):  # the near path (see _spec)
                return
        call = "Win.Accumulate"
        try:
            st, r, msg, ttype, plan, ga = self._prep(call, origin, target_rank, target, True)
            if r == PROC_NULL:
                if not isinstance(op, Op):
                    raise TypeError(f"{call}: expecting an Op (got {type(op).__name__})")
                return
            if isinstance(op, Op) and op._name == "NO_OP" and op._rec is None:
                raise error(ERR_OP, f"{call}: MPI_NO_OP is for Get_accumulate and Fetch_and_op only")
            if not plan.nbytes and not msg.nbytes:
                if not isinstance(op, Op):
                    raise TypeError(f"{call}: expecting an Op (got {type(op).__name__})")
                return
            red, dtype = _origin.check_acc_types(msg.datatype, ttype, op, call)
            _same_size(msg.nbytes, plan.nbytes, call)
            st.rt.accumulate(ga[0], ga[1], plan, red, dtype, _origin.origin_packed(msg), op._name, False, call)
        except MPIException as e:
            self._raise(e)

    def Get_accumulate(self, origin, result, target_rank: int, target=None, op: Op = SUM) -> None:
        """Fetch the target's data, then accumulate into it, atomically (MPI_Get_accumulate)."""
        call = "Win.Get_accumulate"
        try:
            st, r, msg, ttype, plan, ga = self._prep(call, origin, target_rank, target, True)
            res = message_simple(result, False, r, 1, call)
            if r == PROC_NULL:
                return
            if not plan.nbytes:
                if not isinstance(op, Op):
                    raise TypeError(f"{call}: expecting an Op (got {type(op).__name__})")
                return
            red, dtype = _origin.check_acc_types(msg.datatype, ttype, op, call)
            if op._name != "NO_OP":
                _same_size(msg.nbytes, plan.nbytes, call)
                packed = _origin.origin_packed(msg)
            else:
                packed = np.zeros(plan.nbytes, np.uint8)
            _same_size(res.nbytes, plan.nbytes, call, "result")
            _origin.check_signatures(res.datatype, ttype, call, "result")
            old = st.rt.accumulate(ga[0], ga[1], plan, red, dtype, packed, op._name, True, call)
            _origin.origin_unpack(res, old, plan.nbytes)
        except MPIException as e:
            self._raise(e)

    def Fetch_and_op(self, origin, result, target_rank: int, target_disp: int = 0, op: Op = SUM) -> None:
        """Fetch one element and apply an operation to it, atomically (MPI_Fetch_and_op)."""
        st = self._st
        if st is not None and type(target_rank) is int is type(target_disp):
            t = st.near.get(target_rank)
            if t is not None:  # the near path (see _spec): one call, the result written by it
                o, ot = origin if type(origin) is list and len(origin) == 2 else _spec(origin)
                r, rt = result if type(result) is list and len(result) == 2 else _spec(result)
                lop, lT, lt, fn, code, dt, base, unit, top = _FOP_LAST
                if lop is op and lT is ot and lt is t and rt is ot:  # as the last call: checked then
                    if (type(o) is _NDARRAY is type(r) and o.dtype is dt is r.dtype and 0 <= target_disp <= top
                            and not fn(base + target_disp * unit, id(o), id(r), code)):
                        return
                elif ot is rt and _fop_near(t, o, r, target_disp, op, ot):
                    return
        call = "Win.Fetch_and_op"
        try:
            st = self._check(call)
            r = self._rank(st, target_rank, call)
            msg = message_simple(origin, True, r, 1, call)
            res = message_simple(result, False, r, 1, call)
            disp = _index(target_disp, call, "target_disp")
            if r == PROC_NULL:
                return
            _single(msg, res, None, call)
            ttype = msg.datatype
            red, dtype = _origin.check_acc_types(ttype, ttype, op, call)
            W = st.rt
            W.epochs.operation(r, call)
            if r in W.pending_post:
                W.await_post(r, call)
            plan = plan_for(ttype, 1)
            g, addr = W.target(r, disp, plan, call)
            if g.atomic and dtype is not None and res.kind == "host" and msg.kind == "host":
                ct = _CTYPES.get(dtype) if ttype._size == dtype.itemsize else None
                A = _rma.atomics()
                if ct is not None and A.supported(op._name, dtype) and not (addr + plan.lo) % dtype.itemsize:
                    # one instruction, no array made (a misaligned element takes the accumulate lock below)
                    old = A.fetch_and_op(addr + plan.lo, ct.from_address(msg.addr + msg.lo).value, op._name, dtype)
                    ct.from_address(res.addr + res.lo).value = old
                    return
            old = W.accumulate(g, addr, plan, red, dtype, _origin.origin_packed(msg), op._name, True, call)
            _origin.origin_unpack(res, old, plan.nbytes)
        except MPIException as e:
            self._raise(e)

    def Compare_and_swap(self, origin, compare, result, target_rank: int, target_disp: int = 0) -> None:
        """Replace one element with ``origin`` if it equals ``compare``, returning the old value
        in ``result``, atomically (MPI_Compare_and_swap)."""
        st = self._st
        if st is not None and type(target_rank) is int is type(target_disp):
            t = st.near.get(target_rank)
            if t is not None:  # the near path, as Fetch_and_op's
                o, ot = origin if type(origin) is list and len(origin) == 2 else _spec(origin)
                c, ct = compare if type(compare) is list and len(compare) == 2 else _spec(compare)
                r, rt = result if type(result) is list and len(result) == 2 else _spec(result)
                lT, lt, fn, dt, base, unit, top = _CAS_LAST
                if lT is ot and lt is t and ct is ot and rt is ot:
                    if (type(o) is _NDARRAY is type(c) and type(r) is _NDARRAY and o.dtype is dt is c.dtype
                            and r.dtype is dt and 0 <= target_disp <= top
                            and not fn(base + target_disp * unit, id(o), id(c), id(r))):
                        return
                elif ot is ct is rt and _cas_near(t, o, c, r, target_disp, ot):
                    return
        call = "Win.Compare_and_swap"
        try:
            st = self._check(call)
            r = self._rank(st, target_rank, call)
            msg = message_simple(origin, True, r, 1, call)
            cmp = message_simple(compare, True, r, 1, call)
            res = message_simple(result, False, r, 1, call)
            disp = _index(target_disp, call, "target_disp")
            if r == PROC_NULL:
                return
            _single(msg, res, cmp, call)
            ttype = msg.datatype
            dtype = _cas_dtype(ttype, call)
            W = st.rt
            W.epochs.operation(r, call)
            if r in W.pending_post:
                W.await_post(r, call)
            plan = plan_for(ttype, 1)
            g, addr = W.target(r, disp, plan, call)
            old = W.compare_and_swap(g, addr + plan.lo, dtype, np.array(_origin.origin_packed(msg)),
                                     np.array(_origin.origin_packed(cmp)), call)
            _origin.origin_unpack(res, old, plan.nbytes)
        except MPIException as e:
            self._raise(e)

    def Rput(self, origin, target_rank: int, target=None) -> Request:
        """Put, returning a request (MPI_Rput); the data is in place when the call returns."""
        self._passive(target_rank, "Win.Rput")
        self.Put(origin, target_rank, target)
        return _done_request(self)

    def Rget(self, origin, target_rank: int, target=None) -> Request:
        """Get, returning a request (MPI_Rget)."""
        self._passive(target_rank, "Win.Rget")
        self.Get(origin, target_rank, target)
        return _done_request(self)

    def Raccumulate(self, origin, target_rank: int, target=None, op: Op = SUM) -> Request:
        """Accumulate, returning a request (MPI_Raccumulate)."""
        self._passive(target_rank, "Win.Raccumulate")
        self.Accumulate(origin, target_rank, target, op)
        return _done_request(self)

    def Rget_accumulate(self, origin, result, target_rank: int, target=None, op: Op = SUM) -> Request:
        """Get_accumulate, returning a request (MPI_Rget_accumulate)."""
        self._passive(target_rank, "Win.Rget_accumulate")
        self.Get_accumulate(origin, result, target_rank, target, op)
        return _done_request(self)

    def _passive(self, rank, call: str) -> None:
        """Request-based operations belong to passive target epochs (MPI-4.1 section 12.3.5)."""
        st = self._st
        if st is None or st.freed or rank == PROC_NULL:
            return  # the operation itself reports a null or freed window
        a = st.rt.epochs.access
        if a not in ("lock", "lock_all"):
            self._raise(error(ERR_RMA_SYNC, f"{call}: request-based operations need a passive target epoch "
                                            f"(Lock or Lock_all; the access epoch is {st.rt.epochs.describe()})"))

    # -- synchronization -----------------------------------------------------------------------
    def Fence(self, assertion: int = 0) -> None:
        """Close and open an active target epoch on every member (MPI_Win_fence); collective."""
        call = "Win.Fence"
        try:
            st = self._check(call)
            st.rt.fence(self._assertion(assertion, call), call)
        except MPIException as e:
            self._raise(e)

    def _group_ranks(self, st: _State, group, call: str) -> list:
        if not isinstance(group, Group):
            raise TypeError(f"{call}: expecting a Group (got {type(group).__name__})")
        group._check(call)
        W = st.rt
        out = []
        for w in group._ranks:
            try:
                out.append(W.rw.index(w))
            except ValueError:
                raise error(ERR_GROUP, f"{call}: group member (world rank {w}) is not in the window's group") from None
        return out

    def Start(self, group: Group, assertion: int = 0) -> None:
        """Start an access epoch to the members of ``group`` (MPI_Win_start)."""
        call = "Win.Start"
        try:
            st = self._check(call)
            a = self._assertion(assertion, call)
            st.rt.start(self._group_ranks(st, group, call), a, call)
        except MPIException as e:
            self._raise(e)

    def Complete(self) -> None:
        """Complete the access epoch started by Start (MPI_Win_complete)."""
        call = "Win.Complete"
        try:
            self._check(call).rt.complete(call)
        except MPIException as e:
            self._raise(e)

    def Post(self, group: Group, assertion: int = 0) -> None:
        """Start an exposure epoch for the members of ``group`` (MPI_Win_post)."""
        call = "Win.Post"
        try:
            st = self._check(call)
            a = self._assertion(assertion, call)
            st.rt.post(self._group_ranks(st, group, call), a, call)
        except MPIException as e:
            self._raise(e)

    def Wait(self) -> bool:
        """Complete the exposure epoch started by Post (MPI_Win_wait)."""
        call = "Win.Wait"
        try:
            self._check(call).rt.wait(call)
            return True
        except MPIException as e:
            self._raise(e)

    def Test(self) -> bool:
        """Whether the exposure epoch started by Post has completed (MPI_Win_test)."""
        call = "Win.Test"
        try:
            return self._check(call).rt.test(call)
        except MPIException as e:
            self._raise(e)

    def Lock(self, rank: int, lock_type: int = LOCK_EXCLUSIVE, assertion: int = 0) -> None:
        """Start a passive target epoch on ``rank`` (MPI_Win_lock)."""
        call = "Win.Lock"
        try:
            st = self._check(call)
            r = self._rank(st, rank, call, "rank")
            lt = _index(lock_type, call, "lock_type")
            if lt not in (LOCK_EXCLUSIVE, LOCK_SHARED):
                raise error(ERR_LOCKTYPE, f"{call}: invalid lock type ({lt})")
            a = self._assertion(assertion, call)
            if r == PROC_NULL:
                return
            st.rt.lock(r, lt, a, call)
        except MPIException as e:
            self._raise(e)

    def Unlock(self, rank: int) -> None:
        """Complete the passive target epoch on ``rank`` (MPI_Win_unlock)."""
        call = "Win.Unlock"
        try:
            st = self._check(call)
            r = self._rank(st, rank, call, "rank")
            if r == PROC_NULL:
                return
            st.rt.unlock(r, call)
        except MPIException as e:
            self._raise(e)

    def Lock_all(self, assertion: int = 0) -> None:
        """Start a shared passive target epoch on every member (MPI_Win_lock_all)."""
        call = "Win.Lock_all"
        try:
            st = self._check(call)
            st.rt.lock_all(self._assertion(assertion, call), call)
        except MPIException as e:
            self._raise(e)

    def Unlock_all(self) -> None:
        """Complete the epoch started by Lock_all (MPI_Win_unlock_all)."""
        call = "Win.Unlock_all"
        try:
            self._check(call).rt.unlock_all(call)
        except MPIException as e:
            self._raise(e)

    def _flush(self, rank, call: str) -> None:
        st = self._st
        if st is not None and type(rank) is int and not st.freed:  # the common case: a barrier, no checks to fail
            W = st.rt
            ep = W.epochs
            a = ep.access
            if (a == "lock_all" or (a == "lock" and rank in ep.locks)) and W.device_stream is None and not W.far:
                (_RAW or _raw())[0][1]()
                return
        try:
            st = self._check(call)
            r = None if rank is None else self._rank(st, rank, call, "rank")
            if r == PROC_NULL:
                return
            st.rt.flush(r, call)
        except MPIException as e:
            self._raise(e)

    def Flush(self, rank: int) -> None:
        """Complete the operations to ``rank`` at origin and target (MPI_Win_flush)."""
        st = self._st
        if st is not None and type(rank) is int and rank in st.near:  # a memory barrier orders them
            (_RAW or _raw())[0][1]()
            return
        self._flush(rank, "Win.Flush")

    def Flush_all(self) -> None:
        """Complete all operations at origin and targets (MPI_Win_flush_all)."""
        self._flush(None, "Win.Flush_all")

    def Flush_local(self, rank: int) -> None:
        """Complete the operations to ``rank`` at the origin (MPI_Win_flush_local)."""
        st = self._st
        if st is not None and type(rank) is int and rank in st.near:
            return  # operations on mapped memory are complete at the origin when issued
        self._flush(rank, "Win.Flush_local")

    def Flush_local_all(self) -> None:
        """Complete all operations at the origin (MPI_Win_flush_local_all)."""
        self._flush(None, "Win.Flush_local_all")

    def Sync(self) -> None:
        """Synchronize the public and private copies of the window (MPI_Win_sync): a memory barrier."""
        self._check("Win.Sync").rt.sync()


# -- the near path: one element or a few bytes to a locked target whose memory is mapped here --------
#
# ``st.near`` (the runtime's ``Window.near``) holds ``(base, disp_unit, size)`` of every target that
# the open passive target epoch includes and whose window memory this process maps (kept by
# ``_rma.Window._admit`` whenever a lock epoch changes).  For such a target no epoch check can
# fail and every operation completes when issued, so an operation whose arguments are the
# simple kind (NumPy arrays, ``[array, T]`` with ``T`` the predefined type of the elements,
# int rank and displacement, inside the window, aligned) is one call into machine code with
# int arguments (:func:`gpumpi.kernels.atomics.fop_ndarray`, ``cas_ndarray``, ``raw``), which
# also checks the arrays' headers and writes the fetched element into the result array.  Anything
# else, errors included, falls through to the general path, which checks and reports exactly as
# before.  The caches below are keyed by the identity of module constants (immortal), so an id is
# never reused; _FOP_LAST/_CAS_LAST hold what they name, so neither is theirs.

_NDARRAY = np.ndarray
_NONE2 = (None, None)
#: (id(op), id(datatype)) -> (compiled fop_ndarray, op code, element size, dtype, align mask) or False
_FOPS: dict = {}
#: id(datatype) -> (compiled cas_ndarray, element size, dtype, align mask) or False
_CASS: dict = {}
#: (id(op), id(datatype)) -> (compiled acc_ndarray, op code, element size, dtype, align mask) or False
_ACCS: dict = {}
#: id(datatype) -> the NumPy dtype of a predefined type's elements, or False
_NPS: dict = {}
_RAW: list = []  # [(move, fence)]: gpumpi.kernels.atomics.raw(), once needed
_NOTHING = object()
#: the last near Fetch_and_op: (op, datatype, near target tuple, compiled fop_ndarray, op code, dtype,
#: base, disp_unit, highest displacement): the next call with the same op, type and target (the same
#: tuple: a new epoch makes new ones) checks only its arrays and displacement
_FOP_LAST: tuple = (_NOTHING,) * 9
#: the last near Compare_and_swap: (datatype, near target tuple, compiled cas_ndarray, dtype, base,
#: disp_unit, highest displacement)
_CAS_LAST: tuple = (_NOTHING,) * 7


def _raw() -> list:
    """:data:`_RAW`, filled on first use (which compiles)."""
    if not _RAW:
        _RAW.append(_rma.atomics().raw())
    return _RAW


def _spec(spec):
    """``(array, datatype)`` of a near-path buffer spec: an ndarray (and the datatype of its
    dtype, when known) or a 2-item ``[buffer, datatype]``, unchecked; ``(None, None)`` otherwise."""
    tp = type(spec)
    if tp is _NDARRAY:
        return spec, _DT_BY_ID.get(id(spec.dtype))
    if (tp is list or tp is tuple) and len(spec) == 2:
        return spec
    return _NONE2


def _np_near(T):
    """The NumPy dtype of the elements of ``T`` when it is a predefined module constant (never
    freed nor nullified), else False (cached for those constants)."""
    if not isinstance(T, Datatype) or _PREDEFINED_TYPES.get(T._handle) is not T:
        return False
    dt = False
    if T._basic is T:
        try:
            dt = np.dtype(T.np)
        except Exception:
            dt = False
    _NPS[id(T)] = dt
    return dt


def _near_dtype(T):
    """:func:`_np_near` through :data:`_NPS`: the dtype, False (a predefined constant without
    one), or None (no predefined constant: nothing may be cached under its id)."""
    dt = _NPS.get(id(T))
    if dt is None:
        dt = _np_near(T)
        if dt is False and id(T) not in _NPS:
            return None
    return dt


def _op_entry(cache: dict, op, T, call: str, maker: str, no_op: bool):
    """The near path's entry for an atomic ``op`` (``no_op``: NO_OP too) on elements of ``T``:
    ``(compiled atomics.<maker>, op code, element size, dtype, align mask)``, or False;
    remembered in ``cache`` under the two (immortal) objects' ids."""
    if not is_constant(op):
        return False
    dt = _near_dtype(T)
    if dt is None:
        return False  # not a predefined constant: nothing cached under its id
    e = False
    A = _rma.atomics()
    if (dt and dt.kind in "iuf" and isinstance(op, Op) and op._rec is None and (no_op or op._name != "NO_OP")
            and A.ndarray_layout() and A.supported(op._name, dt)):
        try:
            _origin.check_acc_types(T, T, op, call)  # MPI defines the op for the type
        except MPIException:
            pass
        else:
            fn, code, mask = getattr(A, maker)(op._name, dt)
            e = (fn, code, dt.itemsize, dt, mask)
    cache[(id(op), id(T))] = e
    return e


def _fop_entry(op, T):
    """The near path's entry for Fetch_and_op with ``op`` on elements of ``T`` (:func:`_op_entry`)."""
    return _op_entry(_FOPS, op, T, "Win.Fetch_and_op", "fop_ndarray", True)


def _fop_near(t, o, r, disp, op, T) -> bool:
    """Fetch_and_op on the near path (target ``t`` of ``Window.near``), remembered in
    :data:`_FOP_LAST` for the next call; False (nothing done) where it does not apply."""
    global _FOP_LAST
    e = _FOPS.get((id(op), id(T)))
    if e is None:
        e = _fop_entry(op, T)
    if not (e and type(o) is _NDARRAY is type(r) and o.dtype is e[3] is r.dtype):
        return False
    base, unit, size = t
    off = disp * unit
    if not (0 <= off <= size - e[2] and not (base + off) & e[4]) or e[0](base + off, id(o), id(r), e[1]):
        return False
    if not (base | unit) & e[4]:  # every displacement is aligned: the range is all there is to check
        _FOP_LAST = (op, T, t, e[0], e[1], e[3], base, unit, (size - e[2]) // unit)
    return True


def _acc_entry(op, T):
    """The near path's entry for Accumulate with ``op`` on elements of ``T`` (:func:`_op_entry`;
    not ``NO_OP``, which Accumulate refuses: the general path raises)."""
    return _op_entry(_ACCS, op, T, "Win.Accumulate", "acc_ndarray", False)


def _acc_near(t, origin, target, op) -> bool:
    """Accumulate on the near path (target ``t`` of ``Window.near``): the origin a contiguous
    array of the type's elements (bare, or ``[array, T]``) inside the window at ``target``
    (displacement units; None: 0), aligned; False (nothing done) where it does not apply."""
    a, T = _spec(origin)
    if type(a) is not _NDARRAY:
        return False
    e = _ACCS.get((id(op), id(T)))
    if e is None:
        e = _acc_entry(op, T)
    if not e or a.dtype is not e[3]:
        return False
    n = a.size
    base, unit, size = t
    off = 0 if target is None else target * unit
    nb = n * e[2]
    if not 0 < nb or not 0 <= off <= size - nb or (base + off) & e[4]:
        return False
    return e[0](base + off, id(a), n, e[1]) == 0


def _cas_entry(T):
    """The near path's entry for Compare_and_swap on elements of ``T``: ``(compiled cas_ndarray,
    element size, dtype, align mask)``, or False."""
    dt = _near_dtype(T)
    if dt is None:
        return False  # not a predefined constant: nothing cached under its id
    e = False
    A = _rma.atomics()
    if dt and dt.kind in "iu" and A.ndarray_layout():
        try:
            _cas_dtype(T, "Win.Compare_and_swap")
        except MPIException:
            pass
        else:
            fn, mask = A.cas_ndarray(dt)
            e = (fn, dt.itemsize, dt, mask)
    _CASS[id(T)] = e
    return e


def _cas_near(t, o, c, r, disp, T) -> bool:
    """Compare_and_swap on the near path, as :func:`_fop_near`."""
    global _CAS_LAST
    e = _CASS.get(id(T))
    if e is None:
        e = _cas_entry(T)
    if not (e and type(o) is _NDARRAY is type(c) and type(r) is _NDARRAY and o.dtype is e[2] is c.dtype
            and r.dtype is e[2]):
        return False
    base, unit, size = t
    off = disp * unit
    if not (0 <= off <= size - e[1] and not (base + off) & e[3]) or e[0](base + off, id(o), id(c), id(r)):
        return False
    if not (base | unit) & e[3]:
        _CAS_LAST = (T, t, e[0], e[2], base, unit, (size - e[1]) // unit)
    return True


def _same_size(onbytes: int, tnbytes: int, call: str, what: str = "origin") -> None:
    if onbytes != tnbytes:
        raise error(ERR_TYPE, f"{call}: {what} and target type signatures differ in size "
                              f"({onbytes} and {tnbytes} bytes)")


def _single(msg, res, cmp, call: str) -> None:
    """mpi4py's checks of Fetch_and_op / Compare_and_swap arguments (ValueError)."""
    if msg.count != 1:
        raise ValueError(f"{call}: origin: expecting a single element, got {msg.count}")
    if cmp is not None and cmp.count != 1:
        raise ValueError(f"{call}: compare: expecting a single element, got {cmp.count}")
    if res.count != 1:
        raise ValueError(f"{call}: result: expecting a single element, got {res.count}")
    if cmp is not None and msg.datatype != cmp.datatype:
        raise ValueError(f"{call}: mismatch in origin and compare MPI datatypes")
    if msg.datatype != res.datatype:
        raise ValueError(f"{call}: mismatch in origin and result MPI datatypes")


def _cas_dtype(datatype, call: str):
    """The element type of Compare_and_swap: integer, logical or byte types only (MPI)."""
    from .kernels import reduce as K

    for name in ("BOR", "LOR"):
        try:
            dt = K.resolve(name, datatype, call).dtype
        except MPIException:
            continue
        if dt is not None and dt.itemsize in (1, 2, 4, 8) and datatype._nbasic == 1:
            return dt
    raise error(ERR_TYPE, f"{call}: Compare_and_swap takes one integer, logical or byte element ({datatype!r})")


def _describe(v, unit: int, call: str) -> tuple:
    """What this process exposes, for the window's peers (see ``_rma.Window.setup``)."""
    from . import _memfd

    if not v.nbytes:
        return ("none", 0, unit, None)
    if v.kind == "host":
        found = _memfd.find(v.addr, v.nbytes)
        if found is not None:
            fd, off, flen = found
            return ("shm", v.nbytes, unit, (fd, off, flen, v.addr))
        from .ipc import cma

        if not cma.available():
            raise NotImplementedError(f"{call}: this system refuses cross-memory attach, so peers cannot reach "
                                      f"private memory; use MPI.Alloc_mem memory or Win.Allocate")
        return ("cma", v.nbytes, unit, v.addr)
    from . import _device

    ad = _device.adapter_for(v.kind if v.kind == "sim" else "device")
    handle, off = ad.ipc_export(v.addr)
    return ("dev", v.nbytes, unit, (v.kind if v.kind == "sim" else "device", handle, off, v.addr))


def _bytes_of(a):
    """The device array ``a``'s memory as a 1-D device array of bytes (what ``tomemory`` gives)."""
    if getattr(type(a), "__gpumpi_sim__", False):
        return type(a)._view(a._arr.reshape(-1).view(np.uint8), a._mem)
    return a.reshape(-1).view(np.uint8)


def _device_array(n: int, call: str):
    from ._backends import device_empty

    return device_empty(n, np.uint8, call, zeros=True)


def _self():
    from .comm import Comm

    return Comm._htable.find(0x44000001)


Win._hbase = Win

#: Null window (MPI_WIN_NULL).
WIN_NULL = Win._htable.constant(Win(), "WIN_NULL")
