"""Every algorithm of the selection table, forced with GPUMPI_COLL_ALGORITHM, run by the executor
on real ranks (the schedule tests prove them on the simulator; this proves the executor runs
them: temporaries, in-place, roots, non-commutative order, host and simulated device memory)."""

import numpy as np
import pytest

from gpumpi._config import parse_coll_algorithms
from gpumpi.collectives.select import ALGORITHMS
from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(300)

_DEPTH = max(len(v) for v in ALGORITHMS.values())


def _forced(i: int) -> str:
    """The ``i``-th algorithm of every collective (cycling through the shorter lists)."""
    return ",".join(f"{c}:{algs[i % len(algs)]}" for c, algs in ALGORITHMS.items())


def _matmul_op(MPI):
    def mm(a, b, dt):  # b = a @ b for 2x2 matrices: associative, not commutative
        A = np.frombuffer(a, "d").reshape(-1, 2, 2)
        B = np.frombuffer(b, "d").reshape(-1, 2, 2)
        B[...] = A @ B

    return MPI.Op.Create(mm, False)


def _mat(r: int, k: int = 0) -> np.ndarray:
    return np.array([[1.0, r + 1 + k], [0.0, 1.0]]) @ np.array([[1.0, 0.0], [r - k, 1.0]])


def _every_collective(device: bool):
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    dev = SimDeviceArray.from_numpy if device else (lambda a: a)
    host = (lambda a: np.asarray(a.get())) if device else (lambda a: a)
    for count in (0, 1, n + 1, 1000):
        x = np.arange(count, dtype="d") * (r + 1)
        total = sum(np.arange(count, dtype="d") * (p + 1) for p in range(n))
        # Allreduce, in place and not; Reduce at every root
        out = dev(np.full(count, -1.0))
        c.Allreduce(dev(x), out, MPI.SUM)
        assert np.array_equal(host(out), total), ("Allreduce", count)
        inp = dev(x.copy())
        c.Allreduce(MPI.IN_PLACE, inp, MPI.MAX)
        assert np.array_equal(host(inp), np.arange(count, dtype="d") * n if count else x), ("Allreduce max", count)
        for root in range(n):
            out = dev(np.full(count, -1.0))
            c.Reduce(dev(x), out if r == root else None, MPI.SUM, root)
            if r == root:
                assert np.array_equal(host(out), total), ("Reduce", count, root)
            buf = dev(x.copy() if r == root else np.zeros(count))
            c.Bcast(buf, root)
            assert np.array_equal(host(buf), np.arange(count, dtype="d") * (root + 1)), ("Bcast", count, root)
            # Gather / Scatter
            g = dev(np.full(count * n, -1.0)) if r == root else None
            c.Gather(dev(x), g, root)
            if r == root:
                exp = np.concatenate([np.arange(count, dtype="d") * (p + 1) for p in range(n)])
                assert np.array_equal(host(g), exp), ("Gather", count, root)
            s = dev(np.arange(count * n, dtype="d")) if r == root else None
            got = dev(np.full(count, -1.0))
            c.Scatter(s, got, root)
            assert np.array_equal(host(got), np.arange(r * count, (r + 1) * count, dtype="d")), ("Scatter", count)
        # Allgather (and in place), Alltoall (and in place)
        g = dev(np.full(count * n, -1.0))
        c.Allgather(dev(x), g)
        exp = np.concatenate([np.arange(count, dtype="d") * (p + 1) for p in range(n)])
        assert np.array_equal(host(g), exp), ("Allgather", count)
        g2 = np.full(count * n, -1.0)
        g2[r * count:(r + 1) * count] = x
        g2 = dev(g2)
        c.Allgather(MPI.IN_PLACE, g2)
        assert np.array_equal(host(g2), exp), ("Allgather in place", count)
        sa = np.arange(count * n, dtype="d") + 1000 * r
        ra = dev(np.full(count * n, -1.0))
        c.Alltoall(dev(sa), ra)
        exp = np.concatenate([np.arange(r * count, (r + 1) * count, dtype="d") + 1000 * p for p in range(n)])
        assert np.array_equal(host(ra), exp), ("Alltoall", count)
        ip = dev(sa.copy())
        c.Alltoall(MPI.IN_PLACE, ip)
        assert np.array_equal(host(ip), exp), ("Alltoall in place", count)
        # Reduce_scatter_block and Reduce_scatter with uneven counts
        big = np.arange(count * n, dtype="d") * (r + 1)
        rb = dev(np.full(count, -1.0))
        c.Reduce_scatter_block(dev(big), rb, MPI.SUM)
        assert np.array_equal(host(rb), np.arange(r * count, (r + 1) * count, dtype="d") * n * (n + 1) / 2)
        counts = [count + (p % 2) for p in range(n)]
        tot = sum(counts)
        big = np.arange(tot, dtype="d") * (r + 1)
        rb = dev(np.full(counts[r], -1.0))
        c.Reduce_scatter(dev(big), rb, counts, MPI.SUM)
        off = sum(counts[:r])
        assert np.array_equal(host(rb), np.arange(off, off + counts[r], dtype="d") * n * (n + 1) / 2)
        # Scan / Exscan
        sc = dev(np.full(count, -1.0))
        c.Scan(dev(x), sc, MPI.SUM)
        assert np.array_equal(host(sc), np.arange(count, dtype="d") * (r + 1) * (r + 2) / 2), ("Scan", count)
        ex = dev(np.full(count, -7.0))
        c.Exscan(dev(x), ex, MPI.SUM)
        want = np.full(count, -7.0) if r == 0 else np.arange(count, dtype="d") * r * (r + 1) / 2
        assert np.array_equal(host(ex), want), ("Exscan", count)
    c.Barrier()
    # non-commutative: rank order in every reduction (host memory: Python user ops run on the host)
    op = _matmul_op(MPI)
    M = MPI.DOUBLE.Create_contiguous(4).Commit()  # one 2x2 matrix: the op's element
    mine = np.stack([_mat(r, k) for k in range(3)])
    prod = [np.eye(2)] * 3
    for p in range(n):
        prod = [prod[k] @ _mat(p, k) for k in range(3)]
    want = np.stack(prod)
    out = np.zeros_like(mine)
    c.Allreduce([mine, M], [out, M], op)
    assert np.allclose(out, want), "Allreduce non-commutative"
    for root in range(n):
        out = np.zeros_like(mine)
        c.Reduce([mine, M], [out, M], op, root)
        if r == root:
            assert np.allclose(out, want), ("Reduce non-commutative", root)
    out = np.zeros_like(mine)
    c.Scan([mine, M], [out, M], op)
    pre = [np.eye(2)] * 3
    for p in range(r + 1):
        pre = [pre[k] @ _mat(p, k) for k in range(3)]
    assert np.allclose(out, np.stack(pre)), "Scan non-commutative"
    blocks = np.stack([_mat(r, k) for k in range(n)])
    rb = np.zeros((1, 2, 2))
    c.Reduce_scatter_block([blocks, M], [rb, M], op)
    pre = np.eye(2)
    for p in range(n):
        pre = pre @ _mat(p, r)
    assert np.allclose(rb[0], pre), "Reduce_scatter_block non-commutative"
    op.Free()
    M.Free()
    return "ok"


