"""The progress engine: the only code that drives I/O (L5).

Theory of operation
===================
One ``Engine`` per process owns the matcher and every operation in flight (an
``Xfer``); it receives its transports from ``_bootstrap`` and names none of them: a
frame transport (ordered control frames per peer) and, per memory kind, region
transports in order of preference (:mod:`gpumpi.ipc.base`).  API calls post
operations; ``progress()`` polls the frames and hands each to the handler of its
kind (a table: envelope, data, write, ack, ...), which feeds the matcher and the
decisions of :mod:`gpumpi._protocol` and carries out what they return: copy eager
data; offer a region to the receiver (the first region transport that reaches the
peer), take an offered region, split the copy with the sender, or push the data
(DATA frames, or the staging slabs for device memory).  Progress runs inside every
gpumpi call and in every wait, so a rank blocked in a send still serves requests
from its peers.

The compiled small-message path (``fastring`` on this node, ``fastmpi`` between nodes)
serves the commonest calls without the matcher: a blocking ``Send``/``Recv`` of a whole
NumPy array, and ``Irecv``, whose receive is completed at once by a message already here or
else posted *lazily* (:meth:`Engine.recv_lazy`): queued outside the matcher, in order, and
completed at the start of each progress pass by one compiled look per receive while the
next frames are exactly their messages.  Whatever else needs the matcher (a general
receive, a probe, a cancel, a failure, a frame the look does not take) first gives the lazy
receives to it in the order they were posted, so MPI's matching order never depends on
which path ran.  While the first lazy receive waits for another node, a progress pass
reads only this node's rings: the next frame from MPI is the drain's to look at, not the
matcher's.  Between nodes, a message above the far eager limit in one data message is
pushed ahead by the compiled path for ``Isend`` too (:meth:`Engine.isend_far`), and a
lazy receive's look takes such a message and starts the receive of its bytes
(:meth:`Engine._pending`); both then stand where the engine's own push or match would
leave them, their MPI requests in slots tested together (``DataSlots``).

Waiting spins briefly, then yields the CPU, then sleeps in short growing steps
(at most 1 ms): eight ranks on two cores finish without livelock.

Thread safety (THREAD_MULTIPLE): one re-entrant lock guards all engine state;
waits take it for one progress pass at a time and back off outside it.

Failure: the launcher marks a dead rank in the job segment and bumps the epoch;
``progress()`` reads the epoch every pass, and operations that involve a dead
peer fail with ``ERR_PROC_FAILED`` (wildcard receives with
``ERR_PROC_FAILED_PENDING``) instead of hanging.  A region transport that finds a
peer's process gone while taking its data (:class:`~gpumpi.ipc.base.PeerGone`)
makes the engine treat that peer the same way, at once.

Finalize (:meth:`Engine.finalize_step`): MPI_Finalize returns only when this rank's
part in every communication is done -- sends whose request was freed and buffered
sends included -- so the data a peer will still read outlives the process.  Each
rank publishes how far it got in the job segment (``jobseg`` state word:
FINALIZING, then QUIESCENT once no receive of its own is posted or in progress,
then FINALIZED).  A send is given up only when its receiver can never take it: the
receiver failed or left Finalize, or it is QUIESCENT and the send is still
unmatched.  The peer's state is read *before* the rings are drained, and a rank
publishes QUIESCENT only with nothing left to write, so a reply it wrote before
is always seen first.
"""

from __future__ import annotations

import _thread
import os
import threading
import time

from . import _protocol as P
from ._matching import Matcher
from .constants import ANY_SOURCE
from .datatypes.flatten import sig_name
from .errors import (
    ERR_OTHER,
    ERR_PROC_FAILED,
    ERR_PROC_FAILED_PENDING,
    ERR_TRUNCATE,
    ERR_TYPE,
    SUCCESS,
    error,
)
from .ipc.base import DEVICE, DIRECT, HOST, WRITE, PeerGone, address_of, pick
from .ipc.jobseg import FINALIZED, FINALIZING, QUIESCENT
from .ipc.shm import FAR

_sched_yield = os.sched_yield
_sleep = time.sleep
_threads = _thread._count  # threads started from Python besides the main one (0: this is the only one)

#: compiled fast path (gpumpi.ipc.fastring): spin rounds of a blocking receive's first wait,
#: and of each later one (between them the wait backs off as ``Engine.wait`` does); about 26 us
#: and 1.7 us on the 2-core machine.  With more ranks on the node than cores this rank may run
#: on, the peer that would answer may be waiting for this very core: spin briefly, then yield.
_SPIN = (1024, 64)
_SPIN_OVERSUBSCRIBED = (32, 16)
_EMPTY, _GOT, _OTHER = 0, 1, 2  # fastring's results
_PENDING = 4  # fastmpi's: a pushed message's data request still going

SEND, RECV, GREQ = 0, 1, 2


def _mpi_failed(what: str):
    """The error of an MPI call of the compiled path between nodes that returned an error
    code (the MPI library failed; nothing of the operation was done)."""
    return error(ERR_OTHER, f"gpumpi: {what} failed in the MPI library (the compiled path between nodes)")

__all__ = ["Engine", "Xfer", "Arrival", "SENT", "address_of", "SEND", "RECV", "GREQ"]


