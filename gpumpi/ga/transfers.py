"""Global Arrays one-sided operations: ``put``/``get``/``acc``, ``read_inc``, ``scatter``/``gather``, their forms (L6).

Theory of operation
===================
Every one-sided operation is carried out by the caller alone, at call time, whatever its
targets are doing (each array's window is in a shared passive-target epoch for its whole life:
:mod:`gpumpi.ga.handles`):

* a patch is split by ``locate_region`` into one piece per owner (remembered per array: codes
  that move the same patches again and again -- halos, task blocks -- skip the distribution
  math); each piece is one transfer: a NumPy (or CuPy) slice assignment where the owner's
  memory is mapped here (host memory on this node: ``Win.Shared_query``), else one
  ``Win.Put``/``Get``/``Accumulate`` whose origin and target are subarray datatypes
  (``Create_subarray``; strided patches: vector types; :mod:`gpumpi.ga.buffers`);
* ``acc`` (and ``scatter_acc``, ``strided_acc``, ``periodic_acc``) add ``alpha * buffer``
  atomically with respect to every other accumulate: where every member maps every member's
  memory (host arrays on one node) the caller takes the owner's *accumulate lock* (an int64
  word per member in a small side window, compare-and-swap, holder rank + 1, so a dead holder
  is noticed: :func:`gpumpi.ga.synchronization.take_lock_word`) and adds in place with NumPy at
  memory bandwidth -- GA's own (ARMCI) way; else it is ``Win.Accumulate(SUM)``, element-wise
  atomic (device atomics, or the window's own lock, see :mod:`gpumpi.rma.local`).  The members
  agree on the way at ``allocate``, so every accumulate to one array goes the same way.
  Accumulates are *not* atomic with respect to concurrent puts and gets of the same elements,
  nor to ``read_inc`` of the same element (GA's rules);
* ``read_inc`` is one ``Win.Fetch_and_op(SUM)``: a true atomic instruction on the owner's element.

Operations are complete when they return (the copies are done, the device synchronized), so
``nbput``/``nbget``/``nbacc`` complete at once and ``nbwait`` only retires the handle; writes
are recorded for ``fence`` while one is open (:mod:`gpumpi.ga.synchronization`).

:func:`fetch` and :func:`store` are the get and put of the collective operations: a patch as a
new array of ``xp_of(a)`` (NumPy or CuPy), and such an array written back.
"""

from __future__ import annotations

import bisect
import itertools
import math

import numpy as np

from . import state, stats
from ._layout import check_patch, patch_size, periodic_pieces, strided_shape
from .buffers import (
    basic_type,
    box_types,
    device_sync,
    host_buffer,
    is_device,
    is_sim,
    new_device_buffer,
    new_patch_buffer,
    patch_bounds,
    target_slices,
    to_host,
    xp_like,
)
from .handles import arr
from .state import INTEGER_DTYPES, GAArray, GAError, as_ints, mpi
from .synchronization import fence_touch, give_lock_word, take_lock_word

__all__ = [
    "acc", "fetch", "gather", "get", "nbacc", "nbget", "nbput", "nbtest", "nbwait", "periodic_acc", "periodic_get",
    "periodic_put", "put", "read_inc", "scatter", "scatter_acc", "store", "strided_acc", "strided_get", "strided_put",
]


# --- patches cut by owner ------------------------------------------------------------------------
class _Piece:
    """One owner's part of a patch: where it sits in the patch's buffer (``src``) and in the
    owner's window memory (``tgt``), and its extents."""

    __slots__ = ("proc", "src", "tgt", "sub")

    def __init__(self, proc: int, src: tuple, tgt: tuple, sub: tuple) -> None:
        self.proc, self.src, self.tgt, self.sub = proc, src, tgt, sub

    def types(self, a: GAArray, shape):
        """Subarray datatypes of the piece in the patch buffer and in the owner's memory."""
        return (box_types(a, shape, [x.start for x in self.src], self.sub)[0],
                box_types(a, a.memshape(self.proc), [x.start for x in self.tgt], self.sub)[0])


_PLANS = 256  # patches remembered per array


def _plan(a: GAArray, lo, hi) -> list:
    """The pieces of the patch ``[lo, hi)``, one per owner (remembered: codes that move the
    same patches again and again -- halos, task blocks -- skip the distribution math)."""
    key = (lo, hi)
    plan = a.plans.get(key)
    if plan is None:
        if len(a.plans) >= _PLANS:
            a.plans.clear()
        plan = a.plans[key] = _pieces_of(a, lo, hi)
    return plan


