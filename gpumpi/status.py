"""Status of a completed receive or request (MPI_Status), pure (L1)."""

from __future__ import annotations

from .constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from .errors import ERR_ARG, ERR_COUNT, ERR_TYPE, SUCCESS, error


def _byte():
    from .datatypes import BYTE

    return BYTE


class Status:
    """Status object (MPI_Status): source, tag, error, received size, cancelled flag."""

    __slots__ = ("source", "tag", "error", "_nbytes", "cancelled")

    def __init__(self, status: "Status | None" = None) -> None:
        if status is None:
            self.source, self.tag, self.error, self._nbytes, self.cancelled = ANY_SOURCE, ANY_TAG, SUCCESS, 0, False
        else:
            self.source, self.tag, self.error = status.source, status.tag, status.error
            self._nbytes, self.cancelled = status._nbytes, status.cancelled

    def _fill(self, source: int, tag: int, nbytes: int, err: int = SUCCESS, cancelled: bool = False) -> None:
        self.source, self.tag, self._nbytes, self.error, self.cancelled = source, tag, nbytes, err, cancelled

    def __eq__(self, other) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return (self.source, self.tag, self.error, self._nbytes, self.cancelled) == (
            other.source, other.tag, other.error, other._nbytes, other.cancelled)

    __hash__ = None

    def __repr__(self) -> str:
        return f"<Status source={self.source} tag={self.tag} error={self.error} bytes={self._nbytes}>"

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
