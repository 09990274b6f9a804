"""Pack/unpack kernels for derived datatypes (L3): host ``numba.njit``, device ``numba.cuda.jit``.

Theory of operation
===================
A :class:`~gpumpi.datatypes.plan.Plan` (L2) describes ``count`` elements of a
committed datatype in one of three canonical forms; this module moves the bytes
of the two non-contiguous ones with a small family of generic kernels, one per
(form, direction), specialised only by the copy word (``uint64``, ``uint32``,
``uint16``, ``uint8``):

* ``strided`` -- ``shape = (*counts, blocklen)`` and byte ``strides`` (one per
  count, any sign).  The host kernel walks the counts with an odometer (any
  number of dimensions, passed as ``int64`` arrays), copying one row of the
  innermost dimension per step; the device kernel gives each thread one packed
  word and unravels its block number over the counts.
* ``gather`` -- ``index()`` lists the packed stream's words (relative to
  ``lo``); pack is ``out[i] = mem[index[i]]``, unpack the reverse scatter.

Contiguous plans never reach a kernel (a slice copy on the host, a
device-to-device copy on the device).

Words
-----
A kernel copies in the widest word ``w`` that divides the plan's word (block
length, strides and offsets) *and* the actual addresses of the first touched
byte of user memory and of the packed buffer (and, for a partial unpack, the
number of bytes), so every load and store is naturally aligned.  A gather plan's
index is in plan words; when alignment forces ``w`` below the plan's word, each
index entry covers ``r = plan.word // w`` kernel words.  Partial unpack of ``n <
plan.nbytes`` bytes copies the first ``n // w`` packed words, ``w`` also dividing
``n`` (an odd ``n`` copies bytes): byte-granular, never past the message.  Host
kernels index with ``uintp`` so numba skips its negative-index wraparound.

Memory
------
``mem`` is a bytes-like object of user memory in which type offset ``o`` lies at
``mem[o - lo]`` (as for ``Plan.pack_into``); on the device, a C-contiguous device
array (numba, or anything with ``__cuda_array_interface__``; NumPy arrays under
the simulator) with type offset ``o`` at byte ``o - lo``.  The kernels see word
arrays that start at the plan's first touched byte, so indices are never negative
and never pass ``hi`` (the public calls check the bounds first; the kernels do
not).  Sources reach the host kernels read-only, whatever the caller passed, so
each host kernel has one specialisation per word (16 in all).

Policy
------
:func:`use_kernel` decides, per plan and direction, whether ``Plan.pack_into`` /
``unpack_from`` take the host kernel or keep their NumPy copy; it encodes
measurements of both paths (1 KiB to 1 MiB messages): gather plans and partial
unpacks go to the kernel, strided plans only for the block lengths where NumPy's
strided copy is weak.  The device functions always use the kernels.

Compilation and caching
-----------------------
Nothing here imports numba at module level.  The host kernels are built by
:func:`_host` on first use, ``numba.njit(cache=True, nogil=True)`` over the
module-level Python functions below, so numba's disk cache keys them by this
file: numba writes next to this module, or in the user-wide cache directory
(``~/.cache/numba``) when the package directory is read-only (a site-packages
install); when no location is writable they are compiled in memory.  A cold
compile of all 16 specialisations costs seconds, a load from the cache a few
tenths; :func:`compile_host` does either and returns the seconds taken.  The
device kernels are built by :func:`_device`, the only place ``numba.cuda`` is
imported (``cache=True`` on a real GPU).

Importing this module installs the host kernels into ``datatypes.plan``
(:func:`gpumpi.datatypes.plan.install_kernels`) when numba is installed; the MPI
facade registers a loader so that the first non-contiguous pack imports it.

Device tables (the strided geometry, the gather index) are uploaded once per
plan, word and device and kept, with the host geometry, in a small cache keyed by
the plan's id (the entry holds the plan, so the id cannot be reused while it is
cached; the oldest of :data:`_MAX_TABLES` plans is dropped first).

Errors read ``"<call>: <problem> (<values>)"``.
"""

