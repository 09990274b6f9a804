"""Reduction operations (MPI_Op) and the reduction entry points the collectives call (L5).

Theory of operation
===================
An :class:`Op` is a reference to one operation handle, with mpi4py's object model
(:mod:`gpumpi._handles`).  Three kinds exist:

* the **predefined** operations (``MAX`` ... ``NO_OP``, and ``OP_NULL``), with MPICH's
  handles; their arithmetic is :mod:`gpumpi.kernels.reduce` (NumPy on the host, numba.cuda
  kernels on the device), resolved once per (operation, datatype) and cached on the
  datatype's handle record;
* **user** operations (``Op.Create(function, commute)``): ``function(inbuf, inoutbuf,
  datatype)`` is called as mpi4py calls it, with two ``MPI.buffer`` objects over
  ``count * extent`` bytes laid out as the datatype says, and a ``Datatype`` with the
  reduction's handle (nulled after the call).  Device data is copied to host memory for
  the call and back (a Python function cannot run on a GPU);
* **element-wise** operations, a gpumpi extension (``Op.Create_elementwise(fn, commute)``):
  ``fn(a, b)`` on two scalars, compiled with ``numba.njit`` for host data and inside a
  generated ``numba.cuda`` kernel for device data, so device buffers are reduced on the
  device.

User and element-wise operations share mpi4py's registry of 32 slots: a 33rd live
operation is a ``RuntimeError``, as in mpi4py.  Every created operation gets a fresh
handle; ``Free`` releases its slot and makes the reference ``OP_NULL``; other references
to a freed handle raise ``ERR_OP``.  Pickling: predefined operations by name, user
operations as ``Op.Create(function, commute)`` (mpi4py's rule; an object made by
``fromhandle`` cannot be pickled or called, as in mpi4py).

The executor's interface
------------------------
``check_op(op, datatype, call)`` validates, ``reduce_unit(op, datatype)`` says how a
reduction may be cut, ``reduce_packed(op, datatype, nunits, src, dst, kind, stream)`` does
``dst = src op dst`` over packed data (see each function).  The host path for a
predefined operation is one dict lookup and one ufunc call.
"""

from __future__ import annotations

import threading

from ._handles import Handle, Table
from .constants import is_in_place
from .datatypes._core import Datatype
from .errors import ERR_BUFFER, ERR_OP, error

__all__ = ["Op", "check_op", "reduce_unit", "reduce_packed", "OP_NULL", "MAX", "MIN", "SUM", "PROD", "LAND",
           "BAND", "LOR", "BOR", "LXOR", "BXOR", "MINLOC", "MAXLOC", "REPLACE", "NO_OP"]

OP_NULL_HANDLE = 0x18000000
MAX_USER_OP = 32  # mpi4py's registry size
_slots: list = [None] * (1 + MAX_USER_OP)
_slots_lock = threading.Lock()

_K = None  # gpumpi.kernels.reduce, imported on first reduction


def _kernels():
    global _K
    if _K is None:
        from .kernels import reduce as K

        _K = K
    return _K


class _UserRec:
    """What a created operation's handle holds: the function, commutativity, registry slot."""

    __slots__ = ("fn", "commute", "slot", "freed", "elem")

    def __init__(self, fn, commute: bool, slot: int, elem) -> None:
        self.fn, self.commute, self.slot, self.freed, self.elem = fn, commute, slot, False, elem