def _pieces_of(a: GAArray, lo, hi) -> list:
    """:meth:`Layout.locate_region` for a checked, non-empty patch, with each piece's slices
    (the layout's block bounds are searched once per dimension)."""
    lay = a.layout
    ranges = []  # per dimension: (block, piece lo, piece hi, block lo) of each block touched
    for l, h, b in zip(lo, hi, lay._bounds):
        k0 = bisect.bisect_right(b, l) - 1
        k1 = bisect.bisect_right(b, h - 1) - 1
        ranges.append([(k, max(l, b[k]), min(h, b[k + 1]), b[k]) for k in range(k0, k1 + 1)])
    gs = lay._gstrides
    w = a.ghosts
    out = _Plan()
    for combo in itertools.product(*ranges):
        proc = sum(c[0] * g for c, g in zip(combo, gs))
        src = tuple(slice(c[1] - o, c[2] - o) for c, o in zip(combo, lo))
        tgt = tuple(slice(c[1] - c[3] + x, c[2] - c[3] + x) for c, x in zip(combo, w))
        out.append(_Piece(proc, src, tgt, tuple(c[2] - c[1] for c in combo)))
    size = a.dtype.itemsize
    out.nbytes = size * sum(math.prod(pc.sub) for pc in out)
    out.remote = size * sum(math.prod(pc.sub) for pc in out if pc.proc != a.me)
    return out


class _Plan(list):
    """The pieces of a patch, and what GA's statistics count of a call that moves it: ``nbytes``
    in all, ``remote`` of them in other processes' blocks (computed once per remembered plan)."""

    __slots__ = ("nbytes", "remote")


def _do_put(a: GAArray, buf, lo, hi) -> None:
    shape = None
    dev = is_device(buf)
    plan = _plan(a, lo, hi)
    stats.moved(stats.PUT, len(plan), plan.nbytes, plan.remote)
    for pc in plan:
        v = a.views[pc.proc]
        if v is not None and not dev:
            v[pc.tgt] = buf[pc.src]
            continue
        shape = shape or tuple(h - l for l, h in zip(lo, hi))
        ot, tt = pc.types(a, shape)
        a.win.Put([buf, 1, ot], pc.proc, target=(0, 1, tt))
    fence_touch(a)


def _do_get(a: GAArray, buf, lo, hi) -> None:
    shape = None
    dev = is_device(buf)
    plan = _plan(a, lo, hi)
    stats.moved(stats.GET, len(plan), plan.nbytes, plan.remote)
    for pc in plan:
        v = a.views[pc.proc]
        if v is not None and not dev:
            buf[pc.src] = v[pc.tgt]
            continue
        shape = shape or tuple(h - l for l, h in zip(lo, hi))
        ot, tt = pc.types(a, shape)
        a.win.Get([buf, 1, ot], pc.proc, target=(0, 1, tt))


def _do_acc(a: GAArray, buf, lo, hi) -> None:
    MPI = mpi()
    shape = tuple(h - l for l, h in zip(lo, hi))
    dev = is_device(buf)
    plan = _plan(a, lo, hi)
    stats.moved(stats.ACC, len(plan), plan.nbytes, plan.remote)
    for pc in plan:
        if a.acclock is not None and not dev:
            _lock_acc(a, pc.proc, "acc")
            try:
                a.views[pc.proc][pc.tgt] += buf[pc.src]
            finally:
                _unlock_acc(a, pc.proc)
            continue
        ot, tt = pc.types(a, shape)
        a.win.Accumulate([buf, 1, ot], pc.proc, target=(0, 1, tt), op=MPI.SUM)
    fence_touch(a)


# --- accumulate locks ---------------------------------------------------------------------------
_I64 = np.dtype(np.int64)


def _lock_acc(a: GAArray, proc: int, call: str) -> None:
    """Take ``proc``'s accumulate lock of ``a``: the CPU's compare-and-swap on the mapped word
    (what ``Win.Compare_and_swap`` does there, without its argument handling), else the window's."""
    addrs = a.lockaddr
    if addrs is None:
        take_lock_word(a.acclock, proc, 0, a.group, call)
        return
    cas = (_ATOMICS[0] if _ATOMICS else _atomics()).compare_and_swap
    me = a.group.me + 1
    if cas(addrs[proc], 0, me, _I64) == 0:
        return
    take_lock_word(a.acclock, proc, 0, a.group, call)  # held: wait (progressing, watching the holder) there


