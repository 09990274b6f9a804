"""Attribute caching (MPI keyvals) for communicators, datatypes and windows (L1).

Theory of operation
===================
MPI lets a program cache values on communicators, datatypes and windows under
integer *keyvals*.  One :class:`Kind` per object family ("Comm", "Datatype",
"Win") holds that family's keyvals and implements the five calls
(``Create_keyval``, ``Free_keyval``, ``Set_attr``, ``Get_attr``, ``Delete_attr``)
plus the two lifecycle events: :meth:`Kind.copy_all` when an object is
duplicated and :meth:`Kind.delete_all` when it is freed.  A family plugs in by
building its ``Kind`` with three functions: ``attrs_of(obj)`` (the mutable
``{keyval: (Keyval, value)}`` dict of the *handle* ``obj`` names, so that every
Python reference to one handle sees the same attributes), ``wrap(obj)`` (a fresh
reference to that handle, handed to callbacks) and ``nullify(ref)`` (what the
reference becomes after the callback: the null object, as mpi4py leaves it).
The class then sets ``cls._attrkind = kind``; :func:`on_dup` and :func:`on_free`
find the kind through it.  Windows (:mod:`gpumpi.rma.win`) build
``Kind("Win", WIN_FIRST, ...)``, forward their five calls to it, and call
``on_free(win)`` from ``Win.Free`` (windows are never duplicated).

The semantics are mpi4py's on MPICH (``attrimpl.pxi``):

* ``copy_fn``/``delete_fn`` of ``False`` mean None; ``delete_fn=True`` means None.
* ``nopython=True`` keyvals hold C-like integers: a value must be an ``int``
  (``TypeError`` otherwise) that fits a pointer (``OverflowError``), and it reads
  back as the unsigned pointer value (``-1`` reads back as ``2**64 - 1``).
* Duplication copies attributes in the order they were first set: ``copy_fn``
  None never copies, ``True`` copies the value as is, a function
  ``copy_fn(obj, keyval, value)`` returns the duplicate's value, or
  ``NotImplemented`` to leave the attribute out.
* ``delete_fn(obj, keyval, value)`` runs when the value is replaced by
  ``Set_attr``, removed by ``Delete_attr``, or its object freed; freeing runs the
  callbacks in the reverse order the attributes were set (as MPI_Finalize does for
  COMM_SELF), each attribute's callback from the keyval it was set with, so
  callbacks keep working after ``Free_keyval``.
* A callback that raises (anything: mpi4py catches ``BaseException``) has its
  traceback printed to ``sys.stderr``, and the error code is the exception's when
  it is an ``MPI.Exception``, ``ERR_OTHER`` otherwise.  A failing copy makes the
  duplication fail with that code (attributes copied so far are dropped without
  their delete callbacks, as MPICH leaves them).  A failing delete removes the
  attribute all the same; ``Delete_attr`` then raises the code, while replacement
  in ``Set_attr`` and freeing report it only on stderr and succeed (mpi4py's
  delete callback returns success to MPI and keeps the error for
  ``Delete_attr``).
* ``KEYVAL_INVALID``, integers that are no keyval of this family (another
  family's included), and predefined keyvals passed to ``Set_attr``,
  ``Delete_attr`` or ``Free_keyval`` raise ``ERR_KEYVAL``; so does setting a freed
  keyval.  Values already attached under a freed keyval stay readable and
  deletable, as the MPI standard says.

Deviations, each where mpi4py on MPICH does something no program can rely on:
mpi4py forgets a keyval's Python state at ``Free_keyval``, so its ``Get_attr`` of a
Python value still attached then returns the object's address (gpumpi: the object),
and setting that freed keyval stores a bare integer its callbacks later take for an
object (gpumpi: ``ERR_KEYVAL``); MPICH frees a keyval twice without error (gpumpi:
``ERR_KEYVAL``); a non-callable, non-bool ``copy_fn``/``delete_fn`` fails at
``Create_keyval`` (``TypeError``) rather than at its first use; a delete callback's
error is not kept for a later, unrelated ``Delete_attr`` (mpi4py's per-keyval
``ierr`` can leak into one that finds no attribute).
"""

from __future__ import annotations

import itertools
import operator
import sys
import traceback

from .constants import KEYVAL_INVALID
from .errors import ERR_KEYVAL, ERR_OTHER, error
from .errors import Exception as MPIException

__all__ = ["Keyval", "Kind", "on_dup", "on_free", "COMM_FIRST", "DATATYPE_FIRST", "WIN_FIRST"]

#: first user keyval of each family: MPICH's direct keyval handles (0xA4400000 comm,
#: 0xA4800000 win, 0xA4C00000 datatype) read as signed int32, so families never collide
COMM_FIRST = -0x5BC00000
WIN_FIRST = -0x5B800000
DATATYPE_FIRST = -0x5B400000

_U64 = (1 << 64) - 1


