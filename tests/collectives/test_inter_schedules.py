"""Intercommunicator schedules (pure): both groups simulated as one world, against NumPy."""

import itertools

import numpy as np
import pytest

from gpumpi.collectives import inter
from gpumpi.collectives.schedule import RBUF, SBUF, ScheduleError, simulate
from gpumpi.constants import PROC_NULL, ROOT

SIZES = [(1, 1), (1, 3), (3, 1), (2, 3), (4, 2), (3, 3)]


def run(build_a, build_b, bufs_a, bufs_b, op=None):
    a = [build_a(r) for r in range(len(bufs_a))]
    b = [build_b(r) for r in range(len(bufs_b))]
    out = simulate(inter.flatten(a, b), list(bufs_a) + list(bufs_b), op=op)
    return out[:len(bufs_a)], out[len(bufs_a):]


def arr(v):
    return np.array(v, dtype=float)


@pytest.mark.parametrize("la,lb", SIZES)
def test_barrier(la, lb):
    run(lambda r: inter.barrier(r, la, lb), lambda r: inter.barrier(r, lb, la),
        [{RBUF: arr([])}] * la, [{RBUF: arr([])}] * lb)


@pytest.mark.parametrize("la,lb", SIZES)
def test_barrier_waits_for_the_remote_group(la, lb):
    # a rank of A whose barrier is over must have heard from every rank of B (through chains)
    a = [inter.barrier(r, la, lb) for r in range(la)]
    b = [inter.barrier(r, lb, la) for r in range(lb)]
    for drop in range(lb):  # without one rank of B the barrier cannot complete
        bb = list(b)
        bb[drop] = inter.Schedule()
        with pytest.raises(ScheduleError):
            simulate(inter.flatten(a, bb), [{RBUF: arr([])}] * (la + lb))


