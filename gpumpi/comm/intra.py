"""Intracommunicators (L5): constructors (Dup, Idup, Split, Split_type, Create,
Create_group, Create_from_group), scans, and the topology and intercommunicator
constructors.

Theory of operation
===================
Constructors agree a new context id with the members (``Comm._agree``), then set up the
new communicator over the members' world ranks.  The topology constructors validate with
:mod:`gpumpi.topology`'s math and make the class of :mod:`.topo` found in
:data:`.common.CLASSES`; ``Create_intercomm`` is :mod:`.inter`'s.
"""

from __future__ import annotations

import zlib

import numpy as _np

from .. import _ctxid
from ..collectives import _calls
from ..collectives import _execute as _coll_exec
from ..collectives import _lower
from .. import topology as _topology
from .._services import (node_of)
from ..constants import (
    COMM_TYPE_HW_GUIDED,
    COMM_TYPE_HW_UNGUIDED,
    COMM_TYPE_RESOURCE_GUIDED,
    COMM_TYPE_SHARED,
    UNDEFINED,
)
from ..errors import (
    ERR_ARG,
    ERR_GROUP,
    ERR_RANK,
    Errhandler,
    error,
)
from ..errors import Exception as MPIException
from ..group import Group
from ..op import MAX as _MAX, SUM, Op
from ..request import Prequest, Request, joint, part_done
from .common import CLASSES, GROUP_TAGS, SPLIT_TYPES, comm_world, graph_args, idup_tag, info_arg, \
    int_arg, periods_arg, topo_comm, weights_arg
from .base import Comm

__all__ = ["Intracomm"]


