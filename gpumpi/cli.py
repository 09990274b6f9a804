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

Device buffers (``--buffer sim|cupy``) are gpumpi's: its ranks get
``GPUMPI_DEVICE`` (``sim``, or ``auto`` for CuPy, which binds GPU
``local_rank % ngpus``) and, with ``--transport cuda_ipc|staging``,
``GPUMPI_TRANSPORTS=device:<name>``, in the launcher's environment and again in
``os.environ`` before ``gpumpi.MPI`` is imported (so a run started by hand under
``gpumpirun`` gets them too).  mpi4py runs always use host numpy buffers: with
``--compare mpi4py`` the header says so.

``p2p-matrix`` starts one 2-rank gpumpi job per ordered pair of devices
(``--_pair SRC,DST`` tells the job which) and prints one table of all pairs.

``rma`` (OSU-style one-sided operations, rank 0 the origin and rank 1 the target) takes
``--ops`` (its tests) and ``--window create|allocate`` (the window flavor; p2p's
``--window`` is a message count).  pip's MPICH is not CUDA-aware, so with device buffers
``--compare mpi4py`` launches no mpi4py run: its rows are ``skipped`` with the reason.

``--plot PATH`` (p2p) draws the document that ``--json`` would write as a PNG chart of
latency against message size, one line per implementation
(:func:`gpumpi.bench.plot.plot_latency`), in the outer process after the runs, or on rank
0 of a run started inside a job.  Without ``--sizes`` the sweep is 0 B to 64 KiB in powers
of two.  matplotlib is imported only when ``--plot`` is given, and checked before
anything is launched.

``ga`` (GA's ``perf.F`` on :mod:`gpumpi.ga`: get/put/acc of local and remote sections, and
``read_inc`` against ``Fetch_and_op``) runs on exactly 4 ranks, the default of ``-n`` for it
(:attr:`~gpumpi.bench.Suite.ranks`); it measures gpumpi only, and ``--compare ga`` compares it
with GA's own C library (:func:`gpumpi.bench.ga_reference`, run in the outer process: built once
with ``mpicc``, run with ``mpiexec -n 4``), or says in one line why that comparison is skipped.

``coll`` (nccl-tests-style collectives) takes ``--ops``, ``--dtype``, ``--op`` and
``--root``.  Its third implementation, ``nccl`` (``--impl nccl`` or ``--compare nccl``),
is launched like gpumpi, on CuPy buffers with one GPU per rank: gpumpi carries NCCL's
unique id, the barriers and the statistics, CuPy's NCCL binding the collectives.

