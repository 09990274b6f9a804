"""Communicators and point-to-point communication (MPI_Comm) (L5).

Theory of operation
===================
A communicator is a context id plus a group.  Context ``ctx`` carries
point-to-point traffic, ``ctx + 1`` collective traffic, ``ctx + 2`` partitioned
traffic, ``ctx + 3`` the device parts of object messages, so the four never match
each other's messages.  New context ids are
agreed collectively: every member proposes its next free id, all take the
maximum, then move their next free id past it — no member has used it before.

Every buffer call parses its buffer spec once (``_buffers``), validates ranks,
tags and the communicator (raising ``MPI.Exception`` with the error class and a
message naming the call and the values), then posts an ``Xfer`` on the engine.
Blocking calls are the nonblocking call plus a wait.  Lowercase calls move
Python objects as pickle-5 messages with out-of-band buffers (``_pickle``); device
arrays inside them travel beside the object message, each as a buffer message of
its own on ``ctx + 3`` (device to device), except through buffered sends and
collectives, which carry them through host memory.
Errors pass through the communicator's error handler before they are raised.
"""

from __future__ import annotations

import struct

from . import _pickle
from . import _protocol as P
from . import _protocol as _P
from . import _runtime as _rt
from ._arrays import DEVICE as _DEVICE
from ._arrays import SIM as _SIM
from ._buffers import message_simple
import numpy as _np
from numpy import ndarray as _ndarray
from .datatypes import plan as _plan
from .datatypes.flatten import sigcode as _sigcode
from ._progress import GREQ, RECV, SENT, Xfer
from .constants import (
    ANY_SOURCE,
    ANY_TAG,
    APPNUM,
    BUFFER_AUTOMATIC,
    BSEND_OVERHEAD,
    CONGRUENT,
    IDENT,
    IN_PLACE,
    PROC_NULL,
    SIMILAR,
    TAG_UB,
    TAG_UB_VALUE,
    UNDEFINED,
    UNEQUAL,
    UNIVERSE_SIZE,
    WTIME_IS_GLOBAL,
    is_in_place,
)
from .errors import (
    ERR_ARG,
    ERR_BUFFER,
    ERR_COMM,
    ERR_COUNT,
    ERR_RANK,
    ERR_REQUEST,
    ERR_ROOT,
    ERR_TAG,
    ERRORS_RETURN,
    Errhandler,
    error,
)
from .errors import Exception as MPIException
from .group import Group
from .request import Prequest, Request
from .status import Status

STANDARD, SYNCHRONOUS, READY, BUFFERED = P.STANDARD, P.SYNCHRONOUS, P.READY, P.BUFFERED
_PART_IDX = struct.Struct("<Q")


def _msg(spec, readonly: bool, rank: int, call: str):
    return message_simple(spec, readonly, rank, 1, call)


def _host_mem(m, call: str):
    mem = m.mem
    if mem is None:
        raise NotImplementedError(f"{call}: device memory without a host mapping is not supported here ({m.kind})")
    return mem


def _device(m) -> bool:
    return m.kind == _SIM or m.kind == _DEVICE


def _adapter_of(m):
    """The device adapter of a message's memory (``sim`` memory: the simulated device)."""
    from . import _device

    return _device.adapter_for(m.kind)


# adapter -> free (interprocess event, its IPC handle) pairs.  Every IPC send in flight has an
# event of its own: a peer's cudaStreamWaitEvent waits for the event's latest record, so one
# shared event, re-recorded on another stream by a later send, would let an earlier send's
# receiver copy before that send's producer finished.  Back in the pool once the send completes.
_ipc_events: dict = {}


def _producer_stream(ad, m, stream):
    """The stream whose work a device operation on ``m`` must follow: ``stream=`` if given, else
    the array's own (``__cuda_array_interface__`` v3 ``stream``, real devices), else the current one."""
    if stream is not None:
        return stream
    v = m.view
    cai = v.stream if v is not None else None
    if type(cai) is int and m.kind == _DEVICE:  # 1, 2: the legacy and per-thread default streams
        return cai
    return ad.current_stream()


def _order_event(ad, m, stream):
    """An event recorded now on the producer/consumer stream of ``m`` (None with GPUMPI_STREAM_MODE=none)."""
    if _rt.ENGINE.stream_mode == "none":
        ad.check_stream(stream)
        return None
    e = ad.event_create(False)
    ad.event_record(e, _producer_stream(ad, m, stream))
    return e


def _device_send(eng, m, wpeer: int, me: int, tag: int, ctx: int, mode: int, call: str, stream):
    """Post a large contiguous device send: by IPC handle when the device transports allow it and
    the memory can be exported, else through the staging pipeline (``Engine.isend_device``)."""
    from . import _device

    ad = _adapter_of(m)
    ad.check_stream(stream)
    addr = m.addr + m.lo
    body = None
    if "cuda_ipc" in eng.dev_transports:
        try:
            handle, offset = ad.ipc_export(addr)
        except _device.IpcUnsupported:  # pool or managed memory, another process's mapping
            handle = None
        if handle is not None:
            evh = bytes(64)
            ev = pair = None
            if eng.stream_mode != "none":  # the receiver's copy waits for the producer's work
                free = _ipc_events.setdefault(ad, [])
                if free:
                    pair = free.pop()
                else:
                    e = ad.event_create(True)
                    pair = (e, ad.ipc_event_export(e))
                ev, evh = pair
                ad.event_record(ev, _producer_stream(ad, m, stream))
            body = _P.IPC_BODY.pack(_P.IPC_SIM if m.kind == _SIM else _P.IPC_CUDA, handle, offset, evh)
    if body is None:
        pair = None
        ev = _order_event(ad, m, stream)
    x = eng.isend_device(ad, body, addr, ev, m.nbytes, wpeer, me, tag, ctx, mode, call, _sig(m.datatype))
    if pair is not None:
        _after(x, lambda: _ipc_events[ad].append(pair))
    return x


def _staged_span(m, ev):
    """Copy the message's bytes from device memory into a host staging array on gpumpi's copy
    stream, after event ``ev`` (the producer's work; None: unordered); ``(array, memoryview of the span)``."""
    ad = _adapter_of(m)
    tmp = _staging.get(m.span)
    if m.span:
        s = _rt.ENGINE.copy_stream(ad)
        if ev is not None:
            ad.stream_wait_event(s, ev)
        ad.memcpy(tmp.ctypes.data, m.addr + m.lo, m.span, s)
        ad.stream_synchronize(s)
    return tmp, memoryview(tmp)[:m.span]


def _sig(dt) -> int:
    """The datatype's signature code (``flatten.sigcode``), cached on the type."""
    code = dt._rec.cache.get("sigcode")
    return code if code is not None else _sigcode(dt)


