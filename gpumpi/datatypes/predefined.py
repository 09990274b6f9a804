"""Predefined datatypes and typecode maps (L1 pure core).

Theory of operation
===================
Every predefined datatype mpi4py exposes, with the layout, names, handles,
``typechar``/``typestr``/``tocode`` values and alignment that mpi4py 4.1 reports
on MPICH for x86-64 Linux (LP64, 16-byte ``long double``).  Aliases are the same
object, exactly where MPICH gives them the same handle (``FLOAT32_T is FLOAT``,
``TWOINT is INT_INT``...).  Types MPICH does not provide (``BFLOAT16_T``,
``COMPLEX4``, ``INTEGER16``, ``LOGICAL1``..``LOGICAL16``, ``REAL2``) are
``DATATYPE_NULL``, as they are in mpi4py on MPICH.

Pair types (``FLOAT_INT``...) have the C struct layout: ``DOUBLE_INT`` is a double
at 0 and an int at 8, size 12, extent 16; ``SHORT_INT`` has a two-byte hole.

``TypeDict`` is mpi4py's ``MPI._typedict`` key for key.  Two lookups build on it:

* :func:`lookup_typecode` maps a type string given by the user (``[buf, 'd']``,
  ``Datatype.fromcode``): ``TypeDict`` keys, plus NumPy-style strings with a
  native or "not applicable" byte-order prefix (``'<f8'``, ``'=i4'``, ``'|u1'``);
* :func:`lookup_format` maps the PEP 3118 format of a buffer the way mpi4py's
  ``getdatatype`` does: ``'B'`` is ``BYTE``, a ``'@'`` prefix and the native
  ``'<'``/``'>'`` prefix are stripped, the non-native one is a ``BufferError``.

Unknown codes raise ``KeyError("cannot map ... to MPI datatype")`` as mpi4py.

Three more named types exist only as ``MPI_Type_match_size`` results, as in MPICH:
``REAL2``, ``INTEGER16`` and ``COMPLEX4`` (:func:`lookup_name` finds them; the module
names stay ``DATATYPE_NULL`` as in mpi4py).  Every basic type also carries what the
type engine and external32 need: ``_yid``, its identity for MPICH's struct padding
rule (predefined types of one kind and size are one type there: ``INT`` and
``UNSIGNED``, ``LONG`` and ``INT64_T``...), and :data:`EXTERNAL32_SIZE`, its size in
the external32 representation (MPI-4 table 13.2: ``LONG`` and ``UNSIGNED_LONG`` are
4 bytes, ``WCHAR`` 2, everything else its native size; pair types are split into
their two parts wherever external32 applies).
"""

from __future__ import annotations

import sys

from ..constants import COMBINER_NAMED
from ._core import VALUE_INDEX, DATATYPE_NULL, Datatype

__all__ = ["DATATYPE_NULL", "TypeDict", "TypeDictC", "TypeDictF", "lookup_typecode", "lookup_format",
           "lookup_name", "PREDEFINED_NAMES", "EXTERNAL32_SIZE"]

_LITTLE = sys.byteorder == "little"
_NATIVE, _FOREIGN = ("<", ">") if _LITTLE else (">", "<")