class Op(Handle):
    """Reduction operation (MPI_Op)."""

    __slots__ = ("_h", "_name", "_commute", "_rec", "_py", "__weakref__")
    _hnull = OP_NULL_HANDLE
    _htable = Table("Op", -0x68000000)

    def __init__(self, op: "Op | None" = None) -> None:
        if op is None:
            self._h, self._name, self._commute, self._rec, self._py = OP_NULL_HANDLE, "OP_NULL", False, None, True
        elif not isinstance(op, Op):
            raise TypeError(f"Op: expecting an Op (got {type(op).__name__})")
        else:
            self._h, self._name, self._commute, self._rec, self._py = op._h, op._name, op._commute, op._rec, op._py

    @classmethod
    def _predefined(cls, handle: int, name: str, commute: bool) -> "Op":
        op = cls.__new__(cls)
        op._h, op._name, op._commute, op._rec, op._py = handle, name, commute, None, True
        return cls._htable.constant(op, name)

    def _hval(self) -> int:
        return self._h

    def _hnullify(self) -> None:
        self._h, self._name, self._commute, self._rec, self._py = OP_NULL_HANDLE, "OP_NULL", False, None, True

    def _hinit(self, src) -> None:
        Op.__init__(self, src)
        if src._rec is not None:
            self._py = False  # as mpi4py: fromhandle does not carry the Python function

    def __repr__(self) -> str:
        return f"<Op {self._name}>"

    def _check(self, call: str) -> None:
        if self._h == OP_NULL_HANDLE:
            raise error(ERR_OP, f"Op.{call}: invalid operation (OP_NULL)")
        rec = self._rec
        if rec is not None and rec.freed:
            raise error(ERR_OP, f"Op.{call}: operation has been freed ({self._h:#x})")

    # -- creation ------------------------------------------------------------------------------

    @classmethod
    def _new(cls, function, commute: bool, elem) -> "Op":
        with _slots_lock:
            try:
                slot = _slots.index(None, 1)
            except ValueError:
                raise RuntimeError("cannot create too many user-defined reduction operations") from None
            _slots[slot] = function
        op = cls.__new__(cls)
        op._h = cls._htable.new()
        op._name = getattr(function, "__name__", "user")
        op._commute = bool(commute)
        op._rec = _UserRec(function, bool(commute), slot, elem)
        op._py = True
        cls._htable.add(op)
        return op

    @classmethod
    def Create(cls, function, commute: bool = False) -> "Op":
        """Create a user-defined reduction operation (MPI_Op_create).

        ``function(inbuf, inoutbuf, datatype)`` computes ``inoutbuf = inbuf op inoutbuf``
        on two ``MPI.buffer`` objects holding ``count`` items of ``datatype`` (laid out as
        the datatype says); for device data gpumpi calls it on host copies.  Non-commutative
        operations always get the lower ranks' partial result as ``inbuf``.
        """
        function.__call__  # noqa: B018 - mpi4py's check: AttributeError when not callable
        return cls._new(function, commute, None)

    @classmethod
    def Create_elementwise(cls, function, commute: bool = False) -> "Op":
        """Create an element-wise reduction operation compiled for host and device (gpumpi extension).

        ``function(a, b)`` takes two scalars of the datatype's basic type (``a`` from
        ``inbuf``, ``b`` from ``inoutbuf``) and returns ``a op b``.  It is compiled with
        ``numba.njit`` for host data and with ``numba.cuda.jit(device=True)`` inside a
        generated kernel for device data, so device buffers are reduced on the device.
        It applies to datatypes of one basic numeric type (not the pair types).  There is
        no MPI equivalent (MPI_Op_create with a compiled element function).
        """
        function.__call__  # noqa: B018
        return cls._new(function, commute, _kernels().Elementwise(function))

    def Free(self) -> None:
        """Free a user-defined reduction operation (MPI_Op_free)."""
        self._check("Free")
        rec = self._rec
        if rec is None:
            raise error(ERR_OP, f"Op.Free: cannot free a predefined operation ({self._name})")
        rec.freed = True
        with _slots_lock:
            if _slots[rec.slot] is rec.fn:
                _slots[rec.slot] = None
        self._hnullify()

    # -- queries -------------------------------------------------------------------------------

    def Is_commutative(self) -> bool:
        """Query reduction operations for their commutativity (MPI_Op_commutative)."""
        self._check("Is_commutative")
        return self._commute

    @property
    def is_commutative(self) -> bool:
        """Is a commutative operation (MPI_Op_commutative)."""
        return self.Is_commutative()

    @property
    def is_predefined(self) -> bool:
        """Is a predefined operation (OP_NULL counts, as in mpi4py)."""
        return self._rec is None

    # -- local reduction -----------------------------------------------------------------------

    def Reduce_local(self, inbuf, inoutbuf) -> None:
        """Apply a reduction operation to local data (MPI_Reduce_local): ``inoutbuf = inbuf op inoutbuf``."""
        from . import _buffers

        call = "Op.Reduce_local"
        r = _buffers.message_simple(inoutbuf, False, 0, call=call)
        if is_in_place(inbuf):
            raise error(ERR_BUFFER, f"{call}: inbuf cannot be IN_PLACE")
        s = _buffers.message_simple(inbuf, True, 0, call=call)
        if s.datatype != r.datatype:
            raise ValueError(f"{call}: mismatch in send and receive MPI datatypes "
                             f"({s.datatype!r}, {r.datatype!r})")
        if s.count != r.count:
            raise ValueError(f"{call}: mismatch in send count {s.count} and receive count {r.count}")
        check_op(self, r.datatype, call)
        if r.count:
            _local(self, s, r)

    # -- Python objects ------------------------------------------------------------------------

    def __call__(self, x, y):
        fn = _PYOPS.get(self._h)
        if fn is not None:
            return fn(x, y)
        rec = self._rec
        if rec is None or not self._py or rec.freed:
            raise ValueError("cannot call user-defined operation")
        if rec.elem is not None:
            return rec.fn(x, y)
        return rec.fn(x, y, None)

    def _hreduce(self):
        rec = self._rec
        if rec is None or not self._py or rec.freed:
            raise ValueError("cannot pickle user-defined reduction operation")
        return (Op.Create_elementwise if rec.elem is not None else type(self).Create, (rec.fn, rec.commute))


