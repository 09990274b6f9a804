"""The ``gpumpi`` command: ``gpumpi bench [suite] [options]`` and ``gpumpi info`` (L6).

Theory of operation
===================
``gpumpi bench`` runs in one of two modes.

* Outer mode (typed at a shell, not inside a job): the command re-launches itself
  on ``--np`` ranks, once per implementation (``--impl``, plus ``--compare``):
  gpumpi runs under ``python -m gpumpi -n N`` and mpi4py runs under ``mpiexec -n N``.
  Each inner run writes its results to a temporary JSON file (``--_json``); the
  outer process prints the table (one merged table with ``--compare``) and writes
  ``--json``/``--csv``.  Its exit status is the first failing launch's status, or 1
  when a result had wrong values.
* Inner mode (``--_inner``, or already inside a job: ``GPUMPI_SIZE`` or an MPI
  launcher's ``PMI_*``/``OMPI_*``/``PMIX_*`` variables are set): imports the chosen
  MPI module and runs the suite; rank 0 prints the table or writes the JSON.

Arguments are validated before anything is launched, so a bad suite or buffer kind
fails at once with a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

from . import bench
from ._version import __version__

#: Environment variables that show the process is a rank of a running job.
JOB_ENV_VARS = ("GPUMPI_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
#: Implementations ``--impl`` and ``--compare`` accept.
IMPLS = ("gpumpi", "mpi4py")


class CLIError(Exception):
    """A usage error: printed as ``gpumpi <command>: <message>``, exit status 2."""


def gpumpi_launcher_available() -> bool:
    """Return True when the gpumpi launcher module (``gpumpi.launch``) exists."""
    return importlib.util.find_spec("gpumpi.launch") is not None


def find_mpiexec() -> str | None:
    """Locate ``mpiexec``: next to ``sys.executable`` first (pip ``mpich``), then PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec")


