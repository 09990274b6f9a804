"""RMA synchronization epochs: which window call is legal when (L1, pure).

Theory of operation
===================
One :class:`Epochs` per window and process records the epochs MPI defines
(MPI-4.1 section 12.5) and decides, for every call, whether it is legal now.  It
moves no data and waits for nobody: the window runtime (:mod:`gpumpi.rma.local`, or
:mod:`gpumpi.rma.mpi` across nodes) asks first, then synchronizes, then tells it what
happened.  An illegal call raises ``MPI.Exception(ERR_RMA_SYNC)`` with the call, the
problem and the epoch state, before anything is changed, so a misused window stays
usable.

Access epochs (this process as origin), at most one kind at a time:

* **fence** -- ``Fence`` without ``MODE_NOSUCCEED`` *opens* one.  Until the first
  operation it is only *pending*, and a pending fence epoch may give way to a
  lock, ``Lock_all``, ``Start`` or ``Post`` (MPICH's rule: a fence followed by no
  RMA call does not start an epoch; mpi4py's tests lock right after a fence).
  Once an operation was issued, only another ``Fence`` ends it.
* **general active target** -- ``Start(group)`` until ``Complete``; operations
  only to members of the group.
* **passive target** -- ``Lock(rank)`` per target (shared or exclusive) until
  ``Unlock(rank)``, or ``Lock_all`` until ``Unlock_all``; operations and ``Flush``
  only to locked targets.

Exposure epochs (this process as target): fence (as above) or ``Post(group)``
until ``Wait`` (or a ``Test`` that returns true).  Access and exposure epochs
of the general active target kind may overlap (a process may Post, then Start).

``Free`` is legal only with no epoch open but a fence one (MPI: "MPI_WIN_FREE ...
requires that the process has completed its involvement in RMA").
"""

from __future__ import annotations

from ..constants import LOCK_EXCLUSIVE, LOCK_SHARED, MODE_NOSUCCEED
from ..errors import ERR_RMA_SYNC, error

__all__ = ["Epochs", "NONE", "FENCE_PENDING", "FENCE", "PSCW", "LOCK", "LOCK_ALL"]

NONE, FENCE_PENDING, FENCE, PSCW, LOCK, LOCK_ALL = "none", "fence (pending)", "fence", "start", "lock", "lock_all"


