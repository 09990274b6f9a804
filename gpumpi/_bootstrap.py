"""Who the ranks are, how to reach each, and where failures are reported (L4).

Theory of operation
===================
:func:`attach` builds the process's :class:`World` once, at initialisation:

* *who*: under the launcher, the job segment it left on ``GPUMPI_JOB_FD`` (checked
  against ``GPUMPI_RANK``/``GPUMPI_SIZE``; this rank's pid recorded there, and peers
  allowed to read our memory by cross-memory attach).  Under an MPI launcher
  (``mpiexec``, ``srun``: ``Config.under_mpi``), rank and size come from mpi4py and the
  nodes from ``Split_type(COMM_TYPE_SHARED)`` (or ``GPUMPI_SIM_NODES`` pretend nodes); the
  lowest rank of each node creates the node's segment (the same layout, one slot per rank
  of the node) and the others open it through ``/proc/<pid>/fd`` (:func:`_attach_mpi`).
  Without either, a singleton world of one rank.
* *nodes*: ``node[r]`` for every world rank; ``local[r]``, the rank's index in this node's
  segment (-1: another node); ``far``, the ranks of other nodes.  Ranks of one node talk
  through the segment; ranks of other nodes only through the ``mpi`` transport.
* *routes*: the frame transport (the node's rings; frames for other nodes go on to
  :class:`gpumpi.ipc.mpi.MpiFrames`) and, per memory kind, the region transports to try in
  order (``GPUMPI_TRANSPORTS``, :func:`gpumpi.ipc.base.routes`); per (peer, memory kind)
  the first that reaches the peer carries a message.
* *failures*: the job segment records dead ranks and bumps an epoch
  (:meth:`World.failed_ranks`, ``seg.q[3]``); the engine watches it.  Under an MPI launcher
  nobody marks the segment: a failure ends the job, as the launcher does (``abort``).
* *finalize states*: :meth:`World.states` and :meth:`World.publish` -- the segment's state
  words for the node, STATE frames for the other nodes.

The engine receives its transports from here and names none of them.
"""

from __future__ import annotations

import os

from . import _config
from ._protocol import HLEN as _HLEN
from .ipc import base as _ipc


class World:
    """The ranks of the job as this process sees them, and the transports that reach them."""

    def __init__(self, rank: int, size: int, seg, cfg, node=None, mpi=None) -> None:
        self.rank, self.size, self.seg, self.cfg = rank, size, seg, cfg
        self.launcher_pid = cfg.launcher_pid
        self.stage = (seg.stage_slots, seg.stage_slot) if seg is not None else (cfg.stage_slots, cfg.stage_chunk)
        self._pids: dict = {}
        self.node = list(node) if node is not None else [0] * size
        me = self.node[rank]
        members = [r for r in range(size) if self.node[r] == me]
        self.local = [-1] * size
        for i, r in enumerate(members):
            self.local[r] = i
        self.members = members  # this node's world ranks, in the order of the segment's slots
        self.far = [r for r in range(size) if self.node[r] != me]
        self.mpi = mpi  # (mpi4py's MPI, the private duplicate of its COMM_WORLD), under an MPI launcher
        from .ipc.shm import ShmTransport

        far = None
        if self.far:
            from .ipc.mpi import MpiFrames
            from .ipc.ring import max_frame

            ring = seg.ring_size
            far = MpiFrames(mpi[0], mpi[1], self.far, max_frame(ring) - _HLEN, cfg.mpi_eager)
        self.frames = ShmTransport(rank, size, seg, cfg.ring_size, self.local, far)
        self.names = _config.parse_transports(cfg.transports)
        self.regions = _ipc.routes(self.names, self)

    def near(self, peer: int) -> bool:
        """Whether ``peer`` runs on this node (shares its memory)."""
        return self.local[peer] >= 0

    def pid(self, peer: int) -> int:
        """The process id of rank ``peer`` (a rank of this node)."""
        pid = self._pids.get(peer)
        if pid is None:
            pid = os.getpid() if (peer == self.rank or self.seg is None) else self.seg.pid(self.local[peer])
            self._pids[peer] = pid
        return pid

    def failed_ranks(self) -> set:
        """The ranks the launcher has recorded as dead."""
        if self.seg is None:
            return set()
        return {self.members[i] for i in self.seg.failed_ranks()}

    def states(self) -> list:
        """Every rank's finalize state word (``jobseg``), in world rank order."""
        seg = self.seg
        if seg is None:
            return [0] * self.size
        t = seg.states()
        far = self.frames.far
        return [t[i] if i >= 0 else far.state(r) for r, i in enumerate(self.local)]

    def publish(self, state: int) -> None:
        """Raise this rank's state word to ``state``, for the node and for the other nodes."""
        if self.seg is not None:
            self.seg.set_state(self.local[self.rank], state)
        if self.frames.far is not None:
            self.frames.far.publish(state)

    def close(self) -> None:
        for lst in self.regions.values():
            for t in lst:
                t.close()
        self.frames.close()
        if self.mpi is not None and not self.mpi[0].Is_finalized():
            try:
                self.mpi[1].Free()
            except Exception:  # noqa: BLE001 -- MPI already finalized by the program
                pass


