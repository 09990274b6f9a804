"""Sans-IO point-to-point protocols: frame kinds and per-message state machines (L1, pure).

Theory of operation
===================
Rule 1: every decision about when bytes may move lives here (and in
``_matching``); the progress engine only carries out the transitions and plans
returned.  Rule 2: this module knows nothing about memory kinds, transports or clocks:
a transport is an opaque byte in an offer, and what it can do arrives as booleans.

Decisions (pure functions the engine calls):

* :func:`send_plan` -- a send's protocol: eager (the payload in the frame) or a
  request-to-send, synchronous or not;
* :func:`rts_plan` -- a matched request-to-send: the receiver *reads* the offered
  region, *splits* the copy with the sender (each copies half, ``split_head`` bytes
  first), or asks the sender to *push* the data (CTS), when nothing was offered or the
  offer cannot be taken here;
* :func:`pieces` -- how pushed data is cut into DATA frames;
* :func:`cancel_plan` -- what ``MPI_Cancel`` does to an operation in a given state.

A message travels in *frames* on the per-pair control ring.  Kinds:

======== ==================================================================
EAGER    envelope + the whole payload (``nbytes <= eager limit``)
RTS      request-to-send: envelope + where the sender's data lives
ACK      receiver -> sender: message matched and (for RTS) data taken
CTS      receiver -> sender: matched, but cannot read the sender's memory:
         push the data through the ring
DATA     sender -> receiver: the next chunk of a pushed message
CANCEL   sender -> receiver: withdraw an unmatched message
CREPLY   receiver -> sender: result of CANCEL (flag CANCELLED or not)
WRT      receiver -> sender: matched a large message; write its tail
         (from a byte offset) straight into the receiver's buffer while the
         receiver reads the head: two cores copy at once
WDONE    sender -> receiver: the tail is written (flag FAILED: it is not;
         the receiver reads it itself)
STATE    a rank's finalize state word (``nbytes``), for peers that share no job
         segment with it (other nodes): handled by the frame transport itself
======== ==================================================================

A *direct* region (capability ``DIRECT``: the ``mpi`` transport between nodes) moves
data two-sided: the receiver posts its receive into the destination, then answers CTS
with ``FLAG_DIRECT`` and the byte count it takes; the sender then sends that many bytes
through the region and completes when they are gone, the receiver when they arrived.
A sender may instead *push ahead* through a direct region (RTS with ``FLAG_OFFER |
FLAG_PUSHED``): it sends all the bytes at once, right after the RTS, and the receiver,
once it matched, posts its receive of all of them (what does not fit, or a mismatched
type's bytes, into scratch memory) and answers nothing; the message costs one frame
instead of three, and the data's flow control is the MPI library's.  Such a send
cannot be cancelled (it is already on its way: MPI_Cancel then fails, and the send
completes normally).

Send states (``SEND``)::

    eager, standard/ready/buffered : START -eager-> DONE
    eager, synchronous             : START -eager-> WAIT_ACK -ack-> DONE
    rendezvous (any mode)          : START -rts-> WAIT_ACK -ack-> DONE
                                     WAIT_ACK -cts-> PUSHING -pushed-> DONE
    cancel                         : WAIT_ACK -cancel-> CANCELLING
                                     CANCELLING -cancelled-> CANCELLED
                                     CANCELLING -not_cancelled-> WAIT_ACK
                                     CANCELLING -ack-> CANCELLING_ACKED
                                     CANCELLING_ACKED -not_cancelled-> DONE
                                     CANCELLING -cts-> CANCELLING_CTS
                                     CANCELLING_CTS -not_cancelled-> PUSHING
    direct (CTS with FLAG_DIRECT)  : PUSHING -pushed-> DONE   (the region sent the bytes)
    pushed ahead (FLAG_PUSHED)     : START -rts_pushed-> PUSHING -pushed-> DONE
    split (large, both sides copy) : WAIT_ACK -write-> WAIT_ACK   (tail written, WDONE sent)
                                     CANCELLING -write-> CANCELLING

Receive states (``RECV``)::

    POSTED -eager-> DONE
    POSTED -rts_read-> DONE          (receiver copied the data itself, sends ACK)
    POSTED -rts_push-> PULLING -data_last-> DONE   (sent CTS; chunks arrive)
    POSTED -rts_split-> SPLITTING -wdone-> DONE    (sent WRT, read the head; ACK on WDONE)
    POSTED -rts_direct-> PULLING -direct_done-> DONE (posted the region's receive, sent CTS)
    POSTED -cancel-> CANCELLED
    any non-final -fail-> FAILED

An event not in a table is a ``LocalProtocolError`` and leaves the state as it was.
Synchronous eager sends set ``FLAG_SYNC``; the receiver answers with ACK when the
message matches, so ``Ssend`` completes only after the match.  Buffered sends are
copied into the attached buffer by the caller and then travel as standard sends.
Ready sends are standard sends (the precondition is the user's promise).
"""

