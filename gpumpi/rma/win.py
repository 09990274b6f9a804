"""The ``Win`` API (MPI_Win): arguments validated, then handed to the window runtime (L5).

Theory of operation
===================
``Win`` is mpi4py's class: a reference to one window handle (:mod:`gpumpi._handles`);
every reference to a window shares one :class:`gpumpi.rma.creation.State` (name, error
handler, info, attributes and the runtime: :class:`gpumpi.rma.local.Window` on one node,
:class:`gpumpi.rma.mpi.Window` across nodes).  This module validates arguments, parses
mpi4py's buffer and target specs, and calls the runtime, which moves the data (see
:mod:`gpumpi.rma.local` for how a window is reached and synchronized,
:mod:`gpumpi.rma.epochs` for the epoch rules and :mod:`gpumpi.rma.origin` for the origin's
bytes and the type rules).  Creation and ``Free`` are :mod:`gpumpi.rma.creation`'s functions,
named here in the class body so they stay ``Win``'s own attributes.

Buffer specs are mpi4py's (``_p_msg_rma``): the origin is a simple buffer spec; the
target is ``None`` (displacement 0, the origin's count and type), an integer
displacement, or ``(disp,)``, ``(disp, count)``, ``(disp, count, datatype)``; the
displacement counts ``disp_unit``s (absolute addresses in a dynamic window).
``Fetch_and_op`` and ``Compare_and_swap`` take one element each, of one type
(``ValueError`` otherwise, as mpi4py).  ``PROC_NULL`` targets do nothing.

The near path (:mod:`gpumpi.rma.near`): a target that the open passive target epoch includes and
whose memory this process maps (``Win.Allocate``, ``Allocate_shared``, ``Create`` on ``Alloc_mem``
memory) is in ``Window.near``, kept by the runtime at every lock epoch change.  To such a target
nothing can fail but the arguments, and every operation completes when issued, so
``Fetch_and_op``, ``Compare_and_swap``, ``Put`` and ``Get`` of the simple kind (NumPy arrays or
``[array, T]`` with ``T`` the predefined type of the elements, int rank and displacement) check
in a few Python operations and make one call into machine code with int arguments; ``Accumulate``
makes one call to :func:`gpumpi.rma.near.acc_near`; ``Flush_local`` to it returns at once and
``Flush`` is a memory barrier.  Those first checks are written inline in the methods below (a
call frame costs as much as they do).  Whatever the near path does not take falls through to
the general path, which checks and reports as it always did.

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

import numpy as np

from .._arrays import PEEK_DATA, PEEK_FLAGS
from .._buffers import asdatatype, extent_for, is_integral, message_simple
from .._handles import Handle, Table
from .._membuffer import buffer
from ..constants import (KEYVAL_INVALID, LOCK_EXCLUSIVE, LOCK_SHARED, MODE_NOCHECK, MODE_NOPRECEDE, MODE_NOPUT,
                         MODE_NOSTORE, MODE_NOSUCCEED, PROC_NULL, WIN_BASE, WIN_CREATE_FLAVOR, WIN_DISP_UNIT,
                         WIN_FLAVOR_DYNAMIC, WIN_MODEL, WIN_SIZE, WIN_UNIFIED)
from ..datatypes.plan import plan_for
from ..errors import (ERR_ARG, ERR_ASSERT, ERR_COUNT, ERR_ERRHANDLER, ERR_GROUP, ERR_LOCKTYPE, ERR_OP, ERR_RANK,
                      ERR_RMA_FLAVOR, ERR_RMA_SYNC, ERR_TYPE, ERR_WIN, Errhandler, error)
from ..errors import Exception as MPIException
from ..group import Group
from ..info import Info
from ..keyval import WIN_FIRST, Kind
from ..op import SUM, Op
from ..request import Request, done_xfer
from . import creation
from .creation import State, info_dict, int_arg
from .local import atomics
from .near import NEAR, acc_near, cas_near, fop_near, np_near, raw_ops, spec
from .origin import cas_dtype, check_acc_types, check_signatures, origin_packed, origin_unpack

__all__ = ["Win", "WIN_NULL"]

_NULL_H = 0x20000000
_NDARRAY = np.ndarray
_MODES = MODE_NOCHECK | MODE_NOSTORE | MODE_NOPUT | MODE_NOPRECEDE | MODE_NOSUCCEED
#: native scalar types read and written in place by the general Fetch_and_op path (one instruction)
_CTYPES = {np.dtype(t): c for t, c in ((np.int8, ctypes.c_int8), (np.int16, ctypes.c_int16), (np.int32, ctypes.c_int32),
                                       (np.int64, ctypes.c_int64), (np.uint8, ctypes.c_uint8),
                                       (np.uint16, ctypes.c_uint16), (np.uint32, ctypes.c_uint32),
                                       (np.uint64, ctypes.c_uint64), (np.float32, ctypes.c_float),
                                       (np.float64, ctypes.c_double), (np.bool_, ctypes.c_bool))}
PREDEFINED = (WIN_BASE, WIN_SIZE, WIN_DISP_UNIT, WIN_CREATE_FLAVOR, WIN_MODEL)


def _wrap(win):
    ref = Win.__new__(Win)
    ref._st = win._st
    return ref


def _nullify(ref) -> None:
    ref._st = None


WIN_ATTRS = Kind("Win", WIN_FIRST, attrs_of=lambda w: w._st.attrs, wrap=_wrap, nullify=_nullify,
                 predefined=PREDEFINED)


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
    def _check(self, call: str) -> State:
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

    def _rank(self, st: State, rank, call: str, what: str = "target rank") -> int:
        r = int_arg(rank, call, what)
        if r == PROC_NULL:
            return r
        if not 0 <= r < st.rt.size_n:
            raise error(ERR_RANK, f"{call}: invalid {what} ({r}, window group size {st.rt.size_n})")
        return r

    @staticmethod
    def _assertion(assertion, call: str) -> int:
        a = int_arg(assertion, call, "assertion")
        if a & ~_MODES:
            raise error(ERR_ASSERT, f"{call}: invalid assertion ({a:#x})")
        return a

    # -- creation and Free (gpumpi.rma.creation) ---------------------------------------------
    Create = classmethod(creation.Create)
    Allocate = classmethod(creation.Allocate)
    Allocate_shared = classmethod(creation.Allocate_shared)
    Create_dynamic = classmethod(creation.Create_dynamic)
    Attach = creation.Attach
    Detach = creation.Detach
    Free = creation.Free

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
        st.info = info_dict(info, call)

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
        if not g.mapped or not g.size:
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
        st.errh.call(self, int_arg(errorcode, "Win.Call_errhandler", "errorcode"))

    # -- operations ----------------------------------------------------------------------------
    def _target(self, target, msg, call: str):
        """Parse mpi4py's target spec into ``(disp, count, datatype)``."""
        ocount, otype = (msg.count, msg.datatype) if msg is not None else (0, None)
        if target is None:
            disp, count, dtype = 0, ocount, otype
        elif is_integral(target):
            disp, count, dtype = operator.index(target), ocount, otype
        elif isinstance(target, (list, tuple)):
            if len(target) > 3:
                raise ValueError(f"{call}: target: expecting 3 items at most")
            disp = operator.index(target[0]) if len(target) >= 1 else 0
            count = operator.index(target[1]) if len(target) >= 2 else ocount
            dtype = asdatatype(target[2], call) if len(target) >= 3 else otype
        else:
            raise ValueError(f"{call}: target: expecting integral or list/tuple")
        if count < 0:
            raise error(ERR_COUNT, f"{call}: negative target count ({count})")
        if dtype is None:
            raise error(ERR_TYPE, f"{call}: target datatype is null")
        if count:
            extent_for(dtype, "use it as target datatype", call)
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
                a, at = spec(origin)
                if type(a) is _NDARRAY:
                    dt = NEAR.nps.get(id(at))
                    if dt is None:
                        dt = np_near(at)
                    n = a.nbytes
                    off = 0 if target is None else target * t[1]
                    i = id(a) >> 3
                    if a.dtype is dt and PEEK_FLAGS[i] & 3 and 0 < n and 0 <= off <= t[2] - n:
                        (NEAR.raw or raw_ops())[0](t[0] + off, PEEK_DATA[i], n)
                        return
        call = "Win.Put"
        try:
            st, r, msg, ttype, plan, ga = self._prep(call, origin, target_rank, target, True)
            if r == PROC_NULL:
                return
            _same_size(msg.nbytes, plan.nbytes, call)
            check_signatures(msg.datatype, ttype, call)
            g = ga[0]
            if plan.kind == "contig" and msg.contiguous and msg.kind == "host" and g.mapped:
                if plan.nbytes:
                    ctypes.memmove(ga[1] + plan.lo, msg.addr + msg.lo, plan.nbytes)  # one copy, no array made
                return
            st.rt.write(g, ga[1], plan, origin_packed(msg), call)
        except MPIException as e:
            self._raise(e)

    def Get(self, origin, target_rank: int, target=None) -> None:
        """Get data from a memory window on a remote process (MPI_Get)."""
        st = self._st
        if st is not None and type(target_rank) is int and (target is None or type(target) is int):
            t = st.near.get(target_rank)
            if t is not None:  # the near path, as Put's
                a, at = spec(origin)
                if type(a) is _NDARRAY:
                    dt = NEAR.nps.get(id(at))
                    if dt is None:
                        dt = np_near(at)
                    n = a.nbytes
                    off = 0 if target is None else target * t[1]
                    i = id(a) >> 3
                    if a.dtype is dt and PEEK_FLAGS[i] & 3 and PEEK_FLAGS[i] & 0x400 and 0 < n and 0 <= off <= t[2] - n:
                        (NEAR.raw or raw_ops())[0](PEEK_DATA[i], t[0] + off, n)
                        return
        call = "Win.Get"
        try:
            st, r, msg, ttype, plan, ga = self._prep(call, origin, target_rank, target, False)
            if r == PROC_NULL:
                return
            _same_size(msg.nbytes, plan.nbytes, call)
            check_signatures(msg.datatype, ttype, call)
            g = ga[0]
            if plan.kind == "contig" and msg.contiguous and msg.kind == "host" and g.mapped:
                if plan.nbytes:
                    ctypes.memmove(msg.addr + msg.lo, ga[1] + plan.lo, plan.nbytes)
                return
            origin_unpack(msg, st.rt.read(g, ga[1], plan, call), plan.nbytes)
        except MPIException as e:
            self._raise(e)

    def Accumulate(self, origin, target_rank: int, target=None, op: Op = SUM) -> None:
        """Accumulate data into the target process (MPI_Accumulate); element-wise atomic."""
        st = self._st
        if st is not None and type(target_rank) is int and (target is None or type(target) is int):
            t = st.near.get(target_rank)
            if t is not None and acc_near(t, origin, target, op):  # the near path (see gpumpi.rma.near)
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
            red, dtype = check_acc_types(msg.datatype, ttype, op, call)
            _same_size(msg.nbytes, plan.nbytes, call)
            st.rt.accumulate(ga[0], ga[1], plan, red, dtype, origin_packed(msg), op._name, False, call)
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
            red, dtype = check_acc_types(msg.datatype, ttype, op, call)
            if op._name != "NO_OP":
                _same_size(msg.nbytes, plan.nbytes, call)
                packed = origin_packed(msg)
            else:
                packed = np.zeros(plan.nbytes, np.uint8)
            _same_size(res.nbytes, plan.nbytes, call, "result")
            check_signatures(res.datatype, ttype, call, "result")
            old = st.rt.accumulate(ga[0], ga[1], plan, red, dtype, packed, op._name, True, call)
            origin_unpack(res, old, plan.nbytes)
        except MPIException as e:
            self._raise(e)

    def Fetch_and_op(self, origin, result, target_rank: int, target_disp: int = 0, op: Op = SUM) -> None:
        """Fetch one element and apply an operation to it, atomically (MPI_Fetch_and_op)."""
        st = self._st
        if st is not None and type(target_rank) is int is type(target_disp):
            t = st.near.get(target_rank)
            if t is not None:  # the near path (see gpumpi.rma.near): one call, the result written by it
                o, ot = origin if type(origin) is list and len(origin) == 2 else spec(origin)
                r, rt = result if type(result) is list and len(result) == 2 else spec(result)
                lop, lT, lt, fn, code, dt, base, unit, top = NEAR.fop_last
                if lop is op and lT is ot and lt is t and rt is ot:  # as the last call: checked then
                    if (type(o) is _NDARRAY is type(r) and o.dtype is dt is r.dtype and 0 <= target_disp <= top
                            and not fn(base + target_disp * unit, id(o), id(r), code)):
                        return
                elif ot is rt and fop_near(t, o, r, target_disp, op, ot):
                    return
        call = "Win.Fetch_and_op"
        try:
            st = self._check(call)
            r = self._rank(st, target_rank, call)
            msg = message_simple(origin, True, r, 1, call)
            res = message_simple(result, False, r, 1, call)
            disp = int_arg(target_disp, call, "target_disp")
            if r == PROC_NULL:
                return
            _single(msg, res, None, call)
            ttype = msg.datatype
            red, dtype = check_acc_types(ttype, ttype, op, call)
            W = st.rt
            W.epochs.operation(r, call)
            if r in W.pending_post:
                W.await_post(r, call)
            plan = plan_for(ttype, 1)
            g, addr = W.target(r, disp, plan, call)
            if g.mapped and g.atomic and dtype is not None and res.kind == "host" and msg.kind == "host":
                ct = _CTYPES.get(dtype) if ttype._size == dtype.itemsize else None
                A = atomics()
                if ct is not None and A.supported(op._name, dtype) and not (addr + plan.lo) % dtype.itemsize:
                    # one instruction, no array made (a misaligned element takes the accumulate lock below)
                    old = A.fetch_and_op(addr + plan.lo, ct.from_address(msg.addr + msg.lo).value, op._name, dtype)
                    ct.from_address(res.addr + res.lo).value = old
                    return
            old = W.accumulate(g, addr, plan, red, dtype, origin_packed(msg), op._name, True, call)
            origin_unpack(res, old, plan.nbytes)
        except MPIException as e:
            self._raise(e)

    def Compare_and_swap(self, origin, compare, result, target_rank: int, target_disp: int = 0) -> None:
        """Replace one element with ``origin`` if it equals ``compare``, returning the old value
        in ``result``, atomically (MPI_Compare_and_swap)."""
        st = self._st
        if st is not None and type(target_rank) is int is type(target_disp):
            t = st.near.get(target_rank)
            if t is not None:  # the near path, as Fetch_and_op's
                o, ot = origin if type(origin) is list and len(origin) == 2 else spec(origin)
                c, ct = compare if type(compare) is list and len(compare) == 2 else spec(compare)
                r, rt = result if type(result) is list and len(result) == 2 else spec(result)
                lT, lt, fn, dt, base, unit, top = NEAR.cas_last
                if lT is ot and lt is t and ct is ot and rt is ot:
                    if (type(o) is _NDARRAY is type(c) and type(r) is _NDARRAY and o.dtype is dt is c.dtype
                            and r.dtype is dt and 0 <= target_disp <= top
                            and not fn(base + target_disp * unit, id(o), id(c), id(r))):
                        return
                elif ot is ct is rt and cas_near(t, o, c, r, target_disp, ot):
                    return
        call = "Win.Compare_and_swap"
        try:
            st = self._check(call)
            r = self._rank(st, target_rank, call)
            msg = message_simple(origin, True, r, 1, call)
            cmp = message_simple(compare, True, r, 1, call)
            res = message_simple(result, False, r, 1, call)
            disp = int_arg(target_disp, call, "target_disp")
            if r == PROC_NULL:
                return
            _single(msg, res, cmp, call)
            ttype = msg.datatype
            dtype = cas_dtype(ttype, call)
            W = st.rt
            W.epochs.operation(r, call)
            if r in W.pending_post:
                W.await_post(r, call)
            plan = plan_for(ttype, 1)
            g, addr = W.target(r, disp, plan, call)
            old = W.compare_and_swap(g, addr + plan.lo, dtype, np.array(origin_packed(msg)),
                                     np.array(origin_packed(cmp)), call)
            origin_unpack(res, old, plan.nbytes)
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

    def _group_ranks(self, st: State, group, call: str) -> list:
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
            lt = int_arg(lock_type, call, "lock_type")
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
            if (a == "lock_all" or (a == "lock" and rank in ep.locks)) and not W.device and not W.far:
                (NEAR.raw or raw_ops())[1]()
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
            (NEAR.raw or raw_ops())[1]()
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


Win._hbase = Win

#: Null window (MPI_WIN_NULL).
WIN_NULL = Win._htable.constant(Win(), "WIN_NULL")