class _Staging:
    """Reusable staging buffers for packed messages, in power-of-two size classes.

    A fresh multi-megabyte buffer costs a page fault per 4 KiB on first touch (on a
    device, an allocation call), more than the pack itself; buffers come back when
    their operation completes.  At most ``KEEP`` buffers per class and ``CAP`` bytes in
    all are kept; ``free`` releases what is not.  Host: NumPy byte arrays; device:
    addresses from an adapter (:func:`_dev_pool`).
    """

    KEEP, CAP = 4, 256 << 20

    def __init__(self, alloc=lambda n: _np.empty(n, dtype=_np.uint8), free=None) -> None:
        self.alloc, self.release = alloc, free
        self.free: dict = {}
        self.kept = 0

    def get(self, n: int):
        k = max(12, (n - 1).bit_length())
        lst = self.free.get(k)
        if lst:
            try:
                a = lst.pop()
                self.kept -= 1 << k
                return a
            except IndexError:  # another thread took it
                pass
        return self.alloc(1 << k)

    def put(self, a, n: int | None = None) -> None:
        """Return ``a``, a buffer :meth:`get` gave for ``n`` bytes (host arrays know their size)."""
        k = max(12, ((a.nbytes if n is None else n) - 1).bit_length())
        lst = self.free.setdefault(k, [])
        if len(lst) < self.KEEP and self.kept + (1 << k) <= self.CAP:
            self.kept += 1 << k
            lst.append(a)
        elif self.release is not None:
            self.release(a)


_staging = _Staging()


def _after(x, fn) -> None:
    """Run ``fn()`` once operation ``x`` has completed (now, if it has)."""
    if x is None or x is SENT or x.done:
        fn()
        return
    with _rt.ENGINE.lock:
        if x.done:
            fn()
        else:
            prev = x.on_done
            x.on_done = (lambda xx: (prev(xx), fn())) if prev is not None else (lambda xx: fn())


# --- device pack kernels ---------------------------------------------------------------------
# Non-contiguous device messages are packed (sends) and unpacked (receives) on the device by
# gpumpi.kernels.pack, in a pooled device buffer, so only the packed bytes cross to the peer.
# numba.cuda must match the memory: the simulator for ``sim`` memory, a real GPU for device
# memory; otherwise (and for simulated messages above _SIM_KERNEL_MAX bytes: the simulator
# runs a Python thread per CUDA thread) the span is staged to the host and packed there.

_SIM_KERNEL_MAX = 1 << 16


class _Packed:
    """A contiguous device message standing for the packed bytes of a non-contiguous one."""

    __slots__ = ("addr", "lo", "nbytes", "span", "kind", "datatype", "view", "contiguous")

    def __init__(self, addr: int, nbytes: int, kind: str, datatype) -> None:
        self.addr, self.lo, self.nbytes, self.span = addr, 0, nbytes, nbytes
        self.kind, self.datatype, self.view, self.contiguous = kind, datatype, None, True


