"""Global Arrays printing: ``print_patch``, ``print_stdout``, ``print_distribution``, ``summarize`` (L6).

Theory of operation
===================
Process 0 of the array's group fetches what it prints and writes it to ``sys.stdout`` in one
write, flushed; the others only take part in the operation's syncs.  ``summarize`` is local:
process 0 of the default group prints the arrays it knows.  Floating values print in NumPy's
positional form, trimmed.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from . import state
from .buffers import patch_bounds, to_host
from .groups import nodeid
from .handles import arr
from .ops_common import type_name
from .synchronization import enter_op, leave_op
from .transfers import fetch

__all__ = [
    "print_distribution", "print_patch", "print_stdout", "summarize",
]


# --- printing ------------------------------------------------------------------------------------
def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _fmt(x) -> str:
    return np.format_float_positional(x, trim="-") if isinstance(x, np.floating) else str(x)


def print_patch(g_a, lo=None, hi=None, pretty=True) -> None:
    """Print the patch ``[lo, hi)`` from process 0 of the array's group (NGA_Print_patch).
    Collective.

    ``pretty``: a header ``array <handle> "<name>" <type> [lo, hi)``, then one line per row of
    the last dimension, led by the row's global subscript; otherwise the bare values, one row a
    line."""
    a = arr(g_a, "print_patch")
    lo, hi = patch_bounds(a, lo, hi, "print_patch")
    enter_op(a)
    if a.me == 0:
        vals = to_host(fetch(a, lo, hi))
        lines = []
        if pretty:
            lines.append(f'array {a.handle} "{a.name}" {type_name(a)} [{list(lo)}, {list(hi)})')
        rows = vals.reshape(-1, vals.shape[-1]) if vals.size else np.zeros((0, 0), a.dtype)
        lead = list(itertools.product(*[range(l, h) for l, h in zip(lo[:-1], hi[:-1])]))
        for idx, row in zip(lead, rows):
            text = " ".join(_fmt(x) for x in row)
            lines.append(f"{list(idx) + [lo[-1]]}: {text}" if pretty else text)
        _out("\n".join(lines) + "\n")
    leave_op(a)


def print_stdout(g_a) -> None:
    """Print the whole array from process 0 (GA_Print; ga4py's ``print_stdout``). Collective."""
    print_patch(g_a, None, None, True)


def print_distribution(g_a) -> None:
    """Print which process owns which block, from process 0 of the array's group
    (GA_Print_distribution). Collective."""
    a = arr(g_a, "print_distribution")
    enter_op(a)
    if a.me == 0:
        lines = [f'array {a.handle} "{a.name}" {type_name(a)} dims {list(a.dims)} grid {list(a.layout.grid)}']
        for p in range(a.group.size):
            lo, hi = a.layout.distribution(p)
            lines.append(f"  proc {p}: " + (f"[{list(lo)}, {list(hi)})" if a.layout.owns(p) else "owns nothing"))
        _out("\n".join(lines) + "\n")
    leave_op(a)


def summarize(verbose) -> None:
    """Print the live arrays (handle, name, type, dims; ``verbose``: also ghosts, memory kind and
    group) from process 0 of the default group (GA_Summarize)."""
    st = state.S
    if not st.initialized or nodeid() != 0:
        return
    lines = [f"GA summary: {sum(1 for x in st.arrays.values() if x.allocated)} array(s)"]
    for h in sorted(st.arrays):
        x = st.arrays[h]
        if not x.allocated:
            continue
        text = f'  array {h} "{x.name}" {type_name(x)} dims {list(x.dims)}'
        if verbose:
            text += f" ghosts {list(x.ghosts)} memory {x.memory} group {x.group.handle} grid {list(x.layout.grid)}"
        lines.append(text)
    _out("\n".join(lines) + "\n")
