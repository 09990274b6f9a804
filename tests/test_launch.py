"""gpumpirun end to end: environment, exit statuses, teardown, signals, output, cleanliness.

Rank programs are plain Python written to ``tmp_path`` (no gpumpi runtime): each one
writes ``pid.<rank>`` first, so every test can check afterwards that no rank is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


LAUNCHER = [sys.executable, "-c", "import sys; from gpumpi.launch import main; sys.exit(main())"]

PRELUDE = """\
import json, os, signal, sys, time
from gpumpi.ipc.jobseg import JobSegment
RANK = int(os.environ["GPUMPI_RANK"])
SIZE = int(os.environ["GPUMPI_SIZE"])
OUT = sys.argv[1]
with open(os.path.join(OUT, "pid.%d" % RANK), "w") as _f:
    _f.write(str(os.getpid()))

def forever():
    while True:
        time.sleep(60)

"""


def _shm() -> set[str]:
    return {e for e in os.listdir("/dev/shm") if "gpumpi" in e}


@pytest.fixture(autouse=True)
def _no_shm_leftovers():
    before = _shm()
    yield
    assert _shm() - before == set(), "a job left entries in /dev/shm"


def _alive(pid: int, prog: Path) -> bool:
    """True if ``pid`` is a running (not zombie) process of the rank program ``prog``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X") and str(prog).encode() in cmdline


def _pids(out: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(out.glob("pid.*")) if p.read_text()]


def _wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


class Run:
    """A finished launcher run."""

    def __init__(self, proc: subprocess.Popen, stdout: str, stderr: str, elapsed: float, out: Path, prog: Path):
        self.pid = proc.pid
        self.rc = proc.returncode
        self.stdout, self.stderr, self.elapsed, self.out, self.prog = stdout, stderr, elapsed, out, prog

    def assert_no_ranks_left(self) -> None:
        pids = _pids(self.out)
        assert pids, "no rank wrote its pid"
        assert not [p for p in pids if _alive(p, self.prog)], "ranks outlived the launcher"


def _program(tmp_path: Path, body: str) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    prog = tmp_path / "rank_prog.py"
    prog.write_text(PRELUDE + body)
    return prog, out


def launch(tmp_path: Path, body: str, n: int, *opts: str, launcher=LAUNCHER, timeout: float = 30) -> Run:
    prog, out = _program(tmp_path, body)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*launcher, *opts, "-n", str(n), str(prog), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        proc.wait()
    return Run(proc, stdout, stderr, time.monotonic() - t0, out, prog)


# --- environment ---------------------------------------------------------------------
ENV_BODY = """
env = {k: v for k, v in os.environ.items() if k.startswith("GPUMPI_")}
seg = JobSegment(int(os.environ["GPUMPI_JOB_FD"]))
env["seg"] = [seg.nranks, seg.ring_size, seg.failed_ranks(), seg.abort_code()]
env["ppid"] = os.getppid()
with open(os.path.join(OUT, "env.%d.json" % RANK), "w") as f:
    json.dump(env, f)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_rank_environment_and_segment(tmp_path, n):
    run = launch(tmp_path, ENV_BODY, n)
    assert run.rc == 0, run.stderr
    envs = [json.loads((run.out / f"env.{r}.json").read_text()) for r in range(n)]
    assert sorted(int(e["GPUMPI_RANK"]) for e in envs) == list(range(n))
    for r, e in enumerate(envs):
        assert int(e["GPUMPI_RANK"]) == r == int(e["GPUMPI_LOCAL_RANK"])
        assert int(e["GPUMPI_SIZE"]) == n == int(e["GPUMPI_LOCAL_SIZE"])
        assert int(e["GPUMPI_LAUNCHER_PID"]) == run.pid == e["ppid"]
        nranks, ring_size, failed, abort = e["seg"]
        assert (nranks, failed, abort) == (n, [], None)
        assert ring_size == int(e["GPUMPI_RING_SIZE"]) > 0
    job_ids = {e["GPUMPI_JOB_ID"] for e in envs}
    assert len(job_ids) == 1
    (job_id,) = job_ids
    assert len(job_id) == 32 and int(job_id, 16) >= 0
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
def test_ring_size_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMPI_RING_SIZE", str(3 * 4096))
    run = launch(tmp_path, ENV_BODY, 2)
    assert run.rc == 0, run.stderr
    for r in range(2):
        e = json.loads((run.out / f"env.{r}.json").read_text())
        assert e["seg"][1] == 3 * 4096 == int(e["GPUMPI_RING_SIZE"])


@pytest.mark.timeout(60)
def test_job_ids_differ_between_jobs(tmp_path):
    ids = []
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        run = launch(tmp_path / str(i), ENV_BODY, 1)
        assert run.rc == 0, run.stderr
        ids.append(json.loads((run.out / "env.0.json").read_text())["GPUMPI_JOB_ID"])
    assert ids[0] != ids[1]


@pytest.mark.timeout(60)
def test_program_arguments_pass_through(tmp_path):
    body = """
