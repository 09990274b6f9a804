"""gain ndarray's operators, reductions and shape methods, installed on :class:`~gpumpi.ga.gain.core.ndarray`.

Theory of operation
===================
The operators are NumPy's: each calls the gain ufunc of the same name (``a & b`` is
``bitwise_and`` as in NumPy; GA's gain used ``logical_and``), in-place operators pass the
array as ``out`` (NumPy's ``same_kind`` casting rule applies, checked on every rank before any
block is touched).  ``__array_ufunc__`` routes ``np.sin(a)``, ``np.add(x, a)``, ``x + a`` (x
a NumPy array) and ``np.add.reduce(a)`` to the gain versions, and NumPy functions that call a
method (``np.sum(a)``, ``np.transpose(a)``) reach the methods here.

Shape methods make new arrays (GA's gain returns views): ``transpose`` reads, for each block
of the result, the source patch it comes from (one ``ga.get``) and transposes it;
``reshape``/``flatten``/``ravel``/``squeeze`` compute, for each block of the result, the
C-order positions of its elements in the source and read them with ``ga.gather``.
"""

from __future__ import annotations

import operator

import numpy as np

from .core import ndarray, should_distribute, sync
from .ufuncs import UFUNCS, elementwise, reduce_array

__all__ = ["as_function"]


def as_function(f):
    """An element-wise NumPy function that is not a ufunc, given the ufunc ``out=`` convention."""
    def g(*xs, out=None):
        r = f(*xs)
        if out is None:
            return r
        out[...] = r
        return out
    return g


# --- operators -----------------------------------------------------------------------------------------
def _binary(name, reflected=False):
    uf = UFUNCS[name]
    if reflected:
        return lambda self, y: uf(y, self)
    return lambda self, y: uf(self, y)


def _inplace(name):
    uf = UFUNCS[name]

    def op(self, y):
        uf(self, y, out=self)
        return self
    return op


_BINOPS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
           "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "and": "bitwise_and",
           "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift"}
for _op, _name in _BINOPS.items():
    setattr(ndarray, f"__{_op}__", _binary(_name))
    setattr(ndarray, f"__r{_op}__", _binary(_name, reflected=True))
    setattr(ndarray, f"__i{_op}__", _inplace(_name))
for _op, _name in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                   "ge": "greater_equal"}.items():
    setattr(ndarray, f"__{_op}__", _binary(_name))
ndarray.__neg__ = lambda self: UFUNCS["negative"](self)
ndarray.__pos__ = lambda self: self.copy()
ndarray.__abs__ = lambda self: UFUNCS["absolute"](self)
ndarray.__invert__ = lambda self: UFUNCS["invert"](self)
ndarray.__divmod__ = lambda self, y: elementwise(np.divmod, [self, y], None, "gain.divmod", 2)
ndarray.__rdivmod__ = lambda self, y: elementwise(np.divmod, [y, self], None, "gain.divmod", 2)


def _matmul(self, y):
    from .linalg import dot
    if np.ndim(y) == 0:
        raise ValueError("matmul: Input operand 1 does not have enough dimensions")
    return dot(self, y)


ndarray.__matmul__ = _matmul


def _rmatmul(self, y):
    from .linalg import dot
    if np.ndim(y) == 0:
        raise ValueError("matmul: Input operand 0 does not have enough dimensions")
    return dot(y, self)


ndarray.__rmatmul__ = _rmatmul


def _array_ufunc(self, uf, method, *inputs, **kw):
    if method == "__call__":
        out = kw.pop("out", None)
        if isinstance(out, tuple) and len(out) == 1:
            out = out[0]
        return elementwise(uf, list(inputs), out, f"gain.{uf.__name__}", uf.nout, **kw)
    if method == "reduce" and len(inputs) == 1 and set(kw) <= {"axis", "dtype", "out", "keepdims"}:
        out = kw.get("out")
        if isinstance(out, tuple):
            out = out[0] if len(out) == 1 else out
        return reduce_array(uf, inputs[0], kw.get("axis", 0), kw.get("dtype"), out, kw.get("keepdims", False),
                            f"gain.{uf.__name__}.reduce")
    return NotImplemented


ndarray.__array_ufunc__ = _array_ufunc


# --- reductions --------------------------------------------------------------------------------------
def _reducer(func, doc):
    def method(self, axis=None, dtype=None, out=None, keepdims=False):
        return reduce_array(func, self, axis, dtype, out, keepdims, f"gain.ndarray.{method.__name__}")
    method.__doc__ = doc
    return method


for _n, _f in {"sum": np.add, "prod": np.multiply}.items():
    _m = _reducer(_f, f"NumPy ``{_n}``: whole array or one axis. Collective.")
    _m.__name__ = _n
    setattr(ndarray, _n, _m)


