"""Atomic instructions on raw addresses (``gpumpi.kernels.atomics``): host and device kernels.

Expectations are computed one element at a time with NumPy ufuncs on 1-element arrays of
the element type (so integer arithmetic wraps as MPI's C arithmetic does), applying
repeated offsets in order.  Which (op, type) pairs are atomic is restated here from the
brief (MPI's groups, restricted to 1/2/4/8-byte bool, integers and 4/8-byte floats),
independently of the table in the module.  Cross-process tests fork children that map
one memfd each at its own address and count exactly.  Device kernels run on numba's
CUDA simulator (``conftest.py``) over NumPy arrays.
"""

import mmap
import os
import time
import zlib

import numpy as np
import pytest

from gpumpi.kernels import atomics as A
from gpumpi.kernels.atomics import _ops
from gpumpi.kernels.atomics import device as D

OPS = ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP"]
INTS = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"]
FLOATS = ["f4", "f8"]
TYPES = INTS + FLOATS + ["?"]
# ops each class takes: MPI-4.1 6.9.2 (C integer, floating point, logical), plus bitwise on bool (brief)
TAKES = {"int": set(OPS), "float": set(OPS) - {"BAND", "BOR", "BXOR"},
         "bool": {"LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP"}}


def seed(*key):
    """A seed of the test's parameters (Python's str hash changes between runs)."""
    return zlib.crc32(repr(key).encode())


def cls(dt):
    dt = np.dtype(dt)
    return "bool" if dt.kind == "b" else ("float" if dt.kind == "f" else "int")


PAIRS = [(op, t) for op in OPS for t in TYPES if op in TAKES[cls(t)]]


def ref(op, old, v, dt):
    """``old op v`` as an element of ``dt`` (NumPy, wrapping)."""
    a = np.array([old], dt)
    b = np.array([v], dt)
    with np.errstate(over="ignore", invalid="ignore"):
        if op == "SUM":
            r = np.add(a, b)
        elif op == "PROD":
            r = np.multiply(a, b)
        elif op == "MAX":
            r = np.maximum(a, b)
        elif op == "MIN":
            r = np.minimum(a, b)
        elif op == "LAND":
            r = np.logical_and(a, b)
        elif op == "LOR":
            r = np.logical_or(a, b)
        elif op == "LXOR":
            r = np.logical_xor(a, b)
        elif op == "BAND":
            r = np.bitwise_and(a, b)
        elif op == "BOR":
            r = np.bitwise_or(a, b)
        elif op == "BXOR":
            r = np.bitwise_xor(a, b)
        elif op == "REPLACE":
            r = b
        else:
            r = a
    return r.astype(dt)[0]


def sample(dt, n, rng):
    dt = np.dtype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(dt)
    if dt.kind == "f":
        v = rng.integers(-6, 7, n).astype(dt) * dt.type(0.5)
        v[rng.random(n) < 0.25] = 0
        special = np.array([np.nan, -0.0, np.inf, -np.inf, 1e30], dt)
        pick = rng.random(n) < 0.15
        v[pick] = rng.choice(special, int(pick.sum()))
        return v
    info = np.iinfo(dt)
    v = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    small = rng.random(n) < 0.4  # some small values and zeros, so MAX/MIN/logical cases vary
    v[small] = rng.integers(0 if info.min == 0 else -3, 4, int(small.sum())).astype(dt)
    return v


def expect(op, win, idx, vals):
    w = win.copy()
    fetch = np.empty_like(vals)
    for k, (i, v) in enumerate(zip(idx, vals)):
        fetch[k] = w[i]
        w[i] = ref(op, w[i], v, win.dtype)
    return w, fetch


def same(a, b):
    """Equal as values, NaN equal to NaN (the bits of a NaN result are not MPI's business)."""
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# -- supported() ------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("op", OPS)
def test_supported_truth_table(op, t):
    assert A.supported(op, np.dtype(t)) == (op in TAKES[cls(t)])
    assert A.supported(op, t) == (op in TAKES[cls(t)])  # anything np.dtype() takes


