"""Global Arrays synchronization: ``sync``, ``fence``, ``mask_sync``, the operations' syncs, lock words, mutexes (L6).

Theory of operation
===================
One-sided operations are complete when they return (:mod:`gpumpi.ga.transfers`), so what is
left to synchronize is ordering between processes: ``sync`` flushes every window and is a
barrier of the default group (and closes any open fence); ``pgroup_sync`` the same over one
group; ``fence`` flushes the windows this process wrote to since ``init_fence``
(:func:`fence_touch` records them while a fence is open).

Collective array operations sync at entry and exit (:func:`enter_op`, :func:`leave_op`) unless
``mask_sync`` turned one of them off for the next one: ``sync`` for arrays on the default
group (:func:`sync_in`, :func:`sync_out`), a flush plus a barrier of the array's own group
otherwise.

Lock words are int64 words in a window, taken with ``Compare_and_swap`` (0 -> holder rank +
1) and released the same way (:func:`take_lock_word`, :func:`give_lock_word`), so a waiter sees
a dead holder and fails instead of waiting forever.  Mutexes are such words in a window of
the default group, mutex ``m`` on member ``m % size``; each array's accumulate locks are
another (:mod:`gpumpi.ga.transfers`).
"""

from __future__ import annotations

import numpy as np

from .._services import backoff, failed_ranks, poll
from . import state
from .groups import default_group, group_comm, group_or_default, member_comm
from .state import GAArray, GAError, GAGroup, mpi, started

__all__ = [
    "create_mutexes", "destroy_mutexes", "enter_op", "fence", "fence_touch", "flush_windows", "give_lock_word",
    "init_fence", "leave_op", "lock", "mask_sync", "pgroup_sync", "sync", "sync_in", "sync_out", "take_lock_word",
    "unlock",
]


# --- synchronization --------------------------------------------------------------------------
def flush_windows() -> None:
    """Complete this process's operations on every array of a group it is in (``Flush_all`` of
    each window): the first half of ``sync``, ``pgroup_sync`` and the syncs of collective
    operations."""
    for a in list(state.S.arrays.values()):
        if a.allocated and a.group.comm is not None:
            a.win.Flush_all()


def sync() -> None:
    """Complete every outstanding GA operation and barrier the default group (GA_Sync)."""
    st = started()
    flush_windows()
    st.fence_depth = 0
    st.fenced.clear()
    member_comm(default_group(), "sync").Barrier()


def init_fence() -> None:
    """Start tracking this process's operations for :func:`fence` (GA_Init_fence)."""
    started().fence_depth += 1


def fence() -> None:
    """Wait until every operation since ``init_fence`` is complete at its target (GA_Fence)."""
    st = started()
    if st.fence_depth <= 0:
        raise GAError("fence: no init_fence to match")
    for h in list(st.fenced):
        a = st.arrays.get(h)
        if a is not None and a.allocated:
            a.win.Flush_all()
    st.fence_depth -= 1
    if not st.fence_depth:
        st.fenced.clear()


def mask_sync(first, last) -> None:
    """Skip the sync at the start (``first`` false) and/or end (``last`` false) of the next
    collective array operation only (GA_Mask_sync)."""
    started().mask = [bool(first), bool(last)]


def sync_in() -> None:
    """The implicit sync at the start of a collective array operation (unless masked)."""
    if state.S.mask[0]:
        sync()
    state.S.mask[0] = True


def sync_out() -> None:
    """The implicit sync at the end of a collective array operation (unless masked)."""
    if state.S.mask[1]:
        sync()
    state.S.mask[1] = True


def _gsync(a) -> None:
    """Complete every outstanding operation and barrier ``a``'s group (GA_Pgroup_sync)."""
    flush_windows()
    group_comm(a).Barrier()


def _on_default(a) -> bool:
    return a.group.handle == state.S.default


def enter_op(a) -> None:
    """The sync at the start of a collective operation on ``a`` (unless masked)."""
    if _on_default(a):
        sync_in()
        return
    st = state.S
    if st.mask[0]:
        _gsync(a)
    st.mask[0] = True


def leave_op(a) -> None:
    """The sync at the end of a collective operation on ``a`` (unless masked)."""
    if _on_default(a):
        sync_out()
        return
    st = state.S
    if st.mask[1]:
        _gsync(a)
    st.mask[1] = True


def pgroup_sync(pgroup: int = -1) -> None:
    """Complete this process's GA operations and barrier the group (GA_Pgroup_sync)."""
    started()
    g = group_or_default(pgroup, "pgroup_sync")
    flush_windows()
    member_comm(g, "pgroup_sync").Barrier()


