"""Docstrings in mpi4py's form (L0): ``"<signature>\\n\\n<description>"``.

Theory of operation
===================
mpi4py's compiled module embeds each callable's signature as the first line of its
docstring (Cython's ``embedsignature``): ``Comm.Get_size.__doc__`` is
``"Get_size(self) -> int\\n\\nReturn the number of processes in a communicator."``,
a property's is ``"rank: int\\n\\nRank of this process."``.  Tools and mpi4py's own
test suite (``test_doc``) read the text after that first line as the description.

:func:`embed_signatures` gives gpumpi's public functions, methods and properties the
same form, once, when ``gpumpi.MPI`` is imported: the first line is built from the
callable's signature, the description is the docstring as written, dedented, with
its first paragraph joined into one summary line.  A docstring already in that form
is left alone, so calling it twice changes nothing.  Classes and modules keep their
docstrings (mpi4py's carry no signature either).
"""

from __future__ import annotations

import inspect
import types

__all__ = ["embed_signatures"]


def _description(doc: str | None) -> str:
    doc = inspect.cleandoc(doc or "")
    head, sep, rest = doc.partition("\n\n")
    return " ".join(head.split()) + (sep + rest if rest else "")


def _signature_line(name: str, fn) -> str:
    try:
        sig = str(inspect.signature(fn))
    except (TypeError, ValueError):  # a callable Python cannot introspect
        sig = "(...)"
    return f"{name}{sig}".replace("'", "").replace('"', "")


def _embedded(doc: str | None, first: str) -> bool:
    return bool(doc) and doc.startswith(first) and "\n\n" in doc


def _function(fn, name: str, seen: set) -> None:
    if fn in seen:  # an alias (``Create_dup = Dup``) keeps the first name's line
        return
    seen.add(fn)
    first = _signature_line(name, fn)
    if not _embedded(fn.__doc__, first):
        fn.__doc__ = f"{first}\n\n{_description(fn.__doc__)}"


def _property(prop: property, name: str) -> None:
    try:
        ret = inspect.signature(prop.fget).return_annotation
    except (TypeError, ValueError):
        ret = inspect.Signature.empty
    ret = "" if ret is inspect.Signature.empty else str(ret if isinstance(ret, str) else inspect.formatannotation(ret))
    first = f"{name}: {ret}" if ret else name
    if not _embedded(prop.__doc__, first):
        prop.__doc__ = f"{first}\n\n{_description(prop.__doc__)}"


def _class(cls: type, seen: set) -> None:
    for klass in cls.__mro__:  # the bases too: a class may gather its methods from several (gpumpi.comm's faces)
        if klass not in seen and str(klass.__module__).startswith("gpumpi"):
            seen.add(klass)
            _members(klass, seen)


def _members(cls: type, seen: set) -> None:
    for name, value in list(vars(cls).items()):
        if name.startswith("__"):
            continue
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if isinstance(value, types.FunctionType) and value.__module__.startswith("gpumpi"):
            _function(value, name, seen)
        elif isinstance(value, property):
            _property(value, name)


def embed_signatures(namespace: dict) -> None:
    """Put the signature line first in the docstrings of ``namespace``'s gpumpi functions and classes."""
    seen: set = set()
    for name, value in list(namespace.items()):
        if not str(getattr(value, "__module__", None)).startswith("gpumpi"):
            continue
        if isinstance(value, type):
            _class(value, seen)
        elif isinstance(value, types.FunctionType):
            _function(value, name, seen)
