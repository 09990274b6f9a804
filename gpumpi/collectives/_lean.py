"""Lean blocking collectives (L5): Barrier, and Bcast/Allreduce/Reduce/Allgather/Alltoall of small host arrays, in a tight loop.

Theory of operation
===================
The executor (``_execute``) prepares a ``Coll``, starts a ``Run`` that posts each round
through completion callbacks and the engine's ``ready`` list, and takes its temporaries
from pools: what nonblocking, persistent and device collectives need, and many
microseconds of Python for an ``Allreduce`` of 8 bytes.  The blocking forms of the three
calls programs issue most often take this module's path when every argument is of the
common kind, recognised from the object headers before anything is parsed:

* an intracommunicator (the caller, ``Comm``, checks that);
* buffers that are C-contiguous host NumPy arrays, bare (datatype inferred as mpi4py
  does) or ``[array, datatype]`` with a predefined contiguous datatype whose size divides
  the array's bytes; a writable one where the call writes; ``IN_PLACE`` (or ``None``) as
  Allreduce's send buffer;
* Allreduce: a predefined commutative operation defined for the datatype, send and
  receive buffers of one datatype and count;
* at most ``MAX_BYTES`` bytes (the default eager limit: messages go inline in the ring
  unless it is full or ``GPUMPI_EAGER_LIMIT`` is lower, when the general calls carry them).

Anything else, and every call while ``ENABLED`` is false, goes to the executor
unchanged, and the executor does the argument checking and raises its errors: a
function here returns False before it has taken the call's tag or touched anything.
``Reduce`` reads the receive buffer at the root only, as the executor does.

Same messages as the executor
-----------------------------
Ranks on this path and ranks on the executor meet in one call (one rank's buffer may use
a derived datatype or device memory while the others' do not), so the messages are the
executor's exactly.  They are by construction: a :class:`_Plan` is compiled from the
schedule the executor would run (``_calls._schedule`` with the same arguments, so
``GPUMPI_COLL_ALGORITHM`` applies alike), the tag is ``comm._ctag()`` taken once the
call is known to run here (where the executor's ``Coll`` takes it), the context is the
collective one (``ctx + 1``), and a send carries the datatype's signature code, or the
one the buffer last received (the executor's ``fsig``).  A round posts its sends, then
its receives, then waits for the sends still in flight (a full ring: the frame points
at the buffer) and runs its local steps.  A send is one compiled call
(``Engine.send_fast``: the bytes written into the ring now) or, where that declines,
``Engine.isend``; a round's one receive is ``Engine.recv_fast`` (compiled, blocking) or,
where that declines (a message waiting, to truncate, a failure...), ``irecv`` and a
wait, as several receives are.  The compiled calls take addresses, so the byte views
of user arrays are made only when a general call or a copy needs them.  Posting the
sends first does not change what matches what: messages of a pair match in posting
order, and the order of a rank's sends to one peer, and of its receives from one peer,
is the schedule's.

Where nothing else is pending on the engine (no receive posted or message waiting on the
collective context, no queued frames or other duties) and no other Python thread runs, a
plan whose rounds have at most one receive each runs as one compiled call
(:func:`gpumpi.ipc.fastring.rounds`, its program built with the plan): the same sends,
receives and local steps in the same order, the reductions by the compiled loops for
native ``float64``/``float32``/``(u)int64``/``(u)int32`` and SUM, PROD, MAX, MIN and the
bitwise operations (other types and operations keep the ufunc path).  It stops before the
first send with no room or receive whose frame is not exactly the expected message (a
size or signature to check, another kind of frame, nothing within the spin budget, a
failure), and :func:`_run` carries on from that round with the tag already taken.

Receives are posted with the exact byte count and no signature filter and checked as the
executor checks them: a longer message is ``ERR_TRUNCATE``, a shorter one ``ERR_COUNT``,
another basic type ``ERR_TYPE`` -- recorded, the schedule goes on, the first is raised at
the end (the same text as the executor's).  Any other error (a failed peer:
``ERR_PROC_FAILED``, which the engine reports instead of waiting for ever) stops the run
after its round.

Plans and temporaries
---------------------
Plans are cached per (collective, rank, size, bytes, root / operation and datatype,
IN_PLACE).  Byte ranges, "whole buffer" flags and the fusion below are worked out once.
A plan owns sets of temporaries (typed NumPy arrays for the reductions, their byte views
and addresses); a call takes one set from the plan's free list and puts it back, so two
calls running at once (threads, or a collective inside a progress callback) never share
one.  Reductions call the ufunc of the reducer the executor uses
(``kernels.reduce.resolve``: same ufunc, same NumPy type, same operand order) on typed
views; ``MINLOC``/``MAXLOC`` on pair types, which have no ufunc, call the reducer's host
function on bytes.  A ``COPY x -> d`` followed by ``RED t -> d`` runs as ``d = x op t``
in one pass, as the executor fuses it; recursive doubling's opening copy of the send
buffer is left out altogether (``_elide_copy``).  A one-element in-place ufunc call,
which NumPy runs three times slower than a three-operand one, writes a scratch element
that is copied back.
"""

from __future__ import annotations

import numpy as np

from .. import _compiled
from .. import _runtime as _rt
from .._arrays import (DATATYPE_BY_DTYPE_ID, NP_C_CONTIGUOUS, NP_WRITEABLE, PEEK_DATA, PEEK_FLAGS, PEEK_OK,
                       lookup_dtype, ndarray_addr_flags)
