"""The job supervisor: start N ranks of one job, watch them, and own failure (L6).

Theory of operation
===================
A :class:`Job` is N ranks and one job segment.  The launcher (``gpumpirun``, or
``gpumpi.testing.run_ranks`` in a test process) makes the segment with
``memfd_create`` (:meth:`gpumpi.ipc.jobseg.JobSegment.create`; it has no name, so
no ``/dev/shm`` entry can outlive the job), then starts every rank either as a
command (:meth:`Job.start_commands`, ``subprocess.Popen``) or as a forked copy of
the calling process (:meth:`Job.start_forked`).  Each rank gets its ``GPUMPI_*``
environment (see :mod:`gpumpi._config`) and inherits the segment's descriptor
(``GPUMPI_JOB_FD``).  Before it runs anything, a new rank asks the kernel to
SIGKILL it when the launcher dies (``PR_SET_PDEATHSIG``), checks that the
launcher has not already gone, and lets any process of the same user trace it
(``PR_SET_PTRACER_ANY``) so peers may use ``process_vm_readv`` under Yama.

:meth:`Job.wait` is one ``poll`` loop over a pidfd per rank (readable when the
rank exits, so a death is seen at once; without pidfds the loop wakes every
20 ms and asks ``waitpid``), a self-pipe written by :meth:`Job.signal_received`
(signal handlers), and the read ends of any pipes the job drains (rank output
under ``--tag-output``, results of forked ranks).  No thread is started.

Failure semantics.  A rank that exits non-zero or dies by a signal, or any rank
that exits after someone wrote an abort code into the segment, has *failed*:

1. the launcher writes ``mark_failed(rank, status)`` into the segment (peers
   blocked on that rank see it and raise a process-failure error themselves) and
   prints one line such as ``gpumpirun: rank 1 exited with status 7; terminating
   3 other rank(s)``;
2. *grace*: the others get ``--grace`` seconds (default 1) to exit on their own;
3. *dump* (run_ranks, and every ``--timeout``): the survivors get SIGUSR1, on
   which they dump their stacks with ``faulthandler`` (the runtime registers it
   in every launched rank; run_ranks registers it in each forked child);
4. *term*: SIGTERM, then a further grace; 5. *kill*: SIGKILL, and reap.

The job's exit status is decided by what started the teardown, once:

=========================================  ======================================
cause                                      exit status
=========================================  ======================================
every rank exited 0                        0
a rank failed and an abort code is set     the abort code
a rank failed (the first one seen)         its status: ``sys.exit(7)`` gives 7,
                                           death by signal N gives 128 + N;
                                           an improper exit (below) gives 1
``--timeout`` expired                      124 (stacks dumped first)
SIGINT / SIGTERM / SIGHUP to the launcher  130 / 143 / 129 (forwarded to the ranks)
bad command line                           2
the program cannot be started              127 (not found) / 126 (any other reason)
the job segment cannot be created          1
=========================================  ======================================

A rank exiting 0 is not a failure (the others keep running) when it exits properly,
as under Open MPI's ``mpirun``: it called ``MPI_Finalize`` (its state word in the job
segment says FINALIZED; importing ``gpumpi.MPI`` finalizes at a normal interpreter exit),
or no rank of the job has initialised MPI (a program that does not use gpumpi).  Else
the exit is *improper* and fails the job like a non-zero status, with a message that
names the rank: it initialised but exited without ``MPI_Finalize`` (``os._exit(0)``), or
it never initialised while other ranks did (they would wait on it forever).  A rank
that exits 0 uninitialised before any rank has initialised is held pending: the job
fails as soon as another rank initialises.  A second
SIGINT/SIGTERM during a teardown skips straight to SIGKILL.  SIGUSR1 and SIGUSR2
sent to the launcher are forwarded to every rank and change nothing else.  Ranks
stay in the launcher's process group (so a rank may read the terminal), which
means Ctrl-C at a terminal reaches them twice: from the terminal and forwarded.

Without ``--tag-output`` ranks share the launcher's stdout and stderr; rank 0
also gets its stdin (the others read ``/dev/null``).  With it, each rank's
stdout and stderr are pipes; the loop prefixes every complete line with
``[rank] `` and writes it through at once; a last line without a newline is
written at EOF, so nothing is lost when a rank exits.

``gpumpirun`` (:mod:`gpumpi.launch`) and :func:`gpumpi.testing.run_ranks` both drive a
:class:`Job`; this module imports neither.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from . import _config
from .ipc.jobseg import FINALIZED, RUNNING, JobSegment

__all__ = ["Job", "Outcome", "RankState", "EXIT_TIMEOUT", "EXIT_USAGE", "DEFAULT_GRACE"]

DEFAULT_GRACE = 1.0
EXIT_TIMEOUT = 124
EXIT_USAGE = 2

_TICK = 0.02  # longest wait of a loop that must poll (no pidfds, waiting for stack dumps)
_DUMP_WAIT = 0.5  # longest time between the dump signal and SIGTERM
_KILL_WAIT = 5.0  # how long SIGKILLed ranks get to be reaped before the launcher gives up
_DRAIN_MIN = 0.1  # after the last rank exits, its pipes get max(grace, this) to reach EOF
_MAX_PARTIAL = 1 << 16  # a line longer than this is written out without waiting for "\n"

_PR_SET_PDEATHSIG = 1
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value

TEARDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
FORWARD_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)

_prctl_fn: list = []


def _get_prctl():
    """libc's ``prctl`` through ctypes, loaded once (in the launcher, never after fork)."""
    if not _prctl_fn:
        try:
            fn = ctypes.CDLL(None, use_errno=True).prctl
            fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _prctl_fn.append(fn)
    return _prctl_fn[0]


