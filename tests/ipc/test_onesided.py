"""Contract tests for the one-sided capabilities of region transports (``ONE_SIDED``, ``ATOMICS``).

The contract (``gpumpi/ipc/base.py``: ``Region.expose``/``attach``, :class:`~gpumpi.ipc.base.Remote`,
and each transport's docstring):

* *honest flags*: a transport with ``ONE_SIDED`` implements ``expose`` and ``attach``; one
  without exposes nothing (None) and refuses ``attach`` (NotImplementedError); ``ATOMICS``
  only with ``ONE_SIDED``;
* *expose*: a transport describes exactly the memory :data:`EXPECT` says it can (``shm``:
  memory of a memfd; ``cma``: any host memory while the kernel allows cross-memory attach;
  ``self``: any memory of this process; ``cuda_ipc``: device memory CUDA IPC exports), and
  None for other memory;
* *attach*: the remote of a description reaches that memory: ``read`` gathers runs in
  order and ``write`` scatters consecutive bytes into runs, exactly the bytes named and
  not one more, complete when they return; ``mapped`` remotes have the memory at ``base``
  in this process; ``atomic`` exactly where the transport states ``ATOMICS``;
* *atomics*: an atomic remote's ``accumulate`` applies repeated offsets one after another
  and fetches the old elements, ``compare_and_swap`` swaps only on equal bits and returns
  the old bytes, and both are atomic against another process updating the same memory
  through its own attach of the same description (the owner included);
* *routes*: :func:`gpumpi.ipc.base.expose` asks the one-sided transports, ``ATOMICS`` ones
  first, and takes the first that reaches every other member and exposes the memory;
  :func:`gpumpi.ipc.base.attach` reaches it through the transport of the same ident, and
  names a transport this rank does not route over.

Device memory is the simulated device; the checks across processes fork ranks with
``run_ranks`` and pass descriptions over frame rings of their own.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import types

import numpy as np
import pytest

from gpumpi import _config, _memfd
from gpumpi._device import sim_adapter
from gpumpi.ipc import base, cma
from gpumpi.ipc.base import ATOMICS, DEVICE, HOST, ONE_SIDED
from gpumpi.ipc.jobseg import JobSegment
from gpumpi.testing import SimDeviceArray, run_ranks



def rid(key) -> str:
    return f"{key[0]}:{key[1]}"


def world(rank=0, size=3, cma_on=True):
    """The part of ``_bootstrap.World`` a transport constructor reads (every peer's pid is ours)."""
    cfg = dataclasses.replace(_config.get(), cma=cma_on)
    return types.SimpleNamespace(rank=rank, size=size, seg=None, cfg=cfg, stage=(4, 1 << 16), pid=lambda p: os.getpid())


def build(key, rank=0, size=3, **kw):
    return base.lookup(*key)(world(rank, size, **kw))


def pattern(n: int, seed: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint32) * 13 + seed * 101 + 7) & 0xFF).astype(np.uint8)


def need_cma():
    if not cma.available():
        pytest.skip("cross-memory attach is not available here (no process_vm_readv, or Yama ptrace_scope > 1)")

pytestmark = pytest.mark.timeout(120)

SENTINEL = 0xA5

#: what each one-sided transport exposes ("memfd": memory of a memfd only; "any": any memory of
#: its kind), whether its remotes are mapped here (for a peer of another process; None: it reaches
#: no other process) and atomic, and whether another process attaches it ("across")
EXPECT = {
    (HOST, "self"): dict(exposes="any", mapped_peer=None, atomic=False, across=False),
    (HOST, "shm"): dict(exposes="memfd", mapped_peer=True, atomic=True, across=True),
    (HOST, "cma"): dict(exposes="any", mapped_peer=False, atomic=False, across=True),
    (DEVICE, "self"): dict(exposes="any", mapped_peer=None, atomic=True, across=False),
    (DEVICE, "cuda_ipc"): dict(exposes="any", mapped_peer=False, atomic=True, across=True),
}
ALL = [(m, n) for m in (HOST, DEVICE) for n in base.known(m)]
ONE_SIDED_KEYS = [k for k in ALL if base.lookup(*k).caps & ONE_SIDED]


