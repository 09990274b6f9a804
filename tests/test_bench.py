"""Tests of ``gpumpi bench`` (gpumpi/bench.py) and the ``gpumpi`` command (gpumpi/cli.py).

Pure parts (sizes, iteration plans, tables, ratios, files, argument errors) run
everywhere.  The pack suite runs in-process on ``gpumpi.MPI`` (one rank) with a tiny
configuration.  The ``mpi`` tests run the real inner suite on two ranks of mpi4py under
``mpiexec``.  The gpumpi-launcher tests run only once ``gpumpi.launch`` exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpumpi import bench, cli
from gpumpi.bench import _common, p2p, pack, report

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
    assert _common.parse_size("0") == 0
    assert _common.parse_size("4096") == 4096
    assert _common.parse_size("64K") == 64 << 10
    assert _common.parse_size("64KiB") == 64 << 10
    assert _common.parse_size("16M") == 16 << 20
    assert _common.parse_size("1g") == 1 << 30
    assert _common.parse_size("8B") == 8
    for bad in ("x", "-1", "1.5M", ""):
        with pytest.raises(bench.BenchError):
            _common.parse_size(bad)


def test_default_sizes_is_osu_sweep():
    sizes = _common.default_sizes()
    assert sizes[:4] == [0, 1, 2, 4]
    assert sizes[-1] == 16 << 20
    assert len(sizes) == 1 + 25
    assert _common.default_sizes(3, 40) == [4, 8, 16, 32]
    assert _common.default_sizes(0, 0) == [0]


def test_parse_sizes_forms():
    assert p2p.parse_sizes(None) == _common.default_sizes()
    assert p2p.parse_sizes(None, quick=True) == [8, 1024, 65536, 1 << 20, 16 << 20]
    assert p2p.parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
    assert p2p.parse_sizes(":4") == [0, 1, 2, 4]
    assert p2p.parse_sizes("1M:", quick=True) == [1 << 20, 16 << 20]
    assert p2p.parse_sizes("64K,8,8,1K") == [8, 1024, 65536]
    with pytest.raises(bench.BenchError, match="min 9 > max 3"):
        p2p.parse_sizes("9:3")
    with pytest.raises(bench.BenchError, match="no message size"):
        p2p.parse_sizes("3:5", quick=True)


def test_plan_iterations_scales_down_large_messages():
    small = p2p.plan_iterations("latency", 8)
    assert small == (10000, 1000)
    assert p2p.plan_iterations("bw", 8) == (100, 10)
    big_lat = p2p.plan_iterations("latency", 16 << 20)
    big_bw = p2p.plan_iterations("bw", 16 << 20)
    assert big_lat[0] < small[0] and big_lat[0] >= 5
    assert big_bw[0] < 100 and big_bw[0] >= 5
    # iterations never grow with the size
    prev = None
    for s in _common.default_sizes(1):
        n, w = p2p.plan_iterations("bibw", s)
        assert 1 <= w <= n
        assert prev is None or n <= prev
        prev = n
    quick = [p2p.plan_iterations(t, s, quick=True)[0] for t in ("latency", "bw", "bibw") for s in p2p.QUICK_SIZES]
    full = [p2p.plan_iterations(t, s)[0] for t in ("latency", "bw", "bibw") for s in p2p.QUICK_SIZES]
    assert all(q <= f for q, f in zip(quick, full))
    # explicit counts are used as given
    assert p2p.plan_iterations("bw", 16 << 20, iters=7, skip=0) == (7, 0)
    assert p2p.plan_iterations("latency", 8, iters=20) == (20, 2)


def test_check_buffer_kind():
    for kind in ("numpy", "sim", "cupy"):
        bench.check_buffer_kind(kind)
    with pytest.raises(bench.BenchError, match=r"unknown buffer kind 'bogus' \(supported: numpy, sim, cupy\)"):
        bench.check_buffer_kind("bogus")
    with pytest.raises(bench.BenchError, match="unknown buffer kind 'numba'"):
        bench.check_buffer_kind("numba")


def test_pattern_and_sentinel_differ_everywhere():
    np = pytest.importorskip("numpy")
    bufs = _common._Buffers(np, [0, 1, 1000, 4096], window=4, distinct=True)
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
    assert not np.array_equal(_common._pattern(np, 64, 0), _common._pattern(np, 64, 1))
    assert not np.array_equal(_common._pattern(np, 64, 0), _common._pattern(np, 128, 0)[:64])


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
    assert report.ratio(4.0, 2.0) == 2.0
    assert report.ratio(None, 2.0) is None
    assert report.ratio(1.0, None) is None
    assert report.ratio(1.0, 0.0) is None


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
    report.write_json(str(tmp_path / "r.json"), doc)
    assert report.read_json(str(tmp_path / "r.json")) == doc
    report.write_csv(str(tmp_path / "r.csv"), [*rows, _row(0, 0.5)], {"impl": "gpumpi"})
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
        (["bench", "nope"], "gpumpi bench: unknown suite 'nope' (available: p2p, pack, p2p-matrix)"),
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
            from gpumpi.bench import _common, p2p

            class Comm:
                def __init__(self, c):
                    self._c = c
                def __getattr__(self, name):
                    return getattr(self._c, name)
                def Recv(self, buf, source, tag):
                    self._c.Recv(buf, source, tag)
                    if tag == _common._TAG_LAT and len(buf[0]):
                        buf[0][0] ^= 0xFF

            MPI = types.SimpleNamespace(COMM_WORLD=Comm(_M.COMM_WORLD), BYTE=_M.BYTE, Wtime=_M.Wtime,
                                        Request=_M.Request, Get_library_version=_M.Get_library_version)
            rows = p2p.run_p2p(MPI, [0, 8, 1024], iters=3, skip=1)
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
    assert [int(b[0]) for b in body] == list(p2p.QUICK_SIZES)
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



# ---------------------------------------------------------------- pack suite


def _pack_row(family, block, pack=1.0, unpack=2.0, first=0.5, extent=None, wrong=0):
    return {"test": "pack", "type": family, "block": block, "bytes": 1 << 20, "lb": 0,
            "extent": (2 << 20) - block if extent is None else extent, "pack_GBps": pack, "unpack_GBps": unpack,
            "first_ms": first, "create_ms": 0.1, "wrong": wrong, "reps": 25, "warmup": 3}  # fmt: skip


def _send_row(block, dtype=1.0, manual=2.0, wrong=0):
    return {"test": "strided-send", "type": "vector", "block": block, "bytes": 16 << 20, "lb": 0,
            "extent": (32 << 20) - block, "dtype_GBps": dtype, "manual_GBps": manual, "wrong": wrong, "reps": 10,
            "warmup": 2}  # fmt: skip


PACK_META = {"suite": "pack", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 2, "buffer": "numpy"}
PACK_REF_META = {**PACK_META, "impl": "mpi4py", "library": "MPICH Version: 5.0.2"}


def test_parse_blocks():
    assert pack.parse_blocks(None) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert pack.parse_blocks(None, quick=True) == [1, 8, 64, 1024]
    assert pack.parse_blocks("8:128") == [8, 16, 32, 64, 128]
    assert pack.parse_blocks("8:", quick=True) == [8, 64, 1024]
    assert pack.parse_blocks("1K,8,8,64K") == [8, 1024, 65536]
    assert pack.parse_blocks("24", nbytes=48) == [24]
    with pytest.raises(bench.BenchError, match="block size 3 does not divide the 1048576 packed bytes"):
        pack.parse_blocks("3")
    with pytest.raises(bench.BenchError, match="block size 0"):
        pack.parse_blocks("0")
    with pytest.raises(bench.BenchError, match="min 64 > max 8"):
        pack.parse_blocks("64:8")
    with pytest.raises(bench.BenchError, match="selects no block size"):
        pack.parse_blocks("2:4", quick=True)


def test_pack_types_select_the_same_bytes_on_gpumpi():
    np = pytest.importorskip("numpy")
    from gpumpi import MPI

    nbytes = 64
    src = pack._pack_source(np, 2 * nbytes)
    assert src.all()  # never 0: unpack into a zeroed buffer shows every byte it missed
    for block in (1, 4, 16):
        ref = src.reshape(nbytes // block, 2 * block)[:, :block].ravel()
        extents = {}
        for family in pack.PACK_TYPES:
            t = pack.pack_type(MPI, family, block, nbytes).Commit()
            try:
                assert t.Get_size() == nbytes
                lb, extent = t.Get_extent()
                extents[family] = (lb, extent)
                out = np.zeros(nbytes, dtype=np.uint8)
                assert t.Pack(src[: lb + extent], out, 0, MPI.COMM_WORLD) == nbytes
                assert np.array_equal(out, ref)
            finally:
                t.Free()
        # vector and indexed end at the last block; the subarray spans the whole array
        assert extents == {"vector": (0, 2 * nbytes - block), "indexed": (0, 2 * nbytes - block),
                           "subarray": (0, 2 * nbytes)}  # fmt: skip
    with pytest.raises(bench.BenchError, match="unknown pack type 'struct'"):
        pack.pack_type(MPI, "struct", 8, nbytes)
    with pytest.raises(bench.BenchError, match="does not divide"):
        pack.pack_type(MPI, "vector", 3, nbytes)


def test_run_pack_in_process_on_gpumpi():
    pytest.importorskip("numpy")
    from gpumpi import MPI

    seen = []
    rows = pack.run_pack(MPI, [1, 8, 64], nbytes=4096, iters=3, skip=1, progress=lambda i, n, r: seen.append((i, n)))
    assert [(r["type"], r["block"]) for r in rows] == [(f, b) for b in (1, 8, 64) for f in pack.PACK_TYPES]
    assert seen == [(i, 9) for i in range(9)]
    for r in rows:
        assert r["test"] == "pack" and r["bytes"] == 4096
        assert r["wrong"] == 0
        assert r["pack_GBps"] > 0 and r["unpack_GBps"] > 0 and r["first_ms"] > 0 and r["create_ms"] > 0
        assert (r["reps"], r["warmup"]) == (3, 1)
        assert r["lb"] == 0
        assert r["extent"] == (8192 if r["type"] == "subarray" else 8192 - r["block"])
    # one rank: no strided-send rows, and the table says why
    meta = report.metadata(MPI, "gpumpi", suite="pack", nranks=1)
    assert "window" not in meta and meta["units"]["first"] == "ms"
    text = bench.format_table(rows, meta)
    assert text.splitlines()[0] == "# gpumpi pack, 1 rank, host numpy buffers"
    assert "# strided-send: skipped (needs 2 ranks)" in text
    assert "median of 3 after 1 warm-up" in text
    assert text.splitlines()[-1] == "# Wrong values : 0 OK"


class _FaultyType:
    """A datatype whose Pack flips the first packed byte (or misreports the position)
    and whose Unpack also writes the first gap byte."""

    def __init__(self, real, block, bad_position=False):
        self._real, self._block, self._bad_position = real, block, bad_position

    def __getattr__(self, name):
        return getattr(self._real, name)

    def Commit(self):
        self._real.Commit()
        return self

    def Pack(self, inbuf, outbuf, position, comm):
        pos = self._real.Pack(inbuf, outbuf, position, comm)
        if self._bad_position:
            return pos + 1
        outbuf[0] ^= 0xFF
        return pos

    def Unpack(self, inbuf, position, outbuf, comm):
        pos = self._real.Unpack(inbuf, position, outbuf, comm)
        outbuf[self._block] = 7
        return pos


def _faulty_mpi(bad_position=False):
    import types

    from gpumpi import MPI

    class Byte:
        def Create_vector(self, count, block, stride):
            return _FaultyType(MPI.BYTE.Create_vector(count, block, stride), block, bad_position)

    return types.SimpleNamespace(BYTE=Byte(), COMM_WORLD=MPI.COMM_WORLD, Wtime=MPI.Wtime, ORDER_C=MPI.ORDER_C)


def test_run_pack_counts_wrong_bytes():
    pytest.importorskip("numpy")
    # first Pack: 1 byte, timed Pack: 1 byte, Unpack: 1 gap byte written
    rows = pack.run_pack(_faulty_mpi(), [8], types=("vector",), nbytes=1024, iters=2, skip=1)
    assert [r["wrong"] for r in rows] == [3]
    # a wrong returned position makes the whole packed message wrong (first and timed Pack)
    rows = pack.run_pack(_faulty_mpi(bad_position=True), [8], types=("vector",), nbytes=1024, iters=2, skip=0)
    assert [r["wrong"] for r in rows] == [2 * 1024 + 1]
    assert bench.format_table(rows, PACK_META).splitlines()[-1] == "# Wrong values : 2049 FAILED"


def test_run_pack_argument_errors():
    from gpumpi import MPI

    with pytest.raises(bench.BenchError, match="unknown pack type 'hvector'"):
        pack.run_pack(MPI, [8], types=("hvector",))
    with pytest.raises(bench.BenchError, match="pack block size 3 does not divide the 1024 packed bytes"):
        pack.run_pack(MPI, [3], nbytes=1024)
    with pytest.raises(bench.BenchError, match="strided-send block size 5 does not divide"):
        pack.run_pack(MPI, [8], send_blocks=[5])
    with pytest.raises(bench.BenchError, match=r"the pack suite runs on host numpy buffers only \(--buffer cupy\)"):
        pack.run_pack(MPI, [8], buffer="cupy")


def test_format_pack_table():
    rows = [_pack_row("vector", 1, 1.5, 2.0, 0.25), _pack_row("indexed", 1, 1.25, 2.5, 1650.0, wrong=2), _send_row(8)]
    text = bench.format_table(rows, PACK_META)
    lines = text.splitlines()
    assert lines[0] == "# gpumpi pack, 2 ranks, host numpy buffers"
    head = next(ln for ln in lines if "unpack" in ln and "#wrong" in ln)
    body = lines[lines.index(head) + 2 : lines.index(head) + 4]
    assert {len(ln) for ln in body} == {len(head)}
    assert body[0].split() == ["vector", "1", "2097151", "1.5000", "2.0000", "0.250", "0.100", "0"]
    assert body[1].split() == ["indexed", "1", "2097151", "1.2500", "2.5000", "1650.000", "0.100", "2"]
    assert any(ln.startswith("# strided-send: rank 0 sends 16777216 B") for ln in lines)
    send_head = next(ln for ln in lines if "manual" in ln and "#wrong" in ln)
    assert lines[lines.index(send_head) + 2].split() == ["8", "1.0000", "2.0000", "0"]
    assert lines[-1] == "# Wrong values : 2 FAILED"
    assert bench.format_progress(1, 3, rows[1], "gpumpi") == (
        "# gpumpi pack [2/3] indexed 1 B: pack 1.2500 GB/s unpack 2.5000 GB/s first 1650.000 ms WRONG 2"
    )
    assert bench.format_progress(2, 3, rows[2]) == "# pack [3/3] strided-send vector 8 B: dtype 1.0000 GB/s manual 2.0000 GB/s"


def test_compare_pack_results_and_table():
    mine = [_pack_row("vector", 8, 4.0, 3.0, 0.5), _pack_row("indexed", 8, 1.0, 1.0, 2000.0), _send_row(8, 3.0, 1.0),
            _pack_row("subarray", 8)]  # fmt: skip
    ref = [_pack_row("vector", 8, 1.0, 6.0, 1.0), _pack_row("indexed", 8, 2.0, 1.0, 1.0), _send_row(8, 1.0, 2.0)]
    merged = bench.compare_results(mine, ref)  # dispatches on the pack rows
    assert [(m["test"], m["type"]) for m in merged] == [("pack", "vector"), ("pack", "indexed"), ("strided-send", "vector")]
    v, i, s = merged
    assert v["pack_ratio"] == pytest.approx(4.0) and v["unpack_ratio"] == pytest.approx(0.5)
    assert v["first_speedup"] == pytest.approx(2.0)  # mpi4py first / gpumpi first
    assert i["first_speedup"] == pytest.approx(0.0005)
    assert s["dtype_ratio"] == pytest.approx(3.0) and s["manual_ratio"] == pytest.approx(0.5)
    assert all(m["extent_ok"] for m in merged)
    text = bench.format_compare_table(merged, PACK_META, PACK_REF_META)
    lines = text.splitlines()
    assert lines[0] == "# gpumpi vs mpi4py pack, 2 ranks, host numpy buffers"
    head = next(ln for ln in lines if "pack gpumpi" in ln)
    for col in ("pack mpi4py", "pack ratio", "unpack ratio", "first gpumpi", "first mpi4py", "first speedup"):
        assert col in head
    body = lines[lines.index(head) + 2 : lines.index(head) + 4]
    assert body[0].split() == ["vector", "8", "4.0000", "1.0000", "4.00", "3.0000", "6.0000", "0.50", "0.500", "1.000",
                               "2.00", "0"]  # fmt: skip
    assert body[1].split()[-2] == "0.0005"  # a 2000x slower first use is not printed as 0.00
    send_head = next(ln for ln in lines if "dtype gpumpi" in ln)
    assert lines[lines.index(send_head) + 2].split() == ["8", "3.0000", "1.0000", "3.00", "1.0000", "2.0000", "0.50", "0"]
    assert "# Extents : gpumpi and mpi4py agree on all 3 types OK" in lines
    assert lines[-1] == "# Wrong values : 0 OK"
    # an extent disagreement is reported with both values
    ref[1] = {**ref[1], "extent": 12345}
    merged = bench.compare_results(mine, ref)
    assert [m["extent_ok"] for m in merged] == [True, False, True]
    text = bench.format_compare_table(merged, PACK_META, PACK_REF_META)
    assert "# Extents : 1 differ FAILED (indexed 8 B: (0, 2097144) vs (0, 12345))" in text


def test_pack_csv(tmp_path):
    report.write_csv(str(tmp_path / "p.csv"), [_pack_row("vector", 8), _send_row(8)], {"impl": "gpumpi"})
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == ("impl,test,type,block,bytes,lb,extent,pack_GBps,unpack_GBps,first_ms,create_ms,wrong,reps,warmup,"
                        "dtype_GBps,manual_GBps")  # fmt: skip
    assert lines[1] == "gpumpi,pack,vector,8,1048576,0,2097144,1.0,2.0,0.5,0.1,0,25,3,,"
    assert lines[2] == "gpumpi,strided-send,vector,8,16777216,0,33554424,,,,,0,10,2,1.0,2.0"


def test_inner_argv_for_pack():
    args = cli.build_parser().parse_args(["bench", "pack", "--quick", "-n", "1", "--sizes", "8,1K"])
    argv = cli.inner_argv(args, "gpumpi", "/tmp/p.json")
    assert argv[:2] == ["bench", "pack"]
    inner = cli.build_parser().parse_args(argv)
    assert cli._validate(inner) == [8, 1024]  # the forwarded default --window is accepted


@pytest.mark.skipif(not gpumpi_launcher_available(), reason="gpumpi.launch (the gpumpi launcher) is not written yet")
def test_pack_quick_on_one_rank_through_the_cli(tmp_path):
    jpath = tmp_path / "p.json"
    out = _run([sys.executable, "-m", "gpumpi.cli", "bench", "pack", "--quick", "-n", "1", "--json", str(jpath)])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# gpumpi pack, 1 rank, host numpy buffers"
    assert "# strided-send: skipped (needs 2 ranks)" in lines
    assert lines[-1] == "# Wrong values : 0 OK"
    body = [ln.split() for ln in lines if not ln.startswith("#")]
    assert [(b[0], int(b[1])) for b in body] == [(f, b) for b in pack.PACK_QUICK_BLOCKS for f in pack.PACK_TYPES]
    assert out.stderr.count("# gpumpi pack [") == 12  # progress lines
    doc = json.loads(jpath.read_text())
    assert doc["suite"] == "pack" and doc["impl"] == "gpumpi" and doc["nranks"] == 1
    assert len(doc["results"]) == 12
    for r in doc["results"]:
        assert r["test"] == "pack" and r["wrong"] == 0 and r["bytes"] == 1 << 20
        assert r["pack_GBps"] > 0 and r["unpack_GBps"] > 0 and r["first_ms"] > 0
        assert (r["reps"], r["warmup"]) == (5, 1)


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.skipif(not gpumpi_launcher_available(), reason="gpumpi.launch (the gpumpi launcher) is not written yet")
def test_pack_compare_mpi4py_with_strided_send(tmp_path):
    """gpumpi and mpi4py on two ranks: one merged table with pack ratios and strided-send."""
    jpath = tmp_path / "c.json"
    out = _run(
        [sys.executable, "-m", "gpumpi.cli", "bench", "pack", "--compare", "mpi4py", "--sizes", "64,1K", "--iters", "2",
         "--skip", "0", "--quiet", "--json", str(jpath)]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# gpumpi vs mpi4py pack, 2 ranks, host numpy buffers"
    assert "# Extents : gpumpi and mpi4py agree on all 8 types OK" in lines
    assert lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert doc["impl"] == "gpumpi" and doc["compare"] == "mpi4py" and len(doc["runs"]) == 2
    assert [(m["test"], m["block"]) for m in doc["results"]] == (
        [("pack", b) for b in (64, 1024) for _ in pack.PACK_TYPES] + [("strided-send", 8), ("strided-send", 1024)]
    )
    for m in doc["results"]:
        assert m["wrong"] == 0 and m["ref_wrong"] == 0 and m["extent_ok"]
        if m["test"] == "pack":
            assert m["pack_ratio"] > 0 and m["unpack_ratio"] > 0 and m["first_speedup"] > 0
        else:
            assert m["dtype_ratio"] > 0 and m["manual_ratio"] > 0
