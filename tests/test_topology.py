"""Pure topology math (gpumpi.topology, collectives.neighbor) against naive references.

References: MPI_Dims_create by brute force over every factorisation (plus MPICH's own
results for a table of cases), Cartesian coordinates by enumerating the grid with
``itertools.product`` (row-major), shifts and neighbors by NumPy-free modular
arithmetic on coordinates, dist-graph adjacency by listing every edge, and neighbor
schedules by the schedule simulator on a whole topology.
"""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumpi import topology as T
from gpumpi.collectives import neighbor as NB
from gpumpi.collectives.schedule import RBUF, SBUF, ScheduleError, simulate
from gpumpi.constants import PROC_NULL, UNDEFINED
from gpumpi.errors import ERR_ARG, ERR_DIMS, ERR_RANK, ERR_TOPOLOGY
from gpumpi.errors import Exception as MPIException


def _cls(excinfo):
    return excinfo.value.Get_error_class()


# --- MPI_Dims_create ----------------------------------------------------------------------------------

def _factorisations(m, k, hi=None):
    hi = m if hi is None else hi
    if k == 1:
        return [(m,)] if m <= hi else []
    out = []
    for d in range(1, min(m, hi) + 1):
        if m % d == 0:
            out += [(d,) + rest for rest in _factorisations(m // d, k - 1, d)]
    return out


def _naive_dims(m, k):
    # most balanced (max - min), then the largest smallest factor, then the next smallest ...
    return list(min(_factorisations(m, k), key=lambda t: (t[0] - t[-1], [-x for x in t[::-1]])))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_dims_against_brute_force(k):
    for m in range(1, 200):
        got = T.compute_dims(m, [0] * k)
        assert got == _naive_dims(m, k), (m, k)
        assert got == sorted(got, reverse=True)


# MPICH 5.0.2 (mpi4py 4.1.2 MPI.Compute_dims), including the ties that decide the tie-break
MPICH_DIMS = {
    (12, 2): [4, 3], (20, 4): [5, 2, 2, 1], (28, 4): [7, 2, 2, 1], (360, 3): [10, 6, 6],
    (5040, 5): [7, 6, 6, 5, 4], (9699690, 4): [77, 65, 51, 38], (196608, 7): [8, 8, 8, 6, 4, 4, 4],
    (720720, 8): [13, 11, 7, 5, 4, 4, 3, 3], (735134400, 6): [34, 33, 30, 30, 28, 26],
    (2000000014, 4): [1000000007, 2, 1, 1], (2 ** 30, 20): [4] * 10 + [2] * 10,
}


@pytest.mark.parametrize("nk", sorted(MPICH_DIMS))
def test_dims_mpich(nk):
    n, k = nk
    assert T.compute_dims(n, [0] * k) == MPICH_DIMS[nk]


def test_dims_fixed_entries_and_errors():
    assert T.compute_dims(12, [0, 1, 0]) == [4, 1, 3]
    assert T.compute_dims(6, [0, 3]) == [2, 3]
    assert T.compute_dims(8, [2, 2]) == [2, 2]  # a multiple is enough when nothing is free (MPICH)
    assert T.compute_dims(0, []) == [] and T.compute_dims(5, []) == []
    for args, cls in [((-1, [0]), ERR_ARG), ((4, [-1, 0]), ERR_DIMS), ((5, [2, 0]), ERR_DIMS),
                      ((6, [2, 2]), ERR_DIMS), ((0, [0, 0]), ERR_DIMS)]:
        with pytest.raises(MPIException) as e:
            T.compute_dims(*args)
        assert _cls(e) == cls, args


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=1, max_size=5))
def test_dims_properties(n, dims):
    fixed = 1
    for d in dims:
        fixed *= d or 1
    if n % fixed:
        with pytest.raises(MPIException):
            T.compute_dims(n, dims)
        return
    got = T.compute_dims(n, dims)
    assert [g for g, d in zip(got, dims) if d] == [d for d in dims if d]
    free = [g for g, d in zip(got, dims) if not d]
    assert free == sorted(free, reverse=True)
    if free:
        assert T.cart_size(got) == n
        assert free == _naive_dims(n // fixed, len(free))


# --- Cartesian ----------------------------------------------------------------------------------------

GRIDS = [[], [1], [4], [2, 3], [3, 1, 2], [2, 2, 2], [1, 1]]


@pytest.mark.parametrize("dims", GRIDS)
def test_cart_coords_rank_row_major(dims):
    grid = list(itertools.product(*[range(d) for d in dims]))  # row-major order
    for r, c in enumerate(grid):
        assert T.cart_coords(dims, r) == list(c)
        for periods in itertools.product([0, 1], repeat=len(dims)):
            assert T.cart_rank(dims, periods, c) == r
    assert T.cart_size(dims) == len(grid)


@pytest.mark.parametrize("dims", [d for d in GRIDS if d])
def test_cart_rank_wraps_or_proc_null(dims):
    for periods in itertools.product([0, 1], repeat=len(dims)):
        for c in itertools.product(*[range(-d - 1, 2 * d + 1) for d in dims]):
            inside = all(0 <= x < d for x, d in zip(c, dims))
            if not inside and not all(p for p, x, d in zip(periods, c, dims) if not 0 <= x < d):
                assert T.cart_rank(dims, periods, c) == PROC_NULL
            else:
                wrapped = [x % d for x, d in zip(c, dims)]
                assert T.cart_rank(dims, periods, c) == T.cart_rank(dims, periods, wrapped)


@pytest.mark.parametrize("dims", [d for d in GRIDS if d])
def test_cart_shift_and_neighbors(dims):
    for periods in itertools.product([0, 1], repeat=len(dims)):
        for r in range(T.cart_size(dims)):
            c = T.cart_coords(dims, r)
            nb = []
            for i, d in enumerate(dims):
                for disp in (-2, -1, 0, 1, 3):
                    def at(x):
                        if 0 <= x < d or periods[i]:
                            cc = list(c)
                            cc[i] = x % d
                            return T.cart_rank(dims, periods, cc)
                        return PROC_NULL
                    want = (r, r) if disp == 0 else (at(c[i] - disp), at(c[i] + disp))
                    assert T.cart_shift(dims, periods, c, i, disp, r) == want
                nb += [at(c[i] - 1), at(c[i] + 1)]
            assert T.cart_neighbors(dims, periods, c) == nb
            assert T.Cart(dims, periods, r).neighbors() == (nb, nb, T.cart_recv_order(len(dims)))


def test_cart_sub_groups_rows_and_columns():
    dims, periods = [2, 3], [1, 0]
    rows = {}
    for r in range(6):
        c = T.cart_coords(dims, r)
        color, key, sd, sp = T.cart_sub(dims, periods, c, [0, 1])
        assert (sd, sp) == ([3], [0]) and key == c[1]
        rows.setdefault(color, []).append(r)
    assert sorted(rows.values()) == [[0, 1, 2], [3, 4, 5]]
    color, key, sd, sp = T.cart_sub(dims, periods, [1, 2], [0, 0])
    assert (sd, sp, key) == ([], [], 0)


def test_cart_checks():
    assert T.cart_check([2, 2], 5, "c") == 4
    with pytest.raises(MPIException) as e:
        T.cart_check([2, 3], 5, "c")
    assert _cls(e) == ERR_ARG  # MPICH: the grid does not fit is ERR_ARG for MPI_Cart_create
    with pytest.raises(MPIException) as e:
        T.cart_check([-1], 5, "c")
    assert _cls(e) == ERR_DIMS
    with pytest.raises(MPIException) as e:
        T.cart_map([2, 3], 5, 0)
    assert _cls(e) == ERR_DIMS  # ... and ERR_DIMS for MPI_Cart_map
    assert [T.cart_map([2, 2], 6, r) for r in range(6)] == [0, 1, 2, 3, UNDEFINED, UNDEFINED]
    assert T.cart_map([], 3, 0) == 0 and T.cart_map([], 3, 1) == UNDEFINED


# --- graphs --------------------------------------------------------------------------------------------

def test_graph_neighbors_and_checks():
    index, edges = [2, 3, 3, 5], [1, 3, 0, 0, 0]
    assert T.graph_nodes(index, edges, 4, "g") == 4
    assert [T.graph_neighbors(index, edges, r) for r in range(4)] == [[1, 3], [0], [], [0, 0]]
    assert T.Graph(index, edges, 3).neighbors() == ([0, 0], [0, 0], [0, 1])
    for idx, edg, size in [([1, 2], [0, 0], 1), ([2, 1], [0, 0], 2), ([-1], [], 1), ([1], [1], 1),
                           ([1], [-1], 1), ([2], [0], 1)]:
        with pytest.raises(MPIException) as e:
            T.graph_nodes(idx, edg, size, "g")
        assert _cls(e) == ERR_ARG, (idx, edg)
    assert [T.graph_map([1, 2], [1, 0], 3, r) for r in range(3)] == [0, 1, UNDEFINED]


def test_dist_graph_adjacency_lists_every_edge():
    # rank p names edges (p -> p+1) and (p -> p) with weight 10p+k; rank 0 also names 2 -> 0
    size = 3
    specs = []
    for p in range(size):
        srcs, degs, dsts, ws = [p], [2], [(p + 1) % size, p], [10 * p, 10 * p + 1]
        if p == 0:
            srcs, degs, dsts, ws = srcs + [2], degs + [1], dsts + [0], ws + [99]
        specs.append((srcs, degs, dsts, ws))
    edges = []  # (naming process, position, source, dest, weight)
    for p, (srcs, degs, dsts, ws) in enumerate(specs):
        k = 0
        for s, d in zip(srcs, degs):
            for _ in range(d):
                edges.append((s, dsts[k], ws[k]))
                k += 1
    for me in range(size):
        ins, inw, outs, outw = T.dist_graph_adjacency(specs, me)
        assert list(zip(ins, inw)) == [(s, w) for s, d, w in edges if d == me]
        assert list(zip(outs, outw)) == [(d, w) for s, d, w in edges if s == me]


def test_dist_graph_checks():
    with pytest.raises(MPIException) as e:
        T.dist_graph_check([0], [1], [3], None, 2, "d")
    assert _cls(e) == ERR_RANK
    with pytest.raises(MPIException) as e:
        T.dist_graph_check([0], [1], [1], [-1], 2, "d")
    assert _cls(e) == ERR_ARG
    assert T.adjacent_check([PROC_NULL], [1], None, None, 2, "a") is False
    assert T.adjacent_check([], [], [], None, 2, "a") is True  # WEIGHTS_EMPTY on the source side
    with pytest.raises(MPIException) as e:
        T.adjacent_check([0], [0], [3], None, 2, "a")
    assert _cls(e) == ERR_TOPOLOGY
    with pytest.raises(MPIException) as e:
        T.adjacent_check([2], [0], None, None, 2, "a")
    assert _cls(e) == ERR_RANK


# --- neighbor schedules, simulated on whole topologies --------------------------------------------------

def _simulate_alltoall(lists, n=2):
    """Neighbor alltoall on every rank: lists[r] = (sources, destinations, recv_order); send
    block j of rank r holds (r, j); returns each rank's receive blocks."""
    size = len(lists)
    scheds, bufs = [], []
    for r, (srcs, dsts, order) in enumerate(lists):
        scheds.append(NB.exchange(r, srcs, dsts, NB.uniform_blocks(len(dsts), n), NB.uniform_blocks(len(srcs), n),
                                  order))
        sb = [x for j in range(len(dsts)) for x in [(r, j)] * n]
        bufs.append({SBUF: sb, RBUF: [None] * (n * len(srcs))})
    out = simulate(scheds, bufs)
    return [[out[r][RBUF][i * n] for i in range(len(lists[r][0]))] for r in range(size)]


@pytest.mark.parametrize("dims", [[1], [2], [3], [2, 2], [1, 2], [3, 2], [2, 1, 2]])
@pytest.mark.parametrize("periodic", [0, 1])
def test_cart_alltoall_halo_rule(dims, periodic):
    """MPI-4.1: receive block 2d (the -1 side) holds what the -1 neighbor sent to its +1 side
    (its block 2d+1), block 2d+1 what the +1 neighbor sent to its -1 side (block 2d)."""
    periods = [periodic] * len(dims)
    size = T.cart_size(dims)
    recs = [T.Cart(dims, periods, r) for r in range(size)]
    got = _simulate_alltoall([rec.neighbors() for rec in recs])
    for r, rec in enumerate(recs):
        nb = rec.neighbors()[0]
        want = []
        for d in range(len(dims)):
            lo, hi = nb[2 * d], nb[2 * d + 1]
            want += [None if lo == PROC_NULL else (lo, 2 * d + 1), None if hi == PROC_NULL else (hi, 2 * d)]
        assert got[r] == want, (r, got[r], want)


def test_graph_alltoall_duplicates_in_order():
    # rank 0 <-> rank 1 twice, rank 0 -> itself twice; receives in block order
    index, edges = [4, 6], [1, 0, 1, 0, 0, 0]
    recs = [T.Graph(index, edges, r) for r in range(2)]
    got = _simulate_alltoall([rec.neighbors() for rec in recs])
    # rank 0's neighbors [1, 0, 1, 0]: its k-th send to a peer meets the peer's k-th receive from it
    assert got[0] == [(1, 0), (0, 1), (1, 1), (0, 3)]
    assert got[1] == [(0, 0), (0, 2)]


def test_exchange_proc_null_and_self_mismatch():
    s = NB.exchange(0, [PROC_NULL, 0], [0, PROC_NULL], [(0, 2), (2, 4)], [(0, 2), (2, 4)])
    assert s.rounds == [(("cp", SBUF, 0, RBUF, 2, 2),)]
    assert NB.self_pairs(1, [1, 0, 1], [1, 1], [2, 1, 0]) == [(0, 2), (1, 0)]
    with pytest.raises(ValueError):
        NB.self_pairs(0, [0], [], None)
    with pytest.raises(ValueError):
        NB.exchange(0, [1], [1], [(0, 1)], [], None)
    # a mismatched pair of peers is a schedule the simulator refuses
    with pytest.raises(ScheduleError):
        simulate([NB.exchange(0, [1], [1], [(0, 1)], [(0, 2)]), NB.exchange(1, [0], [0], [(0, 1)], [(0, 1)])],
                 [{SBUF: [1], RBUF: [0, 0]}, {SBUF: [2], RBUF: [0]}])