def _extreme(func, name):
    def method(self, axis=None, out=None, keepdims=False):
        return reduce_array(func, self, axis, None, out, keepdims, f"gain.ndarray.{name}")
    method.__name__ = name
    method.__doc__ = f"NumPy ``{name}``: whole array or one axis. Collective."
    return method


for _n, _f in {"max": np.maximum, "min": np.minimum, "all": np.logical_and, "any": np.logical_or}.items():
    setattr(ndarray, _n, _extreme(_f, _n))


def _count(self, axis) -> int:
    if axis is None:
        return self.size
    axes = axis if isinstance(axis, tuple) else (axis,)
    n = 1
    for x in axes:
        n *= self.shape[operator.index(x)]
    return n


def mean(self, axis=None, dtype=None, out=None, keepdims=False):
    """The arithmetic mean (NumPy ``mean``; integers averaged in float64). Collective."""
    if dtype is None and self.dtype.kind in "biu":
        dtype = np.float64
    total = self.sum(axis, dtype, None, keepdims)
    n = _count(self, axis)
    if isinstance(total, ndarray):
        UFUNCS["true_divide"](total, n, out=total, casting="unsafe")
        result = total
    elif isinstance(total, np.ndarray):
        result = np.true_divide(total, n, out=total, casting="unsafe")
    else:
        result = total.dtype.type(total / n)
    if out is None:
        return result
    out[...] = result
    return out


def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    """The variance, ``mean(abs(x - x.mean())**2)`` with ``n - ddof`` (NumPy ``var``). Collective."""
    m = self.mean(axis, dtype, keepdims=True)
    d = UFUNCS["subtract"](self, m)
    sq = UFUNCS["absolute"](d) if d.dtype.kind == "c" else d
    sq2 = UFUNCS["multiply"](sq, sq)
    for t in {id(x): x for x in (m, d, sq) if isinstance(x, ndarray)}.values():
        t.free()
    total = sq2.sum(axis, dtype, None, keepdims)
    sq2.free()
    n = max(_count(self, axis) - ddof, 0)
    if isinstance(total, ndarray):
        UFUNCS["true_divide"](total, n, out=total, casting="unsafe")
        result = total
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            result = np.true_divide(total, n, casting="unsafe")
        result = result.dtype.type(result) if np.ndim(result) == 0 else result
    if out is None:
        return result
    out[...] = result
    return out


def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    """The standard deviation, ``sqrt(var)`` (NumPy ``std``). Collective."""
    v = self.var(axis, dtype, None, ddof, keepdims)
    if isinstance(v, ndarray):
        UFUNCS["sqrt"](v, out=v)
        result = v
    else:
        result = np.sqrt(v)
    if out is None:
        return result
    out[...] = result
    return out


def ptp(self, axis=None, out=None, keepdims=False):
    """``max - min`` (NumPy ``ptp``). Collective."""
    hi, lo = self.max(axis, keepdims=keepdims), self.min(axis, keepdims=keepdims)
    r = UFUNCS["subtract"](hi, lo)
    for t in (hi, lo):
        if isinstance(t, ndarray):
            t.free()
    if out is None:
        return r
    out[...] = r
    return out


ndarray.mean, ndarray.var, ndarray.std, ndarray.ptp = mean, var, std, ptp


# --- element-wise methods ---------------------------------------------------------------------------------
def conjugate(self):
    """The complex conjugate, a new array (NumPy ``conjugate``). Collective."""
    return UFUNCS["conjugate"](self)


def round_(self, decimals=0, out=None):
    """Round to ``decimals`` (NumPy ``round``). Collective."""
    return elementwise(as_function(lambda x: np.round(x, decimals)), [self], out, "gain.ndarray.round")


def clip(self, a_min=None, a_max=None, out=None):
    """Limit the values to ``[a_min, a_max]`` (NumPy ``clip``). Collective."""
    from .creation import clip as _clip
    return _clip(self, a_min, a_max, out)


def dot(self, b, out=None):
    """The dot product with ``b`` (NumPy ``dot``). Collective."""
    from .linalg import dot as _dot
    return _dot(self, b, out)


def _part(name):
    def getter(self):
        if name == "real" and self.dtype.kind != "c":
            return self
        if self.dtype.kind != "c":
            return UFUNCS["multiply"](self, 0)
        return elementwise(as_function(lambda x: getattr(x, name)), [self], None, f"gain.ndarray.{name}")

    def setter(self, value):
        raise NotImplementedError(f"gain.ndarray.{name}: assigning to the {name} part (gain arrays "
                                  f"have no views) (gpumpi)")
    return property(getter, setter, doc=f"The {name} part: a new array for complex dtypes (gain: a view).")


ndarray.conjugate = ndarray.conj = conjugate
ndarray.round = round_
ndarray.clip = clip
ndarray.dot = dot
ndarray.real = _part("real")
ndarray.imag = _part("imag")


