"""The MPI-IO suite: collective and independent file access, GB/s, contents checked.

Tests (``--ops``), each on a file of ``size`` bytes shared by all ranks, on the file system of
``--dir`` (default the system's temporary directory):

* ``write_all`` / ``read_all``: a 2-D float64 array, ``MPI.Compute_dims`` blocks (one per
  rank), written and read back through ``Create_subarray`` file views (``Set_view`` +
  ``Write_all`` / ``Read_all``): the checkpoint of a distributed array;
* ``write_at``: each rank writes its contiguous block by ``Write_at`` (independent I/O);
* ``write_shared``: each rank appends its block at the shared file pointer
  (``Write_shared``).

Time is the slowest rank's, of the access alone (open and view not counted; no ``Sync``: the
figures are the page cache's, as a program sees them), best of ``iters`` (default 3, 1 with
``--quick``).  GB/s = size / time, GB = 1e9 B.  #wrong counts the float64 elements that
differ from the expected file (written tests: read back by rank 0 with NumPy; ``read_all``:
every rank's block).  ``--compare mpi4py`` runs the same on mpi4py + MPICH (ROMIO).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence

from ._common import BenchError, Suite, check_buffer_kind, check_device_buffers, parse_size
from .report import buffer_words, format_cell, format_columns, fmt_ratio, library_version, ranks_words, ratio
from .report import wrong_footer

__all__ = ["QUICK_SIZES", "SUITE", "TESTS", "compare_io_results", "format_io_compare_table", "format_io_progress",
           "format_io_table", "io_metadata", "parse_io_ops", "parse_io_sizes", "run_io"]

TESTS = ("write_all", "read_all", "write_at", "write_shared")
CALLS = {
    "write_all": "Set_view(subarray) + Write_all of each rank's 2-D block",
    "read_all": "Set_view(subarray) + Read_all of each rank's 2-D block",
    "write_at": "Write_at of each rank's contiguous block (independent)",
    "write_shared": "Write_shared of each rank's block at the shared file pointer",
}
DEFAULT_SIZES = tuple(1 << s for s in (20, 22, 24, 26, 28, 30))  # 1 MiB ... 1 GiB
QUICK_SIZES = (1 << 20, 16 << 20)
BUFFERS = ("numpy", "sim")
NO_DEVICE_WHY = "mpi4py on pip's MPICH reads and writes host memory only"


def parse_io_ops(spec: str | None) -> list[str]:
    """The tests of ``--ops`` (comma-separated, default all of :data:`TESTS`)."""
    if spec is None or not spec.strip():
        return list(TESTS)
    out = [t.strip().lower() for t in spec.split(",") if t.strip()]
    bad = [t for t in out if t not in TESTS]
    if bad:
        raise BenchError(f"unknown io test(s) {', '.join(bad)} (known: {', '.join(TESTS)})")
    return out


def parse_io_sizes(spec: str | None, quick: bool = False) -> list[int]:
    """File sizes of ``--sizes``: a list (``"1M,256M"``), ``"min:max"`` (x4 steps of
    :data:`DEFAULT_SIZES`), or None (1 MiB ... 1 GiB; :data:`QUICK_SIZES` with ``quick``);
    rounded down to whole float64 elements."""
    base = QUICK_SIZES if quick else DEFAULT_SIZES
    if spec is None or not spec.strip():
        sizes = list(base)
    elif ":" in spec:
        lo_t, _, hi_t = spec.partition(":")
        lo = parse_size(lo_t) if lo_t.strip() else base[0]
        hi = parse_size(hi_t) if hi_t.strip() else base[-1]
        if lo > hi:
            raise BenchError(f"bad --sizes {spec!r}: min {lo} > max {hi}")
        sizes = [s for s in DEFAULT_SIZES if lo <= s <= hi] or [lo]
    else:
        sizes = [parse_size(p) for p in spec.split(",") if p.strip()]
    sizes = sorted({s - s % 8 for s in sizes if s >= 8})
    if not sizes:
        raise BenchError(f"--sizes {spec!r} selects no size (at least 8 bytes)")
    return sizes


def _layout(MPI, nranks: int, rank: int, size: int):
    """``(global shape, block shape, block start)`` of a 2-D float64 array of ``size`` bytes
    split in ``Compute_dims`` blocks (the last row and column of blocks take what is left)."""
    n = size // 8
    pr, pc = MPI.Compute_dims(nranks, [0, 0])
    cols = max(pc, math.isqrt(n))
    rows = max(pr, n // cols)
    gr, gc = rank // pc, rank % pc
    r0, r1 = gr * rows // pr, (gr + 1) * rows // pr
    c0, c1 = gc * cols // pc, (gc + 1) * cols // pc
    return (rows, cols), (r1 - r0, c1 - c0), (r0, c0)


def _expected(np, shape):
    return np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape) * 0.25 + 1.0


class _Memory:
    def __init__(self, np, buffer: str) -> None:
        self.np, self.buffer = np, buffer

    def put(self, a):
        if self.buffer == "sim":
            from gpumpi.testing import SimDeviceArray

            return SimDeviceArray.from_numpy(self.np.ascontiguousarray(a))
        return self.np.ascontiguousarray(a)

    def get(self, b):
        return b.get() if self.buffer == "sim" else b


def _one(MPI, comm, np, mem: _Memory, path: str, test: str, size: int) -> tuple[float, int, int]:
    """One measurement: the slowest rank's time, the wrong elements and the bytes moved."""
    rank, nranks = comm.Get_rank(), comm.Get_size()
    shape, block, start = _layout(MPI, nranks, rank, size)
    full = _expected(np, shape)
    per = shape[0] * shape[1] // nranks  # the contiguous tests' blocks: equal, in rank order
    flat_n = shape[0] * shape[1] if test in ("write_all", "read_all") else per * nranks
    lo, hi = rank * per, (rank + 1) * per
    wrong = 0
    amode = MPI.MODE_RDONLY if test == "read_all" else MPI.MODE_CREATE | MPI.MODE_WRONLY
    f = MPI.File.Open(comm, path, amode)
    sub = None
    if test in ("write_all", "read_all"):
        sub = MPI.DOUBLE.Create_subarray(list(shape), list(block), list(start)).Commit()
        f.Set_view(0, MPI.DOUBLE, sub)
        data = mem.put(full[start[0]:start[0] + block[0], start[1]:start[1] + block[1]]
                       if test == "write_all" else np.zeros(block))
    else:
        f.Set_view(0, MPI.DOUBLE)
        if test == "write_shared":
            f.Seek_shared(0)
        data = mem.put(full.ravel()[lo:hi])
    comm.Barrier()
    t0 = time.perf_counter()
    if test == "write_all":
        f.Write_all(data)
    elif test == "read_all":
        f.Read_all(data)
    elif test == "write_at":
        f.Write_at(lo, data)
    else:
        f.Write_shared(data)
    elapsed = time.perf_counter() - t0
    elapsed = comm.allreduce(elapsed, op=MPI.MAX)
    f.Close()
    if sub is not None:
        sub.Free()
    if test == "read_all":
        got = mem.get(data)
        wrong = int(np.count_nonzero(got != full[start[0]:start[0] + block[0], start[1]:start[1] + block[1]]))
        wrong = comm.allreduce(wrong, op=MPI.SUM)
    else:
        comm.Barrier()
        if rank == 0:
            got = np.fromfile(path, dtype=np.float64)
            if test == "write_shared" and len(got) == flat_n and per:  # in the order the ranks took the pointer
                got = np.concatenate(sorted(got.reshape(nranks, per), key=lambda b: b[0]))
            want = full.ravel()[:flat_n]
            wrong = int(np.count_nonzero(got[:flat_n] != want[:len(got)])) + abs(len(got) - flat_n)
        wrong = comm.bcast(wrong, 0)
    return elapsed, wrong, flat_n * 8


