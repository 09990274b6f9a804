"""Host pack/unpack plans (L2): NumPy copies driven by the canonical form.

Theory of operation
===================
A :class:`Plan` moves ``count`` elements of a datatype between user memory and a
packed byte stream on the host (and on simulated device memory, which is host
addressable).  User memory arrives as ``mem``, a memoryview of the message's
touched bytes that starts at byte offset ``lo`` of the buffer origin: type offset
``o`` lives at ``mem[o - lo]`` (``_buffers.Msg.mem`` and ``Msg.lo``).  Plans are
built from the canonical form of ``count`` elements (``flatten.canonical``) and
cached per count on the committed type's handle record; one NumPy operation
moves the whole message, never a Python loop over blocks:

* ``Contiguous`` -- one slice copy (contiguous data never goes through NumPy
  indexing);
* ``Strided`` (and any ``Blocks`` form whose tree is a pure grid of more than
  three dimensions) -- a strided NumPy view of ``mem`` (``numpy.ndarray`` over
  the buffer with explicit strides: an ``as_strided`` view whose bounds NumPy
  checks against ``mem``) copied with one ``numpy.copyto``, in the widest word
  (8, 4, 2 or 1 bytes) that divides the block length, every stride and the
  offset;
* ``Blocks`` -- a gather (pack: ``numpy.take``) or scatter (unpack: indexed
  assignment) through an index array of words, computed once from the layout
  tree with NumPy broadcasting (``R(c, s, X)`` is ``arange(c)*s`` plus X's
  index) and cached in the plan.

Every call checks that the plan's touched bytes lie inside ``mem`` before
touching memory.  Partial unpack (a short or truncated message: exactly
``nbytes`` packed bytes) scatters the leading bytes through a byte index built
for those bytes only.

external32 (``Pack_external``/``Unpack_external``) packs natively, then
converts the stream per basic element with the one-element type signature:
each basic type's items are gathered with one fancy index per kind and
converted by NumPy -- byte swaps for most types, integer narrowing for ``LONG``,
``UNSIGNED_LONG`` (8 -> 4 bytes, wrapping like MPICH) and ``WCHAR`` (4 -> 2),
x87 80-bit ``long double`` to IEEE binary128 and back, 1-byte types copied.

Importing this module installs ``Pack``/``Unpack``/``Pack_external``/
``Unpack_external`` and ``Get_address`` into the pure core
(``_core.install_memory_ops``); the MPI facade imports it.
"""

from __future__ import annotations

import math

import numpy as np

from .._arrays import DEVICE, as_buffer
from ..constants import BOTTOM
from ..errors import ERR_ARG, ERR_BUFFER, ERR_COUNT, ERR_TRUNCATE, error
from . import flatten
from ._core import Datatype, install_memory_ops
from .predefined import EXTERNAL32_SIZE

__all__ = ["Plan", "plan_for", "pack", "pack_into", "unpack", "elements_in", "external_plan", "external32_pack",
           "external32_unpack"]

_MAX_PLANS = 16
_VOID_MIN, _VOID_MAX = 16, 256  # block sizes copied as one void item each
_WORDS = {8: np.dtype(np.uint64), 4: np.dtype(np.uint32), 2: np.dtype(np.uint16), 1: np.dtype(np.uint8)}
_U8 = np.dtype(np.uint8)


# -- compiled kernels: installed by gpumpi.kernels.pack (L3); this layer never imports them --------

#: ``(use, pack, unpack)`` from :func:`install_kernels`, or None (NumPy only)
_KERNELS = None
#: zero-argument callable that imports the kernels (set by an upper layer); called once, on the
#: first non-contiguous pack or unpack, so that nothing loads numba before it is needed
_KERNEL_LOADER = None


def install_kernels(pack_fn, unpack_fn, use) -> None:
    """Route non-contiguous plans to compiled kernels of a higher layer, after the checks:
    a pack to ``pack_fn(plan, mem, lo, out)`` when ``use(plan, None)``, an unpack of ``n``
    bytes to ``unpack_fn(plan, packed, mem, lo, n)`` when ``use(plan, n)``; ``use=None``
    goes back to NumPy only."""
    global _KERNELS
    _KERNELS = None if use is None else (use, pack_fn, unpack_fn)


