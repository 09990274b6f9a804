"""Global Arrays ghost cells: ``update_ghosts``/``update_ghost_dir`` fill ghost layers from the blocks they shadow (L6).

Theory of operation
===================
``update_ghosts`` fills the caller's ghost layers from the visible data of the blocks they
shadow, always wrapping periodically (GA's rule), corners included: per dimension the
ghost-extended range ``[blo - w, bhi + w)`` is reduced modulo the extent and cut into runs of
consecutive indices; every product of runs but the block itself is one in-bounds patch,
fetched and copied into the caller's memory (its ghosts are private, so nobody else writes
them).  ``update_ghost_dir`` does one side of one dimension, with corners if asked.

Choices where GA's source, its manual and ga4py differ, are silent, or fall short:

* ``update_ghost_dir`` takes a 0-based dimension in C order.
"""

from __future__ import annotations

import itertools

from .buffers import xp_of
from .handles import arr
from .local_data import local_memory
from .ops_common import fetch_as, finish_writes
from .synchronization import enter_op, leave_op

__all__ = [
    "update_ghost_dir", "update_ghosts", "update_ghosts_dir",
]


# --- ghost cells ---------------------------------------------------------------------------------
def _runs(blo: int, bhi: int, w: int, n: int, mlo: int, mhi: int) -> list:
    """Positions ``[mlo, mhi)`` of one dimension of the local memory (block ``[blo, bhi)`` with
    ``w`` ghosts a side) as runs ``(mstart, gstart, length, inside)``: the global indices they
    shadow, wrapped modulo ``n``, are consecutive in a run; ``inside``: the block itself."""
    out = []
    for m in range(mlo, mhi):
        g = (blo - w + m) % n
        inside = w <= m < w + (bhi - blo)
        if out and out[-1][1] + out[-1][2] == g and out[-1][3] == inside:
            ms, gs, k, ins = out[-1]
            out[-1] = (ms, gs, k + 1, ins)
        else:
            out.append((m, g, 1, inside))
    return out


def _fill_ghosts(a, ranges) -> None:
    """Copy into the caller's memory, for every product of runs but the block itself, the
    visible elements those positions shadow."""
    mem = local_memory(a)
    xp = xp_of(a)
    blo, bhi = a.layout.distribution(a.me)
    runs = [_runs(blo[d], bhi[d], a.ghosts[d], a.dims[d], *ranges[d]) for d in range(a.ndim)]
    for combo in itertools.product(*runs):
        if all(r[3] for r in combo):
            continue
        lo = tuple(r[1] for r in combo)
        hi = tuple(r[1] + r[2] for r in combo)
        mem[tuple(slice(r[0], r[0] + r[2]) for r in combo)] = fetch_as(a, lo, hi, xp)
    finish_writes(xp)


def update_ghosts(g_a) -> None:
    """Fill every ghost layer of every block from the blocks it shadows, wrapping periodically,
    corners included (GA_Update_ghosts). Collective."""
    a = arr(g_a, "update_ghosts")
    enter_op(a)
    if any(a.ghosts) and a.layout.owns(a.me):
        nb = a.layout.local_shape(a.me)
        _fill_ghosts(a, [(0, n + 2 * w) for n, w in zip(nb, a.ghosts)])
    leave_op(a)


def update_ghost_dir(g_a, dimension, dir, flag) -> None:  # noqa: A002 (ga4py's name)
    """Fill the ghost layer on side ``dir`` (-1: low, +1: high) of dimension ``dimension``
    (0-based, C order), wrapping periodically; with ``flag`` the other dimensions' ghost layers
    along it too (corners) (NGA_Update_ghosts_dir). Collective."""
    call = "update_ghost_dir"
    a = arr(g_a, call)
    dimension, dir = int(dimension), int(dir)
    if not 0 <= dimension < a.ndim:
        raise ValueError(f"{call}: dimension out of range ({dimension}, {a.ndim} dimensions)")
    if dir not in (-1, 1):
        raise ValueError(f"{call}: dir must be -1 or +1 ({dir})")
    enter_op(a)
    if a.ghosts[dimension] and a.layout.owns(a.me):
        nb = a.layout.local_shape(a.me)
        ranges = []
        for d, (n, w) in enumerate(zip(nb, a.ghosts)):
            if d == dimension:
                ranges.append((0, w) if dir < 0 else (w + n, n + 2 * w))
            else:
                ranges.append((0, n + 2 * w) if flag else (w, w + n))
        _fill_ghosts(a, ranges)
    leave_op(a)


update_ghosts_dir = update_ghost_dir
