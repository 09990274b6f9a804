"""The ``self`` transports: a rank's large messages to itself (L4).

Theory of operation
===================
A rank sending to itself needs no kernel help and no export: the receiver is the same
process, so it copies straight from the sender's memory.  Host memory: the offer is the
sender's segments and ``take`` copies with ``memmove``.  Device memory: a process cannot
open its own CUDA IPC handles, so the offer is a number naming an entry of a table in
this process (the sender's adapter, address and ordering event) and ``take`` copies
device to device on the receiver's stream after that event.  An offer that is never
taken (the send was cancelled) is dropped when the table is cleared at close.

One-sided: a window of one member (``COMM_SELF``) exposes any of its memory through these:
the remote is the memory itself (:mod:`gpumpi.ipc.onesided`).  Device memory is updated
with device atomics (``ATOMICS``); host memory states none, so a window of one member on
private memory serializes its read-modify-writes with the window's lock as windows on
cross-memory-attach memory do (memory of a memfd is exposed by ``shm``, atomically).
"""

from __future__ import annotations

import ctypes
import itertools
import struct

from .base import (ATOMICS, DEVICE, HOST, ONE_SIDED, READ, Region, decode_segments, encode_segments, register,
                   skip_segments)
from .onesided import DeviceMemory, Mapped

_TOKEN = struct.Struct("<Q")


@register
class SelfHost(Region):
    """Host memory of this rank, copied in place."""

    name, memory, caps = "self", HOST, READ | ONE_SIDED

    def __init__(self, world) -> None:
        self.rank = world.rank

    def reaches(self, peer: int) -> bool:
        return peer == self.rank

    def offer(self, peer: int, src):
        return encode_segments(src)

    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        segs = decode_segments(body)
        if skip:
            segs = skip_segments(segs, skip)
        done = 0
        for a, n in segs:
            if done >= nbytes:
                break
            k = min(n, nbytes - done)
            ctypes.memmove(dst + done, a, k)
            done += k
        return True

    def expose(self, mem):
        return mem[0]

    def attach(self, peer: int, desc, stream_of=None):
        if peer != self.rank:
            raise OSError(f"self.attach: rank {peer}'s memory is not this process's (rank {self.rank})")
        return Mapped(peer, desc, False)


@register
class SelfDevice(Region):
    """Device memory of this rank, copied device to device."""

    name, memory, caps = "self", DEVICE, READ | ONE_SIDED | ATOMICS

    def __init__(self, world) -> None:
        self.rank = world.rank
        self.offers: dict = {}
        self.exposed: dict = {}  # number -> adapter of device memory a window of one member exposes
        self.ids = itertools.count(1)

    def reaches(self, peer: int) -> bool:
        return peer == self.rank

    def offer(self, peer: int, src):
        ad, addr, stream = src
        ev = None
        if stream is not None:  # the receiver's copy waits for the producer's work
            ev = ad.event_create(False)
            ad.event_record(ev, stream)
        k = next(self.ids)
        self.offers[k] = (ad, addr, ev)
        return _TOKEN.pack(k), ev, lambda: self.offers.pop(k, None)

    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        (k,) = _TOKEN.unpack(body)
        hit = self.offers.get(k)
        if hit is None:
            return False
        ad, addr, ev = hit
        dad, daddr, stream_of = dst
        if dad is not None and dad is not ad:
            return False  # another adapter (simulated and real memory): staging carries it
        if nbytes:
            s = stream_of(ad)
            if ev is not None:
                ad.stream_wait_event(s, ev)
            ad.memcpy(daddr, addr + skip, nbytes, s)
            ad.stream_synchronize(s)
        return True

    def expose(self, mem):
        ad, addr, _n = mem
        k = next(self.ids)
        self.exposed[k] = ad
        return k, addr

    def attach(self, peer: int, desc, stream_of=None):
        k, addr = desc
        ad = self.exposed.get(k) if peer == self.rank else None
        if ad is None:
            raise OSError(f"self.attach: rank {peer}'s device memory is not this process's (rank {self.rank})")
        return DeviceMemory(peer, ad, addr, stream_of, lambda: self.exposed.pop(k, None))

    def close(self) -> None:
        self.offers.clear()
        self.exposed.clear()
