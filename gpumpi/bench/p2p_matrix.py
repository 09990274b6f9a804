"""The device-pair suite of ``gpumpi bench`` (``p2p-matrix``, L6): nvbandwidth-style one-way
bandwidth between every ordered pair of devices of a node, and its tables.

Theory of operation
===================
The suite follows nvbandwidth's unidirectional device-to-device matrix, one ordered
pair of devices (sender ``src``, receiver ``dst``) per 2-rank job: rank 0 binds ``src``
and sends, rank 1 binds ``dst`` and receives (both the same GPU when they are equal,
which is the only pair on a one-GPU node); ``gpumpi bench`` starts one job per pair.
Per size:

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

The suite measures gpumpi only (device buffers, ``sim`` or ``cupy``), so it has no
``--compare`` table.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Iterable, Sequence

from ._common import (
    TAG_GO,
    TAG_MATRIX,
    TAG_STATS,
    DEVICE_BUFFER_KINDS,
    BenchError,
    Suite,
    DeviceMemory,
    fill_pattern,
    check_buffer_kind,
    default_sizes,
    parse_size,
)
from .report import buffer_words, format_cell, wrong_footer, format_columns, transport_words

#: Message sizes of the p2p-matrix suite (bytes).
MATRIX_SIZES = (1 << 20, 16 << 20, 64 << 20)
#: Message sizes of the ``--quick`` p2p-matrix suite.
MATRIX_QUICK_SIZES = (1 << 20, 16 << 20)
#: Largest size of a p2p-matrix ``--sizes MIN:MAX`` range with MAX left out.
MATRIX_MAX_SIZE = 64 << 20
# (timed, warm-up) samples of the p2p-matrix suite: messages, local copies
_MATRIX_REPS, _MATRIX_QUICK_REPS = ((20, 3), (20, 2)), ((5, 1), (5, 1))


# ---------------------------------------------------------------- sizes and plans


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


# ---------------------------------------------------------------- measurements


def _count_wrong_device(np, arr, expected) -> int:
    return int(np.count_nonzero(arr.get() != expected))


def _copy_time(np, mem: DeviceMemory, size: int, pattern, reps: int, warmup: int, wtime) -> tuple[float, int]:
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


def _matrix_sender(MPI, comm, np, mem: DeviceMemory, size: int, samples: int, keep: list) -> None:
    """Rank 0: answer each 'go' of rank 1 with one message of ``size`` bytes from new buffers."""
    buf = mem.array(size)
    keep.append(buf)
    buf.set(fill_pattern(np, size, 0))
    mem.sync()
    go, msg = [np.zeros(0, dtype=np.uint8), MPI.BYTE], [buf, MPI.BYTE]
    recv, send = comm.Recv, comm.Send
    for _ in range(samples):
        recv(go, 1, TAG_GO)
        send(msg, 1, TAG_MATRIX)


def _matrix_receiver(MPI, comm, np, mem: DeviceMemory, size: int, warm: tuple[int, int], keep: list):
    """Rank 1: cold sample, then ``skip + iters`` warm samples into new buffers.

    Returns:
        ``(cold seconds, warm sample seconds, wrong bytes)``.
    """
    n, w = warm
    buf = mem.array(size)
    keep.append(buf)
    expected = fill_pattern(np, size, 0)
    complement = ~expected
    buf.set(complement)
    mem.sync()
    go, msg = [np.zeros(0, dtype=np.uint8), MPI.BYTE], [buf, MPI.BYTE]
    send, recv, wtime = comm.Send, comm.Recv, MPI.Wtime

    def sample() -> float:
        t0 = wtime()
        send(go, 0, TAG_GO)
        recv(msg, 0, TAG_MATRIX)
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
    check_buffer_kind(buffer, SUITE)
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

    mem = DeviceMemory(buffer, own=True)
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
                comm.Recv([stats.view(np.uint8), MPI.BYTE], 1, TAG_STATS)
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
                pattern = fill_pattern(np, size, 1)
                copy_s, bad = _copy_time(np, mem, size, pattern, copy[0], copy[1], wtime)
                stats[:] = (cold, statistics.median(times), copy_s, wrong + bad)
                comm.Send([stats.view(np.uint8), MPI.BYTE], 0, TAG_STATS)
            gc.collect()
        comm.Barrier()  # every copy out of, or into, the peer's buffers is over before they are freed
    finally:
        if gc_was_enabled:
            gc.enable()
        del keep[:]
        mem.release()
    return rows


# ---------------------------------------------------------------- tables


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
        cells = [[str(i)] + [format_cell(cell.get((i, j)), ".2f") for j in range(ndev)] for i in range(ndev)]
        out.extend(ln for ln in format_columns(columns, cells) if ln.strip("# "))
    return out


def format_matrix_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format p2p-matrix results (:func:`run_p2p_matrix_pair`, all pairs) as an aligned table.

    Args:
        rows: rows of every measured pair.
        meta: the run's :func:`~gpumpi.bench.report.metadata` (``devices`` is the node's device count);
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
        out.append(f"# {meta['impl']} p2p-matrix, {count}, {buffer_words(kind)}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        out.append(transport_words(meta))
    out.extend(_matrix_method_lines(rows, meta))
    columns = [("src", ""), ("dst", ""), ("size", "(B)"), ("cold", "(GB/s)"), ("warm", "(GB/s)"), ("copy", "(GB/s)"),
               ("warm/copy", "(%)"), ("#wrong", "")]  # fmt: skip
    cells = [
        [str(r["src_device"]), str(r["dst_device"]), str(r["size"]), format_cell(r.get("cold_GBps"), ".4f"),
         format_cell(r.get("warm_GBps"), ".4f"), format_cell(r.get("copy_GBps"), ".4f"), format_cell(r.get("warm_pct_copy"), ".1f"),
         str(r.get("wrong", 0))]
        for r in rows
    ]  # fmt: skip
    out.extend(format_columns(columns, cells))
    if ndev is None:
        ndev = 1 + max([max(r["src_device"], r["dst_device"]) for r in rows] or [0])
    if ndev > 1:
        out.extend(_matrix_grid_lines(rows, ndev))
    out.append(wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
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


SUITE = Suite(
    name="p2p-matrix",
    min_ranks=2,
    buffers=DEVICE_BUFFER_KINDS,
    buffer_rule="measures device buffers: use --buffer sim or cupy",
    row_key="src_device",
    parse_sizes=parse_matrix_sizes,
    format_table=format_matrix_table,
    format_progress=format_matrix_progress,
)
