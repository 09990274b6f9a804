"""Pack/unpack kernels: host njit == NumPy plan == the naive typemap walk; device kernels the same.

Every buffer has guard bytes around (and between) the bytes the type touches; the
first touched byte and the packed buffer are shifted by 0, 1, 2 or 4 bytes so the
kernels' word choice falls back below the plan's word.  Device kernels run on
numba-cuda's simulator (``tests/kernels/conftest.py``) with tiny examples; the ``gpu``
tests run them on a real GPU through CuPy arrays.
"""

from __future__ import annotations

import contextlib

import dtgen
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from gpumpi import MPI as D
from gpumpi.datatypes import flatten, plan
from gpumpi.kernels import pack as K

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
DEVICE_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
GUARD = 0xA5
SHIFTS = st.sampled_from([0, 1, 2, 4])
DEVICE_MAX_BYTES = 256  # the simulator runs one Python thread per CUDA thread


@st.composite
def gappy_specs(draw, depth):
    """A random spec wrapped so that its elements (or blocks of them) sit apart: mostly
    strided and gather plans, rarely overlapping (dtgen's specs are mostly contiguous)."""
    spec = draw(dtgen.specs(depth=depth))
    t = dtgen.build(spec, D)
    assume(t.size > 0)
    span = t.true_extent
    tight = ("resized", t.true_lb, span, spec)  # extent = the bytes it touches
    gap = draw(st.integers(1, 24))
    how = draw(st.sampled_from(["resized", "hvector", "hindexed"]))
    if how == "resized":
        return ("resized", t.true_lb, span + gap, spec)
    if how == "hvector":
        bl = draw(st.integers(1, 2))
        return ("hvector", draw(st.integers(2, 4)), bl, draw(st.sampled_from([1, -1])) * (bl * span + gap), tight)
    lens = draw(st.lists(st.integers(1, 3), min_size=2, max_size=4))
    starts, pos = [], 0
    for n in lens:
        starts.append(pos)
        pos += n * span + draw(st.integers(1, 24))
    order = draw(st.permutations(range(len(lens))))
    return ("hindexed", [lens[i] for i in order], [starts[i] for i in order], tight)


def _frame(t, count, seed=0, shift=0):
    """A random buffer holding ``count`` elements of ``t``: ``(buf, base, touched indices of buf)``.

    Type offset ``o`` lives at ``buf[base + o]``; at least 32 guard bytes on either side; the
    touched indices are in packing order.
    """
    tm = flatten.typemap_bytes(t, count)
    lo = min(tm, default=0)
    hi = max(tm, default=0) + 1
    base = 32 - min(lo, 0) + shift
    n = base + max(hi, count * max(t.extent, 0)) + 32
    buf = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    return buf, base, np.array(tm, dtype=np.intp) + base


def _out(nbytes, shift):
    """A guard-filled buffer and the ``nbytes`` window at ``8 + shift`` inside it."""
    outer = np.full(nbytes + 24, GUARD, np.uint8)
    return outer, outer[8 + shift: 8 + shift + nbytes]


def _expect_unpacked(src, tm, nbytes=None):
    """``src``'s guard-filled twin with the first ``nbytes`` touched bytes copied from ``src``."""
    want = np.full_like(src, GUARD)
    idx = tm[:nbytes] if nbytes is not None else tm
    want[idx] = src[idx]
    return want


@contextlib.contextmanager
def _kernels(state):
    """Run with ``datatypes.plan`` routing to ``state``: None (NumPy only) or ``(use, pack, unpack)``."""
    saved = plan._KERNELS, plan._KERNEL_LOADER
    plan._KERNELS, plan._KERNEL_LOADER = state, None
    try:
        yield
    finally:
        plan._KERNELS, plan._KERNEL_LOADER = saved


ALWAYS = (lambda p, n: True, K._pack, K._unpack)