class _DeviceBytes:
    """``__cuda_array_interface__`` over raw device bytes, for the kernels."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, addr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (addr, False),
                                         "version": 3, "strides": None, "stream": None}


_dev_pools: dict = {}  # adapter -> its device _Staging (a forked rank has new adapters)


def _dev_pool(ad) -> _Staging:
    p = _dev_pools.get(ad)
    if p is None:
        p = _dev_pools[ad] = _Staging(ad.alloc, ad.free)
    return p


def _kernels_for(m):
    """gpumpi.kernels.pack when device kernels can move ``m`` here, else None (pack on the host)."""
    if m.kind == _SIM and m.nbytes > _SIM_KERNEL_MAX:
        return None
    try:
        from .kernels import pack as K

        if m.kind == _SIM:
            from . import _device

            _device.use_simulator()  # no GPU: numba.cuda can only be the simulator
        if K._is_sim() != (m.kind == _SIM):
            return None
        return K
    except ImportError:
        return None


def _kernel_stream(ad, s):
    """Order a kernel launch on gpumpi's copy stream ``s``: the simulator runs kernels at once, so
    the work ``s`` waits for is run first; a real launch is queued on ``s`` itself."""
    if ad.name == "sim":
        ad.stream_synchronize(s)
        return 0
    return s


def _device_pack(m, stream):
    """Pack non-contiguous device message ``m`` on the device: ``(packed message, its stream,
    release)`` or None where the kernels cannot run (the caller packs on the host)."""
    K = _kernels_for(m)
    if K is None:
        return None
    ad = _adapter_of(m)
    n = m.nbytes
    pool = _dev_pool(ad)
    tmp = pool.get(n)
    s = _rt.ENGINE.copy_stream(ad)
    ev = _order_event(ad, m, stream)
    if ev is not None:
        ad.stream_wait_event(s, ev)
    K.device_pack(_plan.plan_for(m.datatype, m.count), _DeviceBytes(m.addr + m.lo, m.span), m.lo,
                  _DeviceBytes(tmp, n), _kernel_stream(ad, s))
    if _rt.ENGINE.stream_mode == "none":  # no event will order the peer's read after the kernel
        ad.stream_synchronize(s)
    return _Packed(tmp, n, m.kind, m.datatype), s, lambda: pool.put(tmp, n)


def _out(m, call: str, stream=None):
    """``(bytes, address, release)`` a send moves: the buffer itself when contiguous, else its
    elements packed into a staging array that ``release()`` returns once the send completed.
    Device memory is copied to host memory first (after the work queued on ``stream``)."""
    staged = None
    if _device(m):  # device memory leaves through a host staging copy (large sends: _device_send)
        staged, mem = _staged_span(m, _order_event(_adapter_of(m), m, stream))
        if m.contiguous:
            return mem, staged.ctypes.data, lambda: _staging.put(staged)
    else:
        mem = _host_mem(m, call)
        if m.contiguous:
            return mem, m.addr + m.lo, None
    n = m.nbytes
    tmp = _staging.get(n)
    _plan.pack_into(mem, m.lo, m.datatype, m.count, tmp)
    if staged is not None:
        _staging.put(staged)
    return memoryview(tmp)[:n], tmp.ctypes.data, lambda: _staging.put(tmp)


def _in(m, call: str, stream=None):
    """``(memory, address, post, device)`` a receive lands in: the buffer itself when contiguous,
    else a packed staging array that ``post(x)`` unpacks into the buffer when the receive
    completes (exactly the bytes that arrived: a short message fills only its leading
    elements).  Device buffers: a host staging array copied to the device by ``post``, unless
    the message came device to device (to ``device``, the destination address)."""
    if _device(m):
        return _in_device(m, stream)
    mem = _host_mem(m, call)
    if m.contiguous:
        return mem, m.addr + m.lo, None, None
    tmp = _staging.get(m.nbytes)
    dt, count, lo = m.datatype, m.count, m.lo

    def post(x):
        n = x.st_nbytes
        try:
            if n and not x.cancelled:
                _plan.unpack(tmp, mem, lo, dt, count, n)
        finally:
            _staging.put(tmp)

    return memoryview(tmp)[:m.nbytes], tmp.ctypes.data, post, None


def _in_device(m, stream):
    """A receive into device memory.  Large messages are written into a contiguous buffer by the
    engine itself (IPC copy or staging chunks, ``x.ondev``); the rest lands in a host staging
    array that ``post`` copies in.  Every write follows the consumer's work queued before the
    call (an event on ``stream`` or the current stream) and is complete when the receive is."""
    ad = _adapter_of(m)
    dst = m.addr + m.lo
    tmp = _staging.get(m.nbytes)
    dt, count, lo, contiguous = m.datatype, m.count, m.lo, m.contiguous
    ev = _order_event(ad, m, stream)
    K = None if contiguous else _kernels_for(m)
    if K is not None:  # land the packed bytes in device memory, unpack there
        return _in_device_kernels(m, K, ad, tmp, ev)

    def post(x):
        n = x.st_nbytes
        try:
            if not n or x.cancelled or x.ondev:
                return
            if contiguous:
                s = _rt.ENGINE.copy_stream(ad)
                if ev is not None:
                    ad.stream_wait_event(s, ev)
                ad.memcpy(dst, tmp.ctypes.data, n, s)
                ad.stream_synchronize(s)
            else:  # read, modify, write back the span: bytes between the elements keep their values
                staged, span = _staged_span(m, ev)
                _plan.unpack(tmp, span, lo, dt, count, n)
                s = _rt.ENGINE.copy_stream(ad)
                ad.memcpy(dst, staged.ctypes.data, m.span, s)
                ad.stream_synchronize(s)
                _staging.put(staged)
        finally:
            _staging.put(tmp)

    return memoryview(tmp)[:m.nbytes], tmp.ctypes.data, post, ((ad, dst, ev) if contiguous else None)


def _in_device_kernels(m, K, ad, tmp, ev):
    n_max = m.nbytes
    pool = _dev_pool(ad)
    dtmp = pool.get(n_max)
    dst = m.addr + m.lo

    def post(x):
        n = x.st_nbytes
        try:
            if not n or x.cancelled:
                return
            s = _rt.ENGINE.copy_stream(ad)
            if not x.ondev:  # eager or host-to-device data: into the device buffer first
                ad.memcpy(dtmp, tmp.ctypes.data, n, s)
            if ev is not None and not x.ondev:
                ad.stream_wait_event(s, ev)
            K.device_unpack(_plan.plan_for(m.datatype, m.count), _DeviceBytes(dtmp, n), _DeviceBytes(dst, m.span),
                            m.lo, n, _kernel_stream(ad, s))
            ad.stream_synchronize(s)
        finally:
            _staging.put(tmp)
            pool.put(dtmp, n_max)

    return memoryview(tmp)[:n_max], tmp.ctypes.data, post, (ad, dtmp, ev)


def _contiguous_only(m, call: str):
    mem = _host_mem(m, call)
    if not m.contiguous:
        raise NotImplementedError(f"{call}: partitioned communication needs contiguous data "
                                  f"(datatype {m.datatype!r}, count {m.count})")
    return mem


# --- attached buffers for buffered sends -----------------------------------------------------------


class _BsendPool:
    """The attached buffer (MPI_Buffer_attach): first-fit regions of message + BSEND_OVERHEAD."""

    def __init__(self, buf) -> None:
        self.buf = buf
        self.auto = buf is BUFFER_AUTOMATIC
        self.mem = None if self.auto else memoryview(buf).cast("B")
        self.size = 0 if self.auto else self.mem.nbytes
        self.used: list = []  # sorted [start, end)
        self.live = 0

    def alloc(self, n: int, call: str):
        if self.auto:
            self.live += 1
            return memoryview(bytearray(n)), None
        need = n + BSEND_OVERHEAD
        start = 0
        for i, (a, b) in enumerate(self.used):
            if a - start >= need:
                self.used.insert(i, (start, start + need))
                self.live += 1
                return self.mem[start : start + n], (start, start + need)
            start = b
        if self.size - start >= need:
            self.used.append((start, start + need))
            self.live += 1
            return self.mem[start : start + n], (start, start + need)
        free = self.size - sum(b - a for a, b in self.used)
        raise error(ERR_BUFFER, f"{call}: attached buffer too small (need {need} bytes incl. overhead, "
                                f"{free} free of {self.size})")

    def release(self, region) -> None:
        self.live -= 1
        if region is not None:
            self.used.remove(region)


_bsend = {"pool": None}


def _attach(pool_holder: dict, buf, call: str) -> None:
    if pool_holder.get("pool") is not None:
        raise error(ERR_BUFFER, f"{call}: a buffer is already attached")
    if buf is not BUFFER_AUTOMATIC:
        try:
            mv = memoryview(buf)
        except TypeError:
            raise TypeError(f"{call}: expected a writable buffer ({type(buf).__name__})") from None
        if mv.readonly:
            raise BufferError(f"{call}: buffer is read-only")
    pool_holder["pool"] = _BsendPool(buf)


def _detach(pool_holder: dict, call: str):
    pool = pool_holder.get("pool")
    if pool is None:
        raise error(ERR_BUFFER, f"{call}: no buffer attached")
    _rt.ENGINE.wait_until(lambda: pool.live == 0)
    pool_holder["pool"] = None
    return pool.buf


def _flush(pool_holder: dict) -> None:
    pool = pool_holder.get("pool")
    if pool is not None:
        _rt.ENGINE.wait_until(lambda: pool.live == 0)


def Attach_buffer(buf) -> None:
    """Attach a user buffer for buffered sends (MPI_Buffer_attach); BUFFER_AUTOMATIC allowed."""
    _attach(_bsend, buf, "Attach_buffer")


def Detach_buffer():
    """Detach the buffer, after every buffered message left it (MPI_Buffer_detach)."""
    return _detach(_bsend, "Detach_buffer")


def Flush_buffer() -> None:
    """Wait until every buffered message has left the attached buffer (MPI_Buffer_flush)."""
    _flush(_bsend)


def _joint(n: int) -> Xfer:
    """An Xfer that completes when ``n`` parts have called ``part_done``."""
    j = Xfer(GREQ)
    j.got = n
    j.done = n == 0
    return j


def _part_done(j: Xfer, x: Xfer, status_from: bool = False) -> None:
    if x.err and not j.err:
        j.err, j.errmsg = x.err, x.errmsg
    if status_from:
        j.st_source, j.st_tag, j.st_nbytes, j.cancelled = x.st_source, x.st_tag, x.st_nbytes, x.cancelled
    j.got -= 1
    if j.got == 0:
        cb = j.on_done
        if cb is not None:
            j.on_done = None
            cb(j)
        j.done = True  # after the callback, as Engine._finish


def _cancel_object_send(j: Xfer, main: Xfer, parts) -> None:
    """MPI_Cancel of an object send with device parts: cancel the object message; only once
    that is known cancelled (the receiver never saw it), cancel the parts it announces, which
    nobody will receive now.  Cancelling them earlier could strand a receiver that matched it."""
    eng = _rt.ENGINE

    def then(xx) -> None:
        if xx.cancelled:
            j.cancelled = True
            for p in parts:
                eng.cancel(p)

    with eng.lock:
        if main.done:
            return
        prev = main.on_done
        main.on_done = then if prev is None else (lambda xx: (then(xx), prev(xx)))
    eng.cancel(main)


def _done_xfer(source: int = PROC_NULL, tag: int = ANY_TAG) -> Xfer:
    x = Xfer(RECV)
    x.done = True
    x.st_source, x.st_tag, x.st_nbytes = source, tag, 0
    return x


def _all_of(xs, keep) -> Xfer:
    """A joint Xfer that completes when every operation of ``xs`` has; it references ``keep``
    (the memory they read), and the operations reference it until they complete."""
    j = _joint(len(xs))
    j.bufs = keep
    for x in xs:
        _after(x, lambda x=x: _part_done(j, x))
    return j


class Comm:
    """Communication context (MPI_Comm)."""

    __slots__ = ("_ctx", "_w", "_rank", "_size", "_group", "_errh", "_name", "_cseq", "_bpool",
                 "_rw", "__weakref__")

    def __init__(self, comm: "Comm | None" = None) -> None:
        if comm is None:
            self._set_null()
        else:
            self._copy_from(comm)

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

    def __eq__(self, other) -> bool:
        if not isinstance(other, Comm):
            return NotImplemented
        return self._ctx == other._ctx and self._w == other._w

    def __ne__(self, other) -> bool:
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __hash__(self) -> int:
        return hash((self._ctx, self._w))

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

    def _raise(self, exc: MPIException):
        self._errh.handle(self, exc)

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

    def Get_attr(self, keyval: int):
        """Predefined attribute value (MPI_Comm_get_attr); None when not set."""
        self._check("Comm.Get_attr")
        if keyval == TAG_UB:
            return TAG_UB_VALUE
        if keyval == UNIVERSE_SIZE:
            return _rt.ENGINE.size
        if keyval == WTIME_IS_GLOBAL:
            return 0
        if keyval == APPNUM:
            return 0
        return None

    # --- error handling -------------------------------------------------------------------
    def Get_errhandler(self) -> Errhandler:
        """The communicator's error handler (MPI_Comm_get_errhandler)."""
        return self._errh

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the error handler (MPI_Comm_set_errhandler)."""
        if not isinstance(errhandler, Errhandler) or not errhandler:
            raise error(ERR_ARG, f"Comm.Set_errhandler: not a valid error handler ({errhandler!r})")
        self._errh = errhandler

    @classmethod
    def Create_errhandler(cls, errhandler_fn) -> Errhandler:
        """Create a user error handler ``fn(comm, errorcode)`` (MPI_Comm_create_errhandler)."""
        if not callable(errhandler_fn):
            raise TypeError("Comm.Create_errhandler: expected a callable")
        return Errhandler._make("user", errhandler_fn, getattr(errhandler_fn, "__name__", "user"))

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the error handler with ``errorcode`` (MPI_Comm_call_errhandler)."""
        self._errh.handle(self, MPIException(int(errorcode)))

    def Abort(self, errorcode: int = 0) -> None:
        """Terminate every process of the job (MPI_Abort)."""
        _rt.abort(int(errorcode))

    # --- lifecycle ------------------------------------------------------------------------
    def Free(self) -> None:
        """Free the communicator (MPI_Comm_free)."""
        self._check("Comm.Free")
        if self._ctx in (0, 4):
            raise error(ERR_COMM, f"Comm.Free: cannot free a predefined communicator ({self._name})")
        eng = _rt.ENGINE
        for c in (self._ctx, self._ctx + 1, self._ctx + 2, self._ctx + 3):
            eng.matcher.drop_context(c)
        self._set_null()

    # --- point-to-point: posting ----------------------------------------------------------
    def _isend(self, buf, dest, tag, mode: int, call: str, stream=None):
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if dest == PROC_NULL:
            return None
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        m = _msg(buf, True, dest, call)
        if _device(m):
            return self._send_device(m, dest, tag, mode, call, stream)
        return self._send_out(_out(m, call, stream), dest, tag, mode, call, _sig(m.datatype))

    def _send_device(self, m, dest: int, tag: int, mode: int, call: str, stream):
        """Post a send of device memory: packed on the device when non-contiguous (where the kernels
        run), then device to device when large (``_device_send``), else through host staging."""
        release = None
        if not m.contiguous:
            packed = _device_pack(m, stream)
            if packed is not None:
                m, stream, release = packed
        eng = _rt.ENGINE
        if m.contiguous and mode != BUFFERED and m.nbytes > eng.eager_limit:
            x = _device_send(eng, m, self._w[dest], self._rank, tag, self._ctx, mode, call, stream)
            if release is not None:
                _after(x, release)
            return x
        out = _out(m, call, stream)
        if release is not None:
            release()  # _out copied the packed bytes to the host
        return self._send_out(out, dest, tag, mode, call, _sig(m.datatype))

    def _send_out(self, out, dest: int, tag: int, mode: int, call: str, sig: int):
        """Post the bytes ``_out`` prepared; its staging array goes back when the send completes."""
        mem, addr, release = out
        if mode == BUFFERED:
            x = self._bsend(mem, dest, tag, call, sig)
        else:
            x = _rt.ENGINE.isend([mem], len(mem), self._w[dest], self._rank, tag, self._ctx, mode, call, (addr,),
                                 sig)
        if release is not None:
            _after(x, release)
        return x

    def _bsend(self, mem, dest: int, tag: int, call: str, sig: int = 0):
        holder = self._bpool if self._bpool.get("pool") is not None else _bsend
        pool = holder.get("pool")
        if pool is None:
            raise error(ERR_BUFFER, f"{call}: no buffer attached (use Attach_buffer; {len(mem)} bytes)")
        copy, region = pool.alloc(len(mem), call)
        copy[:] = mem
        x = _rt.ENGINE.isend([copy], len(copy), self._w[dest], self._rank, tag, self._ctx, STANDARD, call,
                             None, sig)
        if x.done:
            pool.release(region)
            if x.err:
                raise error(x.err, x.errmsg)
        else:
            x.on_done = lambda _x: pool.release(region)
        done = Xfer(GREQ)
        done.done = True
        return done

    def _irecv(self, buf, source, tag, call: str, stream=None):
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if source == PROC_NULL:
            return None
        source = self._src(source, call)
        tag = self._rtag(tag, call)
        m = _msg(buf, False, source, call)
        mem, addr, post, dev = _in(m, call, stream)
        wpeer = ANY_SOURCE if source == ANY_SOURCE else self._w[source]
        return _rt.ENGINE.irecv(mem, len(mem), source, wpeer, tag, self._ctx, call, addr, _sig(m.datatype), post,
                                dev)

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
            x = _done_xfer()
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
        """Send and receive in one call (MPI_Sendrecv)."""
        try:
            r = self._irecv(recvbuf, source, recvtag, "Sendrecv", stream)
            s = self._isend(sendbuf, dest, sendtag, STANDARD, "Sendrecv", stream)
            self._wait(s, None, "Sendrecv")
            self._wait(r, status, "Sendrecv")
        except MPIException as e:
            self._raise(e)

    def _replace_copy(self, buf, dest, call: str, stream=None):
        if dest == PROC_NULL:
            return None
        m = _msg(buf, True, dest, call)
        mem, _, release = _out(m, call, stream)
        copy = bytearray(mem)
        if release is not None:
            release()
        return copy

    def Sendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                         recvtag: int = ANY_TAG, status: Status | None = None, *, stream=None) -> None:
        """Send and receive through one buffer (MPI_Sendrecv_replace)."""
        try:
            self._check("Sendrecv_replace")
            if dest != PROC_NULL:
                self._peer(dest, "Sendrecv_replace", "destination")
            copy = self._replace_copy(buf, dest, "Sendrecv_replace", stream)
            r = self._irecv(buf, source, recvtag, "Sendrecv_replace", stream)
            s = self._isend(copy, dest, sendtag, STANDARD, "Sendrecv_replace") if copy is not None else None
            self._wait(s, None, "Sendrecv_replace")
            self._wait(r, status, "Sendrecv_replace")
        except MPIException as e:
            self._raise(e)

    def _isendrecv(self, r, s, keep) -> Request:
        j = _joint(2)
        j.st_source, j.st_tag = PROC_NULL, ANY_TAG
        eng = _rt.ENGINE
        with eng.lock:
            for x, is_recv in ((s, False), (r, True)):
                if x is None:
                    x = _done_xfer()
                if x.done:
                    _part_done(j, x, is_recv)
                else:
                    prev = x.on_done
                    x.on_done = (lambda xx, f=is_recv, p=prev: (p(xx) if p else None, _part_done(j, xx, f)))
        return Request._of(j, self, None, keep)

    def Isendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                  recvtag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking send-receive (MPI_Isendrecv)."""
        try:
            r = self._irecv(recvbuf, source, recvtag, "Isendrecv", stream)
            s = self._isend(sendbuf, dest, sendtag, STANDARD, "Isendrecv", stream)
            return self._isendrecv(r, s, (sendbuf, recvbuf))
        except MPIException as e:
            self._raise(e)

    def Isendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                          recvtag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking send-receive through one buffer (MPI_Isendrecv_replace)."""
        try:
            self._check("Isendrecv_replace")
            if dest != PROC_NULL:
                self._peer(dest, "Isendrecv_replace", "destination")
            copy = self._replace_copy(buf, dest, "Isendrecv_replace", stream)
            r = self._irecv(buf, source, recvtag, "Isendrecv_replace", stream)
            s = self._isend(copy, dest, sendtag, STANDARD, "Isendrecv_replace") if copy is not None else None
            return self._isendrecv(r, s, (buf, copy))
        except MPIException as e:
            self._raise(e)

    # --- probe ----------------------------------------------------------------------------
    def _probe_args(self, source, tag, call):
        self._check(call)
        return self._src(source, call), self._rtag(tag, call)

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Wait for a matching message without receiving it (MPI_Probe)."""
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
            return Prequest._persistent(lambda: _done_xfer(), self, buf)
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        m = _msg(buf, True, dest, call)
        if not _device(m):
            _host_mem(m, call)
        sig = _sig(m.datatype)
        # non-contiguous and device data are packed or staged at every Start
        if not _device(m):
            fixed = _out(m, call) if m.contiguous else None
            return Prequest._persistent(lambda: self._send_out(fixed or _out(m, call), dest, tag, mode, call, sig),
                                        self, buf)
        return Prequest._persistent(lambda: self._send_device(m, dest, tag, mode, call, stream), self, buf)

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
                return Prequest._persistent(lambda: _done_xfer(), self, buf)
            source = self._src(source, call)
            tag = self._rtag(tag, call)
            m = _msg(buf, False, source, call)
            if not _device(m):
                _host_mem(m, call)
            sig = _sig(m.datatype)
            wpeer = ANY_SOURCE if source == ANY_SOURCE else self._w[source]
            ctx = self._ctx

            def start():
                mem, addr, post, dev = _in(m, call, stream)
                return _rt.ENGINE.irecv(mem, len(mem), source, wpeer, tag, ctx, call, addr, sig, post, dev)

            return Prequest._persistent(start, self, buf)
        except MPIException as e:
            self._raise(e)

    # --- partitioned ----------------------------------------------------------------------
    def Psend_init(self, buf, partitions: int, dest: int, tag: int = 0, info=None) -> Prequest:
        """Partitioned send (MPI_Psend_init): each partition leaves when marked ready."""
        try:
            call = "Psend_init"
            self._check(call)
            partitions = _partitions(partitions, call)
            if dest == PROC_NULL:
                return _PartRequest._make(None, partitions, self, buf, send=True, start=lambda: _done_xfer())
            dest = self._peer(dest, call, "destination")
            tag = self._stag(tag, call)
            mem = _contiguous_only(_msg(buf, True, dest, call), call)
            if len(mem) % partitions:
                raise error(ERR_COUNT, f"{call}: buffer of {len(mem)} bytes does not split into {partitions} partitions")
            return _PartRequest._make(mem, partitions, self, buf, send=True, peer=dest, tag=tag)
        except MPIException as e:
            self._raise(e)

    def Precv_init(self, buf, partitions: int, source: int = ANY_SOURCE, tag: int = ANY_TAG, info=None) -> Prequest:
        """Partitioned receive (MPI_Precv_init)."""
        try:
            call = "Precv_init"
            self._check(call)
            partitions = _partitions(partitions, call)
            if source == PROC_NULL:
                return _PartRequest._make(None, partitions, self, buf, send=False, start=lambda: _done_xfer())
            if source == ANY_SOURCE or tag == ANY_TAG:
                raise error(ERR_ARG, f"{call}: partitioned receives take no wildcards (source {source}, tag {tag})")
            source = self._peer(source, call, "source")
            tag = self._stag(tag, call)
            mem = _contiguous_only(_msg(buf, False, source, call), call)
            if len(mem) % partitions:
                raise error(ERR_COUNT, f"{call}: buffer of {len(mem)} bytes does not split into {partitions} partitions")
            return _PartRequest._make(mem, partitions, self, buf, send=False, peer=source, tag=tag)
        except MPIException as e:
            self._raise(e)

    # --- object (lowercase) API -----------------------------------------------------------
    # Device arrays inside an object travel as messages of their own ("parts"): standard sends of
    # the arrays through the buffer path (device to device) on the parts context ctx + 3, tagged
    # with the sequence number the object message's header carries.  They are posted before the
    # object message, so every part's envelope has arrived by the time that one matches; the
    # receiver then takes them from the object message's source.  A sender's parts complete only
    # when matched, so receives post them as soon as the object message arrives (a completion
    # callback), whatever else the receiving rank is waiting for.
    def _osend(self, obj, dest, tag, mode, call):
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if dest == PROC_NULL:
            return None
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        if mode == BUFFERED:  # one message in the attached buffer: device arrays go in band, through host memory
            bufs, n = _pickle.dumps(obj)
            return self._bsend(memoryview(b"".join(bufs)), dest, tag, call)
        bufs, n, parts = _pickle.dumps_parts(obj)
        if parts is not None:
            return self._osend_parts(bufs, n, parts, dest, tag, mode, call)
        return _rt.ENGINE.isend(bufs, n, self._w[dest], self._rank, tag, self._ctx, mode, call)

    def _parts_comm(self) -> "Comm":
        """This communicator on its parts context (ctx + 3)."""
        c = Comm.__new__(Comm)
        c._copy_from(self)
        c._ctx = self._ctx + 3
        return c

    def _osend_parts(self, bufs, n: int, parts, dest: int, tag: int, mode: int, call: str):
        """Send the device parts (empty arrays send nothing), then the object message; one joint
        Xfer completes when they all have, and keeps the arrays alive until then."""
        seq, arrays = parts
        pc = self._parts_comm()
        xs = [pc._isend(a, dest, seq, STANDARD, call) for a in arrays if a.nbytes]
        main = _rt.ENGINE.isend(bufs, n, self._w[dest], self._rank, tag, self._ctx, mode, call)
        j = _all_of(xs + [main], arrays)
        j.cancel_fn = lambda: _cancel_object_send(j, main, xs)
        return j

    def _orecv(self, source, tag, call, watch: bool = False):
        """Post the receive of an object message; ``watch``: post its parts' receives on arrival."""
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if source == PROC_NULL:
            return None
        source = self._src(source, call)
        tag = self._rtag(tag, call)
        wpeer = ANY_SOURCE if source == ANY_SOURCE else self._w[source]
        if watch:
            return _rt.ENGINE.irecv(None, 0, source, wpeer, tag, self._ctx, call, post=self._oparts)
        return _rt.ENGINE.irecv(None, 0, source, wpeer, tag, self._ctx, call)

    def _oparts(self, x) -> None:
        """Completion callback of an object receive (inside a progress pass): post the receives
        of its device parts, if it has any; ``x.result`` keeps them for :meth:`_oload`."""
        if x.err or x.cancelled:
            return
        try:
            pend = _pickle.parts_of(x.mem)
        except Exception:  # a malformed message: _oload reports it  # noqa: BLE001
            return
        if pend is not None:
            x.result = self._post_parts(pend, x.st_source, x.call)

    def _owhole(self, x, watched: bool) -> Xfer:
        """A joint operation that completes when object receive ``x`` has and its device parts
        have landed, with ``x``'s status: Test never blocks on parts, Cancel reaches ``x``.
        ``watched``: ``x`` posts its parts itself (:meth:`_orecv` with ``watch``)."""
        o = _joint(1)
        o.cancel_fn = lambda: _rt.ENGINE.cancel(x)

        def whole(xx) -> None:
            if not watched:
                self._oparts(xx)
            res = xx.result
            if res is None:
                _part_done(o, xx, True)
            else:  # when its parts have landed
                _after(res[1], lambda: _part_done(o, xx, True))

        _after(x, lambda: whole(x))
        return o

    def _post_parts(self, pend, src: int, call: str):
        """Allocate the device arrays of an object message from rank ``src`` and post the receives
        of its parts, with no progress pass (this runs in completion callbacks too).  Returns
        ``(arrays, joint Xfer)``; where the arrays cannot be made, ``(exception, joint)``, and the
        parts are received and dropped, so that the sender still completes."""
        eng = _rt.ENGINE
        ctx, seq, wsrc = self._ctx + 3, pend.seq, self._w[src]
        err = None
        try:
            arrays = _pickle.alloc(pend.specs)
        except Exception as e:  # e.g. out of device memory: raised where the object is returned  # noqa: BLE001
            arrays, err = None, e
        sizes = [_pickle.part_nbytes(spec) for spec in pend.specs]
        j = _joint(sum(1 for nb in sizes if nb))
        j.bufs = arrays  # the destinations stay alive until every part has landed
        with eng.lock:
            for i, nb in enumerate(sizes):
                if not nb:
                    continue
                x = Xfer(RECV)
                x.call, x.ctx, x.src, x.wpeer, x.tag = call, ctx, src, wsrc, seq
                x.dynamic, x.mem, x.cap, post = True, None, 0, None
                if err is None:
                    try:
                        m = _msg(arrays[i], False, src, call)
                        mem, addr, post, dev = _in(m, call)
                    except Exception as e:  # noqa: BLE001
                        err = e
                    else:
                        x.dynamic, x.mem, x.cap, x.addr, x.dev = False, mem, len(mem), addr, dev
                        x.sig = _sig(m.datatype)

                def done(xx, post=post):
                    if post is not None:
                        post(xx)
                    _part_done(j, xx)

                x.on_done = done
                hit = eng.matcher.post_recv(ctx, src, seq, x)
                if hit is not None:
                    eng.deliver(x, hit)
                elif wsrc in eng.failed:
                    eng.matcher.cancel_recv(ctx, x)
                    eng._fail_recv_for_failure(x)
        return (arrays if err is None else err), j

    def _oload(self, x, call: str, pend=None):
        """The object of completed object receive ``x``, once its device parts have landed
        (``pend``: what ``loads`` found in ``x`` already, if the caller looked)."""
        res = x.result
        if res is None:
            if pend is None:
                pend = _pickle.loads(x.mem)
                if type(pend) is not _pickle.Pending:
                    return pend
            res = self._post_parts(pend, x.st_source, call)
        arrays, j = res
        if not j.done:
            _rt.ENGINE.wait(j)
        if type(arrays) is not list:
            raise arrays
        if j.err:
            raise error(j.err, j.errmsg)
        return _pickle.loads(x.mem, arrays)

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
        """Receive a Python object (MPI_Recv).  ``buf`` is accepted for mpi4py compatibility;
        gpumpi sizes the receive from the message, so it is never needed."""
        try:
            x = self._orecv(source, tag, "recv")
            self._wait(x, status, "recv")
            if x is None:
                return None
            obj = _pickle.loads(x.mem)
            return self._oload(x, "recv", obj) if type(obj) is _pickle.Pending else obj
        except MPIException as e:
            self._raise(e)

    def irecv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking receive of a Python object (MPI_Irecv); ``wait()`` returns it, its device
        arrays received."""
        try:
            x = self._orecv(source, tag, "irecv", True)
            if x is None:
                return Request._of(_done_xfer(), self, None)
            return Request._of(self._owhole(x, True), self, lambda _o: self._oload(x, "irecv"))
        except MPIException as e:
            self._raise(e)

    def sendrecv(self, sendobj, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None):
        """Send and receive Python objects (MPI_Sendrecv)."""
        try:
            r = self._orecv(source, recvtag, "sendrecv", True)  # the peer's parts may wait on ours
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
        _attach(self._bpool, buf, "Comm.Attach_buffer")

    def Detach_buffer(self):
        """Detach this communicator's buffer (MPI_Comm_detach_buffer)."""
        self._check("Comm.Detach_buffer")
        return _detach(self._bpool, "Comm.Detach_buffer")

    def Flush_buffer(self) -> None:
        """Wait for this communicator's buffered messages (MPI_Comm_flush_buffer)."""
        self._check("Comm.Flush_buffer")
        _flush(self._bpool)

    # --- collective plumbing (point-to-point on the collective context) --------------------
    def _ctag(self) -> int:
        self._cseq = (self._cseq + 1) & 0x1FFFFFFF
        return self._cseq

    def _csend(self, mem, dest: int, tag: int, call: str):
        return _rt.ENGINE.isend([mem], len(mem), self._w[dest], self._rank, tag, self._ctx + 1, STANDARD, call)

    def _crecv(self, mem, source: int, tag: int, call: str):
        cap = 0 if mem is None else len(mem)
        return _rt.ENGINE.irecv(mem, cap, source, self._w[source], tag, self._ctx + 1, call)

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
            ctx = self._agree_ctx("Comm.Dup")
            c = type(self).__new__(type(self))
            c._setup(ctx, self._rw, self._rw[self._rank])
            c._errh = self._errh
            return c
        except MPIException as e:
            self._raise(e)

    Clone = Dup

    def Dup_with_info(self, info) -> "Intracomm":
        """Duplicate with new info hints (MPI_Comm_dup_with_info)."""
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
            color, key = int(color), int(key)
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

    # --- the collectives needed by every program (full set: collectives issue) ------------
    def Barrier(self) -> None:
        """Barrier synchronization, dissemination algorithm (MPI_Barrier)."""
        try:
            call = "Barrier"
            self._check(call)
            n, r = self._size, self._rank
            tag = self._ctag()
            k = 1
            empty = memoryview(b"")
            while k < n:
                rx = self._crecv(memoryview(bytearray(0)), (r - k) % n, tag, call)
                sx = self._csend(empty, (r + k) % n, tag, call)
                self._cwait([sx, rx])
                k <<= 1
        except MPIException as e:
            self._raise(e)

    def _root(self, root, call: str) -> int:
        if type(root) is not int:
            try:
                root = root.__index__()
            except AttributeError:
                raise TypeError(f"{call}: root must be an integer ({type(root).__name__})") from None
        if not 0 <= root < self._size:
            raise error(ERR_ROOT, f"{call}: invalid root ({root}, communicator size {self._size})")
        return root

    def _tree_bcast(self, mem, root: int, tag: int, call: str, dynamic: bool = False):
        """Binomial-tree broadcast of ``mem`` from ``root``; returns the received bytes."""
        n, r = self._size, self._rank
        rel = (r - root) % n
        mask = 1
        while mask < n:
            if rel & mask:
                src = (rel - mask + root) % n
                x = self._crecv(None if dynamic else mem, src, tag, call)
                self._cwait([x])
                if dynamic:
                    mem = memoryview(x.mem)
                elif x.st_nbytes != len(mem):
                    raise error(ERR_COUNT if x.st_nbytes < len(mem) else 14,
                                f"{call}: root sent {x.st_nbytes} bytes, this rank expects {len(mem)}")
                break
            mask <<= 1
        mask >>= 1
        xs = []
        while mask > 0:
            if rel + mask < n:
                xs.append(self._csend(mem, (rel + mask + root) % n, tag, call))
            mask >>= 1
        self._cwait(xs)
        return mem

    def Bcast(self, buf, root: int = 0, *, stream=None) -> None:
        """Broadcast a buffer from root, binomial tree (MPI_Bcast)."""
        try:
            call = "Bcast"
            self._check(call)
            root = self._root(root, call)
            m = _msg(buf, self._rank == root, 0, call)
            if self._rank == root:
                mem, _, release = _out(m, call, stream)
                self._tree_bcast(mem, root, self._ctag(), call)
                if release is not None:
                    release()
            else:
                mem, _, post, _ = _in(m, call, stream)
                self._tree_bcast(mem, root, self._ctag(), call)
                if post is not None:
                    done = Xfer(RECV)
                    done.st_nbytes = len(mem)
                    post(done)
        except MPIException as e:
            self._raise(e)

    def barrier(self) -> None:
        """Barrier (object API, same as Barrier)."""
        self.Barrier()

    def bcast(self, obj=None, root: int = 0):
        """Broadcast a Python object from root (MPI_Bcast of its pickle)."""
        try:
            call = "bcast"
            self._check(call)
            root = self._root(root, call)
            tag = self._ctag()
            if self._rank == root:
                bufs, _n = _pickle.dumps(obj)
                data = memoryview(b"".join(bufs))
                self._tree_bcast(data, root, tag, call)
                return obj if self._size == 1 else _pickle.loads(bytearray(data))
            data = self._tree_bcast(None, root, tag, call, dynamic=True)
            return _pickle.loads(data)
        except MPIException as e:
            self._raise(e)

    def Create_intercomm(self, local_leader: int, peer_comm, remote_leader: int, tag: int = 0):
        """Create an intercommunicator (MPI_Intercomm_create)."""
        raise NotImplementedError("Intracomm.Create_intercomm: intercommunicators are not supported yet")


