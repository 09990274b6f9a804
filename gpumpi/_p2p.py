"""The one buffer path: a parsed buffer message in, an operation on the engine out (L5).

Theory of operation
===================
Every call that moves a user buffer -- point-to-point, ``Message.Recv``, the device parts
of object messages, collectives -- goes through here, on an explicit context id (a
communicator's ``ctx`` for point-to-point, ``ctx + 1`` for collectives, ...), with the
destination or source already translated to a world rank.  This module decides what the
engine is handed:

* host memory, contiguous: the buffer itself (no copy);
* host memory, non-contiguous: packed into a pooled staging array (``_pool``), unpacked
  by the receive's completion callback (exactly the bytes that arrived);
* device memory, large and contiguous: a rendezvous the engine carries out device to
  device (``Engine.isend_device``: a transport's region offer, else the staging
  pipeline), ordered after the producer's stream by an event;
* device memory, non-contiguous: packed on the device by ``kernels.pack`` where the
  kernels can run (else staged to the host and packed there);
* device memory, small: staged through host memory (the eager path);
* buffered sends: copied into the attached buffer (``Attach_buffer``), then standard.

Stream ordering: a send reads after the work queued on ``stream`` (default: the array's
own stream, else the current one); a receive is visible to the host and every stream when
it completes.  ``GPUMPI_STREAM_MODE=none`` leaves ordering to the user.
"""

from __future__ import annotations

from . import _device
from . import _pool
from . import _protocol as _P
from . import _runtime as _rt
from ._arrays import DEVICE as _DEVICE
from ._arrays import SIM as _SIM
from ._arrays import DLPackOwner, NotABufferError, as_buffer
from ._buffers import message_simple
from ._xfer import GREQ, Xfer
from .constants import ANY_TAG, BSEND_OVERHEAD, BUFFER_AUTOMATIC, PROC_NULL
from .datatypes import plan as _plan
from .datatypes.flatten import sigcode as _sigcode
from .errors import ERR_BUFFER, ERR_TYPE, error
from .request import Request, after

STANDARD, SYNCHRONOUS, READY, BUFFERED = _P.STANDARD, _P.SYNCHRONOUS, _P.READY, _P.BUFFERED


def msg(spec, readonly: bool, rank: int, call: str):
    m = message_simple(spec, readonly, rank, 1, call)
    if m is not None and not m.datatype._rec.committed:  # MPI: a type must be committed to communicate
        dt = m.datatype
        raise error(ERR_TYPE, f"{call}: datatype has not been committed ({dt._rec.name or repr(dt)})")
    return m


def host_mem(m, call: str):
    mem = m.mem
    if mem is None:
        raise NotImplementedError(f"{call}: device memory without a host mapping is not supported here ({m.kind})")
    return mem


def on_device(m) -> bool:
    return m.kind == _SIM or m.kind == _DEVICE


def _adapter_of(m):
    """The device adapter of a message's memory (``sim`` memory: the simulated device)."""
    return _device.adapter_for(m.kind)


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


def _device_send(eng, m, wpeer: int, me: int, tag: int, ctx: int, mode: int, call: str, stream, sig: int):
    """Post a large contiguous device send: a rendezvous the engine carries out device to device
    where a transport offers the memory, else through the staging pipeline (``Engine.isend_device``),
    every copy ordered after the producer's stream (none with ``GPUMPI_STREAM_MODE=none``)."""
    ad = _adapter_of(m)
    ad.check_stream(stream)
    ps = None if eng.stream_mode == "none" else _producer_stream(ad, m, stream)
    return eng.isend_device(ad, m.addr + m.lo, ps, m.nbytes, wpeer, me, tag, ctx, mode, call, sig)


def _staged_span(m, ev):
    """Copy the message's bytes from device memory into a host staging array on gpumpi's copy
    stream, after event ``ev`` (the producer's work; None: unordered); ``(array, memoryview of the span)``."""
    ad = _adapter_of(m)
    tmp = _pool.HOST.get(m.span)
    if m.span:
        s = _rt.ENGINE.copy_stream(ad)
        if ev is not None:
            ad.stream_wait_event(s, ev)
        ad.memcpy(tmp.ctypes.data, m.addr + m.lo, m.span, s)
        ad.stream_synchronize(s)
    return tmp, memoryview(tmp)[:m.span]


def signature(dt) -> int:
    """The datatype's signature code (``flatten.sigcode``), cached on the type."""
    code = dt._rec.cache.get("sigcode")
    return code if code is not None else _sigcode(dt)



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


