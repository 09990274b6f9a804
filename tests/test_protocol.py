"""Tests for gpumpi._protocol (frame kinds and per-message state machines).

The expected transitions are transcribed by hand from the module docstring (the
protocol's specification), not read from the ``SEND``/``RECV`` tables, so a table
entry that disagrees with the documented protocol fails here.
"""

from __future__ import annotations

import copy
import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumpi import _protocol as P
from gpumpi._protocol import (
    ACK,
    BUFFERED,
    CANCEL,
    CANCELLED,
    CANCELLING,
    CANCELLING_ACKED,
    CANCELLING_CTS,
    CREPLY,
    CTS,
    DATA,
    DONE,
    EAGER,
    FAILED,
    FLAG_CANCELLED,
    FLAG_CMA,
    FLAG_LAST,
    FLAG_SYNC,
    HEADER,
    HLEN,
    PULLING,
    POSTED,
    PUSHING,
    READY,
    RECV,
    RTS,
    RTS_BODY,
    SEND,
    STANDARD,
    START,
    SYNCHRONOUS,
    WAIT_ACK,
    LocalProtocolError,
    chunks,
    send_start_event,
    step,
    use_eager,
)

# --- the documented protocol, transcribed from the docstring ---------------------------

DOC_SEND = {
    (START, "eager"): DONE,
    (START, "eager_sync"): WAIT_ACK,
    (START, "rts"): WAIT_ACK,
    (WAIT_ACK, "ack"): DONE,
    (WAIT_ACK, "cts"): PUSHING,
    (PUSHING, "pushed"): DONE,
    (WAIT_ACK, "cancel"): CANCELLING,
    (CANCELLING, "cancelled"): CANCELLED,
    (CANCELLING, "not_cancelled"): WAIT_ACK,
    (CANCELLING, "ack"): CANCELLING_ACKED,
    (CANCELLING_ACKED, "not_cancelled"): DONE,
    (CANCELLING, "cts"): CANCELLING_CTS,
    (CANCELLING_CTS, "not_cancelled"): PUSHING,
}
DOC_RECV = {
    (POSTED, "eager"): DONE,
    (POSTED, "rts_read"): DONE,
    (POSTED, "rts_push"): PULLING,
    (PULLING, "data_last"): DONE,
    (POSTED, "cancel"): CANCELLED,
}
SEND_STATES = [START, WAIT_ACK, PUSHING, DONE, CANCELLING, CANCELLING_ACKED, CANCELLING_CTS, CANCELLED, FAILED]
RECV_STATES = [POSTED, PULLING, DONE, CANCELLED, FAILED]
FINAL_STATES = {DONE, CANCELLED, FAILED}
EVENTS = sorted(
    {e for _, e in DOC_SEND} | {e for _, e in DOC_RECV} | {"fail", "data", "bogus", "", "DONE", "ACK"}
)

# Every documented path, start state, events, final state.
SEND_PATHS = [
    # eager standard/ready/buffered
    ([send_start_event(STANDARD, True)], DONE),
    ([send_start_event(READY, True)], DONE),
    ([send_start_event(BUFFERED, True)], DONE),
    # eager synchronous
    ([send_start_event(SYNCHRONOUS, True), "ack"], DONE),
    # rendezvous, any mode
    *[([send_start_event(m, False), "ack"], DONE) for m in (STANDARD, SYNCHRONOUS, READY, BUFFERED)],
    *[([send_start_event(m, False), "cts", "pushed"], DONE) for m in (STANDARD, SYNCHRONOUS, READY, BUFFERED)],
    # cancel
    (["rts", "cancel", "cancelled"], CANCELLED),
    (["rts", "cancel", "not_cancelled"], WAIT_ACK),
    (["rts", "cancel", "not_cancelled", "ack"], DONE),
    (["rts", "cancel", "not_cancelled", "cts", "pushed"], DONE),
    (["rts", "cancel", "not_cancelled", "cancel", "cancelled"], CANCELLED),
    (["rts", "cancel", "ack", "not_cancelled"], DONE),
    (["rts", "cancel", "cts", "not_cancelled"], PUSHING),
    (["rts", "cancel", "cts", "not_cancelled", "pushed"], DONE),
    (["eager_sync", "cancel", "cancelled"], CANCELLED),
    (["eager_sync", "cancel", "ack", "not_cancelled"], DONE),
    # failures
    (["rts", "fail"], FAILED),
    (["rts", "cts", "fail"], FAILED),
    (["rts", "cancel", "fail"], FAILED),
    (["rts", "cancel", "ack", "fail"], FAILED),
    (["rts", "cancel", "cts", "fail"], FAILED),
    (["fail"], FAILED),
]
RECV_PATHS = [
    (["eager"], DONE),
    (["rts_read"], DONE),
    (["rts_push", "data_last"], DONE),
    (["rts_push"], PULLING),
    (["cancel"], CANCELLED),
    (["fail"], FAILED),
    (["rts_push", "fail"], FAILED),
]


