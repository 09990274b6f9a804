"""Element-wise functions and reductions on gain arrays: gain's ``ufunc`` wrapper (GA ``gain/core.pyx`` ``ufunc``).

Theory of operation
===================
:func:`elementwise` runs any NumPy element-wise function (a ufunc, ``np.clip``, ``np.round``)
over arrays of which at least one is a gain array.  The result's dtype is what NumPy gives for
empty operands of the same dtypes (Python scalars kept as they are, so NEP 50's weak scalars
apply) and its shape is NumPy's broadcast of the operand shapes.  When the result distributes
(or ``out`` is a gain array) every rank computes its own block of the output: an operand
with the output's shape and distribution (``ga.compare_distr``) is read through ``ga.access``;
any other gain operand is read with one ``ga.get`` of the patch that broadcasts onto the block
(dimensions of extent 1 stay ``0:1``); a NumPy operand is sliced.  Syncs bracket the
computation.  When the result does not distribute, gain operands are ``allget`` and NumPy runs.
There are no views, so an input can only alias an output by being the same object, in which
case the block is used in place.

Reductions (:meth:`ufunc.reduce`, ``sum``, ``prod``, ``max``, ``min``, ``all``, ``any``, ``mean``):

* over all elements (``axis=None``, or any axis of a 1-D array): each rank reduces its block,
  the partial values are allgathered and reduced in block order, identically on every rank;
* along one axis of an N-d array: each rank reduces its block along the axis into a temporary
  GA that has one plane per block-row along that axis (``ga.put``), then each rank reduces the
  planes of its block of the result.
* NumPy's reorderable ufuncs (``add``, ``multiply``, ``maximum``, ``logical_and`` ...) combine
  partials with the ufunc itself.  ``subtract`` and ``true_divide`` (not reorderable) reduce the
  first block with themselves and later blocks with ``add``/``multiply``, then combine with
  themselves: ``a0 - a1 - ... = a0 - ... - (sum of later blocks)``.  Other non-reorderable
  ufuncs (``power``, ``floor_divide``...) raise ``NotImplementedError``.
* Floating-point sums are added block by block, so they can differ from NumPy's pairwise sum
  in the last bits.
"""

from __future__ import annotations

import operator

import numpy as np

from ... import ga
from .core import asarray, comm, ndarray, should_distribute, sync

__all__ = ["elementwise", "reduce_array", "ufunc"]

_KWARGS = frozenset({"dtype", "casting"})


def _probe(x):
    """A zero-size stand-in for ``x`` with its dtype (Python scalars stay weak)."""
    if isinstance(x, (ndarray, np.ndarray)):
        return np.empty((0,), x.dtype)
    if isinstance(x, np.generic):
        return np.empty((0,), x.dtype)
    return x


def _piece(x, out: ndarray, lo, hi, same: dict):
    """The part of operand ``x`` that broadcasts onto the output block ``[lo, hi)``."""
    if not isinstance(x, (ndarray, np.ndarray)):
        return x
    off = out.ndim - x.ndim
    sl = []
    for d, n in enumerate(x.shape):
        if n == 1 and out.shape[d + off] != 1:
            sl.append((0, 1))
        else:
            sl.append((int(lo[d + off]), int(hi[d + off])))
    if isinstance(x, np.ndarray):
        return x[tuple(slice(a, b) for a, b in sl)]
    if id(x) in same:
        return same[id(x)]
    return x._patch([a for a, _ in sl], [b for _, b in sl])


