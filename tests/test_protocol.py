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
    FLAG_OFFER,
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
    SEND,
    STANDARD,
    START,
    SYNCHRONOUS,
    WAIT_ACK,
    PUSH,
    READ,
    SPLIT,
    LocalProtocolError,
    cancel_plan,
    pieces,
    rts_plan,
    send_plan,
    split_head,
    step,
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
    ([send_plan(8, 100, STANDARD)], DONE),
    ([send_plan(8, 100, READY)], DONE),
    ([send_plan(8, 100, BUFFERED)], DONE),
    # eager synchronous
    ([send_plan(8, 100, SYNCHRONOUS), "ack"], DONE),
    # rendezvous, any mode
    *[([send_plan(101, 100, m), "ack"], DONE) for m in (STANDARD, SYNCHRONOUS, READY, BUFFERED)],
    *[([send_plan(101, 100, m), "cts", "pushed"], DONE) for m in (STANDARD, SYNCHRONOUS, READY, BUFFERED)],
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


def test_send_plan():
    for mode in (STANDARD, READY, BUFFERED):
        assert send_plan(100, 100, mode) == "eager"
    assert send_plan(100, 100, SYNCHRONOUS) == "eager_sync"
    for mode in (STANDARD, SYNCHRONOUS, READY, BUFFERED):
        assert send_plan(101, 100, mode) == "rts"


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
    flags = [FLAG_SYNC, FLAG_OFFER, FLAG_CANCELLED, FLAG_LAST]
    for f in flags:
        assert f > 0 and f & (f - 1) == 0  # single bit
    assert FLAG_SYNC | FLAG_OFFER | FLAG_CANCELLED | FLAG_LAST == sum(flags)  # disjoint
    assert FLAG_SYNC | FLAG_OFFER | FLAG_CANCELLED | FLAG_LAST < 256


def test_send_plan_boundary():
    assert send_plan(0, 0, STANDARD) == "eager"
    assert send_plan(100, 100, STANDARD) == "eager"
    assert send_plan(101, 100, STANDARD) == "rts"
    assert send_plan(99, 100, STANDARD) == "eager"
    assert send_plan(1, 0, STANDARD) == "rts"


# --- rendezvous and cancel decisions ------------------------------------------------------


@pytest.mark.parametrize("offered", [False, True])
@pytest.mark.parametrize("takeable", [False, True])
@pytest.mark.parametrize("writable", [False, True])
@pytest.mark.parametrize("nbytes,split_min", [(10, 0), (10, 100), (100, 100), (1 << 20, 1 << 19)])
def test_rts_plan(offered, takeable, writable, nbytes, split_min):
    plan = rts_plan(offered, takeable, writable, nbytes, split_min)
    # MPI's rule restated: the data is pushed unless a region was offered and can be read here;
    # both sides copy only where the transport writes too and the message is worth two cores
    if not (offered and takeable):
        assert plan == PUSH
    elif writable and split_min and nbytes >= split_min:
        assert plan == SPLIT
    else:
        assert plan == READ
    assert plan in {e for (_, e) in RECV}  # every plan is an event of the receive machine


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 1 << 30))
def test_split_head_is_page_aligned_and_at_most_half(n):
    h = split_head(n)
    assert h % 4096 == 0 and 0 <= h <= n // 2 and n // 2 - h < 4096


def test_cancel_plan():
    assert cancel_plan(True, WAIT_ACK) == "ask"
    for st_ in (START, PUSHING, DONE, CANCELLING, CANCELLED, FAILED):
        assert cancel_plan(True, st_) == "none"
    assert cancel_plan(False, POSTED) == "withdraw"
    for st_ in (PULLING, DONE, CANCELLED, FAILED):
        assert cancel_plan(False, st_) == "none"
    # the transitions the plans lead to exist in the tables
    assert step(SEND, WAIT_ACK, "cancel") == CANCELLING and step(RECV, POSTED, "cancel") == CANCELLED


# --- pieces of a pushed message ------------------------------------------------------------


def test_pieces_of_nothing():
    # an empty buffer gives no piece: the engine sends one empty, last DATA frame by itself
    assert list(pieces([0], 1024)) == [] and list(pieces([], 8)) == []


