"""Operations in flight (L5): the records the progress engine and the request API share.

Theory of operation
===================
An :class:`Xfer` is one operation in flight (a send, a receive or a generalized request):
its envelope, buffers, state in :mod:`gpumpi._protocol`'s machine, and, once done, its
status.  An :class:`Arrival` is an incoming message the matcher holds.  :data:`SENT` is
the completed send every standard eager send returns, :class:`Got` what a receive the
compiled path completed gives.  The compiled path's result codes and the marks of
operations in special states live here too, so the engine's modules share one definition.
"""

from __future__ import annotations

import _thread

from . import _protocol as P
from .constants import ANY_SOURCE
from .errors import ERR_OTHER, SUCCESS, error

__all__ = ["Arrival", "EMPTY", "FREED", "GOT", "GREQ", "Got", "OTHER", "PENDING", "RECV", "RECV_DIRECT", "SEND", "SENT",
           "SEND_PUSHED", "SLOTTED", "SPIN", "SPIN_OVERSUBSCRIBED", "UNSET", "Xfer", "mpi_failed", "threads"]

#: threads started from Python besides the main one (0: this is the only one)
threads = _thread._count

#: compiled fast path (gpumpi.ipc.fastring): spin rounds of a blocking receive's first wait,
#: and of each later one (between them the wait backs off as ``Engine.wait`` does); about 26 us
#: and 1.7 us on the 2-core machine.  With more ranks on the node than cores this rank may run
#: on, the peer that would answer may be waiting for this very core: spin briefly, then yield.
SPIN = (1024, 64)
SPIN_OVERSUBSCRIBED = (32, 16)
EMPTY, GOT, OTHER = 0, 1, 2  # fastring's results
PENDING = 4  # fastmpi's: a pushed message's data request still going

SEND, RECV, GREQ = 0, 1, 2


def mpi_failed(what: str):
    """The error of an MPI call of the compiled path between nodes that returned an error
    code (the MPI library failed; nothing of the operation was done)."""
    return error(ERR_OTHER, f"gpumpi: {what} failed in the MPI library (the compiled path between nodes)")



class Xfer:
    """One operation in flight (a send, a receive or a generalized request)."""

    __slots__ = (
        "kind", "state", "done", "peer", "src", "tag", "ctx", "msgid", "mode",
        "mem", "addr", "cap", "bufs", "nbytes", "got",
        "st_source", "st_tag", "st_nbytes", "err", "errmsg", "cancelled",
        "on_done", "dynamic", "result", "push_iter", "push_next", "arrival", "wpeer", "call", "segs", "sig", "dev", "ondev",
        "region",  # rendezvous: the region transport that offered (sender) or takes (receiver) the data
        "cancel_fn",  # joint operations only (left unset elsewhere): what MPI_Cancel does to them
        "msig",  # receive: the signature code of the message it matched (0: untyped)
        "nosplit",  # receive: never split the copy with the sender (it is busy: a collective exchange)
        "want",  # send: bytes the receiver asked for through a direct region (-1: push through frames)
        "pend",  # a direct region's transfer in progress (its ``test()`` says when this side is done)
    )

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.state = P.START if kind == SEND else P.POSTED
        self.done = False
        self.err = SUCCESS
        self.errmsg = None
        self.cancelled = False
        self.on_done = None
        self.dynamic = False
        self.addr = None
        self.result = None
        self.st_source = ANY_SOURCE
        self.st_tag = -1
        self.st_nbytes = 0
        self.arrival = None
        self.push_iter = None
        self.push_next = None
        self.sig = self.msig = 0
        # device messages: (adapter, address, event or None): a receive's destination and the
        # event its writes wait for (the consumer's pending work); a send's source and the event
        # its reads wait for (the producer's work)
        self.dev = None
        self.ondev = False  # receive: the data was written into the device destination itself
        self.nosplit = False
        self.want = -1
        self.pend = None


class Arrival:
    """An incoming message (envelope, and its eager payload or its sender's region offer)."""

    __slots__ = ("peer", "src", "ctx", "tag", "kind", "flags", "nbytes", "msgid", "data", "segs", "sig")

    def __init__(self, peer, src, ctx, tag, kind, flags, nbytes, msgid, sig=0):
        self.peer, self.src, self.ctx, self.tag = peer, src, ctx, tag
        self.kind, self.flags, self.nbytes, self.msgid = kind, flags, nbytes, msgid
        self.data = None
        self.segs = None
        self.sig = sig


class Got:
    """A receive the compiled fast path completed (what :meth:`Engine.recv` callers read of an Xfer)."""

    __slots__ = ("st_source", "st_tag", "st_nbytes", "msig")
    done = True
    err = SUCCESS
    errmsg = None
    cancelled = False

    def __init__(self, source: int, tag: int, nbytes: int, msig: int) -> None:
        self.st_source, self.st_tag, self.st_nbytes, self.msig = source, tag, nbytes, msig


UNSET = object()


class Slotted:
    """The ``pend`` of an operation whose data message is in a slot of ``Engine.mslots``:
    tested with the others there (``DataSlots.done``), never alone."""

    @staticmethod
    def test() -> bool:
        return False


SLOTTED = Slotted()
SEND_PUSHED = P.step(P.SEND, P.START, "rts_pushed")
RECV_DIRECT = P.step(P.RECV, P.POSTED, P.DIRECT)

#: The completed send every standard eager send returns (it needs no state of its own).
#: the context ids of this process's freed communicators (a stale copy of a freed handle fails):
#: one set for the process's life, which the engine empties when it is made and fills as
#: communicators are freed; API modules test membership (``ctx in FREED``) without a call
FREED: set = set()

SENT = Xfer(SEND)
SENT.done = True
SENT.state = P.DONE
