"""The ``cuda_ipc`` transport: device regions shared through CUDA IPC handles (L4).

Theory of operation
===================
An IPC handle names a whole allocation, so an offer is the allocation's handle plus the
message's offset in it (``IPC_BODY``), the adapter that made it (simulated or CUDA) and,
unless ordering is left to the user, the handle of an interprocess event recorded on the
producer's stream: the receiver's copy waits for it, so it never reads before the
producer's work.  Every offer in flight has an event of its own, from a per-adapter pool:
a peer's ``cudaStreamWaitEvent`` waits for the event's *latest* record, so one shared
event, re-recorded for a later send, would let an earlier send's receiver copy too soon.
The event goes back to the pool when the send completes.

The receiver opens handles (memory and events) once and keeps them in an LRU cache of
``CACHE`` entries per kind (opening costs about a millisecond), then copies device to
device on the engine's copy stream.  Memory CUDA cannot export (pool or managed memory,
another process's mapping) and handles that cannot be opened here (a stale handle, a
process's own handle) make ``offer`` return None or ``take`` return False: the engine
then uses the next transport (``staging``).

One-sided (windows): a member exposes its device memory by the allocation's IPC handle and
the memory's offset in it; every other member opens the handle once for the window's life
(not through the LRU cache: a window's mapping must not be closed under it) and reaches
the memory with copies and device atomics (:class:`gpumpi.ipc.onesided.DeviceMemory`); the
owner reaches its own memory at its address.
"""

from __future__ import annotations

import struct
from collections import OrderedDict

from .base import ATOMICS, DEVICE, ONE_SIDED, READ, Region, register
from .onesided import DeviceMemory

#: the offer: adapter (1 sim, 2 cuda), the allocation's IPC handle, the message's offset in
#: it, the interprocess event recorded after its producer (zeros: none)
IPC_BODY = struct.Struct("<B64sQ64s")
IPC_SIM, IPC_CUDA = 1, 2
CACHE = 64  # opened IPC handles (and events) kept per process; the oldest is closed beyond


def _device():
    from .. import _device

    return _device


def _opened(cache: OrderedDict, key, ad, open_: str, handle, close: str):
    """``(ad, ad.<open_>(handle))`` from the LRU ``cache`` of IPC mappings or events, opened on
    a miss; past ``CACHE`` entries the least recently used one is closed (``<close>``)."""
    hit = cache.get(key)
    if hit is not None:
        cache.move_to_end(key)
        return hit
    hit = cache[key] = (ad, getattr(ad, open_)(handle))
    if len(cache) > CACHE:
        _, (old_ad, old) = cache.popitem(last=False)
        getattr(old_ad, close)(old)
    return hit


@register
class CudaIpc(Region):
    """Device memory of another process on this node, mapped through IPC handles."""

    name, memory, caps = "cuda_ipc", DEVICE, READ | ONE_SIDED | ATOMICS

    def __init__(self, world) -> None:
        self.rank = world.rank
        self.near = getattr(world, "near", None)  # IPC handles open on this node only
        self.mem: OrderedDict = OrderedDict()  # (peer, handle) -> (adapter, base): opened once
        self.ev: OrderedDict = OrderedDict()  # event handle -> (adapter, event)
        self.events: dict = {}  # adapter -> free (interprocess event, its handle) pairs

    def reaches(self, peer: int) -> bool:
        return peer != self.rank and (self.near is None or self.near(peer))  # not its own handles

    def offer(self, peer: int, src):
        ad, addr, stream = src
        try:
            handle, offset = ad.ipc_export(addr)
        except _device().IpcUnsupported:  # pool or managed memory, another process's mapping
            return None
        ev, evh, pair = None, bytes(64), None
        if stream is not None:  # the receiver's copy waits for the producer's work
            free = self.events.setdefault(ad, [])
            if free:
                pair = free.pop()
            else:
                e = ad.event_create(True)
                pair = (e, ad.ipc_event_export(e))
            ev, evh = pair
            ad.event_record(ev, stream)
        body = IPC_BODY.pack(IPC_SIM if ad.name == "sim" else IPC_CUDA, handle, offset, evh)
        return body, ev, (None if pair is None else (lambda: self.events[ad].append(pair)))

    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        D = _device()
        akind, handle, offset, evh = IPC_BODY.unpack(body)
        ad = D.sim_adapter() if akind == IPC_SIM else D.adapter()
        dad, daddr, stream_of = dst
        if dad is not None and dad is not ad:
            return False  # the destination is another adapter's memory: staging carries it
        try:
            base = _opened(self.mem, (peer, handle), ad, "ipc_open", handle, "ipc_close")[1]
            ev = None
            if evh.strip(b"\0"):  # the sender's interprocess event
                ev = _opened(self.ev, evh, ad, "ipc_event_open", evh, "event_destroy")[1]
        except (D.StaleHandle, D.IpcUnsupported, D.CudaError, OSError):
            return False
        if nbytes:
            s = stream_of(ad)
            if ev is not None:
                ad.stream_wait_event(s, ev)
            ad.memcpy(daddr, base + offset + skip, nbytes, s)
            ad.stream_synchronize(s)
        return True

    def expose(self, mem):
        ad, addr, _n = mem
        try:
            handle, offset = ad.ipc_export(addr)
        except _device().IpcUnsupported:  # pool or managed memory, another process's mapping
            return None
        return IPC_SIM if ad.name == "sim" else IPC_CUDA, handle, offset, addr

    def attach(self, peer: int, desc, stream_of=None):
        D = _device()
        akind, handle, offset, addr = desc
        ad = D.sim_adapter() if akind == IPC_SIM else D.adapter()
        if peer == self.rank:
            return DeviceMemory(peer, ad, addr, stream_of)
        try:
            base = ad.ipc_open(handle)
        except (D.StaleHandle, D.IpcUnsupported, D.CudaError) as exc:
            raise OSError(f"cuda_ipc.attach: cannot open rank {peer}'s IPC handle ({exc})") from None
        return DeviceMemory(peer, ad, base + offset, stream_of, lambda: ad.ipc_close(base))

    def close(self) -> None:
        for ad, base in self.mem.values():
            try:
                ad.ipc_close(base)
            except Exception:  # the adapter may be gone at exit  # noqa: BLE001
                pass
        self.mem.clear()
        self.ev.clear()
