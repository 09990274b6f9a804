"""Point-to-point communication of ``Comm`` (L5): sends, receives, probes, persistent and
partitioned requests, the per-communicator buffer.

Theory of operation
===================
Every buffer call parses its buffer spec once (``_buffers``), validates ranks, tags and
the communicator (raising ``MPI.Exception`` with the error class and a message naming
the call and the values), then hands the parsed message to the one buffer path
(``_p2p``) with the context id and world rank.  The commonest calls first offer
themselves to the compiled path (:mod:`gpumpi._fastpath`, which owns the guard);
whatever it declines takes the general path, which validates again.  Blocking calls are
the nonblocking call plus a wait.  Matched probes return a ``message.Message``;
partitioned requests live in ``_partitioned``.  Errors pass through the communicator's
error handler before they are raised.
"""

from __future__ import annotations



from .._fastpath import api as _fastpath
from .. import _p2p
from .._partitioned import PartRequest, partitions_of
from .._services import (FREED, SENT, cancel, failed_ranks, probe_now, probe_wait,
                         wait)
from ..constants import (
    ANY_SOURCE,
    ANY_TAG,
    PROC_NULL,
)
from ..errors import (
    ERR_ARG,
    ERR_COMM,
    ERR_COUNT,
    ERR_PROC_FAILED,
    error,
)
from ..errors import Exception as MPIException
from ..message import Message
from ..request import Prequest, Request, after, check_status, done_xfer, joint, part_done
from ..status import Status


STANDARD, SYNCHRONOUS, READY, BUFFERED = _p2p.STANDARD, _p2p.SYNCHRONOUS, _p2p.READY, _p2p.BUFFERED
_msg = _p2p.msg

__all__ = ["PointToPoint"]


