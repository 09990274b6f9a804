"""The one-node window runtime behind ``MPI.Win``: every member's memory reached without its owner (L5).

Theory of operation
===================
A window is memory that every member exposes, plus a small *control block* per
member, both reachable by every other member of the node without the owner's
help.  Creation is collective over the communicator: each member describes what
it exposes, the descriptions are all-gathered, and each member maps or opens the
others' memory once.  After that every operation is carried out by the origin
alone, at call time, so a target asleep outside gpumpi delays nothing.

How an origin reaches a target's memory: through the transports, never by itself.  Each
member asks the one-sided region transports (``ONE_SIDED`` in :mod:`gpumpi.ipc.base`,
those with ``ATOMICS`` first) to expose its memory; the first that reaches every other
member and can expose that memory wins, and its description travels to the members, who
attach it (:func:`gpumpi.ipc.base.expose`, :func:`~gpumpi.ipc.base.attach`).  So the
route is agreed once, at creation, and every origin -- the owner included -- reaches a
member's memory the same way.  Today that means:

* ``shm`` -- memory of a memfd (``Win.Allocate``, ``Allocate_shared``, ``Win.Create`` on
  ``MPI.Alloc_mem`` memory, found through :func:`gpumpi._memfd.find`): every member maps it
  (a shared window's one segment through each member's own mapping), atomically updated
  with the CPU's instructions;
* ``cma`` -- a peer's private memory (``Win.Create`` on a NumPy array or a bytearray,
  dynamic windows): ``process_vm_writev``/``readv`` by block run; no atomics;
* ``self`` -- a window of one member: its own memory;
* ``cuda_ipc`` (``self`` for one member) -- device memory, ours or a peer's opened by its
  IPC handle: copies on gpumpi's copy stream, synchronized before the call returns;
  accumulates and compare-and-swap are device atomics in kernels the origin launches on
  the mapped memory (:mod:`gpumpi.kernels.atomics`).  Simulated device memory takes this
  path too, through the simulated adapter (whose "kernels" are the host instructions on
  its shared mapping, atomic between processes).

A member's :class:`Region` holds the transport's remote (:class:`gpumpi.ipc.base.Remote`)
and copies its ``base``, ``mapped`` and ``atomic``: where the memory is mapped here, puts
and gets are NumPy copies through the datatype plans; elsewhere byte runs go through the
remote's ``read``/``write``.  The control blocks are exposed the same way (memfds: ``shm``).

Accumulates are element-wise atomic.  Where the route is atomic (``Region.atomic``:
every origin updates the same physical memory with the CPU, or with device kernels) and
the element type has an atomic instruction (the remote's ``supported``), each
element is updated with one (``atomicrmw``, or a ``cmpxchg`` loop);
``Fetch_and_op`` and ``Compare_and_swap`` are one instruction each.  Everywhere else (private memory by
CMA, complex, ``long double`` and pair types)
an accumulate holds the target's *accumulate lock* for its read-modify-write, and
every origin takes the same path for that target, so updates never interleave.  So
does an element of mapped memory at an address that is no multiple of its size (MPI
sets no alignment rule; an instruction needs one): every origin of that element and
type finds it misaligned and takes the lock.

The control block (a memfd per member, mapped by all; 64-bit words):

* ``[0]`` the window lock: 0 free; ``EXCL | (holder + 1)`` held exclusively;
  otherwise the number of shared holders, each of which also sets its flag in
  ``shared[origin]``;
* ``[1]`` the accumulate lock, ``holder + 1`` or 0;
* ``[2]``/``[3]`` the sequence number (odd while changing) and the entry count of
  the attach table of a dynamic window;
* ``posted[r]``, ``completed[r]``: how many ``Post``s member ``r`` made to us,
  and how many ``Complete``s it made to us (each side counts what it consumed);
* ``shared[r]``; the attach table (address, length pairs).

Locks record their holders, so a waiter sees a dead holder (the engine's failed
set, :func:`gpumpi._services.failed_ranks`) and fails with ``ERR_PROC_FAILED`` instead of
waiting forever.  Every wait progresses the engine (a rank blocked on a lock still serves
point-to-point traffic) with the engine's backoff (:func:`gpumpi._services.wait_until`);
the runtime is reached only through :mod:`gpumpi._services`.

Synchronization calls are checked by :class:`gpumpi.rma.epochs.Epochs` before they
act.  After every change of the lock epochs, :attr:`Window.near` lists the targets that
the open passive target epoch includes and whose memory is mapped here
(``Region.mapped`` and ``atomic``): ``Win``'s near path (:mod:`gpumpi.rma.near`) serves those without
asking the epochs again.  ``Fence`` is a barrier on the window's private communicator
(operations are complete when issued, so a fence only orders); ``Post``/``Complete``
bump the peer's counter, ``Start`` and ``Wait`` wait for them (``Start`` lazily, at the
first operation to a target or at ``Complete``); ``Flush*`` and ``Sync`` are memory
barriers (and a device synchronization for device windows).

The origin's side of an operation (its bytes packed, its types checked) is
:mod:`gpumpi.rma.origin`; this module moves packed bytes to and from the target.
"""