@pytest.mark.parametrize("t", ["c8", "c16", "g", "G", "f2", ">i4", ">f8", "S4", "M8[s]", "V8",
                               np.dtype([("v", "f8"), ("i", "i4")]), np.dtype([("a", "i4")])])
def test_unsupported_types(t):
    for op in OPS:
        assert not A.supported(op, t)


def test_unknown_operation():
    assert not A.supported("MAXLOC", np.int32)
    assert not A.supported("sum", np.int32)
    with pytest.raises(ValueError, match=r"atomics.accumulate: unknown operation \('MAXLOC'"):
        A.accumulate(0, np.zeros(1, np.int64), np.zeros(1, np.int32), "MAXLOC")


# -- accumulate ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op,t", PAIRS)
def test_accumulate_against_numpy(op, t):
    dt = np.dtype(t)
    rng = np.random.default_rng(seed(op, t))
    win = sample(dt, 8, rng)
    idx = np.array([0, 1, 2, 3, 0, 0, 5, 2, 7, 7, 7, 6])  # repeats apply one after another
    vals = sample(dt, len(idx), rng)
    want, want_fetch = expect(op, win, idx, vals)
    w = win.copy()
    fetch = np.empty_like(vals)
    A.accumulate(w.ctypes.data, idx * dt.itemsize, vals, op, fetch)
    same(w, want)
    same(fetch, want_fetch)
    w2 = win.copy()
    A.accumulate(w2.ctypes.data, (idx * dt.itemsize).astype(np.int32), vals, op)  # no fetch; int32 offsets
    same(w2, want)


@pytest.mark.parametrize("t", INTS + FLOATS)
def test_repeated_sum_adds_up(t):
    dt = np.dtype(t)
    w = np.zeros(2, dt)
    A.accumulate(w.ctypes.data, np.array([1, 1, 1]) * dt.itemsize, np.ones(3, dt), "SUM")
    assert w[1] == 3 and w[0] == 0


def test_integer_wraparound_and_nan():
    w = np.array([127, 0], np.int8)
    A.accumulate(w.ctypes.data, np.array([0]), np.array([1], np.int8), "SUM")
    assert w[0] == -128
    u = np.array([2**63 + 5], np.uint64)
    A.accumulate(u.ctypes.data, np.array([0]), np.array([2**63], np.uint64), "PROD")
    assert u[0] == (2**63 * (2**63 + 5)) % 2**64
    f = np.array([1.0, np.nan, 2.0])
    A.accumulate(f.ctypes.data, np.array([0, 8, 16]), np.array([np.nan, 5.0, 3.0]), "MAX")
    assert np.isnan(f[0]) and np.isnan(f[1]) and f[2] == 3.0
    A.accumulate(f.ctypes.data, np.array([16]), np.array([np.nan]), "LAND")
    assert f[2] == 1.0  # NaN is true


def test_neighbours_untouched():
    raw = np.arange(32, dtype=np.uint8)
    before = raw.copy()
    A.accumulate(raw.ctypes.data + 8, np.array([2]), np.array([1000], np.int16), "SUM")
    changed = np.flatnonzero(raw != before)
    assert list(changed) == [10, 11]
    assert raw[10:12].view(np.int16)[0] == np.array([10 + 11 * 256 + 1000], np.int16)[0]


