"""gpumpi.testing.run_ranks: results, failures with every rank's story, deadlines, cleanliness."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from gpumpi import _config
from gpumpi.ipc.jobseg import JobSegment
from gpumpi.testing import WORLD_SIZES, RanksFailed, parametrize_world, run_ranks


def _children() -> set[int]:
    """Pids of this process's children (every thread's)."""
    kids = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                kids.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            continue
    return kids


def _shm() -> set[str]:
    return {e for e in os.listdir("/dev/shm") if "gpumpi" in e}


@pytest.fixture(autouse=True)
def _clean():
    """Every test: no child process, no new descriptor and no /dev/shm entry left behind."""
    kids, fds, shm = _children(), set(os.listdir("/proc/self/fd")), _shm()
    yield
    assert _children() - kids == set(), "run_ranks left child processes"
    assert _shm() - shm == set(), "run_ranks left entries in /dev/shm"
    leaked = set(os.listdir("/proc/self/fd")) - fds
    assert not leaked, f"run_ranks leaked descriptors {sorted(leaked)}"


def _rank() -> int:
    return int(os.environ["GPUMPI_RANK"])


def identify():
    cfg = _config.get()
    seg = JobSegment(cfg.job_fd)
    info = {
        "rank": _rank(),
        "size": int(os.environ["GPUMPI_SIZE"]),
        "cfg": (cfg.rank, cfg.size, cfg.local_rank, cfg.local_size, cfg.launcher_pid),
        "job_id": cfg.job_id,
        "seg": (seg.nranks, seg.ring_size),
        "pid": os.getpid(),
    }
    return info


def sleep_forever():
    while True:
        time.sleep(60)


def fail_on_rank_one():
    if _rank() == 1:
        raise ValueError("rank one fails here")
    sleep_forever()


def blocked_in_read():
    r, _w = os.pipe()
    os.read(r, 1)


def echo(a, b=0, *, c=0):
    return (_rank(), a, b, c)


# --- results ---------------------------------------------------------------------------
@pytest.mark.timeout(60)
@parametrize_world
def test_each_rank_returns_its_value(n):
    infos = run_ranks(identify, n, timeout=20)
    assert [i["rank"] for i in infos] == list(range(n))
    assert {i["size"] for i in infos} == {n}
    assert [i["cfg"] for i in infos] == [(r, n, r, n, os.getpid()) for r in range(n)]
    assert len({i["job_id"] for i in infos}) == 1 and len(infos[0]["job_id"]) == 32
    int(infos[0]["job_id"], 16)
    assert {i["seg"][0] for i in infos} == {n}
    assert len({i["pid"] for i in infos} | {os.getpid()}) == n + 1


@pytest.mark.timeout(60)
def test_eight_ranks():
    infos = run_ranks(identify, 8, timeout=20)
    assert [i["rank"] for i in infos] == list(range(8))


@pytest.mark.timeout(60)
def test_args_kwargs_and_env_reach_the_ranks():
    assert run_ranks(echo, 3, args=(1,), kwargs={"b": 2, "c": 3}) == [(r, 1, 2, 3) for r in range(3)]

    def settings():
        cfg = _config.get()
        env = os.environ["GPUMPI_TEST_FLAG"], os.environ["GPUMPI_FAULTHANDLER"]
        return (*env, cfg.eager_limit, cfg.ring_size, JobSegment(cfg.job_fd).ring_size)

    out = run_ranks(settings, 2, env={"GPUMPI_TEST_FLAG": "yes", "GPUMPI_EAGER_LIMIT": 123, "GPUMPI_RING_SIZE": 8192})
    assert out == [("yes", "0", 123, 8192, 8192)] * 2
    assert "GPUMPI_TEST_FLAG" not in os.environ


@pytest.mark.timeout(60)
def test_closures_and_large_results():
    big = np.arange(3_000_000, dtype=np.float64)  # 24 MB per rank: far more than a pipe holds
    out = run_ranks(lambda: big * (_rank() + 1), 3)
    for r, a in enumerate(out):
        np.testing.assert_array_equal(a, big * (r + 1))


@pytest.mark.timeout(60)
def test_round_trip_is_fast():
    run_ranks(echo, 4, args=(0,))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        run_ranks(echo, 4, args=(0,))
        best = min(best, time.perf_counter() - t0)
    assert best < 0.5


@pytest.mark.timeout(60)
def test_rank_output_reaches_the_inherited_descriptors(capfd):
    def talk():
        print(f"hello from rank {_rank()}")
        print(f"warning from rank {_rank()}", file=sys.stderr)

    run_ranks(talk, 3)
    out, err = capfd.readouterr()
    for r in range(3):
        assert f"hello from rank {r}" in out and f"warning from rank {r}" in err


@pytest.mark.timeout(60)
def test_children_never_run_the_parents_atexit_handlers(tmp_path):
    marker = tmp_path / "atexit-ran"
    parent = os.getpid()

    def handler():
        if os.getpid() != parent:
            marker.write_text(str(os.getpid()))

    atexit.register(handler)
    try:
        run_ranks(echo, 2, args=(0,))
        with pytest.raises(RanksFailed):
            run_ranks(lambda: sys.exit(4), 2)
        with pytest.raises(RanksFailed):
            run_ranks(lambda: (_ for _ in ()).throw(KeyboardInterrupt()), 2)
    finally:
        atexit.unregister(handler)
    assert not marker.exists()


# --- failures --------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_failing_rank_traceback_with_every_other_ranks_stack():
    t0 = time.monotonic()
    with pytest.raises(RanksFailed) as info:
        run_ranks(fail_on_rank_one, 4, timeout=30)
    assert time.monotonic() - t0 < 5
    err = info.value
    assert isinstance(err, AssertionError) and not err.timed_out
    msg = str(err)
    first = msg.splitlines()[0]
    assert first.startswith("run_ranks: rank 1 exited with status 1; terminating 3 other rank(s)")
    assert "ValueError: rank one fails here" in first
    assert msg.count("Traceback (most recent call last)") == 1
    assert 'in fail_on_rank_one\n    raise ValueError("rank one fails here")' in msg
    for r in (0, 2, 3):
        assert f"--- rank {r} (pid " in msg
    assert msg.count("still running 1 s after the failure; stopped") == 3
    assert msg.count("in sleep_forever") == 3
    assert [rep.outcome for rep in err.reports] == ["torn down", "error", "torn down", "torn down"]
    assert err.reports[1].status == 1


@pytest.mark.timeout(60)
@parametrize_world
def test_timeout_reports_every_ranks_stack(n):
    def hang():
        if _rank() % 2:
            blocked_in_read()
        sleep_forever()

    t0 = time.monotonic()
    with pytest.raises(RanksFailed) as info:
        run_ranks(hang, n, timeout=1.0)
    assert time.monotonic() - t0 < 4
    err = info.value
    msg = str(err)
    assert err.timed_out
    assert msg.startswith("run_ranks: timed out after 1 s (ranks still running: " + ", ".join(map(str, range(n))))
    assert msg.count("still running at the deadline") == n
    assert msg.count("in sleep_forever") == (n + 1) // 2
    assert msg.count("in blocked_in_read") == n // 2
    assert all(rep.outcome == "timed out" and rep.stack for rep in err.reports)


@pytest.mark.timeout(60)
def test_one_rank_blocking_forever_does_not_hang():
    def one_blocks():
        if _rank() == 2:
            sleep_forever()
        return _rank()

    with pytest.raises(RanksFailed) as info:
        run_ranks(one_blocks, 3, timeout=1.0)
    reps = info.value.reports
    assert [rep.outcome for rep in reps] == ["ok", "ok", "timed out"]
    assert "ranks still running: 2;" in str(info.value)
    assert "--- rank 0 (pid" in str(info.value) and "returned normally" in str(info.value)


@pytest.mark.timeout(60)
def test_rank_killed_by_signal():
    def die():
        if _rank() == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        sleep_forever()

    with pytest.raises(RanksFailed) as info:
        run_ranks(die, 2)
    msg = str(info.value)
    assert msg.startswith("run_ranks: rank 0 was killed by signal 9 (SIGKILL); terminating 1 other rank(s)")
    assert "--- rank 0 (pid" in msg and "no result; it was killed by signal 9 (SIGKILL)" in msg
    assert "in sleep_forever" in msg


@pytest.mark.timeout(60)
def test_sys_exit_and_abort():
    with pytest.raises(RanksFailed, match=r"rank 1 exited with status 3") as info:
        run_ranks(lambda: sys.exit(3 if _rank() == 1 else 0), 2)
    assert "SystemExit: 3" in str(info.value)
    assert run_ranks(lambda: sys.exit(0), 2) == [None, None]

    def abort():
        if _rank() == 1:
            JobSegment(_config.get().job_fd).request_abort(5)
            os._exit(5)
        sleep_forever()

    with pytest.raises(RanksFailed) as info:
        run_ranks(abort, 3)
    assert str(info.value).startswith("run_ranks: job aborted with code 5 (rank 1 exited with status 5)")
    assert info.value.outcome.exit_code == 5


@pytest.mark.timeout(60)
def test_exit_zero_without_a_result_is_a_failure():
    with pytest.raises(RanksFailed, match=r"rank\(s\) 0 exited with status 0 without returning a result"):
        run_ranks(lambda: os._exit(0) if _rank() == 0 else 1, 2)


@pytest.mark.timeout(60)
def test_unpicklable_result():
    with pytest.raises(RanksFailed, match="is not picklable"):
        run_ranks(lambda: (lambda: None), 2)


@pytest.mark.timeout(60)
def test_skip_in_every_rank_skips_the_test():
    with pytest.raises(pytest.skip.Exception, match="not on this machine"):
        run_ranks(lambda: pytest.skip("not on this machine"), 2)


@pytest.mark.timeout(60)
def test_bad_arguments():
    with pytest.raises(ValueError, match=r"run_ranks: n must be an integer >= 1 \(0\)"):
        run_ranks(echo, 0)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        run_ranks(echo, 1, timeout=0)
    with pytest.raises(TypeError, match="fn must be callable"):
        run_ranks(42, 1)
    from gpumpi.testing import run_mpiexec

    with pytest.raises(ValueError, match=r"run_mpiexec: n must be an integer >= 1 \(0\)"):
        run_mpiexec(echo, 0)
    with pytest.raises(ValueError, match=r"run_mpiexec: nodes must be an integer >= 0 \(-1\)"):
        run_mpiexec(echo, 2, nodes=-1)
    with pytest.raises(ValueError, match="run_mpiexec: timeout must be > 0"):
        run_mpiexec(echo, 1, timeout=0)
    with pytest.raises(TypeError, match="run_mpiexec: fn must pickle by reference"):
        run_mpiexec(lambda: 1, 1)


@pytest.mark.timeout(60)
def test_children_are_gone_after_failure_and_timeout():
    with pytest.raises(RanksFailed) as info:
        run_ranks(fail_on_rank_one, 3)
    with pytest.raises(RanksFailed) as info2:
        run_ranks(sleep_forever, 3, timeout=0.5)
    for rep in info.value.reports + info2.value.reports:
        with pytest.raises(ChildProcessError):
            os.waitpid(rep.pid, os.WNOHANG)
        with pytest.raises(ProcessLookupError):
            os.kill(rep.pid, 0)


# --- module surface --------------------------------------------------------------------
def test_gpumpi_launch_is_callable():
    import gpumpi

    assert gpumpi.launch(echo, 2, args=(9,)) == [(0, 9, 0, 0), (1, 9, 0, 0)]


def test_world_sizes():
    assert WORLD_SIZES == (1, 2, 3, 4)
    assert parametrize_world.args == ("n", WORLD_SIZES)


def test_testing_imports_without_pytest():
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "import gpumpi.testing as t\n"
        "assert t.WORLD_SIZES == (1, 2, 3, 4)\n"
        "try:\n    t.parametrize_world\nexcept AttributeError as e:\n    print('no pytest:', e)\n"
        "print(t.run_ranks(lambda: 7, 2))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "no pytest: gpumpi.testing.parametrize_world needs pytest" in proc.stdout
    assert "[7, 7]" in proc.stdout


@pytest.mark.timeout(60)
def test_without_pidfds_the_job_still_sees_every_exit(monkeypatch):
    def no_pidfd(pid, flags=0):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    assert run_ranks(echo, 3, args=(5,)) == [(r, 5, 0, 0) for r in range(3)]
    t0 = time.monotonic()
    with pytest.raises(RanksFailed, match="rank 1 exited with status 1"):
        run_ranks(fail_on_rank_one, 3)
    assert time.monotonic() - t0 < 5


@pytest.mark.timeout(60)
def test_ranks_die_with_the_calling_process(tmp_path):
    script = f"""
import os, time
from gpumpi.testing import run_ranks

def body():
    with open(os.path.join({str(tmp_path)!r}, "pid." + os.environ["GPUMPI_RANK"]), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(60)

run_ranks(body, 3, timeout=120)
"""
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        end = time.monotonic() + 20
        while len([p for p in tmp_path.glob("pid.*") if p.read_text()]) < 3 and time.monotonic() < end:
            time.sleep(0.01)
        pids = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
        assert len(pids) == 3
        proc.kill()
        proc.wait(timeout=10)

        def alive(pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
            except FileNotFoundError:
                return False

        end = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.01)
        assert not [p for p in pids if alive(p)]
    finally:
        proc.kill()
        proc.wait()


def _world_size():
    from gpumpi import MPI

    return MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()


def test_ranks_get_their_own_world_after_the_parent_initialised():
    """A test module that does ``from gpumpi import MPI`` makes the pytest process a world of
    one; forked ranks must still see the job's world."""
    from gpumpi import MPI

    assert MPI.Is_initialized() and MPI.COMM_WORLD.Get_size() == 1
    assert run_ranks(_world_size, 3) == [(3, 0), (3, 1), (3, 2)]
    assert MPI.COMM_WORLD.Get_size() == 1  # the parent's world is untouched
