"""Lowercase (object) collectives at 1-5 ranks: bcast, gather, scatter, allgather, alltoall,
reduce, allreduce, scan, exscan.

Python objects (expectations computed on every rank from the other ranks' inputs), ops as
``Op`` and as plain callables (string concatenation: rank order must hold), NumPy arrays
(the array fast path must equal NumPy), simulated device arrays (the result stays a
device array), results are copies as in mpi4py, and an invalid root raises ERR_ROOT.
"""

import operator

import numpy as np
import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(120)

NS = [1, 2, 3, 4, 5]


def obj(p, it=0):
    return {"rank": p, "it": it, "data": list(range(p % 3)), "s": "x" * p}


def _objects():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for root in range(n):
        mine = obj(r, root)
        got = c.bcast(mine if r == root else None, root)
        assert got == obj(root, root), (root, got)
        if r == root:
            assert got is not mine  # a copy, as in mpi4py
        got = c.gather(mine, root)
        assert got == ([obj(p, root) for p in range(n)] if r == root else None), (root, got)
        if r == root:
            assert got[r] is not mine
        items = [("to", p, root) for p in range(n)]
        got = c.scatter(items if r == root else None, root)
        assert got == ("to", r, root), (root, got)
        for op, f in ((MPI.SUM, operator.add), (MPI.PROD, operator.mul), (MPI.MAX, max), (MPI.MIN, min)):
            got = c.reduce(r + 2, op, root)
            acc = 2
            for p in range(1, n):
                acc = f(acc, p + 2)
            want = acc
            assert got == (want if r == root else None), (op, root, got)
        # non-commutative plain callable: concatenation in rank order
        got = c.reduce(str(r), lambda a, b: a + b, root)
        assert got == ("".join(map(str, range(n))) if r == root else None), (root, got)
    assert c.allgather(obj(r)) == [obj(p) for p in range(n)]
    assert c.alltoall([(r, p) for p in range(n)]) == [(p, r) for p in range(n)]
    cat = lambda a, b: a + b  # noqa: E731
    assert c.allreduce(str(r), cat) == "".join(map(str, range(n)))
    assert c.allreduce([r], cat) == list(range(n))
    assert c.allreduce(r + 1, MPI.SUM) == n * (n + 1) // 2
    assert c.allreduce(r + 1) == n * (n + 1) // 2  # default op SUM
    best = max(p % 3 for p in range(n))
    assert c.allreduce((r % 3, r), MPI.MAXLOC) == (best, min(p for p in range(n) if p % 3 == best))
    got = c.allreduce((r % 2, r), MPI.MINLOC)
    assert got == (0, 0), got  # ties: the lower index
    got = c.allreduce((r % 2, r), MPI.MAXLOC)
    assert got == ((1, 1) if n > 1 else (0, 0)), got
    assert c.scan(str(r), cat) == "".join(map(str, range(r + 1)))
    assert c.scan(r + 1, MPI.SUM) == (r + 1) * (r + 2) // 2
    assert c.scan([r], cat) == list(range(r + 1))
    got = c.exscan(str(r), cat)
    assert got == (None if r == 0 else "".join(map(str, range(r)))), got
    got = c.exscan(r + 1, MPI.PROD)
    want = 1
    for p in range(1, r + 1):
        want *= p
    assert got == (None if r == 0 else want), got
    # a user Op (non-commutative) works in the lowercase calls too
    op = MPI.Op.Create(lambda a, b, dt=None: a + b, commute=False)
    assert c.allreduce(str(r), op) == "".join(map(str, range(n)))
    assert c.scan(str(r), op) == "".join(map(str, range(r + 1)))
    op.Free()
    # bcast's result is a copy on every rank (mutating it changes nobody else's)
    b = c.bcast([0] * n if r == 0 else None, 0)
    b[r] = 1
    assert c.allgather(b) == [[int(p == q) for p in range(n)] for q in range(n)]
    return True


@pytest.mark.parametrize("n", NS)
def test_object_collectives_every_root_in_rank_order(n):
    assert run_ranks(_objects, n, timeout=60) == [True] * n


