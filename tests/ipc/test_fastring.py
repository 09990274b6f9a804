"""The compiled ring operations (gpumpi.ipc.fastring) against the Python ring ends (ipc.ring):
same frames, same positions, every refusal leaves the ring untouched."""

import ctypes
import mmap

import numpy as np
import pytest

pytest.importorskip("numba")

from gpumpi import _protocol as P  # noqa: E402
from gpumpi.ipc import fastring as F  # noqa: E402
from gpumpi.ipc.ring import CTRL, RingReader, RingWriter  # noqa: E402

SIZE = 4096


@pytest.fixture(scope="module")
def k():
    return F.kernels()


class Ring:
    """One ring, read and written by both the compiled and the Python ends."""

    def __init__(self, size=SIZE, peer=3, epoch_word=None):
        self.mm = mmap.mmap(-1, CTRL + size)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.size = size
        self.r = RingReader(memoryview(self.mm), size)
        self.w = RingWriter(memoryview(self.mm), size)
        self.epoch = np.zeros(1, np.int64)
        self.tab = np.array([size, self.epoch.ctypes.data, 1, self.base, peer], np.int64)
        self.out = np.zeros(4, np.int64)

    def py_send(self, kind, flags, src, ctx, tag, payload, sig=0, msgid=0):
        n = P.HLEN + len(payload)
        off = self.w.reserve(n)
        assert off >= 0
        P.HEADER.pack_into(self.w.data, off, n, kind, flags, src, ctx, tag, len(payload) | (sig << P.SIG_SHIFT), msgid)
        self.w.data[off + P.HLEN: off + n] = payload
        self.w.commit(n)

    def py_recv(self):
        off = self.r.peek()
        if off < 0:
            return None
        hdr = P.HEADER.unpack_from(self.r.data, off)
        payload = bytes(self.r.data[off + P.HLEN: off + hdr[0]])
        self.r.release(hdr[0])
        return hdr, payload


def test_compiled_send_python_recv_across_wraps(k):
    send = k[0]
    ring = Ring()
    rng = np.random.default_rng(1)
    for i in range(500):
        data = rng.integers(0, 256, int(rng.integers(0, 700)), dtype=np.uint8)
        assert send(ring.base, SIZE, 5, 77, i, 9, data.ctypes.data, data.size) == 1
        hdr, payload = ring.py_recv()
        assert hdr[1:6] == (P.EAGER, 0, 5, 77, i)
        assert hdr[6] == data.size | (9 << P.SIG_SHIFT) and hdr[7] == 0
        assert payload == data.tobytes()
        assert ring.py_recv() is None
    assert ring.r.head == ring.w.tail > 500 * 32


def test_streamed_payloads_arrive_whole_at_every_alignment(k):
    """Payloads of STREAM_MIN bytes and more are written with streaming stores in three parts
    (up to a 64-byte boundary of the ring, whole lines, the rest): every byte arrives, at every
    alignment of source and ring position, and nothing past the frame is touched."""
    send = k[0]
    size = 1 << 18
    ring = Ring(size)
    rng = np.random.default_rng(7)
    pool = rng.integers(0, 256, 70000, dtype=np.uint8)
    sizes = [F.STREAM_MIN - 1, F.STREAM_MIN, F.STREAM_MIN + 1, F.STREAM_MIN + 63, F.STREAM_MIN + 64, 10007,
             65535, 65536]
    i = 0
    for n in sizes:
        for skew in (0, 1, 7, 8, 31, 63):
            data = pool[skew:skew + n]
            # frames start 8-byte aligned: a filler frame moves the next one through the offsets mod 64
            filler = (i * 8) % 64
            assert send(ring.base, size, 1, 2, 3, 0, pool.ctypes.data, filler) == 1
            before = np.frombuffer(ring.w.data, np.uint8).copy()
            tail = ring.w.tail
            assert send(ring.base, size, 5, 77, i, 9, data.ctypes.data, n) == 1
            changed = np.flatnonzero(np.frombuffer(ring.w.data, np.uint8) != before)
            off = tail % size
            if off + 32 + n > size:  # a frame that would wrap starts at 0, after a pad marker at ``off``
                changed = changed[(changed < off) | (changed >= off + 4)]
                off = 0
            assert changed.size and changed.min() >= off and changed.max() < off + 32 + n, (n, skew, filler)
            assert ring.py_recv()[1] == pool[:filler].tobytes()
            hdr, payload = ring.py_recv()
            assert hdr[1:6] == (P.EAGER, 0, 5, 77, i) and hdr[6] == n | (9 << P.SIG_SHIFT)
            assert payload == data.tobytes(), (n, skew, filler)
            assert ring.py_recv() is None
            i += 1
    assert ring.r.head == ring.w.tail > size  # wrapped at least once


