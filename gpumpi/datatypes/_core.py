"""Datatype (L1 pure core): an MPI datatype as an immutable byte layout plus a handle.

Theory of operation
===================
A :class:`Datatype` (mpi4py's ``MPI.Datatype``) is two things:

* a **layout**, fixed at construction and copied into every Python object that
  refers to the type: ``size`` (packed bytes per element), ``lb``/``extent``,
  ``true_lb``/``true_extent``, the combiner with the constructor arguments it was
  built from (``_kw``, what ``Get_contents``/``decode`` report), the component
  types (private snapshots, so freeing a component later leaves this type whole),
  ``is_contiguous`` (the packed bytes of ``count`` elements are exactly the
  ``count * extent`` bytes from ``lb``, so a message is one memcpy), the alignment
  and the identity MPICH's type engine gives the layout (``_yid``, which decides
  struct padding, see ``constructors``);
* a **handle record** shared by every object naming the same MPI handle
  (``Datatype(dt)`` copies the layout and shares the record): the handle integer
  (equality and hashing go by it, as MPI compares handles), the mutable print
  name, the committed and freed flags, the cached attributes (``Set_attr``) and a
  cache of derived data (layout tree, canonical forms, host plans) filled on first
  use by ``flatten`` and ``plan``.

Predefined types (``datatypes.predefined``) are named, committed, never freed,
and carry the handle values of MPICH so ``handle``/``toint``/``py2f`` read as in
mpi4py on MPICH.  Derived types are made by ``datatypes.constructors``, which
computes every bound the way MPICH 5 does.  ``basic``/``nbasic`` name the single
predefined type every element is made of (when there is one) and how many of
them, which is what reductions and NumPy views need.

Operations on memory (``Pack``/``Unpack``, external32, ``Get_address``) need
NumPy and the buffer layer, which live above this layer: ``datatypes.plan`` (L2)
installs them with :func:`install_memory_ops` when it is imported (the MPI facade
imports it); the methods here validate what they can and delegate.

``DATATYPE_NULL`` has ``None`` in every numeric slot: public accessors raise
``MPI.Exception(ERR_TYPE)`` on it, and internal code reads the private slots only
after checking ``_size is not None``.  Nothing here imports NumPy at module
level; :attr:`Datatype.np` imports it when asked.
"""

from __future__ import annotations

import itertools
import operator
import weakref

from ..constants import (
    COMBINER_CONTIGUOUS,
    COMBINER_DARRAY,
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
    COMBINER_VALUE_INDEX,
    COMBINER_VECTOR,
    MAX_OBJECT_NAME,
)
from ..errors import ERR_COMM, ERR_COUNT, ERR_OTHER, ERR_TYPE, error

__all__ = ["Datatype", "DATATYPE_NULL", "install_memory_ops", "typecode", "typealign", "PREDEFINED"]

#: MPICH's MPI_DATATYPE_NULL handle.
NULL_HANDLE = 0x0C000000
_U64 = (1 << 64) - 1
# derived handles: MPICH-looking negative int32 values above the pair types
next_handle = itertools.count(-0x73FFFF00).__next__

#: combiner -> the name ``decode`` reports
COMBINER_NAMES = {
    COMBINER_NAMED: "NAMED",
    COMBINER_DUP: "DUP",
    COMBINER_CONTIGUOUS: "CONTIGUOUS",
    COMBINER_VECTOR: "VECTOR",
    COMBINER_HVECTOR: "HVECTOR",
    COMBINER_INDEXED: "INDEXED",
    COMBINER_HINDEXED: "HINDEXED",
    COMBINER_INDEXED_BLOCK: "INDEXED_BLOCK",
    COMBINER_HINDEXED_BLOCK: "HINDEXED_BLOCK",
    COMBINER_STRUCT: "STRUCT",
    COMBINER_SUBARRAY: "SUBARRAY",
    COMBINER_DARRAY: "DARRAY",
    COMBINER_RESIZED: "RESIZED",
    COMBINER_VALUE_INDEX: "VALUE_INDEX",
    COMBINER_F90_INTEGER: "F90_INTEGER",
    COMBINER_F90_REAL: "F90_REAL",
    COMBINER_F90_COMPLEX: "F90_COMPLEX",
}
PREDEFINED_COMBINERS = frozenset(
    (COMBINER_NAMED, COMBINER_VALUE_INDEX, COMBINER_F90_INTEGER, COMBINER_F90_REAL, COMBINER_F90_COMPLEX)
)
F90_TYPES = (COMBINER_F90_INTEGER, COMBINER_F90_REAL, COMBINER_F90_COMPLEX)

# handle -> Datatype, for fromhandle/fromint/f2py: predefined strongly, derived weakly
PREDEFINED: dict[int, "Datatype"] = {}
#: handle -> the predefined Datatype (module constant) of that handle (read-only outside this module)
_DERIVED: "weakref.WeakValueDictionary[int, Datatype]" = weakref.WeakValueDictionary()

