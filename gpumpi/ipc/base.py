"""The transport interface: ordered frames per peer, bulk regions, and the registry (L4).

Theory of operation
===================
A transport moves bytes between the ranks of a job; the progress engine decides *what*
moves (``_protocol``), a transport only *how*.  Two small interfaces:

* :class:`Frames` -- ordered control frames per peer.  ``send`` writes one frame (the
  32-byte header of ``_protocol`` plus a payload) or queues it behind earlier ones when
  there is no room, so frames to one peer arrive in the order sent (MPI's
  non-overtaking rule rests on this).  A frame queued with a *token* keeps a reference
  to its payload (the caller promises the memory stays put) and ``flush`` returns the
  token once the frame is written; without one the payload is copied.  ``poll`` hands
  incoming frames to a handler; ``drop(peer)`` forgets what waits for a dead peer and
  returns those tokens; ``idle()`` is true when nothing waits to be written.

* :class:`Region` -- bulk data too large for frames.  A sender *offers* a region (its
  memory, described in bytes that travel in a request-to-send); the receiver *takes* it,
  copying straight out of the sender's memory.  A region transport that cannot offer a
  given memory (``offer`` returns None) or whose offer the receiver cannot take leaves
  the data to be *pushed* by the sender through frames or a staging pipeline.
  Capability flags say what else a transport can do: write into a peer's region
  (``WRITE``: both sides copy half of a large message), reach a peer's memory without
  the peer taking part (``ONE_SIDED``: windows), update it atomically (``ATOMICS``).  A
  ``DIRECT`` transport cannot be read at all: the receiver posts its receive with
  ``recv_into(peer, msgid, dst, nbytes)`` and the sender, told so, sends with
  ``send_from(peer, msgid, src, nbytes)``; each returns an object whose ``test()`` says
  when that side is done (the ``mpi`` transport between nodes).

The registry maps names to transport classes: every transport module registers itself
with :func:`register` when the ``gpumpi.ipc`` package imports it.  :func:`routes` turns ``GPUMPI_TRANSPORTS`` (already parsed by
``_config.parse_transports``) into the region transports to try, in order, for each
memory kind: per (peer, memory kind) the first that reaches the peer wins (DESIGN
section 7).  An unknown name is an error that lists the known ones.
"""

from __future__ import annotations

import abc
import ctypes
import struct

#: Region capability flags.
READ = 1  # the receiver copies from an offered region itself
WRITE = 2  # the offering side can write into the receiver's memory (split copies)
ONE_SIDED = 4  # a peer's memory is reachable without the peer (windows)
ATOMICS = 8  # element-wise atomic updates in a peer's memory
DIRECT = 16  # two-sided: the receiver posts into its destination, then the sender sends (``mpi``)

HOST, DEVICE = "host", "device"

#: a :class:`Frames` ``backlog`` slot of a peer of another node: no ring to it here, its frames
#: go to the transport's ``far`` frames (so the compiled send, which writes only where the
#: backlog is empty, never takes it)
FAR = ()


class PeerGone(Exception):
    """Raised by a region transport's ``take`` when the peer's process no longer exists (it
    exited or died): nothing was copied, and nothing of that peer's can be copied any more.
    The engine treats the peer as failed; it must not read it as "this transport does not
    work here"."""

    def __init__(self, peer: int, detail: str = "") -> None:
        super().__init__(f"rank {peer}: process no longer exists{' (' + detail + ')' if detail else ''}")
        self.peer = peer


class Frames(abc.ABC):
    """Ordered control frames per peer (see the module docstring)."""

    name = "frames"
    #: the largest payload one frame carries
    max_payload = 0
    #: what the engine reads of a frame transport besides its methods: ``backlog[peer]`` is None
    #: when nothing waits to be written to ``peer`` (a compiled send may write), :data:`FAR` for
    #: a peer of another node, else the frames queued for it; ``nbacklog`` counts the queued
    #: peers; ``far`` is the frame transport to other nodes (None: one node); ``out``/``inc``
    #: are the compiled path's rings (None where there is none)
    backlog: "list | tuple" = ()
    nbacklog = 0
    far = None

    @abc.abstractmethod
    def send(self, peer: int, kind: int, flags: int, src: int, ctx: int, tag: int, nbytes: int, msgid: int,
             payload=None, token=None) -> bool:
        """Write one frame for ``peer``; False when it waits behind others (``flush`` writes it)."""

    @abc.abstractmethod
    def try_send(self, peer: int, kind: int, flags: int, src: int, ctx: int, tag: int, nbytes: int, msgid: int,
                 payload) -> bool:
        """Write one frame only if it fits now, behind nothing; False otherwise (nothing queued)."""

    @abc.abstractmethod
    def poll(self, handler, budget: int = 64) -> int:
        """Hand up to ``budget`` incoming frames to ``handler(peer, header tuple, payload view)``;
        the view is valid only during the call."""

    @abc.abstractmethod
    def flush(self) -> list:
        """Write queued frames where there is room; the tokens of those written."""

    @abc.abstractmethod
    def drop(self, peer: int) -> list:
        """Forget the frames queued for ``peer`` (it died); the tokens that will never be written."""

    @abc.abstractmethod
    def idle(self) -> bool:
        """True when no frame waits to be written."""

    def arrived(self) -> bool:
        """Whether a frame may be waiting to be read (True when the transport cannot tell cheaply:
        the engine then polls)."""
        return True

    def close(self) -> None:
        """Release the transport's resources."""