# name, aliases, MPI name, handle, size, extent, true extent, typechar, typestr, tocode, align, numpy spec
_BASIC = [
    ("CHAR", (), "MPI_CHAR", 0x4C000101, 1, "c", "S1", "c", 1, "S1"),
    ("UNSIGNED_CHAR", (), "MPI_UNSIGNED_CHAR", 0x4C000102, 1, "B", "u1", "B", 1, "u1"),
    ("BYTE", (), "MPI_BYTE", 0x4C00010D, 1, "B", "u1", "B", 1, "u1"),
    ("PACKED", (), "MPI_PACKED", 0x4C00010F, 1, "B", "u1", "B", 1, "u1"),
    ("SIGNED_CHAR", (), "MPI_SIGNED_CHAR", 0x4C000118, 1, "b", "i1", "b", 1, "i1"),
    ("CHARACTER", (), "MPI_CHARACTER", 0x4C00011A, 1, "c", "S1", "c", 1, "S1"),
    ("INTEGER1", (), "MPI_INTEGER1", 0x4C00012D, 1, "b", "i1", "i1", 1, "i1"),
    ("CXX_BOOL", (), "MPI_CXX_BOOL", 0x4C000133, 1, "?", "b1", "?", 1, "b1"),
    ("INT8_T", ("SINT8_T",), "MPI_INT8_T", 0x4C000137, 1, "b", "i1", "i1", 1, "i1"),
    ("UINT8_T", (), "MPI_UINT8_T", 0x4C00013B, 1, "B", "u1", "u1", 1, "u1"),
    ("C_BOOL", ("BOOL",), "MPI_C_BOOL", 0x4C00013F, 1, "?", "b1", "b1", 1, "b1"),
    ("SHORT", ("SIGNED_SHORT",), "MPI_SHORT", 0x4C000203, 2, "h", "i2", "h", 2, "i2"),
    ("UNSIGNED_SHORT", (), "MPI_UNSIGNED_SHORT", 0x4C000204, 2, "H", "u2", "H", 2, "u2"),
    ("INTEGER2", (), "MPI_INTEGER2", 0x4C00022F, 2, "h", "i2", "i2", 2, "i2"),
    ("INT16_T", ("SINT16_T",), "MPI_INT16_T", 0x4C000238, 2, "h", "i2", "i2", 2, "i2"),
    ("UINT16_T", (), "MPI_UINT16_T", 0x4C00023C, 2, "H", "u2", "u2", 2, "u2"),
    ("FLOAT16_T", (), "MPIX_C_FLOAT16", 0x4C000246, 2, "e", "f2", "e", 2, "f2"),
    ("INT", ("SIGNED_INT",), "MPI_INT", 0x4C000405, 4, "i", "i4", "i", 4, "i4"),
    ("UNSIGNED", ("UNSIGNED_INT",), "MPI_UNSIGNED", 0x4C000406, 4, "I", "u4", "I", 4, "u4"),
    ("FLOAT", ("FLOAT32_T",), "MPI_FLOAT", 0x4C00040A, 4, "f", "f4", "f", 4, "f4"),
    ("WCHAR", (), "MPI_WCHAR", 0x4C00040E, 4, "U", "U1", "U", 4, "U1"),
    ("INTEGER", ("F_INT",), "MPI_INTEGER", 0x4C00041B, 4, "i", "i4", "i", 4, "i4"),
    ("REAL", ("F_FLOAT",), "MPI_REAL", 0x4C00041C, 4, "f", "f4", "f", 4, "f4"),
    ("LOGICAL", ("F_BOOL",), "MPI_LOGICAL", 0x4C00041D, 4, "i", "i4", "i", 4, "i4"),
    ("REAL4", (), "MPI_REAL4", 0x4C000427, 4, "f", "f4", "f4", 4, "f4"),
    ("INTEGER4", (), "MPI_INTEGER4", 0x4C000430, 4, "i", "i4", "i4", 4, "i4"),
    ("INT32_T", ("SINT32_T",), "MPI_INT32_T", 0x4C000439, 4, "i", "i4", "i4", 4, "i4"),
    ("UINT32_T", (), "MPI_UINT32_T", 0x4C00043D, 4, "I", "u4", "u4", 4, "u4"),
    ("LONG", ("SIGNED_LONG",), "MPI_LONG", 0x4C000807, 8, "l", "i8", "l", 8, "i8"),
    ("UNSIGNED_LONG", (), "MPI_UNSIGNED_LONG", 0x4C000808, 8, "L", "u8", "L", 8, "u8"),
    ("LONG_LONG", ("SIGNED_LONG_LONG",), "MPI_LONG_LONG_INT", 0x4C000809, 8, "q", "i8", "q", 8, "i8"),
    ("DOUBLE", ("FLOAT64_T",), "MPI_DOUBLE", 0x4C00080B, 8, "d", "f8", "d", 8, "f8"),
    ("UNSIGNED_LONG_LONG", (), "MPI_UNSIGNED_LONG_LONG", 0x4C000819, 8, "Q", "u8", "Q", 8, "u8"),
    ("COMPLEX", ("F_COMPLEX", "F_FLOAT_COMPLEX"), "MPI_COMPLEX", 0x4C00081E, 8, "F", "c8", "F", 4, "c8"),
    ("DOUBLE_PRECISION", ("F_DOUBLE",), "MPI_DOUBLE_PRECISION", 0x4C00081F, 8, "d", "f8", "d", 8, "f8"),
    ("COMPLEX8", (), "MPI_COMPLEX8", 0x4C000828, 8, "F", "c8", "c8", 4, "c8"),
    ("REAL8", (), "MPI_REAL8", 0x4C000829, 8, "d", "f8", "f8", 8, "f8"),
    ("INTEGER8", (), "MPI_INTEGER8", 0x4C000831, 8, "l", "i8", "i8", 8, "i8"),
    ("CXX_FLOAT_COMPLEX", (), "MPI_CXX_FLOAT_COMPLEX", 0x4C000834, 8, "F", "c8", "F", 4, "c8"),
    ("INT64_T", ("SINT64_T",), "MPI_INT64_T", 0x4C00083A, 8, "l", "i8", "i8", 8, "i8"),
    ("UINT64_T", (), "MPI_UINT64_T", 0x4C00083E, 8, "L", "u8", "u8", 8, "u8"),
    ("C_COMPLEX", ("C_FLOAT_COMPLEX",), "MPI_C_COMPLEX", 0x4C000840, 8, "F", "c8", "F", 4, "c8"),
    ("AINT", (), "MPI_AINT", 0x4C000843, 8, "p", "i8", "p", 8, "i8"),
    ("OFFSET", (), "MPI_OFFSET", 0x4C000844, 8, "p", "i8", "p", 8, "i8"),
    ("COUNT", (), "MPI_COUNT", 0x4C000845, 8, "p", "i8", "p", 8, "i8"),
    ("LONG_DOUBLE", (), "MPI_LONG_DOUBLE", 0x4C00100C, 16, "g", "f16", "g", 16, "g"),
    ("DOUBLE_COMPLEX", ("F_DOUBLE_COMPLEX",), "MPI_DOUBLE_COMPLEX", 0x4C001022, 16, "D", "c16", "D", 8, "c16"),
    ("COMPLEX16", (), "MPI_COMPLEX16", 0x4C00102A, 16, "D", "c16", "c16", 8, "c16"),
    ("REAL16", (), "MPI_REAL16", 0x4C00102B, 16, "g", "f16", "f16", 16, "g"),
    ("CXX_DOUBLE_COMPLEX", (), "MPI_CXX_DOUBLE_COMPLEX", 0x4C001035, 16, "D", "c16", "D", 8, "c16"),
    ("C_DOUBLE_COMPLEX", (), "MPI_C_DOUBLE_COMPLEX", 0x4C001041, 16, "D", "c16", "D", 8, "c16"),
    ("COMPLEX32", (), "MPI_COMPLEX32", 0x4C00202C, 32, "G", "c32", "c32", 16, "G"),
    ("CXX_LONG_DOUBLE_COMPLEX", (), "MPI_CXX_LONG_DOUBLE_COMPLEX", 0x4C002036, 32, "G", "c32", "G", 16, "G"),
    ("C_LONG_DOUBLE_COMPLEX", (), "MPI_C_LONG_DOUBLE_COMPLEX", 0x4C002042, 32, "G", "c32", "G", 16, "G"),
]

