"""Object messages: plain pickle streams, indexed for zero-copy receipt (L2).

Theory of operation
===================
An object message is what mpi4py sends: a pickle stream (``MPI.pickle.dumps(obj)``); an
empty message is ``None``.  So a message from mpi4py, or from ``Send`` of pickled bytes,
is received by ``recv``, and a message from ``send`` can be received with ``Recv`` and
``pickle.loads``-ed.  gpumpi adds, after the stream's STOP opcode (where ``pickle.loads``
stops reading: "bytes past the pickled representation are ignored"), an optional
*trailer* that indexes the stream::

    stream   the pickle stream; large payloads sit in band, each one 64-byte aligned
    table    pickled tuple of one spec per device part (messages with parts only)
    entries  per large payload: u64 header offset, u64 data offset, u64 length | ro << 63
    footer   u64 stream length, u64 seq, u64 table length, u32 entries, u32 flags, 8-byte MAGIC

The trailer is there only when it says something (large buffers or device parts); it
ends with ``MAGIC``, which a pickle stream never does (``pickle.dumps`` output ends with
STOP, ``.``), and its lengths must add up to the message's, so a plain stream is never
mistaken for an indexed one.

Zero copy both ways
-------------------
The pickler writes to a sink, not to one bytes object.  CPython's C pickler hands any
payload of at least 64 KiB (its frame size target) to the sink's ``write`` as the object
itself, outside any frame, right after flushing the opcodes before it, which end with the
payload's header (``BYTEARRAY8``/``BINBYTES``/``BINBYTES8`` and its length).  So a NumPy
array (which pickles, at protocol 5, as a ``PickleBuffer`` of its own memory) becomes a
segment of the message that *is* the array's memory: the transport reads it from there
(cross-memory attach), no copy on the send side.  Before each such header the sink
inserts no-op opcodes (``N0``: push None, pop; ``K\\x000``: push 0, pop) so that the
payload starts at a multiple of 64 bytes in the message.

``loads`` of an indexed message rebuilds the stream with each indexed payload replaced by
``NEXT_BUFFER`` (``READONLY_BUFFER`` after it for read-only ones) and unpickles it with
those payloads passed as out-of-band buffers: views of the received allocation.  A NumPy
array is rebuilt over the receive buffer, aligned, one copy end to end.  Only payloads
that came from a ``PickleBuffer`` are indexed (its reconstructor takes any buffer, per
protocol 5); ``bytes`` and ``bytearray`` objects stay what they are.

Device arrays
-------------
CuPy arrays, Numba device arrays and simulated device arrays (types with a true
``__gpumpi_sim__``) are recognised by type: the array-library registry
(:mod:`gpumpi._backends`, keyed by the top-level module of the type) names a backend that
knows how to copy, allocate and convert such arrays, importing its library only when
called.  Two ways out:

* ``dumps_parts(obj)`` (point-to-point): each device array becomes a placeholder
  (``gpumpi._pickle._part(i)``) in the stream and is handed back, contiguous, to the
  caller, which sends it as a message of its own through the buffer path (device to
  device).  The trailer carries ``seq`` (this process's number for the message: the parts'
  tag) and the table of specs ``(backend, class, shape, dtype, order)``.  The receiver
  reads the table (``parts_of``), allocates empty arrays (``alloc``), receives the parts
  into them, and only then unpickles (``loads(buf, arrays)``).  Such a message needs a
  gpumpi receiver.
* ``dumps(obj)`` (collectives, buffered sends): each device array is copied to host
  memory and travels as a host array; ``loads`` rebuilds it as a device array of the same
  backend.

Until a device backend is loaded (``cupy``, ``numba.cuda``, a simulated device) no device
array can exist, and the pickler has no ``reducer_override`` (which would be called for
every object of a non-builtin type).

``MPI.pickle``
--------------
:data:`PICKLE` is mpi4py's ``MPI.pickle``: a :class:`Pickle` whose protocol the messages
use.  Given other ``dumps``/``loads`` functions (json, marshal, dill, ...), messages are
exactly ``dumps(obj)`` and are read with ``loads``, as mpi4py does; no trailer, no parts.
"""

