"""gpumpi.ga.gain at 1-4 ranks: GA's own gain test (tests/gain.py: every statement run once with
``m = numpy`` and once with ``m = gain``, results and dtypes compared) for the statements gpumpi's
gain supports, then reductions along axes, operators, conversion, creation, random, freeing,
and the NotImplementedError list.  Expectations are NumPy's results on the same statement."""

import numpy as np
import pytest

from gpumpi.testing import run_ranks

NRANKS = [1, 2, 3, 4]

# GA's tests/gain.py statements that gpumpi's gain supports (sizes of the largest cut down);
# each binds `result`.  Dropped: int16 arrays (no GA type of 2 bytes), accumulate, .flat; alen
# (gone from NumPy) is checked against len() below.
GA_TESTS = [
    "result = m.arange(100, dtype=m.float32)",
    "result = m.arange(100, dtype=m.float32).copy()",
    "result = m.arange(100, dtype=m.float32)[9:17].copy()",
    "a = m.arange(100, dtype=m.float32)\nresult = m.sin(a[49::-2], a[50::2])",
    "a = m.arange(100, dtype=m.float32)\na[5:15] = m.arange(10, dtype=m.float32)\nresult = a",
    "a = m.arange(100, dtype=m.float32)\na[5:15] = np.arange(10, dtype=m.float32)\nresult = a",
    "result = m.sin(1)",
    "result = m.sin([1, 2, 3])",
    "result = m.sin([1, 2, 3], m.asarray([0, 0, 0], dtype=m.float32))",
    "a = m.arange(100, dtype=m.float32)\nb = a[:50:2]\nc = a[50::2]\nresult = m.add(b, c)",
    "a = m.arange(100, dtype=m.float32)\nb = a[:50:2]\nresult = m.add(b, 5)",
    "a = m.arange(100, dtype=m.float32)\nb = a[50::2]\nresult = m.add(5, b)",
    "result = m.ones((3, 4, 5), dtype=m.float32)",
    "s = m.ones((3, 4, 5), dtype=m.float32)\nt = m.ones((3, 4, 5), dtype=m.float32)\nresult = m.sin(s, t)",
    "x = m.ones((2, 3, 4))\nresult = m.add(x, x)",
    "x = m.ones((2, 3, 4))\ny = m.ones((3, 4))\nresult = m.add(x, y)",
    "result = m.linspace(2.0, 3.0, num=5)",
    "result = m.linspace(2.0, 3.0, num=5, endpoint=False)",
    "result = m.linspace(2.0, 3.0, num=5, retstep=True)",
    "result = m.logspace(2.0, 3.0, num=4)",
    "result = m.logspace(2.0, 3.0, num=4, endpoint=False)",
    "result = m.logspace(2.0, 3.0, num=4, base=2.0)",
    "f = m.ones((10, 20), dtype=float)\ng = m.ones((20, 30), dtype=float)\nresult = m.dot(f, g)",
    "h = m.arange(100, dtype=m.float32)\nresult = m.dot(h, h)",
    "result = m.dot(6, 10)",
    "h = m.arange(100, dtype=m.float32)\nresult = m.dot(6, h)",
    "result = m.eye(24, 25)",
    "result = m.eye(24, 25, 4)",
    "result = m.eye(24, 25, -8)",
    "result = m.identity(11)",
    "result = m.add.reduce([1, 2, 3, 4])",
    "result = m.add.reduce(m.arange(100))",
    "result = m.add.reduce(m.ones((10, 20)))",
    "result = m.add.reduce(m.ones((10, 20, 30)))",
    "result = m.subtract.reduce([1, 2, 3, 4])",
    "result = m.subtract.reduce(m.arange(100))",
    "i = m.arange(10 * 20).reshape((10, 20))\nresult = m.subtract.reduce(i)",
    "i = m.arange(10 * 20 * 30).reshape((10, 20, 30))\nresult = m.subtract.reduce(i)",
    "foo = np.arange(4 * 25).reshape(4, 25)\ni = m.zeros((4, 25))\ni[:] = foo\nresult = i",
    "result = m.clip(m.arange(10), 1, 8)",
    "result = m.clip(m.arange(100), 10, 80)",
    "result = m.clip(m.arange(10), [3, 4, 1, 1, 1, 4, 4, 4, 4, 4], 8)",
    "foo = np.arange(4 * 25).reshape(4, 25)\ni = m.zeros((4, 25))\ni[:] = foo\nresult = i.transpose()",
    "foo = np.arange(4 * 5 * 7).reshape(4, 5, 7)\nk = m.zeros((4, 5, 7))\nk[:] = foo\nresult = k.transpose()",
    "foo = np.arange(4 * 5 * 7).reshape(4, 5, 7)\nk = m.zeros((4, 5, 7))\nk[:] = foo\nresult = k.transpose(1, 2, 0).shape",
    "foo = np.arange(4 * 5 * 7).reshape(4, 5, 7)\nk = m.zeros((4, 5, 7))\nk[:] = foo\nresult = k.transpose(1, 2, 0)",
    "result = m.arange(3 * 4 * 5).reshape((3, 4, 5))",
    "result = m.arange(3 * 4 * 5).reshape((3, 4, 5))[1:, 2:, ::2].reshape((2, 2, 3))",
    "a = m.zeros((10, 2))\na.shape = (20)\nresult = a",
    "a = m.empty((4, 2, 6, 9), dtype=m.float32)\na.fill(6789.0)\nresult = a",
    "a = m.empty((4, 2, 6, 9), dtype=m.int32)\na.fill(6789.0)\nresult = a",
    "result = m.indices((3, 4, 5))",
    "result = m.indices((3, 4, 5)).max()",
    "result = m.indices((3, 4, 5)).max(0)",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3))",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3)).T",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3)).T[1:, 2:, 3:]",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3)).T[0, 2:, 3:]",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3)).T[1:, 0, 3:]",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3)).T[1:, 2:, 0]",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3)).T[1:, None, 2:, 0]",
    "result = m.arange(3 * 4 * 5).reshape((5, 4, 3)).T[None, 1:, None, 2:, None, 0, None]",
    "result = m.add.reduce(m.arange(3 * 4 * 5).reshape((5, 4, 3)).T)",
    "result = m.ones((15, 2))\nresult = m.multiply(result, 5, result)",
    "result = m.ones((15, 2)) * 5",
    "result = m.ones((15, 2))\nresult *= 5",
    "result = m.ones((15, 2))[:, 0] * 5",
    "result = m.ones((15, 2))\nresult[:, 0] *= 5",
    "result = m.arange(3 * 4).reshape(3, 4).diagonal()",
    "result = m.arange(3 * 4).reshape(3, 4).diagonal(1)",
    "result = m.arange(3 * 4).reshape(3, 4).diagonal(-1)",
]