def _skip_unusable(key):
    if key == (HOST, "cma"):
        need_cma()


class Memory:
    """Memory of ``key``'s kind holding a pattern: host (a memfd mapping or a NumPy array) or
    simulated device memory; ``mem`` is what ``expose`` takes, ``bytes()`` what is there now."""

    def __init__(self, key, n: int, memfd: bool = True, seed: int = 1) -> None:
        self.n = n
        self.device = key[0] == DEVICE
        self.fd = None
        if self.device:
            self.ad = sim_adapter()
            self.array = SimDeviceArray.zeros(n, np.uint8)
            self.array.set(pattern(n, seed))
            self.addr = self.array.ptr
            self.mem = (self.ad, self.addr, n)
        elif memfd:
            self.length = _memfd.round_pages(n)
            self.fd, self.addr = _memfd.create_mapped("test", "onesided", self.length)
            self.view()[:] = pattern(n, seed)
            self.mem = (self.addr, n, (self.fd, 0, self.length))
        else:
            self.array = pattern(n, seed)
            self.addr = self.array.ctypes.data
            self.mem = (self.addr, n, None)

    def view(self) -> np.ndarray:
        import ctypes

        return np.frombuffer((ctypes.c_ubyte * self.n).from_address(self.addr), np.uint8)

    def bytes(self) -> np.ndarray:
        if self.device:
            return self.array.get().copy()
        return self.view().copy() if self.fd is not None else self.array.copy()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            _memfd.unmap(self.addr, self.length)
            self.fd = None


def _stream_of():
    s = {}
    return lambda ad: s.setdefault(ad.name, ad.stream_create())


# --- flags ---------------------------------------------------------------------------------------


def test_every_one_sided_transport_has_a_contract():
    assert set(ONE_SIDED_KEYS) == set(EXPECT), "a one-sided transport was added (or removed) without its contract"


@pytest.mark.parametrize("key", ALL, ids=rid)
def test_one_sided_flags_are_honest(key):
    cls = base.lookup(*key)
    if cls.caps & ATOMICS:
        assert cls.caps & ONE_SIDED, "atomic updates in a peer's memory are one-sided"
    if cls.caps & ONE_SIDED:
        assert cls.expose is not base.Region.expose and cls.attach is not base.Region.attach
        assert bool(cls.caps & ATOMICS) == EXPECT[key]["atomic"]
        return
    t = build(key, 0)
    mem = Memory(key, 64, memfd=key[0] == HOST)
    try:
        assert t.expose(mem.mem) is None
        with pytest.raises(NotImplementedError):
            t.attach(0, None)
    finally:
        mem.close()
        t.close()


# --- in one process: expose, attach our own memory, move runs ------------------------------------

RUNS = {  # (memory size, [(offset, length), ...])
    "one": (64, [(0, 64)]),
    "inner": (4099, [(3, 4000)]),
    "several": (1000, [(1, 3), (10, 0), (17, 100), (500, 499)]),
    "repeat-order": (256, [(128, 16), (0, 16), (64, 8)]),
    "page-crossing": (3 * 4096, [(4090, 12), (8190, 4)]),
}


