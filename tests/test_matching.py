"""Tests for gpumpi._matching (sans-IO message matching).

The expectations come from MPI's matching rules (MPI-4 section 3.5, "Semantics of
point-to-point communication"): a receive (source, tag, context) accepts a message
whose envelope agrees on every field, with ANY_SOURCE / ANY_TAG as wildcards on the
receive side only; messages are non-overtaking; receives are satisfied in post
order.  A naive reference model (plain lists, written independently of the
implementation) is driven alongside the Matcher by a hypothesis state machine.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from gpumpi._matching import Matcher
from gpumpi.constants import ANY_SOURCE, ANY_TAG

assert ANY_SOURCE == -2 and ANY_TAG == -1


class Item:
    """Opaque, identity-compared item (the matcher must hand back *this* object)."""

    __slots__ = ("kind", "n", "src", "tag", "ctx", "seq")

    def __init__(self, kind, n, src, tag, ctx, seq=None):
        self.kind, self.n, self.src, self.tag, self.ctx, self.seq = kind, n, src, tag, ctx, seq

    def __repr__(self):
        return f"{self.kind}{self.n}(src={self.src},tag={self.tag},ctx={self.ctx})"

    # identity semantics only: two items never compare equal
    __eq__ = object.__eq__
    __hash__ = object.__hash__


def accepts(recv_src, recv_tag, msg_src, msg_tag) -> bool:
    """MPI's envelope rule: wildcards only on the receive side."""
    src_ok = recv_src == -2 or recv_src == msg_src
    tag_ok = recv_tag == -1 or recv_tag == msg_tag
    return src_ok and tag_ok


# --------------------------------------------------------------------------------------
# table tests
# --------------------------------------------------------------------------------------

WILDCARD_TABLE = [
    # (recv source, recv tag, msg source, msg tag, matches?)
    (1, 5, 1, 5, True),
    (1, 5, 2, 5, False),
    (1, 5, 1, 6, False),
    (ANY_SOURCE, 5, 3, 5, True),
    (ANY_SOURCE, 5, 3, 6, False),
    (1, ANY_TAG, 1, 99, True),
    (1, ANY_TAG, 2, 99, False),
    (ANY_SOURCE, ANY_TAG, 7, 0, True),
    (0, 0, 0, 0, True),
    (0, 0, 1, 0, False),
]


@pytest.mark.parametrize("rs,rt,ms,mt,match", WILDCARD_TABLE)
def test_wildcards_recv_first(rs, rt, ms, mt, match):
    m = Matcher()
    r = object()
    msg = object()
    assert m.post_recv(0, rs, rt, r) is None
    got = m.arrive(0, ms, mt, msg)
    if match:
        assert got is r
        assert m.pending(0) == (0, 0)
    else:
        assert got is None
        assert m.pending(0) == (1, 1)


@pytest.mark.parametrize("rs,rt,ms,mt,match", WILDCARD_TABLE)
def test_wildcards_message_first(rs, rt, ms, mt, match):
    m = Matcher()
    r = object()
    msg = object()
    assert m.arrive(0, ms, mt, msg) is None
    assert m.probe(0, rs, rt) is (msg if match else None)
    got = m.post_recv(0, rs, rt, r)
    if match:
        assert got is msg
        assert m.pending(0) == (0, 0)
    else:
        assert got is None
        assert m.pending(0) == (1, 1)


@pytest.mark.parametrize("rs,rt,ms,mt,match", WILDCARD_TABLE)
def test_wildcards_take(rs, rt, ms, mt, match):
    m = Matcher()
    msg = object()
    m.arrive(0, ms, mt, msg)
    assert m.take(0, rs, rt) is (msg if match else None)
    assert m.pending(0) == (0, 0 if match else 1)


def test_contexts_are_separate():
    m = Matcher()
    assert m.arrive(0, 1, 1, "m0") is None
    # a fully wildcarded receive on another context does not see it
    assert m.post_recv(1, ANY_SOURCE, ANY_TAG, "r1") is None
    assert m.probe(1, ANY_SOURCE, ANY_TAG) is None
    assert m.take(1, ANY_SOURCE, ANY_TAG) is None
    assert m.pending(0) == (0, 1)
    assert m.pending(1) == (1, 0)
    # a message on ctx 1 goes to the receive on ctx 1, not stuck behind ctx 0
    assert m.arrive(1, 1, 1, "m1") == "r1"
    assert m.post_recv(0, 1, 1, "r0") == "m0"
    assert m.pending(0) == (0, 0) and m.pending(1) == (0, 0)