def run(table, state, events):
    for e in events:
        state = step(table, state, e)
    return state


@pytest.mark.parametrize("events,final", SEND_PATHS, ids=lambda x: "-".join(x) if isinstance(x, list) else str(x))
def test_send_paths(events, final):
    assert run(SEND, START, events) == final


@pytest.mark.parametrize("events,final", RECV_PATHS, ids=lambda x: "-".join(x) if isinstance(x, list) else str(x))
def test_recv_paths(events, final):
    assert run(RECV, POSTED, events) == final


def test_send_start_event():
    for mode in (STANDARD, READY, BUFFERED):
        assert send_start_event(mode, True) == "eager"
    assert send_start_event(SYNCHRONOUS, True) == "eager_sync"
    for mode in (STANDARD, SYNCHRONOUS, READY, BUFFERED):
        assert send_start_event(mode, False) == "rts"


@pytest.mark.parametrize(
    "table,doc,states",
    [(SEND, DOC_SEND, SEND_STATES), (RECV, DOC_RECV, RECV_STATES)],
    ids=["SEND", "RECV"],
)
def test_step_is_exactly_the_documented_machine(table, doc, states):
    """Every (state, event) pair: documented transition, fail->FAILED, or an error."""
    before = copy.deepcopy(table)
    for state, event in itertools.product(states, EVENTS):
        if (state, event) in doc:
            assert step(table, state, event) == doc[(state, event)], (state, event)
        elif event == "fail" and state not in FINAL_STATES:
            assert step(table, state, event) == FAILED, (state, event)
        else:
            var = state
            with pytest.raises(LocalProtocolError):
                var = step(table, var, event)
            assert var == state  # caller's state variable untouched
    assert table == before  # step never mutates the table


@pytest.mark.parametrize("table,states", [(SEND, SEND_STATES), (RECV, RECV_STATES)], ids=["SEND", "RECV"])
def test_fail(table, states):
    for s in states:
        if s in FINAL_STATES:
            with pytest.raises(LocalProtocolError):
                step(table, s, "fail")
        else:
            assert step(table, s, "fail") == FAILED


def test_final_set():
    assert P.FINAL == frozenset({DONE, CANCELLED, FAILED})
    # no transition leaves a final state
    for (s, _), _nxt in list(SEND.items()) + list(RECV.items()):
        assert s not in FINAL_STATES


def test_local_protocol_error_is_runtime_error():
    assert issubclass(LocalProtocolError, RuntimeError)
    with pytest.raises(RuntimeError, match="illegal"):
        step(SEND, DONE, "ack")


def test_states_distinct():
    allstates = SEND_STATES + [POSTED, PULLING]
    assert len(set(allstates)) == len(allstates)


