"""Benchmark suites for ``gpumpi bench`` (L6): ``p2p`` and ``pack``.

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
SUITES = ("p2p", "pack")
#: Buffer kinds that the suites accept today.
BUFFER_KINDS = ("numpy",)
#: Buffer kinds that later versions will add (a clear "not supported yet" error).
FUTURE_BUFFER_KINDS = ("cupy", "numba", "sim")
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


def check_buffer_kind(buffer: str) -> None:
    """Raise :class:`BenchError` unless ``buffer`` is a supported buffer kind."""
    if buffer in BUFFER_KINDS:
        return
    if buffer in FUTURE_BUFFER_KINDS:
        raise BenchError(f"buffer kind {buffer!r} not supported yet")
    raise BenchError(f"unknown buffer kind {buffer!r} (supported: {', '.join(BUFFER_KINDS)})")


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
        buffer: buffer kind; only ``"numpy"`` (host memory) today.
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
        BenchError: bad buffer kind, unknown test, bad window, or fewer than 2 ranks.
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
        buffer: buffer kind; only ``"numpy"`` (host memory) today.
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
    check_buffer_kind(buffer)
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
) -> dict:
    """Describe a run: implementation, MPI library, ranks, buffers (for JSON and headers)."""
    if suite == "pack":
        return {
            "suite": suite,
            "impl": impl,
            "library": library_version(MPI),
            "nranks": nranks,
            "buffer": buffer,
            "units": {"block": "B", "bandwidth": "GB/s (1e9 B/s)", "first": "ms"},
        }
    return {
        "suite": suite,
        "impl": impl,
        "library": library_version(MPI),
        "nranks": nranks,
        "buffer": buffer,
        "window": window,
        "distinct_recv": distinct_recv,
        "units": {"size": "B", "latency": "us", "bandwidth": "GB/s (1e9 B/s)"},
    }


def _method_line(meta: dict | None) -> str:
    meta = meta or {}
    window = meta.get("window", WINDOW)
    recv = "distinct receive slots" if meta.get("distinct_recv") else "one receive buffer"
    return (
        "# latency: ping-pong, one-way = half round trip; GB = 1e9 B\n"
        f"# bw: window of {window} Isend + ack ({recv}); bibw: window of {window} each way, both directions counted"
    )


def _buffer_words(buffer: str) -> str:
    return {"numpy": "host numpy buffers"}.get(buffer, f"{buffer} buffers")


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
    out = []
    if meta:
        out.append(
            f"# {meta['impl']} {meta.get('suite', 'p2p')}, {meta['nranks']} ranks, {_buffer_words(meta.get('buffer', 'numpy'))}"
        )
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
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
    out = [
        f"# {a} vs {b} {meta.get('suite', 'p2p')}, {meta['nranks']} ranks, {_buffer_words(meta.get('buffer', 'numpy'))}",
        f"# {a} MPI library: {meta.get('library', 'unknown')}",
        f"# {b} MPI library: {ref_meta.get('library', 'unknown')}",
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