from __future__ import annotations

import struct

from .datatypes.flatten import sig_name
from .errors import ERR_COUNT, ERR_TRUNCATE, ERR_TYPE

# --- frame kinds and flags -------------------------------------------------------------
EAGER, RTS, ACK, CTS, DATA, CANCEL, CREPLY, WRT, WDONE, STATE = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
FLAG_SYNC = 1  # EAGER: receiver must ACK on match
FLAG_OFFER = 2  # RTS: the payload is a region offer: the offering transport's byte, then its body
FLAG_CANCELLED = 4  # CREPLY: the message was withdrawn
FLAG_LAST = 8  # DATA: final chunk
FLAG_FAILED = 16  # WDONE: the sender could not write the tail
FLAG_DIRECT = 32  # CTS: send ``nbytes`` through the region that offered (its two-sided channel)
FLAG_SLAB = 64  # DATA: no payload; the chunk is in slot ``tag`` of the sender's staging slab, ``nbytes`` long
FLAG_PUSHED = 128  # RTS: every byte is already on its way through the offering (direct) region: no CTS
#: WRT payload: receiver address for the tail, the tail's byte offset in the message.
WRT_BODY = struct.Struct("<QQ")

#: Frame header: length, kind, flags, pad, context, tag, nbytes, message id.
HEADER = struct.Struct("<IBBHiiQQ")
HLEN = HEADER.size  # 32
#: EAGER and RTS frames carry the datatype's signature code (``datatypes.flatten.sigcode``)
#: in the top 16 bits of ``nbytes``; messages stay below 2**48 bytes.
SIG_SHIFT = 48
NBYTES_MASK = (1 << SIG_SHIFT) - 1

# --- send modes ------------------------------------------------------------------------
STANDARD, SYNCHRONOUS, READY, BUFFERED = 0, 1, 2, 3


class LocalProtocolError(RuntimeError):
    """An event that is illegal in the message's current state (a gpumpi bug or misuse)."""


# --- state machines --------------------------------------------------------------------
START, WAIT_ACK, PUSHING, DONE, CANCELLING, CANCELLING_ACKED, CANCELLING_CTS, CANCELLED, FAILED = range(9)
POSTED, PULLING, SPLITTING = 9, 10, 11

SEND = {
    (START, "eager"): DONE,
    (START, "eager_sync"): WAIT_ACK,
    (START, "rts"): WAIT_ACK,
    (START, "rts_pushed"): PUSHING,
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
    (WAIT_ACK, "write"): WAIT_ACK,
    (CANCELLING, "write"): CANCELLING,
}

RECV = {
    (POSTED, "eager"): DONE,
    (POSTED, "rts_read"): DONE,
    (POSTED, "rts_push"): PULLING,
    (PULLING, "data_last"): DONE,
    (POSTED, "rts_direct"): PULLING,
    (PULLING, "direct_done"): DONE,
    (POSTED, "rts_split"): SPLITTING,
    (SPLITTING, "wdone"): DONE,
    (POSTED, "cancel"): CANCELLED,
}

FINAL = frozenset((DONE, CANCELLED, FAILED))


def step(table: dict, state: int, event: str) -> int:
    """Next state for ``event``; ``fail`` leads any non-final state to FAILED."""
    nxt = table.get((state, event))
    if nxt is not None:
        return nxt
    if event == "fail" and state not in FINAL:
        return FAILED
    raise LocalProtocolError(f"protocol: event {event!r} illegal in state {state}")


# --- decisions --------------------------------------------------------------------------
#: the eager limit when none is configured (``GPUMPI_EAGER_LIMIT``): messages up to it travel
#: inside their frame; the small-call collective path (``collectives._lean``) keeps to it too
DEFAULT_EAGER = 65536


