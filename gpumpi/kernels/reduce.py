"""Reduction kernels (L3): the predefined operations on packed streams, host and device.

Theory of operation
===================
A reduction here is ``dst = src op dst`` over the *packed* form of ``count`` items of a
datatype: no holes, a derived type's basic elements one after another, a pair type
(``DOUBLE_INT``...) as its value bytes immediately followed by its 4-byte ``int``
(``DOUBLE_INT`` packs to 12 bytes: value at 0, index at 8).  ``src`` is MPI's ``invec``
(the left operand), ``dst`` its ``inoutvec``.  The ufunc operations also have a three-operand host form,
``out = a op b``, which saves the executor a copy where a schedule copies then reduces.

Which operation is defined for which type
-----------------------------------------
:func:`resolve` maps (operation name, datatype) to a :class:`Reducer`, or raises
``MPI.Exception(ERR_OP)``.  A datatype reduces element-wise over its *basic* type
(``Datatype._basic``: the one predefined type every entry is made of; an f90 type
stands for the named type it matched); a type of mixed basic types has none and only
``REPLACE``/``NO_OP`` apply.  The type groups are MPICH's (``mpir_op_util.h``, which
extends MPI-4.1's table 6.9.2), since mpi4py on MPICH is the reference:

==================  ========================================================================
``MAX`` ``MIN``     C integer, Fortran integer, floating point
``SUM`` ``PROD``    C integer, Fortran integer, floating point, complex
``LAND`` ``LOR``    C integer, Fortran integer, floating point, logical (results 0/1)
``LXOR``
``BAND`` ``BOR``    C integer, Fortran integer, ``BYTE``
``BXOR``
``MAXLOC``          the pair types ``FLOAT_INT``, ``DOUBLE_INT``, ``LONG_INT``, ``2INT``,
``MINLOC``          ``SHORT_INT``, ``LONG_DOUBLE_INT`` (ties go to the lower index)
``REPLACE``         every type (``dst = src``)
``NO_OP``           every type (``dst`` is left alone)
==================  ========================================================================

C integer includes ``CHAR`` (signed on x86-64) and Fortran integer ``CHARACTER``, ``AINT``,
``OFFSET``, ``COUNT``, as in MPICH; floating point includes ``FLOAT16_T``/``REAL2`` and
``LONG_DOUBLE`` (x87 80-bit in 16 bytes, NumPy's ``longdouble``).  ``WCHAR`` and ``PACKED``
take no arithmetic.  ``MAX``/``MIN`` propagate NaN (NumPy's ``maximum``), where MPICH's
``a > b ? a : b`` depends on operand order.

Units
-----
A :class:`Reducer` says how the executor may cut a reduction: ``unit`` bytes (one basic
element in packed form; 1 for ``REPLACE``/``NO_OP``, which never cut anything that
matters) and ``per`` units per datatype item.

Host
----
NumPy ufuncs over views of the byte arrays (``np.add(a, b, out=b)``; unaligned views are
fine for NumPy), the pair types through a packed structured dtype and ``np.where``.
Nothing here needs numba on the host.

Device
------
numba.cuda kernels, one per operation, grid-stride loops, specialised by numba per
element type; built lazily by :func:`_device` (``numba.cuda`` is imported there only).
Every kernel reads and writes naturally aligned elements: a numeric stream whose address
is not a multiple of its element alignment is first copied (device to device) into an
aligned scratch array; a pair stream is always split by a byte kernel into aligned value
and index arrays (``DOUBLE_INT`` values sit at 12-byte strides), reduced there, and the
inout values joined back.  ``long double`` has no CUDA type: ``LONG_DOUBLE``,
``C_LONG_DOUBLE_COMPLEX`` and ``LONG_DOUBLE_INT`` raise ``NotImplementedError`` on a real
device.

Simulated device memory (kind ``'sim'``) is host memory mapped by the simulated
adapter.  numba's CUDA simulator runs one Python thread per CUDA thread, so:

* up to :data:`SIM_KERNEL_MAX` elements, the same kernel source runs on the simulator
  over the simulated memory (this is what proves the kernels in CI);
* above that (and for ``long double`` types, which the simulator cannot type either, or
  when ``numba.cuda`` is the real driver so the simulator is unavailable), the host
  NumPy path runs directly on the simulated memory (``SimAdapter.host_view``).

Neither route stages through ``memcpy``: the simulated stream is synchronised first
(work queued before the reduction runs), then the memory is reduced where it lies.
"""

