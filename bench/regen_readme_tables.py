#!/usr/bin/env python3
"""Regenerate the gpumpi-vs-mpi4py comparison tables (Markdown) and plots (PNG) of the README.

Theory of operation
===================
For each suite (``p2p``, ``pack``, ``coll``, ``rma``) the script runs, from the repository root,

    python -m gpumpi.cli bench SUITE --compare mpi4py --quiet -n NP --json OUT/SUITE.json [--quick]

which launches the suite once on gpumpi and once on mpi4py + MPICH and writes one JSON
document (metadata, both runs under ``runs``, the paired rows with ratios under
``results``).  From that document it writes ``OUT/SUITE.md`` (a Markdown table with the
ratios) and, when matplotlib is importable (``pip install ".[bench]"``), PNG plots
``OUT/SUITE-*.png``.  ``--from-json`` skips the runs and rebuilds the tables and plots
from the JSON files already in ``OUT``.

``--readme PATH`` puts each table (and links to its plots) into ``PATH`` between the
lines ``<!-- bench:SUITE -->`` and ``<!-- /bench:SUITE -->``; a file without those
markers is left as it is (the script says so).  Nothing is spliced when a run failed,
counted wrong bytes, or the two implementations disagreed on a datatype's extent: the
script then exits with status 1.

Needs mpi4py and mpiexec (``pip install ".[bench]"`` installs mpi4py, mpich and
matplotlib).  Numbers are whatever this machine measures; nothing is made up or kept
from an earlier run except with ``--from-json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITES = ("p2p", "pack", "coll", "rma")


def bench_args(suite: str, json_path: str, np: int, quick: bool) -> list[str]:
    """The ``gpumpi bench`` arguments that measure ``suite`` on gpumpi and mpi4py."""
    args = ["bench", suite, "--compare", "mpi4py", "--quiet", "-n", str(np), "--json", json_path]
    return args + (["--quick"] if quick else [])


def size_words(n: int) -> str:
    """``8 B``, ``64 KiB``, ``16 MiB``: sizes of the sweeps are powers of two."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def cell(value, spec: str) -> str:
    """``value`` in ``spec``, with two significant digits below 0.1 (8 B moves at 0.0012 GB/s, not 0.00)."""
    if value is None:
        return "-"
    return format(value, ".2g" if spec == ".2f" and 0 < value < 0.1 else spec)


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def caption(doc: dict, command: str) -> list[str]:
    runs = {r["impl"]: r for r in doc.get("runs", [])}
    libs = "; ".join(f"{impl}: {r.get('library', 'unknown')}" for impl, r in runs.items())
    return [
        f"{doc['impl']} vs {doc['compare']}, `{doc['suite']}` suite, {doc['nranks']} ranks, "
        f"{doc.get('buffer', 'numpy')} buffers ({libs}). GB = 1e9 B; ratios above 1 favour {doc['impl']}.",
        "",
        f"Measured with `{command}`.",
        "",
    ]


def p2p_markdown(doc: dict, command: str) -> list[str]:
    a, b = doc["impl"], doc["compare"]
    header = ["size", f"latency {a} (µs)", f"latency {b} (µs)", "speedup", f"bw {a} (GB/s)", f"bw {b} (GB/s)",
              "bw ratio", f"bibw {a} (GB/s)", f"bibw {b} (GB/s)", "bibw ratio"]  # fmt: skip
    rows = [
        [size_words(m["size"]), cell(m["latency_us"], ".2f"), cell(m["ref_latency_us"], ".2f"),
         cell(m["speedup"], ".2f"), cell(m["bw_GBps"], ".2f"), cell(m["ref_bw_GBps"], ".2f"), cell(m["bw_ratio"], ".2f"),
         cell(m["bibw_GBps"], ".2f"), cell(m["ref_bibw_GBps"], ".2f"), cell(m["bibw_ratio"], ".2f")]
        for m in doc["results"]
    ]  # fmt: skip
    return caption(doc, command) + markdown_table(header, rows)