from __future__ import annotations

import importlib.util
import time
from collections import OrderedDict

import numpy as np

from .._arrays import DEVICE, NP_WRITEABLE, ndarray_addr_flags
from .._device import cuda_pointer_attributes
from ..datatypes import plan as _plan

__all__ = ["host_pack", "host_unpack", "device_pack", "device_unpack", "compile_host", "use_kernel",
           "kernels_cached_on_disk"]

_WORDS = {8: np.dtype(np.uint64), 4: np.dtype(np.uint32), 2: np.dtype(np.uint16), 1: np.dtype(np.uint8)}
_U8 = np.dtype(np.uint8)
_I8 = np.dtype(np.int64)

#: strided plans go to the host kernel for blocks in this byte range (NumPy copies other blocks
#: as fast or faster: word rows up to 16 bytes, memcpy-sized void items from 64 bytes)
STRIDED_KERNEL_BLOCKS = range(17, 64)
#: full unpacks of gather plans (word > 1) go to the host kernel from this many bytes on
GATHER_UNPACK_MIN = 32768

_MAX_TABLES = 64  # plans whose host/device tables are kept


def use_kernel(plan, unpack: int | None = None) -> bool:
    """Whether the host kernel beats NumPy for ``plan`` (the policy installed into ``datatypes.plan``).

    ``unpack`` is None for a pack, else the number of bytes unpacked.  From timings of
    both paths on 1 KiB to 1 MiB messages (two-core development machine):

    * partial unpacks: always (NumPy builds a byte index per call: 0.3 GB/s against 5-17);
    * gather plans: packs always (1.2-2.3x at every block size, lower call overhead);
      full unpacks from :data:`GATHER_UNPACK_MIN` bytes or with 1-byte words (below,
      NumPy's indexed assignment costs about 2 us less per call);
    * strided plans: blocks of 17 to 63 bytes (up to 1.8x); NumPy's strided word copy
      and its memcpy of 16-byte and >= 64-byte items match or beat the kernel elsewhere.
    """
    kind = plan.kind
    if unpack is not None and unpack < plan.nbytes:
        return kind != "contig"
    if kind == "strided":
        return plan.shape[-1] in STRIDED_KERNEL_BLOCKS
    if kind == "gather":
        return unpack is None or plan.word == 1 or plan.nbytes >= GATHER_UNPACK_MIN
    return False


# -- the kernels, as plain Python (compiled by _host / mirrored by _device) --------------------------


def _strided_pack(src, s0, counts, strides, nb, dst, nw):
    """``dst[:nw]`` = the first ``nw`` words of the blocks of ``src``, block after block.

    ``src`` word ``s0`` starts the first block; ``counts``/``strides`` (in words) list the
    grid outermost first; ``nb`` words per block.  One step of the outer loop copies a
    row of the innermost dimension, then the odometer advances the outer dimensions::

        counts = (2, 3), nb = 2          src:  [b0 ][b1 ][b2 ]   <- row 0, stride strides[1]
                                                 [b3 ][b4 ][b5 ]   <- row 1 = row 0 + strides[0]
        dst: b0 b1 b2 b3 b4 b5  (nb words each)

    Offsets are signed (strides may be negative) but every index is cast to ``uintp``:
    numba then skips its negative-index wraparound, which costs half the speed.
    """
    k = counts.shape[0]
    pos = np.zeros(k, np.int64)
    cin = counts[k - 1]
    sin = strides[k - 1]
    off = s0
    d = 0
    while d < nw:
        m = (nw - d) // nb  # whole blocks left
        if m > cin:
            m = cin
        if nb == 1:
            for i in range(m):
                dst[np.uintp(d + i)] = src[np.uintp(off + i * sin)]
            d += m
        else:
            o = off
            for i in range(m):
                for j in range(nb):
                    dst[np.uintp(d + j)] = src[np.uintp(o + j)]
                d += nb
                o += sin
        if m < cin:  # a prefix (partial unpack) ends inside this row: the head of one more block
            o = off + m * sin
            for j in range(nw - d):
                dst[np.uintp(d + j)] = src[np.uintp(o + j)]
            return
        i = k - 2
        while i >= 0:
            pos[i] += 1
            off += strides[i]
            if pos[i] < counts[i]:
                break
            off -= counts[i] * strides[i]
            pos[i] = 0
            i -= 1


