"""Device atomics (L3): the numba.cuda kernels that make RMA windows in device memory element-wise atomic.

Theory of operation
===================
A device window is device memory opened through CUDA IPC, which every origin updates
itself (the package notes, :mod:`gpumpi.kernels.atomics`, say why); here with CUDA's
atomic instructions, in kernels the origin launches on the mapped memory.  The operations
and the element types each takes are :mod:`gpumpi.kernels.atomics._ops`'s table, as for
the host instructions (:mod:`gpumpi.kernels.atomics.host`).

Device
------
:func:`device_accumulate` runs numba.cuda kernels over the window memory, one CUDA
thread per element (grid-stride loops, as in :mod:`gpumpi.kernels.reduce`)::

    elements                    ops                          kernel
    4/8-byte int                SUM MAX MIN BAND BOR BXOR    cuda.atomic.add/max/min/and_/or_/xor
    4/8-byte float              SUM                          cuda.atomic.add
    4/8-byte any                REPLACE                      cuda.atomic.exch on the unsigned view of the bits
    4/8-byte any                NO_OP                        an aligned load (single-copy atomic on the GPU)
    4/8-byte int                PROD LAND LOR LXOR           cuda.atomic.cas loop
    4/8-byte float              PROD MAX MIN LAND LOR LXOR   cuda.atomic.cas loop on the bits, bit-cast through
                                                             a one-element local array and its view
    1/2-byte int, bool          all                          cuda.atomic.cas loop on the aligned 32-bit word
                                                             holding the element (shift and mask): numba has
                                                             no 8/16-bit atomics

The kernels index one array over the whole allocation holding the window (its start,
from the adapter's ``pointer_info``, is 256-aligned, so every element and every 32-bit
word is aligned).  CUDA's own float ``atomic.max/min`` skip the store when the value is
NaN, so floats take the cas loop to propagate NaN as the host does.
:func:`device_compare_and_swap` is MPI_Compare_and_swap the same way: one ``atomic.cas``
on the unsigned bits of a 4/8-byte element, the cas loop on the 32-bit word holding a
1/2-byte one (:func:`kernel_compare_and_swap`).

Simulated device memory (the ``'sim'`` adapter) is host memory shared between
processes; numba's CUDA simulator makes its atomics atomic between the Python threads of
one process only.  So :func:`device_accumulate` on the simulated adapter applies the
*host* instructions to the mapped memory (really atomic between processes), and the
kernels themselves are proven on the simulator by :func:`kernel_accumulate` on arrays
(``tests/kernels/test_atomics.py``).

The kernels are plain Python functions here, compiled by ``numba.cuda`` on first use
(:func:`_device`, through :func:`gpumpi.kernels.pack.jit_kernels`: cached on disk unless
the simulator runs them); nothing here imports numba at import time.
"""

from __future__ import annotations

import numpy as np

from ._ops import (BAND as _BAND, BOR as _BOR, BXOR as _BXOR, CODE as _CODE, I8 as _I8, MAX as _MAX, MIN as _MIN,
                   NO_OP as _NO_OP, REPLACE as _REPLACE, SUM as _SUM, UNSIGNED as _UNSIGNED, check_op as _check,
                   work_dtype as _work_dtype)
from .host import accumulate, compare_and_swap

__all__ = ["kernel_accumulate", "device_accumulate", "kernel_compare_and_swap", "device_compare_and_swap"]


# -- device kernels (plain Python; compiled by _device, run by numba's simulator for the tests) ---------

_cuda = None  # numba.cuda once _device() ran: the kernels name it as a global, which numba resolves at
# compile time and the simulator swaps for its fake module while a kernel runs (as in kernels.reduce)


def _d_add(win, rel, shift, offs, vals, fetch, want, n):
    """``win[(rel + offs[t]) >> shift] += vals[t]`` atomically, thread ``t`` then ``t + gridsize``...;
    ``win`` is the window's allocation as elements, ``rel`` the window's byte offset in it."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.add(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_max(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.max(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_min(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.min(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_and(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.and_(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_or(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.or_(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_xor(win, rel, shift, offs, vals, fetch, want, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.xor(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_exch(win, rel, shift, offs, vals, fetch, want, n):
    """``REPLACE`` on the unsigned view of the bits (``win``, ``vals``, ``fetch`` all unsigned)."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        old = _cuda.atomic.exch(win, (rel + offs[t]) >> shift, vals[t])
        if want:
            fetch[t] = old
        t += step


