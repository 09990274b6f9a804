"""Object messages: pickle protocol 5 with out-of-band buffers (L2).

Theory of operation
===================
``dumps(obj)`` returns a list of buffers that, concatenated, form one message::

    header  u32 magic "GMP5", u32 nbufs, u64 stream length, u64 length of each buffer
    stream  the pickle stream (small arrays are pickled in band)
    pad + buffer ...   each out-of-band buffer starts at a multiple of 64 bytes

Large contiguous buffers (NumPy arrays and anything exporting a PickleBuffer)
are *not* copied into the stream: they are separate segments of the message, so
the transport reads them straight from the sender's memory (cross-memory attach)
into the receiver's single allocation, and ``loads`` rebuilds the arrays as views
of that allocation.  One copy end to end.

Device arrays
-------------
CuPy arrays, Numba device arrays and simulated device arrays (types with a true
``__gpumpi_sim__``) are recognised by type: the array-library registry
(:mod:`gpumpi._backends`, keyed by the top-level module of the type) names a
backend that knows how to copy, allocate and convert such arrays, importing its
library only when called.  Two ways out:

* ``dumps_parts(obj)`` (point-to-point): each device array becomes a placeholder in
  the stream and is handed back, contiguous, to the caller, which sends it as a
  message of its own through the buffer path (device to device).  The message is::

      header  u32 magic "GMPD", u32 nbufs, u64 seq, u64 table length,
              u64 stream length, u64 length of each buffer
      table   pickled tuple of one spec per part: (backend, class, shape, dtype, order)
      stream, pad + buffer ...   as above

  ``seq`` numbers this process's messages with parts (their tag).  The receiver
  reads the table (``parts_of``), allocates empty arrays (``alloc``), receives the
  parts into them, and only then unpickles (``loads(buf, arrays)``).
* ``dumps(obj)`` (collectives, buffered sends): each device array is copied to host
  memory and travels as an (out-of-band) host buffer; ``loads`` rebuilds it as a
  device array of the same backend.

Until a device backend is loaded (``cupy``, ``numba.cuda``, a simulated device) no
device array can exist: both functions then take the plain ``pickle.dumps`` path.
Otherwise they use reusable ``Pickler`` objects whose ``reducer_override`` (called
only for objects of non-builtin types) spots the arrays.
"""

from __future__ import annotations

import io
import itertools
import pickle
import struct
import sys

from . import _backends
from .constants import TAG_UB_VALUE

MAGIC = 0x35504D47  # "GMP5"
MAGIC_PARTS = 0x44504D47  # "GMPD": the message has device parts
_HDR = struct.Struct("<II")
_HDR1 = struct.Struct("<IIQ")  # a message without out-of-band buffers
_ZERO = bytes(64)
#: Buffers at least this large travel out of band.
THRESHOLD = 4096


def dumps(obj, threshold: int = THRESHOLD):
    """Serialise ``obj``; returns (list of buffers, total bytes).

    Device arrays in ``obj`` are copied to host memory and rebuilt by :func:`loads`
    as device arrays of the same backend (for collectives and buffered sends).
    """
    if _seen_device or _device_possible():
        stream, oob, _ = _dump(obj, threshold, None)
        return _frame(MAGIC, (), stream, oob)
    bufs, total, _ = dumps_parts(obj, threshold)  # no device array can exist: the same message
    return bufs, total


def dumps_parts(obj, threshold: int = THRESHOLD):
    """Serialise ``obj`` for point-to-point: ``(buffers, total bytes, parts)``.

    ``parts`` is None when ``obj`` holds no device array (the message is what
    :func:`dumps` makes); else ``(seq, arrays)``: the device arrays, contiguous, in
    placeholder order, which the caller sends as messages tagged ``seq``.  Arrays
    that are neither C- nor Fortran-contiguous arrive C-contiguous: CuPy copies them
    with its own kernel first; simulated and Numba arrays are sent as they are, and
    the buffer path packs their elements, in C order, with the device pack kernels.
    """
    if _seen_device or _device_possible():
        return _dumps_device(obj, threshold)
    oob: list = []

    def cb(pb):
        try:
            raw = pb.raw()
        except BufferError:
            return True
        if raw.nbytes < threshold:
            return True
        oob.append(raw)
        return False

    stream = pickle.dumps(obj, protocol=5, buffer_callback=cb)
    if not oob:
        return [_HDR1.pack(MAGIC, 0, len(stream)) + stream], 16 + len(stream), None
    bufs, total = _frame(MAGIC, (), stream, oob)
    return bufs, total, None


def _dumps_device(obj, threshold: int):
    arrays: list = []
    stream, oob, specs = _dump(obj, threshold, arrays)
    if not arrays:
        if not oob:
            return [_HDR1.pack(MAGIC, 0, len(stream)) + stream], 16 + len(stream), None
        bufs, total = _frame(MAGIC, (), stream, oob)
        return bufs, total, None
    seq = next(_SEQ) & TAG_UB_VALUE
    table = pickle.dumps(tuple(specs), protocol=5)
    bufs, total = _frame(MAGIC_PARTS, (seq, len(table)), table + stream, oob, len(stream))
    return bufs, total, (seq, arrays)


