"""MPI error classes, ``MPI.Exception`` and error handlers (L0).

Theory of operation
===================
Every failure a user can see is an :class:`Exception` (mpi4py's ``MPI.Exception``,
a ``RuntimeError``) carrying an MPI error class.  It compares equal to ints, and
``int(exc)`` gives its code, as in mpi4py.  Subclasses (``TruncateError``,
``ProcFailedError``...) keep the class so ``except MPI.Exception`` and int
comparison both work.  Messages follow ``"<call>: <problem> (<values>)"``.

Error handlers decide what an error does once raised inside a call on a
communicator: ``ERRORS_RETURN`` (the default, as mpi4py's ``rc.errors =
"exception"``) raises; ``ERRORS_ARE_FATAL`` and ``ERRORS_ABORT`` abort the job
with the error code; user handlers created with ``Comm.Create_errhandler`` are
called with ``(comm, code)`` and, if they return, the call raises.
The runtime plugs the job-abort function in with :func:`set_abort_hook`.
"""

from __future__ import annotations

import sys

SUCCESS = 0
ERR_ACCESS = 20
ERR_AMODE = 21
ERR_ARG = 12
ERR_ASSERT = 53
ERR_BAD_FILE = 22
ERR_BASE = 46
ERR_BUFFER = 1
ERR_COMM = 5
ERR_CONVERSION = 23
ERR_COUNT = 2
ERR_DIMS = 11
ERR_DISP = 52
ERR_DUP_DATAREP = 24
ERR_ERRHANDLER = 80
ERR_FILE = 27
ERR_FILE_EXISTS = 25
ERR_FILE_IN_USE = 26
ERR_GROUP = 8
ERR_INFO = 28
ERR_INFO_KEY = 29
ERR_INFO_NOKEY = 31
ERR_INFO_VALUE = 30
ERR_INTERN = 16
ERR_IN_STATUS = 17
ERR_IO = 32
ERR_KEYVAL = 48
ERR_LOCKTYPE = 47
ERR_NAME = 33
ERR_NOT_SAME = 35
ERR_NO_MEM = 34
ERR_NO_SPACE = 36
ERR_NO_SUCH_FILE = 37
ERR_OP = 9
ERR_OTHER = 15
ERR_PENDING = 18
ERR_PORT = 38
ERR_PROC_ABORTED = 76
ERR_QUOTA = 39
ERR_RANK = 6
ERR_READ_ONLY = 40
ERR_REQUEST = 19
ERR_RMA_ATTACH = 56
ERR_RMA_CONFLICT = 49
ERR_RMA_FLAVOR = 58
ERR_RMA_RANGE = 55
ERR_RMA_SHARED = 57
ERR_RMA_SYNC = 50
ERR_ROOT = 7
ERR_SERVICE = 41
ERR_SESSION = 75
ERR_SIZE = 51
ERR_SPAWN = 42
ERR_TAG = 4
ERR_TOPOLOGY = 10
ERR_TRUNCATE = 14
ERR_TYPE = 3
ERR_UNKNOWN = 13
ERR_UNSUPPORTED_DATAREP = 43
ERR_UNSUPPORTED_OPERATION = 44
ERR_VALUE_TOO_LARGE = 77
ERR_WIN = 45
# Fault tolerance (ULFM names without the X, as mpi4py exposes them) and timeouts.
ERR_PROC_FAILED = 101
ERR_PROC_FAILED_PENDING = 102
ERR_REVOKED = 103
ERR_TIMEOUT = 104
ERR_LASTCODE = 1073741823

