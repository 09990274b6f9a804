"""Compiled ring operations: the small-message fast path of the shm transport (L4).

Theory of operation
===================
A small message costs the Python engine a dozen calls on each side (parse, lock, reserve,
pack the header, poll every ring, unpack it, match, copy, bookkeeping); on a slow core that
is several microseconds, where a compiled loop spinning on a shared word answers in well
under one.  This module is that compiled code: Numba functions (``nogil``, cached on disk)
that work on the rings of :mod:`gpumpi.ipc.ring` through raw addresses, with the same
layout, frame format and publication order as the Python code, so frames written here
are read there and the other way round:

* :func:`send` writes one EAGER frame (the 32-byte header of :mod:`gpumpi._protocol`, no
  flags, and its payload, copied from an address) into the ring to one peer, or reports
  that it does not fit (the caller falls back to the engine, which queues it).
* :func:`recv` spins on every ring this rank reads and *consumes* the first frame only if
  it is exactly what the caller's receive would match first: an EAGER frame, no flags,
  from the wanted source on the wanted context with an accepted tag, that fits and has a
  compatible signature (``sig`` 0: any; the caller passes 0 when type checks are off).  It copies the payload to the destination, gives the frame back
  and reports source, tag, size and signature in ``out``.  Anything else -- a frame of
  another kind, from another peer, for another receive, a truncation, a type mismatch --
  is left in place and reported as ``OTHER``: the engine's general path then handles it
  (the caller has consumed nothing, so the general path sees every frame in order).  A
  receive from one peer steps over other peers' plain eager frames (they ask nothing of
  this rank) but not past its budget: then it reports ``OTHER`` so they are handled.  A
  change of the job's failure epoch is reported as ``EPOCH``; a spin that found nothing
  for ``budget`` rounds returns ``EMPTY`` so the caller can back off (eight ranks on two
  cores) and keep its other duties.
* :func:`wait` spins until any ring holds a frame (or the epoch changes, or the budget
  ends) without touching anything: a thread waits there with the GIL released, outside
  the engine lock, and then takes the lock to handle what came.
* :func:`rounds` runs a small collective's whole schedule as one call: a program of
  steps (send, receive of exactly the expected message, copy, reduction ``d = x op y``
  on one of :data:`RTYPES` with one of :data:`ROPS`, computed as NumPy's ufuncs compute
  it) that stops at the first send or receive it cannot do as such and says which, so
  the caller carries on from there on the general path.  Its sends and receives are
  :func:`send`'s and :func:`recv`'s (a receive here takes only a message of exactly the
  expected size and signature: anything else is the general path's to check and report).

The ring table ``tab`` (int64) describes this rank's incoming rings: ``tab[0]`` the ring
size, ``tab[1]`` the address of the job's failure epoch word (0: none), ``tab[2]`` the
number of rings, then per ring (in the engine's poll order) its control block address and
its peer's world rank.  The data area follows the 128-byte control block.

Memory order: the producer writes the frame with plain stores and publishes ``tail`` with
a release store; the consumer reads ``tail`` with an acquire load, then the frame, and
gives it back with a release store of ``head`` (the Python code relies on x86-64's total
store order for the same guarantees).  The producer keeps its cached view of ``head`` in
the word after ``tail`` (its own cache line), so the Python and compiled writers share it.

Numba is imported on first use (:func:`kernels`), never at ``import gpumpi``.
"""

from __future__ import annotations

import platform
import threading

from .._arrays import NP_DATA_OFFSET, NP_FLAGS_OFFSET

#: recv/wait results
EMPTY, GOT, OTHER, EPOCH = 0, 1, 2, 3

CTRL = 128  # control block bytes (gpumpi.ipc.ring.CTRL)
_TAIL = 64  # byte offset of the producer's position
_HCACHE = 72  # byte offset of the producer's cached consumer position
_PAD = 0xFFFFFFFF
_HLEN = 32
_ALIGN = 64  # frame alignment (gpumpi.ipc.ring.ALIGN)
_EAGER = 1  # gpumpi._protocol.EAGER
_SIG_SHIFT = 48
_ANY_SOURCE = -2
_ANY_TAG = -1

