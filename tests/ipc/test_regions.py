"""Contract tests for region transports (:class:`gpumpi.ipc.base.Region`) and their registry.

The contract (``gpumpi/ipc/base.py`` and each transport's docstring):

* *registry*: every transport module registers its class under ``(memory, name)``;
  ``lookup`` of an unknown name raises ValueError naming the known ones; each class has a
  nonzero ident of one byte (it travels in an offer), unique over both memory kinds;
  ``routes`` builds ``cls(world)`` for each name, in the order named; ``pick`` returns the
  first transport that reaches a peer (None: none does);
* *reach*: ``self`` reaches only its own rank, ``cuda_ipc`` only the other ranks (a process
  cannot open its own IPC handles), ``cma`` every rank while the kernel allows it, the
  push fallbacks ``shm`` and ``staging`` every rank;
* *offer / take*: an offering transport's offer, taken by the peer, moves exactly
  ``nbytes`` from byte ``skip`` of the offered memory (host: a list of segments) into the
  destination and not one byte more, after the producer's work, and has finished when it
  returns True (the engine acknowledges at once and the sender may free its memory);
  ``take`` returns False when the offer cannot be taken here, and then copies nothing; a
  push-only transport offers nothing (None), takes nothing (False) and reaches every peer;
* *capabilities*: flags are honest: ``READ`` exactly for transports that offer, ``WRITE``
  only with ``READ`` (``ONE_SIDED``/``ATOMICS``: ``test_onesided.py``); a transport with ``WRITE`` writes into a peer's
  memory, one without raises NotImplementedError from ``write``;
* *staging*: ``fill`` / ``view`` / ``land`` / ``release`` move a device message of many
  chunks through at most ``slots`` slots in order, and every slot comes back;
  ``reclaim`` takes back exactly the slots a dead peer held.

The transports are parametrized from the registry (``base.known``), and :data:`EXPECT`
states the rules above for each of them: a transport registered without an entry there
fails :func:`test_every_registered_transport_has_a_contract`.  In-process checks use a
small stand-in for :class:`gpumpi._bootstrap.World`; the checks that need two processes
(``cuda_ipc`` cannot take its own offers; ``cma`` between real peers) fork ranks with
``run_ranks`` and talk over the job's frame rings.  Device memory is the simulated device,
which runs queued stream work only when something waits for it: a take that forgot to
wait for the producer's stream reads zeros.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import struct
import types
from collections import Counter

import numpy as np
import pytest

from gpumpi import _config
from gpumpi._device import sim_adapter
from gpumpi.ipc import base, cma
from gpumpi.ipc.base import ATOMICS, DEVICE, DIRECT, HOST, ONE_SIDED, READ, WRITE
from gpumpi.ipc.jobseg import JobSegment
from gpumpi.testing import SimDeviceArray, run_ranks

pytestmark = pytest.mark.timeout(60)

ALL_CAPS = READ | WRITE | ONE_SIDED | ATOMICS | DIRECT
SENTINEL = 0xA5
TAIL = 64  # bytes after every destination that must stay untouched


def _cma_reach(rank, peer):
    return cma.available()


#: what each transport promises: whom it reaches ((rank, peer) -> bool), whether it only
#: pushes, where this test can take its offers (None: push-only; "here": in this process;
#: "ranks": only in another one) and whether another process can take them ("across")
EXPECT = {
    (HOST, "self"): dict(reach=lambda r, p: p == r, push=False, take="here", across=False),
    (HOST, "cma"): dict(reach=_cma_reach, push=False, take="here", across=True),
    (HOST, "shm"): dict(reach=lambda r, p: True, push=True, take=None, across=False),
    (DEVICE, "self"): dict(reach=lambda r, p: p == r, push=False, take="here", across=False),
    (DEVICE, "cuda_ipc"): dict(reach=lambda r, p: p != r, push=False, take="ranks", across=True),
    (DEVICE, "staging"): dict(reach=lambda r, p: True, push=True, take=None, across=False),
    # two-sided between nodes (DIRECT): a world of one node has no rank it reaches; its
    # transfers are tested under mpiexec (tests/ipc/test_mpi.py)
    (HOST, "mpi"): dict(reach=lambda r, p: False, push=False, take=None, across=False, direct=True),
    (DEVICE, "mpi"): dict(reach=lambda r, p: False, push=False, take=None, across=False, direct=True),
}

REGIONS = [(m, n) for m in (HOST, DEVICE) for n in base.known(m)]


def rid(key) -> str:
    return f"{key[0]}:{key[1]}"


def world(rank=0, size=3, seg=None, cma_on=True):
    """The part of ``_bootstrap.World`` a transport constructor reads."""
    cfg = dataclasses.replace(_config.get(), cma=cma_on)
    stage = (seg.stage_slots, seg.stage_slot) if seg is not None else (4, 1 << 16)
    return types.SimpleNamespace(rank=rank, size=size, seg=seg, cfg=cfg, stage=stage, pid=lambda p: os.getpid())


def build(key, rank=0, size=3, **kw):
    return base.lookup(*key)(world(rank, size, **kw))


def pattern(n: int, seed: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint32) * 13 + seed * 101 + 7) & 0xFF).astype(np.uint8)


def need_cma():
    if not cma.available():
        pytest.skip("cross-memory attach is not available here (no process_vm_readv, or Yama ptrace_scope > 1)")


# --- host and device sources and destinations --------------------------------------------------


class HostSource:
    """Separate host arrays (so the segments are not contiguous), offered as ``[(addr, len)]``."""

    def __init__(self, lengths, seed=0):
        self.arrays = [pattern(n, seed + i) for i, n in enumerate(lengths)]
        self.segs = [(a.ctypes.data if a.size else 0, a.size) for a in self.arrays]
        self.data = b"".join(a.tobytes() for a in self.arrays)


class DeviceSource:
    """Simulated device memory whose bytes are written by a copy still queued on ``stream``
    (the producer's work): a take that does not wait for it reads zeros."""

    def __init__(self, ad, size, seed=0, stream=None):
        self.ad = ad
        self.array = SimDeviceArray.zeros(size, np.uint8)
        self.host = pattern(size, seed)  # must live until the queued copy has run
        self.data = self.host.tobytes()
        if size:
            ad.memcpy(self.array.ptr, self.host.ctypes.data, size, stream)


def host_dest(nbytes):
    return np.full(nbytes + TAIL, SENTINEL, dtype=np.uint8)


def device_dest(nbytes):
    d = SimDeviceArray.zeros(nbytes + TAIL, np.uint8)
    d.set(np.full(nbytes + TAIL, SENTINEL, dtype=np.uint8))
    return d


def check_landed(got: np.ndarray, want: bytes):
    """``got`` (destination contents) holds ``want`` and then untouched sentinel bytes."""
    n = len(want)
    assert got[:n].tobytes() == want
    assert (got[n:] == SENTINEL).all(), "bytes written past nbytes"


class Dest:
    """Where a device ``take`` copies to (``where``: "device" or "host"), made *before* the
    source: filling it synchronizes the simulated device, which would run the producer's
    queued work and hide a take that does not wait for it."""

    def __init__(self, ad, where, nbytes):
        self.ad, self.where = ad, where
        s = ad.stream_create()
        if where == "device":
            self.array = device_dest(nbytes)
            self.target = (ad, self.array.ptr, lambda a: s)
        else:
            self.array = host_dest(nbytes)
            self.target = (None, self.array.ctypes.data, lambda a: s)

    def contents(self) -> np.ndarray:
        """What is there now, without running any queued work: when ``take`` returns True the
        copy is done (the engine acknowledges at once, and the sender may free its memory)."""
        if self.where == "device":
            return np.frombuffer(self.ad.host_view(self.array.ptr, self.array.nbytes), np.uint8).copy()
        return self.array.copy()


@contextlib.contextmanager
def producer_work_pending():
    """Keep the simulated device from running queued work behind the test's back: freeing an
    allocation synchronizes it (as cudaFree does), and the garbage collector may free one of
    an earlier test's arrays at any allocation."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def take_device(t, peer, body, nbytes, skip, dest):
    """``t.take`` into ``dest`` (a :class:`Dest`): (result, destination contents)."""
    ok = t.take(peer, body, dest.target, nbytes, skip)
    return ok, dest.contents()


def any_source(key, ad):
    """A valid source of ``key``'s memory kind, and the arrays that keep it alive."""
    if key[0] == HOST:
        src = HostSource([100, 28])
        return src.segs, src
    src = DeviceSource(ad, 128)
    return (ad, src.array.ptr, None), src


# --- the registry --------------------------------------------------------------------------


def test_every_registered_transport_has_a_contract():
    assert set(REGIONS) == set(EXPECT), "a transport was registered (or removed) without stating its contract here"
    for key, e in EXPECT.items():  # every transport that offers is taken by some test below
        assert (e["take"] is None) == (e["push"] or e.get("direct", False)), key
        assert e["take"] != "ranks" or e["across"], key
    for mem in (HOST, DEVICE):  # and every transport the configuration names exists
        assert set(base.known(mem)) == set(_config.TRANSPORTS[mem])


@pytest.mark.parametrize("key", REGIONS, ids=rid)
def test_registered_consistently(key):
    mem, name = key
    cls = base.lookup(mem, name)
    assert issubclass(cls, base.Region)
    assert (cls.memory, cls.name) == (mem, name)
    assert 0 < cls.ident < 256  # one byte of an offer names it
    assert cls.caps & ~ALL_CAPS == 0
    assert base.register(cls) is cls and base.lookup(mem, name) is cls  # registering again changes nothing


def test_idents_are_unique_over_both_memory_kinds():
    idents = [base.lookup(*k).ident for k in REGIONS]
    assert len(set(idents)) == len(idents) and 0 not in idents


@pytest.mark.parametrize("mem", [HOST, DEVICE])
def test_unknown_name_lists_the_known_ones(mem):
    with pytest.raises(ValueError) as e:
        base.lookup(mem, "carrier-pigeon")
    msg = str(e.value)
    assert "carrier-pigeon" in msg
    for name in base.known(mem):
        assert name in msg
    with pytest.raises(ValueError, match="carrier-pigeon"):
        base.routes({mem: ("self", "carrier-pigeon")}, world())


def test_a_second_class_under_a_taken_name_is_refused():
    before = {m: base.known(m) for m in (HOST, DEVICE)}
    Taken = type("Taken", (base.lookup(HOST, "shm"),), {})  # same name and memory, another class
    with pytest.raises(ValueError, match="exists already"):
        base.register(Taken)
    assert {m: base.known(m) for m in (HOST, DEVICE)} == before
    assert base.lookup(HOST, "shm") is not Taken


def test_routes_builds_instances_in_the_named_order():
    named = {HOST: ("shm", "self", "cma"), DEVICE: ("staging", "cuda_ipc", "self")}
    r = base.routes(named, world(rank=2))
    assert set(r) == {HOST, DEVICE}
    for mem, names in named.items():
        assert [type(t) for t in r[mem]] == [base.lookup(mem, n) for n in names]
    assert r[HOST][1].reaches(2) and not r[HOST][1].reaches(0)  # built with the world given
    default = base.routes(_config.parse_transports(""), world())
    assert [t.name for t in default[HOST]] == ["self", "cma", "mpi", "shm"]
    assert [t.name for t in default[DEVICE]] == ["self", "cuda_ipc", "mpi", "staging"]


class _Reach(base.Region):
    """A stand-in that reaches the peers it is told to."""

    def __init__(self, label, peers):
        self.label, self.peers = label, set(peers)

    def reaches(self, peer):
        return peer in self.peers

    def offer(self, peer, src):
        return None

    def take(self, peer, body, dst, nbytes, skip=0):
        return False


def test_pick_returns_the_first_that_reaches():
    a, b, c = _Reach("a", {1}), _Reach("b", {1, 2}), _Reach("c", {0, 1, 2})
    assert base.pick([a, b, c], 1) is a
    assert base.pick([a, b, c], 2) is b
    assert base.pick([a, b, c], 0) is c
    assert base.pick([a, b], 0) is None
    assert base.pick([], 0) is None
    r = base.routes(_config.parse_transports(""), world(rank=0))  # the default routes, rank 0 of 3
    assert base.pick(r[HOST], 0).name == "self"
    assert base.pick(r[HOST], 1).name == ("cma" if cma.available() else "shm")
    assert base.pick(r[DEVICE], 0).name == "self"
    assert base.pick(r[DEVICE], 2).name == "cuda_ipc"


# --- rules every transport keeps ------------------------------------------------------------


@pytest.mark.parametrize("key", REGIONS, ids=rid)
def test_reaches_matches_the_rule(key):
    rule = EXPECT[key]["reach"]
    for rank in range(3):
        t = build(key, rank)
        try:
            assert [t.reaches(p) for p in range(3)] == [bool(rule(rank, p)) for p in range(3)], rank
        finally:
            t.close()


@pytest.mark.parametrize("key", REGIONS, ids=rid)
def test_offers_nothing_iff_push_only(key):
    """A push-only transport offers None, takes nothing (False, destination untouched) and
    reaches every peer; every other transport offers something to a peer it reaches."""
    ad = sim_adapter()
    t = build(key, 0)
    try:
        src, _keep = any_source(key, ad)
        peers = [p for p in range(3) if t.reaches(p)]
        if not EXPECT[key]["push"]:
            if not peers:
                pytest.skip(f"{rid(key)} reaches no peer here")
            for p in peers:
                off = t.offer(p, src)
                assert off is not None
                if key[0] == DEVICE and off[2] is not None:
                    off[2]()
            return
        assert peers == [0, 1, 2]
        for p in peers:
            assert t.offer(p, src) is None
        # a body another transport would have offered: still nothing is taken
        forged = base.encode_segments(src) if key[0] == HOST else bytes(256)
        if key[0] == HOST:
            d = host_dest(128)
            assert t.take(1, forged, d.ctypes.data, 128) is False
            assert (d == SENTINEL).all()
        else:
            for where in ("device", "host"):
                ok, got = take_device(t, 1, forged, 128, 0, Dest(ad, where, 128))
                assert ok is False and (got == SENTINEL).all()
    finally:
        t.close()


@pytest.mark.parametrize("key", REGIONS, ids=rid)
def test_caps_are_honest(key):
    cls = base.lookup(*key)
    caps = cls.caps
    direct = EXPECT[key].get("direct", False)
    assert bool(caps & DIRECT) == direct, "DIRECT exactly for the two-sided transports"
    assert bool(caps & READ) == (not EXPECT[key]["push"] and not direct), "READ exactly for transports that offer"
    if caps & WRITE:
        assert caps & READ, "writing into a peer's message memory implies reading it"
    # ONE_SIDED and ATOMICS (windows) stand apart from offers: shm pushes messages and maps
    # windows; their contract is tests/ipc/test_onesided.py
    if not caps & WRITE:
        t = build(key, 0)
        with pytest.raises(NotImplementedError):
            t.write(1, [(0, 0)], 0, 0, 0)
        t.close()
    else:  # a real write (test_write_* below does it); here: it is not the interface's refusal
        assert cls.write is not base.Region.write


# --- offer / take round trips ------------------------------------------------------------------

#: host cases: (segment lengths, nbytes, skip)
HOST_CASES = {
    "empty": ([], 0, 0),
    "zero-of-some": ([64], 0, 0),
    "one-byte": ([1], 1, 0),
    "odd-part": ([7], 5, 1),
    "page-plus-one": ([4097], 4097, 0),
    "skip-inside": ([65537], 30001, 12345),
    "three-segs": ([3, 5, 7], 15, 0),
    "skip-across-a-boundary": ([3, 5, 7], 9, 2),
    "skip-to-a-boundary": ([3, 5, 7], 7, 8),
    "empty-seg-inside": ([5, 0, 6], 11, 0),
    "ends-mid-segment": ([1000, 1, 4096, 333], 5000, 3),
    "more-segs-than-iov-max": ([3] * 1100, 3300, 0),
    "many-segs-skip": ([3] * 1100, 2000, 1001),
    "large": ([1 << 20, 17], (1 << 20) + 17, 0),
}
HOST_READERS = [k for k in REGIONS if k[0] == HOST and EXPECT[k]["take"] == "here"]


def host_peer(key, rank=0):
    """A peer this test can take ``key``'s offers from, in this process."""
    return rank if EXPECT[key]["reach"](rank, rank) else 1


@pytest.mark.parametrize("case", HOST_CASES.values(), ids=HOST_CASES.keys())
@pytest.mark.parametrize("key", HOST_READERS, ids=rid)
def test_host_offer_take_moves_exact_bytes(key, case):
    if key[1] == "cma":
        need_cma()
    lengths, nbytes, skip = case
    src = HostSource(lengths, seed=len(lengths))
    t = build(key, 0)
    peer = host_peer(key)
    try:
        body = t.offer(peer, src.segs)
        assert isinstance(body, (bytes, bytearray))
        d = host_dest(nbytes)
        assert t.take(peer, body, d.ctypes.data, nbytes, skip) is True
        check_landed(d, src.data[skip : skip + nbytes])
        # the offer stays good: a second take of another range sees the same memory
        if nbytes > 1:
            d2 = host_dest(nbytes - 1)
            assert t.take(peer, body, d2.ctypes.data, nbytes - 1, skip + 1) is True
            check_landed(d2, src.data[skip + 1 : skip + nbytes])
    finally:
        t.close()


#: device cases: (allocation size, offset of the offered address in it, nbytes, skip)
DEVICE_CASES = {
    "one-byte": (1, 0, 1, 0),
    "odd-part": (7, 0, 5, 2),
    "zero-of-some": (4096, 0, 0, 0),
    "page-plus-one": (4097, 0, 4097, 0),
    "offset-and-skip": (65539, 3, 30001, 12345),
    "large": ((1 << 20) + 5, 1, 1 << 20, 4),
}


@pytest.mark.parametrize("where", ["device", "host"])
@pytest.mark.parametrize("case", DEVICE_CASES.values(), ids=DEVICE_CASES.keys())
@pytest.mark.parametrize("key", [k for k in REGIONS if k[0] == DEVICE and EXPECT[k]["take"] == "here"], ids=rid)
def test_device_offer_take_moves_exact_bytes(key, case, where):
    """Taken in this process, into device or host memory, after the producer's queued work."""
    size, off, nbytes, skip = case
    ad = sim_adapter()
    dest = Dest(ad, where, nbytes)
    producer = ad.stream_create()
    t = build(key, 0)
    peer = host_peer(key)
    try:
        with producer_work_pending():
            src = DeviceSource(ad, size, seed=size, stream=producer)
            body, _ev, release = t.offer(peer, (ad, src.array.ptr + off, producer))
            assert producer.queue, "the producer's copy ran before the take: this check would prove nothing"
            ok, got = take_device(t, peer, body, nbytes, skip, dest)
        assert ok is True
        check_landed(got, src.data[off + skip : off + skip + nbytes])
        if release is not None:
            release()
    finally:
        t.close()


# --- takes that cannot succeed here copy nothing -----------------------------------------------


def test_cma_refused_take_copies_nothing_and_stops_offering():
    need_cma()
    t = build((HOST, "cma"), 0)
    unmapped = base.encode_segments([(8, 4096)])  # page 0 is never mapped
    d = host_dest(100)
    assert t.take(1, unmapped, d.ctypes.data, 100) is False
    assert (d == SENTINEL).all()
    # after a refusal (before any take worked) the data is pushed instead: nothing offered
    assert t.offer(1, HostSource([10]).segs) is None and not t.reaches(1)


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_cma_take_from_an_exited_peer_raises_peer_gone_and_keeps_cma():
    """A peer that exited is that peer's failure, not the kernel refusing cross-memory attach
    (taken for a refusal, it turned CMA off and the receiver waited for a push forever)."""
    need_cma()
    dead = _dead_pid()
    w = world(0)
    w.pid = lambda p: dead
    t = base.lookup(HOST, "cma")(w)
    src = HostSource([100])
    d = host_dest(100)
    with pytest.raises(base.PeerGone) as ei:
        t.take(1, base.encode_segments(src.segs), d.ctypes.data, 100)
    assert ei.value.peer == 1
    assert (d == SENTINEL).all()
    assert t.reaches(1) and t.offer(1, src.segs) is not None


def test_process_gone_tells_exited_and_zombie_processes_from_live_ones():
    import subprocess
    import sys
    import time

    assert not cma.process_gone(os.getpid())
    assert cma.process_gone(_dead_pid())
    z = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        end = time.monotonic() + 10
        while not cma.process_gone(z.pid) and time.monotonic() < end:  # a zombie until reaped
            time.sleep(0.01)
        assert cma.process_gone(z.pid)
    finally:
        z.wait()


def test_cma_off_in_the_configuration_reaches_nobody():
    t = build((HOST, "cma"), 0, cma_on=False)
    assert [t.reaches(p) for p in range(3)] == [False] * 3
    assert t.offer(1, HostSource([10]).segs) is None


def test_cuda_ipc_cannot_take_its_own_offer():
    """A process cannot open its own IPC handles: take answers False and copies nothing (the
    engine then stages), whatever the destination."""
    ad = sim_adapter()
    t = build((DEVICE, "cuda_ipc"), 0)
    dests = [Dest(ad, where, 256) for where in ("device", "host")]
    src = DeviceSource(ad, 256)
    body, _ev, release = t.offer(1, (ad, src.array.ptr, ad.stream_create()))
    for dest in dests:
        ok, got = take_device(t, 1, body, 256, 0, dest)
        assert ok is False and (got == SENTINEL).all()
    if release is not None:
        release()
    t.close()


def test_self_device_take_of_a_released_offer_copies_nothing():
    ad = sim_adapter()
    t = build((DEVICE, "self"), 0)
    src = DeviceSource(ad, 64)
    body, _ev, release = t.offer(0, (ad, src.array.ptr, None))
    assert release is not None
    release()
    ok, got = take_device(t, 0, body, 64, 0, Dest(ad, "device", 64))
    assert ok is False and (got == SENTINEL).all()
    t.close()


# --- WRITE ---------------------------------------------------------------------------------

WRITERS = [k for k in REGIONS if base.lookup(*k).caps & WRITE]


@pytest.mark.parametrize("case", [([9], 9, 0), ([3, 5, 7], 10, 4), ([4097, 1], 4000, 97), ([3] * 1100, 3000, 299)],
                         ids=["one-seg", "skip-across", "skip-inside", "more-segs-than-iov-max"])
@pytest.mark.parametrize("key", WRITERS, ids=rid)
def test_write_into_own_memory(key, case):
    """``write`` copies ``nbytes`` of our segments from byte ``skip`` to the peer's address
    (here the peer's pid is ours), and not one byte more."""
    need_cma()
    lengths, nbytes, skip = case
    src = HostSource(lengths, seed=3)
    t = build(key, 0)
    d = host_dest(nbytes)
    assert t.write(1, src.segs, skip, d.ctypes.data, nbytes) == 0
    check_landed(d, src.data[skip : skip + nbytes])
    t.close()


# --- across two processes --------------------------------------------------------------------

OFFER, TAKEN, WRITE_HERE, WRITTEN, SKIP = 11, 12, 13, 14, 15  # frame kinds of this test's little protocol
_ADDR = struct.Struct("<QQQ")  # WRITE_HERE: address, nbytes, skip
RANK_CASES = {  # memory -> [(lengths or allocation size, offset, nbytes, skip)]
    HOST: [([4097], 0, 4097, 0), ([3, 5, 7], 0, 9, 2), ([65537, 3, 1000], 0, 60000, 6000), ([3] * 1100, 0, 3000, 7)],
    DEVICE: [(4097, 0, 4097, 0), (65539, 3, 30001, 12345), (65539, 4099, 1000, 1), ((1 << 20) + 5, 1, 1 << 20, 4),
             (4096, 0, 0, 0)],
}


def _next_frame(w):
    got = []
    while not got:  # the peer is another process: spin (run_ranks' deadline bounds it)
        w.frames.flush()
        w.frames.poll(lambda p, hdr, pl: got.append((p, hdr, bytes(pl))), 1)
    return got[0]


def _send(w, peer, kind, tag=0, payload=b""):
    w.frames.send(peer, kind, 0, w.rank, 0, tag, 0, 0, payload)


def _ranks_round_trip(key, seg):
    """Rank 0 offers each case of ``RANK_CASES``, rank 1 takes it and checks the bytes; then,
    for a WRITE transport, rank 0 writes the same range into rank 1's memory.  The ranks talk
    over rings of their own (``seg``), never the running engine's."""
    from gpumpi import _bootstrap

    mem, _ = key
    cfg = _config.get()
    seg.set_attached(cfg.rank, os.getpid())
    w = _bootstrap.World(cfg.rank, 2, seg, cfg)
    t = base.lookup(*key)(w)
    me, peer = w.rank, 1 - w.rank
    assert [t.reaches(p) for p in (0, 1)] == [EXPECT[key]["reach"](me, p) for p in (0, 1)]
    ad = sim_adapter() if mem == DEVICE else None
    writes = bool(t.caps & WRITE)
    done = []
    for i, (shape, off, nbytes, skip) in enumerate(RANK_CASES[mem]):
        if me == 0:
            if mem == HOST:
                src = HostSource(shape, seed=i)
                body = t.offer(1, src.segs)
                release = None
            else:
                producer = ad.stream_create()
                src = DeviceSource(ad, shape, seed=i, stream=producer)
                body, _ev, release = t.offer(1, (ad, src.array.ptr + off, producer))
            assert body is not None
            _send(w, 1, OFFER, i, body)
            _p, hdr, _ = _next_frame(w)
            if hdr[1] == SKIP:
                pytest.skip("rank 1 could not take the offer (the kernel refused)")
            assert hdr[1] == TAKEN and hdr[5] == i
            if release is not None:
                release()  # the send is complete
            if writes:
                _p, hdr, pl = _next_frame(w)
                assert hdr[1] == WRITE_HERE
                addr, n, k = _ADDR.unpack(pl)
                assert t.write(1, src.segs, k, addr, n) == 0
                _send(w, 1, WRITTEN, i)
        else:
            _p, hdr, body = _next_frame(w)
            assert _p == 0 and hdr[1] == OFFER and hdr[5] == i
            want = (HostSource(shape, seed=i).data if mem == HOST else pattern(shape, i).tobytes())
            want = want[off + skip : off + skip + nbytes]
            if mem == HOST:
                d = host_dest(nbytes)
                ok = t.take(0, body, d.ctypes.data, nbytes, skip)
                got = d
            else:
                ok, got = take_device(t, 0, body, nbytes, skip, Dest(ad, "device" if i % 2 == 0 else "host", nbytes))
            if not ok and mem == HOST and not t.proven:
                _send(w, 0, SKIP, i)
                pytest.skip("process_vm_readv between two ranks was refused here")
            assert ok is True
            check_landed(got, want)
            _send(w, 0, TAKEN, i)
            if writes:
                d = host_dest(nbytes)
                _send(w, 0, WRITE_HERE, i, _ADDR.pack(d.ctypes.data, nbytes, skip))
                _p, hdr, _ = _next_frame(w)
                assert hdr[1] == WRITTEN and hdr[5] == i
                check_landed(d, want)
        done.append(i)
    t.close()
    w.close()
    return done


@pytest.mark.parametrize("key", [k for k in REGIONS if EXPECT[k]["across"]], ids=rid)
def test_offer_take_between_two_ranks(key):
    if key[1] == "cma":
        need_cma()
    n = len(RANK_CASES[key[0]])
    seg = JobSegment.create(2, 1 << 16)
    try:
        assert run_ranks(_ranks_round_trip, 2, args=(key, seg), timeout=60) == [list(range(n))] * 2
    finally:
        seg.close()


# --- staging: the push pipeline ----------------------------------------------------------------

SLOT = 65536
SLOTS = 3


@pytest.fixture
def staging_pair():
    """Rank 0's and rank 1's staging transports over one job segment (one process plays both)."""
    seg = JobSegment.create(3, 4096, stage_slot=SLOT, stage_slots=SLOTS)
    tx = build((DEVICE, "staging"), 0, seg=seg)
    rx = build((DEVICE, "staging"), 1, seg=seg)
    yield tx, rx
    tx.close()
    rx.close()
    seg.close()


@pytest.mark.parametrize("total", [1, 4097, SLOTS * SLOT, 11 * SLOT + 123], ids=lambda n: f"{n}B")
def test_staging_moves_a_message_in_order_and_every_slot_comes_back(staging_pair, total):
    tx, rx = staging_pair
    ad = sim_adapter()
    s_tx, s_rx = ad.stream_create(), ad.stream_create()
    src = SimDeviceArray.from_numpy(pattern(total, 5))
    dst = device_dest(total)
    ring = []  # the DATA frames naming the slots, in the order sent
    sent = landed = 0
    chunks, refused, most_held = [], 0, 0
    while landed < total:
        # the sender fills every slot it can before the receiver copies anything out
        while sent < total:
            got = tx.fill(ad, src.ptr, sent, total, 1, s_tx)
            if got is None:
                refused += 1
                break
            slot, n = got
            assert 0 < n <= SLOT and 0 <= slot < SLOTS
            ring.append((slot, n))
            chunks.append(n)
            sent += n
            most_held = max(most_held, tx.slab(0).in_use())
        assert ring, "the sender filled nothing and nothing is in flight"
        slot, n = ring.pop(0)
        rx.land(ad, dst.ptr + landed, 0, rx.view(0, slot, n), n, s_rx)
        rx.release(0, slot)
        landed += n
    # read without synchronizing: land has finished its copy before the slot goes back
    check_landed(np.frombuffer(ad.host_view(dst.ptr, dst.nbytes), np.uint8), pattern(total, 5).tobytes())
    assert sum(chunks) == total and len(set(chunks[:-1])) <= 1  # equal chunks, a shorter last one
    assert most_held <= SLOTS
    if len(chunks) > SLOTS:
        assert refused and most_held == SLOTS  # every slot was in use before one came back
    assert tx.slab(0).in_use() == 0 and rx.slab(0).in_use() == 0


def test_staging_reclaim_takes_back_a_dead_peers_slots(staging_pair):
    tx, rx = staging_pair
    ad = sim_adapter()
    s = ad.stream_create()
    src = SimDeviceArray.from_numpy(pattern(4 * SLOT, 1))
    held = {p: tx.fill(ad, src.ptr, 0, 4 * SLOT, p, s)[0] for p in (1, 2)}
    assert tx.slab(0).in_use() == 2
    tx.reclaim({2})  # rank 2 died holding a slot
    assert tx.slab(0).in_use() == 1
    rx.release(0, held[1])  # rank 1 copies its chunk out as usual
    assert tx.slab(0).in_use() == 0
    assert sorted(tx.fill(ad, src.ptr, 0, 4 * SLOT, 1, s)[0] for _ in range(SLOTS)) == list(range(SLOTS))
    assert tx.fill(ad, src.ptr, 0, 4 * SLOT, 1, s) is None
    assert Counter(tx.slab(0).holder) == Counter({1: SLOTS})
