"""Tests of the p2p suite (gpumpi/bench/p2p.py): sizes, iteration plans, tables and ratios, and
real runs: on two ranks of mpi4py under ``mpiexec`` (``mpi``), through the gpumpi launcher on host
and simulated device buffers, and on CuPy buffers (``gpu``, skipped without CuPy and a GPU).
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from benchtools import MPIEXEC, corrupting_mpi, gpu_or_skip, needs_launcher, needs_mpiexec, run, run_bench

from gpumpi import bench, cli
from gpumpi.bench import _common, p2p
from gpumpi.testing import run_ranks


def _row(size, lat=None, bw=None, bibw=None, wrong=0, mr=None, obj=None):
    return {"size": size, "latency_us": lat, "bw_GBps": bw, "mr_us": mr, "bibw_GBps": bibw, "obj_latency_us": obj,
            "wrong": wrong, "iters": {}}


META = {"suite": "p2p", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 2, "buffer": "numpy", "window": 64}
REF_META = {**META, "impl": "mpi4py", "library": "MPICH Version: 5.0.2"}


# ---------------------------------------------------------------- sizes and plans


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


# ---------------------------------------------------------------- tables and ratios


def test_format_table_aligned_with_units_and_header():
    rows = [_row(0, 2.5, obj=4.0), _row(8, 3.25, 0.0036, 0.0041, mr=2.2222, obj=4.5),
            _row(16 << 20, 2918.6, 5.8012, 7.935, mr=2892.1, obj=9000.25)]
    text = bench.format_table(rows, META)
    lines = text.splitlines()
    assert lines[0] == "# gpumpi p2p, 2 ranks, host numpy buffers"
    assert lines[1] == "# MPI library: gpumpi 0.1.0"
    assert any("one-way = half round trip" in ln for ln in lines)
    head = [ln for ln in lines if ln.startswith("#") and "latency" in ln and "bibw" in ln and "#wrong" in ln]
    assert len(head) == 1
    i = lines.index(head[0])
    units, body = lines[i + 1], lines[i + 2 : i + 5]
    assert "(B)" in units and "(us)" in units and "(GB/s)" in units and "(us/msg)" in units
    assert "msg rate" in head[0] and "obj lat" in head[0]
    # right-aligned: every body line has the same width as the column-name header
    assert {len(ln) for ln in body} == {len(head[0])}
    assert body[0].split() == ["0", "2.50", "-", "-", "-", "4.00", "0"]
    assert body[1].split() == ["8", "3.25", "0.0036", "2.222", "0.0041", "4.50", "0"]
    assert body[2].split() == ["16777216", "2918.60", "5.8012", "2892.100", "7.9350", "9000.25", "0"]
    assert lines[-1] == "# Wrong values : 0 OK"


def test_format_table_reports_wrong_values():
    text = bench.format_table([_row(8, 3.0, 1.0, 2.0, wrong=3), _row(16, 3.0, 1.0, 2.0, wrong=2)])
    assert text.splitlines()[-1] == "# Wrong values : 5 FAILED"
    assert text.splitlines()[-3].split()[-1] == "3"


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
    assert m8["mr_ratio"] is None and m8["obj_ratio"] is None  # not measured
    t = bench.compare_results([_row(8, 1.0, mr=1.5, obj=3.0)], [_row(8, 1.0, mr=3.0, obj=2.0)])[0]
    assert t["mr_ratio"] == pytest.approx(0.5) and t["obj_ratio"] == pytest.approx(1.5)  # time / reference time
    assert (t["mr_us"], t["ref_mr_us"], t["obj_latency_us"], t["ref_obj_latency_us"]) == (1.5, 3.0, 3.0, 2.0)


def test_format_compare_table():
    merged = bench.compare_results([_row(8, 1.0, 2.0, 3.0, mr=1.25, obj=3.0)], [_row(8, 3.0, 1.0, 6.0, mr=1.0, obj=2.0)])
    text = bench.format_compare_table(merged, META, REF_META)
    lines = text.splitlines()
    assert lines[0] == "# gpumpi vs mpi4py p2p, 2 ranks, host numpy buffers"
    assert "# mpi4py MPI library: MPICH Version: 5.0.2" in lines
    assert any("speedup = mpi4py latency / gpumpi latency" in ln for ln in lines)
    head = next(ln for ln in lines if "lat gpumpi" in ln)
    for col in ("lat mpi4py", "speedup", "bw gpumpi", "bw mpi4py", "bw ratio", "bibw ratio", "mr gpumpi", "mr mpi4py",
                "mr x", "obj gpumpi", "obj mpi4py", "obj x", "#wrong"):
        assert col in head
    body = lines[lines.index(head) + 2]
    assert len(body) == len(head)
    assert body.split() == ["8", "1.00", "3.00", "3.00", "2.0000", "1.0000", "2.00", "3.0000", "6.0000", "0.50",
                            "1.250", "1.000", "1.25", "3.00", "2.00", "1.50", "0"]
    assert lines[-1] == "# Wrong values : 0 OK"
    # the same implementation on both sides still gets distinct column names
    same = bench.format_compare_table(merged, REF_META, REF_META)
    assert "lat mpi4py'" in same


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


# ---------------------------------------------------------------- real runs on mpi4py


def _inner_cmd(np, *args):
    return [MPIEXEC, "-n", str(np), sys.executable, "-m", "gpumpi.cli", "bench", "--impl", "mpi4py", *args, "--_inner"]


def _check_rows(rows, sizes):
    assert [r["size"] for r in rows] == sizes
    for r in rows:
        assert set(r) >= {"size", "latency_us", "bw_GBps", "mr_us", "bibw_GBps", "obj_latency_us", "wrong", "iters"}
        assert r["latency_us"] > 0 and r["obj_latency_us"] > 0
        assert r["wrong"] == 0
        if r["size"] == 0:
            assert r["bw_GBps"] is None and r["bibw_GBps"] is None and r["mr_us"] is None
        else:
            assert r["bw_GBps"] > 0 and r["bibw_GBps"] > 0
            # the same measurement: time per message = size / bandwidth
            assert r["mr_us"] == pytest.approx(r["size"] / (r["bw_GBps"] * 1e3), rel=1e-9)
            assert set(r["iters"]) == {"latency", "bw", "bibw", "object"}


@pytest.mark.mpi
@needs_mpiexec
def test_inner_suite_json_on_mpi4py(tmp_path):
    path = tmp_path / "r.json"
    out = run(_inner_cmd(2, "--sizes", "0,1,1K,64K", "--iters", "5", "--skip", "1", "--_json", str(path)))
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
    out = run(
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
    assert csv_path.read_text().splitlines()[0].startswith("impl,size,latency_us,bw_GBps,mr_us,bibw_GBps,obj_latency_us,wrong")


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
                    if tag == _common.TAG_LAT and len(buf[0]):
                        buf[0][0] ^= 0xFF

            MPI = types.SimpleNamespace(COMM_WORLD=Comm(_M.COMM_WORLD), BYTE=_M.BYTE, Wtime=_M.Wtime,
                                        Request=_M.Request, Get_library_version=_M.Get_library_version)
            rows = p2p.run_p2p(MPI, [0, 8, 1024], iters=3, skip=1)
            if _M.COMM_WORLD.Get_rank() == 0:
                print(json.dumps(rows))
            """
        )
    )
    out = run([MPIEXEC, "-n", "2", sys.executable, str(script)])
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
    out = run(
        [sys.executable, "-m", "gpumpi.cli", "bench", "--impl", "mpi4py", "--compare", "mpi4py", "--sizes", "8,64K",
         "--iters", "50", "--quiet", "--json", str(jpath), "--csv", str(cpath)]
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
    out = run(_inner_cmd(2, "--quick", "--quiet"), timeout=120)
    assert out.returncode == 0, out.stderr
    body = [ln.split() for ln in out.stdout.splitlines() if not ln.startswith("#")]
    assert [int(b[0]) for b in body] == list(p2p.QUICK_SIZES)
    assert all(b[-1] == "0" for b in body)


# ---------------------------------------------------------------- gpumpi launcher, host and simulated device


@needs_launcher
def test_bench_through_gpumpi_launcher(tmp_path):
    jpath = tmp_path / "g.json"
    out = run(
        [sys.executable, "-m", "gpumpi.cli", "bench", "--sizes", "0,8,64K", "--iters", "5", "--quiet", "--json", str(jpath)]
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "# gpumpi p2p, 2 ranks, host numpy buffers"
    doc = json.loads(jpath.read_text())
    assert doc["impl"] == "gpumpi" and doc["nranks"] == 2
    _check_rows(doc["results"], [0, 8, 65536])


@needs_launcher
def test_p2p_sim_through_the_cli(tmp_path):
    jpath, cpath = tmp_path / "p.json", tmp_path / "p.csv"
    out = run_bench("p2p", "--buffer", "sim", "--transport", "staging", "--sizes", "0,8,32K", "--iters", "3",
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
    assert cpath.read_text().splitlines()[0].startswith("impl,size,latency_us,bw_GBps,mr_us,bibw_GBps,obj_latency_us,wrong")


@pytest.mark.mpi
@needs_launcher
@pytest.mark.skipif(
    cli.find_mpiexec() is None or __import__("importlib").util.find_spec("mpi4py") is None,
    reason="mpiexec or mpi4py not found (pip install mpi4py mpich)",
)
def test_p2p_sim_compare_mpi4py_on_host_buffers(tmp_path):
    jpath = tmp_path / "c.json"
    out = run_bench("p2p", "--buffer", "sim", "--compare", "mpi4py", "--sizes", "8,64K", "--iters", "3", "--quiet",
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


def _corrupt_p2p():
    return p2p.run_p2p(corrupting_mpi(_common.TAG_LAT), [0, 8, 1024], iters=2, skip=1, buffer="sim", tests=("latency",))


def test_wrong_device_bytes_are_counted():
    # latency: one flipped byte in each rank's receive buffer per size
    assert [r["wrong"] for r in run_ranks(_corrupt_p2p, 2, timeout=60)[0]] == [0, 2, 2]


# ---------------------------------------------------------------- real GPUs


@pytest.mark.gpu
@needs_launcher
@pytest.mark.parametrize("transport", ["auto", "staging"])
def test_gpu_p2p_cupy(tmp_path, transport):
    gpu_or_skip()
    jpath = tmp_path / "g.json"
    out = run_bench("p2p", "--buffer", "cupy", "--transport", transport, "--sizes", "0,8,64K,4M", "--iters", "5",
                 "--quiet", "--json", str(jpath), timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "# Wrong values : 0 OK"
    doc = json.loads(jpath.read_text())
    assert doc["buffer"] == "cupy" and doc["transport"] == transport and len(doc["devices"]) == 2
    assert all(r["wrong"] == 0 for r in doc["results"])
