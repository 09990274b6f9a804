"""gain's distributed array: :class:`ndarray` over one Global Array, its creation and freeing (GA ``gain/core.pyx``).

Theory of operation
===================
A gain :class:`ndarray` is one Global Array (``ga.create`` over the default processor group at
creation) seen through NumPy's names.  Every rank holds the same Python object state (shape,
dtype, handle); the elements live in the GA, each rank's block reached with
``ga.access``/``release_update`` and any patch with the one-sided ``ga.get``.

* **What distributes** (GA's ``should_distribute``): an array whose element count is at least
  the size threshold (:func:`get_size_threshold`, GA's default 1) and is not 0-d or empty;
  anything smaller is returned as a plain ``numpy.ndarray``, as GA's gain does.
* **Storage types.**  GA has types for int8/int32/int64, float32/float64, complex64/complex128
  and long double.  bool, uint8, uint32 and uint64 are stored in the GA integer type of their
  itemsize and every block or patch is *viewed* as the real dtype (bit-for-bit the same
  bytes); int16, uint16, float16 and other dtypes have no GA type of their size and raise
  ``NotImplementedError``.
* **Collective and one-sided calls.**  Creation, :meth:`ndarray.free`, ``__setitem__``,
  :meth:`ndarray.allget`, the ufuncs and reductions are collective over the default group: every
  rank calls them in the same order with the same arguments (values given as NumPy arrays must
  be equal on every rank).  :meth:`ndarray.get` and ``__getitem__`` are one-sided: a rank reads
  whatever patch it names, with no synchronisation (GA's ``get``).  Collective calls sync on the
  way in and on the way out, so a one-sided read after one sees its result.
* **Indexing returns NumPy** (a gpumpi difference): ``a[key]`` with a basic key (ints, slices
  with any step, ``Ellipsis``, ``None``) returns a NumPy array (or scalar) read one-sided, not
  a gain view as GA's gain does; assigning into it does not change ``a``.  ``a[key] = v`` is
  collective and writes each rank's own block.  Advanced (array or boolean) keys raise
  ``NotImplementedError``.
* **Freeing.**  :meth:`ndarray.free` (or ``with gain.zeros(...) as a:``) destroys the GA
  collectively.  ``__del__`` never runs a collective (garbage collection runs at different
  points on different ranks): it only records the array as dropped on this rank.  Each array
  gets a serial number from a per-group counter at creation (creation is collective, so the
  numbers agree across the group); the next creation in the group allgathers the dropped
  serials and destroys, in serial order, those dropped on *every* rank.  An array still
  referenced on some rank stays until a later creation finds it dropped everywhere.
"""

from __future__ import annotations

import math
import operator
import sys

import numpy as np

from ... import ga
from ..groups import default_comm, group_by_handle, member_comm
from ..state import TYPE_CODES

__all__ = [
    "allget_any", "asarray", "comm", "from_ga", "get_dtype", "get_shape", "get_size_threshold",
    "is_array", "is_distributed", "me", "ndarray", "nproc", "print_sync", "set_size_threshold",
    "should_distribute", "sync", "zeros",
]

# --- processes and the size threshold --------------------------------------------------------------
_SIZE_THRESHOLD = 1  #: GA gain's default (core.pyx SIZE_THRESHOLD = 1): every non-empty array distributes


def me() -> int:
    """This rank in the default group (gain ``me``: ``ga.pgroup_nodeid(ga.pgroup_get_default())``)."""
    return ga.pgroup_nodeid(ga.pgroup_get_default())


def nproc() -> int:
    """Size of the default group (gain ``nproc``)."""
    return ga.pgroup_nnodes(ga.pgroup_get_default())


def comm():
    """The gpumpi communicator of the default group (gain ``comm``, an mpi4py ``Comm`` there)."""
    return default_comm()


def sync() -> None:
    """Barrier and complete every GA operation on the default group (gain ``sync``: ``ga.sync``)."""
    ga.sync()