def pack_markdown(doc: dict, command: str) -> list[str]:
    a, b = doc["impl"], doc["compare"]
    packs = [m for m in doc["results"] if m["test"] == "pack"]
    sends = [m for m in doc["results"] if m["test"] == "strided-send"]
    out = caption(doc, command)
    if packs:
        header = ["type", "block", f"pack {a} (GB/s)", f"pack {b} (GB/s)", "pack ratio", f"unpack {a} (GB/s)",
                  f"unpack {b} (GB/s)", "unpack ratio", f"first {a} (ms)", f"first {b} (ms)",
                  "first speedup"]  # fmt: skip
        rows = [
            [m["type"], size_words(m["block"]), cell(m["pack_GBps"], ".2f"), cell(m["ref_pack_GBps"], ".2f"),
             cell(m["pack_ratio"], ".2f"), cell(m["unpack_GBps"], ".2f"), cell(m["ref_unpack_GBps"], ".2f"),
             cell(m["unpack_ratio"], ".2f"), cell(m["first_ms"], ".3f"), cell(m["ref_first_ms"], ".3f"),
             cell(m["first_speedup"], ".2g")]
            for m in packs
        ]  # fmt: skip
        out += markdown_table(header, rows)
    if sends:
        out += ["", f"strided-send: {size_words(sends[0]['bytes'])} of a vector, dtype = `Send([buf, 1, vector])`, "
                    "manual = NumPy copy + `Send` of bytes.", ""]  # fmt: skip
        header = ["block", f"dtype {a} (GB/s)", f"dtype {b} (GB/s)", "dtype ratio", f"manual {a} (GB/s)",
                  f"manual {b} (GB/s)", "manual ratio"]  # fmt: skip
        rows = [
            [size_words(m["block"]), cell(m["dtype_GBps"], ".2f"), cell(m["ref_dtype_GBps"], ".2f"),
             cell(m["dtype_ratio"], ".2f"), cell(m["manual_GBps"], ".2f"), cell(m["ref_manual_GBps"], ".2f"),
             cell(m["manual_ratio"], ".2f")]
            for m in sends
        ]  # fmt: skip
        out += markdown_table(header, rows)
    return out


def coll_markdown(doc: dict, command: str) -> list[str]:
    a, b = doc["impl"], doc["compare"]
    header = ["collective", "size", f"time {a} (µs)", f"time {b} (µs)", "speedup", f"busbw {a} (GB/s)",
              f"busbw {b} (GB/s)"]  # fmt: skip
    rows = [
        [m["coll"], size_words(m["size"]), cell(m["time_us"], ".2f"), cell(m["ref_time_us"], ".2f"),
         cell(m["speedup"], ".2f"), cell(m["busbw_GBps"], ".2f"), cell(m["ref_busbw_GBps"], ".2f")]
        for m in doc["results"]
    ]  # fmt: skip
    note = [f"`{doc.get('dtype', 'float64')}`, op `{doc.get('op', 'sum')}`, root {doc.get('root', 0)}; time per call "
            "averaged over the ranks; busbw with nccl-tests' factors; speedup = "
            f"{b} time / {a} time.", ""]  # fmt: skip
    return caption(doc, command) + note + markdown_table(header, rows)


def rma_markdown(doc: dict, command: str) -> list[str]:
    a, b = doc["impl"], doc["compare"]
    header = ["test", "size", f"time {a} (µs)", f"time {b} (µs)", "speedup", f"bw {a} (MB/s)", f"bw {b} (MB/s)"]
    rows = [
        [m["rma"], size_words(m["size"]), cell(m["time_us"], ".2f"), cell(m["ref_time_us"], ".2f"),
         cell(m["speedup"], ".2f"), cell(m["bw_MBps"], ".0f"), cell(m["ref_bw_MBps"], ".0f")]
        for m in doc["results"]
    ]  # fmt: skip
    skipped = [r["skipped"] for r in doc.get("runs", []) if r.get("skipped")]
    note = [f"window `{doc.get('window', 'allocate')}`; rank 0 origin, rank 1 target, one `Lock(1, LOCK_SHARED)` "
            "epoch per measurement; time per operation (bw tests: a window of 64 and its `Flush`, over 64; "
            "fop/cas: with `Flush_local`); MB = 1e6 B; speedup = "
            f"{b} time / {a} time.", ""]  # fmt: skip
    if skipped:
        note += [f"{b} not run: {skipped[0]}.", ""]
    return caption(doc, command) + note + markdown_table(header, rows)


