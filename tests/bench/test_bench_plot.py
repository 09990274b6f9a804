"""Tests of the latency chart of ``gpumpi bench p2p --plot`` (gpumpi/bench/plot.py): the series,
ticks and title drawn from synthetic documents, the PNG file read back by hand (signature, IHDR,
CRCs, pixels), the command's checks before anything is launched (matplotlib missing included), and
one tiny sweep end to end through the gpumpi launcher (with ``--compare mpi4py`` where mpiexec is).
"""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
import zlib

import numpy as np
import pytest
from benchtools import HAVE_MPI4PY, MPIEXEC, needs_launcher, run_bench

from gpumpi import bench, cli
from gpumpi.bench import plot

needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason='matplotlib is not installed (pip install ".[test]")')  # fmt: skip

SIZES = [0] + [1 << k for k in range(17)]  # 0 B, 1 B ... 64 KiB, written out


def _doc(impl, library, alpha_us, beta_us_per_byte, sizes=SIZES, wrong=None, host="node7 (x86_64, 16 CPUs)"):
    """A run's document as ``--json`` writes it, with latency ``alpha + beta * size`` (numpy)."""
    s = np.array(sizes, dtype=np.float64)
    lat = alpha_us + beta_us_per_byte * s
    bw = s / (lat * 1e-6) / 1e9  # one message per latency: an independent, monotone bandwidth
    rows = [
        {"size": int(n), "latency_us": float(t), "bw_GBps": None if n == 0 else float(b),
         "bibw_GBps": None if n == 0 else float(2 * b), "wrong": (wrong or {}).get(int(n), 0), "iters": {}}
        for n, t, b in zip(sizes, lat, bw)
    ]  # fmt: skip
    return {"suite": "p2p", "impl": impl, "library": library, "host": host, "nranks": 2, "buffer": "numpy",
            "window": 64, "results": rows}  # fmt: skip


def _compare_doc():
    mine = _doc("gpumpi", "gpumpi 0.1.0 (shared-memory rings, cross-memory attach; mpi4py-compatible API)", 6.5, 7e-5)
    ref = _doc("mpi4py", "MPICH Version: 5.0.2", 1.4, 1.2e-4)
    merged = bench.compare_results(mine["results"], ref["results"])
    meta = {k: v for k, v in mine.items() if k != "results"}
    return {**meta, "compare": "mpi4py", "runs": [mine, ref], "results": merged}