# name, aliases, MPI name, handle, size, extent, true extent, segments, align, value numpy spec, value type
_PAIRS = [
    ("FLOAT_INT", (), "MPI_FLOAT_INT", -0x74000000, 8, 8, 8, ((0, 8),), 4, "f4", "FLOAT"),
    ("DOUBLE_INT", (), "MPI_DOUBLE_INT", -0x73FFFFFF, 12, 16, 12, ((0, 12),), 8, "f8", "DOUBLE"),
    ("LONG_INT", (), "MPI_LONG_INT", -0x73FFFFFE, 12, 16, 12, ((0, 12),), 8, "i8", "LONG"),
    ("SHORT_INT", (), "MPI_SHORT_INT", -0x73FFFFFD, 6, 8, 8, ((0, 2), (4, 4)), 4, "i2", "SHORT"),
    ("LONG_DOUBLE_INT", (), "MPI_LONG_DOUBLE_INT", -0x73FFFFFC, 20, 32, 20, ((0, 20),), 16, "g", "LONG_DOUBLE"),
    ("INT_INT", ("TWOINT",), "MPI_2INT", 0x4C000816, 8, 8, 8, ((0, 8),), 4, "i4", "INT"),
]

#: Datatype names MPICH does not provide; mpi4py exposes them as DATATYPE_NULL.
_ABSENT = ("BFLOAT16_T", "COMPLEX4", "INTEGER16", "LOGICAL1", "LOGICAL2", "LOGICAL4", "LOGICAL8",
           "LOGICAL16", "REAL2")

_ns = globals()
#: Every predefined datatype name, in the order they are defined here (aliases included).
PREDEFINED_NAMES: list[str] = ["DATATYPE_NULL"]