@settings(max_examples=300, deadline=None)
@given(ns=st.lists(st.integers(0, 20000), min_size=1, max_size=4), c=st.integers(1, 5000))
def test_pieces_cover_every_buffer_exactly_once(ns, c):
    got = list(pieces(ns, c))
    assert len(got) == sum(-(-n // c) for n in ns)  # ceil per buffer
    for i, n in enumerate(ns):
        mine = [(off, ln) for j, off, ln in got if j == i]
        pos = 0
        for k, (off, ln) in enumerate(mine):
            assert off == pos and 0 < ln <= c
            if k < len(mine) - 1:
                assert ln == c  # only a buffer's final piece may be short
            pos += ln
        assert pos == n
    assert [j for j, _, _ in got] == sorted(j for j, _, _ in got)  # buffers in order


def test_pieces_examples():
    assert list(pieces([10], 4)) == [(0, 0, 4), (0, 4, 4), (0, 8, 2)]
    assert list(pieces([8, 0, 3], 4)) == [(0, 0, 4), (0, 4, 4), (2, 0, 3)]
    assert list(pieces([1], 1)) == [(0, 0, 1)]


# --- header -----------------------------------------------------------------------------


def test_header_size():
    assert HLEN == HEADER.size == 32


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
    buf = bytearray(8) + HEADER.pack(40, RTS, FLAG_OFFER, 0, 3, 7, 123, 9) + struct.pack("<Q", 0xDEADBEEF)
    assert HEADER.unpack_from(buf, 8) == (40, RTS, FLAG_OFFER, 0, 3, 7, 123, 9)
    assert struct.unpack_from("<Q", buf, 8 + HLEN) == (0xDEADBEEF,)
    assert struct.calcsize(HEADER.format) == 32


# --- the one receive check and the eager limits ----------------------------------------------------


def test_receive_error_point_to_point():
    from gpumpi.errors import ERR_TRUNCATE, ERR_TYPE

    assert P.receive_error("Recv", 1, 8, 8, 5, 5, True) is None
    assert P.receive_error("Recv", 1, 4, 8, 5, 5, True) is None  # shorter than the buffer: fine (MPI)
    assert P.receive_error("Recv", 1, 16, 8, 0, 5, True) == (ERR_TRUNCATE, "Recv: message truncated (16 bytes, buffer 8)")
    code, msg = P.receive_error("Recv", 3, 16, 8, 5, 6, True)  # both wrong: the type decides
    assert code == ERR_TYPE and msg.startswith("Recv: type signature mismatch (message of 16 bytes of ")
    assert "from rank 3" in msg
    assert P.receive_error("Recv", 3, 8, 8, 5, 6, False) is None  # type checks off
    assert P.receive_error("Recv", 3, 0, 8, 5, 6, True) is None  # an empty message has no type to check
    assert P.receive_error("Recv", 3, 8, 8, 0, 6, True) is None  # an untyped message


def test_receive_error_collective_expects_exactly():
    from gpumpi.errors import ERR_COUNT, ERR_TYPE

    assert P.receive_error("Bcast", 2, 8, 8, 5, 5, True, exact=True) is None
    assert P.receive_error("Bcast", 2, 4, 8, 5, 6, True, exact=True) == (
        ERR_COUNT, "Bcast: rank 2 sent 4 bytes, this rank expects 8")  # the count first
    code, msg = P.receive_error("Bcast", 2, 8, 8, 5, 6, True, exact=True)
    assert code == ERR_TYPE and msg.startswith("Bcast: type signature mismatch (rank 2 sent 8 bytes of ")


def test_eager_limits():
    # default: 64 KiB, or a quarter of a ring's two frames' room when that is smaller
    assert P.eager_limits(0, 1 << 20, 16384, False) == (65536, 65536)
    assert P.eager_limits(0, 65536, 16384, False) == (32768, 32768)
    assert P.eager_limits(4096, 1 << 20, 16384, False) == (4096, 4096)
    assert P.eager_limits(1 << 30, 1 << 20, 16384, False) == ((1 << 20) - 64, (1 << 20) - 64)  # a frame's room
    assert P.eager_limits(0, 1 << 20, 16384, True) == (65536, 16384)  # other nodes: GPUMPI_MPI_EAGER
    assert P.eager_limits(1024, 1 << 20, 16384, True) == (1024, 1024)