def get_size_threshold() -> int:
    """The element count from which arrays are distributed (gain ``get_size_threshold``)."""
    return _SIZE_THRESHOLD


def set_size_threshold(threshold: int) -> None:
    """Distribute arrays of at least ``threshold`` elements (gain ``set_size_threshold``).  Must be
    set to the same value on every rank."""
    global _SIZE_THRESHOLD
    t = operator.index(threshold)
    if t < 1:
        raise ValueError(f"gain.set_size_threshold: threshold must be >= 1 ({t})")
    _SIZE_THRESHOLD = t


def should_distribute(shape) -> bool:
    """Whether an array of ``shape`` is a gain array rather than NumPy (gain ``should_distribute``)."""
    dims = _shape_tuple(shape)
    if not dims:
        return False
    n = math.prod(dims)
    return n >= 1 and n >= _SIZE_THRESHOLD


def is_distributed(thing) -> bool:
    """Whether ``thing`` is a gain array (gain ``is_distributed``)."""
    return isinstance(thing, ndarray)


def is_array(thing) -> bool:
    """Whether ``thing`` is a gain or NumPy array (gain ``is_array``)."""
    return isinstance(thing, (ndarray, np.ndarray))


def get_shape(thing) -> tuple:
    """``thing.shape``, or ``np.shape(thing)`` for a scalar or sequence (gain ``get_shape``)."""
    return thing.shape if isinstance(thing, (ndarray, np.ndarray)) else np.shape(thing)


def get_dtype(thing):
    """``thing.dtype``, or the dtype NumPy gives ``thing`` (gain ``get_dtype``)."""
    return thing.dtype if isinstance(thing, (ndarray, np.ndarray)) else np.asarray(thing).dtype


def _shape_tuple(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"gain: shape must be an int or a sequence of ints ({shape!r})") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"gain: negative dimensions are not allowed ({dims})")
    return dims


def storage_dtype(dt: np.dtype) -> np.dtype:
    """The GA type that holds ``dt``'s bytes (itself, or the signed integer of its size)."""
    if dt in TYPE_CODES:
        return dt
    if dt.kind in "biu" and dt.itemsize in (1, 4, 8):
        return np.dtype(f"i{dt.itemsize}")
    raise NotImplementedError(f"gain.ndarray: dtype {dt} has no Global Arrays type of its itemsize "
                              f"({dt.itemsize} bytes); GA stores int8/int32/int64, float32/float64, "
                              f"complex64/complex128 (bool and unsigned are viewed) (gpumpi)")


# --- deferred freeing --------------------------------------------------------------------------------
_serial: dict = {}      # group handle -> next serial
_dropped: dict = {}     # group handle -> {serial: ga handle} dropped on this rank


def _collect(group: int) -> None:
    """Destroy the arrays of ``group`` that every member has dropped (collective over the group)."""
    mine = _dropped.get(group, {})
    everyone = member_comm(group_by_handle(group, "gain"), "gain").allgather(sorted(mine))
    common = set(everyone[0]).intersection(*everyone[1:])
    for serial in sorted(common):
        handle = mine.pop(serial)
        if ga.valid_handle(handle):
            ga.destroy(handle)


