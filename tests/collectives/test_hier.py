"""Hierarchical schedules (gpumpi.collectives.hier): simulated against NumPy and string
concatenation (rank order), on every placement of ranks into nodes up to 7 ranks, and the
selection table's rows for communicators over several nodes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpumpi.collectives import hier, select
from gpumpi.collectives.schedule import RBUF, RECV, SBUF, SEND, simulate


def _canon(nodes):
    order = {x: i for i, x in enumerate(dict.fromkeys(nodes))}
    return tuple(order[x] for x in nodes)


def placements(size):
    """Every placement of ``size`` ranks into nodes up to 4 ranks, a sample above (canonical:
    nodes numbered in the order of their lowest ranks)."""
    if size <= 4:
        return sorted({_canon(p) for p in itertools.product(range(size), repeat=size)})
    rng = np.random.default_rng(size)
    out = {tuple([0] * size), tuple(r % 2 for r in range(size))}
    out |= {_canon([r * k // size for r in range(size)]) for k in range(2, size + 1)}
    out |= {_canon(rng.integers(0, 3, size).tolist()) for _ in range(6)}
    return sorted(out)


CASES = [(size, nodes) for size in range(1, 8) for nodes in placements(size)]


def _new(u):
    return np.full(u, np.nan)


@pytest.mark.parametrize("size, nodes", CASES)
def test_allreduce_reduce_bcast_match_numpy(size, nodes):
    for n in (0, 1, 7):
        data = [np.arange(n, dtype=float) * (r + 2) + r for r in range(size)]
        total = np.sum(data, axis=0) if n else np.zeros(0)
        for inplace in (False, True):
            sch = [select.build("allreduce", r, size, n=n, inplace=inplace, algorithm="hierarchical", nodes=nodes)
                   for r in range(size)]
            bufs = [{RBUF: data[r].copy()} if inplace else {SBUF: data[r].copy(), RBUF: _new(n)} for r in range(size)]
            out = simulate(sch, bufs, new=_new)
            for r in range(size):
                assert np.array_equal(out[r][RBUF], total), (nodes, n, inplace, r)
            for root in range(size):
                sch = [select.build("reduce", r, size, n=n, root=root, inplace=inplace and r == root,
                                    algorithm="hierarchical", nodes=nodes) for r in range(size)]
                bufs = [({RBUF: data[r].copy()} if inplace else {SBUF: data[r].copy(), RBUF: _new(n)}) if r == root
                        else {SBUF: data[r].copy()} for r in range(size)]  # a non-root has no RBUF to write
                out = simulate(sch, bufs, new=_new)
                assert np.array_equal(out[root][RBUF], total), (nodes, n, root, inplace)
                if not inplace:
                    sch = [select.build("bcast", r, size, n=n, root=root, algorithm="hierarchical", nodes=nodes)
                           for r in range(size)]
                    out = simulate(sch, [{RBUF: data[root].copy() if r == root else _new(n)} for r in range(size)],
                                   new=_new)
                    for r in range(size):
                        assert np.array_equal(out[r][RBUF], data[root]), (nodes, n, root, r)


@pytest.mark.parametrize("size, nodes", [c for c in CASES if hier.contiguous(c[1])])
def test_non_commutative_reductions_keep_rank_order_on_contiguous_nodes(size, nodes):
    def cat(a, b):
        return [x + y for x, y in zip(a, b)]

    want = ["".join(f"{r}." for r in range(size))] * 2
    data = [[f"{r}."] * 2 for r in range(size)]
    sch = [select.build("allreduce", r, size, n=2, commute=False, algorithm="hierarchical", nodes=nodes)
           for r in range(size)]
    out = simulate(sch, [{SBUF: list(data[r]), RBUF: [None] * 2} for r in range(size)], op=cat)
    assert all(out[r][RBUF] == want for r in range(size))
    for root in range(size):
        sch = [select.build("reduce", r, size, n=2, root=root, commute=False, algorithm="hierarchical", nodes=nodes)
               for r in range(size)]
        out = simulate(sch, [{SBUF: list(data[r]), RBUF: [None] * 2} for r in range(size)], op=cat)
        assert out[root][RBUF] == want


@pytest.mark.parametrize("size, nodes", CASES)
def test_barrier_and_the_traffic_between_nodes(size, nodes):
    """Every schedule completes (simulate checks matching and deadlock), and the messages that
    cross nodes go between leaders only: one per node and phase direction."""
    simulate([select.build("barrier", r, size, algorithm="hierarchical", nodes=nodes) for r in range(size)],
             [{RBUF: np.empty(0)} for _ in range(size)])
    for coll, kw in (("barrier", {}), ("allreduce", {"n": 4}), ("bcast", {"n": 4, "root": size - 1}),
                     ("reduce", {"n": 4, "root": size // 2})):
        root = kw.get("root", -1)
        _m, _i, leaders, _x = hier.layout(0, nodes, root)
        for r in range(size):
            s = select.build(coll, r, size, algorithm="hierarchical", nodes=nodes, **kw)
            for st in s.steps():
                if st[0] in (SEND, RECV) and nodes[st[1]] != nodes[r]:
                    assert r in leaders and st[1] in leaders, (coll, nodes, r, st)


def test_selection_table_picks_hierarchical_where_it_serves():
    two = (0, 0, 1, 1)
    for coll in ("barrier", "bcast", "reduce", "allreduce"):
        assert select.algorithm_of(coll, 4, n=1 << 20, unit=1, nodes=two) == "hierarchical"
        assert select.algorithm_of(coll, 4, n=1 << 20, unit=1) != "hierarchical"  # one node
        assert select.algorithm_of(coll, 4, n=1 << 20, nodes=(0, 1, 2, 3)) != "hierarchical"  # one rank a node
    # rank order: a non-commutative op on interleaved nodes stays flat, and forcing it fails
    assert select.algorithm_of("allreduce", 4, n=1 << 20, commute=False, nodes=two) == "hierarchical"
    assert select.algorithm_of("allreduce", 4, n=1 << 20, commute=False, nodes=(0, 1, 0, 1)) != "hierarchical"
    with pytest.raises(ValueError, match="contiguous"):
        select.build("reduce", 0, 4, n=8, commute=False, algorithm="hierarchical", nodes=(0, 1, 0, 1))
    with pytest.raises(ValueError, match="nodes must name the node of every rank"):
        select.algorithm_of("bcast", 4, n=8, nodes=(0, 1))