Arguments are validated before anything is launched, so a bad suite, buffer kind
or transport, or CuPy buffers without CuPy and a GPU, fail at once with a
one-line message and exit status 2.
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
#: Implementations ``--impl`` and ``--compare`` accept (``nccl``: the coll suite only).
IMPLS = ("gpumpi", "mpi4py", "nccl")
#: What ``--compare`` accepts: an implementation, or ``ga`` (GA's C library; the ga suite only).
COMPARES = (*IMPLS, "ga")


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
            "Suite p2p-matrix (nvbandwidth-style): unidirectional device-to-device bandwidth between every "
            "ordered pair of GPUs of the node, cold (first message), warm (median) and as a percentage of a "
            "local device copy. Suite coll (nccl-tests-style): time, algbw and busbw of Allreduce, Bcast, Reduce, "
            "Allgather, Reduce_scatter_block, Alltoall and Barrier on all ranks. Suite rma (OSU one-sided, passive target, "
            "rank 0 origin, rank 1 target): Put/Get + Flush latency, Put/Get/Accumulate bandwidth (window of 64 + Flush), "
            "Fetch_and_op and Compare_and_swap + Flush_local time per operation. Suite ga (GA's perf.F on gpumpi.ga, "
            "exactly 4 ranks): time per call and MB/s of ga.get, ga.put and ga.acc on local and remote 1-D and 2-D "
            "sections, and ga.read_inc against Win.Fetch_and_op; --compare ga runs it on GA's own C library. "
            "Results are checked for wrong values. GB = 1e9 B."
        ),
    )
    b.add_argument("suite", nargs="?", default="p2p", help=f"suite to run (default p2p; known: {', '.join(bench.SUITES)})")
    b.add_argument("-n", "--np", type=int, default=None,
                   help="number of ranks to launch (default 2; pack needs 1, its strided-send 2; ga: exactly 4, "
                   "its default)")
    b.add_argument("--impl", choices=IMPLS, default="gpumpi", help="MPI implementation to measure (default gpumpi)")
    b.add_argument("--launcher", choices=("gpumpirun", "mpiexec"), default="gpumpirun",
                   help="how gpumpi's ranks start: its own launcher (default), or mpiexec, as on a cluster (the "
                   "mpi4py bootstrap: ranks of other nodes through the MPI library)")
    b.add_argument("--sim-nodes", type=int, default=0, metavar="K",
                   help="with --launcher mpiexec: group gpumpi's ranks into K pretend nodes (GPUMPI_SIM_NODES), "
                   "so every byte between them goes through the mpi transport")
    b.add_argument("--compare", choices=COMPARES, default=None,
                   help="also run the suite on this implementation and print ratios (ga: GA's own C library, "
                   "the ga suite only)")
    b.add_argument(
        "--quick",
        action="store_true",
        help="reduced sweep (p2p and coll: 8 B, 1 KiB, 64 KiB, 1 MiB, 16 MiB; rma: 8 B, 1 KiB, 64 KiB, 1 MiB; "
        "pack: blocks of 1, 8, 64, 1024 B; ga: sections of 8 B, 2 KiB, 66248 B, 512 KiB, 2 MiB; few iterations)",
    )
    b.add_argument(
        "--sizes",
        default=None,
        help="MIN:MAX bytes (K/M/G suffixes), or a list such as 8,1K,64K (p2p message sizes, default 0:16M; "
        "pack block sizes, default 1:1K; coll: one rank's whole array, default 8:16M; rma: bytes per operation, "
        "default 8:1M in x4 steps; ga: bytes of a section, 8*s*s for perf.F's sides s = 1 ... 512, default all)",
    )
    b.add_argument(
        "--iters",
        type=int,
        default=None,
        help="timed iterations per size (default: OSU-style, fewer for large messages; pack: 25, median reported; "
        "ga: calls per measurement, default one pass over the sections that fit, at least 20)",
    )
    b.add_argument("--skip", type=int, default=None, help="warm-up iterations per size (default: iters/10; pack: 3)")
    b.add_argument(
        "--window",
        default=None,
        help=f"p2p: messages in flight per bandwidth iteration (default {bench.WINDOW}); rma: the window flavor, "
        "allocate (Win.Allocate, the default) or create (Win.Create on MPI.Alloc_mem memory)",
    )
    b.add_argument(
        "--distinct-recv",
        action="store_true",
        help="give each receive of a bandwidth window its own buffer slot (default: one buffer, as OSU)",
    )
    b.add_argument(
        "--buffer",
        default=None,
        help="buffer kind: numpy (host memory; the default of p2p and pack), sim (simulated device memory) or cupy "
        "(CuPy arrays on the rank's GPU); p2p-matrix: sim or cupy, default cupy when CuPy sees a GPU, else sim",
    )
    b.add_argument(
        "--transport",
        default="auto",
        help="device transport of gpumpi's device messages: auto (gpumpi's choice), cuda_ipc or staging "
        "(sets GPUMPI_TRANSPORTS=device:<name> for the ranks; device buffers only)",
    )
    b.add_argument(
        "--ops",
        default=None,
        help=f"coll: comma-separated collectives to run (default all: {','.join(bench.coll.COLLS)}); "
        f"rma: tests to run (default all: {','.join(bench.rma.TESTS)}); io: likewise ({','.join(bench.io.TESTS)})",
    )
    b.add_argument("--dtype", default=None, help=f"coll: element type (default float64; {', '.join(bench.coll.DTYPES)})")
    b.add_argument("--op", default=None, help=f"coll: reduction of allreduce, reduce, reduce_scatter (default sum; {', '.join(bench.coll.OPS)})")
    b.add_argument("--root", type=int, default=None, help="coll: root rank of bcast and reduce (default 0)")
    b.add_argument("--json", default=None, metavar="PATH", help="save the results as JSON")
    b.add_argument("--csv", default=None, metavar="PATH", help="save the results as CSV")
    b.add_argument(
        "--plot",
        default=None,
        metavar="PATH",
        help="p2p: save a PNG chart of one-way latency (and bandwidth) against message size, with --compare both "
        "implementations on one chart; without --sizes the sweep is 0 B to 64 KiB in powers of two; needs matplotlib "
        f"({bench.plot.INSTALL_HINT})",
    )
    b.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    b.add_argument("--_inner", action="store_true", dest="inner", help=argparse.SUPPRESS)
    b.add_argument("--_json", default=None, dest="inner_json", help=argparse.SUPPRESS)
    b.add_argument("--_pair", default=None, dest="pair", help=argparse.SUPPRESS)

    sub.add_parser("info", help="show versions, optional packages, configuration and IPC capability")
    return p


