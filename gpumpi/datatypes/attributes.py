"""Datatype attributes (L1 pure core): the "Datatype" family of :mod:`gpumpi.keyval`.

Theory of operation
===================
A datatype's attributes live in its handle record (``datatype._rec.attrs``: keyval ->
(Keyval, value)), so every object naming one handle sees the same attributes;
predefined types accept attributes too, as in MPICH.  Callbacks get a fresh
``Datatype`` reference to the handle, which becomes ``DATATYPE_NULL`` when the callback
returns (mpi4py's ``fromhandle`` objects).  ``Dup`` copies through
:meth:`Kind.copy_all`; the last release of a handle deletes through
:meth:`Kind.delete_all`.  Every rule (copy_fn True/False/NotImplemented, nopython
integers, callback exceptions) is :mod:`gpumpi.keyval`'s.
"""

from __future__ import annotations

from ..keyval import DATATYPE_FIRST, Kind

__all__ = ["DATATYPE"]


def _attrs_of(datatype) -> dict:
    return datatype._rec.attrs


def _wrap(datatype):
    from ._core import Datatype

    return Datatype(datatype)


def _nullify(ref) -> None:
    ref._nullify()


#: the datatype keyvals and attribute calls
DATATYPE = Kind("Datatype", DATATYPE_FIRST, attrs_of=_attrs_of, wrap=_wrap, nullify=_nullify)