@pytest.mark.parametrize("n", [1, 3, 4, 5])
@pytest.mark.parametrize("i", range(_DEPTH))
def test_every_algorithm_through_the_executor(n, i):
    env = {"GPUMPI_COLL_ALGORITHM": _forced(i)}
    assert run_ranks(_every_collective, n, timeout=120, args=(False,), env=env) == ["ok"] * n


@pytest.mark.parametrize("i", range(_DEPTH))
def test_every_algorithm_on_simulated_device_memory(i):
    env = {"GPUMPI_COLL_ALGORITHM": _forced(i), "GPUMPI_DEVICE": "sim"}
    assert run_ranks(_every_collective, 3, timeout=120, args=(True,), env=env) == ["ok"] * 3


def test_parse_coll_algorithms():
    assert parse_coll_algorithms("") == ()
    assert parse_coll_algorithms(" allreduce:Ring ; bcast:binomial,") == (("allreduce", "ring"), ("bcast", "binomial"))
    with pytest.raises(ValueError, match="collective:algorithm"):
        parse_coll_algorithms("allreduce")
    with pytest.raises(ValueError, match="collective:algorithm"):
        parse_coll_algorithms("allreduce:")


def _unknown_algorithm():
    from gpumpi import MPI

    try:
        MPI.COMM_WORLD.Allreduce(np.ones(1), np.zeros(1))
    except ValueError as e:
        return str(e)
    return "no error"


def test_unknown_forced_algorithm_names_the_choices():
    got = run_ranks(_unknown_algorithm, 1, env={"GPUMPI_COLL_ALGORITHM": "allreduce:bogus"})
    assert "unknown algorithm" in got[0] and "rabenseifner" in got[0]