from .._p2p import signature as _sig
from .._xfer import FREED, SENT, threads as _threads
from .._protocol import DEFAULT_EAGER, receive_error
from ..constants import COMBINER_NAMED, IN_PLACE
from ..datatypes._core import Datatype
from ..errors import ERR_COUNT, ERR_OTHER, ERR_TRUNCATE, ERR_TYPE, error
from ..errors import Exception as MPIException
from ..ipc import fastring as _F
from ..op import OP_NULL_HANDLE, SUM, Op
from . import _calls
from .schedule import COPY, RBUF, RECV, RED, SBUF, SEND, TMP

__all__ = ["ENABLED", "MAX_BYTES", "allgather", "allreduce", "alltoall", "barrier", "bcast", "compiled_methods", "reduce",
           "resume"]

#: False: every call takes the executor (tests mix the two paths across ranks with it)
ENABLED = True
#: the job has ranks on other nodes (an MPI launcher's): a communicator over several nodes leaves
#: these calls to the general path, whose schedules are hierarchical (``_calls._nodes_of``)
FAR = False
#: the largest buffer (bytes) this path takes
MAX_BYTES = DEFAULT_EAGER

_ND = np.ndarray
_U8 = np.uint8
_SOFT = (ERR_TRUNCATE, ERR_COUNT, ERR_TYPE)
_EMPTY = memoryview(bytearray())
_RED3 = "red3"  # a local step of compiled plans only: COPY x -> d fused with RED t -> d
_XRED = "xred"  # a schedule step of _elide_copy's rewrite only

_PLANS: dict = {}
_PLANS_MAX = 512


# --- arguments ---------------------------------------------------------------------------------


def _host(spec, write: bool):
    """``(array, datatype, address)`` of a buffer spec this path takes, else None."""
    t = type(spec)
    if t is _ND:
        a = spec
        dt = DATATYPE_BY_DTYPE_ID.get(id(a.dtype))
        if dt is None and (a.dtype.isbuiltin != 1 or (dt := _infer(a.dtype)) is None or not _ok(dt)):
            return None
    elif t is list or t is tuple:
        if len(spec) != 2:
            return None
        a, dt = spec
        if (type(a) is not _ND or (type(dt) is not Datatype and not isinstance(dt, Datatype))
                or (dt._rec not in _OK and not _ok(dt)) or a.nbytes % dt._size):
            return None
    else:
        return None
    if PEEK_OK:
        i = id(a) >> 3
        addr, fl = PEEK_DATA[i], PEEK_FLAGS[i]
    else:
        addr, fl = ndarray_addr_flags(a)
    if not fl & NP_C_CONTIGUOUS or (write and not fl & NP_WRITEABLE):
        return None
    return a, dt, addr


_OK: set = set()  # handle records of the datatypes this path takes (predefined: they live for ever)


def _ok(dt) -> bool:
    """A predefined contiguous datatype (remembered in ``_OK``)."""
    size = dt._size
    if dt._combiner != COMBINER_NAMED or not size or size != dt._extent or not dt._contig or dt._rec.freed:
        return False
    _OK.add(dt._rec)
    return True


def _infer(dtype):
    """The datatype ``message_simple`` infers for a builtin NumPy dtype (and now caches), or None."""
    try:
        return lookup_dtype(dtype)
    except Exception:  # noqa: BLE001 - no datatype: the executor raises mpi4py's error
        return None


class _Set:
    """One call's buffers, by schedule buffer id: addresses ``ad``, typed views ``ta`` (for
    reductions) and byte views ``mv`` (made from the user arrays ``arr`` when a step needs
    one: ``_mv``; the compiled engine calls take addresses); ids from ``TMP`` on are the
    plan's temporaries."""

    __slots__ = ("arr", "mv", "ta", "ad", "sc", "scmv", "cb", "cba")

    def __init__(self, tmp_units, unit: int, npdt) -> None:
        self.arr, self.mv, self.ta, self.ad = [None, None], [None, None], [None, None], [0, 0]
        for units in tmp_units:
            t = np.empty(units, npdt) if npdt is not None else np.empty(units * unit, _U8)
            self.ta.append(t)
            self.mv.append(memoryview(t).cast("B"))
            self.ad.append(ndarray_addr_flags(t)[0])
        self.cb = np.array(self.ad, dtype=np.int64)  # the addresses again, for a compiled program
        self.cba = self.cb.ctypes.data
        self.sc = np.empty(1, npdt) if npdt is not None else None  # the one-element scratch
        self.scmv = memoryview(self.sc).cast("B") if npdt is not None else None


