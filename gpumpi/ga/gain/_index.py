"""Basic indexing of gain arrays: ``get`` (one-sided) and ``__setitem__`` (collective).

Theory of operation
===================
A basic key (ints, slices of any step, one ``Ellipsis``, ``None``) is turned into one
*selection* per array dimension: the sorted-as-given global indices it picks
(``np.arange(n)[slice]``, or the one int), plus the result shape (kept dims, ``None`` dims as
1, int dims dropped).  Python's own slicing of ``arange`` is the oracle, so negative steps and
out-of-range bounds behave exactly as NumPy's.

* get: the bounding box of each selection is read with one ``ga.get`` and the selection taken
  from it with ``np.ix_``; the result is reshaped to the result shape.  Steps read the whole box
  (simple, not minimal).
* set: the value is broadcast to the result shape, reshaped to the per-dimension selection
  lengths, and each rank writes the part of the selection inside its own block through
  ``ga.access`` (masks per dimension), between two syncs.  A gain value of the same shape and
  distribution as a whole-array key is copied block to block; any other gain value is read
  with ``allget`` (the whole value on every rank).
"""

from __future__ import annotations

import operator

import numpy as np

from .. import synchronization

__all__ = ["get", "selection", "setitem"]


def selection(shape: tuple, key, call: str):
    """``(sels, out_shape)``: per-dimension global index arrays and the result shape."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError(f"{call}: an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"{call}: too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {used} were indexed")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - used))
        else:
            expanded.append(k)
    if Ellipsis not in key:
        expanded.extend([slice(None)] * (len(shape) - used))
    sels, out_shape, dim = [], [], 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            continue
        n = shape[dim]
        if isinstance(k, slice):
            idx = np.arange(n)[k]
            out_shape.append(idx.size)
        elif isinstance(k, (bool, np.bool_)) or not _is_int(k):
            raise NotImplementedError(f"{call}: advanced indexing with {type(k).__name__} keys "
                                      f"is not supported; use ints, slices, ... and None (gpumpi)")
        else:
            i = operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"{call}: index {i} is out of bounds for axis {dim} with size {n}")
            idx = np.array([i % n])
        sels.append(idx)
        dim += 1
    return sels, tuple(out_shape)


def _is_int(k) -> bool:
    try:
        operator.index(k)
    except TypeError:
        return False
    return True


def get(a, key):
    """``a[key]`` as NumPy (a NumPy scalar when every dimension is indexed by an int). One-sided."""
    sels, out_shape = selection(a.shape, key, "gain.ndarray.get")
    if any(s.size == 0 for s in sels):
        return np.empty(out_shape, a.dtype)
    lo = [int(s.min()) for s in sels]
    hi = [int(s.max()) + 1 for s in sels]
    box = a._patch(lo, hi)
    picked = box[np.ix_(*[s - l for s, l in zip(sels, lo)])]
    out = picked.reshape(out_shape)
    return out[()] if out.ndim == 0 else out


def setitem(a, key, value) -> None:
    """``a[key] = value``: each rank writes the selected elements of its own block. Collective."""
    call = "gain.ndarray.__setitem__"
    sels, out_shape = selection(a.shape, key, call)
    whole = all(s.size == n and (s.size < 2 or s[1] > s[0]) for s, n in zip(sels, a.shape))
    if isinstance(value, type(a)):  # another gain array (this module does not import core: core imports it)
        if whole and value.shape == a.shape:
            a._blockwise_from(value, lambda x: x.astype(a.dtype, copy=False))
            return
        value = value.allget()
    val = np.asarray(value)
    try:
        val = np.broadcast_to(val, out_shape)
    except ValueError:
        raise ValueError(f"{call}: could not broadcast input array from shape {val.shape} "
                         f"into shape {out_shape}") from None
    val = val.reshape([s.size for s in sels])
    synchronization.sync()
    loc = a.access()
    if loc is not None:
        lo, hi = a.distribution()
        masks = [(s >= l) & (s < h) for s, l, h in zip(sels, lo, hi)]
        if all(m.any() for m in masks):
            dst = np.ix_(*[s[m] - l for s, m, l in zip(sels, masks, lo)])
            loc[dst] = val[np.ix_(*masks)]
        a.release_update()
    synchronization.sync()