# memory operations installed by datatypes.plan (L2): name -> callable
_MEMORY_OPS: dict = {}


def install_memory_ops(**ops) -> None:
    """Register the host memory operations (``pack``, ``unpack``, ``pack_external``,
    ``unpack_external``, ``address``) that ``datatypes.plan`` implements."""
    _MEMORY_OPS.update(ops)


def memory_op(name: str, call: str):
    op = _MEMORY_OPS.get(name)
    if op is None:
        raise error(ERR_OTHER, f"{call}: host memory support is not loaded "
                               f"(gpumpi.datatypes.plan has not been imported)")
    return op


class _Record:
    """What MPI keeps per handle: handle, print name, commit/free state, references, attributes, caches."""

    __slots__ = ("handle", "name", "committed", "freed", "refs", "parts", "attrs", "cache")

    def __init__(self, handle: int, name: str, committed: bool) -> None:
        self.handle = handle
        self.name = name
        self.committed = committed
        self.freed = False
        self.refs = 1  # MPI references: the creator's, Get_contents/decode results, containing types
        self.parts: tuple = ()  # derived components this type holds a reference to (released when freed)
        self.attrs: dict = {}  # keyval -> (keyval state, value)
        self.cache: dict = {}  # flatten/plan data derived from the (immutable) layout


def _components(base, kw) -> list:
    """The component datatypes a derived type is built from (its Get_contents datatypes)."""
    if base is not None:
        return [base]
    if kw:
        return list(kw.get("datatypes", ()))
    return []


def _retain(dt: "Datatype") -> "Datatype":
    """One more MPI reference to ``dt``'s handle, as a new object (what MPI_Type_get_contents returns)."""
    if dt._combiner not in PREDEFINED_COMBINERS and dt._size is not None:
        dt._rec.refs += 1
    return Datatype(dt)


def _release(dt: "Datatype") -> None:
    """Drop one MPI reference to ``dt``'s handle; the last one deletes its attributes (their
    delete callbacks' errors are reported on stderr only, as mpi4py's) and releases its components."""
    rec = dt._rec
    rec.refs -= 1
    if rec.refs > 0:
        return
    if rec.attrs:
        from .attributes import DATATYPE

        DATATYPE.delete_all(dt)
    rec.freed = True
    parts, rec.parts = rec.parts, ()
    for part in parts:
        _release(part)


