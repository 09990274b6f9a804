"""Object messages: pickle messages whose device arrays travel out of band (L5).

Theory of operation
===================
The lowercase API (``send``, ``recv``, ``isend``, ...) moves a Python object as one
pickle message (``_pickle``: a plain pickle stream, as mpi4py sends, with an index of its
large buffers after it) on the communicator's point-to-point context ``ctx``.
Host buffers inside the object travel inside that message.  Device arrays inside it
(CuPy, Numba, simulated) travel as messages of their own ("parts"): standard sends of
the arrays through the one buffer path (``_p2p``: device to device) on the parts
context ``ctx | 3`` (the communicator's fourth context, whether the object message
went on its point-to-point context or, for a lowercase collective, on its collective
one), tagged with the sequence number the object message's header
carries.  They are posted before the object message, so every part's envelope has
arrived by the time that one matches; the receiver then takes them from the object
message's source.  A sender's parts complete only when matched, so receives post them
as soon as the object message arrives (a completion callback), whatever else the
receiving rank is waiting for.  Buffered sends carry the whole object, device arrays
included, through host memory (one message in the attached buffer).

Every function takes the communicator's context id ``ctx``, its world ranks ``world``
(communicator rank -> world rank) and, for sends, the sender's rank ``me``: this module
knows nothing of ``Comm``.
"""

from __future__ import annotations

from . import _p2p
from . import _pickle
from . import _runtime as _rt
from ._xfer import RECV, Xfer
from .constants import ANY_SOURCE
from .errors import error
from .request import after, all_of, joint, part_done

STANDARD, BUFFERED = _p2p.STANDARD, _p2p.BUFFERED


def isend(obj, dest: int, world, me: int, tag: int, ctx: int, mode: int, call: str, bpool=None):
    """Post the send of ``obj`` to communicator rank ``dest`` (validated by the caller)."""
    if mode == BUFFERED:  # one message in the attached buffer: device arrays go in band, through host memory
        bufs, n = _pickle.dumps(obj)
        return _p2p.bsend(memoryview(b"".join(bufs)), world[dest], me, tag, ctx, call, 0, bpool)
    return isend_pickled(_pickle.dumps_parts(obj), dest, world, me, tag, ctx, mode, call)


def isend_pickled(pickled, dest: int, world, me: int, tag: int, ctx: int, mode: int, call: str):
    """:func:`isend` (a standard or synchronous one) of what ``_pickle.dumps_parts`` made of the object."""
    bufs, n, parts = pickled
    if parts is not None:
        return _isend_parts(bufs, n, parts, dest, world, me, tag, ctx, mode, call)
    return _rt.ENGINE.isend(bufs, n, world[dest], me, tag, ctx, mode, call)


def _isend_parts(bufs, n: int, parts, dest: int, world, me: int, tag: int, ctx: int, mode: int, call: str):
    """Send the device parts (empty arrays send nothing), then the object message; one joint
    Xfer completes when they all have, and keeps the arrays alive until then."""
    seq, arrays = parts
    wdest = world[dest]
    xs = [_p2p.isend(_p2p.msg(a, True, dest, call), wdest, me, seq, ctx | 3, STANDARD, call)
          for a in arrays if a.nbytes]
    main = _rt.ENGINE.isend(bufs, n, wdest, me, tag, ctx, mode, call)
    j = all_of(xs + [main], arrays)
    j.cancel_fn = lambda: _cancel_send(j, main, xs)
    return j


def _cancel_send(j: Xfer, main: Xfer, parts) -> None:
    """MPI_Cancel of an object send with device parts: cancel the object message; only once
    that is known cancelled (the receiver never saw it), cancel the parts it announces, which
    nobody will receive now.  Cancelling them earlier could strand a receiver that matched it."""
    eng = _rt.ENGINE

    def then(xx) -> None:
        if xx.cancelled:
            j.cancelled = True
            for p in parts:
                eng.cancel(p)

    with eng.lock:
        if main.done:
            return
        prev = main.on_done
        main.on_done = then if prev is None else (lambda xx: (then(xx), prev(xx)))
    eng.cancel(main)


def irecv(source: int, tag: int, world, ctx: int, call: str, watch: bool = False, mem=None):
    """Post the receive of an object message from ``source`` (communicator rank or ANY_SOURCE)
    into host bytes ``mem`` (a flat writable memoryview; None: sized by the message);
    ``watch``: post its parts' receives on arrival."""
    wpeer = ANY_SOURCE if source == ANY_SOURCE else world[source]
    post = (lambda x: _parts_on_arrival(x, world, ctx)) if watch else None
    return _rt.ENGINE.irecv(mem, 0 if mem is None else len(mem), source, wpeer, tag, ctx, call, post=post)