class Keyval:
    """One attribute key: its callbacks and value kind (mpi4py's ``_p_keyval``)."""

    __slots__ = ("keyval", "copy_fn", "delete_fn", "nopython", "freed")

    def __init__(self, keyval: int, copy_fn, delete_fn, nopython: bool) -> None:
        self.keyval = keyval
        self.copy_fn = None if copy_fn is False else copy_fn
        self.delete_fn = None if delete_fn is False or delete_fn is True else delete_fn
        self.nopython = bool(nopython)
        self.freed = False

    def __repr__(self) -> str:
        return f"<Keyval {self.keyval}{' nopython' if self.nopython else ''}{' freed' if self.freed else ''}>"


def as_pointer(value, call: str) -> int:
    """A nopython attribute value as C stores it (``PyLong_AsVoidPtr``): the unsigned pointer."""
    if not isinstance(value, int):
        raise TypeError(f"{call}: an integer is required for an integer attribute (got {type(value).__name__})")
    if not -(1 << 63) <= value <= _U64:
        raise OverflowError(f"{call}: attribute value does not fit a pointer ({value})")
    return value & _U64


def _code_of(exc: BaseException) -> int:
    """The MPI error code a callback's exception turns into (mpi4py's PyMPI_HandleException)."""
    if isinstance(exc, MPIException):
        return int(exc)
    return ERR_OTHER


def _display(exc: BaseException) -> None:
    """Print a callback's exception with its traceback on the current ``sys.stderr``."""
    try:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        sys.stderr.flush()
    except Exception:  # pragma: no cover - a closed or broken stderr: nothing else to do
        pass