def in_job(env=None) -> bool:
    """Return True when this process is a rank of a gpumpi or MPI job."""
    env = os.environ if env is None else env
    return any(env.get(name) for name in JOB_ENV_VARS)


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``gpumpi`` command."""
    p = argparse.ArgumentParser(prog="gpumpi", description="gpumpi command-line tools.")
    p.add_argument("--version", action="version", version=f"gpumpi {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{bench,info}")

    b = sub.add_parser(
        "bench",
        help="run a benchmark suite",
        description=(
            "OSU-style benchmarks. Suite p2p: one-way latency (ping-pong), bandwidth (window of "
            "Isend + ack) and bidirectional bandwidth between ranks 0 and 1. Suite pack (TEMPI-style): "
            "Datatype.Pack/Unpack throughput of 1 MiB in blocks of 1 B ... 1 KiB (vector, indexed, subarray) "
            "and first-use time on rank 0, plus strided-send on ranks 0 and 1 (2 ranks). "
            "Results are checked for wrong values. GB = 1e9 B."
        ),
    )
    b.add_argument("suite", nargs="?", default="p2p", help=f"suite to run (default p2p; known: {', '.join(bench.SUITES)})")
    b.add_argument("-n", "--np", type=int, default=2, help="number of ranks to launch (default 2; pack needs 1, its strided-send 2)")
    b.add_argument("--impl", choices=IMPLS, default="gpumpi", help="MPI implementation to measure (default gpumpi)")
    b.add_argument("--compare", choices=IMPLS, default=None, help="also run the suite on this implementation and print ratios")
    b.add_argument(
        "--quick",
        action="store_true",
        help="reduced sweep (p2p: 8 B, 1 KiB, 64 KiB, 1 MiB, 16 MiB; pack: blocks of 1, 8, 64, 1024 B; few iterations)",
    )
    b.add_argument(
        "--sizes",
        default=None,
        help="MIN:MAX bytes (K/M/G suffixes), or a list such as 8,1K,64K (p2p message sizes, default 0:16M; "
        "pack block sizes, default 1:1K)",
    )
    b.add_argument(
        "--iters",
        type=int,
        default=None,
        help="timed iterations per size (default: OSU-style, fewer for large messages; pack: 25, median reported)",
    )
    b.add_argument("--skip", type=int, default=None, help="warm-up iterations per size (default: iters/10; pack: 3)")
    b.add_argument("--window", type=int, default=bench.WINDOW, help=f"messages in flight per bandwidth iteration (default {bench.WINDOW})")
    b.add_argument(
        "--distinct-recv",
        action="store_true",
        help="give each receive of a bandwidth window its own buffer slot (default: one buffer, as OSU)",
    )
    b.add_argument("--buffer", default="numpy", help="buffer kind (default numpy: host memory)")
    b.add_argument("--json", default=None, metavar="PATH", help="save the results as JSON")
    b.add_argument("--csv", default=None, metavar="PATH", help="save the results as CSV")
    b.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    b.add_argument("--_inner", action="store_true", dest="inner", help=argparse.SUPPRESS)
    b.add_argument("--_json", default=None, dest="inner_json", help=argparse.SUPPRESS)

    sub.add_parser("info", help="show versions, optional packages, configuration and IPC capability")
    return p


# ---------------------------------------------------------------- bench


def _validate(args) -> list[int]:
    if args.suite not in bench.SUITES:
        raise CLIError(f"unknown suite {args.suite!r} (available: {', '.join(bench.SUITES)})")
    try:
        bench.check_buffer_kind(args.buffer)
        if args.suite == "pack":
            sizes = bench.parse_blocks(args.sizes, quick=args.quick)
        else:
            sizes = bench.parse_sizes(args.sizes, quick=args.quick)
    except bench.BenchError as e:
        raise CLIError(str(e)) from None
    min_ranks = 1 if args.suite == "pack" else 2
    if args.np < min_ranks:
        raise CLIError(f"the {args.suite} suite needs at least {min_ranks} rank{'s' if min_ranks > 1 else ''} (got -n {args.np})")
    if args.suite != "p2p" and (args.distinct_recv or args.window != bench.WINDOW):
        raise CLIError(f"--window and --distinct-recv apply to the p2p suite only, not {args.suite}")
    if args.iters is not None and args.iters < 1:
        raise CLIError(f"--iters must be >= 1 (got {args.iters})")
    if args.skip is not None and args.skip < 0:
        raise CLIError(f"--skip must be >= 0 (got {args.skip})")
    if args.window < 1:
        raise CLIError(f"--window must be >= 1 (got {args.window})")
    return sizes


def _import_mpi(impl: str):
    if impl == "mpi4py":
        from mpi4py import MPI
    else:
        from gpumpi import MPI
    return MPI


def _document(meta: dict, rows: list[dict]) -> dict:
    return {**meta, "results": rows}


def _run_inner(args, sizes: list[int]) -> int:
    if args.compare:
        raise CLIError("--compare starts its own launches; run it from a shell, not inside a job")
    MPI = _import_mpi(args.impl)
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    progress = bench.stderr_progress(args.impl) if rank == 0 and not args.quiet else None
    if args.suite == "pack":
        rows = bench.run_pack(
            MPI, sizes, iters=args.iters, skip=args.skip, quick=args.quick, buffer=args.buffer, comm=comm, progress=progress
        )
    else:
        rows = bench.run_p2p(
            MPI,
            sizes,
            iters=args.iters,
            skip=args.skip,
            window=args.window,
            quick=args.quick,
            buffer=args.buffer,
            distinct_recv=args.distinct_recv,
            comm=comm,
            progress=progress,
        )
    if rank != 0:
        return 0
    meta = bench.metadata(
        MPI,
        args.impl,
        suite=args.suite,
        nranks=nranks,
        buffer=args.buffer,
        window=args.window,
        distinct_recv=args.distinct_recv,
    )
    if args.inner_json:
        bench.write_json(args.inner_json, _document(meta, rows))
    else:
        print(bench.format_table(rows, meta), flush=True)
        _save(args, _document(meta, rows), rows, {"impl": args.impl})
    return 1 if any(r["wrong"] for r in rows) else 0


def _save(args, document: dict, rows: list[dict], extra: dict) -> None:
    if args.json:
        bench.write_json(args.json, document)
    if args.csv:
        bench.write_csv(args.csv, rows, extra)


def inner_argv(args, impl: str, json_path: str) -> list[str]:
    """The ``bench`` arguments of one inner run (``--compare``, ``--json``, ``--csv`` stay outside)."""
    argv = ["bench", args.suite, "--impl", impl, "--buffer", args.buffer, "--window", str(args.window)]
    if args.sizes is not None:
        argv += ["--sizes", args.sizes]
    if args.iters is not None:
        argv += ["--iters", str(args.iters)]
    if args.skip is not None:
        argv += ["--skip", str(args.skip)]
    if args.quick:
        argv.append("--quick")
    if args.distinct_recv:
        argv.append("--distinct-recv")
    if args.quiet:
        argv.append("--quiet")
    return [*argv, "--_json", json_path, "--_inner"]


def launch_command(impl: str, np: int, argv: list[str]) -> list[str]:
    """The command that runs ``python -m gpumpi.cli argv`` on ``np`` ranks of ``impl``.

    Raises:
        CLIError: the launcher that ``impl`` needs is not installed.
    """
    prog = [sys.executable, "-m", "gpumpi.cli", *argv]
    if impl == "gpumpi":
        if not gpumpi_launcher_available():
            raise CLIError(
                "the gpumpi launcher (gpumpi.launch, 'python -m gpumpi') is not available in this installation; "
                "use --impl mpi4py or run the benchmark under a launcher"
            )
        return [sys.executable, "-m", "gpumpi", "-n", str(np), *prog]
    if importlib.util.find_spec("mpi4py") is None:
        raise CLIError("--impl mpi4py needs the mpi4py package (pip install mpi4py mpich)")
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise CLIError(
            f"--impl mpi4py needs mpiexec, found neither next to {sys.executable} nor on PATH "
            "(pip install mpich, or install an MPI)"
        )
    return [mpiexec, "-n", str(np), *prog]


def _child_env() -> dict:
    env = dict(os.environ)
    # the children import the same gpumpi as this process, wherever it lives
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = root + (os.pathsep + old if old else "")
    return env


def _run_outer(args) -> int:
    impls = [args.impl] + ([args.compare] if args.compare else [])
    with tempfile.TemporaryDirectory(prefix="gpumpi-bench-") as tmp:
        plans = []
        for i, impl in enumerate(impls):
            path = os.path.join(tmp, f"{i}-{impl}.json")
            plans.append((impl, path, launch_command(impl, args.np, inner_argv(args, impl, path))))
        docs, status = [], 0
        for impl, path, cmd in plans:
            rc = subprocess.call(cmd, env=_child_env())
            if not os.path.exists(path):
                print(f"gpumpi bench: the {impl} run failed (exit status {rc})", file=sys.stderr)
                return rc if rc > 0 else 1
            if rc != 0 and status == 0:
                status = rc if rc > 0 else 1
            docs.append(bench.read_json(path))
    if len(docs) == 1:
        doc = docs[0]
        print(bench.format_table(doc["results"], doc), flush=True)
        _save(args, doc, doc["results"], {"impl": doc["impl"]})
    else:
        mine, ref = docs
        merged = bench.compare_results(mine["results"], ref["results"])
        print(bench.format_compare_table(merged, mine, ref), flush=True)
        meta = {k: v for k, v in mine.items() if k != "results"}
        document = {**meta, "impl": mine["impl"], "compare": ref["impl"], "runs": docs, "results": merged}
        _save(args, document, merged, {"impl": mine["impl"], "ref_impl": ref["impl"]})
    wrong = any(r.get("wrong") for d in docs for r in d["results"])
    if len(docs) == 2 and any(m.get("extent_ok") is False for m in merged):
        wrong = True  # the two implementations disagree on a datatype's extent
    return status or (1 if wrong else 0)


def cmd_bench(args) -> int:
    """Run ``gpumpi bench``; see the module docstring for the two modes."""
    sizes = _validate(args)
    if args.inner or in_job():
        return _run_inner(args, sizes)
    return _run_outer(args)


# ---------------------------------------------------------------- info


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _importable(module: str, dist: str | None = None) -> str:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "not found"
    version = _dist_version(dist or module)
    return f"importable ({version})" if version else "importable"


def cma_status() -> tuple[bool, str]:
    """Whether cross-memory attach (``process_vm_readv``) can be used between ranks.

    Returns:
        ``(available, reason)``: available when Yama's ``ptrace_scope`` is absent or
        at most 1 and a ``process_vm_readv`` of this process's own memory works.
    """
    path = "/proc/sys/kernel/yama/ptrace_scope"
    try:
        with open(path, encoding="ascii") as f:
            scope = int(f.read().strip())
    except FileNotFoundError:
        scope, why = None, "yama ptrace_scope absent"
    except (OSError, ValueError) as e:
        return False, f"cannot read {path}: {e}"
    else:
        why = f"yama ptrace_scope={scope}"
        if scope > 1:
            return False, f"{why} (> 1 forbids attaching to sibling processes)"
    probe = _probe_process_vm_readv()
    if probe is not None:
        return False, f"{why}; process_vm_readv self-test failed: {probe}"
    return True, f"{why}; process_vm_readv self-test ok"


def _probe_process_vm_readv() -> str | None:
    """Read 8 bytes of our own memory with process_vm_readv; None on success."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.process_vm_readv
    except (OSError, AttributeError) as e:
        return f"libc has no process_vm_readv ({e})"

    class IOVec(ctypes.Structure):
        _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]

    src = ctypes.create_string_buffer(b"gpumpi!!", 8)
    dst = ctypes.create_string_buffer(8)
    local = IOVec(ctypes.cast(dst, ctypes.c_void_p), 8)
    remote = IOVec(ctypes.cast(src, ctypes.c_void_p), 8)
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(IOVec), ctypes.c_ulong, ctypes.POINTER(IOVec), ctypes.c_ulong, ctypes.c_ulong]
    n = fn(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if n != 8:
        err = ctypes.get_errno()
        return f"{os.strerror(err)} (errno {err})" if n < 0 else f"short read ({n} bytes)"
    if dst.raw != src.raw:
        return "data mismatch"
    return None


def info_lines() -> list[str]:
    """The report of ``gpumpi info``, one line per item."""
    import dataclasses
    import platform

    from . import _config

    lines = [f"gpumpi {__version__} ({os.path.dirname(os.path.abspath(__file__))})"]
    lines.append(f"python {platform.python_version()} ({sys.executable})")
    for name in ("numpy", "numba"):
        v = _dist_version(name)
        lines.append(f"{name} {v}" if v else f"{name}: not installed")
    lines.append("optional packages:")
    mpiexec = find_mpiexec()
    mpich = _dist_version("mpich")
    rows = [
        ("mpi4py", _importable("mpi4py")),
        ("mpich", (f"pip package {mpich}" if mpich else "pip package not installed") + f"; mpiexec: {mpiexec or 'not found'}"),
        ("cupy", _importable("cupy", "cupy-cuda12x") if _dist_version("cupy-cuda12x") else _importable("cupy")),
        ("numba-cuda", _importable("numba_cuda", "numba-cuda")),
        ("nvtx", _importable("nvtx")),
    ]
    lines.extend(f"  {k:<11} {v}" for k, v in rows)
    lines.append("gpumpi runtime:")
    for mod in ("gpumpi.MPI", "gpumpi.launch"):
        lines.append(f"  {mod:<14} {'module found (not imported)' if importlib.util.find_spec(mod) else 'missing'}")
    try:
        cfg = _config.get()
    except ValueError as e:
        lines.append(f"configuration: invalid ({e})")
    else:
        lines.append("configuration (GPUMPI_*):")
        for f in dataclasses.fields(cfg):
            var = "GPUMPI_" + f.name.upper()
            mark = "" if var in os.environ else "  (default)"
            lines.append(f"  {var:<22} {getattr(cfg, f.name)!r}{mark}")
    ok, why = cma_status()
    lines.append(f"cross-memory attach: {'available' if ok else 'unavailable'} ({why})")
    from ._runtime import query_gpu_support  # initialises nothing: reads the driver

    q = query_gpu_support()
    where = f"{q['gpus']} GPU(s), CuPy" if q["cuda"] else ("simulated device memory (no usable CUDA driver"
                                                            f"{'' if q['cupy'] else ', cupy not installed'})")
    lines.append(f"devices: {where}; device transports {', '.join(q['transports']['device'])}; "
                 f"host transports {', '.join(q['transports']['host'])}")
    return lines


def cmd_info(args) -> int:
    """Print ``gpumpi info``."""
    print("\n".join(info_lines()), flush=True)
    return 0


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gpumpi`` console script.

    Args:
        argv: arguments without the program name; None reads ``sys.argv``.

    Returns:
        The exit status: 0 success, 1 failed run or wrong values, 2 usage error.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its message
        return e.code if isinstance(e.code, int) else 2
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("gpumpi: missing command (bench or info)", file=sys.stderr)
        return 2
    try:
        if args.command == "bench":
            return cmd_bench(args)
        return cmd_info(args)
    except (CLIError, bench.BenchError) as e:
        print(f"gpumpi {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