def set_kernel_loader(loader) -> None:
    """Have the first non-contiguous pack or unpack call ``loader()`` (which installs kernels)."""
    global _KERNEL_LOADER
    _KERNEL_LOADER = loader


def _load_kernels():
    global _KERNEL_LOADER
    loader, _KERNEL_LOADER = _KERNEL_LOADER, None
    if loader is not None:
        try:
            loader()
        except ImportError:  # no numba: stay on NumPy
            pass
    return _KERNELS


def _word(g: int) -> int:
    """Widest word size (8, 4, 2, 1) dividing ``g`` (0 divides by anything)."""
    for w in (8, 4, 2):
        if g % w == 0:
            return w
    return 1


class Plan:
    """How to move ``count`` elements of one datatype; see the module notes.

    ``kind`` is ``'contig'``, ``'strided'`` or ``'gather'``; ``nbytes`` the packed size;
    ``lo``/``hi`` the touched byte range in type offsets (``lo == hi`` when nothing is
    touched); strided plans hold ``start``, ``shape`` (counts + block length) and byte
    ``strides``; gather plans an index of ``word``-byte words relative to ``lo``.
    """

    __slots__ = ("kind", "count", "nbytes", "lo", "hi", "start", "shape", "strides", "word", "_node",
                 "_index", "_runs", "_vlayout")

    def __repr__(self) -> str:
        return f"<Plan {self.kind} count={self.count} nbytes={self.nbytes} bytes [{self.lo}, {self.hi})>"

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def build(cls, datatype: Datatype, count: int) -> "Plan":
        p = cls()
        p.count = count
        p._index = None
        p._node = p._runs = p._vlayout = None
        p.start = 0
        p.shape = p.strides = ()
        p.word = 1
        form = flatten.canonical(datatype, count)
        p.nbytes = form.nbytes
        if isinstance(form, flatten.Contiguous):
            p.kind = "contig"
            p.start = p.lo = form.start
            p.hi = form.start + form.nbytes
            return p
        if isinstance(form, flatten.Strided):
            grid = (form.start, form.blocklen, form.counts, form.strides)
        else:
            grid = flatten.pure_grid(form.node) if form.node is not None else None
        if grid is not None:
            start, b, counts, strides = grid
            p.kind = "strided"
            p.start = start
            p.shape = (*counts, b)
            p.strides = tuple(strides)
            p.lo = start + sum(min(0, (c - 1) * s) for c, s in zip(counts, strides))
            p.hi = start + sum(max(0, (c - 1) * s) for c, s in zip(counts, strides)) + b
            g = b
            for s in strides:
                g = math.gcd(g, s)
            p.word = _word(g)
            return p
        p.kind = "gather"
        if form.node is not None:
            p._node = form.node
            p.lo, p.hi, p.word = _tree_span(form.node)
        else:
            offs, lens = form.offsets, form.lengths
            p._runs = (offs, lens)
            p.lo = min(offs)
            p.hi = max(o + n for o, n in zip(offs, lens))
            g = 0
            for o, n in zip(offs, lens):
                g = math.gcd(g, math.gcd(o - p.lo, n))
            p.word = _word(g)
        return p

    def index(self) -> np.ndarray:
        """Word indices (relative to ``lo``) of the packed stream, in order (gather plans)."""
        idx = self._index
        if idx is None:
            w = self.word
            if self._node is not None:
                off, sh = self._node
                idx = _shape_index(sh, w, {}) + (off - self.lo) // w
            else:
                offs, lens = self._runs
                o = (np.frombuffer(offs, np.int64) - self.lo) // w
                n = np.frombuffer(lens, np.int64) // w
                starts = np.cumsum(n) - n
                idx = np.repeat(o - starts, n) + np.arange(int(n.sum()), dtype=np.int64)
            idx = idx.astype(np.intp, copy=False)
            self._index = idx
        return idx

    def byte_index(self, nbytes: int) -> np.ndarray:
        """Byte offsets (relative to ``lo``) of the first ``nbytes`` packed bytes."""
        if self.kind == "contig":
            return np.arange(nbytes, dtype=np.intp)
        if self.kind == "strided":
            b = self.shape[-1]
            k = -(-nbytes // b)
            counts = self.shape[:-1]
            pos = np.unravel_index(np.arange(k, dtype=np.intp), counts) if counts else ()
            offs = np.full(k, self.start - self.lo, dtype=np.intp)
            for p, s in zip(pos, self.strides):
                offs += p * s
            return (offs[:, None] + np.arange(b, dtype=np.intp)).ravel()[:nbytes]
        w = self.word
        idx = self.index()
        k = -(-nbytes // w)
        return (idx[:k, None] * w + np.arange(w, dtype=np.intp)).ravel()[:nbytes]

    # -- running -------------------------------------------------------------------------------

    def _check(self, mem, lo: int, call: str) -> int:
        if self.nbytes and (self.lo < lo or self.hi - lo > len(mem)):
            raise ValueError(f"{call}: memory does not cover the datatype's bytes (needs [{self.lo}, {self.hi}), "
                             f"given [{lo}, {lo + len(mem)}))")
        return self.lo - lo

    def _layout(self, off: int):
        """``(dtype, shape, strides)`` of the strided view when the first block is ``off`` bytes into ``mem``.

        Blocks of 16 to 256 bytes are single ``void`` items (one ``memcpy`` each, no inner
        loop); other blocks are rows of the widest word dividing block length, strides and
        offset.  Layouts are kept per word size.
        """
        b = self.shape[-1]
        w = 0 if _VOID_MIN <= b <= _VOID_MAX else _word(math.gcd(self.word, off))
        cache = self._vlayout
        if cache is None:
            cache = self._vlayout = {}
        vl = cache.get(w)
        if vl is None:
            if w == 0:
                vl = (np.dtype((np.void, b)), self.shape[:-1], self.strides)
            else:
                vl = (_WORDS[w], (*self.shape[:-1], b // w), (*self.strides, w))
            cache[w] = vl
        return vl

    def _view(self, mem, lo: int):
        """Strided NumPy view of the touched elements in ``mem`` (bounds checked by NumPy)."""
        off = self.start - lo
        dt, shape, strides = self._layout(off)
        return np.ndarray(shape, dtype=dt, buffer=mem, offset=off, strides=strides)

    def pack_into(self, mem, lo: int, out) -> None:
        """Gather the elements from ``mem`` (type offset ``o`` at ``mem[o - lo]``) into ``out``."""
        base = self._check(mem, lo, "pack")
        n = self.nbytes
        if len(out) < n:
            raise ValueError(f"pack: output holds {len(out)} bytes, the message has {n}")
        if not n:
            return
        kind = self.kind
        if kind == "contig":
            out[:n] = mem[base:base + n]
            return
        k = _KERNELS if _KERNEL_LOADER is None else _load_kernels()
        if k is not None and k[0](self, None):
            k[1](self, mem, lo, out)
        elif kind == "strided":
            src = self._view(mem, lo)
            dt = src.dtype
            if type(out) is np.ndarray and out.flags.c_contiguous:
                dst = out[:n].view(dt).reshape(src.shape)
            else:
                dst = np.frombuffer(out, dtype=dt, count=n // dt.itemsize).reshape(src.shape)
            dst[...] = src
        else:
            w = self.word
            src = np.frombuffer(mem, dtype=_U8, count=self.hi - self.lo, offset=base).view(_WORDS[w])
            dst = np.frombuffer(out, dtype=_WORDS[w], count=n // w)
            np.take(src, self.index(), out=dst)

    def unpack_from(self, packed, mem, lo: int, nbytes: int | None = None) -> None:
        """Scatter ``nbytes`` (default: all) packed bytes into ``mem``."""
        base = self._check(mem, lo, "unpack")
        n = self.nbytes if nbytes is None else nbytes
        if n > self.nbytes or n < 0:
            raise ValueError(f"unpack: {n} bytes do not fit {self.count} elements ({self.nbytes} bytes)")
        if len(packed) < n:
            raise ValueError(f"unpack: packed data holds {len(packed)} bytes, expected {n}")
        if not n:
            return
        kind = self.kind
        if kind == "contig":
            mem[base:base + n] = packed[:n] if len(packed) != n else packed
            return
        k = _KERNELS if _KERNEL_LOADER is None else _load_kernels()
        if k is not None and k[0](self, n):
            k[2](self, packed, mem, lo, n)
            return
        if n < self.nbytes:
            dst = np.frombuffer(mem, dtype=_U8, count=self.hi - self.lo, offset=base)
            dst[self.byte_index(n)] = np.frombuffer(packed, dtype=_U8, count=n)
            return
        if kind == "strided":
            dst = self._view(mem, lo)
            dt = dst.dtype
            dst[...] = np.frombuffer(packed, dtype=dt, count=n // dt.itemsize).reshape(dst.shape)
        else:
            w = self.word
            dst = np.frombuffer(mem, dtype=_U8, count=self.hi - self.lo, offset=base).view(_WORDS[w])
            dst[self.index()] = np.frombuffer(packed, dtype=_WORDS[w], count=n // w)


def _tree_span(node) -> tuple[int, int, int]:
    """``(lo, hi, word)`` of a tree: touched byte range and the widest word that tiles it."""
    off, sh = node
    g = 0
    lo = hi = None
    memo: dict = {}

    def walk(sh):  # -> (min start, max end) relative, and gcd of the quantities
        nonlocal g
        key = id(sh)
        hit = memo.get(key)
        if hit is not None:
            return hit
        kind = sh[0]
        if kind == "B":
            g = math.gcd(g, sh[1])
            out = (0, sh[1])
        elif kind == "R":
            c, s = sh[1], sh[2]
            g = math.gcd(g, s)
            a, b = walk(sh[3])
            out = (a + min(0, (c - 1) * s), b + max(0, (c - 1) * s))
        else:
            a = b = None
            for d, child in sh[1]:
                g = math.gcd(g, d)
                ca, cb = walk(child)
                a = ca + d if a is None else min(a, ca + d)
                b = cb + d if b is None else max(b, cb + d)
            out = (a, b)
        memo[key] = out
        return out

    a, b = walk(sh)
    lo, hi = off + a, off + b
    # every block start is off + (a multiple of g); lo is one of them
    return lo, hi, _word(g)


def _shape_index(sh, w: int, memo: dict) -> np.ndarray:
    """Word offsets (relative to the shape's origin) of every word of a tree shape, in order."""
    key = id(sh)
    hit = memo.get(key)
    if hit is not None:
        return hit
    kind = sh[0]
    if kind == "B":
        out = np.arange(sh[1] // w, dtype=np.int64)
    elif kind == "R":
        child = _shape_index(sh[3], w, memo)
        out = ((np.arange(sh[1], dtype=np.int64) * (sh[2] // w))[:, None] + child[None, :]).ravel()
    else:
        out = np.concatenate([_shape_index(child, w, memo) + d // w for d, child in sh[1]])
    memo[key] = out
    return out


def plan_for(datatype: Datatype, count: int) -> Plan:
    """The cached plan for ``count`` elements of ``datatype``."""
    if count < 0:
        raise ValueError(f"plan: negative count ({count})")
    plans = datatype._rec.cache.get("plans")
    if plans is None:
        plans = datatype._rec.cache["plans"] = {}
    p = plans.get(count)
    if p is None:
        p = Plan.build(datatype, count)
        if len(plans) >= _MAX_PLANS:
            del plans[next(iter(plans))]
        plans[count] = p
    return p


def pack(mem, lo: int, datatype: Datatype, count: int) -> np.ndarray:
    """Pack ``count`` elements from ``mem`` (type offset ``o`` at ``mem[o - lo]``); returns the bytes
    as a ``uint8`` NumPy array (bytes-like)."""
    p = plan_for(datatype, count)
    out = np.empty(p.nbytes, dtype=_U8)
    p.pack_into(mem, lo, out)
    return out


def pack_into(mem, lo: int, datatype: Datatype, count: int, out) -> int:
    """Pack ``count`` elements from ``mem`` into the writable buffer ``out``; returns the bytes written."""
    p = plan_for(datatype, count)
    p.pack_into(mem, lo, out)
    return p.nbytes


def unpack(packed, mem, lo: int, datatype: Datatype, count: int, nbytes: int | None = None) -> None:
    """Unpack ``count`` elements (or exactly the first ``nbytes`` packed bytes) into ``mem``."""
    plan_for(datatype, count).unpack_from(packed, mem, lo, nbytes)


def elements_in(datatype: Datatype, nbytes: int) -> int:
    """Basic elements in ``nbytes`` packed bytes (MPI_Get_elements; UNDEFINED mid-element)."""
    return flatten.elements_in(datatype, nbytes)


# -- external32 ----------------------------------------------------------------------------------

_LITTLE = np.little_endian


def _swap(w: int):
    def conv(a: np.ndarray) -> np.ndarray:
        m, size = a.shape
        if w == 1 or not _LITTLE:
            return a
        return a.reshape(m, size // w, w)[:, :, ::-1].reshape(m, size)

    return conv


def _narrow(native: str, ext: str):
    def enc(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a).view(native).astype(ext).view(_U8).reshape(a.shape[0], -1)

    def dec(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a).view(ext).astype(native).view(_U8).reshape(a.shape[0], -1)

    return enc, dec


_LD_KIND = ("x87" if np.finfo(np.longdouble).nmant == 63 and np.dtype(np.longdouble).itemsize == 16
            else "quad" if np.finfo(np.longdouble).nmant == 112 else "double")
_M48 = np.uint64((1 << 48) - 1)
_M15 = np.uint64(0x7FFF)
_M63 = np.uint64((1 << 63) - 1)


def _ld_encode(a: np.ndarray) -> np.ndarray:
    """Native long doubles (rows of 16 bytes, several per row for complex) to big-endian binary128."""
    m, size = a.shape
    lanes = a.reshape(-1, 16)
    out = np.empty((lanes.shape[0], 2), dtype=">u8")
    if _LD_KIND == "quad":
        return _swap(16)(a)
    if _LD_KIND == "x87":
        mant = np.ascontiguousarray(lanes[:, :8]).view("<u8")[:, 0]
        se = np.ascontiguousarray(lanes[:, 8:10]).view("<u2")[:, 0].astype(np.uint64)
    else:  # 64-bit long double: go through IEEE double fields
        d = np.ascontiguousarray(lanes[:, :8]).view("<f8")[:, 0]
        bits = d.view(np.uint64)
        sign = bits >> np.uint64(63)
        e = (bits >> np.uint64(52)) & np.uint64(0x7FF)
        frac = bits & np.uint64((1 << 52) - 1)
        e15 = np.where(e == 0, np.uint64(0), np.where(e == 0x7FF, np.uint64(0x7FFF), e + np.uint64(16383 - 1023)))
        se = (sign << np.uint64(15)) | e15
        mant = frac << np.uint64(11)
    frac63 = mant & _M63
    out[:, 0] = (se << np.uint64(48)) | (frac63 >> np.uint64(15))
    out[:, 1] = (frac63 & _M15) << np.uint64(49)
    return out.view(_U8).reshape(m, size)


def _ld_decode(a: np.ndarray) -> np.ndarray:
    m, size = a.shape
    if _LD_KIND == "quad":
        return _swap(16)(a)
    q = np.ascontiguousarray(a).reshape(-1, 16).view(">u8").astype(np.uint64)
    hi, lo_ = q[:, 0], q[:, 1]
    se = hi >> np.uint64(48)
    frac63 = ((hi & _M48) << np.uint64(15)) | (lo_ >> np.uint64(49))
    exp = se & _M15
    out = np.zeros((q.shape[0], 16), dtype=_U8)
    if _LD_KIND == "x87":
        mant = frac63 | np.where(exp != 0, np.uint64(1 << 63), np.uint64(0))
        out[:, :8] = mant.astype("<u8").view(_U8).reshape(-1, 8)
        out[:, 8:10] = se.astype("<u2").view(_U8).reshape(-1, 2)
    else:
        sign = se >> np.uint64(15)
        e11 = np.where(exp == 0, np.uint64(0), np.where(exp == 0x7FFF, np.uint64(0x7FF),
                                                       np.clip(exp.astype(np.int64) - (16383 - 1023), 0,
                                                               0x7FF).astype(np.uint64)))
        bits = (sign << np.uint64(63)) | (e11 << np.uint64(52)) | (frac63 >> np.uint64(11))
        out[:, :8] = bits.astype("<u8").view(_U8).reshape(-1, 8)
    return out.reshape(m, size)


def _conversions() -> dict:
    """handle of each basic type -> (native size, external32 size, encode, decode)."""
    from . import predefined as P

    table = {}
    narrow = {"LONG": ("<i8", ">i4"), "UNSIGNED_LONG": ("<u8", ">u4"), "WCHAR": ("<u4", ">u2")}
    longdouble = {"LONG_DOUBLE", "REAL16", "COMPLEX32", "CXX_LONG_DOUBLE_COMPLEX", "C_LONG_DOUBLE_COMPLEX"}
    for name in P.PREDEFINED_NAMES:
        dt = getattr(P, name)
        if not dt or dt._pair is not None or dt._handle in table:
            continue
        size = dt._size
        if name in narrow:
            enc, dec = _narrow(*narrow[name])
            table[dt._handle] = (size, EXTERNAL32_SIZE[dt._handle], enc, dec)
        elif name in longdouble:
            table[dt._handle] = (size, size, _ld_encode, _ld_decode)
        else:
            w = size // 2 if dt._npspec[:1] in ("c", "G") else size
            conv = _swap(w)
            table[dt._handle] = (size, size, conv, conv)
    for name in ("REAL2", "COMPLEX4", "INTEGER16"):
        dt = P.lookup_name(name)
        w = dt._size // 2 if name == "COMPLEX4" else dt._size
        table[dt._handle] = (dt._size, dt._size, _swap(w), _swap(w))
    return table


_CONV = _conversions()


class ExternalPlan:
    """Conversion of one element's packed native bytes to external32, per basic kind."""

    __slots__ = ("size", "esize", "groups")

    def __init__(self, datatype: Datatype) -> None:
        sig = flatten.signature(datatype)
        self.size = datatype._size
        pos = epos = 0
        acc: dict = {}
        for b, n in sig:
            nsz, esz, enc, dec = _CONV[b._handle]
            ent = acc.get(b._handle)
            if ent is None:
                ent = acc[b._handle] = (nsz, esz, enc, dec, [], [])
            ent[4].append((pos, n))
            ent[5].append((epos, n))
            pos += n * nsz
            epos += n * esz
        self.esize = epos
        groups = []
        for nsz, esz, enc, dec, nat, ext in acc.values():
            nat_i = np.concatenate([p + np.arange(n, dtype=np.intp) * nsz for p, n in nat])
            ext_i = np.concatenate([p + np.arange(n, dtype=np.intp) * esz for p, n in ext])
            whole = len(groups) == 0 and len(acc) == 1
            groups.append((nsz, esz, enc, dec,
                           (nat_i[:, None] + np.arange(nsz, dtype=np.intp)).ravel(),
                           (ext_i[:, None] + np.arange(esz, dtype=np.intp)).ravel(), whole))
        self.groups = groups

    def encode(self, native: np.ndarray, count: int) -> np.ndarray:
        """Native packed bytes of ``count`` elements to external32."""
        return self._convert(native, count, self.size, self.esize, False)

    def decode(self, ext: np.ndarray, count: int) -> np.ndarray:
        """external32 bytes of ``count`` elements to native packed bytes."""
        return self._convert(ext, count, self.esize, self.size, True)

    def _convert(self, data: np.ndarray, count: int, isize: int, osize: int, decode: bool) -> np.ndarray:
        out = np.empty(count * osize, dtype=_U8)
        if not count or not osize:
            return out
        src = data.reshape(count, isize)
        dst = out.reshape(count, osize)
        for nsz, esz, enc, dec, nat_b, ext_b, whole in self.groups:
            fn, isz, src_b, dst_b = (dec, esz, ext_b, nat_b) if decode else (enc, nsz, nat_b, ext_b)
            if whole:
                dst[:] = fn(np.ascontiguousarray(src).reshape(-1, isz)).reshape(count, osize)
            else:
                dst[:, dst_b] = fn(src[:, src_b].reshape(-1, isz)).reshape(count, -1)
        return out


def external_plan(datatype: Datatype) -> ExternalPlan:
    """The external32 conversion of one element of ``datatype`` (cached on its record)."""
    c = datatype._rec.cache
    p = c.get("ext32plan")
    if p is None:
        p = c["ext32plan"] = ExternalPlan(datatype)
    return p


def external32_pack(mem, lo: int, datatype: Datatype, count: int) -> np.ndarray:
    """Pack ``count`` elements from ``mem`` in external32 (big-endian, fixed sizes)."""
    return external_plan(datatype).encode(pack(mem, lo, datatype, count), count)


def external32_unpack(data, mem, lo: int, datatype: Datatype, count: int) -> None:
    """Unpack ``count`` external32 elements from ``data`` into ``mem``."""
    ep = external_plan(datatype)
    raw = np.frombuffer(data, dtype=_U8, count=count * ep.esize)
    unpack(ep.decode(raw, count), mem, lo, datatype, count)


# -- the MPI methods (installed into Datatype) -------------------------------------------------------


def _host_mem(view, what: str, call: str):
    if view.kind == DEVICE:
        raise error(ERR_BUFFER, f"{call}: {what} is device memory, which host packing cannot address "
                                f"({view!r})")
    return view.mem


def _elements(datatype: Datatype, nbytes: int, call: str) -> int:
    ext = datatype._extent
    if ext == 0:
        raise ZeroDivisionError(f"{call}: datatype extent is zero, cannot count elements "
                                f"(lb {datatype._lb}, size {datatype._size})")
    count = nbytes // ext
    if count < 0:
        raise error(ERR_COUNT, f"{call}: negative count ({count}; datatype extent {ext})")
    return count


def _whole(datatype: Datatype, buf, readonly: bool, what: str, call: str):
    """``(memoryview, count)`` of the whole elements of ``datatype`` in ``buf`` (Pack's ``inbuf``,
    Unpack's ``outbuf``), the typemap checked to lie inside it."""
    view = as_buffer(buf, readonly, call)
    count = _elements(datatype, view.nbytes, call)
    mem = _host_mem(view, what, call)
    p = plan_for(datatype, count)
    if p.nbytes and (p.lo < 0 or p.hi > view.nbytes):
        raise ValueError(f"{call}: {what} too small for {count} elements of datatype "
                         f"{datatype._rec.name or repr(datatype)} (needs bytes [{p.lo}, {p.hi}), "
                         f"buffer length {view.nbytes})")
    return mem, count


def _window(buf, readonly: bool, position: int, n: int, what: str, call: str):
    view = as_buffer(buf, readonly, call)
    mem = _host_mem(view, what, call)
    if position < 0:
        raise error(ERR_ARG, f"{call}: negative position ({position})")
    if position + n > view.nbytes:
        raise error(ERR_TRUNCATE, f"{call}: {what} too small ({n} bytes at position {position}, "
                                  f"buffer length {view.nbytes})")
    return mem[position:position + n]


def _pack_method(datatype: Datatype, inbuf, outbuf, position: int) -> int:
    call = "Datatype.Pack"
    mem, count = _whole(datatype, inbuf, True, "inbuf", call)
    n = count * datatype._size
    out = _window(outbuf, False, position, n, "outbuf", call)
    pack_into(mem, 0, datatype, count, out)
    return position + n


def _unpack_method(datatype: Datatype, inbuf, position: int, outbuf) -> int:
    call = "Datatype.Unpack"
    mem, count = _whole(datatype, outbuf, False, "outbuf", call)
    n = count * datatype._size
    data = _window(inbuf, True, position, n, "inbuf", call)
    unpack(data, mem, 0, datatype, count)
    return position + n


def _pack_external_method(datatype: Datatype, inbuf, outbuf, position: int) -> int:
    call = "Datatype.Pack_external"
    mem, count = _whole(datatype, inbuf, True, "inbuf", call)
    data = external32_pack(mem, 0, datatype, count)
    out = _window(outbuf, False, position, len(data), "outbuf", call)
    out[:] = data
    return position + len(data)


def _unpack_external_method(datatype: Datatype, inbuf, position: int, outbuf) -> int:
    call = "Datatype.Unpack_external"
    mem, count = _whole(datatype, outbuf, False, "outbuf", call)
    n = count * external_plan(datatype).esize
    data = _window(inbuf, True, position, n, "inbuf", call)
    external32_unpack(data, mem, 0, datatype, count)
    return position + n


def _address(location) -> int:
    if location is None or location is BOTTOM:
        return 0
    return as_buffer(location, True, "Get_address", consume=False).addr


install_memory_ops(pack=_pack_method, unpack=_unpack_method, pack_external=_pack_external_method,
                   unpack_external=_unpack_external_method, address=_address)