def kernels_for(m):
    """gpumpi.kernels.pack when device kernels can move ``m`` here, else None (pack on the host)."""
    if m.kind == _SIM and m.nbytes > _SIM_KERNEL_MAX:
        return None
    try:
        from .kernels import pack as K

        if m.kind == _SIM:
            _device.use_simulator()
        if K._is_sim() != (m.kind == _SIM):
            return None
        return K
    except ImportError:
        return None


def kernel_stream(ad, s):
    """Order a kernel launch on gpumpi's copy stream ``s``: the simulator runs kernels at once, so
    the work ``s`` waits for is run first; a real launch is queued on ``s`` itself."""
    if ad.name == "sim":
        ad.stream_synchronize(s)
        return 0
    return s


def _device_pack(m, stream):
    """Pack non-contiguous device message ``m`` on the device: ``(packed message, its stream,
    release)`` or None where the kernels cannot run (the caller packs on the host)."""
    K = kernels_for(m)
    if K is None:
        return None
    ad = _adapter_of(m)
    n = m.nbytes
    pool = _pool.device(ad)
    tmp = pool.get(n)
    s = _rt.ENGINE.copy_stream(ad)
    ev = _order_event(ad, m, stream)
    if ev is not None:
        ad.stream_wait_event(s, ev)
    K.device_pack(_plan.plan_for(m.datatype, m.count), _DeviceBytes(m.addr + m.lo, m.span), m.lo,
                  _DeviceBytes(tmp, n), kernel_stream(ad, s))
    if _rt.ENGINE.stream_mode == "none":  # no event will order the peer's read after the kernel
        ad.stream_synchronize(s)
    return _Packed(tmp, n, m.kind, m.datatype), s, lambda: pool.put(tmp, n)


def check_stream(m, stream) -> None:
    """TypeError unless ``stream`` (None, or a stream) suits the memory of message ``m`` (None:
    PROC_NULL); called while validating a call, before anything is posted."""
    if stream is not None and m is not None and on_device(m):
        _adapter_of(m).check_stream(stream)


def outgoing(m, call: str, stream=None):
    """``(bytes, address, release)`` a send moves: the buffer itself when contiguous, else its
    elements packed into a staging array that ``release()`` returns once the send completed.
    Device memory is copied to host memory first (after the work queued on ``stream``)."""
    staged = None
    if on_device(m):  # device memory leaves through a host staging copy (large sends: _device_send)
        staged, mem = _staged_span(m, _order_event(_adapter_of(m), m, stream))
        if m.contiguous:
            return mem, staged.ctypes.data, lambda: _pool.HOST.put(staged)
    else:
        mem = host_mem(m, call)
        if m.contiguous:
            return mem, m.addr + m.lo, None
    n = m.nbytes
    tmp = _pool.HOST.get(n)
    _plan.pack_into(mem, m.lo, m.datatype, m.count, tmp)
    if staged is not None:
        _pool.HOST.put(staged)
    return memoryview(tmp)[:n], tmp.ctypes.data, lambda: _pool.HOST.put(tmp)


def incoming(m, call: str, stream=None):
    """``(memory, address, post, device)`` a receive lands in: the buffer itself when contiguous,
    else a packed staging array that ``post(x)`` unpacks into the buffer when the receive
    completes (exactly the bytes that arrived: a short message fills only its leading
    elements).  Device buffers: a host staging array copied to the device by ``post``, unless
    the message came device to device (to ``device``, the destination address)."""
    if on_device(m):
        return _in_device(m, stream)
    mem = host_mem(m, call)
    if m.contiguous:
        return mem, m.addr + m.lo, None, None
    tmp = _pool.HOST.get(m.nbytes)
    dt, count, lo = m.datatype, m.count, m.lo

    def post(x):
        n = x.st_nbytes
        try:
            if n and not x.cancelled:
                _plan.unpack(tmp, mem, lo, dt, count, n)
        finally:
            _pool.HOST.put(tmp)

    return memoryview(tmp)[:m.nbytes], tmp.ctypes.data, post, None


def _in_device(m, stream):
    """A receive into device memory.  Large messages are written into a contiguous buffer by the
    engine itself (IPC copy or staging chunks, ``x.ondev``); the rest lands in a host staging
    array that ``post`` copies in.  Every write follows the consumer's work queued before the
    call (an event on ``stream`` or the current stream) and is complete when the receive is."""
    ad = _adapter_of(m)
    dst = m.addr + m.lo
    tmp = _pool.HOST.get(m.nbytes)
    dt, count, lo, contiguous = m.datatype, m.count, m.lo, m.contiguous
    ev = _order_event(ad, m, stream)
    K = None if contiguous else kernels_for(m)
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
                _pool.HOST.put(staged)
        finally:
            _pool.HOST.put(tmp)

    return memoryview(tmp)[:m.nbytes], tmp.ctypes.data, post, ((ad, dst, ev) if contiguous else None)


