"""The compiled small-message path's engine side (L5): its state and the calls into
:mod:`gpumpi.ipc.fastring` (this node) and :mod:`gpumpi.ipc.fastmpi` (other nodes).

Theory of operation
===================
The compiled small-message path (``fastring`` on this node, ``fastmpi`` between nodes)
serves the commonest calls without the matcher: a blocking ``Send``/``Recv`` of a whole
NumPy array, and ``Irecv``, whose receive is completed at once by a message already here or
else posted *lazily* (:meth:`CompiledPath.recv_lazy`): queued outside the matcher, in
order, and completed at the start of each progress pass by one compiled look per receive
while the next frames are exactly their messages.  Whatever else needs the matcher (a
general receive, a probe, a cancel, a failure, a frame the look does not take) first gives
the lazy receives to it in the order they were posted, so MPI's matching order never
depends on which path ran.  While the first lazy receive waits for another node, a
progress pass reads only this node's rings.  Between nodes, a message above the far eager
limit in one data message is pushed ahead by the compiled path for ``Isend`` too
(:meth:`CompiledPath.isend_far`), and a lazy receive's look takes such a message and
starts the receive of its bytes (:meth:`CompiledPath._pending`); both then stand where the
engine's own push or match would leave them, their MPI requests in slots tested together.

The class is a base of :class:`gpumpi._progress.Engine` (its state lives on the engine, set
by :meth:`CompiledPath._init_compiled`); the API's entry to it, and the one guard, are
:mod:`gpumpi._fastpath.api`.
"""

from __future__ import annotations

import threading

from .. import _compiled
from .. import _protocol as P
from .._xfer import RECV, SEND, SENT, Xfer
from .._xfer import EMPTY as _EMPTY, GOT as _GOT, OTHER as _OTHER, PENDING as _PENDING
from .._xfer import RECV_DIRECT as _RECV_DIRECT, SEND_PUSHED as _SEND_PUSHED, SLOTTED as _SLOTTED
from .._xfer import mpi_failed as _mpi_failed, threads as _threads
from ..ipc.base import address_of
from ..ipc.base import FAR

__all__ = ["CompiledPath"]


class CompiledPath:
    """The engine's compiled small-message path (a base of ``Engine``)."""

    def _init_compiled(self, cfg) -> None:
        """The compiled path's state (compiled after ``fast_after`` more eligible calls; -1: never)."""
        self.fast_after = cfg.fastpath
        self.fsend = self.frecv = self.fwait = self.frounds = None
        self.ftab = self.fout = self.fring = None
        self.fsize = 0
        # the compiled path to ranks of other nodes (gpumpi.ipc.fastmpi): its table and functions
        self.mtab = self.msend = self.mrecv = self.mpush = self.mslots = None
        self.nslotted = 0  # operations in ``direct`` whose data messages are in slots of ``mslots``
        self.mchunk = 0
        self.mtab_a = 0
        self._tls = threading.local()  # recv_fast's result array of each thread but the only one
        self.oscratch = None  # object_scratch()'s memory
        self.crings = None  # the compiled methods' view of the rings (gpumpi._compiled.rings), once compiled

    def object_scratch(self):
        """``(memoryview, address, bytes)`` of the memory an object message is received into by the
        compiled path (one thread only: the caller unpickles it before the next receive), as large
        as the eager limit: a larger message is the general path's anyway."""
        s = self.oscratch
        if s is None:
            import numpy as np

            a = np.empty(max(self.eager_limit, 1), dtype=np.uint8)
            s = self.oscratch = (memoryview(a), a.ctypes.data, a.nbytes)
        return s

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
        lazy = self.lazy[:]
        del self.lazy[:]  # (the same list: the compiled layer holds it)
        for x in lazy:
            self._post_lazy(x)

    def _post_lazy(self, x: Xfer) -> bool:
        """Give lazy receive ``x`` to the matcher (:meth:`_post`)."""
        from .._buffers import message_simple

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
            from ..ipc import fastring

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
                    from ..ipc import fastmpi

                    self.msend, self.mrecv, self.mpush = fastmpi.kernels()
                    self.mchunk = self.world.cfg.mpi_chunk
                    self.mslots, self.faux, self.mdreq_a = far.slots, far.aux, far.dreq.ctypes.data
                    self.mregion = next(r for r in self.host if r.name == "mpi")
                    self.mtab = mt
                    self.mtab_a = mt.ctypes.data
            except Exception:  # noqa: BLE001 -- unable to compile here: the general path serves
                self.mtab = None
        try:
            entries = fastring.c_entries()
            if self.mtab is not None:
                from ..ipc import fastmpi

                entries += fastmpi.c_entries()
            self.crings = _compiled.rings(self, *entries)
        except Exception:  # noqa: BLE001 -- unable to compile here: the compiled methods hand every call on
            self.crings = None

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


def _install(m, python=CompiledPath.__dict__["_drain"]) -> None:
    """Put the compiled ``_drain`` (``_gpumpi_fast.drain``: the same passes, its looks of
    receives from this node by the ring's C entry) in place, or back the Python one (``m``
    None); see :mod:`gpumpi._compiled`."""
    if m is None:
        CompiledPath._drain = python
        return
    m.bind_engine(Xfer, RECV, P.DONE, _PENDING, _EMPTY, python)
    CompiledPath._drain = _compiled.dressed(m.drain, python)


_compiled.register(_install)
