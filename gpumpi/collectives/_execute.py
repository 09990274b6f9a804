"""The collective executor (L5): one engine for blocking, nonblocking and persistent collectives.

Theory of operation
===================
A collective call is prepared once into a :class:`Coll`: the schedule ``select`` built
(pure, ``collectives.schedule``), the memory behind each of its buffers (a
:class:`Flat` run of packed bytes, or :class:`Blocks` of user memory for the vector
forms), the unit size, the reduction (op, datatype) and the signature codes.  Running it
is a :class:`Run`:

* ``start`` packs non-contiguous user input into packed temporaries, allocates the
  schedule's temporaries in the memory kind of the data, then posts round 0.
* A round posts every SEND/RECV through the engine (host bytes directly; device memory
  through the one buffer path, ``_p2p``, so device data moves device to device).  Each
  completion decrements the round's count; the last one queues the run on the engine's
  ``ready`` list, and the engine calls :meth:`Run.advance` at the end of its next pass
  (never from inside a frame handler).  ``advance`` runs the round's RED/COPY steps --
  reductions by ``op.reduce_packed`` where the data lives (host kernels, or device
  kernels for device memory) -- then posts the next round.
* After the last round the packed results are unpacked into user memory, temporaries go
  back to their pools, and the run's joint operation completes.

So a schedule progresses inside any gpumpi call that progresses the engine (a ``Test``,
a send, a wait of anything): a nonblocking collective overlaps computation.  Blocking
calls start a run and wait for its joint operation (blocking Barrier, and Bcast/Allreduce
of small host arrays, take ``collectives._lean`` instead: the same schedule and messages
in a tight loop); nonblocking calls wrap it in a
:class:`~gpumpi.request.Request`; persistent (``*_init``) calls keep the :class:`Coll` and
start a new run on each ``Start``.  Runs of one communicator use the collective context
(``ctx + 1``) with a tag per call taken in call order, which all ranks share; messages of
a pair within a run match in posting order (schedule.py).

Checks against the peers' messages: every receive is posted with the exact byte count and
no signature filter, then compared when it completes: a longer message is ``ERR_TRUNCATE``,
a shorter one ``ERR_COUNT``, a different basic type ``ERR_TYPE``.  Such an error is
recorded and raised at completion on that rank only; the schedule runs to its end so that
no other rank waits for it, and what it forwards carries the signature it received
(a rank with a mismatched type does not make its subtree fail too).  A failed peer or
another transport error stops the run: it completes with that error.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from .. import _device
from .. import _protocol as P
from .. import _p2p
from .. import _pool
from .. import _runtime as _rt
from .._arrays import HOST
from .._buffers import Msg
from .._xfer import GREQ, SENT, Xfer
from ..datatypes import plan as _plan
from ..datatypes.predefined import BYTE
from ..op import reduce3, reduce_packed
from ..errors import ERR_COUNT, ERR_OTHER, ERR_REQUEST, ERR_TRUNCATE, ERR_TYPE, error
from ..errors import Exception as MPIException
from .schedule import COPY, RECV, RED, SEND, TMP

_U8 = np.uint8
_NOTHING = memoryview(bytearray())
_SOFT = (ERR_TRUNCATE, ERR_COUNT, ERR_TYPE)


class Flat:
    """Packed bytes in one run: host (``arr``: a flat ``'B'`` memoryview of them) or device
    memory of ``kind`` (``arr`` None) at ``addr``."""

    __slots__ = ("arr", "addr", "nbytes", "kind")

    def __init__(self, arr, addr: int, nbytes: int, kind: str = HOST) -> None:
        self.arr, self.addr, self.nbytes, self.kind = arr, addr, nbytes, kind


class Blocks:
    """User memory of a vector form, block by block: block ``i`` holds units
    ``[starts[i], starts[i] + lens[i])`` of the packed order in ``flats[i]``."""

    __slots__ = ("starts", "lens", "flats")

    def __init__(self, starts, lens, flats) -> None:
        self.starts, self.lens, self.flats = starts, lens, flats


def _piece(lay, lo: int, hi: int, unit: int, call: str):
    """``(host array or None, address, nbytes, memory kind)`` of units ``[lo, hi)`` of a buffer."""
    if type(lay) is Flat:
        a = lay.arr
        b0, b1 = lo * unit, hi * unit
        return (a[b0:b1] if a is not None else None), lay.addr + b0, b1 - b0, lay.kind
    if hi == lo:
        return _NOTHING, 0, 0, HOST
    i = bisect_right(lay.starts, lo) - 1
    while i + 1 < len(lay.starts) and lay.lens[i] == 0:  # empty blocks share a start
        i += 1
    if i < 0 or hi > lay.starts[i] + lay.lens[i]:
        raise AssertionError(f"{call}: schedule range [{lo}, {hi}) crosses a block of a vector buffer")
    return _piece(lay.flats[i], lo - lay.starts[i], hi - lay.starts[i], unit, call)


def raw_msg(kind: str, addr: int, nbytes: int) -> Msg:
    """A contiguous message of ``nbytes`` bytes of device memory at ``addr`` (for ``_p2p``)."""
    m = Msg()
    m.obj = m._view = m._mem = None
    m.addr, m.count, m.datatype, m.nbytes, m.span, m.lo = addr, nbytes, BYTE, nbytes, nbytes, 0
    m.blocks, m.kind, m.contiguous = 1, kind, True
    return m


class Coll:
    """A prepared collective (see the module docstring)."""

    __slots__ = ("comm", "call", "tag", "sched", "unit", "kind", "bufs", "op", "dt", "sig", "pre", "post",
                 "keep", "soft", "stream")

    def __init__(self, comm, call: str, sched, unit: int, kind: str, bufs: dict, sig: int = 0,
                 op=None, dt=None, keep=None) -> None:
        self.comm, self.call, self.sched, self.unit, self.kind = comm, call, sched, unit, kind
        # the call's tag, in call order on every rank, taken once its arguments were checked
        # (a rank whose call fails validation has not entered the collective, as in MPI)
        self.tag = comm._ctag()
        self.bufs = bufs
        self.op, self.dt = op, dt
        self.sig = sig
        self.pre, self.post = [], []  # run at start (pack inputs) / at the end (unpack results)
        self.keep = keep
        self.soft = []  # errors found while preparing, raised at completion on this rank only
        self.stream = None  # the caller's stream= (device memory): its queued work comes first


class Run:
    """One execution of a :class:`Coll` (see the module docstring)."""

    __slots__ = ("c", "k", "pending", "j", "errs", "fatal", "fsig", "bufs", "tmps", "ad")

    def __init__(self, c: Coll) -> None:
        self.c = c
        self.k = 0
        self.pending = 0
        self.errs = list(c.soft)
        self.fatal = None
        self.fsig = {}
        j = self.j = Xfer(GREQ)
        j.got = 1
        j.st_source, j.st_tag, j.st_nbytes = -1, -1, 0  # MPI: a collective's status is undefined
        j.cancel_fn = _no_cancel

    # --- start -------------------------------------------------------------------------------
    def start(self) -> Xfer:
        c = self.c
        eng = _rt.ENGINE
        bufs = self.bufs = dict(c.bufs)
        kind = c.kind
        self.ad = None if kind == HOST else _device.adapter_for(kind)
        self.tmps = []
        with eng.lock:
            if self.ad is not None and eng.stream_mode != "none":
                # local steps (copies, reductions, packing) read device buffers on gpumpi's
                # streams: the work the caller queued (on stream=, else the current stream) comes first
                self.ad.stream_synchronize(c.stream if c.stream is not None else self.ad.current_stream())
            for fn in c.pre:
                fn(self)
            for k, units in enumerate(c.sched.tmp):
                bufs[TMP + k] = self._alloc(units * c.unit)
            self._post()
        return self.j

    def _alloc(self, n: int) -> Flat:
        if self.ad is None:
            a = _pool.HOST.get(n) if n else np.empty(0, _U8)
            self.tmps.append((a, n))
            return Flat(memoryview(a)[:n], a.ctypes.data, n)
        pool = _pool.device(self.ad)
        addr = pool.get(max(n, 1))
        self.tmps.append((addr, max(n, 1)))
        return Flat(None, addr, n, self.c.kind)

    # --- rounds --------------------------------------------------------------------------------
    def _post(self) -> None:
        """Post rounds from ``k`` on until one has to wait (or the schedule is over)."""
        c = self.c
        rounds = c.sched.rounds
        while True:
            if self.fatal is not None or self.k >= len(rounds):
                self._end()
                return
            self.pending = 1  # held until every step of the round is posted
            rnd = rounds[self.k]
            # peers this rank also sends to in the round: an exchange, whose sender is busy with
            # its own half (its receive, its reduction), so its receives do not split the copy
            sends = {st[1] for st in rnd if st[0] is SEND} if len(rnd) > 1 else ()
            try:
                for st in rnd:
                    t = st[0]
                    if t is SEND or t is RECV:
                        self._comm(st, st[1] in sends)
            finally:  # an error while posting still releases the hold (advance ends the run)
                self.pending -= 1
            if self.pending:
                return
            self._locals()

    def _locals(self) -> None:
        """Run round ``k``'s local steps and move to the next round."""
        c = self.c
        if self.fatal is None:
            steps = c.sched.rounds[self.k]
            skip = -1
            for i, st in enumerate(steps):
                if i == skip:
                    continue
                t = st[0]
                try:
                    if t is RED:
                        self._reduce(st)
                    elif t is COPY:
                        nxt = steps[i + 1] if i + 1 < len(steps) else None
                        if nxt is not None and nxt[0] is RED and self._fused(st, nxt):
                            skip = i + 1
                        else:
                            self._copy(st)
                except Exception as e:  # noqa: BLE001 - e.g. a user op that raised
                    # recorded, raised at completion on this rank; the schedule goes on, so
                    # that no other rank waits for messages this one would never send
                    code = e.Get_error_class() if isinstance(e, MPIException) else ERR_OTHER
                    self.errs.append((code, f"{c.call}: {type(e).__name__}: {e}"))
        self.k += 1

    def _fused(self, cp, red) -> bool:
        """``COPY x -> d`` then ``RED t -> d`` (``d = d op t``; or ``t op d`` for a commutative op)
        as one pass, ``d = x op t``, where a three-operand host kernel exists: the copy's pass
        over memory is saved."""
        _, xb, xlo, db, dlo, n = cp
        _, tb, tlo, db2, dlo2, n2, left = red
        c = self.c
        if db2 != db or dlo2 != dlo or n2 != n or (left and not c.op._commute) or not n or tb == db or xb == db:
            return False
        x_arr, _, _, _ = _piece(self.bufs[xb], xlo, xlo + n, c.unit, c.call)
        t_arr, _, _, _ = _piece(self.bufs[tb], tlo, tlo + n, c.unit, c.call)
        d_arr, _, _, _ = _piece(self.bufs[db], dlo, dlo + n, c.unit, c.call)
        if x_arr is None or t_arr is None or d_arr is None:
            return False
        return reduce3(c.op, c.dt, _np(x_arr), _np(t_arr), _np(d_arr))

    def advance(self) -> None:
        """The engine's call once the round's operations are all complete.  It runs inside
        whatever call progressed the engine, so an error posting the next round ends this
        run with it (its caller raises it) instead of escaping into that unrelated call."""
        try:
            self._locals()
            self._post()
        except Exception as e:  # noqa: BLE001
            if not self.j.done:
                code = e.Get_error_class() if isinstance(e, MPIException) else ERR_OTHER
                self.fatal = (code, f"{self.c.call}: {type(e).__name__}: {e}")
                if self.pending <= 0:
                    self._end()

    def _comm(self, st, exchange: bool = False) -> None:
        c = self.c
        t, peer, b, lo, hi = st
        arr, addr, n, kind = _piece(self.bufs[b], lo, hi, c.unit, c.call)
        comm = c.comm
        eng = _rt.ENGINE
        if peer >= 0:
            ctx = comm._ctx + 1
            wpeer = comm._w[peer]
        else:
            # intercommunicator schedules (collectives.inter): peer ~p is rank p of the LOCAL
            # group, reached on the private local communicator's collective context, same tag
            lc = comm._local
            ctx = lc._ctx + 1
            peer = ~peer
            wpeer = lc._w[peer]
        if t is SEND:
            sig = self.fsig.get(b, c.sig)
            if arr is not None:
                x = eng.isend([arr], n, wpeer, comm._rank, c.tag, ctx, 0, c.call, (addr,), sig)
            else:
                x = _p2p.isend(raw_msg(kind, addr, n), wpeer, comm._rank, c.tag, ctx, 0, c.call, sig=sig)
            if x is SENT or x.done:
                if x is not SENT and x.err:
                    self._failed(x)
                return
            self.pending += 1
            x.on_done = _chain(x.on_done, self._sent)
            return
        if arr is not None:
            x = eng.irecv(arr, n, peer, wpeer, c.tag, ctx, c.call, addr, 0, None, None, exchange)
        else:
            x = _p2p.irecv(raw_msg(kind, addr, n), peer, wpeer, c.tag, ctx, c.call, sig=0)
        if x.done:
            self._check(x, b, n, peer)
            return
        self.pending += 1
        x.on_done = _chain(x.on_done, lambda x, b=b, n=n, p=peer: self._recvd(x, b, n, p))

    def _done_one(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            _rt.ENGINE.ready.append(self)

    def _sent(self, x) -> None:
        if x.err:
            self._failed(x)
        self._done_one()

    def _recvd(self, x, b, n, peer) -> None:
        self._check(x, b, n, peer)
        self._done_one()

    def _failed(self, x) -> None:
        if self.fatal is None:
            self.fatal = (x.err, x.errmsg or f"{self.c.call}: failed")

    def _check(self, x, b: int, n: int, peer: int) -> None:
        """Compare a completed receive with what this rank expected (module docstring)."""
        c = self.c
        if x.err:
            if x.err in _SOFT:
                self.errs.append((x.err, x.errmsg))
            else:
                self._failed(x)
            return
        if x.msig:
            self.fsig[b] = x.msig
        got = x.st_nbytes
        if got != n or x.msig and c.sig and x.msig != c.sig:
            e = P.receive_error(c.call, peer, got, n, x.msig, c.sig, _rt.ENGINE.typecheck, exact=True)
            if e is not None:
                self.errs.append(e)

    # --- local steps -----------------------------------------------------------------------------
    def _reduce(self, st) -> None:
        c = self.c
        _, sb, slo, db, dlo, n, left = st
        if not n:
            return
        s_arr, s_addr, nb, _ = _piece(self.bufs[sb], slo, slo + n, c.unit, c.call)
        d_arr, d_addr, _, _ = _piece(self.bufs[db], dlo, dlo + n, c.unit, c.call)
        op, dt = c.op, c.dt
        if left or op._commute:
            if s_arr is not None:
                reduce_packed(op, dt, n, _np(s_arr), _np(d_arr), HOST)
            else:
                reduce_packed(op, dt, n, s_addr, d_addr, c.kind)
            return
        # dst = dst op src: the result goes through a copy of src
        t = self._alloc(nb)
        if s_arr is not None:
            t.arr[:] = s_arr
            reduce_packed(op, dt, n, _np(d_arr), _np(t.arr), HOST)
            d_arr[:] = t.arr
        else:
            ad = self.ad
            ad.memcpy(t.addr, s_addr, nb, None)
            reduce_packed(op, dt, n, d_addr, t.addr, c.kind)
            ad.memcpy(d_addr, t.addr, nb, None)
            ad.synchronize()

    def _copy(self, st) -> None:
        c = self.c
        _, sb, slo, db, dlo, n = st
        if not n:
            return
        s_arr, s_addr, nb, _ = _piece(self.bufs[sb], slo, slo + n, c.unit, c.call)
        d_arr, d_addr, _, _ = _piece(self.bufs[db], dlo, dlo + n, c.unit, c.call)
        if s_arr is not None and d_arr is not None:
            if nb > 4096:  # NumPy's copy is twice as fast as a memoryview's on large runs
                np.copyto(_np(d_arr), _np(s_arr))
            else:
                d_arr[:] = s_arr
        elif s_addr != d_addr:  # device memory (or host <-> device, by address)
            ad = self.ad
            s = _rt.ENGINE.copy_stream(ad)
            ad.memcpy(d_addr, s_addr, nb, s)
            ad.stream_synchronize(s)

    # --- end -------------------------------------------------------------------------------------
    def _end(self) -> None:
        c = self.c
        j = self.j
        try:
            if self.fatal is None:
                for fn in c.post:
                    fn(self)
        except BaseException as e:  # an unpack that failed: the caller sees it at completion
            self.fatal = (ERR_OTHER, f"{c.call}: {e}")
        finally:
            self._release()
        if self.fatal is not None:
            j.err, j.errmsg = self.fatal
        elif self.errs:
            j.err, j.errmsg = self.errs[0]
        cb = j.on_done
        if cb is not None:
            j.on_done = None
            cb(j)
        j.got = 0
        j.done = True

    def _release(self) -> None:
        if self.ad is None:
            for a, n in self.tmps:
                if n:
                    _pool.HOST.put(a)
        else:
            pool = _pool.device(self.ad)
            for a, n in self.tmps:
                pool.put(a, n)
        self.tmps = []


def _chain(prev, fn):
    if prev is None:
        return fn
    return lambda x: (prev(x), fn(x))


def _no_cancel():
    raise error(ERR_REQUEST, "Request.Cancel: a collective operation cannot be cancelled (MPI_Cancel)")


# --- user memory -> schedule buffers ---------------------------------------------------------------


def host_array(m) -> memoryview:
    """A flat ``'B'`` memoryview of a host message's bytes (writable when the message is)."""
    mem = m.mem
    return mem if mem is not None else _NOTHING


def _np(mv):
    """A uint8 NumPy array over a flat memoryview (what the reduction kernels take)."""
    return np.frombuffer(mv, _U8) if len(mv) else np.empty(0, _U8)


def packed_in(coll: Coll, b: int, m, count: int, blocks, unit: int) -> None:
    """Buffer ``b`` of ``coll`` reads non-contiguous ``m``: a packed temporary filled at start.

    ``blocks``: None for a simple message of ``count`` elements (all its blocks); else a list of
    ``(address, count, datatype)`` per block (vector forms), packed one after the other."""
    _packed(coll, b, m, count, blocks, unit, inp=True, out=False)


def packed_out(coll: Coll, b: int, m, count: int, blocks, unit: int, inp: bool = False) -> None:
    """Buffer ``b`` of ``coll`` is written into non-contiguous ``m``: a packed temporary unpacked
    at the end (``inp``: it is also read, so packed at start too)."""
    _packed(coll, b, m, count, blocks, unit, inp=inp, out=True)


def resized_in(coll: Coll, b: int, m, count: int, want: int, what: str) -> None:
    """Buffer ``b`` reads ``want`` bytes where message ``m`` (``count`` elements) has another
    number: this rank's own block of a collective whose sizes disagree (an erroneous call).
    The schedule runs on a temporary of ``want`` bytes holding the first bytes of ``m`` (zeros
    after them), and the call completes with ``ERR_TRUNCATE`` (more sent than received) or
    ``ERR_COUNT`` on this rank only: the other ranks complete, nobody waits for it."""
    blist = _block_list(m, count, None)
    have = sum(c * dt._size for _, c, dt in blist)
    code = ERR_TRUNCATE if have > want else ERR_COUNT
    coll.soft.append((code, f"{coll.call}: {what} ({have} bytes sent, {want} bytes received)"))
    coll.bufs[b] = None

    def pre(run, b=b):
        full = run._alloc(have)
        _pack_blocks(run, m, blist, full)
        lay = run.bufs[b] = run._alloc(want)
        k = min(have, want)
        if run.ad is None:
            lay.arr[:k] = full.arr[:k]
            lay.arr[k:] = bytes(want - k)
        elif k:
            s = _rt.ENGINE.copy_stream(run.ad)
            run.ad.memcpy(lay.addr, full.addr, k, s)
            run.ad.stream_synchronize(s)

    coll.pre.append(pre)


def resized_out(coll: Coll, b: int, m, count: int, want: int, what: str) -> None:
    """Buffer ``b`` receives ``want`` bytes where message ``m`` (``count`` elements) holds another
    number (as :func:`resized_in`, for a receive): the first bytes that fit reach ``m``."""
    have = count * m.datatype._size
    code = ERR_TRUNCATE if want > have else ERR_COUNT
    coll.soft.append((code, f"{coll.call}: {what} ({want} bytes sent, {have} bytes received)"))
    coll.bufs[b] = None
    coll.pre.append(lambda run, b=b: run.bufs.__setitem__(b, run._alloc(want)))

    def post(run, b=b):
        k = min(have, want)
        if not k:
            return
        lay = run.bufs[b]
        p = _plan.plan_for(m.datatype, count)
        if run.ad is None:
            dst = _raw_host(m.addr + p.lo, p.hi - p.lo, True)
            p.unpack_from(_np(lay.arr[:k]), dst, p.lo, k)
        elif m.contiguous:
            s = _rt.ENGINE.copy_stream(run.ad)
            run.ad.memcpy(m.addr + p.lo, lay.addr, k, s)
            run.ad.stream_synchronize(s)

    coll.post.append(post)


def _block_list(m, count, blocks):
    if blocks is None:
        return [(m.addr, count, m.datatype)]
    return blocks


def _packed(coll: Coll, b: int, m, count: int, blocks, unit: int, inp: bool, out: bool) -> None:
    blist = _block_list(m, count, blocks)
    total = sum(c * dt._size for _, c, dt in blist)
    coll.bufs[b] = None  # made at start

    def pre(run, b=b):
        lay = run.bufs[b] = run._alloc(total)
        if inp:
            _pack_blocks(run, m, blist, lay)

    coll.pre.append(pre)
    if out:
        coll.post.append(lambda run, b=b: _unpack_blocks(run, m, blist, run.bufs[b]))


def _pack_blocks(run: Run, m, blist, lay: Flat) -> None:
    off = 0
    K = _kernels(run, m)
    for addr, count, dt in blist:
        n = count * dt._size
        if not n:
            continue
        p = _plan.plan_for(dt, count)
        if run.ad is None:
            src = _raw_host(addr + p.lo, p.hi - p.lo, False)
            p.pack_into(src, p.lo, _np(lay.arr[off:off + n]))
        elif K is not None:  # packed on the device by the pack kernels
            ad = run.ad
            s = _rt.ENGINE.copy_stream(ad)
            K.device_pack(p, _p2p._DeviceBytes(addr + p.lo, p.hi - p.lo), p.lo, _p2p._DeviceBytes(lay.addr + off, n),
                          _p2p.kernel_stream(ad, s))
            ad.stream_synchronize(s)
        else:
            ad = run.ad
            tmp = _pool.HOST.get(p.hi - p.lo)
            s = _rt.ENGINE.copy_stream(ad)
            ad.memcpy(tmp.ctypes.data, addr + p.lo, p.hi - p.lo, s)
            ad.stream_synchronize(s)
            out = _pool.HOST.get(n)
            p.pack_into(memoryview(tmp)[:p.hi - p.lo], p.lo, out)
            ad.memcpy(lay.addr + off, out.ctypes.data, n, s)
            ad.stream_synchronize(s)
            _pool.HOST.put(tmp)
            _pool.HOST.put(out)
        off += n


def _unpack_blocks(run: Run, m, blist, lay: Flat) -> None:
    off = 0
    K = _kernels(run, m)
    for addr, count, dt in blist:
        n = count * dt._size
        if not n:
            continue
        p = _plan.plan_for(dt, count)
        if run.ad is None:
            dst = _raw_host(addr + p.lo, p.hi - p.lo, True)
            p.unpack_from(_np(lay.arr[off:off + n]), dst, p.lo, n)
        elif K is not None:  # unpacked on the device by the pack kernels
            ad = run.ad
            s = _rt.ENGINE.copy_stream(ad)
            K.device_unpack(p, _p2p._DeviceBytes(lay.addr + off, n), _p2p._DeviceBytes(addr + p.lo, p.hi - p.lo), p.lo,
                            n, _p2p.kernel_stream(ad, s))
            ad.stream_synchronize(s)
        else:  # read, modify, write the span: bytes between the elements keep their values
            ad = run.ad
            span = p.hi - p.lo
            tmp = _pool.HOST.get(span)
            pk = _pool.HOST.get(n)
            s = _rt.ENGINE.copy_stream(ad)
            ad.memcpy(tmp.ctypes.data, addr + p.lo, span, s)
            ad.memcpy(pk.ctypes.data, lay.addr + off, n, s)
            ad.stream_synchronize(s)
            p.unpack_from(pk[:n], memoryview(tmp)[:span], p.lo, n)
            ad.memcpy(addr + p.lo, tmp.ctypes.data, span, s)
            ad.stream_synchronize(s)
            _pool.HOST.put(tmp)
            _pool.HOST.put(pk)
        off += n


def _kernels(run: Run, m):
    """``gpumpi.kernels.pack`` where it can pack user message ``m`` on its device (as the one
    buffer path decides, ``_p2p.kernels_for``), else None (staged through host memory)."""
    if run.ad is None or m.kind == HOST:
        return None
    return _p2p.kernels_for(m)


def _raw_host(addr: int, n: int, writable: bool):
    from .._arrays import raw_mem

    return raw_mem(addr, n, not writable, None)


# --- running -------------------------------------------------------------------------------------


def set_stream(c: Coll, stream, call: str) -> None:
    """A collective's ``stream=`` (gpumpi's extension): TypeError unless it suits the memory."""
    if c.kind != HOST:
        _device.adapter_for(c.kind).check_stream(stream)
        c.stream = stream


def start(c: Coll) -> Xfer:
    """Start a run of ``c``; its joint operation."""
    return Run(c).start()


def wait(c: Coll) -> None:
    """Run ``c`` to completion (blocking collectives); raises its error."""
    x = Run(c).start()
    if not x.done:
        _rt.ENGINE.wait(x)
    if x.err:
        raise error(x.err, x.errmsg)
