"""Tests of the one-sided suite (gpumpi/bench/rma.py): options, size, iteration and slot plans, the
accumulate expectation against a step-by-step model, rows, tables and ratios, the command line (the
``--window`` flavors, ``--ops``, mpi4py's skipped device rows); and real runs: on mpi4py under
``mpiexec`` (``mpi``), a library that corrupts puts, accumulates and compare-and-swaps, and gpumpi on
host and simulated device windows.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from benchtools import MPIEXEC, needs_launcher, needs_mpiexec, run, run_bench

from gpumpi import bench, cli
from gpumpi.bench import rma
from gpumpi.testing import run_ranks

META = {"suite": "rma", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 2, "buffer": "numpy",
        "window": "allocate"}  # fmt: skip
REF_META = {**META, "impl": "mpi4py", "library": "MPICH Version: 5.0.2"}


# ---------------------------------------------------------------- options and plans


def test_parse_rma_ops():
    assert rma.parse_rma_ops(None) == list(rma.TESTS)
    assert rma.parse_rma_ops("all") == list(rma.TESTS)
    assert rma.parse_rma_ops("cas_rate,Put-Lat,put_lat") == ["put_lat", "cas_rate"]  # the suite's order
    with pytest.raises(bench.BenchError, match=r"^unknown rma test 'put' in --ops \(known: put_lat, get_lat, "):
        rma.parse_rma_ops("put")
    with pytest.raises(bench.BenchError, match="selects no rma test"):
        rma.parse_rma_ops(" , ")


def test_sizes_go_up_by_four_and_end_at_the_maximum():
    assert rma.rma_default_sizes() == [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288, 1 << 20]
    assert rma.parse_rma_sizes(None) == rma.rma_default_sizes()
    assert rma.parse_rma_sizes(None, quick=True) == [8, 1024, 65536, 1 << 20]
    assert rma.parse_rma_sizes("1K:64K") == [1024, 4096, 16384, 65536]
    assert rma.parse_rma_sizes("1K:48K") == [1024, 4096, 16384, 49152]
    assert rma.parse_rma_sizes("0:20") == [0, 1, 4, 16, 20]
    assert rma.parse_rma_sizes(":1K", quick=True) == [8, 1024]
    assert rma.parse_rma_sizes("64K,8,8") == [8, 65536]
    with pytest.raises(bench.BenchError, match="min 9 > max 3"):
        rma.parse_rma_sizes("9:3")
    with pytest.raises(bench.BenchError, match="selects no size"):
        rma.parse_rma_sizes("2K:4K", quick=True)


def test_window_kinds():
    for kind in rma.WINDOW_KINDS:
        rma.check_window_kind(kind)
    with pytest.raises(bench.BenchError, match=r"^unknown rma window 'dynamic' \(--window allocate\|create\)"):
        rma.check_window_kind("dynamic")


def test_plan_rma_rounds_accumulates_and_measures_atomics_once():
    plans = rma.plan_rma(["acc_bw", "put_lat", "fop_rate", "cas_rate"], [20, 4, 8, 0, 16])
    assert plans == [("put_lat", 0), ("put_lat", 4), ("put_lat", 8), ("put_lat", 16), ("put_lat", 20),
                     ("acc_bw", 8), ("acc_bw", 16), ("fop_rate", 8), ("cas_rate", 8)]  # fmt: skip
    assert rma.plan_rma(["acc_bw"], [3]) == []  # no whole float64


def test_plan_rma_iterations():
    assert rma.plan_rma_iterations("put_lat", 8) == (10000, 1000)
    assert rma.plan_rma_iterations("put_lat", 8192) == (10000, 1000)
    assert rma.plan_rma_iterations("put_lat", 1 << 20) == (1024, 102)  # 1 GiB / 1 MiB
    assert rma.plan_rma_iterations("put_bw", 8) == (100, 10)
    assert rma.plan_rma_iterations("get_bw", 1 << 20) == (16, 1)  # 1 GiB / (64 x 1 MiB)
    assert rma.plan_rma_iterations("acc_bw", 16 << 20) == (5, 1)  # the floor
    assert rma.plan_rma_iterations("fop_rate", 8) == (10000, 1000)
    assert rma.plan_rma_iterations("cas_rate", 8, quick=True) == (1000, 100)
    assert rma.plan_rma_iterations("put_bw", 1 << 20, quick=True) == (2, 1)
    assert rma.plan_rma_iterations("put_lat", 8, iters=7, skip=0) == (7, 0)
    assert rma.plan_rma_iterations("put_lat", 8, iters=0) == (1, 1)
    with pytest.raises(bench.BenchError, match="unknown rma test 'put'"):
        rma.plan_rma_iterations("put", 8)


def test_slots_and_window_size():
    assert rma.plan_slots("put_lat", 1 << 20) == 1 and rma.plan_slots("fop_rate", 8) == 1
    assert rma.plan_slots("put_bw", 8) == 64
    assert rma.plan_slots("get_bw", 1 << 20) == 64  # 64 MiB fits RECV_CAP
    assert rma.plan_slots("acc_bw", 2 << 20) == 32
    assert rma.window_bytes([("put_lat", 100), ("fop_rate", 8)]) == 100
    assert rma.window_bytes([("put_bw", 100)]) == 64 * 128  # slots are 64-byte aligned
    assert rma.window_bytes([("put_lat", 0)]) == 64
    assert [rma.slot_hits(k, 5) for k in range(5)] == [13, 13, 13, 13, 12]  # 64 operations over 5 slots
    assert sum(rma.slot_hits(k, 7, 64) for k in range(7)) == 64


@pytest.mark.parametrize("nslots", [1, 5, 64])
def test_acc_expected_is_a_step_by_step_sum(nslots):
    """The expectation equals adding, window by window, what each operation sends to its slot."""
    count, windows = 11, 4
    model = np.zeros((nslots, count))
    for _ in range(windows):
        for j in range(rma.WINDOW):
            model[j % nslots] += rma.acc_values(np, count, j % nslots)
    for k in range(nslots):
        assert np.array_equal(rma.acc_expected(np, count, k, nslots, windows), model[k])
    values = rma.acc_values(np, 50, 3)
    assert values.dtype == np.float64 and set(values.tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert not np.array_equal(values, rma.acc_values(np, 50, 4))  # a slot mix-up shows


# ---------------------------------------------------------------- rows, tables, ratios


def test_make_row():
    r = rma.make_row("put_bw", 1024, 0.5, 100, 10, 3)
    assert r["time_us"] == pytest.approx(0.5 / (100 * 64) * 1e6)
    assert r["bw_MBps"] == pytest.approx(1024 * 64 * 100 / 0.5 / 1e6)
    assert (r["rma"], r["size"], r["wrong"], r["iters"], r["skip"], r["ops_per_iter"], r["skipped"]) == (
        "put_bw", 1024, 3, 100, 10, 64, None)  # fmt: skip
    lat = rma.make_row("get_lat", 8, 2e-3, 1000, 100, 0)
    assert lat["time_us"] == pytest.approx(2.0) and lat["bw_MBps"] is None and lat["ops_per_iter"] == 1
    assert rma.make_row("put_lat", 8, 0.0, 10, 1, 0)["time_us"] is None


def _rows():
    return [rma.make_row("put_lat", 8, 1.5e-3, 1000, 100, 0), rma.make_row("put_lat", 1024, 2e-3, 1000, 100, 0),
            rma.make_row("acc_bw", 1024, 6.4e-3, 100, 10, 2), rma.make_row("fop_rate", 8, 3e-3, 1000, 100, 0)]  # fmt: skip


def test_format_rma_table():
    text = bench.format_table(_rows(), META)  # found by the registry through the rows' "rma"
    lines = text.splitlines()
    assert lines[0] == "# gpumpi rma, 2 ranks, host numpy buffers, window: Win.Allocate"
    assert lines[1] == "# MPI library: gpumpi 0.1.0"
    assert "# put_lat: Put + Flush(1) (osu_put_latency -s flush)" in lines
    assert "# acc_bw: 64 x Accumulate(SUM, float64) + Flush(1)" in lines
    heads = [i for i, ln in enumerate(lines) if ln.startswith("#") and "size" in ln and "#wrong" in ln]
    assert len(heads) == 3  # one table per test present
    assert lines[heads[0]].split()[1:] == ["size", "time", "bw", "#wrong"]
    assert lines[heads[0] + 1].split()[1:] == ["(B)", "(us)", "(MB/s)"]
    assert lines[heads[0] + 2].split() == ["8", "1.50", "-", "0"]
    assert lines[heads[1] + 2].split() == ["1024", "1.00", "1024.00", "2"]
    assert lines[-1] == "# Wrong values : 2 FAILED"
    create = bench.format_table(_rows()[:1], {**META, "window": "create", "buffer": "sim", "transport": "auto"})
    assert create.splitlines()[0].endswith("window: Win.Create on a device array")
    assert create.splitlines()[2].startswith("# device transport: auto")
    assert rma.format_rma_table(_rows()[:1]).splitlines()[-1] == "# Wrong values : 0 OK"


def test_compare_pairs_by_test_and_size():
    mine = _rows()
    ref = [rma.make_row("put_lat", 8, 3e-3, 1000, 100, 0), rma.make_row("acc_bw", 1024, 3.2e-3, 100, 10, 1)]
    merged = bench.compare_results(mine, ref)
    assert [(m["rma"], m["size"]) for m in merged] == [("put_lat", 8), ("put_lat", 1024), ("acc_bw", 1024),
                                                       ("fop_rate", 8)]  # fmt: skip
    assert merged[0]["speedup"] == pytest.approx(2.0)  # mpi4py time / gpumpi time
    assert merged[2]["speedup"] == pytest.approx(0.5) and merged[2]["ref_bw_MBps"] == pytest.approx(2048.0)
    assert merged[1]["speedup"] is None and merged[1]["ref_time_us"] is None
    assert (merged[2]["wrong"], merged[2]["ref_wrong"]) == (2, 1)
    lines = bench.format_compare_table(merged, META, REF_META).splitlines()
    assert lines[0] == "# gpumpi vs mpi4py rma, 2 ranks, host numpy buffers, window: Win.Allocate"
    assert any(ln.startswith("# speedup = mpi4py time / gpumpi time") for ln in lines)
    head = next(ln for ln in lines if "time gpumpi" in ln)
    assert head.split()[1:] == ["size", "time", "gpumpi", "time", "mpi4py", "speedup", "bw", "gpumpi", "bw",
                                "mpi4py", "#wrong"]  # fmt: skip
    row = next(ln for ln in lines if ln.split()[:1] == ["8"])
    assert row.split() == ["8", "1.50", "3.00", "2.00", "-", "-", "0"]
    assert lines[-1] == "# Wrong values : 3 FAILED"


def test_compare_with_skipped_reference_rows():
    plans = rma.plan_rma(["put_lat", "fop_rate"], [8, 64])
    reason = rma.device_skip_reason("mpi4py", "cupy")
    assert "not CUDA-aware" in reason and rma.device_skip_reason("gpumpi", "cupy") is None
    assert rma.device_skip_reason("mpi4py", "numpy") is None and "simulated" in rma.device_skip_reason("mpi4py", "sim")
    ref = rma.skipped_rows(plans, reason)
    assert all(r["skipped"] == reason and r["time_us"] is None for r in ref)
    mine = [rma.make_row(t, s, 1e-3, 1000, 100, 0) for t, s in plans]
    merged = rma.compare_rma_results(mine, ref)
    assert all(m["speedup"] is None and m["ref_skipped"] == reason for m in merged)
    ref_meta = rma.rma_metadata(None, "mpi4py", nranks=2, buffer="cupy", skipped=reason)
    assert ref_meta["library"] == "not run" and ref_meta["skipped"] == reason
    text = rma.format_rma_compare_table(merged, {**META, "buffer": "cupy", "transport": "auto"}, ref_meta)
    assert f"# mpi4py not run: {reason} (its columns are -)" in text
    assert "# gpumpi device transport: auto" in text
    assert "\n# MPI library" not in text


def test_progress_line():
    line = bench.format_progress(2, 30, rma.make_row("put_bw", 65536, 1.0, 10, 1, 4), "mpi4py")
    assert line.startswith("# mpi4py rma [3/30] put_bw 65536 B: time ") and " bw " in line and line.endswith("WRONG 4")
    skipped = bench.format_progress(0, 1, rma.skipped_rows([("put_lat", 8)], "why")[0])
    assert skipped == "# rma [1/1] put_lat 8 B: skipped (why)"


# ---------------------------------------------------------------- the command line


@pytest.fixture
def no_launch(monkeypatch):
    def boom(*a, **k):
        raise AssertionError(f"launched {a!r}")

    monkeypatch.setattr(cli.subprocess, "call", boom)
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def _args(*argv):
    args = cli.build_parser().parse_args(["bench", *argv])
    cli._validate(args)
    return args


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["rma", "--window", "dynamic"], "unknown rma window 'dynamic' (--window allocate|create)"),
        (["rma", "--distinct-recv"], "--distinct-recv applies to the p2p suite only, not rma"),
        (["rma", "--ops", "put"], "unknown rma test 'put' in --ops"),
        (["rma", "--dtype", "int8"], "--dtype applies to the coll suite only, not rma"),
        (["rma", "-n", "1"], "the rma suite needs at least 2 ranks (got -n 1)"),
        (["rma", "--compare", "nccl"], "nccl runs the coll suite only, not rma"),
        (["p2p", "--window", "create"], "--window of the p2p suite is a message count (got 'create')"),
        (["pack", "--window", "create"], "(the rma suite's --window is create|allocate)"),
    ],
)
def test_rma_argument_errors(argv, message, capsys, no_launch):
    assert cli.main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_window_option_per_suite(no_launch):
    assert _args("rma").window == "allocate"
    assert _args("rma", "--window", "create").window == "create"
    assert _args("p2p").window == bench.WINDOW and _args("p2p", "--window", "8").window == 8
    assert _args("coll").window is None and _args("pack", "--window", "64").window is None


def test_inner_argv_passes_the_rma_options(no_launch):
    args = _args("rma", "-n", "3", "--window", "create", "--ops", "put_lat,fop_rate", "--buffer", "sim",
                 "--sizes", "8,1K", "--quick")  # fmt: skip
    argv = cli.inner_argv(args, "gpumpi", "/tmp/r.json")
    assert argv[:6] == ["bench", "rma", "--impl", "gpumpi", "--buffer", "sim"]
    for pair in (["--window", "create"], ["--ops", "put_lat,fop_rate"], ["--sizes", "8,1K"]):
        i = argv.index(pair[0])
        assert argv[i : i + 2] == pair
    inner = cli.build_parser().parse_args(argv)
    assert cli._validate(inner) == [8, 1024] and inner.window == "create"
    coll_argv = cli.inner_argv(_args("coll"), "gpumpi", "/tmp/c.json")
    assert "--window" not in coll_argv  # no suite but p2p and rma is given one


def test_compare_mpi4py_on_device_windows_skips_mpi4py(tmp_path, monkeypatch, capsys):
    """The mpi4py run is not launched (its rows are skipped with the reason); gpumpi's is."""
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    launched = []

    def fake_call(cmd, env=None):
        launched.append(cmd)
        args = cli.build_parser().parse_args(cmd[cmd.index("bench") :])
        sizes = cli._validate(args)
        plans = rma.plan_rma(rma.parse_rma_ops(args.ops), sizes)
        rows = [rma.make_row(t, s, 1e-3, 100, 10, 0) for t, s in plans]
        meta = {**META, "buffer": args.buffer, "window": args.window, "transport": "auto", "transports_env": None}
        bench.write_json(args.inner_json, {**meta, "results": rows})
        return 0

    monkeypatch.setattr(cli.subprocess, "call", fake_call)
    jpath = tmp_path / "r.json"
    rc = cli.main(["bench", "rma", "--buffer", "sim", "--compare", "mpi4py", "--ops", "put_lat,cas_rate",
                   "--sizes", "8,1K", "--quiet", "--json", str(jpath)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert len(launched) == 1 and launched[0][:5] == [sys.executable, "-m", "gpumpi", "-n", "2"]
    lines = out.splitlines()
    assert lines[0] == ("# gpumpi vs mpi4py rma, 2 ranks, sim buffers (simulated device memory, SimDeviceArray), "
                        "window: Win.Allocate(memory='device')")  # fmt: skip
    assert "# mpi4py not run: mpi4py cannot take gpumpi's simulated device memory (its columns are -)" in lines
    assert lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert doc["compare"] == "mpi4py" and doc["runs"][1]["skipped"] == rma.NO_DEVICE_WHY["sim"]
    assert [(m["rma"], m["size"], m["speedup"]) for m in doc["results"]] == [
        ("put_lat", 8, None), ("put_lat", 1024, None), ("cas_rate", 8, None)]  # fmt: skip


# ---------------------------------------------------------------- real runs on mpi4py


def _inner_cmd(np_, *args):
    return [MPIEXEC, "-n", str(np_), sys.executable, "-m", "gpumpi.cli", "bench", "rma", "--impl", "mpi4py", *args,
            "--_inner"]  # fmt: skip


def _check_rows(rows, tests=rma.TESTS):
    assert [t for t in rma.TESTS if t in {r["rma"] for r in rows}] == list(tests)
    for r in rows:
        assert r["wrong"] == 0, r
        assert r["skipped"] is None and r["time_us"] > 0
        if r["rma"] in rma.BANDWIDTH:
            assert r["bw_MBps"] == pytest.approx(r["size"] / r["time_us"])  # B/us = MB/s
        else:
            assert r["bw_MBps"] is None


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize(("nranks", "window"), [(2, "allocate"), (3, "create")])
def test_every_test_on_mpi4py(tmp_path, nranks, window):
    path = tmp_path / "r.json"
    out = run(_inner_cmd(nranks, "--window", window, "--sizes", "8,4K,96K", "--iters", "20", "--skip", "2",
                         "--_json", str(path)))  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(path.read_text())
    assert (doc["suite"], doc["impl"], doc["nranks"], doc["buffer"], doc["window"]) == ("rma", "mpi4py", nranks,
                                                                                        "numpy", window)  # fmt: skip
    assert doc["library"].startswith("MPICH")
    rows = doc["results"]
    _check_rows(rows)
    assert out.stderr.count("# mpi4py rma [") == len(rows)
    assert [(r["rma"], r["size"]) for r in rows if r["rma"] in ("acc_bw", "cas_rate")] == [
        ("acc_bw", 8), ("acc_bw", 4096), ("acc_bw", 98304), ("cas_rate", 8)]  # fmt: skip
    assert all((r["iters"], r["skip"]) == (20, 2) for r in rows)


@pytest.mark.mpi
@needs_mpiexec
def test_quick_compare_on_mpi4py_is_quick(tmp_path):
    jpath = tmp_path / "c.json"
    out = run([sys.executable, "-m", "gpumpi.cli", "bench", "rma", "--impl", "mpi4py", "--compare", "mpi4py", "--quick",
               "--quiet", "--json", str(jpath)], timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# mpi4py vs mpi4py' rma, 2 ranks, host numpy buffers, window: Win.Allocate"
    assert lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert len(doc["results"]) == 4 * 5 + 2 and all(m["speedup"] > 0 for m in doc["results"])


_CORRUPT = '''
import json, types
from mpi4py import MPI as _M
import numpy as np
from gpumpi.bench import rma

class Win:
    """mpi4py's window, with Puts off displacement 0 dropped, Accumulates at displacement 0 applied
    twice, and Compare_and_swap comparing with one more than asked."""
    def __init__(self, w):
        self._w = w
    def __getattr__(self, name):
        return getattr(self._w, name)
    @classmethod
    def Allocate(cls, *a, **k):
        return cls(_M.Win.Allocate(*a, **k))
    def Put(self, origin, rank, target=None):
        if not target:
            self._w.Put(origin, rank, target)
    def Accumulate(self, origin, rank, target=None, op=_M.SUM):
        self._w.Accumulate(origin, rank, target, op)
        if not target:
            self._w.Accumulate(origin, rank, target, op)
    def Compare_and_swap(self, origin, compare, result, rank, disp=0):
        self._cmp = compare[0] + 1
        self._w.Compare_and_swap(origin, [self._cmp, compare[1]], result, rank, disp)

MPI = types.SimpleNamespace(**{k: getattr(_M, k) for k in dir(_M) if not k.startswith("_")})
MPI.Win = Win
rows = rma.run_rma(MPI, [8, 1024], tests=["put_lat", "put_bw", "acc_bw", "cas_rate"], iters=3, skip=1)
if _M.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(rows))
'''


@pytest.mark.mpi
@needs_mpiexec
def test_wrong_results_are_counted_on_mpi4py(tmp_path):
    script = tmp_path / "corrupt.py"
    script.write_text(_CORRUPT)
    out = run([MPIEXEC, "-n", "2", sys.executable, str(script)])
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    # put_bw: 64 slots, slot 0 alone written (every byte of a missed slot differs: it holds the complement);
    # acc_bw: slot 0's float64 elements doubled; cas_rate: every swap fails, so the 4 fetches after the
    # first (0) and the counter are wrong
    assert [(r["rma"], r["size"], r["wrong"]) for r in rows] == [
        ("put_lat", 8, 0), ("put_lat", 1024, 0), ("put_bw", 8, 63 * 8), ("put_bw", 1024, 63 * 1024),
        ("acc_bw", 8, 1), ("acc_bw", 1024, 128), ("cas_rate", 8, 3 + 1)]  # fmt: skip


# ---------------------------------------------------------------- gpumpi


def _gpumpi_run(buffer, window, tests, sizes):
    from gpumpi import MPI

    return rma.run_rma(MPI, sizes, tests=tests, window=window, iters=5, skip=1, buffer=buffer)


@pytest.mark.parametrize("buffer", ["numpy", "sim"])
@pytest.mark.parametrize(("nranks", "window"), [(2, "allocate"), (3, "create")])
def test_gpumpi_every_test(buffer, nranks, window):
    rows = run_ranks(_gpumpi_run, nranks, timeout=120, args=(buffer, window, list(rma.TESTS), [8, 4096, 96 << 10]))
    _check_rows(rows[0])
    assert all(r == [] for r in rows[1:])


def test_run_rma_refuses_device_windows_on_mpi4py():
    import types

    fake = types.SimpleNamespace(__name__="mpi4py.MPI")
    with pytest.raises(bench.BenchError, match=r"^the rma suite on sim windows: mpi4py cannot take gpumpi's simulated"):
        rma.run_rma(fake, [8], buffer="sim")


@needs_launcher
def test_gpumpi_through_the_cli_on_sim(tmp_path):
    jpath = tmp_path / "g.json"
    out = run_bench("rma", "--buffer", "sim", "--window", "create", "--sizes", "8,64K", "--iters", "5",
                    "--json", str(jpath))  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("# gpumpi rma, 2 ranks, sim buffers (simulated device memory, SimDeviceArray), "
                        "window: Win.Create on a device array")  # fmt: skip
    assert lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert (doc["buffer"], doc["window"]) == ("sim", "create")
    _check_rows(doc["results"])