# ---------------------------------------------------------------- bench


def _default_buffer(suite: str) -> str:
    if suite != "p2p-matrix":
        return "numpy"
    return "cupy" if bench.cupy_status()[0] else "sim"


def parse_pair(text: str) -> tuple[int, int]:
    """Parse the ``--_pair SRC,DST`` of one p2p-matrix job.

    Raises:
        CLIError: not two non-negative integers.
    """
    parts = text.split(",")
    try:
        src, dst = (int(p, 10) for p in parts)
    except ValueError:
        raise CLIError(f"--_pair: expected SRC,DST device numbers ({text!r})") from None
    if src < 0 or dst < 0:
        raise CLIError(f"--_pair: device numbers must be >= 0 ({text!r})")
    return src, dst


def _validate(args) -> list[int]:
    if args.suite not in bench.SUITES:
        raise CLIError(f"unknown suite {args.suite!r} (available: {', '.join(bench.SUITES)})")
    matrix = args.suite == "p2p-matrix"
    suite = bench.SUITES[args.suite]
    if args.np is None:
        args.np = suite.ranks or 2
    _validate_plot(args)
    try:
        bench.check_transport(args.transport)
        if args.buffer is not None:
            bench.check_buffer_kind(args.buffer, args.suite)
        sizes = suite.parse_sizes(args.sizes, quick=args.quick)
    except bench.BenchError as e:
        raise CLIError(str(e)) from None
    if matrix:
        if args.np != 2:
            raise CLIError(f"the p2p-matrix suite runs 2 ranks per device pair (got -n {args.np})")
        if args.impl != "gpumpi" or args.compare:
            raise CLIError("the p2p-matrix suite measures gpumpi only (no --impl mpi4py, no --compare)")
    if suite.ranks is not None and args.np != suite.ranks:
        raise CLIError(f"the {args.suite} suite runs on exactly {suite.ranks} ranks (got -n {args.np})")
    if args.sim_nodes < 0:
        raise CLIError(f"--sim-nodes must be >= 0 (got {args.sim_nodes})")
    if args.sim_nodes and args.launcher != "mpiexec":
        raise CLIError(f"--sim-nodes {args.sim_nodes} needs --launcher mpiexec (gpumpirun runs one node)")
    _validate_ga(args)
    min_ranks = suite.min_ranks
    if args.np < min_ranks:
        raise CLIError(f"the {args.suite} suite needs at least {min_ranks} rank{'s' if min_ranks > 1 else ''} (got -n {args.np})")
    _validate_window(args)
    if args.iters is not None and args.iters < 1:
        raise CLIError(f"--iters must be >= 1 (got {args.iters})")
    if args.skip is not None and args.skip < 0:
        raise CLIError(f"--skip must be >= 0 (got {args.skip})")
    if args.pair is not None:
        if not matrix:
            raise CLIError(f"--_pair applies to the p2p-matrix suite only, not {args.suite}")
        parse_pair(args.pair)
    _validate_coll(args)
    if args.buffer is None:
        args.buffer = "cupy" if args.impl == "nccl" else _default_buffer(args.suite)
    if args.impl == "nccl" and args.buffer != "cupy":
        raise CLIError(f"--impl nccl runs on cupy buffers (--buffer {args.buffer})")
    device = args.buffer in bench.DEVICE_BUFFER_KINDS
    if args.transport != "auto" and not device:
        raise CLIError(f"--transport {args.transport} applies to device buffers (--buffer sim or cupy), not {args.buffer}")
    if device and not {"gpumpi", "nccl"} & {args.impl, args.compare}:
        raise CLIError(
            f"--buffer {args.buffer}: mpi4py runs use host numpy buffers; measure gpumpi "
            f"(--impl gpumpi, optionally --compare mpi4py)"
        )
    try:
        bench.check_device_buffers(args.buffer)
    except bench.BenchError as e:
        raise CLIError(str(e)) from None
    return sizes


