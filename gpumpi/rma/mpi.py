"""The window runtime across nodes: windows carried by the MPI library's RMA (L5).

Theory of operation
===================
A window whose communicator has members on several nodes (a job an MPI launcher started,
DESIGN section 14) cannot reach its members' memory through the node's shared memory, so
:class:`Window` here -- the runtime ``MPI.Win`` picks for such a communicator, with
:class:`gpumpi.rma.local.Window`'s interface -- hands every operation to the MPI library through
mpi4py, on an MPI communicator of the same members in the same order (``Create_group`` of
gpumpi's private duplicate of ``COMM_WORLD``).

MPI RMA, not active messages over gpumpi's transport: the library already carries RMA over the
network (with the adapter's atomics where it has them) and makes progress for a target that is
inside any MPI call -- a gpumpi rank polls MPI in every progress pass -- so nothing new runs
at the target.  *Every* target goes through MPI, those of this node too: accumulates are
element-wise atomic only among updates made by one agent, and the CPU's atomic instructions
on mapped memory are not atomic with respect to the MPI library's accumulates.

Two MPI windows per gpumpi window, each in one ``Lock_all(MODE_NOCHECK)`` epoch for its whole
life (MPI's own epochs are not used: gpumpi checks the epochs itself, :mod:`gpumpi.rma.epochs`,
and gives its errors before MPI sees a call):

* the *data* window: the exposed memory (``Win_create`` on it, ``Win_create_dynamic`` and
  ``Win_attach`` for dynamic windows), displacement unit 1 -- gpumpi scales displacements by
  the member's ``disp_unit`` itself, so a target datatype's byte offsets are exact;
* the *control* window (``Win_allocate``), per member ``_WORDS`` int64 words: the window
  lock, the accumulate lock, and the attach table of a dynamic window (sequence number, entry
  count, address/length pairs), the layout of :mod:`gpumpi.rma.local`'s control block, reached by
  MPI's ``Compare_and_swap``/``Fetch_and_op``/``Get`` instead of the CPU's instructions.

Operations complete at the origin when they return (``Win_flush_local`` after each), as
:mod:`gpumpi.rma.local`'s do; completion at the target comes at the synchronization that MPI names
for it:

* ``Lock``/``Lock_all``: the lock word, exclusive ``EXCL | (holder + 1)`` or the count of shared
  holders, taken by compare-and-swap, waited for with the engine's progress; ``Unlock`` flushes
  the data window to the target (``Win_flush``), then releases the word;
* ``Fence``: ``Win_flush_all``, then a barrier of the window's private communicator;
* ``Post``/``Start``/``Complete``/``Wait``: one-byte messages on the private communicator:
  ``Post`` sends one to each origin, an origin receives it before its first operation to that
  target (or at ``Complete``); ``Complete`` flushes, then sends one to each target; ``Wait``
  (``Test``) receives one from each origin of the exposure epoch;
* ``Flush*``: ``Win_flush``/``Win_flush_all``; ``Sync``: ``Win_sync``.

Accumulates whose element type has an MPI type (integers and floating point of 1, 2, 4 or 8
bytes) are MPI's (``Win_accumulate``, ``Get_accumulate``, ``Fetch_and_op`` of one element),
with a target datatype of that element type at the elements' byte offsets; the others (bool,
complex, ``long double``, pair types) take the target's *accumulate lock* and read, reduce and
write under it, and every origin takes that way for that type.  ``Compare_and_swap`` is MPI's
for elements of 1, 2, 4 or 8 bytes, as the integer type of that size (the one an
``Fetch_and_op`` of that type uses, so the two are atomic with respect to each other).
Under Open MPI, whose osc/rdma leaves the target unchanged for ``LAND``/``LOR``/``LXOR`` of
integers wider than a byte, those three go element by element by ``Compare_and_swap``.

Device memory: with a CUDA-aware MPI library (``gpumpi.ipc.mpi.cuda_aware``) the device memory
is the data window's memory; otherwise a window across nodes over device memory is refused, on
every member alike, before anything is made.  The blocking MPI collectives (``Create_group``,
window creation and free) come after a barrier of gpumpi's communicator, so that every member
enters them with no gpumpi transfer of another member waiting on its progress.
"""

