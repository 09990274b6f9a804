"""Topology communicators and neighbor collectives at 1-5 ranks, against NumPy.

The halo exchange: a periodic 2-D grid of processes, each owning one tile of a global
array; Neighbor_alltoall sends each tile's edge rows/columns to the four neighbors and
Neighbor_allgather their corner values, and the received halos must equal what
``numpy.roll`` of the global array puts next to the tile.  Host and simulated device
buffers, blocking, nonblocking and persistent.  Bad input raises the error classes
MPICH raises.
"""

import numpy as np
import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(120)

TILE = (3, 4)  # rows, columns of each process's tile


def _global(dims):
    rows, cols = dims[0] * TILE[0], dims[1] * TILE[1]
    return np.arange(rows * cols, dtype="f8").reshape(rows, cols) * 1.5


def _mk(kind, a):
    from gpumpi.testing import SimDeviceArray

    return SimDeviceArray.from_numpy(np.ascontiguousarray(a)) if kind == "sim" else np.array(a)


def _get(a):
    return a if isinstance(a, np.ndarray) else a.get()


def _halo(kind, form):
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    dims = MPI.Compute_dims(w.size, 2)
    cart = w.Create_cart(dims, periods=[True, True])
    g = _global(dims)
    r0, c0 = (x * t for x, t in zip(cart.coords, TILE))
    tile = g[r0:r0 + TILE[0], c0:c0 + TILE[1]]
    # the neighbor order: dim 0 -1 (north), dim 0 +1 (south), dim 1 -1 (west), dim 1 +1 (east).
    # Blocks padded to the longer edge so that every block has the same size.
    m = max(TILE)
    send = np.zeros((4, m))
    send[0, :TILE[1]] = tile[0]       # to the north: my top row
    send[1, :TILE[1]] = tile[-1]      # to the south: my bottom row
    send[2, :TILE[0]] = tile[:, 0]    # to the west: my left column
    send[3, :TILE[0]] = tile[:, -1]   # to the east: my right column
    sbuf, rbuf = _mk(kind, send), _mk(kind, np.full((4, m), -1.0))
    if form == "blocking":
        cart.Neighbor_alltoall(sbuf, rbuf)
    elif form == "nonblocking":
        cart.Ineighbor_alltoall(sbuf, rbuf).Wait()
    else:
        p = cart.Neighbor_alltoall_init(sbuf, rbuf)
        for _ in range(2):
            p.Start()
            p.Wait()
        p.Free()
    got = _get(rbuf)
    # numpy.roll: the row above my tile is row r0-1 of the global array (periodic), ...
    north = np.roll(g, 1, axis=0)[r0, c0:c0 + TILE[1]]
    south = np.roll(g, -1, axis=0)[r0 + TILE[0] - 1, c0:c0 + TILE[1]]
    west = np.roll(g, 1, axis=1)[r0:r0 + TILE[0], c0]
    east = np.roll(g, -1, axis=1)[r0:r0 + TILE[0], c0 + TILE[1] - 1]
    assert np.array_equal(got[0, :TILE[1]], north), (cart.coords, got[0], north)
    assert np.array_equal(got[1, :TILE[1]], south), (cart.coords, got[1], south)
    assert np.array_equal(got[2, :TILE[0]], west), (cart.coords, got[2], west)
    assert np.array_equal(got[3, :TILE[0]], east), (cart.coords, got[3], east)
    # Neighbor_allgather: every neighbor's top-left value
    corner = _mk(kind, tile[:1, :1].reshape(1))
    allg = _mk(kind, np.full(4, -1.0))
    cart.Neighbor_allgather(corner, allg)
    want = []
    for d, (sh, ax) in enumerate([(1, 0), (-1, 0), (1, 1), (-1, 1)]):
        want.append(np.roll(g, sh * TILE[ax], axis=ax)[r0, c0])
    assert np.array_equal(_get(allg), np.array(want)), (cart.coords, _get(allg), want)
    cart.Free()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("kind", ["host", "sim"])
def test_halo_exchange_matches_numpy_roll(n, kind):
    for form in ("blocking", "nonblocking", "persistent"):
        run_ranks(_halo, n, timeout=90, args=(kind, form))


