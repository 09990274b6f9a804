"""Compiled frames between nodes: the small-message fast path of the ``mpi`` transport (L4).

Theory of operation
===================
A small message to a rank of another node costs the Python engine what it costs to a rank
of this node (a dozen calls on each side) plus mpi4py's calls; next to mpi4py's own
``Send``/``Recv`` that is several times its latency.  This module is the compiled
counterpart of :mod:`gpumpi.ipc.fastring` for :class:`gpumpi.ipc.mpi.MpiFrames`: Numba
functions (``nogil``, cached on disk) that call the MPI library's C functions through their
addresses (taken from the library mpi4py loaded), on the same MPI requests and buffers as
the Python code, with the same frame format, so frames sent here are read there and the
other way round:

* :func:`send` writes one EAGER frame (the 32-byte header of :mod:`gpumpi._protocol`, no
  flags, and its payload) into one of ``NSEND`` send slots and starts ``MPI_Isend`` of it
  to the peer (tag ``TAG_FRAME``, like every frame).  A slot is reused once its send
  completed (``MPI_Test``); when the next slot's send is still going, or the frame is
  larger than a slot, it reports that nothing was done and the caller takes the engine's
  path.  MPI's non-overtaking rule orders these frames with the Python code's frames to
  the same peer (same communicator, same tag, sent by one thread in program order).
* :func:`recv` takes the next frame from another node only if it is exactly what the
  caller's receive would match first -- the rule of ``fastring.recv``: the frame receives
  are persistent requests (``MPI_Recv_init``, ANY_SOURCE) consumed in the order they were
  started, and the first one is looked at without completing it
  (``MPI_Request_get_status``); only an EAGER frame, no flags, from the wanted source on the
  wanted context with an accepted tag, that fits and has a compatible signature, is
  completed (``MPI_Test``), copied to the destination and its receive restarted
  (``MPI_Start``), and the ring position (``rctl[0]``) moves on.  The source of a receive
  seen complete is kept in ``rctl[1]`` (+1), because MPICH's ``MPI_Test`` of a persistent
  request after ``MPI_Request_get_status`` saw it complete returns an empty status.  Anything else is left as
  it is (OTHER): the Python poll completes it with ``Test`` as if this module did not
  exist.  The rings of this node are watched too: for a wildcard receive they are read
  first (``fastring``'s receive, one round), for a receive from another node a frame in
  them that wants an answer (anything but a plain eager message) ends the spin (OTHER).
  A spin that found nothing for ``budget`` rounds returns EMPTY; a change of the job's
  failure epoch, EPOCH.

The table ``mt`` (int64; the entry points take its address, and the ring table's and the
result array's) holds the MPI functions' addresses, the handles and the shared
buffers' addresses (:data:`MT` names its rows).  Handles of 4 bytes (MPICH's ABI) and of
8 (pointers: Open MPI, the MPI 5 ABI) are both served: ``hw`` says which.

Numba is imported on first use (:func:`kernels`), never at ``import gpumpi``.
"""

from __future__ import annotations

import threading

from . import fastring as _F

EMPTY, GOT, OTHER, EPOCH = _F.EMPTY, _F.GOT, _F.OTHER, _F.EPOCH

#: rows of the table ``mt``
MT = ("isend", "test", "start", "getstatus", "irecv", "hw", "comm", "byte", "reqnull", "soff", "nrecv", "rbuf",
      "fmax", "hreq", "rctl", "nsend", "sbuf", "slot", "sreq", "sctl", "status", "flag", "count", "tag", "dtag",
      "span", "chunk", "ident", "dreq", "aux")
(_ISEND, _TEST, _START, _GETST, _IRECV, _HW, _COMM, _BYTE, _REQNULL, _SOFF, _NRECV, _RBUF, _FMAX, _HREQ, _RCTL,
 _NSEND, _SBUF, _SLOT, _SREQ, _SCTL, _STATUS, _FLAG, _COUNT, _TAGF, _DTAG, _SPAN, _CHUNK, _IDENT,
 _DREQ, _AUX) = range(len(MT))
