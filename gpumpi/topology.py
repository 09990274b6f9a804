"""Process topologies (L1, pure): Cartesian, graph and distributed-graph math.

Theory of operation
===================
A topology communicator is an ordinary intracommunicator plus a *topology record*,
an immutable value of this module that the communicator layer keeps per context id.
Everything here is arithmetic on small integer lists; the communicator layer
(``comm``) parses mpi4py's arguments, calls these functions and does the one exchange
they need (the edges of ``MPI_Dist_graph_create``).

Cartesian (MPI-4.1 section 8.5.1)
  Ranks are laid out in row-major order: the last dimension varies fastest.  Rank
  ``r`` has coordinates ``c[i] = (r // prod(dims[i+1:])) % dims[i]``.  A coordinate
  outside ``[0, dims[i])`` wraps on a periodic dimension and has no process
  (``PROC_NULL``) on a non-periodic one (:func:`cart_rank`; ``MPI_Cart_rank``
  raises there instead).  ``reorder`` is not used by gpumpi: process ``r`` of the old
  communicator is rank ``r`` of the new one (``MPI_Cart_map`` says so too), and the
  ranks ``>= prod(dims)`` get ``COMM_NULL``.  A zero-dimensional grid has one process.
  ``MPI_Cart_sub`` groups the processes that agree on the dropped coordinates
  (``color``) and orders them by the kept ones (``key``): every sub-grid is a
  sub-communicator in row-major order of its own coordinates.

``MPI_Dims_create`` (:func:`compute_dims`)
  The free entries (zeros) of ``dims`` become the most balanced factorisation of
  ``nnodes / prod(fixed entries)``, in non-increasing order: the one with the
  smallest difference between its largest and smallest factor, and among those the
  one whose smallest factor is largest (then the next smallest, ...) -- MPICH's
  result (its search after Traeff and Luebbe, EuroMPI'15), checked against MPICH
  over every ``nnodes <= 1024`` and 1 to 6 dimensions.  Errors as MPICH: a negative
  ``nnodes`` is ``ERR_ARG``; a negative entry, or ``nnodes`` not a multiple of the
  fixed entries, is ``ERR_DIMS``.

Graph (section 8.5.3)
  ``index[i]`` is the running total of the degrees of nodes ``0..i``; the neighbors of
  node ``i`` are ``edges[index[i-1]:index[i]]`` (``index[-1]`` meaning 0).  Ranks
  ``>= nnodes`` get ``COMM_NULL``.  Self loops and repeated edges are allowed.

Distributed graph (section 8.5.4)
  ``MPI_Dist_graph_create_adjacent`` gives each process its own in- and out-lists
  (``PROC_NULL`` allowed, as MPICH).  With ``MPI_Dist_graph_create`` any process may
  name any edge; after an all-gather of everyone's ``(sources, degrees,
  destinations, weights)`` :func:`dist_graph_adjacency` gives each process its
  in-edges and out-edges, each in the order (naming process, position in its list)
  -- one deterministic order the standard allows.  Weights are all given or none:
  ``UNWEIGHTED`` (or None) means none; ``WEIGHTS_EMPTY`` means weighted with no edges.

Neighbor collectives (section 8.6)
  :meth:`Cart.neighbors` / :meth:`Graph.neighbors` / :meth:`DistGraph.neighbors` give
  ``(sources, destinations, recv_order)``: send block ``j`` goes to
  ``destinations[j]``, receive block ``i`` comes from ``sources[i]``; ``PROC_NULL``
  blocks are skipped (their receive block is left alone).  A Cartesian process's
  neighbors are, for each dimension, the ``-1`` then the ``+1`` neighbor.  Messages
  between one pair match in posting order, so ``recv_order`` is the order in which
  the receives must be posted for them to meet the right sends: the block a process
  sends to its ``-1`` neighbor arrives in that neighbor's ``+1`` block (MPI-4.1, also
  when both neighbors are the same process, as on a periodic dimension of 1 or 2), so
  a Cartesian process posts, per dimension, the ``+1`` receive before the ``-1`` one;
  graph topologies post receives in block order.
"""

from __future__ import annotations

from .constants import CART, DIST_GRAPH, GRAPH, PROC_NULL, UNDEFINED
from .errors import ERR_ARG, ERR_DIMS, ERR_RANK, ERR_TOPOLOGY, error

__all__ = [
    "UNWEIGHTED", "WEIGHTS_EMPTY", "compute_dims", "cart_size", "cart_coords", "cart_rank", "cart_shift",
    "cart_neighbors", "cart_recv_order", "cart_sub", "cart_map", "graph_nodes", "graph_neighbors",
    "graph_map", "dist_graph_adjacency", "Cart", "Graph", "DistGraph",
]

