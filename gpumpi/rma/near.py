"""The near path: one element or a few bytes to a locked target whose memory is mapped here (L5).

Theory of operation
===================
``st.near`` (the runtime's :attr:`gpumpi.rma.local.Window.near`) holds ``(base, disp_unit,
size)`` of every target that the open passive target epoch includes and whose window memory
this process maps (``Win.Allocate``, ``Allocate_shared``, ``Create`` on ``Alloc_mem`` memory;
kept by ``Window._admit`` whenever a lock epoch changes).  For such a target no epoch check
can fail and every operation completes when issued, so an operation whose arguments are the
simple kind (NumPy arrays, ``[array, T]`` with ``T`` the predefined type of the elements, int
rank and displacement, inside the window, aligned) is one call into machine code with int
arguments (:func:`gpumpi.kernels.atomics.fop_ndarray`, ``cas_ndarray``, ``acc_ndarray``,
``raw``), which also checks the arrays' headers and writes the fetched element into the
result array.  ``Flush_local`` to such a target returns at once and ``Flush`` is a memory
barrier.  Anything else, errors included, falls through to the general path of
:mod:`gpumpi.rma.win`, which checks and reports exactly as before.

``Win.Put``, ``Get``, ``Fetch_and_op``, ``Compare_and_swap`` and ``Flush`` make their first
checks inline (a call frame costs as much as the checks); the functions here do the rest and
fill the caches.  The caches are one object, :data:`NEAR` (a :class:`NearState`): per op and
type the compiled entry point (``fops``, ``accs``, ``cass``), per predefined type its NumPy
dtype (``nps``), the raw copy and fence (``raw``), and the last near ``Fetch_and_op`` and
``Compare_and_swap`` (``fop_last``, ``cas_last``): the next call with the same op, type and
target (the same tuple: a new epoch makes new ones) checks only its arrays and displacement.
The caches are keyed by the identity of module constants (immortal), so an id is never
reused; ``fop_last``/``cas_last`` hold what they name, so neither is theirs.
"""

from __future__ import annotations

import numpy as np

from .._arrays import DATATYPE_BY_DTYPE_ID
from .._handles import is_constant
from ..datatypes._core import PREDEFINED, Datatype
from ..errors import Exception as MPIException
from ..op import Op
from .local import atomics
from .origin import cas_dtype, check_acc_types

__all__ = ["NEAR", "NearState", "raw_ops", "spec", "np_near", "fop_near", "acc_near", "cas_near"]

_NDARRAY = np.ndarray
_NONE2 = (None, None)
_NOTHING = object()


class NearState:
    """The near path's caches, one object per process (:data:`NEAR`; see the module notes)."""

    __slots__ = ("fops", "accs", "cass", "nps", "raw", "fop_last", "cas_last")

    def __init__(self) -> None:
        #: (id(op), id(datatype)) -> (compiled fop_ndarray, op code, element size, dtype, align mask) or False
        self.fops: dict = {}
        #: (id(op), id(datatype)) -> (compiled acc_ndarray, op code, element size, dtype, align mask) or False
        self.accs: dict = {}
        #: id(datatype) -> (compiled cas_ndarray, element size, dtype, align mask) or False
        self.cass: dict = {}
        #: id(datatype) -> the NumPy dtype of a predefined type's elements, or False
        self.nps: dict = {}
        #: (move, fence): gpumpi.kernels.atomics.raw(), once needed (:func:`raw_ops`)
        self.raw: tuple | None = None
        #: the last near Fetch_and_op: (op, datatype, near target tuple, compiled fop_ndarray, op code,
        #: dtype, base, disp_unit, highest displacement)
        self.fop_last: tuple = (_NOTHING,) * 9
        #: the last near Compare_and_swap: (datatype, near target tuple, compiled cas_ndarray, dtype, base,
        #: disp_unit, highest displacement)
        self.cas_last: tuple = (_NOTHING,) * 7


#: The near path's state in this process.
NEAR = NearState()


def raw_ops() -> tuple:
    """``NEAR.raw``, ``(move, fence)``, filled on first use (which compiles)."""
    r = NEAR.raw
    if r is None:
        r = NEAR.raw = atomics().raw()
    return r


def spec(buf):
    """``(array, datatype)`` of a near-path buffer spec: an ndarray (and the datatype of its
    dtype, when known) or a 2-item ``[buffer, datatype]``, unchecked; ``(None, None)`` otherwise."""
    tp = type(buf)
    if tp is _NDARRAY:
        return buf, DATATYPE_BY_DTYPE_ID.get(id(buf.dtype))
    if (tp is list or tp is tuple) and len(buf) == 2:
        return buf
    return _NONE2


def np_near(T):
    """The NumPy dtype of the elements of ``T`` when it is a predefined module constant (never
    freed nor nullified), else False (cached in ``NEAR.nps`` for those constants)."""
    if not isinstance(T, Datatype) or PREDEFINED.get(T._handle) is not T:
        return False
    dt = False
    if T._basic is T:
        try:
            dt = np.dtype(T.np)
        except Exception:
            dt = False
    NEAR.nps[id(T)] = dt
    return dt


