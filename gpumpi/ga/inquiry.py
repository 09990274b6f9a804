"""Global Arrays inquiry: what an array is and where its elements live (``inquire*``, ``locate*``...) (L6).

Theory of operation
===================
Everything here is local: an array's description is in its record on every member
(:mod:`gpumpi.ga.state`), and its distribution (:mod:`gpumpi.ga._layout`) is the same pure
data on every member, so ``locate``, ``locate_region`` and ``distribution`` are arithmetic,
without communication.  Patches are half-open ``[lo, hi)``; a process that owns no block has
``lo = hi = -1`` in every dimension and ``-1`` coordinates in the process grid.  The
description calls (``inquire``, ``inquire_dtype``, ``inquire_name``, ``ndim``) also answer for
a handle described but not yet allocated.
"""

from __future__ import annotations

import numpy as np

from ._layout import check_patch
from .handles import arr, need_data
from .state import as_ints

__all__ = [
    "compare_distr", "distribution", "get_pgroup", "get_pgroup_size", "get_proc_grid", "ghost_widths", "has_ghosts",
    "inquire", "inquire_dims", "inquire_dtype", "inquire_name", "inquire_type", "locate", "locate_nnodes",
    "locate_region", "memory_kind", "nblock", "ndim", "proc_topology",
]


# --- inquiry ----------------------------------------------------------------------------------
def inquire(g_a) -> tuple:
    """``(type, dims)`` (NGA_Inquire)."""
    a = arr(g_a, "inquire", False)
    need_data(a, "inquire")
    return a.gtype, np.array(a.dims, dtype=np.int64)


def inquire_dims(g_a):
    return inquire(g_a)[1]


def inquire_type(g_a) -> int:
    return inquire(g_a)[0]


def inquire_dtype(g_a) -> np.dtype:
    a = arr(g_a, "inquire_dtype", False)
    need_data(a, "inquire_dtype")
    return a.dtype


def inquire_name(g_a) -> str:
    return arr(g_a, "inquire_name", False).name


def ndim(g_a) -> int:
    a = arr(g_a, "ndim", False)
    need_data(a, "ndim")
    return a.ndim


def has_ghosts(g_a) -> bool:
    a = arr(g_a, "has_ghosts")
    return any(a.ghosts)


def ghost_widths(g_a):
    """The ghost widths of ``g_a`` (NGA_Get_ghost_width is per dim)."""
    return np.array(arr(g_a, "ghost_widths").ghosts, dtype=np.int64)


def memory_kind(g_a) -> str:
    """``"host"`` or ``"device"``: where ``g_a``'s memory lives (gpumpi)."""
    return arr(g_a, "memory_kind").memory


def get_pgroup(g_a) -> int:
    return arr(g_a, "get_pgroup").group.handle


def get_pgroup_size(g_a) -> int:
    return arr(g_a, "get_pgroup_size").group.size


# --- locality ---------------------------------------------------------------------------------
def distribution(g_a, iproc: int = -1) -> tuple:
    """The block of process ``iproc`` (default: the caller) as half-open ``(lo, hi)``; a process
    without a block gets ``lo = hi = -1`` everywhere (NGA_Distribution)."""
    a = arr(g_a, "distribution")
    p = a.me if iproc is None or int(iproc) < 0 else int(iproc)
    if not 0 <= p < a.group.size:
        raise ValueError(f"distribution: process {p} out of range (group size {a.group.size})")
    lo, hi = a.layout.distribution(p)
    return np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)


def locate(g_a, subscript) -> int:
    """The owner of one element, or -1 if it is out of bounds (NGA_Locate)."""
    a = arr(g_a, "locate")
    return a.layout.locate(as_ints(subscript, a.ndim, "locate", "subscript"))


def locate_region(g_a, lo, hi) -> tuple:
    """``(map, procs)``: ``map[i] = (lo, hi)`` of the i-th piece of the patch, owned by
    ``procs[i]`` (NGA_Locate_region; half-open)."""
    a = arr(g_a, "locate_region")
    lo, hi = check_patch("locate_region", a.dims, lo, hi)
    pieces = a.layout.locate_region(lo, hi)
    m = np.array([[plo, phi] for _, plo, phi in pieces], dtype=np.int64).reshape(len(pieces), 2, a.ndim)
    return m, np.array([p for p, _, _ in pieces], dtype=np.int64)


def locate_nnodes(g_a, lo, hi) -> int:
    """How many processes own part of the patch (NGA_Locate_nnodes)."""
    return len(locate_region(g_a, lo, hi)[1])


def proc_topology(g_a, proc: int):
    """Coordinates of ``proc`` in the array's process grid, -1s if it owns no block."""
    a = arr(g_a, "proc_topology")
    return np.array(a.layout.proc_topology(int(proc)), dtype=np.int64)


def get_proc_grid(g_a):
    """Blocks along each dimension (GA_Get_proc_grid)."""
    return np.array(arr(g_a, "get_proc_grid").layout.grid, dtype=np.int64)


def nblock(g_a):
    """Blocks along each dimension (GA_Nblock)."""
    return get_proc_grid(g_a)


def compare_distr(g_a, g_b) -> bool:
    """Whether the two arrays are distributed identically (GA_Compare_distr == 0)."""
    a, b = arr(g_a, "compare_distr"), arr(g_b, "compare_distr")
    return a.dims == b.dims and a.layout.grid == b.layout.grid and a.layout.starts == b.layout.starts and \
        a.group.ranks == b.group.ranks