def _in_device_kernels(m, K, ad, tmp, ev):
    n_max = m.nbytes
    pool = _pool.device(ad)
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
                            m.lo, n, kernel_stream(ad, s))
            ad.stream_synchronize(s)
        finally:
            _pool.HOST.put(tmp)
            pool.put(dtmp, n_max)

    return memoryview(tmp)[:n_max], tmp.ctypes.data, post, (ad, dtmp, ev)


def contiguous_only(m, call: str):
    mem = host_mem(m, call)
    if not m.contiguous:
        raise NotImplementedError(f"{call}: partitioned communication needs contiguous data "
                                  f"(datatype {m.datatype!r}, count {m.count})")
    return mem


# --- attached buffers for buffered sends -----------------------------------------------------------


class _BsendPool:
    """The attached buffer (MPI_Buffer_attach): first-fit regions of message + BSEND_OVERHEAD."""

    def __init__(self, buf, mem=None) -> None:
        self.buf = buf
        self.auto = buf is BUFFER_AUTOMATIC
        self.mem = mem  # 1-D 'B' memoryview of the attached bytes (None: BUFFER_AUTOMATIC)
        self.size = 0 if self.auto else self.mem.nbytes
        self.used: list = []  # sorted [start, end)
        self.live = 0
        self.flushes: list = []  # Iflush_buffer operations waiting for live == 0

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
        if self.live == 0 and self.flushes:
            done, self.flushes = self.flushes, []
            for x in done:
                _rt.ENGINE._finish(x)

    def iflush(self) -> Xfer:
        """An operation that completes once every buffered message has left the buffer."""
        x = Xfer(GREQ)
        x.st_source, x.st_tag = PROC_NULL, ANY_TAG
        if self.live == 0:
            x.done = True
        else:
            self.flushes.append(x)
        return x


_bsend = {"pool": None}


def attach(pool_holder: dict, buf, call: str) -> None:
    if pool_holder.get("pool") is not None:
        raise error(ERR_BUFFER, f"{call}: a buffer is already attached")
    mem = None
    if buf is None:  # mpi4py: None means BUFFER_AUTOMATIC
        buf = BUFFER_AUTOMATIC
    if buf is not BUFFER_AUTOMATIC:
        try:  # any writable buffer mpi4py takes: buffer protocol, DLPack, CUDA array interface
            view = as_buffer(buf, False, call)
        except NotABufferError:
            raise TypeError(f"{call}: expected a writable buffer ({type(buf).__name__})") from None
        mem = view.mem
        if mem is None:
            raise BufferError(f"{call}: the attached buffer must be host-addressable memory "
                              f"({view.kind} memory of {type(buf).__name__})")
    pool_holder["pool"] = _BsendPool(buf, mem)


def detach(pool_holder: dict, call: str):
    pool = pool_holder.get("pool")
    if pool is None:
        raise error(ERR_BUFFER, f"{call}: no buffer attached")
    _rt.ENGINE.wait_until(lambda: pool.live == 0)
    pool_holder["pool"] = None
    return pool.buf


def flush(pool_holder: dict) -> None:
    pool = pool_holder.get("pool")
    if pool is not None:
        _rt.ENGINE.wait_until(lambda: pool.live == 0)


def iflush(pool_holder: dict) -> Xfer:
    pool = pool_holder.get("pool")
    if pool is None:
        x = Xfer(GREQ)
        x.st_source, x.st_tag = PROC_NULL, ANY_TAG
        x.done = True
        return x
    with _rt.ENGINE.lock:
        return pool.iflush()


def Iflush_buffer():
    """Nonblocking flush of the attached buffer (MPI_Buffer_iflush): a Request that completes
    once every buffered message has left it."""
    return Request._of(iflush(_bsend), None)


def Attach_buffer(buf) -> None:
    """Attach a user buffer for buffered sends (MPI_Buffer_attach); BUFFER_AUTOMATIC (or None, as mpi4py) allowed."""
    attach(_bsend, buf, "Attach_buffer")


def Detach_buffer():
    """Detach the buffer, after every buffered message left it (MPI_Buffer_detach)."""
    return detach(_bsend, "Detach_buffer")


def Flush_buffer() -> None:
    """Wait until every buffered message has left the attached buffer (MPI_Buffer_flush)."""
    flush(_bsend)


# --- posting ------------------------------------------------------------------------------


