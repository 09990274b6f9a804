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

from . import _handles
from ._handles import Handle, Table, is_constant

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
#: The MPI ABI error class (MPI 5); MPICH 5 reports it as ERR_LASTCODE, as gpumpi does.
ERR_ABI = ERR_LASTCODE

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

# user-added error classes and codes (MPI_Add_error_class / _code / _string): one counter
# above ERR_LASTCODE, so the LASTUSEDCODE attribute is the last value handed out
_user_last = [ERR_LASTCODE]
_user_codes: dict[int, int] = {}  # user class or code -> its class


def last_used_code() -> int:
    """Value of the LASTUSEDCODE attribute: the last user error class or code added."""
    return _user_last[0]


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


def _new_user(errorclass: int | None) -> int:
    _user_last[0] += 1
    c = _user_last[0]
    _user_codes[c] = c if errorclass is None else errorclass
    _STRINGS[c] = ""
    return c


def Add_error_class() -> int:
    """Add a new error class (MPI_Add_error_class)."""
    return _new_user(None)


def Add_error_code(errorclass: int) -> int:
    """Add a new error code to an error class (MPI_Add_error_code)."""
    errorclass = int(errorclass)
    if errorclass not in _STRINGS or _user_codes.get(errorclass, errorclass) != errorclass:
        raise Exception(ERR_ARG, f"Add_error_code: not an error class ({errorclass})")
    return _new_user(errorclass)


def Add_error_string(errorcode: int, string: str) -> None:
    """Associate an error string with a user error code or class (MPI_Add_error_string)."""
    errorcode = int(errorcode)
    if errorcode not in _user_codes:
        raise Exception(ERR_ARG, f"Add_error_string: not a user error code or class ({errorcode})")
    _STRINGS[errorcode] = str(string)


def Remove_error_class(errorclass: int) -> None:
    """Remove a user error class (MPI_Remove_error_class); it must have no codes and no string."""
    c = int(errorclass)
    if _user_codes.get(c) != c:
        raise Exception(ERR_ARG, f"Remove_error_class: not a user error class ({c})")
    codes = [k for k, v in _user_codes.items() if v == c and k != c]
    if codes:
        raise Exception(ERR_ARG, f"Remove_error_class: class still has error codes ({c}, codes {codes})")
    if _STRINGS.get(c):
        raise Exception(ERR_ARG, f"Remove_error_class: class still has an error string ({c})")
    del _user_codes[c], _STRINGS[c]


def Remove_error_code(errorcode: int) -> None:
    """Remove a user error code (MPI_Remove_error_code); it must have no string."""
    c = int(errorcode)
    if c not in _user_codes or _user_codes[c] == c:
        raise Exception(ERR_ARG, f"Remove_error_code: not a user error code ({c})")
    if _STRINGS.get(c):
        raise Exception(ERR_ARG, f"Remove_error_code: code still has an error string ({c})")
    del _user_codes[c], _STRINGS[c]


def Remove_error_string(errorcode: int) -> None:
    """Remove the string of a user error class or code (MPI_Remove_error_string)."""
    c = int(errorcode)
    if c not in _user_codes:
        raise Exception(ERR_ARG, f"Remove_error_string: not a user error code or class ({c})")
    _STRINGS[c] = ""


class Exception(RuntimeError):  # noqa: A001 - the mpi4py name
    """Exception class (mpi4py ``MPI.Exception``), carrying an MPI error code."""

    def __init__(self, ierr: int = SUCCESS, message: str | None = None) -> None:
        ierr = int(ierr)
        self.ob_mpi = ERR_UNKNOWN if ierr < SUCCESS else ierr
        self._message = message
        super().__init__(self.ob_mpi)

    def __int__(self) -> int:
        return self.ob_mpi

    def __index__(self) -> int:
        return self.ob_mpi

    def __bool__(self) -> bool:
        return self.ob_mpi != SUCCESS

    # compares as its int, as mpi4py's (``exc == ERR_TRUNCATE``, ``SUCCESS <= exc``)
    def __eq__(self, other) -> bool:
        return self.ob_mpi == other

    def __ne__(self, other) -> bool:
        return self.ob_mpi != other

    def __lt__(self, other) -> bool:
        return self.ob_mpi < other

    def __le__(self, other) -> bool:
        return self.ob_mpi <= other

    def __gt__(self, other) -> bool:
        return self.ob_mpi > other

    def __ge__(self, other) -> bool:
        return self.ob_mpi >= other

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


#: mpi4py keeps 32 user error handler functions per object kind (comm, win, file, session)
MAX_USER_ERRHANDLERS = 32
_user_slots: dict[str, set] = {}