def eng_next_ctx(eng) -> int:
    v = getattr(eng, "next_ctx", None)
    if v is None:
        v = eng.next_ctx = 8
    return v


def _partitions(partitions, call: str) -> int:
    p = int(partitions)
    if p < 1:
        raise error(ERR_COUNT, f"{call}: partitions must be at least 1 ({p})")
    return p


class _PartRequest(Prequest):
    """Partitioned request: Pready/Pready_range/Pready_list on the sender, Parrived on the receiver.

    Each partition travels as its own message on the communicator's partitioned
    context, prefixed with its index, so partitions may be marked ready in any order.
    """

    __slots__ = ("_mem", "_nparts", "_send", "_peer", "_ptag", "_ready", "_arrived", "_joint", "_psize")

    @classmethod
    def _make(cls, mem, partitions, comm, buf, send: bool, peer=None, tag=0, start=None):
        r = cls.__new__(cls)
        r._x = None
        r._comm, r._post, r._keep, r._value = comm, None, buf, None
        r._inactive_x = None
        r._mem, r._nparts, r._send, r._peer, r._ptag = mem, partitions, send, peer, tag
        r._psize = 0 if mem is None else len(mem) // partitions
        r._ready = r._arrived = None
        r._joint = None
        r._start = start if start is not None else r._begin
        return r

    def _begin(self):
        comm = self._comm
        eng = _rt.ENGINE
        n = self._nparts
        j = _joint(n)
        j.st_source, j.st_tag = (comm._rank, self._ptag) if self._send else (self._peer, self._ptag)
        self._joint = j
        if self._send:
            self._ready = [False] * n
            return j
        self._arrived = [False] * n
        ps = self._psize
        wpeer = comm._w[self._peer]
        for _ in range(n):
            x = eng.irecv(None, 0, self._peer, wpeer, self._ptag, comm._ctx + 2, "Precv_init")

            def got(xx, self=self, j=j, ps=ps):
                if not xx.err:
                    (i,) = _PART_IDX.unpack_from(xx.mem, 0)
                    self._mem[i * ps : (i + 1) * ps] = memoryview(xx.mem)[8 : 8 + ps]
                    self._arrived[i] = True
                _part_done(j, xx)
                j.st_source, j.st_tag, j.st_nbytes = self._peer, self._ptag, len(self._mem)

            if x.done:
                got(x)
            else:
                x.on_done = got
        return j

    def _active_part(self, call: str):
        if self._x is None or self._joint is None:
            raise error(ERR_REQUEST, f"{call}: partitioned request is not active (call Start first)")

    def Pready(self, partition: int) -> None:
        """Mark one send partition ready (MPI_Pready)."""
        self._pready([partition], "Prequest.Pready")

    def Pready_range(self, partition_low: int, partition_high: int) -> None:
        """Mark partitions low..high (inclusive) ready (MPI_Pready_range)."""
        self._pready(range(int(partition_low), int(partition_high) + 1), "Prequest.Pready_range")

    def Pready_list(self, partitions) -> None:
        """Mark the listed partitions ready (MPI_Pready_list)."""
        self._pready(list(partitions), "Prequest.Pready_list")

    def _pready(self, parts, call: str) -> None:
        if not self._send:
            raise error(ERR_REQUEST, f"{call}: not a partitioned send request")
        if self._mem is None:  # PROC_NULL
            return
        self._active_part(call)
        comm = self._comm
        eng = _rt.ENGINE
        ps = self._psize
        for p in parts:
            p = int(p)
            if not 0 <= p < self._nparts:
                raise error(ERR_ARG, f"{call}: partition out of range ({p}, partitions {self._nparts})")
            if self._ready[p]:
                raise error(ERR_ARG, f"{call}: partition already marked ready ({p})")
            self._ready[p] = True
            bufs = [memoryview(_PART_IDX.pack(p)), self._mem[p * ps : (p + 1) * ps]]
            x = eng.isend(bufs, 8 + ps, comm._w[self._peer], comm._rank, self._ptag, comm._ctx + 2, STANDARD, call)
            j = self._joint
            if x.done:
                _part_done(j, x)
            else:
                x.on_done = lambda xx, j=j: _part_done(j, xx)

    def Parrived(self, partition: int) -> bool:
        """Whether a receive partition has arrived (MPI_Parrived)."""
        call = "Prequest.Parrived"
        if self._send:
            raise error(ERR_REQUEST, f"{call}: not a partitioned receive request")
        p = int(partition)
        if not 0 <= p < self._nparts:
            raise error(ERR_ARG, f"{call}: partition out of range ({p}, partitions {self._nparts})")
        if self._mem is None:
            return True
        self._active_part(call)
        if not self._arrived[p]:
            eng = _rt.ENGINE
            with eng.lock:
                eng.progress()
        return self._arrived[p]