Op._hbase = Op


# -- mpi4py's rules for Op.__call__ on Python objects ------------------------------------------------


def _op_max(x, y):
    return y if y > x else x


def _op_min(x, y):
    return y if y < x else x


def _op_maxloc(x, y):
    u, i = x
    v, j = y
    if u > v:
        return u, i
    if v > u:
        return v, j
    if j < i:
        return v, j
    return u, i


def _op_minloc(x, y):
    u, i = x
    v, j = y
    if u < v:
        return u, i
    if v < u:
        return v, j
    if j < i:
        return v, j
    return u, i


_PYOPS = {
    0x58000001: _op_max,
    0x58000002: _op_min,
    0x58000003: lambda x, y: x + y,
    0x58000004: lambda x, y: x * y,
    0x58000005: lambda x, y: bool(x) & bool(y),
    0x58000006: lambda x, y: x & y,
    0x58000007: lambda x, y: bool(x) | bool(y),
    0x58000008: lambda x, y: x | y,
    0x58000009: lambda x, y: bool(x) ^ bool(y),
    0x5800000A: lambda x, y: x ^ y,
    0x5800000B: _op_minloc,
    0x5800000C: _op_maxloc,
    0x5800000D: lambda x, y: y,  # REPLACE, as mpi4py: (x, y) -> y
    0x5800000E: lambda x, y: x,  # NO_OP, as mpi4py: (x, y) -> x
}


# -- the executor's interface ----------------------------------------------------------------------


def check_op(op, datatype, call: str) -> None:
    """Check that ``op`` reduces ``datatype`` (the checks of MPI_Reduce and friends).

    Raises:
        TypeError: ``op`` is not an :class:`Op`.
        MPI.Exception(ERR_OP): ``op`` is ``OP_NULL`` or freed, or not defined for the
            datatype's basic type (predefined operations; element-wise operations need one
            basic numeric type).
    """
    if not isinstance(op, Op):
        raise TypeError(f"{call}: expecting an Op (got {type(op).__name__})")
    h = op._h
    if h == OP_NULL_HANDLE:
        raise error(ERR_OP, f"{call}: invalid operation (OP_NULL)")
    rec = op._rec
    if rec is None:
        _kernels().resolve(op._name, datatype, call)
        return
    if rec.freed:
        raise error(ERR_OP, f"{call}: operation has been freed ({h:#x})")
    if rec.elem is not None:
        _elem_dtype(op, datatype, call)


