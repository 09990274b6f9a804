"""The progress engine's failures and finalize (L5).

Theory of operation
===================
Failure: the launcher marks a dead rank in the job segment and bumps the epoch;
``progress()`` reads the epoch every pass, and operations that involve a dead peer fail
with ``ERR_PROC_FAILED`` (wildcard receives with ``ERR_PROC_FAILED_PENDING``) instead of
hanging.  A region transport that finds a peer's process gone while taking its data
(:class:`~gpumpi.ipc.base.PeerGone`) makes the engine treat that peer the same way, at once.

Finalize (:meth:`Failures.finalize_step`): MPI_Finalize returns only when this rank's part
in every communication is done; each rank publishes how far it got in the job segment
(FINALIZING, QUIESCENT, FINALIZED), and a send is given up only when its receiver can
never take it.  The class is a base of :class:`gpumpi._progress.Engine`; its state is the
engine's.
"""

from __future__ import annotations


from ._xfer import RECV, Xfer
from .constants import ANY_SOURCE
from .errors import ERR_OTHER, ERR_PROC_FAILED, ERR_PROC_FAILED_PENDING
from .ipc.jobseg import FINALIZED, FINALIZING, QUIESCENT

__all__ = ["Failures"]


class Failures:
    """Failed peers and MPI_Finalize's steps (a base of ``Engine``)."""

    def _on_failures(self) -> None:
        if self.lazy:
            self._unlazy()
        seg = self.seg
        self.epoch = seg.q[3]
        new = self.world.failed_ranks() - self.failed
        if new:
            self._fail_peers(new)

    def _peer_gone(self, peer: int) -> None:
        """A transport found ``peer``'s process gone (it exited or died, whatever the launcher
        has recorded yet): every operation with it fails now, as if it had failed."""
        if peer != self.rank and peer not in self.failed:
            self._fail_peers({peer})

    def _fail_peers(self, new: set) -> None:
        self.failed |= new
        for m, x in list(self.sends.items()):
            if x.peer in new:
                del self.sends[m]
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        for x in list(self.pushing):
            if x.peer in new:
                self.pushing.remove(x)
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        for x in list(self.direct):
            if x.peer in new:
                self._undirect(x)
                if x.kind == RECV:
                    self.pulls.pop((x.peer, x.msgid), None)
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.peer})")
        self.staging.reclaim(new)  # slots handed to the dead stay theirs forever otherwise
        for p in new:
            for x in self.tr.drop(p):
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {p})")
        for key, x in list(self.pulls.items()):
            if key[0] in new:
                del self.pulls[key]
                self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {key[0]})")
        for _src, x in list(self.matcher.posted_items()):
            if x.wpeer in new or x.wpeer == ANY_SOURCE:
                self.matcher.cancel_recv(x.ctx, x)
                self._fail_recv_for_failure(x)

    def _fail_recv_for_failure(self, x: Xfer) -> None:
        if x.wpeer == ANY_SOURCE:
            self._fail(x, ERR_PROC_FAILED_PENDING,
                       f"{x.call}: a process that may send this message failed (ranks {sorted(self.failed)})")
        else:
            self._fail(x, ERR_PROC_FAILED, f"{x.call}: peer process failed (rank {x.wpeer})")

    # --- finalize -------------------------------------------------------------------------
    def _publish(self, state: int) -> None:
        if state > self.fin_state:
            self.fin_state = state
            self.world.publish(state)

    def finalize_step(self) -> bool:
        """One pass of MPI_Finalize's wait (under the lock); True once this rank's part in every
        communication is done (see the module docstring).

        Sends given up (their receiver can never take them) complete with an error nobody
        will read; frames for ranks that read nothing any more are dropped.
        """
        self._publish(FINALIZING)
        seg = self.seg
        # the peers' states first, then drain the rings: what a peer wrote before it
        # published its state is read in this pass
        states = self.world.states() if seg is not None else [self.fin_state]
        while self.progress():
            pass
        failed = self.failed
        for p, st in enumerate(states):
            if (st >= FINALIZED or p in failed) and p != self.rank:
                for x in self.tr.drop(p):  # it reads nothing any more
                    self._fail(x, ERR_OTHER, f"{x.call}: rank {p} ended without receiving this message")
        for m, x in list(self.sends.items()):
            p = x.peer
            if p in failed or states[p] >= QUIESCENT:  # QUIESCENT: it will never match this send
                del self.sends[m]
                self._fail(x, ERR_OTHER, f"{x.call}: rank {p} finalized without receiving this message")
        for x in list(self.pushing):
            if x.peer in failed or states[x.peer] >= FINALIZED:
                self.pushing.remove(x)
                self._fail(x, ERR_OTHER, f"{x.call}: rank {x.peer} finalized before receiving this message")
        for key, x in list(self.pulls.items()):
            if states[key[0]] >= FINALIZED:
                del self.pulls[key]
                if x in self.direct:
                    self._undirect(x)
                self._fail(x, ERR_OTHER, f"{x.call}: rank {key[0]} finalized before its message arrived")
        idle = self.tr.idle()
        if idle and not self.pulls and not self.lazy and next(self.matcher.posted_items(), None) is None:
            self._publish(QUIESCENT)
        return idle and not self.sends and not self.pushing and not self.pulls and not self.direct

    def finalized(self) -> None:
        """Tell the peers this rank left Finalize: it reads nothing any more (and give the MPI
        library back what the frames between nodes hold, before it finalizes)."""
        self._publish(FINALIZED)
        if self.farframes is not None:
            self.farframes.close()

    def close(self) -> None:
        self.closed = True
        self.world.close()