# layouts worth pinning: negative strides, >3 grid dimensions, gathers of every word size,
# block lengths that are not a multiple of the word, overlapping elements
EXAMPLES = [
    ("vector", 3, 2, -3, ("named", "DOUBLE")),
    ("hvector", 3, 3, 20, ("named", "SHORT")),
    ("subarray", [3, 3, 3], [2, 2, 2], [0, 1, 0], dtgen.ORDER_C, ("resized", 0, 5, ("vector", 2, 1, 2, ("named", "BYTE")))),
    ("struct", [1, 1, 2], [0, 8, 16], [("named", "INT"), ("named", "DOUBLE"), ("named", "SHORT")]),
    ("hindexed", [1, 2, 1], [3, 11, -5], ("named", "BYTE")),
    ("indexed", [2, 1, 3], [5, 0, 9], ("named", "INT64_T")),
    ("hindexed", [1, 1], [0, 2], ("named", "INT")),  # overlapping
    ("contig", 3, ("named", "C_DOUBLE_COMPLEX")),
]


# -- host --------------------------------------------------------------------------------------------


def check_host(spec, count, seed, mshift, oshift):
    t = dtgen.build(spec, D).Commit()
    p = plan.plan_for(t, count)
    src, base, tm = _frame(t, count, seed, mshift)
    mem, lo = memoryview(src), -base
    want = src[tm].tobytes()
    assert p.nbytes == len(tm)
    with _kernels(None):
        assert bytes(plan.pack(mem, lo, t, count)) == want
    outer, out = _out(p.nbytes, oshift)
    K.host_pack(p, mem, lo, out)
    assert out.tobytes() == want
    assert (outer[:8 + oshift] == GUARD).all() and (outer[8 + oshift + p.nbytes:] == GUARD).all()
    with _kernels(ALWAYS):
        assert bytes(plan.pack(mem, lo, t, count)) == want
    if len(np.unique(tm)) != len(tm):
        return  # overlapping elements: unpacking them is erroneous
    packed = np.frombuffer(want, np.uint8)
    dst = np.full_like(src, GUARD)
    K.host_unpack(p, packed, memoryview(dst), lo)
    assert (dst == _expect_unpacked(src, tm)).all(), "touched bytes restored, guards intact"
    ref = np.full_like(src, GUARD)
    with _kernels(None):
        plan.unpack(packed, memoryview(ref), lo, t, count)
    assert (dst == ref).all()
    for nbytes in sorted({0, 1, p.nbytes // 2, p.nbytes // 2 + 3, p.nbytes - 1, seed % (p.nbytes + 1)}):
        if not 0 <= nbytes <= p.nbytes:
            continue
        dst = np.full_like(src, GUARD)
        K.host_unpack(p, packed[:nbytes], memoryview(dst), lo, nbytes)
        assert (dst == _expect_unpacked(src, tm, nbytes)).all(), nbytes
        with _kernels(ALWAYS):
            dst2 = np.full_like(src, GUARD)
            plan.unpack(packed[:nbytes], memoryview(dst2), lo, t, count, nbytes)
        assert (dst2 == dst).all(), nbytes


@SETTINGS
@given(gappy_specs(2), st.integers(1, 4), st.integers(0, 2**32 - 1), SHIFTS, SHIFTS)
def test_host_kernels_match_numpy_and_typemap(spec, count, seed, mshift, oshift):
    check_host(spec, count, seed, mshift, oshift)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtgen.specs(depth=3), st.integers(0, 3), st.integers(0, 2**32 - 1), SHIFTS, SHIFTS)
def test_host_kernels_on_any_datatype(spec, count, seed, mshift, oshift):
    check_host(spec, count, seed, mshift, oshift)


@pytest.mark.parametrize("spec", EXAMPLES, ids=[s[0] for s in EXAMPLES])
@pytest.mark.parametrize("shift", [0, 1, 2, 4])
def test_host_kernels_on_fixed_layouts(spec, shift):
    for count in (1, 3):
        check_host(spec, count, 7, shift, (shift * 3) % 8)


def test_host_kernels_large_strided_and_gather():
    """Enough blocks for several odometer carries and long runs of each kernel loop."""
    for t in (D.DOUBLE.Create_subarray([7, 9, 11], [5, 6, 7], [1, 2, 3]).Commit(),
              D.BYTE.Create_vector(300, 37, -50).Commit(),
              D.Datatype.Create_struct([3, 1], [0, 24], [D.DOUBLE, D.SHORT]).Commit()):
        p = plan.plan_for(t, 5)
        src, base, tm = _frame(t, 5, 1, 0)
        out = np.empty(p.nbytes, np.uint8)
        K.host_pack(p, memoryview(src), -base, out)
        assert (out == src[tm]).all()
        dst = np.full_like(src, GUARD)
        K.host_unpack(p, out, memoryview(dst), -base, p.nbytes - 5)
        assert (dst == _expect_unpacked(src, tm, p.nbytes - 5)).all()


def test_host_kernels_pack_a_prefix():
    """The raw kernels stop after any number of words, inside a block or an index entry."""
    sp, su, gp, gu = K._host()
    t = D.BYTE.Create_vector(3, 5, -9).Create_resized(0, 40).Commit()
    p = plan.plan_for(t, 2)  # strided (2, 3) x 5 bytes, a negative stride
    src, base, idx = _frame(t, 2)
    s0, counts, strides, nb = K._geometry(p, 1)
    mem = np.frombuffer(src.tobytes(), np.uint8)[base + p.lo: base + p.hi]
    for nw in range(p.nbytes + 1):
        dst = np.full(p.nbytes, GUARD, np.uint8)
        sp(mem, s0, counts, strides, nb, dst, nw)
        assert (dst[:nw] == src[idx[:nw]]).all() and (dst[nw:] == GUARD).all(), nw
    s = D.Datatype.Create_struct([1, 1], [0, 8], [D.INT, D.DOUBLE]).Commit()
    g = plan.plan_for(s, 2)  # gather, 4-byte words copied as r = 2 halves
    src, base, idx = _frame(s, 2)
    mem = src[base + g.lo: base + g.hi].view(np.uint16)
    mem.flags.writeable = False  # the kernels take read-only sources (one specialisation)
    r = g.word // 2
    for nw in range(g.nbytes // 2 + 1):
        dst = np.full(g.nbytes // 2, 0xA5A5, np.uint16)
        gp(mem, K._index(g), r, dst, nw)
        assert (dst.view(np.uint8)[:2 * nw] == src[idx[:2 * nw]]).all() and (dst[nw:] == 0xA5A5).all(), nw
        back = np.full_like(mem, 0xA5A5)
        gu(back, K._index(g), r, dst, nw)
        assert (back.view(np.uint8)[idx[:2 * nw] - base - g.lo] == src[idx[:2 * nw]]).all(), nw


def test_policy_routes_plans():
    vec = lambda b: plan.plan_for(D.BYTE.Create_vector(8, b, 2 * b).Commit(), 1)  # noqa: E731
    assert vec(32).kind == "strided" and K.use_kernel(vec(32)) and K.use_kernel(vec(40), 320)
    assert not K.use_kernel(vec(8)) and not K.use_kernel(vec(256), 2048)
    assert K.use_kernel(vec(8), 10), "partial unpacks always take the kernel"
    g = plan.plan_for(D.Datatype.Create_struct([1, 1], [0, 8], [D.INT, D.DOUBLE]).Commit(), 4)
    assert g.kind == "gather" and K.use_kernel(g) and not K.use_kernel(g, g.nbytes)
    big = plan.plan_for(D.Datatype.Create_struct([1, 1], [0, 8], [D.INT, D.DOUBLE]).Commit(), 4096)
    assert K.use_kernel(big, big.nbytes)
    c = plan.plan_for(D.DOUBLE.Create_contiguous(4).Commit(), 2)
    assert not K.use_kernel(c) and not K.use_kernel(c, 3)
    assert plan._KERNELS is not None and plan._KERNELS[0] is K.use_kernel, "importing the kernels installs them"


def test_compile_host_and_cache():
    took = K.compile_host()
    assert 0 <= took < 120
    assert K.kernels_cached_on_disk() in (True, False)
    assert K.compile_host() < 1.0, "a second call finds every specialisation compiled"


def test_host_errors():
    p = plan.plan_for(D.DOUBLE.Create_vector(2, 1, 2).Commit(), 1)  # bytes [0, 24)
    with pytest.raises(ValueError, match=r"host_pack: memory does not cover .*needs \[0, 24\), given \[0, 16\)"):
        K.host_pack(p, bytearray(16), 0, bytearray(16))
    with pytest.raises(ValueError, match=r"host_pack: output too small \(8 bytes, the message has 16\)"):
        K.host_pack(p, bytearray(24), 0, bytearray(8))
    with pytest.raises(ValueError, match=r"host_unpack: nbytes out of range \(17; the message has 16\)"):
        K.host_unpack(p, bytearray(24), bytearray(24), 0, 17)
    with pytest.raises(ValueError, match=r"host_unpack: packed data too short \(4 bytes, expected 16\)"):
        K.host_unpack(p, bytearray(4), bytearray(24), 0)
    with pytest.raises(ValueError, match=r"pack: output is read-only \(bytes of 16 bytes\)"):
        K.host_pack(p, bytearray(24), 0, bytes(16))
    with pytest.raises(ValueError, match=r"unpack: memory is read-only"):
        K.host_unpack(p, bytearray(16), bytes(24), 0)


# -- device (simulator, or a GPU with GPUMPI_TEST_REAL_GPU=1) ----------------------------------------


def _device_status():
    try:
        from numba import cuda
    except ImportError as exc:
        return None, f"numba.cuda is not importable ({exc})"
    if K._is_sim():
        return cuda, None
    if not cuda.is_available():
        return None, ("numba.cuda is not the simulator (GPUMPI_TEST_REAL_GPU=1, or numba.cuda was imported "
                      "before NUMBA_ENABLE_CUDASIM was set) and no CUDA GPU is available")
    return cuda, None


@pytest.fixture(scope="module")
def dev():
    cuda, why = _device_status()
    if cuda is None:
        pytest.skip(why)
    if K._is_sim():
        return lambda a: a.copy(), lambda d: d
    return cuda.to_device, lambda d: d.copy_to_host()


def check_device(spec, count, seed, mshift, oshift, to_dev, to_host, nbytes_list=None):
    t = dtgen.build(spec, D).Commit()
    p = plan.plan_for(t, count)
    assume(p.nbytes <= DEVICE_MAX_BYTES)
    src, base, tm = _frame(t, count, seed, mshift)
    want = src[tm]
    outer, _ = _out(p.nbytes, oshift)
    d_outer = to_dev(outer)
    K.device_pack(p, to_dev(src), -base, d_outer[8 + oshift: 8 + oshift + p.nbytes])
    got = to_host(d_outer)
    assert got[8 + oshift: 8 + oshift + p.nbytes].tobytes() == want.tobytes()
    assert (got[:8 + oshift] == GUARD).all() and (got[8 + oshift + p.nbytes:] == GUARD).all()
    if len(np.unique(tm)) != len(tm):
        return
    for nbytes in nbytes_list or sorted({p.nbytes, p.nbytes // 2 + 1, seed % (p.nbytes + 1)}):
        if not 0 <= nbytes <= p.nbytes:
            continue
        d_dst = to_dev(np.full_like(src, GUARD))
        K.device_unpack(p, to_dev(want.copy()), d_dst, -base, nbytes)
        assert (to_host(d_dst) == _expect_unpacked(src, tm, nbytes)).all(), nbytes


@DEVICE_SETTINGS
@given(spec=gappy_specs(1), count=st.integers(1, 3), seed=st.integers(0, 2**32 - 1), mshift=SHIFTS,
       oshift=SHIFTS)
@example(spec=EXAMPLES[0], count=2, seed=0, mshift=0, oshift=0)  # strided, negative stride
@example(spec=EXAMPLES[2], count=1, seed=0, mshift=1, oshift=0)  # strided, 4 dimensions
@example(spec=EXAMPLES[3], count=2, seed=0, mshift=4, oshift=2)  # gather, r > 1
def test_device_kernels_match_typemap(dev, spec, count, seed, mshift, oshift):
    check_device(spec, count, seed, mshift, oshift, *dev)


def test_device_tables_are_cached_per_plan(dev):
    t = D.Datatype.Create_struct([1, 1], [0, 8], [D.INT, D.DOUBLE]).Commit()
    p = plan.plan_for(t, 3)
    src, base, tm = _frame(t, 3)
    to_dev, to_host = dev
    out = to_dev(np.zeros(p.nbytes, np.uint8))
    K.device_pack(p, to_dev(src), -base, out)
    tables = K._tables(p)
    first = {k: v for k, v in tables.items() if isinstance(k, tuple)}
    assert first, "the index went to the device"
    K.device_pack(p, to_dev(src), -base, out)
    assert all(tables[k] is v for k, v in first.items())
    assert (to_host(out) == src[tm]).all()


class _CAI:
    """Host memory behind ``__cuda_array_interface__`` (what simulated device memory looks like)."""

    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {"data": (a.ctypes.data, False), "shape": a.shape,
                                         "typestr": a.dtype.str, "strides": None, "version": 3}


def test_device_accepts_simulator_arrays(dev):
    if not K._is_sim():
        pytest.skip("simulator-only: numba.cuda is a real GPU here")
    from numba import cuda

    t = D.INT.Create_hvector(3, 2, -20).Commit()
    p = plan.plan_for(t, 2)
    src, base, tm = _frame(t, 2)
    out = np.zeros(p.nbytes // 4, np.int32)  # any dtype: the kernels see bytes
    K.device_pack(p, cuda.to_device(src.view(np.uint8)), -base, _CAI(out))
    assert out.view(np.uint8).tobytes() == src[tm].tobytes()
    back = np.full_like(src, GUARD)
    d_back = cuda.to_device(back)
    K.device_unpack(p, _CAI(out), d_back, -base)
    assert (d_back.copy_to_host() == _expect_unpacked(src, tm)).all()


def test_device_errors(dev):
    to_dev, _ = dev
    p = plan.plan_for(D.DOUBLE.Create_vector(2, 1, 2).Commit(), 1)
    with pytest.raises(ValueError, match=r"device_pack: src does not cover"):
        K.device_pack(p, to_dev(np.zeros(16, np.uint8)), 0, to_dev(np.zeros(16, np.uint8)))
    with pytest.raises(ValueError, match=r"device_pack: output too small \(8 bytes"):
        K.device_pack(p, to_dev(np.zeros(24, np.uint8)), 0, to_dev(np.zeros(8, np.uint8)))
    with pytest.raises(ValueError, match=r"device_unpack: nbytes out of range \(-1;"):
        K.device_unpack(p, to_dev(np.zeros(16, np.uint8)), to_dev(np.zeros(24, np.uint8)), 0, -1)
    with pytest.raises(BufferError, match=r"device_pack: src is not C-contiguous"):
        K.device_pack(p, to_dev(np.zeros((6, 8), np.uint8))[:, :4], 0, to_dev(np.zeros(16, np.uint8)))


# -- real GPU through CuPy ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cupy_dev():
    cp = pytest.importorskip("cupy", reason="cupy is not installed (the gpu tests move CuPy arrays)")
    try:
        ngpu = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any CUDA runtime failure means: no GPU here
        pytest.skip(f"no CUDA GPU ({exc})")
    if not ngpu:
        pytest.skip("no CUDA GPU")
    if K._is_sim():
        pytest.skip("numba.cuda is the simulator in this process: run with GPUMPI_TEST_REAL_GPU=1")
    return cp.asarray, cp.asnumpy


@pytest.mark.gpu
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=gappy_specs(2), count=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1), mshift=SHIFTS, oshift=SHIFTS)
def test_gpu_kernels_match_typemap(cupy_dev, spec, count, seed, mshift, oshift):
    check_device(spec, count, seed, mshift, oshift, *cupy_dev)


@pytest.mark.gpu
def test_gpu_large_layouts_and_stream(cupy_dev):
    import cupy as cp

    to_dev, to_host = cupy_dev
    s = cp.cuda.Stream(non_blocking=True)
    for t, count in ((D.DOUBLE.Create_subarray([70, 90, 11], [50, 60, 7], [1, 2, 3]).Commit(), 3),
                     (D.BYTE.Create_vector(3000, 37, -50).Commit(), 2),
                     (D.Datatype.Create_struct([3, 1], [0, 24], [D.DOUBLE, D.SHORT]).Commit(), 20000)):
        p = plan.plan_for(t, count)
        src, base, tm = _frame(t, count, 3)
        out = cp.zeros(p.nbytes, cp.uint8)
        with s:
            d_src = to_dev(src)
        K.device_pack(p, d_src, -base, out, stream=s.ptr)
        s.synchronize()
        assert (to_host(out) == src[tm]).all()
        d_dst = cp.full(src.shape, GUARD, cp.uint8)
        K.device_unpack(p, out, d_dst, -base, p.nbytes - 3, stream=s)
        s.synchronize()
        assert (to_host(d_dst) == _expect_unpacked(src, tm, p.nbytes - 3)).all()
