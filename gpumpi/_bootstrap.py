"""Who the ranks are, how to reach each, and where failures are reported (L4).

Theory of operation
===================
:func:`attach` builds the process's :class:`World` once, at initialisation:

* *who*: under the launcher, the job segment it left on ``GPUMPI_JOB_FD`` (checked
  against ``GPUMPI_RANK``/``GPUMPI_SIZE``; this rank's pid recorded there, and peers
  allowed to read our memory by cross-memory attach); without one, a singleton world of
  one rank.  (Under ``mpiexec``/``srun`` the ranks will come from mpi4py: the multi-node
  engine adds that branch.)
* *routes*: the frame transport (the job's rings) and, per memory kind, the region
  transports to try in order (``GPUMPI_TRANSPORTS``, :func:`gpumpi.ipc.base.routes`);
  per (peer, memory kind) the first that reaches the peer carries a message.
* *failures*: the job segment records dead ranks and bumps an epoch
  (:meth:`World.failed_ranks`, ``seg.q[3]``); the engine watches it.

The engine receives its transports from here and names none of them.
"""

from __future__ import annotations

import os

from . import _config
from .ipc import base as _ipc


class World:
    """The ranks of the job as this process sees them, and the transports that reach them."""

    def __init__(self, rank: int, size: int, seg, cfg) -> None:
        self.rank, self.size, self.seg, self.cfg = rank, size, seg, cfg
        self.launcher_pid = cfg.launcher_pid
        self.stage = (seg.stage_slots, seg.stage_slot) if seg is not None else (cfg.stage_slots, cfg.stage_chunk)
        self._pids: dict = {}
        from .ipc.shm import ShmTransport

        self.frames = ShmTransport(rank, size, seg, cfg.ring_size)
        self.names = _config.parse_transports(cfg.transports)
        self.regions = _ipc.routes(self.names, self)

    def pid(self, peer: int) -> int:
        """The process id of rank ``peer``."""
        pid = self._pids.get(peer)
        if pid is None:
            pid = os.getpid() if (peer == self.rank or self.seg is None) else self.seg.pid(peer)
            self._pids[peer] = pid
        return pid

    def failed_ranks(self) -> set:
        """The ranks the launcher has recorded as dead."""
        return set(self.seg.failed_ranks()) if self.seg is not None else set()

    def close(self) -> None:
        for lst in self.regions.values():
            for t in lst:
                t.close()
        self.frames.close()


def attach(cfg=None) -> World:
    """This process's world: the launcher's job (``cfg.launched``) or a singleton."""
    cfg = cfg or _config.get()
    if not cfg.launched:
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
