"""Host shared-memory transport: per-pair rings in the job segment (L4).

Theory of operation
===================
Rank ``r`` writes frames for ``p`` into ring ``(r, p)`` and reads ring ``(p, r)``
for every peer ``p`` (itself included: a rank's frames to itself use ring
``(r, r)``, so self-sends take the same path as any other).  A frame is the
32-byte header of :mod:`gpumpi._protocol` followed by its payload.

When a ring is full the frame waits in a per-peer backlog and later frames to
that peer queue behind it, so per-pair FIFO order — MPI's non-overtaking rule —
holds.  A frame sent with a *token* keeps a reference to its payload (the caller
promises the memory stays put: its send is not complete until the token comes
back from ``flush``); a frame without one has its payload copied.  ``flush``
retries backlogs and returns the tokens of the frames it wrote; the progress
engine calls it whenever a backlog exists.

A singleton (no launcher) gets a private anonymous mapping holding one ring.

Ranks of other nodes (an MPI launcher's job) have no ring: their backlog slot holds the
marker ``FAR`` (so the compiled send, which writes only where the backlog is empty, never
takes them) and their frames go to ``far``, the frame transport between nodes
(:class:`gpumpi.ipc.mpi.MpiFrames`); ``poll`` reads it after the rings.  The segment is
the node's: ring ``(i, j)`` joins the ranks of local indices ``i`` and ``j`` (``local``:
world rank -> index in the node's segment, -1 for ranks of other nodes).

The ``shm`` host region transport (:class:`ShmPush`) is the fallback that reaches every
peer: it offers nothing, so the sender pushes the data through the rings in DATA
frames when the receiver asks (CTS).  One-sided, it reaches the window memory that lives
in a memfd (``Win.Allocate``, ``Allocate_shared``, ``MPI.Alloc_mem``: :mod:`gpumpi._memfd`):
a member exposes the file's descriptor and the memory's offset in it, every other member
opens the descriptor through ``/proc`` and maps the file -- or, when it maps that file
already (a shared window's one segment), uses its own mapping -- so every origin updates
the memory with the CPU's atomic instructions (``ATOMICS``).
"""

from __future__ import annotations

import mmap
import os
from collections import deque

from .._protocol import HEADER, HLEN
from .. import _memfd
from .base import ATOMICS, FAR, HOST, ONE_SIDED, Frames, Region, address_of, register
from .onesided import Mapped
from .ring import CTRL, RingReader, RingWriter, max_frame

_pack_into = HEADER.pack_into
_unpack_from = HEADER.unpack_from


