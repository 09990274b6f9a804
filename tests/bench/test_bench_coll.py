"""Tests of the collectives suite (gpumpi/bench/coll.py): options, size and iteration plans, bus-bandwidth
factors, the validation values against a naive NumPy model of each collective, tables and ratios, the
command line; and real runs: on mpi4py under ``mpiexec`` (``mpi``), through the gpumpi launcher on host
and simulated device buffers, and NCCL on CuPy buffers (``gpu``, skipped without CuPy, NCCL and a GPU).

The runs of gpumpi's own ``Allreduce``, ``Reduce``, ``Allgather``, ``Reduce_scatter_block`` and
``Alltoall`` are marked :data:`needs_gpumpi_colls`: they skip until gpumpi's communicator has those
methods and run by themselves once it does.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from benchtools import MPIEXEC, ROOT, device_env, needs_launcher, needs_mpiexec, run, run_bench

from gpumpi import bench, cli
from gpumpi.bench import coll
from gpumpi.comm import Intracomm
from gpumpi.testing import run_ranks

_MISSING = [coll.MPI_NAMES[c] for c in coll.COLLS if not hasattr(Intracomm, coll.MPI_NAMES[c])]
#: Marks a test of gpumpi's collectives that skips while any of them is missing.
needs_gpumpi_colls = pytest.mark.skipif(bool(_MISSING), reason=f"gpumpi has no {', '.join(_MISSING)} yet")



def nccl_probe():
    """:func:`gpumpi.bench.coll.nccl_status`, asked of a subprocess (the test process must not
    initialise CUDA: ``run_ranks`` forks)."""
    code = "from gpumpi.bench import coll; ok, why = coll.nccl_status(); print(ok); print(why)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=device_env(),
                         cwd=ROOT)  # fmt: skip
    ok, why = (out.stdout.splitlines() + ["False", out.stderr.strip()])[:2]
    return ok == "True", why


META = {"suite": "coll", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 4, "buffer": "numpy"}
REF_META = {**META, "impl": "mpi4py", "library": "MPICH Version: 5.0.2"}


# ---------------------------------------------------------------- options


def test_parse_ops():
    assert coll.parse_ops(None) == list(coll.COLLS)
    assert coll.parse_ops("all") == list(coll.COLLS)
    # the suite's order, whatever the order asked; the MPI spelling of reduce_scatter too
    assert coll.parse_ops("barrier,Reduce_scatter_block,allreduce") == ["allreduce", "reduce_scatter", "barrier"]
    assert coll.parse_ops("reduce-scatter,bcast,bcast") == ["bcast", "reduce_scatter"]
    with pytest.raises(bench.BenchError, match=r"^unknown collective 'scan' in --ops \(known: allreduce, "):
        coll.parse_ops("allreduce,scan")
    with pytest.raises(bench.BenchError, match="selects no collective"):
        coll.parse_ops(",")


def test_parse_coll_sizes():
    assert coll.parse_coll_sizes(None) == [1 << k for k in range(3, 25)]  # 8 B ... 16 MiB
    assert coll.parse_coll_sizes(None, quick=True) == [8, 1024, 65536, 1 << 20, 16 << 20]
    assert coll.parse_coll_sizes("1K:8K") == [1024, 2048, 4096, 8192]
    assert coll.parse_coll_sizes(":32") == [8, 16, 32]
    assert coll.parse_coll_sizes("0:2") == [0, 1, 2]
    assert coll.parse_coll_sizes("1M:", quick=True) == [1 << 20, 16 << 20]
    assert coll.parse_coll_sizes("64K,8,8,1K") == [8, 1024, 65536]
    with pytest.raises(bench.BenchError, match="min 9 > max 3"):
        coll.parse_coll_sizes("9:3")
    with pytest.raises(bench.BenchError, match="selects no size"):
        coll.parse_coll_sizes("3:5", quick=True)


def test_dtype_op_root_checks():
    for dtype in coll.DTYPES:
        coll.check_dtype(dtype)
    with pytest.raises(bench.BenchError, match=r"^unknown --dtype 'complex64' \(known: float64, "):
        coll.check_dtype("complex64")
    with pytest.raises(bench.BenchError, match=r"^unknown --op 'band' \(known: sum, prod, max, min\)"):
        coll.check_op("band")
    coll.check_root(2, 3)
    with pytest.raises(bench.BenchError, match=r"^--root 3 is not a rank of 3 ranks"):
        coll.check_root(3, 3)
    with pytest.raises(bench.BenchError, match="--root -1 is not a rank of 1 rank$"):
        coll.check_root(-1, 1)


def test_check_exact_bounds():
    coll.check_exact("sum", "int8", 25)  # |sum| <= 5 * 25 = 125 < 127
    with pytest.raises(bench.BenchError, match=r"^--op sum --dtype int8 over 26 ranks can reach 130, beyond"):
        coll.check_exact("sum", "int8", 26)
    coll.check_exact("sum", "uint8", 25)  # 10 * 25 = 250 < 255
    with pytest.raises(bench.BenchError, match="uint8 over 26 ranks can reach 260"):
        coll.check_exact("sum", "uint8", 26)
    coll.check_exact("prod", "int8", 42)  # 2 ** 6
    with pytest.raises(bench.BenchError, match="can reach 128"):
        coll.check_exact("prod", "int8", 43)
    coll.check_exact("sum", "float32", 1000)
    with pytest.raises(bench.BenchError, match="float32"):
        coll.check_exact("prod", "float32", 7 * 24)  # 2 ** 24: no longer below the exact limit
    for op in coll.OPS:
        coll.check_exact(op, "float64", 64)
        coll.check_exact(op, "uint64", 64)
    coll.check_exact("max", "int8", 10_000)  # max and min never grow with the ranks


# ---------------------------------------------------------------- plans


def test_busbw_factors_are_nccl_tests():
    for n in (1, 2, 3, 4, 8):
        assert coll.busbw_factor("allreduce", n) == pytest.approx(2 * (n - 1) / n)
        for c in ("reduce_scatter", "allgather", "alltoall"):
            assert coll.busbw_factor(c, n) == pytest.approx((n - 1) / n)
        assert coll.busbw_factor("bcast", n) == 1.0 and coll.busbw_factor("reduce", n) == 1.0
        assert coll.busbw_factor("barrier", n) is None
    with pytest.raises(bench.BenchError, match="unknown collective 'scan'"):
        coll.busbw_factor("scan", 2)


def test_plan_count_rounds_to_elements_and_blocks():
    assert coll.plan_count("allreduce", 1000, 8, 3) == (125, 125)
    assert coll.plan_count("bcast", 7, 8, 3) == (0, 0)
    assert coll.plan_count("allgather", 1024, 8, 3) == (126, 42)  # 128 elements -> 3 blocks of 42
    assert coll.plan_count("reduce_scatter", 1024, 4, 4) == (256, 64)
    assert coll.plan_count("alltoall", 8, 8, 2) == (0, 0)
    assert coll.plan_count("barrier", 1 << 20, 8, 2) == (0, 0)


def test_plan_sizes_measures_each_count_once():
    # 8 and 16 B of float64 over 3 ranks both give no whole block
    assert coll.plan_sizes("allgather", [16, 8, 1024], 8, 3) == [(0, 0, 0), (1008, 126, 42)]
    assert coll.plan_sizes("allreduce", [8, 12, 16], 8, 3) == [(8, 1, 1), (16, 2, 2)]
    assert coll.plan_sizes("barrier", [8, 1024], 8, 3) == [(0, 0, 0)]


def test_plan_coll_iterations():
    assert coll.plan_coll_iterations(8) == (1000, 100)
    assert coll.plan_coll_iterations(8192) == (1000, 100)
    assert coll.plan_coll_iterations(1 << 20) == (100, 10)
    assert coll.plan_coll_iterations(16 << 20) == (64, 6)  # 1 GiB / 16 MiB
    assert coll.plan_coll_iterations(1 << 30) == (5, 1)
    assert coll.plan_coll_iterations(8, quick=True) == (100, 10)
    assert coll.plan_coll_iterations(16 << 20, quick=True) == (8, 1)
    assert coll.plan_coll_iterations(16 << 20, iters=3, skip=0) == (3, 0)
    assert coll.plan_coll_iterations(8, iters=20) == (20, 2)


# ---------------------------------------------------------------- values


def _naive(c, dtype, op, nranks, block, root):
    """What each rank holds after one call, from every rank's fill, by the MPI definitions."""
    sends = [coll.fill(np, c, dtype, op, r, nranks, block, root) for r in range(nranks)]
    if c == "bcast":
        return [sends[root]] * nranks
    if c == "allgather":
        return [np.concatenate(sends)] * nranks
    if c == "alltoall":
        return [np.concatenate([sends[src][dst * block : (dst + 1) * block] for src in range(nranks)])
                for dst in range(nranks)]  # fmt: skip
    wide = [s.astype(np.float64 if dtype.startswith("float") else np.int64) for s in sends]
    total = wide[0]
    for s in wide[1:]:
        total = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op](total, s)
    if c == "allreduce":
        return [total] * nranks
    if c == "reduce":
        return [total if r == root else None for r in range(nranks)]
    return [total[r * block : (r + 1) * block] for r in range(nranks)]  # reduce_scatter


