"""The job segment: one shared mapping per job holding job state and every ring (L4).

Theory of operation
===================
The launcher creates the segment with ``memfd_create`` (:mod:`gpumpi._memfd`: an
anonymous shared file, with no name in ``/dev/shm``, so nothing can be left behind
whatever dies) and ranks inherit its descriptor (``GPUMPI_JOB_FD``).  A forked test
rank inherits it the same way.

Layout (little-endian, all words 8 bytes)::

    0    magic "GPUMPIJ2"
    8    nranks
    16   ring_size           bytes of each per-pair ring's data area
    24   epoch               bumped by the launcher after it marks a rank failed
    32   abort_code          first rank to call Abort writes code + 1 here
    40   stage_slot          bytes of each staging slot (:mod:`gpumpi.ipc.slab`)
    48   stage_slots         slots of each rank's staging slab
    64   rank table          nranks x 32 bytes: pid, state, failed, exit status
    ...  rings              nranks x nranks ring blocks, page-aligned
    ...  slabs              nranks staging slabs, page-aligned (pages untouched until used)

A rank's *state* word goes up, never down: 0 (not initialised), ``RUNNING`` (attached
at initialisation), ``FINALIZING`` (inside ``MPI_Finalize``), ``QUIESCENT`` (inside
``Finalize`` with no receive posted or in progress: it will never match another
message), ``FINALIZED`` (left ``Finalize``: it reads nothing any more).  Peers read it
to know which of their sends can still be received; the launcher reads it to tell a
rank that exits 0 after ``Finalize`` from one that exits 0 without it.

Single-writer rule: ``epoch`` and ``failed`` are written only by the launcher;
a rank writes only its own ``pid``/``state`` slots and the consumer/producer
words of its own ring ends.  So no cross-process atomics are needed here.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct

from .. import _memfd
from .slab import check_geometry, slab_size

MAGIC = b"GPUMPIJ2"
_HDR = 64
_SLOT = 32
PAGE = 4096

#: A rank's state word (see the module docstring); it only ever grows.
RUNNING, FINALIZING, QUIESCENT, FINALIZED = 1, 2, 3, 4


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def ring_block_size(ring_size: int) -> int:
    """Bytes one ring occupies: 128 bytes of control words + the data area."""
    from .ring import CTRL

    return _align(CTRL + ring_size, PAGE)


def auto_ring_size(nranks: int) -> int:
    """Default ring size: 64 MiB over the job's n*n rings, clamped to [64 KiB, 1 MiB]."""
    per = (64 << 20) // max(1, nranks * nranks)
    return max(64 << 10, min(1 << 20, 1 << max(0, per.bit_length() - 1)))


def segment_size(nranks: int, ring_size: int, stage_slot: int = 0, stage_slots: int = 0) -> int:
    table = _align(_HDR + _SLOT * nranks, PAGE)
    slabs = nranks * slab_size(stage_slots, stage_slot) if stage_slots else 0
    return table + nranks * nranks * ring_block_size(ring_size) + slabs