def _child_setup(launcher_pid: int, prctl) -> None:
    """First thing in a new rank: die with the launcher, and let peers attach to us.

    ``PR_SET_PDEATHSIG`` only takes effect from now on, so check afterwards that
    the launcher is still our parent; if it already died, exit.  The
    ``PR_SET_PTRACER`` call fails with EINVAL where Yama is absent, which is fine.
    """
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0)
    if os.getppid() != launcher_pid:
        os._exit(1)


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


@dataclass
class RankState:
    """What the launcher knows about one rank."""

    rank: int
    pid: int = 0
    pidfd: int = -1
    #: exit status as a shell reports it (128 + N for death by signal N); None until reaped
    status: int | None = None
    #: the signal that ended the rank, 0 if it exited
    signum: int = 0
    #: the launcher had to stop it (it was still running after the grace, or at the deadline)
    torn_down: bool = False

    @property
    def running(self) -> bool:
        return self.pid > 0 and self.status is None

    def describe(self) -> str:
        """``exited with status 7`` / ``was killed by signal 9 (SIGKILL)`` / ``is still running``."""
        if self.status is None:
            return "is still running" if self.pid > 0 else "was never started"
        if self.signum:
            return f"was killed by signal {self.signum} ({_signame(self.signum)})"
        return f"exited with status {self.status}"


@dataclass
class Outcome:
    """How a job ended (returned by :meth:`Job.wait`)."""

    #: the launcher's exit status (see the table in the module docstring)
    exit_code: int
    #: "ok", "failed", "aborted", "timeout" or "signal"
    cause: str
    #: the one-line reason printed for it ("" when every rank exited 0)
    reason: str
    #: the rank whose failure started the teardown (cause "failed"/"aborted")
    failed_rank: int | None
    #: the ranks still running when the deadline expired (cause "timeout")
    timed_out: list[int] = field(default_factory=list)
    ranks: list[RankState] = field(default_factory=list)