def _yid(npspec: str, size: int) -> tuple:
    """Engine identity of a basic type: its kind (integer-like, float, complex) and size."""
    head = npspec[0]
    if head == "g":
        return ("f", size)
    if head in "cG":
        return ("c", size)
    if head == "f" and size != 2:  # MPICH's engine has no half float: FLOAT16 is a 2-byte integer there
        return ("f", size)
    return ("i", size)


#: handle -> size of one element in the external32 representation
EXTERNAL32_SIZE: dict[int, int] = {}
_EXT32_NARROW = {"LONG": 4, "UNSIGNED_LONG": 4, "WCHAR": 2}

for _name, _aliases, _mpi, _h, _size, _char, _str, _code, _align, _np in _BASIC:
    _dt = Datatype._make(
        handle=_h, name=_mpi, size=_size, lb=0, extent=_size, true_lb=0, true_extent=_size,
        segs=((0, _size),), combiner=COMBINER_NAMED, char=_char, typestr=_str, code=_code,
        align=_align, yid=_yid(_np, _size), nbasic=1, npspec=_np, committed=True,
    )
    EXTERNAL32_SIZE[_h] = _EXT32_NARROW.get(_name, _size)
    for _n in (_name, *_aliases):
        _ns[_n] = _dt
        PREDEFINED_NAMES.append(_n)

for _name, _aliases, _mpi, _h, _size, _ext, _text, _segs, _align, _np, _value in _PAIRS:
    _dt = Datatype._make(
        handle=_h, name=_mpi, size=_size, lb=0, extent=_ext, true_lb=0, true_extent=_text,
        segs=_segs, combiner=COMBINER_NAMED, align=_align, yid=("pair", _h), pair=(_ns[_value], _ns["INT"]),
        nbasic=1, npspec=(("f0", _np), ("f1", "i4")), committed=True,
    )
    VALUE_INDEX[(_ns[_value]._handle, _ns["INT"]._handle)] = _dt
    for _n in (_name, *_aliases):
        _ns[_n] = _dt
        PREDEFINED_NAMES.append(_n)

for _n in _ABSENT:
    _ns[_n] = DATATYPE_NULL
    PREDEFINED_NAMES.append(_n)

# name, MPI name, handle, size, align, numpy spec: MPICH types reachable only through Match_size
_HIDDEN_SPECS = [
    ("REAL2", "MPI_REAL2", 0x4C000226, 2, 2, "f2"),
    ("COMPLEX4", "MPI_COMPLEX4", 0x4C00042E, 4, 2, "V4"),
    ("INTEGER16", "MPI_INTEGER16", 0x4C001032, 16, 16, "V16"),
]
_HIDDEN: dict[str, Datatype] = {}
for _n, _mpi, _h, _size, _align, _np in _HIDDEN_SPECS:
    _HIDDEN[_n] = Datatype._make(
        handle=_h, name=_mpi, size=_size, lb=0, extent=_size, true_lb=0, true_extent=_size,
        segs=((0, _size),), combiner=COMBINER_NAMED, align=_align,
        yid=(("c" if _n.startswith("COMPLEX") else "i" if _n.startswith("INTEGER") else "f"), _size),
        nbasic=1, npspec=_np, committed=True,
    )
    EXTERNAL32_SIZE[_h] = _size

__all__ += PREDEFINED_NAMES
del _ns, _name, _aliases, _mpi, _h, _size, _char, _str, _code, _align, _np, _dt, _n
del _ext, _text, _segs, _value, _HIDDEN_SPECS


def _typedict(pairs: str) -> dict[str, Datatype]:
    g = globals()
    return {code: g[name] for code, name in (item.split(":") for item in pairs.split())}