def fence_touch(a: GAArray) -> None:
    """Remember that this process wrote to ``a``, for the next :func:`fence` (if a fence is open)."""
    if state.S.fence_depth:
        state.S.fenced.add(a.handle)


def take_lock_word(win, owner: int, disp: int, group: GAGroup, call: str) -> None:
    """Take the lock word ``disp`` of ``owner`` in ``win`` (compare-and-swap 0 -> rank + 1),
    progressing and backing off while another process holds it; a holder that failed makes
    this an ``ERR_PROC_FAILED`` error instead of a wait without end."""
    me = group.me
    mine, zero, res = _LOCKBUF[0], _LOCKBUF[1], _LOCKBUF[2]
    mine[0] = me + 1
    spins = 0
    while True:
        win.Compare_and_swap(mine, zero, res, owner, disp)
        if res[0] == 0:
            return
        holder = int(res[0]) - 1
        if group.ranks[holder] in failed_ranks():
            from ..errors import ERR_PROC_FAILED, error

            raise error(ERR_PROC_FAILED, f"{call}: the lock of process {owner} is held by failed process {holder}")
        spins += 1
        poll()
        backoff(spins)


def give_lock_word(win, owner: int, disp: int, group: GAGroup) -> int:
    """Release a lock word taken by :func:`take_lock_word`; the previous value (rank + 1 if it was ours)."""
    mine, zero, res = _LOCKBUF[0], _LOCKBUF[1], _LOCKBUF[2]
    mine[0] = group.me + 1
    win.Compare_and_swap(zero, mine, res, owner, disp)
    return int(res[0])


_LOCKBUF = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))


# -- mutexes
class _Mutexes:
    __slots__ = ("n", "win", "held", "comm", "group")

    def __init__(self, n: int, group: GAGroup) -> None:
        comm = group.comm
        self.group = group
        MPI = mpi()
        self.n = n
        self.comm = comm
        size = comm.Get_size()
        mine = sum(1 for m in range(n) if m % size == comm.Get_rank())
        self.win = MPI.Win.Allocate(8 * mine, 8, comm=comm)
        mem = np.frombuffer(self.win.tomemory(), np.int64) if mine else None
        if mem is not None:
            mem[:] = 0
        comm.Barrier()
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.held: set = set()


def create_mutexes(number: int) -> bool:
    """Create mutexes ``0 .. number-1`` (GA_Create_mutexes); False if a set exists. Collective."""
    st = started()
    n = int(number)
    if n < 0:
        raise ValueError(f"create_mutexes: negative number ({n})")
    if st.mutexes is not None:
        return False
    member_comm(default_group(), "create_mutexes")
    st.mutexes = _Mutexes(n, default_group())
    return True


def destroy_mutexes() -> bool:
    """Free the mutexes (GA_Destroy_mutexes). Collective."""
    st = started()
    mx = st.mutexes
    if mx is None:
        return False
    if mx.held:
        raise GAError(f"destroy_mutexes: mutexes {sorted(mx.held)} are still locked by this process")
    mx.comm.Barrier()
    mx.win.Unlock_all()
    mx.win.Free()
    st.mutexes = None
    return True


def _mutex(m, call: str):
    mx = state.S.mutexes
    if mx is None:
        raise GAError(f"{call}: no mutexes (create_mutexes first)")
    m = int(m)
    if not 0 <= m < mx.n:
        raise ValueError(f"{call}: mutex {m} out of range ({mx.n} mutexes)")
    size = mx.comm.Get_size()
    return mx, m, m % size, m // size


def lock(mutex) -> None:
    """Take a mutex, waiting while another process holds it (GA_Lock)."""
    mx, m, owner, disp = _mutex(mutex, "lock")
    if m in mx.held:
        raise GAError(f"lock: mutex {m} is already locked by this process")
    take_lock_word(mx.win, owner, disp, mx.group, "lock")
    mx.held.add(m)


def unlock(mutex) -> None:
    """Release a mutex this process holds (GA_Unlock)."""
    mx, m, owner, disp = _mutex(mutex, "unlock")
    if m not in mx.held:
        raise GAError(f"unlock: mutex {m} is not locked by this process")
    mx.win.Flush_all()  # what was written under the mutex is complete before the next holder reads
    prev = give_lock_word(mx.win, owner, disp, mx.group)
    mx.held.discard(m)
    if prev != mx.comm.Get_rank() + 1:
        raise GAError(f"unlock: mutex {m} was held by {prev - 1}, not by this process")
