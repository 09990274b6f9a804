"""Tests of the shared reporting of the bench suites (gpumpi/bench/report.py): ratios, JSON and CSV."""

from __future__ import annotations

from gpumpi.bench import report


def _row(size, lat=None, bw=None, bibw=None, wrong=0):
    return {"size": size, "latency_us": lat, "bw_GBps": bw, "bibw_GBps": bibw, "wrong": wrong, "iters": {}}


META = {"suite": "p2p", "impl": "gpumpi", "library": "gpumpi 0.1.0", "nranks": 2, "buffer": "numpy", "window": 64}


def test_ratio():
    assert report.ratio(4.0, 2.0) == 2.0
    assert report.ratio(None, 2.0) is None
    assert report.ratio(1.0, None) is None
    assert report.ratio(1.0, 0.0) is None


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