def _d_load(win, rel, shift, offs, vals, fetch, want, n):
    """``NO_OP``: the old values only (an aligned 4/8-byte load is single-copy atomic)."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        if want:
            fetch[t] = win[(rel + offs[t]) >> shift]
        t += step


def _d_cas_int(win, rel, shift, offs, vals, fetch, want, n, op):
    """4/8-byte integers, ``PROD``/``LAND``/``LOR``/``LXOR``: a cas loop (arithmetic at the element's width)::

        cur = win[i];  loop: new = cur op v;  seen = cas(win, i, cur, new);  until seen == cur
    """
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    new = _cuda.local.array(1, win.dtype)  # stores convert to the element type (and wrap)
    while t < n:
        i = (rel + offs[t]) >> shift
        v = vals[t]
        cur = win[i]
        while True:
            if op == 1:  # PROD
                new[0] = cur * v
            elif op == 4:  # LAND
                new[0] = 1 if (cur != 0 and v != 0) else 0
            elif op == 5:  # LOR
                new[0] = 1 if (cur != 0 or v != 0) else 0
            else:  # LXOR
                new[0] = 1 if ((cur != 0) != (v != 0)) else 0
            seen = _cuda.atomic.cas(win, i, cur, new[0])
            if seen == cur:
                break
            cur = seen
        if want:
            fetch[t] = cur
        t += step


def _d_cas_float(win, rel, shift, offs, vals, fetch, want, n, op):
    """Floats, ``PROD``/``MAX``/``MIN``/``LAND``/``LOR``/``LXOR``: a cas loop on the bits (``win`` is the
    unsigned view of the window); ``bits.view(float)`` of a one-element local array bit-casts."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    bits = _cuda.local.array(1, win.dtype)
    f = bits.view(vals.dtype)
    while t < n:
        i = (rel + offs[t]) >> shift
        v = vals[t]
        cur = win[i]
        while True:
            bits[0] = cur
            old = f[0]
            if op == 1:  # PROD
                f[0] = old * v
            elif op == 2:  # MAX: numpy.maximum (NaN propagates)
                if v > old or v != v:
                    f[0] = v
            elif op == 3:  # MIN
                if v < old or v != v:
                    f[0] = v
            elif op == 4:  # LAND
                f[0] = 1.0 if (old != 0 and v != 0) else 0.0
            elif op == 5:  # LOR
                f[0] = 1.0 if (old != 0 or v != 0) else 0.0
            else:  # LXOR
                f[0] = 1.0 if ((old != 0) != (v != 0)) else 0.0
            seen = _cuda.atomic.cas(win, i, cur, bits[0])
            if seen == cur:
                break
            cur = seen
        if want:
            fetch[t] = old
        t += step


def _d_cas_narrow(win, rel, offs, vals, fetch, want, n, op, nbits, signed):
    """1/2-byte elements (``bool`` as ``uint8``), every operation: a cas loop on the aligned ``uint32``
    word ``win[a >> 2]`` that holds the element at byte ``a & 3`` (little-endian), on unsigned bits::

        word:  | byte 0 | byte 1 | byte 2 | byte 3 |      element at a & 3 == 1: (word >> 8) & 0xff
    """
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    mask = (1 << nbits) - 1
    half = 1 << (nbits - 1)
    while t < n:
        a = rel + offs[t]
        i = a >> 2
        sh = (a & 3) * 8
        v = vals[t] & mask
        cur = win[i]
        while True:
            old = (cur >> sh) & mask
            if op == 0:  # SUM
                new = old + v
            elif op == 1:  # PROD
                new = old * v
            elif op == 2 or op == 3:  # MAX, MIN on the values the bits stand for
                x = int(old)
                y = int(v)
                if signed and x >= half:
                    x -= mask + 1
                if signed and y >= half:
                    y -= mask + 1
                new = v if ((y > x) if op == 2 else (y < x)) else old
            elif op == 4:
                new = 1 if (old != 0 and v != 0) else 0
            elif op == 5:
                new = 1 if (old != 0 or v != 0) else 0
            elif op == 6:
                new = 1 if ((old != 0) != (v != 0)) else 0
            elif op == 7:
                new = old & v
            elif op == 8:
                new = old | v
            elif op == 9:
                new = old ^ v
            elif op == 10:  # REPLACE
                new = v
            else:  # NO_OP
                break
            word = (cur & (0xFFFFFFFF ^ (mask << sh))) | ((new & mask) << sh)
            seen = _cuda.atomic.cas(win, i, cur, word)
            if seen == cur:
                break
            cur = seen
        if want:
            fetch[t] = (cur >> sh) & mask
        t += step


def _d_swap(win, rel, shift, offs, cmp, vals, fetch, n):
    """MPI_Compare_and_swap of 4/8-byte elements on their unsigned bits: one ``atomicCAS`` each."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        fetch[t] = _cuda.atomic.cas(win, (rel + offs[t]) >> shift, cmp[t], vals[t])
        t += step


def _d_swap_narrow(win, rel, offs, cmp, vals, fetch, n, nbits):
    """MPI_Compare_and_swap of 1/2-byte elements: a cas loop on the ``uint32`` word holding each (as
    :func:`_d_cas_narrow`), which writes only when the element's bits equal ``cmp``."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    mask = (1 << nbits) - 1
    while t < n:
        a = rel + offs[t]
        i = a >> 2
        sh = (a & 3) * 8
        c = cmp[t] & mask
        v = vals[t] & mask
        cur = win[i]
        while True:
            if (cur >> sh) & mask != c:
                break
            word = (cur & (0xFFFFFFFF ^ (mask << sh))) | (v << sh)
            seen = _cuda.atomic.cas(win, i, cur, word)
            if seen == cur:
                break
            cur = seen
        fetch[t] = (cur >> sh) & mask
        t += step


_DEVICE_FNS = {"swap": _d_swap, "swap_narrow": _d_swap_narrow, "add": _d_add, "max": _d_max, "min": _d_min, "and": _d_and, "or": _d_or, "xor": _d_xor,
               "exch": _d_exch, "load": _d_load, "cas_int": _d_cas_int, "cas_float": _d_cas_float,
               "cas_narrow": _d_cas_narrow}
_DEV = None  # (numba.cuda, simulator?, {name: kernel})
_THREADS, _MAX_BLOCKS = 256, 4096
_SIM_THREADS, _SIM_MAX_BLOCKS = 32, 2
_SHIFT = {4: 2, 8: 3}
_NATIVE = {_SUM: "add", _BAND: "and", _BOR: "or", _BXOR: "xor"}  # + MAX/MIN for integers


def _device():
    """``(numba.cuda, simulator?, kernels by name)``, built on first use (imports ``numba.cuda``)."""
    global _DEV, _cuda
    d = _DEV
    if d is not None:
        return d
    from ..._device import use_simulator

    use_simulator()  # before numba.cuda's first import: the simulator where it can only be that
    from numba import cuda

    from .. import pack

    _cuda = cuda
    d = _DEV = (cuda, pack._is_sim(), pack.jit_kernels(_DEVICE_FNS))
    return d


def _plan(code: int, dt: np.dtype):
    """``(kernel name, how)``: ``how`` is 'typed' (arrays of ``dt``), 'bits' (unsigned views), 'float'
    (unsigned window, float values) or 'narrow' (``uint32`` window, unsigned values)."""
    if dt.itemsize < 4:
        return "cas_narrow", "narrow"
    if code == _REPLACE:
        return "exch", "bits"
    if code == _NO_OP:
        return "load", "bits"
    if code in _NATIVE and (dt.kind in "iu" or code == _SUM):
        return _NATIVE[code], "typed"
    if code in (_MAX, _MIN) and dt.kind in "iu":
        return ("max" if code == _MAX else "min"), "typed"
    if dt.kind == "f":
        return "cas_float", "float"
    return "cas_int", "typed"


def _launch(n: int, sim: bool):
    threads, cap = (_SIM_THREADS, _SIM_MAX_BLOCKS) if sim else (_THREADS, _MAX_BLOCKS)
    return min(cap, -(-n // threads)), threads


def kernel_accumulate(win8, rel: int, offsets, values, op: str, fetch=None, stream=0) -> None:
    """Run the device kernels: ``win8[rel + offsets[i]]`` (as elements of ``values.dtype``) ``op=``
    ``values[i]`` atomically, the old values into ``fetch``.

    ``win8``: a 1-D ``uint8`` array whose start is 8-aligned and whose length is a multiple of 4
    (a numba device array; under numba's simulator a NumPy array); ``offsets``: ``int64`` byte
    offsets from ``rel``; ``values``/``fetch``: arrays of the element type (``fetch`` None: not
    wanted), device arrays on a real GPU.  ``stream``: a numba stream or 0.  Asynchronous on a
    real GPU (the caller synchronises ``stream``).
    """
    dt = values.dtype
    _check("atomics.kernel_accumulate", op, dt)
    cuda, sim, kernels = _device()
    n = len(values)
    want = fetch is not None
    if not n or (op == "NO_OP" and not want):
        return
    code = _CODE[op]
    w = _work_dtype(dt)
    name, how = _plan(code, w)
    if not want:
        fetch = np.empty(1, w) if sim else cuda.device_array(1, w, stream=stream)
    vals, fet = values.view(w), fetch.view(w)
    blocks, threads = _launch(n, sim)
    k = kernels[name][blocks, threads, stream]
    if how == "narrow":
        u = _UNSIGNED[w.itemsize]
        k(win8.view(np.uint32), rel, offsets, vals.view(u), fet.view(u), want, n, code, w.itemsize * 8,
          w.kind == "i")
        return
    shift = _SHIFT[w.itemsize]
    if how == "bits":
        u = _UNSIGNED[w.itemsize]
        k(win8.view(u), rel, shift, offsets, vals.view(u), fet.view(u), want, n)
    elif how == "float":
        k(win8.view(_UNSIGNED[w.itemsize]), rel, shift, offsets, vals, fet, want, n, code)
    elif name.startswith("cas"):
        k(win8.view(w), rel, shift, offsets, vals, fet, want, n, code)
    else:
        k(win8.view(w), rel, shift, offsets, vals, fet, want, n)


def device_accumulate(ad, base: int, offsets_dev: int, values_dev: int, n: int, op: str, dtype, fetch_dev=None,
                      stream=None) -> None:
    """Device-memory MPI_Accumulate / Get_accumulate: ``*(base + off[i]) op= val[i]`` atomically for ``n``
    elements, on ``stream`` (None: the adapter's current stream); returns once done.

    ``ad``: the adapter of the memory; ``base``: the window's device address (mapped from the
    target through IPC or local); ``offsets_dev``: device address of ``n`` ``int64`` byte
    offsets; ``values_dev``: device address of ``n`` elements of ``dtype``; ``fetch_dev``:
    None or the device address receiving the ``n`` old values.  On the simulated adapter the
    host instructions run on the mapped memory (atomic between processes, see the module notes).
    """
    dt = _check("atomics.device_accumulate", op, dtype)
    if n <= 0:
        return
    isz = dt.itemsize
    if ad.name == "sim":
        ad.stream_synchronize(stream)
        offs = np.frombuffer(ad.host_view(offsets_dev, n * 8), _I8)
        vals = np.frombuffer(ad.host_view(values_dev, n * isz), dt)
        fet = None if fetch_dev is None else np.frombuffer(ad.host_view(fetch_dev, n * isz), dt)
        accumulate(base, offs, vals, op, fet)
        return
    cuda, sim, _ = _device()
    if sim:
        raise NotImplementedError("atomics.device_accumulate: device memory but numba.cuda is the simulator "
                                  "(NUMBA_ENABLE_CUDASIM=1 in a process with a GPU)")
    info = ad.pointer_info(base)
    if info.base is None or info.size is None:
        raise ValueError(f"atomics.device_accumulate: not device memory ({base:#x}, {info.kind})")
    from .. import pack
    from ..reduce import device_bytes

    s = ad.current_stream() if stream is None else stream
    ns = pack._stream(cuda, False, s)
    span = -(-info.size // 8) * 8  # whole words: allocations are 256-aligned and granular
    win8 = device_bytes(cuda, info.base, span)
    offs = device_bytes(cuda, offsets_dev, n * 8).view(_I8)
    vals = device_bytes(cuda, values_dev, n * isz).view(dt)
    fet = None if fetch_dev is None else device_bytes(cuda, fetch_dev, n * isz).view(dt)
    kernel_accumulate(win8, base - info.base, offs, vals, op, fet, ns)
    ad.stream_synchronize(s)


def kernel_compare_and_swap(win8, rel: int, offsets, compare, values, fetch, itemsize: int, stream=0) -> None:
    """Run the device compare-and-swap kernels: where the ``itemsize``-byte element at byte
    ``rel + offsets[i]`` of ``win8`` has the bits ``compare[i]``, store ``values[i]``; the old bits
    into ``fetch``.  ``compare``/``values``/``fetch``: unsigned arrays of ``itemsize`` bytes, or
    ``uint32`` for 1/2-byte elements; other arrays as :func:`kernel_accumulate` (asynchronous on a GPU)."""
    if itemsize not in (1, 2, 4, 8):
        raise ValueError(f"atomics.kernel_compare_and_swap: elements of 1, 2, 4 or 8 bytes ({itemsize})")
    cuda, sim, kernels = _device()
    n = len(values)
    if not n:
        return
    blocks, threads = _launch(n, sim)
    if itemsize < 4:
        kernels["swap_narrow"][blocks, threads, stream](win8.view(np.uint32), rel, offsets, compare, values, fetch,
                                                          n, itemsize * 8)
        return
    kernels["swap"][blocks, threads, stream](win8.view(_UNSIGNED[itemsize]), rel, _SHIFT[itemsize], offsets,
                                             compare, values, fetch, n)


def device_compare_and_swap(ad, addr: int, compare: bytes, value: bytes, dtype, stream=None) -> bytes:
    """Device-memory MPI_Compare_and_swap of the one element of ``dtype`` at device address ``addr``
    (mapped from the target through IPC, or local): its old bytes.  On the simulated adapter the
    host instruction runs on the mapped memory (atomic between processes)."""
    dt = np.dtype(dtype)
    if ad.name == "sim":
        ad.stream_synchronize(stream)
        old = compare_and_swap(addr, np.frombuffer(compare, dt)[0], np.frombuffer(value, dt)[0], dt)
        return np.asarray(old, dt).tobytes()
    cuda, sim, _ = _device()
    if sim:
        raise NotImplementedError("atomics.device_compare_and_swap: device memory but numba.cuda is the simulator "
                                  "(NUMBA_ENABLE_CUDASIM=1 in a process with a GPU)")
    info = ad.pointer_info(addr)
    if info.base is None or info.size is None:
        raise ValueError(f"atomics.device_compare_and_swap: not device memory ({addr:#x}, {info.kind})")
    from .. import pack
    from ..reduce import device_bytes

    s = ad.current_stream() if stream is None else stream
    ns = pack._stream(cuda, False, s)
    win8 = device_bytes(cuda, info.base, -(-info.size // 8) * 8)
    u = _UNSIGNED[dt.itemsize] if dt.itemsize >= 4 else np.dtype(np.uint32)
    bits = _UNSIGNED[dt.itemsize]
    offs = cuda.to_device(np.zeros(1, _I8), stream=ns)
    c = cuda.to_device(np.frombuffer(compare, bits).astype(u), stream=ns)
    v = cuda.to_device(np.frombuffer(value, bits).astype(u), stream=ns)
    f = cuda.device_array(1, u, stream=ns)
    kernel_compare_and_swap(win8, addr - info.base, offs, c, v, f, dt.itemsize, ns)
    out = f.copy_to_host(stream=ns)
    ad.stream_synchronize(s)
    return out.astype(bits).tobytes()