def test_accumulate_errors():
    w = np.zeros(4, np.float64)
    with pytest.raises(ValueError, match=r"atomics.accumulate: no atomic BAND for this element type"):
        A.accumulate(w.ctypes.data, np.zeros(1, np.int64), np.zeros(1), "BAND")
    with pytest.raises(ValueError, match="no atomic SUM"):
        A.accumulate(w.ctypes.data, np.zeros(1, np.int64), np.zeros(1, np.complex128), "SUM")
    with pytest.raises(ValueError, match="no atomic SUM"):
        A.accumulate(w.ctypes.data, np.zeros(1, np.int64), np.zeros(1, bool), "SUM")
    with pytest.raises(ValueError, match=r"one length \(\(2,\), \(1,\)\)"):
        A.accumulate(w.ctypes.data, np.zeros(1, np.int64), np.zeros(2), "SUM")
    with pytest.raises(ValueError, match="fetch must be 1-D float64 of length 1"):
        A.accumulate(w.ctypes.data, np.zeros(1, np.int64), np.zeros(1), "SUM", np.zeros(1, np.float32))
    with pytest.raises(ValueError, match=r"not a multiple of 8 \(base 0x[0-9a-f]+ \+ offsets\[1\] 4\)"):
        A.accumulate(w.ctypes.data, np.array([0, 4]), np.ones(2), "SUM")
    assert not w.any()  # nothing applied


# -- fetch_and_op, compare_and_swap, words ------------------------------------------------------------------


@pytest.mark.parametrize("op,t", PAIRS)
def test_fetch_and_op(op, t):
    dt = np.dtype(t)
    rng = np.random.default_rng(seed(op, t, 1))
    win = sample(dt, 4, rng)
    for v in sample(dt, 6, rng):
        w = win.copy()
        old = A.fetch_and_op(w.ctypes.data + dt.itemsize, v, op, dt)
        same(old, win[1])
        assert type(old) is {"b": bool, "f": float}.get(dt.kind, int)
        same(w, np.array([win[0], ref(op, win[1], v, dt), win[2], win[3]], dt))
        win = w


def test_fetch_and_op_python_scalars():
    w = np.zeros(2, np.int32)
    assert A.fetch_and_op(w.ctypes.data, 7, "SUM", np.dtype(np.int32)) == 0
    assert A.fetch_and_op(w.ctypes.data, 1, "SUM", np.int32) == 7  # a type also names the dtype
    f = np.zeros(1, np.float32)
    assert A.fetch_and_op(f.ctypes.data, 2, "SUM", np.dtype(np.float32)) == 0.0
    assert f[0] == 2.0
    b = np.zeros(1, bool)
    assert A.fetch_and_op(b.ctypes.data, True, "LOR", np.dtype(bool)) is False and b[0]
    with pytest.raises(ValueError, match="atomics.fetch_and_op: no atomic PROD"):
        A.fetch_and_op(b.ctypes.data, True, "PROD", np.dtype(bool))
    with pytest.raises(ValueError, match="address not a multiple of 4"):
        A.fetch_and_op(w.ctypes.data + 2, 1, "SUM", np.dtype(np.int32))


@pytest.mark.parametrize("t", INTS + ["?"])
def test_compare_and_swap_integers(t):
    dt = np.dtype(t)
    w = np.array([1, 0], dt)
    hit = A.compare_and_swap(w.ctypes.data, dt.type(1), dt.type(0), dt)
    assert hit == 1 and w[0] == 0
    miss = A.compare_and_swap(w.ctypes.data, dt.type(1), dt.type(1), dt)
    assert miss == 0 and w[0] == 0 and w[1] == 0


def test_compare_and_swap_bitwise():
    f = np.array([-0.0, np.nan], np.float64)
    assert A.compare_and_swap(f.ctypes.data, 0.0, 5.0, np.dtype(np.float64)) == 0.0
    assert np.signbit(f[0])  # -0.0 is not 0.0 bitwise: unchanged
    assert np.isnan(A.compare_and_swap(f.ctypes.data + 8, f[1], 2.0, np.dtype(np.float64)))
    assert f[1] == 2.0  # a NaN equals its own bits
    h = np.array([1.5], np.float16)
    old = A.compare_and_swap(h.ctypes.data, 1.5, -2.25, np.float16)  # any 2-byte type, by its bits
    assert old == 1.5 and h[0] == -2.25
    c = np.array([1 + 2j], np.complex64)
    assert A.compare_and_swap(c.ctypes.data, 1 + 2j, 3j, np.complex64) == 1 + 2j and c[0] == 3j
    assert A.compare_and_swap(c.ctypes.data, 1 + 2j, 0, np.complex64) == 3j and c[0] == 3j
    with pytest.raises(ValueError, match=r"atomics.compare_and_swap: .*\(dtype\('complex128'\)"):
        A.compare_and_swap(c.ctypes.data, 0, 0, np.dtype(np.complex128))


