"""Global Arrays state: GA's type codes, the process-wide state ``S``, the group and array records, start-up (L6).

Theory of operation
===================
State is per process (this module's ``S``): the live arrays (:class:`GAArray`, by handle), the
processor groups (:class:`GAGroup`, by handle), the default group, the fence depth, the mutexes,
the ``mask_sync`` flags, the nonblocking handles and the memory cap.  It is reset in a forked
rank when its runtime initialises (``_runtime.on_init``, :func:`after_init`).  ``terminate``
(:mod:`gpumpi.ga.handles`) destroys the live arrays collectively; at ``MPI.Finalize`` without it
the local state is only dropped (:func:`at_finalize`: a collective there could wait on a rank
that is leaving for another reason).

:func:`drop_state` replaces ``S`` by a new object, so the other modules read it as ``state.S``
at the time of use (``from . import state``), never as a name bound once by ``from .state
import S``.  :func:`started` is ``S``, initialising GA first if it is not yet: every entry point
that needs the world group goes through it.

An array record is its description (type, extents, chunk or irregular map, ghost widths,
group, memory kind: the ``set_*`` calls of :mod:`gpumpi.ga.handles`), then, once allocated, its
layout (:mod:`gpumpi.ga._layout`), window, the views of the members' memory mapped here, the
patch plans and ``read_inc`` targets remembered, and its accumulate lock.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "C_CHAR", "C_DBL", "C_DCPL", "C_FLOAT", "C_INT", "C_LDBL", "C_LDCPL", "C_LONG", "C_LONGLONG", "C_SCPL",
    "F_BYTE", "F_DBL", "F_DCPL", "F_INT", "F_LOG", "F_REAL", "F_SCPL",
    "INTEGER_DTYPES", "S", "TYPE_CODES", "WORLD_PROC_GROUP",
    "GAArray", "GAError", "GAGroup", "GAState",
    "after_init", "as_ints", "at_finalize", "drop_state", "dtype", "error", "get_debug", "initialize",
    "initialized", "mpi", "set_debug", "slices", "started", "wtime",
]

# --- types (GA's MT_* codes: tools/ma/macommon.h) ----------------------------------------------
C_CHAR, C_INT, C_LONG, C_FLOAT, C_DBL, C_LDBL, C_SCPL, C_DCPL, C_LDCPL = range(1000, 1009)
F_BYTE, F_INT, F_LOG, F_REAL, F_DBL, F_SCPL, F_DCPL, C_LONGLONG = range(1009, 1017)

_DTYPES = {
    C_CHAR: np.dtype(np.int8), C_INT: np.dtype(np.int32), C_LONG: np.dtype(np.int64),
    C_LONGLONG: np.dtype(np.int64), C_FLOAT: np.dtype(np.float32), C_DBL: np.dtype(np.float64),
    C_LDBL: np.dtype(np.longdouble), C_SCPL: np.dtype(np.complex64), C_DCPL: np.dtype(np.complex128),
    C_LDCPL: np.dtype(np.clongdouble), F_BYTE: np.dtype(np.int8), F_INT: np.dtype(np.int32),
    F_LOG: np.dtype(np.int32), F_REAL: np.dtype(np.float32), F_DBL: np.dtype(np.float64),
    F_SCPL: np.dtype(np.complex64), F_DCPL: np.dtype(np.complex128),
}
#: the code ``inquire_type`` reports for a dtype given as such (the C names first)
TYPE_CODES = {}
for _c in (C_CHAR, C_INT, C_LONG, C_FLOAT, C_DBL, C_LDBL, C_SCPL, C_DCPL, C_LDCPL):
    TYPE_CODES.setdefault(_DTYPES[_c], _c)
INTEGER_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))

WORLD_PROC_GROUP = -1


class GAError(RuntimeError):
    """A Global Arrays usage error that GA itself treats as fatal (``ga_error``): a destroyed or
    unknown handle, an access not released, a mutex locked twice, a fence never initialised."""


def dtype(gtype) -> np.dtype:
    """The NumPy dtype of a GA type code (ga4py ``ga.dtype``); a NumPy dtype passes through."""
    if isinstance(gtype, (int, np.integer)) and not isinstance(gtype, bool):
        try:
            return _DTYPES[int(gtype)]
        except KeyError:
            raise ValueError(f"dtype: unknown GA type ({gtype})") from None
    try:
        dt = np.dtype(gtype)
    except TypeError:
        raise TypeError(f"dtype: not a GA type or NumPy dtype ({gtype!r})") from None
    if dt not in TYPE_CODES:
        raise ValueError(f"dtype: no GA type for {dt}")
    return dt


# --- process-wide state ----------------------------------------------------------------------
class GAState:
    def __init__(self) -> None:
        self.initialized = False
        self.arrays: dict = {}
        self.next_handle = 1
        self.groups: dict = {}
        self.next_group = 1
        self.default = WORLD_PROC_GROUP
        self.fence_depth = 0
        self.fenced: set = set()
        self.mutexes = None
        self.mask = [True, True]  # sync at entry, at exit of the next collective operation
        self.nb: dict = {}
        self.next_nb = 1
        self.limit = 0  # bytes of array memory allowed (0: no limit)
        self.used = 0


S = GAState()


class GAGroup:
    """A processor group: its communicator (None in a process outside it) and its world ranks."""

    __slots__ = ("handle", "comm", "ranks")

    def __init__(self, handle: int, comm, ranks) -> None:
        self.handle, self.comm, self.ranks = handle, comm, tuple(ranks)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def me(self) -> int:
        return self.comm.Get_rank() if self.comm is not None else -1


_MPI = []


def mpi():
    if not _MPI:
        from .. import MPI

        _MPI.append(MPI)
    return _MPI[0]


def initialize() -> None:
    """Start GA in this process (GA_Initialize; ga4py calls it at import, as ``gpumpi.ga`` does).
    Collective over the world; idempotent."""
    if S.initialized:
        return
    MPI = mpi()
    world = MPI.COMM_WORLD.Dup()
    world.Set_name("gpumpi.ga world")
    S.groups[WORLD_PROC_GROUP] = GAGroup(WORLD_PROC_GROUP, world, range(world.Get_size()))
    S.initialized = True


def initialized() -> bool:
    """Whether GA is initialised in this process (GA_Initialized)."""
    return S.initialized


def drop_state() -> None:
    """Forget everything (no communication): a new world, or MPI finalizing without terminate."""
    global S
    S = GAState()


def after_init(engine) -> None:
    # a new world (a forked rank, or MPI initialised again): the old state describes nothing
    if S.initialized:
        drop_state()
        initialize()


def at_finalize(engine) -> None:
    drop_state()


def started() -> GAState:
    if not S.initialized:
        initialize()
    return S


# --- arrays -----------------------------------------------------------------------------------
class GAArray:
    """One global array: its description, then (once allocated) its window and views."""

    __slots__ = ("handle", "name", "gtype", "dtype", "dims", "chunk", "irreg", "ghosts", "group", "memory",
                 "layout", "win", "me", "views", "local", "mem", "accesses", "allocated", "plans", "acclock", "rinc",
                 "lockaddr", "lockkeep")

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.name = ""
        self.gtype = None
        self.dtype = None
        self.dims = None
        self.chunk = None
        self.irreg = None
        self.ghosts = None
        self.group = None
        self.memory = "host"
        self.layout = None
        self.win = None
        self.me = -1
        self.views = None
        self.local = None
        self.mem = None
        self.accesses = 0
        self.allocated = False
        self.plans = {}
        self.acclock = None
        self.rinc = {}
        self.lockaddr = None
        self.lockkeep = None

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def memshape(self, proc: int) -> tuple:
        """Extents of ``proc``'s window memory: its block plus the ghost layers."""
        if not self.layout.owns(proc):
            return (0,) * self.ndim
        return tuple(n + 2 * w for n, w in zip(self.layout.local_shape(proc), self.ghosts))


