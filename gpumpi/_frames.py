"""The progress engine's frame handlers (L5): what each kind of incoming frame does.

Theory of operation
===================
``Engine.progress`` hands every frame to the handler of its kind (a table: envelope,
data, write, write-done, ack, clear-to-send, cancel, cancel reply).  An envelope goes to
the matcher; a match (:meth:`FrameHandlers._match`) checks truncation and the type
signature, copies eager data or starts the rendezvous the decisions of
:mod:`gpumpi._protocol` choose: take the sender's offered region, split the copy, or have
the sender push (DATA frames, or the staging slabs for device memory).  Transfers that a
direct region moves wait in ``Engine.direct`` until their ``pend`` says they are done.
The class is a base of :class:`gpumpi._progress.Engine`; its state is the engine's.
"""

from __future__ import annotations


from . import _protocol as P
from ._xfer import SEND, Arrival, Xfer
from ._xfer import SLOTTED as _SLOTTED, UNSET as _UNSET
from .errors import ERR_OTHER, ERR_PROC_FAILED, ERR_TYPE
from .ipc.base import DEVICE, DIRECT, WRITE, PeerGone, address_of

__all__ = ["FrameHandlers"]


class FrameHandlers:
    """The engine's frame handlers and the transfers they start (a base of ``Engine``)."""

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
        if n > cap or sig and x.sig and sig != x.sig:  # (the one receive check decides: _protocol)
            e = P.receive_error(x.call, src, n, cap, sig, x.sig, self.typecheck)
            if e is not None:
                x.err, x.errmsg = e
                if e[0] == ERR_TYPE:  # nothing is delivered; the protocol still runs so the sender completes
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
