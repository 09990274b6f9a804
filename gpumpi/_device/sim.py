"""The simulated device: SimAdapter, a faithful model of CUDA on the host (L2).

Theory of operation
===================
:class:`SimAdapter` implements the adapter interface (:mod:`gpumpi._device`) in
host memory, so that CI tests every device path (IPC protocol and caching,
staging, stream ordering) without a GPU, and users test GPU code the same way
(``GPUMPI_DEVICE=sim``).  It holds itself to CUDA's rules, including the ones a
careless caller would break unnoticed on a quiet GPU.

*Memory.*  Each device allocation is its own memfd (:mod:`gpumpi._memfd`), sized to
one header page plus the data rounded up to whole pages, sealed against
resizing, and mapped shared; the user's base address is the first byte after
the header page, so allocations are page aligned and the header is never user
visible.  The header holds a magic, the exporting adapter's random 64-bit token,
the allocation's serial number (a generation counter, never reused in a
process), its size and a live/dead state.  The 64-byte handle (like
``cudaIpcMemHandle_t``) carries the exporter's pid, the memfd's descriptor
number, size, serial, token and device.  :meth:`SimAdapter.ipc_open` in another
process opens ``/proc/<pid>/fd/<fd>``, maps it and checks the header against the
handle: a missing descriptor or process, a descriptor now naming another file,
a different serial or token, or the dead mark that :meth:`SimAdapter.free`
writes before unmapping and closing, all raise :class:`StaleHandle`.  Managed,
pool and pinned-host allocations are private anonymous mappings (not
exportable).  Any address no allocation contains is pageable host memory.
:meth:`SimAdapter.free` (and ``ipc_close``) first runs every queued operation,
as ``cudaFree`` synchronizes, so a queued copy never touches unmapped memory.

*Streams* are FIFO queues of operations (copies, event records, event waits,
host functions), numbered by one adapter-wide sequence.  Nothing runs when it
is enqueued; a stream runs, in order, up to some point only when something
observes it:

* ``stream_synchronize(s)`` runs all of ``s``; ``synchronize()`` runs everything;
* ``event_query(e)`` / ``event_synchronize(e)`` run the stream of ``e``'s last
  record up to that record (with ``query_lag=k``, the first ``k`` queries of a
  pending record answer False first, to exercise polling loops);
* a ``stream_wait_event(s, e)`` entry, when ``s`` reaches it, runs the stream of
  the record it waits for (the most recent one at the time of the call, as in
  CUDA; an event never recorded is complete) up to that record;
* recording an *interprocess* event runs its stream up to the record at once
  (so that peers, which cannot drive our queues, see it complete).

The default stream (``current_stream()``, ``stream=None``) is a queue like any
other: it does not synchronize with other streams (it models a non-blocking or
per-thread default stream).  So a missing ordering step in gpumpi (reading a
buffer before the copy that fills it was made visible) reads stale data in tests,
as it would on a GPU under load.  Host memory handed to a queued copy must stay
alive until the copy has run (as for pinned memory in CUDA).

*Interprocess events* keep their state in a one-page memfd, exported and opened
like memory (same header, same staleness checks; :meth:`event_destroy` or
garbage collection of the creating event writes the dead mark).  The page holds
two counters: ``recorded`` (incremented by every record, in either process) and
``completed`` (set when the stream reaches that record).  A query in any
process answers ``completed >= recorded``; a wait or synchronize waits until
``completed`` reaches the ``recorded`` value seen when it was issued.

*Fork.*  A forked child must not use its parent's adapter (a forked CUDA
context is unusable too): in the child, every existing SimAdapter is detached
(its methods raise RuntimeError, its inherited descriptors are closed, its
mappings are left alone, nothing is marked dead), then the callables in
:data:`AFTER_FORK_IN_CHILD` run (:mod:`gpumpi._device` forgets its adapters
there, so that :func:`~gpumpi._device.adapter` / :func:`~gpumpi._device.sim_adapter`
create a fresh one).  The hook is installed when the first SimAdapter is made.

*Permissions.*  Opening ``/proc/<pid>/fd/<fd>`` needs ptrace read access to the
exporter (``PTRACE_MODE_READ_FSCREDS``): same user, exporter dumpable (not
setuid, no ``PR_SET_DUMPABLE`` 0), no LSM refusal, and the same pid namespace.
Yama's ``ptrace_scope`` restricts only attaching, not this check, but the ranks'
``PR_SET_PTRACER_ANY`` does no harm.  A refusal raises IpcUnsupported.  Each live
device allocation or interprocess event holds one descriptor in the exporter,
so ``RLIMIT_NOFILE`` bounds how many can be live at once.

Threads: each adapter serialises its state with one re-entrant lock; waits on
another process's event spin outside it only in ``event_synchronize``.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import secrets
import struct
import threading
import time
import weakref
from collections import deque

from .. import _memfd
from .base import (
    DEVICE,
    HANDLE_SIZE,
    HOST,
    MANAGED,
    POOL,
    CudaError,
    IpcUnsupported,
    PointerInfo,
    StaleHandle,
    checked_address,
    checked_nbytes,
)

__all__ = ["SimAdapter", "SimStream", "SimEvent", "AFTER_FORK_IN_CHILD"]

PAGE = _memfd.PAGE


# -- simulated device: header page and handles ----------------------------------------------

_MAGIC = b"gpumpiS1"
_KIND_MEM, _KIND_EVENT = 1, 2
_LIVE, _DEAD = 1, 2
# header page: magic, kind, state, token, serial, size, pid
_HDR = struct.Struct("<8sIIQQQI")
_OFF_STATE = 12
_OFF_RECORDED, _OFF_COMPLETED = 64, 72  # interprocess events: two u64 counters
# handle: magic, version, device, reserved, pid, fd, size, serial, token, 24 bytes of padding
_HANDLE = struct.Struct("<4sBBHiiQQQ24x")
_H_MEM, _H_EVENT = b"gpMH", b"gpEH"
assert _HANDLE.size == HANDLE_SIZE


def _write_header(m: int, kind: int, token: int, serial: int, size: int) -> None:
    _HDR.pack_into((ctypes.c_char * _HDR.size).from_address(m), 0, _MAGIC, kind, _LIVE, token, serial, size,
                   os.getpid())


def _read_header(m: int) -> tuple:
    return _HDR.unpack(ctypes.string_at(m, _HDR.size))


def _mark_dead(m: int) -> None:
    ctypes.c_uint32.from_address(m + _OFF_STATE).value = _DEAD


def _parse_handle(call: str, handle, magic: bytes) -> tuple:
    if not isinstance(handle, (bytes, bytearray, memoryview)):
        raise TypeError(f"{call}: handle must be bytes ({type(handle).__name__})")
    handle = bytes(handle)
    if len(handle) != HANDLE_SIZE:
        raise ValueError(f"{call}: handle must be {HANDLE_SIZE} bytes ({len(handle)})")
    fields = _HANDLE.unpack(handle)
    if fields[0] != magic or fields[1] != 1:
        kind = "memory" if magic == _H_MEM else "event"
        raise ValueError(f"{call}: not a simulated-device {kind} handle (magic {fields[0]!r}, "
                         f"version {fields[1]})")
    return handle, fields[2:]  # device, reserved, pid, fd, size, serial, token


def _open_peer(call: str, pid: int, fd: int, kind: int, size: int, serial: int, token: int,
               map_len: int) -> int:
    """Map the peer's memfd ``/proc/pid/fd/fd`` and check its header; returns the mapping."""
    path = _memfd.peer_path(pid, fd)
    try:
        myfd = _memfd.open_peer(pid, fd)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise StaleHandle(f"{call}: the exporter's allocation is gone (pid {pid} fd {fd}: {exc.strerror})") from exc
    except PermissionError as exc:
        raise IpcUnsupported(f"{call}: no permission to open the exporter's memory ({path}: {exc.strerror}; "
                             f"needs the same user and ptrace read access)") from exc
    try:
        st = os.fstat(myfd)
        if st.st_size != map_len:
            raise StaleHandle(f"{call}: stale handle (pid {pid} fd {fd} now names another file, "
                              f"{st.st_size} bytes, expected {map_len})")
        m = _memfd.map_shared(call, map_len, myfd)
    finally:
        os.close(myfd)
    try:
        magic, hkind, state, htoken, hserial, hsize, _ = _read_header(m)
        if magic != _MAGIC or hkind != kind or htoken != token or hserial != serial or hsize != size:
            raise StaleHandle(f"{call}: stale handle (pid {pid} fd {fd} now names another allocation: "
                              f"serial {hserial}, expected {serial})")
        if state != _LIVE:
            raise StaleHandle(f"{call}: stale handle (the exporter freed allocation {serial} of pid {pid})")
    except BaseException:
        _memfd.unmap(m, map_len)
        raise
    return m


