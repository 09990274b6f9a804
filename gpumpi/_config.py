"""Every ``GPUMPI_*`` environment variable (and mpi4py's ``MPI4PY_PICKLE_*``), read once (L0).

Theory of operation
===================
Nothing else in gpumpi reads ``os.environ``: the runtime calls :func:`get` once at
initialisation and passes values down.  :func:`reload` re-reads the environment
(a forked test rank sets its own ``GPUMPI_*`` values before initialising).

Variables
---------
GPUMPI_RANK, GPUMPI_SIZE, GPUMPI_LOCAL_RANK, GPUMPI_LOCAL_SIZE
    Set by the launcher; absent for a singleton (a world of size 1).  Under an MPI launcher
    (``mpiexec``, ``srun``: found by ``PMI_RANK``, ``PMIX_RANK``, ``OMPI_COMM_WORLD_RANK`` or
    an ``srun`` step's ``SLURM_STEP_ID``) rank, size and nodes come from mpi4py instead.
GPUMPI_SIM_NODES      under an MPI launcher: group the ranks into this many pretend nodes
                      (contiguous blocks of ranks) instead of the real ones, so that ranks on
                      one machine talk through the ``mpi`` transport as if on other nodes
                      (default 0: the real nodes, ``COMM_TYPE_SHARED``).
GPUMPI_MPI_CHUNK      bytes per message of a large transfer through the ``mpi`` transport
                      (default 4 MiB; device data is staged through host buffers of this size).
GPUMPI_MPI_EAGER      the eager limit for ranks of other nodes: larger messages are pushed
                      ahead as one MPI message of their own (default 16384, at most the
                      eager limit; 0: every message is pushed).  Smaller is faster for
                      medium messages (no copy on either side) but such a send then waits
                      for its receive when the MPI library does not buffer it, as a
                      rendezvous does (MPICH's own Send of 16 KiB waits so, 40 in a row).
GPUMPI_MPI_CUDA       auto (default), 1 or 0: whether the MPI library takes device pointers
                      (auto: asks it, ``MPIX_Query_cuda_support``); 0 stages device data.
GPUMPI_JOB_ID         32 hex digits (128 random bits), set by the launcher.
GPUMPI_JOB_FD         file descriptor of the job segment (inherited from the launcher).
GPUMPI_LAUNCHER_PID   the launcher's pid; ranks exit when it dies.
GPUMPI_EAGER_LIMIT    bytes sent inline in the control ring (default 0: automatic, a quarter
                      of the ring, at most 64 KiB).
GPUMPI_RING_SIZE      bytes of each per-pair ring (default 0: automatic, 64 MiB spread over
                      the n*n rings of the job, between 64 KiB and 1 MiB each).
GPUMPI_SPLIT_MIN      rendezvous messages at least this large are copied by both sides at
                      once, each half by cross-memory attach (default 262144; 0 disables).
GPUMPI_CMA            1/0: use cross-memory attach for large host messages (default 1).
GPUMPI_TYPECHECK      0: do not check that a receive's basic type matches the message's (default
                      1: a message of f8 received as i4 fails with ERR_TYPE).
GPUMPI_CHUNK          bytes per chunk of the staged (no-CMA) pipeline (default 65536).
GPUMPI_DEBUG          1: extra checks.
GPUMPI_PROFILE        1: count calls, bytes and time per operation; summary at finalize.
GPUMPI_STAGE_CHUNK    bytes of each slot of a rank's device staging slab, the largest chunk of
                      the staging pipeline (default 8 MiB; a multiple of 4096).  A message is
                      cut into quarters of itself, between 64 KiB and one slot.
GPUMPI_STAGE_SLOTS    slots per rank's staging slab (default 4, at most 32): how many chunks a
                      rank can have in flight over all its staged messages.
GPUMPI_STREAM_MODE    safe (default): device operations are ordered after the producer's stream
                      with events, and completed receives are visible to the host and the
                      consumer's stream; none: no ordering (mpi4py on a CUDA-aware MPI: the user
                      synchronizes before sending).
GPUMPI_TRANSPORTS     transport choice per memory kind, in order of preference, e.g.
                      "device:staging" (every device message through host staging) or
                      "host:self+cma+mpi+shm,device:self+cuda_ipc+mpi+staging" (the default).
                      Kinds: host (self, cma, mpi, shm), device (self, cuda_ipc, mpi, staging);
                      the last of each is always kept as the last resort, and ``mpi`` (ranks
                      on other nodes only) always before it.
GPUMPI_DEVICE         auto (default), sim, or none.
GPUMPI_ASYNC_PROGRESS 1: start a progress thread.
GPUMPI_FASTPATH       auto (default), on or off: the compiled small-message path
                      (:mod:`gpumpi.ipc.fastring`); auto compiles it after 256 eligible calls,
                      so short programs never import numba for it.
GPUMPI_COMPILED       1 (default) or 0: run the compiled entry points (``_gpumpi_fast``, built by
                      ``pip install .`` where a C compiler is there) or their Python twins
                      (:mod:`gpumpi._compiled`).
GPUMPI_NVTX           0: disable NVTX ranges even when nvtx is importable (default 1).
GPUMPI_FAULTHANDLER   0: the rank does not register faulthandler on SIGUSR1 (test harnesses
                      that register their own dump file set this).

mpi4py's own variables, honoured as mpi4py does (``MPI.pickle``'s defaults):

MPI4PY_PICKLE_PROTOCOL  pickle protocol of object messages (default: the highest).
MPI4PY_PICKLE_THRESHOLD bytes from which ``Pickle.dumps_oob`` moves buffers out of band
                        (default 262144).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    job_id: str = ""
    job_fd: int = -1
    launcher_pid: int = 0
    eager_limit: int = 0
    ring_size: int = 0
    split_min: int = 262144
    cma: bool = True
    typecheck: bool = True
    chunk: int = 65536
    stage_chunk: int = 8 << 20
    stage_slots: int = 4
    debug: bool = False
    profile: bool = False
    stream_mode: str = "safe"
    transports: str = ""
    device: str = "auto"
    async_progress: bool = False
    fastpath: int = 256  # compiled small-message path: after this many eligible calls (0: at once, -1: never)
    compiled: bool = True  # the compiled entry points (gpumpi._compiled), where built
    nvtx: bool = True
    faulthandler: bool = True
    pickle_protocol: int | None = None
    pickle_threshold: int = 262144
    coll_algorithms: tuple = ()  # ((collective, algorithm), ...) from GPUMPI_COLL_ALGORITHM
    mpi_env: str = ""  # the MPI launcher's variable this process was started with ("": none)
    sim_nodes: int = 0
    mpi_chunk: int = 4 << 20
    mpi_eager: int = 16384
    mpi_cuda: str = "auto"

    @property
    def launched(self) -> bool:
        return self.job_fd >= 0

    @property
    def under_mpi(self) -> bool:
        """Started by an MPI launcher (and not by gpumpirun): the mpi4py bootstrap."""
        return not self.launched and bool(self.mpi_env)


#: variables an MPI launcher sets in every rank's environment (MPICH/Intel hydra, PMIx launchers,
#: Open MPI); an ``srun`` step is told by ``SLURM_STEP_ID`` (not the batch or extern step)
_MPI_ENV = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")
_SLURM_NOT_STEPS = ("4294967290", "4294967291", "4294967292", "4294967293", "4294967294", "4294967295",
                    "batch", "extern", "interactive")


def mpi_launcher(env) -> str:
    """The variable telling that an MPI launcher started this process ("" when none did)."""
    for name in _MPI_ENV:
        if env.get(name, "") != "":
            return name
    step = env.get("SLURM_STEP_ID", "")
    if step and step not in _SLURM_NOT_STEPS and env.get("SLURM_PROCID", "") != "":
        return "SLURM_STEP_ID"
    return ""


def _int(env, name: str, default: int) -> int:
    v = env.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v, 0)
    except ValueError:
        raise ValueError(f"gpumpi: environment variable {name} is not an integer ({v!r})") from None


def _fastpath(v: str) -> int:
    """``GPUMPI_FASTPATH``: ``auto`` (default: compile after 256 eligible small-message calls,
    so short programs never import numba), ``on``/``1`` (at once), ``off``/``0`` (never)."""
    v = (v or "auto").strip().lower()
    if v == "auto":
        return 256
    if v in ("1", "on", "true", "yes"):
        return 0
    if v in ("0", "off", "false", "no"):
        return -1
    raise ValueError(f"gpumpi: GPUMPI_FASTPATH must be auto, on or off ({v!r})")


def _bool(env, name: str, default: bool) -> bool:
    v = env.get(name)
    if v is None or v == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


STAGE_MAX_SLOTS = 32  # two cache lines per slot in a slab's 4 KiB control page (gpumpi.ipc.slab)


def check_stage(slots: int, slot_size: int) -> None:
    """ValueError unless ``slots`` slots of ``slot_size`` bytes make a usable staging slab."""
    if not 1 <= slots <= STAGE_MAX_SLOTS:
        raise ValueError(f"gpumpi: GPUMPI_STAGE_SLOTS must be between 1 and {STAGE_MAX_SLOTS} ({slots})")
    if slot_size < 4096 or slot_size % 4096:
        raise ValueError(f"gpumpi: GPUMPI_STAGE_CHUNK must be a multiple of 4096 bytes, at least 4096 ({slot_size})")


def _read(env) -> Config:
    size = _int(env, "GPUMPI_SIZE", 1)
    rank = _int(env, "GPUMPI_RANK", 0)
    mode = env.get("GPUMPI_STREAM_MODE", "safe").strip().lower() or "safe"
    if mode not in ("safe", "none"):
        raise ValueError(f"gpumpi: GPUMPI_STREAM_MODE must be 'safe' or 'none' ({mode!r})")
    transports = env.get("GPUMPI_TRANSPORTS", "")
    parse_transports(transports)  # a typo fails at start-up, not at the first device message
    stage_chunk = _int(env, "GPUMPI_STAGE_CHUNK", 8 << 20)
    stage_slots = _int(env, "GPUMPI_STAGE_SLOTS", 4)
    check_stage(stage_slots, stage_chunk)
    return Config(
        rank=rank,
        size=size,
        local_rank=_int(env, "GPUMPI_LOCAL_RANK", rank),
        local_size=_int(env, "GPUMPI_LOCAL_SIZE", size),
        job_id=env.get("GPUMPI_JOB_ID", ""),
        job_fd=_int(env, "GPUMPI_JOB_FD", -1),
        launcher_pid=_int(env, "GPUMPI_LAUNCHER_PID", 0),
        eager_limit=max(0, _int(env, "GPUMPI_EAGER_LIMIT", 0)),
        ring_size=max(0, _int(env, "GPUMPI_RING_SIZE", 0)),
        split_min=max(0, _int(env, "GPUMPI_SPLIT_MIN", 262144)),
        cma=_bool(env, "GPUMPI_CMA", True),
        typecheck=_bool(env, "GPUMPI_TYPECHECK", True),
        chunk=max(4096, _int(env, "GPUMPI_CHUNK", 65536)),
        stage_chunk=stage_chunk,
        stage_slots=stage_slots,
        debug=_bool(env, "GPUMPI_DEBUG", False),
        profile=_bool(env, "GPUMPI_PROFILE", False),
        stream_mode=mode,
        transports=transports,
        device=env.get("GPUMPI_DEVICE", "auto").strip().lower() or "auto",
        async_progress=_bool(env, "GPUMPI_ASYNC_PROGRESS", False),
        fastpath=_fastpath(env.get("GPUMPI_FASTPATH", "")),
        compiled=_bool(env, "GPUMPI_COMPILED", True),
        nvtx=_bool(env, "GPUMPI_NVTX", True),
        faulthandler=_bool(env, "GPUMPI_FAULTHANDLER", True),
        pickle_protocol=_int(env, "MPI4PY_PICKLE_PROTOCOL", 0) if env.get("MPI4PY_PICKLE_PROTOCOL") else None,
        pickle_threshold=_int(env, "MPI4PY_PICKLE_THRESHOLD", 262144),
        coll_algorithms=parse_coll_algorithms(env.get("GPUMPI_COLL_ALGORITHM", "")),
        mpi_env=mpi_launcher(env),
        sim_nodes=_sim_nodes(env),
        mpi_chunk=max(65536, _int(env, "GPUMPI_MPI_CHUNK", 4 << 20)),
        mpi_eager=max(0, _int(env, "GPUMPI_MPI_EAGER", 16384)),
        mpi_cuda=_mpi_cuda(env.get("GPUMPI_MPI_CUDA", "")),
    )


def _sim_nodes(env) -> int:
    k = _int(env, "GPUMPI_SIM_NODES", 0)
    if k < 0:
        raise ValueError(f"gpumpi: GPUMPI_SIM_NODES must be >= 0 ({k})")
    return k


def _mpi_cuda(v: str) -> str:
    v = (v or "auto").strip().lower()
    if v in ("1", "on", "yes", "true"):
        return "1"
    if v in ("0", "off", "no", "false"):
        return "0"
    if v == "auto":
        return v
    raise ValueError(f"gpumpi: GPUMPI_MPI_CUDA must be auto, 1 or 0 ({v!r})")


def parse_coll_algorithms(text: str) -> tuple:
    """``GPUMPI_COLL_ALGORITHM`` (``"allreduce:ring,bcast:binomial"``) as ``((coll, algorithm), ...)``.

    Forces the algorithm of those collectives on every call (the names are checked against
    ``gpumpi.collectives.select.ALGORITHMS`` when a collective first runs); every rank of a
    job must set the same value.
    """
    out = []
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        coll, sep, algo = item.partition(":")
        coll, algo = coll.strip().lower(), algo.strip().lower()
        if not sep or not coll or not algo:
            raise ValueError(f"gpumpi: GPUMPI_COLL_ALGORITHM items are collective:algorithm ({item!r})")
        out.append((coll, algo))
    return tuple(out)


#: the transports of each memory kind, in the default order of preference; the last of each
#: kind reaches every peer (it pushes the data), so every list ends with it
TRANSPORTS = {"host": ("self", "cma", "mpi", "shm"), "device": ("self", "cuda_ipc", "mpi", "staging")}
_LAST = {k: v[-1] for k, v in TRANSPORTS.items()}


def parse_transports(text: str) -> dict:
    """``GPUMPI_TRANSPORTS`` as ``{kind: names in order of preference}`` (defaults for kinds not named).

    ``"device:staging"`` gives ``{"host": ("self", "cma", "mpi", "shm"), "device": ("mpi",
    "staging")}``; names of one kind are joined by ``+`` (or given as repeated ``kind:name``
    items).  Each list ends with the transport that reaches every peer of the node (``shm``
    for host memory, ``staging`` for device memory), added if not named; ``mpi``, the only
    one that reaches ranks on other nodes (and reaches no rank of this node), is always
    kept, before it.
    """
    named: dict = {}
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        kind, sep, names = item.partition(":")
        kind = kind.strip().lower()
        if not sep or kind not in TRANSPORTS:
            raise ValueError(f"gpumpi: GPUMPI_TRANSPORTS items are kind:name with kind host or device ({item!r})")
        for name in names.split("+"):
            name = name.strip().lower()
            if name not in TRANSPORTS[kind]:
                raise ValueError(f"gpumpi: GPUMPI_TRANSPORTS: unknown {kind} transport {name!r} "
                                 f"(known: {', '.join(TRANSPORTS[kind])})")
            lst = named.setdefault(kind, [])
            if name not in lst:
                lst.append(name)
    out = {k: tuple(named.get(k) or v) for k, v in TRANSPORTS.items()}
    for k, last in _LAST.items():
        rest = [n for n in out[k] if n not in (last, "mpi")]
        out[k] = (*rest, "mpi", last)
    return out


_cached: list = [None]


def set_current(cfg: Config) -> None:
    """Make ``cfg`` the configuration :func:`get` returns (the MPI bootstrap's rank and size)."""
    _cached[0] = cfg


def get() -> Config:
    """The configuration, read from the environment on first use."""
    c = _cached[0]
    if c is None:
        c = _cached[0] = _read(os.environ)
    return c


def reload() -> Config:
    """Re-read the environment (a new rank process after fork)."""
    _cached[0] = None
    return get()