class PointToPoint:
    """Point-to-point communication of ``Comm`` (L5): sends, receives, probes, persistent and"""

    __slots__ = ()

    def _send_args(self, buf, dest, tag, call: str, stream=None):
        """Validate a send: ``(message, world dest, tag)``, or None for PROC_NULL; changes nothing."""
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if self._ctx in FREED:
            raise error(ERR_COMM, f"{call}: invalid communicator (freed through another handle)")
        if dest == PROC_NULL:
            return None
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        m = _msg(buf, True, dest, call)
        _p2p.check_stream(m, stream)
        return m, self._w[dest], tag

    def _post_send(self, args, mode: int, call: str, stream=None):
        if args is None:
            return None
        m, wdest, tag = args
        return _p2p.isend(m, wdest, self._rank, tag, self._ctx, mode, call, stream, self._bpool)

    def _isend(self, buf, dest, tag, mode: int, call: str, stream=None):
        return self._post_send(self._send_args(buf, dest, tag, call, stream), mode, call, stream)

    def _recv_args(self, buf, source, tag, call: str, stream=None):
        """Validate a receive: ``(message, source, world source, tag)``, or None for PROC_NULL."""
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if self._ctx in FREED:
            raise error(ERR_COMM, f"{call}: invalid communicator (freed through another handle)")
        if source == PROC_NULL:
            return None
        source = self._src(source, call)
        tag = self._rtag(tag, call)
        wpeer = ANY_SOURCE if source == ANY_SOURCE else self._w[source]
        m = _msg(buf, False, source, call)
        _p2p.check_stream(m, stream)
        return m, source, wpeer, tag

    def _post_recv(self, args, call: str, stream=None):
        if args is None:
            return None
        m, source, wpeer, tag = args
        return _p2p.irecv(m, source, wpeer, tag, self._ctx, call, stream)

    def _irecv(self, buf, source, tag, call: str, stream=None):
        return self._post_recv(self._recv_args(buf, source, tag, call, stream), call, stream)

    @staticmethod
    def _status_arg(status, call: str) -> None:
        if status is not None and not isinstance(status, Status):
            raise TypeError(f"{call}: status must be a Status or None (got {type(status).__name__})")

    def _post_pair(self, rargs, sargs, call: str, stream=None, recv_stream=None):
        """Post a validated receive, then a validated send; if the send cannot be posted, the
        receive is withdrawn (cancelled) so that no operation is left behind."""
        r = self._post_recv(rargs, call, recv_stream if recv_stream is not None else stream)
        try:
            s = self._post_send(sargs, STANDARD, call, stream)
        except BaseException:
            if r is not None and not r.done:
                cancel(r)
            raise
        return r, s

    def _wait(self, x, status, call: str) -> None:
        if x is None:
            if status is not None:
                status._fill(PROC_NULL, ANY_TAG, 0)
            return
        if not x.done:
            wait(x)
        if status is not None:
            status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
        if x.err:
            self._raise(error(x.err, x.errmsg))

    def _req(self, x, keep=None) -> Request:
        if x is None or x is SENT:  # every request needs a handle of its own
            x = done_xfer()
        return Request._of(x, self, None, keep)

    def _send_wait(self, buf, dest, tag, mode: int, call: str, stream=None) -> None:
        try:
            self._wait(self._isend(buf, dest, tag, mode, call, stream), None, call)
        except MPIException as e:
            self._raise(e)

    def _send_req(self, buf, dest, tag, mode: int, call: str, stream=None) -> Request:
        try:
            return self._req(self._isend(buf, dest, tag, mode, call, stream), buf)
        except MPIException as e:
            self._raise(e)

    # --- blocking sends -------------------------------------------------------------------
    @_fastpath.sending(_fastpath.SEND)
    def Send(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Blocking send (MPI_Send).

        ``stream`` (device buffers; every buffer call takes it): the data is read after the
        work queued on that stream (default: the array's own stream, else the current one).
        """
        try:
            self._wait(self._isend(buf, dest, tag, STANDARD, "Send", stream), None, "Send")
        except MPIException as e:
            self._raise(e)

    def Ssend(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Blocking synchronous send: returns after the receive matched (MPI_Ssend)."""
        self._send_wait(buf, dest, tag, SYNCHRONOUS, "Ssend", stream)

    def Bsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Buffered send through the attached buffer (MPI_Bsend)."""
        self._send_wait(buf, dest, tag, BUFFERED, "Bsend", stream)

    def Rsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> None:
        """Ready send: the matching receive must already be posted (MPI_Rsend)."""
        self._send_wait(buf, dest, tag, READY, "Rsend", stream)

    @_fastpath.receiving(_fastpath.RECV)
    def Recv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None, *,
             stream=None) -> None:
        """Blocking receive (MPI_Recv)."""
        if status is not None:
            check_status(status, "Recv")
        try:
            self._wait(self._irecv(buf, source, tag, "Recv", stream), status, "Recv")
        except MPIException as e:
            self._raise(e)

    # --- nonblocking ----------------------------------------------------------------------
    @_fastpath.sending(_fastpath.ISEND)
    def Isend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking send (MPI_Isend)."""
        return self._send_req(buf, dest, tag, STANDARD, "Isend", stream)

    def Issend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking synchronous send (MPI_Issend)."""
        return self._send_req(buf, dest, tag, SYNCHRONOUS, "Issend", stream)

    def Ibsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking buffered send (MPI_Ibsend)."""
        return self._send_req(buf, dest, tag, BUFFERED, "Ibsend", stream)

    def Irsend(self, buf, dest: int, tag: int = 0, *, stream=None) -> Request:
        """Nonblocking ready send (MPI_Irsend)."""
        return self._send_req(buf, dest, tag, READY, "Irsend", stream)

    @_fastpath.receiving(_fastpath.IRECV)
    def Irecv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking receive (MPI_Irecv)."""
        try:
            return self._req(self._irecv(buf, source, tag, "Irecv", stream), buf)
        except MPIException as e:
            self._raise(e)

    # --- combined -------------------------------------------------------------------------
    def _sendrecv_rest(self, recvbuf, source, recvtag, status, stream) -> None:
        """The receive of a ``Sendrecv`` whose send the fast path wrote (the general path's)."""
        try:
            self._wait(self._irecv(recvbuf, source, recvtag, "Sendrecv", stream), status, "Sendrecv")
        except MPIException as e:
            self._raise(e)

    @_fastpath.pairing(_sendrecv_rest)
    def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None, *, stream=None) -> None:
        """Send and receive in one call (MPI_Sendrecv).

        Every argument (both buffers, ranks, tags, status) is checked before anything is
        posted: a call that raises leaves no operation behind.
        """
        try:
            self._status_arg(status, "Sendrecv")
            rargs = self._recv_args(recvbuf, source, recvtag, "Sendrecv", stream)
            sargs = self._send_args(sendbuf, dest, sendtag, "Sendrecv", stream)
            r, s = self._post_pair(rargs, sargs, "Sendrecv", stream)
            self._wait(s, None, "Sendrecv")
            self._wait(r, status, "Sendrecv")
        except MPIException as e:
            self._raise(e)

    def _replace_args(self, buf, dest, sendtag, source, recvtag, call: str, stream=None):
        """Validate a send-receive through ``buf``: ``(receive args, send args)``, with the send's
        bytes copied out of ``buf`` (the copy is sent as bytes) only once everything checked out."""
        rargs = self._recv_args(buf, source, recvtag, call, stream)
        sargs = self._send_args(buf, dest, sendtag, call, stream)
        if sargs is None:
            return rargs, None, None
        m, wdest, tag = sargs
        mem, _, release = _p2p.outgoing(m, call, stream)
        copy = bytearray(mem)
        if release is not None:
            release()
        return rargs, (_msg(copy, True, dest, call), wdest, tag), copy

    def Sendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                         recvtag: int = ANY_TAG, status: Status | None = None, *, stream=None) -> None:
        """Send and receive through one buffer (MPI_Sendrecv_replace); checks every argument first."""
        try:
            self._status_arg(status, "Sendrecv_replace")
            rargs, sargs, _ = self._replace_args(buf, dest, sendtag, source, recvtag, "Sendrecv_replace", stream)
            r, s = self._post_pair(rargs, sargs, "Sendrecv_replace", None, stream)
            self._wait(s, None, "Sendrecv_replace")
            self._wait(r, status, "Sendrecv_replace")
        except MPIException as e:
            self._raise(e)

    def _isendrecv(self, r, s, keep) -> Request:
        j = joint(2)
        j.st_source, j.st_tag = PROC_NULL, ANY_TAG
        for x, is_recv in ((s, False), (r, True)):
            x = done_xfer() if x is None else x
            after(x, lambda x=x, f=is_recv: part_done(j, x, f))
        return Request._of(j, self, None, keep)

    def Isendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                  recvtag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking send-receive (MPI_Isendrecv); checks every argument before posting."""
        try:
            rargs = self._recv_args(recvbuf, source, recvtag, "Isendrecv", stream)
            sargs = self._send_args(sendbuf, dest, sendtag, "Isendrecv", stream)
            r, s = self._post_pair(rargs, sargs, "Isendrecv", stream)
            return self._isendrecv(r, s, (sendbuf, recvbuf))
        except MPIException as e:
            self._raise(e)

    def Isendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                          recvtag: int = ANY_TAG, *, stream=None) -> Request:
        """Nonblocking send-receive through one buffer (MPI_Isendrecv_replace); checks every
        argument before posting."""
        try:
            rargs, sargs, copy = self._replace_args(buf, dest, sendtag, source, recvtag, "Isendrecv_replace",
                                                    stream)
            r, s = self._post_pair(rargs, sargs, "Isendrecv_replace", None, stream)
            return self._isendrecv(r, s, (buf, copy))
        except MPIException as e:
            self._raise(e)

    # --- probe ----------------------------------------------------------------------------
    def _probe_args(self, source, tag, call):
        self._check(call)
        return self._src(source, call), self._rtag(tag, call)

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Wait for a matching message without receiving it (MPI_Probe)."""
        check_status(status, "Probe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return True
            a = self._probe_wait(source, tag, False, "Probe")
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return True
        except MPIException as e:
            self._raise(e)

    def _probe_wait(self, source, tag, take: bool, call: str):
        """Block until a message matches (``take``: off the queue, for matched probes)."""
        source, tag = self._probe_args(source, tag, call)
        return probe_wait(self._ctx, source, tag, take, lambda: self._failed_peer(source, call))

    def _probe_now(self, source, tag, take: bool, call: str):
        """One progress pass, then the matching message or None (``take``: off the queue)."""
        source, tag = self._probe_args(source, tag, call)
        a = probe_now(self._ctx, source, tag, take)
        if a is None:
            self._failed_peer(source, call)
        return a

    def _failed_peer(self, source, call) -> bool:
        failed = failed_ranks()
        if not failed:
            return False
        if source == ANY_SOURCE or self._w[source] in failed:
            raise error(ERR_PROC_FAILED, f"{call}: peer process failed (ranks {sorted(failed)})")
        return False

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Check for a matching message (MPI_Iprobe)."""
        check_status(status, "Iprobe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return True
            a = self._probe_now(source, tag, False, "Iprobe")
            if a is None:
                return False
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return True
        except MPIException as e:
            self._raise(e)

    def Mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> "Message":
        """Matched probe: take the message off the queue (MPI_Mprobe)."""
        check_status(status, "Mprobe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return Message._no_proc()
            a = self._probe_wait(source, tag, True, "Mprobe")
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return Message._of(a, self)
        except MPIException as e:
            self._raise(e)

    def Improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Nonblocking matched probe (MPI_Improbe); None when nothing matches."""
        check_status(status, "Improbe")
        try:
            if source == PROC_NULL:
                if status is not None:
                    status._fill(PROC_NULL, ANY_TAG, 0)
                return Message._no_proc()
            a = self._probe_now(source, tag, True, "Improbe")
            if a is None:
                return None
            if status is not None:
                status._fill(a.src, a.tag, a.nbytes)
            return Message._of(a, self)
        except MPIException as e:
            self._raise(e)

    # --- persistent -----------------------------------------------------------------------
    def _send_init(self, buf, dest, tag, mode, call, stream=None) -> Prequest:
        self._check(call)
        if dest == PROC_NULL:
            return Prequest._persistent(done_xfer, self, buf)
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        m = _msg(buf, True, dest, call)
        wdest, me, ctx, bpool = self._w[dest], self._rank, self._ctx, self._bpool
        if _p2p.on_device(m):  # packed or staged at every Start
            return Prequest._persistent(lambda: _p2p.isend(m, wdest, me, tag, ctx, mode, call, stream, bpool),
                                        self, buf)
        _p2p.host_mem(m, call)
        sig = _p2p.signature(m.datatype)
        fixed = _p2p.outgoing(m, call) if m.contiguous else None  # non-contiguous data is packed at every Start
        return Prequest._persistent(
            lambda: _p2p.send_out(fixed or _p2p.outgoing(m, call), wdest, me, tag, ctx, mode, call, sig, bpool),
            self, buf)

    def Send_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent standard send (MPI_Send_init)."""
        try:
            return self._send_init(buf, dest, tag, STANDARD, "Send_init", stream)
        except MPIException as e:
            self._raise(e)

    def Ssend_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent synchronous send (MPI_Ssend_init)."""
        try:
            return self._send_init(buf, dest, tag, SYNCHRONOUS, "Ssend_init", stream)
        except MPIException as e:
            self._raise(e)

    def Bsend_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent buffered send (MPI_Bsend_init)."""
        try:
            return self._send_init(buf, dest, tag, BUFFERED, "Bsend_init", stream)
        except MPIException as e:
            self._raise(e)

    def Rsend_init(self, buf, dest: int, tag: int = 0, *, stream=None) -> Prequest:
        """Persistent ready send (MPI_Rsend_init)."""
        try:
            return self._send_init(buf, dest, tag, READY, "Rsend_init", stream)
        except MPIException as e:
            self._raise(e)

    def Recv_init(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG, *, stream=None) -> Prequest:
        """Persistent receive (MPI_Recv_init)."""
        try:
            call = "Recv_init"
            self._check(call)
            if source == PROC_NULL:
                return Prequest._persistent(done_xfer, self, buf)
            source = self._src(source, call)
            tag = self._rtag(tag, call)
            m = _msg(buf, False, source, call)
            if not _p2p.on_device(m):
                _p2p.host_mem(m, call)
            wpeer = ANY_SOURCE if source == ANY_SOURCE else self._w[source]
            ctx = self._ctx
            return Prequest._persistent(lambda: _p2p.irecv(m, source, wpeer, tag, ctx, call, stream), self, buf)
        except MPIException as e:
            self._raise(e)

    # --- partitioned ----------------------------------------------------------------------
    def Psend_init(self, buf, partitions: int, dest: int, tag: int = 0, info=None) -> Prequest:
        """Partitioned send (MPI_Psend_init): each partition leaves when marked ready."""
        try:
            call = "Psend_init"
            self._check(call)
            partitions = partitions_of(partitions, call)
            if dest == PROC_NULL:
                return PartRequest._make(None, partitions, self, buf, send=True, start=done_xfer)
            dest = self._peer(dest, call, "destination")
            tag = self._stag(tag, call)
            mem = _p2p.contiguous_only(_msg(buf, True, dest, call), call)
            if len(mem) % partitions:
                raise error(ERR_COUNT, f"{call}: buffer of {len(mem)} bytes does not split into {partitions} partitions")
            return PartRequest._make(mem, partitions, self, buf, send=True, peer=dest, tag=tag)
        except MPIException as e:
            self._raise(e)

    def Precv_init(self, buf, partitions: int, source: int = ANY_SOURCE, tag: int = ANY_TAG, info=None) -> Prequest:
        """Partitioned receive (MPI_Precv_init)."""
        try:
            call = "Precv_init"
            self._check(call)
            partitions = partitions_of(partitions, call)
            if source == PROC_NULL:
                return PartRequest._make(None, partitions, self, buf, send=False, start=done_xfer)
            if source == ANY_SOURCE or tag == ANY_TAG:
                raise error(ERR_ARG, f"{call}: partitioned receives take no wildcards (source {source}, tag {tag})")
            source = self._peer(source, call, "source")
            tag = self._stag(tag, call)
            mem = _p2p.contiguous_only(_msg(buf, False, source, call), call)
            if len(mem) % partitions:
                raise error(ERR_COUNT, f"{call}: buffer of {len(mem)} bytes does not split into {partitions} partitions")
            return PartRequest._make(mem, partitions, self, buf, send=False, peer=source, tag=tag)
        except MPIException as e:
            self._raise(e)


    # --- per-communicator buffer (MPI-4.1) -------------------------------------------------
    def Attach_buffer(self, buf) -> None:
        """Attach a buffer for buffered sends on this communicator (MPI_Comm_attach_buffer)."""
        self._check("Comm.Attach_buffer")
        _p2p.attach(self._bpool, buf, "Comm.Attach_buffer")

    def Detach_buffer(self):
        """Detach this communicator's buffer (MPI_Comm_detach_buffer)."""
        self._check("Comm.Detach_buffer")
        return _p2p.detach(self._bpool, "Comm.Detach_buffer")

    def Flush_buffer(self) -> None:
        """Wait for this communicator's buffered messages (MPI_Comm_flush_buffer)."""
        self._check("Comm.Flush_buffer")
        _p2p.flush(self._bpool)

    def Iflush_buffer(self) -> Request:
        """Nonblocking flush of this communicator's buffer (MPI_Comm_iflush_buffer): a request
        that completes once every buffered message has left it."""
        self._check("Comm.Iflush_buffer")
        return Request._of(_p2p.iflush(self._bpool), self)


_fastpath.compiled_methods(PointToPoint, ("Isend", "Irecv"))