@pytest.mark.parametrize("case", RUNS.values(), ids=RUNS.keys())
@pytest.mark.parametrize("key", ONE_SIDED_KEYS, ids=rid)
def test_own_memory_read_write_runs(key, case):
    _skip_unusable(key)
    n, runs = case
    e = EXPECT[key]
    t = build(key, 0)
    mem = Memory(key, n, memfd=e["exposes"] == "memfd" or key[0] == HOST)
    other = Memory(key, n, memfd=False) if key[0] == HOST else None
    try:
        if e["exposes"] == "memfd":
            assert t.expose(other.mem) is None, "a memfd transport exposes memfd memory only"
        desc = t.expose(mem.mem)
        assert desc is not None
        desc = pickle.loads(pickle.dumps(desc))  # it travels to the members
        rem = t.attach(0, desc, _stream_of())
        assert rem.base == mem.addr
        assert rem.mapped == (key[0] == HOST)
        assert (rem.device is not None) == (key[0] == DEVICE)
        before = mem.bytes()
        segs = [(mem.addr + o, ln) for o, ln in runs]
        want = b"".join(before[o:o + ln].tobytes() for o, ln in runs)
        dst = np.full(len(want) + 16, SENTINEL, np.uint8)
        rem.read(segs, dst.ctypes.data)
        assert dst[:len(want)].tobytes() == want and (dst[len(want):] == SENTINEL).all()
        src = pattern(len(want), 9)
        rem.write(src.ctypes.data, segs)
        rem.sync()
        expect = before.copy()
        pos = 0
        for o, ln in runs:
            expect[o:o + ln] = src[pos:pos + ln]
            pos += ln
        assert (mem.bytes() == expect).all(), "write touched bytes outside its runs, or missed some"
        rem.close()
    finally:
        mem.close()
        t.close()