from __future__ import annotations

import numpy as np

from ..datatypes import predefined as _pd
from ..datatypes._core import F90_TYPES, Datatype
from ..errors import ERR_OP, error

__all__ = ["Reducer", "Elementwise", "resolve", "OP_NAMES", "SIM_KERNEL_MAX", "device_reduce", "sim_reduce",
           "named_basic"]

#: the predefined operation names, in MPICH handle order
OP_NAMES = ("MAX", "MIN", "SUM", "PROD", "LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR", "MINLOC", "MAXLOC",
            "REPLACE", "NO_OP")

#: simulated-device reductions of up to this many elements run the kernels on numba's simulator
SIM_KERNEL_MAX = 16384

_U8 = np.dtype(np.uint8)
_I4 = np.dtype(np.int32)

# -- which types each operation takes (MPICH's groups) ------------------------------------------------

_GROUPS = {
    # MPICH counts the address and count types with the C integers (logical operations take them)
    "cint": "CHAR SIGNED_CHAR UNSIGNED_CHAR SHORT UNSIGNED_SHORT INT UNSIGNED LONG UNSIGNED_LONG LONG_LONG "
            "UNSIGNED_LONG_LONG INT8_T INT16_T INT32_T INT64_T UINT8_T UINT16_T UINT32_T UINT64_T AINT OFFSET COUNT",
    "fint": "INTEGER CHARACTER INTEGER1 INTEGER2 INTEGER4 INTEGER8 INTEGER16",
    "float": "FLOAT DOUBLE REAL DOUBLE_PRECISION LONG_DOUBLE REAL4 REAL8 REAL16 FLOAT16_T REAL2",
    "logical": "LOGICAL C_BOOL CXX_BOOL",
    "complex": "COMPLEX C_FLOAT_COMPLEX C_DOUBLE_COMPLEX C_LONG_DOUBLE_COMPLEX DOUBLE_COMPLEX COMPLEX8 "
               "COMPLEX16 COMPLEX32 CXX_FLOAT_COMPLEX CXX_DOUBLE_COMPLEX CXX_LONG_DOUBLE_COMPLEX COMPLEX4",
    "byte": "BYTE",
    "pair": "FLOAT_INT DOUBLE_INT LONG_INT SHORT_INT LONG_DOUBLE_INT INT_INT",
}
_ARITH = {"cint", "fint", "float"}
_DEFINED = {
    "MAX": _ARITH, "MIN": _ARITH,
    "SUM": _ARITH | {"complex"}, "PROD": _ARITH | {"complex"},
    # logical operations: C integers and logicals only (MPI-4.1 section 6.9.2; MPICH refuses the rest)
    "LAND": {"cint", "logical"}, "LOR": {"cint", "logical"}, "LXOR": {"cint", "logical"},
    "BAND": {"cint", "fint", "byte"}, "BOR": {"cint", "fint", "byte"}, "BXOR": {"cint", "fint", "byte"},
    "MAXLOC": {"pair"}, "MINLOC": {"pair"},
}
# C 'char' is signed on the platforms gpumpi supports; NumPy's 'S1' does no arithmetic
_NP_OVERRIDE = {"CHAR": "i1", "CHARACTER": "i1"}
# types MPICH reduces whose C type NumPy lacks (128-bit integer, half-precision complex)
_NO_NUMPY = {"INTEGER16", "COMPLEX4"}

