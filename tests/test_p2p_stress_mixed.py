"""Mixed point-to-point stress at 2-4 ranks: nothing lost, duplicated, reordered or corrupted.

Theory of operation
===================
Every message is a pure function of its *stream* and *sequence number*.  A stream is
(sender, receiver, stream id); the stream id names one communicator and one way of
receiving (the table ``STREAMS``) and is the MPI tag, plus ``ROUND * (round + 1)`` on
the streams received with ANY_SOURCE (see below); on the wildcard-tag communicator
one stream alternates between two tags.  :func:`_message` seeds a
generator with (seed, sender, receiver, stream, seq) and draws the size in bytes (0, 8,
small up to 1 KiB, within 64 bytes of the engine's eager limit, rendezvous 256 KiB to
1 MiB), the datatype, how the sender describes the buffer (array, ``[buf, count, T]``,
``[buf, MPI.BYTE]``, a vector type, a Python object), the tag and random contents; then
it stamps the first bytes with a header (sender, stream, seq, CRC-32 of the rest; 8-15
byte messages get a compact 16-bit form, 0-byte messages have none).  The receiver needs
no copy of the sender's state: :class:`Checker` reads the header, asserts that it
agrees with the status (source, tag, ``Get_count``), that its seq is the next one of
its stream (MPI's non-overtaking rule: a lower seq is a duplicate or a reordering, a
higher one a loss or a reordering), that the checksum holds, that the message was not
seen before, and that every byte equals the regenerated message.

Each rank's main thread runs ``ROUNDS`` rounds on ``m`` (a duplicate of the world) and
``w`` (the wildcard-tag communicator), each round in the same order:

A. post ahead: ``Irecv``s on a tag nobody sends (cancelled after D: ``Is_cancelled``),
   one ``Irecv(ANY_SOURCE, PRE)`` and then ``K_PRE`` ``Irecv(s, PRE)`` per source; in
   even rounds an ``Irecv`` per source on the cancel stream, cancelled at once or after
   C (it may have matched first);
B. nonblocking sends to every peer on every stream but SPEC, interleaved in a seeded
   order (``Isend``, ``Issend``, ``isend``/``issend`` for objects), so the receiver finds
   eager, rendezvous, synchronous and derived-type messages of several streams queued
   ahead of each other; cancel-stream sends are cancelled now, after C or at E;
C. blocking pairwise exchange on SPEC over a round-robin tournament (the lower rank of a
   pair sends first): ``Send``, ``Ssend``, ``Isend``+``Wait``, ``Issend``+``Test``, into
   exact, oversized, typed or vector receive buffers, sometimes after ``Probe``;
D. receive everything else, the sub-phases in a seeded order: PRE (blocking ``Recv(s,
   PRE)`` while the Irecvs of A may still be pending, then ``Waitall``, then the rest),
   ANY_SOURCE ``Recv``s, ``Probe``/``Iprobe`` then ``Recv`` of the probed source,
   ``Mprobe``/``Improbe`` then ``Message.Recv``/``Irecv``, objects, and ``ANY_TAG``
   receives on ``w`` (per source, or ANY_SOURCE as well; ``w`` alternates between two
   duplicates by round parity);
E. wait for the round's sends; the cancel-stream sends last, with a ``Testall`` loop
   that keeps draining incoming cancel-stream messages.

Every receive takes exactly the messages of its round.  A rank can be one round ahead
(not two: C pairs every two ranks in every round), and an ANY_SOURCE receive that took
its next-round message in place of a slower rank's would leave that one for the next
round, while its synchronous sender waits for it before it can get there: a deadlock.
So the streams received with ANY_SOURCE carry the round in their tag (``_rtag``), the
ANY_TAG traffic alternates between two communicators, and PRE needs neither: its
wildcard Irecv is posted before any specific one, so it always takes the first PRE
message of this round of some source.

Cancel stream: whether a cancelled send was matched first is a race; the sender
records the seqs whose send was not cancelled, and after the last round an ``alltoall``
of those lists tells each receiver exactly which seqs it must have (in order, none
twice); it receives what is still due, then an ``Irecv`` on the stream must cancel.

Two threads per rank (``THREAD_MULTIPLE``) run their own rounds on their own
duplicates: one with ``Isend``/``Issend`` and specific-source blocking receives, one
with ANY_SOURCE, ``Iprobe`` and objects.  At the end each rank sends every peer its
per-stream send counts (``alltoall``) and compares them with what its checkers took,
the world totals must agree (``allreduce``), and after a barrier no communicator has a
message left (``Iprobe``).

A failing run names its seed; rerun it with ``GPUMPI_STRESS_SEED=<seed>``.  The bodies
take the MPI module as an argument and run unchanged under ``mpiexec`` with mpi4py
(``mpiexec -n 3 python tests/test_p2p_stress_mixed.py [seed]``), which checks the test's
own expectations against a reference MPI; there the cancel-stream sends are not
cancelled (MPICH 5.0.2, the pip wheel, crashes in ``MPI_Cancel`` of a pending send).
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from collections import Counter, namedtuple

import numpy as np
import pytest

from gpumpi.testing import RanksFailed, run_ranks

SEED = int(os.environ.get("GPUMPI_STRESS_SEED", "1414"))
#: rounds per run (``GPUMPI_STRESS_ROUNDS`` for a long storm outside CI: the deadlines scale with it)
ROUNDS = int(os.environ.get("GPUMPI_STRESS_ROUNDS", "6"))
THREAD_ROUNDS = 6
K_PRE = 2  # Irecv(s, PRE) posted ahead per source and round
CAP = (1 << 20) + 4096  # bytes: every message fits (rendezvous at most 1 MiB)
DEADLINE = 90 * max(1, ROUNDS // 6)  # seconds per run_ranks

pytestmark = pytest.mark.timeout(DEADLINE + 60)

# stream ids (= tags, but W, whose messages carry tag 20 or 21)
SPEC, PRE, WSRC, PROBE, MPROBE, OBJ, CXL = 1, 2, 3, 4, 5, 6, 7
NEVER = 99  # nobody sends this tag
W, W_TAGS = 20, (20, 21)
T0, T1, T1OBJ = 40, 41, 42
ROUND = 100  # a stream received with ANY_SOURCE has tag stream + ROUND * (round + 1)
# messages per round on each stream from each rank to each other rank (lo, hi)
COUNTS = {SPEC: (2, 5), PRE: (K_PRE + 2, K_PRE + 3), WSRC: (1, 3), PROBE: (1, 3), MPROBE: (1, 2), OBJ: (1, 2),
          W: (2, 5), CXL: (1, 2), T0: (2, 4), T1: (2, 4), T1OBJ: (1, 1)}

# stream -> (dtypes, send kinds, smallest size category)
STREAMS = {
    SPEC: (("u1", "i2", "i4", "f4", "f8", "c16"), ("array", "count", "byte", "vector"), 0),
    PRE: (("i4",), ("array", "count", "vector"), 0),
    WSRC: (("f8",), ("array", "count", "vector"), 0),
    PROBE: (("f4",), ("array", "vector"), 0),
    MPROBE: (("i8",), ("array", "count"), 0),
    OBJ: (("u1", "f8", "i2"), ("object",), 0),
    CXL: (("u1",), ("array",), 1),  # every message has a header: the receiver learns its seq from it
    W: (("u1",), ("byte",), 0),
    T0: (("u1", "i4", "f8"), ("array", "count", "vector"), 0),
    T1: (("f8",), ("array", "count"), 0),
    T1OBJ: (("i4",), ("object",), 0),
}
# size categories: 0 B, 8 B, small, around the eager limit, rendezvous
CATEGORIES = ("zero", "eight", "small", "eager", "rndv")
_CUM = np.cumsum([0.08, 0.14, 0.36, 0.27, 0.15])

Msg = namedtuple("Msg", "raw ch kind tag cat")


# --- messages -----------------------------------------------------------------------------
def _stamp(raw: np.ndarray, src: int, sid: int, seq: int) -> None:
    """Write the header into the message bytes ``raw`` (see the module docstring)."""
    nb = raw.size
    if nb >= 24:
        raw[:16] = np.array([src | sid << 16, seq], "<i8").view(np.uint8)
        crc = zlib.crc32(raw[24:], zlib.crc32(raw[:16]))
        raw[16:24] = np.array([crc], "<i8").view(np.uint8)
    elif nb >= 8:
        assert seq < 1 << 16
        raw[:6] = np.array([src, sid, seq], "<u2").view(np.uint8)
        raw[6:8] = np.array([zlib.crc32(raw[8:], zlib.crc32(raw[:6])) & 0xFFFF], "<u2").view(np.uint8)


def _header(raw: np.ndarray):
    """(sender, stream, seq, checksum ok) from received bytes; None for a message too short
    to carry one."""
    nb = raw.size
    if nb >= 24:
        a, seq, crc = (int(v) for v in raw[:24].view("<i8"))
        return a & 0xFFFF, a >> 16, seq, crc == zlib.crc32(raw[24:], zlib.crc32(raw[:16]))
    if nb >= 8:
        src, sid, seq, crc = (int(v) for v in raw[:8].view("<u2"))
        return src, sid, seq, crc == zlib.crc32(raw[8:], zlib.crc32(raw[:6])) & 0xFFFF
    return None


def _message(seed: int, src: int, dst: int, sid: int, seq: int, eager: int) -> Msg:
    """Message ``seq`` of stream (src, dst, sid): the same on every rank."""
    rng = np.random.default_rng([seed, src, dst, sid, seq])
    dtypes, kinds, lowest = STREAMS[sid]
    ch = dtypes[int(rng.integers(len(dtypes)))]
    kind = kinds[int(rng.integers(len(kinds)))]
    isz = np.dtype(ch).itemsize
    cat = max(lowest, int(np.searchsorted(_CUM, rng.random() * _CUM[-1], side="right")))
    if cat == 0:
        nb = 0
    elif cat == 1:
        nb = max(8, isz)
    elif cat == 2:
        nb = int(rng.integers(24, 1025)) // isz * isz
    elif cat == 3:
        nb = int(rng.integers(max(24, eager - 64), eager + 65)) // isz * isz
    else:
        nb = int(rng.integers(256 << 10, (1 << 20) + 1)) // isz * isz
    raw = np.frombuffer(rng.bytes(nb), np.uint8).copy()
    _stamp(raw, src, sid, seq)
    tag = W_TAGS[int(rng.integers(2))] if sid == W else sid
    return Msg(raw, ch, kind, tag, CATEGORIES[cat])


def _count(seed: int, src: int, dst: int, sid: int, rnd: int) -> int:
    """How many messages stream (src, dst, sid) carries in round ``rnd``."""
    lo, hi = COUNTS[sid]
    return int(np.random.default_rng([seed, src, dst, sid, rnd, 1 << 20]).integers(lo, hi + 1))


def _rtag(sid: int, rnd: int) -> int:
    """The tag of round ``rnd``'s messages of a stream received with ANY_SOURCE."""
    return sid + ROUND * (rnd + 1)