class Region(abc.ABC):
    """Bulk regions of one memory kind (see the module docstring)."""

    name = "region"
    memory = HOST
    caps = READ
    #: set by :func:`register`: the byte that names this transport in an offer
    ident = 0
    #: ``WRITE`` transports: a plain take has worked, so writing into a peer is safe to try
    proven = False

    @abc.abstractmethod
    def reaches(self, peer: int) -> bool:
        """Whether this transport can move data between this rank and ``peer``."""

    @abc.abstractmethod
    def offer(self, peer: int, src):
        """Describe source ``src`` for ``peer`` to take, or None when this transport cannot offer
        it (the data is then pushed).  Host: ``src`` is ``[(address, length), ...]`` and the
        offer is bytes.  Device: ``src`` is ``(adapter, address, producer stream or None)`` and
        the offer is ``(bytes, event the peer's copy waits for or None, release or None)``;
        ``release()`` runs when the send has completed."""

    @abc.abstractmethod
    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        """Copy ``nbytes`` of the region ``peer`` offered (``body``), from byte ``skip`` on, into
        ``dst``: host, an address; device, ``(adapter or None for host memory, address,
        stream_of)``, where ``stream_of(adapter)`` gives the stream to copy on, already ordered
        after the consumer's work.  False when the offer cannot be taken here (nothing was
        copied: the engine asks for a push).  Raises :class:`PeerGone` when the peer's process
        no longer exists."""

    def write(self, peer: int, src, skip: int, addr: int, nbytes: int) -> int:
        """``WRITE`` transports: copy ``nbytes`` of our ``src`` from byte ``skip`` into ``peer``'s
        memory at ``addr``; 0 or an errno."""
        raise NotImplementedError(f"{self.name}.write: this transport cannot write into a peer's memory")

    def close(self) -> None:
        """Release cached mappings and other resources."""


_REGISTRY: dict = {HOST: {}, DEVICE: {}}  # memory kind -> {name: class}
_BY_IDENT: list = [None]  # ident -> class (0: none)


def register(cls):
    """Class decorator: make region transport ``cls`` known under ``cls.name`` for ``cls.memory``."""
    kind = _REGISTRY[cls.memory]
    if cls.name in kind and kind[cls.name] is not cls:
        raise ValueError(f"register: a {cls.memory} transport named {cls.name!r} exists already")
    if cls.name not in kind:
        cls.ident = len(_BY_IDENT)
        _BY_IDENT.append(cls)
        kind[cls.name] = cls
    return cls


def known(memory: str) -> tuple:
    """Names of the registered transports of a memory kind."""
    return tuple(_REGISTRY[memory])


def lookup(memory: str, name: str):
    """The transport class registered as ``name`` for ``memory``."""
    try:
        return _REGISTRY[memory][name]
    except KeyError:
        raise ValueError(f"transports: unknown {memory} transport {name!r} "
                         f"(known: {', '.join(_REGISTRY[memory]) or 'none'})") from None


def routes(named: dict, world) -> dict:
    """``{memory kind: [region transport instances, in order of preference]}`` for ``named``
    (``_config.parse_transports``'s result), each built as ``cls(world)``."""
    return {mem: [lookup(mem, n)(world) for n in names] for mem, names in named.items()}


def pick(regions, peer: int):
    """The first region transport of ``regions`` that reaches ``peer`` (None: none does)."""
    for t in regions:
        if t.reaches(peer):
            return t
    return None


# --- the host offer: a list of (address, length) segments ---------------------------------
_SEG = struct.Struct("<QQ")
_NSEG = struct.Struct("<I")


def encode_segments(segs) -> bytes:
    out = [_NSEG.pack(len(segs))]
    out.extend(_SEG.pack(a, n) for a, n in segs)
    return b"".join(out)


def decode_segments(mv) -> list:
    (k,) = _NSEG.unpack_from(mv, 0)
    return [_SEG.unpack_from(mv, 4 + 16 * i) for i in range(k)]


def skip_segments(segs, skip: int) -> list:
    """The segments ``[(addr, len), ...]`` without their first ``skip`` bytes."""
    out = []
    for a, n in segs:
        if skip >= n:
            skip -= n
            continue
        out.append((a + skip, n - skip))
        skip = 0
    return out


def address_of(buf) -> int:
    """Address of the first byte of a writable or read-only host buffer."""
    mv = memoryview(buf)
    if mv.nbytes == 0:
        return 0
    if not mv.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(mv))
    import numpy as np

    return np.frombuffer(mv, dtype=np.uint8).ctypes.data