def _strided_unpack(dst, s0, counts, strides, nb, src, nw):
    """The reverse of :func:`_strided_pack`: the first ``nw`` words of ``src`` into the blocks of ``dst``."""
    k = counts.shape[0]
    pos = np.zeros(k, np.int64)
    cin = counts[k - 1]
    sin = strides[k - 1]
    off = s0
    d = 0
    while d < nw:
        m = (nw - d) // nb
        if m > cin:
            m = cin
        if nb == 1:
            for i in range(m):
                dst[np.uintp(off + i * sin)] = src[np.uintp(d + i)]
            d += m
        else:
            o = off
            for i in range(m):
                for j in range(nb):
                    dst[np.uintp(o + j)] = src[np.uintp(d + j)]
                d += nb
                o += sin
        if m < cin:
            o = off + m * sin
            for j in range(nw - d):
                dst[np.uintp(o + j)] = src[np.uintp(d + j)]
            return
        i = k - 2
        while i >= 0:
            pos[i] += 1
            off += strides[i]
            if pos[i] < counts[i]:
                break
            off -= counts[i] * strides[i]
            pos[i] = 0
            i -= 1


def _gather_pack(src, idx, r, dst, nw):
    """``dst[:nw]`` = the words ``idx`` names, each entry ``r`` consecutive words of ``src``::

        idx = [5, 0, 7], r = 2:   dst = src[10:12] src[0:2] src[14:16]
    """
    if r == 1:
        for i in range(nw):
            dst[np.uintp(i)] = src[np.uintp(idx[np.uintp(i)])]
        return
    n = nw // r
    for i in range(n):
        b = idx[np.uintp(i)] * r
        d = i * r
        for j in range(r):
            dst[np.uintp(d + j)] = src[np.uintp(b + j)]
    if nw > n * r:
        b = idx[np.uintp(n)] * r
        for j in range(nw - n * r):
            dst[np.uintp(n * r + j)] = src[np.uintp(b + j)]


def _gather_unpack(dst, idx, r, src, nw):
    """The reverse of :func:`_gather_pack`: scatter the first ``nw`` words of ``src``."""
    if r == 1:
        for i in range(nw):
            dst[np.uintp(idx[np.uintp(i)])] = src[np.uintp(i)]
        return
    n = nw // r
    for i in range(n):
        b = idx[np.uintp(i)] * r
        d = i * r
        for j in range(r):
            dst[np.uintp(b + j)] = src[np.uintp(d + j)]
    if nw > n * r:
        b = idx[np.uintp(n)] * r
        for j in range(nw - n * r):
            dst[np.uintp(b + j)] = src[np.uintp(n * r + j)]


# -- host --------------------------------------------------------------------------------------------

_HOST = None  # (strided_pack, strided_unpack, gather_pack, gather_unpack) once compiled
_ON_DISK = None  # whether the host kernels have a disk cache


def _njit(fn):
    import numba

    global _ON_DISK
    try:
        k = numba.njit(cache=True, nogil=True)(fn)
        _ON_DISK = True
    except RuntimeError:  # no writable cache location at all: compile in memory only
        k = numba.njit(cache=False, nogil=True)(fn)
        _ON_DISK = False
    return k


def _host():
    global _HOST
    k = _HOST
    if k is None:
        k = _HOST = tuple(_njit(f) for f in (_strided_pack, _strided_unpack, _gather_pack, _gather_unpack))
    return k