@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "uint8", "int32", "uint64"])
@pytest.mark.parametrize("op", coll.OPS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 5])
def test_expected_matches_a_naive_model_of_each_collective(dtype, op, nranks):
    root = nranks - 1
    for c in coll.COLLS[:-1]:
        block = 37
        want = _naive(c, dtype, op, nranks, block, root)
        for r in range(nranks):
            got = coll.expected(np, c, dtype, op, r, nranks, block, root)
            if want[r] is None:
                assert got is None
                continue
            assert got.dtype == np.dtype(dtype)
            assert coll.count_wrong(np, got, want[r].astype(dtype)) == 0, (c, r)
            assert np.array_equal(got.astype(np.float64), want[r].astype(np.float64))  # exact, not overflowed


def test_values_are_not_trivial():
    """Every element differs from its neighbour somewhere and every rank contributes differently, so a
    result from the wrong rank, block or offset is counted."""
    a = coll.fill(np, "alltoall", "float64", "sum", 0, 3, 50, 0)
    b = coll.fill(np, "alltoall", "float64", "sum", 1, 3, 50, 0)
    assert np.count_nonzero(a != b) == 150
    assert np.count_nonzero(a[:50] != a[50:100]) == 50
    for op in coll.OPS:
        x = coll.fill(np, "allreduce", "int32", op, 0, 2, 100, 0)
        y = coll.fill(np, "allreduce", "int32", op, 1, 2, 100, 0)
        assert len(set(x.tolist())) > 1 and np.count_nonzero(x != y) > 10
    assert coll.fill(np, "bcast", "float64", "sum", 1, 3, 4, root=0) is None


