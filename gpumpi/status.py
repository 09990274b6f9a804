"""Status of a completed receive or request (MPI_Status), pure (L1)."""

from __future__ import annotations

from array import array

from .constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from .errors import ERR_ARG, ERR_COUNT, ERR_TYPE, SUCCESS, error


def _byte():
    from .datatypes import BYTE

    return BYTE


#: MPICH's MPI_Status layout (F_STATUS_SIZE ints): count low bits, count high bits with the
#: cancelled flag in bit 0, then MPI_SOURCE, MPI_TAG, MPI_ERROR (F_SOURCE, F_TAG, F_ERROR)
_STATUS_INTS = 5


class Status:
    """Status object (MPI_Status): source, tag, error, received size, cancelled flag.

    The fields live in an ``array('i')`` laid out as MPICH's ``MPI_Status``, so
    ``tomemory()`` is a writable view of them and ``py2f()`` reads them."""

    __slots__ = ("_m", "__weakref__")

    def __init__(self, status: "Status | None" = None) -> None:
        if status is None:
            self._m = array("i", (0, 0, ANY_SOURCE, ANY_TAG, SUCCESS))
        elif not isinstance(status, Status):
            raise TypeError(f"Status: expecting a Status (got {type(status).__name__})")
        else:
            self._m = array("i", status._m)

    def _fill(self, source: int, tag: int, nbytes: int, err: int = SUCCESS, cancelled: bool = False) -> None:
        m = self._m
        m[0] = nbytes & 0xFFFFFFFF if nbytes < 0x80000000 else (nbytes & 0xFFFFFFFF) - (1 << 32)
        m[1] = ((nbytes >> 32) << 1) | (1 if cancelled else 0)
        m[2], m[3], m[4] = source, tag, err

    # --- the fields ---------------------------------------------------------------------
    @property
    def source(self) -> int:
        """Message source (MPI_SOURCE)."""
        return self._m[2]

    @source.setter
    def source(self, value: int) -> None:
        self._m[2] = value

    @property
    def tag(self) -> int:
        """Message tag (MPI_TAG)."""
        return self._m[3]

    @tag.setter
    def tag(self, value: int) -> None:
        self._m[3] = value

    @property
    def error(self) -> int:
        """Error code (MPI_ERROR)."""
        return self._m[4]

    @error.setter
    def error(self, value: int) -> None:
        self._m[4] = value

    @property
    def cancelled(self) -> bool:
        """Whether the request was cancelled (MPI_Test_cancelled)."""
        return bool(self._m[1] & 1)

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        m = self._m
        m[1] = (m[1] & ~1) | (1 if value else 0)

    @property
    def _nbytes(self) -> int:
        m = self._m
        return (m[0] & 0xFFFFFFFF) | ((m[1] >> 1) << 32)

    @_nbytes.setter
    def _nbytes(self, value: int) -> None:
        self._fill(self.source, self.tag, value, self.error, self.cancelled)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return self._m == other._m

    def __ne__(self, other) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return self._m != other._m

    __hash__ = None

    def __repr__(self) -> str:
        return f"<Status source={self.source} tag={self.tag} error={self.error} bytes={self._nbytes}>"

    def __reduce__(self):
        return (_new_status, (type(self),), self.__getstate__())

    def __getstate__(self) -> dict:
        return {"source": self.source, "tag": self.tag, "error": self.error,
                "count": self._nbytes, "cancelled": self.cancelled}

    def __setstate__(self, state: dict) -> None:
        self._m = array("i", (0, 0, ANY_SOURCE, ANY_TAG, SUCCESS))
        self._fill(int(state["source"]), int(state["tag"]), int(state.get("count", 0)),
                   int(state["error"]), bool(state.get("cancelled", False)))

    def tomemory(self) -> memoryview:
        """A writable view of the status as ints (MPI_Status memory, MPICH layout)."""
        return memoryview(self._m)

    def py2f(self) -> list[int]:
        """Fortran status (MPI_Status_c2f): F_STATUS_SIZE ints."""
        return list(self._m)

    @classmethod
    def f2py(cls, arg) -> "Status":
        """Status from a Fortran status (MPI_Status_f2c)."""
        vals = [int(v) for v in arg]
        if len(vals) < _STATUS_INTS:
            raise error(ERR_ARG, f"Status.f2py: expected {_STATUS_INTS} integers (got {len(vals)})")
        st = cls()
        st._m = array("i", vals[:_STATUS_INTS])
        return st

    def Get_source(self) -> int:
        """Message source (MPI_SOURCE)."""
        return self.source

    def Set_source(self, source: int) -> None:
        """Set the message source."""
        self.source = int(source)

    def Get_tag(self) -> int:
        """Message tag (MPI_TAG)."""
        return self.tag

    def Set_tag(self, tag: int) -> None:
        """Set the message tag."""
        self.tag = int(tag)

    def Get_error(self) -> int:
        """Error code (MPI_ERROR)."""
        return self.error

    def Set_error(self, error: int) -> None:
        """Set the error code."""
        self.error = int(error)

    def Get_count(self, datatype=None) -> int:
        """Number of received entries of ``datatype`` (MPI_Get_count); UNDEFINED if not whole."""
        dt = _byte() if datatype is None else datatype
        size = _dt_size(dt, "Status.Get_count")
        if size == 0:
            return 0 if self._nbytes == 0 else UNDEFINED
        q, r = divmod(self._nbytes, size)
        return UNDEFINED if r else q

    def Get_elements(self, datatype) -> int:
        """Number of received basic elements (MPI_Get_elements); UNDEFINED if not whole."""
        _dt_size(datatype, "Status.Get_elements")
        return _elements(datatype, self._nbytes, "Status.Get_elements")

    def Set_elements(self, datatype, count: int) -> None:
        """Set the number of received basic elements of ``datatype`` (MPI_Status_set_elements)."""
        count = int(count)
        if count < 0:
            raise error(ERR_COUNT, f"Status.Set_elements: negative count ({count})")
        size = _dt_size(datatype, "Status.Set_elements")
        hook = getattr(datatype, "_elements_bytes", None)
        if hook is not None:
            try:
                self._nbytes = hook(count) if size else 0
            except ValueError:
                raise error(ERR_ARG, f"Status.Set_elements: datatype has no elements ({datatype!r}, count {count})") from None
            if not size and count:
                raise error(ERR_ARG, f"Status.Set_elements: datatype has no elements ({datatype!r}, count {count})")
            return
        sizes = _basic_sizes(datatype, "Status.Set_elements") if size else ()
        if not sizes:
            if count:
                raise error(ERR_ARG, f"Status.Set_elements: datatype has no elements ({datatype!r}, count {count})")
            self._nbytes = 0
            return
        q, r = divmod(count, len(sizes))
        self._nbytes = q * size + sum(sizes[:r])

    def Is_cancelled(self) -> bool:
        """Whether the request was cancelled (MPI_Test_cancelled)."""
        return self.cancelled

    def Set_cancelled(self, flag: bool) -> None:
        """Set the cancelled flag (MPI_Status_set_cancelled)."""
        self.cancelled = bool(flag)

    @property
    def count(self) -> int:
        """Byte count (``Get_count()``)."""
        return self.Get_count()

    @count.setter
    def count(self, value: int) -> None:
        self.Set_elements(_byte(), value)