def _vector_forms(kind):
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    # a ring with a self loop and a doubled edge: neighbors r-1, r, r+1, r+1
    srcs = [(r - 1) % n, r, (r + 1) % n, (r + 1) % n]
    dsts = [(r + 1) % n, r, (r - 1) % n, (r - 1) % n]
    topo = w.Create_dist_graph_adjacent(srcs, dsts)
    # block j to dsts[j] holds j+1 values: 100*r + 10*j + k
    scounts = [j + 1 for j in range(4)]
    send = np.concatenate([100 * r + 10 * j + np.arange(c) for j, c in enumerate(scounts)]).astype("i8")
    # what comes from srcs[i]: it is that rank's (i-th among its sends to me) block
    rcounts = []
    expect = []
    for i, s in enumerate(srcs):
        # the k-th receive from s meets s's k-th send to me
        k = sum(1 for x in srcs[:i] if x == s)
        sd = [(s + 1) % n, s, (s - 1) % n, (s - 1) % n]
        j = [jj for jj, d in enumerate(sd) if d == r][k]
        rcounts.append(j + 1)
        expect.append(100 * s + 10 * j + np.arange(j + 1))
    rdispls = list(np.cumsum([0] + rcounts[:-1]) + np.arange(4))  # a gap after every block
    recv = _mk(kind, np.full(sum(rcounts) + 4, -1, "i8"))
    topo.Neighbor_alltoallv([_mk(kind, send), (scounts, list(np.cumsum([0] + scounts[:-1]))), MPI.INT64_T],
                            [recv, (rcounts, rdispls), MPI.INT64_T])
    got = _get(recv)
    for i in range(4):
        assert np.array_equal(got[rdispls[i]:rdispls[i] + rcounts[i]], expect[i]), (r, i, got, expect)
        assert got[rdispls[i] + rcounts[i]] == -1  # the gaps are untouched
    # alltoallw with the same layout in bytes
    recv = _mk(kind, np.full(sum(rcounts) + 4, -1, "i8"))
    sd = [int(x) * 8 for x in np.cumsum([0] + scounts[:-1])]
    topo.Neighbor_alltoallw([_mk(kind, send), (scounts, sd), [MPI.INT64_T] * 4],
                            [recv, (rcounts, [d * 8 for d in rdispls]), [MPI.INT64_T] * 4])
    got = _get(recv)
    for i in range(4):
        assert np.array_equal(got[rdispls[i]:rdispls[i] + rcounts[i]], expect[i]), (r, i, got, expect)
    # allgatherv: my value r from every source
    recv = _mk(kind, np.full(8, -1, "i8"))
    topo.Ineighbor_allgatherv(_mk(kind, np.array([r, r], "i8")), [recv, ([2] * 4, [0, 2, 4, 6]), MPI.INT64_T]).Wait()
    assert np.array_equal(_get(recv), np.repeat(srcs, 2)), (r, _get(recv))
    # objects, with device arrays inside
    got = topo.neighbor_alltoall([(r, j, _mk(kind, np.arange(j + 1))) for j in range(4)])
    for i, (s, j, a) in enumerate(got):
        assert s == srcs[i] and type(a) is type(_mk(kind, np.zeros(1)))
        assert np.array_equal(_get(a), np.arange(j + 1))
    assert topo.neighbor_allgather(r) == srcs
    topo.Free()


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["host", "sim"])
def test_vector_forms_duplicates_and_self(n, kind):
    run_ranks(_vector_forms, n, timeout=90, args=(kind,))


def _nonperiodic_and_nulls():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    cart = w.Create_cart([n], periods=[False])
    lo, hi = cart.Shift(0, 1)
    assert (lo, hi) == (r - 1 if r else MPI.PROC_NULL, r + 1 if r < n - 1 else MPI.PROC_NULL)
    rbuf = np.full(2, -7, "i4")
    cart.Neighbor_alltoall(np.array([10 * r, 10 * r + 1], "i4"), rbuf)
    want = [-7 if lo == MPI.PROC_NULL else 10 * lo + 1, -7 if hi == MPI.PROC_NULL else 10 * hi]
    assert rbuf.tolist() == want
    assert cart.neighbor_allgather(r) == [None if x == MPI.PROC_NULL else x for x in (lo, hi)]
    # non-contiguous receive blocks (every other element): the PROC_NULL block stays as it was
    rb = np.full(4, -7, "i4")
    every_other = MPI.INT.Create_resized(0, 8).Commit()
    cart.Neighbor_allgather([np.array([r], "i4"), 1, every_other], [rb, 1, every_other])
    every_other.Free()
    assert rb[1::2].tolist() == [-7, -7]
    assert rb[::2].tolist() == [-7 if x == MPI.PROC_NULL else x for x in (lo, hi)]
    # graph topology: a star around rank 0 (one node: index [0] is mpi4py's standard form of
    # zero nodes, so every rank gets COMM_NULL)
    index = [n - 1] + [n - 1 + k for k in range(1, n)]
    edges = list(range(1, n)) + [0] * (n - 1)
    g = w.Create_graph(index, edges)
    if n == 1:
        assert g == MPI.COMM_NULL and type(g) is MPI.Graphcomm
    else:
        assert g.neighbors == (list(range(1, n)) if r == 0 else [0])
        got = g.neighbor_alltoall([(r, k) for k in range(g.outdegree)])
        assert got == ([(k, 0) for k in range(1, n)] if r == 0 else [(0, r - 1)])
    # sub-grids of a 2-D grid: rows and columns
    dims = MPI.Compute_dims(n, 2)
    c2 = w.Create_cart(dims, [False, True])
    row = c2.Sub([False, True])
    assert row.size == dims[1] and row.dims == [dims[1]] and row.periods == [1]
    assert row.coords == [c2.coords[1]] and row.rank == c2.coords[1]
    assert row.allgather(c2.coords[0]) == [c2.coords[0]] * dims[1]
    none = c2.Sub([False, False])
    assert none.size == 1 and none.dim == 0 and none.topo == ([], [], [])
    for c in (cart, g, c2, row, none):
        if c:
            c.Free()
    # Create_dist_graph: every rank names the edge (r -> r+1) with weight r
    dg = w.Create_dist_graph([r], [1], [(r + 1) % n], [r])
    assert dg.Get_dist_neighbors() == ([(r - 1) % n], [(r + 1) % n], ([(r - 1) % n], [r]))
    dg.Free()


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_nonperiodic_graph_sub_dist(n):
    run_ranks(_nonperiodic_and_nulls, n, timeout=60)


