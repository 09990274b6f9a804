"""Global Arrays on host and device memory: ga4py's procedural API (``from gpumpi import ga``).

An existing ga4py program runs with ``from gpumpi import ga`` in place of ``from ga4py
import ga``: the same function names, argument order and defaults, 0-based half-open
patches ``[lo, hi)``, integer handles, ``C_*`` type codes.  Importing this module imports
``gpumpi.MPI`` and initialises GA (collective over the world, like ga4py's import).
Arrays live in RMA windows (:mod:`gpumpi.ga._core`), distributed by pure math
(:mod:`gpumpi.ga._layout`); collective operations on arrays are in :mod:`gpumpi.ga._ops`;
:class:`GlobalArray` is the object face.

Device memory: ``set_memory_dev(g_a, "device")`` on a handle (or ``memory="device"`` on
:class:`GlobalArray`) puts the array on the GPU (CUDA IPC inside a node; the simulated device
under ``GPUMPI_DEVICE=sim``); ``access`` then returns a CuPy array.
"""

from __future__ import annotations

from .. import MPI  # noqa: F401  -- GA starts after MPI, as ga4py does
from .. import _runtime as _rt
from . import _core
from ._core import (  # noqa: F401
    C_CHAR,
    C_DBL,
    C_DCPL,
    C_FLOAT,
    C_INT,
    C_LDBL,
    C_LDCPL,
    C_LONG,
    C_LONGLONG,
    C_SCPL,
    F_BYTE,
    F_DBL,
    F_DCPL,
    F_INT,
    F_LOG,
    F_REAL,
    F_SCPL,
    GAError,
    WORLD_PROC_GROUP,
    acc,
    access,
    access_ghosts,
    allocate,
    check_handle,
    cluster_nnodes,
    cluster_nodeid,
    cluster_nprocs,
    cluster_proc_nodeid,
    cluster_procid,
    compare_distr,
    create,
    create_ghosts,
    create_ghosts_irreg,
    create_handle,
    create_irreg,
    create_mutexes,
    deallocate,
    destroy,
    destroy_mutexes,
    distribution,
    dtype,
    duplicate,
    error,
    fence,
    gather,
    get,
    get_debug,
    get_pgroup,
    get_pgroup_size,
    get_proc_grid,
    ghost_widths,
    has_ghosts,
    init_fence,
    initialize,
    initialize_ltd,
    initialized,
    inquire,
    inquire_dims,
    inquire_dtype,
    inquire_memory,
    inquire_name,
    inquire_type,
    is_mirrored,
    locate,
    locate_nnodes,
    locate_region,
    lock,
    mask_sync,
    memory_avail,
    memory_kind,
    memory_limited,
    merge_distr_patch,
    merge_mirrored,
    nbacc,
    nbget,
    nblock,
    nbput,
    nbtest,
    nbwait,
    ndim,
    nnodes,
    nodeid,
    periodic_acc,
    periodic_get,
    periodic_put,
    pgroup_absolute_id,
    pgroup_create,
    pgroup_destroy,
    pgroup_get_default,
    pgroup_get_mirror,
    pgroup_get_world,
    pgroup_nnodes,
    pgroup_nodeid,
    pgroup_set_default,
    pgroup_split,
    pgroup_split_irreg,
    pgroup_sync,
    proc_topology,
    put,
    read_inc,
    release,
    release_ghosts,
    release_update,
    release_update_ghosts,
    scatter,
    scatter_acc,
    set_array_name,
    set_chunk,
    set_data,
    set_debug,
    set_ghosts,
    set_irreg_distr,
    set_memory_dev,
    set_memory_limit,
    set_pgroup,
    strided_acc,
    strided_get,
    strided_put,
    sync,
    terminate,
    unlock,
    uses_ma,
    valid_handle,
    wtime,
)

from ._object import GlobalArray  # noqa: E402,F401

zip = _core.slices  # ga4py's name (it shadows the builtin there too)

_rt.on_init(_core._after_init)
_rt.on_finalize(_core._at_finalize)
initialize()