def test_sentinel_is_counted_wrong():
    for dtype in coll.DTYPES:
        want = coll.expected(np, "allreduce", dtype, "sum", 0, 4, 20, 0)
        got = np.full(20, coll.sentinel(np, dtype), dtype=dtype)
        assert coll.count_wrong(np, got, want) == 20, dtype
        got[:15] = want[:15]
        assert coll.count_wrong(np, got, want) == 5
    assert coll.count_wrong(np, np.zeros(3), None) == 0


# ---------------------------------------------------------------- rows, tables, ratios


def _row(c="allreduce", size=1 << 20, t=100.0, tmax=120.0, wrong=0, n=4):
    count = size // 8
    return coll.make_row(c, size, count, "float64", "sum", 0, n, [t * 1e-6, tmax * 1e-6], wrong, 10, 1)


def test_make_row_bandwidths():
    r = coll.make_row("allreduce", 1 << 20, 1 << 17, "float64", "max", 2, 4, [100e-6, 300e-6], 3, 10, 1)
    assert r["time_us"] == pytest.approx(200.0) and r["time_max_us"] == pytest.approx(300.0)
    assert r["algbw_GBps"] == pytest.approx((1 << 20) / 200e-6 / 1e9)
    assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 1.5)
    assert (r["redop"], r["root"], r["wrong"], r["iters"], r["skip"]) == ("max", -1, 3, 10, 1)
    b = coll.make_row("bcast", 64, 8, "int32", "max", 2, 4, [1e-6], 0, 10, 1)
    assert (b["redop"], b["root"], b["type"]) == ("none", 2, "int32")
    assert b["busbw_GBps"] == b["algbw_GBps"]
    z = coll.make_row("barrier", 0, 0, "float64", "sum", 0, 4, [1e-6], 0, 10, 1)
    assert z["algbw_GBps"] is None and z["busbw_GBps"] is None and z["type"] == "none"