_GROUP_OF: dict[int, str] = {}  # basic type handle -> group
_NAME_OF: dict[int, str] = {}  # basic type handle -> predefined name (the first one registered)
for _g, _names in _GROUPS.items():
    for _n in _names.split():
        _t = _pd.lookup_name(_n) if _n in ("INTEGER16", "COMPLEX4", "REAL2") else getattr(_pd, _n)
        _GROUP_OF[_t._handle] = _g
        _NAME_OF.setdefault(_t._handle, _n)
del _g, _names, _n, _t


def named_basic(basic: Datatype) -> Datatype:
    """The predefined type behind a basic type (an f90 type stands for the type it matched)."""
    while basic._combiner in F90_TYPES:
        basic = basic._base
    return basic




def _tname(datatype: Datatype) -> str:
    return datatype._rec.name or repr(datatype)


# -- host kernels ----------------------------------------------------------------------------------

UFUNCS = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
           "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor,
           "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}


def _host_ufunc(uf, dt):
    def run(src, dst):
        b = dst.view(dt)
        uf(src.view(dt), b, out=b)
    return run


def _host_ufunc3(uf, dt):
    def run(a, b, out):
        o = out.view(dt)
        uf(a.view(dt), b.view(dt), out=o)
    return run


def _host_replace(src, dst):
    dst[:] = src


def _host_noop(src, dst):
    return None


def _pair_dtype(vdt: np.dtype) -> np.dtype:
    """The packed pair: value at 0, ``int`` right after it (no padding)."""
    return np.dtype({"names": ["v", "i"], "formats": [vdt, _I4], "offsets": [0, vdt.itemsize],
                     "itemsize": vdt.itemsize + 4})


def _host_loc(vdt: np.dtype, maxloc: bool):
    pdt = _pair_dtype(vdt)
    better = np.greater if maxloc else np.less

    def run(src, dst):
        a = src.view(pdt)
        b = dst.view(pdt)
        av, ai, bv, bi = a["v"], a["i"], b["v"], b["i"]
        take = better(av, bv)  # the in value wins outright
        tie = av == bv  # equal values: the lower index (MPI-4.1 6.9.4)
        idx = np.where(take, ai, np.where(tie, np.minimum(ai, bi), bi))
        np.copyto(bv, av, where=take)
        bi[...] = idx
    return run


# -- the resolved reduction --------------------------------------------------------------------------


class Reducer:
    """One predefined operation resolved for one basic type.

    ``name`` the operation; ``unit`` bytes per unit and ``per`` units per datatype item;
    ``dtype`` the NumPy element type (``None`` for ``REPLACE``/``NO_OP``); ``pair`` the
    value type of a pair type (else None); ``host(src, dst)`` reduces two 1-D ``uint8``
    arrays of whole units on the host.
    """

    __slots__ = ("name", "unit", "per", "dtype", "pair", "host", "host3", "_dev")

    def __init__(self, name: str, unit: int, per: int, dtype, pair, host, host3=None) -> None:
        self.name, self.unit, self.per, self.dtype, self.pair, self.host = name, unit, per, dtype, pair, host
        self.host3 = host3  # ``host3(a, b, out)``: ``out = a op b`` in one pass (ufunc operations), or None
        self._dev = None

    def __repr__(self) -> str:
        return f"<Reducer {self.name} unit={self.unit} per={self.per} dtype={self.dtype} pair={self.pair}>"

    @property
    def longdouble(self) -> bool:
        """Whether the elements are C ``long double`` (no CUDA type)."""
        d = self.pair if self.pair is not None else self.dtype
        return d is not None and d.kind in "fc" and d.itemsize in (16, 32) and d.char in "gG"


def resolve(name: str, datatype: Datatype, call: str) -> Reducer:
    """The :class:`Reducer` for predefined operation ``name`` on committed ``datatype`` (cached
    on the type's handle record); ``MPI.Exception(ERR_OP)`` where it is not defined."""
    cache = datatype._rec.cache
    key = ("reduce", name)
    r = cache.get(key)
    if r is None:
        r = cache[key] = _resolve(name, datatype, call)
    return r