def _arrays():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    g = [np.random.default_rng([p, 1]) for p in range(n)]
    for dt in ("f8", "i4", "c16", "?"):
        every = [(g[p].integers(-3, 4, (3, 5)) if dt != "?" else g[p].integers(0, 2, (3, 5))).astype(dt)
                 for p in range(n)]
        orig = every[r].copy()
        ops = [("SUM", np.add), ("PROD", np.multiply)] if dt != "?" else []
        if dt in ("f8", "i4"):
            ops += [("MAX", np.maximum), ("MIN", np.minimum)]
        if dt == "i4":
            ops += [("BAND", np.bitwise_and), ("BOR", np.bitwise_or), ("BXOR", np.bitwise_xor)]
        if dt in ("i4", "?"):
            ops += [("LAND", np.logical_and), ("LOR", np.logical_or), ("LXOR", np.logical_xor)]
        for name, f in ops:
            tot = every[0].copy()
            pre = [tot.copy()]
            for e in every[1:]:
                tot = f(tot, e).astype(dt)
                pre.append(tot.copy())
            op = getattr(MPI, name)
            for root in range(n):
                got = c.reduce(every[r], op, root)
                if r == root:
                    assert type(got) is np.ndarray and got.dtype == tot.dtype and got.shape == tot.shape, got
                    assert np.array_equal(got, tot), (dt, name, root, got, tot)
                    assert got is not every[r]
                else:
                    assert got is None
            got = c.allreduce(every[r], op)
            assert got.dtype == tot.dtype and np.array_equal(got, tot), (dt, name, got, tot)
            got = c.scan(every[r], op)
            assert got.dtype == tot.dtype and np.array_equal(got, pre[r]), (dt, name, "scan")
            got = c.exscan(every[r], op)
            if r:
                assert got.dtype == tot.dtype and np.array_equal(got, pre[r - 1]), (dt, name, "exscan")
            else:
                assert got is None
        # the reductions left the input alone
        assert np.array_equal(every[r], orig), dt
    # arrays travel through the data movement calls as values
    a = np.arange(6.0).reshape(2, 3) + r
    got = c.allgather(a)
    assert all(np.array_equal(got[p], np.arange(6.0).reshape(2, 3) + p) for p in range(n))
    got = c.bcast(a, n - 1)
    assert np.array_equal(got, np.arange(6.0).reshape(2, 3) + n - 1)
    if r == n - 1:
        assert got is not a
    # non-contiguous and differently shaped operands: op(x, y) decides, as in mpi4py
    x = np.arange(10.0)[::2] + r
    assert np.array_equal(c.allreduce(x, MPI.SUM), sum(np.arange(10.0)[::2] + p for p in range(n)))
    return True


@pytest.mark.parametrize("n", NS)
def test_numpy_arrays_take_the_fast_path_and_equal_numpy(n):
    assert run_ranks(_arrays, n, timeout=60) == [True] * n


def _device_arrays():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    every = [np.arange(12.0).reshape(3, 4) * (p + 1) - p for p in range(n)]
    d = SimDeviceArray.from_numpy(every[r])
    for name, f in (("SUM", np.add), ("MAX", np.maximum), ("PROD", np.multiply)):
        op = getattr(MPI, name)
        tot = every[0].copy()
        pre = [tot.copy()]
        for e in every[1:]:
            tot = f(tot, e)
            pre.append(tot.copy())
        for root in range(n):
            got = c.reduce(d, op, root)
            if r == root:
                assert isinstance(got, SimDeviceArray), type(got)
                assert got.shape == (3, 4) and got.dtype == np.float64
                assert np.array_equal(got.get(), tot), (name, root)
            else:
                assert got is None
        got = c.allreduce(d, op)
        assert isinstance(got, SimDeviceArray) and np.array_equal(got.get(), tot), name
        got = c.scan(d, op)
        assert isinstance(got, SimDeviceArray) and np.array_equal(got.get(), pre[r]), name
        got = c.exscan(d, op)
        if r:
            assert isinstance(got, SimDeviceArray) and np.array_equal(got.get(), pre[r - 1]), name
    assert np.array_equal(d.get(), every[r])  # the input is unchanged
    got = c.bcast(d if r == 0 else None, 0)
    assert isinstance(got, SimDeviceArray) and np.array_equal(got.get(), every[0])
    if r == 0:
        assert got.ptr != d.ptr  # a copy on the root too
    got = c.allgather(d)
    assert all(isinstance(x, SimDeviceArray) for x in got)
    assert all(np.array_equal(got[p].get(), every[p]) for p in range(n))
    got = c.alltoall([SimDeviceArray.from_numpy(np.full(2, 10.0 * r + p)) for p in range(n)])
    assert all(np.array_equal(got[p].get(), np.full(2, 10.0 * p + r)) for p in range(n))
    got = c.gather(d, n - 1)
    if r == n - 1:
        assert all(np.array_equal(got[p].get(), every[p]) for p in range(n))
    got = c.scatter([SimDeviceArray.from_numpy(every[p]) for p in range(n)] if r == 0 else None, 0)
    assert isinstance(got, SimDeviceArray) and np.array_equal(got.get(), every[r])
    return True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_device_arrays_stay_device_arrays(n):
    assert run_ranks(_device_arrays, n, timeout=60) == [True] * n


def _bad_root():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    calls = {
        "bcast": lambda root: c.bcast(1, root),
        "gather": lambda root: c.gather(1, root),
        "scatter": lambda root: c.scatter([1] * n, root),
        "reduce": lambda root: c.reduce(1, MPI.SUM, root),
    }
    for name, f in calls.items():
        for root in (-1, n, n + 7):
            with pytest.raises(MPI.Exception) as info:
                f(root)
            assert info.value.Get_error_class() == MPI.ERR_ROOT, (name, root)
            assert str(info.value).startswith(name), (name, str(info.value))
    # nobody is left behind: the next collective lines up
    assert c.allgather(c.rank) == list(range(n))
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_object_collectives_root_out_of_range_is_err_root(n):
    assert run_ranks(_bad_root, n, timeout=60) == [True] * n
