"""Tests of the pack suite (gpumpi/bench/pack.py): block sizes, the three type families, in-process
runs on ``gpumpi.MPI`` (one rank, tiny sizes) with correct and faulty datatypes, the tables and
ratios, and real runs through the gpumpi launcher and against mpi4py (``mpi``).
"""

from __future__ import annotations

import json
import sys

import pytest
from benchtools import needs_launcher, needs_mpiexec, run

from gpumpi import bench, cli
from gpumpi.bench import pack, report


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


@needs_launcher
def test_pack_quick_on_one_rank_through_the_cli(tmp_path):
    jpath = tmp_path / "p.json"
    out = run([sys.executable, "-m", "gpumpi.cli", "bench", "pack", "--quick", "-n", "1", "--json", str(jpath)])
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
@needs_launcher
def test_pack_compare_mpi4py_with_strided_send(tmp_path):
    """gpumpi and mpi4py on two ranks: one merged table with pack ratios and strided-send."""
    jpath = tmp_path / "c.json"
    out = run(
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