class _LinePrefixer:
    """Sink for one rank's output pipe: writes each complete line with a ``[rank] `` prefix."""

    def __init__(self, rank: int, stream) -> None:
        self.prefix = f"[{rank}] ".encode()
        self.stream = stream
        self.partial = b""

    def __call__(self, data: bytes) -> None:
        if not data:  # EOF: the last line, even without its newline
            if self.partial:
                self._emit(self.prefix + self.partial + b"\n")
                self.partial = b""
            return
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > _MAX_PARTIAL:
            lines.append(self.partial)
            self.partial = b""
        if lines:
            self._emit(b"".join(self.prefix + line + b"\n" for line in lines))

    def _emit(self, data: bytes) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None  # reader went away: keep draining the rank, drop the text


def _binary(stream, fd: int):
    """The binary side of a text stream (``sys.stdout.buffer``), or a raw writer on ``fd``."""
    buf = getattr(stream, "buffer", None)
    if buf is not None:
        return buf
    return open(fd, "wb", buffering=0, closefd=False)


class Job:
    """N ranks of one job: the segment, how they start, and the watch until they end.

    Args:
        nranks: number of ranks (>= 1).
        grace: seconds the survivors get to exit on their own after a failure, and
            again after SIGTERM before SIGKILL.
        ring_size: bytes per ring of the job segment (default: ``GPUMPI_RING_SIZE``
            as :func:`gpumpi._config.get` reads it).
        stage: (slot bytes, slots) of each rank's device staging slab (default:
            ``GPUMPI_STAGE_CHUNK`` and ``GPUMPI_STAGE_SLOTS``).
        tag_output: pipe every rank's stdout/stderr and prefix lines with ``[rank] ``.
        dump_on_failure: also send ``dump_signal`` to the survivors of a failure
            before SIGTERM (a timeout always sends it).
        dumps_done: ``f(ranks) -> bool``, true once the given ranks finished their
            stack dumps (ends the wait after the dump signal early).
        env: extra environment for every rank (below the ``GPUMPI_*`` rank variables).
        log: called with each one-line message (None: silent).
        name: prefix of messages ("gpumpirun").

    Use as a context manager, or call :meth:`close` in a ``finally``: it kills and
    reaps whatever still runs and closes the segment.
    """

    def __init__(
        self,
        nranks: int,
        *,
        grace: float = DEFAULT_GRACE,
        ring_size: int | None = None,
        stage: tuple[int, int] | None = None,
        tag_output: bool = False,
        dump_signal: int = signal.SIGUSR1,
        dump_on_failure: bool = False,
        dumps_done: Callable[[list[int]], bool] | None = None,
        env: Mapping[str, str] | None = None,
        log: Callable[[str], None] | None = None,
        name: str = "gpumpirun",
    ) -> None:
        if not isinstance(nranks, int) or isinstance(nranks, bool) or nranks < 1:
            raise ValueError(f"{name}: the number of ranks must be an integer >= 1 ({nranks!r})")
        if not grace >= 0:
            raise ValueError(f"{name}: grace must be >= 0 seconds ({grace!r})")
        self.nranks = nranks
        self.grace = float(grace)
        self.tag_output = tag_output
        self.dump_signal = dump_signal
        self.dump_on_failure = dump_on_failure
        self.dumps_done = dumps_done
        self.env = dict(env or {})
        self.log = log
        self.name = name
        self.job_id = secrets.token_hex(16)
        self.launcher_pid = os.getpid()
        self.ranks = [RankState(r) for r in range(nranks)]
        self._prctl = _get_prctl()
        self._watched: dict[int, Callable[[bytes], None]] = {}
        self._popens: dict[int, subprocess.Popen] = {}
        self._signals: list[int] = []
        self._closed = False
        self._cause: str | None = None
        self._exit_code = 0
        self._reason = ""
        self._failed_rank: int | None = None
        self._timed_out: list[int] = []
        self._phase = "run"
        self._phase_end: float | None = None
        self._dump_settling = False
        self._no_init: list[RankState] = []  # exited 0 uninitialised while no rank had initialised
        cfg = _config.get() if ring_size is None or stage is None else None
        stage_slot, stage_slots = (cfg.stage_chunk, cfg.stage_slots) if stage is None else stage
        self.seg = JobSegment.create(nranks, cfg.ring_size if ring_size is None else ring_size, stage_slot,
                                     stage_slots)
        try:
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
        except BaseException:
            self.seg.close()
            raise

    # --- context manager ---------------------------------------------------------------
    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- starting ----------------------------------------------------------------------
    def rank_env(self, rank: int) -> dict[str, str]:
        """The ``GPUMPI_*`` variables of ``rank`` (the contract with :mod:`gpumpi._config`)."""
        n = str(self.nranks)
        return {
            "GPUMPI_RANK": str(rank),
            "GPUMPI_SIZE": n,
            "GPUMPI_LOCAL_RANK": str(rank),
            "GPUMPI_LOCAL_SIZE": n,
            "GPUMPI_JOB_ID": self.job_id,
            "GPUMPI_JOB_FD": str(self.seg.fd),
            "GPUMPI_LAUNCHER_PID": str(self.launcher_pid),
            "GPUMPI_RING_SIZE": str(self.seg.ring_size),
        }

    def watch(self, fd: int, sink: Callable[[bytes], None]) -> None:
        """Drain ``fd`` in :meth:`wait`, passing each chunk to ``sink`` and ``b""`` at EOF.

        The job owns ``fd`` from now on (closes it at EOF or in :meth:`close`), and a
        forked rank closes its copy.
        """
        os.set_blocking(fd, False)
        self._watched[fd] = sink

    def _output_pipes(self, rank: int) -> tuple[int, int]:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self.watch(out_r, _LinePrefixer(rank, _binary(sys.stdout, 1)))
        self.watch(err_r, _LinePrefixer(rank, _binary(sys.stderr, 2)))
        return out_w, err_w

    def _started(self, st: RankState, pid: int) -> None:
        st.pid = pid
        try:
            st.pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            st.pidfd = -1  # no pidfds here: wait() polls waitpid every _TICK instead

    def start_commands(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Start every rank as ``argv`` (``subprocess.Popen``) with its ``GPUMPI_*`` environment.

        Raises ``OSError`` when the program cannot be started; ranks already
        started keep running until :meth:`close`.
        """
        base = dict(os.environ if env is None else env)
        base.update(self.env)
        for st in self.ranks:
            out = err = None
            if self.tag_output:
                out, err = self._output_pipes(st.rank)
            try:
                proc = subprocess.Popen(
                    list(argv),
                    env={**base, **self.rank_env(st.rank)},
                    pass_fds=(self.seg.fd,),
                    stdin=None if st.rank == 0 else subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    preexec_fn=lambda: _child_setup(self.launcher_pid, self._prctl),
                )
            finally:
                for fd in (out, err):
                    if fd is not None:
                        os.close(fd)
            self._popens[st.rank] = proc
            self._started(st, proc.pid)

    def start_forked(self, child: Callable[[int], int]) -> None:
        """Start every rank as a fork of this process running ``child(rank)``.

        In the child, before ``child`` runs: the job's other descriptors are
        closed, the parent-death signal is set, the rank's ``GPUMPI_*`` variables
        (and the job's ``env``) go into ``os.environ``, ``gpumpi._config`` is
        re-read and ``gpumpi._runtime.reset_after_fork()`` is called if the runtime
        is loaded.  ``child`` returns the exit status (None: 0); the child then flushes
        stdio and leaves with ``os._exit`` whatever happens, so it never returns
        into the caller's stack nor runs its ``atexit`` handlers.
        """
        for st in self.ranks:
            out = err = None
            if self.tag_output:
                out, err = self._output_pipes(st.rank)
            flush_stdio()  # else the child would write the parent's buffered text again
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
                    pid = os.fork()
                if pid == 0:
                    self._run_child(st.rank, child, out, err)
            finally:
                for fd in (out, err):
                    if fd is not None:
                        os.close(fd)
            self._started(st, pid)

    def _run_child(self, rank: int, child: Callable[[int], int], out: int | None, err: int | None):
        code = 1
        try:
            for fd in [self._wake_r, self._wake_w, *self._watched]:
                os.close(fd)
            for st in self.ranks:
                if st.pidfd >= 0:
                    os.close(st.pidfd)
            if out is not None:
                os.dup2(out, 1)
                os.dup2(err, 2)
                os.close(out)
                os.close(err)
            _child_setup(self.launcher_pid, self._prctl)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if threading.current_thread() is threading.main_thread():
                signal.set_wakeup_fd(-1)
            os.environ.update(self.env)
            os.environ.update(self.rank_env(rank))
            _config.reload()
            runtime = sys.modules.get("gpumpi._runtime")
            reset = getattr(runtime, "reset_after_fork", None)
            if reset is not None:
                reset()
            code = child(rank)
        except BaseException:
            code = 1
            with contextlib.suppress(BaseException):
                sys.stderr.write(f"[rank {rank}] " + traceback.format_exc())
        finally:
            flush_stdio()
            os._exit(0 if code is None else code if isinstance(code, int) and 0 <= code <= 255 else 1)

    # --- signals -----------------------------------------------------------------------
    def signal_received(self, signum: int) -> None:
        """Hand a signal to :meth:`wait` (safe to call from a signal handler)."""
        self._signals.append(signum)
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            return  # the pipe is full, so a wake-up is already pending

    def _send(self, sig: int, ranks: list[RankState]) -> None:
        for st in ranks:
            if st.running:
                try:
                    os.kill(st.pid, sig)  # not reaped yet, so the pid cannot have been reused
                except ProcessLookupError:
                    continue

    # --- watching ----------------------------------------------------------------------
    def _live(self) -> list[RankState]:
        return [st for st in self.ranks if st.running]

    def _say(self, message: str) -> None:
        if self.log is not None:
            self.log(message)

    def _reap(self, st: RankState) -> None:
        try:
            pid, status = os.waitpid(st.pid, os.WNOHANG)
        except ChildProcessError:  # someone else reaped it: status unknown
            pid, status = st.pid, 255 << 8
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        st.signum = -code if code < 0 else 0
        st.status = 128 + st.signum if code < 0 else code
        if st.pidfd >= 0:
            os.close(st.pidfd)
            st.pidfd = -1
        proc = self._popens.get(st.rank)
        if proc is not None:
            proc.returncode = code
        self._rank_ended(st)

    def _rank_ended(self, st: RankState) -> None:
        abort = self.seg.abort_code()
        why = ""
        if st.status == 0 and abort is None:
            why = self._improper(st)
            if not why:
                return
        self.seg.mark_failed(st.rank, st.status)
        if self._cause is not None:
            return
        others = len(self._live())
        tail = f"; terminating {others} other rank(s)" if others else ""
        self._failed_rank = st.rank
        if abort is not None:
            self._begin(
                "aborted", abort, f"{self.name}: job aborted with code {abort} (rank {st.rank} {st.describe()}){tail}"
            )
        elif why:
            self._begin("failed", 1, f"{self.name}: rank {st.rank} {st.describe()} {why}{tail}")
        else:
            self._begin("failed", st.status, f"{self.name}: rank {st.rank} {st.describe()}{tail}")

    def _improper(self, st: RankState) -> str:
        """Why rank ``st``'s exit with status 0 is improper ("": it is not, or not yet known)."""
        state = self.seg.state(st.rank)
        if state >= FINALIZED:
            return ""
        if state >= RUNNING:
            return "without calling MPI_Finalize (it had initialised MPI; every rank that initialises must finalize)"
        inited = [r for r in range(self.nranks) if r != st.rank and self.seg.state(r) >= RUNNING]
        if not inited:
            self._no_init.append(st)  # fails the job if another rank initialises later
            return ""
        return self._no_init_reason(inited)

    @staticmethod
    def _no_init_reason(inited: list[int]) -> str:
        names = ", ".join(map(str, inited))
        return (f"without calling MPI_Init while rank(s) {names} did (if one rank initialises MPI, "
                f"every rank must, and must finalize)")

    def _check_no_init(self) -> None:
        """A rank exited 0 uninitialised while no rank had initialised: fail it once one has."""
        inited = [r for r in range(self.nranks) if self.seg.state(r) >= RUNNING]
        if not inited:
            return
        st = self._no_init.pop(0)
        self._no_init.clear()
        self.seg.mark_failed(st.rank, 0)
        others = len(self._live())
        tail = f"; terminating {others} other rank(s)" if others else ""
        self._failed_rank = st.rank
        self._begin("failed", 1, f"{self.name}: rank {st.rank} {st.describe()} {self._no_init_reason(inited)}{tail}")

    def _begin(self, cause: str, code: int, reason: str) -> None:
        """Record the teardown's cause (once) and start the grace phase."""
        self._cause, self._exit_code, self._reason = cause, code, reason
        self._say(reason)
        self._phase, self._phase_end = "grace", time.monotonic() + self.grace

    def _timeout(self, timeout: float) -> None:
        live = self._live()
        self._timed_out = [st.rank for st in live]
        ranks = ", ".join(str(st.rank) for st in live)
        pids = ", ".join(str(st.pid) for st in live)
        self._cause, self._exit_code = "timeout", EXIT_TIMEOUT
        self._reason = (
            f"{self.name}: timed out after {timeout:g} s (ranks still running: {ranks}; pids {pids}); "
            f"dumping their stacks ({_signame(self.dump_signal)}) and terminating them"
        )
        self._say(self._reason)
        for st in live:
            st.torn_down = True
        self._dump(live)

    def _dump(self, live: list[RankState]) -> None:
        self._send(self.dump_signal, live)
        self._phase, self._phase_end = "dump", time.monotonic() + _DUMP_WAIT
        self._dump_settling = False

    def _terminate(self) -> None:
        self._send(signal.SIGTERM, self._live())
        self._phase, self._phase_end = "term", time.monotonic() + self.grace

    def _advance(self) -> None:
        """The current teardown phase ran out: move to the next one."""
        live = self._live()
        if self._phase == "grace":
            for st in live:
                st.torn_down = True
            if self.dump_on_failure and live:
                self._dump(live)
            else:
                self._terminate()
        elif self._phase == "dump":
            self._terminate()
        elif self._phase == "term":
            if live:
                ranks = ", ".join(str(st.rank) for st in live)
                self._say(f"{self.name}: rank(s) {ranks} still running {self.grace:g} s after SIGTERM; sending SIGKILL")
            self._send(signal.SIGKILL, live)
            self._phase, self._phase_end = "kill", time.monotonic() + _KILL_WAIT
        elif self._phase == "kill":
            pids = ", ".join(str(st.pid) for st in live)
            self._say(f"{self.name}: rank(s) did not die after SIGKILL (pids {pids}); giving up on them")
            self._phase = "gave up"

    def _on_signal(self, sig: int) -> None:
        live = self._live()
        if sig in FORWARD_SIGNALS:
            self._send(sig, live)
            return
        if self._cause is None:
            self._begin(
                "signal",
                128 + sig,
                f"{self.name}: received {_signame(sig)}; forwarding it to {len(live)} rank(s) and terminating the job",
            )
            self._send(sig, live)
        elif self._phase not in ("kill", "gave up"):
            self._say(f"{self.name}: received {_signame(sig)} again; killing {len(live)} rank(s)")
            for st in live:
                st.torn_down = True
            self._send(signal.SIGKILL, live)
            self._phase, self._phase_end = "kill", time.monotonic() + _KILL_WAIT

    def _read(self, fd: int) -> None:
        sink = self._watched[fd]
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        sink(data)
        if not data:
            del self._watched[fd]
            os.close(fd)

    def wait(self, timeout: float | None = None) -> Outcome:
        """Watch the ranks until every one has ended (tearing down as needed).

        ``timeout`` (seconds from now) is the deadline for the whole job; None
        waits forever.  Returns the :class:`Outcome`; the exit status rule is in
        the module docstring.
        """
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        drain_end = None
        while True:
            now = time.monotonic()
            live = self._live()
            if self._no_init and self._cause is None:
                self._check_no_init()
            if not live or self._phase == "gave up":
                if not self._watched:
                    break
                if drain_end is None:
                    drain_end = now + max(self.grace, _DRAIN_MIN)
                elif now >= drain_end:
                    for fd in list(self._watched):
                        self._watched.pop(fd)(b"")
                        os.close(fd)
                    break
            if self._phase == "run" and deadline is not None and now >= deadline and live:
                self._timeout(timeout)
                continue
            if self._phase_end is not None and now >= self._phase_end and self._phase != "gave up":
                self._advance()
                continue
            if self._phase == "dump" and self.dumps_done is not None and not self._dump_settling:
                if self.dumps_done([st.rank for st in live]):
                    self._dump_settling = True  # give the last write of the dumps a moment
                    self._phase_end = min(self._phase_end, now + _TICK)
            until = [t for t in (drain_end, self._phase_end) if t is not None]
            if self._phase == "run" and deadline is not None:
                until.append(deadline)
            wait_s = max(0.0, min(until) - now) if until else None
            if self._phase == "dump" or any(st.pidfd < 0 for st in live) or (self._no_init and live):
                wait_s = _TICK if wait_s is None else min(wait_s, _TICK)
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            by_fd = {}
            for st in live:
                if st.pidfd >= 0:
                    poller.register(st.pidfd, select.POLLIN)
                    by_fd[st.pidfd] = st
            for fd in self._watched:
                poller.register(fd, select.POLLIN)
            events = poller.poll(None if wait_s is None else max(1, int(wait_s * 1000 + 0.999)))
            for fd, _ev in events:
                if fd == self._wake_r:
                    _drain_wake(fd)
                elif fd in by_fd:
                    self._reap(by_fd[fd])
                elif fd in self._watched:
                    self._read(fd)
            for st in live:
                if st.pidfd < 0 and st.running:
                    self._reap(st)
            while self._signals:
                self._on_signal(self._signals.pop(0))
        return Outcome(
            exit_code=self._exit_code,
            cause=self._cause or "ok",
            reason=self._reason,
            failed_rank=self._failed_rank,
            timed_out=list(self._timed_out),
            ranks=self.ranks,
        )

    def close(self) -> None:
        """Kill (SIGKILL) and reap every rank still running; close every descriptor.

        Idempotent; bounded: a rank that does not die within a few seconds of
        SIGKILL is left behind (it cannot be helped) rather than waited on forever.
        """
        if self._closed:
            return
        self._closed = True
        live = self._live()
        for st in live:
            st.torn_down = True
        self._send(signal.SIGKILL, live)
        end = time.monotonic() + _KILL_WAIT
        for st in live:
            while st.running:
                if st.pidfd >= 0:
                    remaining = end - time.monotonic()
                    if remaining <= 0 or not select.select([st.pidfd], [], [], remaining)[0]:
                        break
                elif time.monotonic() >= end:
                    break
                else:
                    time.sleep(_TICK)
                self._reap(st)
        for st in self.ranks:
            if st.pidfd >= 0:
                os.close(st.pidfd)
                st.pidfd = -1
        for fd, sink in list(self._watched.items()):
            sink(b"")
            os.close(fd)
        self._watched.clear()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self.seg.close()


def _drain_wake(fd: int) -> None:
    try:
        while os.read(fd, 512):
            continue
    except BlockingIOError:
        return


def flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            continue