@pytest.mark.parametrize("la,lb", SIZES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_bcast(la, lb, n):
    for root in range(la):
        data = arr(np.arange(n) + 10 * root)
        ba = [{RBUF: data.copy() if r == root else arr(np.full(n, -1))} for r in range(la)]
        bb = [{RBUF: arr(np.full(n, -1))} for _ in range(lb)]
        oa, ob = run(lambda r: inter.bcast(r, la, lb, root=ROOT if r == root else PROC_NULL, n=n),
                     lambda r: inter.bcast(r, lb, la, root=root, n=n), ba, bb)
        for x in ob:
            np.testing.assert_array_equal(x[RBUF], data)
        for r, x in enumerate(oa):
            np.testing.assert_array_equal(x[RBUF], data if r == root else np.full(n, -1))


@pytest.mark.parametrize("la,lb", SIZES)
@pytest.mark.parametrize("n", [0, 2])
def test_gather_scatter(la, lb, n):
    for root in range(la):
        roles = lambda r: ROOT if r == root else PROC_NULL  # noqa: E731
        sb = [{SBUF: arr(np.arange(n) + 100 * r)} for r in range(lb)]
        ra = [{RBUF: arr(np.full(lb * n, -1))} for _ in range(la)]
        oa, _ = run(lambda r: inter.gather(r, la, lb, root=roles(r), n=n),
                    lambda r: inter.gather(r, lb, la, root=root, n=n), ra, sb)
        np.testing.assert_array_equal(oa[root][RBUF], np.concatenate([x[SBUF] for x in sb]) if n else [])
        oa, _ = run(lambda r: inter.gatherv(r, la, lb, root=roles(r), counts=[n] * lb),
                    lambda r: inter.gatherv(r, lb, la, root=root, n=n), ra, sb)
        np.testing.assert_array_equal(oa[root][RBUF], np.concatenate([x[SBUF] for x in sb]) if n else [])
        src = arr(np.arange(lb * n))
        sa = [{SBUF: src.copy()} for _ in range(la)]
        rb = [{RBUF: arr(np.full(n, -1))} for _ in range(lb)]
        for fn, kw in ((inter.scatter, {"n": n}), (inter.scatterv, {"counts": [n] * lb})):
            _, ob = run(lambda r: fn(r, la, lb, root=roles(r), **kw),
                        lambda r: fn(r, lb, la, root=root, n=n), sa, rb)
            for j, x in enumerate(ob):
                np.testing.assert_array_equal(x[RBUF], src[j * n:(j + 1) * n])


@pytest.mark.parametrize("la,lb", SIZES)
def test_allgather_asymmetric(la, lb):
    na, nb = 2, 3  # A sends 2 units per rank, B sends 3
    sa = [{SBUF: arr([r, r + .5]), RBUF: arr(np.full(lb * nb, -1))} for r in range(la)]
    sb = [{SBUF: arr([10 * r, 10 * r + 1, 10 * r + 2]), RBUF: arr(np.full(la * na, -1))} for r in range(lb)]
    oa, ob = run(lambda r: inter.allgather(r, la, lb, n=na, rn=nb), lambda r: inter.allgather(r, lb, la, n=nb, rn=na),
                 sa, sb)
    for x in oa:
        np.testing.assert_array_equal(x[RBUF], np.concatenate([y[SBUF] for y in sb]))
    for x in ob:
        np.testing.assert_array_equal(x[RBUF], np.concatenate([y[SBUF] for y in sa]))
    ca = [r + 1 for r in range(la)]
    cb = [2 * r for r in range(lb)]
    sa = [{SBUF: arr(np.full(ca[r], r)), RBUF: arr(np.full(sum(cb), -1))} for r in range(la)]
    sb = [{SBUF: arr(np.full(cb[r], 10 + r)), RBUF: arr(np.full(sum(ca), -1))} for r in range(lb)]
    oa, ob = run(lambda r: inter.allgatherv(r, la, lb, n=ca[r], counts=cb),
                 lambda r: inter.allgatherv(r, lb, la, n=cb[r], counts=ca), sa, sb)
    for x in oa:
        np.testing.assert_array_equal(x[RBUF], np.concatenate([y[SBUF] for y in sb]))
    for x in ob:
        np.testing.assert_array_equal(x[RBUF], np.concatenate([y[SBUF] for y in sa]))


@pytest.mark.parametrize("la,lb", SIZES)
def test_alltoall(la, lb):
    na, nb = 1, 2
    # A's rank r sends block j (na units) to B's rank j: value 100 r + j
    sa = [{SBUF: arr(np.repeat([100 * r + j for j in range(lb)], na)), RBUF: arr(np.full(lb * nb, -1))}
          for r in range(la)]
    sb = [{SBUF: arr(np.repeat([1000 + 100 * r + j for j in range(la)], nb)), RBUF: arr(np.full(la * na, -1))}
          for r in range(lb)]
    oa, ob = run(lambda r: inter.alltoall(r, la, lb, n=na, rn=nb), lambda r: inter.alltoall(r, lb, la, n=nb, rn=na),
                 sa, sb)
    for r, x in enumerate(oa):
        np.testing.assert_array_equal(x[RBUF], np.repeat([1000 + 100 * j + r for j in range(lb)], nb))
    for r, x in enumerate(ob):
        np.testing.assert_array_equal(x[RBUF], np.repeat([100 * j + r for j in range(la)], na))


def _cat(a, b):  # string concatenation: associative, not commutative (rank order visible)
    return [x + y for x, y in zip(a, b)]


@pytest.mark.parametrize("la,lb", SIZES)
@pytest.mark.parametrize("commute", [True, False])
def test_reductions(la, lb, commute):
    n = 3
    if commute:
        xa = [arr(np.arange(n) + r + 1) for r in range(la)]
        xb = [arr(np.arange(n) * 2 + r + 1) for r in range(lb)]
        op, ref, fill = None, (lambda xs: sum(xs)), (lambda: arr(np.full(n, -1)))
    else:
        xa = [[f"a{r}.{i} " for i in range(n)] for r in range(la)]
        xb = [[f"b{r}.{i} " for i in range(n)] for r in range(lb)]
        op, fill = _cat, (lambda: ["?"] * n)

        def ref(xs):
            return ["".join(x[i] for x in xs) for i in range(n)]
    # allreduce: each group gets the other group's reduction
    sa = [{SBUF: x, RBUF: fill()} for x in xa]
    sb = [{SBUF: x, RBUF: fill()} for x in xb]
    oa, ob = run(lambda r: inter.allreduce(r, la, lb, n=n, commute=commute),
                 lambda r: inter.allreduce(r, lb, la, n=n, commute=commute), sa, sb, op)
    for x in oa:
        np.testing.assert_array_equal(x[RBUF], ref(xb))
    for x in ob:
        np.testing.assert_array_equal(x[RBUF], ref(xa))
    # reduce to each root of A
    for root in range(la):
        oa, _ = run(lambda r: inter.reduce(r, la, lb, root=ROOT if r == root else PROC_NULL, n=n, commute=commute),
                    lambda r: inter.reduce(r, lb, la, root=root, n=n, commute=commute),
                    [{RBUF: fill()} for _ in range(la)], [{SBUF: x} for x in xb], op)
        np.testing.assert_array_equal(oa[root][RBUF], ref(xb))


@pytest.mark.parametrize("la,lb", [(1, 1), (2, 2), (3, 3), (2, 4), (4, 2)])
def test_reduce_scatter(la, lb):
    # MPI: |A| * recvcount_A == |B| * recvcount_B for the block form
    tot = 12
    ca, cb = [tot // la] * la, [tot // lb] * lb
    xa = [arr(np.arange(tot) + r) for r in range(la)]
    xb = [arr(np.arange(tot) * 3 + r) for r in range(lb)]
    sa = [{SBUF: x, RBUF: arr(np.full(ca[0], -1))} for x in xa]
    sb = [{SBUF: x, RBUF: arr(np.full(cb[0], -1))} for x in xb]
    oa, ob = run(lambda r: inter.reduce_scatter_block(r, la, lb, n=ca[0]),
                 lambda r: inter.reduce_scatter_block(r, lb, la, n=cb[0]), sa, sb)
    for r, x in enumerate(oa):
        np.testing.assert_array_equal(x[RBUF], sum(xb)[r * ca[0]:(r + 1) * ca[0]])
    for r, x in enumerate(ob):
        np.testing.assert_array_equal(x[RBUF], sum(xa)[r * cb[0]:(r + 1) * cb[0]])
    # uneven counts
    ca = [tot - 2 * (la - 1)] + [2] * (la - 1)
    sa = [{SBUF: x, RBUF: arr(np.full(ca[r], -1))} for r, x in enumerate(xa)]
    oa, ob = run(lambda r: inter.reduce_scatter(r, la, lb, counts=ca, n=tot),
                 lambda r: inter.reduce_scatter(r, lb, la, counts=cb, n=tot), sa, sb)
    offs = list(itertools.accumulate([0] + ca))
    for r, x in enumerate(oa):
        np.testing.assert_array_equal(x[RBUF], sum(xb)[offs[r]:offs[r + 1]])
    for r, x in enumerate(ob):
        np.testing.assert_array_equal(x[RBUF], sum(xa)[r * cb[0]:(r + 1) * cb[0]])


def test_bad_root():
    with pytest.raises(ValueError, match="root outside the remote group"):
        inter.bcast(0, 2, 3, root=3, n=1)
    with pytest.raises(ValueError, match="root outside"):
        inter.reduce(0, 2, 3, root=-2, n=1)


def test_local_peers_are_negative():
    s = inter.allreduce(1, 3, 2, n=4)
    peers = {st[1] for st in s.steps() if st[0] in ("s", "r")}
    assert peers and all(p < 0 for p in peers)  # a non-leader talks only to its own group
    s = inter.allreduce(0, 3, 2, n=4)
    assert 0 in {st[1] for st in s.steps() if st[0] in ("s", "r")}