def test_format_coll_table():
    rows = [_row(size=8, t=2.5, tmax=3.0), _row(size=1 << 20), _row("bcast", 64, 1.0, 1.0),
            _row("barrier", 0, 5.0, 6.0)]  # fmt: skip
    text = bench.format_table(rows, META)  # found by the registry through the rows' "coll"
    lines = text.splitlines()
    assert lines[0] == "# gpumpi coll, 4 ranks, host numpy buffers"
    assert lines[1] == "# MPI library: gpumpi 0.1.0"
    assert "# Allreduce: busbw = algbw * 2(n-1)/n" in lines and "# Bcast: busbw = algbw" in lines
    assert "# Barrier: no data: time only" in lines
    heads = [i for i, ln in enumerate(lines) if ln.startswith("#") and "count" in ln and "busbw" in ln]
    assert len(heads) == 3  # one table per collective
    head = lines[heads[0]]
    assert head.split()[1:] == ["size", "count", "type", "redop", "root", "time", "tmax", "algbw", "busbw", "#wrong"]
    units = lines[heads[0] + 1]
    assert "(B)" in units and "(elements)" in units and "(us)" in units and "(GB/s)" in units
    body = lines[heads[0] + 2 : heads[0] + 4]
    assert {len(ln) for ln in body} == {len(head)}  # right-aligned
    assert body[0].split() == ["8", "1", "float64", "sum", "-1", "2.75", "3.00", "0.0029", "0.0044", "0"]
    assert lines[heads[2] + 2].split() == ["0", "0", "none", "none", "-1", "5.50", "6.00", "-", "-", "0"]
    busbws = [r["busbw_GBps"] for r in rows if r["busbw_GBps"] is not None]
    assert lines[-2] == f"# Avg bus bandwidth : {sum(busbws) / len(busbws):.4f} GB/s"
    assert lines[-1] == "# Wrong values : 0 OK"
    failed = bench.format_table([_row(wrong=2), _row("alltoall", wrong=1)])
    assert failed.splitlines()[-1] == "# Wrong values : 3 FAILED"


def test_compare_results_pairs_by_collective_and_size():
    mine = [_row(size=8, t=2.0), _row(size=64, t=4.0, wrong=1), _row("alltoall", 64, 10.0)]
    ref = [_row(size=8, t=6.0), _row(size=64, t=2.0), _row("bcast", 64, 1.0)]
    merged = bench.compare_results(mine, ref)
    assert [(m["coll"], m["size"]) for m in merged] == [("allreduce", 8), ("allreduce", 64), ("alltoall", 64)]
    assert merged[0]["speedup"] == pytest.approx((6.0 + 120.0) / (2.0 + 120.0))  # ref time / my time
    assert merged[1]["wrong"] == 1 and merged[1]["ref_wrong"] == 0
    assert merged[2]["speedup"] is None and merged[2]["ref_time_us"] is None  # the reference has no alltoall
    text = bench.format_compare_table(merged, META, {**REF_META, "impl": "nccl", "buffer": "cupy"})
    lines = text.splitlines()
    assert lines[0] == "# gpumpi vs nccl coll, 4 ranks, gpumpi on host numpy buffers, nccl on cupy buffers (CUDA device memory)"
    assert not any("device transport" in ln for ln in lines)  # NCCL's transport is NCCL's
    assert any(ln.startswith("# speedup = nccl time / gpumpi time") for ln in lines)
    head = next(ln for ln in lines if "time gpumpi" in ln)
    for col in ("time nccl", "busbw gpumpi", "busbw nccl", "speedup", "#wrong"):
        assert col in head
    alltoall = lines[-4].split()
    assert alltoall[5] != "-" and alltoall[6] == "-" and alltoall[-2] == "-"
    assert lines[-3].startswith("# Avg bus bandwidth gpumpi : ") and lines[-2].startswith("# Avg bus bandwidth nccl : ")
    assert lines[-1] == "# Wrong values : 1 FAILED"
    sim = bench.format_compare_table(merged, {**META, "buffer": "sim", "transport": "auto"}, REF_META)
    assert "# gpumpi device transport: auto" in sim
    assert "# mpi4py ran on host numpy buffers: mpi4py cannot take gpumpi's simulated device memory" in sim
    assert "time mpi4py'" in bench.format_compare_table(merged, REF_META, REF_META)


