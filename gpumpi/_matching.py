"""Sans-IO message matching (L1, pure).

Theory of operation
===================
MPI matches a receive to a message by (source, tag, context), with ``ANY_SOURCE``
and ``ANY_TAG`` as wildcards, and promises non-overtaking: two messages from the
same source on the same context are matched in the order they were sent, and two
receives are satisfied in the order they were posted.

Each context has two FIFO queues:

* ``posted``: receives waiting for a message, in post order;
* ``unexpected``: messages (envelopes) that arrived with no matching receive,
  in arrival order.

Transports deliver each source's messages in send order, so scanning these queues
front to back is exactly MPI's rule: a new message takes the *first* posted
receive that accepts it; a new receive takes the *first* unexpected message it
accepts.  Queues are lists scanned from the front; a short scan is the common
case because matching receives are usually at the head.

Items are opaque to this module: ``Matcher`` stores ``(source, tag, item)`` and
hands items back.  Truncation is not decided here (the caller compares sizes when
a match is returned), and this module never reads a clock or the environment.
"""

from __future__ import annotations

from .constants import ANY_SOURCE, ANY_TAG


class _Queues:
    __slots__ = ("posted", "unexpected")

    def __init__(self) -> None:
        self.posted: list = []  # [source, tag, item]
        self.unexpected: list = []  # [source, tag, item]


class Matcher:
    """Posted-receive and unexpected-message queues for every context of one process."""

    __slots__ = ("_ctx",)

    def __init__(self) -> None:
        self._ctx: dict[int, _Queues] = {}

    def _q(self, ctx: int) -> _Queues:
        q = self._ctx.get(ctx)
        if q is None:
            q = self._ctx[ctx] = _Queues()
        return q

    # --- receive side -------------------------------------------------------------------
    def post_recv(self, ctx: int, source: int, tag: int, item):
        """Post a receive.  Returns the matched unexpected item (removed), or None (queued)."""
        q = self._q(ctx)
        unexp = q.unexpected
        if unexp:
            i = _find_msg(unexp, source, tag)
            if i >= 0:
                return unexp.pop(i)[2]
        q.posted.append((source, tag, item))
        return None

    def probe(self, ctx: int, source: int, tag: int):
        """First unexpected item a receive (source, tag) would match, not removed; or None."""
        q = self._ctx.get(ctx)
        if q is None or not q.unexpected:
            return None
        i = _find_msg(q.unexpected, source, tag)
        return q.unexpected[i][2] if i >= 0 else None

    def take(self, ctx: int, source: int, tag: int):
        """Remove and return the first unexpected item matching (source, tag) (matched probe)."""
        q = self._ctx.get(ctx)
        if q is None or not q.unexpected:
            return None
        i = _find_msg(q.unexpected, source, tag)
        return q.unexpected.pop(i)[2] if i >= 0 else None

    def cancel_recv(self, ctx: int, item) -> bool:
        """Remove a posted receive; False when it has already matched."""
        q = self._ctx.get(ctx)
        if q is None:
            return False
        for i, e in enumerate(q.posted):
            if e[2] is item:
                del q.posted[i]
                return True
        return False

    # --- message side -------------------------------------------------------------------
    def arrive(self, ctx: int, source: int, tag: int, item):
        """A message arrived.  Returns the matched posted receive (removed), or None (queued)."""
        x = self.match_posted(ctx, source, tag)
        if x is None:
            self.add_unexpected(ctx, source, tag, item)
        return x

    def match_posted(self, ctx: int, source: int, tag: int):
        """First posted receive that accepts a message (source, tag), removed; or None.

        With :meth:`add_unexpected` this splits :meth:`arrive` so a caller can build
        the message's record only when it has to wait in the unexpected queue.
        """
        q = self._ctx.get(ctx)
        if q is None:
            return None
        posted = q.posted
        for i, e in enumerate(posted):
            s = e[0]
            if (s == source or s == ANY_SOURCE) and (e[1] == tag or e[1] == ANY_TAG):
                del posted[i]
                return e[2]
        return None

    def add_unexpected(self, ctx: int, source: int, tag: int, item) -> None:
        """Queue a message no posted receive accepted (after :meth:`match_posted` said None)."""
        self._q(ctx).unexpected.append((source, tag, item))

    def withdraw(self, ctx: int, item) -> bool:
        """Remove an unexpected message (its sender cancelled it); False if already matched."""
        q = self._ctx.get(ctx)
        if q is None:
            return False
        for i, e in enumerate(q.unexpected):
            if e[2] is item:
                del q.unexpected[i]
                return True
        return False

    # --- queries ------------------------------------------------------------------------
    def pending(self, ctx: int) -> tuple[int, int]:
        """(posted receives, unexpected messages) waiting on ``ctx``."""
        q = self._ctx.get(ctx)
        return (0, 0) if q is None else (len(q.posted), len(q.unexpected))

    def posted_items(self):
        """Every posted receive item, all contexts (to fail them when a peer dies)."""
        for q in self._ctx.values():
            for e in q.posted:
                yield e[0], e[2]

    def drop_context(self, ctx: int) -> None:
        """Forget a freed communicator's queues."""
        self._ctx.pop(ctx, None)


def _find_msg(unexp: list, source: int, tag: int) -> int:
    if source == ANY_SOURCE:
        if tag == ANY_TAG:
            return 0
        for i, e in enumerate(unexp):
            if e[1] == tag:
                return i
        return -1
    if tag == ANY_TAG:
        for i, e in enumerate(unexp):
            if e[0] == source:
                return i
        return -1
    for i, e in enumerate(unexp):
        if e[0] == source and e[1] == tag:
            return i
    return -1
