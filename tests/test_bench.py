"""Tests of ``gpumpi bench`` (gpumpi/bench.py) and the ``gpumpi`` command (gpumpi/cli.py).

Pure parts (sizes, iteration plans, tables, ratios, files, argument errors) run
everywhere.  The ``mpi`` tests run the real inner suite on two ranks of mpi4py under
``mpiexec``.  The gpumpi-launcher test runs only once ``gpumpi.launch`` exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpumpi import bench, cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIEXEC = cli.find_mpiexec()
HAVE_MPI4PY = __import__("importlib").util.find_spec("mpi4py") is not None
needs_mpiexec = pytest.mark.skipif(
    MPIEXEC is None or not HAVE_MPI4PY, reason="mpiexec or mpi4py not found (pip install mpi4py mpich)"
)


def gpumpi_launcher_available() -> bool:
    return cli.gpumpi_launcher_available()


def _env():
    env = dict(os.environ)
    for name in cli.JOB_ENV_VARS:
        env.pop(name, None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(cmd, timeout=180):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT)


def _row(size, lat=None, bw=None, bibw=None, wrong=0):
    return {"size": size, "latency_us": lat, "bw_GBps": bw, "bibw_GBps": bibw, "wrong": wrong, "iters": {}}


META = {"suite": "p2p", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 2, "buffer": "numpy", "window": 64}
REF_META = {**META, "impl": "mpi4py", "library": "MPICH Version: 5.0.2"}


# ---------------------------------------------------------------- sizes and plans


def test_parse_size_suffixes():
    assert bench.parse_size("0") == 0
    assert bench.parse_size("4096") == 4096
    assert bench.parse_size("64K") == 64 << 10
    assert bench.parse_size("64KiB") == 64 << 10
    assert bench.parse_size("16M") == 16 << 20
    assert bench.parse_size("1g") == 1 << 30
    assert bench.parse_size("8B") == 8
    for bad in ("x", "-1", "1.5M", ""):
        with pytest.raises(bench.BenchError):
            bench.parse_size(bad)


def test_default_sizes_is_osu_sweep():
    sizes = bench.default_sizes()
    assert sizes[:4] == [0, 1, 2, 4]
    assert sizes[-1] == 16 << 20
    assert len(sizes) == 1 + 25
    assert bench.default_sizes(3, 40) == [4, 8, 16, 32]
    assert bench.default_sizes(0, 0) == [0]


def test_parse_sizes_forms():
    assert bench.parse_sizes(None) == bench.default_sizes()
    assert bench.parse_sizes(None, quick=True) == [8, 1024, 65536, 1 << 20, 16 << 20]
    assert bench.parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
    assert bench.parse_sizes(":4") == [0, 1, 2, 4]
    assert bench.parse_sizes("1M:", quick=True) == [1 << 20, 16 << 20]
    assert bench.parse_sizes("64K,8,8,1K") == [8, 1024, 65536]
    with pytest.raises(bench.BenchError, match="min 9 > max 3"):
        bench.parse_sizes("9:3")
    with pytest.raises(bench.BenchError, match="no message size"):
        bench.parse_sizes("3:5", quick=True)


def test_plan_iterations_scales_down_large_messages():
    small = bench.plan_iterations("latency", 8)
    assert small == (10000, 1000)
    assert bench.plan_iterations("bw", 8) == (100, 10)
    big_lat = bench.plan_iterations("latency", 16 << 20)
    big_bw = bench.plan_iterations("bw", 16 << 20)
    assert big_lat[0] < small[0] and big_lat[0] >= 5
    assert big_bw[0] < 100 and big_bw[0] >= 5
    # iterations never grow with the size
    prev = None
    for s in bench.default_sizes(1):
        n, w = bench.plan_iterations("bibw", s)
        assert 1 <= w <= n
        assert prev is None or n <= prev
        prev = n
    quick = [bench.plan_iterations(t, s, quick=True)[0] for t in ("latency", "bw", "bibw") for s in bench.QUICK_SIZES]
    full = [bench.plan_iterations(t, s)[0] for t in ("latency", "bw", "bibw") for s in bench.QUICK_SIZES]
    assert all(q <= f for q, f in zip(quick, full))
    # explicit counts are used as given
    assert bench.plan_iterations("bw", 16 << 20, iters=7, skip=0) == (7, 0)
    assert bench.plan_iterations("latency", 8, iters=20) == (20, 2)


def test_check_buffer_kind():
    bench.check_buffer_kind("numpy")
    with pytest.raises(bench.BenchError, match="buffer kind 'cupy' not supported yet"):
        bench.check_buffer_kind("cupy")
    with pytest.raises(bench.BenchError, match="unknown buffer kind 'bogus'"):
        bench.check_buffer_kind("bogus")


def test_pattern_and_sentinel_differ_everywhere():
    np = pytest.importorskip("numpy")
    bufs = bench._Buffers(np, [0, 1, 1000, 4096], window=4, distinct=True)
    for size in (1, 1000, 4096):
        sent = bufs.prepare_send(size, 0)
        slots = bufs.recv_slots(size, 4, 0)
        assert bufs.count_wrong(slots, size, 0, 4) == 4 * size  # untouched slots are all wrong
        for v in slots:
            v[:] = sent
        assert bufs.count_wrong(slots, size, 0, 4) == 0
        slots[2][size // 2] ^= 1
        assert bufs.count_wrong(slots, size, 0, 4) == 1
    # the patterns of the two ranks, and of different sizes, differ
    assert not np.array_equal(bench._pattern(np, 64, 0), bench._pattern(np, 64, 1))
    assert not np.array_equal(bench._pattern(np, 64, 0), bench._pattern(np, 128, 0)[:64])


# ---------------------------------------------------------------- tables and ratios


def test_format_table_aligned_with_units_and_header():
    rows = [_row(0, 2.5), _row(8, 3.25, 0.0036, 0.0041), _row(16 << 20, 2918.6, 5.8012, 7.935)]
    text = bench.format_table(rows, META)
    lines = text.splitlines()
    assert lines[0] == "# gpumpi p2p, 2 ranks, host numpy buffers"
    assert lines[1] == "# MPI library: gpumpi 0.1.0"
    assert any("one-way = half round trip" in ln for ln in lines)
    head = [ln for ln in lines if ln.startswith("#") and "latency" in ln and "bibw" in ln and "#wrong" in ln]
    assert len(head) == 1
    i = lines.index(head[0])
    units, body = lines[i + 1], lines[i + 2 : i + 5]
    assert "(B)" in units and "(us)" in units and "(GB/s)" in units
    # right-aligned: every body line has the same width as the column-name header
    assert {len(ln) for ln in body} == {len(head[0])}
    assert body[0].split() == ["0", "2.50", "-", "-", "0"]
    assert body[1].split() == ["8", "3.25", "0.0036", "0.0041", "0"]
    assert body[2].split() == ["16777216", "2918.60", "5.8012", "7.9350", "0"]
    assert lines[-1] == "# Wrong values : 0 OK"


def test_format_table_reports_wrong_values():
    text = bench.format_table([_row(8, 3.0, 1.0, 2.0, wrong=3), _row(16, 3.0, 1.0, 2.0, wrong=2)])
    assert text.splitlines()[-1] == "# Wrong values : 5 FAILED"
    assert text.splitlines()[-3].split()[-1] == "3"


def test_ratio():
    assert bench.ratio(4.0, 2.0) == 2.0
    assert bench.ratio(None, 2.0) is None
    assert bench.ratio(1.0, None) is None
    assert bench.ratio(1.0, 0.0) is None


def test_compare_results_ratios_favour_gpumpi_above_one():
    mine = [_row(0, 1.0), _row(8, 1.0, 2.0, 3.0), _row(64, 2.0, 4.0, 8.0, wrong=1)]
    ref = [_row(0, 2.0), _row(8, 3.0, 1.0, 6.0), _row(1024, 9.0, 9.0, 9.0)]
    merged = bench.compare_results(mine, ref)
    assert [m["size"] for m in merged] == [0, 8]  # only sizes both runs measured
    m0, m8 = merged
    assert m0["speedup"] == pytest.approx(2.0)
    assert m0["bw_ratio"] is None and m0["bibw_ratio"] is None
    assert m8["speedup"] == pytest.approx(3.0)  # mpi4py latency / gpumpi latency
    assert m8["bw_ratio"] == pytest.approx(2.0)  # gpumpi bw / mpi4py bw
    assert m8["bibw_ratio"] == pytest.approx(0.5)
    assert m8["latency_us"] == 1.0 and m8["ref_latency_us"] == 3.0


def test_format_compare_table():
    merged = bench.compare_results([_row(8, 1.0, 2.0, 3.0)], [_row(8, 3.0, 1.0, 6.0)])
    text = bench.format_compare_table(merged, META, REF_META)
    lines = text.splitlines()
    assert lines[0] == "# gpumpi vs mpi4py p2p, 2 ranks, host numpy buffers"
    assert "# mpi4py MPI library: MPICH Version: 5.0.2" in lines
    assert any("speedup = mpi4py latency / gpumpi latency" in ln for ln in lines)
    head = next(ln for ln in lines if "lat gpumpi" in ln)
    for col in ("lat mpi4py", "speedup", "bw gpumpi", "bw mpi4py", "bw ratio", "bibw ratio", "#wrong"):
        assert col in head
    body = lines[lines.index(head) + 2]
    assert len(body) == len(head)
    assert body.split() == ["8", "1.00", "3.00", "3.00", "2.0000", "1.0000", "2.00", "3.0000", "6.0000", "0.50", "0"]
    assert lines[-1] == "# Wrong values : 0 OK"
    # the same implementation on both sides still gets distinct column names
    same = bench.format_compare_table(merged, REF_META, REF_META)
    assert "lat mpi4py'" in same


def test_json_and_csv_files(tmp_path):
    rows = [_row(8, 1.0, 2.0, 3.0)]
    rows[0]["iters"] = {"latency": [100, 10], "bw": [5, 1]}
    doc = {**META, "results": rows}
    bench.write_json(str(tmp_path / "r.json"), doc)
    assert bench.read_json(str(tmp_path / "r.json")) == doc
    bench.write_csv(str(tmp_path / "r.csv"), [*rows, _row(0, 0.5)], {"impl": "gpumpi"})
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert lines[0] == "impl,size,latency_us,bw_GBps,bibw_GBps,wrong,iters_latency,skip_latency,iters_bw,skip_bw"
    assert lines[1] == "gpumpi,8,1.0,2.0,3.0,0,100,10,5,1"
    assert lines[2] == "gpumpi,0,0.5,,,0,,,,"


def test_bench_module_imports_nothing_heavy():
    code = "import sys, gpumpi.bench, gpumpi.cli; print(sorted(m for m in ('numpy', 'numba', 'cupy', 'mpi4py') if m in sys.modules))"
    out = _run([sys.executable, "-c", code], timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- command line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "nope"], "gpumpi bench: unknown suite 'nope' (available: p2p)"),
        (["bench", "--buffer", "cupy"], "bench: buffer kind 'cupy' not supported yet"),
        (["bench", "--buffer", "sim"], "bench: buffer kind 'sim' not supported yet"),
        (["bench", "--buffer", "bogus"], "bench: unknown buffer kind 'bogus'"),
        (["bench", "-n", "1"], "needs at least 2 ranks"),
        (["bench", "--sizes", "9:3"], "min 9 > max 3"),
        (["bench", "--sizes", "lots"], "bad size 'lots'"),
        (["bench", "--iters", "0"], "--iters must be >= 1"),
        (["bench", "--window", "0"], "--window must be >= 1"),
        (["bench", "--impl", "openmpi"], "invalid choice: 'openmpi'"),
        ([], "missing command"),
    ],
)
def test_argument_errors(argv, message, capsys):
    rc = cli.main(argv)
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err


def test_argument_errors_from_the_console_module():
    out = _run([sys.executable, "-m", "gpumpi.cli", "bench", "--buffer", "cupy"], timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == "gpumpi bench: buffer kind 'cupy' not supported yet"
    assert out.stdout == ""


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
         "--csv", "x.csv", "--quiet", "--distinct-recv", "-n", "4"]
    )  # fmt: skip
    argv = cli.inner_argv(args, "mpi4py", "/tmp/r.json")
    assert argv[:3] == ["bench", "p2p", "--impl"] and argv[3] == "mpi4py"
    for opt in ("--quick", "--quiet", "--distinct-recv"):
        assert opt in argv
    assert argv[argv.index("--sizes") + 1] == "8,1K"
    assert argv[argv.index("--iters") + 1] == "3"
    assert argv[argv.index("--skip") + 1] == "1"
    assert argv[-3:] == ["--_json", "/tmp/r.json", "--_inner"]
    for opt in ("--compare", "--json", "--csv", "-n"):
        assert opt not in argv
    # and the inner side parses them back
    inner = cli.build_parser().parse_args(argv)
    assert inner.inner and inner.inner_json == "/tmp/r.json" and inner.impl == "mpi4py"


def test_gpumpi_without_launcher_fails_clearly(capsys, monkeypatch):
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "gpumpi_launcher_available", lambda: False)
    rc = cli.main(["bench", "--quick"])
    assert rc == 2
    assert "gpumpi launcher" in capsys.readouterr().err


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


# ---------------------------------------------------------------- real runs on mpi4py


def _inner_cmd(np, *args):
    return [MPIEXEC, "-n", str(np), sys.executable, "-m", "gpumpi.cli", "bench", "--impl", "mpi4py", *args, "--_inner"]


def _check_rows(rows, sizes):
    assert [r["size"] for r in rows] == sizes
    for r in rows:
        assert set(r) >= {"size", "latency_us", "bw_GBps", "bibw_GBps", "wrong", "iters"}
        assert r["latency_us"] > 0
        assert r["wrong"] == 0
        if r["size"] == 0:
            assert r["bw_GBps"] is None and r["bibw_GBps"] is None
        else:
            assert r["bw_GBps"] > 0 and r["bibw_GBps"] > 0
            assert set(r["iters"]) == {"latency", "bw", "bibw"}


@pytest.mark.mpi
@needs_mpiexec
def test_inner_suite_json_on_mpi4py(tmp_path):
    path = tmp_path / "r.json"
    out = _run(_inner_cmd(2, "--sizes", "0,1,1K,64K", "--iters", "5", "--skip", "1", "--_json", str(path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # the table is the outer process's job in --_json mode
    assert out.stderr.count("# mpi4py p2p [") == 4  # one progress line per size
    doc = json.loads(path.read_text())
    assert doc["suite"] == "p2p" and doc["impl"] == "mpi4py" and doc["nranks"] == 2
    assert doc["buffer"] == "numpy" and doc["window"] == 64
    assert doc["library"] and doc["library"] != "unknown"
    _check_rows(doc["results"], [0, 1, 1024, 65536])
    assert doc["results"][1]["iters"]["bw"] == [5, 1]


@pytest.mark.mpi
@needs_mpiexec
def test_inner_suite_prints_table_on_rank0_with_idle_rank(tmp_path):
    csv_path, json_path = tmp_path / "r.csv", tmp_path / "r.json"
    out = _run(
        _inner_cmd(3, "--sizes", "8,4K", "--iters", "4", "--quiet", "--distinct-recv", "--window", "8",
                   "--csv", str(csv_path), "--json", str(json_path))
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    lines = out.stdout.splitlines()
    assert lines[0] == "# mpi4py p2p, 3 ranks, host numpy buffers"
    assert lines[1].startswith("# MPI library: ")
    assert "window of 8 Isend + ack (distinct receive slots)" in out.stdout
    assert lines[-1] == "# Wrong values : 0 OK"
    assert [ln.split()[0] for ln in lines if not ln.startswith("#")] == ["8", "4096"]
    _check_rows(json.loads(json_path.read_text())["results"], [8, 4096])
    assert csv_path.read_text().splitlines()[0].startswith("impl,size,latency_us,bw_GBps,bibw_GBps,wrong")


@pytest.mark.mpi
@needs_mpiexec
def test_wrong_values_are_counted(tmp_path):
    """A transport that corrupts one byte of every latency message shows up in #wrong."""
    script = tmp_path / "corrupt.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys, types
            from mpi4py import MPI as _M
            from gpumpi import bench

            class Comm:
                def __init__(self, c):
                    self._c = c
                def __getattr__(self, name):
                    return getattr(self._c, name)
                def Recv(self, buf, source, tag):
                    self._c.Recv(buf, source, tag)
                    if tag == bench._TAG_LAT and len(buf[0]):
                        buf[0][0] ^= 0xFF

            MPI = types.SimpleNamespace(COMM_WORLD=Comm(_M.COMM_WORLD), BYTE=_M.BYTE, Wtime=_M.Wtime,
                                        Request=_M.Request, Get_library_version=_M.Get_library_version)
            rows = bench.run_p2p(MPI, [0, 8, 1024], iters=3, skip=1)
            if _M.COMM_WORLD.Get_rank() == 0:
                print(json.dumps(rows))
            """
        )
    )
    out = _run([MPIEXEC, "-n", "2", sys.executable, str(script)])
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    # one wrong byte in rank 0's and in rank 1's receive buffer; none at 0 bytes
    assert [r["wrong"] for r in rows] == [0, 2, 2]
    assert "FAILED" in bench.format_table(rows)


@pytest.mark.mpi
@needs_mpiexec
def test_outer_compare_on_mpi4py(tmp_path):
    """The outer path end to end: two launches, one merged table, JSON and CSV."""
    jpath, cpath = tmp_path / "c.json", tmp_path / "c.csv"
    out = _run(
        [sys.executable, "-m", "gpumpi.cli", "bench", "--impl", "mpi4py", "--compare", "mpi4py", "--sizes", "8,64K",
         "--iters", "4", "--quiet", "--json", str(jpath), "--csv", str(cpath)]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# mpi4py vs mpi4py' p2p, 2 ranks, host numpy buffers"
    assert sum(1 for ln in lines if "lat mpi4py" in ln) == 1  # ONE merged table
    body = [ln.split() for ln in lines if not ln.startswith("#")]
    assert [b[0] for b in body] == ["8", "65536"]
    assert all(float(b[3]) > 0 for b in body)  # latency speedup
    doc = json.loads(jpath.read_text())
    assert doc["impl"] == "mpi4py" and doc["compare"] == "mpi4py" and len(doc["runs"]) == 2
    for m in doc["results"]:
        assert m["speedup"] > 0 and m["bw_ratio"] > 0 and m["bibw_ratio"] > 0
        assert m["wrong"] == 0 and m["ref_wrong"] == 0
    assert cpath.read_text().splitlines()[0].startswith("impl,ref_impl,size,latency_us,ref_latency_us,speedup")


@pytest.mark.mpi
@needs_mpiexec
def test_quick_sweep_is_quick_on_mpi4py():
    out = _run(_inner_cmd(2, "--quick", "--quiet"), timeout=120)
    assert out.returncode == 0, out.stderr
    body = [ln.split() for ln in out.stdout.splitlines() if not ln.startswith("#")]
    assert [int(b[0]) for b in body] == list(bench.QUICK_SIZES)
    assert all(b[-1] == "0" for b in body)


# ---------------------------------------------------------------- gpumpi launcher


@pytest.mark.skipif(not gpumpi_launcher_available(), reason="gpumpi.launch (the gpumpi launcher) is not written yet")
def test_bench_through_gpumpi_launcher(tmp_path):
    jpath = tmp_path / "g.json"
    out = _run(
        [sys.executable, "-m", "gpumpi.cli", "bench", "--sizes", "0,8,64K", "--iters", "5", "--quiet", "--json", str(jpath)]
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "# gpumpi p2p, 2 ranks, host numpy buffers"
    doc = json.loads(jpath.read_text())
    assert doc["impl"] == "gpumpi" and doc["nranks"] == 2
    _check_rows(doc["results"], [0, 8, 65536])