# --- shape methods -----------------------------------------------------------------------------------------
def transpose(self, *axes):
    """The array with its axes permuted (default: reversed), a new array (NumPy ``transpose``;
    gain: a view). Collective."""
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
        axes = axes[0] or ()
    nd = self.ndim
    perm = tuple(range(nd))[::-1] if not axes else tuple(operator.index(a) % nd if -nd <= a < nd else nd
                                                         for a in axes)
    if len(perm) != nd or sorted(perm) != list(range(nd)):
        raise ValueError(f"gain.ndarray.transpose: axes {axes} don't match array of {nd} dimensions")
    shape = tuple(self.shape[p] for p in perm)
    new = ndarray(shape, self.dtype)
    sync()
    loc = new.access()
    if loc is not None:
        lo, hi = new.distribution()
        slo, shi = [0] * nd, [0] * nd
        for i, p in enumerate(perm):
            slo[p], shi[p] = int(lo[i]), int(hi[i])
        loc[...] = self._patch(slo, shi).transpose(perm)
        new.release_update()
    sync()
    return new


def reshape(self, *shape, order="C"):
    """The same elements in a new shape (C order), a new array (NumPy ``reshape``; gain: a view
    where it can). Collective."""
    if order != "C":
        raise NotImplementedError(f"gain.ndarray.reshape: order {order!r} (only C) (gpumpi)")
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    shape = [operator.index(d) for d in shape]
    if shape.count(-1) > 1:
        raise ValueError("gain.ndarray.reshape: can only specify one unknown dimension")
    if -1 in shape:
        rest = int(np.prod([d for d in shape if d != -1]))
        if rest == 0 or self.size % rest:
            raise ValueError(f"cannot reshape array of size {self.size} into shape {tuple(shape)}")
        shape[shape.index(-1)] = self.size // rest
    shape = tuple(shape)
    if int(np.prod(shape)) != self.size:
        raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
    if not should_distribute(shape):
        return self.allget().reshape(shape)
    new = ndarray(shape, self.dtype)
    sync()
    loc = new.access()
    if loc is not None:
        lo, hi = new.distribution()
        grid = np.indices(loc.shape).reshape(len(shape), -1) + np.asarray(lo).reshape(-1, 1)
        flat = np.ravel_multi_index(tuple(grid), shape)
        subs = np.stack(np.unravel_index(flat, self.shape), axis=1)
        loc[...] = self.gather(subs).reshape(loc.shape)
        new.release_update()
    sync()
    return new


def flatten(self, order="C"):
    """A 1-D copy (NumPy ``flatten``). Collective."""
    return self.reshape(self.size, order=order)


def squeeze(self, axis=None):
    """The array without its extent-1 axes (NumPy ``squeeze``), a new array. Collective."""
    axes = range(self.ndim) if axis is None else [
        operator.index(a) % self.ndim for a in (axis if isinstance(axis, tuple) else (axis,))]
    for a in axes:
        if axis is not None and self.shape[a] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return self.reshape([n for d, n in enumerate(self.shape) if not (d in axes and n == 1)])


def swapaxes(self, axis1, axis2):
    """The array with two axes exchanged, a new array (NumPy ``swapaxes``). Collective."""
    perm = list(range(self.ndim))
    a, b = operator.index(axis1) % self.ndim, operator.index(axis2) % self.ndim
    perm[a], perm[b] = perm[b], perm[a]
    return self.transpose(perm)


def diagonal(self, offset=0, axis1=0, axis2=1):
    """The ``offset`` diagonal of a 2-D array, a new array (NumPy ``diagonal``). Collective."""
    if self.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    if self.ndim != 2 or {axis1 % 2, axis2 % 2} != {0, 1}:
        raise NotImplementedError("gain.ndarray.diagonal: only 2-D arrays with axes (0, 1) (gpumpi)")
    a = self if axis1 % 2 == 0 else self.transpose()
    nrow, ncol = a.shape
    rows0, cols0 = (0, offset) if offset >= 0 else (-offset, 0)
    n = max(0, min(nrow - rows0, ncol - cols0))
    if not should_distribute((n,)):
        sync()
        got = a.gather(np.stack([np.arange(n) + rows0, np.arange(n) + cols0], axis=1)) if n else \
            np.empty(0, a.dtype)
        sync()
        out = got
    else:
        out = ndarray((n,), a.dtype)
        sync()
        loc = out.access()
        if loc is not None:
            lo, hi = out.distribution()
            i = np.arange(int(lo[0]), int(hi[0]))
            loc[...] = a.gather(np.stack([i + rows0, i + cols0], axis=1))
            out.release_update()
        sync()
    if a is not self:
        a.free()
    return out


ndarray.transpose, ndarray.reshape, ndarray.flatten = transpose, reshape, flatten
ndarray.ravel = lambda self, order="C": self.flatten(order)
ndarray.ravel.__doc__ = "A 1-D copy (NumPy ``ravel``; a copy here, never a view). Collective."
ndarray.squeeze, ndarray.swapaxes, ndarray.diagonal = squeeze, swapaxes, diagonal