def _dist(ref):
    """``ref`` as a gain array (GA's way: ``asarray`` returns NumPy arrays as they are)."""
    from gpumpi.ga import gain
    return gain.ndarray(ref.shape, ref.dtype, buffer=np.ascontiguousarray(ref))


def _value(x):
    """A rank-independent NumPy form of a result (collective for gain arrays)."""
    from gpumpi.ga import gain
    if isinstance(x, gain.ndarray):
        return x.allget()
    if isinstance(x, tuple):
        return tuple(_value(v) for v in x)
    return x


def _same(r_np, r_gain, what):
    if isinstance(r_np, tuple):
        assert isinstance(r_gain, tuple) and len(r_np) == len(r_gain), what
        for a, b in zip(r_np, r_gain):
            _same(a, b, what)
        return
    a, b = np.asarray(r_np), np.asarray(r_gain)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    assert a.dtype == b.dtype, (what, a.dtype, b.dtype)
    assert np.array_equal(a, b), (what, a, b)


def _run(statement):
    from gpumpi.ga import gain
    got = {}
    for name, mod in (("np", np), ("gain", gain)):
        env = {"m": mod, "np": np}
        exec(statement, env)
        got[name] = _value(env["result"])
    return got["np"], got["gain"]


def _ga_tests():
    for statement in GA_TESTS:
        r_np, r_gain = _run(statement)
        _same(r_np, r_gain, statement)
    return len(GA_TESTS)


@pytest.mark.parametrize("n", NRANKS)
def test_ga_gain_statements(n):
    assert run_ranks(_ga_tests, n, timeout=240) == [len(GA_TESTS)] * n


