"""Single-producer/single-consumer byte ring in shared memory (L4).

Theory of operation
===================
A ring block is 128 bytes of control words followed by ``size`` data bytes.
``head`` (offset 0) is the consumer's position and is written only by the
consumer; ``tail`` (offset 64, its own cache line) is the producer's position and
is written only by the producer.  Positions are byte counters that only grow; the
data offset is ``pos % size``.

Word 9 (in the producer's line) is the producer's cached copy of ``head``, so it reads the
consumer's line only when the ring looks full.  Both ends keep no state outside the
control block: the compiled fast path (:mod:`gpumpi.ipc.fastring`) works on the same rings.

A frame is a little-endian ``u32`` length (header + payload) followed by its bytes;
frames start on a 64-byte boundary (:data:`ALIGN`).  A frame never wraps: when it does not fit before the
end of the data area the producer writes the pad marker ``0xFFFFFFFF`` and starts
at offset 0.  Publication order: the producer writes the frame bytes, then stores
``tail``; the consumer reads ``tail``, then the frame, then stores ``head``.  On
x86-64 (total store order) the plain stores CPython issues keep that order; the
bytecode boundary between the two stores keeps the compiler from merging them.
"""

from __future__ import annotations

import struct

CTRL = 128
PAD = 0xFFFFFFFF
_U32 = struct.Struct("<I")


#: frames start on a cache line: a small frame then takes one line, not two (each line the reader
#: takes from the writer's core is a transfer between the cores, 0.2-0.4 us on the 2-core VM when
#: its vCPUs sit apart: 32-byte messages, a 64-byte frame, took 1.69 us one way instead of 1.30)
ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) & -ALIGN


def max_frame(size: int) -> int:
    """Bytes of the largest frame a ring of ``size`` data bytes takes whatever its positions: at
    most half of it (a frame at offset ``off`` that does not fit before the end needs
    ``size - off`` more for the pad) in whole lines."""
    return max(ALIGN, (size // 2) & -ALIGN)


class RingWriter:
    """Producer end of a ring.

    Its state lives in the control block, not here: ``tail`` (word 8) and the producer's
    cached view of ``head`` (word 9, in the producer's cache line), so the compiled writer of
    :mod:`gpumpi.ipc.fastring` and this one can take turns on the same ring.
    """

    __slots__ = ("ctl", "data", "size")

    def __init__(self, block: memoryview, size: int) -> None:
        self.ctl = block[:CTRL].cast("Q")
        self.data = block[CTRL : CTRL + size]
        self.size = size

    @property
    def tail(self) -> int:
        """The producer's position (bytes written so far)."""
        return self.ctl[8]

    def max_frame(self) -> int:
        """The largest frame that always fits the empty ring, wherever its positions stand: half
        of it, in whole lines (frames start on line boundaries)."""
        return max_frame(self.size)

    def reserve(self, n: int) -> int:
        """Offset in ``data`` where a frame of ``n`` bytes may be written, or -1 if full."""
        ctl = self.ctl
        size = self.size
        need = _align(n)
        tail = ctl[8]
        off = tail % size
        if off + need > size:  # would wrap: pad to the end first
            need += size - off
            if tail + need - ctl[9] > size:
                ctl[9] = ctl[0]
                if tail + need - ctl[9] > size:
                    return -1
            _U32.pack_into(self.data, off, PAD)
            ctl[8] = tail + (size - off)
            return 0
        if tail + need - ctl[9] > size:
            ctl[9] = ctl[0]
            if tail + need - ctl[9] > size:
                return -1
        return off

    def commit(self, n: int) -> None:
        """Publish the frame of ``n`` bytes written at the reserved offset."""
        ctl = self.ctl
        ctl[8] = ctl[8] + _align(n)

    def free_bytes(self) -> int:
        ctl = self.ctl
        ctl[9] = ctl[0]
        return self.size - (ctl[8] - ctl[9])


class RingReader:
    """Consumer end of a ring (its position is ``head``, word 0 of the control block)."""

    __slots__ = ("ctl", "data", "size")

    def __init__(self, block: memoryview, size: int) -> None:
        self.ctl = block[:CTRL].cast("Q")
        self.data = block[CTRL : CTRL + size]
        self.size = size

    @property
    def head(self) -> int:
        """The consumer's position (bytes consumed so far)."""
        return self.ctl[0]

    def peek(self) -> int:
        """Offset of the next frame in ``data``, or -1 when it is empty."""
        ctl = self.ctl
        head = ctl[0]
        if ctl[8] == head:
            return -1
        off = head % self.size
        if _U32.unpack_from(self.data, off)[0] == PAD:
            head += self.size - off
            ctl[0] = head
            if ctl[8] == head:
                return -1
            return 0
        return off

    def release(self, n: int) -> None:
        """Give back the frame of ``n`` bytes just consumed."""
        ctl = self.ctl
        ctl[0] = ctl[0] + _align(n)
