"""Benchmark suites for ``gpumpi bench`` (L6): ``p2p``, ``pack`` and ``p2p-matrix``.

Theory of operation
===================
Every suite is a function that takes the MPI *module* as its first argument, so the
same code measures ``gpumpi.MPI`` and ``mpi4py.MPI`` side by side.  Only the
uppercase buffer API is used (``Send``, ``Recv``, ``Isend``, ``Irecv``,
``Request.Waitall``, ``Barrier``, ``Wtime``) with ``[array, MPI.BYTE]`` buffer specs.
Ranks 0 and 1 synchronise with each other by a zero-byte ping-pong before every
timed loop; the only collective is the closing ``Barrier`` of the whole communicator.

The point-to-point suite follows the OSU micro-benchmarks (and OMB-Py):

* latency: blocking ping-pong between ranks 0 and 1; one-way latency is half the
  round trip, ``t * 1e6 / (2 * iters)`` microseconds.
* bw (osu_bw): rank 0 posts a window of ``Isend`` and waits for all of them; rank 1
  posts a window of ``Irecv``, waits, and answers with a 4-byte ack.
  ``bw = size * window * iters / t``.
* bibw (osu_bibw): both ranks post a window of ``Irecv`` then a window of ``Isend``;
  the bytes of both directions count: ``bibw = 2 * size * window * iters / t``.

Rules:

* GB means 1e9 bytes; times come from ``MPI.Wtime`` on rank 0.
* Buffers are allocated once, at the largest size, outside every timed loop; the
  first ``skip`` iterations of each loop are warm-up and are not timed.
* Default iteration counts are OMB-Py's (latency 10000/1000 skip, bandwidth 100/10),
  scaled down for messages above 8 KiB so that one measurement moves at most
  about 1 GiB (``--quick``: fewer iterations, 128 MiB).  An explicit ``iters`` is
  used as given for every size.
* Every measurement is checked: the sender's buffer holds a pattern that depends on
  the size and the sending rank, the receiver fills its buffer with the bitwise
  complement before the loop and counts the bytes that differ from the pattern
  afterwards.  Rank 1 sends its count to rank 0; the sum is the ``#wrong`` column.
* As in OSU, all receives of a window land in one receive buffer (the data are
  identical, and the numbers stay comparable with published OSU figures, which
  are cache-warm).  ``distinct_recv`` gives each receive of a window its own slot
  while ``window * size`` fits in :data:`RECV_CAP` bytes (reusing slots
  round-robin beyond that), which measures cache-cold destinations.
* Ranks other than 0 and 1 wait at the final barrier.
* Buffers: ``numpy`` (host memory), ``sim`` (simulated device memory,
  :class:`gpumpi.testing.SimDeviceArray`) or ``cupy`` (CuPy arrays on the rank's
  GPU).  Device buffers are filled and checked through host copies (``.set`` /
  ``.get``) outside the timed loops; the zero-byte synchronisation messages and
  acks stay in host memory.  Which device transport gpumpi uses is chosen by
  ``GPUMPI_TRANSPORTS`` in the ranks' environment (:func:`transports_setting`).

The p2p-matrix suite follows nvbandwidth's unidirectional device-to-device
matrix, one ordered pair of devices (sender ``src``, receiver ``dst``) per 2-rank
job: rank 0 binds ``src`` and sends, rank 1 binds ``dst`` and receives (both the
same GPU when they are equal, which is the only pair on a one-GPU node).  Per size:

* every size gets newly allocated buffers (kept until the end of the job, so no
  address is reused and, with ``cuda_ipc``, every first message exports and opens
  a new IPC handle);
  a throwaway message of other buffers first pays the one-time setup (streams,
  interprocess events, staging slabs), which is not what cold measures;
* one *sample* is timed on the receiver: from just before it sends a zero-byte
  "go" to the sender until its blocking ``Recv`` of ``size`` bytes returns (the
  data are then visible); so every sample includes one zero-byte one-way latency;
* cold: the first sample of the new buffers; warm: the median of ``iters``
  samples after ``skip`` warm-up samples;
* copy: on the receiving device, the median of ``iters`` device-to-device
  ``adapter.memcpy`` of ``size`` bytes between two other allocations, each timed
  to ``adapter.stream_synchronize`` (after ``skip`` untimed ones); warm % = warm /
  copy: how close one message gets to one local copy of the same bytes;
* checks: the receive buffer holds the complement of the pattern before the cold
  sample and before the last warm sample, and is compared with the pattern on the
  host after each; the copy's destination is compared too.  The sum is ``#wrong``.

The pack suite follows TEMPI's ``bench_mpi_pack`` on host memory:

* pack/unpack (rank 0 only): 1 MiB of packed bytes in contiguous blocks of 1, 2,
  4 ... 1024 bytes that start every ``2 * block`` bytes, described three ways that
  touch the same bytes (``vector``, ``indexed`` with explicit displacements, 2-D
  ``subarray``).  ``Datatype.Pack`` and ``Unpack`` move exactly one element
  (buffers of one extent); the median of the timed repetitions gives GB/s of
  packed bytes.  ``first`` is ``Commit`` plus the first ``Pack`` of a newly built
  type: plan building and any kernel compile.  Every measurement is checked against
  NumPy: the packed bytes, the unpacked blocks, and the gaps that unpack must leave
  zero.
* strided-send (ranks 0 and 1, skipped on one rank): 16 MiB of a vector with 8 B
  and 1 KiB blocks sent as ``[buf, 1, vector]``, against a NumPy copy into a
  contiguous array plus a ``BYTE`` send (the self-consistency check of
  Carpen-Amarie et al.: a derived-type send should not lose to pack + send).
  Rank 1 receives contiguous bytes and checks them.

Nothing heavy is imported at module import time; numpy is imported by the suites.
"""

from __future__ import annotations

import csv
import gc
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence

#: Suites that ``gpumpi bench`` knows.
SUITES = ("p2p", "pack", "p2p-matrix")
#: Buffer kinds: host NumPy arrays, simulated device memory, CuPy arrays on a GPU.
BUFFER_KINDS = ("numpy", "sim", "cupy")
#: The buffer kinds that live in (real or simulated) device memory.
DEVICE_BUFFER_KINDS = ("sim", "cupy")
#: Values of ``--transport``: gpumpi's own choice, or one device transport for every device message.
TRANSPORTS = ("auto", "cuda_ipc", "staging")
#: Messages in flight per window in the bandwidth tests (OSU's value).
WINDOW = 64
#: Messages above this size use the "large" iteration counts (OSU's threshold).
LARGE_MESSAGE = 8192
#: Largest default message size (16 MiB).
MAX_SIZE = 16 << 20
#: Sizes of the ``--quick`` sweep.
QUICK_SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 16 << 20)
#: Bytes of receive buffer per window (``distinct_recv``) before receives reuse slots.
RECV_CAP = 64 << 20
#: Slot alignment inside the receive buffer.
_ALIGN = 64

# (iters, skip) for small messages; large messages are scaled by a byte budget.
_DEFAULT_ITERS = {"latency": (10000, 1000), "bw": (100, 10), "bibw": (100, 10)}
_QUICK_ITERS = {"latency": (1000, 100), "bw": (20, 2), "bibw": (20, 2)}
_BUDGET = 1 << 30
_QUICK_BUDGET = 128 << 20

#: Packed bytes per datatype in the pack suite (TEMPI's 1 MiB objects).
PACK_BYTES = 1 << 20
#: Contiguous block sizes of the pack sweep (bytes).
PACK_BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: Block sizes of the ``--quick`` pack sweep.
PACK_QUICK_BLOCKS = (1, 8, 64, 1024)
#: Type families of the pack suite: the same bytes described three ways.
PACK_TYPES = ("vector", "indexed", "subarray")
#: Bytes of one strided-send message.
STRIDED_SEND_BYTES = 16 << 20
#: Block sizes of strided-send (bytes).
STRIDED_SEND_BLOCKS = (8, 1024)

_TAG_LAT, _TAG_BW, _TAG_ACK, _TAG_BIBW, _TAG_CHECK, _TAG_SYNC = 101, 102, 103, 104, 105, 106
_TAG_STRIDED = 107
_TAG_GO, _TAG_MATRIX, _TAG_STATS = 108, 109, 110

#: Message sizes of the p2p-matrix suite (bytes).
MATRIX_SIZES = (1 << 20, 16 << 20, 64 << 20)
#: Message sizes of the ``--quick`` p2p-matrix suite.
MATRIX_QUICK_SIZES = (1 << 20, 16 << 20)
#: Largest size of a p2p-matrix ``--sizes MIN:MAX`` range with MAX left out.
MATRIX_MAX_SIZE = 64 << 20
# (timed, warm-up) samples of the p2p-matrix suite: messages, local copies
_MATRIX_REPS, _MATRIX_QUICK_REPS = ((20, 3), (20, 2)), ((5, 1), (5, 1))
# (timed, warm-up) repetitions of the pack suite: pack/unpack, strided-send
_PACK_REPS, _PACK_QUICK_REPS = (25, 3), (5, 1)
_SEND_REPS, _SEND_QUICK_REPS = (10, 2), (3, 1)


class BenchError(Exception):
    """A benchmark was asked for something it cannot do (bad suite, buffer, sizes)."""


# ---------------------------------------------------------------- sizes and plans


def parse_size(text: str) -> int:
    """Parse a byte count such as ``4096``, ``64K``, ``16M``, ``1G`` or ``64KiB``.

    Args:
        text: the size; suffixes K/M/G (optionally followed by ``iB`` or ``B``)
            are powers of 1024.

    Returns:
        The number of bytes.

    Raises:
        BenchError: the text is not a non-negative size.
    """
    t = text.strip()
    low = t.lower()
    for suffix in ("ib", "b"):
        if low.endswith(suffix) and len(low) > len(suffix):
            low = low[: -len(suffix)]
            break
    mult = 1
    if low and low[-1] in "kmg":
        mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[low[-1]]
        low = low[:-1]
    try:
        n = int(low, 10)
    except ValueError:
        raise BenchError(f"bad size {text!r} (expected e.g. 0, 4096, 64K, 16M)") from None
    if n < 0:
        raise BenchError(f"bad size {text!r} (negative)")
    return n * mult


def default_sizes(min_size: int = 0, max_size: int = MAX_SIZE) -> list[int]:
    """Return the OSU sweep: 0 B, then 1 B, 2 B, 4 B ... up to ``max_size``.

    Args:
        min_size: smallest size kept (0 keeps the zero-byte message).
        max_size: largest size kept.

    Returns:
        Sizes in increasing order within ``[min_size, max_size]``.
    """
    sizes = [0] if min_size <= 0 <= max_size else []
    s = 1
    while s <= max_size:
        if s >= min_size:
            sizes.append(s)
        s <<= 1
    return sizes


