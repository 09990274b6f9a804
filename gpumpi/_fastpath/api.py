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
is decided here and only here: :func:`sending` holds the guard of the sending side and
:func:`receiving` that of the receiving side.  They are decorators: the API module writes
each method's general path (validate and delegate) and decorates it, and the method
becomes the fast path with the general one behind it -- the commonest calls cost no call
frame more than the engine's own entry, and a call the fast path declines runs the
general path, which validates everything again and reports errors as MPI says, exactly as
if the fast path did not exist.  ``Sendrecv`` (:func:`pairing`) asks both sides' guards
through the same decorators' products.

A whole contiguous NumPy array that the compiled call declined (too large for a frame,
frames queued ahead, something else arrived first) or whose datatype the header shortcut
does not know (a non-native byte order, a structured dtype) still skips the buffer-spec
machinery for a blocking ``Send``/``Recv``: one parse (:func:`_buffers.message_simple`),
then the engine's ``isend``/``irecv`` directly.
"""

from __future__ import annotations

from numpy import ndarray as _ndarray

from .. import _compiled
from .. import _protocol as P
from .. import _runtime as _rt
from .._arrays import BYTES_DATA_OFFSET
from .._buffers import host_fast, message_simple
from .._objects import isend_pickled, load_reused
from .._pickle import dumps_parts, dumps_small
from .._xfer import FREED, RECV as _RECV, SENT, Xfer, mpi_failed
from .._xfer import threads as _threads
from ..constants import ANY_SOURCE, ANY_TAG, TAG_UB_VALUE
from ..datatypes.flatten import sigcode as _sigcode
from ..errors import Exception as MPIException
from ..errors import error
from ..request import Request, done_xfer
from ..status import Status

__all__ = ["EAGER", "IRECV", "ISEND", "NOW", "RECV", "SEND", "compiled_methods", "object_pairing", "object_receiving",
           "object_recv", "object_send", "object_send_pickled", "object_sending", "pairing", "receiving", "sending"]

#: the operation of every Isend the fast path completed at once (shared: nothing writes a
#: completed operation; each request still has a handle of its own)
_SENT_NOW = done_xfer()

#: what a :func:`sending` method is (SEND: a blocking Send; ISEND: an Isend; EAGER: write it
#: now, or nothing) and a :func:`receiving` one (RECV: a blocking Recv; IRECV: an Irecv;
#: GUARD: whether the receive may take the fast path; NOW: receive it by the compiled call,
#: or nothing); EAGER, GUARD and NOW serve ``Sendrecv``
SEND, ISEND, EAGER = 0, 1, 2
RECV, IRECV, GUARD, NOW = 0, 1, 2, 3

_STANDARD = 0  # gpumpi._p2p.STANDARD (the protocol's standard mode)


def _nothing(*args, **kwargs):
    return None


def compiled_methods(cls, names) -> None:
    """Have :mod:`gpumpi._compiled` put the compiled methods ``names`` (of ``Isend``, ``Irecv``,
    ``send``, ``recv``: ``_gpumpi_fast``'s) on ``cls`` or back the Python ones (this module's
    decorated general paths), as it chooses.  The compiled ones serve this module's guards'
    commonest case themselves (a whole array, or an object's pickle, up to the eager limit to
    or from this node, nothing queued, one thread) and hand every other call to the Python
    ones."""
    py = {name: cls.__dict__[name] for name in names}

    def install(m) -> None:
        if m is None:
            for name, fn in py.items():
                setattr(cls, name, fn)
            return
        m.bind_p2p(_rt, FREED, _threads, Xfer, _RECV, P.DONE, Request, _SENT_NOW, TAG_UB_VALUE, Status, MPIException,
                   object_send_pickled, load_reused, mpi_failed)
        m.bind_python(py)
        for name, fn in py.items():
            setattr(cls, name, _compiled.dressed(getattr(m, name), fn))

    _compiled.register(install)


def sending(mode: int):
    """Decorate the general path of ``Send`` (SEND) or ``Isend`` (ISEND): the compiled path first.

    The guard of the sending side: ``dest`` and ``tag`` plain valid ints, on a live, unfreed
    communicator; then a whole contiguous NumPy array is written into the ring by one
    compiled call (or pushed ahead to another node).  SEND returns None once sent; ISEND the
    request; EAGER True when written now (else None, nothing done).

    The guard is written as its refusal, the general path right after the test: CPython 3.11
    specializes a comparison only when its jump is short (a long body behind the guard made
    every jump an ``EXTENDED_ARG`` one: +409 instructions per ``Send`` by callgrind)."""
    send, isend = mode == SEND, mode == ISEND

    def wrap(general):
        def call(self, buf, dest, tag=0, *, stream=None):
            eng = _rt.ENGINE
            ctx = self._ctx
            if not (type(dest) is int and type(tag) is int and 0 <= dest < len(self._w) and
                    0 <= tag <= TAG_UB_VALUE and ctx >= 0 and ctx not in FREED):
                return general(self, buf, dest, tag, stream=stream)
            try:
                h = host_fast(buf, False)
                if h is not None:
                    w = self._w[dest]
                    if eng.send_fast(w, self._rank, ctx, tag, h[0], h[1], h[2]):
                        return None if send else Request._of(_SENT_NOW, self, None, buf) if isend else True
                    if eng.mtab is not None:  # another node: pushed ahead, compiled
                        if send:
                            if eng.push_far(w, self._rank, ctx, tag, h[0], h[1], h[2]):
                                return None
                        elif isend:
                            x = eng.isend_far(w, self._rank, ctx, tag, h[0], h[1], h[2])
                            if x is not None:
                                return Request._of(x, self, None, buf)
                if send and type(buf) is _ndarray and _send_declined(eng, self, buf, dest, tag, ctx):
                    return None
            except MPIException as e:
                return self._raise(e)
            return general(self, buf, dest, tag, stream=stream)

        return _compiled.dressed(call, general)

    return wrap


def _send_declined(eng, comm, buf, dest: int, tag: int, ctx: int) -> bool:
    """A blocking ``Send`` of a whole NumPy array the compiled call declined (too large, frames
    queued ...) or whose dtype has no shortcut: one parse, then the engine's ``isend``; False
    when the array is no contiguous memory (the general path takes it)."""
    m = message_simple(buf, True, dest, 1, "Send")
    mem = m.mem
    if mem is None or not m.contiguous:
        return False
    dt = m.datatype
    sig = dt._rec.cache.get("sigcode")
    x = eng.isend([mem], len(mem), comm._w[dest], comm._rank, tag, ctx, _STANDARD, "Send", (m.addr + m.lo,),
                  _sigcode(dt) if sig is None else sig)
    if x is not SENT:
        if not x.done:
            eng.wait(x)
        if x.err:
            raise error(x.err, x.errmsg)
    return True


def receiving(mode: int):
    """Decorate the general path of ``Recv`` (RECV) or ``Irecv`` (IRECV): the compiled path first.

    The guard of the receiving side: ``source`` (or ANY_SOURCE) and ``tag`` (or ANY_TAG) plain
    valid ints, on a live, unfreed communicator, and a status to fill or none (Irecv: none);
    then a whole contiguous NumPy array is received by one compiled call (Irecv: completed now
    by a message already here, or posted lazily, outside the matcher, in order).  GUARD
    returns True when the receive may take the fast path (nothing done); NOW True when the
    compiled call received it (else None).  The guard is written as its refusal (see
    :func:`sending`)."""
    irecv, guard, now = mode == IRECV, mode == GUARD, mode == NOW

    def wrap(general):
        def call(self, buf, source=ANY_SOURCE, tag=ANY_TAG, status=None, *, stream=None):
            eng = _rt.ENGINE
            ctx = self._ctx
            if not (type(source) is int and type(tag) is int and -2 <= source < len(self._w) and source != -1 and
                    -1 <= tag <= TAG_UB_VALUE and ctx >= 0 and ctx not in FREED and
                    (status is None or not irecv and type(status) is Status)):
                if irecv:
                    if status is not None:
                        raise TypeError("Irecv() takes no status (got one)")
                    return general(self, buf, source, tag, stream=stream)
                return general(self, buf, source, tag, status, stream=stream)
            h = host_fast(buf, True)
            if irecv:
                if h is not None:
                    x = eng.recv_lazy(source, source if source < 0 else self._w[source], tag, ctx, h[0], h[1], h[2],
                                      buf)
                    if x is not None:
                        return Request._of(x, self, None, buf)
                return general(self, buf, source, tag, stream=stream)
            if guard:
                return None if h is None else True
            try:
                if h is not None:
                    o = eng.recv_fast(source, source if source < 0 else self._w[source], tag, ctx, h[0], h[1], h[2])
                    if o is not None:
                        if status is not None:
                            src, tg, n, _ = o.tolist()
                            status._fill(src, tg, n)
                        return True if now else None
                if not now and type(buf) is _ndarray and _recv_declined(eng, self, buf, source, tag, status, ctx):
                    return None
            except MPIException as e:
                return self._raise(e)
            return general(self, buf, source, tag, status, stream=stream)

        return _compiled.dressed(call, general)

    return wrap


def _recv_declined(eng, comm, buf, source: int, tag: int, status, ctx: int) -> bool:
    """A blocking ``Recv`` into a whole NumPy array the compiled call declined (another message
    first, too large) or whose dtype has no shortcut: one parse, then the engine's ``irecv``;
    False when the array is no contiguous memory (the general path takes it)."""
    m = message_simple(buf, False, source, 1, "Recv")
    mem = m.mem
    if mem is None or not m.contiguous:
        return False
    dt = m.datatype
    sig = dt._rec.cache.get("sigcode")
    x = eng.irecv(mem, len(mem), source, ANY_SOURCE if source < 0 else comm._w[source], tag, ctx, "Recv",
                  m.addr + m.lo, _sigcode(dt) if sig is None else sig)
    if not x.done:
        eng.wait(x)
    if status is not None:
        status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
    if x.err:
        raise error(x.err, x.errmsg)
    return True


_send_eager = sending(EAGER)(_nothing)
_recv_guard = receiving(GUARD)(_nothing)
_recv_now = receiving(NOW)(_nothing)


def pairing(recv_rest):
    """Decorate the general path of ``Sendrecv``: with every argument valid (both sides' guards)
    and plain arrays, the send is written first (eager: complete at once), then the receive is
    tried by the compiled call; a receive the compiled call does not complete is
    ``recv_rest(self, recvbuf, source, recvtag, status, stream)``'s (the send went already)."""
    def wrap(general):
        def call(self, sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None, *,
                 stream=None):
            if (status is None or type(status) is Status) and _recv_guard(self, recvbuf, source, recvtag) and \
                    _send_eager(self, sendbuf, dest, sendtag):
                if not _recv_now(self, recvbuf, source, recvtag, status):
                    recv_rest(self, recvbuf, source, recvtag, status, stream)
                return None
            return general(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status, stream=stream)

        return _compiled.dressed(call, general)

    return wrap


# --- object messages (the lowercase calls) ---------------------------------------------------------
#
# A small object's pickle is one ``bytes`` object (``_pickle.dumps_parts``' commonest answer): it is
# written into the ring by the same compiled call as an array, its address read from the object
# header; the receive side takes an eager message into memory it reuses (``object_scratch``) and
# unpickles it from there.  The message is exactly the general path's (mpi4py's wire form), so
# either side may be either path; anything else (device parts, a large object, a declined write,
# a buffer given to recv, other threads) goes the general way, the object pickled once.

_BYTES = BYTES_DATA_OFFSET
_id = id


def _send_guard(self, dest, tag) -> bool:
    ctx = self._ctx
    return type(dest) is int and type(tag) is int and 0 <= dest < len(self._w) and 0 <= tag <= TAG_UB_VALUE and \
        ctx >= 0 and ctx not in FREED


def _recv_guard_obj(self, buf, source, tag, status) -> bool:
    ctx = self._ctx
    return buf is None and type(source) is int and type(tag) is int and -2 <= source < len(self._w) and \
        source != -1 and -1 <= tag <= TAG_UB_VALUE and ctx >= 0 and ctx not in FREED and \
        (status is None or type(status) is Status)


def object_send(world, me: int, ctx: int, dest: int, tag: int, obj, call: str):
    """Send ``obj`` to communicator rank ``dest`` (valid, as ``tag`` and ``ctx``) on context ``ctx``:
    pickled once and written by the compiled call (None: written, complete), else the general
    path's send of the same pickle (an Xfer, maybe ``SENT``).  Also the lowercase collectives'."""
    b = dumps_small(obj)
    if b is None:  # (a device array possible: the device-aware pickler, which may still make one bytes)
        p = dumps_parts(obj)
        bufs = p[0]
        if p[2] is None and len(bufs) == 1 and type(bufs[0]) is bytes:
            b = bufs[0]
    else:
        p = None
    return object_send_pickled(world, me, ctx, dest, tag, b, p, call)


def object_send_pickled(world, me: int, ctx: int, dest: int, tag: int, b, p, call: str):
    """:func:`object_send` of the pickle made: ``b``, the message as one ``bytes`` (or None), and
    ``p``, ``dumps_parts``' result (or None where ``b`` is the message)."""
    if b is not None and _BYTES is not None:  # (None: not CPython's bytes layout)
        if _rt.ENGINE.send_fast(world[dest], me, ctx, tag, _id(b) + _BYTES, len(b), 0):
            return None
    if p is None:
        p = ([b], len(b), None)
    return isend_pickled(p, dest, world, me, tag, ctx, _STANDARD, call)


def object_recv(world, ctx: int, source: int, tag: int, status, call: str):
    """The object of an eager message from ``source`` (communicator rank or ANY_SOURCE, valid, as
    ``tag``) on ``ctx``, received by the compiled call into reused memory, as a one-tuple; None
    when it declined or other threads run (nothing consumed: the general path receives)."""
    if _threads():
        return None
    eng = _rt.ENGINE
    mv, addr, cap = eng.oscratch or eng.object_scratch()
    o = eng.recv_fast(source, source if source < 0 else world[source], tag, ctx, addr, cap, 0)
    if o is None:
        return None
    src, tg, n, _ = o.tolist()
    if status is not None:
        status._fill(src, tg, n)
    return (load_reused(mv[:n], src, call, world, ctx),)


def object_sending(mode: int):
    """Decorate the general path of ``send`` (SEND) or ``isend`` (ISEND): a small object's pickle
    written by the compiled call first (the guard of :func:`sending`)."""
    isend = mode == ISEND
    name = "isend" if isend else "send"

    def wrap(general):
        def call(self, obj, dest, tag=0):
            if not _send_guard(self, dest, tag):
                return general(self, obj, dest, tag)
            try:
                x = object_send(self._w, self._rank, self._ctx, dest, tag, obj, name)
                if isend:
                    return Request._of(_SENT_NOW, self, None, None) if x is None else self._req(x)
                if x is not None:
                    self._wait(x, None, name)
                return None
            except MPIException as e:
                return self._raise(e)

        return _compiled.dressed(call, general)

    return wrap


def object_receiving(general):
    """Decorate the general path of ``recv``: an eager object message received by the compiled call
    into reused memory and unpickled from there, when no buffer is given and this is the only thread."""
    def call(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        if _recv_guard_obj(self, buf, source, tag, status):
            try:
                got = object_recv(self._w, self._ctx, source, tag, status, "recv")
            except MPIException as e:
                return self._raise(e)
            if got is not None:
                return got[0]
        return general(self, buf, source, tag, status)

    return _compiled.dressed(call, general)


def object_pairing(recv_rest):
    """Decorate the general path of ``sendrecv``: with both sides' guards, the object is sent first
    (compiled, or the general send posted), then received as :func:`object_receiving` does; a
    receive the compiled call declines is ``recv_rest(self, source, recvtag, status, "sendrecv")``'s."""
    def wrap(general):
        def call(self, sendobj, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
            if not (_send_guard(self, dest, sendtag) and _recv_guard_obj(self, recvbuf, source, recvtag, status)):
                return general(self, sendobj, dest, sendtag, recvbuf, source, recvtag, status)
            try:
                x = object_send(self._w, self._rank, self._ctx, dest, sendtag, sendobj, "sendrecv")
                if x is not None and x.done:  # sent at once by the general path: its error, if any, now
                    self._wait(x, None, "sendrecv")
                    x = None
                if x is None:  # (a send still in progress needs the engine: the general receive waits)
                    got = object_recv(self._w, self._ctx, source, recvtag, status, "sendrecv")
                    if got is not None:
                        return got[0]
                obj = recv_rest(self, source, recvtag, status, "sendrecv")
                if x is not None:
                    self._wait(x, None, "sendrecv")
                return obj
            except MPIException as e:
                return self._raise(e)

        return _compiled.dressed(call, general)

    return wrap
