"""Contract tests for frame transports (:class:`gpumpi.ipc.base.Frames`), run over every one.

The contract (``gpumpi/ipc/base.py``), one ``check_*`` per rule:

* frames to one peer arrive in the order sent, also when the way out is full (later frames
  wait in a backlog behind earlier ones) and when the transport's buffer wraps;
* ``try_send`` writes a frame only if it fits now, behind nothing: it never queues (False
  when there is no room or a backlog exists) and a refused frame is never written later;
* a frame sent with a *token* keeps a reference to its payload (the caller promises the
  memory stays put), and its token comes back from ``flush`` exactly once, when the frame
  has been written (a ``send`` that returns True wrote it at once: its token never comes
  back);  without a token the payload is copied;
* ``poll`` hands at most ``budget`` frames to ``handler(peer, header, payload)``, with the
  exact header fields of ``_protocol.HEADER`` and the exact payload bytes;
* ``drop(peer)`` forgets what waits for ``peer``: it returns exactly the tokens of the
  frames queued for that peer, nothing of other peers, and those frames are never written;
* ``idle()`` is true exactly when no frame waits to be written;
* peers are independent: no room towards one peer delays frames to another;
* a frame of ``max_payload`` bytes goes through wherever the transport's buffer stands.

Every check takes a :class:`Link` (one sender, one receiver, possibly the same object) or,
for the rules that need more than two ranks, a list of endpoints (``ends[r]`` is rank r's).
:data:`FRAMES` and :data:`GROUPS` list the factories; a new frame transport is one more
entry in each.  Expectations are built here from the frames the test sent, never from the
transport.  Everything runs in one process, so each loop is deterministic: a pump that
makes no progress fails at once instead of waiting.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from gpumpi._protocol import HLEN
from gpumpi.ipc.jobseg import JobSegment
from gpumpi.ipc.shm import ShmTransport

pytestmark = pytest.mark.timeout(60)

RING = 8192  # bytes of each ring's data area: a hundred small frames fill it


# --- the transports under test ---------------------------------------------------------------


@dataclasses.dataclass
class Link:
    """Frames from ``tx`` (which names the receiver ``dst``) to ``rx`` (which names the sender ``src``)."""

    tx: object
    rx: object
    dst: int
    src: int


def shm_job(n: int):
    """``n`` ShmTransport endpoints over one job segment (one process plays every rank)."""
    seg = JobSegment.create(n, RING, stage_slot=4096, stage_slots=1)
    ends = [ShmTransport(r, n, seg) for r in range(n)]

    def close():
        for e in ends:
            e.close()
        seg.close()

    return ends, close


def shm_pair():
    ends, close = shm_job(2)
    return Link(ends[0], ends[1], 1, 0), close


def shm_self_in_job():
    """Rank 1 of a 2-rank job to itself (its ring (1, 1), polled after the peers' rings)."""
    ends, close = shm_job(2)
    return Link(ends[1], ends[1], 1, 1), close


def shm_singleton():
    """A singleton (no launcher): one ring in a private mapping."""
    t = ShmTransport(0, 1, None, RING)
    return Link(t, t, 0, 0), t.close


#: name -> factory of a connected pair: ``() -> (Link, close)``
FRAMES = {
    "shm": shm_pair,
    "shm-self-in-job": shm_self_in_job,
    "shm-singleton": shm_singleton,
}
#: name -> factory of ``n`` connected ranks: ``n -> (endpoints, close)``
GROUPS = {
    "shm": shm_job,
}


@pytest.fixture(params=sorted(FRAMES))
def link(request):
    lk, close = FRAMES[request.param]()
    yield lk
    close()


@pytest.fixture(params=sorted(GROUPS))
def trio(request):
    ends, close = GROUPS[request.param](3)
    yield ends
    close()


# --- frames and helpers ------------------------------------------------------------------------


def align64(n: int) -> int:
    return -(-n // 64) * 64


def frame(i: int, size: int) -> tuple:
    """The i-th test frame: (kind, flags, src, ctx, tag, nbytes, msgid, payload bytes), every
    field different from frame to frame and signed fields of both signs."""
    payload = ((np.arange(size, dtype=np.uint32) * 7 + i * 131) & 0xFF).astype(np.uint8).tobytes()
    sign = -1 if i % 2 else 1
    return (1 + i % 9, (i * 37) & 0xFF, (i * 7919) & 0xFFFF, sign * (i * 1009 % (1 << 31)),
            -sign * (i * 31 % (1 << 31)), (i << 40) | size, (1 << 64) - 1 - i, payload)


def send(lk: Link, f: tuple, payload=None, token=None) -> bool:
    return lk.tx.send(lk.dst, *f[:7], payload=f[7] if payload is None else payload, token=token)


def try_send(lk: Link, f: tuple) -> bool:
    return lk.tx.try_send(lk.dst, *f[:7], f[7])


def recv(rx, src: int, budget: int = 64) -> list:
    """Poll ``rx`` once; the frames it handed over, each as the tuple :func:`frame` makes."""
    got = []

    def handler(peer, hdr, payload):
        body = bytes(payload)
        assert peer == src, f"frame from peer {peer}, expected {src}"
        assert len(hdr) == 8 and hdr[0] == HLEN + len(body), (hdr, len(body))
        got.append((*hdr[1:], body))

    n = rx.poll(handler, budget)
    assert n == len(got) <= budget
    return got


def pump(lk: Link, want: int) -> tuple:
    """Flush and poll until ``want`` frames arrived: (frames, tokens flush returned, in order)."""
    got, tokens = [], []
    while len(got) < want:
        flushed = lk.tx.flush()
        tokens += flushed
        new = recv(lk.rx, lk.src)
        if not new and not flushed:
            raise AssertionError(f"no progress after {len(got)} of {want} frames (idle: {lk.tx.idle()})")
        got += new
    return got, tokens


def drain(lk: Link) -> list:
    """Poll until nothing arrives (no flush): the frames that were in the way."""
    got = []
    while True:
        new = recv(lk.rx, lk.src)
        if not new:
            return got
        got += new


def fill(lk: Link, start: int) -> list:
    """``try_send`` frames of 200 bytes, then header-only ones, until none fits: the frames
    written.  Afterwards no frame fits (a frame is never smaller than its header)."""
    sent = []
    for size in (200, 0):
        while try_send(lk, f := frame(start + len(sent), size)):
            sent.append(f)
    assert sent, "not even one frame fitted an empty ring"
    return sent


# --- checks on a pair ------------------------------------------------------------------------


def check_order_across_backlog_and_wrap(lk: Link):
    """Frames of every size up to ``max_payload`` arrive in the order sent, through a full ring,
    a backlog and many wraps, with sends, polls and flushes interleaved."""
    mp = lk.tx.max_payload
    assert mp > 0
    sizes = [0, 1, 7, 8, 9, 100, 333, mp, 1000, 2, mp - 1, 64, 0, 501]
    sent = [frame(i, sizes[i % len(sizes)] % (mp + 1)) for i in range(160)]
    assert sum(align64(HLEN + len(f[7])) for f in sent) > 10 * RING  # wraps many times
    # a burst with no reader: the ring fills and the rest waits behind it
    wrote = [send(lk, f) for f in sent[:60]]
    assert wrote[0] and not wrote[-1], wrote
    assert not lk.tx.idle()
    got = []
    # then reader and writer take turns in small steps, new frames joining the backlog
    for k, f in enumerate(sent[60:]):
        send(lk, f)
        if k % 3 == 0:
            got += recv(lk.rx, lk.src, budget=2)
            lk.tx.flush()
    rest, _ = pump(lk, len(sent) - len(got))
    got += rest
    assert lk.tx.idle()
    assert got == sent  # every field and byte, in order
    assert recv(lk.rx, lk.src) == []


def check_try_send_never_queues(lk: Link):
    """``try_send`` writes only what fits now, behind nothing; a refused frame is never written."""
    assert try_send(lk, frame(0, 0))  # an empty ring takes a header-only frame
    written = [frame(0, 0)] + fill(lk, 1)
    refused = frame(999, 200)
    assert not try_send(lk, refused)  # full
    assert lk.tx.idle() and lk.tx.flush() == []  # and nothing was queued
    assert drain(lk) == written
    assert lk.tx.flush() == [] and recv(lk.rx, lk.src) == []  # the refused frame never comes

    # a backlog with room in the ring: try_send must still refuse, or it would overtake
    first = fill(lk, 100)
    queued = frame(200, 50)
    assert not send(lk, queued)
    assert drain(lk) == first  # room now, but `queued` still waits for flush
    assert not lk.tx.idle()
    assert not try_send(lk, frame(300, 0))
    got, _ = pump(lk, 1)
    assert got == [queued] and lk.tx.idle()
    assert lk.tx.flush() == [] and recv(lk.rx, lk.src) == []  # frame 300 was not written later
    # behind nothing again: try_send writes
    assert try_send(lk, frame(400, 3))
    assert recv(lk.rx, lk.src) == [frame(400, 3)]


def check_token_payload_referenced_and_returned_once(lk: Link):
    """A queued frame with a token carries its payload by reference; its token comes back from
    ``flush`` exactly once, only once its frame can be read; a frame ``send`` wrote at once
    (True) never gives its token back."""
    at_once = frame(0, 40)
    assert send(lk, at_once, payload=bytearray(at_once[7]), token="at-once")
    first = [at_once] + fill(lk, 1)
    bufs = {f"t{i}": bytearray(frame(50 + i, 100 + i)[7]) for i in range(6)}
    queued = []
    for i, (tok, buf) in enumerate(bufs.items()):
        assert not send(lk, frame(50 + i, 100 + i), payload=buf, token=tok)
        queued.append(tok)
    plain = frame(60, 30)
    assert not send(lk, plain)  # a frame without token among them gives nothing back
    assert lk.tx.flush() == []  # no room: nothing written, no token
    bufs["t2"][:5] = b"XXXXX"  # the caller's memory, changed before the frame is written
    want = [frame(50 + i, 100 + i) for i in range(6)] + [plain]
    want[2] = (*want[2][:7], b"XXXXX" + want[2][7][5:])
    assert drain(lk) == first
    got, returned = [], []
    while len(got) < len(want):
        toks = lk.tx.flush()
        new = recv(lk.rx, lk.src)
        # a token comes back only for a frame that is there to read
        arrived = {f"t{i}" for i in range(6) if want[i] in got + new}
        assert set(toks) <= arrived, (toks, arrived)
        returned += toks
        got += new
        assert toks or new, "no progress"
    assert got == want
    assert Counter(returned) == Counter(queued)  # each exactly once, "at-once" never
    assert lk.tx.idle() and lk.tx.flush() == []


def check_send_without_token_copies(lk: Link):
    """Without a token the payload is copied: changing the caller's buffer after ``send``
    changes nothing that arrives (written at once or queued)."""
    f0 = frame(0, 300)
    buf = bytearray(f0[7])
    assert send(lk, f0, payload=buf)
    buf[:] = bytes(len(buf))
    assert recv(lk.rx, lk.src) == [f0]

    first = fill(lk, 1)
    f1, f2 = frame(100, 257), frame(101, 64)
    b1 = bytearray(f1[7])
    arr = np.frombuffer(f2[7], dtype=np.uint8).copy()
    assert not send(lk, f1, payload=b1)
    assert not send(lk, f2, payload=memoryview(arr))  # a view of an array: copied too
    b1[:] = b"\xee" * len(b1)
    arr[:] = 0xEE
    assert drain(lk) == first
    got, toks = pump(lk, 2)
    assert got == [f1, f2] and toks == []


def check_poll_budget_and_exact_fields(lk: Link):
    """``poll`` hands at most ``budget`` frames (64 by default), each with the exact header
    fields (extreme values included) and payload bytes, and returns how many it handed."""
    extreme = [
        (255, 255, 0xFFFF, -(1 << 31), (1 << 31) - 1, (1 << 64) - 1, 0, b""),
        (0, 0, 0, (1 << 31) - 1, -(1 << 31), 0, (1 << 64) - 1, b"\x00"),
        (5, 64, 1, -1, -1, 1 << 48, 1 << 63, bytes(range(256)) * 3 + b"odd"),
    ]
    sent = extreme + [frame(i, i * 5) for i in range(7)]
    for f in sent:
        assert send(lk, f)
    calls = []
    assert lk.rx.poll(lambda *a: calls.append(a), 0) == 0 and calls == []
    got = recv(lk.rx, lk.src, budget=3)
    assert len(got) == 3
    got += recv(lk.rx, lk.src, budget=1)
    assert len(got) == 4
    got += recv(lk.rx, lk.src, budget=64)
    assert got == sent
    assert recv(lk.rx, lk.src) == []

    many = [frame(1000 + i, 0) for i in range(70)]  # header-only: 70 fit in the ring
    for f in many:
        assert send(lk, f)
    got = []
    assert lk.rx.poll(lambda peer, hdr, p: got.append((*hdr[1:], bytes(p)))) == 64
    assert got == many[:64]
    assert recv(lk.rx, lk.src) == many[64:]


def check_drop_forgets_queued_frames(lk: Link):
    """``drop(peer)`` returns exactly the tokens of the frames queued for ``peer`` (not those
    written already), those frames are never written, and ``idle()`` is true after it."""
    assert send(lk, frame(0, 10), token="written")
    first = [frame(0, 10)] + fill(lk, 1)
    toks = []
    for i in range(5):
        tok = None if i == 3 else ("dropped", i)
        assert not send(lk, frame(100 + i, 64), token=tok)
        if tok is not None:
            toks.append(tok)
    assert not lk.tx.idle()
    assert Counter(lk.tx.drop(lk.dst)) == Counter(toks)
    assert lk.tx.idle()
    assert lk.tx.drop(lk.dst) == []  # nothing left to forget
    assert drain(lk) == first
    assert lk.tx.flush() == [] and recv(lk.rx, lk.src) == []  # the dropped frames never come
    # the link still works: new frames go through
    f = frame(200, 20)
    assert send(lk, f, token="new")
    assert recv(lk.rx, lk.src) == [f] and lk.tx.flush() == []


def check_idle_iff_nothing_queued(lk: Link):
    """``idle()`` is true exactly when no frame waits to be written."""
    assert lk.tx.idle()
    assert send(lk, frame(0, 8))  # written: nothing waits
    assert lk.tx.idle()
    first = [frame(0, 8)] + fill(lk, 1)
    assert not try_send(lk, frame(90, 8)) and lk.tx.idle()  # refused, not queued
    assert not send(lk, frame(100, 8))
    assert not lk.tx.idle()
    assert lk.tx.flush() == [] and not lk.tx.idle()  # no room yet
    assert not send(lk, frame(101, 8)) and not lk.tx.idle()
    assert drain(lk) == first
    assert not lk.tx.idle()  # room, but only flush writes the backlog
    lk.tx.flush()
    assert lk.tx.idle()
    assert drain(lk) == [frame(100, 8), frame(101, 8)]


def check_max_payload_frame_fits_anywhere(lk: Link):
    """A frame of ``max_payload`` bytes goes through whatever the ring's position (it may have
    to wait for the reader, never forever)."""
    mp = lk.tx.max_payload
    for i, lead in enumerate(range(0, mp + 1, 56)):  # the ring's position moves by odd amounts
        a, b = frame(2 * i, lead), frame(2 * i + 1, mp)
        send(lk, a)
        send(lk, b)
        got, _ = pump(lk, 2)
        assert got == [a, b], lead


PAIR_CHECKS = [
    check_order_across_backlog_and_wrap,
    check_try_send_never_queues,
    check_token_payload_referenced_and_returned_once,
    check_send_without_token_copies,
    check_poll_budget_and_exact_fields,
    check_drop_forgets_queued_frames,
    check_idle_iff_nothing_queued,
    check_max_payload_frame_fits_anywhere,
]


@pytest.mark.parametrize("check", PAIR_CHECKS, ids=lambda c: c.__name__[len("check_"):])
def test_pair(link, check):
    check(link)


# --- checks on three ranks -------------------------------------------------------------------


def check_drop_leaves_other_peers_alone(ends):
    """Rank 0 has frames queued for ranks 1 and 2: ``drop(1)`` returns only rank 1's tokens;
    rank 2's frames and tokens still come, in order; rank 1 never sees a dropped frame."""
    to = {p: Link(ends[0], ends[p], p, 0) for p in (1, 2)}
    first, queued, toks = {}, {}, {}
    for p, lk in to.items():
        first[p] = fill(lk, 100 * p)
        queued[p] = [frame(100 * p + 50 + i, 32 + i) for i in range(4)]
        toks[p] = [(p, i) for i in range(4) if i != 1]
        for i, f in enumerate(queued[p]):
            assert not send(lk, f, token=(p, i) if i != 1 else None)
    assert Counter(ends[0].drop(1)) == Counter(toks[1])
    assert not ends[0].idle()  # rank 2's frames still wait
    assert ends[0].drop(1) == []
    assert drain(to[1]) == first[1]
    assert drain(to[2]) == first[2]
    got, returned = pump(to[2], len(queued[2]))
    assert got == queued[2]
    assert Counter(returned) == Counter(toks[2])
    assert ends[0].idle() and ends[0].drop(2) == []
    assert ends[0].flush() == [] and recv(ends[1], 0) == []


def check_peers_are_independent(ends):
    """A full ring and a backlog towards rank 1 delay nothing to rank 2, nor rank 2's frames
    to rank 1; the receiver gets each peer's frames in that peer's order."""
    a, b = Link(ends[0], ends[1], 1, 0), Link(ends[0], ends[2], 2, 0)
    first = fill(a, 0)
    backlog = [frame(500 + i, 16) for i in range(3)]
    for f in backlog:
        assert not send(a, f)
    for i in range(3):  # rank 0 -> 2: written at once, behind nothing
        assert send(b, frame(700 + i, 24))
    assert try_send(b, frame(703, 8))
    assert recv(ends[2], 0) == [frame(700 + i, 24) for i in range(3)] + [frame(703, 8)]
    c = Link(ends[2], ends[1], 1, 2)  # rank 2 -> 1 while 0 -> 1 is full
    assert send(c, frame(800, 40)) and try_send(c, frame(801, 0))
    assert ends[2].idle() and not ends[0].idle()
    by_peer = {0: [], 2: []}
    for _ in range(100):  # a few polls are enough; the bound turns a hang into a failure
        if len(by_peer[0]) == len(first) + len(backlog) and len(by_peer[2]) == 2:
            break
        ends[0].flush()
        ends[1].poll(lambda p, hdr, pl: by_peer[p].append((*hdr[1:], bytes(pl))), 5)
    assert by_peer[0] == first + backlog
    assert by_peer[2] == [frame(800, 40), frame(801, 0)]
    assert ends[0].idle()


GROUP_CHECKS = [check_drop_leaves_other_peers_alone, check_peers_are_independent]


@pytest.mark.parametrize("check", GROUP_CHECKS, ids=lambda c: c.__name__[len("check_"):])
def test_three_ranks(trio, check):
    check(trio)