def _reductions_operators():
    from gpumpi.ga import gain
    rng = np.random.default_rng(7)
    checks = 0
    for dt in (np.int32, np.int64, np.float32, np.float64, np.complex128):
        base = rng.integers(-9, 10, (5, 7, 6))
        ref = (base + 1j * rng.integers(-9, 10, base.shape)).astype(dt) if np.dtype(dt).kind == "c" \
            else base.astype(dt)
        g = _dist(ref)
        assert isinstance(g, gain.ndarray) and g.dtype == ref.dtype and g.shape == ref.shape
        for meth in ("sum", "prod") + (("max", "min") if np.dtype(dt).kind != "c" else ()):
            for axis in (None, 0, 1, 2, -1):
                got = _value(getattr(g, meth)(axis=axis))
                want = getattr(ref, meth)(axis=axis)
                if dt in (np.float32,):
                    assert np.allclose(got, want, rtol=1e-5) and np.asarray(got).dtype == want.dtype, (meth, axis)
                else:
                    _same(want, got, (meth, axis, dt))
                checks += 1
        for meth in ("all", "any"):
            for axis in (None, 1):
                _same(getattr(ref, meth)(axis=axis), _value(getattr(g, meth)(axis=axis)), (meth, axis))
        for axis in (None, 0, 2):
            for meth in ("mean", "var", "std"):
                got, want = _value(getattr(g, meth)(axis=axis)), getattr(ref, meth)(axis=axis)
                assert np.allclose(got, want, rtol=1e-4) and np.asarray(got).dtype == want.dtype, (meth, axis, dt)
        assert np.allclose(g.var(ddof=1), ref.var(ddof=1), rtol=1e-4)
        if np.dtype(dt).kind != "c":
            _same(np.ptp(ref, axis=1), _value(g.ptp(axis=1)), "ptp")
        _same(ref.sum(axis=1, keepdims=True), _value(g.sum(axis=1, keepdims=True)), "keepdims")
        _same(np.add.reduce(ref, axis=2), _value(np.add.reduce(g, axis=2)), "np.add.reduce")
        _same(np.sum(ref), _value(np.sum(g)), "np.sum")
        g.free()
    a_ref = np.arange(1, 61, dtype=np.float64).reshape(4, 15)
    b_ref = (np.arange(60, dtype=np.float64).reshape(4, 15) % 7) + 1
    a, b = _dist(a_ref), _dist(b_ref)
    col = _dist(np.arange(4.0).reshape(4, 1))
    for expr in ("a + b", "a - b", "a * b", "a / b", "a // b", "a % b", "a ** 2", "-a", "+a", "abs(-a)",
                 "a + 1.5", "2 - a", "3 / a", "a + b[0]", "a * col", "a < b", "a <= 7", "a == b", "a != b",
                 "a > b", "a >= b", "np.sin(a)", "np.add(a, b_np)", "b_np + a", "np.maximum(a, b)",
                 "np.hypot(a, b)", "np.exp(a / 60)", "np.isnan(a)", "(a > 3) & (b < 5)", "~(a > 3)",
                 "(a > 3) | (b < 5)", "a.astype(np.int32)", "a.astype(np.float32) + np.float32(1)",
                 "np.float32(2) * a.astype(np.float32)", "a.round()", "np.clip(a, 3, 9)", "a.clip(2, 5)",
                 "a.conj()", "a.reshape(15, 4)", "a.reshape(-1)", "a.flatten()", "a.ravel()",
                 "a.reshape(1, 4, 15).squeeze()", "a.swapaxes(0, 1)", "a.T", "a @ b.T", "a.dot(b.T)",
                 "np.dot(a, b[0])", "a[1:3, ::4]", "a[-1]", "a[2, 3]", "a[..., 1]"):
        env = {"a": a_ref, "b": b_ref, "col": col.allget(), "np": np, "b_np": b_ref}
        want = eval(expr, env)
        env.update(a=a, b=b, col=col)
        got = _value(eval(expr, env))
        _same(want, got, expr)
        checks += 1
    q, r = divmod(a, b)
    _same(divmod(a_ref, b_ref), (q.allget(), r.allget()), "divmod")
    fr = np.frexp(a)
    _same(np.frexp(a_ref), tuple(x.allget() for x in fr), "frexp")
    # in-place operators keep the array, follow NumPy's casting rule on every rank
    c, c_ref = a.copy(), a_ref.copy()
    for op in ("+=", "-=", "*=", "/=", "**="):
        exec(f"c {op} b", {"c": c, "b": b})
        exec(f"c {op} b", {"c": c_ref, "b": b_ref})
    assert np.allclose(c.allget(), c_ref)
    i = gain.arange(60).reshape(4, 15)
    with pytest.raises(TypeError, match="Cannot cast"):
        i += 0.5
    i += 2
    _same(np.arange(60).reshape(4, 15) + 2, i.allget(), "int +=")
    return checks


@pytest.mark.parametrize("n", NRANKS)
def test_reductions_and_operators(n):
    got = run_ranks(_reductions_operators, n, timeout=240)
    assert len(set(got)) == 1 and got[0] > 100