def parse_sizes(spec: str | None, quick: bool = False) -> list[int]:
    """Turn a ``--sizes`` argument into a size list.

    Args:
        spec: ``"min:max"`` (either side may be empty), a comma-separated list
            such as ``"8,1K,64K"``, a single size, or None for the default.
        quick: use :data:`QUICK_SIZES` (filtered by a ``min:max`` range) instead of
            the powers-of-two sweep.

    Returns:
        Sorted, de-duplicated sizes.

    Raises:
        BenchError: malformed spec or an empty result.
    """
    if spec is None or spec.strip() == "":
        sizes = list(QUICK_SIZES) if quick else default_sizes()
    elif ":" in spec:
        lo_text, _, hi_text = spec.partition(":")
        lo = parse_size(lo_text) if lo_text.strip() else 0
        hi = parse_size(hi_text) if hi_text.strip() else MAX_SIZE
        if lo > hi:
            raise BenchError(f"bad --sizes {spec!r}: min {lo} > max {hi}")
        if quick:
            sizes = [s for s in QUICK_SIZES if lo <= s <= hi]
        else:
            sizes = default_sizes(lo, hi)
    else:
        sizes = [parse_size(part) for part in spec.split(",") if part.strip()]
    sizes = sorted(set(sizes))
    if not sizes:
        raise BenchError(f"--sizes {spec!r} selects no message size")
    return sizes


def parse_matrix_sizes(spec: str | None, quick: bool = False) -> list[int]:
    """Turn a ``--sizes`` argument of the p2p-matrix suite into message sizes.

    Args:
        spec: ``"min:max"`` (powers of two in the range; an empty max means
            :data:`MATRIX_MAX_SIZE`; with ``quick``, :data:`MATRIX_QUICK_SIZES` in
            the range), a comma-separated list such as ``"1M,16M"``, a single size,
            or None for :data:`MATRIX_SIZES` (:data:`MATRIX_QUICK_SIZES` with ``quick``).
        quick: start from the ``--quick`` sizes.

    Returns:
        Sorted, de-duplicated sizes, all at least 1 byte.

    Raises:
        BenchError: malformed spec, an empty result, or a size of 0.
    """
    if spec is None or spec.strip() == "":
        sizes = list(MATRIX_QUICK_SIZES if quick else MATRIX_SIZES)
    elif ":" in spec:
        lo_text, _, hi_text = spec.partition(":")
        lo = max(1, parse_size(lo_text)) if lo_text.strip() else 1
        hi = parse_size(hi_text) if hi_text.strip() else MATRIX_MAX_SIZE
        if lo > hi:
            raise BenchError(f"bad --sizes {spec!r}: min {lo} > max {hi}")
        sizes = [s for s in MATRIX_QUICK_SIZES if lo <= s <= hi] if quick else default_sizes(lo, hi)
    else:
        sizes = [parse_size(part) for part in spec.split(",") if part.strip()]
    sizes = sorted(set(sizes))
    if not sizes:
        raise BenchError(f"--sizes {spec!r} selects no message size")
    if sizes[0] < 1:
        raise BenchError(f"p2p-matrix message sizes must be >= 1 byte (--sizes {spec!r})")
    return sizes


