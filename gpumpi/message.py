"""Matched messages: the handle Mprobe/Improbe return (MPI_Message) (L5).

Theory of operation
===================
A matched probe takes an arrival off the unexpected queue of its context
(``Matcher.take``), so no other receive can match it; the :class:`Message` holds it
until ``Recv``/``Irecv`` (buffers, through the one buffer path ``_p2p``) or
``recv``/``irecv`` (objects, ``_objects``) hands it to the engine with
``Engine.deliver``.  A message is received once: the handle then becomes
``MESSAGE_NULL``.  ``MESSAGE_NO_PROC`` (a probe of ``PROC_NULL``) receives nothing,
with a ``PROC_NULL`` status.
"""

from __future__ import annotations

from . import _objects
from . import _p2p
from . import _runtime as _rt
from ._xfer import RECV, Xfer
from ._handles import Handle, Table
from .constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from .errors import ERR_REQUEST, error
from .request import Request, check_status, done_xfer
from .status import Status


_NULL_H = 0x2C000000
_NO_PROC_H = 0x6C000000


class Message(Handle):
    """Matched message handle from Mprobe/Improbe (MPI_Message)."""

    __slots__ = ("_arr", "_comm", "_noproc", "_h", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("Message", -0x54000000)

    def __init__(self, message: "Message | None" = None) -> None:
        if message is None:
            self._arr, self._comm, self._noproc, self._h = None, None, False, _NULL_H
        elif not isinstance(message, Message):
            raise TypeError(f"Message: expecting a Message (got {type(message).__name__})")
        else:
            self._arr, self._comm, self._noproc = message._arr, message._comm, message._noproc
            self._h = message._h

    @classmethod
    def _of(cls, arr, comm) -> "Message":
        m = cls.__new__(cls)
        m._arr, m._comm, m._noproc, m._h = arr, comm, False, cls._htable.new()
        return m

    @classmethod
    def _no_proc(cls) -> "Message":
        m = cls.__new__(cls)
        m._arr, m._comm, m._noproc, m._h = None, None, True, _NO_PROC_H
        return m

    def _hval(self) -> int:
        if self._noproc:
            return _NO_PROC_H
        return _NULL_H if self._arr is None else self._h

    def _hnullify(self) -> None:
        self._arr, self._comm, self._noproc, self._h = None, None, False, _NULL_H

    def __bool__(self) -> bool:
        return self._arr is not None or self._noproc

    def _take(self, call: str):
        if self._noproc:
            if self is not MESSAGE_NO_PROC:  # the predefined handle stays what it is (mpi4py)
                self._noproc = False
            return None
        if self._arr is None:
            raise error(ERR_REQUEST, f"{call}: null message (MESSAGE_NULL)")
        a, comm = self._arr, self._comm
        self._arr = None
        return a, comm

    def _as(self, cls) -> "Message":
        if type(self) is cls:
            return self
        m = cls.__new__(cls)
        m._arr, m._comm, m._noproc = self._arr, self._comm, self._noproc
        return m

    # --- matching probes (class forms) ----------------------------------------------------
    @classmethod
    def Probe(cls, comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> "Message":
        """Blocking matched probe on ``comm`` (MPI_Mprobe)."""
        return comm.Mprobe(source, tag, status)._as(cls)

    @classmethod
    def Iprobe(cls, comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Nonblocking matched probe on ``comm`` (MPI_Improbe); None when nothing matches."""
        m = comm.Improbe(source, tag, status)
        return None if m is None else m._as(cls)

    @classmethod
    def probe(cls, comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> "Message":
        """Blocking matched probe for an object message on ``comm`` (MPI_Mprobe)."""
        return comm.mprobe(source, tag, status)._as(cls)

    @classmethod
    def iprobe(cls, comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Nonblocking matched probe for an object message on ``comm`` (MPI_Improbe)."""
        m = comm.improbe(source, tag, status)
        return None if m is None else m._as(cls)

    def _post(self, buf, call: str, stream=None):
        # the buffer is checked before the message leaves the handle: bad input loses nothing
        m = None
        if buf is not None and not self._noproc and self._arr is not None:
            m = _p2p.msg(buf, False, self._arr.src, call)
        t = self._take(call)
        if t is None:
            return None, None
        a, comm = t
        x = Xfer(RECV)
        x.call = call
        x.ctx = a.ctx
        x.src = a.src
        x.wpeer = a.peer
        x.tag = a.tag
        if buf is None:
            x.dynamic = True
            x.mem, x.cap = None, 0
        else:
            mem, x.addr, x.on_done, x.dev = _p2p.incoming(m, call, stream)
            x.sig = _p2p.signature(m.datatype)
            x.dynamic = False
            x.mem, x.cap = mem, len(mem)
        _rt.ENGINE.deliver(x, a)
        return x, comm

    def Recv(self, buf, status: Status | None = None, *, stream=None) -> None:
        """Receive the matched message (MPI_Mrecv)."""
        check_status(status, "Message.Recv")
        x, comm = self._post(buf, "Message.Recv", stream)
        if x is None:
            if status is not None:
                status._fill(PROC_NULL, ANY_TAG, 0)
            return
        comm._wait(x, status, "Message.Recv")

    def Irecv(self, buf, *, stream=None) -> Request:
        """Nonblocking receive of the matched message (MPI_Imrecv)."""
        x, comm = self._post(buf, "Message.Irecv", stream)
        if x is None:
            return Request._of(done_xfer(), None)
        return Request._of(x, comm, None, buf)

    def recv(self, status: Status | None = None):
        """Receive the matched object message (MPI_Mrecv)."""
        check_status(status, "Message.recv")
        x, comm = self._post(None, "Message.recv")
        if x is None:
            if status is not None:
                status._fill(PROC_NULL, ANY_TAG, 0)
            return None
        comm._wait(x, status, "Message.recv")
        return _objects.load(x, "Message.recv", comm._w, comm._ctx)

    def irecv(self) -> Request:
        """Nonblocking receive of the matched object message."""
        x, comm = self._post(None, "Message.irecv")
        if x is None:
            return Request._of(done_xfer(), None)
        return Request._of(_objects.whole(x, False, comm._w, comm._ctx), comm,
                           lambda _o: _objects.load(x, "Message.irecv", comm._w, comm._ctx))


Message._hbase = Message
#: Null message (MPI_MESSAGE_NULL).
MESSAGE_NULL = Message._htable.constant(Message(), "MESSAGE_NULL")
#: The message a matched probe of PROC_NULL returns (MPI_MESSAGE_NO_PROC).
MESSAGE_NO_PROC = Message._htable.constant(Message._no_proc(), "MESSAGE_NO_PROC")
