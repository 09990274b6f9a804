"""Tests of the bench package itself (gpumpi/bench/__init__.py): the registry of suites, and the
tables, progress lines and comparisons that find their suite through it."""

from __future__ import annotations

import sys

import pytest
from benchtools import run

from gpumpi import bench
from gpumpi.bench import coll, ga, io, p2p, p2p_matrix, pack, rma


def test_bench_module_imports_nothing_heavy():
    code = "import sys, gpumpi.bench, gpumpi.cli; print(sorted(m for m in ('numpy', 'numba', 'cupy', 'mpi4py') if m in sys.modules))"
    out = run([sys.executable, "-c", code], timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_suite_is_registered_under_its_name():
    assert list(bench.SUITES) == ["p2p", "pack", "p2p-matrix", "coll", "rma", "ga", "io"]
    assert [bench.SUITES[n] for n in bench.SUITES] == [p2p.SUITE, pack.SUITE, p2p_matrix.SUITE, coll.SUITE, rma.SUITE,
                                                      ga.SUITE, io.SUITE]  # fmt: skip
    for name, suite in bench.SUITES.items():
        assert suite.name == name
        assert suite.min_ranks >= 1
        assert suite.ranks is None or suite.ranks >= suite.min_ranks
        assert suite.buffers and set(suite.buffers) <= set(bench.BUFFER_KINDS)
        assert (suite.compare_results is None) == (suite.format_compare_table is None)
    row_keys = [s.row_key for s in bench.SUITES.values() if s.row_key is not None]
    assert len(row_keys) == len(set(row_keys)) == len(bench.SUITES) - 1  # p2p's rows are the default


def test_suite_of_reads_the_metadata_then_the_rows():
    assert bench.suite_of([{"size": 8}]) is p2p.SUITE
    assert bench.suite_of([]) is p2p.SUITE
    assert bench.suite_of([{"size": 8}, {"test": "pack"}]) is pack.SUITE
    assert bench.suite_of([{"src_device": 0}]) is p2p_matrix.SUITE
    assert bench.suite_of([{"coll": "allreduce", "size": 8}]) is coll.SUITE
    assert bench.suite_of([], {"suite": "coll"}) is coll.SUITE
    assert bench.suite_of([{"rma": "put_lat", "size": 8}]) is rma.SUITE
    assert bench.suite_of([], {"suite": "rma"}) is rma.SUITE
    assert bench.suite_of([{"ga": "section", "dim": 1}]) is ga.SUITE
    assert bench.suite_of([], {"suite": "ga"}) is ga.SUITE
    assert bench.suite_of([], {"suite": "pack"}) is pack.SUITE
    assert bench.suite_of([], {"suite": "p2p-matrix"}) is p2p_matrix.SUITE
    assert bench.suite_of([{"test": "pack"}], {"suite": "p2p-matrix"}) is pack.SUITE  # registry order decides


def test_check_buffer_kind_by_suite_name():
    bench.check_buffer_kind("sim", "no-such-suite")  # a name that is no suite only checks the kind
    with pytest.raises(bench.BenchError, match=r"^unknown buffer kind 'host'"):
        bench.check_buffer_kind("host", "pack")


def test_a_suite_without_comparison_says_so():
    row = {"src_device": 0, "dst_device": 0, "size": 8, "wrong": 0}
    with pytest.raises(bench.BenchError, match=r"^compare_results: the p2p-matrix suite measures gpumpi alone"):
        bench.compare_results([row], [row])
    with pytest.raises(bench.BenchError, match=r"^format_compare_table: the p2p-matrix suite measures gpumpi alone"):
        bench.format_compare_table([row], {"suite": "p2p-matrix", "impl": "gpumpi"}, {"impl": "mpi4py"})
