"""gain's ``dot`` over GA's matrix and vector operations (GA ``gain/misc.pyx`` ``dot``).

Theory of operation
===================
* a scalar operand: the element-wise product (``multiply``), as NumPy;
* 1-D with 1-D: ``ga.dot`` of the two GAs (each rank sums its block's products, the partial
  sums are combined on every rank), returned as NumPy's scalar type for the result dtype;
* 2-D with 2-D: ``ga.gemm`` into a new array, for float32/float64/complex64/complex128 (GA's
  ``gemm`` types); other dtypes raise ``NotImplementedError``;
* 2-D with 1-D and 1-D with 2-D: the vector is reshaped to a one-column (one-row) matrix, then
  ``gemm``, then the result reshaped back;
* operands are first made gain arrays of the common dtype (``asarray``/``astype``); the
  temporaries made here are freed here.  Higher dimensions raise ``NotImplementedError``.
"""

from __future__ import annotations

import numpy as np

from ... import ga
from ..state import TYPE_CODES
from .core import asarray, is_distributed, should_distribute, zeros
from .ufuncs import UFUNCS

__all__ = ["dot"]

_GEMM_TYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64), np.dtype(np.complex128))


def _as(x, dt, temps):
    """``x`` as an array of ``dt``: a gain array when it distributes (new ones go to ``temps``)."""
    if is_distributed(x):
        if x.dtype == dt:
            return x
        y = x.astype(dt)
    else:
        y = asarray(np.asarray(x, dt))
        if not is_distributed(y):
            return y
    temps.append(y)
    return y


def dot(a, b, out=None):
    """The dot product of ``a`` and ``b`` (gain/NumPy ``dot``; ``ga.dot``, ``ga.gemm``). Collective."""
    if not (is_distributed(a) or is_distributed(b) or is_distributed(out)):
        return np.dot(a, b, out)
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        # np.dot makes the scalar an array first: its dtype is strong (dot(6, float32) is float64)
        a, b = (x if is_distributed(x) else np.asarray(x) for x in (a, b))
        return UFUNCS["multiply"](a, b, out=out)
    dt = np.result_type(a.dtype if is_distributed(a) else np.asarray(a).dtype,
                        b.dtype if is_distributed(b) else np.asarray(b).dtype)
    temps: list = []
    try:
        x, y = _as(a, dt, temps), _as(b, dt, temps)
        result = _dot(x, y, dt, temps)
    finally:
        for t in temps:
            t.free()
    if out is None:
        return result
    out[...] = result
    if is_distributed(result):
        result.free()
    return out


def _dot(x, y, dt, temps):
    if x.ndim == 1 and y.ndim == 1:
        if x.shape != y.shape:
            raise ValueError(f"shapes {x.shape} and {y.shape} not aligned: {x.shape[0]} (dim 0) != {y.shape[0]} (dim 0)")
        if not is_distributed(x) or not is_distributed(y):
            return np.dot(np.asarray(x), np.asarray(y))
        if dt in TYPE_CODES:
            return dt.type(ga.dot(x.handle, y.handle))
        prod = UFUNCS["logical_and" if dt == np.bool_ else "multiply"](x, y)
        total = prod.any() if dt == np.bool_ else prod.sum(dtype=dt)
        prod.free()
        return total
    if x.ndim > 2 or y.ndim > 2:
        raise NotImplementedError(f"gain.dot: arrays of {x.ndim} and {y.ndim} dimensions (1-D and 2-D only) (gpumpi)")
    if dt not in _GEMM_TYPES:
        raise NotImplementedError(f"gain.dot: matrix products of {dt} (ga.gemm takes float32, float64, "
                                  f"complex64, complex128) (gpumpi)")
    vec = None
    if x.ndim == 1:
        x, vec = x.reshape(1, x.shape[0]), 0
        temps.append(x)
    if y.ndim == 1:
        y, vec = y.reshape(y.shape[0], 1), 1
        temps.append(y)
    if x.shape[1] != y.shape[0]:
        raise ValueError(f"shapes {x.shape} and {y.shape} not aligned: {x.shape[1]} (dim 1) != {y.shape[0]} (dim 0)")
    x, y = (_as(v, dt, temps) for v in (x, y))
    m, k, n = x.shape[0], x.shape[1], y.shape[1]
    c = zeros((m, n), dt)  # gemm's beta = 0 must not meet undefined contents
    if not is_distributed(c):
        c = np.dot(np.asarray(x), np.asarray(y))
    else:
        if not is_distributed(x) or not is_distributed(y):
            raise NotImplementedError("gain.dot: operands below the size threshold with a distributed result (gpumpi)")
        ga.gemm(False, False, m, n, k, 1, x.handle, y.handle, 0, c.handle)
    if vec is None:
        return c
    r = c.reshape(-1)
    if is_distributed(c) and r is not c:
        c.free()
    return r
