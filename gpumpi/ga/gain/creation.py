"""gain's array creation and the small module functions of GA's ``gain/misc.pyx``.

Theory of operation
===================
Every creation function makes the array (:class:`~gpumpi.ga.gain.core.ndarray`, collective) and
then each rank computes the values of its own block from its ``(lo, hi)`` alone, through
``ga.access``/``release_update``: no data moves.  Below the size threshold the NumPy function
itself runs.  Values are computed with NumPy's own formulas so that results equal NumPy's bit
for bit: ``arange`` fills ``start + i*delta`` in the result dtype with ``delta = dtype(start +
step) - dtype(start)`` and element 1 set to ``dtype(start + step)`` (NumPy's ``fill``);
``linspace`` is ``i*step + start`` in float64 with the last element set to ``stop``.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .core import asarray, get_shape, is_distributed, ndarray, should_distribute, sync, zeros
from .ufuncs import UFUNCS, elementwise

__all__ = [
    "alen", "arange", "clip", "diag", "diagonal", "empty", "empty_like", "eye", "fromfunction", "full",
    "identity", "indices", "linspace", "logspace", "ones", "ones_like", "shape", "zeros_like",
]


def _fill_blocks(a, fn) -> None:
    """``a``'s block = ``fn(lo, hi, block)`` on every rank that has one. Collective."""
    sync()
    loc = a.access()
    if loc is not None:
        lo, hi = a.distribution()
        fn([int(x) for x in lo], [int(x) for x in hi], loc)
        a.release_update()
    sync()


def full(shape, fill_value, dtype=None, order="C"):
    """An array filled with ``fill_value`` (NumPy ``full``). Collective."""
    if not should_distribute(shape):
        return np.full(shape, fill_value, dtype, order)
    a = ndarray(shape, np.asarray(fill_value).dtype if dtype is None else dtype, order=order)
    a.fill(fill_value)
    return a


def ones(shape, dtype=float, order="C"):
    """An array of ones (gain/NumPy ``ones``). Collective."""
    return full(shape, 1, dtype, order)


def empty(shape, dtype=float, order="C"):
    """An array with undefined contents (gain/NumPy ``empty``). Collective."""
    return ndarray(shape, dtype, order=order)


def _like(a, dtype, shape):
    return (get_shape(a) if shape is None else shape,
            (a.dtype if is_distributed(a) else np.asarray(a).dtype) if dtype is None else dtype)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None):
    """Zeros of ``a``'s shape and dtype (gain/NumPy ``zeros_like``). Collective."""
    s, dt = _like(a, dtype, shape)
    return zeros(s, dt)


def ones_like(a, dtype=None, order="K", subok=True, shape=None):
    """Ones of ``a``'s shape and dtype (gain/NumPy ``ones_like``). Collective."""
    s, dt = _like(a, dtype, shape)
    return ones(s, dt)


def empty_like(a, dtype=None, order="K", subok=True, shape=None):
    """An array of ``a``'s shape and dtype, contents undefined (gain/NumPy ``empty_like``). Collective."""
    s, dt = _like(a, dtype, shape)
    return empty(s, dt)


def arange(start, stop=None, step=None, dtype=None, shape=None):
    """Evenly spaced values in ``[start, stop)`` (gain/NumPy ``arange``); gain's ``shape`` reshapes
    the result. Collective."""
    if stop is None:
        start, stop = 0, start
    if step is None:
        step = 1
    if step == 0:
        raise ZeroDivisionError("arange: step must not be zero")
    dt = np.dtype(dtype) if dtype is not None else np.result_type(start, stop, step)
    n = max(0, math.ceil((stop - start) / step))
    if shape is not None and int(np.prod(shape)) != n:
        raise ValueError(f"gain.arange: shape {shape} does not hold {n} values")
    final = (n,) if shape is None else tuple(np.atleast_1d(shape).tolist())
    if not should_distribute(final):
        return np.arange(start, stop, step, dtype=dtype).reshape(final)
    first = np.array(start).astype(dt)[()]
    second = np.array(start + step).astype(dt)[()]
    with np.errstate(all="ignore"):
        delta = np.array(second - first).astype(dt)[()]

    def fill(lo, hi, loc):
        flat_lo = int(np.ravel_multi_index(lo, final))
        i = np.arange(flat_lo, flat_lo + loc.size) if len(final) == 1 else np.ravel_multi_index(
            tuple(np.indices(loc.shape).reshape(len(final), -1) + np.asarray(lo).reshape(-1, 1)), final)
        with np.errstate(all="ignore"):
            vals = first + i.astype(dt) * delta if dt.kind in "fc" else (start + i * step)
        vals = np.asarray(vals).astype(dt)
        vals[i == 0] = first
        vals[i == 1] = second
        loc[...] = vals.reshape(loc.shape)
    a = ndarray(final, dt)
    _fill_blocks(a, fill)
    return a