#: Unweighted graph (MPI_UNWEIGHTED): an int, recognised by identity as mpi4py does.
UNWEIGHTED = 0x7F3A5C000004
#: Empty graph weights (MPI_WEIGHTS_EMPTY): weighted, with no edges.
WEIGHTS_EMPTY = 0x7F3A5C000008


def _int(v, call: str, what: str) -> int:
    if type(v) is int:
        return v
    try:
        return v.__index__()
    except AttributeError:
        raise TypeError(f"{call}: {what} must be integers ({type(v).__name__})") from None


def ints(seq, call: str, what: str, n: int | None = None) -> list:
    """mpi4py's ``getarray``/``chkarray``: a list of ints (``n`` of them when given)."""
    out = [_int(v, call, what) for v in seq]
    if n is not None and len(out) != n:
        raise ValueError(f"{call}: expecting {n} items, got {len(out)}")
    return out


# --- MPI_Dims_create -------------------------------------------------------------------------------


def _divisors(m: int) -> list:
    small, large = [], []
    d = 1
    while d * d <= m:
        if m % d == 0:
            small.append(d)
            if d * d != m:
                large.append(m // d)
        d += 1
    return small + large[::-1]


def inter_root(m: int, k: int) -> int:
    """floor(m ** (1/k)), exactly."""
    r = int(round(m ** (1.0 / k)))
    while r ** k > m:
        r -= 1
    while (r + 1) ** k <= m:
        r += 1
    return r


def _balanced(m: int, k: int) -> list:
    """The most balanced non-increasing k-factorisation of m (module docstring)."""
    if k == 1:
        return [m]
    divs = _divisors(m)
    best = [None, None]  # (max - min, ascending tuple) of the best so far, its factors

    def better(t) -> bool:
        bal = t[0] - t[-1]
        if best[0] is None or bal < best[0][0]:
            return True
        return bal == best[0][0] and t[::-1] > best[0][1]

    def walk(prefix, rest, left, hi):
        # choose the next factor d <= hi (non-increasing), d ** left >= rest
        if left == 1:
            if rest <= hi:
                t = prefix + [rest]
                if better(t):
                    best[0], best[1] = (t[0] - t[-1], t[::-1]), t
            return
        top = prefix[0] if prefix else None
        for d in divs:
            if d > hi:
                break
            if rest % d or d ** left < rest:
                continue
            mx = top if top is not None else d
            # the smallest factor is at most the left-th root of what remains after d
            floor_min = inter_root(rest // d, left - 1)
            if best[0] is not None and mx - min(d, floor_min) > best[0][0]:
                if top is None:
                    break  # a larger first (largest) factor only makes it worse
                continue
            walk(prefix + [d], rest // d, left - 1, d)

    walk([], m, k, m)
    return best[1]


def compute_dims(nnodes: int, dims, call: str = "Compute_dims") -> list:
    """Balanced process counts per dimension (MPI_Dims_create): see the module docstring.

    ``dims`` is a list of ints (zeros are filled in); returns a new list.
    """
    dims = list(dims)
    if not dims:
        return dims
    if nnodes < 0:
        raise error(ERR_ARG, f"{call}: invalid argument, nnodes must be non-negative ({nnodes})")
    for i, d in enumerate(dims):
        if d < 0:
            raise error(ERR_DIMS, f"{call}: negative dimension (dims[{i}] = {d})")
    fixed = 1
    for d in dims:
        fixed *= d or 1
    free = [i for i, d in enumerate(dims) if d == 0]
    if nnodes % fixed:
        raise error(ERR_DIMS, f"{call}: {nnodes} nodes are not a multiple of the fixed dims "
                              f"({dims}, product {fixed})")
    if not free:
        return dims
    if nnodes == 0:
        raise error(ERR_DIMS, f"{call}: no nodes to distribute over the free dims ({dims})")
    for i, v in zip(free, _balanced(nnodes // fixed, len(free))):
        dims[i] = v
    return dims


# --- Cartesian ---------------------------------------------------------------------------------------


def cart_size(dims) -> int:
    """Number of processes of a grid (1 for zero dimensions)."""
    n = 1
    for d in dims:
        n *= d
    return n


def dims_check(dims, call: str) -> None:
    """A grid's dimensions are non-negative (``ERR_DIMS``)."""
    for i, d in enumerate(dims):
        if d < 0:
            raise error(ERR_DIMS, f"{call}: negative dimension (dims[{i}] = {d})")


def cart_check(dims, size: int, call: str) -> int:
    """Validate a grid for a communicator of ``size``; its number of processes."""
    dims_check(dims, call)
    n = cart_size(dims)
    if n > size:
        raise error(ERR_ARG, f"{call}: the grid {list(dims)} needs {n} processes, the communicator has {size}")
    return n


def cart_coords(dims, rank: int) -> list:
    """Coordinates of ``rank`` (row-major) (MPI_Cart_coords)."""
    out = [0] * len(dims)
    for i in range(len(dims) - 1, -1, -1):
        d = dims[i]
        out[i] = rank % d
        rank //= d
    return out


def cart_rank(dims, periods, coords) -> int:
    """Rank at ``coords``; ``PROC_NULL`` outside a non-periodic dimension (MPI_Cart_rank)."""
    r = 0
    for d, p, c in zip(dims, periods, coords):
        if not 0 <= c < d:
            if not p:
                return PROC_NULL
            c %= d
        r = r * d + c
    return r


def cart_shift(dims, periods, coords, direction: int, disp: int, rank: int) -> tuple:
    """``(source, dest)`` of a shift by ``disp`` along ``direction`` (MPI_Cart_shift)."""
    if disp == 0:
        return rank, rank
    c = list(coords)
    c[direction] = coords[direction] + disp
    dest = cart_rank(dims, periods, c)
    c[direction] = coords[direction] - disp
    return cart_rank(dims, periods, c), dest


def cart_neighbors(dims, periods, coords) -> list:
    """The neighbors of a Cartesian process in neighbor-collective order: for each dimension
    the ``-1`` then the ``+1`` neighbor, ``PROC_NULL`` included."""
    out = []
    for i in range(len(dims)):
        src, dst = cart_shift(dims, periods, coords, i, 1, None)
        out += [src, dst]
    return out


def cart_recv_order(ndims: int) -> list:
    """The order to post a Cartesian process's receives (module docstring): ``+1`` before ``-1``."""
    out = []
    for i in range(ndims):
        out += [2 * i + 1, 2 * i]
    return out


def cart_sub(dims, periods, coords, remain) -> tuple:
    """``(color, key, sub dims, sub periods)`` of ``MPI_Cart_sub``: processes with the same
    color form a sub-grid, ordered by key (row-major in the kept coordinates)."""
    color = key = 0
    sdims, speriods = [], []
    for d, p, c, keep in zip(dims, periods, coords, remain):
        if keep:
            key = key * d + c
            sdims.append(d)
            speriods.append(p)
        else:
            color = color * d + c
    return color, key, sdims, speriods


def cart_map(dims, size: int, rank: int, call: str = "Cart_map") -> int:
    """This process's rank in the grid, or UNDEFINED (MPI_Cart_map, no reordering)."""
    dims_check(dims, call)
    n = cart_size(dims)
    if n > size:
        raise error(ERR_DIMS, f"{call}: the grid {list(dims)} needs {n} processes, the communicator has {size}")
    return rank if rank < n else UNDEFINED


# --- graph -------------------------------------------------------------------------------------------


def graph_nodes(index, edges, size: int, call: str) -> int:
    """Validate an ``(index, edges)`` graph for a communicator of ``size``; its node count."""
    nnodes = len(index)
    if nnodes > size:
        raise error(ERR_ARG, f"{call}: the graph has {nnodes} nodes, the communicator has {size} processes")
    prev = 0
    for i, v in enumerate(index):
        if v < prev:
            raise error(ERR_ARG, f"{call}: index must be non-decreasing and non-negative "
                                 f"(index[{i}] = {v} after {prev})")
        prev = v
    if prev != len(edges):
        raise error(ERR_ARG, f"{call}: index ends at {prev}, but there are {len(edges)} edges")
    for i, e in enumerate(edges):
        if not 0 <= e < nnodes:
            raise error(ERR_ARG, f"{call}: edge to a node that does not exist (edges[{i}] = {e}, {nnodes} nodes)")
    return nnodes


def graph_neighbors(index, edges, rank: int) -> list:
    """Neighbors of node ``rank`` (MPI_Graph_neighbors)."""
    lo = index[rank - 1] if rank else 0
    return list(edges[lo:index[rank]])


def graph_map(index, edges, size: int, rank: int, call: str = "Graph_map") -> int:
    """This process's rank in the graph, or UNDEFINED (MPI_Graph_map, no reordering)."""
    nnodes = graph_nodes(index, edges, size, call)
    return rank if rank < nnodes else UNDEFINED


# --- distributed graph -------------------------------------------------------------------------------


def dist_graph_adjacency(specs, me: int) -> tuple:
    """``(sources, sourceweights, destinations, destweights)`` of process ``me`` from every
    process's ``(sources, degrees, destinations, weights or None)`` (``MPI_Dist_graph_create``;
    order: naming process, then position in its list)."""
    ins, inw, outs, outw = [], [], [], []
    for spec in specs:
        srcs, degs, dsts, ws = spec
        k = 0
        for s, deg in zip(srcs, degs):
            for _ in range(deg):
                d = dsts[k]
                w = ws[k] if ws is not None else 1
                if s == me:
                    outs.append(d)
                    outw.append(w)
                if d == me:
                    ins.append(s)
                    inw.append(w)
                k += 1
    return ins, inw, outs, outw


def dist_graph_check(sources, degrees, destinations, weights, size: int, call: str) -> None:
    """Validate one process's part of an ``MPI_Dist_graph_create`` edge list."""
    for i, s in enumerate(sources):
        if not 0 <= s < size:
            raise error(ERR_RANK, f"{call}: invalid source rank (sources[{i}] = {s}, communicator size {size})")
    for i, d in enumerate(degrees):
        if d < 0:
            raise error(ERR_ARG, f"{call}: negative degree (degrees[{i}] = {d})")
    for i, d in enumerate(destinations):
        if not 0 <= d < size:
            raise error(ERR_RANK, f"{call}: invalid destination rank (destinations[{i}] = {d}, "
                                  f"communicator size {size})")
    _weights_check(weights, call)


def adjacent_check(sources, destinations, sw, dw, size: int, call: str) -> bool:
    """Validate the lists of ``MPI_Dist_graph_create_adjacent`` (PROC_NULL allowed); whether
    the graph is weighted.  Weights (None: unweighted) are given for both sides or for
    neither, unless both lists are empty; then the source side decides, as in MPICH."""
    for what, ranks in (("sources", sources), ("destinations", destinations)):
        for i, r in enumerate(ranks):
            if r != PROC_NULL and not 0 <= r < size:
                raise error(ERR_RANK, f"{call}: invalid rank ({what}[{i}] = {r}, communicator size {size})")
    if (sw is None) != (dw is None) and (sources or destinations):
        raise error(ERR_TOPOLOGY, f"{call}: weights must be given for both the sources and the "
                                  f"destinations, or for neither")
    _weights_check(sw, call)
    _weights_check(dw, call)
    return sw is not None


def _weights_check(ws, call: str) -> None:
    for i, w in enumerate(ws or ()):
        if w < 0:
            raise error(ERR_ARG, f"{call}: negative edge weight (weights[{i}] = {w})")


# --- topology records (what a communicator keeps) ----------------------------------------------------


class Cart:
    """Cartesian topology of one process: ``dims``, ``periods`` (bools), its ``coords``."""

    __slots__ = ("dims", "periods", "coords", "rank")
    kind = CART

    def __init__(self, dims, periods, rank: int) -> None:
        self.dims = tuple(dims)
        self.periods = tuple(periods)
        self.rank = rank
        self.coords = tuple(cart_coords(self.dims, rank))

    def degrees(self) -> tuple:
        return 2 * len(self.dims), 2 * len(self.dims)

    def neighbors(self) -> tuple:
        nb = cart_neighbors(self.dims, self.periods, self.coords)
        return nb, nb, cart_recv_order(len(self.dims))


class Graph:
    """Graph topology of one process: ``index``, ``edges`` and its ``rank``."""

    __slots__ = ("index", "edges", "rank")
    kind = GRAPH

    def __init__(self, index, edges, rank: int) -> None:
        self.index, self.edges, self.rank = tuple(index), tuple(edges), rank

    def degrees(self) -> tuple:
        n = len(graph_neighbors(self.index, self.edges, self.rank))
        return n, n

    def neighbors(self) -> tuple:
        nb = graph_neighbors(self.index, self.edges, self.rank)
        return nb, nb, list(range(len(nb)))


class DistGraph:
    """Distributed-graph topology of one process: its in- and out-edges and their weights."""

    __slots__ = ("sources", "destinations", "sourceweights", "destweights", "weighted")
    kind = DIST_GRAPH

    def __init__(self, sources, destinations, sourceweights, destweights, weighted: bool) -> None:
        self.sources, self.destinations = tuple(sources), tuple(destinations)
        self.sourceweights = tuple(sourceweights) if weighted else None
        self.destweights = tuple(destweights) if weighted else None
        self.weighted = weighted

    def degrees(self) -> tuple:
        return len(self.sources), len(self.destinations)

    def neighbors(self) -> tuple:
        return list(self.sources), list(self.destinations), list(range(len(self.sources)))