# --- the array ----------------------------------------------------------------------------------------
class ndarray:
    """A distributed N-d array of one dtype over a Global Array (gain ``ndarray``; NumPy ``ndarray``).

    ``ndarray(shape, dtype=float)`` creates the array (contents undefined, as ``numpy.empty``)
    and is collective; it returns a NumPy array when :func:`should_distribute` says no.
    ``buffer`` (with ``offset``, ``strides``: read as ``numpy.ndarray(shape, dtype, buffer,
    offset, strides)``, equal on every rank) gives the contents: GA's gain's way to distribute
    a NumPy array (``asarray`` returns NumPy arrays as they are).  Fortran ``order`` is not
    supported (``NotImplementedError``).  ``base=`` adopts an existing GA handle (see :func:`from_ga`).
    """

    __hash__ = None  # comparisons are element-wise, as NumPy's
    __array_priority__ = 20.0

    def __new__(cls, shape, dtype=float, buffer=None, offset=0, strides=None, order=None, base=None):
        if base is None and not should_distribute(shape):
            if buffer is not None or strides is not None:
                return np.ndarray(shape, dtype, buffer, offset, strides, order)
            return np.empty(shape, dtype, order or "C")
        return super().__new__(cls)

    def __init__(self, shape, dtype=float, buffer=None, offset=0, strides=None, order=None, base=None):
        self._handle = None
        if buffer is None and (offset or strides is not None):
            raise TypeError("gain.ndarray: offset and strides need a buffer")
        if order not in (None, "C"):
            raise NotImplementedError(f"gain.ndarray: only C order is supported (order {order!r}) (gpumpi)")
        self._shape = _shape_tuple(shape)
        self._dtype = np.dtype(dtype)
        self._storage = storage_dtype(self._dtype)
        group = ga.pgroup_get_default()
        if base is None:
            _collect(group)
            handle = ga.create(self._storage, self._shape, pgroup=group)
            if not handle:
                raise MemoryError(f"gain.ndarray: GA refused an array of shape {self._shape}, {self._dtype}")
        else:
            handle = operator.index(base)
            group = ga.get_pgroup(handle)
        self._group = group
        self._serial = _serial.get(group, 0)
        _serial[group] = self._serial + 1
        self._handle = handle
        if buffer is not None:
            src = np.ndarray(self._shape, self._dtype, buffer, offset, strides)
            self._scatter_from(src)

    def _scatter_from(self, src: np.ndarray) -> None:
        """Each rank copies its block out of ``src`` (the whole array, equal on every rank)."""
        sync()
        loc = self.access()
        if loc is not None:
            lo, hi = self.distribution()
            loc[...] = src[tuple(slice(int(l), int(h)) for l, h in zip(lo, hi))]
            self.release_update()
        sync()

    # -- lifetime
    @property
    def handle(self) -> int:
        """The GA handle (gain ``ndarray.handle``)."""
        if self._handle is None:
            raise ValueError("gain.ndarray: the array was freed")
        return self._handle

    def free(self) -> None:
        """Destroy the GA now (``ga.destroy``; gpumpi's explicit free). Collective; idempotent."""
        if self._handle is not None:
            ga.destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __del__(self):
        # no collective here (see the module docstring): only remember it for the next creation
        h = getattr(self, "_handle", None)
        if h is not None and not sys.is_finalizing():
            _dropped.setdefault(self._group, {})[self._serial] = h

    # -- GA-level access (gain's additions to ndarray)
    def distribution(self):
        """``(lo, hi)`` of this rank's block, ``-1``s if none (gain ``distribution``; ``ga.distribution``)."""
        return ga.distribution(self.handle)

    def owns(self) -> bool:
        """Whether this rank holds a block (gain ``owns``). Local."""
        lo, hi = self.distribution()
        return bool(np.all(hi >= 0))

    def access(self):
        """This rank's block as a NumPy view, or ``None`` (gain ``access``; ``ga.access``).  Pair it
        with :meth:`release` or :meth:`release_update`.  Local."""
        a = ga.access(self.handle)
        return None if a is None else a.view(self._dtype)

    def release(self) -> None:
        """End a read-only :meth:`access` (gain ``release``)."""
        ga.release(self.handle)

    def release_update(self) -> None:
        """End an :meth:`access` that changed the block (gain ``release_update``)."""
        ga.release_update(self.handle)

    def _patch(self, lo, hi) -> np.ndarray:
        """The patch ``[lo, hi)`` read one-sided, in this array's dtype."""
        return ga.get(self.handle, lo, hi).view(self._dtype)

    def get(self, key=None):
        """``self[key]`` as NumPy, read one-sided (gain ``get``; GA ``get``).  Not collective."""
        from . import _index
        return _index.get(self, Ellipsis if key is None else key)

    def allget(self, key=None):
        """Like :meth:`get`, every rank receiving rank 0's read (gain ``allget``). Collective."""
        sync()
        got = self.get(key) if me() == 0 else None
        return comm().bcast(got, root=0)

    def gather(self, i):
        """The elements at the index rows ``i`` (``(n, ndim)`` or flat) (gain ``gather``; ``ga.gather``). One-sided."""
        idx = np.asarray(i, dtype=np.int64).reshape(-1, self.ndim)
        return ga.gather(self.handle, idx).view(self._dtype)

    # -- properties
    shape = property(lambda self: self._shape, doc="The dimensions (NumPy ``shape``).")
    dtype = property(lambda self: self._dtype, doc="The element type (NumPy ``dtype``).")
    ndim = property(lambda self: len(self._shape), doc="Number of dimensions (NumPy ``ndim``).")
    size = property(lambda self: math.prod(self._shape), doc="Number of elements (NumPy ``size``).")
    itemsize = property(lambda self: self._dtype.itemsize, doc="Bytes per element (NumPy ``itemsize``).")
    nbytes = property(lambda self: self.size * self._dtype.itemsize, doc="Bytes of all elements.")
    base = property(lambda self: None, doc="Always ``None``: gpumpi's gain has no views.")

    @property
    def strides(self) -> tuple:
        """The C-order strides the array would have in one memory (NumPy ``strides``)."""
        s, out = self.itemsize, []
        for d in reversed(self._shape):
            out.append(s)
            s *= d
        return tuple(reversed(out))

    @shape.setter
    def shape(self, value) -> None:
        """Reshape in place (NumPy ``a.shape = ...``): the data move to a new GA. Collective."""
        new = self.reshape(value)
        if new is self:
            return
        old = self._handle
        if isinstance(new, ndarray):
            self._handle, new._handle = new._handle, None
            self._shape, self._serial, self._group = new._shape, new._serial, new._group
            ga.destroy(old)
        else:
            raise NotImplementedError(f"gain.ndarray.shape: new shape {new.shape} is below the size "
                                      f"threshold; use reshape() for a NumPy result (gpumpi)")

    @property
    def T(self):
        """The transpose, a new array (NumPy ``T``; gain returns a view). Collective."""
        return self.transpose()

    # -- copies
    def _blockwise_from(self, src: "ndarray", fn=None) -> None:
        """Fill self's blocks from ``src`` (same shape): local when distributed alike, else a get."""
        if src._handle == self._handle:
            return
        same = ga.compare_distr(self.handle, src.handle)
        sync()
        out = self.access()
        if out is not None:
            lo, hi = self.distribution()
            if same:
                got = src.access()
                out[...] = got if fn is None else fn(got)
                src.release()
            else:
                got = src._patch(lo, hi)
                out[...] = got if fn is None else fn(got)
            self.release_update()
        sync()

    def copy(self, order="C"):
        """A new array with the same contents (NumPy ``copy``). Collective."""
        if order not in ("C", "K", "A"):
            raise NotImplementedError(f"gain.ndarray.copy: order {order!r} (only C) (gpumpi)")
        new = ndarray(self._shape, self._dtype)
        new._blockwise_from(self)
        return new

    __copy__ = copy

    def __deepcopy__(self, memo=None):
        return self.copy()

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        """A copy cast to ``dtype`` (NumPy ``astype``). Collective."""
        dt = np.dtype(dtype)
        if dt == self._dtype and not copy:
            return self
        new = ndarray(self._shape, dt)
        new._blockwise_from(self, lambda x: x.astype(dt, casting=casting))
        return new

    def fill(self, value) -> None:
        """Set every element to ``value`` (NumPy ``fill``). Collective."""
        sync()
        a = self.access()
        if a is not None:
            a.fill(value)
            self.release_update()
        sync()

    # -- indexing
    def __getitem__(self, key):
        """``a[key]`` for a basic key, as NumPy read one-sided (gain returns a view). Not collective."""
        from . import _index
        return _index.get(self, key)

    def __setitem__(self, key, value) -> None:
        """``a[key] = value``, each rank writing its own block (gain ``__setitem__``). Collective."""
        from . import _index
        _index.setitem(self, key, value)

    def __delitem__(self, key):
        raise ValueError("gain.ndarray.__delitem__: cannot delete array elements")

    def item(self, *args):
        """One element as a Python scalar (NumPy ``item``). One-sided."""
        if not args:
            if self.size != 1:
                raise ValueError(f"gain.ndarray.item: can only convert an array of size 1 ({self.size})")
            return self.get().reshape(-1)[0].item()
        if len(args) == 1 and isinstance(args[0], (int, np.integer)):
            i = operator.index(args[0])
            if not -self.size <= i < self.size:
                raise IndexError(f"gain.ndarray.item: index {i} is out of bounds for size {self.size}")
            idx = np.unravel_index(i % self.size, self._shape)
            return self.get(tuple(int(j) for j in idx)).item()
        key = args[0] if len(args) == 1 else args
        return self.get(tuple(key)).item()

    # -- conversion and printing
    def __array__(self, dtype=None, copy=None):
        """The whole array as NumPy on every rank (:meth:`allget`). Collective."""
        a = self.allget()
        return a if dtype is None else a.astype(dtype)

    def tolist(self):
        """The array as nested lists on every rank (NumPy ``tolist``). Collective."""
        return self.allget().tolist()

    def __repr__(self) -> str:
        # one-sided: a rank prints the whole array without the others (gain prints on rank 0 only)
        return repr(self.get()).replace("array(", "gain.ndarray(", 1)

    def __str__(self) -> str:
        return str(self.get())

    def __len__(self) -> int:
        return self._shape[0]

    def __iter__(self):
        """Iterate over the rows of :meth:`allget` (collective once)."""
        return iter(self.allget())

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError("The truth value of an array with more than one element is ambiguous. "
                             "Use a.any() or a.all()")
        return bool(self.allget().reshape(-1)[0])

    def _scalar(self, kind):
        if self.size != 1:
            raise TypeError("only length-1 arrays can be converted to Python scalars")
        return kind(self.allget().reshape(-1)[0])

    def __int__(self):
        return self._scalar(int)

    def __float__(self):
        return self._scalar(float)

    def __complex__(self):
        return self._scalar(complex)


