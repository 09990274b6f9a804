"""The atomics' operation table (L3): each operation's code and the element types it takes, host and device.

Theory of operation
===================
The host instructions (:mod:`gpumpi.kernels.atomics.host`) and the device kernels
(:mod:`gpumpi.kernels.atomics.device`) serve the same twelve MPI operations on the same
element types, so the table they share lives here, apart from both: :data:`OPS` numbers the
operations (the host's compiled ``switch`` and the device kernels take these codes),
``KINDS`` says which element kinds MPI defines each operation for, and :func:`supported`
decides whether an element type has an atomic instruction for an operation at all:
1/2/4/8-byte ``bool`` and integers and 4/8-byte floats, native byte order.  ``bool`` is
handled as ``uint8`` holding 0/1 (``work_dtype``), where the logical and bitwise operations
agree.  The entry points check every call against this table first (``check_op``, whose
``ValueError`` names the call), so the compiled code never sees a type or an operation it
has no instruction for.  Pure NumPy: nothing here imports numba.
"""

from __future__ import annotations

import numpy as np

__all__ = ["OPS", "CODE", "KINDS", "UNSIGNED", "I8", "U8", "check_op", "elem_ok", "np_dtype", "supported", "work_dtype",
           "SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP"]

#: the operations, in the order of their codes in the compiled switch
OPS = ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP")
CODE = {name: i for i, name in enumerate(OPS)}
SUM, PROD, MAX, MIN, LAND, LOR, LXOR, BAND, BOR, BXOR, REPLACE, NO_OP = range(len(OPS))

U8 = np.dtype(np.uint8)
I8 = np.dtype(np.int64)
UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}

# which element kinds each operation takes ('b' bool, 'i' signed, 'u' unsigned, 'f' float)
KINDS = {"SUM": "iuf", "PROD": "iuf", "MAX": "iuf", "MIN": "iuf", "LAND": "biuf", "LOR": "biuf", "LXOR": "biuf",
          "BAND": "biu", "BOR": "biu", "BXOR": "biu", "REPLACE": "biuf", "NO_OP": "biuf"}


def np_dtype(dtype) -> np.dtype | None:
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


def elem_ok(dt: np.dtype) -> bool:
    """An element type the instructions handle: 1/2/4/8-byte bool or integer, 4/8-byte float, native order."""
    if dt.kind in "biu":
        ok = dt.itemsize in (1, 2, 4, 8)
    elif dt.kind == "f":
        ok = dt.itemsize in (4, 8)  # float16: no Numba arithmetic; long double: no atomic of its width
    else:
        return False
    return ok and dt.isnative and dt.fields is None


def supported(op: str, dtype) -> bool:
    """Whether :func:`accumulate` updates elements of NumPy ``dtype`` with ``op`` atomically.

    ``op`` is one of :data:`OPS`.  True for 1/2/4/8-byte ``bool`` and integers and 4/8-byte
    floats where MPI defines the operation for the kind (bitwise: integers and bool;
    arithmetic: integers and floats; logical, ``REPLACE``, ``NO_OP``: all of them).
    Complex, ``float16``, ``long double``, structured (pair) and non-native types: False
    (the caller takes a lock instead).
    """
    kinds = KINDS.get(op)
    dt = np_dtype(dtype)
    return kinds is not None and dt is not None and elem_ok(dt) and dt.kind in kinds


def work_dtype(dt: np.dtype) -> np.dtype:
    """The type the instructions see: ``bool`` as ``uint8``."""
    return U8 if dt.kind == "b" else dt


def check_op(call: str, op: str, dtype) -> np.dtype:
    dt = np_dtype(dtype)
    if op not in KINDS:
        raise ValueError(f"{call}: unknown operation ({op!r}; expected one of {', '.join(OPS)})")
    if dt is None or not supported(op, dt):
        raise ValueError(f"{call}: no atomic {op} for this element type ({dtype!r})")
    return dt