def test_pending_unknown_context():
    m = Matcher()
    assert m.pending(42) == (0, 0)
    assert m.probe(42, ANY_SOURCE, ANY_TAG) is None
    assert m.take(42, ANY_SOURCE, ANY_TAG) is None
    assert m.cancel_recv(42, object()) is False
    assert m.withdraw(42, object()) is False
    assert list(m.posted_items()) == []


def test_fifo_unexpected_messages_same_source():
    m = Matcher()
    for i in range(5):
        m.arrive(0, 2, 7, f"m{i}")
    assert [m.post_recv(0, 2, 7, f"r{i}") for i in range(5)] == [f"m{i}" for i in range(5)]


def test_fifo_posted_receives():
    m = Matcher()
    for i in range(5):
        assert m.post_recv(0, ANY_SOURCE, ANY_TAG, f"r{i}") is None
    assert [m.arrive(0, i % 3, i, f"m{i}") for i in range(5)] == [f"r{i}" for i in range(5)]


def test_earliest_posted_compatible_receive_wins():
    m = Matcher()
    m.post_recv(0, 1, 9, "r_specific_other_tag")
    m.post_recv(0, ANY_SOURCE, 5, "r_any_src")
    m.post_recv(0, 1, 5, "r_exact")
    assert m.arrive(0, 1, 5, "m") == "r_any_src"
    assert m.arrive(0, 1, 5, "m2") == "r_exact"
    assert m.arrive(0, 1, 9, "m3") == "r_specific_other_tag"


def test_receive_skips_incompatible_messages_and_keeps_their_order():
    m = Matcher()
    m.arrive(0, 0, 1, "a")
    m.arrive(0, 1, 2, "b")
    m.arrive(0, 0, 2, "c")
    m.arrive(0, 1, 1, "d")
    assert m.post_recv(0, ANY_SOURCE, 2, "r") == "b"
    assert m.post_recv(0, 0, ANY_TAG, "r") == "a"
    assert m.probe(0, ANY_SOURCE, ANY_TAG) == "c"
    assert m.take(0, 1, ANY_TAG) == "d"
    assert m.take(0, ANY_SOURCE, ANY_TAG) == "c"
    assert m.pending(0) == (0, 0)


def test_probe_does_not_remove_and_take_does():
    m = Matcher()
    m.arrive(3, 1, 1, "x")
    assert m.probe(3, 1, 1) == "x"
    assert m.probe(3, 1, 1) == "x"
    assert m.pending(3) == (0, 1)
    assert m.take(3, 1, 1) == "x"
    assert m.take(3, 1, 1) is None
    assert m.probe(3, 1, 1) is None


def test_cancel_recv():
    m = Matcher()
    r1, r2 = Item("r", 1, 0, 0, 0), Item("r", 2, 0, 0, 0)
    m.post_recv(0, 0, 0, r1)
    m.post_recv(0, 0, 0, r2)
    assert m.cancel_recv(0, r1) is True
    assert m.cancel_recv(0, r1) is False  # already gone
    assert m.cancel_recv(1, r2) is False  # wrong context
    assert m.arrive(0, 0, 0, "m") is r2
    assert m.cancel_recv(0, r2) is False  # already matched


def test_cancel_uses_identity_not_equality():
    m = Matcher()
    a, b = [1], [1]  # equal, distinct
    m.post_recv(0, 0, 0, a)
    m.post_recv(0, 0, 0, b)
    assert m.cancel_recv(0, b) is True
    assert m.arrive(0, 0, 0, "m") is a


def test_withdraw():
    m = Matcher()
    x, y = Item("m", 1, 0, 0, 0), Item("m", 2, 0, 0, 0)
    m.arrive(0, 0, 0, x)
    m.arrive(0, 0, 0, y)
    assert m.withdraw(0, x) is True
    assert m.withdraw(0, x) is False
    assert m.withdraw(1, y) is False
    assert m.post_recv(0, 0, 0, "r") is y
    assert m.withdraw(0, y) is False  # already matched


def test_posted_items_all_contexts():
    m = Matcher()
    m.post_recv(0, 1, 0, "a")
    m.post_recv(5, ANY_SOURCE, 0, "b")
    m.post_recv(5, 2, ANY_TAG, "c")
    m.arrive(0, 9, 9, "unexp")  # not a posted receive
    assert sorted(m.posted_items()) == sorted([(1, "a"), (ANY_SOURCE, "b"), (2, "c")])


def test_drop_context():
    m = Matcher()
    m.post_recv(0, 1, 0, "a")
    m.arrive(0, 2, 0, "x")
    m.post_recv(1, 1, 0, "b")
    m.drop_context(0)
    assert m.pending(0) == (0, 0)
    assert m.pending(1) == (1, 0)
    assert [it for _, it in m.posted_items()] == ["b"]
    m.drop_context(0)  # idempotent
    m.drop_context(77)
    # the context can be reused afresh
    assert m.arrive(0, 1, 0, "y") is None
    assert m.post_recv(0, 1, 0, "r") == "y"