def _index(value, what: str, call: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{call}: {what} must be an integer (got {type(value).__name__})") from None


class Datatype:
    """Datatype object (MPI_Datatype)."""

    __slots__ = (
        "_handle",  # int: identity (MPI handle value, signed int32 like MPICH)
        "_rec",  # _Record shared by all objects with this handle
        "_size",  # packed bytes per element; None for DATATYPE_NULL
        "_lb",
        "_extent",
        "_true_lb",
        "_true_extent",
        "_contig",  # bool: packed bytes == extent bytes from lb
        "_segs",  # named types: tuple[(offset, length)] of one element; derived: None (see flatten)
        "_combiner",
        "_base",  # the old type (snapshot) of single-input constructors; matched type of f90 types
        "_count",  # CONTIGUOUS count
        "_kw",  # constructor arguments, as decode() reports them (None for named types)
        "_nelem",  # base elements per element (single-input constructors)
        "_char",  # typechar, or None (derived: 'V')
        "_str",  # typestr, or None (derived: 'V<extent>')
        "_code",  # tocode() result, or None (ValueError)
        "_align",  # alignment in bytes (0: unknown)
        "_yid",  # identity of the layout in MPICH's type engine (struct padding rule)
        "_pair",  # pair types: (value type, index type); else None
        "_basic",  # the predefined type every element is made of, or None
        "_nbasic",  # number of _basic entries per element
        "_npspec",  # predefined: numpy dtype spec (str, or field list for pair types)
        "_npd",  # cached numpy dtype
        "__weakref__",
    )

    def __init__(self, datatype: "Datatype | None" = None) -> None:
        src = _NULL if datatype is None else datatype
        if not isinstance(src, Datatype):
            raise TypeError(f"Datatype: expecting a Datatype (got {type(datatype).__name__})")
        for slot, value in zip(_COPY_SLOTS, _layout_of(src)):
            setattr(self, slot, value)

    # -- construction helpers (internal) -------------------------------------------------

    @classmethod
    def _make(cls, *, handle, name, size, lb, extent, true_lb, true_extent, segs, combiner,
              base=None, count=None, kw=None, nelem=0, char=None, typestr=None, code=None, align=0,
              yid=None, pair=None, basic=None, nbasic=0, npspec=None, committed=False,
              contig=None) -> "Datatype":
        self = object.__new__(cls)
        self._handle = handle
        self._rec = _Record(handle, name, committed)
        self._size = size
        self._lb = lb
        self._extent = extent
        self._true_lb = true_lb
        self._true_extent = true_extent
        self._segs = segs
        if contig is None and size is not None:
            contig = _is_contig(segs, size, lb, extent)
        self._contig = contig
        self._combiner = combiner
        self._base = base
        self._count = count
        self._kw = kw
        self._nelem = nelem
        self._char = char
        self._str = typestr
        self._code = code
        self._align = align
        self._yid = yid
        self._pair = pair
        self._basic = self if (basic is None and combiner == COMBINER_NAMED and size) else basic
        self._nbasic = nbasic
        self._npspec = npspec
        self._npd = None
        if combiner == COMBINER_NAMED or size is None:
            PREDEFINED[handle] = self
        else:
            _DERIVED[handle] = self
            if combiner not in PREDEFINED_COMBINERS:
                parts = tuple(t for t in _components(base, kw)
                              if t._combiner not in PREDEFINED_COMBINERS and t._size is not None)
                for t in parts:
                    t._rec.refs += 1
                self._rec.parts = parts
        return self

    def _nullify(self) -> None:
        """Make this object DATATYPE_NULL (what Free leaves in the caller's variable)."""
        for slot, value in zip(_COPY_SLOTS, _NULL_LAYOUT):
            setattr(self, slot, value)

    def _check(self, call: str) -> None:
        """Raise ERR_TYPE when this is DATATYPE_NULL or a freed handle."""
        if self._size is None:
            raise error(ERR_TYPE, f"Datatype.{call}: invalid datatype (MPI_DATATYPE_NULL)")
        if self._rec.freed:
            raise error(ERR_TYPE, f"Datatype.{call}: datatype has been freed ({self._handle:#x})")

    def _check_committed(self, call: str) -> None:
        self._check(call)
        if not self._rec.committed:
            raise error(ERR_TYPE, f"Datatype.{call}: datatype has not been committed "
                                  f"({self._rec.name or repr(self)})")

    # -- comparison and identity ---------------------------------------------------------

    def __eq__(self, other) -> bool:
        if not isinstance(other, Datatype):
            return NotImplemented
        return self._handle == other._handle

    def __ne__(self, other) -> bool:
        if not isinstance(other, Datatype):
            return NotImplemented
        return self._handle != other._handle

    # unhashable, as every MPI object in mpi4py (equality goes by handle, which Free changes)
    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return self._handle != NULL_HANDLE

    def __repr__(self) -> str:
        if self._size is None:
            return "<Datatype MPI_DATATYPE_NULL>"
        name = self._rec.name
        if self._combiner == COMBINER_NAMED:
            return f"<Datatype {name}>"
        what = COMBINER_NAMES.get(self._combiner, str(self._combiner)).lower()
        return (f"<Datatype {name + ' ' if name else ''}{what} size={self._size} "
                f"lb={self._lb} extent={self._extent}>")

    def __reduce__(self):
        if self._combiner == COMBINER_NAMED or self._size is None:
            const = PREDEFINED.get(self._handle)
            if const is self or const is None:
                return (Datatype.fromhandle, (self._handle,))
            return (type(self), (const,))
        base, name, kw = self._decode()
        return (_rebuild, (base, name, kw, self._rec.committed))

    @property
    def handle(self) -> int:
        """MPI handle."""
        return self._handle & _U64

    @classmethod
    def fromhandle(cls, handle: int) -> "Datatype":
        """Create object from MPI handle."""
        h = operator.index(handle)
        if h > 0x7FFFFFFF:
            h -= 1 << 64 if h > 0xFFFFFFFF else 1 << 32
        dt = PREDEFINED.get(h)
        if dt is not None:
            return dt
        dt = _DERIVED.get(h)
        if dt is None:
            raise error(ERR_TYPE, f"Datatype.fromhandle: unknown datatype handle ({handle:#x})")
        return dt if dt._combiner in F90_TYPES else Datatype(dt)

    def toint(self) -> int:
        """Translate object to integer handle (MPI_Type_toint)."""
        return self._handle

    @classmethod
    def fromint(cls, arg: int, /) -> "Datatype":
        """Translate integer handle to object (MPI_Type_fromint)."""
        return cls.fromhandle(arg)

    def py2f(self) -> int:
        """Fortran handle (MPI_Type_c2f)."""
        return self._handle

    @classmethod
    def f2py(cls, arg: int) -> "Datatype":
        """Object from Fortran handle (MPI_Type_f2c)."""
        return cls.fromhandle(arg)

    # -- accessors -----------------------------------------------------------------------

    def Get_size(self) -> int:
        """Return the number of bytes occupied by entries in the datatype (MPI_Type_size)."""
        self._check("Get_size")
        return self._size

    def Get_extent(self) -> tuple[int, int]:
        """Return lower bound and extent of datatype (MPI_Type_get_extent)."""
        self._check("Get_extent")
        return (self._lb, self._extent)

    def Get_true_extent(self) -> tuple[int, int]:
        """Return the true lower bound and extent of a datatype (MPI_Type_get_true_extent)."""
        self._check("Get_true_extent")
        return (self._true_lb, self._true_extent)

    @property
    def size(self) -> int:
        """Size in bytes (MPI_Type_size)."""
        self._check("size")
        return self._size

    @property
    def extent(self) -> int:
        """Extent (MPI_Type_get_extent)."""
        self._check("extent")
        return self._extent

    @property
    def lb(self) -> int:
        """Lower bound (MPI_Type_get_extent)."""
        self._check("lb")
        return self._lb

    @property
    def ub(self) -> int:
        """Upper bound (MPI_Type_get_extent)."""
        self._check("ub")
        return self._lb + self._extent

    @property
    def true_extent(self) -> int:
        """True extent (MPI_Type_get_true_extent)."""
        self._check("true_extent")
        return self._true_extent

    @property
    def true_lb(self) -> int:
        """True lower bound (MPI_Type_get_true_extent)."""
        self._check("true_lb")
        return self._true_lb

    @property
    def true_ub(self) -> int:
        """True upper bound (MPI_Type_get_true_extent)."""
        self._check("true_ub")
        return self._true_lb + self._true_extent

    @property
    def is_contiguous(self) -> bool:
        """True when ``count`` elements pack to exactly their ``count * extent`` bytes (gpumpi)."""
        self._check("is_contiguous")
        return self._contig

    @property
    def segments(self) -> tuple:
        """Byte runs ``(offset, length)`` of one element, in typemap order, merged (gpumpi)."""
        self._check("segments")
        return self._segments()

    def _segments(self) -> tuple:
        if self._segs is not None:
            return self._segs
        from . import flatten

        return flatten.segments(self)

    @property
    def basic(self) -> "Datatype | None":
        """The predefined type every entry is made of, or None when mixed (gpumpi)."""
        self._check("basic")
        return self._basic

    @property
    def nbasic(self) -> int:
        """Number of :attr:`basic` entries per element (gpumpi)."""
        self._check("nbasic")
        return self._nbasic

    @property
    def committed(self) -> bool:
        """Whether the handle has been committed (gpumpi)."""
        return self._size is not None and self._rec.committed

    def _elements_in(self, nbytes: int) -> int:
        """Basic elements in ``nbytes`` received bytes (MPI_Get_elements; used by Status)."""
        from . import flatten

        return flatten.elements_in(self, nbytes)

    def _elements_bytes(self, count: int) -> int:
        """Packed bytes of the first ``count`` basic elements (MPI_Status_set_elements; used by Status)."""
        from . import flatten

        return flatten.elements_bytes(self, count)

    # -- constructors --------------------------------------------------------------------

    def Dup(self) -> "Datatype":
        """Duplicate a datatype (MPI_Type_dup); attributes are copied by their copy callbacks."""
        from . import constructors

        return constructors.dup(self)

    Create_dup = Dup

    def Create_contiguous(self, count: int) -> "Datatype":
        """Create a contiguous datatype (MPI_Type_contiguous)."""
        from . import constructors

        return constructors.contiguous(self, count)

    def Create_vector(self, count: int, blocklength: int, stride: int) -> "Datatype":
        """Create a vector (strided) datatype (MPI_Type_vector); stride in extents of this type."""
        from . import constructors

        return constructors.vector(self, count, blocklength, stride, False)

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> "Datatype":
        """Create a vector (strided) datatype with stride in bytes (MPI_Type_create_hvector)."""
        from . import constructors

        return constructors.vector(self, count, blocklength, stride, True)

    def Create_indexed(self, blocklengths, displacements) -> "Datatype":
        """Create an indexed datatype (MPI_Type_indexed); displacements in extents of this type."""
        from . import constructors

        return constructors.indexed(self, blocklengths, displacements, False)

    def Create_hindexed(self, blocklengths, displacements) -> "Datatype":
        """Create an indexed datatype with displacements in bytes (MPI_Type_create_hindexed)."""
        from . import constructors

        return constructors.indexed(self, blocklengths, displacements, True)

    def Create_indexed_block(self, blocklength: int, displacements) -> "Datatype":
        """Create an indexed datatype with constant-sized blocks (MPI_Type_create_indexed_block)."""
        from . import constructors

        return constructors.indexed_block(self, blocklength, displacements, False)

    def Create_hindexed_block(self, blocklength: int, displacements) -> "Datatype":
        """Create an indexed datatype with constant-sized blocks, displacements in bytes
        (MPI_Type_create_hindexed_block)."""
        from . import constructors

        return constructors.indexed_block(self, blocklength, displacements, True)

    @classmethod
    def Create_struct(cls, blocklengths, displacements, datatypes) -> "Datatype":
        """Create a general composite (struct) datatype (MPI_Type_create_struct); bytes displacements."""
        from . import constructors

        return constructors.struct(blocklengths, displacements, datatypes)

    def Create_subarray(self, sizes, subsizes, starts, order: int = 56) -> "Datatype":
        """Create a datatype for a subarray of a multidimensional array (MPI_Type_create_subarray)."""
        from . import constructors

        return constructors.subarray(self, sizes, subsizes, starts, order)

    def Create_darray(self, size: int, rank: int, gsizes, distribs, dargs, psizes,
                      order: int = 56) -> "Datatype":
        """Create a datatype for a distributed array on Cartesian process grids (MPI_Type_create_darray)."""
        from . import constructors

        return constructors.darray(self, size, rank, gsizes, distribs, dargs, psizes, order)

    def Create_resized(self, lb: int, extent: int) -> "Datatype":
        """Create a datatype with a new lower bound and extent (MPI_Type_create_resized)."""
        from . import constructors

        return constructors.resized(self, lb, extent)

    Resized = Create_resized

    @classmethod
    def Get_value_index(cls, value: "Datatype", index: "Datatype") -> "Datatype":
        """Return a predefined pair datatype (MPI_Type_get_value_index)."""
        if not isinstance(value, Datatype) or not isinstance(index, Datatype):
            raise TypeError("Datatype.Get_value_index: expecting Datatype arguments")
        value._check("Get_value_index")
        index._check("Get_value_index")
        pair = VALUE_INDEX.get((value._handle, index._handle))
        return Datatype(pair if pair is not None else _NULL)

    @classmethod
    def Create_f90_integer(cls, r: int) -> "Datatype":
        """Return a bounded integer datatype (MPI_Type_create_f90_integer)."""
        from . import constructors

        return constructors.f90_integer(r)

    @classmethod
    def Create_f90_real(cls, p: int, r: int) -> "Datatype":
        """Return a bounded real datatype (MPI_Type_create_f90_real)."""
        from . import constructors

        return constructors.f90_real(p, r)

    @classmethod
    def Create_f90_complex(cls, p: int, r: int) -> "Datatype":
        """Return a bounded complex datatype (MPI_Type_create_f90_complex)."""
        from . import constructors

        return constructors.f90_complex(p, r)

    @classmethod
    def Match_size(cls, typeclass: int, size: int) -> "Datatype":
        """Find a datatype matching a specified size in bytes (MPI_Type_match_size)."""
        from . import constructors

        return constructors.match_size(typeclass, size)

    def Commit(self) -> "Datatype":
        """Commit the datatype (MPI_Type_commit)."""
        self._check("Commit")
        self._rec.committed = True
        return self

    def Free(self) -> None:
        """Free the datatype (MPI_Type_free).

        This object becomes DATATYPE_NULL.  The handle lives on while other references
        hold it (``Get_contents``/``decode`` results, types built from it), as in MPICH;
        the last release runs the attribute delete callbacks and frees the handle."""
        self._check("Free")
        if self._combiner in PREDEFINED_COMBINERS:
            raise error(ERR_TYPE, f"Datatype.Free: cannot free a predefined datatype "
                                  f"({self._rec.name or repr(self)})")
        _release(self)
        self._nullify()

    def free(self) -> None:
        """Call `Free` if not null or predefined (mpi4py's safe free).

        The module constants stay; another reference to a predefined type becomes
        DATATYPE_NULL."""
        if self._size is None or self._rec.freed:
            return
        if self._combiner in PREDEFINED_COMBINERS:
            if PREDEFINED.get(self._handle) is not self:
                self._nullify()
            return
        self.Free()

    # -- decoding ------------------------------------------------------------------------

    def _contents(self) -> tuple[list, list, list, list]:
        c, kw = self._combiner, self._kw
        if c == COMBINER_DUP:
            return [], [], [], [self._base]
        if c == COMBINER_CONTIGUOUS:
            return [], [], [kw["count"]], [self._base]
        if c in (COMBINER_VECTOR, COMBINER_HVECTOR):
            return [], [], [kw["count"], kw["blocklength"], kw["stride"]], [self._base]
        if c in (COMBINER_INDEXED, COMBINER_HINDEXED):
            bl = kw["blocklengths"]
            return [], [], [len(bl), *bl, *kw["displacements"]], [self._base]
        if c in (COMBINER_INDEXED_BLOCK, COMBINER_HINDEXED_BLOCK):
            d = kw["displacements"]
            return [], [], [len(d), kw["blocklength"], *d], [self._base]
        if c == COMBINER_STRUCT:
            bl = kw["blocklengths"]
            return [], [], [len(bl), *bl, *kw["displacements"]], list(kw["datatypes"])
        if c == COMBINER_SUBARRAY:
            return ([len(kw["sizes"]), kw["order"]], [], [*kw["sizes"], *kw["subsizes"], *kw["starts"]],
                    [self._base])
        if c == COMBINER_DARRAY:
            g = kw["gsizes"]
            return ([kw["size"], kw["rank"], len(g), *kw["distribs"], *kw["dargs"], *kw["psizes"], kw["order"]],
                    [], list(g), [self._base])
        if c == COMBINER_RESIZED:
            return [], [], [kw["lb"], kw["extent"]], [self._base]
        if c == COMBINER_F90_INTEGER:
            return [kw["r"]], [], [], []
        if c in (COMBINER_F90_REAL, COMBINER_F90_COMPLEX):
            return [kw["p"], kw["r"]], [], [], []
        return [], [], [], []

    def Get_envelope(self) -> tuple[int, int, int, int, int]:
        """Return the number of input arguments used to create a datatype (MPI_Type_get_envelope)."""
        self._check("Get_envelope")
        i, a, c, d = self._contents()
        return (len(i), len(a), len(c), len(d), self._combiner)

    @property
    def envelope(self) -> tuple[int, int, int, int, int]:
        """Envelope (MPI_Type_get_envelope)."""
        return self.Get_envelope()

    def Get_contents(self) -> tuple[list[int], list[int], list[int], list["Datatype"]]:
        """Return the input arguments used to create a datatype (MPI_Type_get_contents)."""
        self._check("Get_contents")
        if self._combiner == COMBINER_NAMED:
            raise error(ERR_TYPE, f"Datatype.Get_contents: named predefined datatypes have no contents "
                                  f"({self._rec.name})")
        i, a, c, d = self._contents()
        return i, a, c, [_retain(t) for t in d]

    @property
    def contents(self) -> tuple[list[int], list[int], list[int], list["Datatype"]]:
        """Contents (MPI_Type_get_contents)."""
        return self.Get_contents()

    def decode(self) -> tuple["Datatype", str, dict]:
        """Convenience method for decoding a datatype (mpi4py ``Datatype.decode``).

        Returns ``(base, combiner name, arguments)``; ``base`` is the type itself for
        named types, ``DATATYPE_NULL`` for f90 types and for structs of several types (a
        struct of one type gives that type), as in mpi4py.  The datatypes returned are
        new references (MPI_Type_get_contents): free the derived ones when done.
        """
        self._check("decode")
        base, name, kw = self._decode()
        if name == "NAMED":
            return (self, name, {})
        if name == "STRUCT":
            types = kw["datatypes"] = [_retain(t) for t in kw["datatypes"]]
            return (types[0] if len(types) == 1 else _NULL, name, kw)
        return (base if base is _NULL else _retain(base), name, kw)

    def _decode(self) -> tuple["Datatype", str, dict]:
        """Decode without new references (``decode``): the components are this type's own snapshots."""
        c = self._combiner
        name = COMBINER_NAMES[c]
        if c == COMBINER_NAMED:
            return (self, name, {})
        kw = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in self._kw.items()}
        if c == COMBINER_STRUCT:
            types = kw["datatypes"]
            return (types[0] if len(types) == 1 else _NULL, name, kw)
        if c in F90_TYPES:
            return (_NULL, name, kw)
        return (self._base, name, kw)

    @property
    def combiner(self) -> int:
        """Combiner (MPI_Type_get_envelope)."""
        self._check("combiner")
        return self._combiner

    @property
    def is_named(self) -> bool:
        """Is a named datatype."""
        self._check("is_named")
        return self._combiner == COMBINER_NAMED

    @property
    def is_predefined(self) -> bool:
        """Is a predefined datatype (DATATYPE_NULL counts, as in mpi4py)."""
        if self._size is None:
            return True
        self._check("is_predefined")
        return self._combiner in PREDEFINED_COMBINERS

    def Is_named(self) -> bool:
        """Is a named datatype (method form of :attr:`is_named`)."""
        return self.is_named

    def Is_predefined(self) -> bool:
        """Is a predefined datatype (method form of :attr:`is_predefined`)."""
        return self.is_predefined

    # -- attributes ----------------------------------------------------------------------

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython: bool = False) -> int:
        """Create a new attribute key for datatypes (MPI_Type_create_keyval).

        ``copy_fn(datatype, keyval, value)`` runs on ``Dup`` and returns the copy's value
        (``NotImplemented``: do not copy; ``True`` instead of a function copies the value
        as is; ``None``: never copied); ``delete_fn(datatype, keyval, value)`` runs when
        the value is replaced, deleted, or its datatype freed.  With ``nopython`` values
        are plain integers, as C attributes.
        """
        from .attributes import DATATYPE

        return DATATYPE.create_keyval(copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free an attribute key for datatypes (MPI_Type_free_keyval); returns KEYVAL_INVALID."""
        from .attributes import DATATYPE

        return DATATYPE.free_keyval(keyval)

    def Set_attr(self, keyval: int, attrval) -> None:
        """Store attribute value associated with a key (MPI_Type_set_attr)."""
        self._check("Set_attr")
        from .attributes import DATATYPE

        DATATYPE.set_attr(self, keyval, attrval)

    def Get_attr(self, keyval: int):
        """Retrieve attribute value by key (MPI_Type_get_attr); None when not set."""
        self._check("Get_attr")
        from .attributes import DATATYPE

        return DATATYPE.get_attr(self, keyval)

    def Delete_attr(self, keyval: int) -> None:
        """Delete attribute value associated with a key (MPI_Type_delete_attr); raises the
        delete callback's error (the value is gone regardless)."""
        self._check("Delete_attr")
        from .attributes import DATATYPE

        DATATYPE.delete_attr(self, keyval)

    # -- packing ----------------------------------------------------------------------------

    def Pack(self, inbuf, outbuf, position: int, comm) -> int:
        """Pack into contiguous memory according to datatype (MPI_Pack).

        Packs ``len(inbuf) // extent`` elements from the start of ``inbuf`` into
        ``outbuf`` at byte ``position``; returns the new position.
        """
        position = _index(position, "position", "Datatype.Pack")
        _check_comm(comm, "Datatype.Pack")
        self._check_committed("Pack")
        return memory_op("pack", "Datatype.Pack")(self, inbuf, outbuf, position)

    def Unpack(self, inbuf, position: int, outbuf, comm) -> int:
        """Unpack from contiguous memory according to datatype (MPI_Unpack).

        Unpacks ``len(outbuf) // extent`` elements from ``inbuf`` at byte ``position``;
        returns the new position.
        """
        position = _index(position, "position", "Datatype.Unpack")
        _check_comm(comm, "Datatype.Unpack")
        self._check_committed("Unpack")
        return memory_op("unpack", "Datatype.Unpack")(self, inbuf, position, outbuf)

    def Pack_size(self, count: int, comm) -> int:
        """Determine the amount of space needed to pack a message (MPI_Pack_size)."""
        count = _index(count, "count", "Datatype.Pack_size")
        _check_comm(comm, "Datatype.Pack_size")
        self._check_committed("Pack_size")
        if count < 0:
            raise error(ERR_COUNT, f"Datatype.Pack_size: negative count ({count})")
        return count * self._size

    def Pack_external(self, datarep: str, inbuf, outbuf, position: int) -> int:
        """Pack into contiguous memory in the portable ``"external32"`` representation
        (MPI_Pack_external): big-endian, fixed sizes per basic type."""
        position = _index(position, "position", "Datatype.Pack_external")
        _check_datarep(datarep, "Datatype.Pack_external")
        self._check_committed("Pack_external")
        return memory_op("pack_external", "Datatype.Pack_external")(self, inbuf, outbuf, position)

    def Unpack_external(self, datarep: str, inbuf, position: int, outbuf) -> int:
        """Unpack from contiguous memory in the ``"external32"`` representation (MPI_Unpack_external)."""
        position = _index(position, "position", "Datatype.Unpack_external")
        _check_datarep(datarep, "Datatype.Unpack_external")
        self._check_committed("Unpack_external")
        return memory_op("unpack_external", "Datatype.Unpack_external")(self, inbuf, position, outbuf)

    def Pack_external_size(self, datarep: str, count: int) -> int:
        """Space needed to pack ``count`` elements in ``"external32"`` (MPI_Pack_external_size)."""
        count = _index(count, "count", "Datatype.Pack_external_size")
        _check_datarep(datarep, "Datatype.Pack_external_size")
        self._check("Pack_external_size")
        if count < 0:
            raise error(ERR_COUNT, f"Datatype.Pack_external_size: negative count ({count})")
        from .predefined import EXTERNAL32_SIZE
        from . import flatten

        c = self._rec.cache
        per = c.get("ext32")
        if per is None:
            per = c["ext32"] = sum(EXTERNAL32_SIZE[b._handle] * n for b, n in flatten.signature(self))
        return count * per

    # -- names ---------------------------------------------------------------------------

    def Get_name(self) -> str:
        """Get the print name for this datatype (MPI_Type_get_name)."""
        return self._rec.name

    def Set_name(self, name: str) -> None:
        """Set the print name for this datatype (MPI_Type_set_name)."""
        self._check("Set_name")
        if not isinstance(name, str):
            raise TypeError(f"Datatype.Set_name: expecting a str (got {type(name).__name__})")
        self._rec.name = name[: MAX_OBJECT_NAME - 1]

    name = property(Get_name, Set_name, doc="Print name (MPI_Type_get_name / MPI_Type_set_name).")

    # -- Python/NumPy interoperability ---------------------------------------------------

    def tocode(self) -> str:
        """Get character code or type string from predefined MPI datatype.

        ``ValueError`` when there is none (DATATYPE_NULL and derived types, as in mpi4py)."""
        if self._size is not None:
            self._check("tocode")
        code = self._code
        if code is None:
            raise ValueError("cannot map to character code or type string")
        return code

    @classmethod
    def fromcode(cls, code: str) -> "Datatype":
        """Get predefined MPI datatype from character code or type string."""
        from .predefined import lookup_typecode

        try:
            return lookup_typecode(code)
        except KeyError:
            raise ValueError(f"cannot map code {code!r} to MPI datatype") from None

    @property
    def typestr(self) -> str:
        """Type string (NumPy array-interface style)."""
        if self._size is None:
            return ""
        s = self._str
        return s if s is not None else f"V{max(self._extent, 0)}"

    @property
    def typechar(self) -> str:
        """Character code."""
        if self._size is None:
            return ""
        c = self._char
        return c if c is not None else "V"

    @property
    def np(self):
        """The NumPy dtype of one element (gpumpi): predefined, DUP and CONTIGUOUS types.

        Other derived types: ``gpumpi.datatypes.numpy_dtype.to_numpy_dtype``.
        """
        self._check("np")
        npd = self._npd
        if npd is None:
            import numpy

            if self._combiner == COMBINER_DUP:
                npd = self._base.np
            elif self._combiner == COMBINER_CONTIGUOUS:
                npd = numpy.dtype((self._base.np, (self._count,)))
            elif isinstance(self._npspec, str):
                npd = numpy.dtype(self._npspec)
            elif self._npspec is not None:
                npd = numpy.dtype(list(self._npspec), align=True)
            else:
                raise ValueError(f"Datatype.np: no NumPy dtype for a {COMBINER_NAMES[self._combiner]} "
                                 f"datatype ({self!r}); use gpumpi.datatypes.numpy_dtype.to_numpy_dtype")
            self._npd = npd
        return npd


def typecode(datatype: Datatype) -> "str | None":
    """Map MPI datatype to character code or type string (mpi4py's ``MPI._typecode``).

    The ``tocode()`` of a predefined or f90 type and of a ``Dup`` of one; None for
    every other type, DATATYPE_NULL and freed handles (mpi4py never raises here).
    """
    if not isinstance(datatype, Datatype):
        raise TypeError(f"_typecode: expecting a Datatype (got {type(datatype).__name__})")
    if datatype._size is None or datatype._rec.freed:
        return None
    return datatype._code


def typealign(datatype: Datatype) -> "int | None":
    """Return MPI datatype alignment (mpi4py's ``MPI._typealign``).

    The C alignment of a predefined type with a character code, of a pair or f90
    type, or of the type with a character code a chain of ``Dup`` leads to (mpi4py
    finds it through that code); None for every other type, DATATYPE_NULL and freed
    handles.
    """
    if not isinstance(datatype, Datatype):
        raise TypeError(f"_typealign: expecting a Datatype (got {type(datatype).__name__})")
    dup = False
    while datatype._combiner == COMBINER_DUP and datatype._size is not None and not datatype._rec.freed:
        datatype, dup = datatype._base, True
    if datatype._size is None or datatype._rec.freed or datatype._combiner not in PREDEFINED_COMBINERS:
        return None
    if datatype._char is None and (dup or datatype._pair is None):
        return None  # no character code (the Match_size-only types), or a Dup of a pair type
    return datatype._align or None


def _is_contig(segs, size: int, lb: int, extent: int) -> bool:
    # segs is None only for derived layouts, whose constructor decides
    if size != extent or segs is None:
        return False
    return segs == () if size == 0 else segs == ((lb, size),)


def _check_comm(comm, call: str) -> None:
    if comm is None or not hasattr(comm, "Get_size"):
        raise TypeError(f"{call}: comm must be a Comm (got {type(comm).__name__})")
    if not comm:
        raise error(ERR_COMM, f"{call}: invalid communicator (MPI_COMM_NULL)")


def _check_datarep(datarep, call: str) -> None:
    if not isinstance(datarep, str):
        raise TypeError(f"{call}: datarep must be a str (got {type(datarep).__name__})")
    if datarep != "external32":
        from ..errors import ERR_UNSUPPORTED_DATAREP

        raise error(ERR_UNSUPPORTED_DATAREP, f"{call}: unsupported data representation ({datarep!r}; "
                                             f"only 'external32')")


def _rebuild(base: Datatype, name: str, kw: dict, committed: bool) -> Datatype:
    from . import constructors

    return constructors.rebuild(base, name, kw, committed)


_COPY_SLOTS = tuple(s for s in Datatype.__slots__ if s != "__weakref__")
_layout_of = operator.attrgetter(*_COPY_SLOTS)

#: The null datatype (MPI_DATATYPE_NULL).
DATATYPE_NULL = Datatype._make(
    handle=NULL_HANDLE, name="MPI_DATATYPE_NULL", size=None, lb=None, extent=None,
    true_lb=None, true_extent=None, segs=None, combiner=COMBINER_NAMED,
)
_NULL = DATATYPE_NULL
_NULL_LAYOUT = _layout_of(_NULL)

# (value handle, index handle) -> pair type; filled by datatypes.predefined
VALUE_INDEX: dict[tuple[int, int], Datatype] = {}