def test_nccl_version_words():
    assert coll.nccl_version_words(22105) == "NCCL 2.21.5"
    assert coll.nccl_version_words(2804) == "NCCL 2.8.4"
    assert coll.nccl_version_words(21803) == "NCCL 2.18.3"


def test_progress_line():
    line = bench.format_progress(2, 40, _row(size=65536, t=12.3, tmax=12.3, wrong=4), "mpi4py")
    assert line.startswith("# mpi4py coll [3/40] allreduce 65536 B: time 12.30 us busbw ")
    assert line.endswith("WRONG 4")


# ---------------------------------------------------------------- the command line


def _args(*argv):
    args = cli.build_parser().parse_args(["bench", *argv])
    cli._validate(args)
    return args


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["p2p", "--ops", "allreduce"], "--ops applies to the coll suite only, not p2p"),
        (["pack", "--dtype", "int32", "--root", "1"], "--dtype, --root apply to the coll suite only, not pack"),
        (["coll", "--ops", "scan"], "unknown collective 'scan' in --ops"),
        (["coll", "--dtype", "complex64"], "unknown --dtype 'complex64'"),
        (["coll", "--op", "band"], "unknown --op 'band'"),
        (["coll", "-n", "3", "--root", "3"], "--root 3 is not a rank of 3 ranks"),
        (["coll", "-n", "30", "--dtype", "int8"], "--op sum --dtype int8 over 30 ranks can reach 150"),
        (["coll", "--window", "8"], "--window and --distinct-recv apply to the p2p suite only, not coll"),
        (["p2p", "--compare", "nccl"], "nccl runs the coll suite only, not p2p"),
        (["coll", "--impl", "nccl", "--buffer", "numpy"], "--impl nccl runs on cupy buffers"),
    ],
)
def test_coll_argument_errors(argv, message, capsys, no_launch):
    assert cli.main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_int8_sum_on_many_ranks_is_fine_without_reductions(no_launch):
    _args("coll", "-n", "30", "--dtype", "int8", "--ops", "bcast,alltoall")  # nothing reduces: no bound