def run_io(MPI, sizes: Iterable[int] | None = None, *, tests: Sequence[str] = TESTS, iters: int | None = None,
           quick: bool = False, buffer: str = "numpy", directory: str | None = None, comm=None,
           progress: Callable[[int, int, dict], None] | None = None) -> list[dict]:
    """Run the MPI-IO suite (the module docstring); collective over ``comm``.

    Args:
        MPI: ``gpumpi.MPI`` or ``mpi4py.MPI``.
        sizes: file sizes in bytes (None: :data:`DEFAULT_SIZES`, :data:`QUICK_SIZES` with ``quick``).
        tests: of :data:`TESTS`; ``read_all`` reads what ``write_all`` wrote, so it runs after a
            ``write_all`` of the same size (run here first when not asked for).
        iters: measurements per (test, size), the best kept (default 3; 1 with ``quick``).
        quick: the quick sizes and one measurement.
        buffer: ``"numpy"`` or ``"sim"`` (simulated device memory; gpumpi only).
        directory: where the file goes (default the temporary directory).
        comm: communicator (default ``MPI.COMM_WORLD``).
        progress: called on rank 0 as ``progress(index, count, row)``.

    Returns:
        On rank 0, a dict per measurement: ``io`` (the test), ``size`` (asked), ``bytes`` (the
        file's: whole float64 blocks), ``time_s``, ``GBps``, ``wrong``, ``iters``; an empty list
        elsewhere.
    """
    check_buffer_kind(buffer, SUITE)
    if buffer != "numpy":
        if str(getattr(MPI, "__name__", "")).startswith("mpi4py"):
            raise BenchError(f"the io suite on {buffer} buffers: {NO_DEVICE_WHY}")
        check_device_buffers(buffer)
    tests = parse_io_ops(",".join(tests))
    comm = MPI.COMM_WORLD if comm is None else comm
    sizes = list(QUICK_SIZES if quick else DEFAULT_SIZES) if sizes is None else [int(s) for s in sizes]
    n = iters if iters is not None else (1 if quick else 3)
    if n < 1:
        raise BenchError(f"iters must be >= 1 ({n})")
    import numpy as np

    mem = _Memory(np, buffer)
    rank = comm.Get_rank()
    path = None
    if rank == 0:
        fd, path = tempfile.mkstemp(prefix="gpumpi-bench-io-", suffix=".bin", dir=directory)
        os.close(fd)
    path = comm.bcast(path, 0)
    plans = [(t, s) for s in sizes for t in tests]
    rows: list[dict] = []
    try:
        for index, (test, size) in enumerate(plans):
            if test == "read_all" and (index == 0 or plans[index - 1] != ("write_all", size)):
                _one(MPI, comm, np, mem, path, "write_all", size)  # (the file read_all reads)
            best, wrong, nbytes = None, 0, size
            for _ in range(n):
                if test != "read_all" and rank == 0:
                    os.truncate(path, 0)
                comm.Barrier()
                t, w, nbytes = _one(MPI, comm, np, mem, path, test, size)
                best = t if best is None else min(best, t)
                wrong += w
            if rank == 0:
                row = {"io": test, "size": size, "bytes": nbytes, "time_s": best,
                       "GBps": nbytes / best / 1e9 if best else None, "wrong": wrong, "iters": n}
                rows.append(row)
                if progress is not None:
                    progress(index, len(plans), row)
    finally:
        comm.Barrier()
        if rank == 0:
            os.unlink(path)
    return rows