def _unlock_acc(a: GAArray, proc: int) -> None:
    addrs = a.lockaddr
    if addrs is None:
        give_lock_word(a.acclock, proc, 0, a.group)
        return
    (_ATOMICS[0] if _ATOMICS else _atomics()).compare_and_swap(addrs[proc], a.group.me + 1, 0, _I64)


def _scaled(a: GAArray, buf, alpha, call: str):
    if alpha is None:
        return buf
    al = np.asarray(alpha)
    if al.size != 1:
        raise ValueError(f"{call}: alpha must be a scalar ({alpha!r})")
    if a.dtype.kind != "c" and al.dtype.kind == "c":
        raise TypeError(f"{call}: complex alpha for a {a.dtype} array ({alpha!r})")
    al = al.astype(a.dtype).reshape(())
    if al == 1:
        return buf
    if is_device(buf):
        out = xp_like(buf)
        return (buf * al).astype(a.dtype) if out is None else out.multiply(buf, al.item(), dtype=a.dtype)
    return np.multiply(buf, al, dtype=a.dtype)


# --- patches ------------------------------------------------------------------------------------
def put(g_a, buffer, lo=None, hi=None) -> None:
    """``G[lo:hi] = buffer`` (NGA_Put). One-sided; returns once ``buffer`` may be reused."""
    a = arr(g_a, "put")
    lo, hi = patch_bounds(a, lo, hi, "put")
    shape = tuple(h - l for l, h in zip(lo, hi))
    if not math.prod(shape):
        return
    buf = host_buffer(a, buffer, shape, "put", False)
    _sim_sync(buf)
    _do_put(a, buf, lo, hi)
    device_sync(a)


def get(g_a, lo=None, hi=None, buffer=None):
    """``G[lo:hi]`` as an array (NGA_Get): into ``buffer`` if given, else a new NumPy array
    (host arrays) or device array (device arrays)."""
    a = arr(g_a, "get")
    lo, hi = patch_bounds(a, lo, hi, "get")
    shape = tuple(h - l for l, h in zip(lo, hi))
    if buffer is None:
        buf = new_patch_buffer(a, shape)
        out = buf
    else:
        out = buffer
        buf = host_buffer(a, buffer, shape, "get", True)
    if math.prod(shape):
        if buffer is not None and not _c_order(buf) and not _all_direct(a, lo, hi, buf):
            # the window's datatype path writes a buffer in its storage order: go through a
            # C-ordered one, then copy into the caller's view
            tmp = new_patch_buffer(a, shape) if not is_device(buf) else new_device_buffer(shape, a.dtype)
            _do_get(a, tmp, lo, hi)
            device_sync(a)
            _assign(buf, (Ellipsis,), tmp)
            return out
        _do_get(a, buf, lo, hi)
        device_sync(a)
    return out


def _c_order(buf) -> bool:
    if isinstance(buf, np.ndarray):
        return buf.flags.c_contiguous
    if getattr(buf, "__gpumpi_sim__", False):
        return buf._arr.flags.c_contiguous
    return buf.__cuda_array_interface__.get("strides") is None


def _all_direct(a: GAArray, lo, hi, buf) -> bool:
    """Whether every piece of the patch is copied straight into ``buf`` (mapped host memory)."""
    return not is_device(buf) and all(a.views[pc.proc] is not None for pc in _plan(a, lo, hi))


def _sim_sync(buf) -> None:
    if getattr(buf, "__gpumpi_sim__", False):
        from .._device import sim_adapter

        sim_adapter().synchronize()


def acc(g_a, buffer, lo=None, hi=None, alpha=None) -> None:
    """``G[lo:hi] += alpha * buffer``, atomic with respect to other accumulates (NGA_Acc)."""
    a = arr(g_a, "acc")
    lo, hi = patch_bounds(a, lo, hi, "acc")
    shape = tuple(h - l for l, h in zip(lo, hi))
    if not math.prod(shape):
        return
    buf = _scaled(a, host_buffer(a, buffer, shape, "acc", False), alpha, "acc")
    _sim_sync(buf)
    _do_acc(a, buf, lo, hi)
    device_sync(a)