with open(os.path.join(OUT, "argv.%d" % RANK), "w") as f:
    json.dump(sys.argv[2:], f)
"""
    prog, out = _program(tmp_path, body)
    proc = subprocess.run(
        [*LAUNCHER, "--grace", "0.5", "-n", "2", "--", str(prog), str(out), "-n", "5", "--timeout", "x", "--"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    for r in range(2):
        assert json.loads((out / f"argv.{r}").read_text()) == ["-n", "5", "--timeout", "x", "--"]


@pytest.mark.timeout(60)
def test_non_python_program_runs_from_path(tmp_path):
    proc = subprocess.run(
        [*LAUNCHER, "-n", "3", "sh", "-c", 'echo "$GPUMPI_RANK/$GPUMPI_SIZE" > "$0/rank.$GPUMPI_RANK"', str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert [(tmp_path / f"rank.{r}").read_text().strip() for r in range(3)] == ["0/3", "1/3", "2/3"]


# --- failures and exit statuses --------------------------------------------------------
@pytest.mark.timeout(60)
def test_first_failing_rank_status_and_peers_see_the_failure(tmp_path):
    body = """
seg = JobSegment(int(os.environ["GPUMPI_JOB_FD"]))
if RANK == 1:
    sys.exit(7)
while not seg.failed(1):
    time.sleep(0.005)
with open(os.path.join(OUT, "saw.%d" % RANK), "w") as f:
    f.write(str(seg.epoch))
forever()
"""
    run = launch(tmp_path, body, 3)
    assert run.rc == 7, run.stderr
    assert run.elapsed < 5
    assert "gpumpirun: rank 1 exited with status 7; terminating 2 other rank(s)" in run.stderr
    assert (run.out / "saw.0").exists() and (run.out / "saw.2").exists()
    assert int((run.out / "saw.0").read_text()) >= 1
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
def test_uncaught_exception_exits_1_with_one_traceback(tmp_path):
    body = """
if RANK == 0:
    raise RuntimeError("boom-in-rank-zero")
forever()
"""
    run = launch(tmp_path, body, 3)
    assert run.rc == 1, run.stderr
    assert run.elapsed < 5
    assert run.stderr.count("Traceback (most recent call last)") == 1
    assert run.stderr.count("RuntimeError: boom-in-rank-zero") == 1
    assert "gpumpirun: rank 0 exited with status 1; terminating 2 other rank(s)" in run.stderr
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
def test_rank_killed_by_signal_gives_128_plus_n(tmp_path):
    body = """
if RANK == 1:
    os.kill(os.getpid(), signal.SIGKILL)