def _validate_ga(args) -> None:
    """The ga suite measures gpumpi (``--impl gpumpi``) and compares with GA's C library only
    (``--compare ga``); ``--compare ga`` is the ga suite's alone."""
    if args.suite != "ga":
        if args.compare == "ga":
            raise CLIError(f"--compare ga (GA's own C library) applies to the ga suite only, not {args.suite}")
        return
    if args.impl != "gpumpi":
        raise CLIError(f"the ga suite measures gpumpi.ga (--impl gpumpi, not {args.impl}); "
                       "--compare ga runs it on GA's own C library")  # fmt: skip
    if args.compare not in (None, "ga"):
        raise CLIError(f"the ga suite compares with GA's own C library only (--compare ga, not {args.compare})")


def _validate_plot(args) -> None:
    """``--plot PATH``: the p2p suite only, a ``.png`` in an existing folder, matplotlib importable
    (checked here, before anything is launched); without ``--sizes``, the sweep becomes
    :func:`~gpumpi.bench.plot.plot_sizes` (0 B to 64 KiB, with ``--quick`` too)."""
    if args.plot is None:
        return
    if args.suite != "p2p":
        raise CLIError(f"--plot applies to the p2p suite only, not {args.suite}")
    if not args.plot.lower().endswith(".png"):
        raise CLIError(f"--plot writes a PNG: give a path ending in .png (got {args.plot!r})")
    folder = os.path.dirname(os.path.abspath(args.plot))
    if not os.path.isdir(folder):
        raise CLIError(f"--plot {args.plot}: no such folder ({folder})")
    try:
        bench.plot.check_matplotlib()
    except bench.BenchError as e:
        raise CLIError(str(e)) from None
    if args.sizes is None:
        args.sizes = ",".join(str(n) for n in bench.plot.plot_sizes())


def _validate_window(args) -> None:
    """``--window``: p2p's message count (an integer >= 1, default :data:`~gpumpi.bench.WINDOW`), the rma
    suite's window flavor (default ``allocate``), given to no other suite; ``--distinct-recv``: p2p only."""
    if args.suite == "rma":
        if args.distinct_recv:
            raise CLIError("--distinct-recv applies to the p2p suite only, not rma")
        args.window = "allocate" if args.window is None else args.window
        try:
            bench.rma.check_window_kind(args.window)
        except bench.BenchError as e:
            raise CLIError(str(e)) from None
        return
    if args.suite != "p2p":
        if args.distinct_recv or args.window not in (None, str(bench.WINDOW), bench.WINDOW):
            raise CLIError(f"--window and --distinct-recv apply to the p2p suite only, not {args.suite} "
                           "(the rma suite's --window is create|allocate)")  # fmt: skip
        args.window = None
        return
    if args.window is None:
        args.window = bench.WINDOW
    try:
        args.window = int(args.window)
    except ValueError:
        raise CLIError(f"--window of the p2p suite is a message count (got {args.window!r})") from None
    if args.window < 1:
        raise CLIError(f"--window must be >= 1 (got {args.window})")


def _validate_coll(args) -> None:
    """The coll suite's options: collectives, type, op, root; and NCCL where it is asked for."""
    coll = args.suite == "coll"
    if args.suite in ("rma", "io") and args.ops is not None:
        try:
            (bench.rma.parse_rma_ops if args.suite == "rma" else bench.io.parse_io_ops)(args.ops)
        except bench.BenchError as e:
            raise CLIError(str(e)) from None
    given = [f"--{name}" for name in ("ops", "dtype", "op", "root") if getattr(args, name) is not None]
    if args.suite in ("rma", "io"):
        given = given[1:] if given[:1] == ["--ops"] else given
    if given and not coll:
        raise CLIError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to the coll suite only, not {args.suite}")
    nccl = "nccl" in (args.impl, args.compare)
    if nccl and not coll:
        raise CLIError(f"nccl runs the coll suite only, not {args.suite}")
    if not coll:
        return
    if args.impl == "nccl" and args.buffer not in (None, "cupy"):
        raise CLIError(f"--impl nccl runs on cupy buffers (--buffer {args.buffer})")
    try:
        ops = bench.coll.parse_ops(args.ops)
        dtype = args.dtype or "float64"
        bench.coll.check_dtype(dtype)
        op = args.op or "sum"
        bench.coll.check_op(op)
        if args.inner or in_job():
            return  # the job's size, not -n, decides the rest: run_coll checks it
        bench.coll.check_root(args.root or 0, args.np)
        if any(c in bench.coll.REDUCING for c in ops):
            bench.coll.check_exact(op, dtype, args.np)
        if nccl:
            bench.coll.check_nccl(args.np, ops, dtype)
    except bench.BenchError as e:
        raise CLIError(str(e)) from None