def as_ints(v, n: int | None, call: str, what: str) -> tuple:
    """``v`` (an integer, or a sequence or array of them) as a tuple of ints, ``n`` long if given."""
    tv = type(v)
    try:
        if tv is tuple or tv is list:
            t = tuple([x if type(x) is int else int(x) for x in v])
        elif tv is np.ndarray:
            t = tuple(int(x) for x in v.reshape(-1).tolist())
        elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            t = (int(v),)
        else:
            t = tuple(int(x) for x in np.asarray(v).reshape(-1).tolist())
    except (TypeError, ValueError):
        raise TypeError(f"{call}: {what} must be integers ({v!r})") from None
    if n is not None and len(t) != n:
        raise ValueError(f"{call}: {what} must have one entry per dimension ({list(t)}, {n} dimensions)")
    return t


# --- misc ---------------------------------------------------------------------------------------
def wtime() -> float:
    """Seconds from an arbitrary origin (GA_Wtime)."""
    return mpi().Wtime()


def error(message, code: int = 1) -> None:
    """Print ``message`` and abort the whole job with ``code`` (GA_Error)."""
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    mpi().COMM_WORLD.Abort(int(code)) if not message else _abort(str(message), int(code))


def _abort(message: str, code: int) -> None:
    import sys

    sys.stderr.write(f"GA error: {message}\n")
    sys.stderr.flush()
    mpi().COMM_WORLD.Abort(code)


def slices(lo, hi) -> tuple:
    """``(slice(l, h), ...)`` (ga4py ``zip``, which ``gpumpi.ga`` exports under that name).  A tuple:
    ga4py's list of slices is no NumPy index since NumPy 1.23, and every use of it in GA's own
    programs indexes an array with it."""
    return tuple(slice(int(l), int(h)) for l, h in zip(lo, hi))


_debug = [0]


def set_debug(debug) -> None:
    """GA_Set_debug."""
    _debug[0] = int(bool(debug))


def get_debug() -> int:
    """GA_Get_debug."""
    return _debug[0]