def test_compare_nccl_without_cupy_says_what_is_missing(capsys, no_launch):
    ok, why = nccl_probe()
    if ok:
        pytest.skip("CuPy with NCCL is here")
    assert cli.main(["bench", "coll", "--compare", "nccl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpumpi bench: nccl needs CuPy with NCCL and a CUDA GPU (") and why in err


def test_inner_argv_passes_the_coll_options(no_launch):
    args = _args("coll", "-n", "3", "--ops", "bcast,reduce", "--dtype", "int32", "--op", "max", "--root", "2",
                 "--buffer", "sim", "--sizes", "8,1K", "--quick")  # fmt: skip
    argv = cli.inner_argv(args, "gpumpi", "/tmp/r.json")
    assert argv[:6] == ["bench", "coll", "--impl", "gpumpi", "--buffer", "sim"]
    for pair in (["--ops", "bcast,reduce"], ["--dtype", "int32"], ["--op", "max"], ["--root", "2"]):
        i = argv.index(pair[0])
        assert argv[i : i + 2] == pair
    assert cli.inner_argv(args, "mpi4py", "/tmp/r.json")[5] == "numpy"
    assert cli.inner_argv(args, "nccl", "/tmp/r.json")[5] == "cupy"
    assert cli.rank_env(args, "nccl") == {"GPUMPI_DEVICE": "auto"}
    cmd = cli.launch_command("nccl", 3, argv)
    assert cmd[:5] == [sys.executable, "-m", "gpumpi", "-n", "3"]  # NCCL's ranks are gpumpi's
    inner = cli.build_parser().parse_args(argv)
    assert (inner.ops, inner.dtype, inner.op, inner.root) == ("bcast,reduce", "int32", "max", 2)


@pytest.fixture
def no_launch(monkeypatch):
    def boom(*a, **k):
        raise AssertionError(f"launched {a!r}")

    monkeypatch.setattr(cli.subprocess, "call", boom)
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------- real runs on mpi4py


def _inner_cmd(np_, *args):
    return [MPIEXEC, "-n", str(np_), sys.executable, "-m", "gpumpi.cli", "bench", "coll", "--impl", "mpi4py", *args,
            "--_inner"]  # fmt: skip


def _check_rows(rows, nranks, ops=coll.COLLS):
    assert [c for c in coll.COLLS if c in {r["coll"] for r in rows}] == list(ops)
    for r in rows:
        assert r["wrong"] == 0, r
        assert r["time_us"] > 0 and r["time_max_us"] >= r["time_us"]
        if r["size"]:
            assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * coll.busbw_factor(r["coll"], nranks))
            assert r["algbw_GBps"] == pytest.approx(r["size"] / r["time_us"] / 1e3)