_LOCK = threading.Lock()
_K = None
_C = None

# the intrinsics and the compiled peek, once _build() ran: the functions below name them as
# globals, which numba resolves when it compiles them (so the disk cache can serve them)
_ld64a = _ld64 = _ld32 = _ld16 = _ld8 = _ldi32 = _st64r = _st64 = _st32 = _st16 = _st8 = None
_memcpy = _pause = _streamcopy = _peek = _accept = _send1 = _recv1 = _reduce = _carray = None
_pf8 = _pf4 = _pi8 = _pi4 = _pu8 = _pu4 = None
_red = _redb = None

#: eager payloads of at least this many bytes are written into the ring with non-temporal
#: (streaming) stores.  With cached stores every line of a frame is first fetched for ownership
#: from the reading core (which read the same ring bytes one lap ago) and then fetched back by it
#: dirty: on the 2-core AMD EPYC VM (KVM) that costs 20-33 us per 64 KiB frame whenever the two
#: vCPUs sit apart on the host, 3-4x MPICH's single-copy (CMA) path; streamed, the frame goes
#: to memory once and the reader takes it from there: 8 us, whatever the placement (6 us with
#: cached stores when the vCPUs sit close).  In-job A/B, one-way latency at 2 ranks:
#: 4/8/16/32/64 KiB cached 3.1/4.2/7.4/11.8/20.0 us, streamed 2.6/3.1/3.7/5.2/8.0 us.
STREAM_MIN = 4096
#: step kinds of :func:`rounds` programs (rows of ``STEP`` int64: the kind, then its operands)
SEND, RECV, COPY, RED = 0, 1, 2, 3
STEP = 8
#: the element types (NumPy ``dtype.str[1:]``, native byte order) and predefined operations
#: the compiled reductions run, by code
RTYPES = ("f8", "f4", "i8", "i4", "u8", "u4")
ROPS = ("SUM", "PROD", "MAX", "MIN", "BAND", "BOR", "BXOR")


def kernels():
    """``(send, recv, wait, rounds)``: the compiled functions (imports numba; compiles them, or loads
    them from the disk cache, on first use).  They are the machine code's entry points, without
    Numba's dispatcher: every argument must be a Python ``int`` except ``tab`` and ``out``,
    C-contiguous ``int64`` arrays."""
    global _K
    if _K is None:
        with _LOCK:
            if _K is None:
                _K = _build()
    return _K


def c_entries():
    """``(send, recv, rounds)``: addresses of C entry points of :func:`send` (the same
    arguments), :func:`recv` (``tab`` and ``out`` given as their data addresses) and
    :func:`rounds` (the same arguments: addresses all), for the compiled layer
    (:mod:`gpumpi._compiled`), which calls them as C functions: no Python object crosses the
    call.  Numba ``cfunc`` builds of the same code, compiled on first use (or loaded from the
    disk cache)."""
    global _C
    kernels()
    if _C is None:
        with _LOCK:
            if _C is None:
                _C = (_cfunc(_j_send, "int64(" + ", ".join(["int64"] * 8) + ")").address,
                      _cfunc(_j_recva, "int64(" + ", ".join(["int64"] * 11) + ")").address,
                      _cfunc(_j_rounds, "int64(" + ", ".join(["int64"] * 20) + ")").address)
    return _C


