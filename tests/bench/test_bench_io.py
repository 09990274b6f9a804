"""Tests of the MPI-IO suite (gpumpi/bench/io.py): options and sizes, the layout of the array,
tables and ratios; and real runs on gpumpi (host and simulated device buffers, 1-3 ranks), a
library that corrupts what it writes (its wrong elements counted), and ``--compare mpi4py``
through the command line (mpi4py + MPICH's ROMIO)."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
from benchtools import needs_launcher, needs_mpiexec, run_bench

from gpumpi import bench
from gpumpi.bench import io
from gpumpi.testing import run_ranks


def test_parse_io_ops_and_sizes():
    assert io.parse_io_ops(None) == list(io.TESTS)
    assert io.parse_io_ops("read_all, write_at") == ["read_all", "write_at"]
    with pytest.raises(bench.BenchError, match="unknown io test"):
        io.parse_io_ops("write_all,nope")
    assert io.parse_io_sizes(None) == [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
    assert io.parse_io_sizes(None, quick=True) == [1 << 20, 16 << 20]
    assert io.parse_io_sizes("4M:64M") == [4 << 20, 16 << 20, 64 << 20]
    assert io.parse_io_sizes("1000,12") == [8, 1000]  # whole float64 elements
    with pytest.raises(bench.BenchError):
        io.parse_io_sizes("4")


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 6])
def test_the_blocks_tile_the_array(nranks):
    from gpumpi import MPI

    cover = None
    for rank in range(nranks):
        shape, block, start = io._layout(MPI, nranks, rank, 1 << 20)
        if cover is None:
            cover = np.zeros(shape, np.int32)
        cover[start[0]:start[0] + block[0], start[1]:start[1] + block[1]] += 1
    assert (cover == 1).all() and cover.size * 8 <= 1 << 20 and cover.size * 8 > (1 << 20) * 0.99


def _rows():
    return [{"io": "write_all", "size": 1 << 20, "bytes": 1 << 20, "time_s": 0.001, "GBps": 1.048576, "wrong": 0},
            {"io": "read_all", "size": 1 << 20, "bytes": 1 << 20, "time_s": 0.0005, "GBps": 2.097152, "wrong": 1}]


def test_tables_and_ratios():
    meta = io.io_metadata(None, "gpumpi", nranks=2)
    text = io.format_io_table(_rows(), meta)
    assert text.splitlines()[0] == "# gpumpi io, 2 ranks, host numpy buffers"
    assert "# write_all: Set_view(subarray) + Write_all" in text and text.endswith("# Wrong values : 1 FAILED")
    ref = [dict(r, GBps=r["GBps"] / 2, wrong=0) for r in _rows()]
    merged = io.compare_io_results(_rows(), ref)
    assert [m["ratio"] for m in merged] == [pytest.approx(2.0), pytest.approx(2.0)]
    table = io.format_io_compare_table(merged, meta, io.io_metadata(None, "mpi4py", nranks=2))
    assert "# ratio = gpumpi GB/s / mpi4py GB/s; >1 means gpumpi is faster" in table
    assert "2.00" in table
    assert io.format_io_progress(0, 4, _rows()[1], "gpumpi") == "# gpumpi io [1/4] read_all 1048576 B: 2.097 GB/s WRONG 1"


def _gpumpi_run(buffer, corrupt):
    from gpumpi import MPI

    if corrupt:  # a library whose Write_all flips the first element it writes
        real = MPI.File.Write_all

        def bad(self, buf, status=None):
            a = buf.get() if hasattr(buf, "get") else buf
            a = np.array(a, copy=True)
            a.flat[0] += 1
            return real(self, a if not hasattr(buf, "get") else type(buf).from_numpy(a), status)

        MPI.File.Write_all = bad
    return io.run_io(MPI, [1 << 16, 3 << 16], iters=2, buffer=buffer)


@pytest.mark.parametrize("buffer", ["numpy", "sim"])
@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_gpumpi_every_test_is_exact(buffer, nranks):
    rows = run_ranks(_gpumpi_run, nranks, timeout=120, args=(buffer, False),
                     env={"GPUMPI_DEVICE": "sim"} if buffer == "sim" else None)
    assert all(r == [] for r in rows[1:])
    got = rows[0]
    assert [(r["io"], r["size"]) for r in got] == [(t, s) for s in (1 << 16, 3 << 16) for t in io.TESTS]
    assert all(r["wrong"] == 0 and r["GBps"] > 0 and 0.98 * r["size"] <= r["bytes"] <= r["size"] for r in got)


def test_a_corrupting_library_is_caught():
    rows = run_ranks(_gpumpi_run, 2, timeout=120, args=("numpy", True))[0]
    wrong = {r["io"]: r["wrong"] for r in rows if r["size"] == 1 << 16}
    # each rank flips one element of its block, in each of 2 measurements; read_all reads the last file
    assert wrong["write_all"] == 2 * 2 and wrong["read_all"] == 2 * 2 and wrong["write_at"] == 0, wrong


def test_run_io_refuses_device_buffers_on_mpi4py():
    fake = types.SimpleNamespace(__name__="mpi4py.MPI")
    with pytest.raises(bench.BenchError, match="^the io suite on sim buffers: mpi4py"):
        io.run_io(fake, [8], buffer="sim")


@needs_launcher
@needs_mpiexec
def test_compare_mpi4py_through_the_cli(tmp_path):
    jpath = tmp_path / "io.json"
    out = run_bench("io", "--compare", "mpi4py", "--sizes", "256K", "--iters", "1", "--json", str(jpath), "--quiet")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# gpumpi vs mpi4py io, 2 ranks, host numpy buffers" and lines[-1] == "# Wrong values : 0 OK"
    assert sum(1 for x in lines if x.startswith("   262144")) == len(io.TESTS)
    docs = json.loads(jpath.read_text())
    docs = docs if isinstance(docs, list) else [docs]
    assert {d["impl"] for d in docs} >= {"gpumpi"}