_STRINGS = {
    SUCCESS: "No MPI error",
    ERR_BUFFER: "Invalid buffer pointer",
    ERR_COUNT: "Invalid count",
    ERR_TYPE: "Invalid datatype",
    ERR_TAG: "Invalid tag",
    ERR_COMM: "Invalid communicator",
    ERR_RANK: "Invalid rank",
    ERR_ROOT: "Invalid root",
    ERR_GROUP: "Invalid group",
    ERR_OP: "Invalid MPI_Op",
    ERR_TOPOLOGY: "Invalid topology",
    ERR_DIMS: "Invalid dimension argument",
    ERR_ARG: "Invalid argument",
    ERR_UNKNOWN: "Unknown error",
    ERR_TRUNCATE: "Message truncated",
    ERR_OTHER: "Other MPI error",
    ERR_INTERN: "Internal MPI error",
    ERR_IN_STATUS: "See the MPI_ERROR field in MPI_Status for the error code",
    ERR_PENDING: "Pending request (no error)",
    ERR_REQUEST: "Invalid MPI_Request",
    ERR_ACCESS: "Access denied to file",
    ERR_AMODE: "Invalid amode value in MPI_File_open",
    ERR_BAD_FILE: "Invalid file name",
    ERR_CONVERSION: "An error occurred in a user-defined data conversion function",
    ERR_DUP_DATAREP: "The requested datarep name has already been specified",
    ERR_FILE_EXISTS: "File exists",
    ERR_FILE_IN_USE: "File in use by some process",
    ERR_FILE: "Invalid MPI_File",
    ERR_INFO: "Invalid MPI_Info",
    ERR_INFO_KEY: "Invalid key for MPI_Info",
    ERR_INFO_VALUE: "Invalid MPI_Info value",
    ERR_INFO_NOKEY: "MPI_Info key is not defined",
    ERR_IO: "Other I/O error",
    ERR_NAME: "Invalid service name",
    ERR_NO_MEM: "Unable to allocate memory for MPI_Alloc_mem",
    ERR_NOT_SAME: "Inconsistent arguments to collective routine",
    ERR_NO_SPACE: "Not enough space for file",
    ERR_NO_SUCH_FILE: "File does not exist",
    ERR_PORT: "Invalid port",
    ERR_QUOTA: "Quota exceeded for files",
    ERR_READ_ONLY: "Read-only file or filesystem name",
    ERR_SERVICE: "Attempt to lookup an unknown service name",
    ERR_SPAWN: "Error in spawn call",
    ERR_UNSUPPORTED_DATAREP: "Unsupported datarep",
    ERR_UNSUPPORTED_OPERATION: "Unsupported operation",
    ERR_WIN: "Invalid MPI_Win",
    ERR_BASE: "Invalid base address",
    ERR_LOCKTYPE: "Invalid locktype argument",
    ERR_KEYVAL: "Invalid keyval",
    ERR_RMA_CONFLICT: "Conflicting accesses to window",
    ERR_RMA_SYNC: "Wrong synchronization of RMA calls",
    ERR_SIZE: "Invalid size argument in RMA call",
    ERR_DISP: "Invalid displacement argument in RMA call",
    ERR_ASSERT: "Invalid assert argument",
    ERR_RMA_RANGE: "Target memory is not contained within the window",
    ERR_RMA_ATTACH: "Memory cannot be attached",
    ERR_RMA_SHARED: "Memory cannot be shared",
    ERR_RMA_FLAVOR: "Incorrect window flavor",
    ERR_SESSION: "Invalid MPI_Session",
    ERR_PROC_ABORTED: "Communication with an aborted process",
    ERR_VALUE_TOO_LARGE: "Value too large",
    ERR_ERRHANDLER: "Invalid MPI_Errhandler",
    ERR_PROC_FAILED: "Process failed",
    ERR_PROC_FAILED_PENDING: "Process failed (pending wildcard operation)",
    ERR_REVOKED: "Communicator revoked",
    ERR_TIMEOUT: "Operation timed out",
}

# user-added error classes and codes (MPI_Add_error_class / _code / _string)
_user_next = [ERR_TIMEOUT + 1]
_user_codes: dict[int, int] = {}  # code -> class


def Get_error_class(errorcode: int) -> int:
    """Convert an error code into an error class (MPI_Error_class)."""
    code = int(errorcode)
    if code in _user_codes:
        return _user_codes[code]
    if code < 0 or (code not in _STRINGS and code < 1000):
        return ERR_UNKNOWN
    return code


def Get_error_string(errorcode: int) -> str:
    """Return the error string for an error code or class (MPI_Error_string)."""
    code = int(errorcode)
    if code in _STRINGS:
        return _STRINGS[code]
    return f"Unknown error class or code ({code})"


def Add_error_class() -> int:
    """Add a new error class (MPI_Add_error_class)."""
    c = _user_next[0]
    _user_next[0] += 1
    _user_codes[c] = c
    _STRINGS.setdefault(c, "")
    return c


def Add_error_code(errorclass: int) -> int:
    """Add a new error code to an error class (MPI_Add_error_code)."""
    errorclass = int(errorclass)
    if errorclass not in _STRINGS:
        raise Exception(ERR_ARG, f"Add_error_code: unknown error class ({errorclass})")
    c = _user_next[0]
    _user_next[0] += 1
    _user_codes[c] = errorclass
    _STRINGS.setdefault(c, "")
    return c


def Add_error_string(errorcode: int, string: str) -> None:
    """Associate an error string with a user error code or class (MPI_Add_error_string)."""
    errorcode = int(errorcode)
    if errorcode not in _user_codes:
        raise Exception(ERR_ARG, f"Add_error_string: not a user error code ({errorcode})")
    _STRINGS[errorcode] = str(string)


