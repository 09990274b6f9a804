"""NumPy dtypes and datatypes (L2): ``mpi4py.util.dtlib`` both ways, plus datatypes for strided views.

Theory of operation
===================
:func:`from_numpy_dtype` and :func:`to_numpy_dtype` follow ``mpi4py.util.dtlib``
rule for rule, so a program that converts types with dtlib gets the same layouts:

* a structured dtype is a struct of its fields (blocklength 1 at each field
  offset, recursively converted) resized to ``(0, itemsize)`` -- aligned, padded
  and offset-specified dtypes all reduce to that; a subarray dtype is a
  contiguous type (1-D) or a full C-order subarray; an elementary dtype is the
  ``Dup`` of the predefined type of its character code (``fromcode``); fixed-width
  strings ``S<n>``/``U<n>`` with ``n > 1`` become ``n`` contiguous ``CHAR``/``WCHAR``
  (dtlib maps them to one character, which loses data);
* back, predefined types give their type code, pair types the aligned
  ``"<code>,i"`` record, DUP/CONTIGUOUS/full SUBARRAY their base (with a shape),
  STRUCT (also resized STRUCT) a dtype with names ``f0, f1...``, explicit offsets,
  the type's extent as itemsize and ``aligned`` when every field sits on its
  alignment, VECTOR/HVECTOR and the indexed family a record of subarray fields;
  anything else is a ``ValueError``.

:func:`for_array` builds the datatype that moves a strided view of an array
without a copy: unit dimensions are dropped and dimensions that tile each other
merged, the innermost contiguous run becomes a contiguous type, outer dimensions
``hvector``\\ s with the array's byte strides, and the outermost dimension, when
its stride is positive, becomes the element count (the element resized to that
stride), so ``a[:, 3]`` of a C array of doubles is ``count = rows`` elements of
``DOUBLE`` resized to the row pitch.  Types are built relative to the lowest
address the view touches, which may lie below the view's first element when a
stride is negative; that address is ``data + offset``.
"""

from __future__ import annotations

import numpy as np

from ..constants import (
    COMBINER_CONTIGUOUS,
    COMBINER_DUP,
    COMBINER_F90_COMPLEX,
    COMBINER_F90_INTEGER,
    COMBINER_F90_REAL,
    COMBINER_HINDEXED,
    COMBINER_HINDEXED_BLOCK,
    COMBINER_HVECTOR,
    COMBINER_INDEXED,
    COMBINER_INDEXED_BLOCK,
    COMBINER_NAMED,
    COMBINER_RESIZED,
    COMBINER_STRUCT,
    COMBINER_SUBARRAY,
    COMBINER_VECTOR,
    ORDER_FORTRAN,
)
from ._core import PREDEFINED_COMBINERS, DATATYPE_NULL, Datatype, typealign, typecode
from .predefined import CHAR, WCHAR, lookup_typecode

__all__ = ["from_numpy_dtype", "to_numpy_dtype", "for_array"]