def io_metadata(MPI, impl: str, *, nranks: int, buffer: str = "numpy", tests: Sequence[str] = TESTS,
                skipped: str | None = None) -> dict:
    """Describe an io run: implementation, MPI library (``MPI`` None: not run), ranks, buffers, tests."""
    meta = {"suite": "io", "impl": impl, "library": library_version(MPI) if MPI is not None else "not run",
            "nranks": nranks, "buffer": buffer, "ops": list(tests),
            "units": {"size": "B", "time": "s", "bandwidth": "GB/s (1e9 B/s)"}}
    if skipped:
        meta["skipped"] = skipped
    return meta


def _method_lines() -> list[str]:
    return ["# time: the slowest rank's, the access alone (no open, view or Sync: the page cache as a program "
            "sees it), best of iters; GB/s = size / time, GB = 1e9 B",
            "# #wrong: float64 elements of the file (or of read_all's blocks) that differ from the expected"]


def _tests_of(rows: Sequence[dict]) -> list[str]:
    present = {r["io"] for r in rows}
    return [t for t in TESTS if t in present]


def format_io_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format io results as a table per test, with a header."""
    out = []
    if meta:
        out.append(f"# {meta['impl']} io, {ranks_words(meta['nranks'])}, {buffer_words(meta.get('buffer', 'numpy'))}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        if meta.get("skipped"):
            out.append(f"# not run: {meta['skipped']}")
    out.extend(_method_lines())
    cols = [("size", "(B)"), ("time", "(ms)"), ("bw", "(GB/s)"), ("#wrong", "")]
    for test in _tests_of(rows):
        out.append(f"# {test}: {CALLS[test]}")
        cells = [[str(r["size"]), format_cell(None if r.get("time_s") is None else r["time_s"] * 1e3, ".2f"),
                  format_cell(r.get("GBps"), ".3f"), str(r.get("wrong", 0))] for r in rows if r["io"] == test]
        out.extend(format_columns(cols, cells))
    out.append(wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def compare_io_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two runs by (test, size): ``ratio`` = GB/s / reference GB/s (above 1: ``rows`` is faster)."""
    ref = {(r["io"], r["size"]): r for r in ref_rows}
    out = []
    for r in rows:
        o = ref.get((r["io"], r["size"]), {})
        out.append({"io": r["io"], "size": r["size"], "GBps": r.get("GBps"), "ref_GBps": o.get("GBps"),
                    "ratio": ratio(r.get("GBps"), o.get("GBps")), "wrong": int(r.get("wrong", 0)),
                    "ref_wrong": int(o.get("wrong", 0)), "ref_skipped": o.get("skipped")})
    return out


