"""Tests of the p2p-matrix suite (gpumpi/bench/p2p_matrix.py): sizes, sample plans, the table and its
grids, a quick run on the simulated device through the gpumpi launcher, wrong-byte counting on forked
ranks, and every GPU pair (``gpu``, skipped without CuPy and a GPU).
"""

from __future__ import annotations

import json

import pytest
from benchtools import corrupting_mpi, gpu_or_skip, needs_launcher, run_bench

from gpumpi import bench
from gpumpi.bench import _common, p2p_matrix
from gpumpi.testing import run_ranks


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


@needs_launcher
def test_p2p_matrix_sim_quick_through_the_cli(tmp_path):
    jpath = tmp_path / "m.json"
    out = run_bench("p2p-matrix", "--buffer", "sim", "--quick", "--sizes", "64K,1M", "--iters", "3", "--quiet",
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


def _corrupt_matrix():
    mpi = corrupting_mpi(_common.TAG_MATRIX)
    return p2p_matrix.run_p2p_matrix_pair(mpi, 0, 0, [4096, 1 << 20], buffer="sim", iters=2, skip=1)


def test_wrong_device_bytes_are_counted_in_the_matrix():
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


@pytest.mark.gpu
@needs_launcher
def test_gpu_p2p_matrix_cupy(tmp_path):
    ngpus = gpu_or_skip()
    jpath = tmp_path / "m.json"
    out = run_bench("p2p-matrix", "--buffer", "cupy", "--quick", "--quiet", "--json", str(jpath), timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads(jpath.read_text())
    assert doc["devices"] == ngpus and len(doc["results"]) == ngpus * ngpus * 2
    for r in doc["results"]:
        assert r["wrong"] == 0 and r["warm_GBps"] > 0 and r["copy_GBps"] > 0
