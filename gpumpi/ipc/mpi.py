"""Between nodes: frames and bulk data through an existing MPI library, via mpi4py (L4).

Theory of operation
===================
Under ``mpiexec``/``srun`` (DESIGN section 14) the ranks of one node talk through the node's
shared segment (``shm`` rings, ``cma``, ``cuda_ipc``, ``staging``); everything for a rank on
another node goes through MPI, on a private duplicate of mpi4py's ``COMM_WORLD``.  Matching
stays gpumpi's: MPI carries frames and bytes only, so one matcher sees the frames of this
node's rings and of MPI, and a wildcard receive takes whichever comes first, in MPI order
per source (a ring keeps the order of one pair; MPI's non-overtaking rule keeps the order of
one (source, tag) here).

* :class:`MpiFrames` -- frames for other nodes.  Each frame is one MPI message of tag
  ``TAG_FRAME``: the header and payload copied into a buffer of its own, so writing a frame
  never waits for the peer (``send`` is always done at once; the buffer lives until MPI
  completes the send).  ``NRECV`` receives of the largest frame stay posted from any source
  and are consumed in the order they were posted -- MPI matches messages to posted receives
  in that order, so one peer's frames are handed up in the order it sent them.  The frame
  kind ``STATE`` (a rank's finalize state word, sent to every rank of the other nodes) is
  kept here (:meth:`MpiFrames.state`), for the finalize rule of the engine.
* :class:`MpiHost`, :class:`MpiDevice` -- bulk data (capability ``DIRECT``).  The sender
  offers an empty region; once the receiver matched the request-to-send, it posts its
  receives straight into the destination and answers CTS with the byte count it takes, and
  the sender sends that many bytes (``_protocol``'s *direct* plan).  Both sides cut the bytes
  into messages of at most ``GPUMPI_MPI_CHUNK``, tagged ``TAG_DATA + msgid % span`` (the
  sender's message id), all posted at once: MPI interleaves them with every other message,
  so a large transfer never holds back the progress of others.  Device memory goes as it is
  when the MPI library takes device pointers (``MPIX_Query_cuda_support``, or
  ``GPUMPI_MPI_CUDA=1``); otherwise it is staged through page-locked host buffers, a
  pipeline of ``DEPTH`` chunks per transfer (device -> host copy, then send; receive, then
  host -> device copy), the copies of one chunk overlapping the network time of the others.
  A pending transfer is polled by the engine (``test``) in every progress pass.

Nothing here imports mpi4py before a world under an MPI launcher asks for it
(:func:`mpi4py`): ``import gpumpi`` stays light, and under ``gpumpirun`` the ``mpi``
transports reach no peer.
"""

from __future__ import annotations

import ctypes
from collections import deque

from .._protocol import HEADER, HLEN, STATE
from .base import DEVICE, DIRECT, HOST, Frames, Region, address_of, register

_pack_into = HEADER.pack_into
_unpack_from = HEADER.unpack_from

TAG_FRAME = 1
TAG_DATA = 2
#: receives of frames kept posted
NRECV = 16
#: send slots of the compiled path (fastmpi)
NSEND = 64
#: chunks in flight per staged device transfer
DEPTH = 4


def mpi4py():
    """mpi4py's ``MPI`` module (the real one: never gpumpi's shim), initialised with
    ``THREAD_MULTIPLE`` unless the program initialised MPI itself."""
    import sys

    mod = sys.modules.get("mpi4py")
    if mod is None:
        import mpi4py as mod
    if getattr(mod, "__gpumpi__", False):
        return _beside_shim(mod)
    import mpi4py.MPI as M

    return M


#: the name the real ``mpi4py.MPI`` is loaded under while ``mpi4py`` is gpumpi's shim
ALIAS = "_gpumpi_mpi4py"


