"""Tests of the ``gpumpi`` command (gpumpi/cli.py): argument errors before anything is launched,
job detection, launch commands, the arguments and environment of inner runs, and ``gpumpi info``.
The suites' runs through the command are tested with each suite, in tests/bench/.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpumpi import bench, cli
from gpumpi.bench import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_MPI4PY = __import__("importlib").util.find_spec("mpi4py") is not None


def _env():
    env = dict(os.environ)
    for name in cli.JOB_ENV_VARS:
        env.pop(name, None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(cmd, timeout=180):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT)


def _args(*argv):
    args = cli.build_parser().parse_args(["bench", *argv])
    cli._validate(args)
    return args


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if the command tries to start anything."""

    def boom(*a, **k):
        raise AssertionError(f"launched {a!r}")

    monkeypatch.setattr(cli.subprocess, "call", boom)
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------- argument errors


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "nope"], "gpumpi bench: unknown suite 'nope' (available: p2p, pack, p2p-matrix, coll, rma, ga, io)"),
        (["bench", "pack", "--sizes", "3"], "pack block size 3 does not divide the 1048576 packed bytes"),
        (["bench", "pack", "--sizes", "0,8"], "pack block size 0 does not divide"),
        (["bench", "pack", "--sizes", "2K:4K"], "selects no block size"),
        (["bench", "pack", "-n", "0"], "the pack suite needs at least 1 rank (got -n 0)"),
        (["bench", "pack", "--window", "8"], "--window and --distinct-recv apply to the p2p suite only, not pack"),
        (["bench", "pack", "--distinct-recv"], "apply to the p2p suite only"),
        (["bench", "pack", "--buffer", "cupy"], "bench: the pack suite runs on host numpy buffers only (--buffer cupy)"),
        (["bench", "pack", "--buffer", "sim"], "the pack suite runs on host numpy buffers only (--buffer sim)"),
        (["bench", "--buffer", "bogus"], "bench: unknown buffer kind 'bogus'"),
        (["bench", "-n", "1"], "needs at least 2 ranks"),
        (["bench", "--sizes", "9:3"], "min 9 > max 3"),
        (["bench", "--sizes", "lots"], "bad size 'lots'"),
        (["bench", "--iters", "0"], "--iters must be >= 1"),
        (["bench", "--window", "0"], "--window must be >= 1"),
        (["bench", "--impl", "openmpi"], "invalid choice: 'openmpi'"),
        (["bench", "--sim-nodes", "2"], "--sim-nodes 2 needs --launcher mpiexec"),
        (["bench", "--launcher", "mpiexec", "--sim-nodes", "-1"], "--sim-nodes must be >= 0 (got -1)"),
        (["bench", "--launcher", "srun"], "invalid choice: 'srun'"),
        ([], "missing command"),
    ],
)
def test_argument_errors(argv, message, capsys):
    rc = cli.main(argv)
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err


