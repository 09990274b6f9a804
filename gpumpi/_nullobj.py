"""Object families gpumpi does not implement, present so mpi4py programs load (L5).

Theory of operation
===================
``File`` (MPI-IO, not planned) exists with mpi4py's
names: the class, its null handle, its methods and properties.  No non-null object
of these classes can be made -- every constructor (``Win.Create``, ``File.Open``...)
raises ``NotImplementedError`` naming the feature and the issue that brings it -- so
every instance is the null object, and an instance method does what MPI does on a
null handle: it raises ``MPI.Exception`` with the family's error class (``ERR_FILE``).  ``free()`` of a null object does nothing, as mpi4py's.
:func:`null_family` builds such a class from a table of method names.
"""

from __future__ import annotations

from ._handles import Handle, Table
from .errors import Errhandler, error


def _instance_method(cls_name: str, name: str, mpi: str, errclass: int, null_name: str):
    def method(self, *args, **kwargs):
        raise error(errclass, f"{cls_name}.{name}: invalid handle ({null_name})")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Call {mpi} on this object (only the null object exists: raises MPI.Exception)."
    return method


def _creator(cls_name: str, name: str, mpi: str, what: str):
    def creator(cls, *args, **kwargs):
        raise NotImplementedError(f"{cls_name}.{name}: {what}")

    creator.__name__ = creator.__qualname__ = name
    creator.__doc__ = f"Call {mpi} (not supported yet: raises NotImplementedError)."
    return classmethod(creator)


def _prop(cls_name: str, name: str, errclass: int, null_name: str):
    def get(self):
        raise error(errclass, f"{cls_name}.{name}: invalid handle ({null_name})")

    return property(get, doc=f"The {name.replace('_', ' ')} of the object (MPI equivalent of Get_{name}).")


def _create_errhandler(cls_name: str, mpi_prefix: str):
    def Create_errhandler(cls, errhandler_fn):
        return Errhandler._user(errhandler_fn, cls_name, f"{cls_name}.Create_errhandler")

    Create_errhandler.__doc__ = (f"Create a user error handler ``fn(obj, errorcode)`` for {cls_name} "
                                 f"objects ({mpi_prefix}create_errhandler).")
    return Create_errhandler


def null_family(cls_name: str, module: str, doc: str, *, null: int, first: int, errclass: int, null_name: str,
                what: str, mpi_prefix: str, methods=(), creators=(), props=(), extra=None) -> type:
    """A handle class whose only objects are null ones (see the module docstring)."""

    def __init__(self, obj=None):
        if obj is not None and not isinstance(obj, cls):
            raise TypeError(f"{cls_name}: expecting a {cls_name} (got {type(obj).__name__})")

    def _hval(self):
        return null

    def _hnullify(self):
        pass

    ns = {"__doc__": doc, "__slots__": ("__weakref__",), "__init__": __init__, "_hval": _hval,
          "_hnullify": _hnullify, "_hnull": null, "_htable": Table(cls_name, first), "__module__": module}
    for name in methods:
        ns[name] = _instance_method(cls_name, name, f"{mpi_prefix}{name.lower()}", errclass, null_name)
    for name in creators:
        ns[name] = _creator(cls_name, name, f"{mpi_prefix}{name.lower()}", what)
    for name in props:
        ns[name] = _prop(cls_name, name, errclass, null_name)
    ns["Create_errhandler"] = classmethod(_create_errhandler(cls_name, mpi_prefix))
    ns.update(extra or {})
    cls = type(cls_name, (Handle,), ns)
    cls._hbase = cls
    return cls