class Exception(RuntimeError):  # noqa: A001 - the mpi4py name
    """Exception class (mpi4py ``MPI.Exception``), carrying an MPI error code."""

    def __init__(self, ierr: int = SUCCESS, message: str | None = None) -> None:
        self.ob_mpi = int(ierr)
        self._message = message
        super().__init__(self.ob_mpi)

    def __int__(self) -> int:
        return self.ob_mpi

    def __index__(self) -> int:
        return self.ob_mpi

    def __bool__(self) -> bool:
        return self.ob_mpi != SUCCESS

    def __eq__(self, other) -> bool:
        if isinstance(other, Exception):
            return self.ob_mpi == other.ob_mpi
        if isinstance(other, (int, float)):
            return self.ob_mpi == other
        return NotImplemented

    def __ne__(self, other) -> bool:
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __hash__(self) -> int:
        return hash(self.ob_mpi)

    def __str__(self) -> str:
        if self._message:
            return self._message
        return Get_error_string(self.ob_mpi)

    def __repr__(self) -> str:
        return f"MPI.Exception({self.ob_mpi})"

    def __reduce__(self):
        return (_rebuild, (type(self), self.ob_mpi, self._message))

    def Get_error_code(self) -> int:
        """Error code (MPI error code)."""
        return self.ob_mpi

    def Get_error_class(self) -> int:
        """Error class (MPI_Error_class)."""
        return Get_error_class(self.ob_mpi)

    def Get_error_string(self) -> str:
        """Error string (MPI_Error_string), with the call's details when known."""
        return str(self)

    error_code = property(Get_error_code)
    error_class = property(Get_error_class)
    error_string = property(Get_error_string)


def _rebuild(cls, code, message):
    e = cls.__new__(cls)
    Exception.__init__(e, code, message)
    return e


class _ClassedError(Exception):
    error_cls = ERR_OTHER

    def __init__(self, message: str | None = None, ierr: int | None = None) -> None:
        super().__init__(self.error_cls if ierr is None else ierr, message)


class TruncateError(_ClassedError):
    """A received message is larger than the receive buffer (ERR_TRUNCATE)."""

    error_cls = ERR_TRUNCATE


class ProcFailedError(_ClassedError):
    """A peer process died (ERR_PROC_FAILED)."""

    error_cls = ERR_PROC_FAILED


class TimeoutError(_ClassedError):  # noqa: A001
    """A deadline passed before the operation completed (ERR_TIMEOUT)."""

    error_cls = ERR_TIMEOUT


def error(errclass: int, message: str) -> Exception:
    """Build the exception for an error class (the one constructor code in gpumpi uses)."""
    if errclass == ERR_TRUNCATE:
        return TruncateError(message)
    if errclass == ERR_PROC_FAILED:
        return ProcFailedError(message)
    if errclass == ERR_TIMEOUT:
        return TimeoutError(message)
    return Exception(errclass, message)


# --- error handlers -------------------------------------------------------------------

_abort_hook = [None]


def set_abort_hook(fn) -> None:
    """Runtime registers ``fn(code, message)`` that ends the job (used by fatal handlers)."""
    _abort_hook[0] = fn


class Errhandler:
    """Error handler (MPI_Errhandler)."""

    __slots__ = ("_kind", "_fn", "_name", "__weakref__")

    def __init__(self, errhandler: "Errhandler | None" = None) -> None:
        if errhandler is None:
            self._kind, self._fn, self._name = "null", None, "ERRHANDLER_NULL"
        else:
            self._kind, self._fn, self._name = errhandler._kind, errhandler._fn, errhandler._name

    @classmethod
    def _make(cls, kind: str, fn=None, name: str = "") -> "Errhandler":
        e = cls.__new__(cls)
        e._kind, e._fn, e._name = kind, fn, name
        return e

    def __eq__(self, other) -> bool:
        if not isinstance(other, Errhandler):
            return NotImplemented
        return self._kind == other._kind and self._fn is other._fn

    def __hash__(self) -> int:
        return hash((self._kind, id(self._fn)))

    def __bool__(self) -> bool:
        return self._kind != "null"

    def __repr__(self) -> str:
        return f"<Errhandler {self._name or self._kind}>"

    def Free(self) -> None:
        """Free the error handler (MPI_Errhandler_free); predefined handlers stay usable."""
        if self._kind == "user":
            self._kind, self._fn, self._name = "null", None, "ERRHANDLER_NULL"

    def handle(self, obj, exc: Exception) -> None:
        """Apply this handler to ``exc`` raised in a call on ``obj``; raises unless fatal."""
        kind = self._kind
        if kind in ("fatal", "abort"):
            hook = _abort_hook[0]
            msg = f"{exc.__class__.__name__}: {exc}"
            if hook is not None:
                hook(exc.Get_error_class() or 1, msg)
            else:  # pragma: no cover - no runtime yet
                sys.stderr.write(f"gpumpi: fatal error: {msg}\n")
                sys.stderr.flush()
                import os

                os._exit(exc.Get_error_class() or 1)
        elif kind == "user" and self._fn is not None:
            self._fn(obj, exc.Get_error_code())
        raise exc


ERRHANDLER_NULL = Errhandler()
ERRORS_RETURN = Errhandler._make("return", name="ERRORS_RETURN")
ERRORS_ARE_FATAL = Errhandler._make("fatal", name="ERRORS_ARE_FATAL")
ERRORS_ABORT = Errhandler._make("abort", name="ERRORS_ABORT")