def _spin_until(cond) -> None:
    """Wait for another process: spin briefly, then yield, then sleep in short steps."""
    for _ in range(200):
        if cond():
            return
    delay = 0.0
    while not cond():
        time.sleep(delay)
        delay = min(0.001, delay * 2 or 0.00002)


# -- simulated device: allocations, streams, events ------------------------------------------


class _Alloc:
    __slots__ = ("base", "size", "kind", "device", "map_addr", "map_len", "fd", "serial", "handle", "refs",
                 "key")

    def __init__(self, base, size, kind, device, map_addr, map_len, fd=-1, serial=0, handle=None, refs=None,
                 key=None):
        self.base = base
        self.size = size
        self.kind = kind
        self.device = device
        self.map_addr = map_addr
        self.map_len = map_len
        self.fd = fd  # our memfd (exported device memory, kept open for peers), else -1
        self.serial = serial
        self.handle = handle  # export handle (own device memory), else None
        self.refs = refs  # open count (memory opened from a peer's handle), else None
        self.key = key  # the handle bytes it was opened with


class SimStream:
    """A simulated stream: a FIFO queue of operations that run only when observed."""

    __slots__ = ("adapter", "name", "queue", "__weakref__")

    def __init__(self, adapter: SimAdapter, name: str) -> None:
        self.adapter = adapter
        self.name = name
        self.queue: deque = deque()  # (seq, op, a, b, c)

    def __repr__(self) -> str:
        return f"<SimStream {self.name} pending={len(self.queue)}>"


