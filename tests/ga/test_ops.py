"""gpumpi.ga's collective operations (ga.ops_*) at 1-4 ranks: every operation on C_DBL over
regular, irregular (one process without data at 4 ranks) and ghost layouts, patch forms
(reshaped and transposed), a dtype sweep, GA's testc identity, ghost updates with periodic wrap,
gop/brdcst, bad input, and the simulated device.  Expectations are NumPy computations on the
same data (every rank builds it from one seed)."""

import io
import sys

import numpy as np
import pytest

from gpumpi.testing import device_windows_across_nodes, run_ranks

NRANKS = [1, 2, 3, 4]
DIMS = (7, 9)


def _data(dt, shape, seed, lo=-9, hi=10, nonzero=False):
    """Small integers (exact in every type), complex with an imaginary part."""
    rng = np.random.default_rng(seed)
    v = rng.integers(lo, hi, shape)
    if nonzero:
        v[v == 0] = 3
    if np.dtype(dt).kind == "c":
        w = rng.integers(lo, hi, shape)
        return (v + 1j * w).astype(dt)
    return v.astype(dt)


def _irreg(extent, blocks):
    return [0] + [1 + (i * (extent - 1)) // blocks for i in range(1, blocks)]


def _make(ga, layout, gt, dims, name="A"):
    """An array of ``dims`` in one of the layouts (irregular: uneven blocks, at 4 ranks a
    process without data)."""
    n = ga.nnodes()
    if layout == "regular":
        return ga.create(gt, dims, name)
    if layout == "ghosts":
        return ga.create_ghosts(gt, dims, [1 + d % 2 for d in range(len(dims))], name)
    blocks = {1: [1, 1], 2: [2, 1], 3: [1, 3], 4: [3, 1]}[n] + [1] * (len(dims) - 2)
    blocks = blocks[: len(dims)] if len(dims) > 1 else [min(n, 3)]
    mp = []
    for e, b in zip(dims, blocks):
        mp += _irreg(e, b)
    return ga.create_irreg(gt, dims, blocks, mp, name)


def _load(ga, g, values):
    ga.sync()  # every earlier read is done before the put (GA orders a get and a put only by sync)
    if ga.nodeid() == 0:
        ga.put(g, values)
    ga.sync()


# --- element-wise operations, copies and reductions on C_DBL -------------------------------------
def _elementwise(layout, direct=True):
    from gpumpi import ga
    from gpumpi.ga import handles, state

    handles.DIRECT = direct
    checks = 0
    dt = np.float64
    A0 = _data(dt, DIMS, 1) + 0.5
    B0 = _data(dt, DIMS, 2, nonzero=True) / 4
    B0[3, 4] = 0.0  # a zero divisor
    C0 = _data(dt, DIMS, 3)
    a, b, c, m = (_make(ga, layout, ga.C_DBL, DIMS, nm) for nm in "ABCM")
    for g, v in ((a, A0), (b, B0), (c, C0)):
        _load(ga, g, v)

    # in-place operations on patches and the whole array
    model = C0.copy()
    ga.zero(c, (1, 1), (3, 4))
    model[1:3, 1:4] = 0
    ga.fill(c, 1.5, (2, 0), (5, 2))
    model[2:5, 0:2] = 1.5
    ga.scale(c, -2.0)
    model *= -2.0
    ga.add_constant(c, 0.25, (0, 3), (7, 9))
    model[:, 3:] += 0.25
    ga.abs_value(c, (0, 0), (4, 9))
    model[:4] = np.abs(model[:4])
    ga.recip(c, (4, 0), (7, 9))
    model[4:] = 1 / model[4:]
    ga.fill(c, 9, (6, 8))  # lo alone: one element; an int converted to the array's type
    model[6, 8] = 9.0
    ga.zero(c, (2, 2), (2, 5))  # an empty patch
    np.testing.assert_array_equal(ga.get(c), model)
    ga.zero(c)
    np.testing.assert_array_equal(ga.get(c), 0)
    ga.sync()
    ga.mask_sync(False, False)  # one operation without its syncs; the next one has them again
    ga.fill(c, 1.0)
    assert state.S.mask == [True, True]
    ga.sync()
    np.testing.assert_array_equal(ga.get(c), 1.0)
    checks += 1

    # randomize: values in [0, val), different on different processes' blocks
    ga.randomize(c, 3.0)
    r = ga.get(c)
    assert r.min() >= 0 and r.max() < 3 and np.unique(r).size > 1
    ga.randomize(c)
    r = ga.get(c)
    assert r.min() >= 0 and r.max() < 1
    checks += 1

    # add: whole, patches (same shape, reshaped), aliased output
    ga.add(a, b, c, 2, -3)
    np.testing.assert_array_equal(ga.get(c), 2 * A0 - 3 * B0)
    ga.add(a, b, c)
    np.testing.assert_array_equal(ga.get(c), A0 + B0)
    ga.zero(c)
    ga.add(a, b, c, 1.0, 0.5, (0, 0), (2, 9), (3, 0), (5, 9), (1, 2), (7, 5))  # 2x9 -> 6x3 (reshape)
    model = np.zeros(DIMS)
    model[1:7, 2:5] = (A0[0:2] + 0.5 * B0[3:5]).reshape(6, 3)
    np.testing.assert_array_equal(ga.get(c), model)
    ga.copy(a, c)
    ga.add(c, b, c, 1, 1, (0, 0), (3, 3), (1, 1), (4, 4), (4, 6), (7, 9))  # C aliases A, patches differ
    model = A0.copy()
    model[4:7, 6:9] = A0[0:3, 0:3] + B0[1:4, 1:4]
    np.testing.assert_array_equal(ga.get(c), model)
    checks += 3

    # element-wise binary operations and median
    ga.elem_multiply(a, b, c)
    np.testing.assert_array_equal(ga.get(c), A0 * B0)
    ga.elem_divide(a, b, c)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(ga.get(c), A0 / B0)  # inf where B is 0 (IEEE, documented)
    ga.elem_maximum(a, b, c)
    np.testing.assert_array_equal(ga.get(c), np.maximum(A0, B0))
    ga.elem_minimum(a, b, c, (1, 0), (3, 9), (4, 0), (6, 9), (0, 0), (2, 9))
    got = ga.get(c)
    np.testing.assert_array_equal(got[0:2], np.minimum(A0[1:3], B0[4:6]))
    _load(ga, c, C0)
    ga.median(a, b, c, m)
    np.testing.assert_array_equal(ga.get(m), np.median(np.stack([A0, B0, C0]), axis=0))
    ga.median(a, b, c, a)  # M aliases A
    np.testing.assert_array_equal(ga.get(a), np.median(np.stack([A0, B0, C0]), axis=0))
    _load(ga, a, A0)
    checks += 6

    # copy: whole, patch, transposed patch, reshape into another shape, disjoint patches of one array
    ga.zero(c)
    ga.copy(a, c)
    np.testing.assert_array_equal(ga.get(c), A0)
    ga.zero(c)
    ga.copy(a, c, (1, 2), (4, 7), (3, 4), (6, 9))
    model = np.zeros(DIMS)
    model[3:6, 4:9] = A0[1:4, 2:7]
    np.testing.assert_array_equal(ga.get(c), model)
    ga.copy(a, c, (0, 0), (5, 3), (4, 1), (7, 6), True)  # 5x3 transposed into 3x5
    model[4:7, 1:6] = A0[0:5, 0:3].T
    np.testing.assert_array_equal(ga.get(c), model)
    ga.copy(a, c, (0, 1), (1, 7), (1, 0), (7, 1), True)  # a row into a column
    model[1:7, 0] = A0[0, 1:7]
    np.testing.assert_array_equal(ga.get(c), model)
    v = _make(ga, layout, ga.C_DBL, (63,), "V")
    ga.copy(a, v)  # whole copy, shapes differ: C order
    np.testing.assert_array_equal(ga.get(v), A0.reshape(-1))
    ga.copy(v, c, (10,), (40,), (2, 1), (7, 7))  # 1-D patch into a 5x6 patch
    model[2:7, 1:7] = A0.reshape(-1)[10:40].reshape(5, 6)
    np.testing.assert_array_equal(ga.get(c), model)
    t3 = ga.create(ga.C_DBL, (2, 3, 4), "T3")
    ga.copy(a, t3, (0, 0), (4, 6), None, None)  # 24 elements into 2x3x4
    T3 = A0[0:4, 0:6].reshape(2, 3, 4)
    np.testing.assert_array_equal(ga.get(t3), T3)
    ga.copy(t3, t3, (0, 0, 0), (1, 3, 4), (1, 0, 0), (2, 3, 4), True)  # 3x4 transposed, in 4x3 order
    np.testing.assert_array_equal(ga.get(t3)[1], T3[0].T.reshape(3, 4))
    ga.copy(t3, c, None, None, (1, 0), (5, 6), True)  # a 3-D transpose: dimensions reversed
    np.testing.assert_array_equal(ga.get(c)[1:5, 0:6], ga.get(t3).T.reshape(4, 6))
    ga.destroy(t3)
    ga.zero(c)  # the copies above again: c is the model once more
    ga.copy(a, c, (1, 2), (4, 7), (3, 4), (6, 9))
    ga.copy(a, c, (0, 0), (5, 3), (4, 1), (7, 6), True)
    ga.copy(a, c, (0, 1), (1, 7), (1, 0), (7, 1), True)
    ga.copy(v, c, (10,), (40,), (2, 1), (7, 7))
    ga.copy(c, c, (0, 0), (2, 4), (5, 5), (7, 9))  # disjoint patches of one array
    model[5:7, 5:9] = model[0:2, 0:4]
    np.testing.assert_array_equal(ga.get(c), model)
    ga.destroy(v)
    r = ga.create(ga.C_DBL, DIMS, "R")  # a regular array: another distribution than the layout's
    ga.copy(a, r)
    ga.add(r, b, c, 1, -1)
    np.testing.assert_array_equal(ga.get(c), A0 - B0)
    ga.destroy(r)
    checks += 8

    # dot: whole, patches, transposed patches
    assert ga.dot(a, b) == pytest.approx((A0 * B0).sum(), rel=1e-12)
    assert isinstance(ga.dot(a, b), float)
    assert ga.dot(a, b, (0, 0), (3, 4), (2, 3), (5, 7)) == pytest.approx((A0[0:3, 0:4] * B0[2:5, 3:7]).sum())
    assert ga.dot(a, b, (0, 0), (3, 4), (1, 2), (5, 5), True) == pytest.approx((A0[0:3, 0:4].T * B0[1:5, 2:5]).sum())
    assert ga.dot(a, b, (0, 0), (3, 4), (1, 2), (5, 5), False, True) == pytest.approx(
        (A0[0:3, 0:4].reshape(-1) * B0[1:5, 2:5].T.reshape(-1)).sum())
    assert ga.dot(a, b, (0, 0), (3, 4), (2, 0), (6, 3), True, False) == pytest.approx(
        (A0[0:3, 0:4].T * B0[2:6, 0:3]).sum())
    assert ga.dot(a, b, (0, 0), (2, 6), (1, 1), (5, 4)) == pytest.approx(
        (A0[0:2, 0:6].reshape(-1) * B0[1:5, 1:4].reshape(-1)).sum())  # reshaped patches
    # every member got the same bits
    d = ga.dot(a, b)
    from gpumpi.ga import groups
    assert len(set(groups.default_comm().allgather(d))) == 1
    checks += 7

    # norms (GA's axes: norm1 = largest row sum in the C view), select_elem, step_max
    assert ga.norm1(a) == pytest.approx(np.abs(A0).sum(axis=1).max())
    assert ga.norm_infinity(a) == pytest.approx(np.abs(A0).sum(axis=0).max())
    val, idx = ga.select_elem(a, "max")
    assert val == A0.max() and tuple(idx) == np.unravel_index(A0.argmax(), DIMS) and idx.dtype == np.int64
    val, idx = ga.select_elem_min(a)
    assert val == A0.min() and tuple(idx) == np.unravel_index(A0.argmin(), DIMS)
    val, idx = ga.select_elem_max(b)
    assert val == B0.max() and tuple(idx) == np.unravel_index(B0.argmax(), DIMS)  # ties: lowest C index
    val, idx = ga.select_elem(b, b"min")
    assert val == B0.min() and tuple(idx) == np.unravel_index(B0.argmin(), DIMS)
    P0 = np.abs(A0) + 1
    _load(ga, c, P0)
    bound = B0 < 0
    assert ga.step_max(c, b) == pytest.approx((-P0[bound] / B0[bound]).min())
    assert ga.step_max(c, b, (0, 0), (2, 9), (3, 0), (5, 9)) == pytest.approx(
        min((-P0[0:2][B0[3:5] < 0] / B0[3:5][B0[3:5] < 0])))
    ga.abs_value(b)
    assert ga.step_max(c, b) == np.finfo(float).max  # nothing binds
    assert ga.step_max(c, c) == np.finfo(float).max
    checks += 9

    for g in (a, b, c, m):
        ga.destroy(g)
    return checks


@pytest.mark.parametrize("n", NRANKS)
@pytest.mark.parametrize("layout", ["regular", "irregular", "ghosts"])
def test_elementwise_copy_reductions(n, layout):
    assert run_ranks(_elementwise, n, args=(layout,), timeout=120) == [35] * n


def test_elementwise_through_the_window_datatype_path():
    assert run_ranks(_elementwise, 3, args=("irregular", False), timeout=120) == [35] * 3


# --- matrices, diagonals, the testc identity -----------------------------------------------------
def _matrices(layout, direct=True):
    from gpumpi import ga
    from gpumpi.ga import handles

    handles.DIRECT = direct
    checks = 0
    rng = np.random.default_rng(5)
    # testc.c: symmetrize A, transpose A into B, B = A - B, dot(B, B) == 0
    S0 = rng.random((9, 9))
    a = _make(ga, layout, ga.C_DBL, (9, 9), "A")
    b = ga.duplicate(a, "B")
    _load(ga, a, S0)
    ga.symmetrize(a)
    sym = (S0 + S0.T) / 2
    np.testing.assert_allclose(ga.get(a), sym, rtol=1e-15)
    ga.transpose(a, b)
    ga.add(a, b, b, 1, -1)
    assert abs(ga.dot(b, b)) < 1e-20
    checks += 2
    ga.destroy(b)
    ga.destroy(a)

    # transpose of a non-square matrix
    A0 = rng.random(DIMS)
    a = _make(ga, layout, ga.C_DBL, DIMS, "A")
    t = _make(ga, layout, ga.C_DBL, DIMS[::-1], "T")
    _load(ga, a, A0)
    ga.transpose(a, t)
    np.testing.assert_array_equal(ga.get(t), A0.T)
    checks += 1

    # gemm with every transpose combination; matmul_patch on patches, and into one of its factors
    M, N, K = 5, 6, 4
    for ta in (False, True):
        for tb in (False, True):
            Ash = (K, M) if ta else (M, K)
            Bsh = (N, K) if tb else (K, N)
            ga_ = _make(ga, layout, ga.C_DBL, (Ash[0] + 1, Ash[1] + 2), "GA")  # larger than needed
            gb_ = _make(ga, layout, ga.C_DBL, Bsh, "GB")
            gc_ = _make(ga, layout, ga.C_DBL, (M, N + 1), "GC")
            Af = rng.random((Ash[0] + 1, Ash[1] + 2))
            Bf, Cf = rng.random(Bsh), rng.random((M, N + 1))
            for g, v in ((ga_, Af), (gb_, Bf), (gc_, Cf)):
                _load(ga, g, v)
            ga.gemm(ta, tb, M, N, K, 1.5, ga_, gb_, -0.5, gc_)
            As = Af[: Ash[0], : Ash[1]]
            expect = Cf.copy()
            expect[:, :N] = 1.5 * ((As.T if ta else As) @ (Bf.T if tb else Bf)) - 0.5 * Cf[:, :N]
            np.testing.assert_allclose(ga.get(gc_), expect, rtol=1e-12)
            checks += 1
            for g in (ga_, gb_, gc_):
                ga.destroy(g)
    _load(ga, t, A0.T)
    c = _make(ga, layout, ga.C_DBL, DIMS, "C")
    C0 = rng.random(DIMS)
    _load(ga, c, C0)
    ga.matmul_patch(False, False, 2.0, 1.0, a, (1, 2), (4, 7), t, (3, 0), (8, 2), c, (2, 5), (5, 7))
    expect = C0.copy()
    expect[2:5, 5:7] = 2.0 * A0[1:4, 2:7] @ A0.T[3:8, 0:2] + C0[2:5, 5:7]
    np.testing.assert_allclose(ga.get(c), expect, rtol=1e-12)
    ga.matmul_patch("T", "n", None, 0, a, (0, 0), (3, 4), a, (0, 5), (3, 7), c, (0, 0), (4, 2))
    expect[0:4, 0:2] = A0[0:3, 0:4].T @ A0[0:3, 5:7]
    np.testing.assert_allclose(ga.get(c), expect, rtol=1e-12)
    sq = _make(ga, layout, ga.C_DBL, (6, 6), "SQ")
    Q0 = rng.random((6, 6))
    _load(ga, sq, Q0)
    ga.matmul_patch(False, True, 1, 0, sq, None, None, sq, None, None, sq, None, None)  # into a factor
    np.testing.assert_allclose(ga.get(sq), Q0 @ Q0.T, rtol=1e-12)
    checks += 3

    # diagonals and row/column scaling
    v = _make(ga, layout, ga.C_DBL, (7,), "v")
    w = _make(ga, layout, ga.C_DBL, (9,), "w")
    V0, W0 = rng.random(7) + 1, rng.random(9) + 1
    _load(ga, v, V0)
    _load(ga, w, W0)
    model = A0.copy()
    i = np.arange(7)
    ga.zero_diagonal(a)
    model[i, i] = 0
    ga.shift_diagoal(a, 2.5)
    model[i, i] += 2.5
    ga.shift_diagonal(a)
    model[i, i] += 1
    np.testing.assert_array_equal(ga.get(a), model)
    ga.add_diagonal(a, v)
    model[i, i] += V0
    np.testing.assert_array_equal(ga.get(a), model)
    ga.get_diag(a, v)
    np.testing.assert_array_equal(ga.get(v), model[i, i])
    ga.set_diagonal(a, v)
    np.testing.assert_array_equal(ga.get(a), model)
    _load(ga, v, V0)
    ga.scale_rows(a, v)
    model *= V0[:, None]
    np.testing.assert_array_equal(ga.get(a), model)
    ga.scale_cols(a, w)
    model *= W0[None, :]
    np.testing.assert_array_equal(ga.get(a), model)
    checks += 6
    for g in (a, t, c, sq, v, w):
        ga.destroy(g)
    return checks


@pytest.mark.parametrize("n", NRANKS)
@pytest.mark.parametrize("layout", ["regular", "irregular", "ghosts"])
def test_matrices_diagonals_testc(n, layout):
    assert run_ranks(_matrices, n, args=(layout,), timeout=120) == [16] * n


def test_matrices_through_the_window_datatype_path():
    assert run_ranks(_matrices, 2, args=("regular", False), timeout=120) == [16] * 2


# --- the element types --------------------------------------------------------------------------
TYPES = ["C_INT", "C_LONG", "C_FLOAT", "C_DBL", "C_SCPL", "C_DCPL"]


def _types():
    from gpumpi import ga

    checks = 0
    for tname in TYPES:
        gt = getattr(ga, tname)
        dt = ga.dtype(gt)
        A0 = _data(dt, DIMS, 11)
        B0 = _data(dt, DIMS, 12, nonzero=True)
        a, b, c = (ga.create(gt, DIMS, nm) for nm in "ABC")
        ga.zero(c)
        np.testing.assert_array_equal(ga.get(c), np.zeros(DIMS, dt))
        _load(ga, a, A0)
        _load(ga, b, B0)
        fill = 3 - 2j if dt.kind == "c" else 3
        ga.fill(c, fill, (1, 1), (4, 5))
        model = np.zeros(DIMS, dt)
        model[1:4, 1:5] = fill
        np.testing.assert_array_equal(ga.get(c), model)
        ga.scale(c, 2)
        ga.add_constant(c, 1, (0, 0), (2, 9))
        model *= dt.type(2)
        model[0:2] += dt.type(1)
        np.testing.assert_array_equal(ga.get(c), model)
        if dt.kind != "c":
            ga.scale(c, 2.7)  # truncated to 2 in integer arrays (C's conversion)
            model = (model * dt.type(2.7)).astype(dt)
            np.testing.assert_array_equal(ga.get(c), model)
        ga.add(a, b, c, 2, -3)
        np.testing.assert_array_equal(ga.get(c), (dt.type(2) * A0 + dt.type(-3) * B0).astype(dt))
        ga.copy(a, c)
        np.testing.assert_array_equal(ga.get(c), A0)
        ga.copy(b, c, (0, 0), (3, 4), (2, 2), (6, 5), True)
        model = A0.copy()
        model[2:6, 2:5] = B0[0:3, 0:4].T
        np.testing.assert_array_equal(ga.get(c), model)
        d = ga.dot(a, b)
        expect = (A0.astype(np.complex128 if dt.kind == "c" else np.float64) * B0).sum()
        assert d == pytest.approx(expect) and type(d) is {"i": int, "f": float, "c": complex}[dt.kind]
        ga.elem_multiply(a, b, c)
        np.testing.assert_array_equal(ga.get(c), A0 * B0)
        ga.elem_divide(a, b, c)
        if dt.kind == "i":
            expect = (np.trunc(A0.astype(float) / B0)).astype(dt)  # C division
            np.testing.assert_array_equal(ga.get(c), expect)
        else:
            np.testing.assert_allclose(ga.get(c), A0 / B0, rtol=1e-6)
        ga.elem_maximum(a, b, c)
        if dt.kind == "c":  # the manual's rule: the larger modulus, imaginary part 0
            np.testing.assert_allclose(ga.get(c), np.maximum(abs(A0), abs(B0)).astype(dt), rtol=1e-6)
        else:
            np.testing.assert_array_equal(ga.get(c), np.maximum(A0, B0))
        ga.elem_minimum(a, b, c)
        if dt.kind == "c":
            np.testing.assert_allclose(ga.get(c), np.minimum(abs(A0), abs(B0)).astype(dt), rtol=1e-6)
        else:
            np.testing.assert_array_equal(ga.get(c), np.minimum(A0, B0))
        ga.abs_value(a)
        np.testing.assert_allclose(ga.get(a), abs(A0).astype(dt), rtol=1e-6)
        val, idx = ga.select_elem(b, "max")
        key = abs(B0) if dt.kind == "c" else B0
        k = np.unravel_index(key.argmax(), DIMS)
        assert val == B0[k] and tuple(idx) == k
        assert type(val) is {"i": int, "f": float, "c": complex}[dt.kind]
        if dt.kind != "c":
            assert ga.norm1(b) == pytest.approx(np.abs(B0).sum(axis=1).max())
        checks += 1
        for g in (a, b, c):
            ga.destroy(g)
    # complex dot does not conjugate; median of complex values by modulus
    z = ga.create(ga.C_DCPL, (5,))
    Z0 = np.array([1 + 2j, 3 - 1j, -2j, 4, 1 + 1j])
    _load(ga, z, Z0)
    assert ga.dot(z, z) == pytest.approx((Z0 * Z0).sum())
    ga.destroy(z)
    return checks


@pytest.mark.parametrize("n", [1, 3, 4])
def test_element_types(n):
    assert run_ranks(_types, n, timeout=120) == [len(TYPES)] * n


# --- 1-D operations, ghosts, gop/brdcst, groups, printing -----------------------------------------
def _vectors_ghosts_messages(layout):
    from gpumpi import ga

    me, n = ga.nodeid(), ga.nnodes()
    checks = 0
    N = 13
    src = _make(ga, layout, ga.C_DBL, (N,), "src")
    dst = _make(ga, layout, ga.C_DBL, (N,), "dst")
    msk = _make(ga, layout, ga.C_INT, (N,), "msk")
    S0 = np.arange(1, N + 1, dtype=float) * 1.5
    M0 = np.array([0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0], np.int32)
    _load(ga, src, S0)
    _load(ga, msk, M0)

    ga.enum(dst)
    np.testing.assert_array_equal(ga.get(dst), np.arange(1, N + 1))
    ga.enum(dst, 2, 10, 5, 3)  # inclusive bounds
    expect = np.arange(1, N + 1, dtype=float)
    expect[2:11] = 5 + 3 * np.arange(9)
    np.testing.assert_array_equal(ga.get(dst), expect)
    checks += 1

    def seg_scan(s, m, lo, hi, excl, init):
        out = init.copy()
        acc, on = 0.0, False
        for i in range(lo, hi + 1):
            if m[i]:
                on, acc = True, 0.0
            if on:
                out[i] = acc if excl else acc + s[i]
                acc += s[i]
        return out

    for lo, hi in ((None, None), (1, 11), (4, 12), (5, 5)):
        for excl in (False, True):
            ga.fill(dst, -7.0)
            ga.scan_add(src, dst, msk, lo, hi, excl)
            init = np.full(N, -7.0)
            expect = seg_scan(S0, M0, 0 if lo is None else lo, N - 1 if hi is None else hi, excl, init)
            np.testing.assert_allclose(ga.get(dst), expect, rtol=1e-14)
            checks += 1
        ga.fill(dst, -7.0)
        ga.scan_copy(src, dst, msk, lo, hi)
        l, h = (0 if lo is None else lo), (N - 1 if hi is None else hi)
        expect = np.full(N, -7.0)
        last = None
        for i in range(l, h + 1):
            if M0[i]:
                last = S0[i]
            expect[i] = 0.0 if last is None else last
        np.testing.assert_array_equal(ga.get(dst), expect)
        checks += 1

    ga.fill(dst, 0.0)
    cnt = ga.pack(src, dst, msk, 1, 11)
    sel = S0[1:12][M0[1:12] != 0]
    assert cnt == sel.size
    np.testing.assert_array_equal(ga.get(dst)[:cnt], sel)
    np.testing.assert_array_equal(ga.get(dst)[cnt:], 0)
    assert ga.pack(src, dst, msk) == int((M0 != 0).sum())
    ga.fill(dst, -1.0)
    cnt = ga.unpack(src, dst, msk, 3, 12)
    expect = np.full(N, -1.0)
    pos = np.flatnonzero(M0[3:13]) + 3
    expect[pos] = S0[: pos.size]
    assert cnt == pos.size
    np.testing.assert_array_equal(ga.get(dst), expect)
    checks += 3
    for g in (src, dst, msk):
        ga.destroy(g)

    # ghosts: periodic wrap, corners; 2-D and 3-D; one direction at a time
    def check_ghosts(g, G, only=None):
        loc = ga.access_ghosts(g)
        if loc is not None:
            lo, hi = ga.distribution(g)
            w = ga.ghost_widths(g)
            idx = [np.arange(l - k, h + k) % e for l, h, k, e in zip(lo, hi, w, G.shape)]
            want = G[np.ix_(*idx)]
            got = loc.get() if hasattr(loc, "get") and not isinstance(loc, np.ndarray) else loc
            if only is None:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_array_equal(got[only], want[only])
                rest = np.ones(got.shape, bool)
                rest[only] = False
                inner = tuple(slice(k, k + (h - l)) for l, h, k in zip(lo, hi, w))
                rest[inner] = False
                assert (got[rest] == -999).all()
            ga.release_ghosts(g)

    for dims, width in (((7, 9), (1, 2)), ((4, 5, 3), (1, 1, 2)), ((5,), (3,))):
        g = ga.create_ghosts(ga.C_DBL, dims, width, "G")
        G0 = np.arange(np.prod(dims), dtype=float).reshape(dims) + 0.5
        _load(ga, g, G0)
        ga.update_ghosts(g)
        check_ghosts(g, G0)
        checks += 1
        # one side of dimension 0, with and without corners
        for flag in (False, True):
            for side in (-1, 1):
                loc = ga.access_ghosts(g)
                if loc is not None:
                    lo, hi = ga.distribution(g)
                    inner = tuple(slice(k, k + (h - l)) for l, h, k in zip(lo, hi, width))
                    keep = loc[inner].copy()
                    loc[...] = -999
                    loc[inner] = keep
                    ga.release_update_ghosts(g)
                ga.sync()
                ga.update_ghost_dir(g, 0, side, flag)
                loc = ga.access_ghosts(g)
                only = None
                if loc is not None:
                    w0 = width[0]
                    n0 = loc.shape[0] - 2 * w0
                    rows = slice(0, w0) if side < 0 else slice(w0 + n0, n0 + 2 * w0)
                    others = tuple(slice(None) if flag else slice(k, s - k) for k, s in zip(width[1:], loc.shape[1:]))
                    only = (rows,) + others
                    ga.release_ghosts(g)
                check_ghosts(g, G0, only)
                checks += 1
        ga.update_ghosts_dir(g, len(dims) - 1, 1, True)  # the alias
        ga.destroy(g)

    # gop / brdcst
    x = np.array([me + 1.0, -(me + 1.0), 2.0])
    y = ga.gop(x, "+")
    assert y is x and np.array_equal(x, [n * (n + 1) / 2, -n * (n + 1) / 2, 2.0 * n])
    assert np.array_equal(ga.gop_multiply(np.array([2.0, me + 1.0])), [2.0 ** n, float(np.prod(np.arange(1, n + 1)))])
    assert np.array_equal(ga.gop_max(np.array([me, -me], np.int32)), [n - 1, 0])
    assert np.array_equal(ga.gop_min(np.array([me, -me], np.int64)), [0, -(n - 1)])
    assert np.array_equal(ga.gop_absmax(np.array([-(me + 1.0), 0.5])), [n, 0.5])
    assert np.array_equal(ga.gop_absmin(np.array([-(me + 1.0)], np.float32)), [1.0])
    assert np.array_equal(ga.gop(np.array([1 << me], np.int32), b"or"), [(1 << n) - 1])
    z = ga.gop(np.array([1 + 1j * me]), "+")
    assert z[0] == n + 1j * n * (n - 1) / 2
    zz = ga.gop(np.array([1j], np.complex64), "*")
    assert zz[0] == pytest.approx(1j ** n)
    lst = ga.gop_add([me, 1])
    assert isinstance(lst, np.ndarray) and list(lst) == [n * (n - 1) // 2, n]
    s = ga.gop(np.float64(me), "max")
    assert float(s) == n - 1
    buf = np.arange(5.0) * (me + 1) if me == n - 1 else np.zeros(5)
    got = ga.brdcst(buf, n - 1)
    assert got is buf and np.array_equal(buf, np.arange(5.0) * n)
    got = ga.brdcst([me, me], 0)
    assert list(got) == [0, 0]
    checks += 3

    # processor groups: gop/brdcst on one, and collective array operations on an array living there
    if hasattr(ga, "pgroup_create") and n >= 2:
        members = list(range(0, n, 2))
        p = ga.pgroup_create(members)
        if me in members:
            r = ga.pgroup_gop_add(p, np.array([me]))
            assert r[0] == sum(members)
            assert ga.pgroup_gop(p, np.array([float(me)]), "max")[0] == members[-1]
            b = ga.pgroup_brdcst(p, np.array([me, 7]) if me == members[-1] else np.zeros(2, int), len(members) - 1)
            assert list(b) == [members[-1], 7]
            g = ga.create(ga.C_DBL, (5, 4), "P", pgroup=p)
            ga.fill(g, 2.0)
            h = ga.duplicate(g)
            ga.copy(g, h)
            ga.scale(h, 3.0, (0, 0), (2, 4))
            assert ga.dot(g, h) == pytest.approx(2 * 6 * 8 + 2 * 2 * 12)
            ga.destroy(h)
            ga.destroy(g)
        ga.sync()
        checks += 1

    # printing: process 0 prints (captured here), the others print nothing
    g = ga.create(ga.C_INT, (2, 3), "printed")
    _load(ga, g, np.arange(6, dtype=np.int32).reshape(2, 3))
    old, sys.stdout = sys.stdout, io.StringIO()
    try:
        ga.print_patch(g, (0, 1), (2, 3))
        ga.print_patch(g, None, None, False)
        ga.print_stdout(g)
        ga.print_distribution(g)
        ga.summarize(True)
        text = sys.stdout.getvalue()
    finally:
        sys.stdout = old
    if me == 0:
        assert '"printed"' in text and "[0, 1]: 1 2" in text and "\n3 4 5\n" in text and "proc 0:" in text
        assert "GA summary" in text
    else:
        assert text == ""
    ga.destroy(g)
    checks += 1
    return checks


@pytest.mark.parametrize("n", NRANKS)
@pytest.mark.parametrize("layout", ["regular", "irregular"])
def test_vectors_ghosts_gop_brdcst_printing(n, layout):
    res = run_ranks(_vectors_ghosts_messages, n, args=(layout,), timeout=120)
    assert res == [res[0]] * n and res[0] == 16 + 3 * 5 + 3 + (1 if n >= 2 else 0) + 1


# --- bad input ----------------------------------------------------------------------------------
def _bad_input():
    from gpumpi import ga

    me = ga.nodeid()
    a = ga.create(ga.C_DBL, DIMS, "A")
    b = ga.create(ga.C_DBL, (9, 7), "B")
    i = ga.create(ga.C_INT, DIMS, "I")
    v = ga.create(ga.C_DBL, (5,), "v")
    seen = []

    def expect(exc, match, fn, *args):
        with pytest.raises(exc, match=match):
            fn(*args)
        seen.append(match)

    expect(TypeError, r"fill: complex value for a C_DBL array", ga.fill, a, 1 + 2j)
    expect(ValueError, r"fill: value required \(None\)", ga.fill, a, None)
    expect(ValueError, r"scale: value required", ga.scale, a, None)
    expect(TypeError, r"add: complex alpha", ga.add, a, a, a, 1j)
    expect(ValueError, r"copy: the patches differ in element count \(63, 5\)", ga.copy, a, v)
    expect(ValueError, r"element count", ga.copy, a, b, (0, 0), (2, 2), (0, 0), (3, 3))
    expect(ga.GAError, r"copy: source and destination are the same array", ga.copy, a, a)
    expect(ga.GAError, r"overlap", ga.copy, a, a, (0, 0), (2, 2), (1, 1), (3, 3))
    expect(TypeError, r"copy: the arrays differ in type \(C_DBL, C_INT\)", ga.copy, a, i)
    expect(TypeError, r"gemm: C_INT not supported", ga.gemm, False, False, 2, 2, 2, 1, i, i, 0, i)
    expect(TypeError, r"gemm: alpha and beta are required", ga.gemm, False, False, 2, 2, 2, None, a, a, 0, a)
    expect(ValueError, r"matmul_patch: shapes do not conform", ga.matmul_patch, 0, 0, 1, 0, a, None, None, a, None,
           None, b, None, None)
    expect(ga.GAError, r"transpose: the arrays have to be different", ga.transpose, a, a)
    expect(ValueError, r"transpose: B's extents", ga.transpose, a, ga.duplicate(a))
    expect(ValueError, r"symmetrize: the last two extents must be equal", ga.symmetrize, a)
    expect(TypeError, r"dot: the arrays differ in type", ga.dot, a, i)
    expect(ValueError, r"select_elem: op must be 'min' or 'max'", ga.select_elem, a, "mean")
    expect(ValueError, r"update_ghost_dir: dir must be -1 or \+1", ga.update_ghost_dir, a, 0, 2, 0)
    expect(ValueError, r"update_ghost_dir: dimension out of range", ga.update_ghost_dir, a, 2, 1, 0)
    expect(ValueError, r"norm1: only 1-D and 2-D", ga.norm1, ga.create(ga.C_DBL, (2, 2, 2)))
    expect(ValueError, r"enum: only 1-D arrays", ga.enum, a)
    expect(ValueError, r"enum: bounds outside the array", ga.enum, v, 0, 5)
    expect(ValueError, r"gop: unknown operation", ga.gop, np.zeros(2), "sum")
    expect(TypeError, r"gop: 'or' needs an integer type", ga.gop, np.zeros(2), "or")
    expect(ValueError, r"gop: the buffer must be contiguous", ga.gop, np.zeros((4, 4))[:, 1], "+")
    expect(ValueError, r"brdcst: root out of range", ga.brdcst, np.zeros(2), 99)
    expect(ValueError, r"set_diagonal: the vector must be 1-D", ga.set_diagonal, a, v)
    # data-dependent errors are agreed by every member
    ga.fill(a, 1.0)
    if me == 0:
        ga.put(a, [[-1.0]], (0, 0), (1, 1))
    ga.sync()
    expect(ValueError, r"step_max: array .* has a negative element", ga.step_max, a, ga.duplicate(a))
    m = ga.create(ga.C_INT, (5,))
    ga.fill(m, 1)
    expect(ValueError, r"pack: 5 elements do not fit in dst \(length 3\)", ga.pack, v, ga.create(ga.C_DBL, (3,)), m)
    # nothing was lost: the arrays still work
    ga.fill(a, 2.0)
    assert ga.dot(a, a) == 4.0 * 63
    return len(seen)


@pytest.mark.parametrize("n", [1, 2])
def test_bad_input(n):
    assert run_ranks(_bad_input, n, timeout=60) == [29] * n


# --- the simulated device ------------------------------------------------------------------------
def _device():
    from gpumpi import ga

    def dev(gt, dims, ghosts=None):
        h = ga.create_handle()
        ga.set_data(h, dims, gt)
        if ghosts is not None:
            ga.set_ghosts(h, ghosts)
        ga.set_memory_dev(h, "device")
        assert ga.allocate(h)
        return h

    def host(x):
        return x.get() if not isinstance(x, np.ndarray) else x

    checks = 0
    A0 = _data(np.float64, DIMS, 21) + 0.5
    B0 = _data(np.float64, DIMS, 22, nonzero=True)
    a, b, c = dev(ga.C_DBL, DIMS), dev(ga.C_DBL, DIMS), dev(ga.C_DBL, DIMS, (1, 2))
    hst = ga.create(ga.C_DBL, DIMS, "host")
    for g, v in ((a, A0), (b, B0)):
        _load(ga, g, v)
    ga.zero(c)
    assert (host(ga.get(c)) == 0).all()
    ga.fill(c, 4.0, (1, 1), (3, 5))
    ga.scale(c, 0.5)
    model = np.zeros(DIMS)
    model[1:3, 1:5] = 2.0
    np.testing.assert_array_equal(host(ga.get(c)), model)
    ga.add(a, b, c, 2, 1)
    np.testing.assert_array_equal(host(ga.get(c)), 2 * A0 + B0)
    assert ga.dot(a, b) == pytest.approx((A0 * B0).sum())
    ga.copy(a, c)
    np.testing.assert_array_equal(host(ga.get(c)), A0)
    ga.copy(b, c, (0, 0), (3, 4), (2, 2), (6, 5), True)
    model = A0.copy()
    model[2:6, 2:5] = B0[0:3, 0:4].T
    np.testing.assert_array_equal(host(ga.get(c)), model)
    ga.copy(c, hst)  # device to host array
    np.testing.assert_array_equal(ga.get(hst), model)
    ga.elem_divide(a, b, hst)
    np.testing.assert_array_equal(ga.get(hst), A0 / B0)
    flat = dev(ga.C_DBL, (63,))
    ga.copy(c, flat)  # shapes differ: element by element (gather)
    np.testing.assert_array_equal(host(ga.get(flat)), model.reshape(-1))
    ga.copy(flat, hst, (3,), (23,), (1, 2), (6, 6))
    assert ga.dot(hst, flat, (1, 2), (6, 6), (3,), (23,)) == pytest.approx((model.reshape(-1)[3:23] ** 2).sum())
    ga.destroy(flat)
    checks += 1
    # ghosts on the device
    ga.update_ghosts(c)
    loc = ga.access_ghosts(c)
    if loc is not None:
        lo, hi = ga.distribution(c)
        idx = [np.arange(l - k, h + k) % e for l, h, k, e in zip(lo, hi, (1, 2), DIMS)]
        np.testing.assert_array_equal(host(loc), model[np.ix_(*idx)])
        ga.release_ghosts(c)
    checks += 1
    # matrices and reductions
    t = dev(ga.C_DBL, DIMS[::-1])
    ga.transpose(a, t)
    np.testing.assert_array_equal(host(ga.get(t)), A0.T)
    sq = dev(ga.C_DBL, (7, 7))
    ga.gemm(False, False, 7, 7, 9, 1.0, a, t, 0.0, sq)
    np.testing.assert_allclose(host(ga.get(sq)), A0 @ A0.T, rtol=1e-12)
    ga.symmetrize(sq)
    np.testing.assert_allclose(host(ga.get(sq)), A0 @ A0.T, rtol=1e-12)
    assert ga.norm1(a) == pytest.approx(np.abs(A0).sum(axis=1).max())
    assert ga.select_elem_max(a)[0] == A0.max()
    v = dev(ga.C_DBL, (7,))
    ga.get_diag(sq, v)
    np.testing.assert_allclose(host(ga.get(v)), np.diag(A0 @ A0.T), rtol=1e-12)
    checks += 1
    for g in (a, b, c, hst, t, sq, v):
        ga.destroy(g)
    return checks


@pytest.mark.parametrize("n", [1, 2])
def test_simulated_device(n):
    device_windows_across_nodes(n)
    assert run_ranks(_device, n, timeout=120, env={"GPUMPI_DEVICE": "sim"}) == [3] * n
