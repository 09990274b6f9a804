"""Reduction operations (MPI_Op): the predefined operations, reductions to come (L5).

The predefined operations (``MAX``, ``SUM``, ... ``REPLACE``, ``NO_OP``) and
``OP_NULL`` exist with MPICH's handles, so programs that name them load and their
handles, comparison and pickling behave as in mpi4py.  Reducing with them
(``Reduce_local``, calling an op on two Python objects) and user-defined
operations (``Op.Create``) come with reductions (gpumpi issue 11): until then they
raise ``NotImplementedError``.
"""

from __future__ import annotations

from ._handles import Handle, Table
from .errors import ERR_OP, error

_NULL_H = 0x18000000
_REDUCTIONS = "reductions are not supported yet (gpumpi issue 11)"


class Op(Handle):
    """Reduction operation (MPI_Op)."""

    __slots__ = ("_h", "_name", "_commute", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("Op", -0x68000000)

    def __init__(self, op: "Op | None" = None) -> None:
        if op is None:
            self._h, self._name, self._commute = _NULL_H, "OP_NULL", False
        elif not isinstance(op, Op):
            raise TypeError(f"Op: expecting an Op (got {type(op).__name__})")
        else:
            self._h, self._name, self._commute = op._h, op._name, op._commute

    @classmethod
    def _predefined(cls, handle: int, name: str, commute: bool) -> "Op":
        op = cls.__new__(cls)
        op._h, op._name, op._commute = handle, name, commute
        return cls._htable.constant(op, name)

    def _hval(self) -> int:
        return self._h

    def _hnullify(self) -> None:
        self._h, self._name, self._commute = _NULL_H, "OP_NULL", False

    def __repr__(self) -> str:
        return f"<Op {self._name}>"

    def _check(self, call: str) -> None:
        if self._h == _NULL_H:
            raise error(ERR_OP, f"Op.{call}: invalid operation (OP_NULL)")

    @classmethod
    def Create(cls, function, commute: bool = False) -> "Op":
        """Create a user-defined reduction operation (MPI_Op_create); not supported yet."""
        raise NotImplementedError(f"Op.Create: user-defined operations: {_REDUCTIONS}")

    def Free(self) -> None:
        """Free a user-defined reduction operation (MPI_Op_free)."""
        self._check("Free")
        raise error(ERR_OP, f"Op.Free: cannot free a predefined operation ({self._name})")

    def Is_commutative(self) -> bool:
        """Whether the operation is commutative (MPI_Op_commutative)."""
        self._check("Is_commutative")
        return self._commute

    @property
    def is_commutative(self) -> bool:
        """Whether the operation is commutative (MPI_Op_commutative)."""
        return self.Is_commutative()

    @property
    def is_predefined(self) -> bool:
        """Whether the operation is predefined (every Op gpumpi can make is)."""
        return True

    def Reduce_local(self, inbuf, inoutbuf) -> None:
        """Apply the reduction to local buffers (MPI_Reduce_local); not supported yet."""
        self._check("Reduce_local")
        raise NotImplementedError(f"Op.Reduce_local: {_REDUCTIONS}")

    def __call__(self, x, y):
        self._check("__call__")
        raise NotImplementedError(f"Op.__call__ ({self._name}): {_REDUCTIONS}")


Op._hbase = Op
#: Null operation (MPI_OP_NULL).
OP_NULL = Op._htable.constant(Op(), "OP_NULL")
#: Maximum (MPI_MAX).
MAX = Op._predefined(0x58000001, "MAX", True)
#: Minimum (MPI_MIN).
MIN = Op._predefined(0x58000002, "MIN", True)
#: Sum (MPI_SUM).
SUM = Op._predefined(0x58000003, "SUM", True)
#: Product (MPI_PROD).
PROD = Op._predefined(0x58000004, "PROD", True)
#: Logical and (MPI_LAND).
LAND = Op._predefined(0x58000005, "LAND", True)
#: Bitwise and (MPI_BAND).
BAND = Op._predefined(0x58000006, "BAND", True)
#: Logical or (MPI_LOR).
LOR = Op._predefined(0x58000007, "LOR", True)
#: Bitwise or (MPI_BOR).
BOR = Op._predefined(0x58000008, "BOR", True)
#: Logical exclusive or (MPI_LXOR).
LXOR = Op._predefined(0x58000009, "LXOR", True)
#: Bitwise exclusive or (MPI_BXOR).
BXOR = Op._predefined(0x5800000A, "BXOR", True)
#: Minimum and its location (MPI_MINLOC).
MINLOC = Op._predefined(0x5800000B, "MINLOC", True)
#: Maximum and its location (MPI_MAXLOC).
MAXLOC = Op._predefined(0x5800000C, "MAXLOC", True)
#: Replace the target value (MPI_REPLACE, one-sided accumulate).
REPLACE = Op._predefined(0x5800000D, "REPLACE", False)
#: Leave the target value (MPI_NO_OP, one-sided accumulate).
NO_OP = Op._predefined(0x5800000E, "NO_OP", False)