from __future__ import annotations

import numpy as np

from .. import _services
from ..constants import LOCK_EXCLUSIVE, MODE_NOCHECK
from ..errors import ERR_OTHER, ERR_RMA_ATTACH, ERR_UNSUPPORTED_OPERATION, error
from .epochs import Epochs
from .local import ATTACH_MAX, EXCL, Region, byte_runs, elements
from .local import Window as LocalWindow

__all__ = ["Window", "library_class"]

_U8 = np.dtype(np.uint8)
_LOCK, _ACC, _SEQ, _NATT, _TAB = 0, 1, 2, 3, 4
_WORDS = _TAB + 2 * ATTACH_MAX
#: tags of the active target handshakes on the window's private communicator
_POST, _COMPLETE = 1, 2
#: Create_group's tag for the windows' MPI communicators
_GROUP_TAG = 0x6d77
#: the logical reductions Open MPI's accumulates leave undone (Window._logical_by_cas)
_LOGICAL = {"LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor}
_CLASSES: dict = {}


def library_class(M, cls: int) -> int:
    """gpumpi's error class (MPICH's numbers) of the MPI library's error class ``cls``, by its
    name (Open MPI numbers them otherwise: ``MPI_ERR_GROUP`` is 9 there, 8 in MPICH);
    ``ERR_OTHER`` for a class gpumpi does not name."""
    table = _CLASSES.get(id(M))
    if table is None:
        from .. import errors

        table = {}
        for name in dir(errors):
            mine = getattr(errors, name)
            if name.startswith("ERR_") and name != "ERR_LASTCODE" and type(mine) is int:
                theirs = getattr(M, name, None)
                if type(theirs) is int:
                    table.setdefault(theirs, mine)
        table[getattr(M, "SUCCESS", 0)] = ERR_OTHER  # an exception is a failure
        _CLASSES[id(M)] = table
    return table.get(cls, ERR_OTHER)


class Window(LocalWindow):
    """A window over members of several nodes, carried by MPI RMA (see the module notes)."""

    far = True

    def __init__(self, comm, flavor: int) -> None:  # noqa: super().__init__ makes a shared control block
        self.comm = comm
        self.flavor = flavor
        self.size_n = comm._size
        self.me = comm._rank
        self.rw = comm._rw
        self.epochs = Epochs()
        self.regions: list = []
        self.maps: list = []
        self.fds: list = []
        self.on_free: list = []
        self.pending_post: set = set()
        self.nocheck_locks: set = set()
        self.attached: list = []
        self.remotes: list = []
        self.keep_memory = False
        self.device = False  # the MPI library completes device transfers itself
        self.freed = False
        self.near: dict = {}  # never filled: no target's memory is reached but through MPI
        self.M = self.mc = self.dw = self.cw = None
        self.logical_by_cas = False
        self.opened: list = []  # the MPI windows whose Lock_all epoch is open (closed at free)
        self._one = np.zeros(1, np.int64)
        self._two = np.zeros(1, np.int64)
        self._res = np.zeros(1, np.int64)
        self._tok = np.zeros(1, np.uint8)

    # -- creation ----------------------------------------------------------------------------
    def setup(self, local: tuple, call: str) -> None:
        """Exchange the members' descriptions (:meth:`gpumpi.rma.local.Window.setup`'s ``local``), then make the
        MPI communicator and the two MPI windows."""
        M, wcomm = _services.mpi_world()
        self.M = M
        # Open MPI 5.0's osc/rdma leaves the target unchanged for LAND, LOR and LXOR of integers
        # wider than a byte (Accumulate, Get_accumulate, Fetch_and_op; 5.0.11 from pip): those
        # go by compare-and-swap there (_logical_by_cas)
        self.logical_by_cas = M.Get_library_version().startswith("Open MPI")
        descs = self.comm.allgather(local[:3])
        aware = _services.mpi_cuda_aware()
        dev = [r for r, d in enumerate(descs) if d[0] == "device"]
        if dev and not aware:
            raise error(ERR_UNSUPPORTED_OPERATION,
                        f"{call}: a window over ranks of several nodes exposes device memory (ranks {dev}), and the "
                        f"MPI library does not take device pointers (MPIX_Query_cuda_support; GPUMPI_MPI_CUDA=1 "
                        f"says it does); expose host memory, or create it over the ranks of one node")
        for r, (kind, size, unit) in enumerate(descs):
            g = Region()
            g.rank, g.wrank = r, self.rw[r]
            g.size, g.unit = size, unit
            g.rem, g.base, g.mapped, g.atomic, g.ctl = None, 0, False, False, None
            g.dyn = kind == "dyn"
            self.regions.append(g)
        kind, size, _unit, mem = local
        self.comm.Barrier()  # see the module notes: nobody enters MPI's collectives with transfers pending
        try:
            grp = wcomm.Get_group()
            sub = grp.Incl(list(self.rw))
            grp.Free()
            try:
                self.mc = wcomm.Create_group(sub, _GROUP_TAG)
            finally:
                sub.Free()
            if kind == "dyn":
                self.dw = M.Win.Create_dynamic(comm=self.mc)
            elif kind == "none" or not size:
                self.dw = M.Win.Create(M.BOTTOM, 1, comm=self.mc)
            else:
                addr = mem[0] if kind == "host" else mem[1]
                self.dw = M.Win.Create(M.buffer.fromaddress(addr, size), 1, comm=self.mc)
            self.cw = M.Win.Allocate(8 * _WORDS, 8, comm=self.mc)
            for w in (self.dw, self.cw):
                w.Set_errhandler(M.ERRORS_RETURN)
            np.frombuffer(self.cw.tomemory(), np.int64)[:] = 0
            for w in (self.cw, self.dw):
                w.Lock_all(M.MODE_NOCHECK)  # the library's value (gpumpi's is MPICH's: Open MPI's is 1)
                self.opened.append(w)
            self.cw.Sync()
        except M.Exception as exc:
            raise self._failed(exc, call) from None
        self.comm.Barrier()  # every member's control words are zero before anyone takes them

    def close(self) -> None:
        """Release what creation made (after the freeing barrier): the MPI windows and
        communicator (collective over the members, as ``Win.Free`` is), then our mappings."""
        if self.freed:
            return
        self.freed = True
        M = self.M
        if M is not None and not M.Is_finalized():
            for w in self.opened:
                w.Unlock_all()
            for w in (self.dw, self.cw):
                if w is not None:
                    w.Free()
            if self.mc is not None:
                self.mc.Free()
        self.dw = self.cw = self.mc = None
        from .. import _memfd

        if self.keep_memory:
            self.maps = []
        for addr, length in self.maps:
            _memfd.unmap(addr, length)
        self.maps = []

    def _failed(self, exc, call: str):
        """gpumpi's exception for an error the MPI library reported."""
        try:
            cls = library_class(self.M, exc.Get_error_class())
        except Exception:  # noqa: BLE001 -- not an MPI exception after all
            cls = ERR_OTHER
        return error(cls, f"{call}: the MPI library failed: {exc}")

    # -- control words (int64, in the control window) ----------------------------------------
    def _word(self, target: int, idx: int, value: int, op) -> int:
        """``Fetch_and_op`` on word ``idx`` of ``target``'s control block, complete at the target."""
        M = self.M
        self._one[0] = value
        self.cw.Fetch_and_op([self._one, 1, M.INT64_T], [self._res, 1, M.INT64_T], target, idx, op)
        self.cw.Flush(target)
        return int(self._res[0])

    def _cas(self, target: int, idx: int, compare: int, value: int) -> int:
        M = self.M
        self._one[0] = value
        self._two[0] = compare
        self.cw.Compare_and_swap([self._one, 1, M.INT64_T], [self._two, 1, M.INT64_T], [self._res, 1, M.INT64_T],
                                 target, idx)
        self.cw.Flush(target)
        return int(self._res[0])

    def _wait_for(self, pred) -> None:
        if not pred():
            _services.wait_until(pred)

    # -- locks -------------------------------------------------------------------------------
    def _acquire(self, target: int, exclusive: bool, call: str) -> None:
        try:
            if exclusive:
                want = EXCL | (self.me + 1)
                self._wait_for(lambda: self._cas(target, _LOCK, 0, want) == 0)
                return

            def shared() -> bool:
                w = self._word(target, _LOCK, 0, self.M.NO_OP)
                return not w & EXCL and self._cas(target, _LOCK, w, w + 1) == w

            self._wait_for(shared)
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None

    def _release(self, target: int, exclusive: bool) -> None:
        self.dw.Flush(target)  # the epoch's operations are complete at the target first
        if exclusive:
            self._word(target, _LOCK, 0, self.M.REPLACE)
        else:
            self._word(target, _LOCK, -1, self.M.SUM)

    def unlock(self, target: int, call: str) -> None:
        kind = self.epochs.unlock(target, call)
        try:
            if target in self.nocheck_locks:
                self.nocheck_locks.discard(target)
                self.dw.Flush(target)
                return
            self._release(target, kind == LOCK_EXCLUSIVE)
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None

    def unlock_all(self, call: str) -> None:
        self.epochs.unlock_all(call)
        try:
            if -1 in self.nocheck_locks:
                self.nocheck_locks.discard(-1)
                self.dw.Flush_all()
                return
            for t in range(self.size_n):
                self._release(t, False)
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None

    def _acc_lock(self, g, call: str) -> None:
        me = self.me + 1
        try:
            self._wait_for(lambda: self._cas(g.rank, _ACC, 0, me) == 0)
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None

    def _acc_unlock(self, g) -> None:
        self.dw.Flush(g.rank)  # the read-modify-write is complete at the target first
        self._word(g.rank, _ACC, 0, self.M.REPLACE)

    # -- active target -----------------------------------------------------------------------
    def fence(self, assertion: int, call: str) -> None:
        self.epochs.fence(assertion, call)
        try:
            self.dw.Flush_all()
            self.dw.Sync()
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None
        self.comm.Barrier()
        self.dw.Sync()

    def post(self, origins, assertion: int, call: str) -> None:
        self.epochs.post(origins, call)
        self.dw.Sync()
        if not assertion & MODE_NOCHECK:
            for o in origins:
                self.comm.Send(self._tok, o, _POST)

    def start(self, targets, assertion: int, call: str) -> None:
        self.epochs.start(targets, call)
        self.pending_post = set() if assertion & MODE_NOCHECK else set(targets)

    def await_post(self, t: int, call: str) -> None:
        self.comm.Recv(self._tok, t, _POST)
        self.pending_post.discard(t)

    def complete(self, call: str) -> None:
        if self.epochs.access == "start":
            for t in sorted(self.pending_post):
                self.await_post(t, call)
        targets = self.epochs.complete(call)
        try:
            self.dw.Flush_all()
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None
        for t in targets:
            self.comm.Send(self._tok, t, _COMPLETE)

    def wait(self, call: str) -> None:
        group = self.epochs.check_wait(call)
        for o in sorted(group):
            self.comm.Recv(self._tok, o, _COMPLETE)
        self.epochs.waited()
        self.dw.Sync()

    def test(self, call: str) -> bool:
        group = self.epochs.check_wait(call)
        if not all(self.comm.Iprobe(o, _COMPLETE) for o in group):
            return False
        for o in sorted(group):
            self.comm.Recv(self._tok, o, _COMPLETE)
        self.epochs.waited()
        self.dw.Sync()
        return True

    # -- passive target completion -------------------------------------------------------------
    def flush(self, target: int | None, call: str) -> None:
        self.epochs.flush(target, call)
        try:
            if target is None:
                self.dw.Flush_all()
            else:
                self.dw.Flush(target)
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None

    def sync(self) -> None:
        self.dw.Sync()

    def _sync_device(self) -> None:
        """Nothing of ours to wait for: MPI moves the bytes of device windows itself."""

    # -- dynamic windows -----------------------------------------------------------------------
    def attach(self, addr: int, nbytes: int, call: str) -> None:
        self._check_attach(addr, nbytes, call)
        try:
            self.dw.Attach(self.M.buffer.fromaddress(addr, nbytes))
        except self.M.Exception as exc:
            raise self._failed(exc, call) from None
        self.attached.append((addr, nbytes))
        self._publish_attached()

    def detach(self, addr: int, call: str) -> None:
        for i, (a, n) in enumerate(self.attached):
            if a == addr:
                del self.attached[i]
                self._publish_attached()
                try:
                    self.dw.Detach(self.M.buffer.fromaddress(a, n))
                except self.M.Exception as exc:
                    raise self._failed(exc, call) from None
                return
        raise error(ERR_RMA_ATTACH, f"{call}: memory is not attached to this window ({addr:#x})")

    def _publish_attached(self) -> None:
        """The attach table into our control block, under its sequence number (odd while it changes)."""
        M, me = self.M, self.me
        self._word(me, _SEQ, 1, M.SUM)
        tab = np.zeros(1 + 2 * ATTACH_MAX, np.int64)
        tab[0] = len(self.attached)
        for i, (a, n) in enumerate(self.attached):
            tab[1 + 2 * i], tab[2 + 2 * i] = a, n
        self.cw.Put([tab, len(tab), M.INT64_T], me, (_NATT, len(tab), M.INT64_T))
        self.cw.Flush(me)
        self._word(me, _SEQ, 1, M.SUM)

    def _attached_of(self, g) -> list:
        if g.rank == self.me:
            return list(self.attached)
        M, t = self.M, g.rank
        tab = np.empty(1 + 2 * ATTACH_MAX, np.int64)
        while True:
            s0 = self._word(t, _SEQ, 0, M.NO_OP)
            if s0 & 1:
                continue
            self.cw.Get([tab, len(tab), M.INT64_T], t, (_NATT, len(tab), M.INT64_T))
            self.cw.Flush(t)
            if self._word(t, _SEQ, 0, M.NO_OP) == s0:
                n = int(tab[0])
                return [(int(tab[1 + 2 * i]), int(tab[2 + 2 * i])) for i in range(n)]

    # -- operations (``addr``: the MPI displacement of the target datatype's origin) ------------
    def _target_type(self, plan, nbytes: int, addr: int, T, unit: int):
        """``(displacement, count, datatype, to free)`` of a plan's first ``nbytes`` at ``addr``, in
        elements of the MPI type ``T`` of ``unit`` bytes (``MPI.BYTE``: byte runs)."""
        if plan.kind == "contig":
            return addr + plan.lo, nbytes // unit, T, None
        if unit == 1:
            offs, lens = byte_runs(plan, nbytes)
            lo = int(offs.min())
            D = T.Create_hindexed(lens.tolist(), (offs - lo).tolist()).Commit()
        else:
            offs = elements(plan, nbytes, unit)
            lo = int(offs.min())
            D = T.Create_hindexed_block(1, (offs - lo).tolist()).Commit()
        return addr + lo, 1, D, D

    def write(self, g, addr: int, plan, packed: np.ndarray, call: str) -> None:
        n = plan.nbytes
        if n:
            self._bytes(self.dw.Put, np.ascontiguousarray(packed[:n]), g, addr, plan, call)

    def read(self, g, addr: int, plan, call: str) -> np.ndarray:
        out = np.empty(plan.nbytes, _U8)
        if plan.nbytes:
            self._bytes(self.dw.Get, out, g, addr, plan, call)
        return out

    def _bytes(self, move, buf: np.ndarray, g, addr: int, plan, call: str) -> None:
        """``Put`` or ``Get`` of ``buf`` (the packed bytes) to or from ``plan``'s bytes at ``addr``
        of ``g``, complete at the origin."""
        M = self.M
        n = len(buf)
        disp, count, T, free = self._target_type(plan, n, addr, M.BYTE, 1)
        try:
            move([buf, n, M.BYTE], g.rank, (disp, count, T))
            self.dw.Flush_local(g.rank)
        except M.Exception as exc:
            raise self._failed(exc, call) from None
        finally:
            if free is not None:
                free.Free()

    def _mpi_type(self, dtype):
        """The MPI type of a NumPy element type MPI's accumulates take (see the notes), or None."""
        if dtype is None or dtype.kind not in "iuf":
            return None
        M = self.M
        return {("i", 1): M.INT8_T, ("i", 2): M.INT16_T, ("i", 4): M.INT32_T, ("i", 8): M.INT64_T,
                ("u", 1): M.UINT8_T, ("u", 2): M.UINT16_T, ("u", 4): M.UINT32_T, ("u", 8): M.UINT64_T,
                ("f", 4): M.FLOAT, ("f", 8): M.DOUBLE}.get((dtype.kind, dtype.itemsize))

    def accumulate(self, g, addr: int, plan, red, dtype, packed, op_name: str, fetch: bool, call: str):
        n = plan.nbytes
        if not n:
            return np.empty(0, _U8) if fetch else None
        M = self.M
        T = self._mpi_type(dtype)
        if T is None:
            return self._locked_accumulate(g, addr, plan, red, packed, op_name, fetch, call)
        unit = dtype.itemsize
        vals = np.ascontiguousarray(packed[:n])
        if self.logical_by_cas and unit > 1 and op_name in _LOGICAL:
            return self._logical_by_cas(g, addr, elements(plan, n, unit), T, vals.view(dtype), op_name, fetch,
                                        call)
        k = n // unit
        op = getattr(M, op_name)
        disp, count, D, free = self._target_type(plan, n, addr, T, unit)
        try:
            if not fetch:
                self.dw.Accumulate([vals, k, T], g.rank, (disp, count, D), op)
                self.dw.Flush_local(g.rank)
                return None
            old = np.empty(n, _U8)
            if k == 1:
                self.dw.Fetch_and_op([vals, 1, T], [old, 1, T], g.rank, disp, op)
            else:
                self.dw.Get_accumulate([vals, k, T], [old, k, T], g.rank, (disp, count, D), op)
            self.dw.Flush_local(g.rank)
            return old
        except M.Exception as exc:
            raise self._failed(exc, call) from None
        finally:
            if free is not None:
                free.Free()

    def _logical_by_cas(self, g, addr: int, offs: np.ndarray, T, vals: np.ndarray, op_name: str, fetch: bool,
                        call: str):
        """``LAND``/``LOR``/``LXOR`` of integers wider than a byte where the library's accumulate
        leaves the target as it was (Open MPI 5.0's osc/rdma: see ``logical_by_cas``): at each
        element offset ``offs`` (from ``addr``), in order, an atomic read (``Fetch_and_op`` of ``NO_OP``), then
        ``Compare_and_swap`` of the result, again until no other origin wrote in between --
        atomic with respect to MPI's accumulates of the same type, as ``Compare_and_swap`` is."""
        M = self.M
        fn = _LOGICAL[op_name]
        old = np.empty_like(vals) if fetch else None
        cur, new, seen = (np.zeros(1, vals.dtype) for _ in range(3))
        try:
            for i, off in enumerate(offs.tolist()):  # in order: an offset may repeat
                disp = addr + off
                self.dw.Fetch_and_op([new, 1, T], [cur, 1, T], g.rank, disp, M.NO_OP)
                self.dw.Flush_local(g.rank)
                while True:
                    new[0] = fn(cur[0], vals[i])
                    self.dw.Compare_and_swap([new, 1, T], [cur, 1, T], [seen, 1, T], g.rank, disp)
                    self.dw.Flush_local(g.rank)
                    if seen[0] == cur[0]:
                        break
                    cur[0] = seen[0]
                if fetch:
                    old[i] = cur[0]
        except M.Exception as exc:
            raise self._failed(exc, call) from None
        return old.view(_U8) if fetch else None

    def compare_and_swap(self, g, addr: int, dtype, origin: np.ndarray, compare: np.ndarray, call: str):
        M = self.M
        size = dtype.itemsize
        T = self._mpi_type(dtype) if dtype.kind in "iu" else None
        if T is None:
            T = {1: M.UINT8_T, 2: M.UINT16_T, 4: M.UINT32_T, 8: M.UINT64_T}.get(size)
        if T is not None:
            out = np.empty(size, _U8)
            try:
                self.dw.Compare_and_swap([np.ascontiguousarray(origin.view(_U8)), 1, T],
                                         [np.ascontiguousarray(compare.view(_U8)), 1, T], [out, 1, T], g.rank, addr)
                self.dw.Flush_local(g.rank)
            except M.Exception as exc:
                raise self._failed(exc, call) from None
            return out
        return self._locked_compare_and_swap(g, addr, size, origin, compare, call)
