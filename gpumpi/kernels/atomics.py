"""Atomic instructions on raw addresses (L3): the element-wise atomicity of RMA windows, host and device.

Theory of operation
===================
An RMA window on one node is memory that every origin process updates itself: a host
window is a shared mapping (memfd), so the same physical page sits at a *different*
address in each process; a device window is device memory opened through CUDA IPC.
MPI makes ``Accumulate``, ``Get_accumulate``, ``Fetch_and_op`` and ``Compare_and_swap``
atomic per basic element (MPI-4.1 12.7.1), so two origins adding into one element never
lose an update.  Locks would do, but an instruction that the hardware makes atomic is
faster and needs nothing from the target: this module issues those instructions.

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

Device
------
:func:`device_accumulate` runs numba.cuda kernels over the window memory, one CUDA
thread per element (grid-stride loops, as in :mod:`gpumpi.kernels.reduce`)::

    elements                    ops                          kernel
    4/8-byte int                SUM MAX MIN BAND BOR BXOR    cuda.atomic.add/max/min/and_/or_/xor
    4/8-byte float              SUM                          cuda.atomic.add
    4/8-byte any                REPLACE                      cuda.atomic.exch on the unsigned view of the bits
    4/8-byte any                NO_OP                        an aligned load (single-copy atomic on the GPU)
    4/8-byte int                PROD LAND LOR LXOR           cuda.atomic.cas loop
    4/8-byte float              PROD MAX MIN LAND LOR LXOR   cuda.atomic.cas loop on the bits, bit-cast through
                                                             a one-element local array and its view
    1/2-byte int, bool          all                          cuda.atomic.cas loop on the aligned 32-bit word
                                                             holding the element (shift and mask): numba has
                                                             no 8/16-bit atomics

The kernels index one array over the whole allocation holding the window (its start,
from the adapter's ``pointer_info``, is 256-aligned, so every element and every 32-bit
word is aligned).  CUDA's own float ``atomic.max/min`` skip the store when the value is
NaN, so floats take the cas loop to propagate NaN as the host does.

Simulated device memory (the ``'sim'`` adapter) is host memory shared between
processes; numba's CUDA simulator makes its atomics atomic between the Python threads of
one process only.  So :func:`device_accumulate` on the simulated adapter applies the
*host* instructions to the mapped memory (really atomic between processes), and the
kernels themselves are proven on the simulator by :func:`kernel_accumulate` on arrays
(``tests/kernels/test_atomics.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["OPS", "supported", "accumulate", "fetch_and_op", "compare_and_swap", "fop_ndarray", "cas_ndarray",
           "acc_ndarray", "ndarray_layout", "load64", "store64", "cas64", "add64", "fence", "raw", "device_accumulate",
           "kernel_accumulate"]

#: the operations, in the order of their codes in the compiled switch
OPS = ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP")
_CODE = {name: i for i, name in enumerate(OPS)}
_SUM, _PROD, _MAX, _MIN, _LAND, _LOR, _LXOR, _BAND, _BOR, _BXOR, _REPLACE, _NO_OP = range(len(OPS))

_U8 = np.dtype(np.uint8)
_I8 = np.dtype(np.int64)
_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}

# which element kinds each operation takes ('b' bool, 'i' signed, 'u' unsigned, 'f' float)
_KINDS = {"SUM": "iuf", "PROD": "iuf", "MAX": "iuf", "MIN": "iuf", "LAND": "biuf", "LOR": "biuf", "LXOR": "biuf",
          "BAND": "biu", "BOR": "biu", "BXOR": "biu", "REPLACE": "biuf", "NO_OP": "biuf"}


def _np_dtype(dtype) -> np.dtype | None:
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


def _elem_ok(dt: np.dtype) -> bool:
    """An element type the instructions handle: 1/2/4/8-byte bool or integer, 4/8-byte float, native order."""
    if dt.kind in "biu":
        ok = dt.itemsize in (1, 2, 4, 8)
    elif dt.kind == "f":
        ok = dt.itemsize in (4, 8)  # float16: no Numba arithmetic; long double: no atomic of its width
    else:
        return False
    return ok and dt.isnative and dt.fields is None


def supported(op: str, dtype) -> bool:
    """Whether :func:`accumulate` updates elements of NumPy ``dtype`` with ``op`` atomically.

    ``op`` is one of :data:`OPS`.  True for 1/2/4/8-byte ``bool`` and integers and 4/8-byte
    floats where MPI defines the operation for the kind (bitwise: integers and bool;
    arithmetic: integers and floats; logical, ``REPLACE``, ``NO_OP``: all of them).
    Complex, ``float16``, ``long double``, structured (pair) and non-native types: False
    (the caller takes a lock instead).
    """
    kinds = _KINDS.get(op)
    dt = _np_dtype(dtype)
    return kinds is not None and dt is not None and _elem_ok(dt) and dt.kind in kinds


# -- host: the intrinsics, built on first use -------------------------------------------------------

_update = _cas = _load = _store = _rmw_add = _fence = _move = None  # the intrinsics once _build() ran: the jitted
# functions below name them as globals, which numba resolves when it compiles them (as reduce.py's _cuda)
_BUILT = None  # (numba, numba.types) once _build() ran


def _build():
    """Define the intrinsics (imports numba and llvmlite)."""
    global _update, _cas, _load, _store, _rmw_add, _fence, _move, _BUILT
    if _BUILT is not None:
        return _BUILT
    from .._device import use_simulator

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
    if _load(obj + _FLAGS_AT, _I32) & want != want:
        return 0
    dims = _load(obj + _DIMS_AT, _I64)
    for i in range(_load(obj + _ND_AT, _I32)):
        if _load(dims + 8 * i, _I64) != 1:
            return 0
    return _load(obj + _DATA_AT, _I64)


def _fop_ndarray_of(like):
    """The Fetch_and_op of :func:`fop_ndarray` for elements of ``like``'s type (a closure: numba
    freezes ``like``, so one compiled function per type, cached on disk as any other)."""
    def fop_ndarray(addr, origin, result, op):
        o = _element(origin, _ALIGNED)
        r = _element(result, _ALIGNED | _WRITEABLE)
        if o == 0 or r == 0:
            return 1
        _store(r, _update(addr, _load(o, like), op))
        return 0

    return fop_ndarray


def _cas_ndarray_of(like):
    def cas_ndarray(addr, origin, compare, result):
        o = _element(origin, _ALIGNED)
        c = _element(compare, _ALIGNED)
        r = _element(result, _ALIGNED | _WRITEABLE)
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
        if _load(origin + _FLAGS_AT, _I32) & _ACC_WANT != _ACC_WANT:
            return 1
        o = _load(origin + _DATA_AT, _I64)
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


def _work_dtype(dt: np.dtype) -> np.dtype:
    """The type the instructions see: ``bool`` as ``uint8``."""
    return _U8 if dt.kind == "b" else dt


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


def _check(call: str, op: str, dtype) -> np.dtype:
    dt = _np_dtype(dtype)
    if op not in _KINDS:
        raise ValueError(f"{call}: unknown operation ({op!r}; expected one of {', '.join(OPS)})")
    if dt is None or not supported(op, dt):
        raise ValueError(f"{call}: no atomic {op} for this element type ({dtype!r})")
    return dt


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


# PyArrayObject (NumPy's C struct, the same in NumPy 1 and 2): where the fields the ndarray entry
# points read lie from the object's address, and the flag bits they test (NPY_ARRAY_*)
_DATA_AT, _ND_AT, _DIMS_AT, _FLAGS_AT = 16, 24, 32, 64
_ALIGNED, _WRITEABLE = 0x100, 0x400
_ACC_WANT = 0x1 | _ALIGNED  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED
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
                nd = ctypes.c_int.from_address(at + _ND_AT).value
                dims = ctypes.c_void_p.from_address(at + _DIMS_AT).value or 0
                fl = ctypes.c_int.from_address(at + _FLAGS_AT).value
                if (nd != a.ndim or ctypes.c_void_p.from_address(at + _DATA_AT).value != a.ctypes.data
                        or tuple((ctypes.c_int64 * nd).from_address(dims)) != a.shape
                        or bool(fl & _ALIGNED) != a.flags.aligned or bool(fl & _WRITEABLE) != a.flags.writeable):
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


# -- device kernels (plain Python; compiled by _device, run by numba's simulator for the tests) ---------

_cuda = None  # numba.cuda once _device() ran: the kernels name it as a global, which numba resolves at
# compile time and the simulator swaps for its fake module while a kernel runs (as in kernels.reduce)


def _d_add(win, rel, shift, offs, vals, fetch, want, n):
    """``win[(rel + offs[t]) >> shift] += vals[t]`` atomically, thread ``t`` then ``t + gridsize``...;
    ``win`` is the window's allocation as elements, ``rel`` the window's byte offset in it."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.add(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_max(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.max(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_min(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.min(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_and(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.and_(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_or(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.or_(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_xor(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.xor(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_exch(win, rel, shift, offs, vals, fetch, want, n):
    """``REPLACE`` on the unsigned view of the bits (``win``, ``vals``, ``fetch`` all unsigned)."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.exch(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_load(win, rel, shift, offs, vals, fetch, want, n):
    """``NO_OP``: the old values only (an aligned 4/8-byte load is single-copy atomic)."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        if want:
            fetch[t] = win[(rel + offs[t]) >> shift]
        t += step