def _conversion_creation_random():
    from gpumpi import ga
    from gpumpi.ga import gain
    me, n = gain.me(), gain.nproc()
    assert (me, n) == (ga.nodeid(), ga.nnodes())
    ref = np.arange(24, dtype=np.float64).reshape(4, 6)
    g = _dist(ref)
    assert gain.asarray(ref) is ref
    assert np.array_equal(np.asarray(g), ref) and len(g) == 4 and g.ndim == 2 and g.size == 24
    assert g.nbytes == ref.nbytes and g.itemsize == 8 and g.strides == ref.strides
    assert repr(g) == repr(ref).replace("array(", "gain.ndarray(") and str(g) == str(ref)
    assert g.tolist() == ref.tolist() and [r.tolist() for r in g] == ref.tolist()
    assert g.item(7) == 7.0 and g.item(-1) == 23.0 and g.item(1, 2) == 8.0
    assert float(gain.asarray([5.0])) == 5.0 and int(gain.ones(1)) == 1 and bool(gain.ones(1))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(g)
    # setitem: every rank passes the same values; each writes its own block
    g2, r2 = gain.zeros((7, 5), np.int64), np.zeros((7, 5), np.int64)
    for key, val in (((slice(1, 6, 2), slice(None)), 4), ((slice(None, None, -3), 2), [1, 2, 3]),
                     ((Ellipsis, 4), np.arange(7)), ((3, 3), 9), ((slice(5, 1, -1), None, slice(1, 4)), 6)):
        g2[key] = val
        r2[key] = val
    _same(r2, g2.allget(), "setitem")
    g2[:, 1:3] = gain.arange(14).reshape(7, 2)
    r2[:, 1:3] = np.arange(14).reshape(7, 2)
    _same(r2, g2.allget(), "setitem from gain")
    with pytest.raises(NotImplementedError, match="advanced indexing"):
        g2[[1, 2]]
    with pytest.raises(IndexError):
        g2[7]
    # bool and unsigned dtypes ride on GA integer types of their size
    bo = _dist(ref > 10)
    assert bo.dtype == np.bool_ and np.array_equal(bo.allget(), ref > 10) and bo.sum() == 13
    u = _dist(np.arange(30, dtype=np.uint32))
    _same(np.arange(30, dtype=np.uint32) * 3, (u * 3).allget(), "uint32")
    with pytest.raises(NotImplementedError, match="int16"):
        gain.ones(10, dtype=np.int16)
    # creation functions against NumPy
    for expr in ("m.zeros(9)", "m.ones((3, 5), np.int32)", "m.full((4, 4), 2.5)", "m.zeros_like(np.ones((3, 2)))",
                 "m.ones_like(np.ones((3, 2), np.float32))", "m.arange(1.5, 20.25, 0.7)",
                 "m.arange(3, 50, 4, dtype=np.float32)", "m.arange(-7, 33)", "m.arange(10, 0, -1.5)",
                 "m.linspace(-1, 1, 13)", "m.linspace(0, 1, 1)", "m.logspace(0, 2, 9)", "m.eye(6, 4, 1, int)",
                 "m.identity(5, np.complex128)", "m.indices((2, 3))", "m.diag(m.arange(5.0), 2)",
                 "m.diag(m.arange(5.0), -1)", "m.diag(m.arange(30).reshape(5, 6), 1)",
                 "m.diag(m.arange(30).reshape(5, 6), -2)", "m.diagonal(m.arange(12).reshape(3, 4), 1)",
                 "m.fromfunction(lambda i, j: i * 10 + j, (4, 6), dtype=int)", "m.shape(m.zeros((2, 7)))",
                 "m.fromfunction(lambda i, j: np.sin(i) + j, (5, 3))", "m.asarray([[1, 2], [3, 4]], np.float32)"):
        r_np, r_gain = _run(f"result = {expr}")
        _same(r_np, r_gain, expr)
    assert gain.alen((1, 2, 3)) == 3 and gain.alen(gain.zeros((4, 5, 6))) == 4
    e = gain.empty_like(ref)
    assert isinstance(e, gain.ndarray) and e.shape == ref.shape and e.dtype == ref.dtype
    # small arrays stay NumPy; the threshold rule is GA's
    assert gain.get_size_threshold() == 1 and not gain.should_distribute(()) and gain.should_distribute((1,))
    assert isinstance(gain.zeros(()), np.ndarray) and isinstance(gain.zeros(0), np.ndarray)
    gain.set_size_threshold(10)
    try:
        assert isinstance(gain.ones(9), np.ndarray) and isinstance(gain.ones(10), gain.ndarray)
        _same(np.arange(6.0) + 1, gain.arange(6.0) + 1, "below threshold")
    finally:
        gain.set_size_threshold(1)
    # random: blocks drawn per rank from seed + rank
    gain.random.seed(11)
    r = gain.random.random_sample((40, 3))
    v = r.allget()
    assert r.shape == (40, 3) and v.dtype == np.float64 and ((v >= 0) & (v < 1)).all() and len(np.unique(v)) == 120
    s = gain.random.random_sample()
    assert 0 <= s < 1 and len(set(gain.comm().allgather(s))) == 1
    # from_ga adopts a GA handle
    h = ga.create(ga.C_DBL, (6, 3))
    ga.zero(h)
    if me == 0:
        ga.put(h, np.arange(18.0).reshape(6, 3))
    ga.sync()
    w = gain.from_ga(h)
    _same(np.arange(18.0).reshape(6, 3).sum(axis=0), w.sum(axis=0).allget(), "from_ga")
    w.free()
    assert not ga.valid_handle(h)
    return 1