def _beside_shim(shim):
    """The installed mpi4py's compiled ``MPI`` while ``import mpi4py`` is gpumpi's shim (an
    mpi4py program run on gpumpi under ``mpiexec``: ``GPUMPI_MPI4PY=1``): the same extension
    file mpi4py's own finder picks (its MPI ABI suffix, ``mpi4py._mpiabi``), loaded as
    ``_gpumpi_mpi4py.MPI`` so that ``mpi4py.MPI`` stays gpumpi's; the shim's namespace is the
    real ``mpi4py/__init__.py``'s, so ``mpi4py.rc`` is the one both read."""
    import importlib.machinery
    import importlib.util
    import os
    import sys
    import types

    M = sys.modules.get(ALIAS + ".MPI")
    if M is not None:
        return M
    real = os.path.dirname(shim.__file__)
    from mpi4py import _mpiabi  # the real package's module (the shim's path ends with its folder)

    suffix = _mpiabi._get_mpiabi_suffix("mpi4py.MPI") or ""
    found = [os.path.join(real, f"MPI{suffix}{ext}") for ext in importlib.machinery.EXTENSION_SUFFIXES]
    found = [f for f in found if os.path.isfile(f)]
    if not found:
        raise RuntimeError(f"gpumpi: under an MPI launcher gpumpi needs the installed mpi4py's MPI extension, and "
                           f"{real} has none for MPI ABI {suffix[1:] or 'of the build'!r} (pip install mpi4py)")
    pkg = types.ModuleType(ALIAS)
    pkg.__path__ = [real]
    sys.modules[ALIAS] = pkg
    keep = shim.__dict__.get("MPI", _MISSING)
    spec = importlib.util.spec_from_file_location(ALIAS + ".MPI", found[0])
    M = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = M
    try:
        spec.loader.exec_module(M)
    except BaseException:
        del sys.modules[spec.name]
        raise
    finally:  # the extension names itself mpi4py.MPI: the program's mpi4py.MPI stays gpumpi's
        if keep is _MISSING:
            shim.__dict__.pop("MPI", None)
        else:
            shim.MPI = keep
    pkg.MPI = M
    return M


_MISSING = object()


