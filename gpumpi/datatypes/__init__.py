"""MPI datatypes (L1 pure core): the :class:`Datatype` class, every predefined type, typecode maps,
absolute-address helpers.

``gpumpi.datatypes`` imports no NumPy; ``Datatype.np`` imports it on first use.  The
memory operations (``Pack``/``Unpack``, external32, ``Get_address``) come from
``gpumpi.datatypes.plan`` (L2), which the MPI facade imports; ``constructors`` and
``flatten`` hold the type algebra, ``numpy_dtype`` the NumPy conversions.
"""

from . import predefined as _predefined
from ._core import DATATYPE_NULL, Datatype, typealign, typecode
from .address import Aint_add, Aint_diff, Get_address
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
           "lookup_typecode", "PREDEFINED_NAMES", "Get_address", "Aint_add", "Aint_diff", *PREDEFINED_NAMES]
