"""Topology communicators (L5): ``Topocomm`` (neighbors, neighbor collectives),
``Cartcomm``, ``Graphcomm`` and ``Distgraphcomm``.

Theory of operation
===================
A topology communicator is an intracommunicator whose context has a topology record
(:mod:`gpumpi.topology`: Cart, Graph, DistGraph) in :data:`.common.TOPOLOGIES`; its
queries read the record, and neighbor collectives are schedules of
``gpumpi.collectives.neighbor`` run by the one executor.
"""

from __future__ import annotations



from .. import _commctx
from ..collectives import _calls
from ..collectives import _lower
from .. import topology as _topology
from ..constants import (
    PROC_NULL,
)
from ..errors import (
    ERR_ARG,
    ERR_RANK,
    ERR_TOPOLOGY,
    error,
)
from ..errors import Exception as MPIException
from ..request import Prequest, Request
from .common import CLASSES, TOPOLOGIES, int_arg
from .intra import Intracomm

__all__ = ["Cartcomm", "Distgraphcomm", "Graphcomm", "Topocomm"]


class Topocomm(Intracomm):
    """Topology intracommunicator: the neighbor collectives of every topology."""

    __slots__ = ()
    _kinds = (_topology.CART, _topology.GRAPH, _topology.DIST_GRAPH)
    _expect = "a topology communicator"

    def _init_from(self, comm) -> None:
        super()._init_from(comm)
        if comm is not None and self._ctx >= 0:
            t = TOPOLOGIES.get(self._ctx)
            if t is None:
                raise TypeError("expecting a topology communicator")
            if t.kind not in self._kinds:
                raise TypeError(f"expecting {self._expect}")

    def _topo(self, call: str):
        self._check(call)
        return TOPOLOGIES[self._ctx]

    # --- neighbors ---------------------------------------------------------------------------
    @property
    def degrees(self) -> tuple:
        """Number of incoming and outgoing neighbors."""
        return self._topo("Topocomm.degrees").degrees()

    @property
    def indegree(self) -> int:
        """Number of incoming neighbors."""
        return self.degrees[0]

    @property
    def outdegree(self) -> int:
        """Number of outgoing neighbors."""
        return self.degrees[1]

    @property
    def inoutedges(self) -> tuple:
        """Incoming and outgoing neighbors (in neighbor-collective order)."""
        ins, outs, _ = self._topo("Topocomm.inoutedges").neighbors()
        return ins, outs

    @property
    def inedges(self) -> list:
        """Incoming neighbors."""
        return self.inoutedges[0]

    @property
    def outedges(self) -> list:
        """Outgoing neighbors."""
        return self.inoutedges[1]

    def _nbrs(self) -> tuple:
        """Return ``(sources, destinations, recv_order)`` for the neighbor collectives (gpumpi.topology)."""
        return TOPOLOGIES[self._ctx].neighbors()

    # --- neighbor collectives: schedules of gpumpi.collectives.neighbor ----------------------
    def Neighbor_allgather(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather one block from every incoming neighbor (MPI_Neighbor_allgather)."""
        return self._coll_block(_calls.neighbor_allgather, "Neighbor_allgather", False, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_allgatherv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather a block of its own size from every incoming neighbor (MPI_Neighbor_allgatherv)."""
        return self._coll_block(_calls.neighbor_allgather, "Neighbor_allgatherv", True, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_alltoall(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Send block ``j`` to outgoing neighbor ``j``, receive one from each incoming one (MPI_Neighbor_alltoall)."""
        return self._coll_block(_calls.neighbor_alltoall, "Neighbor_alltoall", False, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_alltoallv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Neighbor all-to-all with per-neighbor counts and displacements (MPI_Neighbor_alltoallv)."""
        return self._coll_block(_calls.neighbor_alltoall, "Neighbor_alltoallv", True, sendbuf, recvbuf,
                                stream=stream)

    def Neighbor_alltoallw(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Neighbor all-to-all with per-neighbor datatypes and byte displacements (MPI_Neighbor_alltoallw)."""
        return self._coll_block(_calls.neighbor_alltoallw, "Neighbor_alltoallw", sendbuf, recvbuf, stream=stream)

    def Ineighbor_allgather(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor allgather (MPI_Ineighbor_allgather)."""
        return self._coll_req(_calls.neighbor_allgather, "Ineighbor_allgather", False, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_allgatherv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor allgatherv (MPI_Ineighbor_allgatherv)."""
        return self._coll_req(_calls.neighbor_allgather, "Ineighbor_allgatherv", True, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_alltoall(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor all-to-all (MPI_Ineighbor_alltoall)."""
        return self._coll_req(_calls.neighbor_alltoall, "Ineighbor_alltoall", False, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_alltoallv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor all-to-all vector (MPI_Ineighbor_alltoallv)."""
        return self._coll_req(_calls.neighbor_alltoall, "Ineighbor_alltoallv", True, sendbuf, recvbuf,
                              stream=stream)

    def Ineighbor_alltoallw(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking neighbor all-to-all general (MPI_Ineighbor_alltoallw)."""
        return self._coll_req(_calls.neighbor_alltoallw, "Ineighbor_alltoallw", sendbuf, recvbuf, stream=stream)

    def Neighbor_allgather_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor allgather (MPI_Neighbor_allgather_init)."""
        return self._coll_init(_calls.neighbor_allgather, "Neighbor_allgather_init", False, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_allgatherv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor allgatherv (MPI_Neighbor_allgatherv_init)."""
        return self._coll_init(_calls.neighbor_allgather, "Neighbor_allgatherv_init", True, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_alltoall_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor all-to-all (MPI_Neighbor_alltoall_init)."""
        return self._coll_init(_calls.neighbor_alltoall, "Neighbor_alltoall_init", False, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_alltoallv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor all-to-all vector (MPI_Neighbor_alltoallv_init)."""
        return self._coll_init(_calls.neighbor_alltoall, "Neighbor_alltoallv_init", True, sendbuf, recvbuf,
                               info=info, stream=stream)

    def Neighbor_alltoallw_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent neighbor all-to-all general (MPI_Neighbor_alltoallw_init)."""
        return self._coll_init(_calls.neighbor_alltoallw, "Neighbor_alltoallw_init", sendbuf, recvbuf,
                               info=info, stream=stream)

    def neighbor_allgather(self, sendobj) -> list:
        """Gather a Python object from every incoming neighbor (MPI_Neighbor_allgather of pickles);
        None for a PROC_NULL neighbor."""
        def run(c, o, call):
            with _commctx.lock(c, "neighbor_allgather"):
                return _lower.neighbor_allgather(c, o, call)

        return self._ocoll(run, "neighbor_allgather", sendobj)

    def neighbor_alltoall(self, sendobj) -> list:
        """Send item ``j`` of a sequence to outgoing neighbor ``j``, receive one from each incoming
        neighbor (MPI_Neighbor_alltoall of pickles); None for a PROC_NULL neighbor."""
        def run(c, o, call):
            with _commctx.lock(c, "neighbor_alltoall"):
                return _lower.neighbor_alltoall(c, o, call)

        return self._ocoll(run, "neighbor_alltoall", sendobj)


class Cartcomm(Topocomm):
    """Cartesian topology intracommunicator (MPI_Cart_create)."""

    __slots__ = ()
    _kinds = (_topology.CART,)
    _expect = "a Cartesian communicator"

    def Get_dim(self) -> int:
        """Number of dimensions (MPI_Cartdim_get)."""
        return len(self._topo("Cartcomm.Get_dim").dims)

    dim = property(Get_dim, doc="Number of dimensions.")
    ndim = property(Get_dim, doc="Number of dimensions.")

    def Get_topo(self) -> tuple:
        """Return ``(dims, periods, coords)`` of this process (MPI_Cart_get)."""
        t = self._topo("Cartcomm.Get_topo")
        return list(t.dims), list(t.periods), list(t.coords)

    topo = property(Get_topo, doc="Topology information.")
    dims = property(lambda self: self.Get_topo()[0], doc="Dimensions.")
    periods = property(lambda self: self.Get_topo()[1], doc="Periodicity.")
    coords = property(lambda self: self.Get_topo()[2], doc="Coordinates.")

    def Get_cart_rank(self, coords) -> int:
        """Rank at ``coords``, wrapped on periodic dimensions (MPI_Cart_rank)."""
        call = "Cartcomm.Get_cart_rank"
        try:
            t = self._topo(call)
            coords = _topology.ints(coords, call, "coords", len(t.dims))
            r = _topology.cart_rank(t.dims, t.periods, coords)
            if r == PROC_NULL:
                raise error(ERR_ARG, f"{call}: coordinates outside a non-periodic dimension "
                                     f"({coords}, dims {list(t.dims)})")
            return r
        except MPIException as e:
            self._raise(e)

    def Get_coords(self, rank: int) -> list:
        """Coordinates of ``rank`` (MPI_Cart_coords)."""
        call = "Cartcomm.Get_coords"
        try:
            t = self._topo(call)
            rank = int_arg(rank, call, "rank")
            if not 0 <= rank < self._size:
                raise error(ERR_RANK, f"{call}: invalid rank ({rank}, communicator size {self._size})")
            return _topology.cart_coords(t.dims, rank)
        except MPIException as e:
            self._raise(e)

    def Shift(self, direction: int, disp: int) -> tuple:
        """Return the ``(source, dest)`` ranks of a shift by ``disp`` along ``direction`` (MPI_Cart_shift)."""
        call = "Cartcomm.Shift"
        try:
            t = self._topo(call)
            direction, disp = int_arg(direction, call, "direction"), int_arg(disp, call, "disp")
            if not t.dims:
                raise error(ERR_TOPOLOGY, f"{call}: the grid has zero dimensions")
            if not 0 <= direction < len(t.dims):
                raise error(ERR_ARG, f"{call}: invalid direction ({direction}, {len(t.dims)} dimensions)")
            return _topology.cart_shift(t.dims, t.periods, t.coords, direction, disp, self._rank)
        except MPIException as e:
            self._raise(e)

    def Sub(self, remain_dims) -> "Cartcomm":
        """Collective: the sub-grid of the kept dimensions that holds this process (MPI_Cart_sub).

        With no dimension kept every process gets a zero-dimensional grid of its own
        (MPI-4.1 section 8.5.6)."""
        call = "Cartcomm.Sub"
        try:
            t = self._topo(call)
            remain = _topology.ints(remain_dims, call, "remain_dims", len(t.dims))
            color, _, sdims, speriods = _topology.cart_sub(t.dims, t.periods, t.coords, remain)
            members = []
            for q in range(self._size):
                qc, qk, _, _ = _topology.cart_sub(t.dims, t.periods, _topology.cart_coords(t.dims, q), remain)
                if qc == color:
                    members.append((qk, q))
            members.sort()
            world = [self._rw[q] for _, q in members]
            ctx = self._agree_ctx(call)
            c = Cartcomm.__new__(Cartcomm)
            c._setup(ctx, world, self._rw[self._rank])
            c._errh = self._errh
            TOPOLOGIES[ctx] = _topology.Cart(sdims, speriods, c._rank)
            return c
        except MPIException as e:
            self._raise(e)


class Graphcomm(Topocomm):
    """General graph topology intracommunicator (MPI_Graph_create)."""

    __slots__ = ()
    _kinds = (_topology.GRAPH,)
    _expect = "a general graph communicator"

    def Get_dims(self) -> tuple:
        """Return ``(nnodes, nedges)`` (MPI_Graphdims_get)."""
        t = self._topo("Graphcomm.Get_dims")
        return len(t.index), len(t.edges)

    dims = property(Get_dims, doc="Number of nodes and edges.")
    nnodes = property(lambda self: self.Get_dims()[0], doc="Number of nodes.")
    nedges = property(lambda self: self.Get_dims()[1], doc="Number of edges.")

    def Get_topo(self) -> tuple:
        """Return ``(index, edges)`` (MPI_Graph_get)."""
        t = self._topo("Graphcomm.Get_topo")
        return list(t.index), list(t.edges)

    topo = property(Get_topo, doc="Topology information.")
    index = property(lambda self: self.Get_topo()[0], doc="Index.")
    edges = property(lambda self: self.Get_topo()[1], doc="Edges.")

    def _node(self, rank, call: str):
        t = self._topo(call)
        rank = int_arg(rank, call, "rank")
        if not 0 <= rank < len(t.index):
            raise error(ERR_RANK, f"{call}: invalid rank ({rank}, {len(t.index)} nodes)")
        return _topology.graph_neighbors(t.index, t.edges, rank)

    def Get_neighbors_count(self, rank: int) -> int:
        """Number of neighbors of ``rank`` (MPI_Graph_neighbors_count)."""
        try:
            return len(self._node(rank, "Graphcomm.Get_neighbors_count"))
        except MPIException as e:
            self._raise(e)

    def Get_neighbors(self, rank: int) -> list:
        """Neighbors of ``rank`` (MPI_Graph_neighbors)."""
        try:
            return self._node(rank, "Graphcomm.Get_neighbors")
        except MPIException as e:
            self._raise(e)

    nneighbors = property(lambda self: self.Get_neighbors_count(self.Get_rank()), doc="Number of neighbors.")
    neighbors = property(lambda self: self.Get_neighbors(self.Get_rank()), doc="Neighbors.")


class Distgraphcomm(Topocomm):
    """Distributed graph topology intracommunicator (MPI_Dist_graph_create(_adjacent))."""

    __slots__ = ()
    _kinds = (_topology.DIST_GRAPH,)
    _expect = "a distributed graph communicator"

    def Get_dist_neighbors_count(self) -> tuple:
        """Return ``(indegree, outdegree, weighted)`` (MPI_Dist_graph_neighbors_count)."""
        t = self._topo("Distgraphcomm.Get_dist_neighbors_count")
        return len(t.sources), len(t.destinations), t.weighted

    def Get_dist_neighbors(self) -> tuple:
        """Return ``(sources, destinations, (sourceweights, destweights) or None)`` (MPI_Dist_graph_neighbors)."""
        t = self._topo("Distgraphcomm.Get_dist_neighbors")
        w = (list(t.sourceweights), list(t.destweights)) if t.weighted else None
        return list(t.sources), list(t.destinations), w




CLASSES["cart"], CLASSES["graph"], CLASSES["distgraph"] = Cartcomm, Graphcomm, Distgraphcomm
