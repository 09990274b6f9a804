"""``gpumpi bench`` on device buffers: ``p2p --buffer sim|cupy``, ``--transport``, ``p2p-matrix``.

Pure parts (argument checks, transport settings, sizes, tables) run everywhere.  The
simulated device (``--buffer sim``) runs end to end through the gpumpi launcher with
tiny sizes; the wrong-value counting runs in-process on forked ranks with a comm that
corrupts what it receives.  ``gpu`` tests need CuPy and a CUDA GPU and skip otherwise;
they ask a subprocess, so this process never initialises CUDA (run_ranks forks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpumpi import bench, cli
from gpumpi.bench import _common, p2p, p2p_matrix
from gpumpi.testing import run_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_launcher = pytest.mark.skipif(not cli.gpumpi_launcher_available(), reason="gpumpi.launch is missing")


def _env(**extra):
    env = dict(os.environ)
    for name in (*cli.JOB_ENV_VARS, "GPUMPI_TRANSPORTS", "GPUMPI_DEVICE"):
        env.pop(name, None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def _bench(*argv, timeout=120, **extra):
    cmd = [sys.executable, "-m", "gpumpi.cli", "bench", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(**extra), cwd=ROOT)


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


# ---------------------------------------------------------------- pure parts


def test_buffer_kinds_per_suite():
    for kind in ("numpy", "sim", "cupy"):
        bench.check_buffer_kind(kind, "p2p")
    bench.check_buffer_kind("numpy", "pack")
    for kind in ("sim", "cupy"):
        bench.check_buffer_kind(kind, "p2p-matrix")
        with pytest.raises(bench.BenchError, match=f"pack suite runs on host numpy buffers only \\(--buffer {kind}\\)"):
            bench.check_buffer_kind(kind, "pack")
    with pytest.raises(bench.BenchError, match="measures device buffers: use --buffer sim or cupy"):
        bench.check_buffer_kind("numpy", "p2p-matrix")


def test_transports_setting():
    assert _common.transports_setting("auto") == ""
    assert _common.transports_setting("auto", "host:shm") == "host:shm"
    assert _common.transports_setting("staging") == "device:staging"
    assert _common.transports_setting("cuda_ipc", "host:shm") == "host:shm,device:cuda_ipc"
    # the chosen device transport replaces every device item, host items stay
    assert _common.transports_setting("staging", "device:cuda_ipc; host:shm,Device:staging") == "host:shm,device:staging"
    with pytest.raises(bench.BenchError, match=r"unknown transport 'nvlink' \(known: auto, cuda_ipc, staging\)"):
        _common.transports_setting("nvlink")


def test_parse_matrix_sizes():
    assert p2p_matrix.parse_matrix_sizes(None) == [1 << 20, 16 << 20, 64 << 20]
    assert p2p_matrix.parse_matrix_sizes(None, quick=True) == [1 << 20, 16 << 20]
    assert p2p_matrix.parse_matrix_sizes("1M:4M") == [1 << 20, 2 << 20, 4 << 20]
    assert p2p_matrix.parse_matrix_sizes("32M:") == [32 << 20, 64 << 20]
    assert p2p_matrix.parse_matrix_sizes("2M:", quick=True) == [16 << 20]
    assert p2p_matrix.parse_matrix_sizes(":4") == [1, 2, 4]
    assert p2p_matrix.parse_matrix_sizes("16M,4K,4K") == [4096, 16 << 20]
    with pytest.raises(bench.BenchError, match="must be >= 1 byte"):
        p2p_matrix.parse_matrix_sizes("0,1M")
    with pytest.raises(bench.BenchError, match="min 4 > max 2"):
        p2p_matrix.parse_matrix_sizes("4:2")


def test_plan_matrix_iterations():
    assert p2p_matrix.plan_matrix_iterations() == ((20, 3), (20, 2))
    assert p2p_matrix.plan_matrix_iterations(quick=True) == ((5, 1), (5, 1))
    assert p2p_matrix.plan_matrix_iterations(iters=7, skip=0) == ((7, 0), (7, 0))


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


def test_cupy_status_names_what_is_missing():
    bench.check_device_buffers("sim")
    bench.check_device_buffers("numpy")
    if __import__("importlib").util.find_spec("cupy") is not None:
        pytest.skip("cupy is installed (and cupy_status would initialise CUDA in this process)")
    assert bench.cupy_status() == (False, "cupy is not installed: pip install gpumpi[cuda]")
    with pytest.raises(bench.BenchError, match=r"^--buffer cupy needs CuPy and a CUDA GPU \(cupy is not installed"):
        bench.check_device_buffers("cupy")


def _matrix_row(src, dst, size, warm=2.0, wrong=0):
    return {"src_device": src, "dst_device": dst, "size": size, "cold_GBps": 0.5, "warm_GBps": warm, "copy_GBps": 4.0,
            "warm_pct_copy": 100 * warm / 4.0, "cold_s": 1e-3, "warm_s": 5e-4, "copy_s": 2.5e-4, "wrong": wrong,
            "iters": {"warm": [20, 3], "copy": [20, 2]}}  # fmt: skip


MATRIX_META = {"suite": "p2p-matrix", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 2, "buffer": "cupy",
               "transport": "staging", "transports_env": "device:staging", "devices": 2}  # fmt: skip


def test_format_matrix_table_with_grid():
    rows = [_matrix_row(i, j, s, warm=1.0 + i + 2 * j) for s in (1 << 20, 16 << 20) for j in (1, 0) for i in (0, 1)]
    rows[-1]["wrong"] = 3
    text = bench.format_table(rows, MATRIX_META)
    lines = text.splitlines()
    assert lines[0] == "# gpumpi p2p-matrix, 2 GPUs, cupy buffers (CUDA device memory)"
    assert lines[2].startswith("# device transport: staging (GPUMPI_TRANSPORTS=device:staging")
    assert "cold: the first message of newly allocated buffers (one-time setup" in text  # no IPC under staging
    assert "# warm: the same buffers again, median of 20 after 3 warm-up" in lines
    head = next(ln for ln in lines if "warm/copy" in ln and "#wrong" in ln)
    assert head.split() == ["#", "src", "dst", "size", "cold", "warm", "copy", "warm/copy", "#wrong"]
    body = [ln.split() for ln in lines[lines.index(head) + 2 :] if not ln.startswith("#")][:8]
    # sorted by pair, then size
    assert [b[:3] for b in body[:4]] == [["0", "0", "1048576"], ["0", "0", "16777216"], ["0", "1", "1048576"],
                                        ["0", "1", "16777216"]]  # fmt: skip
    assert body[2][3:] == ["0.5000", "3.0000", "4.0000", "75.0", "0"]
    assert "# warm bandwidth (GB/s) at 16777216 B: rows = src GPU, columns = dst GPU" in lines
    grid = lines[lines.index("# warm bandwidth (GB/s) at 1048576 B: rows = src GPU, columns = dst GPU") + 1 :][:3]
    assert grid[0].split() == ["#", "src\\dst", "0", "1"]
    assert grid[1].split() == ["0", "1.00", "3.00"] and grid[2].split() == ["1", "2.00", "4.00"]
    assert lines[-1] == "# Wrong values : 3 FAILED"
    progress = bench.format_progress(0, 2, rows[1], "gpumpi")
    assert progress.startswith("# gpumpi p2p-matrix 1->1 [1/2] 1048576 B: cold 0.5000 GB/s warm 4.0000 GB/s")


def test_device_headers_and_compare_note():
    p2p_meta = {"suite": "p2p", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 2, "buffer": "cupy", "window": 64,
           "transport": "cuda_ipc", "transports_env": "device:cuda_ipc", "devices": [0, 1]}  # fmt: skip
    row = {"size": 8, "latency_us": 1.0, "bw_GBps": 2.0, "bibw_GBps": 3.0, "wrong": 0, "iters": {}}
    lines = bench.format_table([row], p2p_meta).splitlines()
    assert lines[0] == "# gpumpi p2p, 2 ranks, cupy buffers (CUDA device memory), rank 0 on GPU 0, rank 1 on GPU 1"
    assert lines[2] == ("# device transport: cuda_ipc (GPUMPI_TRANSPORTS=device:cuda_ipc: cuda_ipc preferred, "
                        "staging where IPC is impossible)")  # fmt: skip
    sim = {**p2p_meta, "buffer": "sim", "transport": "auto", "transports_env": None, "devices": [0, 0]}
    ref = {"suite": "p2p", "impl": "mpi4py", "library": "MPICH", "nranks": 2, "buffer": "numpy", "window": 64}
    text = bench.format_compare_table(bench.compare_results([row], [row]), sim, ref)
    lines = text.splitlines()
    assert lines[0] == ("# gpumpi vs mpi4py p2p, 2 ranks, gpumpi on sim buffers (simulated device memory, "
                        "SimDeviceArray), mpi4py on host numpy buffers")  # fmt: skip
    assert "# gpumpi device transport: auto (gpumpi's choice: cuda_ipc where it can, else staging)" in lines
    assert any(ln.startswith("# mpi4py ran on host numpy buffers: mpi4py cannot take") for ln in lines)
    cupy_text = bench.format_compare_table(bench.compare_results([row], [row]), p2p_meta, ref)
    assert "CUDA-aware MPI" in cupy_text
    # host buffers keep the old header, without a transport line
    host = bench.format_table([row], {**p2p_meta, "buffer": "numpy"}).splitlines()
    assert host[0] == "# gpumpi p2p, 2 ranks, host numpy buffers" and "transport" not in host[2]


# ---------------------------------------------------------------- simulated device, end to end


@needs_launcher
def test_p2p_sim_through_the_cli(tmp_path):
    jpath, cpath = tmp_path / "p.json", tmp_path / "p.csv"
    out = _bench("p2p", "--buffer", "sim", "--transport", "staging", "--sizes", "0,8,32K", "--iters", "3",
                 "--json", str(jpath), "--csv", str(cpath))  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# gpumpi p2p, 2 ranks, sim buffers (simulated device memory, SimDeviceArray)"
    assert lines[2].startswith("# device transport: staging (GPUMPI_TRANSPORTS=device:staging")
    assert lines[-1] == "# Wrong values : 0 OK"
    assert out.stderr.count("# gpumpi p2p [") == 3
    doc = json.loads(jpath.read_text())
    assert (doc["buffer"], doc["transport"], doc["devices"]) == ("sim", "staging", [0, 0])
    assert doc["transports_env"] == "device:staging"  # what the ranks read
    assert [r["size"] for r in doc["results"]] == [0, 8, 32768]
    for r in doc["results"]:
        assert r["wrong"] == 0 and r["latency_us"] > 0
        assert (r["bw_GBps"] is None) == (r["size"] == 0)
    assert cpath.read_text().splitlines()[0].startswith("impl,size,latency_us,bw_GBps,bibw_GBps,wrong")


@needs_launcher
def test_p2p_matrix_sim_quick_through_the_cli(tmp_path):
    jpath = tmp_path / "m.json"
    out = _bench("p2p-matrix", "--buffer", "sim", "--quick", "--sizes", "64K,1M", "--iters", "3", "--quiet",
                 "--json", str(jpath))  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# gpumpi p2p-matrix, 1 simulated device, sim buffers (simulated device memory, SimDeviceArray)"
    assert lines[2] == "# device transport: auto (gpumpi's choice: cuda_ipc where it can, else staging)"
    head = next(ln for ln in lines if "#wrong" in ln)
    assert head.split() == ["#", "src", "dst", "size", "cold", "warm", "copy", "warm/copy", "#wrong"]
    body = [ln.split() for ln in lines if not ln.startswith("#")]
    assert [b[:3] for b in body] == [["0", "0", "65536"], ["0", "0", "1048576"]]
    assert all(b[-1] == "0" for b in body)
    assert lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert doc["suite"] == "p2p-matrix" and doc["devices"] == 1 and doc["pairs"] == [[0, 0]]
    for r in doc["results"]:
        for key in ("cold_GBps", "warm_GBps", "copy_GBps", "warm_pct_copy", "cold_s", "warm_s", "copy_s"):
            assert r[key] > 0, key
        assert r["warm_pct_copy"] == pytest.approx(100 * r["warm_GBps"] / r["copy_GBps"])
        assert r["wrong"] == 0 and r["iters"] == {"warm": [3, 1], "copy": [3, 1]}


@pytest.mark.mpi
@needs_launcher
@pytest.mark.skipif(
    cli.find_mpiexec() is None or __import__("importlib").util.find_spec("mpi4py") is None,
    reason="mpiexec or mpi4py not found (pip install mpi4py mpich)",
)
def test_p2p_sim_compare_mpi4py_on_host_buffers(tmp_path):
    jpath = tmp_path / "c.json"
    out = _bench("p2p", "--buffer", "sim", "--compare", "mpi4py", "--sizes", "8,64K", "--iters", "3", "--quiet",
                 "--json", str(jpath))  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# gpumpi vs mpi4py p2p, 2 ranks, gpumpi on sim buffers")
    assert lines[0].endswith("mpi4py on host numpy buffers")
    assert any(ln.startswith("# mpi4py ran on host numpy buffers: mpi4py cannot take") for ln in lines)
    assert lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert [r["buffer"] for r in doc["runs"]] == ["sim", "numpy"]
    assert all(m["wrong"] == 0 and m["ref_wrong"] == 0 and m["speedup"] > 0 for m in doc["results"])


def test_p2p_matrix_inside_a_job_needs_a_pair(capsys, monkeypatch):
    monkeypatch.setenv("GPUMPI_SIZE", "2")
    assert cli.main(["bench", "p2p-matrix", "--buffer", "sim"]) == 2
    assert "p2p-matrix starts one job per device pair; run it from a shell" in capsys.readouterr().err


# ---------------------------------------------------------------- wrong values are counted


def _corrupting_mpi(tag):
    import types

    from gpumpi import MPI as real

    class Comm:
        def __init__(self, c):
            self._c = c

        def __getattr__(self, name):
            return getattr(self._c, name)

        def Recv(self, buf, source, tag_=0, status=None):
            self._c.Recv(buf, source, tag_, status)
            if tag_ == tag and buf[0].size:
                host = buf[0].get()
                host[0] ^= 0xFF
                buf[0].set(host)

    return types.SimpleNamespace(COMM_WORLD=Comm(real.COMM_WORLD), BYTE=real.BYTE, Wtime=real.Wtime,
                                 Request=real.Request)  # fmt: skip


def _corrupt_p2p():
    return p2p.run_p2p(_corrupting_mpi(_common._TAG_LAT), [0, 8, 1024], iters=2, skip=1, buffer="sim", tests=("latency",))


def _corrupt_matrix():
    mpi = _corrupting_mpi(_common._TAG_MATRIX)
    return p2p_matrix.run_p2p_matrix_pair(mpi, 0, 0, [4096, 1 << 20], buffer="sim", iters=2, skip=1)


def test_wrong_device_bytes_are_counted():
    # latency: one flipped byte in each rank's receive buffer per size
    assert [r["wrong"] for r in run_ranks(_corrupt_p2p, 2, timeout=60)[0]] == [0, 2, 2]
    # matrix: the cold message and the last warm message are checked
    rows = run_ranks(_corrupt_matrix, 2, timeout=60)[0]
    assert [r["wrong"] for r in rows] == [2, 2]
    assert "FAILED" in bench.format_table(rows)


def _matrix_bad_device():
    from gpumpi import MPI

    return p2p_matrix.run_p2p_matrix_pair(MPI, 0, 1, [4096], buffer="sim")


def test_matrix_rejects_a_missing_device():
    with pytest.raises(AssertionError, match=r"p2p-matrix: no destination device 1 \(1 sim device\)"):
        run_ranks(_matrix_bad_device, 2, timeout=60)


# ---------------------------------------------------------------- real GPUs


def _gpu_or_skip():
    code = "from gpumpi import bench; ok, why = bench.cupy_status(); print(ok); print(why)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env(), cwd=ROOT)
    ok, why = (out.stdout.splitlines() + ["False", out.stderr.strip()])[:2]
    if ok != "True":
        pytest.skip(f"needs CuPy and a CUDA GPU ({why})")
    return int(why.split()[0])


@pytest.mark.gpu
@needs_launcher
@pytest.mark.parametrize("transport", ["auto", "staging"])
def test_gpu_p2p_cupy(tmp_path, transport):
    _gpu_or_skip()
    jpath = tmp_path / "g.json"
    out = _bench("p2p", "--buffer", "cupy", "--transport", transport, "--sizes", "0,8,64K,4M", "--iters", "5",
                 "--quiet", "--json", str(jpath), timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert doc["buffer"] == "cupy" and doc["transport"] == transport and len(doc["devices"]) == 2
    assert all(r["wrong"] == 0 for r in doc["results"])


@pytest.mark.gpu
@needs_launcher
def test_gpu_p2p_matrix_cupy(tmp_path):
    ngpus = _gpu_or_skip()
    jpath = tmp_path / "m.json"
    out = _bench("p2p-matrix", "--buffer", "cupy", "--quick", "--quiet", "--json", str(jpath), timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads(jpath.read_text())
    assert doc["devices"] == ngpus and len(doc["results"]) == ngpus * ngpus * 2
    for r in doc["results"]:
        assert r["wrong"] == 0 and r["warm_GBps"] > 0 and r["copy_GBps"] > 0
