"""Host atomics (L3): LLVM atomic instructions on raw addresses, for RMA windows in host (and sim device) memory.

Theory of operation
===================
A host window is a shared mapping (memfd), so the same physical page sits at a *different*
address in each process; every origin updates it itself with instructions the hardware
makes atomic (the package notes, :mod:`gpumpi.kernels.atomics`, say why).  The operations
and the element types each takes are :mod:`gpumpi.kernels.atomics._ops`'s table; the device
kernels are :mod:`gpumpi.kernels.atomics.device`, which runs the instructions here on
simulated device memory.

Host
----
Numba ``@intrinsic`` functions emit LLVM atomics on a pointer made with ``inttoptr``
from a Python ``int`` address, so the instruction lands on the shared page whatever
address it has here.  Every access is ``seq_cst``::

    op        integer (1, 2, 4, 8 bytes)        float (4, 8 bytes)
    SUM       atomicrmw add                     atomicrmw fadd (LLVM expands to a cmpxchg loop on x86)
    MAX MIN   atomicrmw max/min (umax/umin)     cmpxchg loop, NaN propagates (numpy.maximum)
    BAND BOR  atomicrmw and/or/xor              -
    BXOR
    REPLACE   atomicrmw xchg                    atomicrmw xchg on the bits
    NO_OP     load atomic                       load atomic
    PROD LAND cmpxchg loop                      cmpxchg loop (bits compared, float arithmetic)
    LOR LXOR

A cmpxchg loop reads the element, computes ``new = old op value`` at the element's own
width (so integer ``SUM``/``PROD`` wrap, as MPI's C arithmetic does) and swaps it in
only if the element still holds ``old``; otherwise it retries with what it found::

    cur = load(p)
    loop:  new = cur op v;  (seen, ok) = cmpxchg(p, cur, new);  if !ok: cur = seen; goto loop
    return cur                                   # the old value, for Get_accumulate / Fetch_and_op

The logical operations give 0/1 (1.0/0.0 for floats) of ``(old != 0) op (value != 0)``;
a NaN is "true", as in ``numpy.logical_and``.  ``bool`` is handled as ``uint8`` holding
0/1 (NumPy's representation), where the logical and bitwise operations agree.

One intrinsic, :func:`_update`, carries every operation behind an LLVM ``switch`` on an
operation code, so one compiled loop per element type serves all twelve operations
(the switch is loop invariant: the branch predictor takes it for free, next to the
tens of cycles an atomic costs).  Element types with no instruction for an operation
never reach it: :func:`supported` decides, and the callers check first.

Compilation is lazy (``numba`` is imported on first use, as everywhere in gpumpi) and
cached on disk (``cache=True``).  Each entry point is compiled with explicit
signatures, one dispatcher per element type, held in dicts keyed by ``(op, dtype)``:
the hot path (``Fetch_and_op`` on an ``int64``) is one dict lookup and one call into
machine code with plain ints, no array made.  Numba's dispatcher is most of the cost
(~0.2-0.35 us for a call with three ints).  Measured on the development container (2
shared cores under load, numba 0.68; best of 5): ``fetch_and_op`` SUM int64 ~0.65 us,
``cas64`` ~0.4 us, ``accumulate`` of 1 int64 ~1.5 us, of 1000 int64 ~6.5 us, of 1000
float64 ~9 us a call.  A first use per element type compiles in ~0.3 s, ~0.02 s from
the cache.

The window's near path goes further: :func:`fop_ndarray` and :func:`cas_ndarray` return
compiled functions called without the dispatcher (``Dispatcher.get_overload``: no type
matching; each int argument still costs ~30-40 ns to convert), which take the *addresses of
the NumPy array objects* (``id``) and read each array's C header themselves (``data``, ``nd``,
``dimensions``, ``flags`` of NumPy's ``PyArrayObject``, checked once by :func:`ndarray_layout`):
one call checks that both arrays are one aligned element (the result writable), applies the
operation and stores the old element into the result.  The element type is frozen into each
compiled function (a closure over a zero of the type), so four int arguments suffice.
:func:`raw` gives ``memmove`` and the fence the same way (small Put/Get, Flush).

Types without an instruction (complex, ``long double``, the pair types, ``float16``,
which Numba cannot do arithmetic on) are not :func:`supported`: the window code takes
a lock around a plain read-modify-write for them.

Words
-----
:func:`load64`, :func:`store64`, :func:`cas64`, :func:`add64` and :func:`fence` are the
``int64`` words that locks and counters in shared memory are made of.
"""