def format_io_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_io_results` as a table per test."""
    a, b = meta["impl"], ref_meta["impl"]
    if a == b:
        b = b + "'"
    out = [f"# {a} vs {b} io, {ranks_words(meta['nranks'])}, {buffer_words(meta.get('buffer', 'numpy'))}",
           f"# {a} MPI library: {meta.get('library', 'unknown')}",
           f"# {b} MPI library: {ref_meta.get('library', 'unknown')}"]
    for side, m in ((a, meta), (b, ref_meta)):
        if m.get("skipped"):
            out.append(f"# {side} not run: {m['skipped']} (its columns are -)")
    out.extend(_method_lines())
    out.append(f"# ratio = {a} GB/s / {b} GB/s; >1 means {a} is faster")
    cols = [("size", "(B)"), (f"bw {a}", "(GB/s)"), (f"bw {b}", "(GB/s)"), ("ratio", "(x)"), ("#wrong", "")]
    for test in _tests_of(merged):
        out.append(f"# {test}: {CALLS[test]}")
        cells = [[str(m["size"]), format_cell(m["GBps"], ".3f"), format_cell(m["ref_GBps"], ".3f"),
                  fmt_ratio(m["ratio"]), str(m["wrong"] + m["ref_wrong"])] for m in merged if m["io"] == test]
        out.extend(format_columns(cols, cells))
    out.append(wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


def format_io_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr."""
    who = f"{impl} io" if impl else "io"
    line = f"# {who} [{index + 1}/{count}] {row['io']} {row['size']} B:"
    if row.get("GBps") is not None:
        line += f" {row['GBps']:.3f} GB/s"
    if row.get("wrong"):
        line += f" WRONG {row['wrong']}"
    return line


SUITE = Suite(
    name="io",
    min_ranks=1,
    buffers=BUFFERS,
    buffer_rule="runs on numpy or sim buffers",
    row_key="io",
    parse_sizes=parse_io_sizes,
    format_table=format_io_table,
    format_progress=format_io_progress,
    compare_results=compare_io_results,
    format_compare_table=format_io_compare_table,
)