def read_inc(g_a, subscript, inc: int = 1) -> int:
    """Atomically add ``inc`` to one element of an integer array and return its old value
    (NGA_Read_inc): one atomic fetch-and-add instruction on the owner's element where it is
    mapped here, else ``Win.Fetch_and_op(SUM)`` (the same instruction, issued by the window)."""
    a = arr(g_a, "read_inc")
    key = subscript if type(subscript) is tuple else None
    hit = a.rinc.get(key) if key is not None else None
    if hit is None:
        hit = _read_inc_target(a, subscript)
        if key is not None and len(a.rinc) < 4096:
            a.rinc[key] = hit
    proc, disp, addr = hit
    size = a.dtype.itemsize
    stats.moved(stats.READ_INC, 1, size, size if proc != a.me else 0)
    if addr:
        old = (_ATOMICS[0] if _ATOMICS else _atomics()).fetch_and_op(addr, inc, "SUM", a.dtype)
    else:
        MPI = mpi()
        one = np.array([int(inc)], dtype=a.dtype)
        res = np.empty(1, dtype=a.dtype)
        a.win.Fetch_and_op(one, res, proc, disp, MPI.SUM)
        old = res[0]
    if state.S.fence_depth:
        fence_touch(a)
    return int(old)


def _read_inc_target(a: GAArray, subscript) -> tuple:
    """``(owner, displacement, address or 0)`` of the element ``read_inc`` updates (checked)."""
    if a.dtype not in INTEGER_DTYPES:
        raise TypeError(f"read_inc: the array must be C_INT, C_LONG or C_LONGLONG ({a.dtype})")
    sub = as_ints(subscript, a.ndim, "read_inc", "subscript")
    proc = a.layout.locate(sub)
    if proc < 0:
        raise ValueError(f"read_inc: subscript out of bounds ({list(sub)}, dims {list(a.dims)})")
    idx = tuple(s.start for s in target_slices(a, proc, sub, tuple(x + 1 for x in sub)))
    disp = int(np.ravel_multi_index(idx, a.memshape(proc)))
    v = a.views[proc] if a.memory == "host" else None
    addr = v.__array_interface__["data"][0] + disp * a.dtype.itemsize if v is not None else 0
    return proc, disp, addr


_ATOMICS = []


def _atomics():
    if not _ATOMICS:
        from ..kernels import atomics

        _ATOMICS.append(atomics)
    return _ATOMICS[0]


# -- element lists
def _subs(a: GAArray, subsarray, call: str):
    s = np.asarray(subsarray, dtype=np.int64)
    if s.ndim == 1:
        if s.size % a.ndim:
            raise ValueError(f"{call}: flat subscripts must hold ndim={a.ndim} entries each ({s.size})")
        s = s.reshape(-1, a.ndim)
    if s.ndim != 2 or s.shape[1] != a.ndim:
        raise ValueError(f"{call}: subscripts must be (n, {a.ndim}) ({list(s.shape)})")
    if s.size and ((s < 0).any() or (s >= np.array(a.dims)).any()):
        bad = s[((s < 0) | (s >= np.array(a.dims))).any(axis=1)][0]
        raise ValueError(f"{call}: subscript out of bounds ({bad.tolist()}, dims {list(a.dims)})")
    return s


def _owners(a: GAArray, s):
    """Owner of each subscript row, and its flat index in the owner's window memory."""
    lay = a.layout
    coords = np.empty_like(s)
    for d in range(a.ndim):
        coords[:, d] = np.searchsorted(np.array(lay.starts[d]), s[:, d], side="right") - 1
    proc = np.ravel_multi_index(coords.T, lay.grid) if s.size else np.zeros(0, np.int64)
    return proc, coords


def _count_indexed(kind: int, a: GAArray, proc) -> None:
    """GA's statistics of one scatter or gather of the elements owned by ``proc`` (an array)."""
    size = a.dtype.itemsize
    stats.moved(kind, len(np.unique(proc)), proc.size * size, int((proc != a.me).sum()) * size)


def _local_flat(a: GAArray, proc: int, rows):
    blo, _ = a.layout.block(a.layout.coords(proc))
    loc = rows - np.array(blo) + np.array(a.ghosts)
    return np.ravel_multi_index(loc.T, a.memshape(proc)).astype(np.int64)


def _indexed(a: GAArray, flat):
    base = basic_type(a.dtype)
    t = base.Create_indexed_block(1, flat.tolist())
    t.Commit()
    return t


