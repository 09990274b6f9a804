"""Benchmark suites of ``gpumpi bench`` (L6): ``p2p``, ``pack``, ``p2p-matrix``, ``coll``, ``rma`` and ``ga``.

Theory of operation
===================
A *suite* is one module of this package: a run function that takes the MPI module
first (so the same code measures ``gpumpi.MPI`` and ``mpi4py.MPI``), returns one dict
per measurement on rank 0, and counts the bytes that arrived wrong; the functions that
format those rows as tables and progress lines, and pair two implementations' rows
for ``--compare``; and, at its end, ``SUITE``, a :class:`~gpumpi.bench._common.Suite`
that names these functions and says which buffers and how many ranks the suite takes
(``ranks``: the one number it runs on, such as the ga suite's 4).
:data:`SUITES` collects them by name; the ``gpumpi`` command (:mod:`gpumpi.cli`) reads
it to validate a suite and its ``--sizes``, and the functions below dispatch on it, so
a table of rows finds its suite by ``meta["suite"]`` or by the key only its rows have.

What the suites share lives in two modules that import no suite: ``_common`` (sizes,
buffer kinds and devices, the buffers, pair synchronisation, wrong-value counts, the
message tags) and ``report`` (run metadata, columns, number formats, ratios, JSON and
CSV).  ``plot`` draws the p2p suite's latency chart (``--plot``) from the same documents,
importing matplotlib only when it is called.  A new suite is one new module that builds
its ``SUITE``, plus its line in :data:`SUITES` (and the command-line options it needs in
``cli``).

Nothing heavy is imported at package import time; numpy is imported by the suites.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from . import coll, ga, io, p2p, p2p_matrix, pack, plot, rma
from ._common import (
    BUFFER_KINDS,
    DEVICE_BUFFER_KINDS,
    TRANSPORTS,
    WINDOW,
    BenchError,
    Suite,
    check_device_buffers,
    check_transport,
    cupy_status,
    device_count,
    pair_devices,
    transports_setting,
)
from ._common import check_buffer_kind as _check_buffer_kind
from .report import metadata, read_json, write_csv, write_json

#: The suites ``gpumpi bench`` knows, by name; :func:`suite_of` tries their ``row_key`` in this order.
SUITES: dict[str, Suite] = {
    s.name: s for s in (p2p.SUITE, pack.SUITE, p2p_matrix.SUITE, coll.SUITE, rma.SUITE, ga.SUITE, io.SUITE)
}

__all__ = [
    "BUFFER_KINDS", "DEVICE_BUFFER_KINDS", "SUITES", "TRANSPORTS", "WINDOW", "BenchError", "Suite",
    "check_buffer_kind", "check_device_buffers", "check_transport", "coll", "compare_results", "cupy_status",
    "device_count", "ga", "ga_reference", "io",
    "format_compare_table", "format_progress", "format_table", "metadata", "p2p", "p2p_matrix", "pack",
    "pair_devices", "plot", "read_json", "rma", "stderr_progress", "suite_of", "transports_setting", "write_csv",
    "write_json",
]  # fmt: skip


def check_buffer_kind(buffer: str, suite: str = "p2p") -> None:
    """Raise :class:`BenchError` unless the suite named ``suite`` can run on ``buffer`` buffers.

    ``p2p``, ``coll`` and ``rma`` take every kind of :data:`BUFFER_KINDS`; ``pack`` only ``numpy``;
    ``p2p-matrix`` only the device kinds (:data:`DEVICE_BUFFER_KINDS`); a name that is
    no suite only checks the kind.  Whether CuPy and a GPU are there is
    :func:`check_device_buffers`'s question.
    """
    _check_buffer_kind(buffer, SUITES.get(suite))


def suite_of(rows: Sequence[dict], meta: dict | None = None) -> Suite:
    """The suite that made ``rows``: the one ``meta["suite"]`` names, else the first whose
    ``row_key`` a row has, in the order of :data:`SUITES`; p2p when none does."""
    name = meta.get("suite") if meta else None
    for suite in SUITES.values():
        if suite.row_key is not None and (name == suite.name or any(suite.row_key in r for r in rows)):
            return suite
    return p2p.SUITE


def format_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format a suite's results (rows of all its runs) as aligned text with a descriptive header.

    Args:
        rows: the results.
        meta: the run's :func:`metadata`; None prints only the columns.

    Returns:
        The table text of the suite that made the rows (:func:`suite_of`), ending with a
        ``# Wrong values`` footer.
    """
    return suite_of(rows, meta).format_table(rows, meta)


def format_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# mpi4py p2p [3/5] 65536 B: lat 12.30 us ...``."""
    return suite_of([row]).format_progress(index, count, row, impl)


def _comparing(suite: Suite, call: str) -> Suite:
    if suite.compare_results is None or suite.format_compare_table is None:
        raise BenchError(f"{call}: the {suite.name} suite measures gpumpi alone (no comparison of two runs)")
    return suite


def compare_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two runs of one suite and compute ratios where >1 means ``rows`` is better.

    Args:
        rows: results of the implementation under test (e.g. gpumpi).
        ref_rows: results of the reference (e.g. mpi4py).

    Returns:
        One dict per measurement present in both, as the suite's ``compare_results``
        makes it (p2p: :func:`~gpumpi.bench.p2p.compare_p2p_results`; pack:
        :func:`~gpumpi.bench.pack.compare_pack_results`; coll:
        :func:`~gpumpi.bench.coll.compare_coll_results`; rma:
        :func:`~gpumpi.bench.rma.compare_rma_results`; ga:
        :func:`~gpumpi.bench.ga.compare_ga_results`).

    Raises:
        BenchError: the rows are of a suite without a comparison (p2p-matrix).
    """
    return _comparing(suite_of(rows), "compare_results").compare_results(rows, ref_rows)


def format_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_results` as aligned text, with the suite's ratio columns.

    Args:
        merged: the paired rows.
        meta: metadata of the implementation under test.
        ref_meta: metadata of the reference implementation.

    Raises:
        BenchError: a suite without a comparison (p2p-matrix).
    """
    suite = _comparing(suite_of(merged, meta), "format_compare_table")
    return suite.format_compare_table(merged, meta, ref_meta)


def ga_reference(sizes=None, *, iters=None, skip=None, quick=False, log=None) -> dict:
    """The ``ga`` run of ``gpumpi bench ga --compare ga``: GA's own C library on the same plans
    (:func:`gpumpi.bench._ga_ref.reference_document`; built on first use, so imported only here).
    Never raises: where a step fails, the document has no results and ``skipped`` says why."""
    from . import _ga_ref

    return _ga_ref.reference_document(sizes, iters=iters, skip=skip, quick=quick, log=log)


def stderr_progress(impl: str) -> Callable[[int, int, dict], None]:
    """A progress callback for a suite's run function that prints one line per row to stderr."""

    def report(index: int, count: int, row: dict) -> None:
        print(format_progress(index, count, row, impl), file=sys.stderr, flush=True)

    return report
