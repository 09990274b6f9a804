"""What the ``gpumpi bench`` suites share to report results (L6): run metadata, header words,
aligned columns, number formats, ratios, and JSON/CSV files.

Theory of operation
===================
A suite's rows are plain dicts (one per size or per measurement) and a run's
:func:`metadata` is a plain dict, so that one JSON document (``{**meta, "results":
rows}``) carries a run and a ``--compare`` run carries both runs plus the merged rows.
Tables are text: two ``#`` header lines (column names, units) and right-aligned cells
from :func:`format_columns`, a missing value printed as ``-``, and a closing
``# Wrong values : N OK|FAILED`` line (:func:`wrong_footer`).  Ratios are oriented so
that a value above 1 means the implementation under test is better (:func:`ratio` does
the division; each suite says which way round).  Each suite formats its own table from
these pieces; this module knows no suite's columns and imports no suite.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
from collections.abc import Sequence

from ._common import DEVICE_BUFFER_KINDS, WINDOW

# ---------------------------------------------------------------- run metadata


def library_version(MPI) -> str:
    """First line of ``MPI.Get_library_version()``, or ``"unknown"``."""
    try:
        text = MPI.Get_library_version()
    except Exception:  # a partial MPI module: report, don't fail the benchmark
        return "unknown"
    lines = str(text).strip().splitlines()
    return " ".join(lines[0].split()) if lines else "unknown"


def host_words() -> str:
    """This machine in a few words, e.g. ``node7 (x86_64, 16 CPUs)``: the ``host`` of :func:`metadata`."""
    cpus = os.cpu_count()
    arch = platform.machine() or "unknown machine"
    return f"{platform.node() or 'unknown host'} ({arch}, {cpus or '?'} CPU{'' if cpus == 1 else 's'})"


def metadata(
    MPI,
    impl: str,
    *,
    suite: str = "p2p",
    nranks: int,
    buffer: str = "numpy",
    window: int = WINDOW,
    distinct_recv: bool = False,
    transport: str = "auto",
    transports_env: str | None = None,
    devices: Sequence[int] | int | None = None,
) -> dict:
    """Describe a run: implementation, MPI library, ranks, buffers (for JSON and headers).

    Args:
        MPI: the measured MPI module.
        impl: ``"gpumpi"`` or ``"mpi4py"``.
        suite: ``"p2p"``, ``"pack"`` or ``"p2p-matrix"``.
        nranks: ranks of the run.
        buffer: buffer kind.
        window, distinct_recv: the p2p bandwidth settings.
        transport: ``--transport`` (recorded for device buffers and p2p-matrix).
        transports_env: ``GPUMPI_TRANSPORTS`` as the ranks read it (None: not known).
        devices: p2p: the devices of ranks 0 and 1; p2p-matrix: the node's device count.

    Returns:
        A dict; ``host`` is :func:`host_words` of the rank that calls it; the transport
        keys appear only for device buffers.
    """
    device_keys = {}
    if buffer in DEVICE_BUFFER_KINDS or suite == "p2p-matrix":
        device_keys = {"transport": transport, "transports_env": transports_env, "devices": devices}
    base = {"suite": suite, "impl": impl, "library": library_version(MPI), "host": host_words(), "nranks": nranks,
            "buffer": buffer}  # fmt: skip
    if suite == "p2p-matrix":
        return {**base, **device_keys,
                "units": {"size": "B", "bandwidth": "GB/s (1e9 B/s)", "time": "s", "warm_pct_copy": "%"}}
    if suite == "pack":
        return {**base, "units": {"block": "B", "bandwidth": "GB/s (1e9 B/s)", "first": "ms"}}
    return {**base, "window": window, "distinct_recv": distinct_recv, **device_keys,
            "units": {"size": "B", "latency": "us", "bandwidth": "GB/s (1e9 B/s)"}}


# ---------------------------------------------------------------- header words


_BUFFER_WORDS = {
    "numpy": "host numpy buffers",
    "sim": "sim buffers (simulated device memory, SimDeviceArray)",
    "cupy": "cupy buffers (CUDA device memory)",
}

# why --compare mpi4py runs on host numpy buffers when gpumpi runs on device buffers
REF_HOST_WHY = {
    "sim": "mpi4py cannot take gpumpi's simulated device memory",
    "cupy": "mpi4py takes CuPy arrays only over a CUDA-aware MPI, which pip's MPICH is not",
}


def buffer_words(buffer: str, devices=None) -> str:
    words = _BUFFER_WORDS.get(buffer, f"{buffer} buffers")
    if buffer == "cupy" and isinstance(devices, (list, tuple)) and len(devices) >= 2:
        words += f", rank 0 on GPU {devices[0]}, rank 1 on GPU {devices[1]}"
    return words


def ranks_words(nranks) -> str:
    return f"{nranks} rank" if int(nranks) == 1 else f"{nranks} ranks"


def transport_words(meta: dict | None) -> str:
    """The ``# device transport: ...`` header line of a run on device buffers."""
    meta = meta or {}
    transport = meta.get("transport", "auto")
    env = meta.get("transports_env")
    if transport == "auto":
        if env:
            return f"# device transport: auto, with GPUMPI_TRANSPORTS={env} from the environment"
        return "# device transport: auto (gpumpi's choice: cuda_ipc where it can, else staging)"
    forced = {"staging": "every device message is staged through host memory",
              "cuda_ipc": "cuda_ipc preferred, staging where IPC is impossible"}.get(transport, transport)  # fmt: skip
    return f"# device transport: {transport} (GPUMPI_TRANSPORTS={env or 'device:' + transport}: {forced})"