def rank_env(args, impl: str, environ=None) -> dict:
    """The environment variables that the ranks of ``impl`` need for this run.

    gpumpi with device buffers: ``GPUMPI_DEVICE`` (``sim`` for sim buffers, ``auto``
    for CuPy) and, unless ``--transport auto``, ``GPUMPI_TRANSPORTS`` with its
    device item replaced (:func:`gpumpi.bench.transports_setting`).  Nothing for
    mpi4py or host buffers.

    Args:
        args: the parsed, validated ``bench`` arguments.
        impl: ``"gpumpi"`` or ``"mpi4py"``.
        environ: the environment to start from (default ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    if impl == "nccl":
        return {"GPUMPI_DEVICE": "auto"}
    if impl != "gpumpi" or args.buffer not in bench.DEVICE_BUFFER_KINDS:
        return {}
    env = {"GPUMPI_DEVICE": "sim" if args.buffer == "sim" else "auto"}
    if args.transport != "auto":
        env["GPUMPI_TRANSPORTS"] = bench.transports_setting(args.transport, environ.get("GPUMPI_TRANSPORTS", ""))
    return env


def _import_mpi(impl: str, args=None):
    if impl == "mpi4py":
        from mpi4py import MPI

        return MPI
    wanted = rank_env(args, impl) if args is not None else {}
    if wanted and "gpumpi.MPI" not in sys.modules:
        os.environ.update(wanted)  # read once, when gpumpi.MPI initialises below
    # measure the steady state: the compiled small-message path loaded at start, not in a timed
    # loop (set only while gpumpi.MPI reads its configuration: the caller's environment is left as it was)
    fast = "gpumpi.MPI" not in sys.modules and "GPUMPI_FASTPATH" not in os.environ
    if fast:
        os.environ["GPUMPI_FASTPATH"] = "on"
    try:
        import gpumpi
        from gpumpi import MPI, _config
    finally:
        if fast:
            os.environ.pop("GPUMPI_FASTPATH", None)

    if impl == "nccl":
        gpumpi.init(device="auto")  # NCCL's GPU: local_rank % ngpus, one per rank
    elif args is not None and args.buffer in bench.DEVICE_BUFFER_KINDS:
        if args.suite == "p2p-matrix":
            gpumpi.init(device="sim" if args.buffer == "sim" else "none")  # the suite binds each rank's GPU
        else:
            gpumpi.init(device="sim" if args.buffer == "sim" else "auto")  # GPU local_rank % ngpus
    want = wanted.get("GPUMPI_TRANSPORTS")
    have = _config.get().transports
    if want is not None and have != want:
        raise bench.BenchError(
            f"--transport {args.transport}: gpumpi was initialised with GPUMPI_TRANSPORTS={have!r} "
            f"before the option could apply (needs {want!r})"
        )
    return MPI


def _transports_env(impl: str) -> str | None:
    if impl not in ("gpumpi", "nccl"):
        return None
    from gpumpi import _config

    return _config.get().transports or None


def _device_of(buffer: str) -> int:
    from gpumpi import _device

    return (_device.sim_adapter() if buffer == "sim" else _device.adapter()).current_device()


def _document(meta: dict, rows: list[dict]) -> dict:
    return {**meta, "results": rows}


def _run_inner(args, sizes: list[int]) -> int:
    if args.compare:
        raise CLIError("--compare starts its own launches; run it from a shell, not inside a job")
    if args.suite == "p2p-matrix":
        return _run_matrix_inner(args, sizes)
    if args.suite == "coll":
        return _run_coll_inner(args, sizes)
    if args.suite == "rma":
        return _run_rma_inner(args, sizes)
    if args.suite == "ga":
        return _run_ga_inner(args, sizes)
    if args.suite == "io":
        return _run_io_inner(args, sizes)
    MPI = _import_mpi(args.impl, args)
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    progress = bench.stderr_progress(args.impl) if rank == 0 and not args.quiet else None
    devices = None
    if args.buffer in bench.DEVICE_BUFFER_KINDS and rank <= 1:
        devices = bench.pair_devices(MPI, comm, _device_of(args.buffer))
    if args.suite == "pack":
        rows = bench.pack.run_pack(
            MPI, sizes, iters=args.iters, skip=args.skip, quick=args.quick, buffer=args.buffer, comm=comm, progress=progress
        )
    else:
        rows = bench.p2p.run_p2p(
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
        transport=args.transport,
        transports_env=_transports_env(args.impl),
        devices=devices,
    )
    return _emit(args, meta, rows)


def _run_coll_inner(args, sizes: list[int]) -> int:
    MPI = _import_mpi(args.impl, args)
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    progress = bench.stderr_progress(args.impl) if rank == 0 and not args.quiet else None
    ops = bench.coll.parse_ops(args.ops)
    dtype, op, root = args.dtype or "float64", args.op or "sum", args.root or 0
    rows = bench.coll.run_coll(
        MPI, sizes, ops=ops, dtype=dtype, op=op, root=root, iters=args.iters, skip=args.skip, quick=args.quick,
        buffer=args.buffer, backend="nccl" if args.impl == "nccl" else "mpi", comm=comm, progress=progress,
    )  # fmt: skip
    if rank != 0:
        return 0
    if args.impl == "nccl":
        ops = [c for c in ops if c in bench.coll.NCCL_COLLS]
    meta = bench.coll.coll_metadata(
        MPI, args.impl, nranks=nranks, buffer=args.buffer, ops=ops, dtype=dtype, op=op, root=root,
        transport=args.transport, transports_env=_transports_env(args.impl),
    )  # fmt: skip
    return _emit(args, meta, rows)


def _run_rma_inner(args, sizes: list[int]) -> int:
    MPI = _import_mpi(args.impl, args)
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    progress = bench.stderr_progress(args.impl) if rank == 0 and not args.quiet else None
    tests = bench.rma.parse_rma_ops(args.ops)
    rows = bench.rma.run_rma(
        MPI, sizes, tests=tests, window=args.window, iters=args.iters, skip=args.skip, quick=args.quick,
        buffer=args.buffer, comm=comm, progress=progress,
    )  # fmt: skip
    if rank != 0:
        return 0
    meta = bench.rma.rma_metadata(
        MPI, args.impl, nranks=nranks, buffer=args.buffer, window=args.window, tests=tests, transport=args.transport,
        transports_env=_transports_env(args.impl),
    )  # fmt: skip
    return _emit(args, meta, rows)


def _run_ga_inner(args, sizes: list[int]) -> int:
    MPI = _import_mpi(args.impl, args)
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    progress = bench.stderr_progress(args.impl) if rank == 0 and not args.quiet else None
    rows = bench.ga.run_ga(MPI, sizes, iters=args.iters, skip=args.skip, quick=args.quick, buffer=args.buffer,
                           progress=progress)  # fmt: skip
    if rank != 0:
        return 0
    meta = bench.ga.ga_metadata(MPI, args.impl, nranks=nranks, buffer=args.buffer, quick=args.quick,
                                transport=args.transport, transports_env=_transports_env(args.impl))  # fmt: skip
    return _emit(args, meta, rows)


def _run_io_inner(args, sizes: list[int]) -> int:
    MPI = _import_mpi(args.impl, args)
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    progress = bench.stderr_progress(args.impl) if rank == 0 and not args.quiet else None
    tests = bench.io.parse_io_ops(args.ops)
    rows = bench.io.run_io(MPI, sizes, tests=tests, iters=args.iters, quick=args.quick, buffer=args.buffer,
                           comm=comm, progress=progress)  # fmt: skip
    if rank != 0:
        return 0
    meta = bench.io.io_metadata(MPI, args.impl, nranks=nranks, buffer=args.buffer, tests=tests)
    return _emit(args, meta, rows)


def _io_skipped_document(args, impl: str, reason: str) -> dict:
    """The document of an io run that ``impl`` cannot make (mpi4py on device buffers): no rows."""
    return _document(bench.io.io_metadata(None, impl, nranks=args.np, buffer=args.buffer,
                                          tests=bench.io.parse_io_ops(args.ops), skipped=reason), [])


def _ga_reference_document(args, sizes: list[int]) -> dict:
    """``--compare ga``: GA's C library on the same plans, in this (outer) process; never raises."""
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    return bench.ga_reference(sizes, iters=args.iters, skip=args.skip, quick=args.quick, log=log)