class Message:
    """Matched message handle from Mprobe/Improbe (MPI_Message)."""

    __slots__ = ("_arr", "_comm", "_noproc")

    def __init__(self, message: "Message | None" = None) -> None:
        if message is None:
            self._arr, self._comm, self._noproc = None, None, False
        else:
            self._arr, self._comm, self._noproc = message._arr, message._comm, message._noproc

    @classmethod
    def _of(cls, arr, comm) -> "Message":
        m = cls.__new__(cls)
        m._arr, m._comm, m._noproc = arr, comm, False
        return m

    @classmethod
    def _no_proc(cls) -> "Message":
        m = cls.__new__(cls)
        m._arr, m._comm, m._noproc = None, None, True
        return m

    def __eq__(self, other) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._arr is other._arr and self._noproc == other._noproc

    def __hash__(self) -> int:
        return hash((id(self._arr), self._noproc))

    def __bool__(self) -> bool:
        return self._arr is not None or self._noproc

    def _take(self, call: str):
        if self._noproc:
            self._noproc = False
            return None
        if self._arr is None:
            raise error(ERR_REQUEST, f"{call}: null message (MESSAGE_NULL)")
        a, comm = self._arr, self._comm
        self._arr = None
        return a, comm

    def _post(self, buf, call: str, stream=None):
        t = self._take(call)
        if t is None:
            return None, None
        a, comm = t
        x = Xfer(RECV)
        x.call = call
        x.ctx = a.ctx
        x.src = a.src
        x.wpeer = a.peer
        x.tag = a.tag
        if buf is None:
            x.dynamic = True
            x.mem, x.cap = None, 0
        else:
            m = _msg(buf, False, a.src, call)
            mem, x.addr, x.on_done, x.dev = _in(m, call, stream)
            x.sig = _sig(m.datatype)
            x.dynamic = False
            x.mem, x.cap = mem, len(mem)
        _rt.ENGINE.deliver(x, a)
        return x, comm

    def Recv(self, buf, status: Status | None = None, *, stream=None) -> None:
        """Receive the matched message (MPI_Mrecv)."""
        x, comm = self._post(buf, "Message.Recv", stream)
        if x is None:
            if status is not None:
                status._fill(PROC_NULL, ANY_TAG, 0)
            return
        comm._wait(x, status, "Message.Recv")

    def Irecv(self, buf, *, stream=None) -> Request:
        """Nonblocking receive of the matched message (MPI_Imrecv)."""
        x, comm = self._post(buf, "Message.Irecv", stream)
        if x is None:
            return Request._of(_done_xfer(), None)
        return Request._of(x, comm, None, buf)

    def recv(self, status: Status | None = None):
        """Receive the matched object message."""
        x, comm = self._post(None, "Message.recv")
        if x is None:
            if status is not None:
                status._fill(PROC_NULL, ANY_TAG, 0)
            return None
        comm._wait(x, status, "Message.recv")
        return comm._oload(x, "Message.recv")

    def irecv(self) -> Request:
        """Nonblocking receive of the matched object message."""
        x, comm = self._post(None, "Message.irecv")
        if x is None:
            return Request._of(_done_xfer(), None)
        return Request._of(comm._owhole(x, False), comm, lambda _o: comm._oload(x, "Message.irecv"))


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message._no_proc()


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
        self._check("Comm.Is_inter")
        return True


COMM_NULL = Comm()