def plan_iterations(
    test: str,
    size: int,
    *,
    iters: int | None = None,
    skip: int | None = None,
    quick: bool = False,
    window: int = WINDOW,
) -> tuple[int, int]:
    """Choose the timed and warm-up iteration counts of one measurement.

    Args:
        test: ``"latency"``, ``"bw"`` or ``"bibw"``.
        size: message size in bytes.
        iters: timed iterations; None picks the OSU-style default, scaled down for
            messages above :data:`LARGE_MESSAGE` bytes.
        skip: warm-up iterations; None means a tenth of the timed ones (at least 1).
        quick: the reduced ``--quick`` counts.
        window: messages per bandwidth iteration.

    Returns:
        ``(iters, skip)``.
    """
    if iters is None:
        table = _QUICK_ITERS if quick else _DEFAULT_ITERS
        n, _ = table[test]
        if size > LARGE_MESSAGE:
            per_iter = {"latency": 2 * size, "bw": window * size, "bibw": 2 * window * size}[test]
            budget = _QUICK_BUDGET if quick else _BUDGET
            floor = 2 if quick else 5
            n = max(floor, min(n // 10 if test == "latency" else n, budget // per_iter))
    else:
        n = max(1, int(iters))
    if skip is None:
        w = max(1, n // 10)
    else:
        w = max(0, int(skip))
    return n, w


# ---------------------------------------------------------------- buffers


def check_buffer_kind(buffer: str, suite: str = "p2p") -> None:
    """Raise :class:`BenchError` unless ``suite`` can run on ``buffer`` buffers.

    ``p2p`` takes every kind of :data:`BUFFER_KINDS`; ``pack`` only ``numpy``;
    ``p2p-matrix`` only the device kinds (:data:`DEVICE_BUFFER_KINDS`).  Whether
    CuPy and a GPU are there is :func:`check_device_buffers`'s question.
    """
    if buffer not in BUFFER_KINDS:
        raise BenchError(f"unknown buffer kind {buffer!r} (supported: {', '.join(BUFFER_KINDS)})")
    if suite == "pack" and buffer != "numpy":
        raise BenchError(f"the pack suite runs on host numpy buffers only (--buffer {buffer})")
    if suite == "p2p-matrix" and buffer not in DEVICE_BUFFER_KINDS:
        raise BenchError(f"the p2p-matrix suite measures device buffers: use --buffer sim or cupy (--buffer {buffer})")


def cupy_status() -> tuple[bool, str]:
    """Whether CuPy buffers can be used here: ``(usable, reason)``.

    Usable when ``cupy`` imports, the CUDA driver initialises and at least one GPU
    is visible.  Importing CuPy and initialising CUDA happen only when the first two
    checks pass; the reason names what is missing otherwise.
    """
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        return False, "cupy is not installed: pip install gpumpi[cuda]"
    from . import _device

    if _device.cuda_driver() is None:
        return False, "no usable CUDA driver: libcuda.so.1 missing or cuInit failed"
    try:
        from ._device import cupy_adapter

        n = cupy_adapter().device_count()
    except Exception as e:  # an ImportError or CUDA error: report it, do not crash the validation
        return False, f"CuPy/CUDA failed: {e}"
    if n < 1:
        return False, "the CUDA driver sees no GPU"
    return True, f"{n} GPU{'s' if n != 1 else ''}"


def check_device_buffers(buffer: str) -> None:
    """Raise :class:`BenchError` when ``buffer`` is ``"cupy"`` and CuPy or a GPU is missing.

    Call before launching anything: CuPy buffers need CuPy and a CUDA GPU in every rank.
    """
    if buffer != "cupy":
        return
    ok, why = cupy_status()
    if not ok:
        raise BenchError(f"--buffer cupy needs CuPy and a CUDA GPU ({why})")


def check_transport(transport: str) -> None:
    """Raise :class:`BenchError` unless ``transport`` is one of :data:`TRANSPORTS`."""
    if transport not in TRANSPORTS:
        raise BenchError(f"unknown transport {transport!r} (known: {', '.join(TRANSPORTS)})")


def transports_setting(transport: str, current: str = "") -> str:
    """The ``GPUMPI_TRANSPORTS`` value that makes gpumpi ranks use ``transport`` for device messages.

    Args:
        transport: one of :data:`TRANSPORTS`.  ``"auto"`` keeps ``current`` as it is
            (gpumpi chooses: ``cuda_ipc`` where it can, else ``staging``); a name
            replaces every ``device:`` item of ``current`` by ``device:<name>`` and
            keeps the host items.
        current: the value in the environment now (``""`` when unset).

    Returns:
        The value to put in the ranks' environment.

    Raises:
        BenchError: unknown transport.
    """
    check_transport(transport)
    if transport == "auto":
        return current
    keep = [item.strip() for item in current.replace(";", ",").split(",")]
    keep = [item for item in keep if item and not item.lower().startswith("device:")]
    return ",".join([*keep, f"device:{transport}"])


def device_count(buffer: str) -> int:
    """How many devices the adapter of ``buffer`` buffers has (``sim``: the simulated adapter's).

    Raises:
        BenchError: ``buffer`` is not a device kind, or CuPy / a GPU is missing.
    """
    if buffer not in DEVICE_BUFFER_KINDS:
        raise BenchError(f"device_count: not a device buffer kind (--buffer {buffer})")
    check_device_buffers(buffer)
    from . import _device

    return (_device.sim_adapter() if buffer == "sim" else _device.cupy_adapter()).device_count()


def _pattern(np, size: int, rank: int):
    """The bytes that ``rank`` sends at ``size``: period 251, seeded by both."""
    base = ((np.arange(251, dtype=np.int64) * 131 + size * 7 + rank * 29 + 1) % 251).astype(np.uint8)
    return np.resize(base, size)


def _stride(size: int) -> int:
    return max(_ALIGN, -(-size // _ALIGN) * _ALIGN)


def _nslots(size: int, window: int, distinct: bool) -> int:
    if not distinct:
        return 1
    return max(1, min(window, RECV_CAP // _stride(size)))


class _DeviceMemory:
    """1-D ``uint8`` device arrays of one kind, with ``.set(host)`` / ``.get()`` and views by slicing.

    ``own``: every array is its own allocation straight from the adapter (CuPy:
    ``adapter.alloc`` wrapped as a ``cupy.ndarray``, outside CuPy's pool; sim:
    every :class:`~gpumpi.testing.SimDeviceArray` already is), freed by
    :meth:`release`.  Otherwise CuPy arrays come from CuPy's pool.
    """

    __slots__ = ("_cupy", "_raw", "adapter", "kind", "own", "stream")

    def __init__(self, kind: str, own: bool = False):
        from . import _device

        self.kind = kind
        self.own = own
        self._raw: list[int] = []
        self.stream = None
        if kind == "sim":
            self._cupy = None
            self.adapter = _device.sim_adapter()
        elif kind == "cupy":
            check_device_buffers(kind)
            import cupy

            self._cupy = cupy
            self.adapter = _device.cupy_adapter()
        else:
            raise BenchError(f"not a device buffer kind (--buffer {kind})")

    def array(self, nbytes: int):
        if self._cupy is None:
            from .testing import SimDeviceArray

            return SimDeviceArray.zeros(nbytes, "u1")
        cp = self._cupy
        if not self.own or nbytes == 0:
            return cp.zeros(nbytes, dtype=cp.uint8)
        addr = self.adapter.alloc(nbytes)
        self._raw.append(addr)
        mem = cp.cuda.UnownedMemory(addr, nbytes, None, self.adapter.current_device())
        return cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))

    def sync(self) -> None:
        """Wait for the device work that ``.set`` queued (sim: runs every queued operation)."""
        if self._cupy is None:
            self.adapter.synchronize()
        else:
            self._cupy.cuda.get_current_stream().synchronize()

    def release(self) -> None:
        """Free the arrays' own allocations (the arrays must not be used afterwards)."""
        if self._raw:
            self.adapter.synchronize()
            for addr in self._raw:
                self.adapter.free(addr)
            self._raw.clear()


class _Buffers:
    """Host send/receive buffers allocated once for the whole sweep."""

    __slots__ = ("distinct", "empty", "np", "rbuf", "sbuf")

    def __init__(self, np, sizes: Sequence[int], window: int, distinct: bool):
        self.np = np
        self.distinct = distinct
        biggest = max(sizes) if sizes else 0
        rbytes = max([_nslots(s, window, distinct) * _stride(s) for s in sizes] + [_ALIGN])
        self.sbuf = np.zeros(max(biggest, 1), dtype=np.uint8)
        self.rbuf = np.zeros(rbytes, dtype=np.uint8)
        self.empty = np.zeros(0, dtype=np.uint8)

    def prepare_send(self, size: int, rank: int):
        if size:
            self.sbuf[:size] = _pattern(self.np, size, rank)
        return self.sbuf[:size]

    def recv_slots(self, size: int, nslots: int, peer: int):
        """Views of ``nslots`` receive slots, each set to the complement of the
        peer's pattern so that a missing or partial delivery is counted."""
        stride = _stride(size)
        grid = self.rbuf[: nslots * stride].reshape(nslots, stride)
        if size:
            grid[:, :size] = ~_pattern(self.np, size, peer)
        return [grid[i, :size] for i in range(nslots)]

    def count_wrong(self, slots, size: int, peer: int, used: int) -> int:
        if size == 0:
            return 0
        expected = _pattern(self.np, size, peer)
        return int(sum(int(self.np.count_nonzero(v != expected)) for v in slots[:used]))


class _DeviceBuffers(_Buffers):
    """Device send/receive buffers (``sim`` or ``cupy``), filled and checked through host copies."""

    __slots__ = ("mem",)

    def __init__(self, np, mem: _DeviceMemory, sizes: Sequence[int], window: int, distinct: bool):
        self.np = np
        self.mem = mem
        self.distinct = distinct
        biggest = max(sizes) if sizes else 0
        rbytes = max([_nslots(s, window, distinct) * _stride(s) for s in sizes] + [_ALIGN])
        self.sbuf = mem.array(max(biggest, 1))
        self.rbuf = mem.array(rbytes)
        self.empty = np.zeros(0, dtype=np.uint8)  # zero-byte sync messages stay on the host

    def prepare_send(self, size: int, rank: int):
        view = self.sbuf[:size]
        if size:
            view.set(_pattern(self.np, size, rank))
            self.mem.sync()
        return view

    def recv_slots(self, size: int, nslots: int, peer: int):
        stride = _stride(size)
        if size:
            image = self.np.zeros((nslots, stride), dtype=self.np.uint8)
            image[:, :size] = ~_pattern(self.np, size, peer)
            self.rbuf[: nslots * stride].set(image.ravel())
            self.mem.sync()
        return [self.rbuf[i * stride : i * stride + size] for i in range(nslots)]

    def count_wrong(self, slots, size: int, peer: int, used: int) -> int:
        if size == 0:
            return 0
        expected = _pattern(self.np, size, peer)
        return int(sum(int(self.np.count_nonzero(v.get() != expected)) for v in slots[:used]))


# ---------------------------------------------------------------- measurements


def _pair_sync(MPI, comm, bufs: _Buffers, rank: int) -> None:
    """A barrier between ranks 0 and 1 only (the other ranks wait elsewhere)."""
    empty = [bufs.empty, MPI.BYTE]
    if rank == 0:
        comm.Send(empty, 1, _TAG_SYNC)
        comm.Recv(empty, 1, _TAG_SYNC)
    else:
        comm.Recv(empty, 0, _TAG_SYNC)
        comm.Send(empty, 0, _TAG_SYNC)


def _latency(MPI, comm, bufs: _Buffers, rank: int, size: int, iters: int, skip: int):
    peer = 1 - rank
    smsg = [bufs.prepare_send(size, rank), MPI.BYTE]
    slots = bufs.recv_slots(size, 1, peer)
    rmsg = [slots[0], MPI.BYTE]
    send, recv, wtime = comm.Send, comm.Recv, MPI.Wtime
    _pair_sync(MPI, comm, bufs, rank)
    t0 = wtime()
    if rank == 0:
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            send(smsg, 1, _TAG_LAT)
            recv(rmsg, 1, _TAG_LAT)
    else:
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            recv(rmsg, 0, _TAG_LAT)
            send(smsg, 0, _TAG_LAT)
    elapsed = wtime() - t0
    wrong = bufs.count_wrong(slots, size, peer, 1)
    return elapsed, wrong


def _bw(MPI, comm, bufs: _Buffers, rank: int, size: int, iters: int, skip: int, window: int):
    np = bufs.np
    ack = np.zeros(4, dtype=np.uint8)
    ackmsg = [ack, MPI.BYTE]
    wtime, waitall = MPI.Wtime, MPI.Request.Waitall
    rng = range(window)
    wrong = 0
    if rank == 0:
        smsg = [bufs.prepare_send(size, 0), MPI.BYTE]
        isend, recv = comm.Isend, comm.Recv
        _pair_sync(MPI, comm, bufs, rank)
        t0 = wtime()
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            waitall([isend(smsg, 1, _TAG_BW) for _ in rng])
            recv(ackmsg, 1, _TAG_ACK)
        elapsed = wtime() - t0
    else:
        nslots = _nslots(size, window, bufs.distinct)
        slots = bufs.recv_slots(size, nslots, 0)
        rmsgs = [[slots[j % nslots], MPI.BYTE] for j in rng]
        irecv, send = comm.Irecv, comm.Send
        _pair_sync(MPI, comm, bufs, rank)
        t0 = wtime()
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            waitall([irecv(m, 0, _TAG_BW) for m in rmsgs])
            send(ackmsg, 0, _TAG_ACK)
        elapsed = wtime() - t0
        wrong = bufs.count_wrong(slots, size, 0, min(nslots, window))
    return elapsed, wrong


def _bibw(MPI, comm, bufs: _Buffers, rank: int, size: int, iters: int, skip: int, window: int):
    peer = 1 - rank
    smsg = [bufs.prepare_send(size, rank), MPI.BYTE]
    nslots = _nslots(size, window, bufs.distinct)
    slots = bufs.recv_slots(size, nslots, peer)
    rmsgs = [[slots[j % nslots], MPI.BYTE] for j in range(window)]
    rng = range(window)
    isend, irecv = comm.Isend, comm.Irecv
    wtime, waitall = MPI.Wtime, MPI.Request.Waitall
    _pair_sync(MPI, comm, bufs, rank)
    t0 = wtime()
    for i in range(iters + skip):
        if i == skip:
            t0 = wtime()
        rreqs = [irecv(m, peer, _TAG_BIBW) for m in rmsgs]
        sreqs = [isend(smsg, peer, _TAG_BIBW) for _ in rng]
        waitall(sreqs)
        waitall(rreqs)
    elapsed = wtime() - t0
    wrong = bufs.count_wrong(slots, size, peer, min(nslots, window))
    return elapsed, wrong


def _sum_wrong(MPI, comm, np, rank: int, wrong: int) -> int:
    """Rank 1 reports its count of wrong bytes to rank 0; rank 0 returns the sum."""
    cell = np.zeros(1, dtype=np.int64)
    if rank == 1:
        cell[0] = wrong
        comm.Send([cell.view(np.uint8), MPI.BYTE], 0, _TAG_CHECK)
        return wrong
    comm.Recv([cell.view(np.uint8), MPI.BYTE], 1, _TAG_CHECK)
    return wrong + int(cell[0])


def pair_devices(MPI, comm, device: int) -> list[int] | None:
    """Tell rank 0 which devices ranks 0 and 1 use (for the table header).

    Collective over ranks 0 and 1 of ``comm`` (other ranks return None at once).

    Args:
        MPI: the MPI module.
        comm: a communicator of at least 2 ranks.
        device: this rank's device number.

    Returns:
        ``[device of rank 0, device of rank 1]`` on rank 0, None elsewhere.
    """
    import numpy as np

    rank = comm.Get_rank()
    cell = np.full(1, int(device), dtype=np.int64)
    if rank == 1:
        comm.Send([cell.view(np.uint8), MPI.BYTE], 0, _TAG_CHECK)
    elif rank == 0:
        comm.Recv([cell.view(np.uint8), MPI.BYTE], 1, _TAG_CHECK)
        return [int(device), int(cell[0])]
    return None


def run_p2p(
    MPI,
    sizes: Iterable[int] | None = None,
    *,
    iters: int | None = None,
    skip: int | None = None,
    window: int = WINDOW,
    quick: bool = False,
    buffer: str = "numpy",
    distinct_recv: bool = False,
    tests: Sequence[str] = ("latency", "bw", "bibw"),
    comm=None,
    progress: Callable[[int, int, dict], None] | None = None,
) -> list[dict]:
    """Run the OSU-style point-to-point suite between ranks 0 and 1.

    Collective over ``comm``: every rank calls it; ranks above 1 only wait at the
    closing barrier.

    Args:
        MPI: the MPI module to measure (``gpumpi.MPI`` or ``mpi4py.MPI``).
        sizes: message sizes in bytes; None means :func:`default_sizes` (or
            :data:`QUICK_SIZES` with ``quick``).
        iters: timed iterations per measurement; None picks OSU-style counts
            (see :func:`plan_iterations`).
        skip: warm-up iterations per measurement; None means a tenth of ``iters``.
        window: messages in flight per bandwidth iteration (osu_bw's 64).
        quick: reduced iteration counts.
        buffer: ``"numpy"`` (host memory), ``"sim"`` (simulated device memory) or
            ``"cupy"`` (CuPy arrays on the current device: bind each rank's GPU
            first, e.g. ``gpumpi.init(device="auto")``).  ``MPI`` must accept the
            kind: mpi4py takes CuPy arrays only over a CUDA-aware MPI.
        distinct_recv: give each receive of a bandwidth window its own slot instead
            of OSU's single receive buffer.
        tests: which of ``"latency"``, ``"bw"``, ``"bibw"`` to run.
        comm: communicator (default ``MPI.COMM_WORLD``); needs at least 2 ranks.
        progress: called on rank 0 as ``progress(index, count, row)`` after each size.

    Returns:
        On rank 0, one dict per size with keys ``size``, ``latency_us``,
        ``bw_GBps``, ``bibw_GBps`` (None when not measured, e.g. bandwidth at 0 B),
        ``wrong`` (bytes that differed from the sent pattern, all tests summed) and
        ``iters`` (``{test: [iters, skip]}``).  An empty list on other ranks.

    Raises:
        BenchError: bad buffer kind (or ``cupy`` without CuPy and a GPU), unknown
            test, bad window, or fewer than 2 ranks.
    """
    check_buffer_kind(buffer)
    for t in tests:
        if t not in ("latency", "bw", "bibw"):
            raise BenchError(f"unknown p2p test {t!r} (known: latency, bw, bibw)")
    if window < 1:
        raise BenchError(f"window must be >= 1 (got {window})")
    if comm is None:
        comm = MPI.COMM_WORLD
    nranks = comm.Get_size()
    if nranks < 2:
        raise BenchError(f"the p2p suite needs at least 2 ranks (got {nranks})")
    sizes = list(QUICK_SIZES if quick else default_sizes()) if sizes is None else [int(s) for s in sizes]
    if any(s < 0 for s in sizes):
        raise BenchError("message sizes must be >= 0")
    rank = comm.Get_rank()
    rows: list[dict] = []
    if rank > 1:
        comm.Barrier()
        return rows

    import numpy as np

    if buffer in DEVICE_BUFFER_KINDS:
        bufs: _Buffers = _DeviceBuffers(np, _DeviceMemory(buffer), sizes, window, distinct_recv)
    else:
        bufs = _Buffers(np, sizes, window, distinct_recv)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for index, size in enumerate(sizes):
            row: dict = {"size": size, "latency_us": None, "bw_GBps": None, "bibw_GBps": None, "wrong": 0, "iters": {}}
            wrong = 0
            for test in tests:
                if test != "latency" and size == 0:
                    continue
                n, w = plan_iterations(test, size, iters=iters, skip=skip, quick=quick, window=window)
                row["iters"][test] = [n, w]
                if test == "latency":
                    elapsed, bad = _latency(MPI, comm, bufs, rank, size, n, w)
                    row["latency_us"] = elapsed * 1e6 / (2 * n) if elapsed > 0 else None
                elif test == "bw":
                    elapsed, bad = _bw(MPI, comm, bufs, rank, size, n, w, window)
                    row["bw_GBps"] = size * window * n / elapsed / 1e9 if elapsed > 0 else None
                else:
                    elapsed, bad = _bibw(MPI, comm, bufs, rank, size, n, w, window)
                    row["bibw_GBps"] = 2 * size * window * n / elapsed / 1e9 if elapsed > 0 else None
                wrong += bad
            row["wrong"] = _sum_wrong(MPI, comm, np, rank, wrong)
            gc.collect()
            if rank == 0:
                rows.append(row)
                if progress is not None:
                    progress(index, len(sizes), row)
    finally:
        if gc_was_enabled:
            gc.enable()
    comm.Barrier()
    return rows


# ---------------------------------------------------------------- p2p-matrix suite


def plan_matrix_iterations(
    *, iters: int | None = None, skip: int | None = None, quick: bool = False
) -> tuple[tuple[int, int], tuple[int, int]]:
    """The ``(timed, warm-up)`` sample counts of the p2p-matrix suite.

    Args:
        iters: timed samples of both the warm messages and the local copies;
            None picks 20 (5 with ``quick``).
        skip: warm-up samples of both; None picks 3 messages and 2 copies (1 and 1
            with ``quick``).
        quick: the reduced counts.

    Returns:
        ``((warm_iters, warm_skip), (copy_iters, copy_skip))``.
    """
    defaults = _MATRIX_QUICK_REPS if quick else _MATRIX_REPS
    (wn, ww), (cn, cw) = (
        (max(1, int(iters)) if iters is not None else n, max(0, int(skip)) if skip is not None else w)
        for n, w in defaults
    )
    return (wn, ww), (cn, cw)


def _count_wrong_device(np, arr, expected) -> int:
    return int(np.count_nonzero(arr.get() != expected))


def _copy_time(np, mem: _DeviceMemory, size: int, pattern, reps: int, warmup: int, wtime) -> tuple[float, int]:
    """Median seconds of a device-to-device ``adapter.memcpy`` of ``size`` bytes on the
    current device, each waited for with ``stream_synchronize``; and the bytes of the
    destination that differ from ``pattern`` afterwards."""
    ad = mem.adapter
    if mem.stream is None:
        mem.stream = ad.stream_create()
    s = mem.stream
    src = ad.alloc(size)
    dst = ad.alloc(size)
    try:
        ad.memcpy(src, pattern.ctypes.data, size, s)
        ad.stream_synchronize(s)  # the host pattern must outlive the queued copy
        times = []
        for k in range(warmup + reps):
            t0 = wtime()
            ad.memcpy(dst, src, size, s)
            ad.stream_synchronize(s)
            if k >= warmup:
                times.append(wtime() - t0)
        back = np.empty(size, dtype=np.uint8)
        ad.memcpy(back.ctypes.data, dst, size, s)
        ad.stream_synchronize(s)
        wrong = int(np.count_nonzero(back != pattern))
    finally:
        ad.synchronize()
        ad.free(src)
        ad.free(dst)
    return statistics.median(times), wrong


def _matrix_sender(MPI, comm, np, mem: _DeviceMemory, size: int, samples: int, keep: list) -> None:
    """Rank 0: answer each 'go' of rank 1 with one message of ``size`` bytes from new buffers."""
    buf = mem.array(size)
    keep.append(buf)
    buf.set(_pattern(np, size, 0))
    mem.sync()
    go, msg = [np.zeros(0, dtype=np.uint8), MPI.BYTE], [buf, MPI.BYTE]
    recv, send = comm.Recv, comm.Send
    for _ in range(samples):
        recv(go, 1, _TAG_GO)
        send(msg, 1, _TAG_MATRIX)


def _matrix_receiver(MPI, comm, np, mem: _DeviceMemory, size: int, warm: tuple[int, int], keep: list):
    """Rank 1: cold sample, then ``skip + iters`` warm samples into new buffers.

    Returns:
        ``(cold seconds, warm sample seconds, wrong bytes)``.
    """
    n, w = warm
    buf = mem.array(size)
    keep.append(buf)
    expected = _pattern(np, size, 0)
    complement = ~expected
    buf.set(complement)
    mem.sync()
    go, msg = [np.zeros(0, dtype=np.uint8), MPI.BYTE], [buf, MPI.BYTE]
    send, recv, wtime = comm.Send, comm.Recv, MPI.Wtime

    def sample() -> float:
        t0 = wtime()
        send(go, 0, _TAG_GO)
        recv(msg, 0, _TAG_MATRIX)
        return wtime() - t0

    cold = sample()
    wrong = _count_wrong_device(np, buf, expected)
    times = []
    for k in range(w + n):
        if k == w + n - 1:  # the last sample lands in a buffer reset to the complement
            buf.set(complement)
            mem.sync()
        dt = sample()
        if k >= w:
            times.append(dt)
    wrong += _count_wrong_device(np, buf, expected)
    return cold, times, wrong


def run_p2p_matrix_pair(
    MPI,
    src_device: int,
    dst_device: int,
    sizes: Iterable[int] | None = None,
    *,
    buffer: str = "sim",
    iters: int | None = None,
    skip: int | None = None,
    quick: bool = False,
    comm=None,
    progress: Callable[[int, int, dict], None] | None = None,
) -> list[dict]:
    """Measure one ordered device pair of the p2p-matrix suite (nvbandwidth-style).

    Collective over ``comm``: every rank calls it.  Rank 0 binds ``src_device``
    (``adapter.set_device``) and sends; rank 1 binds ``dst_device`` and receives;
    other ranks only wait at the closing barrier.  Call it before this process has
    done anything on a device (binding comes first).  See the module docstring for
    what cold, warm and copy measure.

    Args:
        MPI: gpumpi's MPI module (``from gpumpi import MPI``).
        src_device: device of the sending rank.
        dst_device: device of the receiving rank (may equal ``src_device``).
        sizes: message sizes in bytes (each at least 1); None means
            :data:`MATRIX_SIZES` (:data:`MATRIX_QUICK_SIZES` with ``quick``).
        buffer: ``"sim"`` (simulated device, one device) or ``"cupy"`` (GPUs).
        iters: timed samples per size (messages and copies); see
            :func:`plan_matrix_iterations`.
        skip: warm-up samples per size.
        quick: fewer samples.
        comm: communicator (default ``MPI.COMM_WORLD``); needs at least 2 ranks.
        progress: called on rank 0 as ``progress(index, count, row)`` after each size.

    Returns:
        On rank 0, one dict per size: ``src_device``, ``dst_device``, ``size``,
        ``cold_GBps``, ``warm_GBps``, ``copy_GBps``, ``warm_pct_copy`` (warm as a
        percentage of copy), ``cold_s``, ``warm_s`` (median), ``copy_s`` (median),
        ``wrong`` and ``iters`` (``{"warm": [iters, skip], "copy": [iters, skip]}``).
        An empty list on other ranks.

    Raises:
        BenchError: not a device buffer kind, CuPy or a GPU missing, no such
            device, a size below 1, or fewer than 2 ranks.
    """
    check_buffer_kind(buffer, "p2p-matrix")
    if comm is None:
        comm = MPI.COMM_WORLD
    nranks = comm.Get_size()
    if nranks < 2:
        raise BenchError(f"the p2p-matrix suite needs 2 ranks (got {nranks})")
    sizes = list(MATRIX_QUICK_SIZES if quick else MATRIX_SIZES) if sizes is None else [int(s) for s in sizes]
    if not sizes or min(sizes) < 1:
        raise BenchError(f"p2p-matrix message sizes must be >= 1 byte (got {sizes})")
    warm, copy = plan_matrix_iterations(iters=iters, skip=skip, quick=quick)
    rank = comm.Get_rank()
    rows: list[dict] = []
    if rank > 1:
        comm.Barrier()
        return rows

    import numpy as np

    mem = _DeviceMemory(buffer, own=True)
    ndev = mem.adapter.device_count()
    for role, dev in (("source", src_device), ("destination", dst_device)):
        if not isinstance(dev, int) or not 0 <= dev < ndev:
            raise BenchError(f"p2p-matrix: no {role} device {dev!r} ({ndev} {buffer} device{'s' if ndev != 1 else ''})")
    mem.adapter.set_device(src_device if rank == 0 else dst_device)
    keep: list = []  # every buffer lives until the end: no reused address, no reused IPC handle
    stats = np.zeros(4, dtype=np.float64)  # rank 1 -> 0: cold s, warm median s, copy median s, wrong
    wtime = MPI.Wtime
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # one throwaway message pays the one-time setup (copy streams, interprocess events, slabs)
        if rank == 0:
            _matrix_sender(MPI, comm, np, mem, sizes[0], 1, keep)
        else:
            _matrix_receiver(MPI, comm, np, mem, sizes[0], (0, 0), keep)
        for index, size in enumerate(sizes):
            samples = 1 + warm[0] + warm[1]
            if rank == 0:
                _matrix_sender(MPI, comm, np, mem, size, samples, keep)
                comm.Recv([stats.view(np.uint8), MPI.BYTE], 1, _TAG_STATS)
                cold, warm_s, copy_s, wrong = (float(v) for v in stats)
                row = {
                    "src_device": src_device,
                    "dst_device": dst_device,
                    "size": size,
                    "cold_GBps": size / cold / 1e9 if cold > 0 else None,
                    "warm_GBps": size / warm_s / 1e9 if warm_s > 0 else None,
                    "copy_GBps": size / copy_s / 1e9 if copy_s > 0 else None,
                    "warm_pct_copy": 100.0 * copy_s / warm_s if warm_s > 0 and copy_s > 0 else None,
                    "cold_s": cold,
                    "warm_s": warm_s,
                    "copy_s": copy_s,
                    "wrong": int(wrong),
                    "iters": {"warm": list(warm), "copy": list(copy)},
                }
                rows.append(row)
                if progress is not None:
                    progress(index, len(sizes), row)
            else:
                cold, times, wrong = _matrix_receiver(MPI, comm, np, mem, size, warm, keep)
                pattern = _pattern(np, size, 1)
                copy_s, bad = _copy_time(np, mem, size, pattern, copy[0], copy[1], wtime)
                stats[:] = (cold, statistics.median(times), copy_s, wrong + bad)
                comm.Send([stats.view(np.uint8), MPI.BYTE], 0, _TAG_STATS)
            gc.collect()
        comm.Barrier()  # every copy out of, or into, the peer's buffers is over before they are freed
    finally:
        if gc_was_enabled:
            gc.enable()
        del keep[:]
        mem.release()
    return rows


# ---------------------------------------------------------------- pack suite


def parse_blocks(spec: str | None, quick: bool = False, nbytes: int = PACK_BYTES) -> list[int]:
    """Turn a ``--sizes`` argument of the pack suite into contiguous block sizes.

    Args:
        spec: ``"min:max"`` (filters :data:`PACK_BLOCKS`, or :data:`PACK_QUICK_BLOCKS`
            with ``quick``), a comma-separated list such as ``"1,8,1K"``, a single
            size, or None for the default sweep.
        quick: start from the ``--quick`` block sizes.
        nbytes: packed bytes per type; every block size must divide it.

    Returns:
        Sorted, de-duplicated block sizes in bytes.

    Raises:
        BenchError: malformed spec, an empty result, or a block size that is 0 or
            does not divide ``nbytes``.
    """
    base = PACK_QUICK_BLOCKS if quick else PACK_BLOCKS
    if spec is None or spec.strip() == "":
        blocks = list(base)
    elif ":" in spec:
        lo_text, _, hi_text = spec.partition(":")
        lo = parse_size(lo_text) if lo_text.strip() else 0
        hi = parse_size(hi_text) if hi_text.strip() else base[-1]
        if lo > hi:
            raise BenchError(f"bad --sizes {spec!r}: min {lo} > max {hi}")
        blocks = [b for b in base if lo <= b <= hi]
    else:
        blocks = [parse_size(part) for part in spec.split(",") if part.strip()]
    blocks = sorted(set(blocks))
    if not blocks:
        raise BenchError(f"--sizes {spec!r} selects no block size")
    for b in blocks:
        if b < 1 or nbytes % b:
            raise BenchError(f"pack block size {b} does not divide the {nbytes} packed bytes (use 1, 2, 4 ... {nbytes})")
    return blocks


def pack_type(MPI, family: str, block: int, nbytes: int = PACK_BYTES):
    """Build (not commit) a datatype that selects ``nbytes`` bytes in blocks of ``block``.

    The blocks start every ``2 * block`` bytes, so all three families touch the
    same bytes of a ``2 * nbytes`` buffer:

    * ``vector``: ``BYTE.Create_vector(nblocks, block, 2 * block)``;
    * ``indexed``: ``BYTE.Create_indexed`` with explicit lists of block lengths and
      displacements (one entry per block);
    * ``subarray``: the ``[nblocks, block]`` window at the origin of a C-ordered
      ``[nblocks, 2 * block]`` byte array.

    Raises:
        BenchError: unknown family, or ``block`` does not divide ``nbytes``.
    """
    if block < 1 or nbytes % block:
        raise BenchError(f"pack block size {block} does not divide the {nbytes} packed bytes")
    nblocks = nbytes // block
    if family == "vector":
        return MPI.BYTE.Create_vector(nblocks, block, 2 * block)
    if family == "indexed":
        return MPI.BYTE.Create_indexed([block] * nblocks, list(range(0, 2 * nbytes, 2 * block)))
    if family == "subarray":
        return MPI.BYTE.Create_subarray([nblocks, 2 * block], [nblocks, block], [0, 0], order=MPI.ORDER_C)
    raise BenchError(f"unknown pack type {family!r} (known: {', '.join(PACK_TYPES)})")


def _pack_source(np, nbytes: int):
    """The strided source: never 0, period 251, so gaps and blocks always differ."""
    return ((np.arange(nbytes, dtype=np.int64) * 131 + 7) % 251 + 1).astype(np.uint8)


def _median_call(fn, args: tuple, reps: int, warmup: int, wtime) -> tuple[float, object]:
    """Median seconds of ``reps`` timed calls ``fn(*args)`` after ``warmup`` untimed ones,
    and the last call's result."""
    result = None
    for _ in range(warmup):
        result = fn(*args)
    times = []
    for _ in range(reps):
        t0 = wtime()
        result = fn(*args)
        times.append(wtime() - t0)
    return statistics.median(times), result


def _pack_row(MPI, comm, np, family: str, block: int, nbytes: int, reps: int, warmup: int, src, ref) -> dict:
    """Measure and check one (type family, block size) of the pack suite on this rank."""
    wtime = MPI.Wtime
    nblocks = nbytes // block
    t0 = wtime()
    dtype = pack_type(MPI, family, block, nbytes)
    create = wtime() - t0
    try:
        lb, extent = dtype.Get_extent()
        # Pack and Unpack move len(buffer) // extent elements: give them exactly one
        inbuf = src[: lb + extent]
        out = np.empty(nbytes, dtype=np.uint8)
        out[:] = ~ref
        t0 = wtime()
        dtype.Commit()
        pos = dtype.Pack(inbuf, out, 0, comm)
        first = wtime() - t0
        wrong = 0 if dtype.Get_size() == nbytes else nbytes
        wrong += int(np.count_nonzero(out != ref)) if pos == nbytes else nbytes
        # pack: steady state into a buffer reset to the complement of the answer
        out[:] = ~ref
        t_pack, pos = _median_call(dtype.Pack, (inbuf, out, 0, comm), reps, warmup, wtime)
        wrong += int(np.count_nonzero(out != ref)) if pos == nbytes else nbytes
        # unpack: the reference bytes into a zeroed buffer; the gaps must stay zero
        back = np.zeros(2 * nbytes, dtype=np.uint8)
        t_unpack, pos = _median_call(dtype.Unpack, (ref, 0, back[: lb + extent], comm), reps, warmup, wtime)
        grid = back.reshape(nblocks, 2 * block)
        wrong += int(np.count_nonzero(grid[:, :block].ravel() != ref)) if pos == nbytes else nbytes
        wrong += int(np.count_nonzero(grid[:, block:]))
    finally:
        dtype.Free()
    return {
        "test": "pack",
        "type": family,
        "block": block,
        "bytes": nbytes,
        "lb": int(lb),
        "extent": int(extent),
        "pack_GBps": nbytes / t_pack / 1e9 if t_pack > 0 else None,
        "unpack_GBps": nbytes / t_unpack / 1e9 if t_unpack > 0 else None,
        "first_ms": first * 1e3,
        "create_ms": create * 1e3,
        "wrong": wrong,
        "reps": reps,
        "warmup": warmup,
    }


def _strided_send(MPI, comm, np, rank: int, block: int, nbytes: int, reps: int, warmup: int) -> dict:
    """Rank 0 sends ``nbytes`` of a strided vector to rank 1, which receives them
    contiguous: once as ``[buf, 1, vector]`` and once packed by NumPy + ``BYTE``."""
    nblocks = nbytes // block
    src = _pack_source(np, 2 * nbytes)
    ref = src.reshape(nblocks, 2 * block)[:, :block].ravel()
    ack = [np.zeros(4, dtype=np.uint8), MPI.BYTE]
    sync = _Buffers(np, [0], 1, False)
    dtype = MPI.BYTE.Create_vector(nblocks, block, 2 * block).Commit()
    lb, extent = dtype.Get_extent()
    times: dict[str, float | None] = {}
    wrong = 0
    try:
        if rank == 0:
            word = _word_for(block)
            wdt = np.dtype(f"u{word}")
            packed = np.empty(nbytes, dtype=np.uint8)
            src_words = src.view(wdt).reshape(nblocks, 2 * block // word)[:, : block // word]
            packed_words = packed.view(wdt).reshape(nblocks, block // word)
            send, recv = comm.Send, comm.Recv
            copyto = np.copyto

            def by_type():
                send([src, 1, dtype], 1, _TAG_STRIDED)
                recv(ack, 1, _TAG_ACK)

            def by_hand():
                copyto(packed_words, src_words)
                send([packed, MPI.BYTE], 1, _TAG_STRIDED)
                recv(ack, 1, _TAG_ACK)

            for mode, fn in (("dtype", by_type), ("manual", by_hand)):
                _pair_sync(MPI, comm, sync, rank)
                times[mode], _ = _median_call(fn, (), reps, warmup, MPI.Wtime)
        else:
            rbuf = np.zeros(nbytes, dtype=np.uint8)
            rmsg = [rbuf, MPI.BYTE]
            for _mode in ("dtype", "manual"):
                rbuf[:] = 0
                _pair_sync(MPI, comm, sync, rank)
                for _ in range(warmup + reps):
                    comm.Recv(rmsg, 0, _TAG_STRIDED)
                    comm.Send(ack, 0, _TAG_ACK)
                wrong += int(np.count_nonzero(rbuf != ref))
    finally:
        dtype.Free()
    wrong = _sum_wrong(MPI, comm, np, rank, wrong)
    return {
        "test": "strided-send",
        "type": "vector",
        "block": block,
        "bytes": nbytes,
        "lb": int(lb),
        "extent": int(extent),
        "dtype_GBps": nbytes / times["dtype"] / 1e9 if times.get("dtype") else None,
        "manual_GBps": nbytes / times["manual"] / 1e9 if times.get("manual") else None,
        "wrong": wrong,
        "reps": reps,
        "warmup": warmup,
    }


def _word_for(block: int) -> int:
    for w in (8, 4, 2):
        if block % w == 0:
            return w
    return 1


def run_pack(
    MPI,
    blocks: Iterable[int] | None = None,
    *,
    iters: int | None = None,
    skip: int | None = None,
    quick: bool = False,
    buffer: str = "numpy",
    types: Sequence[str] = PACK_TYPES,
    nbytes: int = PACK_BYTES,
    send_blocks: Sequence[int] | None = None,
    send_bytes: int = STRIDED_SEND_BYTES,
    comm=None,
    progress: Callable[[int, int, dict], None] | None = None,
) -> list[dict]:
    """Run the TEMPI-style datatype pack/unpack suite (and strided-send).

    Collective over ``comm``: every rank calls it.  Rank 0 packs and unpacks; with
    2 or more ranks, ranks 0 and 1 then run strided-send; the other ranks only wait
    at the closing barrier.

    Args:
        MPI: the MPI module to measure (``gpumpi.MPI`` or ``mpi4py.MPI``).
        blocks: contiguous block sizes in bytes, each dividing ``nbytes``; None
            means :data:`PACK_BLOCKS` (:data:`PACK_QUICK_BLOCKS` with ``quick``).
        iters: timed repetitions per measurement (the median is reported); None
            picks 25 (pack) and 10 (strided-send), fewer with ``quick``.
        skip: warm-up repetitions per measurement; None picks the default.
        quick: fewer block sizes and repetitions.
        buffer: buffer kind; only ``"numpy"`` (host memory).
        types: type families, from :data:`PACK_TYPES`.
        nbytes: packed bytes per type (TEMPI's 1 MiB objects).
        send_blocks: block sizes of strided-send; None means
            :data:`STRIDED_SEND_BLOCKS`; empty skips strided-send.
        send_bytes: bytes of one strided-send message.
        comm: communicator (default ``MPI.COMM_WORLD``); one rank is enough.
        progress: called on rank 0 as ``progress(index, count, row)`` after each row.

    Returns:
        On rank 0, one dict per measurement.  Pack rows: ``test="pack"``,
        ``type``, ``block``, ``bytes``, ``lb``, ``extent``, ``pack_GBps``,
        ``unpack_GBps``, ``first_ms`` (``Commit`` + first ``Pack`` of a new type),
        ``create_ms`` (the constructor call), ``wrong``, ``reps``, ``warmup``.
        Strided-send rows: ``test="strided-send"``, ``type``, ``block``, ``bytes``,
        ``lb``, ``extent``, ``dtype_GBps``, ``manual_GBps``, ``wrong``, ``reps``,
        ``warmup``.  ``wrong`` counts packed bytes that differ from NumPy's answer,
        unpacked bytes that differ or gap bytes that were written; a wrong type
        size or returned position counts every byte.  An empty list on other ranks.

    Raises:
        BenchError: bad buffer kind, unknown type family, bad block or byte counts.
    """
    check_buffer_kind(buffer, "pack")
    for t in types:
        if t not in PACK_TYPES:
            raise BenchError(f"unknown pack type {t!r} (known: {', '.join(PACK_TYPES)})")
    if nbytes < 1:
        raise BenchError(f"pack bytes must be >= 1 (got {nbytes})")
    blocks = list(PACK_QUICK_BLOCKS if quick else PACK_BLOCKS) if blocks is None else [int(b) for b in blocks]
    send_blocks = list(STRIDED_SEND_BLOCKS) if send_blocks is None else [int(b) for b in send_blocks]
    for b in blocks:
        if b < 1 or nbytes % b:
            raise BenchError(f"pack block size {b} does not divide the {nbytes} packed bytes")
    for b in send_blocks:
        if b < 1 or send_bytes % b:
            raise BenchError(f"strided-send block size {b} does not divide the {send_bytes} bytes sent")
    default_reps = (_PACK_QUICK_REPS, _SEND_QUICK_REPS) if quick else (_PACK_REPS, _SEND_REPS)
    (pack_reps, pack_warm), (send_reps, send_warm) = (
        (max(1, int(iters)) if iters is not None else n, max(0, int(skip)) if skip is not None else w)
        for n, w in default_reps
    )
    if comm is None:
        comm = MPI.COMM_WORLD
    nranks, rank = comm.Get_size(), comm.Get_rank()
    if nranks < 2:
        send_blocks = []
    rows: list[dict] = []
    if rank > 1 or (rank == 1 and not send_blocks):
        comm.Barrier()
        return rows

    import numpy as np

    count = (len(types) * len(blocks) if rank == 0 else 0) + len(send_blocks)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if rank == 0:
            src = _pack_source(np, 2 * nbytes)
            for block in blocks:
                ref = src.reshape(nbytes // block, 2 * block)[:, :block].ravel()
                for family in types:
                    row = _pack_row(MPI, comm, np, family, block, nbytes, pack_reps, pack_warm, src, ref)
                    gc.collect()
                    rows.append(row)
                    if progress is not None:
                        progress(len(rows) - 1, count, row)
            del src
        for block in send_blocks:
            row = _strided_send(MPI, comm, np, rank, block, send_bytes, send_reps, send_warm)
            gc.collect()
            if rank == 0:
                rows.append(row)
                if progress is not None:
                    progress(len(rows) - 1, count, row)
    finally:
        if gc_was_enabled:
            gc.enable()
    comm.Barrier()
    return rows


# ---------------------------------------------------------------- reporting


def library_version(MPI) -> str:
    """First line of ``MPI.Get_library_version()``, or ``"unknown"``."""
    try:
        text = MPI.Get_library_version()
    except Exception:  # a partial MPI module: report, don't fail the benchmark
        return "unknown"
    lines = str(text).strip().splitlines()
    return " ".join(lines[0].split()) if lines else "unknown"


def metadata(
    MPI,
    impl: str,
    *,
    suite: str = "p2p",
    nranks: int,
    buffer: str = "numpy",
    window: int = WINDOW,
    distinct_recv: bool = False,
    transport: str = "auto",
    transports_env: str | None = None,
    devices: Sequence[int] | int | None = None,
) -> dict:
    """Describe a run: implementation, MPI library, ranks, buffers (for JSON and headers).

    Args:
        MPI: the measured MPI module.
        impl: ``"gpumpi"`` or ``"mpi4py"``.
        suite: ``"p2p"``, ``"pack"`` or ``"p2p-matrix"``.
        nranks: ranks of the run.
        buffer: buffer kind.
        window, distinct_recv: the p2p bandwidth settings.
        transport: ``--transport`` (recorded for device buffers and p2p-matrix).
        transports_env: ``GPUMPI_TRANSPORTS`` as the ranks read it (None: not known).
        devices: p2p: the devices of ranks 0 and 1; p2p-matrix: the node's device count.

    Returns:
        A dict; the transport keys appear only for device buffers.
    """
    device_keys = {}
    if buffer in DEVICE_BUFFER_KINDS or suite == "p2p-matrix":
        device_keys = {"transport": transport, "transports_env": transports_env, "devices": devices}
    base = {"suite": suite, "impl": impl, "library": library_version(MPI), "nranks": nranks, "buffer": buffer}
    if suite == "p2p-matrix":
        return {**base, **device_keys,
                "units": {"size": "B", "bandwidth": "GB/s (1e9 B/s)", "time": "s", "warm_pct_copy": "%"}}
    if suite == "pack":
        return {**base, "units": {"block": "B", "bandwidth": "GB/s (1e9 B/s)", "first": "ms"}}
    return {**base, "window": window, "distinct_recv": distinct_recv, **device_keys,
            "units": {"size": "B", "latency": "us", "bandwidth": "GB/s (1e9 B/s)"}}


def _method_line(meta: dict | None) -> str:
    meta = meta or {}
    window = meta.get("window", WINDOW)
    recv = "distinct receive slots" if meta.get("distinct_recv") else "one receive buffer"
    return (
        "# latency: ping-pong, one-way = half round trip; GB = 1e9 B\n"
        f"# bw: window of {window} Isend + ack ({recv}); bibw: window of {window} each way, both directions counted"
    )


_BUFFER_WORDS = {
    "numpy": "host numpy buffers",
    "sim": "sim buffers (simulated device memory, SimDeviceArray)",
    "cupy": "cupy buffers (CUDA device memory)",
}

# why --compare mpi4py runs on host numpy buffers when gpumpi runs on device buffers
_REF_HOST_WHY = {
    "sim": "mpi4py cannot take gpumpi's simulated device memory",
    "cupy": "mpi4py takes CuPy arrays only over a CUDA-aware MPI, which pip's MPICH is not",
}


def _buffer_words(buffer: str, devices=None) -> str:
    words = _BUFFER_WORDS.get(buffer, f"{buffer} buffers")
    if buffer == "cupy" and isinstance(devices, (list, tuple)) and len(devices) >= 2:
        words += f", rank 0 on GPU {devices[0]}, rank 1 on GPU {devices[1]}"
    return words


def transport_words(meta: dict | None) -> str:
    """The ``# device transport: ...`` header line of a run on device buffers."""
    meta = meta or {}
    transport = meta.get("transport", "auto")
    env = meta.get("transports_env")
    if transport == "auto":
        if env:
            return f"# device transport: auto, with GPUMPI_TRANSPORTS={env} from the environment"
        return "# device transport: auto (gpumpi's choice: cuda_ipc where it can, else staging)"
    forced = {"staging": "every device message is staged through host memory",
              "cuda_ipc": "cuda_ipc preferred, staging where IPC is impossible"}.get(transport, transport)  # fmt: skip
    return f"# device transport: {transport} (GPUMPI_TRANSPORTS={env or 'device:' + transport}: {forced})"


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def format_columns(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]]) -> list[str]:
    """Right-align cells under two-line headers.

    Args:
        columns: ``(name, unit)`` pairs; unit may be ``""``.
        rows: rows of already formatted cells.

    Returns:
        Lines; the two header lines start with ``#``.
    """
    widths = []
    for i, (name, unit) in enumerate(columns):
        w = max(len(name), len(unit), *(len(r[i]) for r in rows)) if rows else max(len(name), len(unit))
        widths.append(w)
    widths[0] = max(widths[0] + 1, 9)  # room for the leading '#'

    def line(cells):
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths)).rstrip()

    out = ["#" + line([n for n, _ in columns])[1:], "#" + line([u for _, u in columns])[1:]]
    out.extend(line(r) for r in rows)
    return out


def format_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format p2p results as an aligned table with a descriptive header.

    Args:
        rows: results of :func:`run_p2p`.
        meta: the run's :func:`metadata`; None prints only the columns.

    Returns:
        The table text, ending with a ``# Wrong values`` footer.  Pack-suite rows
        (or ``meta["suite"] == "pack"``) go to :func:`format_pack_table`.
    """
    if (meta and meta.get("suite") == "pack") or any("test" in r for r in rows):
        return format_pack_table(rows, meta)
    if (meta and meta.get("suite") == "p2p-matrix") or any("src_device" in r for r in rows):
        return format_matrix_table(rows, meta)
    out = []
    if meta:
        buffer = meta.get("buffer", "numpy")
        words = _buffer_words(buffer, meta.get("devices"))
        out.append(f"# {meta['impl']} {meta.get('suite', 'p2p')}, {meta['nranks']} ranks, {words}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        if buffer in DEVICE_BUFFER_KINDS:
            out.append(transport_words(meta))
    out.append(_method_line(meta))
    columns = [("size", "(B)"), ("latency", "(us)"), ("bw", "(GB/s)"), ("bibw", "(GB/s)"), ("#wrong", "")]
    cells = [
        [
            str(r["size"]),
            _fmt(r.get("latency_us"), ".2f"),
            _fmt(r.get("bw_GBps"), ".4f"),
            _fmt(r.get("bibw_GBps"), ".4f"),
            str(r.get("wrong", 0)),
        ]
        for r in rows
    ]
    out.extend(format_columns(columns, cells))
    out.append(_wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def _wrong_footer(total: int) -> str:
    return f"# Wrong values : {total} {'OK' if total == 0 else 'FAILED'}"


def ratio(numerator, denominator) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None:
        return None
    if denominator == 0:
        return None
    return numerator / denominator


def compare_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two runs size by size and compute ratios where >1 means ``rows`` is better.

    Args:
        rows: results of the implementation under test (e.g. gpumpi).
        ref_rows: results of the reference (e.g. mpi4py).

    Returns:
        One dict per size present in both: ``size``; ``latency_us``/``ref_latency_us``
        and ``speedup = ref_latency / latency``; ``bw_GBps``/``ref_bw_GBps`` and
        ``bw_ratio = bw / ref_bw``; the same for ``bibw``; ``wrong``/``ref_wrong``.
        Pack-suite rows go to :func:`compare_pack_results`.
    """
    if any("test" in r for r in rows):
        return compare_pack_results(rows, ref_rows)
    ref = {r["size"]: r for r in ref_rows}
    out = []
    for r in rows:
        o = ref.get(r["size"])
        if o is None:
            continue
        out.append(
            {
                "size": r["size"],
                "latency_us": r.get("latency_us"),
                "ref_latency_us": o.get("latency_us"),
                "speedup": ratio(o.get("latency_us"), r.get("latency_us")),
                "bw_GBps": r.get("bw_GBps"),
                "ref_bw_GBps": o.get("bw_GBps"),
                "bw_ratio": ratio(r.get("bw_GBps"), o.get("bw_GBps")),
                "bibw_GBps": r.get("bibw_GBps"),
                "ref_bibw_GBps": o.get("bibw_GBps"),
                "bibw_ratio": ratio(r.get("bibw_GBps"), o.get("bibw_GBps")),
                "wrong": int(r.get("wrong", 0)),
                "ref_wrong": int(o.get("wrong", 0)),
            }
        )
    return out


def format_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_results` as one aligned table.

    Args:
        merged: the paired rows.
        meta: metadata of the implementation under test.
        ref_meta: metadata of the reference implementation.

    Returns:
        The table text.  The pack suite goes to :func:`format_pack_compare_table`.
    """
    if meta.get("suite") == "pack":
        return format_pack_compare_table(merged, meta, ref_meta)
    a, b = meta["impl"], ref_meta["impl"]
    if a == b:
        b = b + "'"
    buf, ref_buf = meta.get("buffer", "numpy"), ref_meta.get("buffer", "numpy")
    if buf == ref_buf:
        buffers = _buffer_words(buf, meta.get("devices"))
    else:
        mine, theirs = _buffer_words(buf, meta.get("devices")), _buffer_words(ref_buf, ref_meta.get("devices"))
        buffers = f"{a} on {mine}, {b} on {theirs}"
    out = [
        f"# {a} vs {b} {meta.get('suite', 'p2p')}, {meta['nranks']} ranks, {buffers}",
        f"# {a} MPI library: {meta.get('library', 'unknown')}",
        f"# {b} MPI library: {ref_meta.get('library', 'unknown')}",
    ]
    for side, m, other in ((a, meta, ref_buf), (b, ref_meta, buf)):
        kind = m.get("buffer", "numpy")
        if kind in DEVICE_BUFFER_KINDS:
            out.append(transport_words(m).replace("# device transport", f"# {side} device transport", 1))
        if kind != other and other in _REF_HOST_WHY and kind == "numpy":
            out.append(f"# {side} ran on host numpy buffers: {_REF_HOST_WHY[other]}; "
                       "the ratios compare device-to-device with host-to-host messages")
    out += [
        _method_line(meta),
        f"# speedup = {b} latency / {a} latency; bw ratio = {a} bw / {b} bw; >1 means {a} is better",
    ]
    columns = [
        ("size", "(B)"),
        (f"lat {a}", "(us)"),
        (f"lat {b}", "(us)"),
        ("speedup", "(x)"),
        (f"bw {a}", "(GB/s)"),
        (f"bw {b}", "(GB/s)"),
        ("bw ratio", "(x)"),
        (f"bibw {a}", "(GB/s)"),
        (f"bibw {b}", "(GB/s)"),
        ("bibw ratio", "(x)"),
        ("#wrong", ""),
    ]
    cells = [
        [
            str(m["size"]),
            _fmt(m["latency_us"], ".2f"),
            _fmt(m["ref_latency_us"], ".2f"),
            _fmt(m["speedup"], ".2f"),
            _fmt(m["bw_GBps"], ".4f"),
            _fmt(m["ref_bw_GBps"], ".4f"),
            _fmt(m["bw_ratio"], ".2f"),
            _fmt(m["bibw_GBps"], ".4f"),
            _fmt(m["ref_bibw_GBps"], ".4f"),
            _fmt(m["bibw_ratio"], ".2f"),
            str(m["wrong"] + m["ref_wrong"]),
        ]
        for m in merged
    ]
    out.extend(format_columns(columns, cells))
    out.append(_wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


def format_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# mpi4py p2p [3/5] 65536 B: lat 12.30 us ...``."""
    if "test" in row:
        return format_pack_progress(index, count, row, impl)
    if "src_device" in row:
        return format_matrix_progress(index, count, row, impl)
    who = f"{impl} p2p" if impl else "p2p"
    parts = [f"# {who} [{index + 1}/{count}] {row['size']} B:"]
    if row.get("latency_us") is not None:
        parts.append(f"lat {row['latency_us']:.2f} us")
    if row.get("bw_GBps") is not None:
        parts.append(f"bw {row['bw_GBps']:.4f} GB/s")
    if row.get("bibw_GBps") is not None:
        parts.append(f"bibw {row['bibw_GBps']:.4f} GB/s")
    if row.get("wrong"):
        parts.append(f"WRONG {row['wrong']}")
    return " ".join(parts)


# ---------------------------------------------------------------- p2p-matrix reporting


def _matrix_rows_sorted(rows: Sequence[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["src_device"], r["dst_device"], r["size"]))


def _matrix_method_lines(rows: Sequence[dict], meta: dict | None = None) -> list[str]:
    warms = sorted({tuple(r["iters"]["warm"]) for r in rows if r.get("iters")})
    copies = sorted({tuple(r["iters"]["copy"]) for r in rows if r.get("iters")})
    warm = "; ".join(f"median of {n} after {w} warm-up" for n, w in warms) or "median"
    copy = "; ".join(f"median of {n} after {w} warm-up" for n, w in copies) or "median"
    return [
        "# pairs: rank 0 sends from GPU src, rank 1 receives on GPU dst (one 2-rank job per ordered pair); GB = 1e9 B",
        "# a message is timed on the receiver, from its zero-byte 'go' to the sender until Recv returns",
        "# cold: the first message of newly allocated buffers ("
        + ("" if (meta or {}).get("transport") == "staging" else "with cuda_ipc it exports and opens their IPC handle; ")
        + "one-time setup paid earlier by a throwaway message)",
        f"# warm: the same buffers again, {warm}",
        f"# copy: adapter.memcpy device to device of the same size on GPU dst, to stream_synchronize; {copy}",
        "# warm/copy: warm bandwidth as a percentage of copy bandwidth",
    ]


def _matrix_grid_lines(rows: Sequence[dict], ndev: int) -> list[str]:
    """nvbandwidth-style grids of warm GB/s, one per size: rows = src, columns = dst."""
    out = []
    for size in sorted({r["size"] for r in rows}):
        cell = {(r["src_device"], r["dst_device"]): r.get("warm_GBps") for r in rows if r["size"] == size}
        out.append(f"# warm bandwidth (GB/s) at {size} B: rows = src GPU, columns = dst GPU")
        columns = [("src\\dst", "")] + [(str(j), "") for j in range(ndev)]
        cells = [[str(i)] + [_fmt(cell.get((i, j)), ".2f") for j in range(ndev)] for i in range(ndev)]
        out.extend(ln for ln in format_columns(columns, cells) if ln.strip("# "))
    return out


def format_matrix_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format p2p-matrix results (:func:`run_p2p_matrix_pair`, all pairs) as an aligned table.

    Args:
        rows: rows of every measured pair.
        meta: the run's :func:`metadata` (``devices`` is the node's device count);
            None prints only the columns.

    Returns:
        The header, one line per (src, dst, size), a warm-bandwidth grid per size
        when there is more than one device, and a ``# Wrong values`` footer.
    """
    rows = _matrix_rows_sorted(rows)
    out = []
    ndev = None
    if meta:
        ndev = meta.get("devices")
        kind = meta.get("buffer", "sim")
        what = "simulated device" if kind == "sim" else "GPU"
        count = f"{ndev} {what}{'s' if ndev != 1 else ''}" if isinstance(ndev, int) else "devices"
        out.append(f"# {meta['impl']} p2p-matrix, {count}, {_buffer_words(kind)}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        out.append(transport_words(meta))
    out.extend(_matrix_method_lines(rows, meta))
    columns = [("src", ""), ("dst", ""), ("size", "(B)"), ("cold", "(GB/s)"), ("warm", "(GB/s)"), ("copy", "(GB/s)"),
               ("warm/copy", "(%)"), ("#wrong", "")]  # fmt: skip
    cells = [
        [str(r["src_device"]), str(r["dst_device"]), str(r["size"]), _fmt(r.get("cold_GBps"), ".4f"),
         _fmt(r.get("warm_GBps"), ".4f"), _fmt(r.get("copy_GBps"), ".4f"), _fmt(r.get("warm_pct_copy"), ".1f"),
         str(r.get("wrong", 0))]
        for r in rows
    ]  # fmt: skip
    out.extend(format_columns(columns, cells))
    if ndev is None:
        ndev = 1 + max([max(r["src_device"], r["dst_device"]) for r in rows] or [0])
    if ndev > 1:
        out.extend(_matrix_grid_lines(rows, ndev))
    out.append(_wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def format_matrix_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# gpumpi p2p-matrix 0->1 [2/3] 16777216 B: cold ... GB/s ...``."""
    who = f"{impl} p2p-matrix" if impl else "p2p-matrix"
    parts = [f"# {who} {row['src_device']}->{row['dst_device']} [{index + 1}/{count}] {row['size']} B:"]
    for key, label in (("cold_GBps", "cold"), ("warm_GBps", "warm"), ("copy_GBps", "copy")):
        if row.get(key) is not None:
            parts.append(f"{label} {row[key]:.4f} GB/s")
    if row.get("warm_pct_copy") is not None:
        parts.append(f"warm/copy {row['warm_pct_copy']:.1f}%")
    if row.get("wrong"):
        parts.append(f"WRONG {row['wrong']}")
    return " ".join(parts)


# ---------------------------------------------------------------- pack reporting


def _ranks_words(nranks) -> str:
    return f"{nranks} rank" if int(nranks) == 1 else f"{nranks} ranks"


def _pack_rows(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r.get("test") == "pack"]


def _send_rows(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r.get("test") == "strided-send"]


def _reps_words(rows: Sequence[dict]) -> str:
    pairs = sorted({(int(r.get("reps", 0)), int(r.get("warmup", 0))) for r in rows})
    return "; ".join(f"median of {n} after {w} warm-up" for n, w in pairs) or "median"


def _pack_method_lines(rows: Sequence[dict]) -> list[str]:
    packs = _pack_rows(rows)
    nbytes = packs[0]["bytes"] if packs else PACK_BYTES
    return [
        f"# pack/unpack: Datatype.Pack/Unpack of {nbytes} packed bytes in blocks of `block` B every 2*block B; "
        f"{_reps_words(packs)}; GB = 1e9 B",
        "# types: vector = Create_vector; indexed = Create_indexed (one displacement per block); "
        "subarray = 2-D Create_subarray",
        "# first: Commit + first Pack of a new type (plan building, kernel compile); create: the constructor call",
    ]


def _send_method_lines(rows: Sequence[dict], meta: dict | None) -> list[str]:
    sends = _send_rows(rows)
    if not sends:
        if meta and int(meta.get("nranks", 2)) < 2:
            return ["# strided-send: skipped (needs 2 ranks)"]
        return []
    return [
        f"# strided-send: rank 0 sends {sends[0]['bytes']} B of a vector (block B every 2*block B) to rank 1, "
        f"received contiguous; {_reps_words(sends)}",
        "# dtype = Send([buf, 1, vector]); manual = NumPy copy into a contiguous array + Send of BYTE",
    ]


def format_pack_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format pack-suite results (:func:`run_pack`) as aligned tables.

    Args:
        rows: results of :func:`run_pack`.
        meta: the run's :func:`metadata`; None prints only the columns.

    Returns:
        The pack table, then the strided-send table (or a note that it was
        skipped), ending with a ``# Wrong values`` footer.
    """
    out = []
    if meta:
        out.append(f"# {meta['impl']} pack, {_ranks_words(meta['nranks'])}, {_buffer_words(meta.get('buffer', 'numpy'))}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
    packs, sends = _pack_rows(rows), _send_rows(rows)
    if packs:
        out.extend(_pack_method_lines(rows))
        columns = [("type", ""), ("block", "(B)"), ("extent", "(B)"), ("pack", "(GB/s)"), ("unpack", "(GB/s)"),
                   ("first", "(ms)"), ("create", "(ms)"), ("#wrong", "")]  # fmt: skip
        cells = [
            [r["type"], str(r["block"]), str(r["extent"]), _fmt(r.get("pack_GBps"), ".4f"),
             _fmt(r.get("unpack_GBps"), ".4f"), _fmt(r.get("first_ms"), ".3f"), _fmt(r.get("create_ms"), ".3f"),
             str(r.get("wrong", 0))]
            for r in packs
        ]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.extend(_send_method_lines(rows, meta))
    if sends:
        columns = [("block", "(B)"), ("dtype", "(GB/s)"), ("manual", "(GB/s)"), ("#wrong", "")]
        cells = [
            [str(r["block"]), _fmt(r.get("dtype_GBps"), ".4f"), _fmt(r.get("manual_GBps"), ".4f"), str(r.get("wrong", 0))]
            for r in sends
        ]
        out.extend(format_columns(columns, cells))
    out.append(_wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def compare_pack_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two pack-suite runs by (test, type, block); ratios > 1 mean ``rows`` is better.

    Returns:
        One dict per measurement present in both: ``test``, ``type``, ``block``,
        ``bytes``; ``lb``/``extent`` and ``ref_lb``/``ref_extent`` with
        ``extent_ok`` (both agree); for pack rows ``pack_GBps``/``ref_pack_GBps``/
        ``pack_ratio``, the same for ``unpack``, ``first_ms``/``ref_first_ms`` and
        ``first_speedup = ref_first / first``, ``create_ms``/``ref_create_ms``; for
        strided-send rows ``dtype_GBps``/``ref_dtype_GBps``/``dtype_ratio`` and the
        same for ``manual``; ``wrong``/``ref_wrong``.
    """
    ref = {(r.get("test"), r.get("type"), r.get("block")): r for r in ref_rows}
    out = []
    for r in rows:
        o = ref.get((r.get("test"), r.get("type"), r.get("block")))
        if o is None:
            continue
        m = {
            "test": r["test"],
            "type": r["type"],
            "block": r["block"],
            "bytes": r.get("bytes"),
            "lb": r.get("lb"),
            "extent": r.get("extent"),
            "ref_lb": o.get("lb"),
            "ref_extent": o.get("extent"),
            "extent_ok": (r.get("lb"), r.get("extent")) == (o.get("lb"), o.get("extent")),
            "reps": r.get("reps"),
            "warmup": r.get("warmup"),
        }
        if r["test"] == "pack":
            for key in ("pack", "unpack"):
                m[f"{key}_GBps"] = r.get(f"{key}_GBps")
                m[f"ref_{key}_GBps"] = o.get(f"{key}_GBps")
                m[f"{key}_ratio"] = ratio(r.get(f"{key}_GBps"), o.get(f"{key}_GBps"))
            m["first_ms"], m["ref_first_ms"] = r.get("first_ms"), o.get("first_ms")
            m["first_speedup"] = ratio(o.get("first_ms"), r.get("first_ms"))
            m["create_ms"], m["ref_create_ms"] = r.get("create_ms"), o.get("create_ms")
        else:
            for key in ("dtype", "manual"):
                m[f"{key}_GBps"] = r.get(f"{key}_GBps")
                m[f"ref_{key}_GBps"] = o.get(f"{key}_GBps")
                m[f"{key}_ratio"] = ratio(r.get(f"{key}_GBps"), o.get(f"{key}_GBps"))
        m["wrong"] = int(r.get("wrong", 0))
        m["ref_wrong"] = int(o.get("wrong", 0))
        out.append(m)
    return out


def format_pack_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_pack_results` as aligned tables with ratio columns."""
    a, b = meta["impl"], ref_meta["impl"]
    if a == b:
        b = b + "'"
    nranks = min(int(meta.get("nranks", 1)), int(ref_meta.get("nranks", 1)))
    out = [
        f"# {a} vs {b} pack, {_ranks_words(meta['nranks'])}, {_buffer_words(meta.get('buffer', 'numpy'))}",
        f"# {a} MPI library: {meta.get('library', 'unknown')}",
        f"# {b} MPI library: {ref_meta.get('library', 'unknown')}",
    ]
    packs, sends = _pack_rows(merged), _send_rows(merged)
    if packs:
        out.extend(_pack_method_lines(packs))
        out.append(f"# ratio = {a} GB/s / {b} GB/s; first speedup = {b} first / {a} first; >1 means {a} is better")
        columns = [
            ("type", ""), ("block", "(B)"),
            (f"pack {a}", "(GB/s)"), (f"pack {b}", "(GB/s)"), ("pack ratio", "(x)"),
            (f"unpack {a}", "(GB/s)"), (f"unpack {b}", "(GB/s)"), ("unpack ratio", "(x)"),
            (f"first {a}", "(ms)"), (f"first {b}", "(ms)"), ("first speedup", "(x)"),
            ("#wrong", ""),
        ]  # fmt: skip
        cells = [
            [m["type"], str(m["block"]),
             _fmt(m["pack_GBps"], ".4f"), _fmt(m["ref_pack_GBps"], ".4f"), _fmt_ratio(m["pack_ratio"]),
             _fmt(m["unpack_GBps"], ".4f"), _fmt(m["ref_unpack_GBps"], ".4f"), _fmt_ratio(m["unpack_ratio"]),
             _fmt(m["first_ms"], ".3f"), _fmt(m["ref_first_ms"], ".3f"), _fmt_ratio(m["first_speedup"]),
             str(m["wrong"] + m["ref_wrong"])]
            for m in packs
        ]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.extend(_send_method_lines(sends, {"nranks": nranks}))
    if sends:
        out.append(f"# ratio = {a} GB/s / {b} GB/s; >1 means {a} is better")
        columns = [
            ("block", "(B)"),
            (f"dtype {a}", "(GB/s)"), (f"dtype {b}", "(GB/s)"), ("dtype ratio", "(x)"),
            (f"manual {a}", "(GB/s)"), (f"manual {b}", "(GB/s)"), ("manual ratio", "(x)"),
            ("#wrong", ""),
        ]  # fmt: skip
        cells = [
            [str(m["block"]),
             _fmt(m["dtype_GBps"], ".4f"), _fmt(m["ref_dtype_GBps"], ".4f"), _fmt_ratio(m["dtype_ratio"]),
             _fmt(m["manual_GBps"], ".4f"), _fmt(m["ref_manual_GBps"], ".4f"), _fmt_ratio(m["manual_ratio"]),
             str(m["wrong"] + m["ref_wrong"])]
            for m in sends
        ]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.append(_extent_footer(merged, a, b))
    out.append(_wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


def _fmt_ratio(value) -> str:
    """Two decimals, or two significant digits below 0.1 (a 1000x slowdown is not 0.00)."""
    if value is not None and 0 < value < 0.1:
        return _fmt(value, ".2g")
    return _fmt(value, ".2f")


def _extent_footer(merged: Sequence[dict], a: str, b: str) -> str:
    bad = [m for m in merged if m.get("extent_ok") is False]
    if not bad:
        return f"# Extents : {a} and {b} agree on all {len(merged)} types OK"
    what = "; ".join(
        f"{m['type']} {m['block']} B: ({m['lb']}, {m['extent']}) vs ({m['ref_lb']}, {m['ref_extent']})" for m in bad
    )
    return f"# Extents : {len(bad)} differ FAILED ({what})"


def format_pack_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# gpumpi pack [2/33] indexed 1 B: pack 0.95 GB/s ...``."""
    who = f"{impl} pack" if impl else "pack"
    head = row["type"] if row.get("test") == "pack" else f"{row.get('test')} {row['type']}"
    parts = [f"# {who} [{index + 1}/{count}] {head} {row['block']} B:"]
    for key, label in (("pack_GBps", "pack"), ("unpack_GBps", "unpack"), ("dtype_GBps", "dtype"), ("manual_GBps", "manual")):
        if row.get(key) is not None:
            parts.append(f"{label} {row[key]:.4f} GB/s")
    if row.get("first_ms") is not None:
        parts.append(f"first {row['first_ms']:.3f} ms")
    if row.get("wrong"):
        parts.append(f"WRONG {row['wrong']}")
    return " ".join(parts)


def write_json(path: str, document: dict) -> None:
    """Write a results document (metadata plus ``results`` rows) as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2, sort_keys=False)
        f.write("\n")


def read_json(path: str) -> dict:
    """Read a document written by :func:`write_json`."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_csv(path: str, rows: Sequence[dict], extra: dict | None = None) -> None:
    """Write result rows as CSV, one row per size; nested ``iters`` are flattened.

    Args:
        path: output file.
        rows: results of :func:`run_p2p` or :func:`compare_results`.
        extra: constant columns prepended to every row (e.g. ``{"impl": "mpi4py"}``).
    """
    flat = []
    for r in rows:
        d = dict(extra or {})
        for k, v in r.items():
            if k == "iters" and isinstance(v, dict):
                for test, (n, w) in v.items():
                    d[f"iters_{test}"] = n
                    d[f"skip_{test}"] = w
            else:
                d[k] = "" if v is None else v
        flat.append(d)
    fields: list[str] = []
    for d in flat:
        for k in d:
            if k not in fields:
                fields.append(k)
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(flat)


def stderr_progress(impl: str) -> Callable[[int, int, dict], None]:
    """A :func:`run_p2p` / :func:`run_pack` progress callback that prints one line per size to stderr."""

    def report(index: int, count: int, row: dict) -> None:
        print(format_progress(index, count, row, impl), file=sys.stderr, flush=True)

    return report
