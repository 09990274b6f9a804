"""Handles: the integer identity of MPI objects, as mpi4py exposes it (L0).

Theory of operation
===================
An MPI object (communicator, group, request, ...) is named by a *handle*; every
Python object of the class is a reference to one handle, and ``Cls(obj)`` is a
second reference to the same handle.  mpi4py's object model follows from that,
and this module is the one place that implements it for gpumpi's classes:

* a handle value is a signed 32-bit integer with MPICH's values for the
  predefined objects (``COMM_WORLD`` is ``0x44000000``); ``obj.handle`` reads it as
  the unsigned pointer-sized integer mpi4py shows, ``toint``/``py2f`` as the int;
* equality compares handles within a class family, objects are unhashable
  (``__hash__ = None``: a handle can change under ``Free``), ordering is a
  ``TypeError``;
* module constants (``COMM_WORLD``, ``INT``, ``ERRORS_RETURN``...) are
  registered by name: they pickle by name (``loads(dumps(COMM_WORLD)) is
  COMM_WORLD``), copies of them pickle as ``Cls(constant)``, other objects do not
  pickle (``ValueError``) unless their class says how;
* ``free()`` is mpi4py's safe free: a constant or a null object is left alone, a
  copy of a predefined handle becomes null, anything else is ``Free``d;
* ``Cls.fromhandle(h)`` finds a live object with that handle in the class's
  :class:`Table` (objects register when they are created or when their handle is
  read) and returns a new reference to it.

A class plugs in by deriving from :class:`Handle` and defining ``_hval`` (its
handle value), ``_hnull`` (the null value), ``_htable`` and ``_hbase`` (the class
whose instances compare with each other), and ``_hnullify`` (turn this reference
into the null one); ``_hinit(src)`` makes a new reference (``Cls.__init__(src)``).
"""

from __future__ import annotations

import itertools
import operator
import weakref

U64 = (1 << 64) - 1

#: ids of the module constant objects: never freed, pickled by name
_CONST: set = set()
#: (family name, constant name) -> constant object, for unpickling
_BY_NAME: dict = {}


#: how an unknown handle is reported: ``errors`` installs MPI.Exception(ERR_ARG) (it imports us)
_unknown_handle = [ValueError]


def signed32(value: int) -> int:
    """A handle read back from its unsigned (pointer) or int form, as the signed value."""
    v = operator.index(value)
    if v > 0x7FFFFFFF:
        v -= (1 << 64) if v > 0xFFFFFFFF else (1 << 32)
    return v


class Table:
    """Handles of one class family: the predefined ones by value, the live ones weakly."""

    def __init__(self, family: str, first: int) -> None:
        self.family = family
        self.named: dict[int, tuple] = {}  # value -> (constant object, name)
        self.live: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._next = itertools.count(first).__next__

    def new(self) -> int:
        """A fresh handle value for a created object (MPICH-looking negative int32)."""
        return self._next()

    def constant(self, obj, name: str, value: int | None = None):
        """Register module constant ``obj`` named ``name`` (with handle ``value``, when it
        gets it later); returns it."""
        v = obj._hval() if value is None else value
        self.named.setdefault(v, (obj, name))
        _CONST.add(id(obj))
        _BY_NAME[(self.family, name)] = obj
        return obj

    def add(self, obj) -> None:
        """Remember a live object so that ``fromhandle`` finds its handle."""
        v = obj._hval()
        if v not in self.named:
            self.live[v] = obj

    def find(self, value: int):
        """Return the object with handle ``value`` (a constant or a live object), or None."""
        ent = self.named.get(value)
        if ent is not None:
            return ent[0]
        return self.live.get(value)


def is_constant(obj) -> bool:
    """Whether ``obj`` is one of the module constants (COMM_WORLD, INT, ...)."""
    return id(obj) in _CONST


def named(family: str, name: str):
    """Unpickle a module constant (what ``__reduce__`` of a constant names)."""
    return _BY_NAME[(family, name)]


class Handle:
    """Mixin: mpi4py's handle semantics for a class with ``_hval``/``_hnull``/``_htable``."""

    __slots__ = ()
    _htable: Table
    _hnull: int
    _hbase: type  # the class whose instances compare with each other (Comm for Intracomm...)

    def __new__(cls, *args, **kwargs):
        # mpi4py's constructors take the object to copy in __new__ too (``Request.__new__(cls,
        # request=None)``), so subclasses may call ``super().__new__(cls, obj)``; __init__ copies
        return super().__new__(cls)

    def _hval(self) -> int:  # pragma: no cover - every class defines it
        raise NotImplementedError(f"{type(self).__name__}: a Handle subclass must define _hval (its handle value)")

    def _hnullify(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.free: cannot nullify")

    def _hfree(self) -> None:
        self.Free()

    def __eq__(self, other):
        if not isinstance(other, self._hbase):
            return NotImplemented
        return self._hval() == other._hval()

    def __ne__(self, other):
        if not isinstance(other, self._hbase):
            return NotImplemented
        return self._hval() != other._hval()

    __hash__ = None

    def __bool__(self) -> bool:
        return self._hval() != self._hnull

    @property
    def handle(self) -> int:
        """MPI handle."""
        self._htable.add(self)
        return self._hval() & U64

    def toint(self) -> int:
        """Translate object to integer handle (MPI_*_toint)."""
        self._htable.add(self)
        return self._hval()

    def py2f(self) -> int:
        """Fortran handle (MPI_*_c2f)."""
        self._htable.add(self)
        return self._hval()

    @classmethod
    def fromhandle(cls, handle: int):
        """Create object from MPI handle."""
        try:
            v = signed32(handle)
        except TypeError:
            raise TypeError(f"{cls.__name__}.fromhandle: handle must be an integer "
                            f"({type(handle).__name__})") from None
        if v == cls._hnull:
            return cls()
        src = cls._htable.find(v)
        if src is None or src._hval() != v:
            raise _unknown_handle[0](f"{cls.__name__}.fromhandle: no live {cls._htable.family} "
                                     f"has this handle ({handle:#x})")
        obj = cls.__new__(type(src) if issubclass(type(src), cls) else cls)
        obj._hinit(src)
        return obj

    def _hinit(self, src) -> None:
        type(self).__init__(self, src)

    @classmethod
    def fromint(cls, arg: int, /):
        """Translate integer handle to object (MPI_*_fromint)."""
        return cls.fromhandle(arg)

    @classmethod
    def f2py(cls, arg: int):
        """Object from Fortran handle (MPI_*_f2c)."""
        return cls.fromhandle(arg)

    def free(self) -> None:
        """Call ``Free`` if not null or predefined (mpi4py's safe free)."""
        if id(self) in _CONST or not self:
            return
        if self._hval() in self._htable.named:
            self._hnullify()
            return
        self._hfree()

    def __reduce__(self):
        ent = self._htable.named.get(self._hval())
        if ent is not None:
            const, name = ent
            if self is const:
                return (named, (self._htable.family, name))
            return (type(self), (const,))
        return self._hreduce()

    def _hreduce(self):
        cls = type(self)
        raise ValueError(f"cannot serialize '{cls.__module__}.{cls.__name__}' instance")