def node_ids(comm, M, sim_nodes: int) -> list:
    """The node of every rank of ``comm``, numbered from 0 in the order of the nodes' lowest
    ranks: ``sim_nodes`` > 0 groups the ranks into that many contiguous blocks (pretend nodes
    on one machine); otherwise the real shared-memory domains (``Split_type(COMM_TYPE_SHARED)``)."""
    size = comm.Get_size()
    if sim_nodes > 0:
        k = min(sim_nodes, size)
        return [r * k // size for r in range(size)]
    shared = comm.Split_type(M.COMM_TYPE_SHARED, comm.Get_rank())
    try:
        leader = shared.allreduce(comm.Get_rank(), op=M.MIN)
    finally:
        shared.Free()
    leaders = comm.allgather(leader)
    order = {r: i for i, r in enumerate(sorted(set(leaders)))}
    return [order[r] for r in leaders]


def cuda_aware(M, setting: str) -> bool:
    """Whether the MPI library takes device pointers (``GPUMPI_MPI_CUDA``: ``1``/``0`` decide;
    ``auto`` asks the library, ``MPIX_Query_cuda_support`` through mpi4py)."""
    if setting in ("0", "1"):
        return setting == "1"
    q = getattr(M, "Query_cuda_support", None)
    try:
        return bool(q()) if q is not None else False
    except Exception:  # noqa: BLE001 -- a library without the extension: not CUDA-aware
        return False


def _buffer(M, addr: int, nbytes: int):
    """An mpi4py buffer over ``nbytes`` at ``addr`` (host memory, or device memory for a
    CUDA-aware library)."""
    mem = getattr(M, "buffer", None) or M.memory
    return [mem.fromaddress(addr, nbytes, readonly=False), nbytes, M.BYTE]


class MpiFrames(Frames):
    """Frames to the ranks of other nodes, one MPI message each (see the module docstring)."""

    name = "mpi"

    def __init__(self, M, comm, far: list, max_payload: int, eager: int = 0) -> None:
        import numpy as np

        self.M = M
        self.comm = comm
        self.far = far  # the ranks of other nodes
        self.max_payload = max_payload
        self.fmax = HLEN + max_payload
        self.sends: deque = deque()  # (request, buffer) until MPI completed the send
        self.status = M.Status()
        # the frame receives: persistent, started in ring order and consumed in it (``rctl[0]``
        # is the next one), so the compiled path (fastmpi) can take one and restart it too
        self.rbuf = np.zeros((NRECV, self.fmax), dtype=np.uint8)
        self.preq = [comm.Recv_init([self.rbuf[i], M.BYTE], M.ANY_SOURCE, TAG_FRAME) for i in range(NRECV)]
        M.Prequest.Startall(self.preq)
        self.rctl = np.zeros(2, dtype=np.int64)  # the next frame receive; its source + 1 once seen done
        self.states = {p: 0 for p in far}
        self.sent = np.zeros(comm.Get_size(), dtype=np.int64)  # frames sent per peer (what the tests count)
        self.eager = min(eager, max_payload)  # payloads the compiled sends take (0: every message is pushed)
        self.mt = None  # the compiled path's table (fast_table), once asked for
        self.sreq = None

    @property
    def count(self) -> dict:
        """Frames sent per rank of another node."""
        return {p: int(self.sent[p]) for p in self.far}

    def send(self, peer: int, kind: int, flags: int, src: int, ctx: int, tag: int, nbytes: int, msgid: int,
             payload=None, token=None) -> bool:
        n = HLEN if payload is None else HLEN + len(payload)
        if n > self.fmax:
            raise ValueError(f"mpi transport: frame of {n} bytes exceeds the largest ({self.fmax})")
        buf = bytearray(n)
        self.sent[peer] += 1
        _pack_into(buf, 0, n, kind, flags, src, ctx, tag, nbytes, msgid)
        if n > HLEN:
            buf[HLEN:] = payload
        self.sends.append((self.comm.Isend([buf, n, self.M.BYTE], peer, TAG_FRAME), buf))
        if len(self.sends) > 64:
            self._reap()
        return True

    def try_send(self, peer: int, kind: int, flags: int, src: int, ctx: int, tag: int, nbytes: int, msgid: int,
                 payload) -> bool:
        return self.send(peer, kind, flags, src, ctx, tag, nbytes, msgid, payload)

    def _reap(self) -> None:
        sends = self.sends
        while sends and sends[0][0].Test():
            sends.popleft()
        if len(sends) > 256:  # an early send waits for a slow peer: free the later ones that are done
            keep = deque(s for s in sends if not s[0].Test())
            self.sends = keep

    def poll(self, handler, budget: int = 64) -> int:
        got = 0
        rctl = self.rctl
        preq = self.preq
        st = self.status
        while got < budget:
            h = int(rctl[0])
            req = preq[h]
            peer = int(rctl[1]) - 1  # its source, if a look already saw it complete (see arrived)
            if peer >= 0:
                req.Test()
            elif req.Test(st):
                peer = st.Get_source()
            else:
                break
            rctl[0] = (h + 1) % NRECV
            rctl[1] = 0
            buf = self.rbuf[h]
            hdr = _unpack_from(buf, 0)
            if hdr[1] == STATE:
                if hdr[6] > self.states[peer]:
                    self.states[peer] = hdr[6]
            else:
                handler(peer, hdr, memoryview(buf)[HLEN : hdr[0]])
            req.Start()
            got += 1
        if self.sends:
            self._reap()
        return got

    def arrived(self) -> bool:
        """Whether the next frame receive completed (asked without completing it).

        Once ``MPI_Request_get_status`` saw a persistent receive complete, MPICH's ``MPI_Test``
        of it returns an empty status (MPICH 4-5: the look completes the inner request): the
        look records the source in ``rctl[1]`` (source + 1; 0: not seen), where the poll and
        the compiled path read it."""
        rctl = self.rctl
        if rctl[1]:
            return True
        st = self.status
        if self.preq[int(rctl[0])].Get_status(st):
            rctl[1] = st.Get_source() + 1
            return True
        return False

    # --- the compiled path (gpumpi.ipc.fastmpi) ------------------------------------------------
    def fast_table(self, regions=()):
        """The table of :mod:`gpumpi.ipc.fastmpi` (int64 array; built once): the MPI functions'
        addresses in the library mpi4py loaded, the handles, and the shared requests and
        buffers (``eager`` payload bytes per send slot, ``NSEND`` slots), and the host region
        of the ``mpi`` transport among ``regions`` (pushed data); None where the library's
        functions cannot be found or that region is not in use."""
        if self.mt is not None:
            return self.mt
        import numpy as np

        from . import fastmpi as FM

        M = self.M
        try:
            lib = ctypes.CDLL(M.__file__)  # its symbols resolve through the MPI library it links
            fps = [ctypes.cast(getattr(lib, f), ctypes.c_void_p).value
                   for f in ("MPI_Isend", "MPI_Test", "MPI_Start", "MPI_Request_get_status", "MPI_Irecv")]
            for f in ("MPI_Testall", "MPI_Waitall", "MPI_Test"):
                getattr(lib, f).restype = ctypes.c_int
        except (OSError, AttributeError):
            return None
        hw = M._sizeof(M.Request)
        if hw not in (4, 8) or M._sizeof(M.Comm) != hw or M._sizeof(M.Datatype) != hw:
            return None
        hty = np.int32 if hw == 4 else np.int64
        st = M.Status()  # where MPI_SOURCE is in an MPI_Status: set it, find it
        st.Set_source(0x5A5A5A5)
        raw = ctypes.string_at(M._addressof(st), M._sizeof(M.Status))
        soff = raw.find((0x5A5A5A5).to_bytes(4, "little"))
        if soff < 0:
            return None
        self._lib = lib
        def h(obj):  # a handle as the signed integer of its width (how the compiled code loads it)
            v = M._handleof(obj) & ((1 << (8 * hw)) - 1)
            return v - (1 << (8 * hw)) if v >> (8 * hw - 1) else v

        self.hreq = np.array([h(r) for r in self.preq], dtype=hty)
        slot = (HLEN + max(self.eager, 64) + 63) & -64
        self.sbuf = np.zeros(NSEND * slot, dtype=np.uint8)
        null = h(M.REQUEST_NULL)
        self.sreq = np.full(NSEND, null, dtype=hty)
        self._null = null
        self.sctl = np.zeros(1, dtype=np.int64)
        self.fstatus = np.zeros(max(64, M._sizeof(M.Status)), dtype=np.uint8)
        self.fflag = np.zeros(2, dtype=np.int32)
        self.dreq = np.full(1, null, dtype=hty)  # the blocking compiled path's data request (fastmpi.push, recv)
        self.aux = np.zeros(2, dtype=np.int64)  # a nonblocking receive's pushed message: its id, its sender
        self._status_bytes = M._sizeof(M.Status)
        host = next((r for r in regions if r.name == "mpi" and r.memory == HOST), None)
        if host is None:
            return None
        row = {
            "isend": fps[0], "test": fps[1], "start": fps[2], "getstatus": fps[3], "irecv": fps[4], "hw": hw,
            "comm": h(self.comm), "byte": h(M.BYTE), "reqnull": null, "soff": soff,
            "nrecv": NRECV, "rbuf": self.rbuf.ctypes.data, "fmax": self.fmax, "hreq": self.hreq.ctypes.data,
            "rctl": self.rctl.ctypes.data, "nsend": NSEND, "sbuf": self.sbuf.ctypes.data, "slot": slot,
            "sreq": self.sreq.ctypes.data, "sctl": self.sctl.ctypes.data, "status": self.fstatus.ctypes.data,
            "flag": self.fflag.ctypes.data, "count": self.sent.ctypes.data, "tag": TAG_FRAME, "dtag": TAG_DATA,
            "span": host.span, "chunk": host.chunk, "ident": host.ident, "dreq": self.dreq.ctypes.data,
            "aux": self.aux.ctypes.data,
        }
        self.slots = DataSlots(lib, hty, null, self._status_bytes, M.UNDEFINED)
        self.mt = np.array([row[k] for k in FM.MT], dtype=np.int64)
        return self.mt

    def data_request(self) -> "RawRequest":
        """The compiled path's data request that is still going (``dreq``), taken over."""
        r = RawRequest(self._lib, self.dreq, self._status_bytes)
        self.dreq[0] = self._null
        return r

    def _fast_sends(self, wait: bool) -> bool:
        """Whether the compiled path's sends are all done (``wait``: after waiting for them):
        ``MPI_Testall``/``MPI_Waitall`` on its request slots, which they set to null."""
        if self.sreq is None:
            return True
        lib = self._lib
        f = lib.MPI_Waitall if wait else lib.MPI_Testall
        stats = ctypes.create_string_buffer(NSEND * self.M._sizeof(self.M.Status))
        if wait:
            return f(NSEND, ctypes.c_void_p(self.sreq.ctypes.data), stats) == 0
        flag = ctypes.c_int(0)
        return f(NSEND, ctypes.c_void_p(self.sreq.ctypes.data), ctypes.byref(flag), stats) == 0 and flag.value != 0

    def publish(self, state: int) -> None:
        """Tell every rank of the other nodes our finalize state word (after every frame sent to it)."""
        for p in self.far:
            self.send(p, STATE, 0, 0, 0, 0, state, 0)

    def state(self, peer: int) -> int:
        """The last state word ``peer`` (of another node) published."""
        return self.states[peer]

    def flush(self) -> list:
        self._reap()
        return []

    def drop(self, peer: int) -> list:
        return []  # nothing waits here: every frame was handed to MPI

    def idle(self) -> bool:
        self._reap()
        if self.sends:
            return False
        return self._fast_sends(False)

    def close(self) -> None:
        if self.M.Is_finalized():  # the program finalized MPI itself: nothing can be released
            self.preq.clear()
            self.sends.clear()
            return
        for req in self.preq:
            try:
                req.Cancel()
                req.Wait()
                req.Free()
            except Exception:  # noqa: BLE001 -- MPI finalized or aborting: nothing left to release
                pass
        self.preq.clear()
        for req, _buf in self.sends:
            try:
                req.Wait()
            except Exception:  # noqa: BLE001
                pass
        self.sends.clear()
        self._fast_sends(True)
        self.sreq = None


#: data messages of the compiled nonblocking path in flight at once (DataSlots)
NSLOT = 128


class DataSlots:
    """The MPI requests of data messages that the compiled path started for nonblocking
    operations (``Isend`` pushed ahead, ``Irecv`` of a message pushed ahead): ``NSLOT``
    handles in one array, each slot owned by the operation whose bytes it carries, all
    tested by one ``MPI_Testsome`` per progress pass (:meth:`done`)."""

    __slots__ = ("h", "base", "hw", "free", "owner", "_fn", "_args", "_cnt", "_idx", "_st", "_undef")

    def __init__(self, lib, hty, null: int, status_bytes: int, undefined: int) -> None:
        import numpy as np

        self.h = np.full(NSLOT, null, dtype=hty)
        self.base = self.h.ctypes.data
        self.hw = self.h.itemsize
        self.free = list(range(NSLOT - 1, -1, -1))  # taken from the end: the lowest slots first
        self.owner: dict = {}  # slot -> the operation it carries
        self._fn = lib.MPI_Testsome
        self._fn.restype = ctypes.c_int
        self._cnt = ctypes.c_int(0)
        self._idx = np.zeros(NSLOT, dtype=np.int32)
        self._st = ctypes.create_string_buffer(NSLOT * max(status_bytes, 8))
        self._undef = undefined
        # MPI_Testsome's arguments, built once (the arrays never move)
        self._args = (NSLOT, ctypes.c_void_p(self.base), ctypes.byref(self._cnt),
                      ctypes.c_void_p(self._idx.ctypes.data), self._st)

    def next_address(self) -> int:
        """The address of the handle the next :meth:`take` gives (0: every slot is taken)."""
        free = self.free
        return self.base + free[-1] * self.hw if free else 0

    def take(self, x) -> None:
        """Give the next slot (its handle written by the compiled call) to operation ``x``."""
        self.owner[self.free.pop()] = x

    def done(self) -> list:
        """The operations whose data messages completed since the last call (their slots free)."""
        if not self.owner:
            return []
        if self._fn(*self._args) != 0:
            from ..errors import ERR_OTHER, error

            raise error(ERR_OTHER, "gpumpi: MPI_Testsome of pushed messages' data failed in the MPI library")
        k = self._cnt.value
        if k <= 0 or k == self._undef:
            return []
        owner, free = self.owner, self.free
        out = []
        for i in self._idx[:k].tolist():
            out.append(owner.pop(i))
            free.append(i)
        return out


class RawRequest:
    """An MPI request started by the compiled path (a handle in an array of its own), tested
    with ``MPI_Test`` by address (``test()``: true once complete)."""

    __slots__ = ("lib", "h", "st", "flag")

    def __init__(self, lib, h, status_bytes: int) -> None:
        self.lib, self.h = lib, h.copy()
        self.st = ctypes.create_string_buffer(max(64, status_bytes))
        self.flag = ctypes.c_int(0)

    def test(self) -> bool:
        if self.lib.MPI_Test(ctypes.c_void_p(self.h.ctypes.data), ctypes.byref(self.flag), self.st) != 0:
            from ..errors import ERR_OTHER, error

            raise error(ERR_OTHER, "gpumpi: MPI_Test of a pushed message's data failed in the MPI library")
        return self.flag.value != 0


# --- bulk data --------------------------------------------------------------------------------
class _Done:
    """A transfer of no bytes: complete at once."""

    @staticmethod
    def test() -> bool:
        return True


class _Requests:
    """Messages posted at once; complete when MPI completed them all."""

    __slots__ = ("M", "reqs", "keep")

    def __init__(self, M, reqs, keep) -> None:
        self.M, self.reqs, self.keep = M, reqs, keep

    def test(self) -> bool:
        if self.reqs and not self.M.Request.Testall(self.reqs):
            return False
        self.reqs = None
        return True


class _Spill:
    """A receive of more bytes than the destination takes: into scratch host memory, then
    the first ``nbytes`` to ``dst`` (a host address, or device ``(adapter, address, stream)``)."""

    __slots__ = ("dst", "nbytes", "rq")

    def __init__(self, region, dst, nbytes: int, rq: _Requests) -> None:
        self.dst, self.nbytes, self.rq = dst, nbytes, rq

    def test(self) -> bool:
        rq = self.rq
        if rq is None:
            return True
        scratch = rq.keep[0]
        if not rq.test():
            return False
        n, dst = self.nbytes, self.dst
        if n:
            src = address_of(scratch)
            if isinstance(dst, tuple):
                ad, addr, s = dst
                ad.memcpy(addr, src, n, s)
                ad.stream_synchronize(s)
            else:
                ctypes.memmove(dst, src, n)
        self.rq = None
        return True


class _Staged:
    """A device transfer staged through page-locked host buffers, ``DEPTH`` chunks in flight.

    Sending, each chunk is copied device -> host on the copy stream, then sent once its copy
    event completed; receiving, each chunk is received into a host buffer, then copied host ->
    device.  A host buffer goes back to the pool when its chunk is sent, or landed.
    """

    __slots__ = ("r", "ad", "addr", "s", "sending", "peer", "tag", "chunks", "next", "flight", "events")

    def __init__(self, region, ad, addr: int, s, sending: bool, peer: int, tag: int, nbytes: int) -> None:
        self.r, self.ad, self.addr, self.s = region, ad, addr, s
        self.sending, self.peer, self.tag = sending, peer, tag
        ch = region.chunk
        self.chunks = [(off, min(ch, nbytes - off)) for off in range(0, nbytes, ch)]
        self.next = 0
        self.flight: deque = deque()  # [stage, chunk index, host buffer, request or event]

    def test(self) -> bool:
        r, ad, M = self.r, self.ad, self.r.M
        fl = self.flight
        while self.next < len(self.chunks) and len(fl) < DEPTH:
            i = self.next
            off, n = self.chunks[i]
            hb = r.host_buffer(ad)
            if self.sending:
                ad.memcpy(hb, self.addr + off, n, self.s)
                ev = ad.event_create(False)
                ad.event_record(ev, self.s)
                fl.append([0, i, hb, ev])
            else:
                fl.append([0, i, hb, r.comm.Irecv(_buffer(M, hb, n), self.peer, self.tag)])
            self.next = i + 1
        for f in fl:  # advance each chunk one stage where it can
            stage, i, hb, what = f
            off, n = self.chunks[i]
            if stage == 0:
                if self.sending:
                    if not ad.event_query(what):
                        break  # chunks are sent in order: the receiver's receives are matched in order
                    ad.event_destroy(what)
                    f[0], f[3] = 1, r.comm.Isend(_buffer(M, hb, n), self.peer, self.tag)
                else:
                    if not what.Test():
                        continue
                    ad.memcpy(self.addr + off, hb, n, self.s)
                    ev = ad.event_create(False)
                    ad.event_record(ev, self.s)
                    f[0], f[3] = 1, ev
            elif stage == 1:
                done = what.Test() if self.sending else ad.event_query(what)
                if done:
                    if not self.sending:
                        ad.event_destroy(what)
                    f[0] = 2
                    r.give_back(ad, hb)
        if any(f[0] == 2 for f in fl):
            self.flight = fl = deque(f for f in fl if f[0] != 2)
        return self.next == len(self.chunks) and not fl


class _MpiRegion(Region):
    """Bulk data between nodes, two-sided through MPI (see the module docstring)."""

    name, caps = "mpi", DIRECT

    def __init__(self, world) -> None:
        self.far = set(getattr(world, "far", ()) or ())
        mpi = getattr(world, "mpi", None)
        self.M = self.comm = None
        if mpi is not None:
            self.M, self.comm = mpi
            self.span = max(1, min(int(self.comm.Get_attr(self.M.TAG_UB) or 32767), 1 << 30) - TAG_DATA)
        self.chunk = world.cfg.mpi_chunk
        self.cuda = False
        self.count: dict = {}  # transfers per peer, both directions (what the tests count)
        self.pool: dict = {}  # adapter name -> [(adapter, free page-locked host buffers)]
        self.owned: list = []  # (adapter, address) of every host buffer allocated

    def reaches(self, peer: int) -> bool:
        return peer in self.far

    def offer(self, peer: int, src):
        return b""  # nothing to describe: the bytes are sent once the receiver asks (CTS)

    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        return False  # direct regions are never read: see recv_into

    def _tag(self, msgid: int) -> int:
        return TAG_DATA + msgid % self.span

    # --- the direct plan -------------------------------------------------------------------
    def recv_into(self, peer: int, msgid: int, dst, nbytes: int, total: int | None = None):
        """Post the receive of ``nbytes`` sent by ``peer`` for its message ``msgid`` into ``dst``
        (host: an address; device: ``(adapter, address, stream ordered after the consumer)``):
        an object whose ``test()`` is true once the bytes are there.  ``total`` > ``nbytes``:
        the sender sends ``total`` bytes (pushed ahead); they land in host scratch memory, and
        the first ``nbytes`` are copied to ``dst`` when all arrived (a truncated receive, or a
        mismatched type's: ``nbytes`` 0)."""
        if total is not None and total > nbytes:
            self.count[peer] = self.count.get(peer, 0) + 1
            return _Spill(self, dst, nbytes, self._post(self.comm.Irecv, 0, peer, self._tag(msgid), total))
        return self._start(self.comm.Irecv, peer, msgid, dst, nbytes, False)

    def send_from(self, peer: int, msgid: int, src, nbytes: int):
        """Send the first ``nbytes`` of ``src`` (host: ``[(address, length), ...]``; device:
        ``(adapter, address, stream ordered after the producer)``) for message ``msgid``: an
        object whose ``test()`` is true once MPI is done with the source."""
        if isinstance(src, list) and len(src) > 1 and nbytes:
            self.count[peer] = self.count.get(peer, 0) + 1
            return self._post_segments(src, peer, self._tag(msgid), nbytes)
        return self._start(self.comm.Isend, peer, msgid, src if isinstance(src, tuple) else src[0][0], nbytes, True)

    def _start(self, op, peer: int, msgid: int, mem, nbytes: int, sending: bool):
        """One side of a transfer of ``mem`` (an address, or device ``(adapter, address, stream)``):
        device memory is staged unless the library is CUDA-aware, and then goes once the work
        queued on its stream (the producer's, or the consumer's) is done."""
        self.count[peer] = self.count.get(peer, 0) + 1
        if nbytes == 0:
            return _Done
        tag = self._tag(msgid)
        if isinstance(mem, tuple):
            ad, addr, s = mem
            if not self.cuda:
                return _Staged(self, ad, addr, s, sending, peer, tag, nbytes)
            ad.stream_synchronize(s)
            mem = addr
        return self._post(op, mem, peer, tag, nbytes)

    def _post(self, op, addr: int, peer: int, tag: int, nbytes: int):
        """``op`` (Isend/Irecv) of ``nbytes`` at ``addr`` in messages of at most ``chunk`` bytes;
        ``addr`` 0: into a scratch buffer of their own (``keep[0]``)."""
        M, ch = self.M, self.chunk
        keep = None
        if not addr:
            keep = [bytearray(nbytes)]
            addr = address_of(keep[0])
        reqs = [op(_buffer(M, addr + off, min(ch, nbytes - off)), peer, tag) for off in range(0, nbytes, ch)]
        return _Requests(M, reqs, keep)

    def _post_segments(self, segs, peer: int, tag: int, nbytes: int):
        """A source of several pieces: each chunk of one piece goes as it is, a chunk spanning
        pieces is gathered into a buffer of its own first (kept until it is sent)."""
        M, ch = self.M, self.chunk
        reqs, keep = [], []
        pieces = []  # (address, length) of the first nbytes
        left = nbytes
        for a, n in segs:
            if left <= 0:
                break
            pieces.append((a, min(n, left)))
            left -= n
        i, pos = 0, 0  # piece, offset in it
        for off in range(0, nbytes, ch):
            n = min(ch, nbytes - off)
            a, ln = pieces[i]
            if ln - pos >= n:
                reqs.append(self.comm.Isend(_buffer(M, a + pos, n), peer, tag))
                pos += n
            else:
                buf = bytearray(n)
                got = 0
                dst = (ctypes.c_char * n).from_buffer(buf)
                while got < n:
                    a, ln = pieces[i]
                    k = min(ln - pos, n - got)
                    ctypes.memmove(ctypes.addressof(dst) + got, a + pos, k)
                    got += k
                    pos += k
                    if pos == ln and got < n:
                        i, pos = i + 1, 0
                keep.append(buf)
                reqs.append(self.comm.Isend([buf, M.BYTE], peer, tag))
            if pos == pieces[i][1] and i + 1 < len(pieces):
                i, pos = i + 1, 0
        return _Requests(M, reqs, keep)

    # --- page-locked host buffers for staging ------------------------------------------------
    def host_buffer(self, ad) -> int:
        free = self.pool.setdefault(ad.name, [])
        if free:
            return free.pop()
        addr = ad.alloc_host(self.chunk)
        self.owned.append((ad, addr))
        return addr

    def give_back(self, ad, addr: int) -> None:
        self.pool.setdefault(ad.name, []).append(addr)

    def close(self) -> None:
        for ad, addr in self.owned:
            try:
                ad.free_host(addr)
            except Exception:  # noqa: BLE001 -- the adapter may be gone at exit
                pass
        self.owned.clear()
        self.pool.clear()


@register
class MpiHost(_MpiRegion):
    """Host data for ranks on other nodes, through MPI."""

    memory = HOST


@register
class MpiDevice(_MpiRegion):
    """Device data for ranks on other nodes: device pointers to a CUDA-aware MPI, else staged."""

    memory = DEVICE

    def __init__(self, world) -> None:
        super().__init__(world)
        if self.M is not None:
            self.cuda = cuda_aware(self.M, world.cfg.mpi_cuda)

    def offer(self, peer: int, src):
        """An empty body, and an event after the producer's work on its stream (every copy of
        the source waits for it), nothing to release."""
        ad, _addr, stream = src
        ev = None
        if stream is not None:
            ev = ad.event_create(False)
            ad.event_record(ev, stream)
        return b"", ev, None

