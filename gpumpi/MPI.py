"""Message Passing Interface: ``from gpumpi import MPI``, the mpi4py-compatible module (L5 facade).

Importing this module initialises the world, as importing ``mpi4py.MPI`` does:
under ``gpumpirun`` (or ``gpumpi.testing.run_ranks``) the rank joins its job;
run plainly (``python prog.py``) it is a world of one process.
"""

from __future__ import annotations

import ctypes as _ctypes
import mmap as _mmap
import operator as _operator
import os as _os
import socket as _socket
import time as _time

from . import _config as _cfg
from . import topology as _topology
from .topology import UNWEIGHTED, WEIGHTS_EMPTY  # noqa: F401
from . import _buffers as _bufs
from . import _runtime as _rt
from ._docs import embed_signatures as _embed_signatures
from ._version import __version__ as _version
from ._membuffer import buffer, memory  # noqa: F401
from ._p2p import Attach_buffer, Detach_buffer, Flush_buffer, Iflush_buffer  # noqa: F401
from .comm import (  # noqa: F401
    COMM_NULL,
    Cartcomm,
    Comm,
    Distgraphcomm,
    Graphcomm,
    Intercomm,
    Intracomm,
    Topocomm,
)
from .constants import *  # noqa: F401,F403
from .constants import BOTTOM, BUFFER_AUTOMATIC, IN_PLACE, BottomType, BufferAutomaticType, InPlaceType  # noqa: F401
from .constants import THREAD_FUNNELED, THREAD_MULTIPLE, THREAD_SERIALIZED, THREAD_SINGLE
from .datatypes import *  # noqa: F401,F403
from .datatypes import Datatype  # noqa: F401
from .datatypes import plan as _plan  # noqa: F401  (installs Pack/Unpack/Get_address host support)
from .datatypes import typealign as _typealign, typecode as _typecode  # noqa: F401  (mpi4py.util.dtlib uses them)
from .datatypes.predefined import TypeDict as _typedict, TypeDictC as _typedict_c, TypeDictF as _typedict_f  # noqa: F401
from .errors import *  # noqa: F401,F403
from .errors import (  # noqa: F401
    ERRHANDLER_NULL,
    ERRORS_ABORT,
    ERRORS_ARE_FATAL,
    ERRORS_RETURN,
    ERR_ARG,
    ERR_DIMS,
    ERR_NO_MEM,
    Errhandler,
    Exception,
    error as _error,
)
from .group import GROUP_EMPTY, GROUP_NULL, Group  # noqa: F401
from . import info as _info
from .info import INFO_ENV, INFO_NULL, Info  # noqa: F401
from .message import MESSAGE_NO_PROC, MESSAGE_NULL, Message  # noqa: F401
from .request import REQUEST_NULL, Grequest, Prequest, Request  # noqa: F401
from .status import Status  # noqa: F401
from .errors import Remove_error_class, Remove_error_code, Remove_error_string  # noqa: F401
from .file import FILE_NULL, File, Register_datarep  # noqa: F401
from .op import (  # noqa: F401
    BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM, Op,
)
from .session import SESSION_NULL, Session  # noqa: F401
from .rma import WIN_NULL, Win  # noqa: F401
from ._pickle import PICKLE as pickle, Pickle  # noqa: F401
from . import _commctx

#: The world communicator (MPI_COMM_WORLD).
COMM_WORLD = Comm._htable.constant(Intracomm(), "COMM_WORLD", 0x44000000)
#: This process alone (MPI_COMM_SELF).
COMM_SELF = Comm._htable.constant(Intracomm(), "COMM_SELF", 0x44000001)


def _environment(engine) -> dict:
    import platform
    import sys

    argv = list(sys.argv)
    return {"command": argv[0] if argv and argv[0] else sys.executable, "argv": " ".join(argv[1:]),
            "maxprocs": str(engine.size), "host": _socket.gethostname(), "arch": platform.machine(),
            "wdir": _os.getcwd(), "thread_level": "MPI_THREAD_MULTIPLE"}


def _setup_worlds(engine) -> None:
    _info.set_environment(_environment(engine))
    COMM_WORLD._setup(0, range(engine.size), engine.rank, "MPI_COMM_WORLD")
    COMM_SELF._setup(4, [engine.rank], engine.rank, "MPI_COMM_SELF")
    engine.next_ctx = 8
    _install_nvtx()