def elementwise(func, inputs, out=None, call: str = "gain", nout: int = 1, **kw):
    """``func(*inputs, out=..., **kw)`` block by block (see the module docstring). Collective
    when any operand or output is a gain array."""
    for k in kw:
        if k not in _KWARGS:
            raise NotImplementedError(f"{call}: keyword {k!r} is not supported on gain arrays (gpumpi)")
    outs = (out,) if nout == 1 and not isinstance(out, tuple) else (tuple(out) if out is not None else None)
    if outs is not None and all(o is None for o in outs):
        outs = None
    inputs = [x if x is None or isinstance(x, (ndarray, np.ndarray, np.generic, int, float, complex, bool))
              else np.asarray(x) for x in inputs]
    if not any(isinstance(x, ndarray) for x in inputs + list(outs or ())):
        res = func(*inputs, out=outs, **kw) if outs is not None else func(*inputs, **kw)
        return res
    shape = np.broadcast_shapes(*[np.shape(x) if not isinstance(x, ndarray) else x.shape for x in inputs])
    if outs is None:
        with np.errstate(all="ignore"):
            probe = func(*[_probe(x) for x in inputs], **kw)
        dts = [p.dtype for p in (probe if nout > 1 else (probe,))]
        if should_distribute(shape):
            outs = tuple(ndarray(shape, dt) for dt in dts)
        else:
            outs = tuple(np.empty(shape, dt) for dt in dts)
    if len(outs) != nout:
        raise ValueError(f"{call}: expected {nout} output(s), got {len(outs)}")
    for o in outs:
        if not isinstance(o, (ndarray, np.ndarray)):
            raise TypeError(f"{call}: return arrays must be arrays ({type(o).__name__})")
        if o.shape != shape:
            raise ValueError(f"{call}: output shape {o.shape} does not match the broadcast shape {shape}")
    if not all(isinstance(o, ndarray) for o in outs):
        if any(isinstance(o, ndarray) for o in outs):
            raise NotImplementedError(f"{call}: outputs mixing gain and NumPy arrays (gpumpi)")
        npin = [x.allget() if isinstance(x, ndarray) else x for x in inputs]
        func(*npin, out=outs, **kw)
        return outs[0] if nout == 1 else outs
    with np.errstate(all="ignore"):  # NumPy's casting check, raised on every rank before any block
        probe_out = tuple(np.empty((0,), o.dtype) for o in outs)
        func(*[_probe(x) for x in inputs], out=probe_out if nout > 1 else probe_out[0], **kw)
    first = outs[0]
    if any(x is o for o in outs[1:] if not ga.compare_distr(o.handle, first.handle) for x in inputs):
        raise NotImplementedError(f"{call}: an input that is also an output distributed unlike the first "
                                  f"output (gpumpi)")
    sync()
    blocks = [first.access()]
    if blocks[0] is not None:
        lo, hi = first.distribution()
        temps = []
        for o in outs[1:]:
            if ga.compare_distr(o.handle, first.handle):
                blocks.append(o.access())
            else:
                blocks.append(np.empty(blocks[0].shape, o.dtype))
                temps.append((o, len(blocks) - 1))
        same = {}
        for x in inputs:
            if isinstance(x, ndarray) and id(x) not in same:
                for o, b in zip(outs, blocks):
                    if x is o:
                        same[id(x)] = b
                        break
                else:
                    if x.shape == first.shape and ga.compare_distr(x.handle, first.handle):
                        same[id(x)] = x.access()
                        temps.append((x, None))
        pieces = [_piece(x, first, lo, hi, same) for x in inputs]
        func(*pieces, out=tuple(blocks) if nout > 1 else blocks[0], **kw)
        for x, slot in temps:
            if slot is None:
                x.release()
            else:
                ga.put(x.handle, blocks[slot].view(x._storage), lo, hi)
        for o in outs:
            if o is first or ga.compare_distr(o.handle, first.handle):
                o.release_update()
    sync()
    return outs[0] if nout == 1 else outs


# --- reductions ------------------------------------------------------------------------------------
_COMBINE = {np.subtract: np.add, np.true_divide: np.multiply}


def _reorderable(func, dt) -> bool:
    try:
        with np.errstate(all="ignore"):
            func.reduce(np.zeros((1, 1), dt), axis=None)
    except (ValueError, TypeError):
        return False
    return True


def _blocks_along(a: ndarray, axis: int) -> list:
    """The distinct ``lo[axis]`` of the blocks, in order."""
    los = set()
    for p in range(comm().size):
        lo, hi = ga.distribution(a.handle, p)
        if hi[0] >= 0:
            los.add(int(lo[axis]))
    return sorted(los)


