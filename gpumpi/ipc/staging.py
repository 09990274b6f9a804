"""The ``staging`` transport: device data pushed through page-locked host slabs (L4).

Theory of operation
===================
Staging reaches every peer, so it is the last device transport: it offers no region,
and the sender *pushes* the data when the receiver asks for it (CTS).  Chunks go
device -> a slot of the sender's page-locked slab (:mod:`gpumpi.ipc.slab`, in the job
segment) -> the receiver's device; a header-only DATA frame (``FLAG_SLAB``: ``tag`` is
the slot, ``nbytes`` the chunk's length) names the slot, and the frame ring keeps the
chunks in order.  The sender fills chunk i+1 while the receiver copies chunk i out, so
the two halves of the pipeline overlap; there is no other host copy.  A chunk is a
quarter of the message, page-rounded, between 64 KiB and one slot (``slab.chunk_for``).

Slabs are page-locked once per (adapter, rank) in each process that touches them; a
refusal leaves pageable staging, which still works, only slower.  Slots a dead peer
held are taken back (:meth:`Staging.reclaim`).
"""

from __future__ import annotations

from .base import DEVICE, Region, address_of, register
from .slab import Slab, chunk_for


@register
class Staging(Region):
    """Device messages pushed through host slabs."""

    name, memory, caps = "staging", DEVICE, 0

    def __init__(self, world) -> None:
        self.rank = world.rank
        self.seg = world.seg
        self.local = getattr(world, "local", None)  # world rank -> slot in the node's segment (-1: other node)
        self.stage = world.stage  # (slots, slot size)
        self.slabs: dict = {}  # rank -> its Slab (this rank's own, and peers' it reads from)
        self.pinned: dict = {}  # (adapter name, rank) -> (adapter, address or None)

    def reaches(self, peer: int) -> bool:
        return self.local is None or self.local[peer] >= 0  # the slabs are the node's

    def offer(self, peer: int, src):
        return None  # the data is pushed

    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        return False

    # --- slabs ------------------------------------------------------------------------------
    def slab(self, rank: int) -> Slab:
        sl = self.slabs.get(rank)
        if sl is None:
            slots, size = self.stage
            sl = Slab.private(slots, size) if self.seg is None else Slab(self.seg.slab_view(
                rank if self.local is None else self.local[rank]), slots, size)
            self.slabs[rank] = sl
        return sl

    def _pin(self, ad, rank: int) -> Slab:
        """``rank``'s slab, page-locked in this process for ``ad`` (once)."""
        sl = self.slab(rank)
        key = (ad.name, rank)
        if key not in self.pinned:
            from .. import _device

            addr = address_of(sl.data)
            try:
                ad.host_register(addr, len(sl.data))
            except _device.CudaError:  # refused: pageable staging still works, only slower
                addr = None
            self.pinned[key] = (ad, addr)
        return sl

    # --- the pipeline -------------------------------------------------------------------------
    def fill(self, ad, src: int, off: int, total: int, peer: int, s):
        """Copy the next chunk of a ``total``-byte message (device address ``src``, from byte
        ``off``) into a free slot of our slab for ``peer``, on stream ``s``: ``(slot, length)``,
        or None while every slot is taken."""
        slab = self._pin(ad, self.rank)
        k = slab.acquire(peer)
        if k < 0:
            return None
        n = min(chunk_for(total, slab.slot_size), total - off)
        try:
            ad.memcpy(address_of(slab.view(k, n)), src + off, n, s)
            ad.stream_synchronize(s)
        except BaseException:
            slab.unacquire(k)
            raise
        return k, n

    def view(self, peer: int, slot: int, nbytes: int) -> memoryview:
        """The chunk ``peer`` left in ``slot`` of its slab."""
        return self.slab(peer).view(slot, nbytes)

    def land(self, ad, dst: int, peer: int, payload, nbytes: int, s) -> None:
        """Copy ``nbytes`` of a chunk (a view of ``peer``'s slab) to device address ``dst`` on ``s``."""
        self._pin(ad, peer)
        ad.memcpy(dst, address_of(payload), nbytes, s)
        ad.stream_synchronize(s)

    def release(self, peer: int, slot: int) -> None:
        """Give ``slot`` of ``peer``'s slab back: its chunk has been copied out."""
        self.slab(peer).release(slot)

    def reclaim(self, dead) -> None:
        """Take back the slots of our slab that dead ranks held."""
        own = self.slabs.get(self.rank)
        if own is not None:
            own.reclaim(dead)

    def close(self) -> None:
        for ad, addr in self.pinned.values():
            if addr is not None:
                try:
                    ad.host_unregister(addr)
                except Exception:  # the adapter may be gone at exit  # noqa: BLE001
                    pass
        self.pinned.clear()
        for sl in self.slabs.values():
            sl.close()
        self.slabs.clear()