_rt.on_init(_setup_worlds)


def _load_pack_kernels() -> None:
    from .kernels import pack  # noqa: F401  (installs its host kernels into datatypes.plan)


# the first non-contiguous pack/unpack loads the kernels (numba), never `import gpumpi.MPI`
_plan.set_kernel_loader(_load_pack_kernels)


# --- environment ----------------------------------------------------------------------------------
def Init() -> None:
    """Initialise (MPI_Init).  Importing gpumpi.MPI already did; calling again is harmless."""
    _rt.init()


def Init_thread(required: int = THREAD_MULTIPLE) -> int:
    """Initialise with a thread level (MPI_Init_thread); returns the level provided: the one
    required (gpumpi supports up to THREAD_MULTIPLE), or the level of the first initialisation."""
    _rt.init(required)
    return _rt.thread_level()


def Finalize() -> None:
    """Finish: deliver pending outgoing frames and stop (MPI_Finalize)."""
    _rt.finalize()


def Is_initialized() -> bool:
    """Whether MPI has been initialised (MPI_Initialized)."""
    return _rt.is_initialized()


def Is_finalized() -> bool:
    """Whether MPI has been finalised (MPI_Finalized)."""
    return _rt.is_finalized()


def Query_thread() -> int:
    """The provided thread level (MPI_Query_thread)."""
    return _rt.thread_level()


def Is_thread_main() -> bool:
    """Whether the caller is the thread that initialised MPI (MPI_Is_thread_main)."""
    return _rt.is_main_thread()


def Wtime() -> float:
    """Elapsed wall-clock seconds from an arbitrary origin (MPI_Wtime)."""
    return _time.perf_counter()


def Wtick() -> float:
    """Resolution of Wtime in seconds (MPI_Wtick)."""
    return _time.get_clock_info("perf_counter").resolution


def Get_processor_name() -> str:
    """Name of this host (MPI_Get_processor_name)."""
    return _socket.gethostname()


def Get_version() -> tuple[int, int]:
    """MPI standard version whose API this library follows (MPI_Get_version)."""
    return (4, 1)


def Get_library_version() -> str:
    """Library version string (MPI_Get_library_version)."""
    return f"gpumpi {_version} (shared-memory rings, cross-memory attach; mpi4py-compatible API)"


def get_vendor() -> tuple[str, tuple[int, int, int]]:
    """Name and version of the MPI implementation (mpi4py ``get_vendor``)."""
    return ("gpumpi", tuple(int(p) for p in _version.split(".")[:3]))


def Get_hw_resource_info() -> Info:
    """Return the hardware resources available to this process (MPI_Get_hw_resource_info).

    gpumpi reports none (an empty info object), as MPI allows."""
    return Info.Create()


def Pcontrol(level: int) -> None:
    """Control profiling (MPI_Pcontrol); gpumpi's profiling is GPUMPI_PROFILE, so a no-op."""
    int(level)


def Compute_dims(nnodes: int, dims) -> list[int]:
    """Return a balanced distribution of processes per coordinate direction (MPI_Dims_create).

    ``dims`` is the number of dimensions or a sequence whose non-zero entries are kept
    (the balancing rule and the errors: :mod:`gpumpi.topology`).
    """
    nnodes = int(nnodes) if isinstance(nnodes, float) else _operator.index(nnodes)
    if _bufs.is_integral(dims):
        ndims = _operator.index(dims)
        dims = [0] * max(ndims, 0)
    else:
        ndims = len(dims)
    return _topology.compute_dims(nnodes, _topology.ints(dims, "Compute_dims", "dims", ndims))


def Abort(errorcode: int = 0) -> None:
    """Terminate the job (MPI_Abort on COMM_WORLD)."""
    _rt.abort(int(errorcode))


# --- mpi4py's private helpers of its pure-Python layers (mpi4py.util.pkl5, its tests) -------------
def _comm_lock(comm: Comm, key=None):
    """Create/get the communicator's lock for ``key`` (mpi4py ``MPI._comm_lock``)."""
    return _commctx.lock(comm, key)


def _comm_lock_table(comm: Comm) -> dict:
    """The communicator's internal lock table (mpi4py ``MPI._comm_lock_table``)."""
    return _commctx.lock_table(comm)


