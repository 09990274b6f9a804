"""Tests for gpumpi.ipc.ring (single-producer/single-consumer byte ring).

Reference model, from the module docstring: positions are ever-growing byte
counters, a frame of n bytes occupies align64(n) bytes starting at ``pos % size``;
a frame never wraps: when ``off + align64(n) > size`` the producer pads to the end
of the data area and the frame starts at offset 0.  A frame fits iff the bytes in
use plus the pad plus align64(n) do not exceed ``size``.
"""

from __future__ import annotations

import mmap
import struct
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumpi.ipc.ring import CTRL, PAD, RingReader, RingWriter

U32 = struct.Struct("<I")


def align64(n):
    return -(-n // 64) * 64


def make_ring(size, start=0):
    mm = mmap.mmap(-1, CTRL + size)
    block = memoryview(mm)
    ctl = block[:CTRL].cast("Q")
    ctl[0] = start  # head
    ctl[8] = start  # tail
    del ctl
    return mm, block, RingWriter(block, size), RingReader(block, size)


def payload(n, seed):
    return bytes((seed * 31 + i * 7) & 0xFF for i in range(n))


def try_write(w, body: bytes) -> int:
    """Write one frame (u32 length + body); returns the offset or -1."""
    n = 4 + len(body)
    off = w.reserve(n)
    if off < 0:
        return off
    U32.pack_into(w.data, off, n)
    w.data[off + 4 : off + n] = body
    w.commit(n)
    return off


def try_read(r):
    off = r.peek()
    if off < 0:
        return None
    (n,) = U32.unpack_from(r.data, off)
    body = bytes(r.data[off + 4 : off + n])
    r.release(n)
    return body


# --- basics -----------------------------------------------------------------------------


def test_empty_ring():
    _, _, w, r = make_ring(256)
    assert r.peek() == -1
    assert w.free_bytes() == 256
    assert w.max_frame() == 128


def test_single_frame_round_trip():
    _, block, w, r = make_ring(256)
    assert try_write(w, b"hello") == 0
    ctl = block[:CTRL].cast("Q")
    assert ctl[8] == 64 and ctl[0] == 0  # tail published, 9 bytes -> one 64-byte line
    assert try_read(r) == b"hello"
    assert ctl[0] == 64
    assert r.peek() == -1
    assert w.free_bytes() == 256
    del ctl


def test_uncommitted_frame_is_invisible():
    _, _, w, r = make_ring(256)
    off = w.reserve(20)
    U32.pack_into(w.data, off, 20)
    assert r.peek() == -1  # not yet committed
    w.commit(20)
    assert r.peek() == off


def test_full_ring_then_release():
    _, _, w, r = make_ring(256)
    for i in range(4):
        assert try_write(w, payload(60, i)) >= 0  # 64 bytes each
    assert w.free_bytes() == 0
    assert w.reserve(8) == -1
    assert w.reserve(64) == -1
    assert try_read(r) == payload(60, 0)
    assert try_write(w, payload(60, 4)) == 0  # reuses the freed space at offset 0
    assert [try_read(r) for _ in range(4)] == [payload(60, i) for i in range(1, 5)]
    assert try_read(r) is None


def test_wrap_with_pad_marker():
    _, _, w, r = make_ring(448)
    for i in range(3):
        assert try_write(w, payload(68, i)) == 128 * i  # 72-byte frames in 128 bytes at 0, 128, 256
    # the 4th needs 128 bytes at 384: does not fit before the end; pad (64) + 128 > free (64)
    assert w.reserve(72) == -1
    assert try_read(r) == payload(68, 0)
    # now free = 192 = pad 64 + 128: fits at offset 0, with a pad marker at 384
    off = try_write(w, payload(68, 3))
    assert off == 0
    assert U32.unpack_from(w.data, 384)[0] == PAD
    assert w.free_bytes() == 0
    assert [try_read(r) for _ in range(3)] == [payload(68, i) for i in (1, 2, 3)]
    assert try_read(r) is None
    assert r.head == w.tail == 448 + 128


def test_pad_published_before_commit_is_skipped_by_reader():
    _, _, w, r = make_ring(192)
    assert try_write(w, payload(52, 0)) == 0  # 56 bytes: one line
    assert try_read(r) == payload(52, 0)
    assert try_write(w, payload(36, 1)) == 64  # 40 bytes at 64 -> tail 128
    assert try_read(r) == payload(36, 1)
    # a 100-byte frame (two lines) at 128 would cross the end: reserve pads and returns 0
    off = w.reserve(100)
    assert off == 0
    # the reader sees only the pad: it skips it and reports empty
    assert r.peek() == -1
    assert r.head == 192
    U32.pack_into(w.data, 0, 100)
    w.data[4:100] = payload(96, 2)
    w.commit(100)
    assert try_read(r) == payload(96, 2)


@pytest.mark.parametrize("size", [64, 128, 1000, 1024, 4096])
def test_max_frame_fits_empty_ring_at_any_position(size):
    for start in range(0, 2 * size, 64):  # (positions grow by whole lines, or to a lap's end)
        _, _, w, r = make_ring(size, start)
        n = w.max_frame()
        assert n % 64 == 0 and size // 2 - 64 < n <= max(64, size // 2)
        body = payload(n - 4, start)
        off = try_write(w, body)
        assert off >= 0, (size, start)
        assert off + n <= size  # never wraps
        assert try_read(r) == body


def test_positions_only_grow_and_large_counters():
    start = (1 << 40) + 8 * 1000
    _, _, w, r = make_ring(512, start)
    for i in range(200):
        body = payload(i % 150, i)
        assert try_write(w, body) >= 0
        assert try_read(r) == body
    assert w.tail == r.head > start


# --- model-based property ---------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(
    size=st.sampled_from([64, 128, 256, 512, 1000]),
    start_blocks=st.integers(0, 200),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("w"), st.integers(0, 1 << 16), st.integers(0, 255)),
            st.tuples(st.just("r")),
        ),
        max_size=120,
    ),
)
def test_random_interleaving_matches_model(size, start_blocks, ops):
    start = 8 * start_blocks
    _, block, w, r = make_ring(size, start)
    ctl = block[:CTRL].cast("Q")
    max_frame = size // 2
    fifo = deque()  # expected (frame start position, body)
    m_head = m_tail = start  # model positions
    try:
        for op in ops:
            if op[0] == "w":
                n = 4 + op[1] % (max_frame - 3)  # 4 .. size//2
                body = payload(n - 4, op[2])
                need = align64(n)
                off = m_tail % size
                pad = size - off if off + need > size else 0
                fits = (m_tail - m_head) + pad + need <= size
                got = try_write(w, body)
                if not fits:
                    assert got == -1, (n, m_head, m_tail)
                    assert ctl[8] == m_tail  # nothing published
                    continue
                assert got >= 0, (n, m_head, m_tail)
                assert got == (0 if pad else off)
                assert got % 8 == 0 and got + n <= size
                m_tail += pad
                fifo.append((m_tail, body))
                m_tail += need
                assert w.tail == ctl[8] == m_tail
                assert w.free_bytes() == size - (m_tail - m_head)
            else:
                got = try_read(r)
                if not fifo:
                    assert got is None
                    continue
                pos, body = fifo.popleft()
                assert got == body
                m_head = pos + align64(4 + len(body))
                assert r.head == ctl[0] == m_head
        # drain: everything written comes out in order, nothing more
        while fifo:
            assert try_read(r) == fifo.popleft()[1]
        assert try_read(r) is None
    finally:
        del ctl
