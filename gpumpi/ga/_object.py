"""The object face of Global Arrays: :class:`GlobalArray` (GA++'s ``GA::GlobalArray``, Pythonic).

Theory of operation
===================
A :class:`GlobalArray` holds one handle of :mod:`gpumpi.ga.handles` and forwards to the
procedural API, so both faces see the same arrays (``GlobalArray.from_handle(h)``,
``g.handle``).  Indexing is NumPy's basic indexing turned into a patch: integers and
slices (steps > 0; a step other than 1 uses GA's strided transfers), ``...`` and missing
trailing dimensions; an integer index drops its dimension from a get's result, as in
NumPy.  ``g[key]`` is a one-sided get, ``g[key] = x`` a one-sided put of ``x`` broadcast
to the patch, ``g.acc(x, key)`` an atomic accumulate.  ``with g.access() as local:`` is
the caller's block as a NumPy (host) or device array view, released -- as updated unless
``readonly`` -- when the block ends, even by an exception.  Creation and ``destroy`` are
collective, like ``ga.create``/``ga.destroy``; nothing is freed by garbage collection
(a collective there could wait forever), so call :meth:`destroy` or use the array as a
context manager.
"""

from __future__ import annotations

import contextlib

import numpy as np

from . import buffers, handles, inquiry, local_data, state, transfers
from ._layout import strided_shape