@pytest.mark.parametrize("n", NRANKS)
def test_conversion_creation_random(n):
    assert run_ranks(_conversion_creation_random, n, timeout=240) == [1] * n


def _freeing():
    import gc

    from gpumpi import ga
    from gpumpi.ga import gain
    with gain.ones((8, 8)) as a:
        h = a.handle
        assert ga.valid_handle(h)
    assert not ga.valid_handle(h)
    with pytest.raises(ValueError, match="freed"):
        a.sum()
    a.free()  # idempotent
    # a dropped array is destroyed at the next creation once every rank has dropped it
    b = gain.ones(50)
    hb = b.handle
    del b
    gc.collect()
    c = gain.zeros(5)
    assert not ga.valid_handle(hb)
    # dropped on some ranks only: kept until every rank has dropped it
    d = gain.ones(50)
    hd = d.handle
    keep = [d] if gain.me() == 0 else []
    del d
    e = gain.zeros(5)
    assert ga.valid_handle(hd)  # rank 0 still holds it
    keep.clear()
    f = gain.zeros(5)
    assert not ga.valid_handle(hd)
    for x in (c, e, f):
        x.free()
    return 1


@pytest.mark.parametrize("n", NRANKS)
def test_freeing(n):
    assert run_ranks(_freeing, n, timeout=120) == [1] * n


def _not_implemented():
    from gpumpi.ga import gain
    from gpumpi.ga.gain import notimplemented as ni
    a = gain.arange(12.0)
    for name in ni.NDARRAY_METHODS:
        with pytest.raises(NotImplementedError, match=rf"gain\.ndarray\.{name}: .*\(gpumpi\)"):
            getattr(a, name)()
    for name in ni.NDARRAY_PROPERTIES:
        with pytest.raises(NotImplementedError, match=rf"gain\.ndarray\.{name}: .*\(gpumpi\)"):
            getattr(a, name)
    for name in ni.MODULE_FUNCTIONS:
        with pytest.raises(NotImplementedError, match=rf"gain\.{name}: .*\(gpumpi\)"):
            getattr(gain, name)(a)
    for call in (lambda: gain.add.accumulate(a), lambda: gain.multiply.outer(a, a),
                 lambda: gain.add.reduceat(a, [0, 2]), lambda: gain.power.reduce(a),
                 lambda: setattr(a, "real", 1), lambda: gain.dot(gain.ones((3, 3), int), gain.ones((3, 3), int)),
                 lambda: gain.arange(24.0).reshape(2, 3, 4).diagonal(), lambda: gain.ndarray(5, order="F"),
                 lambda: gain.sin(a, where=a > 3)):
        with pytest.raises(NotImplementedError, match="gain"):
            call()
    # with NumPy operands the ufunc methods are NumPy's
    assert np.array_equal(gain.add.accumulate(np.arange(5)), np.add.accumulate(np.arange(5)))
    return 1


@pytest.mark.parametrize("n", [1, 3])
def test_not_implemented(n):
    assert run_ranks(_not_implemented, n, timeout=120) == [1] * n


def _shim():
    import importlib
    import pathlib
    import sys

    from gpumpi import ga
    from gpumpi.ga import gain
    sys.path.insert(0, str(pathlib.Path(ga.__file__).parents[1] / "_shim_ga4py"))
    mod = importlib.import_module("ga4py")
    assert mod.ga is ga and mod.gain is gain
    from ga4py import ga as ga2, gain as gain2  # noqa: I001
    assert ga2 is ga and gain2 is gain and importlib.import_module("ga4py.gain") is gain
    assert importlib.import_module("ga4py.ga") is ga
    return 1


def test_shim_maps_ga4py_names():
    assert run_ranks(_shim, 1, timeout=60) == [1]