def test_python_send_compiled_recv_across_wraps(k):
    recv = k[1]
    ring = Ring()
    rng = np.random.default_rng(2)
    dst = np.zeros(1024, np.uint8)
    for i in range(500):
        data = rng.integers(0, 256, int(rng.integers(0, 700)), dtype=np.uint8).tobytes()
        ring.py_send(P.EAGER, 0, 4, 11, i, data, sig=7)
        assert recv(ring.tab, 3, 11, 4, i, 7, dst.ctypes.data, dst.size, 1, 0, ring.out) == F.GOT
        assert ring.out.tolist() == [4, i, len(data), 7]
        assert dst[: len(data)].tobytes() == data
    assert ring.r.peek() == -1


def test_full_ring_refuses_and_writes_nothing(k):
    send = k[0]
    ring = Ring()
    data = np.ones(1000, np.uint8)
    sent = 0
    while send(ring.base, SIZE, 0, 1, sent, 0, data.ctypes.data, data.size):
        sent += 1
    assert sent == SIZE // 1032  # frames of 32 + 1000 bytes, 8-aligned
    tail = ring.w.tail
    assert send(ring.base, SIZE, 0, 1, 99, 0, data.ctypes.data, data.size) == 0
    assert ring.w.tail == tail
    assert ring.py_recv()[0][5] == 0  # room again once the consumer moved on
    assert send(ring.base, SIZE, 0, 1, 99, 0, data.ctypes.data, data.size) == 1


@pytest.mark.parametrize("case", ["kind", "flags", "ctx", "source", "tag", "truncate", "type", "peer"])
def test_recv_leaves_what_it_does_not_serve(k, case):
    recv = k[1]
    ring = Ring(peer=3)
    kind, flags, src, ctx, tag, sig = P.RTS if case == "kind" else P.EAGER, P.FLAG_SYNC if case == "flags" else 0, \
        4, 12 if case == "ctx" else 11, 5, 7
    payload = b"x" * (64 if case == "truncate" else 16)
    ring.py_send(kind, flags, src, ctx, tag, payload, sig=sig)
    dst = np.zeros(32, np.uint8)
    want = 2 if case == "peer" else 3
    rc = recv(ring.tab, want, 11, 6 if case == "source" else 4, 9 if case == "tag" else 5,
              8 if case == "type" else 7, dst.ctypes.data, dst.size, 1, 0, ring.out)
    assert rc == F.OTHER
    assert not dst.any()
    hdr, got = ring.py_recv()  # the frame is still there, whole
    assert hdr[1] == kind and got == payload


def test_recv_wildcards_and_untyped(k):
    recv = k[1]
    ring = Ring(peer=3)
    dst = np.zeros(8, np.uint8)
    ring.py_send(P.EAGER, 0, 4, 11, 5, b"abcdefgh", sig=7)
    # ANY_SOURCE, ANY_TAG, and signature 0 on the receive: accepts any type
    assert recv(ring.tab, -2, 11, -2, -1, 0, dst.ctypes.data, 8, 1, 0, ring.out) == F.GOT
    assert ring.out.tolist() == [4, 5, 8, 7] and dst.tobytes() == b"abcdefgh"
    ring.py_send(P.EAGER, 0, 4, 11, 5, b"", sig=9)  # an empty message matches whatever the type
    assert recv(ring.tab, 3, 11, 4, 5, 7, dst.ctypes.data, 8, 1, 0, ring.out) == F.GOT
    assert ring.out.tolist() == [4, 5, 0, 9]


def test_empty_and_epoch(k):
    recv, wait = k[1], k[2]
    ring = Ring()
    dst = np.zeros(8, np.uint8)
    assert recv(ring.tab, -2, 11, -2, -1, 0, dst.ctypes.data, 8, 50, 0, ring.out) == F.EMPTY
    assert wait(ring.tab, 50, 0) == F.EMPTY
    ring.epoch[0] = 1  # the launcher recorded a failure
    assert recv(ring.tab, -2, 11, -2, -1, 0, dst.ctypes.data, 8, 50, 0, ring.out) == F.EPOCH
    assert wait(ring.tab, 50, 0) == F.EPOCH
    assert wait(ring.tab, 50, 1) == F.EMPTY
    ring.py_send(P.EAGER, 0, 4, 11, 5, b"z")
    assert wait(ring.tab, 50, 1) == F.GOT
    assert ring.py_recv()[1] == b"z"  # wait only looked