def linspace(start, stop, num=50, endpoint=True, retstep=False):
    """``num`` evenly spaced values from ``start`` to ``stop`` (gain/NumPy ``linspace``). Collective."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    if not should_distribute((num,)):
        return np.linspace(start, stop, num, endpoint, retstep)
    div = (num - 1) if endpoint else num
    delta = float(stop) - float(start) if not isinstance(stop, complex) else stop - start
    step = delta / div if div > 0 else np.nan
    dt = np.result_type(start, stop, float(num))

    def fill(lo, hi, loc):
        y = np.arange(lo[0], hi[0], dtype=dt)
        if div > 0:
            y = y * step if step != 0 else (y / div) * delta
        else:
            y = y * delta
        y += start
        if endpoint and num > 1 and hi[0] == num:
            y[-1] = stop
        loc[...] = y
    a = ndarray((num,), dt)
    _fill_blocks(a, fill)
    return (a, step) if retstep else a


def logspace(start, stop, num=50, endpoint=True, base=10.0):
    """``base ** linspace(start, stop, num)`` (gain/NumPy ``logspace``). Collective."""
    if not should_distribute((operator.index(num),)):
        return np.logspace(start, stop, num, endpoint, base)
    y = linspace(start, stop, num, endpoint)
    UFUNCS["power"](base, y, out=y)
    return y


def eye(N, M=None, k=0, dtype=float):
    """Ones on the ``k``-th diagonal, zeros elsewhere (gain/NumPy ``eye``). Collective."""
    M = N if M is None else M
    if not should_distribute((N, M)):
        return np.eye(N, M, k, dtype)

    def fill(lo, hi, loc):
        r, c = np.indices(loc.shape)
        loc[...] = (c + lo[1]) - (r + lo[0]) == k
    a = ndarray((N, M), dtype)
    _fill_blocks(a, fill)
    return a


def identity(n, dtype=None):
    """The ``n`` x ``n`` identity (gain/NumPy ``identity``). Collective."""
    return eye(n, dtype=float if dtype is None else dtype)


def indices(dimensions, dtype=int):
    """The index grids, shape ``(len(dimensions),) + dimensions`` (gain/NumPy ``indices``). Collective."""
    dims = tuple(operator.index(d) for d in dimensions)
    shape = (len(dims),) + dims
    if not should_distribute(shape):
        return np.indices(dims, dtype)

    def fill(lo, hi, loc):
        grid = np.indices(loc.shape[1:], dtype)
        for j, k in enumerate(range(lo[0], hi[0])):
            loc[j] = grid[k] + lo[k + 1]
    a = ndarray(shape, dtype)
    _fill_blocks(a, fill)
    return a


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function(*index_grids, **kwargs)`` (gain/NumPy ``fromfunction``), the grids gain arrays
    (one per dimension) so the function runs through gain's operators and ufuncs. Collective."""
    shape = tuple(operator.index(d) for d in shape)
    if not should_distribute(shape):
        return np.fromfunction(function, shape, dtype=dtype, **kwargs)
    grids = []
    for k in range(len(shape)):
        def fill(lo, hi, loc, k=k):
            loc[...] = (np.arange(lo[k], hi[k], dtype=dtype)).reshape(
                [-1 if d == k else 1 for d in range(len(shape))])
        g = ndarray(shape, dtype)
        _fill_blocks(g, fill)
        grids.append(g)
    result = function(*grids, **kwargs)
    for g in grids:
        if g is not result:
            g.free()
    return result


def diag(v, k=0):
    """The ``k``-th diagonal of a 2-D array, or a 2-D array with 1-D ``v`` on it (gain/NumPy
    ``diag``). Collective."""
    v = asarray(v)
    if not is_distributed(v):
        return np.diag(v, k)
    if v.ndim == 2:
        return v.diagonal(k)
    if v.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = v.shape[0] + abs(k)
    r0, c0 = (0, k) if k >= 0 else (-k, 0)

    def fill(lo, hi, loc):
        loc[...] = 0
        i = np.arange(max(lo[0] - r0, lo[1] - c0, 0), min(hi[0] - r0, hi[1] - c0, v.shape[0]))
        if i.size:
            loc[i + r0 - lo[0], i + c0 - lo[1]] = v._patch([int(i[0])], [int(i[-1]) + 1])
    a = ndarray((n, n), v.dtype)
    if isinstance(a, np.ndarray):
        return np.diag(v.allget(), k)
    _fill_blocks(a, fill)
    return a


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of 2-D ``a`` (gain/NumPy ``diagonal``). Collective."""
    a = asarray(a)
    return a.diagonal(offset, axis1, axis2)


def clip(a, a_min=None, a_max=None, out=None):
    """``a`` limited to ``[a_min, a_max]``, operands broadcast (gain/NumPy ``clip``). Collective."""
    return elementwise(np.clip, [a, a_min, a_max], out, "gain.clip")


def shape(a) -> tuple:
    """The shape of ``a`` (gain/NumPy ``shape``)."""
    return tuple(get_shape(a))


def alen(a) -> int:
    """The length of the first dimension (gain's ``alen``, removed from NumPy 1.23)."""
    s = shape(a)
    if not s:
        raise TypeError("len() of unsized object")
    return s[0]