def scatter(g_a, values, subsarray) -> None:
    """``G[subs[k]] = values[k]`` (NGA_Scatter)."""
    _scatter(g_a, values, subsarray, None, "scatter")


def scatter_acc(g_a, values, subsarray, alpha=None) -> None:
    """``G[subs[k]] += alpha * values[k]``, atomic like ``acc``; repeated subscripts add up
    (NGA_Scatter_acc)."""
    _scatter(g_a, values, subsarray, alpha if alpha is not None else 1, "scatter_acc")


def _scatter(g_a, values, subsarray, alpha, call: str) -> None:
    MPI = mpi()
    a = arr(g_a, call)
    s = _subs(a, subsarray, call)
    n = s.shape[0]
    v = host_buffer(a, values, (n,), call, False)
    if is_device(v):
        v = to_host(v)
    if alpha is not None:
        v = _scaled(a, v, alpha, call)
    proc, _ = _owners(a, s)
    _count_indexed(stats.SCATTER, a, proc)
    for p in np.unique(proc).tolist():
        sel = proc == p
        rows, vals = s[sel], np.ascontiguousarray(v[sel])
        flat = _local_flat(a, p, rows)
        if alpha is not None:  # duplicates add up: one accumulate per distinct element
            flat, inv = np.unique(flat, return_inverse=True)
            summed = np.zeros(flat.size, a.dtype)
            np.add.at(summed, inv.reshape(-1), vals)
            vals = summed
            if a.acclock is not None:  # the way every accumulate to this array goes
                _lock_acc(a, p, call)
                try:
                    a.views[p].reshape(-1)[flat] += vals
                finally:
                    _unlock_acc(a, p)
                continue
            t = _indexed(a, flat)
            a.win.Accumulate([vals, 1, basic_type(a.dtype).Create_contiguous(vals.size).Commit()], p,
                             target=(0, 1, t), op=MPI.SUM)
            continue
        view = a.views[p]
        if view is not None:
            view.reshape(-1)[flat] = vals
        else:
            t = _indexed(a, flat)
            a.win.Put(vals, p, target=(0, 1, t))
    device_sync(a)
    fence_touch(a)


def gather(g_a, subsarray, values=None):
    """``values[k] = G[subs[k]]`` (NGA_Gather): a new NumPy array unless ``values`` is given."""
    a = arr(g_a, "gather")
    s = _subs(a, subsarray, "gather")
    n = s.shape[0]
    out = np.empty(n, a.dtype) if values is None else host_buffer(a, values, (n,), "gather", True)
    proc, _ = _owners(a, s)
    _count_indexed(stats.GATHER, a, proc)
    for p in np.unique(proc).tolist():
        sel = np.flatnonzero(proc == p)
        flat = _local_flat(a, p, s[sel])
        view = a.views[p]
        if view is not None:
            out[sel] = view.reshape(-1)[flat]
        else:
            tmp = np.empty(sel.size, a.dtype)
            a.win.Get(tmp, p, target=(0, 1, _indexed(a, flat)))
            out[sel] = tmp
    device_sync(a)
    return out


# -- periodic and strided patches
def _periodic(g_a, lo, hi, call: str):
    a = arr(g_a, call)
    lo = as_ints(lo, a.ndim, call, "lo")
    hi = as_ints(hi, a.ndim, call, "hi")
    pieces = periodic_pieces(a.dims, lo, hi)
    return a, lo, hi, tuple(h - l for l, h in zip(lo, hi)), pieces


def periodic_get(g_a, lo, hi, buffer=None):
    """``G[lo:hi]`` with indices wrapping around every dimension (NGA_Periodic_get)."""
    a, lo, hi, shape, pieces = _periodic(g_a, lo, hi, "periodic_get")
    out = new_patch_buffer(a, shape) if buffer is None else buffer
    buf = out if buffer is None else host_buffer(a, buffer, shape, "periodic_get", True)
    for plo, phi, boff in pieces:
        sub = tuple(h - l for l, h in zip(plo, phi))
        part = np.empty(sub, a.dtype) if not is_device(buf) else new_device_buffer(sub, a.dtype)
        _do_get(a, part, plo, phi)
        _assign(buf, tuple(slice(b, b + n) for b, n in zip(boff, sub)), part)
    device_sync(a)
    return out