@pytest.mark.mpi
@needs_mpiexec
def test_every_collective_on_mpi4py_at_3_ranks(tmp_path):
    path = tmp_path / "r.json"
    out = run(_inner_cmd(3, "--sizes", "8,1K,64K", "--iters", "5", "--skip", "1", "--root", "1", "--_json", str(path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    doc = json.loads(path.read_text())
    assert (doc["suite"], doc["impl"], doc["nranks"], doc["buffer"]) == ("coll", "mpi4py", 3, "numpy")
    assert (doc["dtype"], doc["op"], doc["root"], doc["ops"]) == ("float64", "sum", 1, list(coll.COLLS))
    assert doc["library"].startswith("MPICH")
    rows = doc["results"]
    _check_rows(rows, 3)
    assert out.stderr.count("# mpi4py coll [") == len(rows)
    sizes = {c: [r["size"] for r in rows if r["coll"] == c] for c in coll.COLLS}
    assert sizes["allreduce"] == [8, 1024, 65536]
    assert sizes["allgather"] == [0, 1008, 65520]  # whole blocks of 3 ranks
    assert sizes["barrier"] == [0]
    assert {r["root"] for r in rows if r["coll"] in ("bcast", "reduce")} == {1}
    assert all((r["iters"], r["skip"]) == (5, 1) for r in rows)


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize(("dtype", "op"), [("int8", "sum"), ("uint32", "prod"), ("float32", "max"), ("int64", "min")])
def test_types_and_ops_validate_on_mpi4py(dtype, op):
    out = run(_inner_cmd(4, "--ops", "allreduce,reduce,reduce_scatter", "--sizes", "1K", "--iters", "2",
                         "--dtype", dtype, "--op", op, "--quiet"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"  {dtype}  " in out.stdout and f"  {op}  " in out.stdout
    assert out.stdout.splitlines()[-1] == "# Wrong values : 0 OK"


@pytest.mark.mpi
@needs_mpiexec
def test_wrong_results_are_counted_on_mpi4py(tmp_path):
    """A library that returns one wrong element per Allreduce, and nothing from Alltoall, shows in #wrong."""
    script = tmp_path / "corrupt.py"
    script.write_text(
        "import json, types\n"
        "from mpi4py import MPI as _M\n"
        "from gpumpi.bench import coll\n"
        "class Comm:\n"
        "    def __init__(self, c):\n"
        "        self._c = c\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(self._c, name)\n"
        "    def Allreduce(self, s, r, op):\n"
        "        self._c.Allreduce(s, r, op)\n"
        "        if len(r[0]):\n"
        "            r[0][0] += 1\n"
        "    def Alltoall(self, s, r):\n"
        "        pass\n"
        "MPI = types.SimpleNamespace(COMM_WORLD=Comm(_M.COMM_WORLD), BYTE=_M.BYTE, DOUBLE=_M.DOUBLE, SUM=_M.SUM,\n"
        "                            Wtime=_M.Wtime)\n"
        "rows = coll.run_coll(MPI, [8, 1024], ops=['allreduce', 'alltoall', 'barrier'], iters=3, skip=1)\n"
        "if _M.COMM_WORLD.Get_rank() == 0:\n"
        "    print(json.dumps(rows))\n"
    )
    out = run([MPIEXEC, "-n", "2", sys.executable, str(script)])
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    # Allreduce: one element on each of 2 ranks; Alltoall: every element (the sentinel stays)
    # (Alltoall of 8 B has no whole block of 2 ranks: 0 elements)
    assert [(r["coll"], r["size"], r["wrong"]) for r in rows] == [
        ("allreduce", 8, 2), ("allreduce", 1024, 2), ("alltoall", 0, 0), ("alltoall", 1024, 256), ("barrier", 0, 0)
    ]  # fmt: skip


@pytest.mark.mpi
@needs_mpiexec
def test_outer_compare_on_mpi4py(tmp_path):
    jpath, cpath = tmp_path / "c.json", tmp_path / "c.csv"
    out = run([sys.executable, "-m", "gpumpi.cli", "bench", "coll", "--impl", "mpi4py", "--compare", "mpi4py", "-n", "2",
               "--ops", "allreduce,allgather", "--sizes", "8,64K", "--iters", "10", "--quiet", "--json", str(jpath),
               "--csv", str(cpath)])  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# mpi4py vs mpi4py' coll, 2 ranks, host numpy buffers"
    assert sum(1 for ln in lines if "time mpi4py'" in ln) == 2  # one table per collective
    doc = json.loads(jpath.read_text())
    assert doc["compare"] == "mpi4py" and len(doc["runs"]) == 2
    assert [(m["coll"], m["size"]) for m in doc["results"]] == [("allreduce", 8), ("allreduce", 65536),
                                                                 ("allgather", 0), ("allgather", 65536)]  # fmt: skip
    assert all(m["speedup"] > 0 for m in doc["results"] if m["size"])
    assert cpath.read_text().splitlines()[0].startswith("impl,ref_impl,coll,size,count,type,redop,root,time_us")


@pytest.mark.mpi
@needs_mpiexec
def test_quick_sweep_on_mpi4py_is_quick():
    out = run(_inner_cmd(2, "--quick", "--quiet"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "# Wrong values : 0 OK"


# ---------------------------------------------------------------- gpumpi


def _corrupt_bcast(buffer):
    """gpumpi's Bcast with the first element of every non-root result flipped."""
    import types

    from gpumpi import MPI as real

    class Comm:
        def __init__(self, c):
            self._c = c

        def __getattr__(self, name):
            return getattr(self._c, name)

        def Bcast(self, buf, root=0):
            self._c.Bcast(buf, root)
            if self._c.Get_rank() != root and buf[0].size:
                host = buf[0].get() if buffer == "sim" else buf[0]
                host[0] = -host[0] - 1
                if buffer == "sim":
                    buf[0].set(host)

    MPI = types.SimpleNamespace(COMM_WORLD=Comm(real.COMM_WORLD), BYTE=real.BYTE, DOUBLE=real.DOUBLE, SUM=real.SUM,
                                Wtime=real.Wtime)  # fmt: skip
    return coll.run_coll(MPI, [8, 1024], ops=["bcast"], iters=2, skip=1, buffer=buffer)


@pytest.mark.parametrize("buffer", ["numpy", "sim"])
def test_gpumpi_bcast_wrong_elements_are_counted(buffer):
    rows = run_ranks(_corrupt_bcast, 3, timeout=60, args=(buffer,))[0]
    assert [r["wrong"] for r in rows] == [2, 2]  # one element on each of the 2 non-root ranks


def _gpumpi_run(buffer, ops, sizes, root):
    from gpumpi import MPI

    return coll.run_coll(MPI, sizes, ops=ops, iters=3, skip=1, buffer=buffer, root=root)


@pytest.mark.parametrize("buffer", ["numpy", "sim"])
def test_gpumpi_bcast_and_barrier(buffer):
    rows = run_ranks(_gpumpi_run, 3, timeout=60, args=(buffer, ["bcast", "barrier"], [8, 4096], 2))[0]
    _check_rows(rows, 3, ["bcast", "barrier"])
    assert [(r["coll"], r["size"], r["root"]) for r in rows] == [("bcast", 8, 2), ("bcast", 4096, 2), ("barrier", 0, -1)]


@needs_launcher
def test_gpumpi_bcast_through_the_cli_on_sim(tmp_path):
    jpath = tmp_path / "g.json"
    out = run_bench("coll", "-n", "3", "--ops", "bcast,barrier", "--buffer", "sim", "--transport", "staging",
                    "--sizes", "8,64K", "--iters", "3", "--json", str(jpath))  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# gpumpi coll, 3 ranks, sim buffers (simulated device memory, SimDeviceArray)"
    assert lines[2].startswith("# device transport: staging")
    assert lines[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert (doc["buffer"], doc["transport"], doc["transports_env"]) == ("sim", "staging", "device:staging")
    _check_rows(doc["results"], 3, ["bcast", "barrier"])


@needs_gpumpi_colls
@pytest.mark.parametrize("buffer", ["numpy", "sim"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_gpumpi_every_collective(buffer, nranks):
    rows = run_ranks(_gpumpi_run, nranks, timeout=120, args=(buffer, list(coll.COLLS), [8, 1000, 64 << 10], 0))[0]
    _check_rows(rows, nranks)


def _gpumpi_types(dtype, op):
    from gpumpi import MPI

    return coll.run_coll(MPI, [1 << 10], ops=list(coll.REDUCING), dtype=dtype, op=op, iters=2, skip=1, root=1)


@needs_gpumpi_colls
@pytest.mark.parametrize(("dtype", "op"), [("int8", "sum"), ("uint32", "prod"), ("float32", "max"), ("int64", "min")])
def test_gpumpi_reductions_of_other_types(dtype, op):
    _check_rows(run_ranks(_gpumpi_types, 3, timeout=60, args=(dtype, op))[0], 3, list(coll.REDUCING))


@pytest.mark.mpi
@needs_mpiexec
@needs_launcher
@needs_gpumpi_colls
def test_gpumpi_compare_mpi4py_through_the_cli(tmp_path):
    jpath = tmp_path / "c.json"
    out = run_bench("coll", "-n", "3", "--compare", "mpi4py", "--quick", "--sizes", ":1M", "--iters", "5", "--quiet",
                    "--json", str(jpath), timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "# gpumpi vs mpi4py coll, 3 ranks, host numpy buffers"
    doc = json.loads(jpath.read_text())
    assert all(m["wrong"] == 0 and m["ref_wrong"] == 0 and m["speedup"] > 0 for m in doc["results"])


# ---------------------------------------------------------------- NCCL on real GPUs


@pytest.mark.gpu
@needs_launcher
def test_nccl_through_the_cli(tmp_path):
    ok, why = nccl_probe()
    if not ok:
        pytest.skip(f"needs CuPy with NCCL and a CUDA GPU ({why})")
    n = int(why.split()[0])
    jpath = tmp_path / "n.json"
    out = run_bench("coll", "--impl", "nccl", "-n", str(n), "--sizes", "8,64K,4M", "--iters", "5", "--quiet",
                    "--json", str(jpath), timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(jpath.read_text())
    assert doc["impl"] == "nccl" and doc["buffer"] == "cupy" and doc["library"].startswith("NCCL ")
    _check_rows(doc["results"], n, list(coll.NCCL_COLLS))
