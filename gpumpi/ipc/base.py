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

* One-sided (windows): a ``ONE_SIDED`` transport *exposes* memory of this rank to the
  members of a window (``expose``: a description that travels to them at window creation,
  or None when it cannot expose that memory) and *attaches* a member's description
  (``attach``: a :class:`Remote`, which reads and writes runs of that memory without the
  member taking part).  Every member of a window reaches a given member's memory through
  the transport that exposed it -- the route is agreed once, at creation
  (:func:`expose`, :func:`attach`) -- so the atomicity a transport states holds among all
  of them.  An ``ATOMICS`` transport's remotes update elements atomically against every
  other origin reaching the same memory through it.  The owner reaches its own memory
  through the same transport (its remote is then usually the memory itself).

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

    def expose(self, mem):
        """``ONE_SIDED`` transports: a picklable description of this rank's memory ``mem`` for
        the members of a window to :meth:`attach`, or None when this transport cannot expose it.
        Host: ``mem`` is ``(address, nbytes, file)``, where ``file`` is ``(fd, offset, file
        length)`` of a memfd holding the memory or None, and ``nbytes`` None stands for every
        address of this process (a dynamic window).  Device: ``(adapter, address, nbytes)``.
        The description stays valid until the members have attached it (the window's
        creation ends with a barrier)."""
        return None

    def attach(self, peer: int, desc, stream_of=None) -> "Remote":
        """``ONE_SIDED`` transports: reach the memory ``peer`` (this rank included) described
        with :meth:`expose`.  ``stream_of(adapter)`` gives the stream device copies and kernels
        run on.  Raises ``OSError`` when the memory cannot be reached, :class:`PeerGone` when
        the peer's process no longer exists."""
        raise NotImplementedError(f"{self.name}.attach: this transport cannot reach a peer's memory one-sidedly")

    def close(self) -> None:
        """Release cached mappings and other resources."""


class Remote:
    """A window member's memory as this rank reaches it (what ``Region.attach`` returns).

    ``base`` is the address of the memory's first byte in the address space ``read`` and
    ``write`` take (ours where ``mapped``; the peer's for cross-memory attach; a device
    address).  ``mapped``: the CPU of this process loads and stores it at ``base`` (NumPy
    may view it).  ``atomic``: ``accumulate`` and ``compare_and_swap`` update elements
    atomically against every origin reaching this memory through the same transport, for
    the element types :meth:`supported` accepts.  ``device``: the adapter of device memory
    (None: host).  Addresses given to the methods are absolute (``base`` plus an offset)."""

    mapped = False
    atomic = False
    device = None

    def __init__(self, peer: int, base: int) -> None:
        self.peer, self.base = peer, base

    def read(self, segs, dst: int) -> None:
        """Copy the runs ``[(address, length), ...]`` of the memory, in order, to host address
        ``dst``, complete when it returns."""
        raise NotImplementedError(f"{type(self).__name__}.read")

    def write(self, src: int, segs) -> None:
        """Copy consecutive bytes from host address ``src`` into the runs ``[(address,
        length), ...]`` of the memory, in order, complete when it returns."""
        raise NotImplementedError(f"{type(self).__name__}.write")

    def supported(self, op: str, dtype) -> bool:
        """Whether :meth:`accumulate` updates elements of ``dtype`` with ``op`` atomically."""
        return False

    def cas_supported(self, dtype, addr: int) -> bool:
        """Whether :meth:`compare_and_swap` is atomic for one element of ``dtype`` at ``addr``."""
        return False

    def accumulate(self, addr: int, offsets, values, op: str, fetch=None) -> None:
        """``ATOMICS``: ``*(addr + offsets[i]) op= values[i]`` element-wise atomically, in order;
        the old elements into ``fetch`` when given (a host array like ``values``)."""
        raise NotImplementedError(f"{type(self).__name__}.accumulate: no atomic updates through this route")

    def compare_and_swap(self, addr: int, compare: bytes, value: bytes, dtype) -> bytes:
        """``ATOMICS``: the old bytes of the element of ``dtype`` at ``addr``, replaced by ``value``
        where they equal ``compare`` (as bits), atomically."""
        raise NotImplementedError(f"{type(self).__name__}.compare_and_swap: no atomic updates through this route")

    def sync(self) -> None:
        """Complete every update made through this remote (device: its stream's work)."""

    def close(self) -> None:
        """Release what :meth:`Region.attach` mapped or opened."""


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


def one_sided(regions) -> list:
    """The ``ONE_SIDED`` transports of ``regions``, those with ``ATOMICS`` first (in order of
    preference otherwise): the order in which windows ask them to expose memory."""
    return sorted((t for t in regions if t.caps & ONE_SIDED), key=lambda t: not t.caps & ATOMICS)


def expose(regions, me: int, members, mem):
    """``(ident, description)`` from the first one-sided transport of ``regions`` that reaches
    every other member of ``members`` (world ranks) and exposes ``mem``; None when none does."""
    for t in one_sided(regions):
        if all(t.reaches(p) for p in members if p != me):
            desc = t.expose(mem)
            if desc is not None:
                return t.ident, desc
    return None


def attach(regions, ident: int, peer: int, desc, stream_of=None) -> Remote:
    """Reach ``peer``'s memory through the transport of ``ident`` that exposed it (``desc``)."""
    for t in regions:
        if t.ident == ident:
            return t.attach(peer, desc, stream_of)
    cls = _BY_IDENT[ident] if 0 < ident < len(_BY_IDENT) else None
    raise OSError(f"rank {peer} exposed its memory through the {cls.name if cls else ident!r} transport, "
                  f"which this rank does not route over (GPUMPI_TRANSPORTS)")


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