class JobSegment:
    """A mapped job segment (created by the launcher, attached by ranks)."""

    __slots__ = ("fd", "mm", "buf", "q", "nranks", "ring_size", "_rings_off", "_block", "stage_slot", "stage_slots",
                 "_slabs_off")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        size = os.fstat(fd).st_size
        self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.buf = memoryview(self.mm)
        if bytes(self.buf[:8]) != MAGIC:
            self.close()
            raise RuntimeError(f"gpumpi: job segment fd {fd} is not a gpumpi job segment")
        self.q = self.buf[: _align(_HDR, 8)].cast("Q")
        self.nranks = self.q[1]
        self.ring_size = self.q[2]
        self._rings_off = _align(_HDR + _SLOT * self.nranks, PAGE)
        self._block = ring_block_size(self.ring_size)
        self.stage_slot = self.q[5]
        self.stage_slots = self.q[6]
        self._slabs_off = self._rings_off + self.nranks * self.nranks * self._block

    @classmethod
    def create(cls, nranks: int, ring_size: int, stage_slot: int = 8 << 20, stage_slots: int = 4) -> "JobSegment":
        """Create a new segment (launcher side); the fd is inheritable."""
        if nranks < 1:
            raise ValueError(f"gpumpi: job needs at least one rank ({nranks})")
        check_geometry(stage_slots, stage_slot)
        ring_size = _align(ring_size, PAGE) if ring_size > 0 else auto_ring_size(nranks)
        # inheritable (ranks inherit it) and unsealed
        fd = _memfd.create("gpumpi-job", segment_size(nranks, ring_size, stage_slot, stage_slots), cloexec=False,
                           seal=False)
        try:
            with mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
                m[:8] = MAGIC
                struct.pack_into("<QQ", m, 8, nranks, ring_size)
                struct.pack_into("<QQ", m, 40, stage_slot, stage_slots)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def ring_view(self, src: int, dst: int) -> memoryview:
        """The memory of the ring carrying frames from ``src`` to ``dst``."""
        off = self._rings_off + (src * self.nranks + dst) * self._block
        return self.buf[off : off + self._block]

    def slab_view(self, rank: int) -> memoryview:
        """The memory of ``rank``'s staging slab."""
        size = slab_size(self.stage_slots, self.stage_slot)
        off = self._slabs_off + rank * size
        return self.buf[off : off + size]

    # --- job state ---------------------------------------------------------------------
    def _slot(self, rank: int) -> int:
        return (_HDR + _SLOT * rank) // 8

    def _tq(self):
        return self.buf[: self._rings_off].cast("Q")

    @property
    def epoch(self) -> int:
        return self.q[3]

    def set_attached(self, rank: int, pid: int) -> None:
        t = self._tq()
        s = self._slot(rank)
        t[s] = pid
        t[s + 1] = RUNNING

    def attached(self, rank: int) -> bool:
        """Whether ``rank`` has initialised (in any later state too)."""
        return self._tq()[self._slot(rank) + 1] >= RUNNING

    def state(self, rank: int) -> int:
        """``rank``'s state word: 0, RUNNING, FINALIZING, QUIESCENT or FINALIZED."""
        return self._tq()[self._slot(rank) + 1]

    def states(self) -> list[int]:
        """Every rank's state word, in rank order."""
        t = self._tq()
        return [t[self._slot(r) + 1] for r in range(self.nranks)]

    def set_state(self, rank: int, state: int) -> None:
        """Rank ``rank`` only: move its own state word up to ``state``."""
        t = self._tq()
        s = self._slot(rank) + 1
        if state > t[s]:
            t[s] = state

    def pid(self, rank: int) -> int:
        return self._tq()[self._slot(rank)]

    def mark_failed(self, rank: int, status: int) -> None:
        """Launcher only: record that ``rank`` died, then bump the epoch."""
        t = self._tq()
        s = self._slot(rank)
        t[s + 3] = status & 0xFFFFFFFF
        t[s + 2] = 1
        self.q[3] = self.q[3] + 1

    def failed(self, rank: int) -> bool:
        return self._tq()[self._slot(rank) + 2] == 1

    def failed_ranks(self) -> list[int]:
        t = self._tq()
        return [r for r in range(self.nranks) if t[self._slot(r) + 2] == 1]

    def request_abort(self, code: int) -> None:
        if self.q[4] == 0:
            self.q[4] = (code & 0xFFFFFFFF) + 1

    def abort_code(self) -> int | None:
        v = self.q[4]
        return None if v == 0 else v - 1

    def close(self) -> None:
        for name in ("q",):
            v = getattr(self, name, None)
            if v is not None:
                v.release()
        # Rings may still hold views; then the mapping lives until the process ends.
        with contextlib.suppress(BufferError, ValueError):
            self.buf.release()
            self.mm.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