def test_nonovertaking_with_wildcard_tag():
    # Two messages from the same source: the ANY_TAG receive must get the first one,
    # even though the second one also matches a later specific receive.
    m = Matcher()
    m.arrive(0, 4, 1, "first")
    m.arrive(0, 4, 2, "second")
    assert m.post_recv(0, 4, ANY_TAG, "r") == "first"
    assert m.post_recv(0, 4, ANY_TAG, "r") == "second"


# --------------------------------------------------------------------------------------
# stateful model
# --------------------------------------------------------------------------------------

SOURCES = st.integers(0, 3)
TAGS = st.integers(0, 2)
CTXS = st.integers(0, 1)
RSOURCES = st.one_of(st.just(ANY_SOURCE), SOURCES)
RTAGS = st.one_of(st.just(ANY_TAG), TAGS)


class MatchingMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.m = Matcher()
        # reference model: per ctx, plain lists in order
        self.posted = {0: [], 1: []}  # list of Item (kind "r"), src/tag are the pattern
        self.unexp = {0: [], 1: []}  # list of Item (kind "m")
        self.counter = 0
        self.send_seq = {}  # (src, ctx) -> next sequence number
        self.returned = set()  # ids of every item the matcher handed back
        self.matched_msgs = set()  # ids of messages consumed (recv/take)
        self.matched_recvs = set()
        self.pairs = []  # (recv Item or None for take, msg Item)
        self.gone = set()  # cancelled receives / withdrawn messages

    def _new(self, kind, src, tag, ctx, seq=None):
        self.counter += 1
        return Item(kind, self.counter, src, tag, ctx, seq)

    def _record_return(self, it):
        assert it.n not in self.returned, f"{it} returned twice"
        self.returned.add(it.n)

    # --- reference helpers ---------------------------------------------------------
    def _ref_first_msg(self, ctx, src, tag):
        for i, msg in enumerate(self.unexp[ctx]):
            if accepts(src, tag, msg.src, msg.tag):
                return i
        return None

    def _ref_first_recv(self, ctx, src, tag):
        for i, r in enumerate(self.posted[ctx]):
            if accepts(r.src, r.tag, src, tag):
                return i
        return None

    def _check_pair(self, recv_pattern, msg):
        """Non-overtaking: no earlier-sent message from msg's (src, ctx) that this receive
        pattern accepts is still waiting (not matched, not withdrawn)."""
        rs, rt = recv_pattern
        for other in self.unexp[msg.ctx]:
            if other.src == msg.src and other.seq < msg.seq and accepts(rs, rt, other.src, other.tag):
                raise AssertionError(f"{msg} overtook {other} for receive ({rs},{rt})")

    # --- rules ---------------------------------------------------------------------
    @rule(src=SOURCES, tag=TAGS, ctx=CTXS)
    def send(self, src, tag, ctx):
        seq = self.send_seq.get((src, ctx), 0)
        self.send_seq[(src, ctx)] = seq + 1
        msg = self._new("m", src, tag, ctx, seq)
        got = self.m.arrive(ctx, src, tag, msg)
        i = self._ref_first_recv(ctx, src, tag)
        if i is None:
            assert got is None
            self.unexp[ctx].append(msg)
        else:
            expect = self.posted[ctx][i]
            assert got is expect, f"message {msg} went to {got}, expected {expect}"
            # no earlier-posted receive that accepts this message is still pending
            for r in self.posted[ctx][:i]:
                assert not accepts(r.src, r.tag, src, tag)
            del self.posted[ctx][i]
            self._record_return(got)
            self.matched_recvs.add(got.n)
            self.matched_msgs.add(msg.n)
            self.pairs.append((got, msg))

    @rule(src=SOURCES, tag=TAGS, ctx=CTXS, k=st.integers(2, 3))
    def send_burst(self, src, tag, ctx, k):
        # several messages with one envelope in a row (exercises same-envelope FIFO)
        for _ in range(k):
            self.send(src, tag, ctx)

    @rule(src=RSOURCES, tag=RTAGS, ctx=CTXS)
    def recv(self, src, tag, ctx):
        r = self._new("r", src, tag, ctx)
        got = self.m.post_recv(ctx, src, tag, r)
        i = self._ref_first_msg(ctx, src, tag)
        if i is None:
            assert got is None
            self.posted[ctx].append(r)
        else:
            expect = self.unexp[ctx][i]
            assert got is expect, f"receive {r} got {got}, expected {expect}"
            assert accepts(src, tag, got.src, got.tag) and got.ctx == ctx
            del self.unexp[ctx][i]
            self._check_pair((src, tag), got)
            self._record_return(got)
            assert got.n not in self.matched_msgs
            self.matched_msgs.add(got.n)
            self.matched_recvs.add(r.n)
            self.pairs.append((r, got))

    @rule(src=RSOURCES, tag=RTAGS, ctx=CTXS)
    def probe(self, src, tag, ctx):
        got = self.m.probe(ctx, src, tag)
        i = self._ref_first_msg(ctx, src, tag)
        assert got is (None if i is None else self.unexp[ctx][i])

    @rule(src=RSOURCES, tag=RTAGS, ctx=CTXS)
    def take(self, src, tag, ctx):
        got = self.m.take(ctx, src, tag)
        i = self._ref_first_msg(ctx, src, tag)
        if i is None:
            assert got is None
            return
        expect = self.unexp[ctx][i]
        assert got is expect
        del self.unexp[ctx][i]
        self._check_pair((src, tag), got)
        self._record_return(got)
        self.matched_msgs.add(got.n)
        self.pairs.append((None, got))

    @precondition(lambda self: self.posted[0] or self.posted[1])
    @rule(data=st.data())
    def cancel(self, data):
        choices = [(c, r) for c in (0, 1) for r in self.posted[c]]
        ctx, r = data.draw(st.sampled_from(choices))
        assert self.m.cancel_recv(ctx, r) is True
        self.posted[ctx].remove(r)
        self.gone.add(r.n)
        # a second cancel, and a cancel on the other context, find nothing
        assert self.m.cancel_recv(ctx, r) is False
        assert self.m.cancel_recv(1 - ctx, r) is False

    @precondition(lambda self: self.unexp[0] or self.unexp[1])
    @rule(data=st.data())
    def withdraw(self, data):
        choices = [(c, x) for c in (0, 1) for x in self.unexp[c]]
        ctx, x = data.draw(st.sampled_from(choices))
        assert self.m.withdraw(ctx, x) is True
        self.unexp[ctx].remove(x)
        self.gone.add(x.n)
        assert self.m.withdraw(ctx, x) is False

    # --- invariants ----------------------------------------------------------------
    @invariant()
    def queues_agree(self):
        for c in (0, 1):
            assert self.m.pending(c) == (len(self.posted[c]), len(self.unexp[c]))
        got = sorted((s, it.n) for s, it in self.m.posted_items())
        want = sorted((r.src, r.n) for c in (0, 1) for r in self.posted[c])
        assert got == want

    @invariant()
    def quiescent(self):
        # no posted receive is compatible with any unexpected message on the same ctx
        for c in (0, 1):
            for r in self.posted[c]:
                for x in self.unexp[c]:
                    assert not accepts(r.src, r.tag, x.src, x.tag), (r, x)
        # and the matcher agrees: every posted pattern probes to nothing
        for c in (0, 1):
            for r in self.posted[c]:
                assert self.m.probe(c, r.src, r.tag) is None

    @invariant()
    def matched_items_cannot_be_cancelled(self):
        # a receive that already matched cannot be cancelled; a message that already
        # matched cannot be withdrawn (check the most recent few pairs)
        for r, x in self.pairs[-3:]:
            if r is not None:
                assert self.m.cancel_recv(r.ctx, r) is False
            assert self.m.withdraw(x.ctx, x) is False

    @invariant()
    def pairs_are_consistent(self):
        seen_msgs, seen_recvs = set(), set()
        for r, x in self.pairs:
            assert x.n not in seen_msgs, f"{x} matched twice"
            seen_msgs.add(x.n)
            assert x.n not in self.gone
            if r is not None:
                assert r.n not in seen_recvs, f"{r} completed twice"
                seen_recvs.add(r.n)
                assert r.n not in self.gone
                assert r.ctx == x.ctx
                assert accepts(r.src, r.tag, x.src, x.tag)

    @invariant()
    def per_source_order(self):
        # among matched messages from one (src, ctx), a receive pattern that accepts two
        # of them never got the later one while the earlier one was still unexpected:
        # checked at match time (_check_pair); here: for receives with an exact source and
        # tag, matched sequence numbers increase in match order.
        last = {}
        for r, x in self.pairs:
            key = (x.ctx, x.src, x.tag)
            if key in last:
                assert x.seq > last[key], f"{x} matched after a later message of the same envelope"
            last[key] = x.seq


MatchingMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMatchingStateful = MatchingMachine.TestCase