class _Plan:
    """A schedule compiled for this path: ``rounds`` of ``(sends, recvs, locals)``.

    sends ``(peer, buf, b0, b1, whole)``, recvs ``(peer, buf, b0, b1, whole, exchange)``
    (byte ranges; ``whole``: the buffer's whole view); locals ``(COPY, sb, s, db, d)``
    (byte slices), ``(RED, sb, s, db, d, one)`` and ``(red3, xb, x, tb, t, db, d)`` (slices
    of the typed views ``ta``), a slice None meaning the whole buffer; ``one``: the byte
    slice of a single-element destination (it goes through the scratch element), or None."""

    __slots__ = ("rounds", "tmp", "unit", "sig", "npdt", "uf", "host", "free", "typed_s", "typed_r", "prog",
                 "proga", "nsteps", "resume", "rtype", "rop", "cw", "cring", "cma")

    def __init__(self, sched, unit: int, total: int, sig: int, red=None) -> None:
        self.tmp, self.unit, self.sig, self.free = sched.tmp, unit, sig, []
        self.prog = self.resume = self.cw = self.cring = None
        self.rtype = self.rop = self.proga = self.nsteps = self.cma = -1
        uf = None
        if red is not None and red.dtype is not None and red.host3 is not None:
            from ..kernels.reduce import UFUNCS

            uf = UFUNCS.get(red.name)
        self.uf = uf
        self.npdt = red.dtype if uf is not None else None
        self.host = red.host if red is not None else None
        # elements of the typed views per schedule unit (ufunc: one; bytes: the unit)
        per = 1 if uf is not None else unit
        sizes = {SBUF: total, RBUF: total}
        for k, units in enumerate(sched.tmp):
            sizes[TMP + k] = units * unit
        typed = set()
        rounds = []

        def part(b, lo, n):  # elements [lo, lo + n) of typed view b: None for all of it
            return None if lo == 0 and n * per == sizes[b] // unit * per else slice(lo * per, (lo + n) * per)

        for rnd in (_elide_copy(list(sched.rounds), total // unit) if uf is not None and total else sched.rounds):
            sends, recvs, locs = [], [], []
            speers = {st[1] for st in rnd if st[0] is SEND} if len(rnd) > 1 else ()
            skip = -1
            for i, st in enumerate(rnd):
                t = st[0]
                if t is SEND or t is RECV:
                    _, peer, b, lo, hi = st
                    b0, b1 = lo * unit, hi * unit
                    whole = b0 == 0 and b1 == sizes[b]
                    if t is SEND:
                        sends.append((peer, b, b0, b1, whole))
                    else:
                        recvs.append((peer, b, b0, b1, whole, peer in speers))
                elif i == skip:
                    continue
                elif t is COPY:
                    _, sb, slo, db, dlo, n = st
                    if not n:
                        continue
                    nxt = rnd[i + 1] if i + 1 < len(rnd) else None
                    if uf is not None and nxt is not None and nxt[0] is RED and _fusable(st, nxt):
                        _, tb, tlo, _, _, _, _ = nxt
                        locs.append((_RED3, sb, part(sb, slo, n), tb, part(tb, tlo, n), db, part(db, dlo, n)))
                        typed.update((sb, tb, db))
                        skip = i + 1
                        continue
                    s0, d0, nb = slo * unit, dlo * unit, n * unit
                    whole = s0 == 0 and d0 == 0 and nb == sizes[sb] == sizes[db]
                    locs.append((COPY, sb, None if whole else slice(s0, s0 + nb), db,
                                 None if whole else slice(d0, d0 + nb)))
                elif t is _XRED:
                    _, ab, alo, bb, blo, db, dlo, n = st
                    locs.append((_RED3, ab, part(ab, alo, n), bb, part(bb, blo, n), db, part(db, dlo, n)))
                    typed.update((ab, bb, db))
                elif t is RED:
                    _, sb, slo, db, dlo, n, _ = st
                    if not n:
                        continue
                    one = slice(dlo * unit, (dlo + 1) * unit) if uf is not None and n == 1 else None
                    locs.append((RED, sb, part(sb, slo, n), db, part(db, dlo, n), one))
                    typed.update((sb, db))
            rounds.append((tuple(sends), tuple(recvs), tuple(locs)))
        self.rounds = tuple(rounds)
        self.typed_s, self.typed_r = SBUF in typed, RBUF in typed
        if red is None or uf is not None:
            self._program(sizes, red)

    def _program(self, sizes: dict, red) -> None:
        """The rounds as a program of :func:`gpumpi.ipc.fastring.rounds` (``prog``; ``resume[i]``:
        the round and the number of its sends done when step ``i`` is the first not done), where
        every round has at most one receive and the reduction, if any, is one it runs."""
        if red is not None:
            npdt = self.npdt
            if not npdt.isnative or npdt.str[1:] not in _F.RTYPES or red.name not in _F.ROPS:
                return
            self.rtype, self.rop = _F.RTYPES.index(npdt.str[1:]), _F.ROPS.index(red.name)
            isz = npdt.itemsize
        steps, resume = [], []
        for k, (sends, recvs, locs) in enumerate(self.rounds):
            if len(recvs) > 1:
                return
            for j, (peer, b, b0, b1, _) in enumerate(sends):
                steps.append((_F.SEND, peer, b, b0, b1 - b0, 0, 0, 0))
                resume.append((k, j))
            for peer, b, b0, b1, _, _ in recvs:
                steps.append((_F.RECV, peer, b, b0, b1 - b0, 0, 0, 0))
                resume.append((k, len(sends)))
            for st in locs:
                t = st[0]
                if t is COPY:
                    _, sb, ss, db, ds = st
                    n = sizes[sb] if ss is None else ss.stop - ss.start
                    steps.append((_F.COPY, sb, 0 if ss is None else ss.start, db, 0 if ds is None else ds.start, n, 0,
                                  0))
                else:  # element slices of the typed views: d = x op y
                    if t is _RED3:
                        _, xb, xs, yb, ys, db, ds = st
                    else:
                        _, xb, xs, db, ds, _ = st
                        yb, ys = db, ds
                    n = sizes[db] // isz if ds is None else ds.stop - ds.start
                    steps.append((_F.RED, xb, 0 if xs is None else xs.start * isz, yb, 0 if ys is None else ys.start * isz,
                                  db, 0 if ds is None else ds.start * isz, n))
                resume.append(None)  # a local step is never left undone
        self.prog = np.array(steps, dtype=np.int64).reshape(len(steps), _F.STEP)
        self.proga, self.nsteps = self.prog.ctypes.data, len(steps)
        self.resume = resume

    def take(self) -> _Set:
        """A set of temporaries for one call (the caller puts it back on ``free``)."""
        try:
            return self.free.pop()
        except IndexError:
            return _Set(self.tmp, self.unit, self.npdt)


def _elide_copy(rounds: list, n: int) -> list:
    """Recursive doubling's opening, ``COPY SBUF -> RBUF`` alone in a round and then ``SEND
    RBUF, RECV t, RED t -> RBUF``, without the copy: the send reads SBUF (the same bytes)
    and the reduction writes ``RBUF = t op SBUF`` (the executor's operand order) in one pass
    (a schedule-level ``_XRED`` step, ``(_XRED, a, alo, b, blo, d, dlo, n)``: ``d = a op b``)."""
    for k in range(len(rounds) - 1):
        if rounds[k] != ((COPY, SBUF, 0, RBUF, 0, n),) or len(rounds[k + 1]) != 3:
            continue
        snd, rcv, red = rounds[k + 1]
        if (snd[0] is SEND and snd[2:] == (RBUF, 0, n) and rcv[0] is RECV and rcv[2] >= TMP
                and rcv[3:] == (0, n) and red[0] is RED and red[1:6] == (rcv[2], 0, RBUF, 0, n)):
            one = ((SEND, snd[1], SBUF, 0, n), rcv, (_XRED, rcv[2], 0, SBUF, 0, RBUF, 0, n))
            return rounds[:k] + [one] + rounds[k + 2:]
    return rounds


def _fusable(cp, red) -> bool:
    """The executor's ``Run._fused`` conditions (commutative operations only come here)."""
    _, xb, xlo, db, dlo, n = cp
    _, tb, tlo, db2, dlo2, n2, _ = red
    return db2 == db and dlo2 == dlo and n2 == n and tb != db and xb != db


def _keep(key, p: _Plan) -> _Plan:
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[key] = p
    return p


def _typed(a, npdt):
    """A 1-D view of array ``a``'s bytes as ``npdt`` elements (None: bytes)."""
    if a.ndim == 1 and a.dtype is npdt:
        return a
    return a.reshape(-1).view(_U8 if npdt is None else npdt)


# --- the run -------------------------------------------------------------------------------------


def _go(p: _Plan, comm, call: str, ws: _Set, ra=None, sa=None) -> bool:
    """Carry out plan ``p`` on the user's arrays ``ra`` (receive) and ``sa`` (send), whose
    addresses are in ``ws.cb``: the compiled program as far as it goes, where nothing else is
    pending on the engine and no other thread runs, and :func:`_run` the rest; True when the
    compiled program ran (all of it or a part)."""
    tag = None
    k = s0 = 0
    r = _start(p, comm, ws)
    if r is not None:
        tag, i = r
        if i < 0:
            p.free.append(ws)
            return True
        k, s0 = p.resume[i]
    _fill(p, ws, ra, sa)
    _run(p, comm, call, ws, tag, k, s0)
    return tag is not None


def _start(p: _Plan, comm, ws: _Set, rarr: int = 0, rwant: int = 0, sarr: int = 0):
    """Run plan ``p``'s compiled program on ``ws`` as far as it goes (``rarr``/``sarr``: the
    object addresses of arrays whose data addresses it takes into ``ws.cb`` after checking their
    flags, ``fastring.rounds``): ``(tag, i)``, ``i`` -1 when it did everything, else the first
    step it did not do; None, nothing done, where the engine cannot run it now (not compiled, no
    program, another thread, a receive or message pending on the context, queued frames or
    other duties) or an array's flags refused (the tag is given back)."""
    eng = _rt.ENGINE
    fr = eng.frounds
    if fr is None or p.prog is None or _threads():
        return None
    ctx = comm._ctx + 1
    q = eng.matcher._ctx.get(ctx)  # Engine._fast_clear, inline (a hot path)
    if (q is not None and (q.posted or q.unexpected)) or eng.tr.nbacklog or eng.pushing or eng.ready or eng.failed:
        return None
    w = comm._w
    if p.cw is not w or p.cring is not eng.fring:
        _cmap(p, w, eng)
    if not p.cma:  # members on other nodes: the compiled program reaches only this node's rings
        return None
    tag = comm._ctag()
    i = fr(eng.ftab_a, p.cma, comm._size, p.proga, p.nsteps, 0, ws.cba, rarr, rwant, sarr, NP_C_CONTIGUOUS, comm._rank,
           ctx, tag, p.sig, p.rtype, p.rop, eng.spin_first, eng.epoch, eng.fout_a)
    if i == -2:
        comm._ctag_back()
        return None
    return tag, i


def _fill(p: _Plan, ws: _Set, ra, sa) -> None:
    """Give ``ws`` what :func:`_run` works on besides the addresses in ``ws.cb``: the
    addresses as ints, the user's arrays and their typed views."""
    ad = ws.ad
    ad[RBUF], ad[SBUF] = int(ws.cb[RBUF]), int(ws.cb[SBUF])
    if ra is not None:
        ws.arr[RBUF] = ra
        if p.typed_r:
            ws.ta[RBUF] = _typed(ra, p.npdt)
    if sa is not None:
        ws.arr[SBUF] = sa
        if p.typed_s:
            ws.ta[SBUF] = _typed(sa, p.npdt)


_CMAPS: dict = {}


def _cmap(p: _Plan, w: tuple, eng) -> None:
    """Give plan ``p`` the compiled program's view of a communicator of world ranks ``w``
    (``cma``: the address of an int64 array of out-ring addresses, row 0, and world ranks,
    row 1, by communicator rank), kept per ``w`` in ``_CMAPS`` and as the plan's last; ``cma``
    0 when a member is on another node (the program then never runs: :func:`_run` serves)."""
    if eng.far and not eng.far.isdisjoint(w):
        p.cw, p.cring, p.cma = w, eng.fring, 0
        return
    e = _CMAPS.get(id(w))
    if e is None or e[0] is not w or e[1] is not eng.fring:
        m = np.array([[eng.fring[r] for r in w], list(w)], dtype=np.int64)
        if len(_CMAPS) >= _PLANS_MAX:
            _CMAPS.clear()
        e = _CMAPS[id(w)] = (w, eng.fring, m)
    p.cw, p.cring, p.cma = w, eng.fring, e[2].ctypes.data


def _run(p: _Plan, comm, call: str, ws: _Set, tag=None, k0: int = 0, s0: int = 0) -> None:
    """Carry out plan ``p`` on buffers ``ws`` (the module docstring) from round ``k0``, whose
    first ``s0`` sends are done (and ``tag`` taken); raises the run's error."""
    eng = _rt.ENGINE
    sig = p.sig
    if tag is None:
        tag = comm._ctag()
    w = comm._w
    rank = comm._rank
    ctx = comm._ctx + 1
    ad = ws.ad
    errs = fatal = fs = None
    send_fast, recv_fast = eng.send_fast, eng.recv_fast
    try:
        for sends, recvs, locs in (p.rounds[k0:] if k0 else p.rounds):
            if s0:
                sends, s0 = sends[s0:], 0
            late = None
            for peer, b, b0, b1, whole in sends:
                s = sig if fs is None else fs.get(b, sig)
                if send_fast(w[peer], rank, ctx, tag, ad[b] + b0, b1 - b0, s):
                    continue
                x = eng.isend([_mv(ws, b) if whole else _mv(ws, b)[b0:b1]], b1 - b0, w[peer], rank, tag, ctx, 0,
                              call, (ad[b] + b0,), s)
                if x is not SENT:
                    if not x.done:
                        late = [x] if late is None else late + [x]
                    elif x.err and fatal is None:
                        fatal = (x.err, x.errmsg or f"{call}: failed")
            if len(recvs) == 1:
                peer, b, b0, b1, whole, _ = recvs[0]
                n = b1 - b0
                o = recv_fast(peer, w[peer], tag, ctx, ad[b] + b0, n, 0)
                if o is not None:  # an eager message of at most n bytes, written (source, tag, bytes, sig)
                    _, _, got, msig = o.tolist()
                    if got != n or (msig and (msig != sig or fs is not None)):
                        errs, fatal, fs = _check(0, None, got, msig, b, n, peer, call, sig, errs, fatal, fs, eng)
                else:
                    x = eng.irecv(_mv(ws, b) if whole else _mv(ws, b)[b0:b1], n, peer, w[peer], tag, ctx, call,
                                  ad[b] + b0, 0)
                    if not x.done:
                        eng.wait(x)
                    if x.err or x.st_nbytes != n or (x.msig and (x.msig != sig or fs is not None)):
                        errs, fatal, fs = _check(x.err, x.errmsg, x.st_nbytes, x.msig, b, n, peer, call, sig, errs,
                                                 fatal, fs, eng)
            elif recvs:
                xs = [eng.irecv(_mv(ws, b) if whole else _mv(ws, b)[b0:b1], b1 - b0, peer, w[peer], tag, ctx, call,
                                ad[b] + b0, 0, None, None, exch)
                      for peer, b, b0, b1, whole, exch in recvs]
                for x, (peer, b, b0, b1, _, _) in zip(xs, recvs):
                    if not x.done:
                        eng.wait(x)
                    errs, fatal, fs = _check(x.err, x.errmsg, x.st_nbytes, x.msig, b, b1 - b0, peer, call, sig, errs,
                                             fatal, fs, eng)
            if late is not None:
                for x in late:
                    if not x.done:
                        eng.wait(x)
                    if x.err and fatal is None:
                        fatal = (x.err, x.errmsg or f"{call}: failed")
            if fatal is not None:
                break
            for st in locs:
                try:
                    if st[0] is _RED3:  # d = x op t (the executor's reduce3), the recursive doubling step
                        _, xb, xs, tb, ts, db, ds = st
                        ta = ws.ta
                        x, y, d = ta[xb], ta[tb], ta[db]
                        p.uf(x if xs is None else x[xs], y if ts is None else y[ts], d if ds is None else d[ds])
                    else:
                        _local(p, st, ws)
                except Exception as e:  # noqa: BLE001 - recorded as the executor records it
                    code = e.Get_error_class() if isinstance(e, MPIException) else ERR_OTHER
                    errs = (errs or []) + [(code, f"{call}: {type(e).__name__}: {e}")]
    finally:
        arr, mv, ta = ws.arr, ws.mv, ws.ta
        arr[0] = arr[1] = mv[0] = mv[1] = ta[0] = ta[1] = None
        p.free.append(ws)
    if fatal is not None:
        raise error(*fatal)
    if errs:
        raise error(*errs[0])


def _mv(ws: _Set, b: int):
    """Byte view of buffer ``b`` (made from the user's array on first use in a call)."""
    m = ws.mv[b]
    if m is None:
        m = ws.mv[b] = memoryview(ws.arr[b]).cast("B")
    return m


def _local(p: _Plan, st, ws: _Set) -> None:
    """Run one compiled local step (``_Plan``) on the call's buffers."""
    t = st[0]
    ta = ws.ta
    if t is _RED3:  # d = x op t (the executor's reduce3)
        _, xb, xs, tb, ts, db, ds = st
        x, y, d = ta[xb], ta[tb], ta[db]
        p.uf(x if xs is None else x[xs], y if ts is None else y[ts], d if ds is None else d[ds])
    elif t is RED:  # dst = src op dst, the executor's reduce_packed(op, dt, n, src, dst)
        _, sb, ss, db, ds, one = st
        x, d = ta[sb], ta[db]
        if ss is not None:
            x = x[ss]
        if ds is not None:
            d = d[ds]
        if p.uf is None:
            p.host(x, d)
        elif one is not None:
            p.uf(x, d, ws.sc)
            _mv(ws, db)[one] = ws.scmv
        else:
            p.uf(x, d, d)
    else:
        _, sb, ss, db, ds = st
        if ss is None:
            _mv(ws, db)[:] = _mv(ws, sb)
        else:
            _mv(ws, db)[ds] = _mv(ws, sb)[ss]


def _check(err: int, errmsg, got: int, msig: int, b: int, n: int, peer: int, call: str, sig: int, errs, fatal,
           fs, eng):
    """The executor's ``Run._check`` of a completed receive (its error, bytes and signature
    code): ``(errs, fatal, fs)`` updated."""
    if err:
        if err in _SOFT:
            errs = (errs or []) + [(err, errmsg)]
        elif fatal is None:
            fatal = (err, errmsg or f"{call}: failed")
        return errs, fatal, fs
    if msig:
        fs = {} if fs is None else fs
        fs[b] = msig
    if got != n or msig and sig and msig != sig:
        e = receive_error(call, peer, got, n, msig, sig, eng.typecheck, exact=True)
        if e is not None:
            errs = (errs or []) + [e]
    return errs, fatal, fs


# --- the calls -----------------------------------------------------------------------------------


def barrier(comm) -> bool:
    """MPI_Barrier on intracommunicator ``comm``; False: not taken (a communicator over several nodes)."""
    if FAR and _calls._nodes_of(comm) is not None:
        return False
    m = _LAST_BARRIER
    if comm is m.comm and _run_last(m, comm, "Barrier", None, 0, None):
        return True
    comm._check("Barrier")
    rank, size = comm._rank, comm._size
    key = ("barrier", rank, size)
    p = _PLANS.get(key)
    if p is None:
        p = _keep(key, _Plan(_calls._schedule("barrier", rank, size, unit=1, memory="host"), 1, 0, 0))
    ws = p.free.pop() if p.free else p.take()
    ws.mv[RBUF] = _EMPTY
    if _go(p, comm, "Barrier", ws):  # compiled: the next Barrier on comm goes straight to the program
        m.keep(comm, p, 0, None)
    return True


def bcast(comm, buf, root) -> bool:
    """MPI_Bcast of ``buf`` from ``root`` on intracommunicator ``comm``; False: not taken."""
    if FAR and _calls._nodes_of(comm) is not None:
        return False
    m = _LAST_BCAST
    if comm is m.comm and type(root) is int and root == m.root:
        a = _same(buf, m.rkey, m.n)
        if a is not None and _run_last(m, comm, "Bcast", a, NP_C_CONTIGUOUS if comm._rank == root else _CW, None):
            return True
    rank, size = comm._rank, comm._size
    if type(root) is not int or not 0 <= root < size:
        return False
    h = _host(buf, rank != root)
    if h is None:
        return False
    a, dt, addr = h
    n = a.nbytes
    if n > MAX_BYTES:
        return False
    comm._check("Bcast")
    key = ("bcast", rank, size, n, root, dt._rec)
    p = _PLANS.get(key)
    if p is None:
        p = _keep(key, _Plan(_calls._schedule("bcast", rank, size, unit=1, memory="host", root=root, n=n), 1, n,
                             _sig(dt)))
    ws = p.free.pop() if p.free else p.take()
    ws.cb[RBUF] = addr
    if _go(p, comm, "Bcast", ws, a) and PEEK_OK:  # compiled: remember the kinds of these arguments
        _LAST_BCAST.keep(comm, p, n, _kind(buf), root=root)
    return True


class _Last:
    """The last Allreduce that ran as one compiled call, by identity: its communicator,
    operation and plan, and per buffer the *kind* of its spec (a bare array's NumPy dtype
    object, or a ``[array, datatype]`` list's Datatype object) and byte size.  A call whose
    arguments are of the same kinds has the same plan (the plan key follows from them), so
    it skips parsing and the lookup and checks only what an array may change in place:
    its address, flags, dtype and size.  ``ws`` is a set of temporaries kept for this path
    (taken away while a call runs on :func:`_run`, which may be reentered)."""

    __slots__ = ("comm", "op", "root", "rkey", "skey", "n", "p", "ws")

    def __init__(self) -> None:
        self.comm = self.op = self.rkey = self.skey = self.p = self.ws = None
        self.n = self.root = -1

    def keep(self, comm, p: _Plan, n: int, rkey, skey=None, op=None, root: int = -1) -> None:
        """Remember a call that ran as a compiled program."""
        if self.p is not p or self.ws is None:  # a set of this plan's, for the path alone
            self.ws = p.take()
        self.comm, self.op, self.root, self.n, self.p, self.rkey, self.skey = comm, op, root, n, p, rkey, skey


_LAST = _Last()  # Allreduce's
_LAST_BARRIER = _Last()
_LAST_BCAST = _Last()
_LAST_REDUCE = _Last()
_CW = NP_C_CONTIGUOUS | NP_WRITEABLE


def _same(spec, key, n: int):
    """The array of buffer spec ``spec`` if it is of kind ``key`` (:class:`_Last`) and ``n``
    bytes, else None (its flags are the compiled call's to check)."""
    t = type(spec)
    if t is _ND:
        a = spec
        if a.dtype is not key:
            return None
    elif t is list and len(spec) == 2 and spec[1] is key:
        a = spec[0]
        if type(a) is not _ND:
            return None
    else:
        return None
    return a if a.nbytes == n else None


def _allreduce_last(comm, sendbuf, recvbuf) -> bool:
    """The compiled Allreduce of :class:`_Last` (whose communicator and operation the
    caller matched); False: these arguments are not of its kinds, or the engine cannot run
    the program now (nothing done)."""
    m = _LAST
    n = m.n
    ra = _same(recvbuf, m.rkey, n)
    if ra is None:
        return False
    skey = m.skey
    if skey is None:
        if sendbuf is not IN_PLACE and sendbuf is not None:
            return False
        sa = None
    else:
        sa = _same(sendbuf, skey, n)
        if sa is None:
            return False
    return _run_last(m, comm, "Allreduce", ra, _CW, sa)


def _run_last(m: _Last, comm, call: str, ra, rwant: int, sa) -> bool:
    """Run the plan of ``m`` on arrays ``ra`` (whose flags must have the bits ``rwant``) and
    ``sa`` (C-contiguous; None: not used) as one compiled call, and on :func:`_run` from where
    that stops; False where it cannot run now (no set of temporaries, or :func:`_start`
    declined: nothing done)."""
    ws = m.ws
    if ws is None:
        return False
    p = m.p
    comm._check(call)
    r = _start(p, comm, ws, 0 if ra is None else id(ra), rwant, 0 if sa is None else id(sa))
    if r is None:  # (a flag missing among the reasons: the general route raises what it must)
        return False
    tag, i = r
    if i >= 0:
        resume(m, p, comm, call, ws, ra, sa, tag, i)
    return True


def resume(m: _Last, p: _Plan, comm, call: str, ws: _Set, ra, sa, tag: int, i: int) -> None:
    """The rest of the program of ``m`` (plan ``p``, on ``ws``, arrays ``ra`` and ``sa``, tag
    ``tag``) from step ``i``, the first it did not do, on the general rounds (which a nested call
    may enter: it finds no set of ``m``'s)."""
    m.ws = None
    k, s0 = p.resume[i]
    _fill(p, ws, ra, sa)
    if ra is None:
        ws.mv[RBUF] = _EMPTY  # (Barrier's zero-byte messages)
    try:
        _run(p, comm, call, ws, tag, k, s0)
    finally:
        if m.ws is None and m.p is p:
            m.ws = p.take()


def compiled_methods(cls, names) -> None:
    """Have :mod:`gpumpi._compiled` put the compiled methods ``names`` (of ``Barrier``, ``Bcast``,
    ``Allreduce``, ``Reduce``: ``_gpumpi_fast``'s) on ``cls`` or back the Python ones, as it chooses.  The
    compiled ones run the program of the last call of their kind that ran as one (its
    :class:`_Last`) when the arguments are of the same kinds, by the C entry point of
    ``fastring.rounds``, as :func:`_run_last` does, and hand every other call to the Python
    ones."""
    py = {name: cls.__dict__[name] for name in names}

    def install(m) -> None:
        if m is None:
            for name, fn in py.items():
                setattr(cls, name, fn)
            return
        m.bind_lean(globals(), (_LAST_BARRIER, _LAST_BCAST, _LAST, _LAST_REDUCE), (_Last, _Plan, _Set), _cmap, resume,
                    NP_C_CONTIGUOUS, NP_WRITEABLE, IN_PLACE, SUM, _rt, FREED, _threads, MPIException, py)
        for name, fn in py.items():
            setattr(cls, name, _compiled.dressed(getattr(m, name), fn))

    _compiled.register(install)


def _reduction_buffers(sendbuf, recvbuf):
    """``(ra, raddr, sa, saddr, dt, inplace)`` of a reduction's receive and send buffers where
    this path takes them (the send buffer IN_PLACE or None, or of the receive buffer's datatype
    and size; ``sa`` None when in place), else None."""
    r = _host(recvbuf, True)
    if r is None:
        return None
    ra, dt, raddr = r
    if sendbuf is None or sendbuf is IN_PLACE:
        return ra, raddr, None, 0, dt, True
    s = _host(sendbuf, False)
    if s is None or s[1] is not dt or s[0].nbytes != ra.nbytes:
        return None
    return ra, raddr, s[0], s[2], dt, False


def allreduce(comm, sendbuf, recvbuf, op) -> bool:
    """MPI_Allreduce on intracommunicator ``comm``; False: not taken."""
    if FAR and _calls._nodes_of(comm) is not None:
        return False
    if comm is _LAST.comm and op is _LAST.op and _allreduce_last(comm, sendbuf, recvbuf):
        return True
    if type(op) is not Op and not isinstance(op, Op):
        return False
    c = _reduction_buffers(sendbuf, recvbuf)
    if c is None:
        return False
    ra, raddr, sa, saddr, dt, inplace = c
    n = ra.nbytes
    rank, size = comm._rank, comm._size
    # a plan exists only for a predefined operation's handle, which no other operation has
    key = ("allreduce", rank, size, n, dt._rec, op._h, inplace)
    p = _PLANS.get(key)
    if p is None:
        if n > MAX_BYTES or op._rec is not None or op._h == OP_NULL_HANDLE or not op._commute:
            return False
        try:
            p = _keep(key, _allreduce_plan(rank, size, n, dt, op, inplace))
        except Exception:  # noqa: BLE001 - not defined for the type...: the executor raises it
            return False
    comm._check("Allreduce")
    ws = p.free.pop() if p.free else p.take()
    cb = ws.cb
    cb[RBUF] = raddr
    if not inplace:
        cb[SBUF] = saddr
    if _go(p, comm, "Allreduce", ws, ra, sa) and PEEK_OK:  # compiled: remember the kinds of these arguments
        _LAST.keep(comm, p, n, _kind(recvbuf), None if inplace else _kind(sendbuf), op)
    return True


def _exchange(comm, sendbuf, recvbuf, coll: str, call: str) -> bool:
    """MPI_Allgather (``coll`` "allgather": this rank's block of the receive buffer from the send
    buffer) or MPI_Alltoall ("alltoall": a send buffer as large as the receive buffer) of small
    host arrays on intracommunicator ``comm``; False: not taken.  The send buffer IN_PLACE (or
    None), or of the bytes the executor would take as they are (its datatype may differ: the
    messages carry the receive datatype's signature code, as the executor's)."""
    if FAR and _calls._nodes_of(comm) is not None:
        return False
    h = _host(recvbuf, True)
    if h is None:
        return False
    ra, dt, raddr = h
    n = ra.nbytes
    rank, size = comm._rank, comm._size
    if n > MAX_BYTES or n % (size * dt._size):
        return False
    inplace = sendbuf is None or sendbuf is IN_PLACE
    sa, saddr = None, 0
    if not inplace:
        s = _host(sendbuf, False)
        if s is None or s[0].nbytes != (n // size if coll == "allgather" else n):
            return False  # (another size: the executor reports or resizes it)
        sa, saddr = s[0], s[2]
    comm._check(call)
    key = (coll, rank, size, n, inplace, dt._rec)
    p = _PLANS.get(key)
    if p is None:  # (the schedule's n is one rank's block, as the executor gives it)
        p = _keep(key, _Plan(_calls._schedule(coll, rank, size, unit=1, memory="host", n=n // size, inplace=inplace),
                             1, n, _sig(dt)))
    ws = p.free.pop() if p.free else p.take()
    cb = ws.cb
    cb[RBUF] = raddr
    if not inplace:
        cb[SBUF] = saddr
    _go(p, comm, call, ws, ra, sa)
    return True


def allgather(comm, sendbuf, recvbuf) -> bool:
    """MPI_Allgather on intracommunicator ``comm``; False: not taken."""
    return _exchange(comm, sendbuf, recvbuf, "allgather", "Allgather")


def alltoall(comm, sendbuf, recvbuf) -> bool:
    """MPI_Alltoall on intracommunicator ``comm``; False: not taken."""
    return _exchange(comm, sendbuf, recvbuf, "alltoall", "Alltoall")


def _kind(spec):
    """A spec's kind (:class:`_Last`): a bare array's dtype object or a list's datatype."""
    return spec.dtype if type(spec) is _ND else spec[1]


def reduce(comm, sendbuf, recvbuf, op, root) -> bool:
    """MPI_Reduce to ``root`` on intracommunicator ``comm``; False: not taken (the receive
    buffer counts at the root only, as the executor reads it)."""
    if FAR and _calls._nodes_of(comm) is not None:
        return False
    m = _LAST_REDUCE
    if comm is m.comm and op is m.op and type(root) is int and root == m.root:
        ra = sa = None
        if comm._rank == root:
            ra = _same(recvbuf, m.rkey, m.n)
            ok = ra is not None
        else:
            ok = True
        if ok and m.skey is not None:
            sa = _same(sendbuf, m.skey, m.n)
            ok = sa is not None
        elif ok:
            ok = sendbuf is IN_PLACE or sendbuf is None
        if ok and _run_last(m, comm, "Reduce", ra, _CW, sa):
            return True
    if type(op) is not Op and not isinstance(op, Op):
        return False
    rank, size = comm._rank, comm._size
    if type(root) is not int or not 0 <= root < size:
        return False
    ra = sa = None
    inplace = False
    if rank == root:
        c = _reduction_buffers(sendbuf, recvbuf)
        if c is None:
            return False
        ra, raddr, sa, saddr, dt, inplace = c
        n = ra.nbytes
    else:
        if sendbuf is None or sendbuf is IN_PLACE:
            return False
        h = _host(sendbuf, False)
        if h is None:
            return False
        sa, dt, saddr = h
        n = sa.nbytes
    key = ("reduce", rank, size, n, dt._rec, op._h, root, inplace)
    p = _PLANS.get(key)
    if p is None:
        if n > MAX_BYTES or op._rec is not None or op._h == OP_NULL_HANDLE or not op._commute:
            return False
        try:
            p = _keep(key, _reduce_plan(rank, size, n, dt, op, root, inplace))
        except Exception:  # noqa: BLE001 - not defined for the type...: the executor raises it
            return False
    comm._check("Reduce")
    ws = p.free.pop() if p.free else p.take()
    cb = ws.cb
    if ra is not None:
        cb[RBUF] = raddr
    if sa is not None:
        cb[SBUF] = saddr
    if _go(p, comm, "Reduce", ws, ra, sa) and PEEK_OK:  # compiled: remember the kinds of these arguments
        _LAST_REDUCE.keep(comm, p, n, _kind(recvbuf) if ra is not None else None,
                          _kind(sendbuf) if sa is not None else None, op, root)
    return True


def _reduce_plan(rank: int, size: int, n: int, dt, op, root: int, inplace: bool) -> _Plan:
    """The executor's Reduce schedule (``_calls.reduce``: the same arguments to ``_schedule``)."""
    from ..kernels.reduce import resolve

    red = resolve(op._name, dt, "Reduce")
    units = (n // dt._size) * red.per
    sched = _calls._schedule("reduce", rank, size, unit=red.unit, memory="host", n=units, commute=True, root=root,
                             inplace=inplace)
    return _Plan(sched, red.unit, n, _sig(dt), red)


def _allreduce_plan(rank: int, size: int, n: int, dt, op, inplace: bool) -> _Plan:
    from ..kernels.reduce import resolve

    red = resolve(op._name, dt, "Allreduce")
    units = (n // dt._size) * red.per
    sched = _calls._schedule("allreduce", rank, size, unit=red.unit, memory="host", n=units, commute=True,
                             inplace=inplace)
    return _Plan(sched, red.unit, n, _sig(dt), red)


def _note_far(eng) -> None:
    global FAR
    FAR = bool(eng.far)


_rt.on_init(_note_far)
if _rt.ENGINE is not None:
    _note_far(_rt.ENGINE)