def _frame(magic: int, fields: tuple, body: bytes, oob: list, stream_len: int | None = None):
    """Header (magic, nbufs, ``fields``, stream length, buffer lengths), body, aligned buffers."""
    if not oob and not fields:
        head = _HDR1.pack(magic, 0, len(body))
        return [head + body], 16 + len(body)
    lens = (*fields, len(body) if stream_len is None else stream_len, *[b.nbytes for b in oob])
    head = _HDR.pack(magic, len(oob)) + struct.pack(f"<{len(lens)}Q", *lens)
    parts = [head, body]
    total = len(head) + len(body)
    for b in oob:
        pad = -total % 64
        if pad:
            parts.append(_ZERO[:pad])
            total += pad
        parts.append(b)
        total += b.nbytes
    return parts, total


def loads(buf, arrays=None):
    """Rebuild the object from a received message (a bytearray or memoryview).

    A message with device parts needs ``arrays``, the parts received (see
    :func:`alloc`); without them the result is a :class:`Pending` naming the parts.
    """
    mv = memoryview(buf)
    if mv.nbytes < 16:
        raise ValueError(f"recv: object message too short ({mv.nbytes} bytes)")
    magic, nb = _HDR.unpack_from(mv, 0)
    if magic != MAGIC:
        if magic == MAGIC_PARTS:
            return _loads_parts(mv, nb, arrays)
        raise ValueError("recv: not a gpumpi object message (bad magic); was it sent with an uppercase call?")
    lens = struct.unpack_from(f"<{1 + nb}Q", mv, 8)
    off = 8 + 8 * (1 + nb)
    stream = mv[off : off + lens[0]]
    off += lens[0]
    bufs = []
    for n in lens[1:]:
        off += -off % 64
        bufs.append(mv[off : off + n])
        off += n
    return pickle.loads(stream, buffers=bufs)


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
    mv = memoryview(buf)
    if mv.nbytes < 32:
        return None
    magic, nb = _HDR.unpack_from(mv, 0)
    if magic != MAGIC_PARTS:
        return None
    seq, tlen = struct.unpack_from("<QQ", mv, 8)
    off = 8 + 8 * (3 + nb)
    return Pending(seq, pickle.loads(mv[off : off + tlen]))


def _loads_parts(mv, nb: int, arrays):
    if mv.nbytes < 8 + 8 * (3 + nb):
        raise ValueError(f"recv: object message too short ({mv.nbytes} bytes, {nb} buffers)")
    seq, tlen, slen, *lens = struct.unpack_from(f"<{3 + nb}Q", mv, 8)
    off = 8 + 8 * (3 + nb)
    if arrays is None:
        return Pending(seq, pickle.loads(mv[off : off + tlen]))
    off += tlen
    stream = mv[off : off + slen]
    off += slen
    bufs = []
    for n in lens:
        off += -off % 64
        bufs.append(mv[off : off + n])
        off += n
    u = _PartsUnpickler(io.BytesIO(stream), buffers=bufs)
    u.arrays = arrays
    return u.load()


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


# --- the device-aware pickler -----------------------------------------------------------------

_SEQ = itertools.count(1)
_UNSEEN = object()


class _Sink:
    __slots__ = ("write",)

    def __init__(self, write) -> None:
        self.write = write


class _Pickler(pickle.Pickler):
    """A reusable protocol-5 pickler that swaps device arrays for placeholders
    (``parts`` a list: the arrays are appended to it) or for host copies (``parts`` None)."""

    def __init__(self) -> None:
        self.out: list = []
        self.oob: list = []
        self.parts = None
        self.specs: list = []
        self.threshold = THRESHOLD
        super().__init__(_Sink(self.out.append), protocol=5, buffer_callback=self._buffer)

    def _buffer(self, pb):
        try:
            raw = pb.raw()
        except BufferError:
            return True
        if raw.nbytes < self.threshold:
            return True
        self.oob.append(raw)
        return False

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
        self.specs.append((kind, cls, tuple(obj.shape), obj.dtype, order))
        return _part, (len(self.parts) - 1,)


_idle: list = []  # picklers not in use (list.pop/append are atomic: threads and nesting are safe)


def _dump(obj, threshold: int, parts):
    """Pickle with an idle device-aware pickler: ``(stream, out-of-band buffers, specs)``."""
    try:
        p = _idle.pop()
    except IndexError:
        p = _Pickler()
    p.threshold = threshold
    p.parts = parts
    out, oob, specs = p.out, p.oob, p.specs
    try:
        p.dump(obj)
        stream = out[0] if len(out) == 1 else b"".join(out)
    finally:
        p.clear_memo()  # the memo holds the objects pickled
        p.parts = None
        out.clear()
        if oob:
            p.oob = []
        if specs:
            p.specs = []
        _idle.append(p)
    return stream, oob, specs