def _png(path):
    """``(width, height, pixel bytes)`` of a PNG, every chunk's CRC checked."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, color = struct.unpack(">IIBB", chunks[0][1][:10])
    assert depth == 8 and color in (2, 6)  # 8-bit RGB or RGBA
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert len(pixels) == height * (1 + width * (3 if color == 2 else 4))  # one filter byte per row
    return width, height, pixels


# ---------------------------------------------------------------- series, ticks, title (no drawing)


def test_series_of_a_compare_document():
    doc = _compare_doc()
    series = plot.latency_series(doc)
    assert [s.label for s in series] == ["gpumpi 0.1.0", "mpi4py (MPICH Version: 5.0.2)"]
    assert [s.impl for s in series] == ["gpumpi", "mpi4py"]
    for s, run in zip(series, doc["runs"]):
        assert list(s.sizes) == SIZES
        assert list(s.latency_us) == [r["latency_us"] for r in run["results"]]
        assert s.bw_GBps[0] is None and s.bw_GBps[1:] == tuple(r["bw_GBps"] for r in run["results"][1:])
        assert s.wrong == 0
    # one run, bare rows, a list of documents: the same lines
    assert plot.latency_series(doc["runs"][1]) == series[1:]
    assert plot.latency_series(doc["runs"]) == series
    assert plot.latency_series(doc["runs"][0]["results"])[0].latency_us == series[0].latency_us


def test_labels_primed_and_wrong_values_named():
    a = _doc("mpi4py", "MPICH Version: 5.0.2", 1.0, 1e-4, wrong={8: 3, 64: 2})
    b = _doc("mpi4py", "MPICH Version: 5.0.2", 1.0, 1e-4)
    labels = [s.label for s in plot.latency_series([a, b])]
    assert labels == ["mpi4py (MPICH Version: 5.0.2), WRONG: 5 bytes", "mpi4py' (MPICH Version: 5.0.2)"]
    assert plot.legend_label({"impl": "gpumpi", "library": "unknown"}) == "gpumpi"


def test_zero_bytes_and_ticks():
    assert plot.zero_position(SIZES) == 0.5
    assert plot.zero_position([0, 8, 64]) == 4.0
    major, labels, minor = plot.size_ticks(SIZES)
    assert labels == ["0", "1", "2", "4", "8", "16", "32", "64", "128", "256", "512",
                      "1K", "2K", "4K", "8K", "16K", "32K", "64K"]  # fmt: skip
    assert major == [0.5] + [float(1 << k) for k in range(17)] and minor == []
    # a 0 B ... 16 MiB sweep labels every other power of two
    major, labels, minor = plot.size_ticks([0] + [1 << k for k in range(25)])
    assert labels[:4] == ["0", "1", "4", "16"] and labels[-1] == "16M"
    assert minor[:2] == [2.0, 8.0] and len(major) - 1 + len(minor) == 25
    # no 0 B: no "0" tick; ticks cover a sweep that is not powers of two
    assert plot.size_ticks([3, 1000])[1] == ["2", "4", "8", "16", "32", "64", "128", "256", "512", "1K"]
    assert plot.plot_sizes() == SIZES


def test_title_names_implementations_ranks_buffers_and_machine():
    assert plot.chart_title(_compare_doc()) == (
        "gpumpi vs mpi4py: p2p one-way latency, 2 ranks, host numpy buffers\non node7 (x86_64, 16 CPUs)"
    )
    sim = _compare_doc()
    sim["runs"][0] = {**sim["runs"][0], "buffer": "sim"}
    del sim["runs"][0]["host"], sim["runs"][1]["host"]
    assert plot.chart_title(sim) == ("gpumpi vs mpi4py: p2p one-way latency, 2 ranks, gpumpi on sim buffers (simulated "
                                     "device memory, SimDeviceArray), mpi4py on host numpy buffers")  # fmt: skip


def test_metadata_names_the_host():
    from gpumpi import MPI

    meta = bench.metadata(MPI, "gpumpi", nranks=2)
    assert meta["host"] == bench.report.host_words()
    assert meta["host"].endswith(f"CPU{'' if __import__('os').cpu_count() == 1 else 's'})")


# ---------------------------------------------------------------- the PNG


@needs_matplotlib
def test_plot_latency_writes_a_png_of_both_lines(tmp_path):
    doc = _compare_doc()
    path = tmp_path / "lat.png"
    fig = plot.plot_latency(doc, str(path))
    width, height, pixels = _png(path)
    assert (width, height) == (13 * 110, 5 * 110)  # latency and bandwidth panels at 110 dpi
    assert path.stat().st_size > 20_000
    assert len(set(pixels)) > 50  # lines, text and grid, not a blank canvas
    lat, bw = fig.axes
    assert lat.get_xscale() == "log" and lat.get_yscale() == "log" and bw.get_yscale() == "log"
    assert [t.get_text() for t in lat.get_legend().get_texts()] == ["gpumpi 0.1.0", "mpi4py (MPICH Version: 5.0.2)"]
    xs = np.array([0.5] + [1 << k for k in range(17)], dtype=float)  # 0 B half a step left of 1 B
    for line, (alpha, beta) in zip(lat.get_lines(), ((6.5, 7e-5), (1.4, 1.2e-4))):
        assert np.array_equal(line.get_xdata(), xs)
        assert np.allclose(line.get_ydata(), alpha + beta * np.array(SIZES, dtype=float))
    assert [t.get_text() for t in lat.get_xticklabels()][:3] == ["0", "1", "2"]
    assert [t.get_text() for t in bw.get_xticklabels()][0] == "1"  # bandwidth has no 0 B
    assert len(bw.get_lines()) == 4  # bw and bibw of each
    assert fig.get_suptitle().startswith("gpumpi vs mpi4py: p2p one-way latency, 2 ranks")
    # latency alone: a narrower chart
    path2 = tmp_path / "lat-only.png"
    fig2 = plot.plot_latency(doc["runs"][0], str(path2), bandwidth=False, title="mine")
    assert _png(path2)[:2] == (int(7.5 * 110), 5 * 110)
    assert len(fig2.axes) == 1 and fig2.get_suptitle() == "mine"


def test_plot_latency_refuses_what_it_cannot_draw(tmp_path):
    path = tmp_path / "x.png"
    with pytest.raises(bench.BenchError, match=r"plot_latency: draws the p2p suite's latency, not coll results"):
        plot.plot_latency({"suite": "coll", "results": []}, str(path))
    nothing = _doc("gpumpi", "gpumpi 0.1.0", 1.0, 0.0, sizes=[0, 8])
    for r in nothing["results"]:
        r["latency_us"] = None
    with pytest.raises(bench.BenchError, match=r"plot_latency: no latency to plot \(1 runs, sizes \[0, 8\]\)"):
        plot.plot_latency(nothing, str(path))
    with pytest.raises(bench.BenchError, match="expected a p2p --json document"):
        plot.plot_latency("lat.json", str(path))
    assert not path.exists()


# ---------------------------------------------------------------- the command's checks


@pytest.fixture
def no_launch(monkeypatch):
    def boom(*a, **k):
        raise AssertionError(f"launched {a!r}")

    monkeypatch.setattr(cli.subprocess, "call", boom)
    for name in cli.JOB_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def test_missing_matplotlib_fails_before_anything_runs(tmp_path, monkeypatch, capsys, no_launch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what a missing package looks like to import
    hint = r'--plot needs matplotlib, which is not installed .*: pip install "\.\[bench\]"$'
    with pytest.raises(bench.BenchError, match=hint):
        plot.check_matplotlib()
    with pytest.raises(bench.BenchError, match="needs matplotlib"):
        plot.plot_latency(_compare_doc(), str(tmp_path / "x.png"))
    assert cli.main(["bench", "--compare", "mpi4py", "--plot", str(tmp_path / "lat.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpumpi bench: --plot needs matplotlib") and err.endswith('pip install ".[bench]"')
    assert not (tmp_path / "lat.png").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "pack", "--plot", "lat.png"], "gpumpi bench: --plot applies to the p2p suite only, not pack"),
        (["bench", "--plot", "lat.svg"], "bench: --plot writes a PNG: give a path ending in .png (got 'lat.svg')"),
        (["bench", "--plot", "/no-such-dir/lat.png"], "gpumpi bench: --plot /no-such-dir/lat.png: no such folder"),
    ],
)
def test_plot_argument_errors(argv, message, capsys, no_launch):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


@needs_matplotlib
def test_plot_sweeps_0_to_64k_unless_sizes_are_given(tmp_path):
    def validated(*argv):
        args = cli.build_parser().parse_args(["bench", *argv])
        return args, cli._validate(args)

    png = str(tmp_path / "lat.png")
    args, sizes = validated("--plot", png)
    assert sizes == SIZES
    inner = cli.inner_argv(args, "gpumpi", "/tmp/g.json")
    assert inner[inner.index("--sizes") + 1] == ",".join(map(str, SIZES)) and "--plot" not in inner
    assert validated("--plot", png, "--quick")[1] == SIZES  # --quick: fewer iterations, the same sweep
    assert validated("--plot", png, "--sizes", "8,1K")[1] == [8, 1024]
    assert validated()[1] == bench.p2p.parse_sizes(None)  # without --plot: the usual 0 B ... 16 MiB


# ---------------------------------------------------------------- end to end


@needs_matplotlib
@needs_launcher
def test_plot_through_the_cli(tmp_path):
    """A tiny sweep on 2 ranks writes the chart and the JSON it is drawn from (mpi4py too where mpiexec is)."""
    compare = ["--compare", "mpi4py"] if MPIEXEC and HAVE_MPI4PY else []
    png, jpath = tmp_path / "lat.png", tmp_path / "lat.json"
    out = run_bench("p2p", "--sizes", "0,8,64", "--iters", "20", "--quiet", *compare, "--plot", str(png),
                    "--json", str(jpath))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "# Wrong values : 0 OK"
    width, height, pixels = _png(png)
    assert (width, height) == (13 * 110, 5 * 110)
    assert png.stat().st_size > 20_000 and len(set(pixels)) > 50
    doc = json.loads(jpath.read_text())
    runs = doc.get("runs", [doc])
    assert [r["impl"] for r in runs] == ["gpumpi"] + (["mpi4py"] if compare else [])
    for run in runs:
        assert [r["size"] for r in run["results"]] == [0, 8, 64]
        assert all(r["latency_us"] > 0 for r in run["results"])
        assert run["host"] == bench.report.host_words()
    # the chart of the stored document has one latency line per run, at the measured values
    fig = plot.plot_latency(doc, str(tmp_path / "again.png"))
    for line, run in zip(fig.axes[0].get_lines(), runs):
        assert list(line.get_xdata()) == [4.0, 8.0, 64.0]
        assert list(line.get_ydata()) == [r["latency_us"] for r in run["results"]]