NMT = len(MT)
#: recv/push result: the data's MPI request is still going (its handle where the caller said: ``dreq``)
PENDING = 4
_RTS = 2
_PUSHED = 2 | 128  # FLAG_OFFER | FLAG_PUSHED

_HLEN = 32
_EAGER = 1
_SIG_SHIFT = 48
_ANY_SOURCE = -2
_ANY_TAG = -1
CTRL = _F.CTRL

_LOCK = threading.Lock()
_K = None
_C = None

# intrinsics (fastring's, and the calls of MPI functions by address), set by _build()
_ld64a = _ld64 = _ld32 = _ld16 = _ld8 = _ldi32 = _st64 = _st32 = _st16 = _st8 = _memcpy = _pause = _peek = None
_accept = _recv1 = None
_isend4 = _isend8 = _test = _start = _getst4 = _getst8 = _irecv4 = _irecv8 = None
_frame = _busy = _finish = _send = _recv = _push = _carray = _pi8 = None


def kernels():
    """``(send, recv, push)``: the compiled functions' entry points (imports numba; compiles them, or
    loads them from the disk cache, on first use; builds :mod:`fastring` first)."""
    global _K
    if _K is None:
        with _LOCK:
            if _K is None:
                _K = _build()
    return _K


def c_entries():
    """``(send, recv)``: addresses of C entry points of :func:`kernels`' ``send`` and ``recv`` (the
    same arguments), for the compiled layer (:mod:`gpumpi._compiled`): Numba ``cfunc`` builds
    of the same code, compiled on first use (or loaded from the disk cache)."""
    global _C
    kernels()
    if _C is None:
        with _LOCK:
            if _C is None:
                _C = (_F._cfunc(_j_send_a, "int64(" + ", ".join(["int64"] * 8) + ")").address,
                      _F._cfunc(_j_recv_a, "int64(" + ", ".join(["int64"] * 13) + ")").address)
    return _C


