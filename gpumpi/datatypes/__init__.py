"""MPI datatypes (L1 pure core): the :class:`Datatype` class, every predefined type, typecode maps.

``gpumpi.datatypes`` imports no NumPy; ``Datatype.np`` imports it on first use.
"""

from . import predefined as _predefined
from ._core import DATATYPE_NULL, Datatype
from .predefined import (
    PREDEFINED_NAMES,
    TypeDict,
    TypeDictC,
    TypeDictF,
    lookup_format,
    lookup_typecode,
)

globals().update({_n: getattr(_predefined, _n) for _n in PREDEFINED_NAMES})

__all__ = ["Datatype", "DATATYPE_NULL", "TypeDict", "TypeDictC", "TypeDictF", "lookup_format",
           "lookup_typecode", "PREDEFINED_NAMES", *PREDEFINED_NAMES]
