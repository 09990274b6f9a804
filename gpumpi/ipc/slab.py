"""Staging slabs: each rank's page-locked slots that carry device messages through host memory (L4).

Theory of operation
===================
A device message that cannot go device to device (DESIGN section 7, ``staging``) is cut
into chunks.  The sender copies a chunk from its device into a *slot* of its own slab,
then sends its peer a header-only DATA frame naming the slot (``tag``) and the chunk's
length (``nbytes``); the receiver copies the slot into its destination and frees the
slot.  While the receiver copies chunk i out, the sender fills chunk i+1 into another
slot, so the two halves of the pipeline overlap.  The frames go through the ordinary
per-pair ring, so chunks arrive in order, but the data never does: rings stay small
(control frames and eager messages) while slots are as large as a device copy needs
to run near its peak (``GPUMPI_STAGE_CHUNK``, default 8 MiB).

Every rank owns one slab in the job segment (``GPUMPI_STAGE_SLOTS`` slots, default 4),
shared by all its outgoing staged messages; memory grows with the ranks, not with the
pairs.  Pages are touched, and page-locked, only by ranks that stage device messages.

Each slot has two 8-byte words, on cache lines of their own in the slab's first page:
``fill``, written only by the owner, and ``free``, written only by the receiver that
holds the slot.  A slot is free when ``free == fill``; the owner takes it by bumping
``fill`` (under its engine lock) before it copies, and the receiver hands it back by
setting ``free = fill`` after its copy has completed.  So each word has one writer and
no cross-process atomics are needed (x86 stores are ordered; the ring publishes the
frame after the slot's data is written).  The owner remembers who holds each slot and
takes back the slots of a peer that died.

A singleton (no job segment) gets a private mapping with the same layout.
"""

from __future__ import annotations

import mmap

from .._config import STAGE_MAX_SLOTS as MAX_SLOTS
from .._config import check_stage as check_geometry

PAGE = 4096
assert MAX_SLOTS * 128 <= PAGE  # two cache lines per slot in the control page


def slab_size(slots: int, slot_size: int) -> int:
    """Bytes of one rank's slab: the control page, then ``slots`` slots."""
    return PAGE + slots * slot_size


def chunk_for(nbytes: int, slot_size: int) -> int:
    """The chunk a message of ``nbytes`` is cut into: a quarter of it, so that even a message
    of a few slots overlaps its copies, page-rounded, between 64 KiB and one slot."""
    quarter = -(-nbytes // 4)
    return min(slot_size, max(min(65536, slot_size), -(-quarter // PAGE) * PAGE))


class Slab:
    """One rank's slab, as its owner or a receiver maps it."""

    __slots__ = ("mem", "ctrl", "data", "slots", "slot_size", "holder", "_anon")

    def __init__(self, mem: memoryview, slots: int, slot_size: int, anon=None) -> None:
        self.mem = mem
        self.ctrl = mem[:PAGE].cast("Q")
        self.data = mem[PAGE : PAGE + slots * slot_size]
        self.slots = slots
        self.slot_size = slot_size
        self.holder = [-1] * slots  # owner side: the peer each slot was handed to
        self._anon = anon

    @classmethod
    def private(cls, slots: int, slot_size: int) -> "Slab":
        """A slab in a private mapping (a singleton has no job segment)."""
        m = mmap.mmap(-1, slab_size(slots, slot_size))
        return cls(memoryview(m), slots, slot_size, m)

    # --- owner side ----------------------------------------------------------------------
    def acquire(self, peer: int) -> int:
        """A free slot, now held for ``peer``; -1 when every slot is in use."""
        c = self.ctrl
        for k in range(self.slots):
            if c[16 * k] == c[16 * k + 8]:
                c[16 * k] += 1
                self.holder[k] = peer
                return k
        return -1

    def unacquire(self, k: int) -> None:
        """Give back slot ``k`` that was acquired but never handed over (its copy failed)."""
        self.ctrl[16 * k + 8] = self.ctrl[16 * k]
        self.holder[k] = -1

    def reclaim(self, peers) -> None:
        """Take back the slots held by ``peers`` (they died holding them)."""
        for k, p in enumerate(self.holder):
            if p in peers:
                self.unacquire(k)

    # --- both sides ----------------------------------------------------------------------
    def view(self, k: int, nbytes: int) -> memoryview:
        """The first ``nbytes`` of slot ``k``."""
        if not 0 <= k < self.slots or not 0 <= nbytes <= self.slot_size:
            raise ValueError(f"slab: no such slot ({k}, {nbytes} bytes; {self.slots} slots of {self.slot_size})")
        off = k * self.slot_size
        return self.data[off : off + nbytes]

    # --- receiver side -------------------------------------------------------------------
    def release(self, k: int) -> None:
        """Hand slot ``k`` back to its owner (the receiver's copy out of it has completed)."""
        self.ctrl[16 * k + 8] = self.ctrl[16 * k]

    def in_use(self) -> int:
        """How many slots are held now."""
        c = self.ctrl
        return sum(1 for k in range(self.slots) if c[16 * k] != c[16 * k + 8])

    def close(self) -> None:
        for v in (self.ctrl, self.data):
            v.release()
        self._anon = None