def _rma_skipped_document(args, impl: str, sizes: list[int], reason: str) -> dict:
    """The document of an rma run that ``impl`` cannot make (mpi4py on device windows): every row skipped."""
    tests = bench.rma.parse_rma_ops(args.ops)
    rows = bench.rma.skipped_rows(bench.rma.plan_rma(tests, sizes), reason)
    meta = bench.rma.rma_metadata(None, impl, nranks=args.np, buffer=args.buffer, window=args.window, tests=tests,
                                  skipped=reason)  # fmt: skip
    return _document(meta, rows)


def _emit(args, meta: dict, rows: list[dict]) -> int:
    if args.inner_json:
        bench.write_json(args.inner_json, _document(meta, rows))
    else:
        print(bench.format_table(rows, meta), flush=True)
        _save(args, _document(meta, rows), rows, {"impl": args.impl})
    return 1 if any(r["wrong"] for r in rows) else 0


def _run_matrix_inner(args, sizes: list[int]) -> int:
    if args.pair is None:
        raise CLIError("p2p-matrix starts one job per device pair; run it from a shell, not inside a job")
    src, dst = parse_pair(args.pair)
    MPI = _import_mpi("gpumpi", args)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    progress = bench.stderr_progress("gpumpi") if rank == 0 and not args.quiet else None
    rows = bench.p2p_matrix.run_p2p_matrix_pair(
        MPI, src, dst, sizes, buffer=args.buffer, iters=args.iters, skip=args.skip, quick=args.quick, comm=comm,
        progress=progress,
    )  # fmt: skip
    if rank != 0:
        return 0
    meta = bench.metadata(
        MPI, "gpumpi", suite="p2p-matrix", nranks=comm.Get_size(), buffer=args.buffer, transport=args.transport,
        transports_env=_transports_env("gpumpi"), devices=bench.device_count(args.buffer),
    )  # fmt: skip
    return _emit(args, meta, rows)