def _near_dtype(T):
    """:func:`np_near` through ``NEAR.nps``: the dtype, False (a predefined constant without
    one), or None (no predefined constant: nothing may be cached under its id)."""
    nps = NEAR.nps
    dt = nps.get(id(T))
    if dt is None:
        dt = np_near(T)
        if dt is False and id(T) not in nps:
            return None
    return dt


def _op_entry(cache: dict, op, T, call: str, maker: str, no_op: bool):
    """The near path's entry for an atomic ``op`` (``no_op``: NO_OP too) on elements of ``T``:
    ``(compiled atomics.<maker>, op code, element size, dtype, align mask)``, or False;
    remembered in ``cache`` under the two (immortal) objects' ids."""
    if not is_constant(op):
        return False
    dt = _near_dtype(T)
    if dt is None:
        return False  # not a predefined constant: nothing cached under its id
    e = False
    A = atomics()
    if (dt and dt.kind in "iuf" and isinstance(op, Op) and op._rec is None and (no_op or op._name != "NO_OP")
            and A.ndarray_layout() and A.supported(op._name, dt)):
        try:
            check_acc_types(T, T, op, call)  # MPI defines the op for the type
        except MPIException:
            pass
        else:
            fn, code, mask = getattr(A, maker)(op._name, dt)
            e = (fn, code, dt.itemsize, dt, mask)
    cache[(id(op), id(T))] = e
    return e


def _fop_entry(op, T):
    """The near path's entry for Fetch_and_op with ``op`` on elements of ``T`` (:func:`_op_entry`)."""
    return _op_entry(NEAR.fops, op, T, "Win.Fetch_and_op", "fop_ndarray", True)


def fop_near(t, o, r, disp, op, T) -> bool:
    """Fetch_and_op on the near path (target ``t`` of ``Window.near``), remembered in
    ``NEAR.fop_last`` for the next call; False (nothing done) where it does not apply."""
    e = NEAR.fops.get((id(op), id(T)))
    if e is None:
        e = _fop_entry(op, T)
    if not (e and type(o) is _NDARRAY is type(r) and o.dtype is e[3] is r.dtype):
        return False
    base, unit, size = t
    off = disp * unit
    if not (0 <= off <= size - e[2] and not (base + off) & e[4]) or e[0](base + off, id(o), id(r), e[1]):
        return False
    if not (base | unit) & e[4]:  # every displacement is aligned: the range is all there is to check
        NEAR.fop_last = (op, T, t, e[0], e[1], e[3], base, unit, (size - e[2]) // unit)
    return True


def _acc_entry(op, T):
    """The near path's entry for Accumulate with ``op`` on elements of ``T`` (:func:`_op_entry`;
    not ``NO_OP``, which Accumulate refuses: the general path raises)."""
    return _op_entry(NEAR.accs, op, T, "Win.Accumulate", "acc_ndarray", False)


def acc_near(t, origin, target, op) -> bool:
    """Accumulate on the near path (target ``t`` of ``Window.near``): the origin a contiguous
    array of the type's elements (bare, or ``[array, T]``) inside the window at ``target``
    (displacement units; None: 0), aligned; False (nothing done) where it does not apply."""
    a, T = spec(origin)
    if type(a) is not _NDARRAY:
        return False
    e = NEAR.accs.get((id(op), id(T)))
    if e is None:
        e = _acc_entry(op, T)
    if not e or a.dtype is not e[3]:
        return False
    n = a.size
    base, unit, size = t
    off = 0 if target is None else target * unit
    nb = n * e[2]
    if not 0 < nb or not 0 <= off <= size - nb or (base + off) & e[4]:
        return False
    return e[0](base + off, id(a), n, e[1]) == 0


def _cas_entry(T):
    """The near path's entry for Compare_and_swap on elements of ``T``: ``(compiled cas_ndarray,
    element size, dtype, align mask)``, or False."""
    dt = _near_dtype(T)
    if dt is None:
        return False  # not a predefined constant: nothing cached under its id
    e = False
    A = atomics()
    if dt and dt.kind in "iu" and A.ndarray_layout():
        try:
            cas_dtype(T, "Win.Compare_and_swap")
        except MPIException:
            pass
        else:
            fn, mask = A.cas_ndarray(dt)
            e = (fn, dt.itemsize, dt, mask)
    NEAR.cass[id(T)] = e
    return e


def cas_near(t, o, c, r, disp, T) -> bool:
    """Compare_and_swap on the near path, as :func:`fop_near` (remembered in ``NEAR.cas_last``)."""
    e = NEAR.cass.get(id(T))
    if e is None:
        e = _cas_entry(T)
    if not (e and type(o) is _NDARRAY is type(c) and type(r) is _NDARRAY and o.dtype is e[2] is c.dtype
            and r.dtype is e[2]):
        return False
    base, unit, size = t
    off = disp * unit
    if not (0 <= off <= size - e[1] and not (base + off) & e[3]) or e[0](base + off, id(o), id(c), id(r)):
        return False
    if not (base | unit) & e[3]:
        NEAR.cas_last = (T, t, e[0], e[2], base, unit, (size - e[1]) // unit)
    return True
