"""Datatype attributes (L1 pure core): keyvals and cached values (MPI "caching" on datatypes).

Theory of operation
===================
``Datatype.Create_keyval`` registers a :class:`Keyval` (copy and delete callbacks,
and whether values are Python objects or, with ``nopython``, plain integers like
C attributes) under an integer that looks like an MPICH datatype keyval.  Values
live in the handle record (``datatype._rec.attrs``: keyval -> (Keyval, value)), so
every object naming a handle sees the same attributes; predefined types accept
attributes too, as in MPICH.

Callbacks follow mpi4py: ``copy_fn(datatype, keyval, value)`` runs for each
attribute when a type is duplicated and returns the duplicate's value
(``NotImplemented`` skips the attribute; ``copy_fn=True`` copies the value
unchanged; ``None``/``False`` never copies); ``delete_fn(datatype, keyval,
value)`` runs when a value is replaced by ``Set_attr``, removed by
``Delete_attr``, or its type is freed.  A callback that raises makes the call
fail with ``MPI.Exception(ERR_OTHER)`` chained to the original exception; the
attribute is still removed (delete) or not created (copy), as MPICH leaves them.

A freed keyval can no longer be set, but values already attached stay readable
and deletable, as MPI specifies.  Unknown keyvals and ``KEYVAL_INVALID`` raise
``ERR_KEYVAL``.
"""

from __future__ import annotations

import itertools
import operator

from ..constants import KEYVAL_INVALID
from ..errors import ERR_KEYVAL, ERR_OTHER, error

__all__ = ["Keyval", "create_keyval", "free_keyval", "set_attr", "get_attr", "delete_attr",
           "copy_all", "delete_all"]

# MPICH datatype keyvals are negative int32 values 0xA4C...: keep the look
_next_keyval = itertools.count(-0x5B400000, 1).__next__
_KEYVALS: dict[int, "Keyval"] = {}


class Keyval:
    """A datatype attribute key: callbacks and value kind."""

    __slots__ = ("keyval", "copy_fn", "delete_fn", "nopython", "freed")

    def __init__(self, keyval: int, copy_fn, delete_fn, nopython: bool) -> None:
        self.keyval = keyval
        self.copy_fn = None if copy_fn is False else copy_fn
        self.delete_fn = None if delete_fn is False or delete_fn is True else delete_fn
        self.nopython = bool(nopython)
        self.freed = False


def create_keyval(copy_fn=None, delete_fn=None, nopython: bool = False) -> int:
    """Register a keyval (MPI_Type_create_keyval) and return its integer."""
    for what, fn in (("copy_fn", copy_fn), ("delete_fn", delete_fn)):
        if fn is not None and not isinstance(fn, bool) and not callable(fn):
            raise TypeError(f"Datatype.Create_keyval: {what} must be callable or None (got {type(fn).__name__})")
    k = _next_keyval()
    _KEYVALS[k] = Keyval(k, copy_fn, delete_fn, nopython)
    return k


def _lookup(keyval, call: str, for_set: bool = False) -> Keyval:
    try:
        keyval = operator.index(keyval)
    except TypeError:
        raise TypeError(f"{call}: keyval must be an integer (got {type(keyval).__name__})") from None
    if keyval == KEYVAL_INVALID:
        raise error(ERR_KEYVAL, f"{call}: attribute key is MPI_KEYVAL_INVALID ({keyval})")
    k = _KEYVALS.get(keyval)
    if k is None:
        raise error(ERR_KEYVAL, f"{call}: keyval was not created for datatypes ({keyval})")
    if for_set and k.freed:
        raise error(ERR_KEYVAL, f"{call}: keyval has been freed ({keyval})")
    return k


def free_keyval(keyval) -> int:
    """Free a keyval (MPI_Type_free_keyval); attached values stay.  Returns KEYVAL_INVALID."""
    _lookup(keyval, "Datatype.Free_keyval").freed = True
    return KEYVAL_INVALID


def _call(fn, datatype, keyval: int, value, call: str, what: str):
    from ._core import Datatype

    try:
        return fn(Datatype(datatype), keyval, value)
    except Exception as exc:
        raise error(ERR_OTHER, f"{call}: attribute {what} callback raised "
                               f"{type(exc).__name__}: {exc} (keyval {keyval})") from exc


def set_attr(datatype, keyval, value) -> None:
    """Attach ``value`` under ``keyval`` (MPI_Type_set_attr); an old value is deleted first."""
    call = "Datatype.Set_attr"
    k = _lookup(keyval, call, for_set=True)
    if k.nopython:
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{call}: an integer is required for a nopython keyval "
                            f"(got {type(value).__name__})") from None
    attrs = datatype._rec.attrs
    old = attrs.get(k.keyval)
    attrs[k.keyval] = (k, value)
    if old is not None and old[0].delete_fn is not None:
        _call(old[0].delete_fn, datatype, k.keyval, old[1], call, "delete")


def get_attr(datatype, keyval):
    """The value under ``keyval`` (MPI_Type_get_attr), or None when not set."""
    k = _lookup(keyval, "Datatype.Get_attr")
    entry = datatype._rec.attrs.get(k.keyval)
    return None if entry is None else entry[1]


def delete_attr(datatype, keyval) -> None:
    """Remove the value under ``keyval`` (MPI_Type_delete_attr), running its delete callback."""
    call = "Datatype.Delete_attr"
    k = _lookup(keyval, call)
    entry = datatype._rec.attrs.pop(k.keyval, None)
    if entry is not None and entry[0].delete_fn is not None:
        _call(entry[0].delete_fn, datatype, k.keyval, entry[1], call, "delete")


def copy_all(src, dst, call: str) -> None:
    """Copy ``src``'s attributes to its duplicate ``dst`` through the copy callbacks."""
    out = dst._rec.attrs
    for keyval, (k, value) in list(src._rec.attrs.items()):
        fn = k.copy_fn
        if fn is None:
            continue
        if fn is not True:
            value = _call(fn, src, keyval, value, call, "copy")
            if value is NotImplemented:
                continue
        out[keyval] = (k, value)


def delete_all(datatype, call: str):
    """Run every delete callback of ``datatype`` and drop the values; returns the first error or None."""
    failure = None
    attrs = datatype._rec.attrs
    while attrs:
        keyval, (k, value) = attrs.popitem()
        if k.delete_fn is None:
            continue
        try:
            _call(k.delete_fn, datatype, keyval, value, call, "delete")
        except Exception as exc:  # keep freeing; report the first failure
            if failure is None:
                failure = exc
    return failure
