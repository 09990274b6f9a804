"""The point-to-point suite of ``gpumpi bench`` (``p2p``, L6): OSU-style latency, bandwidth and
bidirectional bandwidth between ranks 0 and 1, and its tables.

Theory of operation
===================
The suite follows the OSU micro-benchmarks (and OMB-Py), under the rules of
:mod:`gpumpi.bench._common`:

* latency: blocking ping-pong between ranks 0 and 1; one-way latency is half the
  round trip, ``t * 1e6 / (2 * iters)`` microseconds.
* bw (osu_bw): rank 0 posts a window of ``Isend`` and waits for all of them; rank 1
  posts a window of ``Irecv``, waits, and answers with a 4-byte ack.
  ``bw = size * window * iters / t``.
* bibw (osu_bibw): both ranks post a window of ``Irecv`` then a window of ``Isend``;
  the bytes of both directions count: ``bibw = 2 * size * window * iters / t``.
* message rate (osu_mbw_mr, one pair): the bw loop's time per message,
  ``t * 1e6 / (window * iters)`` microseconds (no second loop: the same measurement).
* object (mpi4py's lowercase calls): blocking ping-pong of a small Python object,
  ``{"seq": i, "data": <size bytes>}``, by ``send``/``recv`` (pickled, as task farms and
  master-worker codes send); one-way latency as above.  Host only: the object's bytes
  are host bytes whatever ``buffer`` says.

Default iteration counts are OMB-Py's (latency 10000/1000 skip, bandwidth 100/10),
scaled down for messages above 8 KiB so that one measurement moves at most about
1 GiB (``--quick``: fewer iterations, 128 MiB).  An explicit ``iters`` is used as given
for every size.

As in OSU, all receives of a window land in one receive buffer (the data are
identical, and the numbers stay comparable with published OSU figures, which are
cache-warm).  ``distinct_recv`` gives each receive of a window its own slot while
``window * size`` fits in :data:`~gpumpi.bench._common.RECV_CAP` bytes (reusing slots
round-robin beyond that), which measures cache-cold destinations.

Buffers may be ``numpy``, ``sim`` or ``cupy``; rows are keyed by ``size``, and
``--compare`` pairs two runs size by size (:func:`compare_p2p_results`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence

from ._common import (
    TAG_ACK,
    TAG_BIBW,
    TAG_BW,
    TAG_LAT,
    TAG_OBJ,
    BUFFER_KINDS,
    DEVICE_BUFFER_KINDS,
    MAX_SIZE,
    WINDOW,
    BenchError,
    Suite,
    HostBuffers,
    DeviceBuffers,
    DeviceMemory,
    slot_count,
    pair_sync,
    sum_wrong,
    check_buffer_kind,
    default_sizes,
    fill_pattern,
    parse_size,
)
from .report import REF_HOST_WHY, buffer_words, format_cell, wrong_footer, format_columns, ratio, transport_words

#: Messages above this size use the "large" iteration counts (OSU's threshold).
LARGE_MESSAGE = 8192
#: Sizes of the ``--quick`` sweep.
QUICK_SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 16 << 20)

# (iters, skip) for small messages; large messages are scaled by a byte budget.
_DEFAULT_ITERS = {"latency": (10000, 1000), "bw": (100, 10), "bibw": (100, 10), "object": (10000, 1000)}
_QUICK_ITERS = {"latency": (1000, 100), "bw": (20, 2), "bibw": (20, 2), "object": (1000, 100)}
#: the tests of the suite, in the order they run
TESTS = ("latency", "bw", "bibw", "object")
_BUDGET = 1 << 30
_QUICK_BUDGET = 128 << 20


# ---------------------------------------------------------------- sizes and plans


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
        test: ``"latency"``, ``"bw"``, ``"bibw"`` or ``"object"``.
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
            per_iter = {"latency": 2 * size, "object": 2 * size, "bw": window * size, "bibw": 2 * window * size}[test]
            budget = _QUICK_BUDGET if quick else _BUDGET
            floor = 2 if quick else 5
            n = max(floor, min(n // 10 if test in ("latency", "object") else n, budget // per_iter))
    else:
        n = max(1, int(iters))
    if skip is None:
        w = max(1, n // 10)
    else:
        w = max(0, int(skip))
    return n, w


# ---------------------------------------------------------------- measurements


def _latency(MPI, comm, bufs: HostBuffers, rank: int, size: int, iters: int, skip: int):
    peer = 1 - rank
    smsg = [bufs.prepare_send(size, rank), MPI.BYTE]
    slots = bufs.recv_slots(size, 1, peer)
    rmsg = [slots[0], MPI.BYTE]
    send, recv, wtime = comm.Send, comm.Recv, MPI.Wtime
    pair_sync(MPI, comm, bufs, rank)
    t0 = wtime()
    if rank == 0:
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            send(smsg, 1, TAG_LAT)
            recv(rmsg, 1, TAG_LAT)
    else:
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            recv(rmsg, 0, TAG_LAT)
            send(smsg, 0, TAG_LAT)
    elapsed = wtime() - t0
    wrong = bufs.count_wrong(slots, size, peer, 1)
    return elapsed, wrong


def _object(MPI, comm, bufs: HostBuffers, rank: int, size: int, iters: int, skip: int):
    """Ping-pong of ``{"seq": i, "data": <size bytes of the sender's pattern>}`` by send/recv;
    the wrong bytes are counted in the last object received (and a wrong ``seq`` as all of them)."""
    np = bufs.np
    peer = 1 - rank
    data = fill_pattern(np, size, rank).tobytes()
    send, recv, wtime = comm.send, comm.recv, MPI.Wtime
    pair_sync(MPI, comm, bufs, rank)
    got = None
    t0 = wtime()
    if rank == 0:
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            send({"seq": i, "data": data}, 1, TAG_OBJ)
            got = recv(None, 1, TAG_OBJ)
    else:
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            got = recv(None, 0, TAG_OBJ)
            send({"seq": i, "data": data}, 0, TAG_OBJ)
    elapsed = wtime() - t0
    want = fill_pattern(np, size, peer).tobytes()
    if not isinstance(got, dict) or got.get("seq") != iters + skip - 1 or not isinstance(got.get("data"), bytes) \
            or len(got["data"]) != size:
        return elapsed, max(size, 1)
    wrong = int(np.count_nonzero(np.frombuffer(got["data"], np.uint8) != np.frombuffer(want, np.uint8)))
    return elapsed, wrong


def _bw(MPI, comm, bufs: HostBuffers, rank: int, size: int, iters: int, skip: int, window: int):
    np = bufs.np
    ack = np.zeros(4, dtype=np.uint8)
    ackmsg = [ack, MPI.BYTE]
    wtime, waitall = MPI.Wtime, MPI.Request.Waitall
    rng = range(window)
    wrong = 0
    if rank == 0:
        smsg = [bufs.prepare_send(size, 0), MPI.BYTE]
        isend, recv = comm.Isend, comm.Recv
        pair_sync(MPI, comm, bufs, rank)
        t0 = wtime()
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            waitall([isend(smsg, 1, TAG_BW) for _ in rng])
            recv(ackmsg, 1, TAG_ACK)
        elapsed = wtime() - t0
    else:
        nslots = slot_count(size, window, bufs.distinct)
        slots = bufs.recv_slots(size, nslots, 0)
        rmsgs = [[slots[j % nslots], MPI.BYTE] for j in rng]
        irecv, send = comm.Irecv, comm.Send
        pair_sync(MPI, comm, bufs, rank)
        t0 = wtime()
        for i in range(iters + skip):
            if i == skip:
                t0 = wtime()
            waitall([irecv(m, 0, TAG_BW) for m in rmsgs])
            send(ackmsg, 0, TAG_ACK)
        elapsed = wtime() - t0
        wrong = bufs.count_wrong(slots, size, 0, min(nslots, window))
    return elapsed, wrong


def _bibw(MPI, comm, bufs: HostBuffers, rank: int, size: int, iters: int, skip: int, window: int):
    peer = 1 - rank
    smsg = [bufs.prepare_send(size, rank), MPI.BYTE]
    nslots = slot_count(size, window, bufs.distinct)
    slots = bufs.recv_slots(size, nslots, peer)
    rmsgs = [[slots[j % nslots], MPI.BYTE] for j in range(window)]
    rng = range(window)
    isend, irecv = comm.Isend, comm.Irecv
    wtime, waitall = MPI.Wtime, MPI.Request.Waitall
    pair_sync(MPI, comm, bufs, rank)
    t0 = wtime()
    for i in range(iters + skip):
        if i == skip:
            t0 = wtime()
        rreqs = [irecv(m, peer, TAG_BIBW) for m in rmsgs]
        sreqs = [isend(smsg, peer, TAG_BIBW) for _ in rng]
        waitall(sreqs)
        waitall(rreqs)
    elapsed = wtime() - t0
    wrong = bufs.count_wrong(slots, size, peer, min(nslots, window))
    return elapsed, wrong


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
    tests: Sequence[str] = TESTS,
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
        tests: which of ``"latency"``, ``"bw"``, ``"bibw"``, ``"object"`` to run.
        comm: communicator (default ``MPI.COMM_WORLD``); needs at least 2 ranks.
        progress: called on rank 0 as ``progress(index, count, row)`` after each size.

    Returns:
        On rank 0, one dict per size with keys ``size``, ``latency_us``,
        ``bw_GBps``, ``mr_us`` (the bw loop's time per message), ``bibw_GBps``,
        ``obj_latency_us`` (None when not measured, e.g. bandwidth at 0 B),
        ``wrong`` (bytes that differed from the sent pattern, all tests summed) and
        ``iters`` (``{test: [iters, skip]}``).  An empty list on other ranks.

    Raises:
        BenchError: bad buffer kind (or ``cupy`` without CuPy and a GPU), unknown
            test, bad window, or fewer than 2 ranks.
    """
    check_buffer_kind(buffer, SUITE)
    for t in tests:
        if t not in TESTS:
            raise BenchError(f"unknown p2p test {t!r} (known: {', '.join(TESTS)})")
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
        bufs: HostBuffers = DeviceBuffers(np, DeviceMemory(buffer), sizes, window, distinct_recv)
    else:
        bufs = HostBuffers(np, sizes, window, distinct_recv)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for index, size in enumerate(sizes):
            row: dict = {"size": size, "latency_us": None, "bw_GBps": None, "mr_us": None, "bibw_GBps": None,
                         "obj_latency_us": None, "wrong": 0, "iters": {}}
            wrong = 0
            for test in tests:
                if test in ("bw", "bibw") and size == 0:
                    continue
                n, w = plan_iterations(test, size, iters=iters, skip=skip, quick=quick, window=window)
                row["iters"][test] = [n, w]
                if test == "latency":
                    elapsed, bad = _latency(MPI, comm, bufs, rank, size, n, w)
                    row["latency_us"] = elapsed * 1e6 / (2 * n) if elapsed > 0 else None
                elif test == "bw":
                    elapsed, bad = _bw(MPI, comm, bufs, rank, size, n, w, window)
                    row["bw_GBps"] = size * window * n / elapsed / 1e9 if elapsed > 0 else None
                    row["mr_us"] = elapsed * 1e6 / (window * n) if elapsed > 0 else None
                elif test == "object":
                    elapsed, bad = _object(MPI, comm, bufs, rank, size, n, w)
                    row["obj_latency_us"] = elapsed * 1e6 / (2 * n) if elapsed > 0 else None
                else:
                    elapsed, bad = _bibw(MPI, comm, bufs, rank, size, n, w, window)
                    row["bibw_GBps"] = 2 * size * window * n / elapsed / 1e9 if elapsed > 0 else None
                wrong += bad
            row["wrong"] = sum_wrong(MPI, comm, np, rank, wrong)
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


# ---------------------------------------------------------------- tables


def _method_line(meta: dict | None) -> str:
    meta = meta or {}
    window = meta.get("window", WINDOW)
    recv = "distinct receive slots" if meta.get("distinct_recv") else "one receive buffer"
    return (
        "# latency: ping-pong, one-way = half round trip; GB = 1e9 B\n"
        f"# bw: window of {window} Isend + ack ({recv}); bibw: window of {window} each way, both directions counted\n"
        f"# msg rate: the bw loop's time per message (osu_mbw_mr, one pair); obj lat: send/recv ping-pong of "
        f"{{'seq': i, 'data': <size bytes>}}, one-way"
    )


def format_p2p_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format p2p results as an aligned table with a descriptive header.

    Args:
        rows: results of :func:`run_p2p`.
        meta: the run's :func:`~gpumpi.bench.report.metadata`; None prints only the columns.

    Returns:
        The table text, ending with a ``# Wrong values`` footer.
    """
    out = []
    if meta:
        buffer = meta.get("buffer", "numpy")
        words = buffer_words(buffer, meta.get("devices"))
        out.append(f"# {meta['impl']} {meta.get('suite', 'p2p')}, {meta['nranks']} ranks, {words}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        if buffer in DEVICE_BUFFER_KINDS:
            out.append(transport_words(meta))
    out.append(_method_line(meta))
    columns = [("size", "(B)"), ("latency", "(us)"), ("bw", "(GB/s)"), ("msg rate", "(us/msg)"), ("bibw", "(GB/s)"),
               ("obj lat", "(us)"), ("#wrong", "")]
    cells = [
        [
            str(r["size"]),
            format_cell(r.get("latency_us"), ".2f"),
            format_cell(r.get("bw_GBps"), ".4f"),
            format_cell(r.get("mr_us"), ".3f"),
            format_cell(r.get("bibw_GBps"), ".4f"),
            format_cell(r.get("obj_latency_us"), ".2f"),
            str(r.get("wrong", 0)),
        ]
        for r in rows
    ]
    out.extend(format_columns(columns, cells))
    out.append(wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def compare_p2p_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two runs size by size and compute ratios where >1 means ``rows`` is better.

    Args:
        rows: results of the implementation under test (e.g. gpumpi).
        ref_rows: results of the reference (e.g. mpi4py).

    Returns:
        One dict per size present in both: ``size``; ``latency_us``/``ref_latency_us``
        and ``speedup = ref_latency / latency``; ``bw_GBps``/``ref_bw_GBps`` and
        ``bw_ratio = bw / ref_bw``; the same for ``bibw``; ``mr_us``/``ref_mr_us`` and
        ``obj_latency_us``/``ref_obj_latency_us`` with ``mr_ratio``/``obj_ratio`` = time /
        reference time (<1 means ``rows`` is faster, as the issue figures are stated);
        ``wrong``/``ref_wrong``.
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
                "mr_us": r.get("mr_us"),
                "ref_mr_us": o.get("mr_us"),
                "mr_ratio": ratio(r.get("mr_us"), o.get("mr_us")),
                "obj_latency_us": r.get("obj_latency_us"),
                "ref_obj_latency_us": o.get("obj_latency_us"),
                "obj_ratio": ratio(r.get("obj_latency_us"), o.get("obj_latency_us")),
                "wrong": int(r.get("wrong", 0)),
                "ref_wrong": int(o.get("wrong", 0)),
            }
        )
    return out


def format_p2p_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_p2p_results` as one aligned table.

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
    buf, ref_buf = meta.get("buffer", "numpy"), ref_meta.get("buffer", "numpy")
    if buf == ref_buf:
        buffers = buffer_words(buf, meta.get("devices"))
    else:
        mine, theirs = buffer_words(buf, meta.get("devices")), buffer_words(ref_buf, ref_meta.get("devices"))
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
        if kind != other and other in REF_HOST_WHY and kind == "numpy":
            out.append(f"# {side} ran on host numpy buffers: {REF_HOST_WHY[other]}; "
                       "the ratios compare device-to-device with host-to-host messages")
    out += [
        _method_line(meta),
        f"# speedup = {b} latency / {a} latency; bw ratio = {a} bw / {b} bw; >1 means {a} is better",
        f"# mr x, obj x = {a} time / {b} time (per message, per object one way); <1 means {a} is faster",
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
        (f"mr {a}", "(us)"),
        (f"mr {b}", "(us)"),
        ("mr x", ""),
        (f"obj {a}", "(us)"),
        (f"obj {b}", "(us)"),
        ("obj x", ""),
        ("#wrong", ""),
    ]
    cells = [
        [
            str(m["size"]),
            format_cell(m["latency_us"], ".2f"),
            format_cell(m["ref_latency_us"], ".2f"),
            format_cell(m["speedup"], ".2f"),
            format_cell(m["bw_GBps"], ".4f"),
            format_cell(m["ref_bw_GBps"], ".4f"),
            format_cell(m["bw_ratio"], ".2f"),
            format_cell(m["bibw_GBps"], ".4f"),
            format_cell(m["ref_bibw_GBps"], ".4f"),
            format_cell(m["bibw_ratio"], ".2f"),
            format_cell(m["mr_us"], ".3f"),
            format_cell(m["ref_mr_us"], ".3f"),
            format_cell(m["mr_ratio"], ".2f"),
            format_cell(m["obj_latency_us"], ".2f"),
            format_cell(m["ref_obj_latency_us"], ".2f"),
            format_cell(m["obj_ratio"], ".2f"),
            str(m["wrong"] + m["ref_wrong"]),
        ]
        for m in merged
    ]
    out.extend(format_columns(columns, cells))
    out.append(wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


def format_p2p_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# mpi4py p2p [3/5] 65536 B: lat 12.30 us ...``."""
    who = f"{impl} p2p" if impl else "p2p"
    parts = [f"# {who} [{index + 1}/{count}] {row['size']} B:"]
    if row.get("latency_us") is not None:
        parts.append(f"lat {row['latency_us']:.2f} us")
    if row.get("bw_GBps") is not None:
        parts.append(f"bw {row['bw_GBps']:.4f} GB/s")
    if row.get("mr_us") is not None:
        parts.append(f"mr {row['mr_us']:.3f} us/msg")
    if row.get("bibw_GBps") is not None:
        parts.append(f"bibw {row['bibw_GBps']:.4f} GB/s")
    if row.get("obj_latency_us") is not None:
        parts.append(f"obj {row['obj_latency_us']:.2f} us")
    if row.get("wrong"):
        parts.append(f"WRONG {row['wrong']}")
    return " ".join(parts)


SUITE = Suite(
    name="p2p",
    min_ranks=2,
    buffers=BUFFER_KINDS,
    buffer_rule="runs on numpy, sim or cupy buffers",
    row_key=None,
    parse_sizes=parse_sizes,
    format_table=format_p2p_table,
    format_progress=format_p2p_progress,
    compare_results=compare_p2p_results,
    format_compare_table=format_p2p_compare_table,
)