def _save(args, document: dict, rows: list[dict], extra: dict) -> None:
    if args.json:
        bench.write_json(args.json, document)
    if args.csv:
        bench.write_csv(args.csv, rows, extra)
    if getattr(args, "plot", None):
        try:
            bench.plot.plot_latency(document, args.plot)
        except OSError as e:
            raise CLIError(f"--plot {args.plot}: cannot write the chart ({e})") from None


def inner_argv(args, impl: str, json_path: str, pair: tuple[int, int] | None = None) -> list[str]:
    """The ``bench`` arguments of one inner run (``--compare``, ``--json``, ``--csv`` stay outside).

    mpi4py runs get ``--buffer numpy`` whatever ``--buffer`` says (gpumpi's device
    buffers are not mpi4py's), nccl runs ``--buffer cupy``; ``pair`` is the ``(src, dst)``
    of one p2p-matrix job.
    """
    if impl == "nccl":
        buffer = "cupy"
    else:
        buffer = (args.buffer or _default_buffer(args.suite)) if impl == "gpumpi" else "numpy"
    argv = ["bench", args.suite, "--impl", impl, "--buffer", buffer]
    if args.window is not None:
        argv += ["--window", str(args.window)]
    if impl == "gpumpi" and buffer in bench.DEVICE_BUFFER_KINDS and args.transport != "auto":
        argv += ["--transport", args.transport]
    if pair is not None:
        argv += ["--_pair", f"{pair[0]},{pair[1]}"]
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
    for name in ("ops", "dtype", "op", "root"):
        if getattr(args, name) is not None:
            argv += [f"--{name}", str(getattr(args, name))]
    if args.quiet:
        argv.append("--quiet")
    return [*argv, "--_json", json_path, "--_inner"]


def launch_command(impl: str, np: int, argv: list[str], launcher: str = "gpumpirun") -> list[str]:
    """The command that runs ``python -m gpumpi.cli argv`` on ``np`` ranks of ``impl``
    (gpumpi under ``launcher``: ``gpumpirun`` or ``mpiexec``).

    Raises:
        CLIError: the launcher that ``impl`` needs is not installed.
    """
    prog = [sys.executable, "-m", "gpumpi.cli", *argv]
    if impl in ("gpumpi", "nccl") and launcher != "mpiexec":
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


def _child_env(args=None, impl: str = "gpumpi") -> dict:
    env = dict(os.environ)
    # the children import the same gpumpi as this process, wherever it lives
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = root + (os.pathsep + old if old else "")
    if args is not None:
        env.update(rank_env(args, impl, os.environ))
        if impl == "gpumpi" and getattr(args, "launcher", "") == "mpiexec":
            env["GPUMPI_SIM_NODES"] = str(args.sim_nodes)
    return env