@pytest.mark.parametrize("op,t", [(op, t) for op, t in PAIRS if t != "?"])
def test_fop_ndarray_against_numpy(op, t):
    """The one-call Fetch_and_op between one-element arrays: the target as fetch_and_op leaves it,
    the old element written into the result array, 0 returned."""
    dt = np.dtype(t)
    rng = np.random.default_rng(seed(op, t, 7))
    fn, code, mask = A.fop_ndarray(op, dt)
    assert mask == dt.itemsize - 1
    win = sample(dt, 3, rng)
    for v, shape in zip(sample(dt, 6, rng), [(1,), (), (1, 1), (1,), (1, 1, 1), ()]):
        w = win.copy()
        o = np.full(shape, v, dt)
        r = np.zeros(shape[::-1], dt)
        assert fn(w.ctypes.data + dt.itemsize, id(o), id(r), code) == 0
        same(r.reshape(()), win[1])
        same(w, np.array([win[0], ref(op, win[1], v, dt), win[2]], dt))
        win = w


def test_fop_ndarray_refuses_and_touches_nothing():
    dt = np.dtype(np.int64)
    fn, code, _ = A.fop_ndarray("SUM", dt)
    w = np.array([10], dt)
    one, res = np.ones(1, dt), np.full(1, -1, dt)
    ro = np.zeros(1, dt)
    ro.flags.writeable = False
    raw = np.zeros(17, np.uint8)
    unaligned = np.frombuffer(raw.data, dt, 1, 1)  # one int64 at an odd address
    assert not unaligned.flags.aligned
    keep = []  # every array stays alive during its call: the entry point reads its header
    for o, r in [(np.ones(2, dt), res), (one, np.zeros(2, dt)), (np.ones(0, dt), res), (one, ro),
                 (unaligned, res), (one, np.zeros(3, dt)[::2][:1].reshape(1)[:0]), (one, np.zeros((1, 2), dt))]:
        keep.append((o, r))
        assert fn(w.ctypes.data, id(o), id(r), code) == 1
    assert w[0] == 10 and res[0] == -1 and ro[0] == 0
    strided = np.zeros(3, dt)[::2][:1]  # one element of a strided view: still one aligned element
    assert fn(w.ctypes.data, id(one), id(strided), code) == 0 and strided[0] == 10 and w[0] == 11
    with pytest.raises(ValueError, match="atomics.fop_ndarray"):
        A.fop_ndarray("LOR", np.dtype(bool))
    with pytest.raises(ValueError, match="no atomic BAND"):
        A.fop_ndarray("BAND", np.dtype(np.float64))


@pytest.mark.parametrize("t", INTS)
def test_cas_ndarray(t):
    dt = np.dtype(t)
    fn, mask = A.cas_ndarray(dt)
    assert mask == dt.itemsize - 1
    w = np.array([3, 7], dt)
    new, cmp, res = np.array([5], dt), np.array([3], dt), np.zeros(1, dt)
    assert fn(w.ctypes.data, id(new), id(cmp), id(res)) == 0 and res[0] == 3 and w[0] == 5  # equal: swapped
    assert fn(w.ctypes.data, id(new), id(cmp), id(res)) == 0 and res[0] == 5 and w[0] == 5  # not equal: kept
    ro = np.zeros(1, dt)
    ro.flags.writeable = False
    assert fn(w.ctypes.data + dt.itemsize, id(new), id(np.array([7], dt)[:1]), id(ro)) == 1 and w[1] == 7
    with pytest.raises(ValueError, match="atomics.cas_ndarray"):
        A.cas_ndarray(np.dtype(np.float64))