class Kind:
    """The keyvals and attribute calls of one object family ("Comm", "Datatype", "Win")."""

    def __init__(self, name: str, first: int, *, attrs_of, wrap, nullify, predefined=(), forget=None) -> None:
        self.name = name
        self._next = itertools.count(first).__next__
        self._keyvals: dict[int, Keyval] = {}  # every keyval ever created here, freed ones marked
        self.attrs_of = attrs_of
        self.wrap = wrap
        self.nullify = nullify
        self.forget = forget
        #: predefined keyvals of this family: readable (the family answers), never set or freed
        self.predefined = frozenset(predefined)

    # -- keyvals ---------------------------------------------------------------------------
    def create_keyval(self, copy_fn=None, delete_fn=None, nopython=False) -> int:
        """Register a keyval (MPI_*_create_keyval) and return its integer."""
        call = f"{self.name}.Create_keyval"
        for what, fn in (("copy_fn", copy_fn), ("delete_fn", delete_fn)):
            if fn is not None and not isinstance(fn, bool) and not callable(fn):
                raise TypeError(f"{call}: {what} must be callable, a bool or None (got {type(fn).__name__})")
        k = self._next()
        self._keyvals[k] = Keyval(k, copy_fn, delete_fn, nopython)
        return k

    @staticmethod
    def _index(keyval, call: str) -> int:
        """A keyval argument as mpi4py's C ``int``: index-able objects, floats truncated."""
        if isinstance(keyval, float):
            keyval = int(keyval)
        try:
            v = operator.index(keyval)
        except TypeError:
            raise TypeError(f"{call}: keyval must be an integer (got {type(keyval).__name__})") from None
        if not -(1 << 31) <= v < (1 << 31):
            raise OverflowError(f"{call}: keyval does not fit a C int ({v})")
        return v

    def lookup(self, keyval, call: str, *, for_set: bool = False) -> Keyval | int:
        """The :class:`Keyval` of ``keyval``, or the int itself for a predefined keyval
        (allowed only when not ``for_set``); ERR_KEYVAL for anything else."""
        v = self._index(keyval, call)
        if v == KEYVAL_INVALID:
            raise error(ERR_KEYVAL, f"{call}: invalid keyval (KEYVAL_INVALID, {v})")
        if v in self.predefined:
            if for_set:
                raise error(ERR_KEYVAL, f"{call}: predefined keyval cannot be set, deleted or freed ({v})")
            return v
        k = self._keyvals.get(v)
        if k is None:
            raise error(ERR_KEYVAL, f"{call}: not a {self.name} keyval ({v})")
        if for_set and k.freed:
            raise error(ERR_KEYVAL, f"{call}: keyval has been freed ({v})")
        return k

    def free_keyval(self, keyval) -> int:
        """Free a keyval (MPI_*_free_keyval); attached values stay.  Returns KEYVAL_INVALID."""
        call = f"{self.name}.Free_keyval"
        self.lookup(keyval, call, for_set=True).freed = True
        return KEYVAL_INVALID

    # -- callbacks -------------------------------------------------------------------------
    def _call(self, fn, obj, keyval: int, value):
        """Run a callback as mpi4py does: on a fresh reference to ``obj``'s handle, which
        becomes null afterwards.  Returns (result, None) or (None, the exception), the
        exception printed on stderr."""
        ref = self.wrap(obj)
        try:
            return fn(ref, keyval, value), None
        except BaseException as exc:  # noqa: B036 - mpi4py turns any exception into an error code
            _display(exc)
            return None, exc
        finally:
            self.nullify(ref)

    def _delete(self, obj, k: Keyval, value):
        """Run ``k``'s delete callback on ``value``; returns the exception it raised or None."""
        if k.delete_fn is None:
            return None
        return self._call(k.delete_fn, obj, k.keyval, value)[1]

    # -- attribute calls -------------------------------------------------------------------
    def set_attr(self, obj, keyval, value) -> None:
        """Attach ``value`` under ``keyval`` (MPI_*_set_attr).  A value already there is
        replaced in place (it keeps its copy/delete order) after its delete callback ran."""
        call = f"{self.name}.Set_attr"
        k = self.lookup(keyval, call, for_set=True)
        if k.nopython:
            value = as_pointer(value, call)
        attrs = self.attrs_of(obj)
        old = attrs.get(k.keyval)
        if old is not None:
            self._delete(obj, old[0], old[1])  # reported on stderr only, as mpi4py's
        attrs[k.keyval] = (k, value)

    def get_attr(self, obj, keyval, predefined=None):
        """The value under ``keyval`` (MPI_*_get_attr), or None when not set;
        ``predefined(keyval)`` answers the family's predefined keyvals."""
        k = self.lookup(keyval, f"{self.name}.Get_attr")
        if not isinstance(k, Keyval):
            return None if predefined is None else predefined(k)
        entry = self.attrs_of(obj).get(k.keyval)
        return None if entry is None else entry[1]

    def deletable(self, keyval, call: str) -> Keyval:
        """The :class:`Keyval` whose value ``Delete_attr`` may remove (a freed one too);
        ERR_KEYVAL for an invalid or predefined keyval."""
        k = self.lookup(keyval, call)
        if not isinstance(k, Keyval):
            raise error(ERR_KEYVAL, f"{call}: predefined keyval cannot be set, deleted or freed ({k})")
        return k

    def delete_attr(self, obj, keyval) -> None:
        """Remove the value under ``keyval`` (MPI_*_delete_attr), running its delete
        callback; raises the callback's error (the attribute is gone all the same)."""
        call = f"{self.name}.Delete_attr"
        k = self.deletable(keyval, call)
        entry = self.attrs_of(obj).pop(k.keyval, None)
        if entry is None:
            return
        exc = self._delete(obj, entry[0], entry[1])
        if exc is not None:
            raise error(_code_of(exc), f"{call}: attribute delete callback raised {type(exc).__name__} "
                                       f"(keyval {k.keyval}; traceback on stderr)") from exc

    # -- lifecycle -------------------------------------------------------------------------
    def copy_all(self, old, new, call: str) -> None:
        """Copy ``old``'s attributes to its duplicate ``new`` through the copy callbacks, in
        the order they were set.  A failing callback raises its error; ``new`` is left
        with no attributes (the ones copied so far are dropped, their delete callbacks not run)."""
        src = self.attrs_of(old)
        if not src:
            return
        out = self.attrs_of(new)
        for keyval, (k, value) in list(src.items()):
            fn = k.copy_fn
            if fn is None:
                continue
            if fn is not True:
                value, exc = self._call(fn, old, keyval, value)
                if exc is None and value is not NotImplemented and k.nopython:
                    try:
                        value = as_pointer(value, call)
                    except (TypeError, OverflowError) as bad:
                        _display(bad)
                        exc = bad
                if exc is not None:
                    out.clear()
                    raise error(_code_of(exc), f"{call}: attribute copy callback raised {type(exc).__name__} "
                                               f"(keyval {keyval}; traceback on stderr)") from exc
                if value is NotImplemented:
                    continue
            out[keyval] = (k, value)

    def delete_all(self, obj) -> None:
        """Delete every attribute of ``obj``, newest first, running the delete callbacks
        (their errors are reported on stderr only, as mpi4py's on a free)."""
        attrs = self.attrs_of(obj)
        while attrs:
            keyval, (k, value) = attrs.popitem()  # dicts pop the last inserted item
            self._delete(obj, k, value)
        if self.forget is not None:
            self.forget(obj)


def on_dup(old, new, call: str | None = None) -> None:
    """Copy ``old``'s attributes onto its new duplicate ``new`` (MPI_Comm_dup's step).

    When a copy callback fails, ``new`` is freed (with no attributes left to delete)
    and the callback's error is raised."""
    kind: Kind = type(old)._attrkind
    try:
        kind.copy_all(old, new, call or f"{kind.name}.Dup")
    except MPIException:
        new.Free()
        raise


def on_free(obj) -> None:
    """Delete ``obj``'s attributes, running their delete callbacks (the first step of a free)."""
    type(obj)._attrkind.delete_all(obj)