def reduce_array(func, a, axis=0, dtype=None, out=None, keepdims=False, call="gain.reduce"):
    """``func.reduce(a, axis, dtype, out, keepdims)`` for a gain ``a`` (NumPy ``ufunc.reduce``). Collective."""
    if func.nin != 2:
        raise ValueError(f"{call}: reduce only supported for binary functions")
    if not isinstance(a, ndarray):
        return func.reduce(a, axis=axis, dtype=dtype, out=out, keepdims=keepdims)
    axes = tuple(range(a.ndim)) if axis is None else tuple(
        operator.index(x) for x in (axis if isinstance(axis, tuple) else (axis,)))
    axes = tuple(sorted({x + a.ndim if x < 0 else x for x in axes}))
    if any(not 0 <= x < a.ndim for x in axes):
        raise np.exceptions.AxisError(f"{call}: axis {axis} is out of bounds for array of dimension {a.ndim}")
    with np.errstate(all="ignore"):
        rdt = func.reduce(np.zeros((1,), a.dtype), dtype=dtype).dtype
    reorder = _reorderable(func, a.dtype)
    later = func if reorder else _COMBINE.get(func)
    if later is None:
        raise NotImplementedError(f"{call}: {func.__name__}.reduce over a distributed axis: only reorderable "
                                  f"ufuncs and subtract/true_divide are supported (gpumpi)")
    if len(axes) == a.ndim:
        if a.ndim > 1 and not reorder:
            return func.reduce(np.zeros((1,) * a.ndim, a.dtype), axis=None)  # NumPy's own error
        result = _reduce_all(func, later, a, rdt)
        if keepdims:
            result = np.full((1,) * a.ndim, result, rdt)
        return _deliver(result, out)
    if len(axes) > 1:
        raise NotImplementedError(f"{call}: reduction over several (not all) axes {axes} (gpumpi)")
    result = _reduce_axis(func, later, a, axes[0], rdt)
    if keepdims:
        shape = list(a.shape)
        shape[axes[0]] = 1
        result = result.reshape(shape)
    return _deliver(result, out)


def _deliver(result, out):
    if out is None:
        return result
    out[...] = result
    if isinstance(result, ndarray):
        result.free()
    return out


def _reduce_all(func, later, a: ndarray, rdt):
    sync()
    loc = a.access()
    part = None
    if loc is not None:
        lo, _ = a.distribution()
        part = (tuple(int(x) for x in lo), loc)
    flat_first = None
    if part is not None:
        lo, block = part
        first = all(x == 0 for x in lo)
        f = func if (first or later is func) else later
        flat_first = (lo, f.reduce(block.reshape(-1), dtype=rdt))
        a.release()
    parts = sorted(p for p in comm().allgather(flat_first) if p is not None)
    sync()
    return func.reduce(np.array([v for _, v in parts], dtype=rdt))


def _reduce_axis(func, later, a: ndarray, axis: int, rdt):
    starts = _blocks_along(a, axis)
    tshape = list(a.shape)
    tshape[axis] = len(starts)
    tmp = ndarray(tshape, rdt) if should_distribute(tshape) else None
    sync()
    loc = a.access()
    mine = None
    if loc is not None:
        lo, hi = a.distribution()
        j = starts.index(int(lo[axis]))
        f = func if j == 0 or later is func else later
        partial = f.reduce(loc, axis=axis, dtype=rdt, keepdims=True)
        a.release()
        plo, phi = [int(x) for x in lo], [int(x) for x in hi]
        plo[axis], phi[axis] = j, j + 1
        if tmp is not None:
            ga.put(tmp.handle, np.ascontiguousarray(partial).view(tmp._storage), plo, phi)
        else:
            mine = (plo, partial)
    out_shape = tuple(n for d, n in enumerate(a.shape) if d != axis)
    if tmp is None:  # not reached with the default threshold; kept correct for any threshold
        planes = np.zeros(tshape, rdt)
        for got in comm().allgather(mine):
            if got is not None:
                planes[tuple(slice(l, l + s) for l, s in zip(got[0], got[1].shape))] = got[1]
        sync()
        return func.reduce(planes, axis=axis)
    sync()
    result = ndarray(out_shape, rdt)
    res = result.access() if isinstance(result, ndarray) else None
    if res is not None:
        lo, hi = result.distribution()
        tlo, thi = [int(x) for x in lo], [int(x) for x in hi]
        tlo.insert(axis, 0)
        thi.insert(axis, len(starts))
        func.reduce(tmp._patch(tlo, thi), axis=axis, out=res)
        result.release_update()
    elif not isinstance(result, ndarray):
        result[...] = func.reduce(tmp.allget(), axis=axis)
    sync()
    tmp.free()
    return result