def test_ndarray_layout_and_raw():
    assert A.ndarray_layout()  # CPython on 64-bit: the headers are where NumPy's C struct puts them
    move, fence = A.raw()
    a = np.arange(10, dtype=np.uint8)
    move(a.ctypes.data + 2, a.ctypes.data, 5)  # overlapping: memmove
    assert a.tolist() == [0, 1, 0, 1, 2, 3, 4, 7, 8, 9]
    move(a.ctypes.data, a.ctypes.data, 0)
    assert fence() is None


def test_words():
    w = np.zeros(2, np.int64)
    a = w.ctypes.data
    A.store64(a, 41)
    assert A.load64(a) == 41
    assert A.add64(a, 1) == 41 and w[0] == 42
    assert A.cas64(a, 0, 7) == 42 and w[0] == 42
    assert A.cas64(a, 42, -1) == 42 and w[0] == -1
    A.fence()
    assert A.load64(a + 8) == 0


# -- across processes: the same pages at different addresses -------------------------------------------


def _run_children(nproc, size, body):
    """Fork ``nproc`` children; each maps the memfd at its own address and runs ``body(addr, rank)`` once
    all have started (a barrier on the last word of the page, so that they really overlap)."""
    fd = os.memfd_create("gpumpi-atomics-test")
    os.ftruncate(fd, size)
    pids = []
    try:
        for rank in range(nproc):
            pid = os.fork()
            if pid == 0:  # child
                code = 1
                try:
                    m = mmap.mmap(fd, size, mmap.MAP_SHARED)
                    addr = np.frombuffer(m, np.uint8).ctypes.data
                    ready = addr + size - 8
                    A.add64(ready, 1)
                    while A.load64(ready) < nproc:
                        os.sched_yield()
                    body(addr, rank)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
        m = mmap.mmap(fd, size, mmap.MAP_SHARED)
        return np.frombuffer(m, np.uint8).copy()
    finally:
        os.close(fd)


NPROC, COUNT = 4, 20000


def test_cross_process_fetch_and_op_and_accumulate():
    i8, i4 = np.dtype(np.int64), np.dtype(np.int32)
    one = np.ones(1)
    at0 = np.zeros(1, np.int64)
    A.load64(at0.ctypes.data)  # compile before forking (the barrier's words too)
    A.fetch_and_op(np.zeros(1, np.int64).ctypes.data, 0, "SUM", i8)
    A.fetch_and_op(np.zeros(1, np.int32).ctypes.data, 0, "SUM", i4)
    A.accumulate(np.zeros(1).ctypes.data, at0, one * 0, "SUM")

    def body(addr, rank):
        seen = set()
        for _ in range(COUNT):
            seen.add(A.fetch_and_op(addr, 1, "SUM", i8))
            A.fetch_and_op(addr + 8, 1, "SUM", i4)
            A.accumulate(addr + 16, at0, one, "SUM")
        assert len(seen) == COUNT  # every fetched ticket distinct within this process

    t0 = time.perf_counter()
    mem = _run_children(NPROC, 4096, body)
    assert mem[:8].view(np.int64)[0] == NPROC * COUNT
    assert mem[8:12].view(np.int32)[0] == NPROC * COUNT
    assert mem[16:24].view(np.float64)[0] == NPROC * COUNT
    assert time.perf_counter() - t0 < 30