def _d_cas_int(win, rel, shift, offs, vals, fetch, want, n, op):
    """4/8-byte integers, ``PROD``/``LAND``/``LOR``/``LXOR``: a cas loop (arithmetic at the element's width)::

        cur = win[i];  loop: new = cur op v;  seen = cas(win, i, cur, new);  until seen == cur
    """
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    new = _cuda.local.array(1, win.dtype)  # stores convert to the element type (and wrap)
    while t < n:
        i = (rel + offs[t]) >> shift
        v = vals[t]
        cur = win[i]
        while True:
            if op == 1:  # PROD
                new[0] = cur * v
            elif op == 4:  # LAND
                new[0] = 1 if (cur != 0 and v != 0) else 0
            elif op == 5:  # LOR
                new[0] = 1 if (cur != 0 or v != 0) else 0
            else:  # LXOR
                new[0] = 1 if ((cur != 0) != (v != 0)) else 0
            seen = _cuda.atomic.cas(win, i, cur, new[0])
            if seen == cur:
                break
            cur = seen
        if want:
            fetch[t] = cur
        t += step


def _d_cas_float(win, rel, shift, offs, vals, fetch, want, n, op):
    """Floats, ``PROD``/``MAX``/``MIN``/``LAND``/``LOR``/``LXOR``: a cas loop on the bits (``win`` is the
    unsigned view of the window); ``bits.view(float)`` of a one-element local array bit-casts."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    bits = _cuda.local.array(1, win.dtype)
    f = bits.view(vals.dtype)
    while t < n:
        i = (rel + offs[t]) >> shift
        v = vals[t]
        cur = win[i]
        while True:
            bits[0] = cur
            old = f[0]
            if op == 1:  # PROD
                f[0] = old * v
            elif op == 2:  # MAX: numpy.maximum (NaN propagates)
                if v > old or v != v:
                    f[0] = v
            elif op == 3:  # MIN
                if v < old or v != v:
                    f[0] = v
            elif op == 4:  # LAND
                f[0] = 1.0 if (old != 0 and v != 0) else 0.0
            elif op == 5:  # LOR
                f[0] = 1.0 if (old != 0 or v != 0) else 0.0
            else:  # LXOR
                f[0] = 1.0 if ((old != 0) != (v != 0)) else 0.0
            seen = _cuda.atomic.cas(win, i, cur, bits[0])
            if seen == cur:
                break
            cur = seen
        if want:
            fetch[t] = old
        t += step


def _d_cas_narrow(win, rel, offs, vals, fetch, want, n, op, nbits, signed):
    """1/2-byte elements (``bool`` as ``uint8``), every operation: a cas loop on the aligned ``uint32``
    word ``win[a >> 2]`` that holds the element at byte ``a & 3`` (little-endian), on unsigned bits::

        word:  | byte 0 | byte 1 | byte 2 | byte 3 |      element at a & 3 == 1: (word >> 8) & 0xff
    """
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    mask = (1 << nbits) - 1
    half = 1 << (nbits - 1)
    while t < n:
        a = rel + offs[t]
        i = a >> 2
        sh = (a & 3) * 8
        v = vals[t] & mask
        cur = win[i]
        while True:
            old = (cur >> sh) & mask
            if op == 0:  # SUM
                new = old + v
            elif op == 1:  # PROD
                new = old * v
            elif op == 2 or op == 3:  # MAX, MIN on the values the bits stand for
                x = int(old)
                y = int(v)
                if signed and x >= half:
                    x -= mask + 1
                if signed and y >= half:
                    y -= mask + 1
                new = v if ((y > x) if op == 2 else (y < x)) else old
            elif op == 4:
                new = 1 if (old != 0 and v != 0) else 0
            elif op == 5:
                new = 1 if (old != 0 or v != 0) else 0
            elif op == 6:
                new = 1 if ((old != 0) != (v != 0)) else 0
            elif op == 7:
                new = old & v
            elif op == 8:
                new = old | v
            elif op == 9:
                new = old ^ v
            elif op == 10:  # REPLACE
                new = v
            else:  # NO_OP
                break
            word = (cur & (0xFFFFFFFF ^ (mask << sh))) | ((new & mask) << sh)
            seen = _cuda.atomic.cas(win, i, cur, word)
            if seen == cur:
                break
            cur = seen
        if want:
            fetch[t] = (cur >> sh) & mask
        t += step


def _d_swap(win, rel, shift, offs, cmp, vals, fetch, n):
    """MPI_Compare_and_swap of 4/8-byte elements on their unsigned bits: one ``atomicCAS`` each."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        fetch[t] = _cuda.atomic.cas(win, (rel + offs[t]) >> shift, cmp[t], vals[t])
        t += step