from __future__ import annotations

import os

import numpy as np

from .. import _memfd, _services
from ..ipc import base
from ..ipc.onesided import atomics
from .._arrays import PEEK_OK
from ..constants import LOCK_EXCLUSIVE, MODE_NOCHECK
from ..datatypes.plan import plan_for
from ..errors import ERR_ARG, ERR_PROC_FAILED, ERR_RMA_ATTACH, ERR_RMA_RANGE, error
from .epochs import Epochs

__all__ = ["Window", "Region", "EXCL", "ATTACH_MAX", "atomics", "elements", "byte_runs"]

_U8 = np.dtype(np.uint8)
EXCL = 1 << 62
ATTACH_MAX = 256
_LOCK, _ACC, _SEQ, _NATT, _HDR = 0, 1, 2, 3, 8


def _raw_array(addr: int, nbytes: int) -> np.ndarray:
    """A writable ``uint8`` array over ``nbytes`` bytes at ``addr`` (empty for none)."""
    if nbytes <= 0:
        return np.empty(0, _U8)
    import ctypes

    return np.frombuffer((ctypes.c_ubyte * nbytes).from_address(addr), _U8)


class Region:
    """One member's exposed memory as this process reaches it (see the module notes): ``rem`` the
    transport's :class:`gpumpi.ipc.base.Remote` (None: nothing exposed, or the runtime across
    nodes), whose ``base``, ``mapped`` and ``atomic`` are copied here for the hot paths."""

    __slots__ = ("rank", "wrank", "rem", "base", "size", "unit", "mapped", "atomic", "ctl", "dyn")

    def __repr__(self) -> str:
        return (f"<Region rank={self.rank} {type(self.rem).__name__} base={self.base:#x} size={self.size} "
                f"unit={self.unit}{' mapped' if self.mapped else ''}{' atomic' if self.atomic else ''}>")


def elements(plan, nbytes: int, unit: int) -> np.ndarray:
    """The int64 byte offsets, from the type origin, of the elements of ``unit`` bytes that a
    plan's first ``nbytes`` packed bytes hold, in packed order."""
    if plan.kind == "contig":
        return np.arange(plan.lo, plan.lo + nbytes, unit, dtype=np.int64)
    return plan.byte_index(nbytes)[::unit].astype(np.int64) + plan.lo


def byte_runs(plan, nbytes: int):
    """``(offsets, lengths)`` int64 arrays of the contiguous byte runs of a plan's first ``nbytes``
    packed bytes, offsets from the type origin, in packed order."""
    if plan.kind == "contig":
        return np.array([plan.lo], np.int64), np.array([nbytes], np.int64)
    idx = plan.byte_index(nbytes).astype(np.int64)
    if not len(idx):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [len(idx)]))
    return idx[starts] + plan.lo, (ends - starts).astype(np.int64)