class Errhandler(Handle):
    """Error handler (MPI_Errhandler)."""

    __slots__ = ("_kind", "_fn", "_name", "_h", "_slot", "_family", "__weakref__")
    _hnull = 0x14000000
    _htable = Table("Errhandler", -0x6C000000)

    def __init__(self, errhandler: "Errhandler | None" = None) -> None:
        if errhandler is None:
            self._kind, self._fn, self._name, self._h, self._slot = "null", None, "ERRHANDLER_NULL", self._hnull, None
            self._family = None
        elif not isinstance(errhandler, Errhandler):
            raise TypeError(f"Errhandler: expecting an Errhandler (got {type(errhandler).__name__})")
        else:
            self._kind, self._fn, self._name = errhandler._kind, errhandler._fn, errhandler._name
            self._h, self._slot, self._family = errhandler._h, None, errhandler._family

    @classmethod
    def _make(cls, kind: str, fn=None, name: str = "", handle: int | None = None) -> "Errhandler":
        e = cls.__new__(cls)
        e._kind, e._fn, e._name, e._slot, e._family = kind, fn, name, None, None
        if handle is None:
            e._h = cls._htable.new()
            cls._htable.add(e)
        else:
            e._h = handle
        return e

    @classmethod
    def _user(cls, fn, family: str, call: str) -> "Errhandler":
        """A user error handler ``fn(obj, errorcode)`` for objects of ``family`` ("Comm", "Win"...)."""
        if not callable(fn):
            raise TypeError(f"{call}: expected a callable ({type(fn).__name__})")
        used = _user_slots.setdefault(family, set())
        free = [i for i in range(1, MAX_USER_ERRHANDLERS + 1) if i not in used]
        if not free:
            raise RuntimeError(f"{call}: cannot create too many user-defined error handlers "
                               f"({MAX_USER_ERRHANDLERS} for {family} objects)")
        e = cls._make("user", fn, getattr(fn, "__name__", "user"))
        used.add(free[0])
        e._slot = (family, free[0])
        e._family = family
        cls._htable.add(e)
        return e

    def _hval(self) -> int:
        return self._h

    def _hnullify(self) -> None:
        self._kind, self._fn, self._name, self._h, self._slot = "null", None, "ERRHANDLER_NULL", self._hnull, None
        self._family = None

    def __repr__(self) -> str:
        return f"<Errhandler {self._name or self._kind}>"

    def Free(self) -> None:
        """Free the error handler (MPI_Errhandler_free).

        This reference becomes ``ERRHANDLER_NULL``; objects that use the handler keep it.
        The module constants (``ERRORS_RETURN``...) stay as they are.
        """
        if self._kind == "null":
            raise error(ERR_ERRHANDLER, "Errhandler.Free: null error handler (ERRHANDLER_NULL)")
        if is_constant(self):
            return
        if self._slot is not None:
            family, i = self._slot
            _user_slots.get(family, set()).discard(i)
        self._hnullify()

    def _hfree(self) -> None:
        self.Free()

    def call(self, obj, code: int) -> None:
        """Invoke the handler for ``code`` on ``obj`` (MPI_*_call_errhandler): fatal
        handlers end the job, user handlers are called, ERRORS_RETURN does nothing."""
        kind = self._kind
        if kind in ("fatal", "abort"):
            _fatal(Exception(code))
        elif kind == "user" and self._fn is not None:
            self._fn(obj, code)

    def _apply(self, obj, exc: Exception) -> None:
        """Apply this handler to ``exc`` raised in a call on ``obj``; raises unless fatal."""
        kind = self._kind
        if kind in ("fatal", "abort"):
            _fatal(exc)
        elif kind == "user" and self._fn is not None:
            self._fn(obj, exc.Get_error_code())
        raise exc


def _fatal(exc: Exception) -> None:
    hook = _abort_hook[0]
    msg = f"{exc.__class__.__name__}: {exc}"
    if hook is not None:
        hook(exc.Get_error_class() or 1, msg)
    else:  # pragma: no cover - no runtime yet
        sys.stderr.write(f"gpumpi: fatal error: {msg}\n")
        sys.stderr.flush()
        import os

        os._exit(exc.Get_error_class() or 1)


#: Null error handler (MPI_ERRHANDLER_NULL).
Errhandler._hbase = Errhandler
_handles._unknown_handle[0] = lambda message: Exception(ERR_ARG, message)
ERRHANDLER_NULL = Errhandler._htable.constant(Errhandler(), "ERRHANDLER_NULL")
#: Errors raise MPI.Exception in the caller (MPI_ERRORS_RETURN; mpi4py's default).
ERRORS_RETURN = Errhandler._htable.constant(
    Errhandler._make("return", name="ERRORS_RETURN", handle=0x54000001), "ERRORS_RETURN")
#: Errors end the job (MPI_ERRORS_ARE_FATAL).
ERRORS_ARE_FATAL = Errhandler._htable.constant(
    Errhandler._make("fatal", name="ERRORS_ARE_FATAL", handle=0x54000000), "ERRORS_ARE_FATAL")
#: Errors abort the processes of the object's group (MPI_ERRORS_ABORT).
ERRORS_ABORT = Errhandler._htable.constant(
    Errhandler._make("abort", name="ERRORS_ABORT", handle=0x54000003), "ERRORS_ABORT")