def _run_matrix_outer(args) -> int:
    ndev = bench.device_count(args.buffer)
    pairs = [(i, j) for i in range(ndev) for j in range(ndev)]
    docs = []
    with tempfile.TemporaryDirectory(prefix="gpumpi-bench-") as tmp:
        for src, dst in pairs:
            path = os.path.join(tmp, f"pair-{src}-{dst}.json")
            cmd = launch_command("gpumpi", 2, inner_argv(args, "gpumpi", path, (src, dst)))
            rc = subprocess.call(cmd, env=_child_env(args, "gpumpi"))
            if not os.path.exists(path):
                print(f"gpumpi bench: the p2p-matrix job of devices {src} -> {dst} failed (exit status {rc})",
                      file=sys.stderr)  # fmt: skip
                return rc if rc > 0 else 1
            docs.append(bench.read_json(path))
    rows = [r for d in docs for r in d["results"]]
    meta = {k: v for k, v in docs[0].items() if k != "results"}
    meta["pairs"] = [list(p) for p in pairs]
    print(bench.format_table(rows, meta), flush=True)
    _save(args, {**meta, "results": rows}, rows, {"impl": "gpumpi"})
    return 1 if any(r.get("wrong") for r in rows) else 0


def _run_outer(args, sizes: list[int] | None = None) -> int:
    if args.suite == "p2p-matrix":
        return _run_matrix_outer(args)
    impls = [args.impl] + ([args.compare] if args.compare else [])
    with tempfile.TemporaryDirectory(prefix="gpumpi-bench-") as tmp:
        plans = []
        for i, impl in enumerate(impls):
            path = os.path.join(tmp, f"{i}-{impl}.json")
            skip = bench.rma.device_skip_reason(impl, args.buffer) if args.suite == "rma" else None
            if args.suite == "io" and impl == "mpi4py" and args.buffer not in (None, "numpy"):
                skip = bench.io.NO_DEVICE_WHY
            cmd = None if skip or impl == "ga" else launch_command(impl, args.np, inner_argv(args, impl, path),
                                                                   args.launcher)
            plans.append((impl, path, cmd, skip))
        docs, status = [], 0
        for impl, path, cmd, skip in plans:
            if skip:
                docs.append(_io_skipped_document(args, impl, skip) if args.suite == "io" else
                            _rma_skipped_document(args, impl, sizes or [], skip))
                continue
            if impl == "ga":
                docs.append(_ga_reference_document(args, sizes))
                continue
            rc = subprocess.call(cmd, env=_child_env(args, impl))
            if not os.path.exists(path):
                print(f"gpumpi bench: the {impl} run failed (exit status {rc})", file=sys.stderr)
                return rc if rc > 0 else 1
            if rc != 0 and status == 0:
                status = rc if rc > 0 else 1
            docs.append(bench.read_json(path))
    if len(docs) == 2 and docs[1]["impl"] == "ga" and docs[1].get("skipped"):
        reason = docs[1]["skipped"]
        print(f"# --compare ga skipped: {reason}", flush=True)
        docs = [{**docs[0], "compare": "ga", "compare_skipped": reason}]
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
    return _run_outer(args, sizes)


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

    try:
        q = query_gpu_support()
    except ValueError as e:  # a bad GPUMPI_* value: reported above, the rest of the report still prints
        lines.append(f"devices: unknown ({e})")
        return lines
    where = f"{q['gpus']} GPU(s), CuPy" if q["cuda"] else ("simulated device memory (no usable CUDA driver"
                                                            f"{'' if q['cupy'] else ', cupy not installed'})")
    lines.append(f"devices: {where}; device transports {', '.join(q['transports']['device'])}; "
                 f"host transports {', '.join(q['transports']['host'])}")
    eng = q["engine"]
    if eng == "mpi":
        m = q["mpi"]
        lib = m["library"] or "the MPI library mpi4py loads"
        aware = {True: "CUDA-aware", False: "not CUDA-aware (device data staged)", None: "CUDA support asked at "
                 "initialisation"}[m["cuda_aware"]]
        lines.append(f"engine: mpi (an MPI launcher started this process: ranks of other nodes through {lib}; {aware}; "
                     f"nodes {q['nodes'] if q['nodes'] is not None else 'from COMM_TYPE_SHARED'})")
    else:
        lines.append(f"engine: {eng} (one node: rings, cross-memory attach, CUDA IPC; under mpiexec/srun the ranks "
                     f"of other nodes go through MPI via mpi4py)")
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