def isend(m, wpeer: int, me: int, tag: int, ctx: int, mode: int, call: str, stream=None, bpool=None,
          sig: int | None = None):
    """Post a send of parsed message ``m`` to world rank ``wpeer`` on context ``ctx`` (``me``: the
    sender's rank in its communicator; ``bpool``: the communicator's attached-buffer holder;
    ``sig``: the signature code to carry instead of the datatype's, for a rank forwarding a
    message it received).  Returns the operation: an Xfer, or the shared completed ``SENT``."""
    if sig is None:
        sig = signature(m.datatype)
    if on_device(m):
        x = _send_device(m, wpeer, me, tag, ctx, mode, call, stream, bpool, sig)
        if type(m.obj) is DLPackOwner:  # device copies name the address only: the tensor stays
            after(x, lambda o=m.obj: None)  # the consumer's (deleter not run) until they are done
        return x
    return send_out(outgoing(m, call, stream), wpeer, me, tag, ctx, mode, call, sig, bpool)


def _send_device(m, wpeer: int, me: int, tag: int, ctx: int, mode: int, call: str, stream, bpool, sig: int):
    """Post a send of device memory: packed on the device when non-contiguous (where the kernels
    run), then device to device when large (``_device_send``), else through host staging."""
    release = None
    if not m.contiguous:
        packed = _device_pack(m, stream)
        if packed is not None:
            m, stream, release = packed
    eng = _rt.ENGINE
    if m.contiguous and mode != BUFFERED and _P.send_plan(m.nbytes, eng.eager_limit, mode) == "rts":
        x = _device_send(eng, m, wpeer, me, tag, ctx, mode, call, stream, sig)
        if release is not None:
            after(x, release)
        return x
    out = outgoing(m, call, stream)
    if release is not None:
        release()  # outgoing copied the packed bytes to the host
    return send_out(out, wpeer, me, tag, ctx, mode, call, sig, bpool)


def send_out(out, wpeer: int, me: int, tag: int, ctx: int, mode: int, call: str, sig: int, bpool=None):
    """Post the bytes ``outgoing`` prepared; its staging array goes back when the send completes."""
    mem, addr, release = out
    if mode == BUFFERED:
        x = bsend(mem, wpeer, me, tag, ctx, call, sig, bpool)
    else:
        x = _rt.ENGINE.isend([mem], len(mem), wpeer, me, tag, ctx, mode, call, (addr,), sig)
    if release is not None:
        after(x, release)
    return x


def bsend(mem, wpeer: int, me: int, tag: int, ctx: int, call: str, sig: int = 0, bpool=None):
    """Copy ``mem`` into the attached buffer (the communicator's ``bpool`` if it has one, else
    the process's) and send the copy; the returned operation is already complete."""
    holder = bpool if bpool is not None and bpool.get("pool") is not None else _bsend
    pool = holder.get("pool")
    if pool is None:
        raise error(ERR_BUFFER, f"{call}: no buffer attached (use Attach_buffer; {len(mem)} bytes)")
    copy, region = pool.alloc(len(mem), call)
    copy[:] = mem
    x = _rt.ENGINE.isend([copy], len(copy), wpeer, me, tag, ctx, STANDARD, call, None, sig)
    if x.done:
        pool.release(region)
        if x.err:
            raise error(x.err, x.errmsg)
    else:
        x.on_done = lambda _x: pool.release(region)
    done = Xfer(GREQ)
    done.done = True
    return done


def irecv(m, source: int, wpeer: int, tag: int, ctx: int, call: str, stream=None, sig: int | None = None):
    """Post a receive into parsed message ``m`` from ``source`` (communicator rank or ANY_SOURCE;
    ``wpeer`` its world rank) on context ``ctx``; ``sig`` overrides the signature code the
    engine checks (0: accept any; the caller compares the message's, ``x.msig``)."""
    mem, addr, post, dev = incoming(m, call, stream)
    x = _rt.ENGINE.irecv(mem, len(mem), source, wpeer, tag, ctx, call, addr,
                         signature(m.datatype) if sig is None else sig, post, dev)
    if dev is not None and type(m.obj) is DLPackOwner:  # see isend
        after(x, lambda o=m.obj: None)
    return x


def send_bytes(mem, wpeer: int, me: int, tag: int, ctx: int, call: str):
    """Post a standard send of host bytes gpumpi made itself (control data of collectives)."""
    return _rt.ENGINE.isend([mem], len(mem), wpeer, me, tag, ctx, STANDARD, call)


def recv_bytes(mem, source: int, wpeer: int, tag: int, ctx: int, call: str):
    """Post a receive of host bytes into ``mem`` (None: sized by the message)."""
    return _rt.ENGINE.irecv(mem, 0 if mem is None else len(mem), source, wpeer, tag, ctx, call)
