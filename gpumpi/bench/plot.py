"""The latency chart of ``gpumpi bench p2p --plot PATH`` (L6): one-way latency against message
size, one line per implementation, as a PNG.

Theory of operation
===================
The chart is drawn from the document that ``--json`` writes, never from a run of its own:
a single run's document (``{**metadata, "results": rows}``) gives one line, a
``--compare`` document gives one line per entry of its ``runs``.  :func:`plot_runs`
finds the runs in a document, :func:`latency_series` turns each into a labelled
:class:`Series` (pure: no matplotlib), and :func:`plot_latency` draws them and writes
the file, so the chart of a stored JSON file can be redrawn without running anything::

    plot_latency(read_json("lat.json"), "lat.png")

The axes: one-way latency in microseconds on a log y axis; message size in bytes on a
log2 x axis, with a tick at every power of two of the sweep (every other one labelled
when there are more than :data:`_MAX_LABELS`).  A log axis has no place for 0 B, so
the zero-byte message is drawn half a step left of the smallest positive size
(:func:`zero_position`), at a tick labelled ``0``, with a dotted line between it and
the rest.  A second panel shows the bandwidth (``bw`` solid, ``bibw`` dashed) of the
sizes above 0 B when the rows have it.  Each line's legend entry names the
implementation and its MPI library (the ``MPI library`` string of the tables), and
says so when the run counted wrong bytes; the title names the implementations, the
ranks, the buffers and the machine.

matplotlib is imported only inside :func:`check_matplotlib` and :func:`plot_latency`,
and only its object API is used (a ``Figure`` on an Agg canvas, no ``pyplot``): no
global backend is chosen, no display is needed, and nothing is left registered
after the file is written.  ``gpumpi bench`` calls :func:`check_matplotlib` while it
validates its arguments, before anything is launched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from ._common import BenchError, default_sizes
from .report import buffer_words, ranks_words

#: Largest message of the ``--plot`` sweep when ``--sizes`` is not given (64 KiB).
PLOT_MAX_SIZE = 64 << 10
#: What to install when matplotlib is missing.
INSTALL_HINT = 'pip install ".[bench]"'
#: Above this many power-of-two ticks on the x axis, only every other one is labelled.
_MAX_LABELS = 18
_DPI = 110
#: A log y axis that spans fewer decades than this gets labels between its powers of ten.
_FEW_DECADES = 1.5


class Series(NamedTuple):
    """One implementation's line: its legend label and, per size, the measured values.

    Attributes:
        impl: the implementation (``gpumpi``, ``mpi4py``).
        label: the legend entry.
        sizes: message sizes in bytes, increasing.
        latency_us: one-way latency per size (None: not measured).
        bw_GBps: bandwidth per size (None at 0 B or when not measured).
        bibw_GBps: bidirectional bandwidth per size.
        wrong: wrong bytes of the whole run.
    """

    impl: str
    label: str
    sizes: tuple[int, ...]
    latency_us: tuple[float | None, ...]
    bw_GBps: tuple[float | None, ...]
    bibw_GBps: tuple[float | None, ...]
    wrong: int


def plot_sizes() -> list[int]:
    """The sweep of ``--plot`` without ``--sizes``: 0 B, 1 B, 2 B, 4 B ... :data:`PLOT_MAX_SIZE`."""
    return default_sizes(0, PLOT_MAX_SIZE)


def check_matplotlib() -> None:
    """Raise :class:`BenchError` naming :data:`INSTALL_HINT` unless matplotlib imports.

    ``gpumpi bench --plot`` calls it before launching anything.
    """
    import importlib

    try:
        importlib.import_module("matplotlib")
    except ImportError as e:
        raise BenchError(f"--plot needs matplotlib, which is not installed ({e}): {INSTALL_HINT}") from None


# ---------------------------------------------------------------- series (no matplotlib)


def plot_runs(results) -> list[dict]:
    """The runs of ``results``, each a dict of metadata with its ``results`` rows.

    Args:
        results: a ``--json`` document of the p2p suite (one run, or a ``--compare``
            document whose ``runs`` are the two runs), a sequence of such documents, or
            a run's bare rows (a sequence of dicts with ``size``).

    Returns:
        One document per run.

    Raises:
        BenchError: not p2p results, or nothing recognisable.
    """
    if isinstance(results, dict):
        docs = list(results["runs"]) if "runs" in results else [results]
    elif isinstance(results, Sequence) and results and all(isinstance(r, dict) and "size" in r for r in results):
        docs = [{"suite": "p2p", "results": list(results)}]
    elif isinstance(results, Sequence) and results and all(isinstance(d, dict) for d in results):
        docs = list(results)
    else:
        got = type(results).__name__
        raise BenchError(f"plot_latency: expected a p2p --json document, documents or rows (got {got})")
    for doc in docs:
        suite = doc.get("suite", "p2p")
        if suite != "p2p":
            raise BenchError(f"plot_latency: draws the p2p suite's latency, not {suite} results")
        if not isinstance(doc.get("results"), list):
            raise BenchError(f"plot_latency: a run without its results rows (keys {sorted(doc)})")
    return docs


def legend_label(doc: dict) -> str:
    """``gpumpi 0.1.0`` or ``mpi4py (MPICH Version: 5.0.2)``: the implementation and its MPI library.

    A library string that starts with the implementation's name stands alone, without
    its parenthesised details; ``unknown`` or no library leaves the name alone.
    """
    impl = doc.get("impl", "p2p")
    library = str(doc.get("library") or "unknown")
    if library == "unknown":
        return impl
    if library.lower().startswith(impl.lower()):
        return library.split(" (", 1)[0]
    return f"{impl} ({library})"


def latency_series(results) -> list[Series]:
    """The lines of the chart, one per run of ``results`` (see :func:`plot_runs`).

    Rows are sorted by size; a label is primed (``mpi4py'``) when two runs have the
    same one, and ends with ``WRONG`` and the count when the run counted wrong bytes.
    """
    out: list[Series] = []
    seen: set[str] = set()
    for doc in plot_runs(results):
        rows = sorted(doc["results"], key=lambda r: r["size"])
        label = legend_label(doc)
        while label in seen:
            impl = doc.get("impl", "p2p")
            label = label.replace(impl, impl + "'", 1) if impl in label else label + "'"
        seen.add(label)
        wrong = sum(int(r.get("wrong") or 0) for r in rows)
        out.append(
            Series(
                impl=doc.get("impl", "p2p"),
                label=label + (f", WRONG: {wrong} bytes" if wrong else ""),
                sizes=tuple(int(r["size"]) for r in rows),
                latency_us=tuple(_value(r.get("latency_us")) for r in rows),
                bw_GBps=tuple(_value(r.get("bw_GBps")) for r in rows),
                bibw_GBps=tuple(_value(r.get("bibw_GBps")) for r in rows),
                wrong=wrong,
            )
        )
    return out


def _value(v) -> float | None:
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None  # a log axis cannot show it
    return float(v)


def zero_position(sizes) -> float:
    """Where 0 B sits on the log2 x axis: half the smallest positive size (1.0 when there is none)."""
    positive = [s for s in sizes if s > 0]
    return min(positive) / 2 if positive else 1.0


def size_label(n: float) -> str:
    """A tick label: ``0``, ``512``, ``1K``, ``64K``, ``16M``, ``1G`` (powers of 1024 where exact)."""
    n = int(n)
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def size_ticks(sizes) -> tuple[list[float], list[str], list[float]]:
    """The x ticks of a sweep: ``(labelled positions, their labels, unlabelled positions)``.

    A tick at every power of two from the one at or below the smallest positive size
    to the one at or above the largest, every other one labelled when there are more
    than :data:`_MAX_LABELS`, and ``0`` at :func:`zero_position` when 0 B is measured.
    """
    positive = [s for s in sizes if s > 0]
    ticks: list[float] = []
    if positive:
        lo = math.floor(math.log2(min(positive)))
        hi = math.ceil(math.log2(max(positive)))
        ticks = [float(2**e) for e in range(lo, hi + 1)]
    step = 2 if len(ticks) > _MAX_LABELS else 1
    major, minor = ticks[::step], [t for i, t in enumerate(ticks) if i % step]
    labels = [size_label(t) for t in major]
    if any(s == 0 for s in sizes):
        major.insert(0, zero_position(sizes))
        labels.insert(0, "0")
    return major, labels, minor


def chart_title(results) -> str:
    """The title: who, how many ranks, which buffers, and on which machine.

    E.g. ``gpumpi vs mpi4py: p2p one-way latency, 2 ranks, host numpy buffers`` and,
    on a second line, ``on node7 (x86_64, 16 CPUs)`` when the runs name their host.
    """
    docs = plot_runs(results)
    impls = [d.get("impl", "p2p") for d in docs]
    who = " vs ".join(impls)
    kinds = [(d.get("impl", "p2p"), d.get("buffer", "numpy"), d.get("devices")) for d in docs]
    if len({k for _, k, _ in kinds}) == 1:
        buffers = buffer_words(kinds[0][1], kinds[0][2])
    else:
        buffers = ", ".join(f"{impl} on {buffer_words(kind, dev)}" for impl, kind, dev in kinds)
    nranks = docs[0].get("nranks")
    ranks = f", {ranks_words(nranks)}" if nranks is not None else ""
    title = f"{who}: p2p one-way latency{ranks}, {buffers}"
    hosts = list(dict.fromkeys(d["host"] for d in docs if d.get("host")))
    if hosts:
        title += "\non " + " and ".join(hosts)
    return title


# ---------------------------------------------------------------- drawing


def _plain_log_labels(ax) -> None:
    """Label a log y axis with plain numbers (0.01, 1, 100, not 10^-2); when it spans less than
    :data:`_FEW_DECADES` decades, its 2, 3, 4 and 6 ticks too, so that a flat latency has numbers."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    lo, hi = ax.get_ylim()
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    if lo > 0 and math.log10(hi / lo) < _FEW_DECADES:

        def minor(v, _pos):
            mantissa = round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6)
            return f"{v:g}" if mantissa in (2, 3, 4, 6) else ""

        ax.yaxis.set_minor_formatter(FuncFormatter(minor))
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def plot_latency(results, path: str, *, bandwidth: bool = True, title: str | None = None, dpi: int = _DPI):
    """Draw one-way latency against message size, one line per run, and write it as a PNG.

    Args:
        results: what :func:`plot_runs` takes: a p2p ``--json`` document (one run, or
            a ``--compare`` document with its ``runs``), documents, or bare rows.
        path: the PNG file to write.
        bandwidth: add a second panel with ``bw`` and ``bibw`` when the rows have them.
        title: the chart's title; None means :func:`chart_title`.
        dpi: dots per inch (the latency panel alone is 7.5 x 5 inches; with
            bandwidth 13 x 5).

    Returns:
        The matplotlib ``Figure`` after it was written (for inspection; it holds no
        window and needs no closing).

    Raises:
        BenchError: matplotlib is missing, the results are not p2p results, or no run
            has a latency to draw.
    """
    series = latency_series(results)
    if not any(v is not None for s in series for v in s.latency_us):
        sizes = sorted({n for s in series for n in s.sizes})
        raise BenchError(f"plot_latency: no latency to plot ({len(series)} runs, sizes {sizes})")
    check_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    with_bw = bandwidth and any(v is not None for s in series for v in s.bw_GBps + s.bibw_GBps)
    fig = Figure(figsize=(13.0, 5.0) if with_bw else (7.5, 5.0), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2 if with_bw else 1, squeeze=False)[0]
    all_sizes = sorted({n for s in series for n in s.sizes})
    zero_at = zero_position(all_sizes)
    markers = ("o", "s", "^", "D", "v")

    lat = axes[0]
    for i, s in enumerate(series):
        points = [(zero_at if n == 0 else n, v) for n, v in zip(s.sizes, s.latency_us) if v is not None]
        xs, ys = zip(*points) if points else ((), ())
        lat.plot(xs, ys, marker=markers[i % len(markers)], linestyle="-" if i == 0 else "--", label=s.label)
    lat.set_ylabel("one-way latency (µs)")
    lat.set_title("latency (ping-pong, half the round trip)", fontsize="medium")

    panels = [lat]
    if with_bw:
        bw = axes[1]
        for i, s in enumerate(series):
            color = lat.lines[i].get_color()
            for key, values, style in (("bw", s.bw_GBps, "-"), ("bibw", s.bibw_GBps, ":")):
                points = [(n, v) for n, v in zip(s.sizes, values) if v is not None and n > 0]
                if points:
                    xs, ys = zip(*points)
                    bw.plot(xs, ys, marker=markers[i % len(markers)], linestyle=style, color=color,
                            label=f"{s.label} {key}")  # fmt: skip
        bw.set_ylabel("bandwidth (GB/s, 1e9 B/s)")
        bw.set_title("bandwidth (bw: window of Isend; bibw: both ways)", fontsize="medium")
        panels.append(bw)

    for ax in panels:
        sizes = all_sizes if ax is lat else [n for n in all_sizes if n > 0]  # bandwidth has no 0 B
        major, labels, minor = size_ticks(sizes)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(major, labels, fontsize="small")
        ax.set_xticks(minor, minor=True)
        ax.xaxis.set_minor_formatter(NullFormatter())
        _plain_log_labels(ax)
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="major", alpha=0.45)
        ax.grid(True, which="minor", axis="y", alpha=0.15)
        ax.legend(fontsize="small")
    if 0 in all_sizes and len(all_sizes) > 1:
        first = min(n for n in all_sizes if n > 0)
        lat.axvline(math.sqrt(zero_at * first), color="0.5", linestyle=":", linewidth=1)  # 0 B stands apart
    fig.suptitle(chart_title(results) if title is None else title)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return fig