class Intracomm(Comm):
    """Intracommunicator (MPI_Comm of one group)."""

    __slots__ = ()

    # --- constructors -------------------------------------------------------------------------
    def Dup(self, info=None) -> "Intracomm":
        """Duplicate the communicator (MPI_Comm_dup); ``info`` given: MPI_Comm_dup_with_info.
        The duplicate keeps the group, error handler and info hints (and a topology's)."""
        try:
            self._check("Comm.Dup")
            info_arg(info, "Comm.Dup")
            ctx = self._agree_ctx("Comm.Dup")
            return self._dup_into(type(self).__new__(type(self)), ctx, info)
        except MPIException as e:
            self._raise(e)

    Clone = Dup

    def Dup_with_info(self, info) -> "Intracomm":
        """Duplicate with new info hints (MPI_Comm_dup_with_info)."""
        info_arg(info, "Comm.Dup_with_info", none_ok=False)
        return self.Dup(info)

    def Idup(self, info=None) -> tuple:
        """Nonblocking duplicate (MPI_Comm_idup; with ``info``: MPI_Comm_idup_with_info).

        Returns ``(comm, request)``: ``comm`` is usable once ``request`` completes.  The
        context id is agreed by nonblocking maxima driven by the engine, so the call never
        waits for the other ranks."""
        call = "Comm.Idup"
        try:
            self._check(call)
            info_arg(info, call)
            c = type(self).__new__(type(self))
            c._set_null()
            t = self._ctag()  # in call order on every rank
            send, recv = _np.zeros(1, _np.int64), _np.zeros(1, _np.int64)
            coll = _calls.allreduce(self, send, recv, _MAX, call)
            j = joint(1)

            def start_max(values, attempt):
                send[0] = values[0]
                coll.tag = idup_tag(t, attempt)
                return _coll_exec.start(coll), lambda: (int(recv[0]),)

            def done(ctx, err, errmsg):
                if not err:
                    try:
                        self._dup_into(c, ctx, info)
                    except MPIException as e:  # a copy callback failed: the request fails
                        j.err, j.errmsg = e.Get_error_class(), str(e)
                else:
                    j.err, j.errmsg = err, errmsg
                part_done(j, j)

            # part_done(j, j) reads j's own fields: give it a status of a collective
            j.st_source, j.st_tag, j.st_nbytes = -1, -1, 0
            _ctxid.Allocation(start_max, (self._ctx, 0, t), done).start()
            return c, Request._of(j, self, None, (coll, send, recv))
        except MPIException as e:
            self._raise(e)

    def Idup_with_info(self, info) -> tuple:
        """Nonblocking duplicate with new info hints (MPI_Comm_idup_with_info)."""
        info_arg(info, "Comm.Idup_with_info", none_ok=False)
        return self.Idup(info)

    def Split(self, color: int = 0, key: int = 0) -> "Intracomm":
        """Split into disjoint communicators by color, ordered by key then rank
        (MPI_Comm_split); ``color=UNDEFINED`` gives COMM_NULL."""
        return self._split_checked(color, key)

    def Split_type(self, split_type: int, key: int = 0, info=None) -> "Intracomm":
        """Split by a hardware resource (MPI_Comm_split_type).

        ``COMM_TYPE_SHARED``: the ranks that share memory (one node).
        ``COMM_TYPE_HW_GUIDED`` and ``COMM_TYPE_RESOURCE_GUIDED``: the resource named by the
        info key ``"mpi_hw_resource_type"``; gpumpi knows ``"mpi_shared_memory"`` (the node),
        and gives COMM_NULL for any other (as MPI requires for unknown resources).
        ``COMM_TYPE_HW_UNGUIDED``: the next smaller level of the hierarchy, naming it in
        ``info``; gpumpi knows only the node, so this is COMM_NULL unless the communicator
        spans several nodes.  ``UNDEFINED``: COMM_NULL."""
        call = "Comm.Split_type"
        try:
            self._check(call)
            split_type, key = int_arg(split_type, call, "split_type"), int_arg(key, call, "key")
            info_arg(info, call)
            if split_type not in SPLIT_TYPES:
                raise error(ERR_ARG, f"{call}: invalid split_type ({split_type})")
            node = node_of(self._rw[self._rank])
            color = UNDEFINED
            if split_type == COMM_TYPE_SHARED:
                color = node
            elif split_type in (COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED):
                if info is not None and info and info.Get("mpi_hw_resource_type") == "mpi_shared_memory":
                    color = node
            elif split_type == COMM_TYPE_HW_UNGUIDED:
                nodes = {node_of(w) for w in self._rw}
                if len(nodes) > 1:
                    color = node
            ctx, rows = self._agree(call, (color, key))
            if color == UNDEFINED:
                return Intracomm()
            if split_type == COMM_TYPE_HW_UNGUIDED and info is not None and info:
                info.Set("mpi_hw_resource_type", "mpi_shared_memory")
            members = sorted((v[1], r) for r, v in enumerate(rows) if v[0] == color)
            return self._new(ctx, [self._rw[r] for _, r in members])
        except MPIException as e:
            self._raise(e)

    def _subgroup(self, group, call: str) -> list:
        """Communicator ranks of ``group``'s members, in group order; ERR_GROUP unless the
        group is a subgroup of this communicator's."""
        if not isinstance(group, Group):
            raise TypeError(f"{call}: expecting a Group (got {type(group).__name__})")
        group._check(call)
        index = {w: r for r, w in enumerate(self._rw)}
        try:
            return [index[w] for w in group._ranks]
        except KeyError:
            raise error(ERR_GROUP, f"{call}: the group is not a subgroup of the communicator's "
                                   f"(group size {len(group._ranks)}, communicator size {self._size})") from None

    def Create(self, group) -> "Intracomm":
        """A communicator of the members of ``group`` (MPI_Comm_create): collective over this
        communicator; COMM_NULL on ranks outside the group.  As MPI-2.2 allows, ranks may pass
        different groups as long as those are disjoint: each group gets its communicator."""
        call = "Comm.Create"
        try:
            self._check(call)
            members = self._subgroup(group, call)
            ctx, _ = self._agree(call)
            if self._rank not in members:
                return Intracomm()
            return self._new(ctx, [self._rw[r] for r in members])
        except MPIException as e:
            self._raise(e)

    def Create_group(self, group, tag: int = 0) -> "Intracomm":
        """A communicator of the members of ``group`` (MPI_Comm_create_group): collective over
        the group's members only; ``tag`` tells apart concurrent calls on one communicator."""
        call = "Comm.Create_group"
        try:
            self._check(call)
            tag = self._stag(tag, call)
            members = self._subgroup(group, call)
            if self._rank not in members:
                raise error(ERR_GROUP, f"{call}: the calling process is not in the group (rank {self._rank})")
            ctx, _ = self._agree(call, (), members=members, tag=-(2 + (tag & 0x1FFFFFFF)),
                                 key=(self._ctx, 1, tag))
            return self._new(ctx, [self._rw[r] for r in members])
        except MPIException as e:
            self._raise(e)

    @classmethod
    def Create_from_group(cls, group, stringtag: str = "org.mpi4py", info=None, errhandler=None) -> "Intracomm":
        """A communicator of the members of ``group`` without a parent communicator
        (MPI_Comm_create_from_group): collective over the group's members, who pass the same
        ``stringtag``; concurrent calls over overlapping groups pass different ones."""
        call = "Intracomm.Create_from_group"
        if not isinstance(group, Group):
            raise TypeError(f"{call}: expecting a Group (got {type(group).__name__})")
        if not isinstance(stringtag, str):
            raise TypeError(f"{call}: stringtag must be a str ({type(stringtag).__name__})")
        info_arg(info, call)
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler or None (got {type(errhandler).__name__})")
        world = comm_world()
        group._check(call)
        if group._me < 0 or group._me not in group._index:
            raise error(ERR_GROUP, f"{call}: the calling process is not in the group (size {len(group._ranks)})")
        h = zlib.crc32(stringtag.encode())
        ctx, _ = world._agree(call, (), members=list(group._ranks), tag=-(GROUP_TAGS + (h & 0x1FFFFFFF)),
                              key=(-1, 2, h))
        c = world._new(ctx, group._ranks, info=info)
        if errhandler is not None:
            c._errh = Errhandler(errhandler)
        return c

    def Scan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Inclusive prefix reduction (MPI_Scan)."""
        return self._coll_block(_calls.scan, "Scan", sendbuf, recvbuf, op, stream=stream)

    def Exscan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Exclusive prefix reduction (MPI_Exscan)."""
        return self._coll_block(_calls.exscan, "Exscan", sendbuf, recvbuf, op, stream=stream)

    def Iscan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking inclusive prefix reduction (MPI_Iscan)."""
        return self._coll_req(_calls.scan, "Iscan", sendbuf, recvbuf, op, stream=stream)

    def Iexscan(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking exclusive prefix reduction (MPI_Iexscan)."""
        return self._coll_req(_calls.exscan, "Iexscan", sendbuf, recvbuf, op, stream=stream)

    def Scan_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent inclusive prefix reduction (MPI_Scan_init)."""
        return self._coll_init(_calls.scan, "Scan_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def Exscan_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent exclusive prefix reduction (MPI_Exscan_init)."""
        return self._coll_init(_calls.exscan, "Exscan_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def scan(self, sendobj, op=SUM):
        """Inclusive prefix reduction of Python objects (MPI_Scan)."""
        return self._ocoll(_lower.scan, "scan", sendobj, op)

    def exscan(self, sendobj, op=SUM):
        """Exclusive prefix reduction of Python objects; None at rank 0 (MPI_Exscan)."""
        return self._ocoll(lambda c, o, p, call: _lower.scan(c, o, p, call, True), "exscan", sendobj, op)

    # --- topology constructors (math in gpumpi.topology; the classes at the end of this file) ----
    def Create_cart(self, dims, periods=None, reorder: bool = False) -> "Cartcomm":
        """Create a Cartesian topology communicator (MPI_Cart_create).

        ``reorder`` is accepted and not used: rank ``r`` keeps rank ``r`` (as ``Cart_map``
        says); ranks beyond the grid get ``COMM_NULL``.
        """
        call = "Intracomm.Create_cart"
        try:
            self._check(call)
            dims = _topology.ints(dims, call, "dims")
            periods = periods_arg(periods, len(dims), call)
            n = _topology.cart_check(dims, self._size, call)
            return topo_comm(self, CLASSES["cart"], n, call, lambda r: _topology.Cart(dims, periods, r))
        except MPIException as e:
            self._raise(e)

    def Create_graph(self, index, edges, reorder: bool = False) -> "Graphcomm":
        """Create a graph topology communicator (MPI_Graph_create).

        ``index`` may also be the standard adjacency form with a leading 0 (mpi4py's
        extension); ``reorder`` is not used (ranks keep their order).
        """
        call = "Intracomm.Create_graph"
        try:
            self._check(call)
            index, edges = graph_args(index, edges, call)
            n = _topology.graph_nodes(index, edges, self._size, call)
            return topo_comm(self, CLASSES["graph"], n, call, lambda r: _topology.Graph(index, edges, r))
        except MPIException as e:
            self._raise(e)

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None, destweights=None,
                                   info=None, reorder: bool = False) -> "Distgraphcomm":
        """Create a distributed graph communicator from each process's own neighbors
        (MPI_Dist_graph_create_adjacent); ``reorder`` is not used."""
        call = "Intracomm.Create_dist_graph_adjacent"
        try:
            self._check(call)
            info_arg(info, call)
            srcs = [] if sources is None else _topology.ints(sources, call, "sources")
            sw = weights_arg(sourceweights, len(srcs), call)
            dsts = [] if destinations is None else _topology.ints(destinations, call, "destinations")
            dw = weights_arg(destweights, len(dsts), call)
            weighted = _topology.adjacent_check(srcs, dsts, sw, dw, self._size, call)
            rec = _topology.DistGraph(srcs, dsts, sw or (), dw or (), weighted)
            return topo_comm(self, CLASSES["distgraph"], self._size, call, lambda r: rec)
        except MPIException as e:
            self._raise(e)

    def Create_dist_graph(self, sources, degrees, destinations, weights=None, info=None,
                          reorder: bool = False) -> "Distgraphcomm":
        """Create a distributed graph communicator from edges any process may name
        (MPI_Dist_graph_create): an all-gather of the edge lists; ``reorder`` is not used."""
        call = "Intracomm.Create_dist_graph"
        try:
            self._check(call)
            info_arg(info, call)
            srcs = _topology.ints(sources, call, "sources")
            degs = _topology.ints(degrees, call, "degrees", len(srcs))
            dsts = _topology.ints(destinations, call, "destinations", sum(degs))
            ws = weights_arg(weights, len(dsts), call)
            bad = None
            try:
                _topology.dist_graph_check(srcs, degs, dsts, ws, self._size, call)
            except MPIException as e:  # still take part in the exchange, so no process waits
                bad = e
            specs = _lower.allgather(self, None if bad else (srcs, degs, dsts, ws), call)
            if bad is not None:
                raise bad
            if any(sp is None for sp in specs):
                raise error(ERR_ARG, f"{call}: another process passed an invalid edge list "
                                     f"(ranks {[r for r, sp in enumerate(specs) if sp is None]})")
            ins, inw, outs, outw = _topology.dist_graph_adjacency(specs, self._rank)
            rec = _topology.DistGraph(ins, outs, inw, outw, ws is not None)
            return topo_comm(self, CLASSES["distgraph"], self._size, call, lambda r: rec)
        except MPIException as e:
            self._raise(e)

    def Cart_map(self, dims, periods=None) -> int:
        """This process's rank in a Cartesian grid, or UNDEFINED (MPI_Cart_map; no reordering)."""
        call = "Intracomm.Cart_map"
        try:
            self._check(call)
            dims = _topology.ints(dims, call, "dims")
            periods_arg(periods, len(dims), call)
            return _topology.cart_map(dims, self._size, self._rank, call)
        except MPIException as e:
            self._raise(e)

    def Graph_map(self, index, edges) -> int:
        """This process's rank in a graph, or UNDEFINED (MPI_Graph_map; no reordering)."""
        call = "Intracomm.Graph_map"
        try:
            self._check(call)
            index, edges = graph_args(index, edges, call)
            return _topology.graph_map(index, edges, self._size, self._rank, call)
        except MPIException as e:
            self._raise(e)

    def Create_intercomm(self, local_leader: int, peer_comm, remote_leader: int, tag: int = 0) -> "Intercomm":
        """Create an intercommunicator joining this group and another (MPI_Intercomm_create).

        Collective over this communicator and, at the same time, over the other group's.  The
        leaders (``local_leader`` here, ``remote_leader``: its rank in ``peer_comm``) exchange
        the groups over ``peer_comm`` with ``tag`` (point-to-point: no other message with that
        tag may be pending between them); ``peer_comm`` and ``remote_leader`` matter at the
        leader only.  The groups must be disjoint.

        Raises:
            MPI.Exception: ERR_RANK for a leader out of range (a bad remote leader fails the
                whole local group), ERR_COMM when the groups overlap, ERR_TAG for a bad tag.
        """
        call = "Intracomm.Create_intercomm"
        try:
            self._check(call)
            leader = int_arg(local_leader, call, "local_leader")
            if not 0 <= leader < self._size:
                raise error(ERR_RANK, f"{call}: invalid local leader ({leader}, communicator size {self._size})")
            return CLASSES["inter"].create_from_leaders(self, leader, peer_comm, remote_leader, self._stag(tag, call), call)
        except MPIException as e:
            self._raise(e)




CLASSES["intra"] = Intracomm
