"""The datatype suite of ``gpumpi bench`` (``pack``, L6): TEMPI-style ``Pack``/``Unpack``
throughput and first-use time, strided-send, and their tables.

Theory of operation
===================
The suite follows TEMPI's ``bench_mpi_pack`` on host memory:

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

Rows carry ``test`` (``"pack"`` or ``"strided-send"``), and ``--compare`` pairs two runs
by (test, type, block), checking that both implementations agree on every extent.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Iterable, Sequence

from ._common import (
    TAG_ACK,
    TAG_STRIDED,
    BenchError,
    Suite,
    HostBuffers,
    pair_sync,
    sum_wrong,
    check_buffer_kind,
    parse_size,
)
from .report import buffer_words, format_cell, fmt_ratio, ranks_words, wrong_footer, format_columns, ratio

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
# (timed, warm-up) repetitions of the pack suite: pack/unpack, strided-send
_PACK_REPS, _PACK_QUICK_REPS = (25, 3), (5, 1)
_SEND_REPS, _SEND_QUICK_REPS = (10, 2), (3, 1)


# ---------------------------------------------------------------- sizes and types


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


# ---------------------------------------------------------------- measurements


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
    sync = HostBuffers(np, [0], 1, False)
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
                send([src, 1, dtype], 1, TAG_STRIDED)
                recv(ack, 1, TAG_ACK)

            def by_hand():
                copyto(packed_words, src_words)
                send([packed, MPI.BYTE], 1, TAG_STRIDED)
                recv(ack, 1, TAG_ACK)

            for mode, fn in (("dtype", by_type), ("manual", by_hand)):
                pair_sync(MPI, comm, sync, rank)
                times[mode], _ = _median_call(fn, (), reps, warmup, MPI.Wtime)
        else:
            rbuf = np.zeros(nbytes, dtype=np.uint8)
            rmsg = [rbuf, MPI.BYTE]
            for _mode in ("dtype", "manual"):
                rbuf[:] = 0
                pair_sync(MPI, comm, sync, rank)
                for _ in range(warmup + reps):
                    comm.Recv(rmsg, 0, TAG_STRIDED)
                    comm.Send(ack, 0, TAG_ACK)
                wrong += int(np.count_nonzero(rbuf != ref))
    finally:
        dtype.Free()
    wrong = sum_wrong(MPI, comm, np, rank, wrong)
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
    check_buffer_kind(buffer, SUITE)
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


# ---------------------------------------------------------------- tables


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
        meta: the run's :func:`~gpumpi.bench.report.metadata`; None prints only the columns.

    Returns:
        The pack table, then the strided-send table (or a note that it was
        skipped), ending with a ``# Wrong values`` footer.
    """
    out = []
    if meta:
        out.append(f"# {meta['impl']} pack, {ranks_words(meta['nranks'])}, {buffer_words(meta.get('buffer', 'numpy'))}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
    packs, sends = _pack_rows(rows), _send_rows(rows)
    if packs:
        out.extend(_pack_method_lines(rows))
        columns = [("type", ""), ("block", "(B)"), ("extent", "(B)"), ("pack", "(GB/s)"), ("unpack", "(GB/s)"),
                   ("first", "(ms)"), ("create", "(ms)"), ("#wrong", "")]  # fmt: skip
        cells = [
            [r["type"], str(r["block"]), str(r["extent"]), format_cell(r.get("pack_GBps"), ".4f"),
             format_cell(r.get("unpack_GBps"), ".4f"), format_cell(r.get("first_ms"), ".3f"), format_cell(r.get("create_ms"), ".3f"),
             str(r.get("wrong", 0))]
            for r in packs
        ]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.extend(_send_method_lines(rows, meta))
    if sends:
        columns = [("block", "(B)"), ("dtype", "(GB/s)"), ("manual", "(GB/s)"), ("#wrong", "")]
        cells = [
            [str(r["block"]), format_cell(r.get("dtype_GBps"), ".4f"), format_cell(r.get("manual_GBps"), ".4f"), str(r.get("wrong", 0))]
            for r in sends
        ]
        out.extend(format_columns(columns, cells))
    out.append(wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
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
        f"# {a} vs {b} pack, {ranks_words(meta['nranks'])}, {buffer_words(meta.get('buffer', 'numpy'))}",
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
             format_cell(m["pack_GBps"], ".4f"), format_cell(m["ref_pack_GBps"], ".4f"), fmt_ratio(m["pack_ratio"]),
             format_cell(m["unpack_GBps"], ".4f"), format_cell(m["ref_unpack_GBps"], ".4f"), fmt_ratio(m["unpack_ratio"]),
             format_cell(m["first_ms"], ".3f"), format_cell(m["ref_first_ms"], ".3f"), fmt_ratio(m["first_speedup"]),
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
             format_cell(m["dtype_GBps"], ".4f"), format_cell(m["ref_dtype_GBps"], ".4f"), fmt_ratio(m["dtype_ratio"]),
             format_cell(m["manual_GBps"], ".4f"), format_cell(m["ref_manual_GBps"], ".4f"), fmt_ratio(m["manual_ratio"]),
             str(m["wrong"] + m["ref_wrong"])]
            for m in sends
        ]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.append(_extent_footer(merged, a, b))
    out.append(wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


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


SUITE = Suite(
    name="pack",
    min_ranks=1,
    buffers=("numpy",),
    buffer_rule="runs on host numpy buffers only",
    row_key="test",
    parse_sizes=parse_blocks,
    format_table=format_pack_table,
    format_progress=format_pack_progress,
    compare_results=compare_pack_results,
    format_compare_table=format_pack_compare_table,
)