def attach(cfg=None) -> World:
    """This process's world: the launcher's job (``cfg.launched``), an MPI launcher's job
    (``cfg.under_mpi``), or a singleton."""
    cfg = cfg or _config.get()
    if not cfg.launched:
        if cfg.under_mpi or _mpi_initialized():
            return _attach_mpi(cfg)
        return World(0, 1, None, cfg)
    from .ipc import cma
    from .ipc.jobseg import JobSegment

    seg = JobSegment(cfg.job_fd)
    if seg.nranks != cfg.size or not 0 <= cfg.rank < cfg.size:
        raise RuntimeError(
            f"gpumpi: job segment does not match the environment (ranks {seg.nranks}, "
            f"GPUMPI_SIZE {cfg.size}, GPUMPI_RANK {cfg.rank})")
    cma.allow_peers()
    seg.set_attached(cfg.rank, os.getpid())
    return World(cfg.rank, cfg.size, seg, cfg)


def _mpi_initialized() -> bool:
    """Whether the program initialised MPI through the installed mpi4py before gpumpi."""
    import sys

    mod = sys.modules.get("mpi4py.MPI")
    if mod is None or getattr(sys.modules.get("mpi4py"), "__gpumpi__", False):
        return False
    try:
        return bool(mod.Is_initialized()) and not mod.Is_finalized()
    except Exception:  # noqa: BLE001
        return False


def _attach_mpi(cfg) -> World:
    """The world of a job an MPI launcher started: rank, size and nodes from mpi4py, and the
    node's segment, created by the node's lowest rank and opened by the others."""
    import dataclasses

    from . import _memfd
    from .ipc import cma
    from .ipc import mpi as _mpi
    from .ipc.jobseg import JobSegment, auto_ring_size

    M = _mpi.mpi4py()
    comm = M.COMM_WORLD.Dup()  # private: gpumpi's traffic never meets the program's own
    rank, size = comm.Get_rank(), comm.Get_size()
    nodes = _mpi.node_ids(comm, M, cfg.sim_nodes)
    members = [r for r in range(size) if nodes[r] == nodes[rank]]
    local = comm.Split(nodes[rank], rank)
    try:
        if local.Get_rank() == 0:
            seg = JobSegment.create(len(members), cfg.ring_size or auto_ring_size(len(members)), cfg.stage_chunk,
                                    cfg.stage_slots)
            local.bcast((os.getpid(), seg.fd), root=0)
        else:
            pid, fd = local.bcast(None, root=0)
            mine = _memfd.open_peer(pid, fd)
            seg = JobSegment(mine)
        local.Barrier()  # the creator keeps its descriptor open until every rank opened the segment
    finally:
        local.Free()
    cma.allow_peers()
    seg.set_attached(members.index(rank), os.getpid())
    cfg = dataclasses.replace(cfg, rank=rank, size=size, local_rank=members.index(rank), local_size=len(members))
    _config.set_current(cfg)
    return World(rank, size, seg, cfg, nodes, (M, comm))