def _elem_dtype(op, datatype, call: str):
    """The NumPy element type an element-wise operation reduces ``datatype`` in (cached)."""
    key = ("elementwise",)
    dt = datatype._rec.cache.get(key)
    if dt is None:
        K = _kernels()
        try:
            red = K.resolve("SUM", datatype, call)
        except Exception as exc:
            raise error(ERR_OP, f"{call}: element-wise operation {op._name} needs a datatype of one basic "
                                f"numeric type ({datatype!r})") from exc
        dt = datatype._rec.cache[key] = red.dtype
    return dt


def reduce_unit(op, datatype) -> tuple[int, int]:
    """``(unit bytes, units per datatype item)`` a reduction with ``op`` may be split by.

    A predefined or element-wise operation on a type of one basic type: the basic
    element's packed size and the elements per item (``REPLACE``/``NO_OP``: bytes); a
    user operation: the whole item, ``(datatype.size, 1)``.
    """
    rec = op._rec
    if rec is None:
        r = _kernels().resolve(op._name, datatype, "reduce")
        return r.unit, r.per
    if rec.elem is not None:
        dt = _elem_dtype(op, datatype, "reduce")
        return dt.itemsize, datatype._size // dt.itemsize
    return datatype._size, 1


def reduce3(op, datatype, a, b, out) -> bool:
    """``out = a op b`` in one pass over host ``uint8`` arrays of packed data, where the operation
    has a three-operand kernel (predefined ufunc operations); False (nothing done) elsewhere."""
    if op._rec is not None:
        return False
    red = datatype._rec.cache.get(("reduce", op._name))
    if red is None:
        red = _kernels().resolve(op._name, datatype, "reduce")
    if red.host3 is None:
        return False
    red.host3(a, b, out)
    return True


def reduce_packed(op, datatype, nunits: int, src, dst, kind: str, stream=None) -> None:
    """``dst = src op dst`` over ``nunits`` units (see :func:`reduce_unit`) of packed data.

    ``src`` is the left operand (MPI's invec), ``dst`` the inoutvec.  ``kind`` ``'host'``:
    ``src``/``dst`` are 1-D ``uint8`` NumPy arrays (``dst`` writable) of ``nunits * unit``
    bytes; ``'sim'``/``'device'``: int addresses on ``gpumpi._device.adapter_for(kind)``,
    reduced on the device on ``stream`` (None: the adapter's current stream) and complete
    when this returns.  User operations with a non-contiguous datatype see the data in the
    type's layout (unpacked into temporaries, packed back after the call).
    """
    rec = op._rec
    if rec is None:
        red = datatype._rec.cache.get(("reduce", op._name))
        if red is None:
            red = _kernels().resolve(op._name, datatype, "reduce")
        if kind == "host":
            red.host(src, dst)
            return
        from . import _device

        ad = _device.adapter_for(kind)
        if kind == "sim":
            _kernels().sim_reduce(red, nunits, src, dst, ad, stream)
        else:
            _kernels().device_reduce(red, nunits, src, dst, ad, stream)
        return
    if rec.freed:
        raise error(ERR_OP, f"reduce: operation has been freed ({op._h:#x})")
    if rec.elem is not None:
        dt = _elem_dtype(op, datatype, "reduce")
        if kind == "host":
            rec.elem.host(dt, src, dst)
            return
        from . import _device

        ad = _device.adapter_for(kind)
        if kind == "sim":
            rec.elem.sim(dt, nunits, src, dst, ad, stream)
        else:
            rec.elem.device(dt, nunits, src, dst, ad, stream)
        return
    if kind == "host":
        _call_user(rec.fn, datatype, nunits, src, dst)
        return
    _call_user_staged(rec.fn, datatype, nunits, src, dst, kind, stream)


