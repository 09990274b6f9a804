"""Datatype (L1 pure core): an MPI datatype as an immutable byte layout plus a handle.

Theory of operation
===================
A :class:`Datatype` (mpi4py's ``MPI.Datatype``) is two things:

* a **layout**, fixed at construction and copied into every Python object that
  refers to the type: ``size`` (packed bytes per element), ``lb``/``extent``,
  ``true_lb``/``true_extent``, the flattened typemap ``segments`` (byte runs
  ``(offset, length)`` per element, in typemap order, adjacent runs merged) and
  ``is_contiguous`` (the packed bytes of ``count`` elements are exactly the
  ``count * extent`` bytes from ``lb``, so a message is one memcpy);
* a **handle record** shared by every object naming the same MPI handle
  (``Datatype(dt)`` copies the layout and shares the record): the handle integer
  (equality and hashing go by it, as MPI compares handles), the mutable print
  name, the committed and freed flags.

Predefined types (``datatypes.predefined``) are named, committed, never freed,
and carry the handle values of MPICH so ``handle``/``toint``/``py2f`` read as in
mpi4py on MPICH.  Derived types know their combiner and inputs
(``Get_envelope``/``Get_contents``/``decode``) and compute their segments on first
use from their base type, so a huge ``Create_contiguous`` of a contiguous type
costs one segment.  ``basic``/``nbasic`` name the single predefined type every
element is made of (when there is one) and how many of them, which is what
reductions and NumPy views need.

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
    COMBINER_DUP,
    COMBINER_F90_COMPLEX,
    COMBINER_F90_INTEGER,
    COMBINER_F90_REAL,
    COMBINER_NAMED,
    COMBINER_VALUE_INDEX,
    MAX_OBJECT_NAME,
)
from ..errors import ERR_COUNT, ERR_TYPE, error

__all__ = ["Datatype", "DATATYPE_NULL"]

#: MPICH's MPI_DATATYPE_NULL handle.
NULL_HANDLE = 0x0C000000
_U64 = (1 << 64) - 1
# derived handles: MPICH-looking negative int32 values above the pair types
_next_handle = itertools.count(-0x73FFFF00).__next__

_COMBINER_NAMES = {
    COMBINER_NAMED: "NAMED",
    COMBINER_DUP: "DUP",
    COMBINER_CONTIGUOUS: "CONTIGUOUS",
}
_PREDEFINED_COMBINERS = frozenset(
    (COMBINER_NAMED, COMBINER_VALUE_INDEX, COMBINER_F90_INTEGER, COMBINER_F90_REAL, COMBINER_F90_COMPLEX)
)

# handle -> Datatype, for fromhandle/fromint/f2py: predefined strongly, derived weakly
_PREDEFINED: dict[int, "Datatype"] = {}
_DERIVED: "weakref.WeakValueDictionary[int, Datatype]" = weakref.WeakValueDictionary()


class _Record:
    """What MPI keeps per handle: the handle, its print name, commit and free state."""

    __slots__ = ("handle", "name", "committed", "freed")

    def __init__(self, handle: int, name: str, committed: bool) -> None:
        self.handle = handle
        self.name = name
        self.committed = committed
        self.freed = False


def _index(value, what: str, call: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{call}: {what} must be an integer (got {type(value).__name__})") from None


def _merge(segs) -> tuple:
    """Merge adjacent byte runs, keeping typemap order and dropping empty runs."""
    out: list = []
    for off, ln in segs:
        if ln <= 0:
            continue
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + ln)
        else:
            out.append((off, ln))
    return tuple(out)


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
        "_segs",  # tuple[(offset, length)] per element, or None until computed
        "_combiner",
        "_base",  # old type of DUP / CONTIGUOUS, None for named types
        "_count",  # CONTIGUOUS count
        "_char",  # typechar, or None (derived: 'V')
        "_str",  # typestr, or None (derived: 'V<extent>')
        "_code",  # tocode() result, or None (ValueError)
        "_align",  # alignment in bytes (0: unknown)
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
        for slot in _COPY_SLOTS:
            setattr(self, slot, getattr(src, slot))

    # -- construction helpers (internal) -------------------------------------------------

    @classmethod
    def _make(cls, *, handle, name, size, lb, extent, true_lb, true_extent, segs, combiner,
              base=None, count=None, char=None, typestr=None, code=None, align=0,
              basic=None, nbasic=0, npspec=None, committed=False, contig=None) -> "Datatype":
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
        self._char = char
        self._str = typestr
        self._code = code
        self._align = align
        self._basic = self if (basic is None and combiner == COMBINER_NAMED and size) else basic
        self._nbasic = nbasic
        self._npspec = npspec
        self._npd = None
        if combiner == COMBINER_NAMED or size is None:
            _PREDEFINED[handle] = self
        else:
            _DERIVED[handle] = self
        return self

    def _check(self, call: str) -> None:
        """Raise ERR_TYPE when this is DATATYPE_NULL or a freed handle."""
        if self._size is None:
            raise error(ERR_TYPE, f"Datatype.{call}: invalid datatype (MPI_DATATYPE_NULL)")
        if self._rec.freed:
            raise error(ERR_TYPE, f"Datatype.{call}: datatype has been freed ({self._handle:#x})")

    # -- comparison and identity ---------------------------------------------------------

    def __eq__(self, other) -> bool:
        if not isinstance(other, Datatype):
            return NotImplemented
        return self._handle == other._handle

    def __ne__(self, other) -> bool:
        if not isinstance(other, Datatype):
            return NotImplemented
        return self._handle != other._handle

    def __hash__(self) -> int:
        return hash(self._handle)

    def __bool__(self) -> bool:
        return self._handle != NULL_HANDLE

    def __repr__(self) -> str:
        if self._size is None:
            return "<Datatype MPI_DATATYPE_NULL>"
        name = self._rec.name
        if self._combiner == COMBINER_NAMED:
            return f"<Datatype {name}>"
        what = _COMBINER_NAMES.get(self._combiner, str(self._combiner)).lower()
        return (f"<Datatype {name + ' ' if name else ''}{what} size={self._size} "
                f"lb={self._lb} extent={self._extent}>")

    def __reduce__(self):
        if self._combiner == COMBINER_NAMED or self._size is None:
            return (Datatype.fromhandle, (self._handle,))
        if self._combiner == COMBINER_DUP:
            return (_rebuild_dup, (self._base,))
        return (_rebuild_contiguous, (self._base, self._count))

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
        dt = _PREDEFINED.get(h)
        if dt is not None:
            return dt
        dt = _DERIVED.get(h)
        if dt is None:
            raise error(ERR_TYPE, f"Datatype.fromhandle: unknown datatype handle ({handle:#x})")
        return Datatype(dt)

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
        """Byte runs ``(offset, length)`` of one element, in typemap order (gpumpi)."""
        self._check("segments")
        return self._segments()

    def _segments(self) -> tuple:
        segs = self._segs
        if segs is None:
            base = self._base
            if self._combiner == COMBINER_DUP:
                segs = base._segments()
            elif base._contig:
                segs = _merge(((base._lb, self._count * base._size),))
            else:
                one, ext = base._segments(), base._extent
                segs = _merge((i * ext + off, ln) for i in range(self._count) for off, ln in one)
            self._segs = segs
        return segs

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

    # -- constructors --------------------------------------------------------------------

    def Dup(self) -> "Datatype":
        """Duplicate a datatype (MPI_Type_dup)."""
        self._check("Dup")
        return Datatype._make(
            handle=_next_handle(), name="", size=self._size, lb=self._lb, extent=self._extent,
            true_lb=self._true_lb, true_extent=self._true_extent, segs=self._segs,
            combiner=COMBINER_DUP, base=self, char=self._char, typestr=self._str, code=self._code,
            align=self._align, basic=self._basic, nbasic=self._nbasic, committed=self._rec.committed,
            contig=self._contig,
        )

    Create_dup = Dup

    def Create_contiguous(self, count: int) -> "Datatype":
        """Create a contiguous datatype (MPI_Type_contiguous)."""
        count = _index(count, "count", "Datatype.Create_contiguous")
        self._check("Create_contiguous")
        if count < 0:
            raise error(ERR_COUNT, f"Datatype.Create_contiguous: negative count ({count})")
        ext = self._extent
        if count == 0:
            lb = extent = true_lb = true_extent = 0
            segs = ()
        else:
            lo, hi = min(0, (count - 1) * ext), max(0, (count - 1) * ext)
            lb, extent = self._lb + lo, hi - lo + ext
            true_lb, true_extent = self._true_lb + lo, hi - lo + self._true_extent
            segs = _merge(((self._lb, count * self._size),)) if self._contig else None
        return Datatype._make(
            handle=_next_handle(), name="", size=count * self._size, lb=lb, extent=extent,
            true_lb=true_lb, true_extent=true_extent, segs=segs, combiner=COMBINER_CONTIGUOUS,
            base=self, count=count, align=self._align,
            basic=self._basic if count else None, nbasic=count * self._nbasic,
        )

    @classmethod
    def Get_value_index(cls, value: "Datatype", index: "Datatype") -> "Datatype":
        """Return a predefined pair datatype (MPI_Type_get_value_index)."""
        if not isinstance(value, Datatype) or not isinstance(index, Datatype):
            raise TypeError("Datatype.Get_value_index: expecting Datatype arguments")
        value._check("Get_value_index")
        index._check("Get_value_index")
        pair = _VALUE_INDEX.get((value._handle, index._handle))
        return Datatype(pair if pair is not None else _NULL)

    def Commit(self) -> "Datatype":
        """Commit the datatype (MPI_Type_commit)."""
        self._check("Commit")
        self._rec.committed = True
        return self

    def Free(self) -> None:
        """Free the datatype (MPI_Type_free)."""
        self._check("Free")
        if self._combiner in _PREDEFINED_COMBINERS:
            raise error(ERR_TYPE, f"Datatype.Free: cannot free a predefined datatype ({self._rec.name})")
        self._rec.freed = True
        for slot in _COPY_SLOTS:
            setattr(self, slot, getattr(_NULL, slot))

    def free(self) -> None:
        """Call `Free` if not null or predefined."""
        if self._size is not None and not self._rec.freed and self._combiner not in _PREDEFINED_COMBINERS:
            self.Free()

    # -- decoding ------------------------------------------------------------------------

    def Get_envelope(self) -> tuple[int, int, int, int, int]:
        """Return the number of input arguments used to create a datatype (MPI_Type_get_envelope)."""
        self._check("Get_envelope")
        c = self._combiner
        if c == COMBINER_DUP:
            return (0, 0, 0, 1, c)
        if c == COMBINER_CONTIGUOUS:
            return (0, 0, 1, 1, c)
        return (0, 0, 0, 0, c)

    @property
    def envelope(self) -> tuple[int, int, int, int, int]:
        """Envelope (MPI_Type_get_envelope)."""
        return self.Get_envelope()

    def Get_contents(self) -> tuple[list[int], list[int], list[int], list["Datatype"]]:
        """Return the input arguments used to create a datatype (MPI_Type_get_contents)."""
        self._check("Get_contents")
        c = self._combiner
        if c == COMBINER_DUP:
            return ([], [], [], [self._base])
        if c == COMBINER_CONTIGUOUS:
            return ([], [], [self._count], [self._base])
        raise error(ERR_TYPE, f"Datatype.Get_contents: named predefined datatypes have no contents ({self._rec.name})")

    @property
    def contents(self) -> tuple[list[int], list[int], list[int], list["Datatype"]]:
        """Contents (MPI_Type_get_contents)."""
        return self.Get_contents()

    def decode(self) -> tuple["Datatype", str, dict]:
        """Convenience method for decoding a datatype (mpi4py ``Datatype.decode``)."""
        self._check("decode")
        c = self._combiner
        if c == COMBINER_DUP:
            return (self._base, "DUP", {})
        if c == COMBINER_CONTIGUOUS:
            return (self._base, "CONTIGUOUS", {"count": self._count})
        return (self, "NAMED", {})

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
        return self._combiner in _PREDEFINED_COMBINERS

    def Is_named(self) -> bool:
        """Is a named datatype (method form of :attr:`is_named`)."""
        return self.is_named

    def Is_predefined(self) -> bool:
        """Is a predefined datatype (method form of :attr:`is_predefined`)."""
        return self.is_predefined

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
        """Get character code or type string from predefined MPI datatype."""
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
        """The NumPy dtype of one element (gpumpi; itemsize == extent, lb == 0 layouts only)."""
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
            else:
                npd = numpy.dtype(list(self._npspec), align=True)
            self._npd = npd
        return npd


def _is_contig(segs, size: int, lb: int, extent: int) -> bool:
    # segs is None only for layouts built lazily from a non-contiguous base
    if size != extent or segs is None:
        return False
    return segs == () if size == 0 else segs == ((lb, size),)


def _rebuild_dup(base: Datatype) -> Datatype:
    return base.Dup()


def _rebuild_contiguous(base: Datatype, count: int) -> Datatype:
    return base.Create_contiguous(count)


_COPY_SLOTS = tuple(s for s in Datatype.__slots__ if s != "__weakref__")

#: The null datatype (MPI_DATATYPE_NULL).
DATATYPE_NULL = Datatype._make(
    handle=NULL_HANDLE, name="MPI_DATATYPE_NULL", size=None, lb=None, extent=None,
    true_lb=None, true_extent=None, segs=None, combiner=COMBINER_NAMED,
)
_NULL = DATATYPE_NULL

# (value handle, index handle) -> pair type; filled by datatypes.predefined
_VALUE_INDEX: dict[tuple[int, int], Datatype] = {}
