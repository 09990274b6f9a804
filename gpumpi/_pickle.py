"""Object messages: pickle protocol 5 with out-of-band buffers (L2).

Theory of operation
===================
``dumps(obj)`` returns a list of buffers that, concatenated, form one message::

    header  u32 magic, u32 nbufs, u64 stream length, u64 length of each buffer
    stream  the pickle stream (small arrays are pickled in band)
    pad + buffer ...   each out-of-band buffer starts at a multiple of 64 bytes

Large contiguous buffers (NumPy arrays and anything exporting a PickleBuffer)
are *not* copied into the stream: they are separate segments of the message, so
the transport reads them straight from the sender's memory (cross-memory attach)
into the receiver's single allocation, and ``loads`` rebuilds the arrays as views
of that allocation.  One copy end to end.
"""

from __future__ import annotations

import pickle
import struct

MAGIC = 0x35504D47  # "GMP5"
_HDR = struct.Struct("<II")
_ZERO = bytes(64)
#: Buffers at least this large travel out of band.
THRESHOLD = 4096


def dumps(obj, threshold: int = THRESHOLD):
    """Serialise ``obj``; returns (list of buffers, total bytes)."""
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
        head = _HDR.pack(MAGIC, 0) + struct.pack("<Q", len(stream))
        return [head + stream], len(head) + len(stream)
    head = _HDR.pack(MAGIC, len(oob)) + struct.pack(f"<{1 + len(oob)}Q", len(stream), *[b.nbytes for b in oob])
    parts = [head, stream]
    total = len(head) + len(stream)
    for b in oob:
        pad = -total % 64
        if pad:
            parts.append(_ZERO[:pad])
            total += pad
        parts.append(b)
        total += b.nbytes
    return parts, total


def loads(buf):
    """Rebuild the object from a received message (a bytearray or memoryview)."""
    mv = memoryview(buf)
    if mv.nbytes < 16:
        raise ValueError(f"recv: object message too short ({mv.nbytes} bytes)")
    magic, nb = _HDR.unpack_from(mv, 0)
    if magic != MAGIC:
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