def _intrinsics():
    global _ld64a, _ld64, _ld32, _ld16, _ld8, _ldi32, _st64r, _st64, _st32, _st16, _st8, _memcpy, _pause, \
        _streamcopy
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def _ptr(builder, addr, lty):
        return builder.inttoptr(addr, lty.as_pointer())

    def loader(ty, order):
        @intrinsic
        def ld(typingctx, addr):
            if not isinstance(addr, types.Integer):
                return None

            def codegen(context, builder, sig, args):
                lty = context.get_value_type(ty)
                p = _ptr(builder, args[0], lty)
                if order is None:
                    return builder.load(p, align=ty.bitwidth // 8)
                return builder.load_atomic(p, order, ty.bitwidth // 8)

            return ty(types.intp), codegen

        return ld

    def storer(ty, order):
        @intrinsic
        def st(typingctx, addr, val):
            if not (isinstance(addr, types.Integer) and isinstance(val, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                lty = context.get_value_type(ty)
                v = context.cast(builder, args[1], sig.args[1], ty)
                p = _ptr(builder, args[0], lty)
                if order is None:
                    builder.store(v, p, align=ty.bitwidth // 8)
                else:
                    builder.store_atomic(v, p, order, ty.bitwidth // 8)
                return context.get_dummy_value()

            return types.none(types.intp, val), codegen

        return st

    @intrinsic
    def memcpy(typingctx, dst, src, n):
        if not all(isinstance(t, types.Integer) for t in (dst, src, n)):
            return None

        def codegen(context, builder, sig, args):
            i8 = ir.IntType(8)
            cgutils.raw_memcpy(builder, _ptr(builder, args[0], i8), _ptr(builder, args[1], i8), args[2], 1)
            return context.get_dummy_value()

        return types.none(types.intp, types.intp, types.intp), codegen

    x86 = platform.machine() in ("x86_64", "AMD64", "i686", "i386")

    @intrinsic
    def pause(typingctx):
        def codegen(context, builder, sig, args):
            if x86:  # tell the core it spins (frees resources for the sibling hyperthread)
                fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                    "llvm.x86.sse2.pause")
                builder.call(fn, [])
            else:
                builder.fence("seq_cst")
            return context.get_dummy_value()

        return types.none(), codegen

    @intrinsic
    def streamcopy(typingctx, dst, src, n):
        """Copy ``n`` bytes (a multiple of 64) to ``dst`` (64-byte aligned) with non-temporal
        stores, then ``sfence`` (x86: they are weakly ordered, and the caller publishes the frame
        next); elsewhere a plain copy."""
        if not all(isinstance(t, types.Integer) for t in (dst, src, n)):
            return None

        def codegen(context, builder, sig, args):
            d, s, nn = args
            if not x86:
                i8 = ir.IntType(8)
                cgutils.raw_memcpy(builder, _ptr(builder, d, i8), _ptr(builder, s, i8), nn, 1)
                return context.get_dummy_value()
            i64 = ir.IntType(64)
            vty = ir.VectorType(i64, 8)
            pre = builder.block
            loop = builder.append_basic_block("nt.loop")
            body = builder.append_basic_block("nt.body")
            done = builder.append_basic_block("nt.done")
            builder.branch(loop)
            builder.position_at_end(loop)
            i = builder.phi(i64)
            i.add_incoming(ir.Constant(i64, 0), pre)
            builder.cbranch(builder.icmp_signed("<", i, nn), body, done)
            builder.position_at_end(body)
            v = builder.load(_ptr(builder, builder.add(s, i), vty), align=1)
            st = builder.store(v, _ptr(builder, builder.add(d, i), vty), align=64)
            st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
            i.add_incoming(builder.add(i, ir.Constant(i64, 64)), body)
            builder.branch(loop)
            builder.position_at_end(done)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse.sfence")
            builder.call(fn, [])
            return context.get_dummy_value()

        return types.none(types.intp, types.intp, types.intp), codegen

    def pointer(ty):
        @intrinsic
        def ptr(typingctx, addr):
            if not isinstance(addr, types.Integer):
                return None
            rt = types.CPointer(ty)

            def codegen(context, builder, sig, args):
                return builder.inttoptr(args[0], context.get_value_type(rt))

            return rt(types.intp), codegen

        return ptr

    global _pf8, _pf4, _pi8, _pi4, _pu8, _pu4, _carray
    import numba

    _pf8, _pf4, _pi8, _pi4, _pu8, _pu4 = (pointer(t) for t in (types.float64, types.float32, types.int64,
                                                                types.int32, types.uint64, types.uint32))
    _carray = numba.carray
    _ld64a, _ld64 = loader(types.int64, "acquire"), loader(types.int64, None)
    _ld32, _ld16, _ld8, _ldi32 = (loader(types.uint32, None), loader(types.uint16, None), loader(types.uint8, None),
                                  loader(types.int32, None))
    _st64r, _st64 = storer(types.int64, "release"), storer(types.int64, None)
    _st32, _st16, _st8 = storer(types.uint32, None), storer(types.uint16, None), storer(types.uint8, None)
    _memcpy, _pause, _streamcopy = memcpy, pause, streamcopy


def _jit(pyfunc, sig):
    """``numba.njit(sig, nogil=True, cache=True)(pyfunc)``: compiled now (or loaded from the cache)."""
    import numba

    try:
        return numba.njit(sig, nogil=True, cache=True)(pyfunc)
    except RuntimeError:  # no writable cache location
        return numba.njit(sig, nogil=True)(pyfunc)


def _cfunc(pyfunc, sig):
    """``numba.cfunc(sig, cache=True)(pyfunc)`` (without the cache where none can be written)."""
    import numba

    try:
        return numba.cfunc(sig, cache=True)(pyfunc)
    except RuntimeError:  # no writable cache location
        return numba.cfunc(sig)(pyfunc)


def _build():
    global _peek, _accept, _send1, _recv1, _red, _redb, _reduce
    # numba's first compilation loads its extensions, numba-cuda among them, which fixes
    # numba.cuda's mode for the process: let it be the simulator where it could only be that
    # (what gpumpi's device kernels would ask first), so sim device memory keeps its kernels
    from .._device import use_simulator

    use_simulator()
    _intrinsics()
    _peek = _jit(_j_peek, "int64(int64, int64)")
    _accept = _jit(_j_accept, "int64(int64, int64, int64, int64, int64, int64)")
    send = _send1 = _jit(_j_send, "int64(int64, int64, int64, int64, int64, int64, int64, int64)")
    _recv1 = _jit(_j_recv1, "int64(int64[::1], int64, int64, int64, int64, int64, int64, int64, int64, int64, int64, "
                            "int64[::1])")
    recv = _jit(_j_recv, "int64(int64[::1], int64, int64, int64, int64, int64, int64, int64, int64, int64, int64[::1])")
    wait = _jit(_j_wait, "int64(int64[::1], int64, int64)")
    _red, _redb = _jit_lazy(_j_red), _jit_lazy(_j_redb)
    _reduce = _jit(_j_reduce, "none(int64, int64, int64, int64, int64, int64)")
    rounds = _jit(_j_rounds, "int64(" + ", ".join(["int64"] * 20) + ")")
    # the machine code's own entry points: no dispatcher (no typing of the arguments on each
    # call, about half the cost of a call); callers pass exactly these types
    return tuple(f.get_overload(f.signatures[0]) for f in (send, recv, wait, rounds))


def _jit_lazy(pyfunc):
    """``numba.njit(nogil=True, cache=True)(pyfunc)``, compiled for the types it is called with."""
    import numba

    return numba.njit(nogil=True, cache=True)(pyfunc)


# -- the compiled functions (plain Python here; compiled by _build) ---------------------------------


def _j_send(ctl, size, src, ctx, tag, sig, paddr, plen):
    """Write an EAGER frame of ``plen`` bytes from ``paddr`` into the ring at ``ctl``; 1, or 0
    when it does not fit now (nothing written)."""
    n = _HLEN + plen
    need = (n + _ALIGN - 1) & -_ALIGN
    tail = _ld64(ctl + _TAIL)
    hc = _ld64(ctl + _HCACHE)
    off = tail % size
    data = ctl + CTRL
    if off + need > size:  # would wrap: pad to the end first
        wneed = need + size - off
        if tail + wneed - hc > size:
            hc = _ld64a(ctl)
            _st64(ctl + _HCACHE, hc)
            if tail + wneed - hc > size:
                return 0
        _st32(data + off, _PAD)
        tail += size - off
        _st64r(ctl + _TAIL, tail)
        off = 0
    elif tail + need - hc > size:
        hc = _ld64a(ctl)
        _st64(ctl + _HCACHE, hc)
        if tail + need - hc > size:
            return 0
    p = data + off
    _st32(p, n)
    _st8(p + 4, _EAGER)
    _st8(p + 5, 0)
    _st16(p + 6, src)
    _st32(p + 8, ctx)
    _st32(p + 12, tag)
    _st64(p + 16, plen | (sig << _SIG_SHIFT))
    _st64(p + 24, 0)
    if plen >= STREAM_MIN:
        # streamed past the caches: the reader is another core, and cached stores would make
        # each line's ownership travel there and back (see STREAM_MIN)
        d = p + _HLEN
        h = (64 - (d & 63)) & 63
        m = (plen - h) & ~63
        _memcpy(d, paddr, h)
        _streamcopy(d + h, paddr + h, m)
        _memcpy(d + h + m, paddr + h + m, plen - h - m)
    elif plen:
        _memcpy(p + _HLEN, paddr, plen)
    _st64r(ctl + _TAIL, tail + need)
    return 1


def _j_peek(ctl, size):
    """Offset of the next frame of the ring at ``ctl``, or -1 when it is empty (consumes a pad
    marker: call it only as the ring's consumer)."""
    head = _ld64(ctl)
    if _ld64a(ctl + _TAIL) == head:
        return -1
    off = head % size
    if _ld32(ctl + CTRL + off) == _PAD:
        head += size - off
        _st64r(ctl, head)
        if _ld64a(ctl + _TAIL) == head:
            return -1
        return 0
    return off


def _j_recv(tab, want, ctx, src, tag, sig, dst, cap, budget, epoch, out):
    """Consume the next frame if it is the eager message this receive matches (see the module
    docstring); GOT (``out`` = source, tag, bytes, signature), OTHER, EPOCH or EMPTY."""
    return _recv1(tab, want, ctx, src, tag, sig, dst, cap, 0, budget, epoch, out)


def _j_recva(taba, want, ctx, src, tag, sig, dst, cap, budget, epoch, outa):
    """:func:`_j_recv` with the ring table and the result array given as addresses (C entry)."""
    tab = _carray(_pi8(taba), 3 + 2 * _ld64(taba + 16))
    out = _carray(_pi8(outa), 4)
    return _recv1(tab, want, ctx, src, tag, sig, dst, cap, 0, budget, epoch, out)


def _j_accept(p, ctx, src, tag, sig, cap):
    """The payload size of the message whose frame header is at ``p`` if a receive on ``ctx``
    from ``src`` with ``tag`` (wildcards allowed), of ``cap`` bytes and signature ``sig``,
    takes it as it is; -1 if not: another context, source or tag, or a truncation or a type
    mismatch (the general path reports those)."""
    if _ldi32(p + 8) != ctx:
        return -1
    if (src != _ANY_SOURCE and _ld16(p + 6) != src) or (tag != _ANY_TAG and _ldi32(p + 12) != tag):
        return -1
    wire = _ld64(p + 16)
    nb = wire & ((1 << _SIG_SHIFT) - 1)
    msig = (wire >> _SIG_SHIFT) & 0xFFFF
    if nb > cap or (sig and msig and sig != msig and nb):
        return -1
    return nb


def _j_recv1(tab, want, ctx, src, tag, sig, dst, cap, strict, budget, epoch, out):
    """:func:`_j_recv`; ``strict``: only a message of exactly ``cap`` bytes whose signature is
    none or ``sig`` itself is consumed (what a collective round accepts without a check)."""
    size = tab[0]
    eaddr = tab[1]
    nring = tab[2]
    skipped = False
    while True:
        for i in range(nring):
            ctl = tab[3 + 2 * i]
            off = _peek(ctl, size)
            if off < 0:
                continue
            if want != _ANY_SOURCE and tab[4 + 2 * i] != want:
                # another peer's frame: a plain eager message asks nothing of us (its send is
                # complete) and may wait its turn; anything else (a rendezvous, an ack, a
                # synchronous send) wants an answer now
                q = ctl + CTRL + off
                if _ld8(q + 4) != _EAGER or _ld8(q + 5) != 0:
                    return OTHER
                skipped = True
                continue
            p = ctl + CTRL + off
            n = _ld32(p)
            if _ld8(p + 4) != _EAGER or _ld8(p + 5) != 0:
                return OTHER
            nb = _accept(p, ctx, src, tag, sig, cap)
            if nb < 0:
                return OTHER
            msig = (_ld64(p + 16) >> _SIG_SHIFT) & 0xFFFF
            if strict and (nb != cap or (msig and msig != sig)):
                return OTHER
            if nb:
                _memcpy(dst, p + _HLEN, nb)
            _st64r(ctl, _ld64(ctl) + ((n + _ALIGN - 1) & -_ALIGN))
            out[0] = _ld16(p + 6)
            out[1] = _ldi32(p + 12)
            out[2] = nb
            out[3] = msig
            return GOT
        if eaddr and _ld64a(eaddr) != epoch:
            return EPOCH
        budget -= 1
        if budget <= 0:
            return OTHER if skipped else EMPTY  # skipped frames are not left waiting longer
        _pause()


def _j_wait(tab, budget, epoch):
    """Spin until a ring holds a frame (GOT), the failure epoch changes (EPOCH) or ``budget``
    rounds pass (EMPTY); reads only (a pad marker counts as a frame: the engine skips it)."""
    eaddr = tab[1]
    nring = tab[2]
    while True:
        for i in range(nring):
            ctl = tab[3 + 2 * i]
            if _ld64a(ctl + _TAIL) != _ld64a(ctl):
                return GOT
        if eaddr and _ld64a(eaddr) != epoch:
            return EPOCH
        budget -= 1
        if budget <= 0:
            return EMPTY
        _pause()


# -- compiled collective rounds ----------------------------------------------------------------


def _j_rounds(taba, cmapa, csize, proga, nsteps, i0, bufsa, rarr, rwant, sarr, swant, src, ctx, tag, sig, rtype, rop,
              budget, epoch, outa):
    """Run steps ``i0``.. of the collective program at ``proga`` (``nsteps`` rows of
    :data:`STEP` int64): -1 when all are done, else the index of the first step not done
    (nothing of it done: a send with no room, a receive whose frame is not the exact message
    this step expects, or none yet).

    Rows: ``SEND peer buf off n``, ``RECV peer buf off n`` (exactly ``n`` bytes, of signature
    ``sig`` or none), ``COPY sbuf soff dbuf doff n`` and ``RED xbuf xoff ybuf yoff dbuf doff
    count`` (``d = x op y`` elementwise, :func:`_j_reduce`); ``buf`` indexes the int64
    addresses at ``bufsa``, offsets are bytes, peers are ranks of the communicator of
    ``csize`` ranks whose out-ring addresses and world ranks are the rows of the 2 x
    ``csize`` int64 array at ``cmapa``; every message is ``src``'s on ``ctx`` with ``tag``;
    the int64[4] at ``outa`` gets the last receive's source, tag, bytes and signature; the
    ring table (:func:`recv`'s ``tab``) is at ``taba``.  Arrays come as addresses: each
    array argument would cost the call about 60 ns to unpack.

    ``rarr``/``sarr`` (0: none) are the object addresses of NumPy arrays whose data
    addresses go to ``bufs[1]``/``bufs[0]`` (the schedule's receive and send buffers) before
    anything is done, if their flags words have the bits ``rwant``/``swant`` (``NPY_ARRAY_*``);
    -2 if not (nothing done).  Callers pass them only where :mod:`gpumpi._arrays` verified
    the ndarray header layout (``PEEK_OK``: data pointer at ``NP_DATA_OFFSET``, flags at
    ``NP_FLAGS_OFFSET``, both :mod:`gpumpi._arrays`'s)."""
    if rarr and _ld64(rarr + NP_FLAGS_OFFSET) & rwant != rwant:
        return -2
    if sarr and _ld64(sarr + NP_FLAGS_OFFSET) & swant != swant:
        return -2
    if rarr:
        _st64(bufsa + 8, _ld64(rarr + NP_DATA_OFFSET))
    if sarr:
        _st64(bufsa, _ld64(sarr + NP_DATA_OFFSET))
    tab = _carray(_pi8(taba), 3 + 2 * _ld64(taba + 16))
    out = _carray(_pi8(outa), 4)
    prog = _carray(_pi8(proga), (nsteps, STEP))
    cmap = _carray(_pi8(cmapa), (2, csize))
    size = tab[0]
    for i in range(i0, nsteps):
        k = prog[i, 0]
        a1 = prog[i, 1]
        a2 = prog[i, 2]
        a3 = prog[i, 3]
        a4 = prog[i, 4]
        if k == SEND:  # SEND peer buf off n
            if _send1(cmap[0, a1], size, src, ctx, tag, sig, _ld64(bufsa + 8 * a2) + a3, a4) == 0:
                return i
        elif k == RECV:  # RECV peer buf off n
            if _recv1(tab, cmap[1, a1], ctx, a1, tag, sig, _ld64(bufsa + 8 * a2) + a3, a4, 1, budget, epoch,
                      out) != GOT:
                return i
        elif k == COPY:  # COPY sbuf soff dbuf doff n
            if prog[i, 5]:
                _memcpy(_ld64(bufsa + 8 * a3) + a4, _ld64(bufsa + 8 * a1) + a2, prog[i, 5])
        else:  # RED xbuf xoff ybuf yoff dbuf doff count
            _reduce(rtype, rop, _ld64(bufsa + 8 * a1) + a2, _ld64(bufsa + 8 * a3) + a4,
                    _ld64(bufsa + 8 * prog[i, 5]) + prog[i, 6], prog[i, 7])
    return -1

def _j_reduce(rtype, rop, xa, ya, da, n):
    """``d = x op y`` on ``n`` elements of type ``RTYPES[rtype]`` at addresses ``xa``, ``ya``,
    ``da`` (``d`` may be ``x`` or ``y``), operation ``ROPS[rop]`` (bitwise ones: integer types)."""
    if rtype == 0:
        _red(_carray(_pf8(xa), n), _carray(_pf8(ya), n), _carray(_pf8(da), n), rop)
    elif rtype == 1:
        _red(_carray(_pf4(xa), n), _carray(_pf4(ya), n), _carray(_pf4(da), n), rop)
    elif rtype == 2:
        _redb(_carray(_pi8(xa), n), _carray(_pi8(ya), n), _carray(_pi8(da), n), rop)
    elif rtype == 3:
        _redb(_carray(_pi4(xa), n), _carray(_pi4(ya), n), _carray(_pi4(da), n), rop)
    elif rtype == 4:
        _redb(_carray(_pu8(xa), n), _carray(_pu8(ya), n), _carray(_pu8(da), n), rop)
    else:
        _redb(_carray(_pu4(xa), n), _carray(_pu4(ya), n), _carray(_pu4(da), n), rop)


def _j_red(x, y, d, rop):
    """SUM, PROD, MAX, MIN as NumPy's ufuncs compute them (wrapping integers; MAX and MIN
    return a NaN operand, as ``np.maximum``/``np.minimum`` do)."""
    n = d.shape[0]
    if rop == 0:
        for i in range(n):
            d[i] = x[i] + y[i]
    elif rop == 1:
        for i in range(n):
            d[i] = x[i] * y[i]
    elif rop == 2:
        for i in range(n):
            a = x[i]
            b = y[i]
            d[i] = a if (a >= b or a != a) else b
    else:
        for i in range(n):
            a = x[i]
            b = y[i]
            d[i] = a if (a <= b or a != a) else b


def _j_redb(x, y, d, rop):
    """:func:`_j_red` and the bitwise operations, for integer types."""
    n = d.shape[0]
    if rop < 4:
        _red(x, y, d, rop)
    elif rop == 4:
        for i in range(n):
            d[i] = x[i] & y[i]
    elif rop == 5:
        for i in range(n):
            d[i] = x[i] | y[i]
    else:
        for i in range(n):
            d[i] = x[i] ^ y[i]