def _resolve(name: str, datatype: Datatype, call: str) -> Reducer:
    size = datatype._size
    if name in ("REPLACE", "NO_OP") or size == 0:
        return Reducer(name, 1, size, None, None, _host_replace if name == "REPLACE" and size else _host_noop)
    basic = datatype._basic
    if basic is None:
        raise error(ERR_OP, f"{call}: MPI_{name} is not defined for a datatype of mixed basic types "
                            f"({_tname(datatype)})")
    named = named_basic(basic)
    group = _GROUP_OF.get(named._handle)
    if group not in _DEFINED[name]:
        what = _tname(named) if named is datatype else f"{_tname(datatype)}, of {_tname(named)}"
        raise error(ERR_OP, f"{call}: MPI_{name} is not defined for this datatype ({what})")
    tname = _NAME_OF[named._handle]
    if tname in _NO_NUMPY:
        raise NotImplementedError(f"{call}: MPI_{name} on {_tname(named)}: gpumpi has no arithmetic for this "
                                  f"type (no NumPy equivalent)")
    per = datatype._nbasic
    if group == "pair":
        vdt = named._pair[0].np
        return Reducer(name, named._size, per, None, vdt, _host_loc(vdt, name == "MAXLOC"))
    dt = np.dtype(_NP_OVERRIDE.get(tname) or named.np)
    return Reducer(name, dt.itemsize, per, dt, None, _host_ufunc(UFUNCS[name], dt), _host_ufunc3(UFUNCS[name], dt))


# -- device kernels (plain Python; compiled by _device, run by numba's simulator for 'sim') --------------

_cuda = None  # numba.cuda once _device() ran: the kernels name it as a global, which numba resolves at
# compile time and the simulator swaps for its fake module while a kernel runs (as in kernels.pack)


def _d_sum(a, b, n):
    """``b[t] = a[t] + b[t]``, thread ``t`` then ``t + gridsize``... (every kernel here loops so)::

        element:  0 1 2 ... g-1 | g g+1 ... | ...     g = gridsize
        thread:   0 1 2 ... g-1 | 0 1   ... | ...
    """
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = a[t] + b[t]
        t += step