ATOMIC_KEYS = [k for k in ONE_SIDED_KEYS if base.lookup(*k).caps & ATOMICS]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
@pytest.mark.parametrize("key", ATOMIC_KEYS, ids=rid)
def test_own_memory_atomics(key, dtype):
    dt = np.dtype(dtype)
    t = build(key, 0)
    mem = Memory(key, 8 * dt.itemsize)
    try:
        rem = t.attach(0, t.expose(mem.mem), _stream_of())
        assert rem.atomic and rem.supported("SUM", dt) and not rem.supported("SUM", np.complex128)
        start = np.arange(8, dtype=dt)
        _put(mem, start)
        offs = np.array([0, 3, 3, 7, 0], np.int64) * dt.itemsize
        vals = np.array([1, 2, 5, 4, 10], dt)
        old = np.empty(5, dt)
        rem.accumulate(mem.addr, offs, vals, "SUM", old)
        want = start.copy()
        seen = []
        for o, v in zip(offs // dt.itemsize, vals):  # in order: a repeated offset sees the update before it
            seen.append(want[o])
            want[o] += v
        assert old.tolist() == seen
        assert _get(mem, dt).tolist() == want.tolist()
        rem.accumulate(mem.addr, offs[:1], np.array([42], dt), "REPLACE", None)
        want[0] = 42
        assert _get(mem, dt).tolist() == want.tolist()
        # compare and swap: swaps on equal bits only, returns the old bytes either way
        a = mem.addr + 2 * dt.itemsize
        assert rem.cas_supported(dt, a)
        got = rem.compare_and_swap(a, np.array([99], dt).tobytes(), np.array([7], dt).tobytes(), dt)
        assert np.frombuffer(got, dt)[0] == want[2] and _get(mem, dt)[2] == want[2]
        got = rem.compare_and_swap(a, np.array([want[2]], dt).tobytes(), np.array([7], dt).tobytes(), dt)
        assert np.frombuffer(got, dt)[0] == want[2] and _get(mem, dt)[2] == 7
        rem.close()
    finally:
        mem.close()
        t.close()


def _put(mem, values):
    raw = np.ascontiguousarray(values).view(np.uint8)
    if mem.device:
        mem.array.set(raw)
    else:
        mem.view()[:] = raw


def _get(mem, dt):
    return mem.bytes().view(dt)


def test_mapped_host_atomics_refuse_misaligned_compare_and_swap():
    t = build((HOST, "shm"), 0)
    mem = Memory((HOST, "shm"), 64)
    try:
        rem = t.attach(0, t.expose(mem.mem))
        assert rem.cas_supported(np.int64, mem.addr + 8) and not rem.cas_supported(np.int64, mem.addr + 4)
        assert not rem.cas_supported(np.dtype("V16"), mem.addr)  # no 16-byte instruction
        rem.close()
    finally:
        mem.close()
        t.close()


# --- routes ----------------------------------------------------------------------------------------


class _Stub(base.Region):
    memory = HOST

    def __init__(self, name, caps, reach, takes):
        self.name, self.caps, self._reach, self._takes = name, caps, reach, takes
        self.ident = 200 + len(name)
        self.attached = []

    def reaches(self, peer):
        return peer in self._reach

    def offer(self, peer, src):
        return None

    def take(self, peer, body, dst, nbytes, skip=0):
        return False

    def expose(self, mem):
        return (self.name, mem) if self._takes(mem) else None

    def attach(self, peer, desc, stream_of=None):
        self.attached.append((peer, desc))
        return base.Remote(peer, 0)


def test_expose_asks_atomic_transports_first_and_needs_every_member():
    plain = _Stub("plain", ONE_SIDED, {0, 1, 2}, lambda m: True)
    atomic = _Stub("atomicx", ONE_SIDED | ATOMICS, {0, 1, 2}, lambda m: m == "memfd")
    narrow = _Stub("narrowxx", ONE_SIDED | ATOMICS, {0, 1}, lambda m: True)
    two_sided = _Stub("two", 0, {0, 1, 2}, lambda m: True)
    regions = [two_sided, plain, narrow, atomic]
    assert base.one_sided(regions) == [narrow, atomic, plain]
    assert base.expose(regions, 0, [0, 1, 2], "memfd") == (atomic.ident, ("atomicx", "memfd"))
    assert base.expose(regions, 0, [0, 1, 2], "private") == (plain.ident, ("plain", "private"))
    assert base.expose(regions, 0, [0, 1], "private") == (narrow.ident, ("narrowxx", "private"))
    assert base.expose([two_sided], 0, [0, 1], "private") is None
    base.attach(regions, atomic.ident, 2, ("atomicx", "memfd"))
    assert atomic.attached == [(2, ("atomicx", "memfd"))] and not plain.attached
    with pytest.raises(OSError, match="does not route over"):
        base.attach([plain], atomic.ident, 2, None)


# --- across two processes --------------------------------------------------------------------------

DESC, DONE, GO = 21, 22, 23
N_ADD = 3000


def _frame(w):
    got = []
    while not got:
        w.frames.flush()
        w.frames.poll(lambda p, hdr, pl: got.append((p, hdr, bytes(pl))), 1)
    return got[0]


def _send(w, peer, kind, payload=b""):
    w.frames.send(peer, kind, 0, w.rank, 0, 0, 0, 0, payload)


def _across(key, seg):
    """Rank 0 exposes memory holding a pattern; rank 1 attaches it, checks a read and writes runs;
    then both add 1 to the same int64 elements ``N_ADD`` times each, at once (atomic transports),
    rank 0 through its own attach: every update must survive."""
    from gpumpi import _bootstrap

    cfg = _config.get()
    seg.set_attached(cfg.rank, os.getpid())
    w = _bootstrap.World(cfg.rank, 2, seg, cfg)
    t = base.lookup(*key)(w)
    e = EXPECT[key]
    n = 4096 + 64
    runs = [(5, 100), (4000, 96), (200, 8)]
    out = {}
    if w.rank == 0:
        mem = Memory(key, n)
        before = mem.bytes()
        desc = t.expose(mem.mem)
        assert desc is not None
        _send(w, 1, DESC, pickle.dumps(desc))
        rem = t.attach(0, desc, _stream_of())
    else:
        _p, hdr, pl = _frame(w)
        assert hdr[1] == DESC
        rem = t.attach(0, pickle.loads(pl), _stream_of())
        assert rem.mapped == e["mapped_peer"] and rem.atomic == e["atomic"]
        want = b"".join(pattern(n, 1)[o:o + ln].tobytes() for o, ln in runs)
        dst = np.empty(len(want), np.uint8)
        rem.read([(rem.base + o, ln) for o, ln in runs], dst.ctypes.data)
        out["read"] = dst.tobytes() == want
        src = pattern(len(want), 5)
        rem.write(src.ctypes.data, [(rem.base + o, ln) for o, ln in runs])
        _send(w, 0, DONE)
    if w.rank == 0:
        _p, hdr, _ = _frame(w)
        assert hdr[1] == DONE
        got = mem.bytes()
        src = pattern(sum(ln for _o, ln in runs), 5)
        expect = before.copy()
        pos = 0
        for o, ln in runs:
            expect[o:o + ln] = src[pos:pos + ln]
            pos += ln
        out["written"] = bool((got == expect).all())
    if e["atomic"]:
        # both at once (each starts when it has the other's GO); offsets repeat inside one call too
        if w.rank == 0:
            _put(mem, np.zeros(n // 8, np.int64))
        _send(w, 1 - w.rank, GO)
        _p, hdr, _ = _frame(w)
        assert hdr[1] == GO
        offs = np.array([0, 8, 8, 4088], np.int64)
        ones = np.ones(4, np.int64)
        for _ in range(N_ADD):
            rem.accumulate(rem.base, offs, ones, "SUM")
        _send(w, 1 - w.rank, DONE)
        _p, hdr, _ = _frame(w)
        assert hdr[1] == DONE
        if w.rank == 0:
            got = _get(mem, np.int64)
            out["sums"] = [int(got[0]), int(got[1]), int(got[511])]
    rem.close()
    if w.rank == 0:
        _send(w, 1, DONE)  # rank 1 has closed its remote before our memory goes
    else:
        _p, hdr, _ = _frame(w)
    if w.rank == 0:
        mem.close()
    t.close()
    w.close()
    return out


@pytest.mark.parametrize("key", [k for k in ONE_SIDED_KEYS if EXPECT[k]["across"]], ids=rid)
def test_attach_across_two_processes(key):
    _skip_unusable(key)
    seg = JobSegment.create(2, 1 << 16)
    try:
        r0, r1 = run_ranks(_across, 2, args=(key, seg), timeout=100)
    finally:
        seg.close()
    assert r1["read"], "the peer read other bytes than the owner exposed"
    assert r0["written"], "the peer's write landed elsewhere, or touched bytes outside its runs"
    if EXPECT[key]["atomic"]:
        assert r0["sums"] == [2 * N_ADD, 4 * N_ADD, 2 * N_ADD], "updates were lost between the two processes"


def test_shm_reaches_a_file_this_process_maps_through_its_own_mapping():
    """A shared window's one segment: a member's memory in a file we map already is reached at our
    mapping's address (the segment stays contiguous), not mapped again."""
    t = build((HOST, "shm"), 0)
    fd, addr = _memfd.create_mapped("test", "seg", 2 * 4096)
    try:
        _memfd.register(addr, 2 * 4096, fd)
        desc = t.expose((addr + 4096, 100, (fd, 4096, 2 * 4096)))
        rem = t.attach(1, desc)  # "another member": found by the file, not by the address
        assert rem.base == addr + 4096 and rem.mapped and rem.atomic
        rem.close()
    finally:
        _memfd.unregister(addr)
        os.close(fd)
        _memfd.unmap(addr, 2 * 4096)
        t.close()


def test_cma_refuses_when_off_and_names_the_errno_of_a_bad_address():
    t = build((HOST, "cma"), 0, cma_on=False)
    assert t.expose((4096, 8, None)) is None
    t.close()
    need_cma()
    t = build((HOST, "cma"), 0)
    rem = t.attach(1, 4096)  # "another rank" whose pid is ours (the test world): address 4096 is unmapped
    dst = np.empty(8, np.uint8)
    with pytest.raises(OSError) as exc:
        rem.read([(4096, 8)], dst.ctypes.data)
    assert not isinstance(exc.value, base.PeerGone) and exc.value.errno
    t.close()