def problems(doc: dict) -> list[str]:
    """Why the results must not go into the README (wrong bytes, extents that differ)."""
    bad = []
    for m in doc["results"]:
        what = size_words(m["size"]) if "size" in m else f"{m.get('test')} {m.get('type')} {m.get('block')} B"
        what = f"{m['coll']} {what}" if "coll" in m else what
        what = f"{m['rma']} {what}" if "rma" in m else what
        if m.get("wrong") or m.get("ref_wrong"):
            counts = f"{m.get('wrong')} {doc['impl']}, {m.get('ref_wrong')} {doc['compare']}"
            bad.append(f"{doc['suite']} {what}: wrong bytes ({counts})")
        if m.get("extent_ok") is False:
            bad.append(f"{doc['suite']} {what}: extents differ")
    return bad


def plots(doc: dict, out_dir: str) -> list[str]:
    """PNG plots of one comparison; [] when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("regen_readme_tables: matplotlib is not installed (pip install '.[bench]'): no plots", file=sys.stderr)
        return []
    a, b = doc["impl"], doc["compare"]
    suite = doc["suite"]
    if suite == "coll":
        rows = [m for m in doc["results"] if m["size"] > 0]
        colls = list(dict.fromkeys(m["coll"] for m in rows))
        x = sorted({m["size"] for m in rows})
        xlabel = "size (B)"
        by = {(m["coll"], m["size"]): m for m in rows}
        series = [(c, f"{c} busbw (GB/s)",
                   [[by[(c, s)]["busbw_GBps"] if (c, s) in by else None for s in x],
                    [by[(c, s)]["ref_busbw_GBps"] if (c, s) in by else None for s in x]]) for c in colls]  # fmt: skip
    elif suite == "rma":
        rows = [m for m in doc["results"] if m["size"] > 0 and m["rma"] in ("put_lat", "get_lat", "put_bw", "get_bw",
                                                                              "acc_bw")]  # fmt: skip
        x = sorted({m["size"] for m in rows})
        xlabel = "bytes per operation"
        by = {(m["rma"], m["size"]): m for m in rows}
        series = []
        for tests, key, title in ((("put_lat", "get_lat"), "time_us", "Put/Get + Flush (µs)"),
                                  (("put_bw", "get_bw", "acc_bw"), "bw_MBps", "bandwidth, window of 64 (MB/s)")):
            ys = [(t, [by[(t, s)][key] if (t, s) in by else None for s in x],
                   [by[(t, s)][f"ref_{key}"] if (t, s) in by else None for s in x]) for t in tests]  # fmt: skip
            series.append((key, title, ys))
    elif suite == "p2p":
        rows = [m for m in doc["results"] if m["size"] > 0]
        panels = [("latency_us", "one-way latency (µs)"), ("bw_GBps", "bandwidth (GB/s)"),
                  ("bibw_GBps", "bidirectional bandwidth (GB/s)")]  # fmt: skip
        x = [m["size"] for m in rows]
        xlabel = "message size (B)"
        series = [(key, title, [[m[key] for m in rows], [m[f"ref_{key}"] for m in rows]]) for key, title in panels]
    else:
        series = []
        rows = [m for m in doc["results"] if m["test"] == "pack"]
        types = list(dict.fromkeys(m["type"] for m in rows))
        x = sorted({m["block"] for m in rows})
        xlabel = "contiguous block (B)"
        for key, title in (("pack_GBps", "Pack (GB/s)"), ("unpack_GBps", "Unpack (GB/s)")):
            by = {(m["type"], m["block"]): m for m in rows}
            ys = []
            for t in types:
                ys.append((t, [by[(t, s)][key] if (t, s) in by else None for s in x],
                           [by[(t, s)][f"ref_{key}"] if (t, s) in by else None for s in x]))  # fmt: skip
            series.append((key, title, ys))
    paths = []
    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4), squeeze=False)
    for ax, (key, title, ys) in zip(axes[0], series):
        if suite in ("p2p", "coll"):
            ax.plot(x, ys[0], "o-", label=a)
            ax.plot(x, ys[1], "s--", label=b)
        else:
            for t, mine, ref in ys:
                line = ax.plot(x, mine, "o-", label=f"{t} {a}")[0]
                ax.plot(x, ref, "s--", color=line.get_color(), label=f"{t} {b}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{a} vs {b}: {suite}, {doc['nranks']} ranks, {doc.get('buffer', 'numpy')} buffers")
    fig.tight_layout()
    path = os.path.join(out_dir, f"{suite}-{a}-vs-{b}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths


def splice(readme: str, suite: str, lines: list[str]) -> bool:
    """Put ``lines`` between the ``bench:SUITE`` markers of ``readme``; False when it has none."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    begin, end = f"<!-- bench:{suite} -->", f"<!-- /bench:{suite} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        return False
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    with open(readme, "w", encoding="utf-8") as f:
        f.write(pattern.sub(lambda _: block, text, count=1))
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "bench-results"),
                   help="folder of the JSON, Markdown and PNG files (default bench-results/, which git ignores)")
    p.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated suites (default {','.join(SUITES)})")
    p.add_argument("-n", "--np", type=int, default=2, help="ranks of each run (default 2)")
    p.add_argument("--quick", action="store_true", help="the reduced sweeps of gpumpi bench --quick")
    p.add_argument("--from-json", action="store_true", help="do not run anything: use the JSON files already in --out")
    p.add_argument("--readme", default=None, help="Markdown file whose bench:SUITE marker blocks get the tables")
    args = p.parse_args(argv)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    for s in suites:
        if s not in SUITES:
            print(f"regen_readme_tables: no comparison table for suite {s!r} (known: {', '.join(SUITES)})",
                  file=sys.stderr)  # fmt: skip
            return 2
    os.makedirs(args.out, exist_ok=True)
    bad: list[str] = []
    blocks: dict[str, list[str]] = {}
    for suite in suites:
        json_path = os.path.join(args.out, f"{suite}.json")
        command_path = os.path.join(args.out, f"{suite}.command")
        if not args.from_json:
            bench = bench_args(suite, json_path, args.np, args.quick)
            shown = f"gpumpi bench {suite} --compare mpi4py -n {args.np} --json {suite}.json"
            shown += " --quick" if args.quick else ""
            print(f"# {shown}", file=sys.stderr, flush=True)
            if os.path.exists(json_path):
                os.remove(json_path)  # an old file must not pass for this run's
            rc = subprocess.call([sys.executable, "-m", "gpumpi.cli", *bench], cwd=ROOT)
            if not os.path.exists(json_path):
                print(f"regen_readme_tables: the {suite} run failed (exit status {rc})", file=sys.stderr)
                return rc or 1
            with open(command_path, "w", encoding="utf-8") as f:
                f.write(shown + "\n")
        elif os.path.exists(command_path):
            with open(command_path, encoding="utf-8") as f:
                shown = f.read().strip()
        else:
            shown = f"gpumpi bench {suite} --compare mpi4py (other options unknown: no {command_path})"
        with open(json_path, encoding="utf-8") as f:
            doc = json.load(f)
        bad += problems(doc)
        lines = {"p2p": p2p_markdown, "pack": pack_markdown, "coll": coll_markdown, "rma": rma_markdown}[suite](doc, shown)
        md_path = os.path.join(args.out, f"{suite}.md")
        pngs = plots(doc, args.out)
        with open(md_path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print(f"regen_readme_tables: wrote {md_path}" + "".join(f", {p}" for p in pngs), file=sys.stderr)
        if args.readme:
            here = os.path.dirname(os.path.abspath(args.readme))
            lines = lines + [""] + [f"![{suite}]({os.path.relpath(p, here)})" for p in pngs]
        blocks[suite] = lines
    if bad:
        print("regen_readme_tables: not for the README:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    if args.readme:
        for suite, lines in blocks.items():
            if splice(args.readme, suite, lines):
                print(f"regen_readme_tables: updated the {suite} table in {args.readme}", file=sys.stderr)
            else:
                print(f"regen_readme_tables: {args.readme} has no <!-- bench:{suite} --> ... <!-- /bench:{suite} --> "
                      "block; left as it is", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
