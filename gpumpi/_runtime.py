"""Process-wide runtime state: initialisation, the engine, Abort, Finalize (L5).

Theory of operation
===================
``init()`` reads the configuration once, attaches the job segment the launcher
left on ``GPUMPI_JOB_FD`` (or, with no launcher, makes a singleton world of one
rank), records this rank's pid there, lets peers read our memory by cross-memory
attach, and builds the :class:`~gpumpi._progress.Engine`.  Under the launcher it
also installs a ``sys.excepthook`` that prints an uncaught exception once,
prefixed with the rank, and registers ``faulthandler`` on SIGUSR1 so the launcher
can ask a stuck rank for its stack.

``finalize()`` (MPI_Finalize, and at exit for a rank that initialised) returns only
when this rank's part in every communication is done: every send has been received
-- sends whose request was freed and buffered sends included -- every receive in
progress has its data, and no frame waits for ring space, so nothing a peer will
still read is lost when the process exits (:meth:`Engine.finalize_step`).  A send
is given up only when its receiver can never take it: the receiver failed, or it
finalized without matching it.  Then the rank records in the job segment that it
finalized (the launcher tells that exit from an exit without ``Finalize``) and
closes the engine.
``abort(code)`` records the code in the job segment and ends the process at once;
the launcher then ends every other rank and exits with ``code``.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import signal
import sys
import threading

from . import _config
from .constants import THREAD_MULTIPLE
from .errors import set_abort_hook

ENGINE = None
SEG = None
_state = {"initialized": False, "finalized": False, "thread_level": THREAD_MULTIPLE, "main": None}
_init_hooks: list = []
_finalize_hooks: list = []
_lock = threading.Lock()


def on_init(fn) -> None:
    """Register ``fn(engine)`` to run after every initialisation (the MPI facade's worlds)."""
    _init_hooks.append(fn)


def on_finalize(fn) -> None:
    _finalize_hooks.append(fn)


def init(required: int = THREAD_MULTIPLE) -> None:
    """Initialise the runtime (MPI_Init_thread); idempotent."""
    global ENGINE, SEG
    with _lock:
        if _state["initialized"]:
            return
        from ._bootstrap import attach
        from ._progress import Engine

        world = attach(_config.get())
        cfg = world.cfg  # under an MPI launcher: with the rank and size mpi4py gave
        if cfg.launched or world.mpi is not None:
            _install_rank_hooks(cfg.rank, cfg.faulthandler)
        from ._compiled import apply
        from ._device import set_device_mode

        apply(cfg.compiled)
        set_device_mode(cfg.device)
        SEG = world.seg if world.mpi is None else None  # abort: the launcher's way (mpi: MPI_Abort)
        ENGINE = Engine(world)
        _state["initialized"] = True
        _state["finalized"] = False
        _state["thread_level"] = int(required) if int(required) <= THREAD_MULTIPLE else THREAD_MULTIPLE
        _state["main"] = threading.get_ident()
        set_abort_hook(abort)
        if world.mpi is not None:  # finalize before mpi4py finalizes MPI (its exit handler came later)
            atexit.unregister(_atexit)
            atexit.register(_atexit)
    for fn in _init_hooks:
        fn(ENGINE)


def ensure() -> None:
    if not _state["initialized"]:
        init()


def is_initialized() -> bool:
    return _state["initialized"] or _state["finalized"]


def is_finalized() -> bool:
    return _state["finalized"]


def thread_level() -> int:
    return _state["thread_level"]


def is_main_thread() -> bool:
    return threading.get_ident() == _state["main"]


def finalize() -> None:
    """Complete this rank's part in every communication, then stop (MPI_Finalize); idempotent.

    Waits for every pending send (freed requests and buffered sends included) to be
    received, unless its receiver failed or finalized without matching it; a failed
    peer never makes it hang (the launcher records failures in the job segment).
    """
    with _lock:
        eng = ENGINE
        if eng is None or _state["finalized"]:
            return
        for fn in _finalize_hooks:
            fn(eng)
        spins = 0
        while True:
            with eng.lock:
                done = eng.finalize_step()
            if done:
                break
            spins += 1
            eng.backoff(spins + 50)
        eng.finalized()
        _state["finalized"] = True
        _state["initialized"] = False


def reset_after_fork() -> None:
    """Forget state inherited from a parent process (a forked rank re-initialises).

    When the parent had initialised (``from gpumpi import MPI`` in a test module makes it a
    world of one), the child initialises again at once, as a rank of its job, so that
    ``COMM_WORLD`` and every handle imported before the fork describe the new world.
    """
    global ENGINE, SEG
    was = _state["initialized"]
    ENGINE = None
    SEG = None
    _state.update(initialized=False, finalized=False, main=None)
    if was:
        init()


def abort(code: int = 1, message: str | None = None) -> None:
    """End the whole job with ``code`` (MPI_Abort)."""
    code = int(code)
    if message:
        sys.stderr.write(f"gpumpi: {message}\n")
    seg = SEG
    if seg is not None:
        seg.request_abort(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        eng = ENGINE
        if eng is not None and eng.world.mpi is not None:  # under an MPI launcher: its abort ends the job
            eng.world.mpi[0].COMM_WORLD.Abort(code)
        os._exit(code & 0xFF)


def _install_rank_hooks(rank: int, dump_on_usr1: bool) -> None:
    prefix = f"[rank {rank}] "

    def hook(etype, value, tb):
        import traceback

        text = "".join(traceback.format_exception(etype, value, tb))
        sys.stderr.write("".join(prefix + line + "\n" for line in text.rstrip("\n").split("\n")))
        sys.stderr.flush()
        _state["skip_finalize"] = True
        eng = ENGINE
        if eng is not None and eng.world.mpi is not None:  # under an MPI launcher, MPI_Abort ends the job
            eng.world.mpi[0].COMM_WORLD.Abort(1)
        os._exit(1)  # gpumpirun ends the other ranks

    sys.excepthook = hook
    if not dump_on_usr1:
        return
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, RuntimeError, ValueError):
        return


def finalize_at_exit(yes: bool) -> None:
    """Whether the process finalises when Python exits (mpi4py ``rc.finalize``; default yes)."""
    _state["no_atexit"] = not yes


def _atexit() -> None:
    if _state["initialized"] and not _state.get("skip_finalize") and not _state.get("no_atexit"):
        finalize()


atexit.register(_atexit)


def node_of(world_rank: int) -> int:
    """The node (shared-memory domain) of a world rank, numbered from 0 in the order of the
    nodes' lowest ranks.  Every rank of a job started by gpumpirun, a singleton or
    ``run_ranks`` runs on node 0; under an MPI launcher the nodes are mpi4py's
    (``COMM_TYPE_SHARED``), or ``GPUMPI_SIM_NODES`` pretend ones."""
    eng = ENGINE
    return eng.world.node[world_rank] if eng is not None else 0


def query_gpu_support() -> dict:
    """What this process can do with device memory (gpumpi.query_gpu_support()).

    ``cuda``: a CUDA driver with at least one GPU is usable; ``gpus``: how many; ``adapter``:
    ``"cupy"`` (real device) or ``"sim"`` (simulated device memory); ``cupy``: importable;
    ``device_kinds``: memory kinds buffers may have; ``ipc``: device-to-device IPC within the
    node; ``cma``: cross-memory attach for host messages; ``transports``: host and device, in
    the order they are tried (``GPUMPI_TRANSPORTS``); ``staging``: the geometry of each rank's
    staging slab (``slots`` of ``slot_bytes``: ``GPUMPI_STAGE_SLOTS``, ``GPUMPI_STAGE_CHUNK``);
    ``engine``: who started the ranks -- ``"gpumpirun"``, ``"mpi"`` (an MPI launcher: ranks on
    other nodes through the MPI library, via mpi4py) or ``"singleton"``; ``nodes``: how many
    nodes the job's ranks are on; ``mpi``: under an MPI launcher, ``library`` (the MPI
    library's version line) and ``cuda_aware`` (whether device buffers go to it as they are;
    None until the runtime has asked it).
    """
    import importlib.util

    from . import _device
    from .ipc import cma

    driver = _device.cuda_driver() is not None and _device.device_mode() != "sim"
    has_cupy = importlib.util.find_spec("cupy") is not None
    gpus = 0
    if driver and has_cupy:
        gpus = _device.adapter().device_count()
    real = driver and has_cupy and gpus > 0
    cfg = _config.get()
    chosen = _config.parse_transports(cfg.transports)  # GPUMPI_TRANSPORTS
    slots, slot = ENGINE.world.stage if ENGINE is not None else (cfg.stage_slots, cfg.stage_chunk)  # the job's, once running
    return {
        "cuda": real,
        "gpus": gpus,
        "adapter": "cupy" if real else "sim",
        "cupy": has_cupy,
        "device_kinds": ["device", "sim"] if real else ["sim"],
        "ipc": True,
        "cma": cma.available(),
        "transports": {"host": list(chosen["host"]), "device": list(chosen["device"])},
        "staging": {"slots": slots, "slot_bytes": slot},
        **_engine_report(cfg),
    }


def _engine_report(cfg) -> dict:
    """The ``engine``, ``nodes`` and ``mpi`` entries of :func:`query_gpu_support`."""
    eng = ENGINE
    world = eng.world if eng is not None else None
    if world is not None and world.mpi is not None:
        M = world.mpi[0]
        dev = next((t for t in world.regions["device"] if t.name == "mpi"), None)
        lib = " ".join(M.Get_library_version().strip().splitlines()[0].split())
        return {"engine": "mpi", "nodes": len(set(world.node)),
                "mpi": {"library": lib, "cuda_aware": bool(dev.cuda) if dev is not None else None}}
    if cfg.launched or (world is not None and world.size > 1):
        return {"engine": "gpumpirun", "nodes": 1, "mpi": None}
    if cfg.under_mpi:  # not initialised yet: what the bootstrap will use
        return {"engine": "mpi", "nodes": None, "mpi": {"library": None, "cuda_aware": None}}
    return {"engine": "singleton", "nodes": 1, "mpi": None}