def test_cross_process_cas_increments_and_spin_lock():
    A.cas64(np.zeros(1, np.int64).ctypes.data, 0, 0)  # compile before forking (all words: one build)

    def body(addr, rank):
        for _ in range(COUNT):  # a counter made of CAS: old = load; cas(old, old + 1) until it sticks
            old = A.load64(addr)
            while True:
                seen = A.cas64(addr, old, old + 1)
                if seen == old:
                    break
                old = seen
        lock, word = addr + 64, addr + 128  # a spin lock guarding a plain read-modify-write
        cell = np.frombuffer((np.ctypeslib.as_ctypes_type(np.int64) * 1).from_address(word), np.int64)
        for _ in range(COUNT // 2):
            spins = 0
            while A.cas64(lock, 0, 1) != 0:
                spins += 1
                if spins > 50:
                    os.sched_yield()  # 2 shared cores: let the holder run
            cell[0] = cell[0] + 1  # not atomic: only the lock makes it exact
            A.store64(lock, 0)

    t0 = time.perf_counter()
    mem = _run_children(NPROC, 4096, body)
    assert mem[:8].view(np.int64)[0] == NPROC * COUNT
    assert mem[64:72].view(np.int64)[0] == 0
    assert mem[128:136].view(np.int64)[0] == NPROC * (COUNT // 2)
    assert time.perf_counter() - t0 < 30


# -- device kernels on numba's CUDA simulator -------------------------------------------------------


def _sim_or_skip():
    if not D._device()[1]:
        pytest.skip("numba.cuda is a real GPU here (GPUMPI_TEST_REAL_GPU=1): see the gpu tests")


DEV_PAIRS = [(op, t) for op, t in PAIRS if op != "NO_OP"] + [("NO_OP", "i4"), ("NO_OP", "f8"), ("NO_OP", "u1")]


def _window(win, pad=8):
    """The window's bytes inside a bigger 8-aligned byte array (``pad`` bytes before it)."""
    raw = np.zeros(-(-(pad + win.nbytes + 16) // 8) * 8, np.uint8)  # whole words, as allocations are
    raw[pad:pad + win.nbytes] = win.view(np.uint8)
    return raw


# the simulator does the arithmetic on NumPy scalars, which warn where the GPU wraps silently
SIM_WRAPS = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")


@SIM_WRAPS
@pytest.mark.parametrize("op,t", DEV_PAIRS)
def test_device_kernels_distinct_offsets(op, t):
    """One element per thread: results and fetched old values exactly as NumPy's."""
    _sim_or_skip()
    dt = np.dtype(t)
    rng = np.random.default_rng(seed(op, t, 2))
    win = sample(dt, 9, rng)
    idx = np.array([3, 0, 8, 5, 1, 6])
    vals = sample(dt, len(idx), rng)
    want, want_fetch = expect(op, win, idx, vals)
    raw = _window(win)
    fetch = np.empty_like(vals)
    A.kernel_accumulate(raw, 8, idx * dt.itemsize, vals, op, fetch)
    same(raw[8:8 + win.nbytes].view(dt), want)
    same(fetch, want_fetch)
    assert not raw[:8].any() and not raw[8 + win.nbytes:].any()  # neighbours untouched
    raw2 = _window(win)
    A.kernel_accumulate(raw2, 8, idx * dt.itemsize, vals, op)  # no fetch
    same(raw2[8:8 + win.nbytes].view(dt), want)


@SIM_WRAPS
@pytest.mark.parametrize("op,t", [(op, t) for op in ("SUM", "MAX", "MIN", "BOR", "BXOR", "LOR", "PROD")
                                  for t in ("i1", "u2", "i4", "u8", "f4", "f8", "?") if op in TAKES[cls(t)]])
def test_device_kernels_repeated_offsets(op, t):
    """Many threads on the same elements: the final values are the sequential ones (commutative ops,
    exact operands), and every fetched old value is one the element held."""
    _sim_or_skip()
    dt = np.dtype(t)
    rng = np.random.default_rng(seed(op, t, 3))
    win = np.array([1, 2, 0], dt) if dt.kind != "b" else np.array([1, 0, 0], dt)
    idx = np.tile(np.array([0, 1, 2, 1, 1]), 8)
    lo, hi = {"PROD": (1, 3), "SUM": (1, 4)}.get(op, (0, 4))  # SUM: no 0, so the old values are distinct
    vals = rng.integers(lo, hi, len(idx)).astype(dt)
    if op == "PROD":
        vals[idx == 2] = 1
    want, _ = expect(op, win, idx, vals)
    raw = _window(win)
    fetch = np.empty_like(vals)
    A.kernel_accumulate(raw, 8, idx * dt.itemsize, vals, op, fetch)
    same(raw[8:8 + win.nbytes].view(dt), want)
    assert not raw[:8].any() and not raw[8 + win.nbytes:].any()
    if op == "SUM" and dt.kind in "iu":  # fetch-and-add tickets: old values distinct per element
        for e in range(3):
            olds = fetch[idx == e]
            assert len(set(olds.tolist())) == len(olds)


def test_device_kernel_plan_covers_every_pair():
    """Which kernel runs each (op, type): CUDA atomics where numba has them, cas loops elsewhere."""
    plan = {(op, t): D._plan(_ops.CODE[op], _ops.work_dtype(np.dtype(t)))[0] for op, t in PAIRS}
    assert plan[("SUM", "f4")] == "add" and plan[("SUM", "i8")] == "add"
    assert plan[("MAX", "u4")] == "max" and plan[("MAX", "f8")] == "cas_float"
    assert plan[("BXOR", "i4")] == "xor" and plan[("PROD", "i8")] == "cas_int"
    assert plan[("REPLACE", "f4")] == "exch" and plan[("NO_OP", "f8")] == "load"
    assert {plan[(op, t)] for op, t in PAIRS if np.dtype(t).itemsize < 4} == {"cas_narrow"}


def test_device_accumulate_on_simulated_memory():
    """The simulated adapter: the host instructions on the mapped memory (atomic across processes)."""
    from gpumpi._device import sim_adapter
    from gpumpi.testing import SimDeviceArray

    ad = sim_adapter()
    win = SimDeviceArray.from_numpy(np.array([1, 2, 3, 4], np.int32))
    offs = SimDeviceArray.from_numpy(np.array([4, 4, 12], np.int64))
    vals = SimDeviceArray.from_numpy(np.array([10, 20, 30], np.int32))
    fetch = SimDeviceArray(3, np.int32)
    A.device_accumulate(ad, win.ptr, offs.ptr, vals.ptr, 3, "SUM", np.dtype(np.int32), fetch.ptr)
    same(win.get(), [1, 32, 3, 34])
    same(fetch.get(), [2, 12, 4])
    with pytest.raises(ValueError, match="atomics.device_accumulate: no atomic BAND"):
        A.device_accumulate(ad, win.ptr, offs.ptr, vals.ptr, 3, "BAND", np.dtype(np.float32))


@pytest.mark.gpu
def test_device_accumulate_real_gpu():
    """On a real GPU (GPUMPI_TEST_REAL_GPU=1, CuPy): the kernels on device memory through the CUDA adapter,
    with a window in the middle of its allocation."""
    cp = pytest.importorskip("cupy", reason="cupy is not installed (pip install gpumpi[cuda])")
    try:
        ngpu = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any CUDA runtime failure means: no GPU here
        pytest.skip(f"no CUDA GPU ({exc})")
    if not ngpu:
        pytest.skip("no CUDA GPU")
    if D._device()[1]:
        pytest.skip("numba.cuda is the simulator in this process: run with GPUMPI_TEST_REAL_GPU=1")
    from gpumpi import _device

    ad = _device.cupy_adapter()
    for op, t in DEV_PAIRS:
        dt = np.dtype(t)
        rng = np.random.default_rng(7)
        win = sample(dt, 9, rng)
        idx = np.array([3, 0, 8, 5, 1, 6, 3, 3])
        vals = sample(dt, len(idx), rng)
        if op not in ("SUM", "PROD", "REPLACE"):  # order-free final values at the repeated element
            want, _ = expect(op, win, idx, vals)
        else:
            idx, vals = idx[:6], vals[:6]
            want, want_fetch = expect(op, win, idx, vals)
        raw = cp.zeros(64 + win.nbytes + 64, cp.uint8)
        raw[64:64 + win.nbytes] = cp.asarray(win.view(np.uint8))
        d_offs = cp.asarray(idx * dt.itemsize)
        d_vals = cp.asarray(vals)
        d_fetch = cp.empty(len(idx), dt)
        A.device_accumulate(ad, raw.data.ptr + 64, d_offs.data.ptr, d_vals.data.ptr, len(idx), op, dt,
                            d_fetch.data.ptr)
        got = cp.asnumpy(raw)
        same(got[64:64 + win.nbytes].view(dt), want)
        assert not got[:64].any() and not got[64 + win.nbytes:].any()
        if len(idx) == 6:
            same(cp.asnumpy(d_fetch), want_fetch)


@pytest.mark.parametrize("t", [np.int8, np.uint16, np.int32, np.uint64, np.float64])
def test_device_compare_and_swap_kernels(t):
    """The device compare-and-swap kernels (numba's simulator): equal bits swap, others do not,
    and neighbouring bytes are left alone."""
    dt = np.dtype(t)
    n = 6
    win = np.zeros(8 + 8 * n, np.uint8)
    el = win[8:8 + n * dt.itemsize].view(dt)
    el[:] = np.arange(n).astype(dt)
    before = win.copy()
    idx = np.arange(n, dtype=np.int64)
    bits = _ops.UNSIGNED[dt.itemsize]
    wide = bits if dt.itemsize >= 4 else np.dtype(np.uint32)
    cmp_vals = np.where(idx % 2 == 0, idx, idx + 100).astype(dt)  # even elements match
    new_vals = (idx + 7).astype(dt)
    fetch = np.zeros(n, wide)
    A.kernel_compare_and_swap(win, 8, idx * dt.itemsize, cmp_vals.view(bits).astype(wide),
                              new_vals.view(bits).astype(wide), fetch, dt.itemsize)
    expect = np.where(idx % 2 == 0, idx + 7, idx).astype(dt)
    assert (el == expect).all()
    assert (fetch.astype(bits).view(dt) == np.arange(n).astype(dt)).all()
    assert (win[:8] == before[:8]).all() and (win[8 + n * dt.itemsize:] == before[8 + n * dt.itemsize:]).all()


def test_device_compare_and_swap_on_simulated_memory():
    from gpumpi import _device

    ad = _device.sim_adapter()
    addr = ad.alloc(64)
    try:
        v = np.frombuffer(ad.host_view(addr, 64), np.int64)
        v[:] = 5
        old = A.device_compare_and_swap(ad, addr + 16, np.int64(5).tobytes(), np.int64(9).tobytes(), np.int64)
        assert np.frombuffer(old, np.int64)[0] == 5 and v[2] == 9 and v[1] == 5
        old = A.device_compare_and_swap(ad, addr + 16, np.int64(5).tobytes(), np.int64(1).tobytes(), np.int64)
        assert np.frombuffer(old, np.int64)[0] == 9 and v[2] == 9
    finally:
        ad.free(addr)


def test_device_kernels_choose_the_simulator_even_after_numba_was_imported():
    """numba reads NUMBA_ENABLE_CUDASIM when it is imported; a process that imported numba before
    the switch was set (a test module collected early) must still get the simulator here, where
    there is no CUDA driver: the device kernels switch it before numba.cuda's first import."""
    import subprocess
    import sys

    from gpumpi import _device

    if _device.cuda_driver() is not None or os.environ.get("GPUMPI_TEST_REAL_GPU") == "1":
        pytest.skip("a CUDA driver is here: numba.cuda is the real one")
    code = ("import os, numba; os.environ['NUMBA_ENABLE_CUDASIM'] = '1'\n"
            "from gpumpi.kernels.atomics import device as D; print(D._device()[1])")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