def _elementary(dtype: np.dtype, whole_strings: bool) -> Datatype:
    code = dtype.char
    if whole_strings and code in ("S", "U") and dtype.itemsize > (1 if code == "S" else 4):
        base = CHAR if code == "S" else WCHAR
        return base.Create_contiguous(dtype.itemsize // base._size)
    return Datatype.fromcode(code).Dup()


def _free(*types: Datatype) -> None:
    for t in types:
        if not t.is_predefined:
            t.Free()


def from_numpy_dtype(dtype, *, whole_strings: bool = True) -> Datatype:
    """Convert a NumPy dtype to a datatype (``mpi4py.util.dtlib.from_numpy_dtype``).

    With ``whole_strings`` (gpumpi's own use) ``S<n>``/``U<n>`` become ``n`` characters;
    without, one character as in mpi4py.
    """
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise ValueError("NumPy datatype with object entries")
    if not dtype.isnative:
        raise ValueError("NumPy datatype with non-native byteorder")
    fields = dtype.fields
    if fields:
        blocklengths, displacements, datatypes = [], [], []
        try:
            for name in dtype.names or ():
                ftype, fdisp, *_ = fields[name]
                blocklengths.append(1)
                displacements.append(fdisp)
                datatypes.append(from_numpy_dtype(ftype, whole_strings=whole_strings))
            struct = Datatype.Create_struct(blocklengths, displacements, datatypes)
        finally:
            _free(*datatypes)  # the struct holds its own references
        try:
            return struct.Create_resized(0, dtype.itemsize)
        finally:
            struct.Free()
    subdtype = dtype.subdtype
    if subdtype:
        base, shape = subdtype
        datatype = from_numpy_dtype(base, whole_strings=whole_strings)
        try:
            if len(shape) == 1:
                return datatype.Create_contiguous(shape[0])
            return datatype.Create_subarray(shape, shape, (0,) * len(shape))
        finally:
            _free(datatype)
    return _elementary(dtype, whole_strings)


def _typecode(datatype: Datatype):
    return typecode(datatype)


def _is_aligned(datatype: Datatype, offset: int = 0) -> bool:
    """Whether every basic entry of ``datatype`` placed at ``offset`` sits on its alignment (dtlib)."""
    if datatype.is_predefined:
        if offset == 0:
            return True
        alignment = typealign(datatype) or 0
        return alignment != 0 and offset % alignment == 0
    combiner = datatype.combiner
    basetype, _, info = datatype._decode()
    types, disps = [basetype], [0]
    if combiner == COMBINER_RESIZED:
        disps = [info["extent"]]
    if combiner == COMBINER_STRUCT:
        types = info["datatypes"]
        disps = info["displacements"]
    if combiner == COMBINER_HVECTOR:
        disps = [info["stride"] if info["count"] > 1 else 0]
    if combiner in (COMBINER_HINDEXED, COMBINER_HINDEXED_BLOCK):
        disps = info["displacements"]
    return all(_is_aligned(t, offset + d) for t, d in zip(types, disps))


def to_numpy_dtype(datatype: Datatype, np_dtype=np.dtype):
    """Convert a datatype to a NumPy dtype (``mpi4py.util.dtlib.to_numpy_dtype``).

    ``np_dtype`` builds each dtype from its spec; with None the specs themselves are
    returned (a code string, ``(spec, shape)``, a fields dict, ``(spec, kwargs)``), as
    dtlib does without NumPy.
    """
    if not isinstance(datatype, Datatype):
        raise TypeError(f"to_numpy_dtype: expecting a Datatype (got {type(datatype).__name__})")
    if datatype == DATATYPE_NULL:
        raise ValueError("cannot convert null MPI datatype to NumPy")

    def make(spec, **kwargs):
        if np_dtype is None:
            return spec if not kwargs else (spec, kwargs)
        return np_dtype(spec, **kwargs)

    def convert(dt):
        return to_numpy_dtype(dt, np_dtype)

    def mpi2npy(dt, count):
        d = convert(dt)
        return d if count == 1 else (d, count)

    combiner = datatype.combiner
    if combiner == COMBINER_NAMED:
        code = _typecode(datatype)
        if code is not None:
            return make(code)
        if datatype._pair is not None:
            return make(f"{_typecode(datatype._pair[0])},i", align=True)
        raise ValueError(f"cannot convert MPI datatype to NumPy ({datatype!r})")
    basetype, _, info = datatype._decode()
    if combiner == COMBINER_DUP:
        return convert(basetype)
    if combiner == COMBINER_CONTIGUOUS:
        return make((convert(basetype), (info["count"],)))
    if combiner == COMBINER_SUBARRAY:
        dtype = convert(basetype)
        sizes, subsizes, starts = info["sizes"], info["subsizes"], info["starts"]
        if subsizes == sizes and min(starts) == max(starts) == 0:
            if info["order"] == ORDER_FORTRAN:
                sizes = sizes[::-1]
            return make((dtype, tuple(sizes)))
        raise ValueError("cannot convert subarray MPI datatype to NumPy")
    aligned = True
    if combiner == COMBINER_RESIZED and basetype.combiner == COMBINER_STRUCT:
        aligned = _is_aligned(basetype, info["extent"])
        combiner = COMBINER_STRUCT
        _, _, info = basetype._decode()
    if combiner == COMBINER_STRUCT:
        datatypes = info["datatypes"]
        offsets = info["displacements"]
        aligned &= all(map(_is_aligned, datatypes, offsets))
        return make({
            "names": [f"f{i}" for i in range(len(datatypes))],
            "formats": list(map(mpi2npy, datatypes, info["blocklengths"])),
            "offsets": offsets,
            "itemsize": datatype.extent,
            "aligned": aligned,
        })
    if combiner in (COMBINER_VECTOR, COMBINER_HVECTOR):
        dtype = convert(basetype)
        count, blocklength, stride = info["count"], info["blocklength"], info["stride"]
        if combiner == COMBINER_VECTOR:
            stride *= basetype.extent
            aligned = _is_aligned(basetype)
        else:
            stride = stride if count > 1 else 0
            aligned = _is_aligned(basetype, stride)
        return make({
            "names": [f"f{i}" for i in range(count)],
            "formats": [(dtype, (blocklength,))] * count,
            "offsets": [stride * i for i in range(count)],
            "itemsize": datatype.extent,
            "aligned": aligned,
        })
    indexed = (COMBINER_INDEXED, COMBINER_HINDEXED, COMBINER_INDEXED_BLOCK, COMBINER_HINDEXED_BLOCK)
    if combiner in indexed:
        dtype = convert(basetype)
        aligned = _is_aligned(basetype)
        displacements = info["displacements"]
        if combiner in (COMBINER_INDEXED, COMBINER_HINDEXED):
            blocklengths = info["blocklengths"]
        else:
            blocklengths = [info["blocklength"]] * len(displacements)
        stride = basetype.extent if combiner in (COMBINER_INDEXED, COMBINER_INDEXED_BLOCK) else 1
        if combiner in (COMBINER_HINDEXED, COMBINER_HINDEXED_BLOCK):
            aligned &= all(_is_aligned(basetype, d) for d in displacements)
        return make({
            "names": [f"f{i}" for i in range(len(displacements))],
            "formats": [(dtype, (b,)) for b in blocklengths],
            "offsets": [d * stride for d in displacements],
            "aligned": aligned,
        })
    if combiner in (COMBINER_F90_INTEGER, COMBINER_F90_REAL, COMBINER_F90_COMPLEX):
        return make(_typecode(datatype))
    raise ValueError("cannot convert MPI datatype to NumPy")


def _element_type(dtype: np.dtype) -> Datatype:
    """The datatype of one array element: the predefined type itself when there is one."""
    if not dtype.fields and not dtype.subdtype and dtype.isnative and not dtype.hasobject:
        try:
            dt = lookup_typecode(dtype.str) if dtype.char not in "SUV" else None
        except KeyError:
            dt = None
        if dt is not None and dt._size == dtype.itemsize and dt._combiner in PREDEFINED_COMBINERS:
            return dt
    return from_numpy_dtype(dtype)


def for_array(a) -> tuple[Datatype, int, int]:
    """``(datatype, count, offset)`` that moves the elements of the view ``a`` in C order.

    ``count`` elements of ``datatype`` starting at address ``a``'s first element plus
    ``offset`` (a byte offset, 0 or negative: the lowest address the view touches)
    are exactly the view's elements.  The datatype is committed; contiguous arrays
    give the element type and ``count = a.size``.
    """
    if not isinstance(a, np.ndarray):
        raise TypeError(f"for_array: expecting a numpy.ndarray (got {type(a).__name__})")
    elem = _element_type(a.dtype)
    if a.size == 0 or a.flags.c_contiguous:
        return elem.Commit(), a.size, 0
    item = a.itemsize
    dims = [(n, s) for n, s in zip(a.shape, a.strides) if n != 1]
    merged: list = []
    for n, s in reversed(dims):  # innermost first; fold dims that tile the next inner one
        if merged and s == merged[-1][0] * merged[-1][1]:
            m, ms = merged.pop()
            merged.append((m * n, ms))
        else:
            merged.append((n, s))
    merged.reverse()  # outermost first
    t = elem
    inner = merged[1:]
    start = 0
    for n, s in reversed(inner):
        t = t.Create_contiguous(n) if s == t._extent and t is elem else t.Create_hvector(n, 1, s)
        start += min(0, (n - 1) * s)
    n0, s0 = merged[0]
    if s0 > 0:
        if start:
            t = t.Create_hindexed([1], [-start])
        return t.Create_resized(0, s0).Commit(), n0, start
    t = t.Create_hvector(n0, 1, s0)
    start += (n0 - 1) * s0
    if start:
        t = t.Create_hindexed([1], [-start])
    return t.Commit(), 1, start
