"""Global Arrays' per-process statistics of its calls (GA_Print_stats) (L6).

Theory of operation
===================
GA counts, in every process, the arrays it created and destroyed and the one-sided calls it
made -- ``get``, ``put``, ``acc``, ``scatter``, ``gather``, ``read_inc`` (their nonblocking,
strided and periodic forms count as the call they move data as) -- with, for each, the
processes a call touched, the bytes it moved in all and the bytes it moved to or from other
processes' blocks; and the most memory this process's blocks held at once.
:func:`print_stats` prints them in ``pnga_print_stats``'s layout, so scripts that read GA's
output (NWChem's parsers do) read gpumpi's.  The counters are plain integers bumped by the
transfer code (:mod:`gpumpi.ga.transfers`), :mod:`gpumpi.ga.handles` (create, destroy) and
nothing else; they live as long as the process.
"""

from __future__ import annotations

import sys

__all__ = ["CREATE", "DESTROY", "GET", "PUT", "ACC", "SCATTER", "GATHER", "READ_INC", "CALLS", "PROCS", "BYTES",
           "REMOTE", "moved", "memory", "print_stats"]

CREATE, DESTROY, GET, PUT, ACC, SCATTER, GATHER, READ_INC = range(8)
CALLS = [0] * 8  # by the kinds above
PROCS = [0] * 8  # processes touched, summed over the calls (GET .. GATHER are printed)
BYTES = [0] * 8  # bytes moved (GET .. READ_INC)
REMOTE = [0] * 8  # of those, bytes of other processes' blocks
PEAK = [0]  # the most bytes this process's blocks held at once


def moved(kind: int, procs: int, nbytes: int, remote: int) -> None:
    """Count one call of ``kind`` that touched ``procs`` processes and moved ``nbytes`` bytes,
    ``remote`` of them to or from other processes' blocks."""
    CALLS[kind] += 1
    PROCS[kind] += procs
    BYTES[kind] += nbytes
    REMOTE[kind] += remote


def memory(used: int) -> None:
    """Note that this process's blocks hold ``used`` bytes now."""
    if used > PEAK[0]:
        PEAK[0] = used


def _num(v: int) -> str:
    return f"{v:4d}     " if v < 9999 else f"{float(v):.2e} "


def print_stats(file=None) -> None:
    """Print this process's statistics of GA calls (GA_Print_stats), as GA prints them."""
    from .groups import nodeid

    out = sys.stdout if file is None else file
    per = [PROCS[k] / max(CALLS[k], 1) for k in (GET, PUT, ACC, SCATTER, GATHER)]
    kinds = (GET, PUT, ACC, SCATTER, GATHER, READ_INC)
    out.write(f"\n                         GA Statistics for process {nodeid():4d}\n"
              "                         ------------------------------\n\n"
              "       create   destroy   get      put      acc     scatter   gather  read&inc\n"
              "calls: " + "".join(_num(CALLS[k]) for k in range(8)) + "\n"
              "number of processes/call " + " ".join(f"{v:.2e}" for v in per) + "\n"
              "bytes total:             " + " ".join(f"{float(BYTES[k]):.2e}" for k in kinds) + "\n"
              "bytes remote:            " + " ".join(f"{float(REMOTE[k]):.2e}" for k in kinds) + "\n"
              f"Max memory consumed for GA by this process: {PEAK[0]} bytes\n")
    out.flush()