class Window:
    """The runtime state of one window in this process: regions, control blocks, epochs."""

    far = False  # a window over members of one node (gpumpi.rma.mpi.Window: several)

    def __init__(self, comm, flavor: int) -> None:
        self.comm = comm  # the window's private communicator (a Dup of the user's)
        self.flavor = flavor
        self.size_n = comm._size
        self.me = comm._rank
        self.rw = comm._rw
        self.epochs = Epochs()
        self.regions: list[Region] = []
        self.maps: list = []  # (address, length) this process mapped: unmapped at free
        self.fds: list = []  # our descriptors peers open during creation: closed after it
        self.on_free: list = []  # callables releasing what the window allocated
        self.ctl_len = 8 * (_HDR + 3 * self.size_n + 2 * ATTACH_MAX)
        self.ctl_fd, self.ctl = _memfd.create_mapped("Win", "gpumpi-win-ctl", _memfd.round_pages(self.ctl_len))
        self.maps.append((self.ctl, _memfd.round_pages(self.ctl_len)))
        self.fds.append(self.ctl_fd)
        self.pending_post: set = set()  # Start's targets whose Post we have not seen yet
        self.consumed_post = [0] * self.size_n
        self.consumed_complete = [0] * self.size_n
        self.nocheck_locks: set = set()
        self.attached: list = []  # dynamic: [(address, length)] attached here
        self.remotes: list = []  # what setup reached (base.Remote), each closed at free
        self.keep_memory = False  # Free leaves the memory mapped (gpumpi.rma.creation.keep_memory)
        self.device = False  # some member's memory is device memory (flushes synchronize streams)
        self.freed = False
        self.near: dict = {}  # target -> (base, disp unit, size): see _admit

    def _admit(self) -> None:
        """Recompute :attr:`near` from the epochs: the targets whose memory is mapped here
        (``Region.atomic``, not dynamic) and which the open passive target epoch includes, each
        as ``(address of its window, disp_unit, size)``.  ``Win``'s near path acts on these
        without asking the epochs; every change of the lock epochs ends here."""
        near = self.near
        near.clear()
        a = self.epochs.access
        if self.freed or a not in ("lock", "lock_all") or not PEEK_OK:
            return
        for r in (range(self.size_n) if a == "lock_all" else self.epochs.locks):
            g = self.regions[r]
            if g.mapped and g.atomic and not g.dyn:
                near[r] = (g.base, g.unit, g.size)

    # -- control words -----------------------------------------------------------------------
    def _posted(self, ctl: int, r: int) -> int:
        return ctl + 8 * (_HDR + r)

    def _completed(self, ctl: int, r: int) -> int:
        return ctl + 8 * (_HDR + self.size_n + r)

    def _shared_flag(self, ctl: int, r: int) -> int:
        return ctl + 8 * (_HDR + 2 * self.size_n + r)

    def _attach_table(self, ctl: int) -> int:
        return ctl + 8 * (_HDR + 3 * self.size_n)

    # -- creation ----------------------------------------------------------------------------
    def setup(self, local: tuple, call: str) -> None:
        """Expose this process's memory and control block, exchange the descriptions, and reach
        every member's memory through the transport that exposed it.

        ``local`` is ``(kind, size, unit, mem)``: kind ``'host'`` (``mem``: ``(address, size,
        memfd (fd, offset, file length) or None)``), ``'device'`` (``mem``: ``(adapter,
        address, size)``), ``'dyn'`` (memory attached later: every address of this process)
        or ``'none'`` (nothing exposed)."""
        kind, size, unit, mem = local
        members = self.rw
        me = members[self.me]
        host = _services.regions("host")
        ctl = base.expose(host, me, members, (self.ctl, self.ctl_len, (self.ctl_fd, 0, _memfd.round_pages(self.ctl_len))))
        if ctl is None:  # pragma: no cover - the shm transport maps memfds on every node
            raise error(ERR_ARG, f"{call}: no transport maps the window's control block for its members")
        exposed = None
        if kind in ("host", "dyn"):
            exposed = base.expose(host, me, members, mem if kind == "host" else (0, None, None))
        elif kind == "device":
            exposed = base.expose(_services.regions("device"), me, members, mem)
        descs = self.comm.allgather((ctl, kind, size, unit, exposed))
        for r, (_c, rkind, _s, _u, rexp) in enumerate(descs):  # every member fails alike, none hangs
            if rexp is None and rkind == "device":
                raise NotImplementedError(f"{call}: no transport exposes rank {r}'s device memory to the other "
                                          f"members (memory CUDA IPC cannot export: pool or managed memory?); use "
                                          f"Win.Allocate(memory='device')")
            if rexp is None and rkind != "none":
                raise NotImplementedError(f"{call}: no transport reaches rank {r}'s private memory from the other "
                                          f"members (cross-memory attach is refused here, or off: GPUMPI_CMA); use "
                                          f"MPI.Alloc_mem memory or Win.Allocate")
        try:
            for r, (rctl, rkind, rsize, runit, rexp) in enumerate(descs):
                g = Region()
                g.rank, g.wrank = r, members[r]
                g.size, g.unit = rsize, runit
                g.dyn = rkind == "dyn"
                g.ctl = self._reach(host, g.wrank, rctl, call).base
                if rexp is None:
                    g.rem, g.base, g.mapped, g.atomic = None, 0, True, False
                else:
                    regions = _services.regions("device" if rkind == "device" else "host")
                    rem = self._reach(regions, g.wrank, rexp, call)
                    g.rem, g.base, g.mapped, g.atomic = rem, rem.base, rem.mapped, rem.atomic
                self.regions.append(g)
            self.device = any(rem.device is not None for rem in self.remotes)
            self.comm.Barrier()  # every peer has reached what we exposed
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []

    def _reach(self, regions, peer: int, exposed, call: str):
        """A member's memory (``exposed``: ``(transport ident, description)``), released at free."""
        try:
            rem = base.attach(regions, exposed[0], peer, exposed[1], _services.copy_stream)
        except base.PeerGone:
            raise error(ERR_PROC_FAILED, f"{call}: the process of rank {peer} failed") from None
        except OSError as exc:
            raise error(ERR_ARG, f"{call}: cannot reach rank {peer}'s window memory ({exc})") from None
        self.on_free.append(rem.close)
        self.remotes.append(rem)
        return rem

    def close(self) -> None:
        """Release what creation made (after the freeing barrier)."""
        if self.freed:
            return
        self.freed = True
        self.near.clear()
        if self.keep_memory:  # views of the memory outlive the window (keep_memory): nothing is unmapped
            self.on_free, self.maps = [], []
        for fn in reversed(self.on_free):
            try:
                fn()
            except Exception:  # pragma: no cover - releasing is best effort once the window is gone
                pass
        for addr, length in self.maps:
            _memfd.unmap(addr, length)
        self.maps = []
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    # -- waiting -----------------------------------------------------------------------------
    def _wait(self, pred, what: str, ranks, call: str) -> None:
        """Progress the engine until ``pred()``; fail when one of ``ranks()`` (window ranks) died."""
        if pred():
            return

        def done() -> bool:
            if pred():
                return True
            failed = _services.failed_ranks()
            if failed:
                dead = [r for r in ranks() if self.rw[r] in failed]
                if dead:
                    raise error(ERR_PROC_FAILED, f"{call}: {what}: the process holding it failed (rank {dead[0]})")
            return False

        _services.wait_until(done)

    # -- locks -------------------------------------------------------------------------------
    def lock(self, target: int, lock_type: int, assertion: int, call: str) -> None:
        self.epochs.lock(target, lock_type, call)
        if assertion & MODE_NOCHECK:
            self.nocheck_locks.add(target)
            self._admit()
            return
        try:
            self._acquire(target, lock_type == LOCK_EXCLUSIVE, call)
        except BaseException:
            self.epochs.unlock(target, call)
            raise
        self._admit()

    def _acquire(self, target: int, exclusive: bool, call: str) -> None:
        A = atomics()
        g = self.regions[target]
        word = g.ctl + 8 * _LOCK
        me = self.me
        if exclusive:
            want = EXCL | (me + 1)
            if A.cas64(word, 0, want) == 0:
                return
            self._wait(lambda: A.cas64(word, 0, want) == 0, f"exclusive lock on rank {target}",
                       lambda: self._holders(g), call)
            return
        flag = self._shared_flag(g.ctl, me)
        A.store64(flag, 1)

        def try_shared() -> bool:
            w = A.load64(word)
            return not w & EXCL and A.cas64(word, w, w + 1) == w

        try:
            if not try_shared():
                self._wait(try_shared, f"shared lock on rank {target}", lambda: self._holders(g), call)
        except BaseException:
            A.store64(flag, 0)
            raise

    def _holders(self, g: Region) -> list:
        A = atomics()
        w = A.load64(g.ctl + 8 * _LOCK)
        if w & EXCL:
            return [(w & 0xFFFFFFFF) - 1]
        return [r for r in range(self.size_n) if r != self.me and A.load64(self._shared_flag(g.ctl, r))]

    def _release(self, target: int, exclusive: bool) -> None:
        A = atomics()
        g = self.regions[target]
        A.fence()
        if exclusive:
            A.store64(g.ctl + 8 * _LOCK, 0)
        else:
            A.add64(g.ctl + 8 * _LOCK, -1)
            A.store64(self._shared_flag(g.ctl, self.me), 0)

    def unlock(self, target: int, call: str) -> None:
        kind = self.epochs.unlock(target, call)
        self._admit()
        self._sync_device()
        if target in self.nocheck_locks:
            self.nocheck_locks.discard(target)
            atomics().fence()
            return
        self._release(target, kind == LOCK_EXCLUSIVE)

    def lock_all(self, assertion: int, call: str) -> None:
        self.epochs.lock_all(call)
        if assertion & MODE_NOCHECK:
            self.nocheck_locks.add(-1)
            self._admit()
            return
        done = []
        try:
            for t in range(self.size_n):
                self._acquire(t, False, call)
                done.append(t)
        except BaseException:
            for t in done:
                self._release(t, False)
            self.epochs.unlock_all(call)
            raise
        self._admit()

    def unlock_all(self, call: str) -> None:
        self.epochs.unlock_all(call)
        self._admit()
        self._sync_device()
        if -1 in self.nocheck_locks:
            self.nocheck_locks.discard(-1)
            atomics().fence()
            return
        for t in range(self.size_n):
            self._release(t, False)

    def _acc_lock(self, g: Region, call: str) -> None:
        """Take ``g``'s accumulate lock (held while an origin reads, reduces and writes)."""
        A = atomics()
        word = g.ctl + 8 * _ACC
        me = self.me + 1
        if A.cas64(word, 0, me) != 0:
            self._wait(lambda: A.cas64(word, 0, me) == 0, f"accumulate lock of rank {g.rank}",
                       lambda: [A.load64(word) - 1], call)

    def _acc_unlock(self, g: Region) -> None:
        A = atomics()
        A.fence()
        A.store64(g.ctl + 8 * _ACC, 0)

    # -- active target -----------------------------------------------------------------------
    def fence(self, assertion: int, call: str) -> None:
        self.epochs.fence(assertion, call)
        self._sync_device()
        atomics().fence()
        self.comm.Barrier()

    def post(self, origins, assertion: int, call: str) -> None:
        self.epochs.post(origins, call)
        self._sync_device()
        A = atomics()
        A.fence()
        if not assertion & MODE_NOCHECK:
            for o in origins:
                A.add64(self._posted(self.regions[o].ctl, self.me), 1)

    def start(self, targets, assertion: int, call: str) -> None:
        self.epochs.start(targets, call)
        self.pending_post = set() if assertion & MODE_NOCHECK else set(targets)

    def await_post(self, t: int, call: str) -> None:
        A = atomics()
        word = self._posted(self.ctl, t)
        self._wait(lambda: A.load64(word) > self.consumed_post[t], f"Post from rank {t}", lambda: [t], call)
        self.consumed_post[t] += 1
        self.pending_post.discard(t)

    def complete(self, call: str) -> None:
        targets = self.epochs.start_group if self.epochs.access == "start" else None
        if targets is not None:
            for t in sorted(self.pending_post):
                self.await_post(t, call)
        targets = self.epochs.complete(call)
        self._sync_device()
        A = atomics()
        A.fence()
        for t in targets:
            A.add64(self._completed(self.regions[t].ctl, self.me), 1)

    def _completions_in(self) -> bool:
        A = atomics()
        return all(A.load64(self._completed(self.ctl, o)) > self.consumed_complete[o]
                   for o in self.epochs.post_group)

    def wait(self, call: str) -> None:
        group = self.epochs.check_wait(call)
        self._wait(self._completions_in, "Complete from the origins",
                   lambda: [o for o in group if atomics().load64(self._completed(self.ctl, o))
                            <= self.consumed_complete[o]], call)
        self._consume_completions(group)

    def test(self, call: str) -> bool:
        group = self.epochs.check_wait(call)
        _services.poll()
        if not self._completions_in():
            return False
        self._consume_completions(group)
        return True

    def _consume_completions(self, group) -> None:
        for o in group:
            self.consumed_complete[o] += 1
        self.epochs.waited()
        atomics().fence()

    # -- passive target completion -------------------------------------------------------------
    def flush(self, target: int | None, call: str) -> None:
        self.epochs.flush(target, call)
        self._sync_device()
        atomics().fence()

    def sync(self) -> None:
        self._sync_device()
        atomics().fence()

    def _sync_device(self) -> None:
        for rem in self.remotes:
            if rem.device is not None:
                rem.sync()

    # -- dynamic windows -----------------------------------------------------------------------
    def attach(self, addr: int, nbytes: int, call: str) -> None:
        self._check_attach(addr, nbytes, call)
        self.attached.append((addr, nbytes))
        self._publish_attached()

    def _check_attach(self, addr: int, nbytes: int, call: str) -> None:
        if len(self.attached) >= ATTACH_MAX:
            raise error(ERR_RMA_ATTACH, f"{call}: too many regions attached ({ATTACH_MAX})")
        for a, n in self.attached:
            if addr < a + n and a < addr + nbytes:
                raise error(ERR_RMA_ATTACH, f"{call}: memory overlaps a region already attached "
                                            f"({addr:#x}+{nbytes} and {a:#x}+{n})")

    def detach(self, addr: int, call: str) -> None:
        for i, (a, _n) in enumerate(self.attached):
            if a == addr:
                del self.attached[i]
                self._publish_attached()
                return
        raise error(ERR_RMA_ATTACH, f"{call}: memory is not attached to this window ({addr:#x})")

    def _publish_attached(self) -> None:
        A = atomics()
        seq = self.ctl + 8 * _SEQ
        A.add64(seq, 1)  # odd: changing
        tab = _raw_array(self._attach_table(self.ctl), 16 * ATTACH_MAX).view(np.int64)
        for i, (a, n) in enumerate(self.attached):
            tab[2 * i], tab[2 * i + 1] = a, n
        A.store64(self.ctl + 8 * _NATT, len(self.attached))
        A.add64(seq, 1)

    def _attached_of(self, g: Region) -> list:
        A = atomics()
        seq = g.ctl + 8 * _SEQ
        tab = _raw_array(self._attach_table(g.ctl), 16 * ATTACH_MAX).view(np.int64)
        while True:
            s0 = A.load64(seq)
            if s0 & 1:
                continue
            n = A.load64(g.ctl + 8 * _NATT)
            out = [(int(tab[2 * i]), int(tab[2 * i + 1])) for i in range(n)]
            A.fence()
            if A.load64(seq) == s0:
                return out

    # -- operations: where the target bytes are ------------------------------------------------
    def target(self, rank: int, disp: int, plan, call: str) -> tuple:
        """``(region, address of the type origin)`` for an operation touching ``plan``'s bytes at
        ``disp`` of ``rank``'s window; ``ERR_RMA_RANGE`` outside it."""
        g = self.regions[rank]
        if g.dyn:
            addr = disp
            lo, hi = addr + plan.lo, addr + plan.hi
            if plan.nbytes and not any(a <= lo and hi <= a + n for a, n in self._attached_of(g)):
                raise error(ERR_RMA_RANGE, f"{call}: target bytes [{lo:#x}, {hi:#x}) are not inside memory "
                                           f"attached to rank {rank}'s window")
            return g, addr
        if disp < 0:
            raise error(ERR_RMA_RANGE, f"{call}: negative target displacement ({disp})")
        off = disp * g.unit
        if plan.nbytes and (off + plan.lo < 0 or off + plan.hi > g.size):
            raise error(ERR_RMA_RANGE, f"{call}: target bytes [{off + plan.lo}, {off + plan.hi}) lie outside "
                                       f"rank {rank}'s window of {g.size} bytes (disp {disp}, disp_unit {g.unit})")
        return g, g.base + off

    # -- moving bytes (packed streams are host uint8 arrays) ------------------------------------
    def write(self, g: Region, addr: int, plan, packed: np.ndarray, call: str) -> None:
        n = plan.nbytes
        if not n:
            return
        if g.mapped:
            plan.unpack_from(packed, _raw_array(addr + plan.lo, plan.hi - plan.lo), plan.lo)
            return
        packed = np.ascontiguousarray(packed)
        offs, lens = byte_runs(plan, n)
        self._moved(g, g.rem.write, packed.ctypes.data, [(addr + o, ln) for o, ln in zip(offs.tolist(), lens.tolist())],
                    call)

    def read(self, g: Region, addr: int, plan, call: str) -> np.ndarray:
        n = plan.nbytes
        out = np.empty(n, _U8)
        if not n:
            return out
        if g.mapped:
            plan.pack_into(_raw_array(addr + plan.lo, plan.hi - plan.lo), plan.lo, out)
            return out
        offs, lens = byte_runs(plan, n)
        self._moved(g, g.rem.read, [(addr + o, ln) for o, ln in zip(offs.tolist(), lens.tolist())], out.ctypes.data,
                    call)
        return out

    def _moved(self, g: Region, move, a, b, call: str) -> None:
        """``move(a, b)`` (a remote's ``read`` or ``write``), its failures as MPI errors."""
        try:
            move(a, b)
        except base.PeerGone:
            raise error(ERR_PROC_FAILED, f"{call}: the target process failed (rank {g.rank})") from None
        except OSError as exc:
            raise error(ERR_RMA_RANGE, f"{call}: cannot reach rank {g.rank}'s window memory "
                                       f"({exc.strerror or exc})") from None

    # -- accumulate ------------------------------------------------------------------------------
    def accumulate(self, g: Region, addr: int, plan, red, dtype, packed, op_name: str, fetch: bool, call: str):
        """``target = origin op target`` element-wise atomically; the old target bytes (packed)
        when ``fetch``.  ``red`` is the predefined reduction resolved for the target type,
        ``dtype`` the element type when it has one basic NumPy type (else None)."""
        n = plan.nbytes
        if not n:
            return np.empty(0, _U8) if fetch else None
        if g.atomic and dtype is not None and g.rem.supported(op_name, dtype):
            unit = dtype.itemsize
            offs = elements(plan, n, unit)
            vals = np.ascontiguousarray(packed[:n]).view(dtype)
            if g.mapped and ((addr + plan.lo) % unit if plan.kind == "contig" else True):
                mis = ((addr + offs) % unit) != 0  # contiguous: all or none, by the first
                if mis.any():
                    return self._misaligned(g, addr, offs, mis, vals, red, op_name, fetch, call)
            old = np.empty(len(vals), dtype) if fetch else None
            g.rem.accumulate(addr, offs, vals, op_name, old)
            return old.view(_U8) if fetch else None
        return self._locked_accumulate(g, addr, plan, red, packed, op_name, fetch, call)

    def _locked_accumulate(self, g: Region, addr: int, plan, red, packed, op_name: str, fetch: bool, call: str):
        """Read, reduce and write under the target's accumulate lock; the old bytes when ``fetch``."""
        self._acc_lock(g, call)
        try:
            cur = self.read(g, addr, plan, call)
            old = cur.copy() if fetch else None
            if op_name != "NO_OP":
                red.host(np.ascontiguousarray(packed[:plan.nbytes]), cur)
                self.write(g, addr, plan, cur, call)
        finally:
            self._acc_unlock(g)
        return old

    def _misaligned(self, g: Region, addr: int, offs, mis, vals, red, op_name: str, fetch: bool, call: str):
        """:meth:`accumulate` on mapped memory where the elements ``mis`` lie at addresses that are no
        multiple of their size (MPI sets no alignment rule; an atomic instruction needs one): those
        are read, reduced and written one by one under the target's accumulate lock, the others
        still take their instruction, so every origin of one element and type takes one path."""
        dtype = vals.dtype
        unit = dtype.itemsize
        old = np.empty(len(vals), dtype) if fetch else None
        ok = ~mis
        if ok.any():
            part = np.empty(int(ok.sum()), dtype) if fetch else None
            g.rem.accumulate(addr, offs[ok], vals[ok], op_name, part)
            if fetch:
                old[ok] = part
        self._acc_lock(g, call)
        try:
            cur = np.empty(unit, _U8)
            for i in np.flatnonzero(mis).tolist():  # in order: an offset may repeat
                cell = _raw_array(addr + int(offs[i]), unit)
                cur[:] = cell
                if fetch:
                    old[i:i + 1].view(_U8)[:] = cur
                if op_name != "NO_OP":
                    red.host(vals[i:i + 1].view(_U8), cur)
                    cell[:] = cur
        finally:
            self._acc_unlock(g)
        return old.view(_U8) if fetch else None

    def compare_and_swap(self, g: Region, addr: int, dtype, origin: np.ndarray, compare: np.ndarray, call: str):
        if g.atomic and g.rem.cas_supported(dtype, addr):
            return np.frombuffer(g.rem.compare_and_swap(addr, compare.tobytes(), origin.tobytes(), dtype), _U8).copy()
        return self._locked_compare_and_swap(g, addr, dtype.itemsize, origin, compare, call)

    def _locked_compare_and_swap(self, g: Region, addr: int, size: int, origin, compare, call: str):
        """Compare and swap ``size`` bytes under the target's accumulate lock; the old bytes."""
        plan = plan_for(_byte_type(size), 1)
        self._acc_lock(g, call)
        try:
            cur = self.read(g, addr, plan, call)
            if cur.tobytes() == compare.tobytes():
                self.write(g, addr, plan, origin, call)
        finally:
            self._acc_unlock(g)
        return cur


_BYTES: dict = {}


def _byte_type(n: int):
    """A committed type of ``n`` bytes (cached)."""
    t = _BYTES.get(n)
    if t is None:
        from ..datatypes.predefined import BYTE

        t = _BYTES[n] = BYTE.Create_contiguous(n).Commit() if n != 1 else BYTE
    return t