def eager_limits(configured: int, max_payload: int, mpi_eager: int, far: bool) -> tuple:
    """``(eager limit, far eager limit)``: the largest message that travels inside its frame,
    to a rank of this node and to a rank of another node.  ``configured``: the eager limit
    asked for (0: the default, at most a quarter of the two frames' room a ring holds);
    ``max_payload``: a frame's largest payload (a frame header's 64 bytes stay free);
    ``mpi_eager``: ``GPUMPI_MPI_EAGER``; ``far``: the job has ranks on other nodes."""
    eager = min(configured or min(DEFAULT_EAGER, max_payload * 2 // 4), max_payload - 64)
    return eager, (min(mpi_eager, eager) if far else eager)


def receive_error(call: str, peer: int, nbytes: int, room: int, msig: int, rsig: int, typecheck: bool,
                  exact: bool = False):
    """The error of a receive of ``room`` bytes and signature code ``rsig`` that got a message of
    ``nbytes`` bytes and code ``msig`` from rank ``peer``: ``(error class, message)``, or None.

    A point-to-point receive (``exact`` False) fails with ``ERR_TYPE`` when the types differ
    (checked when both are typed, the message is not empty and ``typecheck`` is on), else
    with ``ERR_TRUNCATE`` when the message is longer than the room.  A collective's receive
    (``exact``) expects exactly ``room`` bytes: any other number is ``ERR_COUNT``, checked
    before the types."""
    mismatch = msig and rsig and msig != rsig and nbytes and typecheck
    if exact:
        if nbytes != room:
            return ERR_COUNT, f"{call}: rank {peer} sent {nbytes} bytes, this rank expects {room}"
        if mismatch:
            return ERR_TYPE, (f"{call}: type signature mismatch (rank {peer} sent {nbytes} bytes of "
                              f"{sig_name(msig)}, this rank receives {sig_name(rsig)})")
        return None
    if mismatch:
        return ERR_TYPE, (f"{call}: type signature mismatch (message of {nbytes} bytes of {sig_name(msig)} from "
                          f"rank {peer}, receive of {sig_name(rsig)})")
    if nbytes > room:
        return ERR_TRUNCATE, f"{call}: message truncated ({nbytes} bytes, buffer {room})"
    return None


def send_plan(nbytes: int, eager_limit: int, mode: int) -> str:
    """The first event of a send, naming its protocol: ``eager`` when the payload fits the
    eager limit (``eager_sync`` for synchronous sends, which wait for the match), else ``rts``."""
    if nbytes > eager_limit:
        return "rts"
    return "eager_sync" if mode == SYNCHRONOUS else "eager"


READ, SPLIT, PUSH, DIRECT = "rts_read", "rts_split", "rts_push", "rts_direct"


def rts_plan(offered: bool, takeable: bool, writable: bool, nbytes: int, split_min: int,
             direct: bool = False) -> str:
    """How a matched request-to-send of ``nbytes`` (to be received) moves.

    ``offered``: the sender offered a region; ``takeable``: a transport here reaches the
    sender and knows the offer; ``writable``: that transport can also write into our
    memory and has proven it works (and the sender is another process);
    ``split_min``: the smallest message worth two copying cores (0: never); ``direct``: the
    offering transport moves data two-sided (the receiver posts, then answers CTS).
    """
    if not (offered and takeable):
        return PUSH
    if direct:
        return DIRECT
    if writable and split_min and nbytes >= split_min:
        return SPLIT
    return READ


def split_head(nbytes: int) -> int:
    """Bytes the receiver reads itself in a split copy (page aligned); the sender writes the rest."""
    return (nbytes // 2) & ~4095


def pieces(lengths, chunk: int):
    """``(buffer index, offset, length)`` of each DATA frame pushing buffers of ``lengths``
    bytes in pieces of at most ``chunk`` bytes (empty buffers give none)."""
    for i, n in enumerate(lengths):
        for off in range(0, n, chunk):
            yield i, off, min(chunk, n - off)


def cancel_plan(is_send: bool, state: int) -> str:
    """What MPI_Cancel does: ``withdraw`` a posted receive here, ``ask`` the receiver to
    withdraw an unmatched send (a round trip), or ``none`` (too late: it completes normally)."""
    if is_send:
        return "ask" if state == WAIT_ACK else "none"
    return "withdraw" if state == POSTED else "none"