def _mpitype(MPI, ch: str):
    return {"u1": MPI.UNSIGNED_CHAR, "i2": MPI.SHORT, "i4": MPI.INT, "i8": MPI.INT64_T, "f4": MPI.FLOAT,
            "f8": MPI.DOUBLE, "c16": MPI.C_DOUBLE_COMPLEX}[ch]


def _vector(MPI, ch: str, raw: np.ndarray, keep: list):
    """``[big, 1, vector]`` whose even elements are the message (the odd ones are filler)."""
    isz = np.dtype(ch).itemsize
    cnt = raw.size // isz
    big = np.full(2 * cnt * isz, 0xA5, np.uint8)
    big.reshape(-1, isz)[::2] = raw.reshape(-1, isz)
    vt = _mpitype(MPI, ch).Create_vector(cnt, 1, 2).Commit()
    keep.append(vt)
    return [big.view(ch), 1, vt]


class RecvBuf:
    """A receive buffer for messages of ``ch`` (``cap`` bytes at most): the spec to pass and
    the received bytes back.  ``how``: array, typed (``[a, T]``), byte (``[a, MPI.BYTE]``)
    or vector (every other element of a buffer twice as long)."""

    def __init__(self, MPI, ch: str, cap: int, how: str = "array") -> None:
        self.isz = isz = np.dtype(ch).itemsize
        n = cap // isz
        self.how = how
        self.vt = None
        if how == "vector":
            self.mem = np.full(2 * n * isz, 0x5A, np.uint8)
            self.vt = _mpitype(MPI, ch).Create_vector(n, 1, 2).Commit()
            self.spec = [self.mem.view(ch), 1, self.vt]
        else:
            self.mem = np.full(n * isz, 0x5A, np.uint8)
            a = self.mem.view(ch)
            self.spec = a if how == "array" else [self.mem, MPI.BYTE] if how == "byte" else [a, _mpitype(MPI, ch)]

    def bytes(self, nb: int) -> np.ndarray:
        if self.how == "vector":
            return np.ascontiguousarray(self.mem.reshape(-1, self.isz)[::2][: nb // self.isz]).reshape(-1)
        return self.mem[:nb]

    def free(self) -> None:
        if self.vt is not None:
            self.vt.Free()
            self.vt = None


# --- checking -----------------------------------------------------------------------------
class Checker:
    """What one thread of one rank received: per stream the next seq due, every (source,
    stream, seq) seen, messages per source.  ``where`` names the phase for failures."""

    def __init__(self, seed: int, me: int, eager: int) -> None:
        self.seed, self.me, self.eager = seed, me, eager
        self.next: dict = {}
        self.seen: set = set()
        self.got: Counter = Counter()
        self.cxl: dict = {}  # source -> seqs of the cancel stream, in arrival order
        self.where = ""
        self.note = ""  # a status problem found before the message was read

    def fail(self, text: str):
        raise AssertionError(f"stress seed {self.seed} (rerun with GPUMPI_STRESS_SEED={self.seed}), "
                             f"rank {self.me}, {self.where}: {text}")

    def take(self, src: int, sid: int, tag: int, got: np.ndarray) -> int:
        """Account one message of stream (src, me, sid) received with tag ``tag`` and bytes
        ``got``; its seq.  The cancel stream may skip seqs (cancelled sends), never go back."""
        key = (src, sid)
        want = self.next.get(key, 0)
        hdr = _header(got)
        if hdr is None:
            seq = want
        else:
            hsrc, hsid, seq, crc_ok = hdr
            if (hsrc, hsid) != (src, sid):
                self.fail(f"a message of stream (source {hsrc}, stream {hsid}) was received as (source {src}, "
                          f"stream {sid}): the status or the matching is wrong")
            crc = "" if crc_ok else " (and its checksum is wrong)"
            if seq < want:
                self.fail(f"duplicated or reordered: seq {seq} of stream ({src}, {sid}) arrived after seq "
                          f"{want - 1}{crc}")
            if seq > want and sid != CXL:
                self.fail(f"lost or reordered: seq {seq} of stream ({src}, {sid}) arrived where seq {want} was "
                          f"due{crc}")
            if not crc_ok:
                self.fail(f"checksum mismatch in seq {seq} of stream ({src}, {sid}) ({got.size} bytes)")
        if (src, sid, seq) in self.seen:
            self.fail(f"received twice: seq {seq} of stream ({src}, {sid})")
        msg = _message(self.seed, src, self.me, sid, seq, self.eager)
        if tag % ROUND != msg.tag:
            self.fail(f"seq {seq} of stream ({src}, {sid}) was sent with tag {msg.tag}, status says {tag}")
        if got.size != msg.raw.size:
            self.fail(f"seq {seq} of stream ({src}, {sid}) has {msg.raw.size} bytes, received {got.size} "
                      f"(a message without header out of place: lost, duplicated or reordered)")
        if not np.array_equal(got, msg.raw):
            at = int(np.flatnonzero(got != msg.raw)[0])
            self.fail(f"seq {seq} of stream ({src}, {sid}) differs from what was sent at byte {at} of {got.size}")
        if self.note:
            self.fail(f"seq {seq} of stream ({src}, {sid}): {self.note}")
        self.seen.add((src, sid, seq))
        self.next[key] = seq + 1
        self.got[src] += 1
        if sid == CXL:
            self.cxl.setdefault(src, []).append(seq)
        return seq

    def status(self, MPI, st, src=None, tag=None, ch=None) -> tuple[int, int, int]:
        """(source, tag, bytes) of a receive's status, checked against what is known."""
        s, t, nb = st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)
        if (src is not None and src >= 0 and s != src) or (tag is not None and tag >= 0 and t != tag):
            self.fail(f"status says source {s} tag {t}, the receive asked for source {src} tag {tag}")
        if ch is not None:
            isz = np.dtype(ch).itemsize
            if nb % isz or st.Get_count(_mpitype(MPI, ch)) != nb // isz:
                # reported by take, after the header: a lost message shows as such
                self.note = f"Get_count: {nb} bytes but {st.Get_count(_mpitype(MPI, ch))} elements of {ch}"
        if st.Is_cancelled():
            self.fail(f"a completed receive (source {s}, tag {t}) reads as cancelled")
        return s, t, nb


class Traffic:
    """One thread's sending side: the next seq per (destination, stream), the sent counts,
    datatypes to free once its sends complete; and its :class:`Checker`."""

    def __init__(self, MPI, seed: int, me: int, n: int, eager: int, label: int) -> None:
        self.MPI, self.seed, self.me, self.n, self.eager = MPI, seed, me, n, eager
        self.chk = Checker(seed, me, eager)
        self.sent: Counter = Counter()  # (dst, sid) -> messages posted
        self.rng = np.random.default_rng([seed, me, label, 1 << 21])  # this thread's choices
        self.keep: list = []
        self.stats: Counter = Counter()

    def draw(self, dst: int, sid: int) -> tuple[int, Msg]:
        seq = self.sent[(dst, sid)]
        self.sent[(dst, sid)] = seq + 1
        msg = _message(self.seed, self.me, dst, sid, seq, self.eager)
        self.stats[msg.cat] += 1
        self.stats[msg.kind] += 1
        return seq, msg

    def spec(self, msg: Msg):
        MPI = self.MPI
        a = msg.raw.view(msg.ch)
        if msg.kind == "array":
            return a
        if msg.kind == "count":
            return [a, a.size, _mpitype(MPI, msg.ch)]
        if msg.kind == "byte":
            return [msg.raw, MPI.BYTE]
        return _vector(MPI, msg.ch, msg.raw, self.keep)

    def isend(self, comm, dst: int, sid: int, sync: bool = False, tag: int | None = None):
        seq, msg = self.draw(dst, sid)
        tag = msg.tag if tag is None else tag
        self.stats["Issend" if sync else "Isend"] += 1
        if msg.kind == "object":
            obj = (self.me, sid, seq, zlib.crc32(msg.raw), msg.raw.view(msg.ch))
            return seq, (comm.issend if sync else comm.isend)(obj, dst, tag)
        return seq, (comm.Issend if sync else comm.Isend)(self.spec(msg), dst, tag)

    def release(self) -> None:
        for t in self.keep:
            t.Free()
        self.keep.clear()

    def take_object(self, st, sid: int, obj) -> None:
        """An object message: (sender, stream, seq, CRC-32, array) that agrees with its status."""
        chk = self.chk
        src, t, _ = chk.status(self.MPI, st)
        if not (isinstance(obj, tuple) and len(obj) == 5 and obj[:2] == (src, sid)):
            chk.fail(f"object message from {src} on stream {sid} is {obj!r:.200}")
        raw = np.ascontiguousarray(obj[4]).view(np.uint8).reshape(-1)
        if obj[2] != chk.next.get((src, sid), 0) or obj[3] != zlib.crc32(raw):
            chk.fail(f"object message seq {obj[2]} (due {chk.next.get((src, sid), 0)}), crc ok: "
                     f"{obj[3] == zlib.crc32(raw)}")
        chk.take(src, sid, t, raw)


def _spin(probe, *args):
    """Iprobe/Improbe until it finds a message (short sleeps: two cores, many ranks)."""
    while True:
        got = probe(*args)
        if got:
            return got
        time.sleep(0.0002)


def _until(chk: Checker, what: str, done, idle=None, limit: float = 30.0) -> None:
    """Call ``done()`` until it is true (``idle()`` in between); fail after ``limit`` seconds
    with ``what``, instead of hanging until the run's deadline (a cancel that neither
    cancels nor completes, a message that never comes)."""
    end = time.monotonic() + limit
    while not done():
        if time.monotonic() > end:
            chk.fail(f"{what} (after {limit:.0f} s)")
        if idle is not None:
            idle()
        time.sleep(0.0002)


def _partner(r: int, step: int, n: int):
    """Round-robin tournament (circle method): rank r's partner in ``step``, None for a bye."""
    big = n + n % 2
    if r == big - 1:
        p = step
    elif r == step:
        p = big - 1
    else:
        p = (2 * step - r) % (big - 1)
    return p if p < n else None


# --- the main thread ----------------------------------------------------------------------
class Main(Traffic):
    """The main thread's traffic on ``m`` and ``w`` (two communicators, by round parity):
    the rounds A-E of the module docstring and the cancel stream's bookkeeping."""

    def __init__(self, MPI, seed, me, n, eager, m, w) -> None:
        super().__init__(MPI, seed, me, n, eager, 0)
        self.m, self.w = m, w
        self.peers = [p for p in range(n) if p != me]
        self.cxl_sends: list = []  # (request, dst, seq, when to cancel)
        self.cxl_done: dict = {p: [] for p in self.peers}  # dst -> seqs not cancelled
        self.cancels = Counter()
        self.cancel_sends = True

    def due(self, src: int, sid: int, rnd: int) -> int:
        """Messages of stream (src, me, sid) in round ``rnd``; from every peer for ANY_SOURCE."""
        if src == self.MPI.ANY_SOURCE:
            return sum(_count(self.seed, s, self.me, sid, rnd) for s in self.peers)
        return _count(self.seed, src, self.me, sid, rnd)

    # A, B: post ahead, nonblocking sends
    def post_ahead(self, rnd: int):
        MPI, m = self.MPI, self.m
        never = [m.Irecv(np.empty(4, "i4"), MPI.ANY_SOURCE, NEVER), m.Irecv(np.empty(4, "i4"), self.peers[0], NEVER),
                 self.w[rnd % 2].Irecv([np.empty(8, np.uint8), MPI.BYTE], self.peers[-1], NEVER)]
        pre = [(m.Irecv(b.spec, MPI.ANY_SOURCE, PRE), b) for b in [RecvBuf(MPI, "i4", CAP)]]
        for s in self.peers:
            for _ in range(K_PRE):
                b = RecvBuf(MPI, "i4", CAP, ("array", "typed")[int(self.rng.integers(2))])
                pre.append((m.Irecv(b.spec, s, PRE), b))
        standing = None
        if rnd % 2 == 0:  # the cancel stream has a receive waiting in even rounds only
            standing = {s: (m.Irecv(b.mem, s, CXL), b) for s in self.peers for b in [RecvBuf(MPI, "u1", CAP)]}
        return never, pre, standing

    def send_all(self, rnd: int) -> list:
        m, w, rng = self.m, self.w[rnd % 2], self.rng
        plan = []
        for d in self.peers:
            for sid in (PRE, WSRC, PROBE, MPROBE, OBJ, W, CXL):
                plan += [(d, sid)] * _count(self.seed, self.me, d, sid, rnd)
        rng.shuffle(plan)
        reqs = []
        for d, sid in plan:
            sync = rng.random() < 0.2
            if sid == CXL:
                sync = rng.random() < 0.6
                seq, req = self.isend(m, d, sid, sync)
                when = ("now", "mid", "end")[int(rng.integers(3))]
                self.cxl_sends.append((req, d, seq, when))
                if when == "now" and self.cancel_sends:
                    req.Cancel()
                continue
            tag = _rtag(sid, rnd) if sid in (WSRC, PROBE, MPROBE, OBJ) else None
            seq, req = self.isend(w if sid == W else m, d, sid, sync, tag)
            reqs.append(req)
        return reqs

    # C: blocking pairwise exchange
    def exchange(self, rnd: int) -> None:
        n = self.n
        for step in range(n + n % 2 - 1):
            p = _partner(self.me, step, n)
            if p is None:
                continue
            self.chk.where = f"round {rnd} exchange step {step} with {p}"
            if self.me < p:
                self.spec_send(p, rnd)
                self.spec_recv(p, rnd)
            else:
                self.spec_recv(p, rnd)
                self.spec_send(p, rnd)

    def spec_send(self, p: int, rnd: int) -> None:
        m, rng = self.m, self.rng
        for _ in range(_count(self.seed, self.me, p, SPEC, rnd)):
            seq, msg = self.draw(p, SPEC)
            spec = self.spec(msg)
            how = rng.random()
            if how < 0.5:
                m.Send(spec, p, SPEC)
                self.stats["Send"] += 1
            elif how < 0.65:
                m.Ssend(spec, p, SPEC)
                self.stats["Ssend"] += 1
            elif how < 0.8:
                m.Isend(spec, p, SPEC).Wait()
                self.stats["Isend"] += 1
            else:
                req = m.Issend(spec, p, SPEC)
                while not req.Test():
                    time.sleep(0.0001)
                self.stats["Issend"] += 1
            self.release()

    def spec_recv(self, p: int, rnd: int) -> None:
        MPI, m, rng, chk = self.MPI, self.m, self.rng, self.chk
        for _ in range(_count(self.seed, p, self.me, SPEC, rnd)):
            msg = _message(self.seed, p, self.me, SPEC, chk.next.get((p, SPEC), 0), self.eager)
            extra = int(rng.integers(0, 3)) * int(rng.integers(1, 200)) * 16
            if msg.kind == "byte":
                how = "byte"
            else:
                how = ("array", "typed", "vector")[int(rng.integers(3))]
            b = RecvBuf(MPI, msg.ch, msg.raw.size + extra, how)
            st = MPI.Status()
            r = rng.random()
            if r < 0.6:
                m.Recv(b.spec, p, SPEC, st)
            elif r < 0.8:
                m.Irecv(b.spec, p, SPEC).Wait(st)
            else:
                pst = MPI.Status()
                m.Probe(p, SPEC, pst)
                m.Recv(b.spec, pst.Get_source(), pst.Get_tag(), st)
                if (pst.Get_source(), pst.Get_tag(), pst.Get_count(MPI.BYTE)) != \
                        (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)):
                    chk.fail("Probe's status and the Recv's that followed disagree")
            s, t, nb = chk.status(MPI, st, p, SPEC, None if how == "byte" else msg.ch)
            chk.take(s, SPEC, t, b.bytes(nb))
            b.free()

    # D: the receive phase
    def recv_pre(self, rnd: int, pre: list) -> None:
        MPI, m, chk = self.MPI, self.m, self.chk
        chk.where = f"round {rnd} PRE"
        done = []  # (post order, status, buffer)
        total = {s: _count(self.seed, s, self.me, PRE, rnd) for s in self.peers}
        start = {s: chk.next.get((s, PRE), 0) for s in self.peers}
        order = len(pre)
        # blocking receives behind the posted ones, which may still be pending; the wildcard
        # may take one message of any source, so one per source is left for after Waitall
        for s in self.peers:
            for _ in range(total[s] - K_PRE - 1):
                b, st = RecvBuf(MPI, "i4", CAP), MPI.Status()
                m.Recv(b.spec, s, PRE, st)
                done.append((order, st, b))
                order += 1
        sts: list = []
        MPI.Request.Waitall([q for q, _ in pre], sts)
        if len(sts) != len(pre):
            chk.fail(f"Waitall filled {len(sts)} statuses for {len(pre)} requests")
        done += [(i, st, b) for i, (st, (_, b)) in enumerate(zip(sts, pre))]
        s0 = sts[0].Get_source()
        for s in self.peers:
            if s != s0:
                b, st = RecvBuf(MPI, "i4", CAP), MPI.Status()
                m.Recv(b.spec, s, PRE, st)
                done.append((order, st, b))
                order += 1
        # in the order the receives were posted, every source's messages in order: the
        # wildcard, posted first, took the first of this round of its source
        for _, st, b in sorted(done, key=lambda e: e[0]):
            s, t, nb = chk.status(MPI, st, None, PRE, "i4")
            chk.take(s, PRE, t, b.bytes(nb))
            b.free()
        for s in self.peers:
            if chk.next.get((s, PRE), 0) - start[s] != total[s]:
                chk.fail(f"PRE: {chk.next.get((s, PRE), 0) - start[s]} messages from {s} this round, "
                         f"{total[s]} sent")

    def recv_wsrc(self, rnd: int) -> None:
        MPI, m, chk, rng = self.MPI, self.m, self.chk, self.rng
        chk.where = f"round {rnd} ANY_SOURCE"
        b, rt = RecvBuf(MPI, "f8", CAP), _rtag(WSRC, rnd)
        for _ in range(self.due(MPI.ANY_SOURCE, WSRC, rnd)):
            st = MPI.Status()
            if rng.random() < 0.7:
                m.Recv(b.spec, MPI.ANY_SOURCE, rt, st)
            else:
                m.Irecv([b.mem.view("f8"), MPI.DOUBLE], MPI.ANY_SOURCE, rt).Wait(st)
            s, t, nb = chk.status(MPI, st, None, rt, "f8")
            chk.take(s, WSRC, t, b.bytes(nb))

    def recv_probe(self, rnd: int) -> None:
        MPI, m, chk, rng = self.MPI, self.m, self.chk, self.rng
        chk.where = f"round {rnd} Probe"
        rt = _rtag(PROBE, rnd)
        specific = rnd % 2 == 1
        for src in self.peers if specific else [MPI.ANY_SOURCE]:
            for _ in range(self.due(src, PROBE, rnd)):
                pst = MPI.Status()
                if rng.random() < 0.5:
                    m.Probe(src, rt, pst)
                else:
                    _spin(m.Iprobe, src, rt, pst)
                s, t, nb = chk.status(MPI, pst, src, rt, "f4")
                a = np.empty(nb // 4, "f4")
                st = MPI.Status()
                m.Recv(a if rng.random() < 0.5 else [a, MPI.FLOAT], s, t, st)
                if chk.status(MPI, st, s, t, "f4") != (s, t, nb):
                    chk.fail("Probe's status and the Recv's that followed disagree")
                chk.take(s, PROBE, t, a.view(np.uint8))

    def recv_mprobe(self, rnd: int) -> None:
        MPI, m, chk, rng = self.MPI, self.m, self.chk, self.rng
        chk.where = f"round {rnd} Mprobe"
        rt = _rtag(MPROBE, rnd)
        specific = rnd % 2 == 0
        for src in self.peers if specific else [MPI.ANY_SOURCE]:
            for _ in range(self.due(src, MPROBE, rnd)):
                pst = MPI.Status()
                if rng.random() < 0.5:
                    msg = m.Mprobe(src, rt, pst)
                else:
                    msg = _spin(m.Improbe, src, rt, pst)
                s, t, nb = chk.status(MPI, pst, src, rt, "i8")
                a = np.empty(nb // 8 + int(rng.integers(0, 3)), "i8")
                st = MPI.Status()
                if rng.random() < 0.5:
                    msg.Recv([a, MPI.INT64_T], st)
                else:
                    msg.Irecv(a).Wait(st)
                if chk.status(MPI, st, s, t, "i8") != (s, t, nb):
                    chk.fail("Mprobe's status and the Mrecv's disagree")
                chk.take(s, MPROBE, t, a.view(np.uint8)[:nb])

    def recv_obj(self, rnd: int) -> None:
        MPI, m, chk = self.MPI, self.m, self.chk
        chk.where = f"round {rnd} objects"
        specific = rnd % 2 == 0
        for src in self.peers if specific else [MPI.ANY_SOURCE]:
            for _ in range(self.due(src, OBJ, rnd)):
                st = MPI.Status()
                obj = m.recv(None, src, _rtag(OBJ, rnd), st)
                self.take_object(st, OBJ, obj)

    def recv_w(self, rnd: int) -> None:
        MPI, w, chk, rng = self.MPI, self.w[rnd % 2], self.chk, self.rng
        chk.where = f"round {rnd} ANY_TAG"
        b = RecvBuf(MPI, "u1", CAP, "byte")
        specific = rnd % 2 == 0
        for src in self.peers if specific else [MPI.ANY_SOURCE]:
            for _ in range(self.due(src, W, rnd)):
                st = MPI.Status()
                if rng.random() < 0.7:
                    w.Recv(b.spec, src, MPI.ANY_TAG, st)
                else:
                    w.Irecv(b.spec, src, MPI.ANY_TAG).Wait(st)
                s, t, nb = chk.status(MPI, st, src)
                if t not in W_TAGS:
                    chk.fail(f"ANY_TAG receive on the wildcard communicator got tag {t}")
                chk.take(s, W, t, b.bytes(nb))

    def cancel_never(self, rnd: int, never: list) -> None:
        MPI, chk = self.MPI, self.chk
        chk.where = f"round {rnd} cancel of never-matching receives"
        for q in never:
            q.Cancel()
            st = MPI.Status()
            _until(chk, f"a cancelled Irecv on tag {NEVER} never completed", lambda: q.Test(st))
            if not st.Is_cancelled():
                chk.fail(f"an Irecv on tag {NEVER} (nobody sends it) was not cancelled (source {st.Get_source()})")
            self.cancels["never"] += 1

    # the cancel stream
    def settle_standing(self, rnd: int, standing) -> None:
        """Complete or cancel the waiting receives of the cancel stream (either may win)."""
        MPI, chk = self.MPI, self.chk
        chk.where = f"round {rnd} cancel-stream receives"
        for s, (q, b) in standing.items():
            q.Cancel()
            st = MPI.Status()
            _until(chk, f"a cancelled Irecv of the cancel stream from {s} never completed", lambda: q.Test(st))
            if st.Is_cancelled():
                self.cancels["recv cancelled"] += 1
                continue
            self.cancels["recv matched first"] += 1
            s2, t, nb = chk.status(MPI, st, s, CXL, "u1")
            chk.take(s2, CXL, t, b.bytes(nb))

    def drain_cxl(self) -> None:
        MPI, m, chk = self.MPI, self.m, self.chk
        st = MPI.Status()
        for s in self.peers:
            while m.Iprobe(s, CXL, st):
                nb = st.Get_count(MPI.BYTE)
                a = np.empty(nb, np.uint8)
                m.Recv(a, s, CXL, st)
                src, t, _ = chk.status(MPI, st, s, CXL, "u1")
                chk.take(src, CXL, t, a)

    def cancel_due(self, when: str) -> None:
        for req, _, _, w in self.cxl_sends:
            if w == when and self.cancel_sends:
                req.Cancel()

    def finish_cxl_sends(self, rnd: int) -> None:
        MPI, chk = self.MPI, self.chk
        chk.where = f"round {rnd} cancel-stream sends"
        self.cancel_due("end")
        reqs = [e[0] for e in self.cxl_sends]
        sts: list = []
        _until(chk, "cancel-stream sends never completed", lambda: MPI.Request.Testall(reqs, sts), self.drain_cxl)
        if len(sts) != len(reqs):
            chk.fail(f"Testall filled {len(sts)} statuses for {len(reqs)} requests")
        for st, (_, d, seq, when) in zip(sts, self.cxl_sends):
            if st.Is_cancelled():
                self.cancels[f"send cancelled ({when})"] += 1
            else:
                self.cancels[f"send delivered ({when})"] += 1
                self.cxl_done[d].append(seq)
        self.cxl_sends = []

    def round(self, rnd: int) -> None:
        MPI = self.MPI
        never, pre, standing = self.post_ahead(rnd)
        # some of the cancel stream's waiting receives are cancelled at once (most often
        # before anything arrived), the others after C (most often after a match)
        early = {s: e for s, e in (standing or {}).items() if self.rng.random() < 0.5}
        self.settle_standing(rnd, early)
        reqs = self.send_all(rnd)
        self.exchange(rnd)
        self.cancel_due("mid")
        self.settle_standing(rnd, {s: e for s, e in (standing or {}).items() if s not in early})
        self.drain_cxl()
        phases = [self.recv_wsrc, self.recv_probe, self.recv_mprobe, self.recv_obj, self.recv_w,
                  lambda k: self.recv_pre(k, pre)]
        for i in self.rng.permutation(len(phases)):
            phases[i](rnd)
        self.cancel_never(rnd, never)
        self.chk.where = f"round {rnd} Waitall of the sends"
        MPI.Request.Waitall(reqs)
        self.finish_cxl_sends(rnd)
        self.release()

    def settle_cancel_stream(self) -> None:
        """After the last round: each receiver learns which cancel-stream seqs were delivered."""
        MPI, m, chk = self.MPI, self.m, self.chk
        chk.where = "cancel-stream totals"
        lists = m.alltoall([self.cxl_done.get(d, []) for d in range(self.n)])
        for s in self.peers:
            want = lists[s]
            got = chk.cxl.setdefault(s, [])
            limit = time.monotonic() + 30
            while len(got) < len(want) and got == want[: len(got)]:
                st = MPI.Status()
                if not m.Iprobe(s, CXL, st):
                    if time.monotonic() > limit:
                        chk.fail(f"cancel stream from {s}: sends not cancelled {want}, received only {got} "
                                 f"after 30 s")
                    time.sleep(0.0005)
                    continue
                a = np.empty(st.Get_count(MPI.BYTE), np.uint8)
                m.Recv(a, s, CXL, st)
                src, t, _ = chk.status(MPI, st, s, CXL, "u1")
                chk.take(src, CXL, t, a)
            if got != want:
                chk.fail(f"cancel stream from {s}: sends not cancelled {want}, received {got}")
            q = m.Irecv(np.empty(8, np.uint8), s, CXL)
            q.Cancel()
            st = MPI.Status()
            _until(chk, f"a cancelled Irecv of the cancel stream from {s} never completed", lambda: q.Test(st))
            if not st.Is_cancelled():
                chk.fail(f"a message beyond the cancel stream's last ({want[-1:]}) from {s}")


# --- the threads --------------------------------------------------------------------------
def _thread_specific(t: Traffic, comm, errors: list) -> None:
    """Isend/Issend to every peer, then blocking receives from each source in turn."""
    MPI, chk, rng = t.MPI, t.chk, t.rng
    peers = [p for p in range(t.n) if p != t.me]
    try:
        for rnd in range(THREAD_ROUNDS):
            chk.where = f"thread T0 round {rnd}"
            reqs = []
            for d in peers:
                for _ in range(_count(t.seed, t.me, d, T0, rnd)):
                    reqs.append(t.isend(comm, d, T0, rng.random() < 0.25)[1])
            for s in rng.permutation(peers):
                s = int(s)
                for _ in range(_count(t.seed, s, t.me, T0, rnd)):
                    msg = _message(t.seed, s, t.me, T0, chk.next.get((s, T0), 0), t.eager)
                    b = RecvBuf(MPI, msg.ch, msg.raw.size, ("array", "typed", "vector")[int(rng.integers(3))])
                    st = MPI.Status()
                    comm.Recv(b.spec, s, T0, st)
                    src, tag, nb = chk.status(MPI, st, s, T0, msg.ch)
                    chk.take(src, T0, tag, b.bytes(nb))
                    b.free()
            MPI.Request.Waitall(reqs)
            t.release()
    except BaseException as e:  # re-raised by the main thread
        errors.append(e)


def _thread_wildcard(t: Traffic, comm, errors: list) -> None:
    """Isend to every peer, objects too; ANY_SOURCE receives, half of them after Iprobe."""
    MPI, chk, rng = t.MPI, t.chk, t.rng
    peers = [p for p in range(t.n) if p != t.me]
    b = RecvBuf(MPI, "f8", CAP)
    try:
        for rnd in range(THREAD_ROUNDS):
            chk.where = f"thread T1 round {rnd}"
            rt, rto = _rtag(T1, rnd), _rtag(T1OBJ, rnd)
            reqs = []
            for d in peers:
                for _ in range(_count(t.seed, t.me, d, T1, rnd)):
                    reqs.append(t.isend(comm, d, T1, rng.random() < 0.2, rt)[1])
                for _ in range(_count(t.seed, t.me, d, T1OBJ, rnd)):
                    reqs.append(t.isend(comm, d, T1OBJ, rng.random() < 0.5, rto)[1])
            for _ in range(sum(_count(t.seed, s, t.me, T1, rnd) for s in peers)):
                st = MPI.Status()
                if rng.random() < 0.5:
                    _spin(comm.Iprobe, MPI.ANY_SOURCE, rt, st)
                    src = st.Get_source()
                    a = np.empty(st.Get_count(MPI.DOUBLE), "f8")
                    comm.Recv(a, src, rt, st)
                    got = a.view(np.uint8)
                else:
                    comm.Recv(b.spec, MPI.ANY_SOURCE, rt, st)
                    got = b.bytes(st.Get_count(MPI.BYTE))
                src, tag, nb = chk.status(MPI, st, None, rt, "f8")
                chk.take(src, T1, tag, got)
            for _ in range(sum(_count(t.seed, s, t.me, T1OBJ, rnd) for s in peers)):
                st = MPI.Status()
                t.take_object(st, T1OBJ, comm.recv(None, MPI.ANY_SOURCE, rto, st))
            MPI.Request.Waitall(reqs)
            t.release()
    except BaseException as e:  # re-raised by the main thread
        errors.append(e)


# --- one rank -----------------------------------------------------------------------------
def _stress(seed: int, MPI=None) -> dict:
    """The whole test on one rank; returns counts of what it did."""
    t0 = time.perf_counter()
    cancel_sends = MPI is None  # MPICH 5.0.2 (the pip wheel) crashes in MPI_Cancel of a pending send
    if MPI is None:
        from gpumpi import MPI
        from gpumpi import _runtime as rt

        eager = rt.ENGINE.eager_limit
    else:
        eager = 65536
    world = MPI.COMM_WORLD
    me, n = world.rank, world.size
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
    if n < 2:
        return {}
    m, w = world.Dup(), (world.Dup(), world.Dup())
    tcomms = [world.Dup(), world.Dup()]
    main = Main(MPI, seed, me, n, eager, m, w)
    main.cancel_sends = cancel_sends
    tt = [Traffic(MPI, seed, me, n, eager, 1 + i) for i in range(2)]
    errors: list = []
    threads = [threading.Thread(target=fn, args=(tr, c, errors), name=f"stress-{i}")
               for i, (fn, tr, c) in enumerate(zip((_thread_specific, _thread_wildcard), tt, tcomms))]
    for th in threads:
        th.start()
    # a failure in any thread fails the rank at once (the process exit ends the others)
    for rnd in range(ROUNDS):
        main.round(rnd)
        if errors:
            raise errors[0]
    for th in threads:
        while th.is_alive() and not errors:
            th.join(0.05)
    if errors:
        raise errors[0]
    main.settle_cancel_stream()

    # every stream's count, every source's total, the world's totals
    chk = main.chk
    chk.where = "final counts"
    checkers = [main.chk] + [tr.chk for tr in tt]
    sent: list = [dict() for _ in range(n)]
    for tr in [main] + tt:
        for (d, sid), k in tr.sent.items():
            if sid != CXL:
                sent[d][sid] = k
    for d, seqs in main.cxl_done.items():
        sent[d][CXL] = len(seqs)
    told = m.alltoall(sent)
    owner = {T0: tt[0].chk, T1: tt[1].chk, T1OBJ: tt[1].chk}
    for s in main.peers:
        for sid, k in told[s].items():
            c = owner.get(sid, chk)
            got = len(c.cxl.get(s, [])) if sid == CXL else c.next.get((s, sid), 0)
            if got != k:
                chk.fail(f"stream ({s}, {sid}): {k} sent, {got} received")
        total = sum(c.got[s] for c in checkers)
        if total != sum(told[s].values()):
            chk.fail(f"from {s}: {sum(told[s].values())} sent, {total} received")
    seen = [c.seen for c in checkers]
    if sum(map(len, seen)) != len(set().union(*seen)):
        chk.fail("the threads' checkers saw the same message")
    mine = np.array([sum(sum(d.values()) for d in sent), sum(sum(c.got.values()) for c in checkers)], np.int64)
    tot = np.empty(2, np.int64)
    world.Allreduce(mine, tot, MPI.SUM)
    if tot[0] != tot[1]:
        chk.fail(f"world: {tot[0]} messages sent, {tot[1]} received")
    world.Barrier()
    for c in [m, *w] + tcomms:
        if c.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG):
            st = MPI.Status()
            c.Probe(MPI.ANY_SOURCE, MPI.ANY_TAG, st)
            chk.fail(f"a message is left over after every count matched (source {st.Get_source()}, tag "
                     f"{st.Get_tag()}, {st.Get_count(MPI.BYTE)} bytes)")
    world.Barrier()
    for c in [m, *w] + tcomms:
        c.Free()
    stats = Counter()
    for tr in [main] + tt:
        stats.update(tr.stats)
    stats.update(main.cancels)
    stats["received"] = int(mine[1])
    stats["sent"] = int(mine[0])
    stats["eager_limit"] = eager
    stats["seconds"] = round(time.perf_counter() - t0, 2)
    from gpumpi import _runtime as rt

    stats["compiled"] = rt.ENGINE.frecv is not None  # the small-message fast path was in use
    return dict(stats)


# --- tests --------------------------------------------------------------------------------
def _run(n: int, env=None) -> list:
    try:
        return run_ranks(_stress, n, timeout=DEADLINE, args=(SEED,), env=env)
    except RanksFailed as e:
        raise AssertionError(f"stress seed {SEED} (rerun with GPUMPI_STRESS_SEED={SEED}) at {n} ranks:\n{e}") from None


@pytest.mark.parametrize("n, fast", [(2, "on"), (3, "on"), (4, "on"), (3, "auto"), (3, "off")])
def test_mixed_traffic_loses_duplicates_and_reorders_nothing(n, fast):
    """GPUMPI_FASTPATH: on, the compiled small-message path from the first message (mixed with the
    general path wherever it declines); auto, switched on mid-run; off, the general path alone."""
    got = _run(n, env={"GPUMPI_FASTPATH": fast})
    assert all(st["compiled"] == (fast != "off") for st in got), [st["compiled"] for st in got]
    mix = Counter()
    for st in got:
        mix.update(st)
        assert st["never"] == 3 * ROUNDS
    # the mix happened: every size category, derived types, objects, every send mode, cancels
    for key in CATEGORIES + ("vector", "byte", "count", "object", "Send", "Ssend", "Isend", "Issend"):
        assert mix[key] > 0, (key, mix)
    assert sum(v for k, v in mix.items() if k.startswith("send ")) > 0
    print(f"\n{n} ranks: " + "; ".join(f"rank {r}: {st['sent']} sent, {st['seconds']} s" for r, st in enumerate(got)))
    cancelled = sum(v for st in got for k, v in st.items() if k.startswith("send cancelled"))
    delivered = sum(v for st in got for k, v in st.items() if k.startswith("send delivered"))
    print(f"cancel stream: {cancelled} sends cancelled, {delivered} delivered")


def test_mixed_traffic_with_small_rings():
    """Rings of 64 KiB with an eager limit of about 32 KiB: eager sends often find their ring full and
    wait in the backlog (a few dozen per run), so a later send must not overtake them."""
    got = _run(3, env={"GPUMPI_RING_SIZE": "65536", "GPUMPI_EAGER_LIMIT": "32768", "GPUMPI_FASTPATH": "on"})
    assert all(16384 < st["eager_limit"] <= 32768 for st in got), got  # half a ring (less frame overhead)


# --- the checker catches what it is meant to catch ----------------------------------------
def _stream(sid: int, k: int, src: int = 1, me: int = 0, eager: int = 4096) -> list:
    return [_message(SEED, src, me, sid, i, eager) for i in range(k)]


def _feed(msgs, order, sid=SPEC, src=1):
    chk = Checker(SEED, 0, 4096)
    for i in order:
        chk.take(src, sid, msgs[i].tag, msgs[i].raw.copy())
    return chk


def test_checker_accepts_the_stream_in_order():
    msgs = _stream(SPEC, 40)
    assert {m.cat for m in msgs} == set(CATEGORIES)
    chk = _feed(msgs, range(40))
    assert chk.next[(1, SPEC)] == 40 and chk.got[1] == 40


def _with_header(msgs):
    return [i for i, m in enumerate(msgs) if m.raw.size >= 8]


@pytest.mark.parametrize("fault, match", [("lose", "lost"), ("duplicate", "duplicated"),
                                          ("swap", "reordered"), ("corrupt", "checksum mismatch"),
                                          ("source", "was received as")])
def test_checker_catches(fault, match):
    msgs = _stream(SPEC, 40)
    i, j = _with_header(msgs)[3:5]
    order = list(range(40))
    if fault == "lose":
        del order[i]
    elif fault == "duplicate":
        order.insert(i + 1, i)
    elif fault == "swap":
        order[i], order[j] = order[j], order[i]
    with pytest.raises(AssertionError, match=match) as ei:
        if fault == "corrupt":
            msgs[i].raw[-1] ^= 1
        if fault == "source":
            _feed(msgs, order, src=2)
        else:
            _feed(msgs, order)
    assert f"GPUMPI_STRESS_SEED={SEED}" in str(ei.value)


def test_checker_catches_a_lost_empty_message():
    msgs = _stream(SPEC, 60)
    zero = [i for i, m in enumerate(msgs) if m.raw.size == 0 and i + 1 < 60]
    order = [i for i in range(60) if i != zero[0]]
    with pytest.raises(AssertionError, match="lost or reordered|bytes, received"):
        _feed(msgs, order)


def test_tournament_pairs_every_two_ranks_once():
    for n in range(2, 9):
        met = set()
        for step in range(n + n % 2 - 1):
            ps = [_partner(r, step, n) for r in range(n)]
            for r, p in enumerate(ps):
                assert p is None or (ps[p] == r and p != r)
                if p is not None:
                    met.add((min(r, p), max(r, p)))
        assert len(met) == n * (n - 1) // 2


if __name__ == "__main__":  # under mpiexec with mpi4py: mpiexec -n 3 python tests/test_p2p_stress_mixed.py [seed]
    import sys

    from mpi4py import MPI as _MPI

    _out = _stress(int(sys.argv[1]) if len(sys.argv) > 1 else SEED, _MPI)
    print(_MPI.COMM_WORLD.rank, _out, flush=True)
