"""Global Arrays mirrored arrays: one copy per node, and the merges that sum the copies (L6).

Theory of operation
===================
An array created on the mirror group (``pgroup_get_mirror``, :mod:`gpumpi.ga.groups`) has one
copy per node, distributed among that node's processes; one-sided operations reach the
caller's node's copy only.  ``merge_mirrored`` sums the copies into every copy and
``merge_distr_patch`` sums a patch of them into an ordinary distributed array: each process
contributes the part of the patch it owns, zeros elsewhere, to one ``Allreduce(SUM)`` of the
whole patch over the world (within a node the blocks are disjoint, so the sum over the world
is the sum over the nodes), and writes its own part of the result.  Both are collective over
the world and ``sync`` before and after.
"""

from __future__ import annotations

import numpy as np

from ._layout import patch_size
from .buffers import patch_bounds, patch_slices, xp_of
from .groups import MIRROR, group_by_handle
from .handles import arr
from .local_data import local_patch
from .state import WORLD_PROC_GROUP, GAArray, GAError, mpi
from .synchronization import sync

__all__ = ["is_mirrored", "merge_distr_patch", "merge_mirrored"]


# --- mirrored arrays ------------------------------------------------------------------------------
def is_mirrored(g_a) -> bool:
    """Whether ``g_a`` was created on the mirror group (GA_Is_mirrored)."""
    return arr(g_a, "is_mirrored", False).group is not None and arr(g_a, "is_mirrored", False).group.handle == MIRROR


def _node_sum(a: GAArray, lo, hi):
    """The sum over the nodes' copies of the patch ``[lo, hi)`` of mirrored ``a``, on every process
    (a whole-patch ``Allreduce`` over the world: within a node the blocks are disjoint)."""
    MPI = mpi()
    shape = tuple(h - l for l, h in zip(lo, hi))
    mine = np.zeros(shape, a.dtype)
    got = local_patch(a, lo, hi)
    if got is not None:
        view, plo, phi = got
        mine[patch_slices(plo, phi, lo)] = view if xp_of(a) is np else view.get()
    out = np.empty_like(mine)
    group_by_handle(WORLD_PROC_GROUP, "merge").comm.Allreduce(mine, out, op=MPI.SUM)
    return out


def merge_mirrored(g_a) -> None:
    """Sum the nodes' copies of a mirrored array: afterwards every copy holds the sum
    (GA_Merge_mirrored). Collective over the world; syncs first."""
    a = arr(g_a, "merge_mirrored")
    if a.group.handle != MIRROR:
        raise GAError(f"merge_mirrored: array {a.handle} is not mirrored")
    sync()
    total = _node_sum(a, (0,) * a.ndim, a.dims)
    got = local_patch(a, (0,) * a.ndim, a.dims)
    if got is not None:
        view, plo, phi = got
        part = total[patch_slices(plo, phi, None)]
        view[...] = part if xp_of(a) is np else xp_of(a).asarray(part)
    sync()


def merge_distr_patch(g_a, alo, ahi, g_b, blo, bhi) -> None:
    """Sum the nodes' copies of a patch of mirrored ``g_a`` into a patch of distributed ``g_b``
    (NGA_Merge_distr_patch). Collective over the world."""
    a = arr(g_a, "merge_distr_patch")
    b = arr(g_b, "merge_distr_patch")
    if a.group.handle != MIRROR:
        raise GAError(f"merge_distr_patch: array {a.handle} is not mirrored")
    alo, ahi = patch_bounds(a, alo, ahi, "merge_distr_patch")
    blo, bhi = patch_bounds(b, blo, bhi, "merge_distr_patch")
    if patch_size(alo, ahi) != patch_size(blo, bhi):
        raise ValueError(f"merge_distr_patch: patches differ in size ({patch_size(alo, ahi)}, "
                         f"{patch_size(blo, bhi)})")
    sync()
    total = _node_sum(a, alo, ahi).reshape(tuple(h - l for l, h in zip(blo, bhi)))
    got = local_patch(b, blo, bhi)
    if got is not None:
        view, plo, phi = got
        part = total[patch_slices(plo, phi, blo)]
        view[...] = part if xp_of(b) is np else xp_of(b).asarray(part)
    sync()