class Xfer:
    """One operation in flight (a send, a receive or a generalized request)."""

    __slots__ = (
        "kind", "state", "done", "peer", "src", "tag", "ctx", "msgid", "mode",
        "mem", "addr", "cap", "bufs", "nbytes", "got",
        "st_source", "st_tag", "st_nbytes", "err", "errmsg", "cancelled",
        "on_done", "dynamic", "result", "push_iter", "push_next", "arrival", "wpeer", "call", "segs", "sig", "dev", "ondev",
        "region",  # rendezvous: the region transport that offered (sender) or takes (receiver) the data
        "cancel_fn",  # joint operations only (left unset elsewhere): what MPI_Cancel does to them
        "msig",  # receive: the signature code of the message it matched (0: untyped)
        "nosplit",  # receive: never split the copy with the sender (it is busy: a collective exchange)
        "want",  # send: bytes the receiver asked for through a direct region (-1: push through frames)
        "pend",  # a direct region's transfer in progress (its ``test()`` says when this side is done)
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
        self.sig = self.msig = 0
        # device messages: (adapter, address, event or None): a receive's destination and the
        # event its writes wait for (the consumer's pending work); a send's source and the event
        # its reads wait for (the producer's work)
        self.dev = None
        self.ondev = False  # receive: the data was written into the device destination itself
        self.nosplit = False
        self.want = -1
        self.pend = None


class Arrival:
    """An incoming message (envelope, and its eager payload or its sender's region offer)."""

    __slots__ = ("peer", "src", "ctx", "tag", "kind", "flags", "nbytes", "msgid", "data", "segs", "sig")

    def __init__(self, peer, src, ctx, tag, kind, flags, nbytes, msgid, sig=0):
        self.peer, self.src, self.ctx, self.tag = peer, src, ctx, tag
        self.kind, self.flags, self.nbytes, self.msgid = kind, flags, nbytes, msgid
        self.data = None
        self.segs = None
        self.sig = sig


class _Got:
    """A receive the compiled fast path completed (what :meth:`Engine.recv` callers read of an Xfer)."""

    __slots__ = ("st_source", "st_tag", "st_nbytes", "msig")
    done = True
    err = SUCCESS
    errmsg = None
    cancelled = False

    def __init__(self, source: int, tag: int, nbytes: int, msig: int) -> None:
        self.st_source, self.st_tag, self.st_nbytes, self.msig = source, tag, nbytes, msig


class Engine:
    """Per-process progress engine (see module docstring)."""

    def __init__(self, world) -> None:
        cfg = world.cfg
        self.world = world
        self.rank = world.rank
        self.size = world.size
        self.seg = world.seg  # the failure source: the launcher bumps q[3] when a rank dies
        self.lock = threading.RLock()
        self.tr = world.frames
        self.matcher = Matcher()
        self.sends: dict = {}
        self.pulls: dict = {}
        self.pushing: list = []
        self.direct: list = []  # operations whose bytes a direct region moves (``pend``)
        # receives posted by the fast path of Irecv and not yet in the matcher (recv_lazy): in
        # the order they were posted; the matcher's operations post them first (_unlazy)
        self.lazy: list = []
        # ranks of other nodes (an MPI launcher's job): their frames are not in the rings, so the
        # compiled waits, which watch the rings only, never wait for them
        self.far = frozenset(getattr(world, "far", ()))
        self.farframes = getattr(self.tr, "far", None)
        # collective runs whose round completed (collectives._execute): advanced at the end of a
        # pass, outside the frame handlers that completed their operations
        self.ready: list = []
        self._advancing = False
        self.freed_ctx: set = set()  # context ids of freed communicators (stale handle copies fail)
        self.cancellable: dict = {}
        self.next_msgid = 1
        ring = self.tr.max_payload * 2
        self.eager_limit = min(cfg.eager_limit or min(65536, ring // 4), self.tr.max_payload - 64)
        self.chunk = min(cfg.chunk, self.tr.max_payload)
        self.split_min = cfg.split_min
        self.typecheck = cfg.typecheck
        # region transports per memory kind, in order of preference; the last pushes (reaches all)
        self.host, self.device = world.regions[HOST], world.regions[DEVICE]
        self.staging = self.device[-1]  # pushes device data (parse_transports keeps staging last)
        self.offerers = {t.ident: t for lst in world.regions.values() for t in lst}
        self.transports = world.names
        # a peer may have died before this rank started: take the job's record as it is now
        self.epoch = self.seg.epoch if self.seg is not None else 0
        self.failed: set = world.failed_ranks()
        self.launcher_pid = world.launcher_pid
        self.closed = False
        self.fin_state = 0  # the state word this rank published (jobseg), once finalizing
        self.copy_streams: dict = {}  # adapter name -> gpumpi's copy stream (IPC copies, staging)
        self.stream_mode = cfg.stream_mode
        # the compiled small-message path (send_fast, recv_fast): compiled after ``fast_after``
        # more eligible calls (-1: never)
        self.fast_after = cfg.fastpath
        self.fsend = self.frecv = self.fwait = self.frounds = None
        self.held: dict = {}  # size -> free buffers of unexpected eager payloads (_hold)
        self.held_bytes = 0
        self.ftab = self.fout = self.fring = None
        self.fsize = 0
        # the compiled path to ranks of other nodes (gpumpi.ipc.fastmpi): its table and functions
        self.mtab = self.msend = self.mrecv = self.mpush = self.mslots = None
        self.nslotted = 0  # operations in ``direct`` whose data messages are in slots of ``mslots``
        self.mchunk = 0
        self.mtab_a = 0
        # messages above this go to ranks of other nodes pushed ahead (GPUMPI_MPI_EAGER)
        self.far_eager = min(cfg.mpi_eager, self.eager_limit) if self.far else self.eager_limit
        self._tls = threading.local()  # recv_fast's result array of each thread but the only one
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        self.crowded = cfg.local_size > cores  # more ranks on the node than cores for them
        self.spin_first, self.spin_next = _SPIN_OVERSUBSCRIBED if self.crowded else _SPIN
        self._handlers = {
            P.EAGER: self._on_envelope, P.RTS: self._on_envelope, P.DATA: self._on_data, P.WRT: self._on_wrt,
            P.WDONE: self._on_wdone, P.ACK: self._on_ack, P.CTS: self._on_cts, P.CANCEL: self._on_cancel,
            P.CREPLY: self._on_creply,
        }

    # --- helpers --------------------------------------------------------------------------
    def region(self, memory: str, name: str):
        """The region transport ``name`` of ``memory`` this engine routes over (None: not in use)."""
        return next((t for t in self.world.regions[memory] if t.name == name), None)

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

    def _rts(self, x: Xfer, region, wpeer: int, src: int, ctx: int, tag: int, wire: int, body) -> None:
        """Send the request-to-send of ``x``: a region offer of ``region`` or, with ``body`` None,
        a bare one (the receiver will ask for a push)."""
        x.msgid = m = self._new_msgid()
        x.state = P.step(P.SEND, x.state, "rts")
        self.sends[m] = x
        if body is None:
            self.tr.send(wpeer, P.RTS, 0, src, ctx, tag, wire, m)
        else:
            x.region = region
            self.tr.send(wpeer, P.RTS, P.FLAG_OFFER, src, ctx, tag, wire, m, bytes((region.ident,)) + body)

    def _push_ahead(self, x: Xfer, region, wpeer: int, src: int, ctx: int, tag: int, wire: int, mem,
                    nbytes: int) -> None:
        """Send the RTS of ``x`` with every byte of ``mem`` (host pieces, or a device
        ``(adapter, address, stream)``) pushed right after it through the direct ``region``:
        the receiver answers nothing (``_protocol``: pushed ahead)."""
        x.msgid = m = self._new_msgid()
        x.region = region
        x.want = nbytes
        self.tr.send(wpeer, P.RTS, P.FLAG_OFFER | P.FLAG_PUSHED, src, ctx, tag, wire, m, bytes((region.ident,)))
        x.state = P.step(P.SEND, x.state, "rts_pushed")
        self._to_direct(x, region.send_from(wpeer, m, mem, nbytes))

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
            # the hot path: P.send_plan(...) == "eager", decided inline
            # (a rank of another node takes frames up to its own limit: pushed ahead above it)
            if nbytes <= self.eager_limit and mode != P.SYNCHRONOUS and (nbytes <= self.far_eager or
                                                                          wpeer not in self.far):
                fs = self.fsend
                if fs is not None and addrs is not None and len(addrs) == 1:
                    bl = tr.backlog[wpeer]
                    if bl is None:
                        if fs(self.fring[wpeer], self.fsize, src, ctx, tag, sig, addrs[0], nbytes):
                            return SENT
                    elif bl is FAR and self.mtab is not None and \
                            self.msend(self.mtab_a, wpeer, src, ctx, tag, sig, addrs[0], nbytes) == 1:
                        return SENT
                payload = bufs[0] if len(bufs) == 1 else b"".join(bufs)
                if tr.try_send(wpeer, P.EAGER, 0, src, ctx, tag, wire, 0, payload):
                    return SENT
                # the ring is full: the frame waits in the backlog, pointing at the
                # caller's memory; the send completes when the frame is written
                x = Xfer(SEND)
                if tr.send(wpeer, P.EAGER, 0, src, ctx, tag, wire, 0, payload, x):
                    return SENT  # the receiver made room in between: written after all
            elif P.send_plan(nbytes, self.eager_limit, mode) == "eager_sync":
                x = Xfer(SEND)
                x.msgid = m = self._new_msgid()
                x.state = P.step(P.SEND, x.state, "eager_sync")
                self.sends[m] = x
                payload = bufs[0] if len(bufs) == 1 else b"".join(bufs)
                tr.send(wpeer, P.EAGER, P.FLAG_SYNC, src, ctx, tag, wire, m, payload, x)
            else:
                x = Xfer(SEND)
                if addrs is None:
                    addrs = [address_of(b) for b in bufs]
                x.segs = segs = [(a, len(b)) for a, b in zip(addrs, bufs)]
                region = pick(self.host, wpeer)
                if region is not None and region.caps & DIRECT and mode != P.SYNCHRONOUS:
                    self._push_ahead(x, region, wpeer, src, ctx, tag, wire, segs, nbytes)
                else:
                    self._rts(x, region, wpeer, src, ctx, tag, wire, region.offer(wpeer, segs) if region else None)
            x.peer = wpeer
            x.tag = tag
            x.ctx = ctx
            x.mode = mode
            x.bufs = bufs
            x.nbytes = nbytes
            x.call = call
            self.progress()
        return x

    def isend_device(self, ad, src_addr: int, stream, nbytes: int, wpeer: int, src: int, tag: int, ctx: int,
                     mode: int, call: str, sig: int = 0) -> Xfer:
        """Post a rendezvous send of contiguous device memory at ``src_addr``.

        The first device transport that reaches the peer offers the memory (the receiver then
        copies device to device); where none offers it, or the receiver cannot take the offer,
        it answers CTS and the data is pushed through the staging pipeline.  Every copy of
        the data waits for the work queued on ``stream`` (None: unordered,
        ``GPUMPI_STREAM_MODE=none``).
        """
        with self.lock:
            x = Xfer(SEND)
            x.peer = wpeer
            if wpeer in self.failed:
                self._fail(x, ERR_PROC_FAILED, f"{call}: peer process failed (rank {wpeer})")
                return x
            x.tag, x.ctx, x.mode, x.nbytes, x.call = tag, ctx, mode, nbytes, call
            x.bufs = None
            region = pick(self.device, wpeer)
            o = region.offer(wpeer, (ad, src_addr, stream)) if region is not None else None
            if o is None:
                body = ev = None
                if stream is not None:  # the pushed copies wait for the producer's work
                    ev = ad.event_create(False)
                    ad.event_record(ev, stream)
            else:
                body, ev, release = o
                if release is not None:
                    x.on_done = lambda _x: release()
            x.dev = (ad, src_addr, ev)
            wire = nbytes | (sig << P.SIG_SHIFT) if sig else nbytes
            if region is not None and region.caps & DIRECT and mode != P.SYNCHRONOUS:
                cs = self.copy_stream(ad)
                self._push_ahead(x, region, wpeer, src, ctx, tag, wire, (ad, self._ordered(x, cs), cs), nbytes)
            else:
                self._rts(x, region, wpeer, src, ctx, tag, wire, body)
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

    def irecv(self, mem, cap: int, source: int, wpeer: int, tag: int, ctx: int, call: str, addr=None,
              sig: int = 0, post=None, dev=None, nosplit: bool = False) -> Xfer:
        """Post a receive into ``mem`` (``cap`` bytes at ``addr`` if known); ``mem=None`` allocates on match.

        ``sig`` is the receive datatype's signature code (0: accept any); ``post(x)`` runs
        when the receive completes, before it reads as done (unpacking into user memory);
        ``nosplit``: copy a large message alone, without the sender's help (it is busy).
        """
        x = Xfer(RECV)
        x.sig = sig
        x.nosplit = nosplit
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
            if self.lazy:
                self._unlazy()
            if self._post(x):
                self.progress()
        return x

    def _post(self, x: Xfer) -> bool:
        """Give receive ``x`` to the matcher: matched with a message waiting, or failed for a
        failed peer (False), or posted (True)."""
        arr = self.matcher.post_recv(x.ctx, x.src, x.tag, x)
        if arr is not None:
            self._match(x, arr.peer, arr.src, arr.ctx, arr.tag, arr.kind, arr.flags, arr.nbytes, arr.msgid,
                        arr.data, arr.segs, arr.sig)
            self._unhold(arr)
            return False
        wpeer = x.wpeer
        if wpeer in self.failed or (wpeer == ANY_SOURCE and self.failed):
            self.matcher.cancel_recv(x.ctx, x)
            self._fail_recv_for_failure(x)
            return False
        return True

    # --- receives posted by Irecv's fast path ------------------------------------------------
    def recv_lazy(self, source: int, wpeer: int, tag: int, ctx: int, addr: int, cap: int, sig: int, spec):
        """``Irecv``'s fast path into a whole contiguous NumPy array (``spec``, ``cap`` bytes at
        ``addr``): a completed receive when the message it matches first is an eager one that
        is here (one compiled look, :meth:`_look`), else a receive posted *lazily*: queued
        here, outside the matcher, and completed by the compiled look of each progress pass
        while frames come in the order the receives were posted (:meth:`_drain`).  Before
        anything else matches, probes, cancels or fails receives, the lazy ones are given to
        the matcher in order (:meth:`_unlazy`), so MPI's matching order holds.  None: the
        caller posts the receive through :meth:`irecv` (with other threads, a failed peer,
        a receive or message already waiting on ``ctx``, room for more than an eager
        message, or not compiled yet)."""
        if self.frecv is None and not self._fast_tick() or _threads() or self.failed:
            return None  # (a program that only posts Irecv turns the compiled path on too)
        q = self.matcher._ctx.get(ctx)
        if q is not None and (q.posted or q.unexpected):
            return None
        far = self.far and (wpeer < 0 or wpeer in self.far)
        if cap > (self.mchunk if far else self.eager_limit) or far and self.mrecv is None:
            return None
        if not self.typecheck:
            sig = 0
        x = Xfer(RECV)
        x.sig, x.addr, x.cap, x.ctx, x.src, x.wpeer, x.tag, x.call = sig, addr, cap, ctx, source, wpeer, tag, "Irecv"
        x.result = far
        if not self.lazy:
            rc = self._look(x)
            if rc == _GOT:
                self._got(x)
                return x
            if rc == _PENDING:
                self._pending(x)
                return x
        x.mem = spec  # the buffer spec until posted (_post_lazy parses it)
        self.lazy.append(x)
        return x

    def _drain(self) -> int:
        """Complete the lazy receives whose messages are next, in order (compiled looks); at
        the first that is not (something else came first) they all go to the matcher; when
        nothing came, they stay.  A message a progress pass queued in the matcher meanwhile
        (it came between a look and the pass's poll) goes to the first lazy receive, which
        is given to the matcher alone: it takes the first message there it matches.  The
        number of receives that left the lazy queue (matched or given to the matcher)."""
        lazy = self.lazy
        i = 0
        n = len(lazy)
        ctxq = self.matcher._ctx
        while i < n:
            x = lazy[i]
            q = ctxq.get(x.ctx)
            if self.failed or q is not None and q.posted:
                break
            if q is not None and q.unexpected:
                i += 1
                if self._post_lazy(x):
                    break  # posted, no message for it yet: those after it follow it into the matcher
                continue
            rc = self._look(x)
            if rc == _GOT:
                self._got(x)
                i += 1
                continue
            if rc == _PENDING:
                self._pending(x)
                i += 1
                continue
            if rc == _EMPTY:
                del lazy[:i]
                return i
            break
        del lazy[:i]
        if lazy:
            self._unlazy()
        return i

    def _look(self, x: Xfer) -> int:
        """One compiled look for the message receive ``x`` matches first, without a spin:
        fastring's results (GOT: the result array holds its status), or, from another node, a
        message pushed ahead whose bytes are still coming (PENDING: their MPI request is in
        the next free slot of :attr:`mslots`; see :meth:`_pending`)."""
        if x.result:
            mr = self.mrecv
            if mr is None:
                return _OTHER
            slot = self.mslots.next_address()  # 0: no free slot, a pushed message is the engine's
            rc = mr(self.mtab_a, self.ftab_a, x.wpeer, x.ctx, x.src, x.tag, x.sig, x.addr, x.cap, -2 if slot else -1,
                    self.epoch, self.fout_a, slot)
            if rc < 0:
                raise _mpi_failed("MPI_Request_get_status, MPI_Test, MPI_Start or MPI_Irecv of a receive")
            return rc
        return self.frecv(self.ftab, x.wpeer, x.ctx, x.src, x.tag, x.sig, x.addr, x.cap, 1, self.epoch, self.fout)

    def _got(self, x: Xfer) -> None:
        """Complete receive ``x`` that a look took (its status in the result array)."""
        x.st_source, x.st_tag, x.st_nbytes, x.msig = self.fout.tolist()
        x.mem = None
        x.state = P.DONE
        x.done = True

    def _pending(self, x: Xfer) -> None:
        """Receive ``x`` that a look matched to a message pushed ahead from another node, its
        bytes still coming into the destination: it is where the engine's own match of it
        would be (:meth:`_match`, the direct plan), its MPI request in the slot it took,
        completed by :meth:`_advance_direct`."""
        x.st_source, x.st_tag, x.st_nbytes, x.msig = self.fout.tolist()
        x.msgid, x.peer = self.faux.tolist()
        x.mem = None
        x.got, x.nbytes = 0, x.st_nbytes
        x.state = _RECV_DIRECT
        self.pulls[(x.peer, x.msgid)] = x
        self._to_direct(x, _SLOTTED)

    def _unlazy(self) -> None:
        """Give the lazy receives to the matcher, in the order they were posted."""
        lazy, self.lazy = self.lazy, []
        for x in lazy:
            self._post_lazy(x)

    def _post_lazy(self, x: Xfer) -> bool:
        """Give lazy receive ``x`` to the matcher (:meth:`_post`)."""
        from ._buffers import message_simple

        m = message_simple(x.mem, False, x.src, 1, "Irecv")
        x.mem, x.result = m.mem, None
        return self._post(x)

    def unlazy(self) -> None:
        """:meth:`_unlazy` under the lock (probes: the matcher's queues complete)."""
        if self.lazy:
            with self.lock:
                if self.lazy:
                    self._unlazy()

    # --- the compiled small-message path -----------------------------------------------------
    def _fast_tick(self) -> bool:
        """Count one call the fast path could serve; True once it is compiled and ready."""
        n = self.fast_after
        if n < 0:
            return False
        if n > 0:
            self.fast_after = n - 1
            return False
        self.fast_after = -1
        with self.lock:
            self._fast_start()
        return self.frecv is not None

    def _fast_start(self) -> None:
        """Compile (or load from the cache) :mod:`gpumpi.ipc.fastring` and describe the rings to it;
        where it cannot run (no numba, another frame transport) the fast path stays off."""
        tr = self.tr
        if self.frecv is not None or not hasattr(tr, "ring_addresses"):
            return
        try:
            from .ipc import fastring

            send, recv, wait, rounds = fastring.kernels()
        except Exception:  # noqa: BLE001 -- numba missing or unable to compile here: the general path serves
            return
        import numpy as np

        out, inc = tr.ring_addresses()
        seg = self.seg
        tab = [tr.out[self.rank].size, address_of(seg.q) + 24 if seg is not None else 0, len(tr.peers_in)]
        for p in tr.peers_in:
            tab += [inc[p], p]
        self.ftab = np.array(tab, dtype=np.int64)
        self.fout = np.zeros(4, dtype=np.int64)
        self.faux = None
        self.fring = out
        self.fsize = tr.out[self.rank].size
        self.ftab_a, self.fout_a = self.ftab.ctypes.data, self.fout.ctypes.data  # for rounds (addresses)
        self.fsend, self.fwait, self.frecv, self.frounds = send, wait, recv, rounds
        far = self.farframes
        if far is not None:
            try:
                mt = far.fast_table(self.host)
                if mt is not None:
                    from .ipc import fastmpi

                    self.msend, self.mrecv, self.mpush = fastmpi.kernels()
                    self.mchunk = self.world.cfg.mpi_chunk
                    self.mslots, self.faux, self.mdreq_a = far.slots, far.aux, far.dreq.ctypes.data
                    self.mregion = next(r for r in self.host if r.name == "mpi")
                    self.mtab = mt
                    self.mtab_a = mt.ctypes.data
            except Exception:  # noqa: BLE001 -- unable to compile here: the general path serves
                self.mtab = None

    def send_fast(self, wpeer: int, src: int, ctx: int, tag: int, addr: int, nbytes: int, sig: int) -> bool:
        """A standard send of ``nbytes`` contiguous host bytes at ``addr``, written into the ring to
        ``wpeer`` now by one compiled call: True, sent (complete); False, nothing was done (too
        large, frames queued ahead, no room, a failed peer, not compiled yet): the caller posts
        it through :meth:`isend`."""
        fs = self.fsend
        if fs is None:
            if not self._fast_tick():
                return False
            fs = self.fsend
        if nbytes > self.eager_limit or self.tr.backlog[wpeer] is not None or self.failed:
            if self.mtab is not None and self.tr.backlog[wpeer] is FAR and nbytes <= self.far_eager and \
                    not self.failed:
                if _threads():
                    with self.lock:
                        rc = self.msend(self.mtab_a, wpeer, src, ctx, tag, sig, addr, nbytes)
                else:
                    rc = self.msend(self.mtab_a, wpeer, src, ctx, tag, sig, addr, nbytes)
                if rc < 0:
                    raise _mpi_failed(f"MPI_Isend of a message to rank {wpeer}")
                return rc == 1
            return False
        if _threads():
            with self.lock:
                return self.tr.backlog[wpeer] is None and fs(self.fring[wpeer], self.fsize, src, ctx, tag, sig, addr,
                                                              nbytes) == 1
        return fs(self.fring[wpeer], self.fsize, src, ctx, tag, sig, addr, nbytes) == 1

    def _pushable(self, wpeer: int, nbytes: int) -> bool:
        """Whether the compiled path pushes a message of ``nbytes`` to ``wpeer`` ahead: a rank of
        another node, above the far eager limit, one data message, one thread, no failure."""
        return self.mtab is not None and self.far_eager < nbytes <= self.mchunk and not self.failed and \
            self.tr.backlog[wpeer] is FAR and not _threads()

    def push_far(self, wpeer: int, src: int, ctx: int, tag: int, addr: int, nbytes: int, sig: int) -> bool:
        """A blocking standard send (``Send``) that :meth:`send_fast` declined: a message to a
        rank of another node above the far eager limit is pushed ahead by the compiled path
        (``fastmpi.push``) and waited for here: True, sent (complete); False, nothing done."""
        if not self._pushable(wpeer, nbytes):
            return False
        rc = self.mpush(self.mtab_a, self.ftab_a, wpeer, src, ctx, tag, sig, addr, nbytes, self._new_msgid(),
                        self.spin_first, self.epoch, self.mdreq_a)
        if rc == _PENDING:
            self._wait_far(self.farframes.data_request())
            return True
        if rc < 0:
            raise _mpi_failed(f"MPI_Isend of a message to rank {wpeer}")
        return rc == _GOT

    def isend_far(self, wpeer: int, src: int, ctx: int, tag: int, addr: int, nbytes: int, sig: int):
        """``Isend``'s counterpart of :meth:`push_far` (one thread): a message to a rank of another
        node above the far eager limit, in one data message, pushed ahead by the compiled path
        without waiting: the shared completed ``SENT`` when MPI is done with it at once, else
        the send, where the engine's own push would leave it (:meth:`_push_ahead`), its MPI
        request in a slot of :attr:`mslots` (completed by :meth:`_advance_direct`); None,
        nothing was done (the caller posts it through :meth:`isend`)."""
        if not self._pushable(wpeer, nbytes):
            return None
        slot = self.mslots.next_address()
        if not slot:
            return None
        m = self._new_msgid()
        rc = self.mpush(self.mtab_a, self.ftab_a, wpeer, src, ctx, tag, sig, addr, nbytes, m, 0, self.epoch, slot)
        if rc == _PENDING:
            x = Xfer(SEND)
            x.msgid, x.peer, x.tag, x.ctx, x.mode, x.nbytes, x.call = m, wpeer, tag, ctx, P.STANDARD, nbytes, "Isend"
            x.region, x.want, x.segs = self.mregion, nbytes, [(addr, nbytes)]
            x.state = _SEND_PUSHED
            self._to_direct(x, _SLOTTED)
            return x
        if rc == _GOT:
            return SENT
        if rc < 0:
            raise _mpi_failed(f"MPI_Isend of a message to rank {wpeer}")
        return None

    def _wait_far(self, req) -> None:
        """Progress the engine until the compiled path's MPI request ``req`` completes."""
        spins = 0
        while not req.test():
            with self.lock:
                moved = self.progress()
            spins = 1 if moved else spins + 1
            if spins > 50:
                self.backoff(spins)

    def _fast_clear(self, ctx: int) -> bool:
        """Whether a new blocking receive on ``ctx`` is served by the next matching frame alone:
        no receive posted or message waiting on ``ctx`` (they come first in MPI order), and no
        duty for a progress pass (queued frames, pushes, collective rounds, failed peers)."""
        if self.tr.nbacklog or self.pushing or self.ready or self.failed or self.direct or self.lazy:
            return False
        q = self.matcher._ctx.get(ctx)
        return q is None or not (q.posted or q.unexpected)

    def recv_fast(self, source: int, wpeer: int, tag: int, ctx: int, addr: int, cap: int, sig: int):
        """Blocking receive of an eager message into ``cap`` bytes at ``addr`` by the compiled path,
        which spins on the rings with the GIL released: received, an int64 array of source, tag,
        bytes and signature (the calling thread's: read it before the next call); None, nothing
        was consumed -- something else arrived or waits (another
        peer's frame, a rendezvous, a message to truncate or of another type, a failure): the
        caller posts the receive through :meth:`irecv`, which sees every frame in order.

        With other threads running, frames are consumed only under the engine lock and the spin
        runs outside it (:func:`gpumpi.ipc.fastring.wait`).  A receive with room for more than
        the eager limit only takes a message already there: it does not spin, because a
        rendezvous message is served sooner by a receive posted before it comes (waiting here,
        the general path's posting work would fall after its arrival)."""
        fr = self.frecv
        if fr is None:
            if not self._fast_tick():
                return None
            fr = self.frecv
        if self.tr.nbacklog or self.pushing or self.ready or self.failed or self.direct or self.lazy:
            return None
        q = self.matcher._ctx.get(ctx)
        if q is not None and (q.posted or q.unexpected):
            return None
        if self.far and (wpeer < 0 or wpeer in self.far):
            return self._recv_far(source, wpeer, tag, ctx, addr, cap, sig)
        if not self.typecheck:
            sig = 0
        if _threads():
            return self._recv_fast_shared(fr, source, wpeer, tag, ctx, addr, cap, sig)
        out = self.fout  # the only thread: the engine's own result array
        big = cap > self.eager_limit
        far = self.farframes
        rc = fr(self.ftab, wpeer, ctx, source, tag, sig, addr, cap,
                1 if big else self.spin_next if far is not None else self.spin_first, self.epoch, out)
        if rc == _GOT:
            return out
        if big:  # room for a rendezvous message: post now, so the receive is matched as soon as it comes
            return None
        spins = 0
        while rc == _EMPTY:  # nothing yet: back off between short spins (oversubscribed cores)
            if far is not None and far.arrived():
                return None  # a frame from another node: the general path serves it in order
            spins += 1
            self.backoff(spins + 50)
            if _threads():
                return self._recv_fast_shared(fr, source, wpeer, tag, ctx, addr, cap, sig)
            rc = fr(self.ftab, wpeer, ctx, source, tag, sig, addr, cap, self.spin_next, self.epoch, out)
        return out if rc == _GOT else None

    def _recv_far(self, source: int, wpeer: int, tag: int, ctx: int, addr: int, cap: int, sig: int):
        """:meth:`recv_fast` of a receive that a rank of another node may satisfy (its source,
        or ANY_SOURCE): the compiled path of :mod:`gpumpi.ipc.fastmpi`, which watches this
        node's rings too.  Only the one thread: with others, the engine's path serves."""
        mr = self.mrecv
        if mr is None or _threads():
            return None
        if not self.typecheck:
            sig = 0
        out = self.fout
        big = cap > self.mchunk  # several data messages: a receive posted first serves it sooner
        mta, taba, outa = self.mtab_a, self.ftab_a, self.fout_a
        dq = self.mdreq_a
        rc = mr(mta, taba, wpeer, ctx, source, tag, sig, addr, cap, 1 if big else self.spin_first, self.epoch, outa, dq)
        spins = 0
        while rc == _EMPTY and not big:  # nothing yet: back off between short spins
            spins += 1
            self.backoff(spins + 50)
            rc = mr(mta, taba, wpeer, ctx, source, tag, sig, addr, cap, self.spin_next, self.epoch, outa, dq)
        if rc == _PENDING:  # a message pushed ahead, its bytes still coming: progress meanwhile
            self._wait_far(self.farframes.data_request())
            return out
        if rc < 0:
            raise _mpi_failed("MPI_Request_get_status, MPI_Test, MPI_Start or MPI_Irecv of a receive")
        return out if rc == _GOT else None

    def _recv_fast_shared(self, fr, source, wpeer, tag, ctx, addr, cap, sig):
        """:meth:`recv_fast` with other threads about: consume under the lock, spin outside it;
        the result goes to an array of the calling thread's own."""
        tab = self.ftab
        out = getattr(self._tls, "out", None)
        if out is None:
            out = self._tls.out = self.fout.copy()
        spins = 0
        budget = self.spin_first
        while True:
            with self.lock:
                if not self._fast_clear(ctx):
                    return None
                rc = fr(tab, wpeer, ctx, source, tag, sig, addr, cap, 1, self.epoch, out)
            if rc == _GOT:
                return out
            if rc != _EMPTY or cap > self.eager_limit:  # (room for a rendezvous: post it now, see recv_fast)
                return None
            if self.farframes is not None and self.farframes.arrived():
                return None
            self.fwait(tab, budget, self.epoch)  # GIL released, lock free: then look again under it
            spins += 1
            budget = self.spin_next
            self.backoff(spins + 50)

    def recv(self, mem, cap: int, source: int, wpeer: int, tag: int, ctx: int, call: str, addr=None,
             sig: int = 0):
        """Blocking receive into host memory ``mem`` (``cap`` bytes at ``addr``): the completed
        operation (``err``, ``st_source``, ``st_tag``, ``st_nbytes``, ``msig``); errors are not raised."""
        if addr is not None:
            o = self.recv_fast(source, wpeer, tag, ctx, addr, cap, sig)
            if o is not None:
                return _Got(*o.tolist())
        x = self.irecv(mem, cap, source, wpeer, tag, ctx, call, addr, sig)
        if not x.done:
            self.wait(x)
        return x

    def deliver(self, x: Xfer, arr: Arrival) -> None:
        """Complete receive ``x`` with an arrival taken by a matched probe."""
        with self.lock:
            self._match(x, arr.peer, arr.src, arr.ctx, arr.tag, arr.kind, arr.flags, arr.nbytes, arr.msgid,
                        arr.data, arr.segs, arr.sig)
            self._unhold(arr)

    # --- matching ---------------------------------------------------------------------------
    def _match(self, x: Xfer, peer, src, ctx, tag, kind, flags, n, msgid, data, offer, sig=0) -> None:
        """Receive ``x`` matched a message: copy eager data, or carry out the rendezvous plan."""
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
        x.msig = sig
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
        # rendezvous: read the offered region, split the copy with the sender, or ask for a push
        region = self.offerers.get(offer[0]) if offer is not None else None
        if region is not None and not region.reaches(peer):
            region = None
        wants_device = x.dev is not None
        plan = P.rts_plan(offer is not None, region is not None,
                          region is not None and bool(region.caps & WRITE) and region.proven and peer != self.rank,
                          take, 0 if x.nosplit else self.split_min, region is not None and bool(region.caps & DIRECT))
        if plan == P.DIRECT:  # post the receive into the destination, then ask for exactly ``take`` bytes
            dst = (x.dev[0], self._dev_addr(x, take), self._recv_stream(x, x.dev[0])) if wants_device \
                else self._host_addr(x, take)
            pushed = flags & P.FLAG_PUSHED
            # pushed ahead: every byte comes; those beyond ``take`` land in scratch memory
            pend = region.recv_into(peer, msgid, dst, take, n if pushed else take)
            x.ondev = wants_device
            x.got, x.nbytes, x.peer, x.msgid = 0, take, peer, msgid
            x.state = P.step(P.RECV, x.state, plan)
            self.pulls[(peer, msgid)] = x
            self._to_direct(x, pend)
            if not pushed:
                self.tr.send(peer, P.CTS, P.FLAG_DIRECT, 0, ctx, 0, take, msgid)
            return
        if plan == P.SPLIT:
            addr = self._host_addr(x, take)
            head = P.split_head(take)
            self.tr.send(peer, P.WRT, 0, 0, ctx, 0, take - head, msgid, P.WRT_BODY.pack(addr + head, head))
            x.state = P.step(P.RECV, x.state, plan)
            x.got, x.nbytes, x.segs, x.region = head, take, offer, region
            self.pulls[(peer, msgid)] = x
            try:
                ok = region.take(peer, offer[1:], addr, head)
            except PeerGone:
                del self.pulls[(peer, msgid)]
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process exited before its message was read "
                                               f"(rank {peer})")
                self._peer_gone(peer)
                return
            if not ok:
                x.err = ERR_OTHER
                x.errmsg = f"{x.call}: {region.name} read from rank {peer} failed"
            return
        if plan == P.READ:
            try:
                if region.memory == DEVICE:
                    ok = region.take(peer, offer[1:], (x.dev[0] if wants_device else None, self._dev_addr(x, take),
                                                       lambda ad: self._recv_stream(x, ad)), take)
                else:
                    ok = region.take(peer, offer[1:], self._host_addr(x, take), take)
            except PeerGone:
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process exited before its message was read "
                                               f"(rank {peer})")
                self._peer_gone(peer)
                return
            if ok:
                x.ondev = wants_device and region.memory == DEVICE
                self.tr.send(peer, P.ACK, 0, 0, ctx, 0, 0, msgid)
                x.state = P.step(P.RECV, x.state, plan)
                self._finish(x)
                return
        x.got = 0
        x.nbytes = n
        x.state = P.step(P.RECV, x.state, P.PUSH)
        self.pulls[(peer, msgid)] = x
        self.tr.send(peer, P.CTS, 0, 0, ctx, 0, 0, msgid)

    @staticmethod
    def _host_addr(x: Xfer, take: int) -> int:
        addr = x.addr
        if addr is None and take:
            addr = x.addr = address_of(x.mem)
        return addr or 0

    def _dev_addr(self, x: Xfer, take: int) -> int:
        return x.dev[1] if x.dev is not None else self._host_addr(x, take)

    def _recv_stream(self, x: Xfer, ad):
        """gpumpi's copy stream of ``ad``, ordered after the consumer's work on ``x``'s destination."""
        s = self.copy_stream(ad)
        if x.dev is not None:
            self._ordered(x, s)
        return s

    # --- frames: one handler per kind -------------------------------------------------------
    def _on_frame(self, peer: int, hdr, payload) -> None:
        self._handlers[hdr[1]](peer, hdr, payload)

    def _on_envelope(self, peer: int, hdr, payload) -> None:
        """EAGER or RTS: match it against the posted receives, or queue it as unexpected."""
        _, kind, flags, src, ctx, tag, nbytes, msgid = hdr
        sig = nbytes >> P.SIG_SHIFT
        if sig:
            nbytes &= P.NBYTES_MASK
        offer = bytes(payload) if kind == P.RTS and flags & P.FLAG_OFFER else None
        x = self.matcher.match_posted(ctx, src, tag)
        if x is not None:
            self._match(x, peer, src, ctx, tag, kind, flags, nbytes, msgid, payload, offer, sig)
            return
        arr = Arrival(peer, src, ctx, tag, kind, flags, nbytes, msgid, sig)
        arr.segs = offer
        if kind == P.EAGER:
            arr.data = self._hold(payload)
        self.matcher.add_unexpected(ctx, src, tag, arr)
        if flags & P.FLAG_SYNC or (kind == P.RTS and not flags & P.FLAG_PUSHED):
            self.cancellable[(peer, msgid)] = arr

    # Unexpected eager payloads are copied out of the ring into buffers kept for reuse.  A new
    # bytes object each made the heap grow by a burst of early messages and shrink when they
    # were received: glibc returns the freed top to the system (M_TRIM_THRESHOLD) and the next
    # burst faults every page back in (osu_bw's window of 64 KiB messages, which all arrive
    # before their receives once the sends are compiled, ran at a quarter of its speed).
    _HOLD_MIN = 4096  # smaller payloads: a bytes object (pymalloc and small heap chunks churn little)
    _HOLD_MAX = 16 << 20  # bytes of free buffers kept

    def _hold(self, payload):
        """A copy of ``payload`` (an unexpected eager message's), in a reused buffer where large."""
        n = len(payload)
        if n < self._HOLD_MIN:
            return bytes(payload)
        free = self.held.get(n)
        if free:
            buf = free.pop()
            self.held_bytes -= n
        else:
            buf = bytearray(n)
        buf[:] = payload
        return buf

    def _unhold(self, arr: Arrival) -> None:
        """Take back ``arr``'s payload buffer once its receive has copied it out."""
        buf = arr.data
        arr.data = None
        if type(buf) is bytearray and self.held_bytes + len(buf) <= self._HOLD_MAX:
            self.held.setdefault(len(buf), []).append(buf)
            self.held_bytes += len(buf)

    def _on_data(self, peer: int, hdr, payload) -> None:
        """DATA: the next pushed chunk (in the frame, or in a slot of the sender's staging slab)."""
        _, kind, flags, src, ctx, tag, nbytes, msgid = hdr
        st = self.staging if flags & P.FLAG_SLAB else None
        if st is not None:  # a staged device chunk: it waits in slot ``tag`` of the sender's slab
            payload = st.view(peer, tag, nbytes)
        x = self.pulls.get((peer, msgid))
        if x is None:  # the receive failed meanwhile
            if st is not None:
                st.release(peer, tag)
            return
        n = len(payload)
        got = x.got
        if got < x.cap:
            take = min(n, x.cap - got)
            if x.dev is None:
                x.mem[got : got + take] = payload[:take]
            else:  # staging: host slot -> device, before the slot is given back
                ad = x.dev[0]
                s = self.copy_stream(ad)
                self.staging.land(ad, self._ordered(x, s) + got, peer, payload, take, s)
                x.ondev = True
        if st is not None:
            st.release(peer, tag)
        x.got = got + n
        if flags & P.FLAG_LAST:
            del self.pulls[(peer, msgid)]
            x.state = P.step(P.RECV, x.state, "data_last")
            self._finish(x)

    def _on_wrt(self, peer: int, hdr, payload) -> None:
        """WRT: the receiver reads the head of our message; write the tail into its memory."""
        x = self.sends[hdr[7]]
        addr, head = P.WRT_BODY.unpack(payload)
        errno = x.region.write(peer, x.segs, head, addr, hdr[6])
        x.state = P.step(P.SEND, x.state, "write")
        self.tr.send(peer, P.WDONE, P.FLAG_FAILED if errno else 0, 0, hdr[4], 0, 0, hdr[7])

    def _on_wdone(self, peer: int, hdr, payload) -> None:
        """WDONE: the sender wrote the tail (or could not: read it ourselves); the receive is done."""
        flags, ctx, msgid = hdr[2], hdr[4], hdr[7]
        x = self.pulls.pop((peer, msgid))
        if flags & P.FLAG_FAILED and not x.err:  # read the tail ourselves
            try:
                ok = x.region.take(peer, x.segs[1:], x.addr + x.got, x.nbytes - x.got, x.got)
            except PeerGone:
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process exited before its message was read "
                                               f"(rank {peer})")
                self._peer_gone(peer)
                return
            if not ok:
                x.err = ERR_OTHER
                x.errmsg = f"{x.call}: {x.region.name} read from rank {peer} failed"
        self.tr.send(peer, P.ACK, 0, 0, ctx, 0, 0, msgid)
        x.state = P.step(P.RECV, x.state, "wdone")
        self._finish(x)

    def _on_ack(self, peer: int, hdr, payload) -> None:
        x = self.sends.get(hdr[7])
        if x is None:
            return
        x.state = P.step(P.SEND, x.state, "ack")
        if x.state == P.DONE:
            del self.sends[hdr[7]]
            self._finish(x)

    def _on_cts(self, peer: int, hdr, payload) -> None:
        x = self.sends[hdr[7]]
        x.state = P.step(P.SEND, x.state, "cts")
        if hdr[2] & P.FLAG_DIRECT:  # send ``nbytes`` through the region that offered
            x.want = hdr[6]
        if x.state == P.PUSHING:
            del self.sends[hdr[7]]
            self._start_push(x)

    def _on_cancel(self, peer: int, hdr, payload) -> None:
        arr = self.cancellable.pop((peer, hdr[7]), None)
        ok = arr is not None and self.matcher.withdraw(arr.ctx, arr)
        self.tr.send(peer, P.CREPLY, P.FLAG_CANCELLED if ok else 0, 0, hdr[4], 0, 0, hdr[7])

    def _on_creply(self, peer: int, hdr, payload) -> None:
        msgid = hdr[7]
        x = self.sends[msgid]
        if hdr[2] & P.FLAG_CANCELLED:
            x.state = P.step(P.SEND, x.state, "cancelled")
            del self.sends[msgid]
            x.cancelled = True
            self._finish(x)
            return
        x.state = P.step(P.SEND, x.state, "not_cancelled")
        if x.state == P.DONE:
            del self.sends[msgid]
            self._finish(x)
        elif x.state == P.PUSHING:
            del self.sends[msgid]
            self._start_push(x)

    # --- pushing ----------------------------------------------------------------------------
    def _start_push(self, x: Xfer) -> None:
        if x.want >= 0:  # the receiver posted its receive: the offering region sends
            if x.bufs is None:
                ad = x.dev[0]
                s = self.copy_stream(ad)
                src = (ad, self._ordered(x, s), s)
            else:
                src = x.segs
            self._to_direct(x, x.region.send_from(x.peer, x.msgid, src, x.want))
            return
        if x.bufs is None:  # device memory: the staging pipeline
            x.got = 0
            self.pushing.append(x)
            return
        bufs = x.bufs
        x.push_iter = (bufs[i][off : off + n] for i, off, n in P.pieces([len(b) for b in bufs], self.chunk))
        x.push_next = next(x.push_iter, b"")
        x.arrival = _UNSET  # look-ahead slot: the chunk after push_next
        self.pushing.append(x)

    def _advance_direct(self) -> int:
        """Test the transfers of direct regions; complete those done (on this side).  Those of
        the compiled path (in slots of :attr:`mslots`) are tested together, the others one
        by one."""
        n = 0
        direct = self.direct
        slots = self.mslots
        if slots is not None and slots.owner:
            for x in slots.done():
                if x.pend is _SLOTTED:  # else failed meanwhile (its peer, or at Finalize)
                    n += 1
                    self._direct_done(x)
            if len(direct) == self.nslotted:
                return n
        for x in list(direct):
            if not x.pend.test():
                continue
            n += 1
            self._direct_done(x)
        return n

    def _direct_done(self, x: Xfer) -> None:
        self._undirect(x)
        if x.kind == SEND:
            x.state = P.step(P.SEND, x.state, "pushed")
        else:
            del self.pulls[(x.peer, x.msgid)]
            x.state = P.step(P.RECV, x.state, "direct_done")
        self._finish(x)

    def _to_direct(self, x: Xfer, pend) -> None:
        """``x``'s bytes move through a direct region; ``pend.test()`` says when they are done
        on this side (``_SLOTTED``: its MPI request is in the next slot of :attr:`mslots`)."""
        x.pend = pend
        if pend is _SLOTTED:
            self.mslots.take(x)
            self.nslotted += 1
        self.direct.append(x)

    def _undirect(self, x: Xfer) -> None:
        """Take ``x`` out of ``direct``: its transfer is over (or given up)."""
        self.direct.remove(x)
        if x.pend is _SLOTTED:
            self.nslotted -= 1
        x.pend = None

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

    def _push_device(self, x: Xfer) -> None:
        """Push the next chunks of device send ``x`` through the staging slabs (header-only
        DATA frames name the slots; the ring keeps them in order)."""
        ad = x.dev[0]
        s = self.copy_stream(ad)
        addr = self._ordered(x, s)
        total = x.nbytes
        while True:
            got = self.staging.fill(ad, addr, x.got, total, x.peer, s)
            if got is None:
                return
            k, n = got
            last = x.got + n >= total
            self.tr.send(x.peer, P.DATA, P.FLAG_SLAB | (P.FLAG_LAST if last else 0), 0, x.ctx, k, n, x.msgid)
            x.got += n
            if last:
                self.pushing.remove(x)
                x.state = P.step(P.SEND, x.state, "pushed")
                self._finish(x)
                return

    # --- cancel ---------------------------------------------------------------------------
    def cancel(self, x: Xfer) -> None:
        """Request cancellation (MPI_Cancel): immediate for posted receives, a round trip for sends."""
        with self.lock:
            if x.done or x.kind == GREQ:
                return
            if self.lazy:
                self._unlazy()
            plan = P.cancel_plan(x.kind == SEND, x.state)
            if plan == "withdraw" and self.matcher.cancel_recv(x.ctx, x):
                x.state = P.step(P.RECV, x.state, "cancel")
                x.cancelled = True
                self._finish(x)
            elif plan == "ask":
                x.state = P.step(P.SEND, x.state, "cancel")
                self.tr.send(x.peer, P.CANCEL, 0, 0, x.ctx, 0, 0, x.msgid)

    # --- progress and waiting -------------------------------------------------------------
    def progress(self) -> int:
        """One pass: flush backlogs, read frames, push chunks, check for failed peers; the
        number of frames read and queued frames written (0: nothing moved)."""
        tr = self.tr
        lazy = self.lazy
        n = 0
        if lazy:
            n = self._drain()
            lazy = self.lazy
        if lazy and lazy[0].result:
            # lazy receives wait for another node: the next frame from there is their looks', not
            # the matcher's (the next pass's drain takes it, or gives them the matcher first)
            n += tr.poll_near(self._on_frame)
        else:
            n += tr.poll(self._on_frame)
        if self.pushing:
            self._push()
        if self.direct:
            n += self._advance_direct()
        if tr.nbacklog:
            done = tr.flush()
            n += len(done)
            for x in done:
                if x.state == P.START:  # a queued standard eager send is now in the ring
                    x.state = P.step(P.SEND, x.state, "eager")
                    self._finish(x)
        seg = self.seg
        if seg is not None and seg.q[3] != self.epoch:
            self._on_failures()
        if self.ready and not self._advancing:
            self._advance_ready()
        return n

    def quiet(self) -> bool:
        """True when a progress pass would do nothing now (no frame arrived, nothing queued or
        pushing, no collective round ready, no new failure): ``Iprobe`` and ``Test`` then skip it."""
        if self.tr.nbacklog or self.pushing or self.ready or self.direct:
            return False
        seg = self.seg
        if seg is not None and seg.q[3] != self.epoch:
            return False
        return not self.tr.arrived()

    def _advance_ready(self) -> None:
        """Advance the collective runs whose round completed (``Run.advance`` posts the next
        round, which may progress the engine again: not re-entered)."""
        self._advancing = True
        try:
            ready = self.ready
            while ready:
                ready.pop(0).advance()
        finally:
            self._advancing = False

    def wait(self, x: Xfer) -> None:
        """Block until ``x`` completes (progressing everything meanwhile).

        Once the fast path is compiled, a pass that left nothing to do but wait for frames is
        followed by a compiled spin on the rings (GIL released, outside the lock) instead of
        Python passes: the next frame is handled as soon as it lands."""
        if x.done:
            return
        lock = self.lock
        spins = 0
        while True:
            with lock:
                moved = self.progress()
            if x.done:
                return
            spins = 1 if moved else spins + 1  # backing off (and sleeping) is for idle passes only
            fw = self.fwait
            if fw is not None and not (self.tr.nbacklog or self.pushing or self.ready or self.direct or self.far):
                fw(self.ftab, self.spin_first if spins == 1 else self.spin_next, self.epoch)
                if not self.crowded:
                    if spins > 1:
                        self.backoff(spins + 50)  # the first spin was long: back off from the next one
                elif spins > 50:
                    self.backoff(spins)  # short spins on shared cores: as many passes as the Python path
            elif spins > 50:
                self.backoff(spins)

    def wait_any(self, xs) -> None:
        """Block until one of ``xs`` completes."""
        lock = self.lock
        spins = 0
        while True:
            with lock:
                moved = self.progress()
            for x in xs:
                if x.done:
                    return
            spins = 1 if moved else spins + 1
            if spins > 50:
                self.backoff(spins)

    def wait_until(self, pred) -> None:
        """Block until ``pred()`` is true (evaluated under the lock after each pass)."""
        lock = self.lock
        spins = 0
        while True:
            with lock:
                moved = self.progress()
                if pred():
                    return
            spins = 1 if moved else spins + 1
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
        if self.lazy:
            self._unlazy()
        seg = self.seg
        self.epoch = seg.q[3]
        new = self.world.failed_ranks() - self.failed
        if new:
            self._fail_peers(new)

    def _peer_gone(self, peer: int) -> None:
        """A transport found ``peer``'s process gone (it exited or died, whatever the launcher
        has recorded yet): every operation with it fails now, as if it had failed."""
        if peer != self.rank and peer not in self.failed:
            self._fail_peers({peer})

    def _fail_peers(self, new: set) -> None:
        self.failed |= new
        for m, x in list(self.sends.items()):
            if x.peer in new:
                del self.sends[m]
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        for x in list(self.pushing):
            if x.peer in new:
                self.pushing.remove(x)
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        for x in list(self.direct):
            if x.peer in new:
                self._undirect(x)
                if x.kind == RECV:
                    self.pulls.pop((x.peer, x.msgid), None)
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        self.staging.reclaim(new)  # slots handed to the dead stay theirs forever otherwise
        for p in new:
            for x in self.tr.drop(p):
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {p})")
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

    # --- finalize -------------------------------------------------------------------------
    def _publish(self, state: int) -> None:
        if state > self.fin_state:
            self.fin_state = state
            self.world.publish(state)

    def finalize_step(self) -> bool:
        """One pass of MPI_Finalize's wait (under the lock); True once this rank's part in every
        communication is done (see the module docstring).

        Sends given up (their receiver can never take them) complete with an error nobody
        will read; frames for ranks that read nothing any more are dropped.
        """
        self._publish(FINALIZING)
        seg = self.seg
        # the peers' states first, then drain the rings: what a peer wrote before it
        # published its state is read in this pass
        states = self.world.states() if seg is not None else [self.fin_state]
        while self.progress():
            pass
        failed = self.failed
        for p, st in enumerate(states):
            if (st >= FINALIZED or p in failed) and p != self.rank:
                for x in self.tr.drop(p):  # it reads nothing any more
                    self._fail(x, ERR_OTHER, f"{x.call}: rank {p} ended without receiving this message")
        for m, x in list(self.sends.items()):
            p = x.peer
            if p in failed or states[p] >= QUIESCENT:  # QUIESCENT: it will never match this send
                del self.sends[m]
                self._fail(x, ERR_OTHER, f"{x.call}: rank {p} finalized without receiving this message")
        for x in list(self.pushing):
            if x.peer in failed or states[x.peer] >= FINALIZED:
                self.pushing.remove(x)
                self._fail(x, ERR_OTHER, f"{x.call}: rank {x.peer} finalized before receiving this message")
        for key, x in list(self.pulls.items()):
            if states[key[0]] >= FINALIZED:
                del self.pulls[key]
                if x in self.direct:
                    self._undirect(x)
                self._fail(x, ERR_OTHER, f"{x.call}: rank {key[0]} finalized before its message arrived")
        idle = self.tr.idle()
        if idle and not self.pulls and not self.lazy and next(self.matcher.posted_items(), None) is None:
            self._publish(QUIESCENT)
        return idle and not self.sends and not self.pushing and not self.pulls and not self.direct

    def finalized(self) -> None:
        """Tell the peers this rank left Finalize: it reads nothing any more (and give the MPI
        library back what the frames between nodes hold, before it finalizes)."""
        self._publish(FINALIZED)
        if self.farframes is not None:
            self.farframes.close()

    def close(self) -> None:
        self.closed = True
        self.world.close()


_UNSET = object()


class _Slotted:
    """The ``pend`` of an operation whose data message is in a slot of ``Engine.mslots``:
    tested with the others there (``DataSlots.done``), never alone."""

    @staticmethod
    def test() -> bool:
        return False


_SLOTTED = _Slotted()
_SEND_PUSHED = P.step(P.SEND, P.START, "rts_pushed")
_RECV_DIRECT = P.step(P.RECV, P.POSTED, P.DIRECT)

#: The completed send every standard eager send returns (it needs no state of its own).
SENT = Xfer(SEND)
SENT.done = True
SENT.state = P.DONE
