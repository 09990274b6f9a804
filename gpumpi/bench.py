"""Benchmark suites for ``gpumpi bench`` (L6).

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

Nothing heavy is imported at module import time; numpy is imported by the suites.
"""

from __future__ import annotations

import csv
import gc
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence

#: Suites that ``gpumpi bench`` knows.
SUITES = ("p2p",)
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

_TAG_LAT, _TAG_BW, _TAG_ACK, _TAG_BIBW, _TAG_CHECK, _TAG_SYNC = 101, 102, 103, 104, 105, 106


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
        The table text, ending with a ``# Wrong values`` footer.
    """
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
    """
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
        The table text.
    """
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
    """A :func:`run_p2p` progress callback that prints one line per size to stderr."""

    def report(index: int, count: int, row: dict) -> None:
        print(format_progress(index, count, row, impl), file=sys.stderr, flush=True)

    return report
