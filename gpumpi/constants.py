"""MPI constants (L0): the integer values mpi4py exposes on MPICH, and the buffer sentinels.

Values match mpi4py 4.x built on MPICH so that code comparing against literal
numbers (rare, but it exists) behaves the same.  Error classes live in
:mod:`gpumpi.errors`.
"""

from __future__ import annotations


class _Sentinel(int):
    """An int-valued singleton with a readable repr (mpi4py's BottomType/InPlaceType)."""

    __slots__ = ()
    _names: dict = {}

    def __new__(cls, name: str, value: int):
        self = int.__new__(cls, value)
        _Sentinel._names[(cls, value)] = name
        return self

    def __repr__(self) -> str:
        return _Sentinel._names[(type(self), int(self))]

    __str__ = __repr__

    def __reduce__(self):
        return repr(self)  # pickled by name: gpumpi.constants.BOTTOM ...


class BottomType(_Sentinel):
    """Type of :data:`BOTTOM` (MPI_BOTTOM): the base of absolute addresses."""

    __slots__ = ()


class InPlaceType(_Sentinel):
    """Type of :data:`IN_PLACE` (MPI_IN_PLACE)."""

    __slots__ = ()


class BufferAutomaticType(_Sentinel):
    """Type of :data:`BUFFER_AUTOMATIC` (MPI_BUFFER_AUTOMATIC)."""

    __slots__ = ()


#: Absolute-address base for buffers (MPI_BOTTOM).
BOTTOM = BottomType("BOTTOM", 0)
#: In-place marker for collective send buffers (MPI_IN_PLACE).
IN_PLACE = InPlaceType("IN_PLACE", -1)
#: Automatic buffering for buffered sends (MPI_BUFFER_AUTOMATIC).
BUFFER_AUTOMATIC = BufferAutomaticType("BUFFER_AUTOMATIC", -2)


def _lookup_sentinel(name: str):
    return {"BOTTOM": BOTTOM, "IN_PLACE": IN_PLACE, "BUFFER_AUTOMATIC": BUFFER_AUTOMATIC}[name]


def is_bottom(obj) -> bool:
    """Return whether ``obj`` means BOTTOM (mpi4py's rule: ``None`` doubles as BOTTOM for a buffer)."""
    return obj is None or obj is BOTTOM


def is_in_place(obj) -> bool:
    """Return whether ``obj`` means IN_PLACE (mpi4py's rule: ``None`` doubles as IN_PLACE for a send buffer)."""
    return obj is None or obj is IN_PLACE


# --- integer constants (mpi4py on MPICH) -------------------------------------------------
ANY_SOURCE = -2
ANY_TAG = -1
APPNUM = 1681915917
BSEND_OVERHEAD = 96
CART = 2
COMBINER_CONTIGUOUS = 3
COMBINER_DARRAY = 14
COMBINER_DUP = 2
COMBINER_F90_COMPLEX = 16
COMBINER_F90_INTEGER = 17
COMBINER_F90_REAL = 15
COMBINER_HINDEXED = 9
COMBINER_HINDEXED_BLOCK = 19
COMBINER_HVECTOR = 6
COMBINER_INDEXED = 7
COMBINER_INDEXED_BLOCK = 10
COMBINER_NAMED = 1
COMBINER_RESIZED = 18
COMBINER_STRUCT = 12
COMBINER_SUBARRAY = 13
COMBINER_VALUE_INDEX = 20
COMBINER_VECTOR = 4
COMM_TYPE_HW_GUIDED = 2
COMM_TYPE_HW_UNGUIDED = 3
COMM_TYPE_RESOURCE_GUIDED = 4
COMM_TYPE_SHARED = 1
CONGRUENT = 1
DISPLACEMENT_CURRENT = -54278278
DISP_CUR = -54278278
DISTRIBUTE_BLOCK = 121
DISTRIBUTE_CYCLIC = 122
DISTRIBUTE_DFLT_DARG = -49767
DISTRIBUTE_NONE = 123
DIST_GRAPH = 3
F_ERROR = 4
F_SOURCE = 2
F_STATUS_SIZE = 5
F_TAG = 3
GRAPH = 1
IDENT = 0
IO = 1681915909
KEYVAL_INVALID = 603979776
LASTUSEDCODE = 1681915915
LOCK_EXCLUSIVE = 234
LOCK_SHARED = 235
MAX_DATAREP_STRING = 128
MAX_ERROR_STRING = 512
MAX_INFO_KEY = 255
MAX_INFO_VAL = 1024
MAX_LIBRARY_VERSION_STRING = 8192
MAX_OBJECT_NAME = 128
MAX_PORT_NAME = 1024
MAX_PROCESSOR_NAME = 128
MAX_PSET_NAME_LEN = 256
MAX_STRINGTAG_LEN = 256
MODE_APPEND = 128
MODE_CREATE = 1
MODE_DELETE_ON_CLOSE = 16
MODE_EXCL = 64
MODE_NOCHECK = 1024
MODE_NOPRECEDE = 8192
MODE_NOPUT = 4096
MODE_NOSTORE = 2048
MODE_NOSUCCEED = 16384
MODE_RDONLY = 2
MODE_RDWR = 8
MODE_SEQUENTIAL = 256
MODE_UNIQUE_OPEN = 32
MODE_WRONLY = 4
ORDER_C = 56
ORDER_F = 57
ORDER_FORTRAN = 57
PROC_NULL = -1
ROOT = -3
SEEK_CUR = 602
SEEK_END = 604
SEEK_SET = 600
SIMILAR = 2
SUBVERSION = 1
SUCCESS = 0
TAG_UB = 1681915905
THREAD_FUNNELED = 1
THREAD_MULTIPLE = 3
THREAD_SERIALIZED = 2
THREAD_SINGLE = 0
TYPECLASS_COMPLEX = 3
TYPECLASS_INTEGER = 2
TYPECLASS_LOGICAL = 4
TYPECLASS_REAL = 1
UNDEFINED = -32766
UNEQUAL = 3
UNIVERSE_SIZE = 1681915913
VERSION = 4
WIN_BASE = 1711276033
WIN_CREATE_FLAVOR = 1711276039
WIN_DISP_UNIT = 1711276037
WIN_FLAVOR = 1711276039
WIN_FLAVOR_ALLOCATE = 2
WIN_FLAVOR_CREATE = 1
WIN_FLAVOR_DYNAMIC = 3
WIN_FLAVOR_SHARED = 4
WIN_MODEL = 1711276041
WIN_SEPARATE = 1
WIN_SIZE = 1711276035
WIN_UNIFIED = 2
WTIME_IS_GLOBAL = 1681915911
#: Largest tag value this library accepts (the value of the TAG_UB attribute).
TAG_UB_VALUE = 536870911
#: Largest rank count a job may have.
MAX_RANKS = 4096