def _call_user(fn, datatype: Datatype, count: int, src, dst) -> None:
    """Call a user function on ``count`` packed items (host arrays), in the datatype's layout."""
    import numpy as np

    from ._membuffer import buffer

    size, extent = datatype._size, datatype._extent
    n = count * size
    src, dst = src[:n], dst[:n]
    dt = Datatype(datatype)  # the reduction's handle, for the call only (mpi4py nulls it after)
    try:
        if datatype._contig and datatype._lb == 0 and extent == size:
            fn(buffer.frombuffer(src, readonly=not src.flags.writeable), buffer.frombuffer(dst), dt)
            return
        from .datatypes import plan as _plan

        p = _plan.plan_for(datatype, count)
        span = max(count * extent, 0)
        lo = min(0, p.lo)
        hi = max(span, p.hi)
        a = np.zeros(hi - lo, np.uint8)
        b = np.zeros(hi - lo, np.uint8)
        p.unpack_from(src, a, lo)
        p.unpack_from(dst, b, lo)
        fn(buffer.frombuffer(a[-lo:-lo + span]), buffer.frombuffer(b[-lo:-lo + span]), dt)
        p.pack_into(b, lo, dst)
    finally:
        dt._nullify()


def _call_user_staged(fn, datatype: Datatype, count: int, src: int, dst: int, kind: str, stream) -> None:
    """A Python user function on device data: copy both operands to host memory (after the work
    queued on ``stream``), call it there, copy the result back; complete on return."""
    import numpy as np

    from . import _device

    ad = _device.adapter_for(kind)
    n = count * datatype._size
    if not n:
        return
    a = np.empty(n, np.uint8)
    b = np.empty(n, np.uint8)
    ad.memcpy(a.ctypes.data, src, n, stream)
    ad.memcpy(b.ctypes.data, dst, n, stream)
    ad.stream_synchronize(stream)
    _call_user(fn, datatype, count, a, b)
    ad.memcpy(dst, b.ctypes.data, n, stream)
    ad.stream_synchronize(stream)


# -- Reduce_local's memory handling -------------------------------------------------------------------


def _local(op: Op, s, r) -> None:
    """``r = s op r`` for two parsed messages (``_buffers.Msg``) of the same count and datatype."""
    import numpy as np

    from . import _device
    from .datatypes import plan as _plan

    dt, count = r.datatype, r.count
    nunits = _nunits(op, dt, count)
    if r.kind == "host":
        if s.kind != "host":  # a device operand: its packed bytes into host memory first
            a = np.frombuffer(_to_host(s), np.uint8)
        elif s.contiguous:
            a = np.frombuffer(s.mem, np.uint8)
        else:
            a = _plan.pack(s.mem, s.lo, dt, count)
        if r.contiguous:
            reduce_packed(op, dt, nunits, a, np.frombuffer(r.mem, np.uint8), "host")
            return
        p = _plan.plan_for(dt, count)
        b = _plan.pack(r.mem, r.lo, dt, count)
        reduce_packed(op, dt, nunits, a, b, "host")
        p.unpack_from(b, r.mem, r.lo)
        return
    # the inout operand is on a device: reduce there
    ad = _device.adapter_for(r.kind)
    n = count * dt._size
    tmps = []
    try:
        if s.kind != r.kind or not s.contiguous:
            sa = ad.alloc(n)
            tmps.append(sa)
            _pack_to_device(s, sa, ad)
        else:
            sa = s.addr + s.lo
        if r.contiguous:
            reduce_packed(op, dt, nunits, sa, r.addr + r.lo, r.kind)
            return
        ra = ad.alloc(n)
        tmps.append(ra)
        _pack_to_device(r, ra, ad)
        reduce_packed(op, dt, nunits, sa, ra, r.kind)
        _unpack_from_device(r, ra, ad)
    finally:
        for t in tmps:
            ad.free(t)


def _nunits(op: Op, datatype: Datatype, count: int) -> int:
    unit, per = reduce_unit(op, datatype)
    return count * per


def _to_host(m):
    """The packed bytes of device message ``m`` in host memory (after the current stream's work)."""
    import numpy as np

    from . import _device

    ad = _device.adapter_for(m.kind)
    h = np.empty(m.span, np.uint8)
    if m.span:
        ad.memcpy(h.ctypes.data, m.addr + m.lo, m.span, None)
        ad.stream_synchronize(None)
    if m.contiguous:
        return memoryview(h)
    from .datatypes import plan as _plan

    return memoryview(_plan.pack(memoryview(h), m.lo, m.datatype, m.count))