forever()
"""
    run = launch(tmp_path, body, 2)
    assert run.rc == 137, run.stderr
    assert run.elapsed < 5
    assert "rank 1 was killed by signal 9 (SIGKILL); terminating 1 other rank(s)" in run.stderr
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("own_status", [5, 0])
def test_abort_code_decides_the_exit_status(tmp_path, own_status):
    body = f"""
if RANK == 2:
    JobSegment(int(os.environ["GPUMPI_JOB_FD"])).request_abort(5)
    os._exit({own_status})
forever()
"""
    run = launch(tmp_path, body, 4)
    assert run.rc == 5, run.stderr
    assert run.elapsed < 5
    assert "gpumpirun: job aborted with code 5 (rank 2 exited with status" in run.stderr
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
def test_rank_exiting_zero_is_not_a_failure(tmp_path):
    body = """
if RANK == 1:
    time.sleep(0.8)
    open(os.path.join(OUT, "done.1"), "w").close()
"""
    run = launch(tmp_path, body, 2, "--grace", "0.2")
    assert run.rc == 0, run.stderr
    assert (run.out / "done.1").exists()
    assert run.stderr == ""
    run.assert_no_ranks_left()


IMPROPER_RECV = """
import numpy as np
from gpumpi import MPI
try:
    MPI.COMM_WORLD.Recv(np.zeros(1), 1, 0)   # rank 1 never sends
except MPI.Exception as e:
    open(os.path.join(OUT, "noticed.%d" % RANK), "w").write(str(e.Get_error_class() == MPI.ERR_PROC_FAILED))
forever()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 3])
def test_rank_exiting_zero_without_finalize_ends_the_job(tmp_path, n):
    """An initialised rank that exits 0 without MPI_Finalize is an improper exit (Open MPI's
    mpirun rule): the job ends, naming the rank; its peers used to wait on it forever."""
    body = """
if RANK == 1:
    from gpumpi import MPI
    os._exit(0)
""" + IMPROPER_RECV
    run = launch(tmp_path, body, n)
    assert run.rc == 1, run.stderr
    assert run.elapsed < 10
    assert "gpumpirun: rank 1 exited with status 0 without calling MPI_Finalize" in run.stderr, run.stderr
    assert (run.out / "noticed.0").read_text() == "True"
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rank1_first", [True, False])
def test_rank_exiting_zero_without_init_while_others_initialised_ends_the_job(tmp_path, rank1_first):
    """A rank that never initialises while another does is an improper exit too, whether it
    exits before any rank initialised (held pending until one does) or after."""
    body = f"""
if RANK == 1:
    if not {rank1_first}:
        time.sleep(1.0)
    sys.exit(0)
if {rank1_first}:
    time.sleep(0.5)
""" + IMPROPER_RECV
    run = launch(tmp_path, body, 2)
    assert run.rc == 1, run.stderr
    assert run.elapsed < 10
    assert "gpumpirun: rank 1 exited with status 0 without calling MPI_Init while rank(s) 0 did" in run.stderr, \
        run.stderr
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
def test_ranks_that_finalize_or_never_initialise_exit_properly(tmp_path):
    body = """
from gpumpi import MPI
MPI.COMM_WORLD.Barrier()
if RANK == 1:
    MPI.Finalize()
    os._exit(0)       # finalized: a proper exit
if RANK == 2:
    time.sleep(0.3)   # a normal interpreter exit finalizes
"""
    run = launch(tmp_path, body, 3)
    assert run.rc == 0, run.stderr
    assert run.stderr == ""
    # a job in which no rank initialises (not an MPI program) is fine whatever the order
    run = launch(tmp_path, "time.sleep(0.3 * RANK)\n", 3)
    assert run.rc == 0 and run.stderr == "", run.stderr