def _commctx_intra(comm: Intracomm):
    """Return ``(duplicate, tag)``: the intracommunicator's private duplicate and a fresh tag on it
    (mpi4py ``MPI._commctx_intra``; the duplicate is made collectively on first use)."""
    if comm.Is_inter():
        raise TypeError("_commctx_intra: expecting an intracommunicator")
    return _commctx.commctx_intra(comm)


def _commctx_inter(comm: Intercomm):
    """Return ``(duplicate, tag, localcomm, low_group)`` for an intercommunicator (mpi4py
    ``MPI._commctx_inter``; made collectively on first use, as mpi4py's)."""
    if not isinstance(comm, Intercomm):
        raise TypeError("_commctx_inter: expecting an intercommunicator")
    return _commctx.commctx_inter(comm)


# --- what real programs reach below the documented API (mpi4py's "private" names) -----------------
# ``_typedict`` (typecode -> predefined datatype, as mpi4py's on MPICH: NumPy-based libraries map
# ``array.dtype.char`` with it), ``_typedict_c`` and ``_typedict_f``: imported above
_HANDLE_CLASSES = (Datatype, Request, Message, Op, Group, Info, Errhandler, Comm, Win, File, Session)


def _sizeof(arg) -> int:
    """Size in bytes of the underlying MPI handle (mpi4py ``MPI._sizeof``) of an MPI object or
    class: 20 for a ``Status`` (its fields are laid out as MPICH's ``MPI_Status``), 4 for the
    handle classes (gpumpi's handle values, :func:`_handleof`, are MPICH's 32-bit integers)."""
    cls = arg if isinstance(arg, type) else type(arg)
    if issubclass(cls, Status):
        return 20
    if issubclass(cls, _HANDLE_CLASSES):
        return 4
    raise TypeError("expecting an MPI type or instance")


def _addressof(arg) -> int:
    """Memory address of the underlying MPI handle (mpi4py ``MPI._addressof``).

    A ``Status`` has its fields in memory, laid out as MPICH's ``MPI_Status``: their address.
    gpumpi keeps no C-level handle in memory for the other objects -- there is no C MPI
    library underneath for C code to hand them to -- so those raise ``NotImplementedError``
    at once, never giving C code a pointer it would misuse later."""
    if isinstance(arg, Status):
        return arg._m.buffer_info()[0]
    if isinstance(arg, _HANDLE_CLASSES):
        raise NotImplementedError(f"MPI._addressof: gpumpi keeps no C MPI handle in memory ({type(arg).__name__}): "
                                  f"it has no C API for C code or C extensions to use; run those on mpi4py with a C "
                                  f"MPI library")
    raise TypeError("expecting an MPI instance")


def _handleof(arg) -> int:
    """Unsigned integer value of the underlying MPI handle (mpi4py ``MPI._handleof``): gpumpi's
    handle value, the one ``py2f`` gives, unsigned (MPICH's value for the predefined objects; an index
    of gpumpi's for the others, meaningful to gpumpi only).  For a ``Status``, the address of its
    fields, as mpi4py 4.1's."""
    if isinstance(arg, Status):
        return arg._m.buffer_info()[0]
    if isinstance(arg, _HANDLE_CLASSES):
        return arg.py2f() & 0xFFFFFFFF  # py2f is Fortran's signed INTEGER; the handle is unsigned
    raise TypeError("expecting an MPI instance")


# --- memory ---------------------------------------------------------------------------------------
_allocs: dict = {}  # address -> (buffer, memfd), from Alloc_mem until Free_mem


def Alloc_mem(size: int, info=None) -> buffer:
    """Allocate shared memory (MPI_Alloc_mem): a writable :class:`buffer` over an anonymous shared map."""
    try:
        size = int(size)
    except (TypeError, ValueError):
        raise TypeError(f"Alloc_mem: size must be an integer ({size!r})") from None
    if size < 0:
        raise _error(ERR_ARG, f"Alloc_mem: negative size ({size})")
    from . import _memfd

    length = max(size, 1)
    try:
        fd = _memfd.create("gpumpi-mem", length)
        try:
            m = _mmap.mmap(fd, length, _mmap.MAP_SHARED, _mmap.PROT_READ | _mmap.PROT_WRITE)
        except BaseException:
            _os.close(fd)
            raise
    except OSError as e:
        raise _error(ERR_NO_MEM, f"Alloc_mem: cannot allocate {size} bytes ({e})") from None
    addr = _ctypes.addressof(_ctypes.c_char.from_buffer(m))
    buf = buffer._make(m, addr, size, False, "host", m)
    # the descriptor stays open until Free_mem: peers map this memory by it (Win.Create)
    _memfd.register(addr, length, fd)
    _allocs[addr] = (buf, fd)
    return buf


