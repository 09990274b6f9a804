"""``gpumpirun``: the command line of the job supervisor (L6).

Theory of operation
===================
``gpumpirun -n N [--timeout S] [--tag-output] [--grace S] [--mpi4py] prog args...`` parses its
command line (options stop at the program), builds a :class:`gpumpi._job.Job` of N
ranks, forwards SIGINT/SIGTERM/SIGHUP (teardown) and SIGUSR1/SIGUSR2 (passed on to the
ranks) to it, starts the program on every rank and exits with the job's status.  What a
job is, how ranks are watched and torn down and which status a failure gives: see
:mod:`gpumpi._job`.

The module itself is callable: ``gpumpi.launch(fn, n, ...)`` is
:func:`gpumpi.testing.run_ranks` (``fn`` on n forked ranks, results returned).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import types
from typing import Sequence

from . import _config
from ._job import (  # noqa: F401  (Job, Outcome and RankState: this module's public names before _job existed)
    FORWARD_SIGNALS,
    TEARDOWN_SIGNALS,
    DEFAULT_GRACE,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    Job,
    Outcome,
    RankState,
    flush_stdio,
)
from ._version import __version__

__all__ = ["Job", "Outcome", "RankState", "main", "EXIT_TIMEOUT", "DEFAULT_GRACE"]


# --- gpumpirun -------------------------------------------------------------------------
_VALUE_OPTS = {"-n", "-np", "--np", "--timeout", "--grace"}
_FLAG_OPTS = {"--tag-output", "--mpi4py", "--ga4py", "-h", "--help", "--version"}


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``argv`` into launcher options and ``prog args...`` (which are never parsed)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1 :]
        if a in _VALUE_OPTS:
            i += 2
        elif a in _FLAG_OPTS or (a.startswith("-") and len(a) > 1 and _is_joined_opt(a)):
            i += 1
        elif a.startswith("-") and len(a) > 1:
            i += 1  # unknown option: argparse reports it
        else:
            return argv[:i], argv[i:]
    return argv, []


def _is_joined_opt(a: str) -> bool:
    return a.split("=", 1)[0] in _VALUE_OPTS or (a.startswith("-n") and a[2:].isdigit())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpumpirun",
        usage="gpumpirun -n N [--timeout S] [--grace S] [--tag-output] [--mpi4py] prog [args...]",
        description="Run N ranks of a gpumpi program on this node. A program ending in .py runs with "
        "this Python. (python -m gpumpi also takes 'bench' and 'info' as the first argument.)",
        epilog="Exit status: 0 if every rank exited 0; else the abort code, or the first failing rank's "
        "status (128+N for signal N); 124 on --timeout; 130/143 on SIGINT/SIGTERM; 2 on bad usage; "
        "127/126 when the program is missing/cannot be started.",
    )
    p.add_argument("-n", "-np", "--np", dest="n", type=int, required=True, metavar="N", help="number of ranks")
    p.add_argument("--timeout", type=float, metavar="S", help="abort the job after S seconds (exit status 124)")
    p.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"seconds ranks get to exit after a failure, and after SIGTERM (default {DEFAULT_GRACE:g})",
    )
    p.add_argument("--tag-output", action="store_true", help="prefix every output line with [rank]")
    p.add_argument(
        "--mpi4py",
        action="store_true",
        help="run an unmodified mpi4py program on gpumpi: 'import mpi4py' and 'from mpi4py import MPI' "
        "resolve to gpumpi (as GPUMPI_MPI4PY=1 does for programs started by another launcher)",
    )
    p.add_argument(
        "--ga4py",
        action="store_true",
        help="run an unmodified ga4py program on gpumpi: 'from ga4py import ga' (and gain) resolve to gpumpi.ga "
        "(implies --mpi4py: ga4py programs import mpi4py too; GPUMPI_GA4PY=1 for other launchers)",
    )
    p.add_argument("--version", action="version", version=f"gpumpirun (gpumpi) {__version__}")
    return p


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    opts, cmd = _split_argv(argv)
    p = _parser()
    ns = p.parse_args(opts)
    if not cmd:
        p.error("no program given")
    if ns.n < 1:
        p.error(f"-n must be at least 1 ({ns.n})")
    if ns.timeout is not None and not ns.timeout > 0:
        p.error(f"--timeout must be > 0 seconds ({ns.timeout})")
    if not ns.grace >= 0:
        p.error(f"--grace must be >= 0 seconds ({ns.grace})")
    return ns, cmd


def _env(ns: argparse.Namespace) -> dict[str, str]:
    """The job's extra environment: ``--mpi4py`` puts gpumpi's ``mpi4py`` package first on PYTHONPATH,
    ``--ga4py`` its ``ga4py`` package too."""
    if not (ns.mpi4py or ns.ga4py):
        return {}
    from ._mpi4py import ENV, GA4PY_DIR, GA4PY_ENV, SHIM_DIR

    path = os.environ.get("PYTHONPATH", "")
    dirs = [SHIM_DIR, GA4PY_DIR] if ns.ga4py else [SHIM_DIR]
    env = {ENV: "1", "PYTHONPATH": os.pathsep.join(dirs + ([path] if path else []))}
    if ns.ga4py:
        env[GA4PY_ENV] = "1"
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """``gpumpirun``: run the job described by ``argv`` and return its exit status."""
    try:
        ns, cmd = _parse(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # argparse: usage errors (2), --help/--version (0)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if cmd[0].endswith(".py"):
        cmd = [sys.executable, *cmd]

    def log(message: str) -> None:
        flush_stdio()
        print(message, file=sys.stderr, flush=True)

    try:
        ring_size = _config.get().ring_size
    except ValueError as e:
        log(f"gpumpirun: bad environment ({e})")
        return EXIT_USAGE
    try:
        job = Job(ns.n, grace=ns.grace, ring_size=ring_size, tag_output=ns.tag_output, log=log, env=_env(ns))
    except OSError as e:
        log(f"gpumpirun: cannot create the job segment ({ns.n} ranks, ring size {ring_size}: {e})")
        return 1
    previous = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in (*TEARDOWN_SIGNALS, *FORWARD_SIGNALS):
                previous[sig] = signal.signal(sig, lambda signum, frame: job.signal_received(signum))
        try:
            job.start_commands(cmd)
        except (OSError, subprocess.SubprocessError) as e:
            started = sum(1 for st in job.ranks if st.pid)
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            log(f"gpumpirun: cannot start {cmd[0]} (rank {started}: {why})")
            return 127 if isinstance(e, FileNotFoundError) else 126
        return job.wait(ns.timeout).exit_code
    finally:
        job.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _LaunchModule(types.ModuleType):
    """Makes ``gpumpi.launch(fn, n, ...)`` (DESIGN section 4) call :func:`gpumpi.testing.run_ranks`."""

    def __call__(self, fn, n, **kwargs):
        from .testing import run_ranks

        return run_ranks(fn, n, **kwargs)


sys.modules[__name__].__class__ = _LaunchModule

if __name__ == "__main__":
    sys.exit(main())
