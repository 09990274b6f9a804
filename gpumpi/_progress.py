"""The progress engine: the only code that drives I/O (L5).

Theory of operation
===================
One ``Engine`` per process owns the transport, the matcher and every operation in
flight (an ``Xfer``).  API calls post operations; ``progress()`` polls every
incoming ring, feeds each frame to the matcher and the protocol tables of
:mod:`gpumpi._protocol`, and carries out what they decide (copy eager data, read
the sender's memory by cross-memory attach, answer with ACK/CTS, push DATA
chunks).  Progress runs inside every gpumpi call and in every wait, so a rank
blocked in a send still serves requests from its peers.

Waiting spins briefly, then yields the CPU, then sleeps in short growing steps
(at most 1 ms): eight ranks on two cores finish without livelock.

Thread safety (THREAD_MULTIPLE): one re-entrant lock guards all engine state;
waits take it for one progress pass at a time and back off outside it.

Failure: the launcher marks a dead rank in the job segment and bumps the epoch;
``progress()`` reads the epoch every pass, and operations that involve a dead
peer fail with ``ERR_PROC_FAILED`` (wildcard receives with
``ERR_PROC_FAILED_PENDING``) instead of hanging.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
import time
from collections import OrderedDict

from . import _protocol as P
from ._matching import Matcher
from .constants import ANY_SOURCE
from .errors import (
    ERR_OTHER,
    ERR_PROC_FAILED,
    ERR_PROC_FAILED_PENDING,
    ERR_TRUNCATE,
    ERR_TYPE,
    SUCCESS,
)
from ._config import parse_transports
from .datatypes.flatten import sig_name
from .ipc import cma
from .ipc.shm import ShmTransport
from .ipc.slab import Slab, chunk_for

_SEG = struct.Struct("<QQ")
_NSEG = struct.Struct("<I")
_sched_yield = os.sched_yield
_sleep = time.sleep

SEND, RECV, GREQ = 0, 1, 2


def address_of(buf) -> int:
    """Address of the first byte of a writable or read-only host buffer."""
    mv = memoryview(buf)
    if mv.nbytes == 0:
        return 0
    if not mv.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(mv))
    import numpy as np

    return np.frombuffer(mv, dtype=np.uint8).ctypes.data


class Xfer:
    """One operation in flight (a send, a receive or a generalized request)."""

    __slots__ = (
        "kind", "state", "done", "peer", "src", "tag", "ctx", "msgid", "mode",
        "mem", "addr", "cap", "bufs", "nbytes", "got",
        "st_source", "st_tag", "st_nbytes", "err", "errmsg", "cancelled",
        "on_done", "dynamic", "result", "push_iter", "push_next", "arrival", "wpeer", "call", "segs", "sig", "dev", "ondev",
        "cancel_fn",  # joint operations only (left unset elsewhere): what MPI_Cancel does to them
    )

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.state = P.START if kind == SEND else P.POSTED
        self.done = False
        self.err = SUCCESS
        self.errmsg = None
        self.cancelled = False
        self.on_done = None
        self.dynamic = False
        self.addr = None
        self.result = None
        self.st_source = ANY_SOURCE
        self.st_tag = -1
        self.st_nbytes = 0
        self.arrival = None
        self.push_iter = None
        self.push_next = None
        self.sig = 0
        # device messages: (adapter, address, event or None): a receive's destination and the
        # event its writes wait for (the consumer's pending work); a send's source and the event
        # its reads wait for (the producer's work)
        self.dev = None
        self.ondev = False  # receive: the data was written into the device destination itself


class Arrival:
    """An incoming message (envelope, and its eager payload or its sender's segments)."""

    __slots__ = ("peer", "src", "ctx", "tag", "kind", "flags", "nbytes", "msgid", "data", "segs", "sig")

    def __init__(self, peer, src, ctx, tag, kind, flags, nbytes, msgid, sig=0):
        self.peer, self.src, self.ctx, self.tag = peer, src, ctx, tag
        self.kind, self.flags, self.nbytes, self.msgid = kind, flags, nbytes, msgid
        self.data = None
        self.segs = None
        self.sig = sig


def encode_segments(segs) -> bytes:
    out = [_NSEG.pack(len(segs))]
    out.extend(_SEG.pack(a, n) for a, n in segs)
    return b"".join(out)


def skip_segments(segs, skip: int) -> list:
    """The segments ``[(addr, len), ...]`` without their first ``skip`` bytes."""
    out = []
    for a, n in segs:
        if skip >= n:
            skip -= n
            continue
        out.append((a + skip, n - skip))
        skip = 0
    return out


_IPC_CACHE = 64  # opened IPC handles (and events) kept per process; the oldest is closed beyond


def decode_segments(mv) -> list:
    (k,) = _NSEG.unpack_from(mv, 0)
    return [_SEG.unpack_from(mv, 4 + 16 * i) for i in range(k)]


def _opened(cache: OrderedDict, key, ad, open_: str, handle, close: str):
    """``(ad, ad.<open_>(handle))`` from the LRU ``cache`` of IPC mappings or events, opened on
    a miss; past ``_IPC_CACHE`` entries the least recently used one is closed (``<close>``)."""
    hit = cache.get(key)
    if hit is not None:
        cache.move_to_end(key)
        return hit
    hit = cache[key] = (ad, getattr(ad, open_)(handle))
    if len(cache) > _IPC_CACHE:
        _, (old_ad, old) = cache.popitem(last=False)
        getattr(old_ad, close)(old)
    return hit


class Engine:
    """Per-process progress engine (see module docstring)."""

    def __init__(self, rank: int, size: int, seg, cfg) -> None:
        self.rank = rank
        self.size = size
        self.seg = seg
        self.lock = threading.RLock()
        self.tr = ShmTransport(rank, size, seg, cfg.ring_size)
        self.matcher = Matcher()
        self.sends: dict = {}
        self.pulls: dict = {}
        self.pushing: list = []
        self.cancellable: dict = {}
        self.next_msgid = 1
        ring = self.tr.max_payload * 2
        self.eager_limit = min(cfg.eager_limit or min(65536, ring // 4), self.tr.max_payload - 64)
        self.chunk = min(cfg.chunk, self.tr.max_payload)
        self.cma = bool(cfg.cma) and cma.available()
        self.cma_proven = False  # a plain cross-memory read has worked: splitting is safe
        self.split_min = cfg.split_min
        self.typecheck = cfg.typecheck
        # a peer may have died before this rank started: take the job's record as it is now
        self.epoch = seg.epoch if seg is not None else 0
        self.failed: set = set(seg.failed_ranks()) if seg is not None else set()
        self.launcher_pid = cfg.launcher_pid
        self._pids: dict = {}
        self.closed = False
        self.ipc_mem: OrderedDict = OrderedDict()  # (peer, handle) -> (adapter, base): opened once
        self.ipc_ev: OrderedDict = OrderedDict()  # event handle -> (adapter, event)
        self.copy_streams: dict = {}  # adapter name -> gpumpi's copy stream (IPC copies, staging)
        self.dev_transports = parse_transports(cfg.transports)["device"]
        self.stream_mode = cfg.stream_mode
        self.slabs: dict = {}  # rank -> its staging Slab (this rank's own, and peers' it reads from)
        self.stage = (seg.stage_slots, seg.stage_slot) if seg is not None else (cfg.stage_slots, cfg.stage_chunk)
        self.pinned: dict = {}  # (adapter name, rank) -> (adapter, address): page-locked slabs

    # --- helpers --------------------------------------------------------------------------
    def pid_of(self, peer: int) -> int:
        pid = self._pids.get(peer)
        if pid is None:
            pid = os.getpid() if (peer == self.rank or self.seg is None) else self.seg.pid(peer)
            self._pids[peer] = pid
        return pid

    def _new_msgid(self) -> int:
        m = self.next_msgid
        self.next_msgid = m + 1
        return m

    def _finish(self, x: Xfer) -> None:
        # the callback (an unpack into the user's buffer, a parent request) runs before the
        # operation reads as done: a thread polling ``done`` outside the lock sees it finished
        cb = x.on_done
        if cb is not None:
            x.on_done = None
            cb(x)
        x.done = True

    def _fail(self, x: Xfer, err: int, msg: str) -> None:
        if x.done:
            return
        x.err = err
        x.errmsg = msg
        x.state = P.FAILED
        self._finish(x)

    # --- posting --------------------------------------------------------------------------
    def isend(self, bufs, nbytes: int, wpeer: int, src: int, tag: int, ctx: int, mode: int, call: str,
              addrs=None, sig: int = 0) -> Xfer:
        """Post a send of the host buffers ``bufs`` (memoryviews, concatenated) to world rank ``wpeer``.

        ``addrs`` gives the buffers' addresses when the caller knows them; ``sig`` is the
        datatype's signature code (``flatten.sigcode``; 0: untyped), carried in the top
        bits of the frame's byte count.  A standard eager send completes at once and
        returns the shared completed ``SENT``.
        """
        wire = nbytes | (sig << P.SIG_SHIFT) if sig else nbytes
        with self.lock:
            if wpeer in self.failed:
                x = Xfer(SEND)
                x.peer = wpeer
                self._fail(x, ERR_PROC_FAILED, f"{call}: peer process failed (rank {wpeer})")
                return x
            tr = self.tr
            if nbytes <= self.eager_limit:
                payload = bufs[0] if len(bufs) == 1 else b"".join(bufs)
                if mode != P.SYNCHRONOUS:
                    if tr.try_send(wpeer, P.EAGER, 0, src, ctx, tag, wire, 0, payload):
                        return SENT
                    # the ring is full: the frame waits in the backlog, pointing at the
                    # caller's memory; the send completes when the frame is written
                    x = Xfer(SEND)
                    if tr.send(wpeer, P.EAGER, 0, src, ctx, tag, wire, 0, payload, x):
                        return SENT  # the receiver made room in between: written after all
                else:
                    x = Xfer(SEND)
                    x.msgid = m = self._new_msgid()
                    x.state = P.WAIT_ACK
                    self.sends[m] = x
                    tr.send(wpeer, P.EAGER, P.FLAG_SYNC, src, ctx, tag, wire, m, payload, x)
            else:
                x = Xfer(SEND)
                x.msgid = m = self._new_msgid()
                x.state = P.WAIT_ACK
                self.sends[m] = x
                if addrs is None:
                    addrs = [address_of(b) for b in bufs]
                x.segs = segs = [(a, len(b)) for a, b in zip(addrs, bufs)]
                tr.send(wpeer, P.RTS, P.FLAG_CMA if self.cma else 0, src, ctx, tag, wire, m,
                        encode_segments(segs))
            x.peer = wpeer
            x.tag = tag
            x.ctx = ctx
            x.mode = mode
            x.bufs = bufs
            x.nbytes = nbytes
            x.call = call
            self.progress()
        return x

    def isend_device(self, ad, body, src_addr: int, ev, nbytes: int, wpeer: int, src: int, tag: int, ctx: int,
                     mode: int, call: str, sig: int = 0) -> Xfer:
        """Post a rendezvous send of contiguous device memory.

        ``body`` (``P.IPC_BODY``) offers an IPC handle: the receiver copies device to device
        and ACKs.  With ``body`` None, or when the receiver cannot (or may not) open the
        handle, it answers CTS and the data is pushed through the staging pipeline
        (:meth:`_push_device`), whose copies wait for ``ev`` (the producer's work).
        """
        with self.lock:
            x = Xfer(SEND)
            x.peer = wpeer
            if wpeer in self.failed:
                self._fail(x, ERR_PROC_FAILED, f"{call}: peer process failed (rank {wpeer})")
                return x
            x.msgid = m = self._new_msgid()
            x.state = P.WAIT_ACK
            self.sends[m] = x
            x.tag, x.ctx, x.mode, x.nbytes, x.call = tag, ctx, mode, nbytes, call
            x.bufs = None
            x.dev = (ad, src_addr, ev)
            wire = nbytes | (sig << P.SIG_SHIFT) if sig else nbytes
            if body is None:
                self.tr.send(wpeer, P.RTS, 0, src, ctx, tag, wire, m, encode_segments(()))
            else:
                self.tr.send(wpeer, P.RTS, P.FLAG_IPC, src, ctx, tag, wire, m, body)
            self.progress()
        return x

    @staticmethod
    def _ordered(x: Xfer, s) -> int:
        """The device address of ``x`` (``x.dev``), once stream ``s`` waits for the event of the
        work that must come first (the producer's for a send, the consumer's for a receive)."""
        ad, addr, ev = x.dev
        if ev is not None:
            ad.stream_wait_event(s, ev)
            x.dev = (ad, addr, None)
        return addr

    def copy_stream(self, ad):
        st = self.copy_streams.get(ad.name)
        if st is None:
            st = self.copy_streams[ad.name] = ad.stream_create()
        return st

    def _ipc_copy(self, x: Xfer, peer: int, body, take: int) -> bool:
        """Copy a device message straight from the sender's allocation; False if it cannot be opened."""
        from . import _device

        if "cuda_ipc" not in self.dev_transports:
            return False
        akind, handle, offset, evh = P.IPC_BODY.unpack(body)
        ad = _device.sim_adapter() if akind == P.IPC_SIM else _device.adapter()
        try:
            hit = _opened(self.ipc_mem, (peer, handle), ad, "ipc_open", handle, "ipc_close")
            ev = None
            if evh.strip(b"\0"):  # the sender's interprocess event
                ev = _opened(self.ipc_ev, evh, ad, "ipc_event_open", evh, "event_destroy")[1]
        except (_device.StaleHandle, _device.IpcUnsupported, _device.CudaError, OSError):
            return False
        if take:
            s = self.copy_stream(ad)
            if x.dev is not None:
                dst = self._ordered(x, s)
            else:
                dst = x.addr if x.addr is not None else address_of(x.mem)
            if ev is not None:
                ad.stream_wait_event(s, ev)
            ad.memcpy(dst, hit[1] + offset, take, s)
            ad.stream_synchronize(s)
        x.ondev = x.dev is not None
        return True

    def irecv(self, mem, cap: int, source: int, wpeer: int, tag: int, ctx: int, call: str, addr=None,
              sig: int = 0, post=None, dev=None) -> Xfer:
        """Post a receive into ``mem`` (``cap`` bytes at ``addr`` if known); ``mem=None`` allocates on match.

        ``sig`` is the receive datatype's signature code (0: accept any); ``post(x)`` runs
        when the receive completes, before it reads as done (unpacking into user memory).
        """
        x = Xfer(RECV)
        x.sig = sig
        x.on_done = post
        x.dev = dev
        x.mem = mem
        x.addr = addr
        x.cap = cap
        x.ctx = ctx
        x.src = source
        x.wpeer = wpeer
        x.tag = tag
        x.call = call
        x.dynamic = mem is None
        with self.lock:
            arr = self.matcher.post_recv(ctx, source, tag, x)
            if arr is not None:
                self._match(x, arr.peer, arr.src, arr.ctx, arr.tag, arr.kind, arr.flags, arr.nbytes, arr.msgid,
                            arr.data, arr.segs, arr.sig)
            elif wpeer in self.failed or (wpeer == ANY_SOURCE and self.failed):
                self.matcher.cancel_recv(ctx, x)
                self._fail_recv_for_failure(x)
            else:
                self.progress()
        return x

    def deliver(self, x: Xfer, arr: Arrival) -> None:
        """Complete receive ``x`` with an arrival taken by a matched probe."""
        with self.lock:
            self._match(x, arr.peer, arr.src, arr.ctx, arr.tag, arr.kind, arr.flags, arr.nbytes, arr.msgid,
                        arr.data, arr.segs, arr.sig)

    # --- matching and frames ---------------------------------------------------------------
    def _match(self, x: Xfer, peer, src, ctx, tag, kind, flags, n, msgid, data, segs, sig=0) -> None:
        """Receive ``x`` matched a message: copy eager data, or read/pull a rendezvous one."""
        if flags & P.FLAG_SYNC or kind == P.RTS:
            self.cancellable.pop((peer, msgid), None)
        if x.dynamic:
            x.mem = bytearray(n)
            x.cap = n
            x.addr = None
        cap = x.cap
        take = n if n <= cap else cap
        x.st_source = src
        x.st_tag = tag
        x.st_nbytes = take
        if n > cap:
            x.err = ERR_TRUNCATE
            x.errmsg = f"{x.call}: message truncated ({n} bytes, buffer {cap})"
        if sig and x.sig and sig != x.sig and n and self.typecheck:
            # nothing is delivered; the protocol still runs so the sender completes
            x.err = ERR_TYPE
            x.errmsg = (f"{x.call}: type signature mismatch (message of {n} bytes of {sig_name(sig)} from rank "
                        f"{src}, receive of {sig_name(x.sig)})")
            x.cap = take = x.st_nbytes = 0
        if kind == P.EAGER:
            if take:
                x.mem[:take] = data if take == n else data[:take]
            if flags & P.FLAG_SYNC:
                self.tr.send(peer, P.ACK, 0, 0, ctx, 0, 0, msgid)
            x.state = P.step(P.RECV, x.state, "eager")
            self._finish(x)
            return
        # rendezvous
        if flags & P.FLAG_IPC:
            if self._ipc_copy(x, peer, segs, take):
                self.tr.send(peer, P.ACK, 0, 0, ctx, 0, 0, msgid)
                x.state = P.step(P.RECV, x.state, "rts_read")
                self._finish(x)
                return
        elif self.cma and flags & P.FLAG_CMA:
            addr = x.addr
            if addr is None and take:
                addr = x.addr = address_of(x.mem)
            if self.cma_proven and self.split_min and take >= self.split_min and peer != self.rank:
                # both sides copy: the sender writes the tail while we read the head
                head = (take // 2) & ~4095
                self.tr.send(peer, P.WRT, 0, 0, ctx, 0, take - head, msgid, P.WRT_BODY.pack(addr + head, head))
                errno = cma.read(self.pid_of(peer), segs, addr, head)
                x.state = P.step(P.RECV, x.state, "rts_split")
                x.got = head
                x.nbytes = take
                x.segs = segs
                self.pulls[(peer, msgid)] = x
                if errno:
                    x.err = ERR_OTHER
                    x.errmsg = f"{x.call}: cross-memory read from rank {peer} failed (errno {errno})"
                return
            errno = cma.read(self.pid_of(peer), segs, addr, take) if take else 0
            if errno == 0:
                self.cma_proven = True
                self.tr.send(peer, P.ACK, 0, 0, ctx, 0, 0, msgid)
                x.state = P.step(P.RECV, x.state, "rts_read")
                self._finish(x)
                return
            self.cma = False  # the kernel refused: use the staged path from now on
        x.got = 0
        x.nbytes = n
        x.state = P.step(P.RECV, x.state, "rts_push")
        self.pulls[(peer, msgid)] = x
        self.tr.send(peer, P.CTS, 0, 0, ctx, 0, 0, msgid)

    def _on_frame(self, peer: int, hdr, payload) -> None:
        _, kind, flags, src, ctx, tag, nbytes, msgid = hdr
        if kind == P.EAGER or kind == P.RTS:
            sig = nbytes >> P.SIG_SHIFT
            if sig:
                nbytes &= P.NBYTES_MASK
            segs = (bytes(payload) if flags & P.FLAG_IPC else decode_segments(payload)) if kind == P.RTS else None
            x = self.matcher.match_posted(ctx, src, tag)
            if x is not None:
                self._match(x, peer, src, ctx, tag, kind, flags, nbytes, msgid, payload, segs, sig)
                return
            arr = Arrival(peer, src, ctx, tag, kind, flags, nbytes, msgid, sig)
            arr.segs = segs
            if kind == P.EAGER:
                arr.data = bytes(payload)
            self.matcher.add_unexpected(ctx, src, tag, arr)
            if flags & P.FLAG_SYNC or kind == P.RTS:
                self.cancellable[(peer, msgid)] = arr
        elif kind == P.DATA:
            slab = None
            if flags & P.FLAG_SLAB:  # a staged device chunk: it waits in slot ``tag`` of the sender's slab
                slab = self._slab(peer)
                payload = slab.view(tag, nbytes)
            x = self.pulls.get((peer, msgid))
            if x is None:  # the receive failed meanwhile
                if slab is not None:
                    slab.release(tag)
                return
            n = len(payload)
            got = x.got
            if got < x.cap:
                take = min(n, x.cap - got)
                if x.dev is None:
                    x.mem[got : got + take] = payload[:take]
                else:  # staging: host slot -> device, before the slot is given back
                    self._stage_in(x, peer, got, payload, take)
            if slab is not None:
                slab.release(tag)
            x.got = got + n
            if flags & P.FLAG_LAST:
                del self.pulls[(peer, msgid)]
                x.state = P.step(P.RECV, x.state, "data_last")
                self._finish(x)
        elif kind == P.WRT:
            x = self.sends[msgid]
            addr, head = P.WRT_BODY.unpack(payload)
            errno = cma.write(self.pid_of(peer), x.segs, head, addr, nbytes)
            x.state = P.step(P.SEND, x.state, "write")
            self.tr.send(peer, P.WDONE, P.FLAG_FAILED if errno else 0, 0, ctx, 0, 0, msgid)
        elif kind == P.WDONE:
            x = self.pulls.pop((peer, msgid))
            if flags & P.FLAG_FAILED and not x.err:  # read the tail ourselves
                errno = cma.read(self.pid_of(peer), skip_segments(x.segs, x.got), x.addr + x.got, x.nbytes - x.got)
                if errno:
                    x.err = ERR_OTHER
                    x.errmsg = f"{x.call}: cross-memory read from rank {peer} failed (errno {errno})"
            self.tr.send(peer, P.ACK, 0, 0, ctx, 0, 0, msgid)
            x.state = P.step(P.RECV, x.state, "wdone")
            self._finish(x)
        elif kind == P.ACK:
            x = self.sends.get(msgid)
            if x is None:
                return
            x.state = P.step(P.SEND, x.state, "ack")
            if x.state == P.DONE:
                del self.sends[msgid]
                self._finish(x)
        elif kind == P.CTS:
            x = self.sends[msgid]
            x.state = P.step(P.SEND, x.state, "cts")
            if x.state == P.PUSHING:
                del self.sends[msgid]
                self._start_push(x)
        elif kind == P.CANCEL:
            arr = self.cancellable.pop((peer, msgid), None)
            ok = arr is not None and self.matcher.withdraw(arr.ctx, arr)
            self.tr.send(peer, P.CREPLY, P.FLAG_CANCELLED if ok else 0, 0, ctx, 0, 0, msgid)
        elif kind == P.CREPLY:
            x = self.sends[msgid]
            if flags & P.FLAG_CANCELLED:
                x.state = P.step(P.SEND, x.state, "cancelled")
                del self.sends[msgid]
                x.cancelled = True
                self._finish(x)
            else:
                x.state = P.step(P.SEND, x.state, "not_cancelled")
                if x.state == P.DONE:
                    del self.sends[msgid]
                    self._finish(x)
                elif x.state == P.PUSHING:
                    del self.sends[msgid]
                    self._start_push(x)

    def _start_push(self, x: Xfer) -> None:
        if x.bufs is None:  # device memory: the staging pipeline
            x.got = 0
            self.pushing.append(x)
            return
        chunk = self.chunk

        def pieces():
            for b in x.bufs:
                for off in range(0, len(b), chunk):
                    yield b[off : off + chunk]

        x.push_iter = pieces()
        x.push_next = next(x.push_iter)
        x.arrival = _UNSET  # look-ahead slot: the chunk after push_next
        self.pushing.append(x)

    def _push(self) -> None:
        tr = self.tr
        for x in list(self.pushing):
            if x.bufs is None:
                self._push_device(x)
                continue
            while True:
                if x.arrival is _UNSET:
                    x.arrival = next(x.push_iter, None)
                last = x.arrival is None
                if not tr.try_send(x.peer, P.DATA, P.FLAG_LAST if last else 0, 0, x.ctx, 0, 0, x.msgid, x.push_next):
                    break
                if last:
                    self.pushing.remove(x)
                    x.push_iter = x.push_next = None
                    x.state = P.step(P.SEND, x.state, "pushed")
                    self._finish(x)
                    break
                x.push_next = x.arrival
                x.arrival = _UNSET

    # --- device staging ---------------------------------------------------------------------
    # Chunks go device -> a slot of this rank's page-locked slab -> the peer's device; a header-
    # only DATA frame names the slot (gpumpi.ipc.slab).  The sender fills chunk i+1 while the
    # receiver copies chunk i out, so the two halves of the pipeline overlap; no other host copy.
    def _slab(self, rank: int):
        sl = self.slabs.get(rank)
        if sl is None:
            slots, size = self.stage
            if self.seg is None:
                sl = Slab.private(slots, size)
            else:
                sl = Slab(self.seg.slab_view(rank), slots, size)
            self.slabs[rank] = sl
        return sl

    def _pin(self, ad, rank: int):
        """``rank``'s slab, page-locked in this process for ``ad`` (once)."""
        sl = self._slab(rank)
        key = (ad.name, rank)
        if key not in self.pinned:
            from . import _device

            addr = address_of(sl.data)
            try:
                ad.host_register(addr, len(sl.data))
            except _device.CudaError:  # refused: pageable staging still works, only slower
                addr = None
            self.pinned[key] = (ad, addr)
        return sl

    def _push_device(self, x: Xfer) -> None:
        ad = x.dev[0]
        s = self.copy_stream(ad)
        addr = self._ordered(x, s)
        slab = self._pin(ad, self.rank)
        total = x.nbytes
        chunk = chunk_for(total, slab.slot_size)
        while True:
            k = slab.acquire(x.peer)
            if k < 0:
                return
            off = x.got
            n = min(chunk, total - off)
            last = off + n >= total
            try:
                ad.memcpy(address_of(slab.view(k, n)), addr + off, n, s)
                ad.stream_synchronize(s)
            except BaseException:
                slab.unacquire(k)
                raise
            # header only (the ring keeps its order): tag = the slot, nbytes = the chunk's length
            self.tr.send(x.peer, P.DATA, P.FLAG_SLAB | (P.FLAG_LAST if last else 0), 0, x.ctx, k, n, x.msgid)
            x.got = off + n
            if last:
                self.pushing.remove(x)
                x.state = P.step(P.SEND, x.state, "pushed")
                self._finish(x)
                return

    def _stage_in(self, x: Xfer, peer: int, got: int, payload, take: int) -> None:
        ad = x.dev[0]
        s = self.copy_stream(ad)
        dst = self._ordered(x, s)
        self._pin(ad, peer)
        ad.memcpy(dst + got, address_of(payload), take, s)
        ad.stream_synchronize(s)
        x.ondev = True

    # --- cancel ---------------------------------------------------------------------------
    def cancel(self, x: Xfer) -> None:
        """Request cancellation (MPI_Cancel): immediate for posted receives, a round trip for sends."""
        with self.lock:
            if x.done:
                return
            if x.kind == RECV:
                if x.state == P.POSTED and self.matcher.cancel_recv(x.ctx, x):
                    x.state = P.step(P.RECV, x.state, "cancel")
                    x.cancelled = True
                    self._finish(x)
            elif x.kind == SEND and x.state == P.WAIT_ACK:
                x.state = P.step(P.SEND, x.state, "cancel")
                self.tr.send(x.peer, P.CANCEL, 0, 0, x.ctx, 0, 0, x.msgid)

    # --- progress and waiting -------------------------------------------------------------
    def progress(self) -> int:
        """One pass: flush backlogs, read frames, push chunks, check for failed peers."""
        tr = self.tr
        n = tr.poll(self._on_frame)
        if self.pushing:
            self._push()
        if tr.nbacklog:
            for x in tr.flush():
                if x.state == P.START:  # a queued standard eager send is now in the ring
                    x.state = P.step(P.SEND, x.state, "eager")
                    self._finish(x)
        seg = self.seg
        if seg is not None and seg.q[3] != self.epoch:
            self._on_failures()
        return n

    def wait(self, x: Xfer) -> None:
        """Block until ``x`` completes (progressing everything meanwhile)."""
        if x.done:
            return
        lock = self.lock
        spins = 0
        while True:
            with lock:
                self.progress()
            if x.done:
                return
            spins += 1
            if spins > 50:
                self.backoff(spins)

    def wait_any(self, xs) -> None:
        """Block until one of ``xs`` completes."""
        lock = self.lock
        spins = 0
        while True:
            with lock:
                self.progress()
            for x in xs:
                if x.done:
                    return
            spins += 1
            if spins > 50:
                self.backoff(spins)

    def wait_until(self, pred) -> None:
        """Block until ``pred()`` is true (evaluated under the lock after each pass)."""
        lock = self.lock
        spins = 0
        while True:
            with lock:
                self.progress()
                if pred():
                    return
            spins += 1
            if spins > 50:
                self.backoff(spins)

    def backoff(self, spins: int) -> None:
        if spins < 2000:
            _sched_yield()
            return
        if spins & 255 == 0 and self.launcher_pid and os.getppid() != self.launcher_pid:
            os._exit(1)  # the launcher died: a rank must not outlive its job
        _sleep(min(1e-3, 2e-5 * (1 << min(6, (spins - 2000) >> 8))))

    # --- failures -------------------------------------------------------------------------
    def _on_failures(self) -> None:
        seg = self.seg
        self.epoch = seg.q[3]
        new = set(seg.failed_ranks()) - self.failed
        if not new:
            return
        self.failed |= new
        for m, x in list(self.sends.items()):
            if x.peer in new:
                del self.sends[m]
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        for x in list(self.pushing):
            if x.peer in new:
                self.pushing.remove(x)
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        tr = self.tr
        own = self.slabs.get(self.rank)
        if own is not None:  # slots handed to the dead stay theirs forever otherwise
            own.reclaim(new)
        for p in new:
            bl = tr.backlog[p]
            if bl is not None:
                tr.backlog[p] = None
                tr.nbacklog -= 1
                for f in bl:
                    if f[9] is not None:
                        self._fail(f[9], ERR_PROC_FAILED, f"{f[9].call}: peer process failed (rank {p})")
        for key, x in list(self.pulls.items()):
            if key[0] in new:
                del self.pulls[key]
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {key[0]})")
        for _src, x in list(self.matcher.posted_items()):
            if x.wpeer in new or x.wpeer == ANY_SOURCE:
                self.matcher.cancel_recv(x.ctx, x)
                self._fail_recv_for_failure(x)

    def _fail_recv_for_failure(self, x: Xfer) -> None:
        if x.wpeer == ANY_SOURCE:
            self._fail(x, ERR_PROC_FAILED_PENDING,
                       f"{x.call}: a process that may send this message failed (ranks {sorted(self.failed)})")
        else:
            self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.wpeer})")

    def close(self) -> None:
        self.closed = True
        for ad, base in self.ipc_mem.values():
            try:
                ad.ipc_close(base)
            except Exception:  # the adapter may be gone at exit  # noqa: BLE001
                pass
        self.ipc_mem.clear()
        self.ipc_ev.clear()
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
        self.tr.close()


_UNSET = object()

#: The completed send every standard eager send returns (it needs no state of its own).
SENT = Xfer(SEND)
SENT.done = True
SENT.state = P.DONE