from __future__ import annotations

import numpy as np

from ..._arrays import (NP_ALIGNED, NP_C_CONTIGUOUS, NP_DATA_OFFSET, NP_DIMS_OFFSET, NP_FLAGS_OFFSET, NP_ND_OFFSET,
                        NP_WRITEABLE)
from ._ops import (BAND as _BAND, BOR as _BOR, BXOR as _BXOR, CODE as _CODE, I8 as _I8, KINDS as _KINDS,
                   LAND as _LAND, LOR as _LOR, LXOR as _LXOR, MAX as _MAX, MIN as _MIN, NO_OP as _NO_OP, OPS,
                   PROD as _PROD, REPLACE as _REPLACE, SUM as _SUM, UNSIGNED as _UNSIGNED, check_op as _check,
                   elem_ok as _elem_ok, np_dtype as _np_dtype, work_dtype as _work_dtype)

__all__ = ["accumulate", "fetch_and_op", "compare_and_swap", "fop_ndarray", "cas_ndarray", "acc_ndarray",
           "ndarray_layout", "load64", "store64", "cas64", "add64", "fence", "raw"]


# -- host: the intrinsics, built on first use -------------------------------------------------------

_update = _cas = _load = _store = _rmw_add = _fence = _move = None  # the intrinsics once _build() ran: the jitted
# functions below name them as globals, which numba resolves when it compiles them (as reduce.py's _cuda)
_BUILT = None  # (numba, numba.types) once _build() ran