#: mpi4py's ``MPI._typedict``: typecode (PEP 3118 / NumPy) -> predefined datatype.
TypeDict: dict[str, Datatype] = _typedict(
    "?:C_BOOL b:SIGNED_CHAR h:SHORT i:INT l:LONG q:LONG_LONG B:UNSIGNED_CHAR H:UNSIGNED_SHORT "
    "I:UNSIGNED L:UNSIGNED_LONG Q:UNSIGNED_LONG_LONG e:FLOAT16_T f:FLOAT d:DOUBLE g:LONG_DOUBLE "
    "Zf:C_COMPLEX Zd:C_DOUBLE_COMPLEX F:C_COMPLEX D:C_DOUBLE_COMPLEX Zg:C_LONG_DOUBLE_COMPLEX "
    "G:C_LONG_DOUBLE_COMPLEX i1:INT8_T i2:INT16_T i4:INT32_T i8:INT64_T f4:FLOAT f8:DOUBLE "
    "f16:LONG_DOUBLE c8:C_COMPLEX c16:C_DOUBLE_COMPLEX c32:C_LONG_DOUBLE_COMPLEX b1:C_BOOL "
    "u1:UINT8_T u2:UINT16_T u4:UINT32_T u8:UINT64_T f2:FLOAT16_T n:COUNT N:UNSIGNED_LONG "
    "p:AINT P:UNSIGNED_LONG c:CHAR a:CHAR S:CHAR S1:CHAR s:CHAR 1s:CHAR U:WCHAR U1:WCHAR "
    "u:UINT16_T 1u:UINT16_T w:WCHAR 1w:WCHAR M:INT64_T M8:INT64_T m:INT64_T m8:INT64_T"
)
#: mpi4py's ``MPI._typedict_c``: C typecodes.
TypeDictC: dict[str, Datatype] = _typedict(
    "?:C_BOOL b:SIGNED_CHAR h:SHORT i:INT l:LONG q:LONG_LONG B:UNSIGNED_CHAR H:UNSIGNED_SHORT "
    "I:UNSIGNED L:UNSIGNED_LONG Q:UNSIGNED_LONG_LONG f:FLOAT d:DOUBLE g:LONG_DOUBLE F:C_COMPLEX "
    "D:C_DOUBLE_COMPLEX G:C_LONG_DOUBLE_COMPLEX b1:C_BOOL i1:INT8_T i2:INT16_T i4:INT32_T "
    "i8:INT64_T u1:UINT8_T u2:UINT16_T u4:UINT32_T u8:UINT64_T f2:FLOAT16_T f4:FLOAT c8:C_COMPLEX "
    "f8:DOUBLE c16:C_DOUBLE_COMPLEX f16:LONG_DOUBLE c32:C_LONG_DOUBLE_COMPLEX"
)
#: mpi4py's ``MPI._typedict_f``: Fortran typecodes.
TypeDictF: dict[str, Datatype] = _typedict(
    "l:LOGICAL i:INTEGER r:REAL s:REAL d:DOUBLE_PRECISION c:COMPLEX z:DOUBLE_COMPLEX i1:INTEGER1 "
    "i2:INTEGER2 i4:INTEGER4 i8:INTEGER8 r4:REAL4 r8:REAL8 r16:REAL16 c8:COMPLEX8 c16:COMPLEX16 "
    "c32:COMPLEX32"
)


def lookup_name(name: str) -> Datatype:
    """The named datatype ``name`` (``"INT"``, ``"REAL2"``...), including MPICH's Match_size-only
    types; ``KeyError`` when there is none."""
    dt = _HIDDEN.get(name)
    if dt is None:
        dt = globals().get(name)
        if not isinstance(dt, Datatype) or not dt:
            raise KeyError(f"no named datatype {name!r}")
    return dt


def _prefix(call: str) -> str:
    return f"{call}: " if call else ""


def lookup_typecode(code: str, call: str = "") -> Datatype:
    """Map a user type string (``'d'``, ``'f8'``, ``'<f8'``, ``'|u1'``) to a predefined datatype.

    Raises ``KeyError("cannot map ... to MPI datatype")`` for anything else, and for
    NumPy-style strings with non-native byte order.
    """
    dt = TypeDict.get(code)
    if dt is not None:
        return dt
    if isinstance(code, str) and len(code) > 1 and code[0] in ("|", "=", "@", _NATIVE):
        dt = TypeDict.get(code[1:])
        if dt is not None:
            return dt
    raise KeyError(f"{_prefix(call)}cannot map {code!r} to MPI datatype")


def lookup_format(fmt: str, call: str = "") -> Datatype:
    """Map a buffer's PEP 3118 format to a predefined datatype (mpi4py ``getdatatype``).

    Raises ``BufferError`` for non-native byte order and ``KeyError`` for formats
    with no predefined datatype (structs, object pointers, multi-char strings...).
    """
    if fmt == "B":
        return BYTE  # noqa: F821 - defined by the table above
    head = fmt[:1]
    if head == "@" or head == _NATIVE:
        fmt = fmt[1:]
    elif head == _FOREIGN:
        raise BufferError(f"{_prefix(call)}format string {fmt!r} with non-native byte order")
    dt = TypeDict.get(fmt)
    if dt is None:
        raise KeyError(f"{_prefix(call)}cannot map {fmt!r} to MPI datatype")
    return dt