@pytest.mark.parametrize("other_kind", [P.EAGER, P.RTS])
def test_specific_receive_steps_over_other_peers_plain_eager_frames(k, other_kind):
    recv = k[1]
    a, b = Ring(peer=3), Ring(peer=2)
    tab = np.array([SIZE, 0, 2, a.base, 3, b.base, 2], np.int64)  # peer 3's ring is polled first
    a.py_send(other_kind, 0, 3, 11, 5, b"from three")
    b.py_send(P.EAGER, 0, 2, 11, 5, b"from two")
    dst = np.zeros(16, np.uint8)
    out = np.zeros(4, np.int64)
    rc = recv(tab, 2, 11, 2, 5, 0, dst.ctypes.data, 16, 10, 0, out)
    if other_kind == P.EAGER:  # asks nothing of us: the wanted frame is taken past it
        assert rc == F.GOT and dst[:8].tobytes() == b"from two" and out.tolist() == [2, 5, 8, 0]
        assert b.py_recv() is None
    else:  # a rendezvous wants an answer now: the general path takes over
        assert rc == F.OTHER and not dst.any()
        assert b.py_recv()[1] == b"from two"
    assert a.py_recv()[1] == b"from three"  # never touched
    # only skipped frames left and the budget spent: OTHER, so the engine handles them
    a.py_send(P.EAGER, 0, 3, 11, 5, b"again")
    assert recv(tab, 2, 11, 2, 5, 0, dst.ctypes.data, 16, 10, 0, out) == F.OTHER
    assert a.py_recv()[1] == b"again"


_UF = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum, "BAND": np.bitwise_and,
       "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}


def _operands(code, n, rng):
    dt = np.dtype(code)
    if dt.kind == "f":
        special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e-30, np.finfo(dt).max], dt)
        x = np.concatenate([special, special[::-1], rng.normal(0, 1e3, n).astype(dt)])
        y = np.concatenate([special[::-1], special, rng.normal(0, 1e3, n).astype(dt)])
    else:
        info = np.iinfo(dt)
        special = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dt)
        x = np.concatenate([special, special[::-1], rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)])
        y = np.concatenate([special[::-1], special, rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)])
    return x, y


@pytest.mark.parametrize("code, op", [(c, o) for c in F.RTYPES for o in F.ROPS
                                      if not (c[0] == "f" and o.startswith("B"))])  # bitwise: integers only
def test_compiled_reductions_are_numpys(k, code, op):
    """The reductions of compiled collective rounds give NumPy's ufunc results: wrapping
    integers, NaN propagated by MAX/MIN, every element (also in place: d is x or y)."""
    rng = np.random.default_rng([F.RTYPES.index(code), F.ROPS.index(op)])
    x, y = _operands(code, 37, rng)
    want = _UF[op](x, y)
    with np.errstate(all="ignore"):
        d = np.full_like(x, 7)
        F._reduce(F.RTYPES.index(code), F.ROPS.index(op), x.ctypes.data, y.ctypes.data, d.ctypes.data, len(x))
        np.testing.assert_array_equal(d, want)  # NaN where NumPy has NaN, and nowhere else
        yy = y.copy()  # d = x op d, the executor's in-place step
        F._reduce(F.RTYPES.index(code), F.ROPS.index(op), x.ctypes.data, yy.ctypes.data, yy.ctypes.data, len(x))
        np.testing.assert_array_equal(yy, want)
        d = np.full_like(x, 7)  # a count of 0 writes nothing
        F._reduce(F.RTYPES.index(code), F.ROPS.index(op), x.ctypes.data, y.ctypes.data, d.ctypes.data, 0)
        assert (d == 7).all()


def test_ndarray_header_offsets_are_the_verified_ones():
    """rounds reads an array's data pointer and flags at the offsets gpumpi._arrays verified."""
    from gpumpi import _arrays as A

    if not A.PEEK_OK:
        pytest.skip("this interpreter's ndarray layout is not the verified one: rounds gets no arrays")
    assert (F.NP_DATA_OFFSET, F.NP_FLAGS_OFFSET) == (A.NP_DATA_OFFSET, A.NP_FLAGS_OFFSET)
    a = np.arange(5.0)
    word = lambda off: np.frombuffer(ctypes.string_at(id(a) + off, 8), np.uint64)[0]  # noqa: E731
    assert word(F.NP_DATA_OFFSET) == a.ctypes.data == A.PEEK_DATA[id(a) >> 3]
    assert word(F.NP_FLAGS_OFFSET) == A.PEEK_FLAGS[id(a) >> 3]