@pytest.mark.timeout(60)
def test_rank_ignoring_sigterm_is_killed_after_the_grace(tmp_path):
    body = """
if RANK == 1:
    sys.exit(3)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
forever()
"""
    run = launch(tmp_path, body, 2, "--grace", "0.3")
    assert run.rc == 3, run.stderr
    assert 0.5 < run.elapsed < 5
    assert "rank(s) 0 still running 0.3 s after SIGTERM; sending SIGKILL" in run.stderr
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
def test_timeout_names_running_ranks_dumps_stacks_and_exits_124(tmp_path):
    body = """
import faulthandler
faulthandler.register(signal.SIGUSR1, all_threads=True)  # as the runtime does

def stuck_in_rank_program():
    forever()

if RANK == 0:
    sys.exit(0)
stuck_in_rank_program()
"""
    # --tag-output: untagged, the two ranks' dumps interleave on the shared stderr
    run = launch(tmp_path, body, 3, "--timeout", "1", "--tag-output")
    assert run.rc == 124, run.stderr
    assert 1 <= run.elapsed < 5
    assert "gpumpirun: timed out after 1 s (ranks still running: 1, 2;" in run.stderr
    for r in (1, 2):
        assert [ln for ln in run.stderr.splitlines() if ln.startswith(f"[{r}] ") and "in stuck_in_rank_program" in ln]
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_are_forwarded_then_the_job_ends(tmp_path, sig):
    body = """
def got(signum, frame):
    with open(os.path.join(OUT, "got.%d" % RANK), "w") as f:
        f.write(str(signum))
    os._exit(0)

signal.signal(signal.SIGINT, got)
signal.signal(signal.SIGTERM, got)
forever()
"""
    prog, out = _program(tmp_path, body)
    proc = subprocess.Popen([*LAUNCHER, "-n", "3", str(prog), str(out)], stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: len(list(out.glob("pid.*"))) == 3)
        time.sleep(0.1)  # the ranks have installed their handlers
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + sig, stderr
    assert time.monotonic() - t0 < 5
    assert f"gpumpirun: received {signal.Signals(sig).name}; forwarding it to 3 rank(s)" in stderr
    assert [int((out / f"got.{r}").read_text()) for r in range(3)] == [int(sig)] * 3
    assert not [p for p in _pids(out) if _alive(p, prog)]