def _assign(dst, idx, src) -> None:
    if getattr(dst, "__gpumpi_sim__", False):
        from .._device import sim_adapter

        sim_adapter().synchronize()
        dst._arr[idx] = src._arr if getattr(src, "__gpumpi_sim__", False) else src
        return
    dst[idx] = src


def _part(buf, idx):
    """A contiguous copy of ``buf[idx]`` (host or device)."""
    if getattr(buf, "__gpumpi_sim__", False):
        from .._device import sim_adapter
        from .._device.simarray import SimDeviceArray

        sim_adapter().synchronize()
        return SimDeviceArray.from_numpy(np.ascontiguousarray(buf._arr[idx]))
    xp = xp_like(buf)
    return (xp if xp is not None else np).ascontiguousarray(buf[idx])


def periodic_put(g_a, buffer, lo, hi) -> None:
    """``G[lo:hi] = buffer`` with wrapping indices (NGA_Periodic_put)."""
    a, lo, hi, shape, pieces = _periodic(g_a, lo, hi, "periodic_put")
    buf = host_buffer(a, buffer, shape, "periodic_put", False)
    for plo, phi, boff in pieces:
        sub = tuple(h - l for l, h in zip(plo, phi))
        _do_put(a, _part(buf, tuple(slice(b, b + n) for b, n in zip(boff, sub))), plo, phi)
    device_sync(a)


def periodic_acc(g_a, buffer, lo, hi, alpha=None) -> None:
    """``G[lo:hi] += alpha * buffer`` with wrapping indices (NGA_Periodic_acc)."""
    a, lo, hi, shape, pieces = _periodic(g_a, lo, hi, "periodic_acc")
    buf = _scaled(a, host_buffer(a, buffer, shape, "periodic_acc", False), alpha, "periodic_acc")
    for plo, phi, boff in pieces:
        sub = tuple(h - l for l, h in zip(plo, phi))
        _do_acc(a, _part(buf, tuple(slice(b, b + n) for b, n in zip(boff, sub))), plo, phi)
    device_sync(a)