def body(x):
    """The bytes object receive ``x`` received (the whole allocation when it was sized by
    the message, else the first ``st_nbytes`` bytes of the caller's buffer)."""
    mem = x.mem
    if x.dynamic or mem is None:
        return mem
    return memoryview(mem)[: x.st_nbytes]


def _parts_on_arrival(x, world, ctx: int) -> None:
    """Completion callback of an object receive (inside a progress pass): post the receives
    of its device parts, if it has any; ``x.result`` keeps them for :func:`load`."""
    if x.err or x.cancelled:
        return
    try:
        pend = _pickle.parts_of(body(x))
    except Exception:  # a malformed message: load() reports it  # noqa: BLE001
        return
    if pend is not None:
        x.result = _post_parts(pend, x.st_source, x.call, world, ctx)


def whole(x, watched: bool, world, ctx: int) -> Xfer:
    """A joint operation that completes when object receive ``x`` has and its device parts
    have landed, with ``x``'s status: Test never blocks on parts, Cancel reaches ``x``.
    ``watched``: ``x`` posts its parts itself (:func:`irecv` with ``watch``)."""
    o = joint(1)
    o.cancel_fn = lambda: _rt.ENGINE.cancel(x)

    def done(xx) -> None:
        if not watched:
            _parts_on_arrival(xx, world, ctx)
        res = xx.result
        if res is None:
            part_done(o, xx, True)
        else:  # when its parts have landed
            after(res[1], lambda: part_done(o, xx, True))

    after(x, lambda: done(x))
    return o


def _post_parts(pend, src: int, call: str, world, ctx: int):
    """Allocate the device arrays of an object message from rank ``src`` and post the receives
    of its parts, with no progress pass (this runs in completion callbacks too).  Returns
    ``(arrays, joint Xfer)``; where the arrays cannot be made, ``(exception, joint)``, and the
    parts are received and dropped, so that the sender still completes."""
    eng = _rt.ENGINE
    pctx, seq, wsrc = ctx | 3, pend.seq, world[src]
    err = None
    try:
        arrays = _pickle.alloc(pend.specs)
    except Exception as e:  # e.g. out of device memory: raised where the object is returned  # noqa: BLE001
        arrays, err = None, e
    sizes = [_pickle.part_nbytes(spec) for spec in pend.specs]
    j = joint(sum(1 for nb in sizes if nb))
    j.bufs = arrays  # the destinations stay alive until every part has landed
    with eng.lock:
        for i, nb in enumerate(sizes):
            if not nb:
                continue
            x = Xfer(RECV)
            x.call, x.ctx, x.src, x.wpeer, x.tag = call, pctx, src, wsrc, seq
            x.dynamic, x.mem, x.cap, post = True, None, 0, None
            if err is None:
                try:
                    m = _p2p.msg(arrays[i], False, src, call)
                    mem, addr, post, dev = _p2p.incoming(m, call)
                except Exception as e:  # noqa: BLE001
                    err = e
                else:
                    x.dynamic, x.mem, x.cap, x.addr, x.dev = False, mem, len(mem), addr, dev
                    x.sig = _p2p.signature(m.datatype)

            def done(xx, post=post):
                if post is not None:
                    post(xx)
                part_done(j, xx)

            x.on_done = done
            if eng.lazy:
                eng.unlazy()  # receives posted lazily come first
            hit = eng.matcher.post_recv(pctx, src, seq, x)
            if hit is not None:
                eng.deliver(x, hit)
            elif wsrc in eng.failed:
                eng.matcher.cancel_recv(pctx, x)
                eng._fail_recv_for_failure(x)
    return (arrays if err is None else err), j


def load_reused(mv, src: int, call: str, world, ctx: int):
    """The object of an object message received from communicator rank ``src`` into memory the
    caller reuses (``mv``, its bytes: the compiled path's receive; see ``_pickle.loads_reused``);
    a message with device parts has them received as :func:`load` does."""
    obj = _pickle.loads_reused(mv)
    if type(obj) is not _pickle.Pending:
        return obj
    x = Xfer(RECV)
    x.mem, x.dynamic, x.st_source = bytearray(mv), True, src
    return load(x, call, world, ctx, obj)


def load(x, call: str, world, ctx: int, pend=None):
    """The object of completed object receive ``x``, once its device parts have landed
    (``pend``: what ``loads`` found in ``x`` already, if the caller looked)."""
    res = x.result
    if res is None:
        if pend is None:
            pend = _pickle.loads(body(x))
            if type(pend) is not _pickle.Pending:
                return pend
        res = _post_parts(pend, x.st_source, call, world, ctx)
    arrays, j = res
    if not j.done:
        _rt.ENGINE.wait(j)
    if type(arrays) is not list:
        raise arrays
    if j.err:
        raise error(j.err, j.errmsg)
    return _pickle.loads(body(x), arrays)