def kernels_cached_on_disk() -> bool | None:
    """Whether the host kernels use numba's disk cache (None before they are built)."""
    return _ON_DISK


def compile_host() -> float:
    """Compile (or load from numba's disk cache) every host kernel specialisation; returns the seconds taken."""
    t0 = time.perf_counter()
    sp, su, gp, gu = _host()
    counts = np.array([2], _I8)
    strides = np.array([1], _I8)
    idx = np.array([1, 0], _I8)
    for w, dt in _WORDS.items():
        a = np.zeros(2, dt)
        b = np.zeros(2, dt)
        ro = a.view()
        ro.flags.writeable = False
        sp(ro, 0, counts, strides, 1, b, 2)
        su(b, 0, counts, strides, 1, ro, 2)
        gp(ro, idx, 1, b, 2)
        gu(b, idx, 1, ro, 2)
    return time.perf_counter() - t0


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _fit(w: int, bits: int) -> int:
    """Widest power of two ``<= w`` dividing ``bits`` (an OR of addresses and sizes)."""
    while bits & (w - 1):
        w >>= 1
    return w


_TABLES: OrderedDict = OrderedDict()  # id(plan) -> (plan, {key: table})


def _tables(plan) -> dict:
    key = id(plan)
    ent = _TABLES.get(key)
    if ent is None or ent[0] is not plan:
        ent = (plan, {})
        _TABLES[key] = ent
        if len(_TABLES) > _MAX_TABLES:
            _TABLES.popitem(last=False)
    return ent[1]