class GlobalArray:
    """A distributed n-d array (GA's ``GlobalArray``), on host or device memory.

    ``GlobalArray(dims, dtype=ga.C_DBL, name="", chunk=None, pgroup=-1, ghosts=None,
    memory="host", block=None, map=None)``: ``dtype`` a GA type code or a NumPy dtype;
    ``block``/``map`` an irregular distribution (``ga.create_irreg``); ``ghosts`` ghost widths;
    ``memory="device"`` puts it in GPU memory (``access`` then yields CuPy arrays).  Collective.
    """

    __slots__ = ("_h",)

    def __init__(self, dims, dtype=state.C_DBL, name: str = "", chunk=None, pgroup: int = -1, ghosts=None,
                 memory: str = "host", block=None, map=None) -> None:
        if isinstance(dims, (int, np.integer)):
            dims = (int(dims),)
        dt = state.dtype(dtype)
        code = int(dtype) if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool) else \
            state.TYPE_CODES[dt]
        if (block is None) != (map is None):
            raise ValueError("GlobalArray: an irregular distribution needs both block and map")
        h = handles.make_array(handles.described(code, dims, name, pgroup, chunk=chunk, width=ghosts, block=block,
                                                 map=map, memory=memory))
        if not h:
            raise MemoryError(f"GlobalArray: allocation of {list(dims)} {dt} refused (memory limit)")
        self._h = h

    @classmethod
    def from_handle(cls, g_a: int) -> "GlobalArray":
        """The object face of an existing handle (``ga.create`` and friends)."""
        handles.arr(g_a, "GlobalArray.from_handle")
        self = object.__new__(cls)
        self._h = int(g_a)
        return self

    # -- description
    @property
    def handle(self) -> int:
        """The procedural API's handle."""
        return self._h

    @property
    def _a(self):
        return handles.arr(self._h, "GlobalArray")

    shape = property(lambda self: self._a.dims, doc="Global extents.")
    dtype = property(lambda self: self._a.dtype, doc="Element type (NumPy dtype).")
    ndim = property(lambda self: self._a.ndim, doc="Number of dimensions.")
    name = property(lambda self: self._a.name, doc="The array's name.")
    memory = property(lambda self: self._a.memory, doc='"host" or "device".')
    size = property(lambda self: int(np.prod(self._a.dims)), doc="Number of elements.")

    def __len__(self) -> int:
        return self._a.dims[0]

    def __repr__(self) -> str:
        try:
            a = self._a
        except state.GAError:
            return f"<GlobalArray {self._h} (destroyed)>"
        return f"<GlobalArray {a.handle} {a.name!r} {list(a.dims)} {a.dtype} on {a.memory}>"

    # -- indexing
    def _key(self, key, call: str):
        """``(lo, hi, skip, drop)``: the patch a basic NumPy index names, and which axes it drops."""
        dims = self._a.dims
        if not isinstance(key, tuple):
            key = (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError(f"{call}: an index can only have a single ellipsis")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (len(dims) - len(key) + 1) + key[i + 1:]
        if len(key) > len(dims):
            raise IndexError(f"{call}: too many indices ({len(key)} for {len(dims)} dimensions)")
        key = key + (slice(None),) * (len(dims) - len(key))
        lo, hi, skip, drop = [], [], [], []
        for d, (k, n) in enumerate(zip(key, dims)):
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step <= 0:
                    raise IndexError(f"{call}: negative or zero steps are not supported ({k})")
                stop = max(stop, start)
                lo.append(start)
                hi.append(stop)
                skip.append(step)
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                i = int(k) + n if int(k) < 0 else int(k)
                if not 0 <= i < n:
                    raise IndexError(f"{call}: index {int(k)} out of bounds for axis {d} with size {n}")
                lo.append(i)
                hi.append(i + 1)
                skip.append(1)
                drop.append(d)
            else:
                raise IndexError(f"{call}: only integers, slices and ... are valid indices ({k!r})")
        return tuple(lo), tuple(hi), tuple(skip), tuple(drop)

    def __getitem__(self, key):
        lo, hi, skip, drop = self._key(key, "GlobalArray.__getitem__")
        if any(h <= l for l, h in zip(lo, hi)):
            out = buffers.new_patch_buffer(self._a, strided_shape(lo, hi, skip))
        elif all(s == 1 for s in skip):
            out = transfers.get(self._h, lo, hi)
        else:
            out = transfers.strided_get(self._h, lo, hi, skip)
        if drop:
            shape = tuple(n for d, n in enumerate(out.shape) if d not in drop)
            out = out.reshape(shape)
        return out

    def _patch_value(self, value, lo, hi, skip, drop):
        shape = strided_shape(lo, hi, skip)
        kept = tuple(n for d, n in enumerate(shape) if d not in drop)
        if hasattr(value, "__cuda_array_interface__") and not isinstance(value, np.ndarray):
            if tuple(value.shape) not in (shape, kept):
                raise ValueError(f"GlobalArray: device value of shape {tuple(value.shape)} for a patch of {kept}")
            return value.reshape(shape) if tuple(value.shape) != shape else value
        v = np.asarray(value)
        if v.dtype.kind == "c" and self._a.dtype.kind != "c":
            raise TypeError(f"GlobalArray: complex value for a {self._a.dtype} array")
        return np.ascontiguousarray(np.broadcast_to(v, kept).astype(self._a.dtype, copy=False)).reshape(shape)

    def __setitem__(self, key, value) -> None:
        lo, hi, skip, drop = self._key(key, "GlobalArray.__setitem__")
        if any(h <= l for l, h in zip(lo, hi)):
            return
        buf = self._patch_value(value, lo, hi, skip, drop)
        if all(s == 1 for s in skip):
            transfers.put(self._h, buf, lo, hi)
        else:
            transfers.strided_put(self._h, buf, lo, hi, skip)

    def acc(self, value, key=Ellipsis, alpha=None) -> None:
        """``self[key] += alpha * value``, atomic with respect to other accumulates (NGA_Acc);
        ``value`` broadcasts to the patch."""
        lo, hi, skip, drop = self._key(key, "GlobalArray.acc")
        if any(h <= l for l, h in zip(lo, hi)):
            return
        buf = self._patch_value(value, lo, hi, skip, drop)
        if all(s == 1 for s in skip):
            transfers.acc(self._h, buf, lo, hi, alpha)
        else:
            transfers.strided_acc(self._h, buf, lo, hi, skip, alpha)

    def get(self, lo=None, hi=None, buffer=None):
        """``ga.get`` on this array."""
        return transfers.get(self._h, lo, hi, buffer)

    def put(self, buffer, lo=None, hi=None) -> None:
        """``ga.put`` on this array."""
        transfers.put(self._h, buffer, lo, hi)

    def read_inc(self, subscript, inc: int = 1) -> int:
        """Atomic fetch-and-add on one element of an integer array (NGA_Read_inc)."""
        return transfers.read_inc(self._h, subscript, inc)

    def scatter(self, values, subsarray) -> None:
        transfers.scatter(self._h, values, subsarray)

    def gather(self, subsarray, values=None):
        return transfers.gather(self._h, subsarray, values)

    # -- local data
    @contextlib.contextmanager
    def access(self, lo=None, hi=None, readonly: bool = False):
        """``with g.access() as local:`` the caller's block (or ``[lo, hi)`` in it) as a zero-copy
        NumPy or device array view, released when the block ends (``release_update`` unless
        ``readonly``); ``local`` is None on a process that owns nothing."""
        view = local_data.access(self._h, lo, hi)
        try:
            yield view
        finally:
            if view is not None:
                (local_data.release if readonly else local_data.release_update)(self._h)

    @contextlib.contextmanager
    def access_ghosts(self, readonly: bool = False):
        """``with g.access_ghosts() as local:`` the caller's block with its ghost layers."""
        view = local_data.access_ghosts(self._h)
        try:
            yield view
        finally:
            if view is not None:
                (local_data.release_ghosts if readonly else local_data.release_update_ghosts)(self._h)

    # -- locality
    def distribution(self, proc: int = -1):
        """``(lo, hi)`` of a process's block (NGA_Distribution)."""
        return inquiry.distribution(self._h, proc)

    def locate(self, subscript) -> int:
        """Owner of one element, -1 if out of bounds (NGA_Locate)."""
        return inquiry.locate(self._h, subscript)

    def locate_region(self, lo, hi):
        """``(map, procs)`` covering the patch (NGA_Locate_region)."""
        return inquiry.locate_region(self._h, lo, hi)

    def proc_topology(self, proc: int):
        return inquiry.proc_topology(self._h, proc)

    # -- lifetime
    def duplicate(self, name: str = "") -> "GlobalArray":
        """A new array like this one, contents not copied (GA_Duplicate). Collective."""
        return GlobalArray.from_handle(handles.duplicate(self._h, name))

    def destroy(self) -> None:
        """Free the array (GA_Destroy). Collective."""
        handles.destroy(self._h)

    def __enter__(self) -> "GlobalArray":
        return self

    def __exit__(self, *exc) -> None:
        if handles.valid_handle(self._h):
            self.destroy()