def _new_status(cls):
    return cls()


def _dt_size(dt, call: str) -> int:
    size = getattr(dt, "size", None)
    if size is None:
        raise TypeError(f"{call}: expected a Datatype ({type(dt).__name__})")
    try:
        return int(size)
    except Exception as e:  # a freed/null datatype raises MPI.Exception from .size
        raise error(ERR_TYPE, f"{call}: invalid datatype ({dt!r})") from e


#: basic element sizes of the pair types (MPI_MAXLOC/MINLOC types), in typemap order
_PAIRS = {"MPI_FLOAT_INT": (4, 4), "MPI_DOUBLE_INT": (8, 4), "MPI_LONG_INT": (8, 4), "MPI_2INT": (4, 4),
          "MPI_SHORT_INT": (2, 4), "MPI_LONG_DOUBLE_INT": (16, 4)}


def _basic_sizes(dt, call: str) -> tuple:
    """Sizes of the basic elements of one item of ``dt``, in typemap order."""
    hook = getattr(dt, "_element_sizes", None)
    if hook is not None:
        return hook()
    basic = dt.basic
    if basic is None:
        raise NotImplementedError(f"{call}: element counts of mixed-type derived datatypes are not supported yet ({dt!r})")
    one = _PAIRS.get(basic.Get_name(), (basic.size,)) if basic.size else ()
    return one * dt.nbasic


def _elements(dt, nbytes: int, call: str) -> int:
    size = dt.size
    if size == 0:
        return 0 if nbytes == 0 else UNDEFINED
    hook = getattr(dt, "_elements_in", None)
    if hook is not None:
        return hook(nbytes)
    sizes = _basic_sizes(dt, call)
    q, r = divmod(nbytes, size)
    n = q * len(sizes)
    for s in sizes:
        if r == 0:
            return n
        if r < s:
            return UNDEFINED
        r -= s
        n += 1
    return n if r == 0 else UNDEFINED