def _bad_input():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    n = w.size

    def cls(fn):
        try:
            fn()
        except MPI.Exception as e:
            return e.Get_error_class()
        raise AssertionError("no error")

    assert cls(lambda: w.Create_cart([n + 1])) == MPI.ERR_ARG
    assert cls(lambda: w.Create_cart([-1])) == MPI.ERR_DIMS
    assert cls(lambda: w.Cart_map([n + 1])) == MPI.ERR_DIMS
    assert cls(lambda: w.Create_graph([1] * (n + 1), [0] * (n + 1))) == MPI.ERR_ARG
    assert cls(lambda: w.Create_graph([1], [-1])) == MPI.ERR_ARG
    assert cls(lambda: w.Create_graph([2, 1], [0, 0])) == MPI.ERR_ARG
    assert cls(lambda: w.Graph_map([1] * (n + 1), [0] * (n + 1))) == MPI.ERR_ARG
    assert cls(lambda: w.Create_dist_graph_adjacent([n], [0])) == MPI.ERR_RANK
    assert cls(lambda: w.Create_dist_graph_adjacent([0], [0], [1], None)) == MPI.ERR_TOPOLOGY
    assert cls(lambda: w.Create_dist_graph([0], [1], [n])) == MPI.ERR_RANK  # every rank still returns
    assert cls(lambda: MPI.Compute_dims(n + 1, [n + 2, 0])) == MPI.ERR_DIMS
    with pytest.raises(ValueError):
        w.Create_cart([n], [0, 0])
    with pytest.raises(ValueError):
        w.Create_dist_graph_adjacent([0], [0], MPI.WEIGHTS_EMPTY, MPI.WEIGHTS_EMPTY)
    cart = w.Create_cart([n], [False])
    assert cls(lambda: cart.Get_cart_rank([n])) == MPI.ERR_ARG
    assert cls(lambda: cart.Get_cart_rank([-1])) == MPI.ERR_ARG
    assert cls(lambda: cart.Get_coords(n)) == MPI.ERR_RANK
    assert cls(lambda: cart.Shift(1, 1)) == MPI.ERR_ARG
    with pytest.raises(ValueError):
        cart.Get_cart_rank([0, 0])
    with pytest.raises(TypeError):
        MPI.Graphcomm(cart)
    with pytest.raises(TypeError):
        MPI.Topocomm(w)
    zero = MPI.COMM_SELF.Create_cart([])
    assert cls(lambda: zero.Shift(0, 1)) == MPI.ERR_TOPOLOGY
    g = w.Create_graph(list(range(1, n + 1)), [0] * n)
    assert cls(lambda: g.Get_neighbors(n)) == MPI.ERR_RANK
    # an edge to itself whose send and receive blocks differ: an error on this rank only
    me = MPI.COMM_SELF.Create_graph([1], [0])
    assert cls(lambda: me.Neighbor_alltoall(np.zeros(2), np.zeros(3))) in (MPI.ERR_COUNT, MPI.ERR_TRUNCATE)
    for c in (cart, zero, g, me):
        c.Free()


@pytest.mark.parametrize("n", [1, 3])
def test_bad_input(n):
    run_ranks(_bad_input, n, timeout=60)