# ---------------------------------------------------------------- cells and columns


def format_cell(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def fmt_ratio(value) -> str:
    """Two decimals, or two significant digits below 0.1 (a 1000x slowdown is not 0.00)."""
    if value is not None and 0 < value < 0.1:
        return format_cell(value, ".2g")
    return format_cell(value, ".2f")


def format_columns(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]]) -> list[str]:
    """Right-align cells under two-line headers.

    Args:
        columns: ``(name, unit)`` pairs; unit may be ``""``.
        rows: rows of already formatted cells.

    Returns:
        Lines; the two header lines start with ``#``.
    """
    widths = []
    for i, (name, unit) in enumerate(columns):
        w = max(len(name), len(unit), *(len(r[i]) for r in rows)) if rows else max(len(name), len(unit))
        widths.append(w)
    widths[0] = max(widths[0] + 1, 9)  # room for the leading '#'

    def line(cells):
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths)).rstrip()

    out = ["#" + line([n for n, _ in columns])[1:], "#" + line([u for _, u in columns])[1:]]
    out.extend(line(r) for r in rows)
    return out


def wrong_footer(total: int) -> str:
    return f"# Wrong values : {total} {'OK' if total == 0 else 'FAILED'}"


def ratio(numerator, denominator) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None:
        return None
    if denominator == 0:
        return None
    return numerator / denominator


# ---------------------------------------------------------------- files


def write_json(path: str, document: dict) -> None:
    """Write a results document (metadata plus ``results`` rows) as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2, sort_keys=False)
        f.write("\n")


def read_json(path: str) -> dict:
    """Read a document written by :func:`write_json`."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_csv(path: str, rows: Sequence[dict], extra: dict | None = None) -> None:
    """Write result rows as CSV, one row per size; nested ``iters`` are flattened.

    Args:
        path: output file.
        rows: a suite's result rows, or the merged rows of a comparison.
        extra: constant columns prepended to every row (e.g. ``{"impl": "mpi4py"}``).
    """
    flat = []
    for r in rows:
        d = dict(extra or {})
        for k, v in r.items():
            if k == "iters" and isinstance(v, dict):
                for test, (n, w) in v.items():
                    d[f"iters_{test}"] = n
                    d[f"skip_{test}"] = w
            else:
                d[k] = "" if v is None else v
        flat.append(d)
    fields: list[str] = []
    for d in flat:
        for k in d:
            if k not in fields:
                fields.append(k)
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(flat)
