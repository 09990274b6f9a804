"""The one home of the compiled small-message path's entry from the API (L5).

Theory of operation
===================
The commonest point-to-point calls -- ``Send``/``Recv``/``Isend``/``Irecv``/``Sendrecv`` of
a whole contiguous NumPy array (bare, or ``[array, predefined datatype]``) to or from a
valid rank with a valid tag on a live communicator -- skip the general path: the buffer's
address, size and signature code are read from the array header (:func:`_buffers.host_fast`),
and one compiled call writes or reads the frame (the engine's ``send_fast``/``recv_fast``/
``recv_lazy``, which run :mod:`gpumpi.ipc.fastring` on this node and
:mod:`gpumpi.ipc.fastmpi` between nodes; a message above the far eager limit to another
node is pushed ahead by ``push_far``/``isend_far``).  Whether a call may take this path
is decided here and only here: :func:`to_peer` for the sending side and
:func:`from_peer` for the receiving side are the guard.  Each entry returns what the call
completed, or a "not taken" value after which the API module runs its general path,
which validates everything again and reports errors as MPI says -- so a call the fast
path declines behaves exactly as if the fast path did not exist.

A whole contiguous NumPy array that the compiled call declined (too large for a frame,
frames queued ahead, something else arrived first) or whose datatype the header shortcut
does not know (a non-native byte order, a structured dtype) still skips the buffer-spec
machinery for a blocking ``Send``/``Recv``: one parse (:func:`_buffers.message_simple`),
then the engine's ``isend``/``irecv`` directly.
"""

from __future__ import annotations

from numpy import ndarray as _ndarray

from .. import _runtime as _rt
from .._buffers import host_fast, message_simple
from .._xfer import SENT
from ..constants import ANY_SOURCE, TAG_UB_VALUE
from ..datatypes.flatten import sigcode as _sigcode
from ..errors import error
from ..request import Request, done_xfer
from ..status import Status

__all__ = ["from_peer", "irecv", "isend", "recv", "send", "sendrecv", "to_peer", "NOT_TAKEN"]

#: the operation of every Isend the fast path completed at once (shared: nothing writes a
#: completed operation; each request still has a handle of its own)
_SENT_NOW = done_xfer()

#: :func:`sendrecv`'s answers besides True (done): nothing was done / the send went, the
#: receive is the general path's
NOT_TAKEN, RECV_LEFT = 0, 2

_STANDARD = 0  # gpumpi._p2p.STANDARD (the protocol's standard mode)


def to_peer(comm, dest, tag) -> int:
    """The guard of the sending side: the world rank of ``dest`` when ``dest`` and ``tag``
    are plain valid ints on a live, unfreed communicator; -1 otherwise (the general path
    then validates and reports)."""
    if type(dest) is int and type(tag) is int and 0 <= dest < len(comm._w) and 0 <= tag <= TAG_UB_VALUE and \
            comm._ctx >= 0 and comm._ctx not in _rt.ENGINE.freed_ctx:
        return comm._w[dest]
    return -1


def from_peer(comm, source, tag) -> int:
    """The guard of the receiving side: the world rank of ``source`` (ANY_SOURCE stays -2) when
    ``source`` and ``tag`` are plain valid ints on a live, unfreed communicator; -1 otherwise."""
    if type(source) is int and type(tag) is int and -2 <= source < len(comm._w) and source != -1 and \
            -1 <= tag <= TAG_UB_VALUE and comm._ctx >= 0 and comm._ctx not in _rt.ENGINE.freed_ctx:
        return source if source < 0 else comm._w[source]
    return -1