def test_argument_errors_from_the_console_module():
    out = _run([sys.executable, "-m", "gpumpi.cli", "bench", "--buffer", "bogus"], timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == "gpumpi bench: unknown buffer kind 'bogus' (supported: numpy, sim, cupy)"
    assert out.stdout == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--buffer", "sim", "--transport", "nvlink"],
         "gpumpi bench: unknown transport 'nvlink' (known: auto, cuda_ipc, staging)"),
        (["bench", "p2p-matrix", "--buffer", "sim", "--transport", "shm"], "unknown transport 'shm'"),
        (["bench", "--transport", "staging"],
         "--transport staging applies to device buffers (--buffer sim or cupy), not numpy"),
        (["bench", "--buffer", "sim", "--impl", "mpi4py"], "--buffer sim: mpi4py runs use host numpy buffers"),
        (["bench", "p2p-matrix", "--buffer", "numpy"],
         "the p2p-matrix suite measures device buffers: use --buffer sim or cupy"),
        (["bench", "p2p-matrix", "--buffer", "sim", "-n", "3"], "runs 2 ranks per device pair (got -n 3)"),
        (["bench", "p2p-matrix", "--buffer", "sim", "--compare", "mpi4py"], "measures gpumpi only"),
        (["bench", "p2p-matrix", "--buffer", "sim", "--window", "8"], "apply to the p2p suite only, not p2p-matrix"),
        (["bench", "p2p-matrix", "--buffer", "sim", "--sizes", "0"], "p2p-matrix message sizes must be >= 1 byte"),
        (["bench", "--buffer", "sim", "--_pair", "0,0"], "--_pair applies to the p2p-matrix suite only"),
        (["bench", "p2p-matrix", "--buffer", "sim", "--_pair", "0"], "--_pair: expected SRC,DST device numbers"),
    ],
)
def test_device_argument_errors_launch_nothing(argv, message, capsys, no_launch):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("suite", ["p2p", "p2p-matrix"])
def test_cupy_without_cupy_fails_before_launching(suite, capsys, no_launch, monkeypatch):
    fake = lambda: (False, "cupy is not installed: pip install gpumpi[cuda]")  # noqa: E731
    monkeypatch.setattr(_common, "cupy_status", fake)  # what check_device_buffers asks
    monkeypatch.setattr(bench, "cupy_status", fake)  # what cli asks for the default buffer of p2p-matrix
    assert cli.main(["bench", suite, "--buffer", "cupy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "gpumpi bench: --buffer cupy needs CuPy and a CUDA GPU (cupy is not installed: pip install gpumpi[cuda])"
    # without a GPU, p2p-matrix defaults to the simulated device
    assert _args("p2p-matrix").buffer == "sim"


def test_p2p_matrix_inside_a_job_needs_a_pair(capsys, monkeypatch):
    monkeypatch.setenv("GPUMPI_SIZE", "2")
    assert cli.main(["bench", "p2p-matrix", "--buffer", "sim"]) == 2
    assert "p2p-matrix starts one job per device pair; run it from a shell" in capsys.readouterr().err


# ---------------------------------------------------------------- launches and inner runs


def test_in_job_detection():
    assert not cli.in_job({})
    assert cli.in_job({"GPUMPI_SIZE": "2"})
    assert cli.in_job({"PMI_RANK": "0"})
    assert not cli.in_job({"GPUMPI_SIZE": ""})


def test_launch_commands(monkeypatch):
    monkeypatch.setattr(cli, "gpumpi_launcher_available", lambda: True)
    argv = ["bench", "p2p", "--quick", "--_inner"]
    assert cli.launch_command("gpumpi", 3, argv) == [
        sys.executable, "-m", "gpumpi", "-n", "3", sys.executable, "-m", "gpumpi.cli", *argv,
    ]  # fmt: skip
    monkeypatch.setattr(cli, "find_mpiexec", lambda: "/opt/mpi/bin/mpiexec")
    if HAVE_MPI4PY:
        cmd = cli.launch_command("mpi4py", 2, argv)
        assert cmd == ["/opt/mpi/bin/mpiexec", "-n", "2", sys.executable, "-m", "gpumpi.cli", *argv]
        monkeypatch.setattr(cli, "find_mpiexec", lambda: None)
        with pytest.raises(cli.CLIError, match="needs mpiexec"):
            cli.launch_command("mpi4py", 2, argv)
    monkeypatch.setattr(cli, "gpumpi_launcher_available", lambda: False)
    with pytest.raises(cli.CLIError, match="gpumpi launcher"):
        cli.launch_command("gpumpi", 2, argv)


def test_inner_argv_forwards_options_but_not_outputs():
    args = cli.build_parser().parse_args(
        ["bench", "--quick", "--sizes", "8,1K", "--iters", "3", "--skip", "1", "--compare", "mpi4py", "--json", "x.json",
         "--csv", "x.csv", "--plot", "x.png", "--quiet", "--distinct-recv", "-n", "4"]
    )  # fmt: skip
    argv = cli.inner_argv(args, "mpi4py", "/tmp/r.json")
    assert argv[:3] == ["bench", "p2p", "--impl"] and argv[3] == "mpi4py"
    for opt in ("--quick", "--quiet", "--distinct-recv"):
        assert opt in argv
    assert argv[argv.index("--sizes") + 1] == "8,1K"
    assert argv[argv.index("--iters") + 1] == "3"
    assert argv[argv.index("--skip") + 1] == "1"
    assert argv[-3:] == ["--_json", "/tmp/r.json", "--_inner"]
    for opt in ("--compare", "--json", "--csv", "--plot", "-n"):
        assert opt not in argv
    # and the inner side parses them back
    inner = cli.build_parser().parse_args(argv)
    assert inner.inner and inner.inner_json == "/tmp/r.json" and inner.impl == "mpi4py"


def test_rank_env_and_inner_argv():
    args = _args("--buffer", "sim", "--transport", "staging", "--compare", "mpi4py", "--sizes", "8,1K")
    assert cli.rank_env(args, "gpumpi", {}) == {"GPUMPI_DEVICE": "sim", "GPUMPI_TRANSPORTS": "device:staging"}
    assert cli.rank_env(args, "gpumpi", {"GPUMPI_TRANSPORTS": "host:shm"})["GPUMPI_TRANSPORTS"] == "host:shm,device:staging"
    assert cli.rank_env(args, "mpi4py", {}) == {}
    mine = cli.inner_argv(args, "gpumpi", "/tmp/g.json")
    assert mine[mine.index("--buffer") + 1] == "sim"
    assert mine[mine.index("--transport") + 1] == "staging"
    ref = cli.inner_argv(args, "mpi4py", "/tmp/m.json")
    assert ref[ref.index("--buffer") + 1] == "numpy" and "--transport" not in ref  # mpi4py runs on host buffers
    auto = _args("--buffer", "sim")
    assert cli.rank_env(auto, "gpumpi", {"GPUMPI_TRANSPORTS": "device:staging"}) == {"GPUMPI_DEVICE": "sim"}
    assert "--transport" not in cli.inner_argv(auto, "gpumpi", "/tmp/a.json")
    matrix = _args("p2p-matrix", "--buffer", "sim", "--quick")
    argv = cli.inner_argv(matrix, "gpumpi", "/tmp/p.json", (1, 0))
    assert argv[:2] == ["bench", "p2p-matrix"] and argv[argv.index("--_pair") + 1] == "1,0"
    inner = cli.build_parser().parse_args(argv)
    assert cli.parse_pair(inner.pair) == (1, 0) and inner.buffer == "sim" and inner.quick
    assert cli.rank_env(_args("--sizes", "8"), "gpumpi", {}) == {}  # host buffers: nothing to set


def test_gpumpi_without_launcher_fails_clearly(capsys, monkeypatch):
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "gpumpi_launcher_available", lambda: False)
    rc = cli.main(["bench", "--quick"])
    assert rc == 2
    assert "gpumpi launcher" in capsys.readouterr().err


# ---------------------------------------------------------------- info


def test_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpumpi ")
    for needle in ("python ", "numpy ", "numba", "mpi4py", "mpich", "cupy", "numba-cuda", "nvtx",
                   "GPUMPI_EAGER_LIMIT", "GPUMPI_CMA", "cross-memory attach:"):  # fmt: skip
        assert needle in out
    ok, why = cli.cma_status()
    assert ("cross-memory attach: available" in out) == ok
    assert why in out


def test_info_reports_bad_configuration(capsys, monkeypatch):
    from gpumpi import _config

    monkeypatch.setenv("GPUMPI_EAGER_LIMIT", "lots")
    monkeypatch.setattr(_config, "_cached", [None])
    assert cli.main(["info"]) == 0
    assert "configuration: invalid" in capsys.readouterr().out