@pytest.mark.timeout(60)
def test_ranks_die_when_the_launcher_is_killed(tmp_path):
    prog, out = _program(tmp_path, "forever()\n")
    proc = subprocess.Popen([*LAUNCHER, "-n", "3", str(prog), str(out)])
    try:
        assert _wait_for(lambda: len(list(out.glob("pid.*"))) == 3)
        pids = _wait_for(lambda: len(_pids(out)) == 3) and _pids(out)
        assert all(_alive(p, prog) for p in pids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_for(lambda: not [p for p in pids if _alive(p, prog)], timeout=5)
    finally:
        proc.kill()
        proc.wait()


# --- output ----------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_tag_output_prefixes_every_line_and_loses_nothing(tmp_path):
    body = """
for i in range(2000):
    print("out %d %d" % (RANK, i))
sys.stderr.write("err %d a\\nerr %d b\\n" % (RANK, RANK))
sys.stdout.write("tail %d" % RANK)
"""
    run = launch(tmp_path, body, 3, "--tag-output")
    assert run.rc == 0, run.stderr
    for r in range(3):
        mine = [line for line in run.stdout.splitlines() if line.startswith(f"[{r}] ")]
        assert mine == [f"[{r}] out {r} {i}" for i in range(2000)] + [f"[{r}] tail {r}"]
        assert f"[{r}] err {r} a\n[{r}] err {r} b\n" in run.stderr
    assert all(line[:1] == "[" for line in run.stdout.splitlines())
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
def test_without_tag_output_ranks_share_stdout(tmp_path):
    run = launch(tmp_path, 'os.write(1, b"plain %d\\n" % RANK)  # one write: lines cannot interleave\n', 2)
    assert run.rc == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == ["plain 0", "plain 1"]


@pytest.mark.timeout(60)
def test_tag_output_with_a_failing_rank(tmp_path):
    body = """
print("before", RANK, flush=True)
if RANK == 1:
    raise ValueError("tagged failure")
forever()
"""
    run = launch(tmp_path, body, 2, "--tag-output")
    assert run.rc == 1
    assert "[1] ValueError: tagged failure" in run.stderr
    assert "[0] before 0" in run.stdout and "[1] before 1" in run.stdout
    run.assert_no_ranks_left()


# --- entry points and usage ------------------------------------------------------------
@pytest.mark.timeout(60)
def test_python_dash_m_gpumpi(tmp_path):
    run = launch(tmp_path, ENV_BODY, 2, launcher=[sys.executable, "-m", "gpumpi"])
    assert run.rc == 0, run.stderr
    assert {json.loads((run.out / f"env.{r}.json").read_text())["GPUMPI_RANK"] for r in range(2)} == {"0", "1"}


@pytest.mark.timeout(60)
def test_gpumpirun_console_script(tmp_path):
    script = Path(sys.executable).parent / "gpumpirun"
    if not script.exists():
        pytest.skip("the gpumpirun console script is not installed next to this Python")
    run = launch(tmp_path, "sys.exit(RANK + 2)\n", 2, "--grace", "0.2", launcher=[str(script)])
    assert run.rc in (2, 3), run.stderr
    run.assert_no_ranks_left()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: -n"),
        (["-n", "2"], "no program given"),
        (["-n", "0", "x.py"], "-n must be at least 1 (0)"),
        (["-n", "2", "--timeout", "0", "x.py"], "--timeout must be > 0 seconds"),
        (["-n", "two", "x.py"], "invalid int value"),
        (["--bogus", "-n", "1", "x.py"], "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_exit_2(argv, message):
    proc = subprocess.run([*LAUNCHER, *argv], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert message in proc.stderr


@pytest.mark.timeout(60)
def test_help_and_version():
    proc = subprocess.run([*LAUNCHER, "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "--tag-output" in proc.stdout and "Exit status" in proc.stdout
    proc = subprocess.run([*LAUNCHER, "--version"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "gpumpirun" in proc.stdout


@pytest.mark.timeout(60)
def test_missing_program_exits_127(tmp_path):
    proc = subprocess.run(
        [*LAUNCHER, "-n", "2", str(tmp_path / "no-such-program")], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 127
    assert "gpumpirun: cannot start" in proc.stderr and "No such file or directory" in proc.stderr


@pytest.mark.timeout(60)
def test_program_that_cannot_be_executed_exits_126(tmp_path):
    prog = tmp_path / "not-executable"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o644)
    proc = subprocess.run([*LAUNCHER, "-n", "2", str(prog)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 126
    assert "gpumpirun: cannot start" in proc.stderr and "Permission denied" in proc.stderr


def test_bench_and_info_dispatch_to_the_gpumpi_command(monkeypatch):
    import types

    import gpumpi.__main__ as entry

    seen = []
    fake = types.ModuleType("gpumpi.cli")
    fake.main = lambda: seen.append(list(sys.argv)) or 3
    monkeypatch.setitem(sys.modules, "gpumpi.cli", fake)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert entry.main(["info", "--json"]) == 3
    assert entry.main(["bench", "pingpong"]) == 3
    assert seen == [["gpumpi", "info", "--json"], ["gpumpi", "bench", "pingpong"]]


def test_job_segment_is_a_memfd_not_a_dev_shm_file():
    from gpumpi.launch import Job

    before = _shm()
    job = Job(2, ring_size=4096)
    try:
        assert os.readlink(f"/proc/self/fd/{job.seg.fd}").startswith("/memfd:")
        assert job.seg.nranks == 2
        assert _shm() == before
    finally:
        job.close()
    with pytest.raises(OSError):
        os.fstat(job.seg.fd)