def Free_mem(mem) -> None:
    """Free memory from Alloc_mem (MPI_Free_mem): named, as MPI names it, by its base address --
    the buffer Alloc_mem returned or any ``MPI.buffer`` starting there (a window's ``tomemory()``:
    mpi4py's demos free that one).  Both are released (address 0); the mapping itself goes when
    nothing refers to its bytes any more (no view is left dangling)."""
    addr = mem.address if isinstance(mem, buffer) else None
    ent = _allocs.pop(addr, None) if addr else None
    if ent is None:
        raise _error(ERR_ARG, "Free_mem: memory was not allocated by Alloc_mem")
    from . import _memfd

    _memfd.unregister(addr)
    _os.close(ent[1])
    ent[0].release()
    mem.release()


# --- gpumpi extensions ----------------------------------------------------------------------------
def _gpumpi_init(device="auto") -> None:
    """Choose how device memory is handled, bind a GPU, initialise (``gpumpi.init(device="auto")``).

    ``"auto"``: with a CUDA driver and GPUs, rank ``local_rank % ngpus`` binds its GPU (CAI/DLPack
    pointers are classified by the driver); without, device-interface memory is simulated.
    ``"sim"``: always the simulated device (``GPUMPI_DEVICE=sim``).  ``"none"``: as ``"auto"``
    without binding.  An ``int``: bind that GPU.  Call before any communication.
    """
    from . import _device

    if isinstance(device, int) and not isinstance(device, bool):
        mode, ordinal = "auto", device
    elif device in ("auto", "sim", "none"):
        mode, ordinal = device, None
    else:
        raise ValueError(f"gpumpi.init: device must be 'auto', 'sim', 'none' or a GPU ordinal (got {device!r})")
    _device.set_device_mode(mode)
    if mode != "sim" and _device.cuda_driver() is not None:
        ad = _device.adapter()
        n = ad.device_count()
        if ordinal is not None:
            if not 0 <= ordinal < n:
                raise ValueError(f"gpumpi.init: no GPU {ordinal} (this node has {n})")
            ad.set_device(ordinal)
        elif mode == "auto" and n:
            ad.set_device(_cfg.get().local_rank % n)
    elif ordinal is not None:
        raise ValueError(f"gpumpi.init: no CUDA driver, so no GPU {ordinal} (device='sim' simulates one)")
    _rt.init()


_query_gpu_support = _rt.query_gpu_support


# --- NVTX ranges (only when a profiler is attached: zero cost otherwise) -----------------------------
_NVTX_WRAPPED = [False]


def _install_nvtx() -> None:
    if _NVTX_WRAPPED[0] or not _cfg.get().nvtx or "NVTX_INJECTION64_PATH" not in _os.environ:
        return
    try:
        import nvtx
    except ImportError:
        return
    import functools

    def wrap(cls, name):
        fn = cls.__dict__[name]
        if isinstance(fn, (staticmethod, classmethod, property)) or not callable(fn):
            return

        @functools.wraps(fn)
        def inner(*a, **k):
            with nvtx.annotate(f"MPI.{cls.__name__}.{name}", domain="gpumpi"):
                return fn(*a, **k)

        setattr(cls, name, inner)

    classes = []  # each class that defines calls, once: Comm gathers its faces (gpumpi.comm) as bases
    for c in (Comm, Intracomm, Request, Prequest, Message):
        classes += [k for k in c.__mro__ if k.__module__.startswith("gpumpi.") and k not in classes
                    and k.__name__ != "Handle"]
    for cls in classes:
        for name in list(cls.__dict__):
            if name[:1].isupper():
                wrap(cls, name)
    _NVTX_WRAPPED[0] = True


def _mpi4py_rc():
    """The ``mpi4py.rc`` of this process when gpumpi's mpi4py shim is in use (gpumpi._mpi4py), else None."""
    import sys

    mod = sys.modules.get("mpi4py")
    if mod is None or not getattr(mod, "__gpumpi__", False):
        return None
    return getattr(mod, "rc", None)