def test_frame_kinds_and_flags():
    kinds = [EAGER, RTS, ACK, CTS, DATA, CANCEL, CREPLY]
    assert len(set(kinds)) == 7
    assert all(0 < k < 256 for k in kinds)  # fits the u8 kind field
    flags = [FLAG_SYNC, FLAG_CMA, FLAG_CANCELLED, FLAG_LAST]
    for f in flags:
        assert f > 0 and f & (f - 1) == 0  # single bit
    assert FLAG_SYNC | FLAG_CMA | FLAG_CANCELLED | FLAG_LAST == sum(flags)  # disjoint
    assert FLAG_SYNC | FLAG_CMA | FLAG_CANCELLED | FLAG_LAST < 256


def test_use_eager_boundary():
    assert use_eager(0, 0)
    assert use_eager(100, 100)
    assert not use_eager(101, 100)
    assert use_eager(99, 100)
    assert not use_eager(1, 0)


# --- chunks -----------------------------------------------------------------------------


def test_chunks_zero_bytes():
    # an empty pushed message still needs exactly one (empty, last) DATA frame
    assert list(chunks(0, 1024)) == [(0, 0, True)]


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 20000), c=st.integers(1, 5000))
def test_chunks_cover_exactly_once(n, c):
    pieces = list(chunks(n, c))
    expect_count = -(-n // c)  # ceil
    assert len(pieces) == expect_count
    pos = 0
    for i, (off, ln, last) in enumerate(pieces):
        assert off == pos
        assert 0 < ln <= c
        if i < len(pieces) - 1:
            assert ln == c  # only the final piece may be short
            assert last is False
        else:
            assert last is True
        pos += ln
    assert pos == n


def test_chunks_examples():
    assert list(chunks(10, 4)) == [(0, 4, False), (4, 4, False), (8, 2, True)]
    assert list(chunks(8, 4)) == [(0, 4, False), (4, 4, True)]
    assert list(chunks(3, 100)) == [(0, 3, True)]
    assert list(chunks(1, 1)) == [(0, 1, True)]


# --- header -----------------------------------------------------------------------------


def test_header_size():
    assert HLEN == HEADER.size == 32
    assert RTS_BODY.size == 8


@settings(max_examples=200, deadline=None)
@given(
    length=st.integers(0, 2**32 - 1),
    kind=st.sampled_from([EAGER, RTS, ACK, CTS, DATA, CANCEL, CREPLY]),
    flags=st.integers(0, 255),
    ctx=st.integers(-(2**31), 2**31 - 1),
    tag=st.integers(-(2**31), 2**31 - 1),
    nbytes=st.integers(0, 2**64 - 1),
    mid=st.integers(0, 2**64 - 1),
)
def test_header_round_trip_and_layout(length, kind, flags, ctx, tag, nbytes, mid):
    raw = HEADER.pack(length, kind, flags, 0, ctx, tag, nbytes, mid)
    assert len(raw) == 32
    assert HEADER.unpack(raw) == (length, kind, flags, 0, ctx, tag, nbytes, mid)
    # independent decoding of the documented little-endian layout
    le = lambda a, b, signed=False: int.from_bytes(raw[a:b], "little", signed=signed)  # noqa: E731
    assert le(0, 4) == length  # length first: the ring reads a u32 length at offset 0
    assert raw[4] == kind
    assert raw[5] == flags
    assert le(6, 8) == 0
    assert le(8, 12, True) == ctx
    assert le(12, 16, True) == tag
    assert le(16, 24) == nbytes
    assert le(24, 32) == mid


def test_header_unpack_from_offset():
    buf = bytearray(8) + HEADER.pack(40, RTS, FLAG_CMA, 0, 3, 7, 123, 9) + RTS_BODY.pack(0xDEADBEEF)
    assert HEADER.unpack_from(buf, 8) == (40, RTS, FLAG_CMA, 0, 3, 7, 123, 9)
    assert RTS_BODY.unpack_from(buf, 8 + HLEN) == (0xDEADBEEF,)
    assert struct.calcsize(HEADER.format) == 32