class Epochs:
    """The epoch state of one window in one process (see the module notes)."""

    __slots__ = ("access", "locks", "start_group", "post_group")

    def __init__(self) -> None:
        self.access = NONE
        self.locks: dict[int, int] = {}  # target -> LOCK_SHARED / LOCK_EXCLUSIVE (access == LOCK)
        self.start_group: frozenset = frozenset()  # targets of Start (access == PSCW)
        self.post_group: frozenset | None = None  # origins of Post (an exposure epoch) or None

    def __repr__(self) -> str:
        return f"<Epochs access={self.access} locks={self.locks} post={self.post_group}>"

    def _fail(self, call: str, problem: str) -> None:
        raise error(ERR_RMA_SYNC, f"{call}: {problem} (access epoch: {self.describe()}"
                                  f"{', exposure epoch: post' if self.post_group is not None else ''})")

    def describe(self) -> str:
        if self.access == LOCK:
            return "lock on " + ", ".join(f"{t} ({'shared' if k == LOCK_SHARED else 'exclusive'})"
                                          for t, k in sorted(self.locks.items()))
        if self.access == PSCW:
            return f"start on {sorted(self.start_group)}"
        return self.access

    # -- the calls, each checked before it acts -----------------------------------------------
    def fence(self, assertion: int, call: str = "Win.Fence") -> None:
        if self.access in (PSCW, LOCK, LOCK_ALL):
            self._fail(call, f"a fence cannot end or open an epoch inside a {self.access} epoch")
        if self.post_group is not None:
            self._fail(call, "a fence cannot close an exposure epoch opened by Post")
        self.access = NONE if assertion & MODE_NOSUCCEED else FENCE_PENDING

    def _leave_pending_fence(self, call: str) -> None:
        if self.access == FENCE:
            self._fail(call, "RMA operations were issued since the last Fence: close the fence epoch first")
        if self.access == FENCE_PENDING:
            self.access = NONE

    def start(self, group, call: str = "Win.Start") -> None:
        if self.access in (PSCW, LOCK, LOCK_ALL):
            self._fail(call, f"an access epoch is already open ({self.access})")
        self._leave_pending_fence(call)
        self.access = PSCW
        self.start_group = frozenset(group)

    def complete(self, call: str = "Win.Complete") -> frozenset:
        if self.access != PSCW:
            self._fail(call, "no access epoch was opened by Start")
        g = self.start_group
        self.access = NONE
        self.start_group = frozenset()
        return g

    def post(self, group, call: str = "Win.Post") -> None:
        if self.post_group is not None:
            self._fail(call, "an exposure epoch is already open (Post without Wait)")
        if self.access == FENCE:
            self._fail(call, "RMA operations were issued since the last Fence: close the fence epoch first")
        if self.access == FENCE_PENDING:
            self.access = NONE
        self.post_group = frozenset(group)

    def check_wait(self, call: str = "Win.Wait") -> frozenset:
        if self.post_group is None:
            self._fail(call, "no exposure epoch was opened by Post")
        return self.post_group

    def waited(self) -> None:
        self.post_group = None

    def lock(self, target: int, lock_type: int, call: str = "Win.Lock") -> None:
        if self.access in (PSCW, LOCK_ALL):
            self._fail(call, f"cannot lock a target inside a {self.access} epoch")
        if target in self.locks:
            self._fail(call, f"target {target} is already locked by this process")
        if self.access != LOCK:
            self._leave_pending_fence(call)
        self.access = LOCK
        self.locks[target] = lock_type

    def unlock(self, target: int, call: str = "Win.Unlock") -> int:
        if self.access != LOCK or target not in self.locks:
            self._fail(call, f"target {target} is not locked by this process")
        kind = self.locks.pop(target)
        if not self.locks:
            self.access = NONE
        return kind

    def lock_all(self, call: str = "Win.Lock_all") -> None:
        if self.access in (PSCW, LOCK, LOCK_ALL):
            self._fail(call, f"an access epoch is already open ({self.access})")
        self._leave_pending_fence(call)
        self.access = LOCK_ALL

    def unlock_all(self, call: str = "Win.Unlock_all") -> None:
        if self.access != LOCK_ALL:
            self._fail(call, "no epoch was opened by Lock_all")
        self.access = NONE

    def flush(self, target: int | None, call: str = "Win.Flush") -> None:
        """A flush of ``target`` (None: of all targets) needs a passive target epoch on it."""
        if self.access == LOCK_ALL:
            return
        if self.access == LOCK and (target is None or target in self.locks):
            return
        self._fail(call, "flush outside a passive target epoch" if target is None else
                   f"target {target} is not locked (flush needs a passive target epoch on it)")

    def operation(self, target: int, call: str) -> None:
        """An RMA operation to ``target``: legal in any access epoch that includes it."""
        a = self.access
        if a == LOCK_ALL or (a == LOCK and target in self.locks) or (a == PSCW and target in self.start_group):
            return
        if a in (FENCE_PENDING, FENCE):
            self.access = FENCE
            return
        self._fail(call, f"no access epoch includes target {target}")

    def free(self, call: str = "Win.Free") -> None:
        if self.access in (PSCW, LOCK, LOCK_ALL) or self.post_group is not None:
            self._fail(call, "the window has an epoch open")

    @property
    def exclusive(self) -> frozenset:
        return frozenset(t for t, k in self.locks.items() if k == LOCK_EXCLUSIVE)