# --- the ufunc wrapper -------------------------------------------------------------------------------
class ufunc:
    """A NumPy ufunc that also takes gain arrays (gain ``ufunc``; NumPy ``ufunc``).

    ``f(x)``, ``f(x, y)``, ``f(..., out=...)`` with NumPy broadcasting; ``reduce``; the NumPy
    attributes (``nin``, ``nout``, ``identity``...).  ``accumulate``, ``outer``, ``reduceat``
    and ``at`` on gain arrays raise ``NotImplementedError``; with NumPy operands only, every
    call goes straight to NumPy."""

    def __init__(self, func: np.ufunc):
        self.func = func
        self.__name__ = func.__name__
        self.__doc__ = f"gain version of numpy.{func.__name__}.\n\n{func.__doc__ or ''}"

    nin = property(lambda self: self.func.nin)
    nout = property(lambda self: self.func.nout)
    nargs = property(lambda self: self.func.nargs)
    ntypes = property(lambda self: self.func.ntypes)
    types = property(lambda self: self.func.types)
    identity = property(lambda self: self.func.identity)
    signature = property(lambda self: self.func.signature)

    def __repr__(self) -> str:
        return f"<gain ufunc '{self.func.__name__}'>"

    def __call__(self, *args, out=None, **kw):
        nin, nout = self.func.nin, self.func.nout
        if len(args) < nin or len(args) > nin + nout:
            raise TypeError(f"gain.{self.__name__}: takes {nin} input(s) and up to {nout} output(s) "
                            f"({len(args)} given)")
        if len(args) > nin:
            if out is not None:
                raise TypeError(f"gain.{self.__name__}: out given both positionally and by keyword")
            out = args[nin:] if nout > 1 else args[nin]
        return elementwise(self.func, list(args[:nin]), out, f"gain.{self.__name__}", nout, **kw)

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, **kw):
        """Reduce ``a`` along ``axis`` (NumPy ``ufunc.reduce``; see the module docstring). Collective."""
        if kw:
            raise NotImplementedError(f"gain.{self.__name__}.reduce: keywords {sorted(kw)} (gpumpi)")
        if not isinstance(a, (ndarray, np.ndarray)):
            a = asarray(a)
        return reduce_array(self.func, a, axis, dtype, out, keepdims, f"gain.{self.__name__}.reduce")

    def _numpy_only(self, method, args, kw):
        if any(isinstance(x, ndarray) for x in list(args) + list(kw.values())):
            raise NotImplementedError(f"gain.{self.__name__}.{method}: not supported on gain arrays (gpumpi)")
        return getattr(self.func, method)(*args, **kw)

    def accumulate(self, *args, **kw):
        """NumPy ``ufunc.accumulate`` for NumPy operands; gain arrays: ``NotImplementedError``."""
        return self._numpy_only("accumulate", args, kw)

    def outer(self, *args, **kw):
        """NumPy ``ufunc.outer`` for NumPy operands; gain arrays: ``NotImplementedError``."""
        return self._numpy_only("outer", args, kw)

    def reduceat(self, *args, **kw):
        """NumPy ``ufunc.reduceat`` for NumPy operands; gain arrays: ``NotImplementedError``."""
        return self._numpy_only("reduceat", args, kw)

    def at(self, *args, **kw):
        """NumPy ``ufunc.at`` for NumPy operands; gain arrays: ``NotImplementedError``."""
        return self._numpy_only("at", args, kw)


#: the ufuncs GA's gain wraps (core.pyx), by NumPy name
NAMES = (
    "absolute arccos arccosh arcsin arcsinh arctan arctanh bitwise_not ceil conjugate cos cosh degrees "
    "exp exp2 expm1 fabs floor frexp invert isfinite isinf isnan log log10 log1p log2 logical_not modf "
    "negative radians reciprocal rint sign signbit sin sinh spacing sqrt square tan tanh trunc "
    "add arctan2 bitwise_and bitwise_or bitwise_xor copysign divide equal floor_divide fmax fmin fmod "
    "greater greater_equal hypot ldexp left_shift less less_equal logaddexp logaddexp2 logical_and "
    "logical_or logical_xor maximum minimum mod multiply nextafter not_equal power remainder right_shift "
    "subtract true_divide"
).split()
UFUNCS = {name: ufunc(getattr(np, name)) for name in NAMES}
ALIASES = {"abs": "absolute", "conj": "conjugate"}