def _release_event_page(m: int, fd: int, owner_pid: int) -> None:
    if owner_pid == os.getpid():
        _mark_dead(m)  # peers opening our handle from now on get StaleHandle
    _memfd.unmap(m, PAGE)
    if fd >= 0 and owner_pid == os.getpid():
        try:
            os.close(fd)
        except OSError:
            pass


class SimEvent:
    """A simulated event.  Interprocess ones keep their counters in a shared page."""

    __slots__ = ("adapter", "interprocess", "remote", "_rec", "_last", "_lagged", "_shm", "_recorded",
                 "_completed", "_handle", "_fin", "__weakref__")

    def __init__(self, adapter: SimAdapter, interprocess: bool, remote: bool = False) -> None:
        self.adapter = adapter
        self.interprocess = interprocess
        self.remote = remote  # opened from another process's handle
        self._rec = 0  # records so far (process-local events)
        self._last = None  # (stream, seq) of the most recent record
        self._lagged = 0
        self._shm = None  # mapping of the shared page (interprocess events)
        self._recorded = self._completed = None  # ctypes u64 cells in the shared page
        self._handle = None
        self._fin = None

    def _attach(self, m: int, fd: int, owner_pid: int) -> None:
        self._shm = m
        self._recorded = ctypes.c_uint64.from_address(m + _OFF_RECORDED)
        self._completed = ctypes.c_uint64.from_address(m + _OFF_COMPLETED)
        self._fin = weakref.finalize(self, _release_event_page, m, fd, owner_pid)

    def __repr__(self) -> str:
        kind = "interprocess " if self.interprocess else ""
        return f"<SimEvent {kind}{'opened ' if self.remote else ''}at {id(self):#x}>"


_ALL_SIMS: weakref.WeakSet = weakref.WeakSet()


