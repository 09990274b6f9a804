"""Tests of the Global Arrays suite (gpumpi/bench/ga.py, gpumpi/bench/_ga_ref.py): sizes and GA
perf.F's section plans, the checks' choices, rows, tables, comparison and progress lines, the command
line (exactly 4 ranks, ``--compare ga`` only, the skipped comparison); and real runs of gpumpi.ga on 4
ranks, on host and simulated device memory, one with a corrupted ``acc`` counted wrong.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from benchtools import needs_launcher, run_bench

from gpumpi import bench, cli
from gpumpi.bench import _ga_ref
from gpumpi.bench import ga as gab
from gpumpi.testing import run_ranks

META = {"suite": "ga", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 4, "buffer": "numpy"}
REF_META = {**META, "impl": "ga", "library": "Global Arrays 5.7.0 (C) on MPICH Version: 5.0.2"}
SECTION_KEYS = {"ga", "dim", "where", "side", "chunk", "bytes", "calls", "skip", "get_us", "get_MBps", "put_us",
                "put_MBps", "acc_us", "acc_MBps", "wrong", "skipped"}  # fmt: skip
READ_INC_KEYS = {"ga", "dim", "where", "side", "chunk", "bytes", "calls", "skip", "read_inc_us", "fop_us", "ratio",
                 "wrong", "skipped"}  # fmt: skip


# ---------------------------------------------------------------- sizes and plans


def test_sizes_are_whole_sections():
    assert gab.parse_ga_sizes(None) == [8 * s * s for s in gab.SIDES]
    assert gab.parse_ga_sizes(None, quick=True) == [8, 2048, 66248, 524288, 2097152]
    assert gab.parse_ga_sizes("2K:512K") == [2048, 4608, 7200, 18432, 32768, 66248, 131072, 233928, 524288]
    assert gab.parse_ga_sizes("2K:512K", quick=True) == [2048, 66248, 524288]
    assert gab.parse_ga_sizes("8,100,2K,2K") == [8, 72, 2048]  # 100 B rounds down to a 3 x 3 section
    for spec, message in [("4", "at least one float64"), ("3M", "at most a process's block"),
                          ("9K:3K", "min 9216 > max 3072"), ("3K:4K", "selects no size")]:  # fmt: skip
        with pytest.raises(bench.BenchError, match=message):
            gab.parse_ga_sizes(spec)


def test_sections_follow_perf_f():
    # 1-D: jump n/(6000 (i+1)); 2-D: n/(60 (i+1)); none for the largest
    assert [gab.jump_of(1, s) for s in (1, 3, 512)] == [174, 87, 0]
    assert [gab.jump_of(2, s) for s in (1, 3, 440, 512)] == [17, 8, 1, 0]
    assert gab.starts_of(1, 1)[:3] == [0, 175, 350] and len(gab.starts_of(1, 1)) == 1497
    assert len(gab.offsets_of(2, 1)) == 28 * 28 and gab.offsets_of(2, 1)[:2] == [(0, 0), (0, 18)]
    assert gab.offsets_of(1, 512) == [(0,)] and gab.offsets_of(2, 512) == [(0, 0)]
    assert gab.offsets_of(2, 256) == [(0, 0)]  # 256 + a jump of 1 leave room for one
    assert [gab.target_proc("remote", k) for k in range(5)] == [1, 2, 3, 1, 2]
    assert gab.target_proc("local", 7) == 0
    plans = gab.plan_ga([8, 2097152], quick=True)
    assert [(p["dim"], p["where"], p["chunk"], p["npatches"], p["calls"]) for p in plans] == [
        (1, "local", 1, 1497, 100), (1, "local", 262144, 1, 5), (1, "remote", 1, 1497, 100),
        (1, "remote", 262144, 1, 5), (2, "local", 1, 784, 100), (2, "local", 512, 1, 5),
        (2, "remote", 1, 784, 100), (2, "remote", 512, 1, 5)]  # fmt: skip
    assert gab.plan_calls(1497) == (1497, 10) and gab.plan_calls(1) == (20, 2)
    assert gab.plan_calls(3, iters=7, skip=0) == (7, 0)
    assert gab.plan_read_inc() == (10000, 1000) and gab.plan_read_inc(quick=True) == (1000, 100)


def test_checks_pick_sections_whose_data_is_known():
    assert gab.acc_hits(0, 7, 3) == 3 and gab.acc_hits(2, 7, 3) == 2 and gab.acc_hits(5, 3, 10) == 0
    # get: from the last call backwards, the last call into each slot
    assert gab.get_checks(10, 10, 100) == [9, 8, 7]
    assert gab.get_checks(10, 5, 2) == [4, 3]  # slots 0 and 1 only
    assert gab.get_checks(3, 10, 1) == [2]
    assert gab.write_checks(100, 1498) == [0, 50, 99] and gab.write_checks(5, 1) == [0]
    values = gab.fill_values(__import__("numpy"), [0, 1, 200], 3)
    assert values.tolist() == [3.0, 10.0, 394.0]


# ---------------------------------------------------------------- rows, tables, comparison


def _plan(dim=1, where="local", side=16):
    return gab.plan_ga([8 * side * side], quick=True)[[(1, "local"), (1, "remote"), (2, "local"),
                                                      (2, "remote")].index((dim, where))]  # fmt: skip


def _rows():
    rows = [gab.make_section_row(_plan(d, w), {"get": 1e-3, "put": 2e-3, "acc": 4e-3}, 0)
            for d, w in gab.HEADINGS]  # fmt: skip
    return [*rows, gab.make_read_inc_row(1000, 100, 2e-3, 1e-3, 0)]


def test_rows():
    r = gab.make_section_row(_plan(2, "remote", 16), {"get": 1e-3, "put": 2e-3, "acc": None}, 3)
    assert set(r) == SECTION_KEYS
    assert (r["ga"], r["dim"], r["where"], r["chunk"], r["bytes"], r["calls"], r["wrong"]) == (
        "section", 2, "remote", 16, 2048, 100, 3)  # fmt: skip
    assert r["get_us"] == pytest.approx(10.0) and r["get_MBps"] == pytest.approx(2048 / 10.0)
    assert r["acc_us"] is None and r["acc_MBps"] is None
    inc = gab.make_read_inc_row(1000, 100, 2e-3, 1e-3, 0)
    assert set(inc) == READ_INC_KEYS
    assert (inc["read_inc_us"], inc["fop_us"], inc["ratio"]) == pytest.approx((2.0, 1.0, 2.0))


def test_format_ga_table():
    text = bench.format_table(_rows(), META)  # found by the registry through the rows' "ga"
    lines = text.splitlines()
    assert lines[0].startswith("# gpumpi ga (GA perf.F), 4 ranks, host numpy buffers, C_DBL arrays [1048576]")
    for heading in ("Local 1-D Array Section", "Remote 1-D Array Section", "Local 2-D Array Section",
                    "Remote 2-D Array Section"):  # fmt: skip
        assert f"# {heading}" in lines
    i = lines.index("# Remote 2-D Array Section")
    assert lines[i + 1].split() == ["#", "bytes", "dim", "get", "get", "put", "put", "acc", "acc", "calls", "#wrong"]
    assert lines[i + 3].split() == ["2048", "16", "10.00", "204.8", "20.00", "102.4", "40.00", "51.2", "100", "0"]
    assert lines[-3].split() == ["1000", "2.00", "1.00", "2.00", "0"]
    assert lines[-2] == "# read_inc target (ratio <= 1.20): MISSED (2.00)"
    assert lines[-1] == "# Wrong values : 0 OK"


def test_compare_pairs_by_section():
    ref = _rows()[1:]  # no local 1-D row in the reference
    for r in ref:
        for op in ("get_us", "put_us", "acc_us", "read_inc_us", "fop_us"):
            if r.get(op) is not None:
                r[op] *= 4
    merged = bench.compare_results(_rows(), ref)
    assert [(m["ga"], m["dim"], m["where"]) for m in merged][:2] == [("section", 1, "local"), ("section", 1, "remote")]
    assert merged[0]["get_speedup"] is None and merged[1]["get_speedup"] == pytest.approx(4.0)
    assert merged[-1]["read_inc_speedup"] == pytest.approx(4.0) and merged[-1]["fop_speedup"] == pytest.approx(4.0)
    text = bench.format_compare_table(merged, META, REF_META)
    lines = text.splitlines()
    assert lines[0].startswith("# gpumpi vs ga ga (GA perf.F), 4 ranks, host numpy buffers")
    assert "# ga library: Global Arrays 5.7.0 (C) on MPICH Version: 5.0.2" in lines
    i = lines.index("# Remote 1-D Array Section")
    assert lines[i + 3].split()[:5] == ["2048", "256", "10.00", "40.00", "4.00"]
    assert lines[-1] == "# Wrong values : 0 OK"


def test_progress_lines():
    rows = _rows()
    line = bench.format_progress(2, 5, rows[2], "gpumpi")
    assert line == "# gpumpi ga [3/5] local 2-D 2048 B (16): get 10.00 us put 20.00 us acc 40.00 us"
    inc = bench.format_progress(4, 5, {**rows[-1], "wrong": 2})
    assert inc == "# ga [5/5] read_inc: read_inc 2.00 us Fetch_and_op 1.00 us ratio 2.00 WRONG 2"


def test_parse_reference_output():
    plans = gab.plan_ga([8], quick=True, iters=10)
    text = "library Global Arrays 5.7.0 (C) on MPICH\n" + "".join(
        f"section {p['dim']} {0 if p['where'] == 'local' else 1} {p['chunk']} 10 1e-5 2e-5 4e-5 0\n" for p in plans
    ) + "read_inc 10 1 2e-5 1e-5 0\n"
    rows, library = _ga_ref.parse_output(text, plans)
    assert library == "Global Arrays 5.7.0 (C) on MPICH"
    assert len(rows) == 5 and rows[0]["get_us"] == pytest.approx(1.0) and rows[-1]["ratio"] == pytest.approx(2.0)
    with pytest.raises(_ga_ref.Skip, match="printed 3 section rows for 4 sections"):
        _ga_ref.parse_output("\n".join(text.splitlines()[:4]), plans)


def test_reference_skips_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMPI_GA_PREFIX", str(tmp_path / "nowhere"))
    doc = bench.ga_reference([8], quick=True)
    assert doc["impl"] == "ga" and doc["results"] == []
    assert doc["skipped"] == f"GPUMPI_GA_PREFIX={tmp_path / 'nowhere'} has no include/ga.h and lib/libga.*"
    monkeypatch.setattr(_ga_ref, "TIMEOUTS", {**_ga_ref.TIMEOUTS, "run": 0.5})
    with pytest.raises(_ga_ref.Skip, match=r"^run took more than 0 s"):
        _ga_ref._run([sys.executable, "-c", "import time; time.sleep(5)"], "run", timeout=0.1)


@pytest.mark.skipif(not os.environ.get("GPUMPI_GA_PREFIX"), reason="set GPUMPI_GA_PREFIX to an installed GA to run it")
def test_reference_on_an_installed_ga():
    doc = bench.ga_reference([8, 2048], iters=5, quick=True)
    assert doc.get("skipped") is None, doc.get("skipped")
    assert len(doc["results"]) == 9 and all(r["wrong"] == 0 for r in doc["results"])


# ---------------------------------------------------------------- the command line


@pytest.fixture
def no_launch(monkeypatch):
    def boom(*a, **k):
        raise AssertionError(f"launched {a!r}")

    monkeypatch.setattr(cli.subprocess, "call", boom)
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ga", "-n", "3"], "the ga suite runs on exactly 4 ranks (got -n 3)"),
        (["ga", "--compare", "mpi4py"], "the ga suite compares with GA's own C library only (--compare ga, not mpi4py)"),
        (["ga", "--impl", "mpi4py"], "the ga suite measures gpumpi.ga (--impl gpumpi, not mpi4py)"),
        (["rma", "--compare", "ga"], "--compare ga (GA's own C library) applies to the ga suite only, not rma"),
        (["ga", "--sizes", "4M"], "a ga section is at most a process's block"),
        (["ga", "--window", "8"], "--window and --distinct-recv apply to the p2p suite only, not ga"),
    ],
)
def test_ga_argument_errors(argv, message, capsys, no_launch):
    assert cli.main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_ranks_default_per_suite(no_launch):
    def args(*argv):
        a = cli.build_parser().parse_args(["bench", *argv])
        cli._validate(a)
        return a

    assert args("ga").np == 4 and args("ga", "-n", "4").np == 4
    assert args("p2p").np == 2 and args("coll").np == 2


def test_run_ga_needs_four_ranks_and_gpumpi():
    import types

    def two():
        from gpumpi import MPI

        try:
            gab.run_ga(MPI, [8])
        except bench.BenchError as e:
            return str(e)

    assert run_ranks(two, 2, timeout=60) == ["the ga suite runs on exactly 4 ranks, as GA's perf.F (got 2)"] * 2
    with pytest.raises(bench.BenchError, match="measures gpumpi.ga"):
        gab.run_ga(types.SimpleNamespace(__name__="mpi4py.MPI"), [8])


# ---------------------------------------------------------------- real runs


def _run(buffer, sizes, corrupt=False):
    from gpumpi import MPI, ga

    if corrupt:  # every acc applied twice: every element read back after acc is wrong
        real = ga.acc

        def twice(g, buf, lo=None, hi=None, alpha=None):
            real(g, buf, lo, hi, alpha)
            real(g, buf, lo, hi, alpha)

        ga.acc = twice
    return gab.run_ga(MPI, sizes, iters=6, skip=1, buffer=buffer)


def _check(rows, sizes):
    sections = [r for r in rows if r["ga"] == "section"]
    assert [(r["dim"], r["where"]) for r in sections] == [k for k in gab.HEADINGS for _ in sizes]
    for r in sections:
        assert set(r) == SECTION_KEYS and r["wrong"] == 0, r
        for op in gab.OPS:
            assert r[f"{op}_us"] > 0 and r[f"{op}_MBps"] == pytest.approx(r["bytes"] / r[f"{op}_us"])
    inc = rows[-1]
    assert set(inc) == READ_INC_KEYS and inc["ga"] == "read_inc" and inc["wrong"] == 0
    assert inc["read_inc_us"] > 0 and inc["fop_us"] > 0 and inc["ratio"] > 0


@pytest.mark.parametrize(("buffer", "env"), [("numpy", None), ("sim", {"GPUMPI_DEVICE": "sim"})])
def test_every_section_on_four_ranks(buffer, env):
    sizes = [8, 2048]
    rows = run_ranks(_run, 4, timeout=120, args=(buffer, sizes), env=env)
    assert all(r == [] for r in rows[1:])
    _check(rows[0], sizes)
    text = gab.format_ga_table(rows[0], gab.ga_metadata(None, "gpumpi", buffer=buffer))
    assert text.endswith("# Wrong values : 0 OK")


def test_wrong_accumulates_are_counted():
    rows = run_ranks(_run, 4, timeout=120, args=("numpy", [8], True))[0]
    # side 1, 6 calls: write_checks reads back 3 one-element sections of each row, all wrong
    assert [r["wrong"] for r in rows] == [3, 3, 3, 3, 0]


@needs_launcher
def test_cli_quick_run_and_skipped_comparison(tmp_path):
    jpath = tmp_path / "g.json"
    out = run_bench("ga", "--quick", "--sizes", "8,2K", "--iters", "5", "--compare", "ga", "--json", str(jpath),
                    GPUMPI_GA_PREFIX=str(tmp_path / "no-ga"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"# --compare ga skipped: GPUMPI_GA_PREFIX={tmp_path / 'no-ga'} has no include/ga.h and lib/libga.*"
    assert lines[1].startswith("# gpumpi ga (GA perf.F), 4 ranks, host numpy buffers")
    assert "# Local 1-D Array Section" in lines and lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert (doc["suite"], doc["nranks"], doc["compare"]) == ("ga", 4, "ga") and doc["compare_skipped"]
    _check(doc["results"], [8, 2048])
    assert out.stderr.count("# gpumpi ga [") == 9


@needs_launcher
def test_cli_on_the_simulated_device(tmp_path):
    out = run_bench("ga", "--buffer", "sim", "--sizes", "8", "--iters", "3", "--quiet")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# gpumpi ga (GA perf.F), 4 ranks, sim buffers (simulated device memory")
    assert lines[0].endswith("in device memory (set_memory_dev 'device')")
    assert lines[-1] == "# Wrong values : 0 OK"
