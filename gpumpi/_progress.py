"""The progress engine: the only code that drives I/O (L5).  This module is its core:
operations in flight, posting, progress passes and waits; the frame handlers are
:mod:`gpumpi._frames`, failures and finalize :mod:`gpumpi._failures`, the compiled
small-message path :mod:`gpumpi._fastpath.engine` (the engine inherits the three).

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

import os
import threading
import time

from . import _protocol as P
from ._failures import Failures
from ._fastpath.engine import CompiledPath
from ._frames import FrameHandlers
from ._matching import Matcher
from ._xfer import FREED, GREQ, RECV, SEND, SENT, Arrival, Xfer
from ._xfer import Got as _Got
from ._xfer import SPIN as _SPIN, SPIN_OVERSUBSCRIBED as _SPIN_OVERSUBSCRIBED
from .constants import ANY_SOURCE
from .errors import ERR_PROC_FAILED
from .ipc.base import DEVICE, DIRECT, HOST, address_of, pick
from .ipc.base import FAR

_sched_yield = os.sched_yield
_sleep = time.sleep

__all__ = ["Engine", "Xfer", "Arrival", "SENT", "address_of", "SEND", "RECV", "GREQ"]


class Engine(CompiledPath, FrameHandlers, Failures):
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
        FREED.clear()  # a new engine (Init, or after a fork): no communicator of this job freed yet
        self.freed_ctx = FREED  # context ids of freed communicators (stale handle copies fail)
        self.cancellable: dict = {}
        self.next_msgid = 1
        self.eager_limit, self.far_eager = P.eager_limits(cfg.eager_limit, self.tr.max_payload, cfg.mpi_eager,
                                                          bool(self.far))
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
        self.held: dict = {}  # size -> free buffers of unexpected eager payloads (_hold)
        self.held_bytes = 0
        self._init_compiled(cfg)
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
        if lazy:
            # lazy receives wait (the drain found nothing for the first): the next frame from
            # where it waits for (another node, or this one) is their looks', not the matcher's
            # -- the next pass's drain takes it, or gives them the matcher first; read only the
            # frames from elsewhere now
            n += tr.poll_near(self._on_frame) if lazy[0].result else tr.poll_far(self._on_frame)
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
