"""Global Arrays local data: ``access``/``release`` views, the caller's block for collective operations (L6).

Theory of operation
===================
A process's block is window memory it owns, so it is read and written in place: ``access``
returns a zero-copy view (NumPy for host arrays, a device array for device arrays) of the
caller's block, of a patch inside it, or of another member's block mapped on this node; the
view covers the visible block only, ``access_ghosts`` the block with its ghost layers.  Every
access is paired with a release -- as in GA, a release without an access does nothing, and
``destroy`` frees an array with accesses outstanding (warning; their views stay mapped);
``release_update`` says the data changed: it completes the device's copies and records the
write for an open ``fence``.

The collective operations compute on the caller's block through :func:`local_block`,
:func:`local_patch` and :func:`local_memory` (with the ghost layers): views as arrays of
``xp_of(a)`` (:mod:`gpumpi.ga.buffers`), the simulated device's memory synchronized and seen as
the NumPy array under it.
"""

from __future__ import annotations

from ._layout import intersect, patch_size
from .buffers import device_sync, is_sim, patch_slices, target_slices
from .handles import arr
from .state import GAArray, GAError, as_ints
from .synchronization import fence_touch

__all__ = [
    "access", "access_ghosts", "local_block", "local_memory", "local_patch", "release", "release_ghosts",
    "release_update", "release_update_ghosts",
]


# --- access to local data ---------------------------------------------------------------------
def access(g_a, lo=None, hi=None, proc: int = -1):
    """A zero-copy view of the caller's block (or of ``[lo, hi)`` inside it); ``proc``: another
    process's block mapped on this node (host memory). ``None`` if that process owns nothing
    (NGA_Access). Pair it with :func:`release` or :func:`release_update`."""
    a = arr(g_a, "access")
    p = a.me if proc is None or int(proc) < 0 else int(proc)
    if not 0 <= p < a.group.size:
        raise ValueError(f"access: process {p} out of range (group size {a.group.size})")
    if not a.layout.owns(p):
        return None
    mem = a.local if p == a.me else a.views[p]
    if mem is None:
        raise GAError(f"access: the block of process {p} is not mapped in this process (another node or device)")
    blo, bhi = a.layout.distribution(p)
    if lo is None and hi is None:
        lo, hi = blo, bhi
    else:
        lo = blo if lo is None else as_ints(lo, a.ndim, "access", "lo")
        hi = bhi if hi is None else as_ints(hi, a.ndim, "access", "hi")
        if any(l < b or h > e or h < l for l, h, b, e in zip(lo, hi, blo, bhi)):
            raise ValueError(f"access: patch {list(lo)}..{list(hi)} is not inside the block of process {p} "
                             f"({list(blo)}..{list(bhi)})")
    if a.memory == "device":
        device_sync(a)
    a.accesses += 1
    return mem[target_slices(a, p, lo, hi)]


def access_ghosts(g_a):
    """A zero-copy view of the caller's block with its ghost layers (NGA_Access_ghosts)."""
    a = arr(g_a, "access_ghosts")
    if not a.layout.owns(a.me):
        return None
    a.accesses += 1
    return a.local


def _release(g_a, call: str) -> GAArray:
    """The array, one access fewer.  A release without an access is no error: GA's release does
    nothing at all (``pnga_release`` is empty), and ga4py's returns at once on a process that owns
    no data (whose ``access`` gave None): programs release unconditionally."""
    a = arr(g_a, call)
    if a.accesses > 0:
        a.accesses -= 1
    return a


def release(g_a, lo=None, hi=None) -> None:
    """End a read-only access (NGA_Release)."""
    _release(g_a, "release")


def release_update(g_a, lo=None, hi=None) -> None:
    """End an access whose data was changed (NGA_Release_update)."""
    a = _release(g_a, "release_update")
    device_sync(a)
    fence_touch(a)


def release_ghosts(g_a) -> None:
    _release(g_a, "release_ghosts")


def release_update_ghosts(g_a) -> None:
    a = _release(g_a, "release_update_ghosts")
    device_sync(a)
    fence_touch(a)


# --- the caller's block, for the collective operations ----------------------------------------
def local_memory(a: GAArray):
    """The caller's whole window memory (block and ghosts) as an array of :func:`xp_of`.
    Simulated device memory is synchronized."""
    mem = a.local
    if is_sim(a):
        from .._device import sim_adapter

        sim_adapter().synchronize()
        mem = mem._arr
    return mem


def local_block(a: GAArray):
    """The caller's visible block of ``a`` as an array of :func:`xp_of` (a view: writes land in
    the array), or None if the caller owns nothing.  Simulated device memory is synchronized."""
    if not a.layout.owns(a.me):
        return None
    lo, hi = a.layout.distribution(a.me)
    return local_memory(a)[target_slices(a, a.me, lo, hi)]


def local_patch(a: GAArray, lo, hi):
    """The part of the caller's block inside the patch ``[lo, hi)``: ``(view, plo, phi)`` with the
    view an array of :func:`xp_of` over ``[plo, phi)``, or None if they do not meet."""
    if not a.layout.owns(a.me):
        return None
    blo, bhi = a.layout.distribution(a.me)
    cut = intersect(blo, bhi, lo, hi)
    if cut is None:
        return None
    plo, phi = cut
    if patch_size(plo, phi) == 0:
        return None
    view = local_block(a)
    return view[patch_slices(plo, phi, blo)], plo, phi