def _callers():
    """Intrinsics calling a C function by address: ``call(fp, a1, ...)`` -> int64 (the int
    result); each argument is an int64 passed as a pointer (``p``), an ``int`` (``i``), or a
    handle of 4 (``h``) or 8 bytes (``H``)."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
    lty = {"p": i8p, "i": i32, "h": i32, "H": i64}

    def gen(kinds):
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(i32, [lty[k] for k in kinds])
            fp = builder.inttoptr(args[0], fnty.as_pointer())
            cargs = []
            for a, k in zip(args[1:], kinds):
                if k == "p":
                    cargs.append(builder.inttoptr(a, i8p))
                elif k == "H":
                    cargs.append(a)
                else:
                    cargs.append(builder.trunc(a, i32))
            return builder.sext(builder.call(fp, cargs), i64)

        return codegen

    def make(kinds):
        sig = types.int64(*([types.int64] * (len(kinds) + 1)))
        cg = gen(kinds)
        n = len(kinds)
        if n == 1:
            def typer(typingctx, fp, a):
                return sig, cg
        elif n == 3:
            def typer(typingctx, fp, a, b, c):
                return sig, cg
        else:
            def typer(typingctx, fp, a, b, c, d, e, f, g):
                return sig, cg
        return intrinsic(typer)

    return (make("pihiihp"), make("piHiiHp"), make("ppp"), make("p"), make("hpp"), make("Hpp"))


def _build():
    global _ld64a, _ld64, _ld32, _ld16, _ld8, _ldi32, _st64, _st32, _st16, _st8, _memcpy, _pause, _peek, _accept
    global _recv1
    global _isend4, _isend8, _test, _start, _getst4, _getst8, _irecv4, _irecv8, _frame, _busy, _finish
    _F.kernels()
    _ld64a, _ld64, _ld32, _ld16, _ld8, _ldi32 = _F._ld64a, _F._ld64, _F._ld32, _F._ld16, _F._ld8, _F._ldi32
    _st64, _st32, _st16, _st8 = _F._st64, _F._st32, _F._st16, _F._st8
    _memcpy, _pause, _peek, _accept, _recv1 = _F._memcpy, _F._pause, _F._peek, _F._accept, _F._recv1
    _isend4, _isend8, _test, _start, _getst4, _getst8 = _callers()
    _irecv4, _irecv8 = _isend4, _isend8  # the same C signature
    _frame = _F._jit(_j_frame, "int64(" + ", ".join(["int64[::1]"] + ["int64"] * 10) + ")")
    _busy = _F._jit(_j_busy, "boolean(int64[::1], int64[::1], int64)")
    _finish = _F._jit(_j_finish, "int64(int64[::1], int64[::1], int64, int64, int64)")
    global _send, _recv, _push, _carray, _pi8
    _carray, _pi8 = _F._carray, _F._pi8
    _send = _F._jit(_j_send, "int64(int64[::1], int64, int64, int64, int64, int64, int64, int64)")
    _recv = _F._jit(_j_recv, "int64(int64[::1], int64[::1], int64, int64, int64, int64, int64, int64, int64, int64, "
                             "int64, int64[::1], int64)")
    _push = _F._jit(_j_push, "int64(int64[::1], int64[::1], int64, int64, int64, int64, int64, int64, int64, int64, "
                             "int64, int64, int64)")
    # the entry points take the tables and the result array by address: an array argument
    # costs a call about 60 ns to unpack (fastring.rounds)
    i64 = ", ".join(["int64"] * 13)
    send = _F._jit(_j_send_a, "int64(" + ", ".join(["int64"] * 8) + ")")
    recv = _F._jit(_j_recv_a, "int64(" + i64 + ")")
    push = _F._jit(_j_push_a, "int64(" + i64 + ")")
    return tuple(f.get_overload(f.signatures[0]) for f in (send, recv, push))


def _j_send_a(mta, peer, src, ctx, tag, sig, paddr, plen):
    return _send(_carray(_pi8(mta), NMT), peer, src, ctx, tag, sig, paddr, plen)


def _j_recv_a(mta, taba, want, ctx, src, tag, sig, dst, cap, budget, epoch, outa, dreq):
    return _recv(_carray(_pi8(mta), NMT), _carray(_pi8(taba), 3 + 2 * _ld64(taba + 16)), want, ctx, src, tag, sig,
                 dst, cap, budget, epoch, _carray(_pi8(outa), 4), dreq)


def _j_push_a(mta, taba, peer, src, ctx, tag, sig, paddr, plen, msgid, budget, epoch, dreq):
    return _push(_carray(_pi8(mta), NMT), _carray(_pi8(taba), 3 + 2 * _ld64(taba + 16)), peer, src, ctx, tag, sig,
                 paddr, plen, msgid, budget, epoch, dreq)


# -- the compiled functions (plain Python here; compiled by _build) ---------------------------------


def _j_frame(mt, peer, kind, flags, src, ctx, tag, wire, msgid, paddr, plen):
    """Send a frame of header and ``plen`` bytes from ``paddr`` to ``peer`` from the next send
    slot: 1; 0 when it is larger than a slot or the slot's last send is still going (nothing
    done); -1 when MPI failed (nothing sent)."""
    n = _HLEN + plen
    if n > mt[_SLOT]:
        return 0
    hw = mt[_HW]
    k = _ld64(mt[_SCTL])
    slot = k % mt[_NSEND]
    raddr = mt[_SREQ] + slot * hw
    hv = _ldi32(raddr) if hw == 4 else _ld64(raddr)
    if hv != mt[_REQNULL]:
        if _test(mt[_TEST], raddr, mt[_FLAG], mt[_STATUS]) != 0:
            return -1
        if _ldi32(mt[_FLAG]) == 0:
            return 0
    p = mt[_SBUF] + slot * mt[_SLOT]
    _st32(p, n)
    _st8(p + 4, kind)
    _st8(p + 5, flags)
    _st16(p + 6, src)
    _st32(p + 8, ctx)
    _st32(p + 12, tag)
    _st64(p + 16, wire)
    _st64(p + 24, msgid)
    if plen:
        _memcpy(p + _HLEN, paddr, plen)
    if hw == 4:
        rc = _isend4(mt[_ISEND], p, n, mt[_BYTE], peer, mt[_TAGF], mt[_COMM], raddr)
    else:
        rc = _isend8(mt[_ISEND], p, n, mt[_BYTE], peer, mt[_TAGF], mt[_COMM], raddr)
    if rc != 0:
        return -1
    _st64(mt[_SCTL], k + 1)
    c = mt[_COUNT] + 8 * peer
    _st64(c, _ld64(c) + 1)
    return 1


def _j_send(mt, peer, src, ctx, tag, sig, paddr, plen):
    """Send an EAGER frame of ``plen`` bytes from ``paddr`` to ``peer`` (:func:`_j_frame`)."""
    return _frame(mt, peer, _EAGER, 0, src, ctx, tag, plen | (sig << _SIG_SHIFT), 0, paddr, plen)


def _j_busy(mt, tab, epoch):
    """Whether something here wants the engine now: a frame in this node's rings that asks
    for an answer (anything but a plain eager message), a frame from another node (looked at
    without taking it), or a new failure epoch."""
    size = tab[0]
    for i in range(tab[2]):
        ctl = tab[3 + 2 * i]
        off = _peek(ctl, size)
        if off >= 0:
            q = ctl + CTRL + off
            if _ld8(q + 4) != _EAGER or _ld8(q + 5) != 0:
                return True
    if tab[1] and _ld64a(tab[1]) != epoch:
        return True
    rctl = mt[_RCTL]
    if _ld64(rctl + 8):
        return True
    hw = mt[_HW]
    raddr = mt[_HREQ] + _ld64(rctl) * hw
    fl = mt[_FLAG]
    st = mt[_STATUS]
    if hw == 4:
        rc = _getst4(mt[_GETST], _ldi32(raddr), fl, st)
    else:
        rc = _getst8(mt[_GETST], _ld64(raddr), fl, st)
    if rc == 0 and _ldi32(fl) != 0:
        _st64(rctl + 8, _ldi32(st + mt[_SOFF]) + 1)
        return True
    return False


def _j_finish(mt, tab, budget, epoch, dreq):
    """Spin until the data request at ``dreq`` completes (GOT), or :func:`_j_busy` says the
    engine is wanted, or ``budget`` rounds passed (PENDING: it is still going; a budget of 0
    or less tests it once); -1 when MPI failed."""
    fl = mt[_FLAG]
    while True:
        if _test(mt[_TEST], dreq, fl, mt[_STATUS]) != 0:
            return -1
        if _ldi32(fl) != 0:
            return GOT
        budget -= 1
        if budget <= 0 or _busy(mt, tab, epoch):
            return PENDING
        _pause()


def _j_push(mt, tab, peer, src, ctx, tag, sig, paddr, plen, msgid, budget, epoch, dreq):
    """A standard send of ``plen`` bytes at ``paddr`` (at most one data message, ``mt[chunk]``)
    pushed ahead: the RTS frame (flags OFFER|PUSHED, the region's ident byte), then
    ``MPI_Isend`` of the bytes (tag ``mt[dtag] + msgid % mt[span]``, its request handle
    written at address ``dreq``), then :func:`_j_finish`: GOT (sent), PENDING (still going:
    the caller completes it through the engine); 0 when nothing was done (no free send
    slot); -1 when MPI failed."""
    one = mt[_FLAG] + 4  # the frame's one byte: the offering region's ident
    _st8(one, mt[_IDENT])
    rc = _frame(mt, peer, _RTS, _PUSHED, src, ctx, tag, plen | (sig << _SIG_SHIFT), msgid, one, 1)
    if rc != 1:
        return rc
    dtag = mt[_DTAG] + msgid % mt[_SPAN]
    if mt[_HW] == 4:
        rc = _isend4(mt[_ISEND], paddr, plen, mt[_BYTE], peer, dtag, mt[_COMM], dreq)
    else:
        rc = _isend8(mt[_ISEND], paddr, plen, mt[_BYTE], peer, dtag, mt[_COMM], dreq)
    if rc != 0:
        return -1
    return _finish(mt, tab, budget, epoch, dreq)


def _j_recv(mt, tab, want, ctx, src, tag, sig, dst, cap, budget, epoch, out, dreq):
    """Consume the next frame if it is the eager message this receive matches (see the module
    docstring); GOT (``out`` = source, tag, bytes, signature), OTHER, EPOCH or EMPTY; -1
    when MPI failed.  A message pushed ahead is taken too: its bytes are received into
    ``dst`` (``MPI_Irecv``, the request's handle written at address ``dreq``) and waited for
    (PENDING when the engine is wanted first).  A ``budget`` below 0 is one look that never
    waits: -1 leaves a message pushed ahead to the engine, -2 takes it and tests its bytes
    once (PENDING: still coming; ``mt[aux]`` holds its message id and sender's rank)."""
    hw = mt[_HW]
    size = tab[0]
    eaddr = tab[1]
    nring = tab[2]
    st = mt[_STATUS]
    fl = mt[_FLAG]
    while True:
        if want == _ANY_SOURCE:  # this node's rings first: fastring's receive, one round
            rc = _recv1(tab, want, ctx, src, tag, sig, dst, cap, 0, 1, epoch, out)
            if rc != EMPTY:
                return rc
        else:
            for i in range(nring):
                ctl = tab[3 + 2 * i]
                off = _peek(ctl, size)
                if off >= 0:
                    q = ctl + CTRL + off
                    if _ld8(q + 4) != _EAGER or _ld8(q + 5) != 0:
                        return OTHER  # it wants an answer: the engine's
            if eaddr and _ld64a(eaddr) != epoch:
                return EPOCH
        rctl = mt[_RCTL]
        h = _ld64(rctl)
        raddr = mt[_HREQ] + h * hw
        peer = _ld64(rctl + 8) - 1  # seen complete before: its source (MpiFrames.arrived)
        if peer < 0:
            if hw == 4:
                rc = _getst4(mt[_GETST], _ldi32(raddr), fl, st)
            else:
                rc = _getst8(mt[_GETST], _ld64(raddr), fl, st)
            if rc != 0:
                return -1
            if _ldi32(fl) != 0:
                peer = _ldi32(st + mt[_SOFF])
                _st64(rctl + 8, peer + 1)
        if peer >= 0:
            if want != _ANY_SOURCE and peer != want:
                return OTHER
            p = mt[_RBUF] + h * mt[_FMAX]
            kind = _ld8(p + 4)
            fl8 = _ld8(p + 5)
            pushed = kind == _RTS and fl8 == _PUSHED
            if not (pushed or (kind == _EAGER and fl8 == 0)):
                return OTHER
            nb = _accept(p, ctx, src, tag, sig, cap)  # fastring's rule
            if nb < 0:
                return OTHER
            if pushed and (budget == -1 or nb > mt[_CHUNK] or _ld8(p + _HLEN) != mt[_IDENT]):
                return OTHER  # not asked for, several data messages, or another region's: the engine's
            if _test(mt[_TEST], raddr, fl, st) != 0:
                return -1
            msgid = _ld64(p + 24)
            hsrc = _ld16(p + 6)  # read before the receive restarts into this buffer
            htag = _ldi32(p + 12)
            msig = (_ld64(p + 16) >> _SIG_SHIFT) & 0xFFFF
            if nb and not pushed:
                _memcpy(dst, p + _HLEN, nb)
            if _start(mt[_START], raddr) != 0:
                return -1
            _st64(rctl + 8, 0)
            _st64(rctl, (h + 1) % mt[_NRECV])
            out[0] = hsrc
            out[1] = htag
            out[2] = nb
            out[3] = msig
            if not pushed:
                return GOT
            # pushed ahead: receive the bytes into the destination, and wait for them here
            dtag = mt[_DTAG] + msgid % mt[_SPAN]
            if hw == 4:
                rc = _irecv4(mt[_IRECV], dst, nb, mt[_BYTE], peer, dtag, mt[_COMM], dreq)
            else:
                rc = _irecv8(mt[_IRECV], dst, nb, mt[_BYTE], peer, dtag, mt[_COMM], dreq)
            if rc != 0:
                return -1
            if budget < 0:
                _st64(mt[_AUX], msgid)
                _st64(mt[_AUX] + 8, peer)
                return _finish(mt, tab, 0, epoch, dreq)
            return _finish(mt, tab, budget if budget > 1024 else 1024, epoch, dreq)
        budget -= 1
        if budget <= 0:
            return EMPTY
        _pause()