def _d_swap_narrow(win, rel, offs, cmp, vals, fetch, n, nbits):
    """MPI_Compare_and_swap of 1/2-byte elements: a cas loop on the ``uint32`` word holding each (as
    :func:`_d_cas_narrow`), which writes only when the element's bits equal ``cmp``."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    mask = (1 << nbits) - 1
    while t < n:
        a = rel + offs[t]
        i = a >> 2
        sh = (a & 3) * 8
        c = cmp[t] & mask
        v = vals[t] & mask
        cur = win[i]
        while True:
            if (cur >> sh) & mask != c:
                break
            word = (cur & (0xFFFFFFFF ^ (mask << sh))) | (v << sh)
            seen = _cuda.atomic.cas(win, i, cur, word)
            if seen == cur:
                break
            cur = seen
        fetch[t] = (cur >> sh) & mask
        t += step


_DEVICE_FNS = {"swap": _d_swap, "swap_narrow": _d_swap_narrow, "add": _d_add, "max": _d_max, "min": _d_min, "and": _d_and, "or": _d_or, "xor": _d_xor,
               "exch": _d_exch, "load": _d_load, "cas_int": _d_cas_int, "cas_float": _d_cas_float,
               "cas_narrow": _d_cas_narrow}
_DEV = None  # (numba.cuda, simulator?, {name: kernel})
_THREADS, _MAX_BLOCKS = 256, 4096
_SIM_THREADS, _SIM_MAX_BLOCKS = 32, 2
_SHIFT = {4: 2, 8: 3}
_NATIVE = {_SUM: "add", _BAND: "and", _BOR: "or", _BXOR: "xor"}  # + MAX/MIN for integers


def _device():
    """``(numba.cuda, simulator?, kernels by name)``, built on first use (imports ``numba.cuda``)."""
    global _DEV, _cuda
    d = _DEV
    if d is not None:
        return d
    from numba import cuda

    from . import pack

    _cuda = cuda
    d = _DEV = (cuda, pack._is_sim(), pack.jit_kernels(_DEVICE_FNS))
    return d


def _plan(code: int, dt: np.dtype):
    """``(kernel name, how)``: ``how`` is 'typed' (arrays of ``dt``), 'bits' (unsigned views), 'float'
    (unsigned window, float values) or 'narrow' (``uint32`` window, unsigned values)."""
    if dt.itemsize < 4:
        return "cas_narrow", "narrow"
    if code == _REPLACE:
        return "exch", "bits"
    if code == _NO_OP:
        return "load", "bits"
    if code in _NATIVE and (dt.kind in "iu" or code == _SUM):
        return _NATIVE[code], "typed"
    if code in (_MAX, _MIN) and dt.kind in "iu":
        return ("max" if code == _MAX else "min"), "typed"
    if dt.kind == "f":
        return "cas_float", "float"
    return "cas_int", "typed"


def _launch(n: int, sim: bool):
    threads, cap = (_SIM_THREADS, _SIM_MAX_BLOCKS) if sim else (_THREADS, _MAX_BLOCKS)
    return min(cap, -(-n // threads)), threads


def kernel_accumulate(win8, rel: int, offsets, values, op: str, fetch=None, stream=0) -> None:
    """Run the device kernels: ``win8[rel + offsets[i]]`` (as elements of ``values.dtype``) ``op=``
    ``values[i]`` atomically, the old values into ``fetch``.

    ``win8``: a 1-D ``uint8`` array whose start is 8-aligned and whose length is a multiple of 4
    (a numba device array; under numba's simulator a NumPy array); ``offsets``: ``int64`` byte
    offsets from ``rel``; ``values``/``fetch``: arrays of the element type (``fetch`` None: not
    wanted), device arrays on a real GPU.  ``stream``: a numba stream or 0.  Asynchronous on a
    real GPU (the caller synchronises ``stream``).
    """
    dt = values.dtype
    _check("atomics.kernel_accumulate", op, dt)
    cuda, sim, kernels = _device()
    n = len(values)
    want = fetch is not None
    if not n or (op == "NO_OP" and not want):
        return
    code = _CODE[op]
    w = _work_dtype(dt)
    name, how = _plan(code, w)
    if not want:
        fetch = np.empty(1, w) if sim else cuda.device_array(1, w, stream=stream)
    vals, fet = values.view(w), fetch.view(w)
    blocks, threads = _launch(n, sim)
    k = kernels[name][blocks, threads, stream]
    if how == "narrow":
        u = _UNSIGNED[w.itemsize]
        k(win8.view(np.uint32), rel, offsets, vals.view(u), fet.view(u), want, n, code, w.itemsize * 8,
          w.kind == "i")
        return
    shift = _SHIFT[w.itemsize]
    if how == "bits":
        u = _UNSIGNED[w.itemsize]
        k(win8.view(u), rel, shift, offsets, vals.view(u), fet.view(u), want, n)
    elif how == "float":
        k(win8.view(_UNSIGNED[w.itemsize]), rel, shift, offsets, vals, fet, want, n, code)
    elif name.startswith("cas"):
        k(win8.view(w), rel, shift, offsets, vals, fet, want, n, code)
    else:
        k(win8.view(w), rel, shift, offsets, vals, fet, want, n)


def device_accumulate(ad, base: int, offsets_dev: int, values_dev: int, n: int, op: str, dtype, fetch_dev=None,
                      stream=None) -> None:
    """Device-memory MPI_Accumulate / Get_accumulate: ``*(base + off[i]) op= val[i]`` atomically for ``n``
    elements, on ``stream`` (None: the adapter's current stream); returns once done.

    ``ad``: the adapter of the memory; ``base``: the window's device address (mapped from the
    target through IPC or local); ``offsets_dev``: device address of ``n`` ``int64`` byte
    offsets; ``values_dev``: device address of ``n`` elements of ``dtype``; ``fetch_dev``:
    None or the device address receiving the ``n`` old values.  On the simulated adapter the
    host instructions run on the mapped memory (atomic between processes, see the module notes).
    """
    dt = _check("atomics.device_accumulate", op, dtype)
    if n <= 0:
        return
    isz = dt.itemsize
    if ad.name == "sim":
        ad.stream_synchronize(stream)
        offs = np.frombuffer(ad.host_view(offsets_dev, n * 8), _I8)
        vals = np.frombuffer(ad.host_view(values_dev, n * isz), dt)
        fet = None if fetch_dev is None else np.frombuffer(ad.host_view(fetch_dev, n * isz), dt)
        accumulate(base, offs, vals, op, fet)
        return
    cuda, sim, _ = _device()
    if sim:
        raise NotImplementedError("atomics.device_accumulate: device memory but numba.cuda is the simulator "
                                  "(NUMBA_ENABLE_CUDASIM=1 in a process with a GPU)")
    info = ad.pointer_info(base)
    if info.base is None or info.size is None:
        raise ValueError(f"atomics.device_accumulate: not device memory ({base:#x}, {info.kind})")
    from . import pack
    from .reduce import _dev_bytes

    s = ad.current_stream() if stream is None else stream
    ns = pack._stream(cuda, False, s)
    span = -(-info.size // 8) * 8  # whole words: allocations are 256-aligned and granular
    win8 = _dev_bytes(cuda, info.base, span)
    offs = _dev_bytes(cuda, offsets_dev, n * 8).view(_I8)
    vals = _dev_bytes(cuda, values_dev, n * isz).view(dt)
    fet = None if fetch_dev is None else _dev_bytes(cuda, fetch_dev, n * isz).view(dt)
    kernel_accumulate(win8, base - info.base, offs, vals, op, fet, ns)
    ad.stream_synchronize(s)


def kernel_compare_and_swap(win8, rel: int, offsets, compare, values, fetch, itemsize: int, stream=0) -> None:
    """Run the device compare-and-swap kernels: where the ``itemsize``-byte element at byte
    ``rel + offsets[i]`` of ``win8`` has the bits ``compare[i]``, store ``values[i]``; the old bits
    into ``fetch``.  ``compare``/``values``/``fetch``: unsigned arrays of ``itemsize`` bytes, or
    ``uint32`` for 1/2-byte elements; other arrays as :func:`kernel_accumulate` (asynchronous on a GPU)."""
    if itemsize not in (1, 2, 4, 8):
        raise ValueError(f"atomics.kernel_compare_and_swap: elements of 1, 2, 4 or 8 bytes ({itemsize})")
    cuda, sim, kernels = _device()
    n = len(values)
    if not n:
        return
    blocks, threads = _launch(n, sim)
    if itemsize < 4:
        kernels["swap_narrow"][blocks, threads, stream](win8.view(np.uint32), rel, offsets, compare, values, fetch,
                                                          n, itemsize * 8)
        return
    kernels["swap"][blocks, threads, stream](win8.view(_UNSIGNED[itemsize]), rel, _SHIFT[itemsize], offsets,
                                             compare, values, fetch, n)


def device_compare_and_swap(ad, addr: int, compare: bytes, value: bytes, dtype, stream=None) -> bytes:
    """Device-memory MPI_Compare_and_swap of the one element of ``dtype`` at device address ``addr``
    (mapped from the target through IPC, or local): its old bytes.  On the simulated adapter the
    host instruction runs on the mapped memory (atomic between processes)."""
    dt = np.dtype(dtype)
    if ad.name == "sim":
        ad.stream_synchronize(stream)
        old = compare_and_swap(addr, np.frombuffer(compare, dt)[0], np.frombuffer(value, dt)[0], dt)
        return np.asarray(old, dt).tobytes()
    cuda, sim, _ = _device()
    if sim:
        raise NotImplementedError("atomics.device_compare_and_swap: device memory but numba.cuda is the simulator "
                                  "(NUMBA_ENABLE_CUDASIM=1 in a process with a GPU)")
    info = ad.pointer_info(addr)
    if info.base is None or info.size is None:
        raise ValueError(f"atomics.device_compare_and_swap: not device memory ({addr:#x}, {info.kind})")
    from . import pack
    from .reduce import _dev_bytes

    s = ad.current_stream() if stream is None else stream
    ns = pack._stream(cuda, False, s)
    win8 = _dev_bytes(cuda, info.base, -(-info.size // 8) * 8)
    u = _UNSIGNED[dt.itemsize] if dt.itemsize >= 4 else np.dtype(np.uint32)
    bits = _UNSIGNED[dt.itemsize]
    offs = cuda.to_device(np.zeros(1, _I8), stream=ns)
    c = cuda.to_device(np.frombuffer(compare, bits).astype(u), stream=ns)
    v = cuda.to_device(np.frombuffer(value, bits).astype(u), stream=ns)
    f = cuda.device_array(1, u, stream=ns)
    kernel_compare_and_swap(win8, addr - info.base, offs, c, v, f, dt.itemsize, ns)
    out = f.copy_to_host(stream=ns)
    ad.stream_synchronize(s)
    return out.astype(bits).tobytes()