def _geometry(plan, w: int):
    """``(s0, counts, strides, nb)`` of a strided plan in ``w``-byte words (cached per plan and word)."""
    t = _tables(plan)
    g = t.get(w)
    if g is None:
        g = t[w] = ((plan.start - plan.lo) // w, np.array(plan.shape[:-1], _I8),
                    np.array([s // w for s in plan.strides], _I8), plan.shape[-1] // w)
    return g


def _index(plan) -> np.ndarray:
    idx = plan.index()
    return idx if idx.dtype == _I8 else idx.astype(_I8)


# The host paths below run once per message: every step is a cheap NumPy call (a
# read-only memoryview makes the source array read-only without touching its flags;
# addresses come from _arrays' ndarray peek).


def _pack(plan, mem, lo: int, out) -> None:
    """Kernel pack of a validated non-contiguous plan (the hook ``Plan.pack_into`` calls)."""
    n = plan.nbytes
    src = np.frombuffer(memoryview(mem).toreadonly(), _U8, plan.hi - plan.lo, plan.lo - lo)
    dst = np.frombuffer(out, _U8, n)
    oa, fl = ndarray_addr_flags(dst)
    if not fl & NP_WRITEABLE:
        raise ValueError(f"pack: output is read-only ({type(out).__name__} of {len(dst)} bytes)")
    w = _fit(plan.word, ndarray_addr_flags(src)[0] | oa)
    if w > 1:
        dt = _WORDS[w]
        src = src.view(dt)
        dst = dst.view(dt)
    k = _HOST or _host()
    if plan.kind == "strided":
        s0, counts, strides, nb = _geometry(plan, w)
        k[0](src, s0, counts, strides, nb, dst, n // w)
    else:
        k[2](src, _index(plan), plan.word // w, dst, n // w)


def _unpack(plan, packed, mem, lo: int, n: int) -> None:
    """Kernel unpack of the first ``n`` packed bytes of a validated non-contiguous plan."""
    src = np.frombuffer(memoryview(packed).toreadonly(), _U8, n)
    dst = np.frombuffer(mem, _U8, plan.hi - plan.lo, plan.lo - lo)
    da, fl = ndarray_addr_flags(dst)
    if not fl & NP_WRITEABLE:
        raise ValueError(f"unpack: memory is read-only ({type(mem).__name__} of {len(dst)} bytes)")
    w = _fit(plan.word, da | ndarray_addr_flags(src)[0] | n)
    if w > 1:
        dt = _WORDS[w]
        src = src.view(dt)
        dst = dst.view(dt)
    k = _HOST or _host()
    if plan.kind == "strided":
        s0, counts, strides, nb = _geometry(plan, w)
        k[1](dst, s0, counts, strides, nb, src, n // w)
    else:
        k[3](dst, _index(plan), plan.word // w, src, n // w)


def _covers(plan, size: int, lo: int, call: str, what: str) -> None:
    if plan.nbytes and (plan.lo < lo or plan.hi - lo > size):
        raise ValueError(f"{call}: {what} does not cover the datatype's bytes (needs [{plan.lo}, {plan.hi}), "
                         f"given [{lo}, {lo + size}))")


def _nbytes_of(buf) -> int:
    return memoryview(buf).nbytes


def host_pack(plan, mem, lo: int, out) -> None:
    """Pack ``plan.nbytes`` bytes from ``mem`` (type offset ``o`` at ``mem[o - lo]``) into ``out`` on the host.

    Args:
        plan: a :class:`~gpumpi.datatypes.plan.Plan`.
        mem: bytes-like user memory (read).
        lo: the type offset of ``mem[0]``.
        out: writable bytes-like buffer of at least ``plan.nbytes`` bytes.

    Raises:
        ValueError: ``mem`` does not cover the plan's bytes or ``out`` is too small.
    """
    _covers(plan, _nbytes_of(mem), lo, "host_pack", "memory")
    n = plan.nbytes
    if _nbytes_of(out) < n:
        raise ValueError(f"host_pack: output too small ({_nbytes_of(out)} bytes, the message has {n})")
    if not n:
        return
    if plan.kind == "contig":
        base = plan.lo - lo
        memoryview(out).cast("B")[:n] = memoryview(mem).cast("B")[base:base + n]
        return
    _pack(plan, mem, lo, out)


def host_unpack(plan, packed, mem, lo: int, nbytes: int | None = None) -> None:
    """Unpack ``nbytes`` (default: all) packed bytes from ``packed`` into ``mem`` on the host.

    Args:
        plan: a :class:`~gpumpi.datatypes.plan.Plan`.
        packed: bytes-like packed data (read).
        mem: writable bytes-like user memory; type offset ``o`` at ``mem[o - lo]``.
        lo: the type offset of ``mem[0]``.
        nbytes: a leading part of the message (a short message): exactly these bytes are written.

    Raises:
        ValueError: ``mem`` does not cover the plan's bytes, ``nbytes`` is out of range or
            ``packed`` is too short.
    """
    _covers(plan, _nbytes_of(mem), lo, "host_unpack", "memory")
    n = plan.nbytes if nbytes is None else nbytes
    if n < 0 or n > plan.nbytes:
        raise ValueError(f"host_unpack: nbytes out of range ({n}; the message has {plan.nbytes})")
    if _nbytes_of(packed) < n:
        raise ValueError(f"host_unpack: packed data too short ({_nbytes_of(packed)} bytes, expected {n})")
    if not n:
        return
    if plan.kind == "contig":
        base = plan.lo - lo
        memoryview(mem).cast("B")[base:base + n] = memoryview(packed).cast("B")[:n]
        return
    _unpack(plan, packed, mem, lo, n)


# -- device ------------------------------------------------------------------------------------------

_DEV = None  # (cuda module, simulator?, strided_pack, strided_unpack, gather_pack, gather_unpack)
_THREADS, _MAX_BLOCKS = 256, 4096
_SIM_THREADS, _SIM_MAX_BLOCKS = 32, 2  # the simulator runs a Python thread per CUDA thread


_cuda = None  # numba.cuda once _device() ran: the device kernels below name it as a global, which
# numba resolves at compile time and the simulator swaps for its fake module while a kernel runs


def _d_strided_pack(src, s0, geom, k, nb, dst, nw):
    """Device strided pack: one thread per packed word, in a grid-stride loop::

        packed word t:  | 0 1 2 3 | 4 5 6 7 | ... |      blocks of nb words
        thread:           0 1 2 3   4 5 6 7          t += gridsize until nw

        block = t // nb, unravelled over counts = geom[:k] (innermost last);
        src word = s0 + sum(i_e * strides[e]) + t % nb, strides = geom[k:]
    """
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < nw:
        blk = t // nb
        off = s0 + t - blk * nb
        for e in range(k - 1, -1, -1):
            c = geom[e]
            q = blk // c
            off += (blk - q * c) * geom[k + e]
            blk = q
        dst[t] = src[off]
        t += step


def _d_strided_unpack(dst, s0, geom, k, nb, src, nw):
    """Device strided unpack: the scatter mirror of :func:`_d_strided_pack`."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < nw:
        blk = t // nb
        off = s0 + t - blk * nb
        for e in range(k - 1, -1, -1):
            c = geom[e]
            q = blk // c
            off += (blk - q * c) * geom[k + e]
            blk = q
        dst[off] = src[t]
        t += step


def _d_gather_pack(src, idx, r, dst, nw):
    """Device gather pack: thread ``t`` copies src word ``idx[t // r] * r + t % r`` to ``dst[t]``."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < nw:
        q = t // r
        dst[t] = src[idx[q] * r + t - q * r]
        t += step


def _d_gather_unpack(dst, idx, r, src, nw):
    """Device gather unpack: the scatter mirror of :func:`_d_gather_pack`."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < nw:
        q = t // r
        dst[idx[q] * r + t - q * r] = src[t]
        t += step


def _device():
    """``(numba.cuda, simulator?, strided_pack, strided_unpack, gather_pack, gather_unpack)``.

    Imports ``numba.cuda`` (numba-cuda's simulator under ``NUMBA_ENABLE_CUDASIM=1``) and
    wraps the device kernels above with ``cuda.jit``, on first use.
    """
    global _DEV, _cuda
    d = _DEV
    if d is not None:
        return d
    from numba import cuda

    _cuda = cuda
    fns = (_d_strided_pack, _d_strided_unpack, _d_gather_pack, _d_gather_unpack)
    kernels = jit_kernels({fn.__name__: fn for fn in fns})
    d = _DEV = (cuda, _is_sim(), *kernels.values())
    return d


def jit_kernels(fns: dict) -> dict:
    """``{name: cuda.jit(fn)}`` for the device kernels of a module: cached on disk unless numba's
    simulator runs them, and uncached where no cache location is writable (pack, reduce, atomics)."""
    from numba import cuda

    sim = _is_sim()
    kernels = {}
    for name, fn in fns.items():
        try:
            kernels[name] = cuda.jit(cache=not sim)(fn)
        except RuntimeError:  # no writable cache location
            kernels[name] = cuda.jit(fn)
    return kernels


def _is_sim() -> bool:
    from numba.cuda.core import config

    return bool(config.ENABLE_CUDASIM)


class _HostInterface:
    """Host-addressable memory behind a ``__cuda_array_interface__`` (simulator only), as NumPy sees it."""

    def __init__(self, cai: dict) -> None:
        self.__array_interface__ = {"data": cai["data"], "shape": cai["shape"], "typestr": cai["typestr"],
                                    "strides": cai.get("strides"), "version": 3}


def _device_bytes(obj, cuda, sim: bool, call: str, what: str):
    """``(1-D uint8 device array, address)`` over ``obj``'s bytes."""
    if sim:
        a = getattr(obj, "_ary", obj)  # a simulator FakeCUDAArray wraps a NumPy array
        if not isinstance(a, np.ndarray):
            cai = getattr(obj, "__cuda_array_interface__", None)
            if cai is None:
                a = np.frombuffer(obj, dtype=_U8)
            else:
                where = cuda_pointer_attributes(cai["data"][0])
                if where is not None and where[0] == DEVICE:
                    raise BufferError(f"{call}: {what} is real device memory but numba.cuda is the simulator "
                                      f"(NUMBA_ENABLE_CUDASIM=1; pointer {cai['data'][0]:#x})")
                a = np.asarray(_HostInterface(cai))
        if not a.flags.c_contiguous:
            raise BufferError(f"{call}: {what} is not C-contiguous (shape {a.shape}, strides {a.strides})")
        a = a.reshape(-1).view(_U8)
        return a, _addr(a)
    if getattr(obj, "__cuda_ndarray__", False):  # a numba device array
        a = obj
    elif cuda.is_cuda_array(obj):
        a = cuda.as_cuda_array(obj, sync=False)
    else:
        raise TypeError(f"{call}: {what} is not device memory (got {type(obj).__name__}; expected an object "
                        f"with __cuda_array_interface__)")
    if not a.is_c_contiguous():
        raise BufferError(f"{call}: {what} is not C-contiguous (shape {a.shape}, strides {a.strides})")
    if a.ndim != 1:
        a = a.reshape(a.size)
    if a.dtype != _U8:
        a = a.view(_U8)
    return a, a.__cuda_array_interface__["data"][0]


def _device_table(plan, key, make, cuda, sim: bool, stream):
    t = _tables(plan)
    dev = 0 if sim else cuda.get_current_device().id
    k = (dev, *key)
    a = t.get(k)
    if a is None:
        host = make()
        a = t[k] = host if sim else cuda.to_device(host, stream=stream)
    return a


def _launch(nw: int, sim: bool):
    if sim:
        threads, cap = _SIM_THREADS, _SIM_MAX_BLOCKS
    else:
        threads, cap = _THREADS, _MAX_BLOCKS
    return min(cap, -(-nw // threads)), threads


def _stream(cuda, sim: bool, stream):
    """A stream numba's launch accepts: 0, a numba stream, or a foreign stream wrapped by handle."""
    if sim or stream is None or (isinstance(stream, int) and stream == 0):
        return 0
    if isinstance(stream, int):
        return cuda.external_stream(stream)
    from numba.cuda.cudadrv.driver import Stream

    if isinstance(stream, Stream):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)  # CUDA stream protocol: (version, handle)
    ptr = proto()[1] if proto is not None else getattr(stream, "ptr", None)  # CuPy: .ptr
    if ptr is None:
        raise TypeError(f"device kernels: cannot use {type(stream).__name__} as a CUDA stream (expected 0, a "
                        f"numba stream, a CUstream handle or an object with __cuda_stream__ or .ptr)")
    return cuda.external_stream(int(ptr)) if int(ptr) else 0


def _device_copy(dst, src, cuda, sim: bool, stream) -> None:
    if sim:
        dst[...] = src
    else:
        dst.copy_to_device(src, stream=stream)


def device_pack(plan, src, lo: int, out, stream=0) -> None:
    """Pack on the device: ``src`` holds user memory (type offset ``o`` at byte ``o - lo``).

    Args:
        plan: a :class:`~gpumpi.datatypes.plan.Plan`.
        src: device array-like (numba device array or any ``__cuda_array_interface__`` object;
            NumPy arrays under the simulator), C-contiguous, any dtype.
        lo: the type offset of ``src``'s first byte.
        out: device array-like receiving ``plan.nbytes`` packed bytes.
        stream: a numba stream, a raw ``CUstream`` handle (int) or 0 for the default stream;
            the kernel is queued there (ordering against producers is the caller's).

    Raises:
        TypeError: an argument is not device memory.
        BufferError: an argument is not contiguous.
        ValueError: ``src`` does not cover the plan's bytes or ``out`` is too small.
    """
    cuda, sim = _device()[:2]
    s8, sa = _device_bytes(src, cuda, sim, "device_pack", "src")
    o8, oa = _device_bytes(out, cuda, sim, "device_pack", "out")
    _covers(plan, s8.shape[0], lo, "device_pack", "src")
    n = plan.nbytes
    if o8.shape[0] < n:
        raise ValueError(f"device_pack: output too small ({o8.shape[0]} bytes, the message has {n})")
    if not n:
        return
    stream = _stream(cuda, sim, stream)
    base = plan.lo - lo
    if plan.kind == "contig":
        _device_copy(o8[:n], s8[base:base + n], cuda, sim, stream)
        return
    w = _fit(plan.word, (sa + base) | oa)
    dt = _WORDS[w]
    sv = s8[base:base + plan.hi - plan.lo].view(dt)
    ov = o8[:n].view(dt)
    nw = n // w
    _run(plan, w, sv, ov, nw, False, cuda, sim, stream)


def device_unpack(plan, packed, dst, lo: int, nbytes: int | None = None, stream=0) -> None:
    """Unpack ``nbytes`` (default: all) packed bytes on the device into ``dst`` (type offset ``o`` at ``o - lo``).

    Args:
        plan: a :class:`~gpumpi.datatypes.plan.Plan`.
        packed: device array-like holding the packed bytes.
        dst: device array-like user memory, C-contiguous.
        lo: the type offset of ``dst``'s first byte.
        nbytes: a leading part of the message: exactly these bytes are written.
        stream: as for :func:`device_pack`.

    Raises:
        TypeError, BufferError: as for :func:`device_pack`.
        ValueError: ``dst`` does not cover the plan's bytes, ``nbytes`` is out of range or
            ``packed`` is too short.
    """
    cuda, sim = _device()[:2]
    p8, pa = _device_bytes(packed, cuda, sim, "device_unpack", "packed")
    d8, da = _device_bytes(dst, cuda, sim, "device_unpack", "dst")
    _covers(plan, d8.shape[0], lo, "device_unpack", "dst")
    n = plan.nbytes if nbytes is None else nbytes
    if n < 0 or n > plan.nbytes:
        raise ValueError(f"device_unpack: nbytes out of range ({n}; the message has {plan.nbytes})")
    if p8.shape[0] < n:
        raise ValueError(f"device_unpack: packed data too short ({p8.shape[0]} bytes, expected {n})")
    if not n:
        return
    stream = _stream(cuda, sim, stream)
    base = plan.lo - lo
    if plan.kind == "contig":
        _device_copy(d8[base:base + n], p8[:n], cuda, sim, stream)
        return
    w = _fit(plan.word, (da + base) | pa | n)
    dt = _WORDS[w]
    dv = d8[base:base + plan.hi - plan.lo].view(dt)
    pv = p8[:n].view(dt)
    _run(plan, w, dv, pv, n // w, True, cuda, sim, stream)


def _run(plan, w: int, user, packed, nw: int, unpack: bool, cuda, sim: bool, stream) -> None:
    _, _, sp, su, gp, gu = _DEV
    blocks, threads = _launch(nw, sim)
    if plan.kind == "strided":
        s0, counts, strides, nb = _geometry(plan, w)
        geom = _device_table(plan, ("geom", w), lambda: np.concatenate([counts, strides]), cuda, sim, stream)
        k = len(counts)
        if unpack:
            su[blocks, threads, stream](user, s0, geom, k, nb, packed, nw)
        else:
            sp[blocks, threads, stream](user, s0, geom, k, nb, packed, nw)
    else:
        idx = _device_table(plan, ("index",), lambda: _index(plan), cuda, sim, stream)
        r = plan.word // w
        if unpack:
            gu[blocks, threads, stream](user, idx, r, packed, nw)
        else:
            gp[blocks, threads, stream](user, idx, r, packed, nw)


# -- installation into datatypes.plan ----------------------------------------------------------------

if importlib.util.find_spec("numba") is not None:
    _plan.install_kernels(_pack, _unpack, use_kernel)