def _d_prod(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = a[t] * b[t]
        t += step


def _d_max(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        x = a[t]
        if x > b[t] or x != x:  # NaN propagates, as NumPy's maximum on the host
            b[t] = x
        t += step


def _d_min(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        x = a[t]
        if x < b[t] or x != x:
            b[t] = x
        t += step


def _d_land(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = 1 if (a[t] != 0 and b[t] != 0) else 0
        t += step


def _d_lor(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = 1 if (a[t] != 0 or b[t] != 0) else 0
        t += step


def _d_lxor(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = 1 if ((a[t] != 0) != (b[t] != 0)) else 0
        t += step


def _d_band(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = a[t] & b[t]
        t += step


def _d_bor(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = a[t] | b[t]
        t += step


def _d_bxor(a, b, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        b[t] = a[t] ^ b[t]
        t += step


def _d_maxloc(av, ai, bv, bi, n):
    """Pairs in aligned value/index arrays: the larger value wins, a tie keeps the lower index."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        x = av[t]
        y = bv[t]
        if x > y:
            bv[t] = x
            bi[t] = ai[t]
        elif x == y and ai[t] < bi[t]:
            bi[t] = ai[t]
        t += step


def _d_minloc(av, ai, bv, bi, n):
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        x = av[t]
        y = bv[t]
        if x < y:
            bv[t] = x
            bi[t] = ai[t]
        elif x == y and ai[t] < bi[t]:
            bi[t] = ai[t]
        t += step


def _d_split(src, psize, vsize, vals, idx, n):
    """Byte kernel: packed pairs ``src`` (``psize`` bytes each) -> aligned value and index arrays
    (given as their bytes)::

        src:  | v0 v0 v0 v0 v0 v0 v0 v0 i0 i0 i0 i0 | v1 ...      (DOUBLE_INT: psize 12, vsize 8)
        vals: | v0 ... v0 | v1 ... v1 |                            idx: | i0 i0 i0 i0 | i1 ...
    """
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        o = t * psize
        for j in range(vsize):
            vals[t * vsize + j] = src[o + j]
        for j in range(4):
            idx[t * 4 + j] = src[o + vsize + j]
        t += step


def _d_join(vals, idx, dst, psize, vsize, n):
    """The reverse of :func:`_d_split`."""
    t = _cuda.grid(1)
    step = _cuda.gridsize(1)
    while t < n:
        o = t * psize
        for j in range(vsize):
            dst[o + j] = vals[t * vsize + j]
        for j in range(4):
            dst[o + vsize + j] = idx[t * 4 + j]
        t += step


_DEVICE_FNS = {"SUM": _d_sum, "PROD": _d_prod, "MAX": _d_max, "MIN": _d_min, "LAND": _d_land, "LOR": _d_lor,
               "LXOR": _d_lxor, "BAND": _d_band, "BOR": _d_bor, "BXOR": _d_bxor, "MAXLOC": _d_maxloc,
               "MINLOC": _d_minloc, "split": _d_split, "join": _d_join}
_DEV = None  # (numba.cuda, simulator?, {name: kernel})
_THREADS, _MAX_BLOCKS = 256, 4096
_SIM_THREADS, _SIM_MAX_BLOCKS = 32, 2


def _device():
    """``(numba.cuda, simulator?, kernels by name)``, built on first use (imports ``numba.cuda``)."""
    global _DEV, _cuda
    d = _DEV
    if d is not None:
        return d
    from numba import cuda

    from . import pack

    _cuda = cuda
    d = _DEV = (cuda, pack._is_sim(), pack.jit_kernels(_DEVICE_FNS))
    return d


def simulator_available() -> bool:
    """Whether numba.cuda is (or will be) numba's simulator in this process."""
    try:
        from . import pack

        return pack._is_sim()
    except ImportError:
        return False


def _launch(n: int, sim: bool):
    threads, cap = (_SIM_THREADS, _SIM_MAX_BLOCKS) if sim else (_THREADS, _MAX_BLOCKS)
    return min(cap, -(-n // threads)), threads


def _align_of(dt: np.dtype) -> int:
    return dt.itemsize // 2 if dt.kind == "c" else dt.itemsize


def _run_kernels(red: Reducer, n: int, src8, dst8, saddr: int, daddr: int, cuda, sim: bool, kernels, stream):
    """Reduce ``n`` elements of byte arrays ``src8``/``dst8`` (device arrays, or NumPy arrays under the
    simulator) with the kernels, on ``stream``."""
    blocks, threads = _launch(n, sim)

    def scratch(count, dt):  # the simulator takes NumPy arrays as device memory
        return np.empty(count, dt) if sim else cuda.device_array(count, dt, stream=stream)

    if red.pair is not None:
        vdt = red.pair
        vs, ps = vdt.itemsize, red.unit
        sv = scratch(n, vdt)
        si = scratch(n, _I4)
        dv = scratch(n, vdt)
        di = scratch(n, _I4)
        split, join = kernels["split"], kernels["join"]
        split[blocks, threads, stream](src8, ps, vs, sv.view(_U8), si.view(_U8), n)
        split[blocks, threads, stream](dst8, ps, vs, dv.view(_U8), di.view(_U8), n)
        kernels[red.name][blocks, threads, stream](sv, si, dv, di, n)
        join[blocks, threads, stream](dv.view(_U8), di.view(_U8), dst8, ps, vs, n)
        return
    dt = red.dtype
    al = _align_of(dt)
    if (saddr | daddr) % al:  # never a misaligned load: reduce aligned copies (device to device)
        a = scratch(n * dt.itemsize, _U8)
        b = scratch(n * dt.itemsize, _U8)
        _copy(a, src8, sim, stream)
        _copy(b, dst8, sim, stream)
        kernels[red.name][blocks, threads, stream](a.view(dt), b.view(dt), n)
        _copy(dst8, b, sim, stream)
        return
    kernels[red.name][blocks, threads, stream](src8.view(dt), dst8.view(dt), n)


def _copy(dst, src, sim: bool, stream) -> None:
    if sim:
        dst[...] = src
    else:
        dst.copy_to_device(src, stream=stream)


def sim_reduce(red: Reducer, nunits: int, src: int, dst: int, adapter, stream=None) -> None:
    """``dst = src op dst`` over ``nunits`` units at simulated-device addresses ``src``/``dst``.

    Runs the work queued on ``stream`` first (None: the adapter's current stream), then
    reduces in place: on numba's simulator up to :data:`SIM_KERNEL_MAX` elements, else
    with NumPy on the mapped memory (see the module notes).  Never calls ``memcpy``.
    """
    nbytes = nunits * red.unit
    adapter.stream_synchronize(stream)
    if not nbytes or red.name == "NO_OP":
        return
    s8 = np.frombuffer(adapter.host_view(src, nbytes), _U8)
    d8 = np.frombuffer(adapter.host_view(dst, nbytes), _U8)
    if red.dtype is None and red.pair is None:  # REPLACE: a copy, no arithmetic to prove
        red.host(s8, d8)
        return
    if nunits <= SIM_KERNEL_MAX and not red.longdouble and _use_sim_kernels():
        cuda, sim, kernels = _device()
        _run_kernels(red, nunits, s8, d8, src, dst, cuda, sim, kernels, 0)
        return
    red.host(s8, d8)


def _use_sim_kernels() -> bool:
    from .. import _device as _dev

    _dev.use_simulator()
    try:
        return simulator_available()
    except Exception:  # numba missing or broken: NumPy on the mapped memory
        return False


def device_reduce(red: Reducer, nunits: int, src: int, dst: int, adapter, stream=None) -> None:
    """``dst = src op dst`` over ``nunits`` units at CUDA device addresses, on ``stream`` (None: the
    adapter's current stream); returns once the kernels have completed."""
    nbytes = nunits * red.unit
    if not nbytes or red.name == "NO_OP":
        return
    if red.dtype is None and red.pair is None:  # REPLACE: a device-to-device copy
        adapter.memcpy(dst, src, nbytes, stream)
        adapter.stream_synchronize(stream)
        return
    if red.longdouble:
        raise NotImplementedError(f"reduce: MPI_{red.name} on long double device data: CUDA has no long double "
                                  f"type")
    cuda, sim, kernels = _device()
    if sim:
        raise NotImplementedError("reduce: device memory but numba.cuda is the simulator "
                                  "(NUMBA_ENABLE_CUDASIM=1 in a process with a GPU)")
    from . import pack

    s = adapter.current_stream() if stream is None else stream
    ns = pack._stream(cuda, False, s)
    s8 = device_bytes(cuda, src, nbytes)
    d8 = device_bytes(cuda, dst, nbytes)
    _run_kernels(red, nunits, s8, d8, src, dst, cuda, False, kernels, ns)
    adapter.stream_synchronize(s)


def device_bytes(cuda, addr: int, nbytes: int):
    """A numba device array of ``nbytes`` bytes at device address ``addr`` (no ownership, no sync)."""
    desc = {"shape": (nbytes,), "typestr": "|u1", "data": (addr, False), "version": 3, "strides": None}
    return cuda.from_cuda_array_interface(desc, owner=None, sync=False)


# -- element-wise user functions (gpumpi's Op.Create_elementwise) --------------------------------------


class Elementwise:
    """``fn(a, b) -> a op b`` on two scalars, compiled for the host (``numba.njit``) and, on first
    device use, for CUDA (``numba.cuda.jit(device=True)`` inside a generated kernel)::

        host:    for i in range(n): b[i] = fn(a[i], b[i])
        device:  thread t, t + gridsize, ...:  b[t] = fn(a[t], b[t])
    """

    __slots__ = ("fn", "_host", "_dev")

    def __init__(self, fn) -> None:
        self.fn = fn
        self._host = None
        self._dev = None

    def host_loop(self):
        k = self._host
        if k is None:
            import numba

            f = numba.njit(self.fn)

            def loop(a, b):
                for i in range(a.shape[0]):
                    b[i] = f(a[i], b[i])

            k = self._host = numba.njit(loop)
        return k

    def device_kernel(self):
        k = self._dev
        if k is None:
            cuda = _device()[0]
            f = cuda.jit(device=True)(self.fn)

            def kernel(a, b, n):
                t = _cuda.grid(1)
                step = _cuda.gridsize(1)
                while t < n:
                    b[t] = f(a[t], b[t])
                    t += step

            k = self._dev = cuda.jit(kernel)
        return k

    def host(self, dt: np.dtype, src, dst) -> None:
        """Reduce byte arrays ``src``/``dst`` as elements of ``dt`` on the host."""
        a, b = src.view(dt), dst.view(dt)
        if not (a.flags.aligned and b.flags.aligned):
            a, bb = a.copy(), b.copy()
            self.host_loop()(a, bb)
            b[...] = bb
            return
        self.host_loop()(a, b)

    def sim(self, dt: np.dtype, nelem: int, src: int, dst: int, adapter, stream=None) -> None:
        """As :func:`sim_reduce`: the generated kernel on numba's simulator up to :data:`SIM_KERNEL_MAX`
        elements, else the host loop on the mapped memory; never ``memcpy``."""
        n = nelem * dt.itemsize
        adapter.stream_synchronize(stream)
        if not n:
            return
        s8 = np.frombuffer(adapter.host_view(src, n), _U8)
        d8 = np.frombuffer(adapter.host_view(dst, n), _U8)
        if nelem <= SIM_KERNEL_MAX and _use_sim_kernels():
            a, b = s8.view(dt), d8.view(dt)
            if (src | dst) % _align_of(dt):
                a, b = a.copy(), b.copy()
            blocks, threads = _launch(nelem, True)
            self.device_kernel()[blocks, threads, 0](a, b, nelem)
            if b.base is not d8:
                d8.view(dt)[...] = b
            return
        self.host(dt, s8, d8)

    def device(self, dt: np.dtype, nelem: int, src: int, dst: int, adapter, stream=None) -> None:
        """Run the generated kernel on CUDA device addresses, on ``stream``; returns when done."""
        n = nelem * dt.itemsize
        if not n:
            return
        cuda, sim, _ = _device()
        if sim:
            raise NotImplementedError("reduce: device memory but numba.cuda is the simulator "
                                      "(NUMBA_ENABLE_CUDASIM=1 in a process with a GPU)")
        from . import pack

        s = adapter.current_stream() if stream is None else stream
        ns = pack._stream(cuda, False, s)
        s8, d8 = device_bytes(cuda, src, n), device_bytes(cuda, dst, n)
        blocks, threads = _launch(nelem, False)
        k = self.device_kernel()
        if (src | dst) % _align_of(dt):
            a = cuda.device_array(n, _U8, stream=ns)
            b = cuda.device_array(n, _U8, stream=ns)
            a.copy_to_device(s8, stream=ns)
            b.copy_to_device(d8, stream=ns)
            k[blocks, threads, ns](a.view(dt), b.view(dt), nelem)
            d8.copy_to_device(b, stream=ns)
        else:
            k[blocks, threads, ns](s8.view(dt), d8.view(dt), nelem)
        adapter.stream_synchronize(s)
