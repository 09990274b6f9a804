"""Object messages of ``Comm`` (L5): ``send``/``recv`` and friends move Python objects.

Theory of operation
===================
A lowercase call pickles its object with protocol 5 (``_pickle``); arrays inside travel
out of band as messages of their own (device arrays stay on the device), all of it posted
through ``_objects`` on the communicator's point-to-point context, the device parts on
``ctx + 3``.  ``recv`` sizes its receive from the message unless given a buffer.
"""

from __future__ import annotations

import warnings


from .._buffers import is_integral
from .. import _objects
from .._fastpath import api as _fastpath
from .. import _p2p
from .. import _pickle
from ..constants import (
    ANY_SOURCE,
    ANY_TAG,
    PROC_NULL,
)
from ..errors import (
    ERR_COMM,
    error,
)
from ..errors import Exception as MPIException
from ..message import Message
from ..request import Request, done_xfer
from ..status import Status


STANDARD, SYNCHRONOUS, READY, BUFFERED = _p2p.STANDARD, _p2p.SYNCHRONOUS, _p2p.READY, _p2p.BUFFERED
_msg = _p2p.msg

__all__ = ["Objects"]


class Objects:
    """Object messages of ``Comm`` (L5): ``send``/``recv`` and friends move Python objects."""

    __slots__ = ()

    # --- object (lowercase) API: pickle-5 messages, device arrays out of band (_objects) ----
    def _osend(self, obj, dest, tag, mode, call):
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if dest == PROC_NULL:
            return None
        dest = self._peer(dest, call, "destination")
        tag = self._stag(tag, call)
        return _objects.isend(obj, dest, self._w, self._rank, tag, self._ctx, mode, call, self._bpool)

    def _orecv(self, source, tag, call, watch: bool = False, mem=None):
        """Post the receive of an object message (into host bytes ``mem``; None: sized by the
        message); ``watch``: post its parts' receives on arrival."""
        if self._ctx < 0:
            raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
        if source == PROC_NULL:
            return None
        return _objects.irecv(self._src(source, call), self._rtag(tag, call), self._w, self._ctx, call, watch, mem)

    @staticmethod
    def _obuf(buf, call: str):
        """Turn recv/irecv's buffer argument into a buffer, as mpi4py does: an int (that many
        bytes are allocated) or a writable buffer; the message must fit (else ERR_TRUNCATE)."""
        if is_integral(buf):
            n = buf.__index__()
            if n < 0:
                raise ValueError(f"{call}: negative buffer size ({n})")
            return memoryview(bytearray(n))
        try:
            mv = memoryview(buf)
        except TypeError:
            raise TypeError(f"{call}: buf must be an int or a writable buffer ({type(buf).__name__})") from None
        if mv.readonly:
            raise BufferError(f"{call}: buf is read-only ({type(buf).__name__})")
        if not mv.c_contiguous:
            raise BufferError(f"{call}: buf is not C-contiguous ({type(buf).__name__})")
        return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv

    def _oload(self, x, call: str, pend=None):
        return _objects.load(x, call, self._w, self._ctx, pend)

    @_fastpath.object_sending(_fastpath.SEND)
    def send(self, obj, dest: int, tag: int = 0) -> None:
        """Send a Python object (MPI_Send of its pickle).

        Device arrays inside it (CuPy, Numba, simulated) travel as messages of their own, device
        to device, and arrive as contiguous device arrays of the same type, shape and dtype,
        allocated on the receiver's current device.
        """
        try:
            self._wait(self._osend(obj, dest, tag, STANDARD, "send"), None, "send")
        except MPIException as e:
            self._raise(e)

    def ssend(self, obj, dest: int, tag: int = 0) -> None:
        """Synchronous send of a Python object (MPI_Ssend)."""
        try:
            self._wait(self._osend(obj, dest, tag, SYNCHRONOUS, "ssend"), None, "ssend")
        except MPIException as e:
            self._raise(e)

    def bsend(self, obj, dest: int, tag: int = 0) -> None:
        """Buffered send of a Python object (MPI_Bsend).

        The whole message goes through the attached buffer: device arrays inside the object are
        copied to host memory (and need room there too), then rebuilt as device arrays on receipt.
        """
        try:
            self._wait(self._osend(obj, dest, tag, BUFFERED, "bsend"), None, "bsend")
        except MPIException as e:
            self._raise(e)

    @_fastpath.object_sending(_fastpath.ISEND)
    def isend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking send of a Python object (MPI_Isend); the request completes when the object
        message and the messages of the device arrays inside it (see :meth:`send`) all have."""
        try:
            return self._req(self._osend(obj, dest, tag, STANDARD, "isend"))
        except MPIException as e:
            self._raise(e)

    def issend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking synchronous send of a Python object (MPI_Issend)."""
        try:
            return self._req(self._osend(obj, dest, tag, SYNCHRONOUS, "issend"))
        except MPIException as e:
            self._raise(e)

    def ibsend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking buffered send of a Python object (MPI_Ibsend); device arrays as in :meth:`bsend`."""
        try:
            return self._req(self._osend(obj, dest, tag, BUFFERED, "ibsend"))
        except MPIException as e:
            self._raise(e)

    @_fastpath.object_receiving
    def recv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Receive a Python object (MPI_Recv of its pickle); an empty message is None.

        gpumpi sizes the receive from the message.  ``buf`` (deprecated, as in mpi4py: it
        warns) receives into that many bytes (an int) or into a writable buffer instead; a
        larger message fails with ERR_TRUNCATE.
        """
        try:
            mem = None
            if buf is not None:
                warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
                if source != PROC_NULL:
                    mem = self._obuf(buf, "recv")
            x = self._orecv(source, tag, "recv", False, mem)
            self._wait(x, status, "recv")
            if x is None:
                return None
            obj = _pickle.loads(_objects.body(x))
            return self._oload(x, "recv", obj) if type(obj) is _pickle.Pending else obj
        except MPIException as e:
            self._raise(e)

    def irecv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking receive of a Python object (MPI_Irecv); ``wait()`` returns it, its device
        arrays received.  ``buf``: receive into that many bytes (an int) or into a writable
        buffer instead of an allocation sized by the message (a larger message fails with
        ERR_TRUNCATE)."""
        try:
            mem = None if buf is None or source == PROC_NULL else self._obuf(buf, "irecv")
            x = self._orecv(source, tag, "irecv", True, mem)
            if x is None:
                return Request._of(done_xfer(), self, None)
            return Request._of(_objects.whole(x, True, self._w, self._ctx), self, lambda _o: self._oload(x, "irecv"),
                               buf)
        except MPIException as e:
            self._raise(e)

    def _orecv_rest(self, source, tag, status, call: str):
        """The receive half of ``sendrecv`` once its send went (the compiled path's fallback)."""
        r = self._orecv(source, tag, call, True)
        self._wait(r, status, call)
        return None if r is None else self._oload(r, call)

    @_fastpath.object_pairing(_orecv_rest)
    def sendrecv(self, sendobj, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None):
        """Send and receive Python objects (MPI_Sendrecv); ``recvbuf`` as ``buf`` of :meth:`recv`."""
        try:
            mem = None
            if recvbuf is not None:
                warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
                if source != PROC_NULL:
                    mem = self._obuf(recvbuf, "sendrecv")
            r = self._orecv(source, recvtag, "sendrecv", True, mem)  # the peer's parts may wait on ours
            s = self._osend(sendobj, dest, sendtag, STANDARD, "sendrecv")
            self._wait(s, None, "sendrecv")
            self._wait(r, status, "sendrecv")
            return None if r is None else self._oload(r, "sendrecv")
        except MPIException as e:
            self._raise(e)

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Blocking probe for an object message (MPI_Probe)."""
        return self.Probe(source, tag, status)

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Nonblocking probe for an object message (MPI_Iprobe)."""
        return self.Iprobe(source, tag, status)

    def mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> "Message":
        """Matched probe for an object message (MPI_Mprobe)."""
        return self.Mprobe(source, tag, status)

    def improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        """Nonblocking matched probe for an object message (MPI_Improbe)."""
        return self.Improbe(source, tag, status)


_fastpath.compiled_methods(Objects, ("send", "recv"))
