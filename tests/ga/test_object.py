"""gpumpi.ga.GlobalArray, the object face: NumPy basic indexing for get and put against a NumPy
model of the array, accumulate, the access context manager, read_inc, locality, and errors."""

import numpy as np
import pytest

from gpumpi.testing import device_windows_across_nodes, run_ranks

KEYS = [(), (slice(None),), (Ellipsis,), (2,), (-1,), (slice(1, 5),), (slice(None, None, 2),),
        (slice(1, 8, 3), slice(2, None)), (Ellipsis, 2), (1, Ellipsis, slice(0, 2)), (slice(3, 3),),
        (4, 5, 1), (slice(-3, None), -2, slice(None, None, 2))]


def _body(memory: str):
    from gpumpi import ga
    from gpumpi.ga import GlobalArray

    me, n = ga.nodeid(), ga.nnodes()
    host = (lambda x: x.get()) if memory == "device" else (lambda x: x)
    g = GlobalArray((7, 6, 3), ga.C_DBL, "obj", memory=memory, ghosts=(1, 0, 1))
    assert g.shape == (7, 6, 3) and g.dtype == np.float64 and g.ndim == 3 and g.memory == memory
    assert ga.inquire_name(g.handle) == "obj" and len(g) == 7 and g.size == 126
    model = np.arange(126.0).reshape(7, 6, 3)
    if me == 0:
        g[...] = model
    ga.sync()
    for key in KEYS:
        got = host(g[key])
        assert got.shape == model[key].shape and (got == model[key]).all(), key
    ga.sync()
    # puts by key: each rank one key in turn, values broadcast; the model follows
    for i, key in enumerate(KEYS):
        val = np.full(model[key].shape[-1:] if model[key].ndim else (), float(i))
        if i % n == me:
            g[key] = val
        model[key] = val
        ga.sync()
    assert (host(g[...]) == model).all()
    ga.sync()
    g.acc(np.ones(3), (slice(0, 2), 1), alpha=2)
    model[0:2, 1] += 2 * n
    g.acc(1.0, (slice(None, None, 3), slice(None), 0))
    model[::3, :, 0] += n
    ga.sync()
    assert (host(g[...]) == model).all()
    ga.sync()
    with g.access() as loc:
        lo, hi = g.distribution()
        if loc is not None:
            assert (host(loc) == model[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]).all()
            if memory == "host":
                loc += 1
        assert g.locate(lo) == (me if loc is not None else -1) or loc is None
    ga.sync()
    with g.access(readonly=True) as loc:
        if loc is not None and memory == "host":
            assert (loc == model[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] + 1).all()
    ga.sync()
    c = GlobalArray(5, ga.C_LONG, memory=memory)
    c[:] = 0
    ga.sync()
    olds = [c.read_inc((3,), 2) for _ in range(4)]
    ga.sync()
    assert int(host(c[3])) == 8 * n and all(o % 2 == 0 for o in olds)
    errs = 0
    for bad in [(7,), (0, 0, 0, 0), (slice(None, None, -1),), ("a",), (Ellipsis, Ellipsis)]:
        with pytest.raises(IndexError, match="GlobalArray"):
            g[bad]
        errs += 1
    with pytest.raises(TypeError, match="complex"):
        g[0, 0, 0] = 1j
    d = g.duplicate("copy")
    assert d.shape == g.shape and ga.compare_distr(d.handle, g.handle)
    ga.sync()
    d.destroy()
    with c:
        pass
    assert not ga.valid_handle(c.handle)
    g.destroy()
    with pytest.raises(ga.GAError):
        g[0]
    assert "destroyed" in repr(g)
    return errs


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_indexing_acc_access_on_host(n):
    assert run_ranks(_body, n, args=("host",), timeout=120) == [5] * n


@pytest.mark.parametrize("n", [2])
def test_indexing_acc_access_on_the_simulated_device(n):
    device_windows_across_nodes(n)
    assert run_ranks(_body, n, args=("device",), timeout=120, env={"GPUMPI_DEVICE": "sim"}) == [5] * n
