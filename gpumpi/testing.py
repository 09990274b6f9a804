"""Test helpers: run a function on n ranks, with one deadline and every rank's story (L6).

Theory of operation
===================
:func:`run_ranks` is the launcher's :class:`gpumpi._job.Job` with forked ranks
instead of commands: the same job segment, ``GPUMPI_*`` environment, parent-death
signal and teardown (grace, stack dump, SIGTERM, SIGKILL).  Forking is cheap (a
4-rank round trip takes milliseconds) and lets ``fn`` be any callable, closures
included; only its return value has to pickle.  Do not use it from a process that
has already initialised CUDA: a forked CUDA context is unusable.

Each rank has

* a result pipe: the child writes ``pickle.dumps((kind, ...))`` and closes it
  (``("ok", value)``, ``("error", traceback_text)``, ``("skip", reason)``); the
  parent drains all the pipes inside the job's poll loop, so a large result can
  never block a child;
* an unnamed temporary file (``O_TMPFILE``: nothing to delete) on which the child
  registers ``faulthandler`` for SIGUSR1.  The job sends SIGUSR1 to every rank it
  has to stop, at the deadline or after another rank failed, so the report shows
  where each stuck rank was.  The ranks get ``GPUMPI_FAULTHANDLER=0`` so that
  the runtime, initialised inside ``fn``, leaves SIGUSR1 to that file.

The child never returns into the caller's stack: it flushes stdio and leaves with
``os._exit`` (no ``atexit`` handlers, no pytest teardown).  Its output goes to the
inherited descriptors (under pytest, the captured output of the test).  Whatever
happens in the parent (an exception, KeyboardInterrupt, pytest-timeout), a
``finally`` kills and reaps every rank.

On failure :class:`RanksFailed` (an ``AssertionError``) carries one section per
rank: its status and either its traceback or its stack at teardown.  If ranks
call ``pytest.skip`` and none fails, the test is skipped.

Under an MPI launcher instead (:func:`run_mpiexec`; every ``run_ranks`` when
``GPUMPI_TEST_MPIEXEC`` is set, its value the number of pretend nodes, ``GPUMPI_SIM_NODES``):
``fn`` is pickled by reference (a module-level function of an importable module: a test
module is, with the parent's ``sys.path``) and MPICH's ``mpiexec`` from pip starts ``n``
Python processes that bootstrap from mpi4py.  Each writes its result to a file of a private
temporary directory; a rank that raises writes its traceback and aborts the job
(``MPI_Abort``: the launcher ends the others); every rank dumps its stack to a file shortly
before the deadline, and at the deadline the launcher's process group is killed.  So the
same test bodies run over the node's rings and over the ``mpi`` transport between nodes.

:class:`SimDeviceArray` is a minimal device array on the simulated device
(:func:`gpumpi._device.sim_adapter`): gpumpi treats it as device memory, so the
device paths run without a GPU.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import _config
from ._device.simarray import SimDeviceArray
from ._job import Job, Outcome, RankState

__all__ = ["run_ranks", "run_mpiexec", "expected_nodes", "one_node_only", "RanksFailed", "RankReport", "WORLD_SIZES", "parametrize_world", "SimDeviceArray",
           "DLPackOnly"]

#: world sizes multi-rank tests run at (3: bugs that only show with non-powers of two)
WORLD_SIZES = (1, 2, 3, 4)

_GRACE = 1.0  # survivors of a failure get this long to fail on their own (as under gpumpirun)


def __getattr__(name: str):
    # ``parametrize_world`` needs pytest; import it only when asked, so that this
    # module imports without pytest.
    if name == "parametrize_world":
        try:
            import pytest
        except ImportError:
            raise AttributeError(
                "gpumpi.testing.parametrize_world needs pytest, which is not installed"
            ) from None
        mark = pytest.mark.parametrize("n", WORLD_SIZES)
        globals()[name] = mark
        return mark
    raise AttributeError(f"module 'gpumpi.testing' has no attribute {name!r}")


@dataclass
class RankReport:
    """How one rank of :func:`run_ranks` ended."""

    rank: int
    pid: int
    #: exit status (128 + N: killed by signal N); None if it could not be reaped
    status: int | None
    #: "ok", "error", "skip", "no result", "torn down" or "timed out"
    outcome: str
    #: ``fn``'s return value (outcome "ok")
    value: Any = None
    #: the traceback of the exception ``fn`` raised (outcome "error"), or the skip reason
    error: str = ""
    #: ``faulthandler``'s dump of every thread, taken when the rank was stopped
    stack: str = ""
    #: "exited with status 1", "was killed by signal 9 (SIGKILL)", ...
    how: str = ""


class RanksFailed(AssertionError):
    """:func:`run_ranks` failed; the message has every rank's status and traceback or stack.

    Attributes: ``reports`` (a :class:`RankReport` per rank), ``timed_out`` (bool),
    ``outcome`` (the job's :class:`gpumpi._job.Outcome`).
    """

    def __init__(self, message: str, reports: list[RankReport], outcome: Outcome) -> None:
        super().__init__(message)
        self.reports = reports
        self.outcome = outcome
        self.timed_out = outcome.cause == "timeout"


def _is_skip(exc: BaseException) -> bool:
    outcomes = sys.modules.get("_pytest.outcomes")
    skipped = getattr(outcomes, "Skipped", None)
    return skipped is not None and isinstance(exc, skipped)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _rank_main(rank: int, fn, args, kwargs, result_fds: list[int], dump_fds: list[int]) -> int:
    """The body of forked rank ``rank``: run ``fn`` and send back what happened."""
    for r, fd in enumerate(result_fds):
        if r != rank:
            os.close(fd)  # else a pipe would reach EOF only when every rank has exited
    faulthandler.register(signal.SIGUSR1, file=dump_fds[rank], all_threads=True, chain=False)
    code, data = _outcome(rank, fn, args, kwargs)
    _write_all(result_fds[rank], data)
    os.close(result_fds[rank])
    return code


def _outcome(rank: int, fn, args, kwargs) -> tuple:
    """Run ``fn`` on this rank, then finalize: ``(exit status, pickled (kind, detail))``."""
    code = 0
    try:
        payload = ("ok", fn(*args, **kwargs))
    except SystemExit as e:
        if e.code is None or e.code == 0:
            payload = ("ok", None)
        else:
            code = e.code if isinstance(e.code, int) and 0 < e.code <= 255 else 1
            payload = ("error", f"SystemExit: {e.code!r}\n" + traceback.format_exc())
    except BaseException as e:
        if _is_skip(e):
            payload = ("skip", str(getattr(e, "msg", e)))
        else:
            code = 1
            payload = ("error", traceback.format_exc())
    if code == 0:
        # a rank that leaves with status 0 has finalized, as a program's normal exit does
        # (else the job counts it as an improper exit)
        try:
            runtime = sys.modules.get("gpumpi._runtime")
            finalize = getattr(runtime, "finalize", None)
            if finalize is not None:
                finalize()
        except BaseException:
            code = 1
            payload = ("error", traceback.format_exc())
    try:
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as e:
        code = 1
        data = pickle.dumps(("error", f"run_ranks: the result of rank {rank} is not picklable ({e!r})"))
    return code, data


def _dump_text(f) -> str:
    fd = f.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")


def _report(st: RankState, raw: bytes, dump: str, timed_out: bool) -> RankReport:
    rep = RankReport(rank=st.rank, pid=st.pid, status=st.status, outcome="no result", stack=dump, how=st.describe())
    if raw:
        try:
            kind, detail = pickle.loads(raw)
        except Exception as e:  # a child cut off while writing its result
            rep.error = f"its result could not be read ({len(raw)} bytes: {e!r})"
        else:
            rep.outcome = kind
            if kind == "ok":
                rep.value = detail
            else:
                rep.error = detail
    elif st.torn_down:
        rep.outcome = "timed out" if timed_out else "torn down"
    return rep


def _section(rep: RankReport, grace: float) -> str:
    head = f"--- rank {rep.rank} (pid {rep.pid}): "
    if rep.outcome == "ok":
        head += f"returned normally; it {rep.how}"
    elif rep.outcome == "error":
        head += f"raised; it {rep.how}"
    elif rep.outcome == "skip":
        head += f"skipped ({rep.error}); it {rep.how}"
    elif rep.outcome == "timed out":
        head += f"still running at the deadline; stopped, it {rep.how}"
    elif rep.outcome == "torn down":
        head += f"still running {grace:g} s after the failure; stopped, it {rep.how}"
    else:
        head += f"no result; it {rep.how}"
    parts = [head]
    if rep.error and rep.outcome != "skip":
        parts.append(rep.error.rstrip("\n"))
    if rep.stack:
        parts.append("stack when stopped:\n" + rep.stack.rstrip("\n"))
    elif rep.outcome in ("timed out", "torn down"):
        parts.append("(no stack dump: the rank did not answer SIGUSR1)")
    return "\n".join(parts)


def run_ranks(
    fn: Callable[..., Any],
    n: int,
    *,
    timeout: float = 60.0,
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> list:
    """Run ``fn(*args, **kwargs)`` on ``n`` forked ranks; return their results in rank order.

    Args:
        fn: any callable (it is not pickled); its return value must pickle.
        n: number of ranks (>= 1).
        timeout: one deadline, in seconds, for the whole run.
        args, kwargs: passed to ``fn`` on every rank.
        env: extra environment variables for the ranks (set before
            ``gpumpi._config`` is re-read, so ``GPUMPI_*`` settings apply).

    Raises:
        RanksFailed: a rank raised, exited non-zero, died, aborted or ran past the
            deadline; the message has every rank's status and traceback or stack.
        ValueError, TypeError: bad arguments.
    """
    if not callable(fn):
        raise TypeError(f"run_ranks: fn must be callable ({type(fn).__name__})")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"run_ranks: n must be an integer >= 1 ({n!r})")
    if not timeout > 0:
        raise ValueError(f"run_ranks: timeout must be > 0 seconds ({timeout!r})")
    nodes = os.environ.get("GPUMPI_TEST_MPIEXEC", "")
    if nodes != "":
        return run_mpiexec(fn, n, nodes=int(nodes), timeout=timeout, args=args, kwargs=kwargs, env=env)
    # The runtime must not take SIGUSR1 over from the per-rank dump file registered here.
    env = {"GPUMPI_FAULTHANDLER": "0", **{str(k): str(v) for k, v in (env or {}).items()}}
    kwargs = dict(kwargs or {})
    cfg = _config._read({**os.environ, **env})
    dumps = [tempfile.TemporaryFile() for _ in range(n)]
    results = [bytearray() for _ in range(n)]
    result_fds: list[int] = []
    job = None
    try:
        job = Job(
            n,
            grace=_GRACE,
            ring_size=cfg.ring_size,
            stage=(cfg.stage_chunk, cfg.stage_slots),
            dump_on_failure=True,
            dumps_done=lambda ranks: all(os.fstat(dumps[r].fileno()).st_size > 0 for r in ranks),
            env=env,
            name="run_ranks",
        )
        for r in range(n):
            rd, wr = os.pipe()
            result_fds.append(wr)
            job.watch(rd, results[r].extend)
        dump_fds = [f.fileno() for f in dumps]
        job.start_forked(lambda rank: _rank_main(rank, fn, args, kwargs, result_fds, dump_fds))
        for fd in result_fds:
            os.close(fd)
        result_fds.clear()
        outcome = job.wait(timeout)
        reports = [
            _report(st, bytes(results[st.rank]), _dump_text(dumps[st.rank]), outcome.cause == "timeout")
            for st in job.ranks
        ]
    finally:
        for fd in result_fds:
            os.close(fd)
        if job is not None:
            job.close()
        for f in dumps:
            f.close()
    bad = [rep for rep in reports if rep.outcome not in ("ok", "skip")]
    if outcome.cause == "ok" and not bad:
        skips = [rep for rep in reports if rep.outcome == "skip"]
        if skips:
            import pytest

            pytest.skip(f"rank {skips[0].rank}: {skips[0].error}")
        return [rep.value for rep in reports]
    raise RanksFailed(_message(outcome, reports, n, timeout), reports, outcome)


def _message(outcome: Outcome, reports: list[RankReport], n: int, timeout: float) -> str:
    if outcome.cause == "timeout":
        head = outcome.reason.split("; dumping")[0]
    elif outcome.reason:
        head = outcome.reason
        first = reports[outcome.failed_rank] if outcome.failed_rank is not None else None
        if first is not None and first.outcome == "error":
            head += f" [rank {first.rank}: {first.error.strip().splitlines()[-1]}]"
        silent = ", ".join(str(rep.rank) for rep in reports if rep.outcome == "no result" and rep.status == 0)
        if silent:  # an improper exit (without MPI_Finalize) is also one without a result
            head += f"; rank(s) {silent} exited with status 0 without returning a result"
    else:
        missing = ", ".join(str(rep.rank) for rep in reports if rep.outcome not in ("ok", "skip"))
        head = f"run_ranks: rank(s) {missing} exited with status 0 without returning a result"
    lines = [f"{head} (n={n}, timeout={timeout:g} s)"]
    lines += [_section(rep, _GRACE) for rep in reports]
    return "\n".join(lines)



# --- under an MPI launcher -----------------------------------------------------------------------
def one_node_only(n: int, what: str) -> None:
    """Skip a test whose claim is about the transports of one node (``what``) when its ``n``
    ranks are placed on several (``GPUMPI_TEST_MPIEXEC`` pretend nodes)."""
    if len(set(expected_nodes(n))) > 1:
        import pytest

        pytest.skip(f"{what} joins the ranks of one node; these {n} ranks are on several")


def device_windows_across_nodes(n: int) -> None:
    """Skip a test of device windows when its ``n`` ranks are on several pretend nodes and the
    MPI library is not taken to be CUDA-aware (``GPUMPI_MPI_CUDA=1``): such windows are refused
    there (:mod:`gpumpi.rma.mpi`; ``tests/ipc/test_mpi.py`` tests the refusal)."""
    if len(set(expected_nodes(n))) > 1 and os.environ.get("GPUMPI_MPI_CUDA") != "1":
        import pytest

        pytest.skip(f"device windows over {n} ranks on several nodes need a CUDA-aware MPI (GPUMPI_MPI_CUDA=1)")


def expected_nodes(n: int) -> list:
    """The node of each of ``n`` ranks :func:`run_ranks` starts: all 0 for forked ranks; under
    ``GPUMPI_TEST_MPIEXEC=k``, ``k`` contiguous blocks (``GPUMPI_SIM_NODES``'s rule), an
    expectation computed without asking the runtime."""
    k = os.environ.get("GPUMPI_TEST_MPIEXEC", "")
    k = min(int(k), n) if k not in ("", "0") else 1
    return [r * k // n for r in range(n)]


def mpiexec_path() -> str | None:
    """The ``mpiexec`` beside this Python (MPICH from pip), else the first on ``PATH``."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


def run_mpiexec(
    fn: Callable[..., Any],
    n: int,
    *,
    nodes: int = 2,
    timeout: float = 60.0,
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> list:
    """Run ``fn(*args, **kwargs)`` on ``n`` ranks started by ``mpiexec``, grouped into ``nodes``
    pretend nodes (``GPUMPI_SIM_NODES``; 0: the real ones); return the results in rank order.

    ``fn`` must pickle by reference (a module-level function).  Raises :class:`RanksFailed`
    as :func:`run_ranks` does; skips when no ``mpiexec`` or mpi4py is installed.
    """
    if not callable(fn):
        raise TypeError(f"run_mpiexec: fn must be callable ({type(fn).__name__})")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"run_mpiexec: n must be an integer >= 1 ({n!r})")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 0:
        raise ValueError(f"run_mpiexec: nodes must be an integer >= 0 ({nodes!r})")
    if not timeout > 0:
        raise ValueError(f"run_mpiexec: timeout must be > 0 seconds ({timeout!r})")
    exe = mpiexec_path()
    import importlib.util

    if exe is None or importlib.util.find_spec("mpi4py") is None:
        import pytest

        pytest.skip("run_mpiexec: needs mpiexec and mpi4py (pip install mpi4py mpich)")
    tmp = tempfile.mkdtemp(prefix="gpumpi-mpiexec-")
    try:
        try:
            with open(os.path.join(tmp, "fn"), "wb") as f:
                pickle.dump((fn, tuple(args), dict(kwargs or {})), f, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001
            raise TypeError(f"run_mpiexec: fn must pickle by reference, a module-level function ({fn!r}: {e})") from None
        full = {k: v for k, v in os.environ.items() if not k.startswith("GPUMPI_") or k in ("GPUMPI_DEVICE", "GPUMPI_MPI_CUDA")}
        full.update({"GPUMPI_SIM_NODES": str(nodes), "GPUMPI_FAULTHANDLER": "0",
                     "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        full.update({str(k): str(v) for k, v in (env or {}).items()})
        code = ("import sys; from gpumpi.testing import _mpi_rank_main; "
                "sys.exit(_mpi_rank_main(sys.argv[1], float(sys.argv[2])))")
        p = subprocess.Popen([exe, "-n", str(n), sys.executable, "-c", code, tmp, str(timeout)], env=full,
                             start_new_session=True, stdin=subprocess.DEVNULL)
        timed_out = False
        try:
            p.wait(timeout + 3)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if p.poll() is None:
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        p.wait(2)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            else:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # a rank left behind by the launcher
                except ProcessLookupError:
                    pass
        reports = []
        for r in range(n):
            raw = _read(os.path.join(tmp, f"result.{r}"), binary=True)
            rep = RankReport(rank=r, pid=0, status=None, outcome="no result",
                             stack=_read(os.path.join(tmp, f"stack.{r}")), how="ran under mpiexec")
            if raw:
                kind, detail = pickle.loads(raw)
                rep.outcome = kind
                if kind == "ok":
                    rep.value = detail
                else:
                    rep.error = detail
            elif timed_out:
                rep.outcome = "timed out"
            reports.append(rep)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bad = [rep for rep in reports if rep.outcome not in ("ok", "skip")]
    if not bad and p.returncode == 0:
        skips = [rep for rep in reports if rep.outcome == "skip"]
        if skips:
            import pytest

            pytest.skip(f"rank {skips[0].rank}: {skips[0].error}")
        return [rep.value for rep in reports]
    if timed_out:
        head = f"run_mpiexec: the job ran past the deadline (n={n}, nodes={nodes}, timeout={timeout:g} s)"
        cause = "timeout"
    else:
        head = f"run_mpiexec: mpiexec exited with status {p.returncode} (n={n}, nodes={nodes})"
        cause = "failed"
        first = next((rep for rep in reports if rep.outcome == "error"), None)
        if first is not None:
            head += f" [rank {first.rank}: {first.error.strip().splitlines()[-1]}]"
    outcome = Outcome(exit_code=p.returncode if p.returncode is not None else -9, cause=cause, reason=head,
                      failed_rank=bad[0].rank if bad else None)
    raise RanksFailed("\n".join([head] + [_section(rep, _GRACE) for rep in reports]), reports, outcome)


def _read(path: str, binary: bool = False):
    try:
        with open(path, "rb" if binary else "r", errors=None if binary else "replace") as f:
            return f.read()
    except OSError:
        return b"" if binary else ""


def _mpi_rank_main(tmp: str, timeout: float) -> int:
    """One rank of :func:`run_mpiexec`: run the pickled function, write what happened, and on
    failure abort the job (the launcher ends the other ranks)."""
    rank = int(os.environ.get("PMI_RANK") or os.environ.get("PMIX_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or 0)
    stack = open(os.path.join(tmp, f"stack.{rank}"), "w")  # noqa: SIM115 -- faulthandler writes it until exit
    faulthandler.dump_traceback_later(max(1.0, timeout - 2), exit=False, file=stack)
    try:
        with open(os.path.join(tmp, "fn"), "rb") as f:
            fn, args, kwargs = pickle.load(f)
    except BaseException:
        code, data = 1, pickle.dumps(("error", "run_mpiexec: cannot load the function:\n" + traceback.format_exc()))
    else:
        code, data = _outcome(rank, fn, args, kwargs)
    part = os.path.join(tmp, f"result.{rank}.part")
    with open(part, "wb") as f:
        f.write(data)
    os.rename(part, os.path.join(tmp, f"result.{rank}"))
    faulthandler.cancel_dump_traceback_later()
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.2)  # the others may be finishing their own reports
        from .ipc.mpi import mpi4py

        mpi4py().COMM_WORLD.Abort(code)
    return code


class DLPackOnly:
    """An array seen only through DLPack (``__dlpack__``/``__dlpack_device__``), as mpi4py's
    test suite's ``dlpack-array`` backend is: no buffer protocol, no CUDA array interface."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)