def _build():
    """Define the intrinsics (imports numba and llvmlite)."""
    global _update, _cas, _load, _store, _rmw_add, _fence, _move, _BUILT
    if _BUILT is not None:
        return _BUILT
    from ..._device import use_simulator

    use_simulator()  # numba's first compilation fixes numba.cuda's mode: the simulator where it can only be that
    import numba
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    seq = "seq_cst"

    def elem(ty):
        return isinstance(ty, types.Integer) or (isinstance(ty, types.Float) and ty.bitwidth in (32, 64))

    def pointers(builder, ty, lty, addr):
        """``(T*, iN*)`` at ``addr``: the element and its bits."""
        ity = ir.IntType(ty.bitwidth)
        return builder.inttoptr(addr, lty.as_pointer()), builder.inttoptr(addr, ity.as_pointer()), ity

    def to_bits(builder, ty, x, ity):
        return builder.bitcast(x, ity) if isinstance(ty, types.Float) else x

    def from_bits(builder, ty, x, lty):
        return builder.bitcast(x, lty) if isinstance(ty, types.Float) else x

    def cas_loop(builder, ty, lty, pi, ity, combine):
        """``cur = load; loop: new = combine(cur); cmpxchg until it sticks``; returns the old element."""
        align = ty.bitwidth // 8
        init = builder.load_atomic(pi, "monotonic", align)  # a first guess; the cmpxchg checks it
        pre = builder.block
        loop = builder.append_basic_block("cas.loop")
        done = builder.append_basic_block("cas.done")
        builder.branch(loop)
        builder.position_at_end(loop)
        cur = builder.phi(ity)
        cur.add_incoming(init, pre)
        old = from_bits(builder, ty, cur, lty)
        new = to_bits(builder, ty, combine(old), ity)
        res = builder.cmpxchg(pi, cur, new, seq, seq)
        cur.add_incoming(builder.extract_value(res, 0), builder.block)
        builder.cbranch(builder.extract_value(res, 1), done, loop)
        builder.position_at_end(done)
        return old

    def truth(builder, ty, x):
        if isinstance(ty, types.Float):
            return builder.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))  # NaN is true
        return builder.icmp_unsigned("!=", x, ir.Constant(x.type, 0))

    def from_truth(builder, ty, lty, b):
        return builder.uitofp(b, lty) if isinstance(ty, types.Float) else builder.zext(b, lty)

    def emit_op(builder, ty, lty, addr, v, code):
        """The atomic update of one element by operation ``code``; returns the old element."""
        p, pi, ity = pointers(builder, ty, lty, addr)
        align = ty.bitwidth // 8
        fl = isinstance(ty, types.Float)
        if code == _NO_OP:
            return builder.load_atomic(p, seq, align)
        if code == _REPLACE:
            return from_bits(builder, ty, builder.atomic_rmw("xchg", pi, to_bits(builder, ty, v, ity), seq), lty)
        if code == _SUM:
            return builder.atomic_rmw("fadd" if fl else "add", p, v, seq)
        if not fl and code in (_MAX, _MIN, _BAND, _BOR, _BXOR):
            name = {_MAX: "max", _MIN: "min", _BAND: "and", _BOR: "or", _BXOR: "xor"}[code]
            if code in (_MAX, _MIN) and not ty.signed:
                name = "u" + name
            return builder.atomic_rmw(name, p, v, seq)
        if code == _PROD:
            return cas_loop(builder, ty, lty, pi, ity, lambda o: builder.fmul(o, v) if fl else builder.mul(o, v))
        if code in (_MAX, _MIN):  # float: numpy.maximum/minimum, NaN propagates (ties keep the old value)
            def pick(o):
                better = builder.fcmp_ordered(">" if code == _MAX else "<", v, o)
                return builder.select(builder.or_(better, builder.fcmp_unordered("uno", v, v)), v, o)
            return cas_loop(builder, ty, lty, pi, ity, pick)
        if code in (_LAND, _LOR, _LXOR):
            join = {_LAND: builder.and_, _LOR: builder.or_, _LXOR: builder.xor}[code]
            return cas_loop(builder, ty, lty, pi, ity,
                            lambda o: from_truth(builder, ty, lty, join(truth(builder, ty, o), truth(builder, ty, v))))
        raise AssertionError((code, ty))

    def defined(code, ty):
        kind = "f" if isinstance(ty, types.Float) else ("i" if ty.signed else "u")
        return kind in _KINDS[OPS[code]]

    @intrinsic
    def update(typingctx, addr, val, op):
        """``old = *addr; *addr = old OPS[op] val`` atomically; the old element (``NO_OP`` for an op the type lacks)."""
        if not (isinstance(addr, types.Integer) and isinstance(op, types.Integer) and elem(val)):
            return None
        ty = types.unliteral(val)

        def codegen(context, builder, sig, args):
            a, v, code = args
            lty = context.get_value_type(ty)
            fn = builder.function
            merge = fn.append_basic_block("acc.merge")
            default = fn.append_basic_block("acc.default")
            switch = builder.switch(code, default)
            incoming = []
            for c in range(len(OPS)):
                if c == _NO_OP or not defined(c, ty):
                    continue
                blk = fn.append_basic_block(f"acc.{OPS[c].lower()}")
                switch.add_case(ir.Constant(code.type, c), blk)
                builder.position_at_end(blk)
                incoming.append((emit_op(builder, ty, lty, a, v, c), builder.block))
                builder.branch(merge)
            builder.position_at_end(default)
            incoming.append((emit_op(builder, ty, lty, a, v, _NO_OP), builder.block))
            builder.branch(merge)
            builder.position_at_end(merge)
            phi = builder.phi(lty)
            for value, blk in incoming:
                phi.add_incoming(value, blk)
            return phi

        return ty(types.intp, ty, types.intp), codegen

    @intrinsic
    def cas(typingctx, addr, expected, desired):
        """``cmpxchg`` of the element's bits (a float compares bitwise); returns the old element."""
        if not (isinstance(addr, types.Integer) and elem(expected)):
            return None
        ty = types.unliteral(expected)

        def codegen(context, builder, sig, args):
            a, e, d = args
            lty = context.get_value_type(ty)
            _, pi, ity = pointers(builder, ty, lty, a)
            res = builder.cmpxchg(pi, to_bits(builder, ty, e, ity), to_bits(builder, ty, d, ity), seq, seq)
            return from_bits(builder, ty, builder.extract_value(res, 0), lty)

        return ty(types.intp, ty, ty), codegen

    @intrinsic
    def load(typingctx, addr, like):
        """Atomic load of an element of ``like``'s type."""
        if not (isinstance(addr, types.Integer) and elem(like)):
            return None
        ty = types.unliteral(like)

        def codegen(context, builder, sig, args):
            lty = context.get_value_type(ty)
            return builder.load_atomic(builder.inttoptr(args[0], lty.as_pointer()), seq, ty.bitwidth // 8)

        return ty(types.intp, ty), codegen

    @intrinsic
    def store(typingctx, addr, val):
        if not (isinstance(addr, types.Integer) and elem(val)):
            return None
        ty = types.unliteral(val)

        def codegen(context, builder, sig, args):
            lty = context.get_value_type(ty)
            builder.store_atomic(args[1], builder.inttoptr(args[0], lty.as_pointer()), seq, ty.bitwidth // 8)
            return context.get_dummy_value()

        return types.none(types.intp, ty), codegen

    @intrinsic
    def rmw_add(typingctx, addr, val):
        if not (isinstance(addr, types.Integer) and isinstance(val, types.Integer)):
            return None
        ty = types.unliteral(val)

        def codegen(context, builder, sig, args):
            lty = context.get_value_type(ty)
            return builder.atomic_rmw("add", builder.inttoptr(args[0], lty.as_pointer()), args[1], seq)

        return ty(types.intp, ty), codegen

    @intrinsic
    def fence(typingctx):
        def codegen(context, builder, sig, args):
            builder.fence(seq)
            return context.get_dummy_value()

        return types.none(), codegen

    @intrinsic
    def move(typingctx, dst, src, n):
        """``memmove(dst, src, n)`` on addresses (not atomic: a plain copy of bytes)."""
        if not all(isinstance(t, types.Integer) for t in (dst, src, n)):
            return None

        def codegen(context, builder, sig, args):
            d, s, k = args
            p = ir.IntType(8).as_pointer()
            cgutils.raw_memmove(builder, builder.inttoptr(d, p), builder.inttoptr(s, p), k, 1)
            return context.get_dummy_value()

        return types.none(types.intp, types.intp, types.intp), codegen

    _update, _cas, _load, _store, _rmw_add, _fence, _move = update, cas, load, store, rmw_add, fence, move
    _BUILT = (numba, types)
    return _BUILT


# -- host: the jitted functions (plain Python here; compiled per element type by _jit) ----------------


def _j_accumulate(base, offs, vals, fetch, want, op, mask):
    """Apply ``vals[i]`` at ``base + offs[i]`` in order; -1, or the index of the first misaligned offset
    (then nothing was applied)."""
    n = offs.shape[0]
    for i in range(n):
        if (base + offs[i]) & mask:
            return i
    for i in range(n):
        old = _update(base + offs[i], vals[i], op)
        if want:
            fetch[i] = old
    return -1


def _j_fetch_and_op(addr, val, op):
    return _update(addr, val, op)


def _j_cas(addr, expected, desired):
    return _cas(addr, expected, desired)


_I32, _I64 = np.int32(0), np.int64(0)  # types the header loads take (numba freezes them as constants)


def _j_element(obj, want):
    """The address of the element of the one-element NumPy array whose object is at ``obj`` (its
    ``id``) when its flags have every bit of ``want``; 0 otherwise (see :func:`fop_ndarray`)."""
    if _load(obj + NP_FLAGS_OFFSET, _I32) & want != want:
        return 0
    dims = _load(obj + NP_DIMS_OFFSET, _I64)
    for i in range(_load(obj + NP_ND_OFFSET, _I32)):
        if _load(dims + 8 * i, _I64) != 1:
            return 0
    return _load(obj + NP_DATA_OFFSET, _I64)


def _fop_ndarray_of(like):
    """The Fetch_and_op of :func:`fop_ndarray` for elements of ``like``'s type (a closure: numba
    freezes ``like``, so one compiled function per type, cached on disk as any other)."""
    def fop_ndarray(addr, origin, result, op):
        o = _element(origin, NP_ALIGNED)
        r = _element(result, NP_ALIGNED | NP_WRITEABLE)
        if o == 0 or r == 0:
            return 1
        _store(r, _update(addr, _load(o, like), op))
        return 0

    return fop_ndarray


def _cas_ndarray_of(like):
    def cas_ndarray(addr, origin, compare, result):
        o = _element(origin, NP_ALIGNED)
        c = _element(compare, NP_ALIGNED)
        r = _element(result, NP_ALIGNED | NP_WRITEABLE)
        if o == 0 or c == 0 or r == 0:
            return 1
        _store(r, _cas(addr, _load(c, like), _load(o, like)))
        return 0

    return cas_ndarray


def _acc_ndarray_of(like):
    """The Accumulate of :func:`acc_ndarray` for elements of ``like``'s type (a closure, as
    :func:`_fop_ndarray_of`; the element size is frozen with it)."""
    w = like.itemsize

    def acc_ndarray(addr, origin, n, op):
        if _load(origin + NP_FLAGS_OFFSET, _I32) & _ACC_WANT != _ACC_WANT:
            return 1
        o = _load(origin + NP_DATA_OFFSET, _I64)
        for i in range(n):
            _update(addr + i * w, _load(o + i * w, like), op)
        return 0

    return acc_ndarray


def _j_move(dst, src, n):
    _move(dst, src, n)


def _j_load(addr, like):
    return _load(addr, like)


def _j_store(addr, val):
    _store(addr, val)


def _j_add(addr, delta):
    return _rmw_add(addr, delta)


def _j_fence():
    _fence()


def _jit(pyfunc, sig):
    """``numba.njit(sig, cache=True)(pyfunc)``: compiled now (or loaded from the cache)."""
    numba, _ = _build()
    try:
        return numba.njit(sig, cache=True)(pyfunc)
    except RuntimeError:  # no writable cache location
        return numba.njit(sig)(pyfunc)


def _nbtype(dt: np.dtype):
    from numba.np.numpy_support import from_dtype

    return from_dtype(dt)



# The entry caches are keyed by the *identity* of the dtype object given (hashing a NumPy dtype costs
# ~100 ns, a third of a Fetch_and_op); each entry keeps that object alive, so its id is never reused.
_ACC: dict = {}  # (op, id(dtype)) -> (dispatcher, code, work dtype, empty fetch array, alignment mask, dtype)
_FOP: dict = {}  # (op, id(dtype)) -> (dispatcher, code, bool?, alignment mask, dtype)
_CAS: dict = {}  # id(dtype) -> (dispatcher, np.dtype, bits dtype or None, bool?, alignment mask, dtype)
_LOOPS: dict = {}  # work dtype -> accumulate dispatcher
_SCALARS: dict = {}  # (name, work dtype) -> dispatcher
_WORDS = None  # (load64, store64, cas64, add64, fence) dispatchers
_INTO: dict = {}  # ("fop" / "cas", dtype) -> compiled fop_ndarray / cas_ndarray
_element = None  # the dispatcher of _j_element once an ndarray entry point was made (a global of theirs)
_RAW = None  # (move, fence): the compiled functions themselves


def _acc_entry(op: str, dtype):
    dt = _check("atomics.accumulate", op, dtype)
    w = _work_dtype(dt)
    fn = _LOOPS.get(w)
    if fn is None:
        _, types = _build()
        t = _nbtype(w)
        sig = types.int64(types.int64, types.Array(types.int64, 1, "A", readonly=True),
                          types.Array(t, 1, "A", readonly=True), types.Array(t, 1, "A"), types.boolean,
                          types.int64, types.int64)
        fn = _LOOPS[w] = _jit(_j_accumulate, sig)
    e = _ACC[(op, id(dtype))] = (fn, _CODE[op], w, np.empty(0, w), dt.itemsize - 1, dtype)
    return e


def accumulate(base: int, offsets, values, op: str, fetch=None) -> None:
    """Atomically ``*(base + offsets[i]) = *(...) op values[i]`` for each ``i`` in order (MPI_Accumulate's
    element-wise atomicity; with ``fetch``, MPI_Get_accumulate).

    ``base``: an address; ``offsets``: 1-D integer array of byte offsets from it, each a multiple
    of the element size (they may repeat: the updates apply one after another); ``values``: 1-D
    array whose dtype is the element type, as long as ``offsets``; ``fetch``: None or a writable
    1-D array of the same dtype and length that receives each element's old value.  ``REPLACE``
    stores ``values[i]``; ``NO_OP`` only reads.  ``ValueError`` for an operation the type does
    not take (see :func:`supported`), mismatched lengths or a misaligned offset (nothing applied).
    """
    dt = values.dtype
    e = _ACC.get((op, id(dt)))
    if e is None:
        e = _acc_entry(op, dt)
    fn, code, w, empty, mask, _ = e
    if offsets.dtype != _I8:
        offsets = np.asarray(offsets, _I8)
    if values.ndim != 1 or offsets.ndim != 1 or len(values) != len(offsets):
        raise ValueError(f"atomics.accumulate: values and offsets must be 1-D of one length "
                         f"({values.shape}, {offsets.shape})")
    if w is not dt:
        values = values.view(w)
    if fetch is None:
        bad = fn(base, offsets, values, empty, False, code, mask)
    else:
        if fetch.dtype != dt or fetch.shape != values.shape:
            raise ValueError(f"atomics.accumulate: fetch must be 1-D {dt} of length {len(values)} "
                             f"({fetch.dtype}, {fetch.shape})")
        bad = fn(base, offsets, values, fetch.view(w) if w is not dt else fetch, True, code, mask)
    if bad >= 0:
        raise ValueError(f"atomics.accumulate: element address not a multiple of {mask + 1} "
                         f"(base {base:#x} + offsets[{bad}] {int(offsets[bad])})")


def _scalar(name: str, pyfunc, w: np.dtype, sig_of):
    fn = _SCALARS.get((name, w))
    if fn is None:
        _, types = _build()
        fn = _SCALARS[(name, w)] = _jit(pyfunc, sig_of(types, _nbtype(w)))
    return fn


def _fop_entry(op: str, dtype):
    dt = _check("atomics.fetch_and_op", op, dtype)
    w = _work_dtype(dt)
    fn = _scalar("fop", _j_fetch_and_op, w, lambda types, t: t(types.int64, t, types.int64))
    e = _FOP[(op, id(dtype))] = (fn, _CODE[op], dt.kind == "b", dt.itemsize - 1, dtype)
    return e


def _compiled(dispatcher):
    """The machine code behind a dispatcher of one signature, callable without the dispatcher
    (``Dispatcher.get_overload``): no type matching, ~0.1 us less a call.  Its arguments are
    converted as C converts (a float given for an integer is truncated): callers pass ints."""
    return dispatcher.get_overload(dispatcher.signatures[0])


# The ndarray entry points read PyArrayObject's data, nd, dimensions and flags at gpumpi._arrays'
# offsets (NP_*_OFFSET) and test its flag bits (NP_ALIGNED, NP_WRITEABLE, NP_C_CONTIGUOUS)
_ACC_WANT = NP_C_CONTIGUOUS | NP_ALIGNED
_LAYOUT: list = []  # [whether this interpreter's ndarrays have that layout], once checked


def ndarray_layout() -> bool:
    """Whether the ndarrays of this interpreter lay out ``data``, ``nd``, ``dimensions`` and
    ``flags`` where :func:`fop_ndarray` and :func:`cas_ndarray` read them (64-bit CPython, checked
    on sample arrays against NumPy's own accessors, as :mod:`gpumpi._arrays` checks its peeks)."""
    if not _LAYOUT:
        import ctypes
        import sys

        ok = sys.implementation.name == "cpython" and ctypes.sizeof(ctypes.c_void_p) == 8
        if ok:
            base = np.arange(24, dtype=np.int32).reshape(4, 6)
            ro = np.ones(3)
            ro.flags.writeable = False
            for a in (np.zeros(1), np.zeros((1, 1), np.int8), np.array(5), base, base[:, ::2], base.T[1:], ro,
                      np.empty(0)):
                at = id(a)
                nd = ctypes.c_int.from_address(at + NP_ND_OFFSET).value
                dims = ctypes.c_void_p.from_address(at + NP_DIMS_OFFSET).value or 0
                fl = ctypes.c_int.from_address(at + NP_FLAGS_OFFSET).value
                if (nd != a.ndim or ctypes.c_void_p.from_address(at + NP_DATA_OFFSET).value != a.ctypes.data
                        or tuple((ctypes.c_int64 * nd).from_address(dims)) != a.shape
                        or bool(fl & NP_ALIGNED) != a.flags.aligned or bool(fl & NP_WRITEABLE) != a.flags.writeable):
                    ok = False
                    break
        _LAYOUT.append(ok)
    return _LAYOUT[0]


def _ndarray_entry(kind: str, dt: np.dtype, make):
    global _element
    fn = _INTO.get((kind, dt))
    if fn is None:
        _, types = _build()
        i8 = types.int64
        if _element is None:
            _element = _jit(_j_element, i8(i8, i8))
        sig = i8(i8, i8, i8, i8)
        fn = _INTO[(kind, dt)] = _compiled(_jit(make(dt.type(0)), sig))
    return fn


def fop_ndarray(op: str, dtype) -> tuple:
    """``(fn, code, align_mask)``: ``fn(addr, id(origin), id(result), code)`` is MPI_Fetch_and_op of
    one element, read from and written to NumPy arrays in one call into machine code: when both
    arrays hold exactly one element, aligned, the result writable, it applies ``op`` with the origin's
    element to the element at ``addr`` atomically, stores the old element into the result and
    returns 0; otherwise it returns 1 and touches nothing.

    The window's near path (``Win.Fetch_and_op``) calls it; the caller guarantees what the machine
    code cannot check: both objects are ndarrays of exactly ``dtype`` (``type(a) is np.ndarray``),
    alive during the call; ``addr`` is a multiple of ``align_mask + 1``; every argument a Python
    ``int``.  It reads the arrays' C headers (:func:`ndarray_layout` must be true).  Integer and
    float types only (not ``bool``); ``ValueError`` where not :func:`supported`."""
    dt = _check("atomics.fop_ndarray", op, dtype)
    if dt.kind == "b" or not ndarray_layout():
        raise ValueError(f"atomics.fop_ndarray: integer and float types only, on CPython's ndarrays ({dtype!r})")
    return _ndarray_entry("fop", dt, _fop_ndarray_of), _CODE[op], dt.itemsize - 1


def fetch_and_op(addr: int, value, op: str, dtype):
    """Atomically ``old = *addr; *addr = old op value``; returns ``old`` (MPI_Fetch_and_op on one element).

    ``addr``: the element's address, a multiple of its size; ``dtype``: its NumPy type, one
    :func:`supported` takes with ``op``; ``value`` is converted to it as C converts (an
    integer out of range wraps, a float is truncated).  Returns a Python ``int``, ``float``
    or ``bool``.
    """
    e = _FOP.get((op, id(dtype)))
    if e is None:
        e = _fop_entry(op, dtype)
    fn, code, isbool, mask, _ = e
    if addr & mask:
        raise ValueError(f"atomics.fetch_and_op: address not a multiple of {mask + 1} ({addr:#x})")
    old = fn(addr, value, code)
    return bool(old) if isbool else old


def _cas_entry(dtype):
    dt = _np_dtype(dtype)
    if dt is None or dt.itemsize not in (1, 2, 4, 8):
        raise ValueError(f"atomics.compare_and_swap: no atomic compare-and-swap for this type ({dtype!r}; "
                         f"elements of 1, 2, 4 or 8 bytes)")
    if _elem_ok(dt):
        w, bits = _work_dtype(dt), None
    else:  # any other 1/2/4/8-byte type: its bits
        w = bits = _UNSIGNED[dt.itemsize]
    fn = _scalar("cas", _j_cas, w, lambda types, t: t(types.int64, t, t))
    e = _CAS[id(dtype)] = (fn, dt, bits, dt.kind == "b", dt.itemsize - 1, dtype)
    return e


def cas_ndarray(dtype) -> tuple:
    """``(fn, align_mask)`` for an integer ``dtype``: ``fn(addr, id(origin), id(compare), id(result))``
    is MPI_Compare_and_swap of one element between NumPy arrays, as :func:`fop_ndarray` (0: done;
    1: an array is not one aligned element, or the result is not writable; nothing touched)."""
    dt = _np_dtype(dtype)
    if dt is None or dt.kind not in "iu" or not _elem_ok(dt) or not ndarray_layout():
        raise ValueError(f"atomics.cas_ndarray: native integer types only, on CPython's ndarrays ({dtype!r})")
    return _ndarray_entry("cas", dt, _cas_ndarray_of), dt.itemsize - 1


def acc_ndarray(op: str, dtype) -> tuple:
    """``(fn, code, align_mask)``: ``fn(addr, id(origin), n, code)`` is MPI_Accumulate of the
    ``n`` elements of a NumPy array into the ``n`` elements at ``addr``, each atomically, in
    order, in one call into machine code: when the array is C-contiguous and aligned it applies
    ``op`` and returns 0; otherwise it returns 1 and touches nothing.

    The window's near path (``Win.Accumulate``) calls it; the caller guarantees what the machine
    code cannot check: the object is an ndarray of exactly ``dtype`` with ``n`` elements, alive
    during the call; ``addr`` is a multiple of ``align_mask + 1`` and ``n`` elements from it are
    the caller's to update.  Integer and float types; ``ValueError`` where not :func:`supported`."""
    dt = _check("atomics.acc_ndarray", op, dtype)
    if dt.kind not in "iuf" or not ndarray_layout():
        raise ValueError(f"atomics.acc_ndarray: integer and float types only, on CPython's ndarrays ({dtype!r})")
    return _ndarray_entry("acc", dt, _acc_ndarray_of), _CODE[op], dt.itemsize - 1


def compare_and_swap(addr: int, compare, value, dtype):
    """Atomically ``old = *addr; if old == compare: *addr = value``; returns ``old`` (MPI_Compare_and_swap).

    The comparison is of the bits (MPI compares the representation: a float ``-0.0`` does not
    equal ``0.0``, a NaN equals the same NaN).  Any ``dtype`` of 1, 2, 4 or 8 bytes; the old
    value comes back as a Python number for bool, integer and float types, else as a NumPy scalar.
    """
    e = _CAS.get(id(dtype))
    if e is None:
        e = _cas_entry(dtype)
    fn, dt, bits, isbool, mask, _ = e
    if addr & mask:
        raise ValueError(f"atomics.compare_and_swap: address not a multiple of {mask + 1} ({addr:#x})")
    if bits is not None:
        c = np.asarray(compare, dt).reshape(()).view(bits)[()]
        v = np.asarray(value, dt).reshape(()).view(bits)[()]
        return np.asarray(fn(addr, c, v), bits).view(dt)[()]
    if dt.kind == "f":  # bitwise: the float's own bits, not a conversion of another type
        compare, value = dt.type(compare), dt.type(value)
    old = fn(addr, compare, value)
    return bool(old) if isbool else old


# -- words: locks and counters -----------------------------------------------------------------------


def _words():
    global _WORDS
    if _WORDS is None:
        _, types = _build()
        i8, p = types.int64, types.int64
        _WORDS = (_jit(_j_load, i8(p, i8)), _jit(_j_store, types.none(p, i8)), _jit(_j_cas, i8(p, i8, i8)),
                  _jit(_j_add, i8(p, i8)), _jit(_j_fence, types.none()))
    return _WORDS


def load64(addr: int) -> int:
    """Atomic (``seq_cst``) load of the ``int64`` at ``addr`` (8-aligned)."""
    return (_WORDS or _words())[0](addr, 0)


def store64(addr: int, v: int) -> None:
    """Atomic (``seq_cst``) store of ``v`` into the ``int64`` at ``addr`` (8-aligned)."""
    (_WORDS or _words())[1](addr, v)


def cas64(addr: int, expected: int, desired: int) -> int:
    """Compare-and-swap of the ``int64`` at ``addr``; returns the old value (it succeeded iff that is ``expected``)."""
    return (_WORDS or _words())[2](addr, expected, desired)


def add64(addr: int, delta: int) -> int:
    """Atomic fetch-and-add on the ``int64`` at ``addr``; returns the old value."""
    return (_WORDS or _words())[3](addr, delta)


def fence() -> None:
    """A full memory barrier (``fence seq_cst``)."""
    (_WORDS or _words())[4]()


def raw() -> tuple:
    """``(move, fence)``, compiled and called without a dispatcher (see :func:`_compiled`):
    ``move(dst, src, n)`` is ``memmove`` on addresses (ints; not atomic), ``fence()`` is
    :func:`fence`.  The window's small Put/Get and Flush take them."""
    global _RAW
    if _RAW is None:
        _, types = _build()
        i8 = types.int64
        _RAW = (_compiled(_jit(_j_move, types.none(i8, i8, i8))), _compiled((_WORDS or _words())[4]))
    return _RAW