def send(comm, buf, dest, tag) -> bool:
    """``Send``: True when the message was sent here (complete); False, not taken."""
    w = to_peer(comm, dest, tag)
    if w < 0:
        return False
    h = host_fast(buf, False)
    eng = _rt.ENGINE
    if h is not None and (eng.send_fast(w, comm._rank, comm._ctx, tag, h[0], h[1], h[2]) or
                          eng.mtab is not None and eng.push_far(w, comm._rank, comm._ctx, tag, h[0], h[1], h[2])):
        return True
    if type(buf) is _ndarray:  # declined (too large, queued frames ...) or a dtype the header shortcut lacks
        m = message_simple(buf, True, dest, 1, "Send")
        mem = m.mem
        if mem is not None and m.contiguous:
            dt = m.datatype
            sig = dt._rec.cache.get("sigcode")
            x = eng.isend([mem], len(mem), w, comm._rank, tag, comm._ctx, _STANDARD, "Send", (m.addr + m.lo,),
                          _sigcode(dt) if sig is None else sig)
            if x is not SENT:
                if not x.done:
                    eng.wait(x)
                if x.err:
                    raise error(x.err, x.errmsg)
            return True
    return False


def recv(comm, buf, source, tag, status) -> bool:
    """``Recv``: True when the message was received here (``status`` filled); False, not taken."""
    w = from_peer(comm, source, tag)
    if w == -1:
        return False
    h = host_fast(buf, True)
    eng = _rt.ENGINE
    if h is not None:
        o = eng.recv_fast(source, w, tag, comm._ctx, h[0], h[1], h[2])
        if o is not None:
            if status is not None:
                src, tg, n, _ = o.tolist()
                status._fill(src, tg, n)
            return True
    if type(buf) is _ndarray:  # declined (something else came first ...) or a dtype the shortcut lacks
        m = message_simple(buf, False, source, 1, "Recv")
        mem = m.mem
        if mem is not None and m.contiguous:
            dt = m.datatype
            sig = dt._rec.cache.get("sigcode")
            x = eng.irecv(mem, len(mem), source, ANY_SOURCE if source < 0 else w, tag, comm._ctx, "Recv",
                          m.addr + m.lo, _sigcode(dt) if sig is None else sig)
            if not x.done:
                eng.wait(x)
            if status is not None:
                status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
            if x.err:
                raise error(x.err, x.errmsg)
            return True
    return False


def isend(comm, buf, dest, tag):
    """``Isend``: the request when the message was written (or pushed ahead) here; None, not taken."""
    h = host_fast(buf, False)
    if h is None:
        return None
    w = to_peer(comm, dest, tag)
    if w < 0:
        return None
    eng = _rt.ENGINE
    if eng.send_fast(w, comm._rank, comm._ctx, tag, h[0], h[1], h[2]):
        return Request._of(_SENT_NOW, comm, None, buf)
    if eng.mtab is not None:  # to another node, pushed ahead by the compiled path
        x = eng.isend_far(w, comm._rank, comm._ctx, tag, h[0], h[1], h[2])
        if x is not None:
            return Request._of(x, comm, None, buf)
    return None


def irecv(comm, buf, source, tag):
    """``Irecv``: the request, completed now by a message already here or posted lazily
    (outside the matcher, in order); None, not taken."""
    h = host_fast(buf, True)
    if h is None:
        return None
    w = from_peer(comm, source, tag)
    if w == -1:
        return None
    x = _rt.ENGINE.recv_lazy(source, w, tag, comm._ctx, h[0], h[1], h[2], buf)
    return None if x is None else Request._of(x, comm, None, buf)


def sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, status) -> int:
    """``Sendrecv`` with every argument valid: the send is written first (eager: complete at
    once), then the receive is tried here.  True: both done (``status`` filled); RECV_LEFT:
    the send went, the receive is the general path's; NOT_TAKEN: nothing was done."""
    hs = host_fast(sendbuf, False)
    if hs is None or not (status is None or type(status) is Status):
        return NOT_TAKEN
    ws = to_peer(comm, dest, sendtag)
    wr = from_peer(comm, source, recvtag)
    if ws < 0 or wr == -1:
        return NOT_TAKEN
    hr = host_fast(recvbuf, True)
    eng = _rt.ENGINE
    if hr is None or not eng.send_fast(ws, comm._rank, comm._ctx, sendtag, hs[0], hs[1], hs[2]):
        return NOT_TAKEN
    o = eng.recv_fast(source, wr, recvtag, comm._ctx, hr[0], hr[1], hr[2])
    if o is None:
        return RECV_LEFT
    if status is not None:
        src, tg, nb, _ = o.tolist()
        status._fill(src, tg, nb)
    return True