# --- module functions ---------------------------------------------------------------------------
def zeros(shape, dtype=float, order="C"):
    """An array of zeros (gain ``zeros``; NumPy ``zeros``). Collective."""
    if not should_distribute(shape):
        return np.zeros(shape, dtype, order)
    a = ndarray(shape, dtype, order=order)
    a.fill(0)
    return a


def asarray(a, dtype=None, order=None):
    """``a`` as an array: gain and NumPy arrays pass through (cast when ``dtype`` differs), other
    values become a gain array if large enough (gain ``asarray``). Collective when it distributes."""
    if isinstance(a, ndarray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    if isinstance(a, np.ndarray):
        return a if dtype is None else a.astype(dtype, copy=False)
    npa = np.asarray(a, dtype=dtype)
    if not should_distribute(npa.shape):
        return npa
    g = ndarray(npa.shape, npa.dtype)
    g._scatter_from(npa)
    return g


def from_ga(g_a):
    """A gain array over the existing GA ``g_a`` (gain ``from_ga``).  The GA's dtype and shape;
    :meth:`ndarray.free` destroys it."""
    dt, dims = ga.inquire_dtype(g_a), tuple(ga.inquire_dims(g_a))
    return ndarray(dims, dt, base=g_a)


def allget_any(x):
    """``x`` as NumPy: a gain array's :meth:`ndarray.allget` (collective), else ``np.asarray``."""
    return x.allget() if isinstance(x, ndarray) else np.asarray(x)


def print_sync(what) -> None:
    """Print ``what`` from every rank in rank order on rank 0, as ``[rank] what`` (gain ``print_sync``). Collective."""
    sync()
    got = comm().gather(str(what), root=0)
    if me() == 0:
        for r, s in enumerate(got):
            print(f"[{r}] {s}")
    sync()