from __future__ import annotations

import io
import itertools
import pickle
import struct
import sys

from . import _backends, _compiled
from . import _config as _cfg
from ._membuffer import buffer
from .constants import TAG_UB_VALUE

#: Last 8 bytes of an indexed message (never the end of a pickle stream: that is ``.``).
MAGIC = b"\x00gpumpi\x05"
_FOOT = struct.Struct("<QQQII8s")  # stream length, seq, table length, entries, flags, MAGIC
_ENTRY = struct.Struct("<QQQ")  # header offset, data offset, length | readonly << 63
F_PARTS = 1  # the message has device parts
_RO = 1 << 63
#: Payloads at least this large travel as segments of their own (CPython's pickle frame target).
THRESHOLD = 65536
_ALIGN = 64

_NEXT_BUFFER, _READONLY_BUFFER = pickle.NEXT_BUFFER, pickle.READONLY_BUFFER
_BYTEARRAY8, _BINBYTES, _BINBYTES8 = pickle.BYTEARRAY8[0], pickle.BINBYTES[0], pickle.BINBYTES8[0]
_PB = pickle.PickleBuffer


def _noop(n: int) -> bytes:
    """``n`` (>= 2) bytes of opcodes that leave the unpickler's stack and memo as they were."""
    if n % 2:
        return b"K\x000" + b"N0" * ((n - 3) // 2)
    return b"N0" * (n // 2)


_NOOPS = [b"", b""] + [_noop(n) for n in range(2, _ALIGN + 2)]


# --- MPI.Pickle -----------------------------------------------------------------------------------

_PY_DUMPS, _PY_LOADS = pickle.dumps, pickle.loads


def _default_protocol() -> int:
    p = _cfg.get().pickle_protocol
    return pickle.HIGHEST_PROTOCOL if p is None else p


class Pickle:
    """Pickle/unpickle Python objects (mpi4py ``MPI.Pickle``).

    Args:
        dumps: serialiser ``dumps(obj[, protocol][, buffer_callback=])`` (default ``pickle.dumps``).
        loads: deserialiser ``loads(data[, buffers=])`` (default ``pickle.loads``).
        protocol: protocol passed to ``dumps`` (default: ``MPI4PY_PICKLE_PROTOCOL`` or the
            highest, for ``pickle.dumps``; None: not passed, for other functions).
        threshold: buffers at least this large go out of band in :meth:`dumps_oob`
            (default ``MPI4PY_PICKLE_THRESHOLD`` or 256 KiB)."""

    __slots__ = ("_dumps", "_loads", "_proto", "_thres")  # (the compiled layer reads the first three)

    def __init__(self, dumps=None, loads=None, protocol: int | None = None, threshold: int | None = None) -> None:
        if dumps is None:
            dumps = _PY_DUMPS
        if loads is None:
            loads = _PY_LOADS
        if protocol is None and dumps is _PY_DUMPS:
            protocol = _default_protocol()
        if threshold is None:
            threshold = _cfg.get().pickle_threshold
        self._dumps = dumps
        self._loads = loads
        self._proto = protocol
        self._thres = threshold

    @property
    def PROTOCOL(self) -> int | None:  # noqa: N802  (mpi4py's name)
        """Protocol version."""
        return self._proto

    @PROTOCOL.setter
    def PROTOCOL(self, protocol: int | None) -> None:  # noqa: N802
        if protocol is None and self._dumps is _PY_DUMPS:
            protocol = _default_protocol()
        self._proto = protocol

    @property
    def THRESHOLD(self) -> int:  # noqa: N802
        """Out-of-band threshold (bytes), for :meth:`dumps_oob`."""
        return self._thres

    @THRESHOLD.setter
    def THRESHOLD(self, threshold: int | None) -> None:  # noqa: N802
        self._thres = _cfg.get().pickle_threshold if threshold is None else threshold

    def dumps(self, obj) -> bytes:
        """Serialise ``obj`` to a pickle data stream."""
        if self._proto is not None:
            return self._dumps(obj, self._proto)
        return self._dumps(obj)

    def loads(self, data):
        """Deserialise an object from a pickle data stream."""
        return self._loads(data)

    def dumps_oob(self, obj):
        """Serialise ``obj`` to a pickle data stream and out-of-band buffers (protocol 5 or higher):
        ``(data, [MPI.buffer, ...])``, buffers of at least :attr:`THRESHOLD` bytes out of band."""
        protocol = self._proto
        if protocol is None:
            protocol = _default_protocol()
        protocol = max(protocol, 5)
        bufs: list = []
        threshold = self._thres

        def callback(pb):
            raw = pb.raw()
            b = buffer.frombuffer(raw, readonly=raw.readonly)
            if len(b) >= threshold:
                bufs.append(b)
                return False
            return True

        return self._dumps(obj, protocol, buffer_callback=callback), bufs

    def loads_oob(self, data, buffers):
        """Deserialise an object from a pickle data stream and its out-of-band buffers."""
        return self._loads(data, buffers=buffers)

    def _custom(self) -> bool:
        return self._dumps is not _PY_DUMPS or self._loads is not _PY_LOADS

    def _protocol(self) -> int:
        p = self._proto
        if p is None:
            return _default_protocol()
        return pickle.HIGHEST_PROTOCOL if p < 0 else p

    def __repr__(self) -> str:
        return f"<gpumpi.MPI.Pickle protocol={self._proto} threshold={self._thres}>"


#: The object messages' pickler (mpi4py ``MPI.pickle``).
PICKLE = Pickle()


# --- messages ---------------------------------------------------------------------------------

def dumps(obj):
    """Serialise ``obj`` into one message; returns ``(list of buffers, total bytes)``.

    Device arrays in ``obj`` are copied to host memory and rebuilt by :func:`loads` as
    device arrays of the same backend (for collectives and buffered sends).
    """
    pk = PICKLE
    if pk._custom():
        data = pk.dumps(obj)
        return [data], memoryview(data).nbytes
    proto = pk._protocol()
    dev = _seen_device or _device_possible()
    if not dev:
        data = _plain(obj, proto)
        if data is not None:
            return [data], len(data)
    return _frame(_dump(obj, proto, dev, None), 0, (), 0)


def dumps_parts(obj):
    """Serialise ``obj`` for point-to-point: ``(buffers, total bytes, parts)``.

    ``parts`` is None when ``obj`` holds no device array (the message is what
    :func:`dumps` makes); else ``(seq, arrays)``: the device arrays, contiguous, in
    placeholder order, which the caller sends as messages tagged ``seq``.  Arrays
    that are neither C- nor Fortran-contiguous arrive C-contiguous: CuPy copies them
    with its own kernel first; simulated and Numba arrays are sent as they are, and
    the buffer path packs their elements, in C order, with the device pack kernels.
    """
    pk = PICKLE
    if pk._custom():
        data = pk.dumps(obj)
        return [data], memoryview(data).nbytes, None
    proto = pk._protocol()
    if not (_seen_device or _device_possible()):
        data = _plain(obj, proto)
        if data is not None:
            return [data], len(data), None
        bufs, total = _frame(_dump(obj, proto, False, None), 0, (), 0)
        return bufs, total, None
    arrays: list = []
    sink = _dump(obj, proto, True, arrays)
    if not arrays:
        bufs, total = _frame(sink, 0, (), 0)
        return bufs, total, None
    seq = next(_SEQ) & TAG_UB_VALUE
    bufs, total = _frame(sink, seq, tuple(sink.specs), F_PARTS)
    return bufs, total, (seq, arrays)


class _Large(Exception):
    pass


def _no_large(pb) -> bool:
    if pb.raw().nbytes >= THRESHOLD:
        raise _Large
    return True  # in band


def _plain(obj, proto: int):
    """``pickle.dumps(obj, proto)`` when ``obj`` holds no buffer of :data:`THRESHOLD` bytes
    or more (the stream needs no index), else None (the sink pickler's turn).  For small
    objects this is the fast path: one C call, no pickler or sink of ours."""
    if proto < 5:
        return _PY_DUMPS(obj, proto)
    try:
        return _PY_DUMPS(obj, proto, buffer_callback=_no_large)
    except _Large:
        return None


def _frame(sink, seq: int, specs: tuple, flags: int):
    """The sink's segments, then the trailer when there is something to index."""
    out, entries = sink.out, sink.entries
    total = sink.off
    if not entries and not flags:
        return out, total
    table = pickle.dumps(specs, protocol=5) if flags & F_PARTS else b""
    trailer = [table]
    for hdr, data, n, ro in entries:
        trailer.append(_ENTRY.pack(hdr, data, n | _RO if ro else n))
    trailer.append(_FOOT.pack(total, seq, len(table), len(entries), flags, MAGIC))
    tail = b"".join(trailer)
    out.append(tail)
    return out, total + len(tail)


def _trailer(mv: memoryview):
    """``(stream length, seq, table view, entries, flags)`` of an indexed message, or None."""
    n = mv.nbytes
    if n < _FOOT.size or mv[n - 8 :] != MAGIC:
        return None
    slen, seq, tlen, k, flags, _ = _FOOT.unpack_from(mv, n - _FOOT.size)
    if slen + tlen + k * _ENTRY.size + _FOOT.size != n:
        return None
    toff = slen
    eoff = toff + tlen
    entries = [_ENTRY.unpack_from(mv, eoff + i * _ENTRY.size) for i in range(k)]
    return slen, seq, mv[toff:eoff], entries, flags


def loads(buf, arrays=None):
    """Rebuild the object of a received message (a bytearray or memoryview).

    An empty message is None.  A message with device parts needs ``arrays``, the parts
    received (see :func:`alloc`); without them the result is a :class:`Pending` naming
    the parts.
    """
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    n = mv.nbytes
    if not n:
        return None
    pk = PICKLE
    if pk._dumps is not _PY_DUMPS or pk._loads is not _PY_LOADS:
        return pk.loads(buffer.frombuffer(mv, readonly=mv.readonly))
    if n < _FOOT.size or mv[n - 1] != 5:  # MAGIC ends with 5, a pickle stream with "."
        return _PY_LOADS(mv)
    t = _trailer(mv)
    if t is None:
        return _PY_LOADS(mv)
    slen, seq, table, entries, flags = t
    if flags & F_PARTS and arrays is None:
        return Pending(seq, pickle.loads(table))
    pieces, bufs, pos = [], [], 0
    for hdr, data, n in entries:
        ro = n & _RO
        n &= ~_RO
        if not pos <= hdr < data <= data + n <= slen:
            raise ValueError(f"recv: malformed object message (payload at {data}, {n} bytes, stream {slen})")
        pieces.append(mv[pos:hdr])
        pieces.append(b"\x97\x98" if ro else b"\x97")  # NEXT_BUFFER [READONLY_BUFFER]
        bufs.append(mv[data : data + n])
        pos = data + n
    pieces.append(mv[pos:slen])
    stream = b"".join(pieces) if entries else mv[:slen]
    if not flags & F_PARTS:
        return pickle.loads(stream, buffers=bufs)
    u = _PartsUnpickler(io.BytesIO(stream), buffers=bufs)
    u.arrays = arrays
    return u.load()


def dumps_small(obj):
    """The message of ``obj`` as one ``bytes`` object, by one C call -- what :func:`dumps_parts`
    makes of an object with no device array and no large buffer -- or None where it would make
    something else (a custom ``MPI.pickle``, a device array possible, a buffer of
    :data:`THRESHOLD` bytes or more inside): the compiled path's pickle."""
    pk = PICKLE
    if pk._dumps is not _PY_DUMPS or pk._loads is not _PY_LOADS or _seen_device or _device_possible():
        return None
    p = pk._proto
    proto = _default_protocol() if p is None else pickle.HIGHEST_PROTOCOL if p < 0 else p
    return _plain(obj, proto)


def loads_reused(mv):
    """:func:`loads` of a message in memory the caller reuses (a flat byte memoryview): a plain
    stream is unpickled from there (nothing of it stays a view); an indexed message (its
    payloads would be views) or one for a custom ``loads`` (which may keep its input) from a copy."""
    n = mv.nbytes
    pk = PICKLE
    if pk._dumps is _PY_DUMPS and pk._loads is _PY_LOADS and 0 < n and (n < _FOOT.size or mv[n - 1] != 5):
        return _PY_LOADS(mv)
    return loads(memoryview(bytearray(mv)))


class Pending:
    """An object message whose device parts are still to be received: their tag and specs."""

    __slots__ = ("seq", "specs")

    def __init__(self, seq: int, specs: tuple) -> None:
        self.seq = seq
        self.specs = specs

    def __repr__(self) -> str:
        return f"<Pending seq={self.seq} parts={len(self.specs)}>"


def parts_of(buf) -> Pending | None:
    """The device parts an object message announces, or None (a message without parts)."""
    if PICKLE._custom():
        return None
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    t = _trailer(mv)
    if t is None or not t[4] & F_PARTS:
        return None
    return Pending(t[1], pickle.loads(t[2]))


class _PartsUnpickler(pickle.Unpickler):
    """Resolves the placeholders ``_part(i)`` to the received arrays (``arrays``, set before ``load``)."""

    arrays: list

    def find_class(self, module, name):
        if module == __name__ and name == "_part":
            arrays = self.arrays

            def part(i):
                if not 0 <= i < len(arrays):
                    raise ValueError(f"recv: device part {i} of a message with {len(arrays)} parts")
                return arrays[i]

            return part
        return super().find_class(module, name)


def _part(i):
    raise ValueError(f"loads: device part placeholder {i} outside a gpumpi object message "
                     f"(use gpumpi._pickle.loads with the received arrays)")


def alloc(specs) -> list:
    """Empty device arrays for the parts ``specs`` (same backend, shape, dtype, order),
    allocated on the current device."""
    return [_BACKENDS[kind].empty(cls, shape, dtype, order) for kind, cls, shape, dtype, order in specs]


def part_nbytes(spec) -> int:
    """Bytes of the part a spec describes (parts of 0 bytes are not sent)."""
    n = spec[3].itemsize
    for d in spec[2]:
        n *= d
    return n


def _from_host(kind: str, cls, host):
    """Rebuild a device array that travelled through host memory (``dumps``)."""
    return _BACKENDS[kind].from_host(cls, host)


# --- device array backends (gpumpi._backends) -------------------------------------------------

_BACKENDS = _backends.BACKENDS  # name -> Backend: what object messages do with its device arrays
_KINDS: dict = {}  # type -> backend name, or None: not a device array


def _classify(tp) -> str | None:
    kind = _backends.device_kind(tp)
    if len(_KINDS) >= 4096:  # classes made on the fly must not pile up here
        _KINDS.clear()
    _KINDS[tp] = kind
    return kind


_seen_device = False  # once a device array can exist, the answer stays yes
_sims = None  # the set behind gpumpi._device.sim._ALL_SIMS (every simulated device made here), once loaded


def _device_possible() -> bool:
    """Whether a device array can exist in this process: a device library is loaded, or a
    simulated device was created (its arrays live in its memory)."""
    global _seen_device, _sims
    sims = _sims
    if sims is None:
        sim = sys.modules.get("gpumpi._device.sim")
        if sim is not None:
            sims = _sims = getattr(getattr(sim, "_ALL_SIMS", None), "data", True)  # unknown: assume one
    mods = sys.modules
    if sims or "cupy" in mods or "numba.cuda" in mods:
        _seen_device = True
        return True
    return False


# --- the pickler and its sink -----------------------------------------------------------------

_SEQ = itertools.count(1)
_UNSEEN = object()


class _Sink:
    """Where a pickler writes: the message's segments, and an entry per large ``PickleBuffer``
    payload (which stays the object's own memory, 64-byte aligned in the message)."""

    __slots__ = ("out", "off", "entries", "specs")

    def __init__(self) -> None:
        self.out: list = []
        self.off = 0
        self.entries: list = []
        self.specs: list = []

    def write(self, b) -> None:
        if type(b) is _PB:
            self._payload(b)
            return
        self.out.append(b)
        self.off += len(b)

    def _payload(self, pb) -> None:
        raw = pb.raw()  # contiguous (the pickler refused it otherwise): its bytes in memory order
        n = raw.nbytes
        ro = raw.readonly
        out = self.out
        if ro:
            op, hl = (_BINBYTES, 5) if n <= 0xFFFFFFFF else (_BINBYTES8, 9)
        else:
            op, hl = _BYTEARRAY8, 9
        prev = out[-1] if out else b""
        if (len(prev) >= hl and prev[-hl] == op
                and int.from_bytes(prev[len(prev) - hl + 1 :], "little") == n):
            hdr = self.off - hl
            pad = -(hdr + hl) % _ALIGN
            if pad == 1:
                pad += _ALIGN
            if pad:  # no-op opcodes before the header, outside any frame
                out[-1] = memoryview(prev)[:-hl]
                out.append(_NOOPS[pad])
                out.append(prev[-hl:])
                self.off += pad
                hdr += pad
            self.entries.append((hdr, hdr + hl, n, ro))
        out.append(raw)
        self.off += n


class _Pickler(pickle.Pickler):
    """A protocol-``proto`` pickler writing to a fresh :class:`_Sink` per message."""

    def __init__(self, proto: int) -> None:
        self.sink = _Sink()
        self.proto = proto
        super().__init__(self, protocol=proto)

    def write(self, b) -> None:  # the file the C pickler writes to: the current sink
        self.sink.write(b)


class _DevicePickler(_Pickler):
    """Swaps device arrays for placeholders (``parts`` a list: the arrays are appended to
    it) or for host copies (``parts`` None)."""

    def __init__(self, proto: int) -> None:
        self.parts = None
        super().__init__(proto)

    def reducer_override(self, obj):
        tp = type(obj)
        kind = _KINDS.get(tp, _UNSEEN)
        if kind is _UNSEEN:
            kind = _classify(tp)
        if kind is None:
            return NotImplemented
        be = _BACKENDS[kind]
        cls = tp if kind == "sim" else None  # the simulated class rebuilds its own arrays
        if self.parts is None:
            return _from_host, (kind, cls, be.to_host(obj))
        a, order = be.contiguous(obj)
        self.parts.append(a)
        self.sink.specs.append((kind, cls, tuple(obj.shape), obj.dtype, order))
        return _part, (len(self.parts) - 1,)


_idle: dict = {}  # (device-aware, protocol) -> picklers not in use (list.pop/append are atomic)


def _dump(obj, proto: int, dev: bool, parts) -> _Sink:
    """Pickle ``obj`` with an idle pickler; returns its sink."""
    key = (dev, proto)
    pool = _idle.get(key)
    if pool is None:
        pool = _idle.setdefault(key, [])
    try:
        p = pool.pop()
    except IndexError:
        p = _DevicePickler(proto) if dev else _Pickler(proto)
    sink = p.sink = _Sink()
    if dev:
        p.parts = parts
    try:
        p.dump(obj)
    finally:
        p.clear_memo()  # the memo holds the objects pickled
        p.sink = None
        if dev:
            p.parts = None
        pool.append(p)
    return sink


def _install(m) -> None:
    """Bind the compiled object calls' pickle (``_gpumpi_fast.dumps_small``, the twin of
    :func:`dumps_small`, and its test of :func:`loads_reused`) to this module's state."""
    if m is not None:
        m.bind_pickle(PICKLE, _PY_DUMPS, _PY_LOADS, globals(), sys.modules, _device_possible, _default_protocol,
                      _no_large, _Large, _FOOT.size, pickle.HIGHEST_PROTOCOL)


_compiled.register(_install)