def _pack_to_device(m, addr: int, ad) -> None:
    """Put the packed bytes of message ``m`` (host or device memory) at device address ``addr``."""
    import numpy as np

    from .datatypes import plan as _plan

    n = m.count * m.datatype._size
    if m.kind == "host":
        packed = np.frombuffer(m.mem, np.uint8) if m.contiguous else _plan.pack(m.mem, m.lo, m.datatype, m.count)
        packed = np.ascontiguousarray(packed)
        ad.memcpy(addr, packed.ctypes.data, n, None)
        ad.stream_synchronize(None)
        return
    if m.contiguous:
        ad.memcpy(addr, m.addr + m.lo, n, None)
        ad.stream_synchronize(None)
        return
    _device_plan(m, addr, ad, unpack=False)


def _unpack_from_device(m, addr: int, ad) -> None:
    _device_plan(m, addr, ad, unpack=True)


def _device_plan(m, addr: int, ad, unpack: bool) -> None:
    """Pack (or unpack) non-contiguous device message ``m`` to (from) packed device memory at ``addr``:
    simulated memory through the host plan on the mapped bytes, CUDA memory with the pack kernels."""
    from .datatypes import plan as _plan

    n = m.count * m.datatype._size
    p = _plan.plan_for(m.datatype, m.count)
    if m.kind == "sim":
        ad.stream_synchronize(None)
        packed = ad.host_view(addr, n)
        if unpack:
            p.unpack_from(packed, m.mem, m.lo)
        else:
            p.pack_into(m.mem, m.lo, packed)
        return
    from .kernels import pack as KP

    class _Dev:
        def __init__(self, a: int, nb: int) -> None:
            self.__cuda_array_interface__ = {"shape": (nb,), "typestr": "|u1", "data": (a, False),
                                             "version": 3, "strides": None, "stream": None}

    s = ad.current_stream()
    if unpack:
        KP.device_unpack(p, _Dev(addr, n), _Dev(m.addr + m.lo, m.span), m.lo, stream=s)
    else:
        KP.device_pack(p, _Dev(m.addr + m.lo, m.span), m.lo, _Dev(addr, n), stream=s)
    ad.stream_synchronize(s)


#: Null operation (MPI_OP_NULL).
OP_NULL = Op._htable.constant(Op(), "OP_NULL")
#: Maximum (MPI_MAX).
MAX = Op._predefined(0x58000001, "MAX", True)
#: Minimum (MPI_MIN).
MIN = Op._predefined(0x58000002, "MIN", True)
#: Sum (MPI_SUM).
SUM = Op._predefined(0x58000003, "SUM", True)
#: Product (MPI_PROD).
PROD = Op._predefined(0x58000004, "PROD", True)
#: Logical and (MPI_LAND).
LAND = Op._predefined(0x58000005, "LAND", True)
#: Bitwise and (MPI_BAND).
BAND = Op._predefined(0x58000006, "BAND", True)
#: Logical or (MPI_LOR).
LOR = Op._predefined(0x58000007, "LOR", True)
#: Bitwise or (MPI_BOR).
BOR = Op._predefined(0x58000008, "BOR", True)
#: Logical exclusive or (MPI_LXOR).
LXOR = Op._predefined(0x58000009, "LXOR", True)
#: Bitwise exclusive or (MPI_BXOR).
BXOR = Op._predefined(0x5800000A, "BXOR", True)
#: Minimum and its location (MPI_MINLOC).
MINLOC = Op._predefined(0x5800000B, "MINLOC", True)
#: Maximum and its location (MPI_MAXLOC).
MAXLOC = Op._predefined(0x5800000C, "MAXLOC", True)
#: Replace the target value (MPI_REPLACE, one-sided accumulate).
REPLACE = Op._predefined(0x5800000D, "REPLACE", False)
#: Leave the target value (MPI_NO_OP, one-sided accumulate).
NO_OP = Op._predefined(0x5800000E, "NO_OP", False)