def _strided(a: GAArray, lo, hi, skip, call: str):
    lo, hi = check_patch(call, a.dims, lo, hi)
    skip = as_ints(skip, a.ndim, call, "skip")
    shape = strided_shape(lo, hi, skip)
    out = []
    for proc, plo, phi in a.layout.locate_region(lo, hi):
        first = tuple(l + -(-(p - l) // s) * s for l, p, s in zip(lo, plo, skip))
        cnt = tuple(max(0, -(-(h - f) // s)) for f, h, s in zip(first, phi, skip))
        if 0 in cnt:
            continue
        bstart = tuple((f - l) // s for f, l, s in zip(first, lo, skip))
        tgt = target_slices(a, proc, first, tuple(f + 1 for f in first))
        out.append((proc, tuple(t.start for t in tgt), cnt, bstart))
    return shape, skip, out


def strided_get(g_a, lo, hi, skip, buffer=None):
    """Every ``skip[d]``-th element of the patch (NGA_Strided_get)."""
    a = arr(g_a, "strided_get")
    shape, skip, parts = _strided(a, lo, hi, skip, "strided_get")
    out = new_patch_buffer(a, shape) if buffer is None else buffer
    buf = out if buffer is None else host_buffer(a, buffer, shape, "strided_get", True)
    for proc, start, cnt, bstart in parts:
        v = a.views[proc]
        bidx = tuple(slice(b, b + c) for b, c in zip(bstart, cnt))
        if v is not None and not is_device(buf):
            buf[bidx] = v[tuple(slice(s, s + c * k, k) for s, c, k in zip(start, cnt, skip))]
            continue
        a.win.Get([buf, 1, box_types(a, shape, bstart, cnt)[0]], proc,
                  target=(0, 1, box_types(a, a.memshape(proc), start, cnt, skip)[0]))
    device_sync(a)
    return out


def strided_put(g_a, buffer, lo, hi, skip) -> None:
    """Write every ``skip[d]``-th element of the patch (NGA_Strided_put)."""
    _strided_write(g_a, buffer, lo, hi, skip, None, "strided_put")


def strided_acc(g_a, buffer, lo, hi, skip, alpha=None) -> None:
    """Accumulate into every ``skip[d]``-th element of the patch (NGA_Strided_acc)."""
    _strided_write(g_a, buffer, lo, hi, skip, 1 if alpha is None else alpha, "strided_acc")


def _strided_write(g_a, buffer, lo, hi, skip, alpha, call: str) -> None:
    MPI = mpi()
    a = arr(g_a, call)
    shape, skip, parts = _strided(a, lo, hi, skip, call)
    buf = host_buffer(a, buffer, shape, call, False)
    if alpha is not None:
        buf = _scaled(a, buf, alpha, call)
    for proc, start, cnt, bstart in parts:
        v = a.views[proc]
        bidx = tuple(slice(b, b + c) for b, c in zip(bstart, cnt))
        tidx = tuple(slice(s, s + c * k, k) for s, c, k in zip(start, cnt, skip))
        if alpha is None and v is not None and not is_device(buf):
            v[tidx] = buf[bidx]
            continue
        if alpha is not None and a.acclock is not None and not is_device(buf):
            _lock_acc(a, proc, call)  # (the way every accumulate to this array goes)
            try:
                v[tidx] += buf[bidx]
            finally:
                _unlock_acc(a, proc)
            continue
        origin = [buf, 1, box_types(a, shape, bstart, cnt)[0]]
        target = (0, 1, box_types(a, a.memshape(proc), start, cnt, skip)[0])
        if alpha is None:
            a.win.Put(origin, proc, target=target)
        else:
            a.win.Accumulate(origin, proc, target=target, op=MPI.SUM)
    device_sync(a)
    fence_touch(a)


# -- nonblocking: complete at the call; the handle says so
def _nb_handle() -> int:
    h = state.S.next_nb
    state.S.next_nb += 1
    state.S.nb[h] = True
    return h


def nbput(g_a, buffer, lo=None, hi=None) -> int:
    """Nonblocking put (NGA_NbPut): complete on return here; wait on the handle with ``nbwait``."""
    put(g_a, buffer, lo, hi)
    return _nb_handle()


def nbacc(g_a, buffer, lo=None, hi=None, alpha=None) -> int:
    """Nonblocking accumulate (NGA_NbAcc)."""
    acc(g_a, buffer, lo, hi, alpha)
    return _nb_handle()


def nbget(g_a, lo=None, hi=None, buffer=None) -> tuple:
    """Nonblocking get (NGA_NbGet): ``(buffer, handle)``."""
    return get(g_a, lo, hi, buffer), _nb_handle()


def nbwait(nbhandle) -> None:
    """Complete a nonblocking operation (NGA_NbWait); each handle is waited on once."""
    try:
        del state.S.nb[int(nbhandle)]
    except (KeyError, TypeError, ValueError):
        raise GAError(f"nbwait: unknown or already completed handle ({nbhandle!r})") from None


def nbtest(nbhandle) -> bool:
    """Whether a nonblocking operation completed (NGA_NbTest): always, here."""
    if int(nbhandle) not in state.S.nb:
        raise GAError(f"nbtest: unknown or already completed handle ({nbhandle!r})")
    return True


# --- for the collective operations ----------------------------------------------------------------
def fetch(a: GAArray, lo, hi):
    """The patch ``[lo, hi)`` of ``a`` as a new array of :func:`xp_of` (one-sided get)."""
    shape = tuple(h - l for l, h in zip(lo, hi))
    if a.memory == "host" or is_sim(a):
        out = np.empty(shape, a.dtype)
        if patch_size(lo, hi):
            if is_sim(a):
                tmp = new_device_buffer(shape, a.dtype)
                _do_get(a, tmp, lo, hi)
                device_sync(a)
                from .._device import sim_adapter

                sim_adapter().synchronize()
                out[...] = tmp._arr
            else:
                _do_get(a, out, lo, hi)
        return out
    out = new_device_buffer(shape, a.dtype)
    if patch_size(lo, hi):
        _do_get(a, out, lo, hi)
        device_sync(a)
    return out


def store(a: GAArray, values, lo, hi) -> None:
    """Write an array of :func:`xp_of` (or NumPy) to the patch ``[lo, hi)`` (one-sided put)."""
    if not patch_size(lo, hi):
        return
    if is_sim(a):
        from .._device.simarray import SimDeviceArray

        values = SimDeviceArray.from_numpy(np.ascontiguousarray(values))
    elif a.memory == "host":
        values = np.ascontiguousarray(values, dtype=a.dtype)
    _do_put(a, values, lo, hi)
    device_sync(a)