#: mpi4py.rc.thread_level values
_THREAD_LEVELS = {"single": THREAD_SINGLE, "funneled": THREAD_FUNNELED, "serialized": THREAD_SERIALIZED,
                  "multiple": THREAD_MULTIPLE}


#: the options mpi4py reads at import, in its order, with their defaults and the values each admits
_RC_OPTIONS = (
    ("initialize", True, (True, False, "yes", "no")),
    ("threads", True, (True, False, "yes", "no")),
    ("thread_level", "multiple", tuple(_THREAD_LEVELS)),
    ("finalize", None, (None, True, False, "yes", "no")),
    ("fast_reduce", True, (True, False, "yes", "no")),
    ("recv_mprobe", True, (True, False, "yes", "no")),
    ("irecv_bufsz", 32768, None),
    ("errors", "exception", ("exception", "default", "fatal", "abort")),
)
_rc: dict = {}  # the options as read at import (mpi4py reads them once, there)


def _rc_env(rc, name: str, default):
    """One option as mpi4py's import reads it: ``MPI4PY_RC_<NAME>`` wins over ``mpi4py.rc.<name>``
    and is written back to rc (digits become an int where the default is one, mpi4py's boolean
    words a bool, anything else lower-cased)."""
    raw = _os.environ.get("MPI4PY_RC_" + name.upper())
    if raw is None:
        return getattr(rc, name, default)
    word = raw.strip().lower()
    if type(default) is int and raw.strip(" \t").isdigit():
        value = int(raw)
    elif word in ("true", "yes", "on", "y", "1"):
        value = True
    elif word in ("false", "no", "off", "n", "0"):
        value = False
    else:
        value = raw.lower()
    try:
        setattr(rc, name, value)
    except Exception:  # mpi4py ignores an rc that refuses the value, so do we
        pass
    return value


def _read_rc(rc) -> dict:
    """Read mpi4py.rc and the MPI4PY_RC_* environment as importing mpi4py.MPI reads them: a value
    outside what an option admits warns ``mpi4py.rc.<name>: unexpected value <repr>`` (mpi4py's
    words) and leaves the default."""
    import warnings

    opts = {}
    for name, default, allowed in _RC_OPTIONS:
        value = _rc_env(rc, name, default)
        ok = (type(value) is int and value >= 0) if allowed is None else value in allowed
        if not ok:
            warnings.warn(f"mpi4py.rc.{name}: unexpected value {value!r}", RuntimeWarning, stacklevel=4)
            value = default
        opts[name] = {"yes": True, "no": False}.get(value, value) if isinstance(value, str) else value
    return opts


def _apply_rc(engine) -> None:
    """After every initialisation under the shim: ``mpi4py.rc.errors`` and ``rc.finalize``.

    ``errors``: ``"exception"`` (gpumpi's default, ERRORS_RETURN: calls raise),
    ``"default"`` (the MPI standard's default, ERRORS_ARE_FATAL, as on MPICH), ``"fatal"``
    (ERRORS_ARE_FATAL) or ``"abort"`` (ERRORS_ABORT), set on COMM_SELF and COMM_WORLD as
    mpi4py does.  ``finalize``: False leaves finalisation to the program (exiting without
    it then ends the job as an improper exit); None or True finalise at exit.
    """
    if not _rc:
        return
    handler = {"default": ERRORS_ARE_FATAL, "fatal": ERRORS_ARE_FATAL, "abort": ERRORS_ABORT}.get(_rc["errors"])
    if handler is not None:
        COMM_SELF.Set_errhandler(handler)
        COMM_WORLD.Set_errhandler(handler)
    _rt.finalize_at_exit(_rc["finalize"] is not False)


_rt.on_init(_apply_rc)


def _init_at_import() -> None:
    """Initialise as importing mpi4py.MPI does: under the mpi4py shim, as ``mpi4py.rc`` and the
    ``MPI4PY_RC_*`` environment say (``initialize``: whether to; ``threads`` and
    ``thread_level``: the level required); all eight options are read, and checked, here."""
    rc = _mpi4py_rc()
    if rc is None:
        _rt.init()
        return
    _rc.update(_read_rc(rc))
    if not _rc["initialize"]:
        return
    _rt.init(_THREAD_LEVELS[_rc["thread_level"]] if _rc["threads"] else THREAD_SINGLE)


# docstrings in mpi4py's form: the signature line first, then the description (see gpumpi._docs)
_embed_signatures(globals())

_init_at_import()