class SimAdapter:
    """The simulated device (see the module docstring for the model).

    Args:
        ndevices: number of simulated devices (``set_device`` accepts 0..ndevices-1).
        query_lag: how many times ``event_query`` answers False for a pending
            record before running its stream (0: never).
    """

    name = "sim"

    def __init__(self, ndevices: int = 1, *, query_lag: int = 0) -> None:
        if not isinstance(ndevices, int) or ndevices < 1:
            raise ValueError(f"SimAdapter: ndevices must be an integer >= 1 ({ndevices!r})")
        if not hasattr(os, "memfd_create"):
            raise RuntimeError("SimAdapter: needs os.memfd_create (Linux 3.17+)")
        self._lock = threading.RLock()
        self._token = secrets.randbits(64) | 1
        self._pid = os.getpid()
        self._ndev = ndevices
        self._tls = threading.local()
        self._allocs: dict[int, _Alloc] = {}
        self._bases: list[int] = []  # sorted allocation bases
        self._serial = 0
        self._opened: dict[bytes, _Alloc] = {}  # handle -> mapping opened from a peer
        self._registered: dict[int, int] = {}  # host_register: base -> bytes
        self._seq = 0
        self._busy: set = set()  # streams with queued work
        self._nstreams = 0
        self._running = 0
        self._deferred: list[int] = []
        self._detached = False
        self.query_lag = int(query_lag)
        self.default_stream = SimStream(self, "default")
        _install_fork_hook()
        _ALL_SIMS.add(self)

    def __repr__(self) -> str:
        return f"<SimAdapter pid={self._pid} allocations={len(self._allocs)} devices={self._ndev}>"

    # -- devices -------------------------------------------------------------------------

    def _check(self) -> None:
        if self._detached:
            raise RuntimeError(f"SimAdapter: adapter of process {self._pid} used in forked child {os.getpid()} "
                               f"(call gpumpi._device.adapter() again in the child)")

    def device_count(self) -> int:
        return self._ndev

    def current_device(self) -> int:
        return getattr(self._tls, "device", 0)

    def set_device(self, i: int) -> None:
        if not isinstance(i, int) or not 0 <= i < self._ndev:
            raise ValueError(f"set_device: no such device ({i!r}; {self._ndev} simulated)")
        self._tls.device = i

    # -- memory --------------------------------------------------------------------------

    def _insert(self, a: _Alloc) -> None:
        self._allocs[a.base] = a
        bisect.insort(self._bases, a.base)

    def _remove(self, a: _Alloc) -> None:
        del self._allocs[a.base]
        i = bisect.bisect_left(self._bases, a.base)
        del self._bases[i]

    def _lookup(self, addr: int) -> _Alloc | None:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0:
            a = self._allocs[self._bases[i]]
            if addr < a.base + max(a.size, 1):
                return a
        return None

    def _shared(self, call: str, name: str, length: int, kind: int, size: int) -> tuple[int, int, int]:
        """A new shared mapping of ``length`` bytes (a memfd peers open through its handle), its
        header written: ``(address, fd, serial)``."""
        fd, m = _memfd.create_mapped(call, name, length)
        with self._lock:
            self._serial += 1
            serial = self._serial
        _write_header(m, kind, self._token, serial, size)
        return m, fd, serial

    def alloc(self, nbytes: int) -> int:
        """Allocate device memory (cudaMalloc); 0 bytes gives address 0."""
        n = checked_nbytes("alloc", nbytes)
        self._check()
        if n == 0:
            return 0
        map_len = PAGE + _memfd.round_pages(n)
        m, fd, serial = self._shared("alloc", "gpumpi-sim", map_len, _KIND_MEM, n)
        with self._lock:
            dev = self.current_device()
            handle = _HANDLE.pack(_H_MEM, 1, dev, 0, self._pid, fd, n, serial, self._token)
            self._insert(_Alloc(m + PAGE, n, DEVICE, dev, m, map_len, fd, serial, handle))
        return m + PAGE

    def _alloc_anon(self, call: str, nbytes: int, kind: str, device) -> int:
        n = checked_nbytes(call, nbytes)
        self._check()
        if n == 0:
            return 0
        map_len = _memfd.round_pages(n)
        m = _memfd.map_anonymous(call, map_len)
        with self._lock:
            self._insert(_Alloc(m, n, kind, device, m, map_len))
        return m

    def alloc_managed(self, nbytes: int) -> int:
        """Allocate managed memory (cudaMallocManaged): usable, not exportable."""
        return self._alloc_anon("alloc_managed", nbytes, MANAGED, self.current_device())

    def alloc_pool(self, nbytes: int, stream=None) -> int:
        """Allocate stream-ordered pool memory (cudaMallocAsync): usable, not exportable."""
        self._stream("alloc_pool", stream)
        return self._alloc_anon("alloc_pool", nbytes, POOL, self.current_device())

    def alloc_host(self, nbytes: int) -> int:
        """Allocate page-locked host memory (cudaHostAlloc); plain host memory here."""
        return self._alloc_anon("alloc_host", nbytes, HOST, None)

    def host_register(self, addr: int, nbytes: int) -> None:
        """Page-lock existing host memory (cudaHostRegister, portable); it stays host memory.

        As in CUDA, a range overlapping one already registered is refused, and so is
        device memory.
        """
        addr, n = checked_address("host_register", addr), checked_nbytes("host_register", nbytes)
        self._check()
        with self._lock:
            if self._lookup(addr) is not None or self._lookup(addr + n - 1) is not None:
                raise CudaError(f"host_register: {addr:#x} is not pageable host memory")
            for b, m in self._registered.items():
                if b < addr + n and addr < b + m:
                    raise CudaError(f"host_register: memory already registered ({addr:#x}+{n} overlaps {b:#x}+{m})")
            self._registered[addr] = n

    def host_unregister(self, addr: int) -> None:
        """Undo :meth:`host_register` (cudaHostUnregister); ``addr`` is the registered base."""
        addr = checked_address("host_unregister", addr)
        with self._lock:
            if self._registered.pop(addr, None) is None:
                raise CudaError(f"host_unregister: memory not registered ({addr:#x})")

    def host_registered(self, addr: int) -> bool:
        """Whether ``addr`` lies in memory registered with :meth:`host_register` (tests)."""
        with self._lock:
            return any(b <= addr < b + m for b, m in self._registered.items())

    def free(self, addr: int) -> None:
        """Free device, managed or pool memory (cudaFree / cudaFreeAsync); runs queued work first."""
        self._free("free", addr, (DEVICE, MANAGED, POOL))

    def free_host(self, addr: int) -> None:
        """Free memory from :meth:`alloc_host` (cudaFreeHost)."""
        self._free("free_host", addr, (HOST,))

    def _free(self, call: str, addr: int, kinds: tuple) -> None:
        addr = checked_address(call, addr)
        if addr == 0:
            return
        self._check()
        with self._lock:
            a = self._allocs.get(addr)
            if a is None or a.refs is not None or a.kind not in kinds:
                what = ("memory opened from an IPC handle (use ipc_close)" if a is not None and a.refs is not None
                        else f"{a.kind} memory" if a is not None else "not the base of a live allocation")
                raise ValueError(f"{call}: cannot free {addr:#x} ({what})")
            if self._running:  # a finalizer during a queued operation: free when the queues are idle
                if addr not in self._deferred:
                    self._deferred.append(addr)
                return
            self._sync_all()
            self._release(a)

    def _release(self, a: _Alloc) -> None:
        self._remove(a)
        if a.fd >= 0:
            _mark_dead(a.map_addr)
        _memfd.unmap(a.map_addr, a.map_len)
        if a.fd >= 0:
            os.close(a.fd)

    def pointer_info(self, addr: int) -> PointerInfo:
        """Attributes of ``addr``: its memory kind, device and containing allocation."""
        addr = checked_address("pointer_info", addr)
        with self._lock:
            a = self._lookup(addr)
            if a is None:
                return PointerInfo(HOST, None, None, None)
            return PointerInfo(a.kind, a.device, a.base, a.size, a.handle is not None)

    def host_view(self, addr: int, nbytes: int) -> memoryview:
        """A writable byte view of ``nbytes`` at ``addr`` (simulated device memory is host memory).

        It does not synchronize: queued copies into the range have not run yet.
        """
        addr = checked_address("host_view", addr)
        n = checked_nbytes("host_view", nbytes)
        if n == 0:
            return memoryview(bytearray())
        with self._lock:
            a = self._lookup(addr)
            if a is not None and addr + n > a.base + a.size:
                raise ValueError(f"host_view: range runs past the end of its allocation "
                                 f"(addr {addr:#x}, {n} bytes, allocation {a.base:#x} of {a.size} bytes)")
        return memoryview((ctypes.c_char * n).from_address(addr)).cast("B")

    # -- IPC ----------------------------------------------------------------------------

    def ipc_export(self, addr: int) -> tuple[bytes, int]:
        """The IPC handle of the allocation containing ``addr``, and ``addr``'s offset in it."""
        addr = checked_address("ipc_export", addr)
        self._check()
        with self._lock:
            a = self._lookup(addr)
            if a is None or a.kind == HOST:
                raise IpcUnsupported(f"ipc_export: host memory cannot be exported (addr {addr:#x})")
            if a.kind in (MANAGED, POOL):
                raise IpcUnsupported(f"ipc_export: {a.kind} memory cannot be exported through CUDA IPC "
                                     f"(addr {addr:#x}, allocation {a.base:#x})")
            if a.handle is None:
                raise IpcUnsupported(f"ipc_export: memory opened from another process's handle cannot be "
                                     f"exported again (addr {addr:#x})")
            return a.handle, addr - a.base

    def ipc_open(self, handle: bytes) -> int:
        """Map a peer's allocation (cudaIpcOpenMemHandle); returns its base, reference counted."""
        handle, f = _parse_handle("ipc_open", handle, _H_MEM)
        dev, _, pid, fd, size, serial, token = f
        self._check()
        if pid == self._pid and token == self._token:
            raise IpcUnsupported(f"ipc_open: the handle was exported by this process (pid {pid}); "
                                 f"CUDA cannot open its own handles")
        with self._lock:
            a = self._opened.get(handle)
            if a is not None:
                if ctypes.c_uint32.from_address(a.map_addr + _OFF_STATE).value != _LIVE:
                    raise StaleHandle(f"ipc_open: stale handle (the exporter freed allocation {serial} "
                                      f"of pid {pid})")
                a.refs += 1
                return a.base
            map_len = PAGE + _memfd.round_pages(size)
            m = _open_peer("ipc_open", pid, fd, _KIND_MEM, size, serial, token, map_len)
            a = _Alloc(m + PAGE, size, DEVICE, dev, m, map_len, refs=1, key=handle)
            self._insert(a)
            self._opened[handle] = a
            return a.base

    def ipc_close(self, base: int) -> None:
        """Drop one reference to memory from :meth:`ipc_open`; unmapped at zero (runs queued work first)."""
        base = checked_address("ipc_close", base)
        self._check()
        with self._lock:
            a = self._allocs.get(base)
            if a is None or a.refs is None:
                raise ValueError(f"ipc_close: {base:#x} is not the base of memory opened with ipc_open")
            a.refs -= 1
            if a.refs:
                return
            self._sync_all()
            self._remove(a)
            del self._opened[a.key]
            _memfd.unmap(a.map_addr, a.map_len)

    # -- streams ------------------------------------------------------------------------

    def _stream(self, call: str, s) -> SimStream:
        if s is None:
            return self.default_stream
        if type(s) is SimStream and s.adapter is self:
            return s
        raise TypeError(f"{call}: not a stream of this SimAdapter ({s!r})")

    def check_stream(self, s):
        """``s`` if it is a stream of this adapter (or None), else TypeError."""
        return s if s is None else self._stream("check_stream", s)

    def current_stream(self) -> SimStream:
        """The stream ``stream=None`` means: the adapter's default stream."""
        return self.default_stream

    def stream_create(self) -> SimStream:
        """A new stream (cudaStreamCreateWithFlags(cudaStreamNonBlocking))."""
        self._check()
        with self._lock:
            self._nstreams += 1
            return SimStream(self, f"stream-{self._nstreams}")

    def _enqueue(self, s: SimStream, op: str, a=None, b=None, c=None) -> int:
        self._seq += 1
        s.queue.append((self._seq, op, a, b, c))
        self._busy.add(s)
        return self._seq

    def _run(self, s: SimStream, upto: int | None = None) -> None:
        """Run ``s`` in order, up to and including sequence number ``upto`` (None: all)."""
        with self._lock:
            self._running += 1
            try:
                q = s.queue
                while q and (upto is None or q[0][0] <= upto):
                    _, op, a, b, c = q.popleft()
                    if op == "copy":
                        ctypes.memmove(a, b, c)
                    elif op == "record":
                        if a._shm is not None:
                            if a._completed.value < b:
                                a._completed.value = b
                    elif op == "wait":  # a local event: run its stream up to the record
                        self._run(b, c)
                    elif op == "waitx":  # an interprocess event: wait for the peer's stream
                        cell = a._completed
                        _spin_until(lambda cell=cell, target=b: cell.value >= target)
                    else:  # "fn"
                        a()
                if not q:
                    self._busy.discard(s)
            finally:
                self._running -= 1
            if not self._running and self._deferred:
                self._free_deferred()

    def _free_deferred(self) -> None:
        todo, self._deferred = self._deferred, []
        self._sync_all()
        for addr in todo:
            a = self._allocs.get(addr)
            if a is not None and a.refs is None:
                self._release(a)

    def _sync_all(self) -> None:
        with self._lock:
            while self._busy:
                for s in list(self._busy):
                    self._run(s)

    def synchronize(self) -> None:
        """Run every queued operation of every stream (cudaDeviceSynchronize; tests and teardown)."""
        self._check()
        self._sync_all()

    def stream_synchronize(self, s) -> None:
        """Run all of ``s`` (cudaStreamSynchronize)."""
        self._check()
        self._run(self._stream("stream_synchronize", s))

    def memcpy(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        """Enqueue a copy of ``nbytes`` from ``src`` to ``dst`` on ``stream`` (cudaMemcpyAsync, Default kind)."""
        dst = checked_address("memcpy", dst)
        src = checked_address("memcpy", src)
        n = checked_nbytes("memcpy", nbytes)
        self._check()
        with self._lock:
            s = self._stream("memcpy", stream)
            if n == 0:
                return
            for what, p in (("destination", dst), ("source", src)):
                a = self._lookup(p)
                if a is not None and p + n > a.base + a.size:
                    raise ValueError(f"memcpy: {what} runs past the end of its allocation "
                                     f"({what} {p:#x}, {n} bytes, allocation {a.base:#x} of {a.size} bytes)")
            if dst == 0 or src == 0:
                raise ValueError(f"memcpy: null pointer (dst {dst:#x}, src {src:#x}, {n} bytes)")
            self._enqueue(s, "copy", dst, src, n)

    def launch_host_func(self, s, fn) -> None:
        """Enqueue ``fn()`` on ``s`` (cudaLaunchHostFunc): it runs when the stream reaches it.

        As in CUDA, ``fn`` must not call the adapter (frees are deferred, other calls are not).
        """
        if not callable(fn):
            raise TypeError(f"launch_host_func: fn must be callable ({type(fn).__name__})")
        self._check()
        with self._lock:
            self._enqueue(self._stream("launch_host_func", s), "fn", fn)

    # -- events -------------------------------------------------------------------------

    def _event(self, call: str, e) -> SimEvent:
        if type(e) is SimEvent and e.adapter is self:
            if e._fin is not None and not e._fin.alive:
                raise ValueError(f"{call}: the event was destroyed ({e!r})")
            return e
        raise TypeError(f"{call}: not an event of this SimAdapter ({e!r})")

    def event_create(self, interprocess: bool = False) -> SimEvent:
        """A new event (cudaEventCreateWithFlags; interprocess: Interprocess | DisableTiming)."""
        self._check()
        e = SimEvent(self, bool(interprocess))
        if interprocess:
            m, fd, serial = self._shared("event_create", "gpumpi-sim-event", PAGE, _KIND_EVENT, 0)
            e._handle = _HANDLE.pack(_H_EVENT, 1, self.current_device(), 0, self._pid, fd, 0, serial, self._token)
            e._attach(m, fd, self._pid)
        return e

    def event_destroy(self, e) -> None:
        """Destroy an event now (cudaEventDestroy); otherwise garbage collection does it."""
        e = self._event("event_destroy", e)
        if e._fin is not None:
            e._fin()

    def _pending(self, last) -> bool:
        if last is None:
            return False
        s, seq = last
        q = s.queue
        return bool(q) and q[0][0] <= seq

    def event_record(self, e, s=None) -> None:
        """Enqueue a record of ``e`` on ``s`` (cudaEventRecord); interprocess events run ``s`` to it now."""
        self._check()
        with self._lock:
            e = self._event("event_record", e)
            s = self._stream("event_record", s)
            if e._shm is None:
                e._rec += 1
                e._last = (s, self._enqueue(s, "record", e, e._rec))
                e._lagged = 0
                return
            r = e._recorded.value + 1
            e._recorded.value = r
            seq = self._enqueue(s, "record", e, r)
            e._last = (s, seq)
            self._run(s, seq)

    def event_query(self, e) -> bool:
        """Whether the work before ``e``'s last record is done (cudaEventQuery); runs it if local."""
        self._check()
        with self._lock:
            e = self._event("event_query", e)
            last = e._last
            if self._pending(last):
                if e._lagged < self.query_lag:
                    e._lagged += 1
                    return False
                self._run(*last)
            if e._shm is not None:
                return e._completed.value >= e._recorded.value
            return True

    def event_synchronize(self, e) -> None:
        """Wait until the work before ``e``'s last record is done (cudaEventSynchronize)."""
        self._check()
        with self._lock:
            e = self._event("event_synchronize", e)
            if self._pending(e._last):
                self._run(*e._last)
            if e._shm is None:
                return
            target = e._recorded.value
        _spin_until(lambda: e._completed.value >= target)

    def stream_wait_event(self, s, e) -> None:
        """Make ``s`` wait for ``e``'s most recent record (cudaStreamWaitEvent); never-recorded: no-op."""
        self._check()
        with self._lock:
            s = self._stream("stream_wait_event", s)
            e = self._event("stream_wait_event", e)
            if e._shm is not None:
                self._enqueue(s, "waitx", e, e._recorded.value)
            elif e._last is not None:
                self._enqueue(s, "wait", None, e._last[0], e._last[1])

    def ipc_event_export(self, e) -> bytes:
        """The IPC handle of an interprocess event (cudaIpcGetEventHandle)."""
        self._check()
        with self._lock:
            e = self._event("ipc_event_export", e)
            if not e.interprocess:
                raise IpcUnsupported("ipc_event_export: the event was not created with interprocess=True")
            if e.remote:
                raise IpcUnsupported("ipc_event_export: an event opened from another process's handle "
                                     "cannot be exported again")
            if self._pending(e._last):
                self._run(*e._last)
            return e._handle

    def ipc_event_open(self, handle: bytes) -> SimEvent:
        """Open a peer's interprocess event (cudaIpcOpenEventHandle); a new event object each time."""
        handle, f = _parse_handle("ipc_event_open", handle, _H_EVENT)
        _, _, pid, fd, _, serial, token = f
        self._check()
        if pid == self._pid and token == self._token:
            raise IpcUnsupported(f"ipc_event_open: the handle was exported by this process (pid {pid})")
        m = _open_peer("ipc_event_open", pid, fd, _KIND_EVENT, 0, serial, token, PAGE)
        e = SimEvent(self, True, remote=True)
        e._attach(m, -1, pid)
        return e

    # -- fork -----------------------------------------------------------------------------

    def _forsake(self) -> None:
        """In a forked child: detach from the parent's state (mappings stay, nothing is marked dead)."""
        self._detached = True
        self._busy = set()
        for a in self._allocs.values():
            if a.fd >= 0:
                try:
                    os.close(a.fd)
                except OSError:
                    pass
                a.fd = -1


# -- fork ---------------------------------------------------------------------------------------

#: callables run in a forked child once every SimAdapter is detached
AFTER_FORK_IN_CHILD: list = []
_fork_hook: list = []


def _after_fork_in_child() -> None:
    for a in list(_ALL_SIMS):
        a._forsake()
    for fn in AFTER_FORK_IN_CHILD:
        fn()


def _install_fork_hook() -> None:
    if not _fork_hook:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook.append(True)