class ShmTransport(Frames):
    """Frames between the ranks of one node over shared-memory rings (others: through ``far``)."""

    name = "shm"
    __slots__ = ("rank", "size", "out", "inc", "backlog", "nbacklog", "_anon", "max_payload", "peers_in", "far")

    def __init__(self, rank: int, size: int, seg=None, ring_size: int = 0, local=None, far=None) -> None:
        self.rank = rank
        self.size = size
        self.far = far
        self._anon = None
        if seg is None:
            if size != 1:
                raise RuntimeError(f"gpumpi: shm transport needs a job segment for {size} ranks")
            if ring_size <= 0:
                from .jobseg import auto_ring_size

                ring_size = auto_ring_size(1)
            self._anon = mmap.mmap(-1, CTRL + ring_size)
            block = memoryview(self._anon)
            self.out = [RingWriter(block, ring_size)]
            self.inc = [RingReader(block, ring_size)]
        else:
            ring_size = seg.ring_size
            loc = local or list(range(size))
            me = loc[rank]
            self.out = [RingWriter(seg.ring_view(me, loc[p]), ring_size) if loc[p] >= 0 else None for p in range(size)]
            self.inc = [RingReader(seg.ring_view(loc[p], me), ring_size) if loc[p] >= 0 else None for p in range(size)]
        self.backlog: list = [None if r is not None else FAR for r in self.inc]
        self.nbacklog = 0
        self.max_payload = max_frame(ring_size) - HLEN
        # poll own ring last: replies from peers first keeps rendezvous moving
        self.peers_in = [p for p in range(size) if p != rank and self.inc[p] is not None] + [rank]

    def ring_addresses(self) -> tuple[list, list]:
        """Addresses of the control blocks of the rings this rank writes and reads, per peer
        (for the compiled fast path, :mod:`gpumpi.ipc.fastring`)."""
        return ([address_of(w.ctl) if w is not None else 0 for w in self.out],
                [address_of(r.ctl) if r is not None else 0 for r in self.inc])

    def send(self, peer: int, kind: int, flags: int, src: int, ctx: int, tag: int, nbytes: int, msgid: int,
             payload=None, token=None) -> bool:
        """Write one frame for ``peer``; False when it had to wait in the backlog."""
        n = HLEN if payload is None else HLEN + len(payload)
        bl = self.backlog[peer]
        if bl is FAR:
            return self.far.send(peer, kind, flags, src, ctx, tag, nbytes, msgid, payload, token)
        if bl is None:
            w = self.out[peer]
            off = w.reserve(n)
            if off >= 0:
                d = w.data
                _pack_into(d, off, n, kind, flags, src, ctx, tag, nbytes, msgid)
                if n > HLEN:
                    d[off + HLEN : off + n] = payload
                w.commit(n)
                return True
            bl = self.backlog[peer] = deque()
            self.nbacklog += 1
        if payload is not None and token is None:
            payload = bytes(payload)
        bl.append((n, kind, flags, src, ctx, tag, nbytes, msgid, payload, token))
        return False

    def try_send(self, peer: int, kind: int, flags: int, src: int, ctx: int, tag: int, nbytes: int, msgid: int, payload) -> bool:
        """Write one frame only if it fits now (no backlog); False otherwise."""
        bl = self.backlog[peer]
        if bl is not None:
            return bl is FAR and self.far.try_send(peer, kind, flags, src, ctx, tag, nbytes, msgid, payload)
        n = HLEN + len(payload)
        w = self.out[peer]
        off = w.reserve(n)
        if off < 0:
            return False
        d = w.data
        _pack_into(d, off, n, kind, flags, src, ctx, tag, nbytes, msgid)
        d[off + HLEN : off + n] = payload
        w.commit(n)
        return True

    def flush(self) -> list:
        """Retry backlogged frames; returns the tokens of the frames now written."""
        done = []
        for peer, bl in enumerate(self.backlog):
            if not bl:  # None, or FAR
                continue
            w = self.out[peer]
            while bl:
                f = bl[0]
                n = f[0]
                off = w.reserve(n)
                if off < 0:
                    break
                d = w.data
                _pack_into(d, off, *f[:8])
                if n > HLEN:
                    d[off + HLEN : off + n] = f[8]
                w.commit(n)
                bl.popleft()
                if f[9] is not None:
                    done.append(f[9])
            if not bl:
                self.backlog[peer] = None
                self.nbacklog -= 1
        return done

    def poll(self, handler, budget: int = 64) -> int:
        """Hand up to ``budget`` incoming frames to ``handler(peer, hdr, payload_view)``."""
        got = self.poll_near(handler, budget)
        far = self.far
        if far is not None and got < budget:
            got += far.poll(handler, budget - got)
        return got

    def poll_far(self, handler, budget: int = 64) -> int:
        """:meth:`poll` of the frames from other nodes alone (this node's rings stay as they are)."""
        far = self.far
        return 0 if far is None else far.poll(handler, budget)

    def poll_near(self, handler, budget: int = 64) -> int:
        """:meth:`poll` of this node's rings alone (the frames from other nodes stay where they are)."""
        got = 0
        inc = self.inc
        for peer in self.peers_in:
            r = inc[peer]
            ctl = r.ctl
            if ctl[8] == ctl[0]:  # empty (the common case, checked without a call)
                continue
            while got < budget:
                off = r.peek()
                if off < 0:
                    break
                d = r.data
                hdr = _unpack_from(d, off)
                n = hdr[0]
                handler(peer, hdr, d[off + HLEN : off + n])
                r.release(n)
                got += 1
        return got

    def arrived(self) -> bool:
        """Whether some ring holds a frame (a look at two words per ring, nothing read)."""
        for p in self.peers_in:
            ctl = self.inc[p].ctl
            if ctl[8] != ctl[0]:
                return True
        return self.far is not None and self.far.arrived()

    def drop(self, peer: int) -> list:
        """Forget the frames queued for ``peer``; the tokens that will never be written."""
        bl = self.backlog[peer]
        if bl is FAR:
            return self.far.drop(peer)
        if bl is None:
            return []
        self.backlog[peer] = None
        self.nbacklog -= 1
        return [f[9] for f in bl if f[9] is not None]

    def idle(self) -> bool:
        return self.nbacklog == 0 and (self.far is None or self.far.idle())

    def close(self) -> None:
        if self.far is not None:
            self.far.close()
        self.out = self.inc = []
        self._anon = None


@register
class ShmPush(Region):
    """Host data pushed through the rings (offers nothing: reaches every peer); windows in memfd
    memory mapped by every member."""

    name, memory, caps = "shm", HOST, ONE_SIDED | ATOMICS

    def __init__(self, world) -> None:
        self.rank = world.rank
        self.pid = world.pid

    def reaches(self, peer: int) -> bool:
        return True

    def offer(self, peer: int, src):
        return None

    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        return False

    def expose(self, mem):
        addr, _nbytes, file = mem
        if file is None:
            return None
        fd, off, flen = file
        return fd, off, flen, _memfd.file_key(fd), addr

    def attach(self, peer: int, desc, stream_of=None):
        fd, off, flen, key, addr = desc
        if peer == self.rank:
            return Mapped(peer, addr, True)
        here = _memfd.mapping_of(key)
        if here is not None:
            return Mapped(peer, here[0] + off, True)
        mine = _memfd.open_peer(self.pid(peer), fd)
        try:
            base = _memfd.map_shared("shm.attach", flen, mine)
        finally:
            os.close(mine)
        return Mapped(peer, base + off, True, lambda: _memfd.unmap(base, flen))
