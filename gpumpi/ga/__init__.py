"""Global Arrays on host and device memory: ga4py's procedural API (``from gpumpi import ga``).

An existing ga4py program runs with ``from gpumpi import ga`` in place of ``from ga4py
import ga``: the same function names, argument order and defaults, 0-based half-open
patches ``[lo, hi)``, integer handles, ``C_*`` type codes.  Importing this module imports
``gpumpi.MPI`` and initialises GA (collective over the world, like ga4py's import).
Arrays live in RMA windows, distributed by pure math (:mod:`gpumpi.ga._layout`);
:class:`GlobalArray` is the object face.  The modules, each building on those above it:

* :mod:`~gpumpi.ga.state`: type codes, the process-wide state, the group and array records;
* :mod:`~gpumpi.ga.groups`: processor groups, ``nodeid``/``nnodes``, nodes;
* :mod:`~gpumpi.ga.synchronization`: ``sync``, ``fence``, ``mask_sync``, lock words, mutexes;
* :mod:`~gpumpi.ga.handles`: describing, allocating and destroying arrays, ``terminate``;
* :mod:`~gpumpi.ga.inquiry`: what an array is and where its elements live;
* :mod:`~gpumpi.ga.buffers`: the caller's buffers, patch bounds, datatypes;
* :mod:`~gpumpi.ga.transfers`: the one-sided operations (``put``, ``get``, ``acc``, ...);
* :mod:`~gpumpi.ga.local_data`: ``access``/``release`` and the caller's block;
* :mod:`~gpumpi.ga.mirrored`: mirrored arrays and their merges;
* :mod:`~gpumpi.ga.unsupported`: GA calls gpumpi does not do, each with its reason;
* the collective operations: :mod:`~gpumpi.ga.ops_common` (what they share),
  :mod:`~gpumpi.ga.ops_elementwise`, :mod:`~gpumpi.ga.ops_reduce`, :mod:`~gpumpi.ga.ops_matrix`,
  :mod:`~gpumpi.ga.ops_vector`, :mod:`~gpumpi.ga.ops_gop`, :mod:`~gpumpi.ga.ops_ghosts`,
  :mod:`~gpumpi.ga.ops_print`; solvers in :mod:`gpumpi.ga._linalg`.

Device memory: ``set_memory_dev(g_a, "device")`` on a handle (or ``memory="device"`` on
:class:`GlobalArray`) puts the array on the GPU (CUDA IPC inside a node; the simulated device
under ``GPUMPI_DEVICE=sim``); ``access`` then returns a CuPy array.
"""

from __future__ import annotations

from .. import MPI  # noqa: F401  -- GA starts after MPI, as ga4py does
from .. import _runtime as _rt
from . import state
from .state import (  # noqa: F401
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
    WORLD_PROC_GROUP,
    GAError,
    dtype,
    error,
    get_debug,
    initialize,
    initialized,
    set_debug,
    wtime,
)
from .groups import (  # noqa: F401
    cluster_nnodes,
    cluster_nodeid,
    cluster_nprocs,
    cluster_proc_nodeid,
    cluster_procid,
    nnodes,
    nodeid,
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
)
from .synchronization import (  # noqa: F401
    create_mutexes,
    destroy_mutexes,
    fence,
    init_fence,
    lock,
    mask_sync,
    pgroup_sync,
    sync,
    unlock,
)
from .handles import (  # noqa: F401
    allocate,
    check_handle,
    create,
    create_ghosts,
    create_ghosts_irreg,
    create_handle,
    create_irreg,
    deallocate,
    destroy,
    duplicate,
    initialize_ltd,
    inquire_memory,
    memory_avail,
    memory_limited,
    set_array_name,
    set_chunk,
    set_data,
    set_ghosts,
    set_irreg_distr,
    set_memory_dev,
    set_memory_limit,
    set_pgroup,
    terminate,
    uses_ma,
    valid_handle,
)
from .inquiry import (  # noqa: F401
    compare_distr,
    distribution,
    get_pgroup,
    get_pgroup_size,
    get_proc_grid,
    ghost_widths,
    has_ghosts,
    inquire,
    inquire_dims,
    inquire_dtype,
    inquire_name,
    inquire_type,
    locate,
    locate_nnodes,
    locate_region,
    memory_kind,
    nblock,
    ndim,
    proc_topology,
)
from .transfers import (  # noqa: F401
    acc,
    gather,
    get,
    nbacc,
    nbget,
    nbput,
    nbtest,
    nbwait,
    periodic_acc,
    periodic_get,
    periodic_put,
    put,
    read_inc,
    scatter,
    scatter_acc,
    strided_acc,
    strided_get,
    strided_put,
)
from .local_data import (  # noqa: F401
    access,
    access_ghosts,
    release,
    release_ghosts,
    release_update,
    release_update_ghosts,
)
from .mirrored import (  # noqa: F401
    is_mirrored,
    merge_distr_patch,
    merge_mirrored,
)
from .stats import print_stats  # noqa: F401
from .unsupported import (  # noqa: F401
    access_block,
    access_block_grid,
    access_block_segment,
    access_ghost_element,
    deregister_type,
    get_block_info,
    print_file,
    register_dtype,
    register_type,
    release_block,
    release_block_grid,
    release_block_segment,
    release_ghost_element,
    release_update_block,
    release_update_block_grid,
    release_update_block_segment,
    release_update_ghost_element,
    set_block_cyclic,
    set_block_cyclic_proc_grid,
    set_restricted,
    set_restricted_range,
    total_blocks,
)
from .ops_elementwise import (  # noqa: F401
    abs_value,
    add,
    add_constant,
    copy,
    elem_divide,
    elem_maximum,
    elem_minimum,
    elem_multiply,
    fill,
    median,
    randomize,
    recip,
    scale,
    zero,
)
from .ops_reduce import (  # noqa: F401
    dot,
    norm1,
    norm_infinity,
    select_elem,
    select_elem_max,
    select_elem_min,
    step_max,
)
from .ops_matrix import (  # noqa: F401
    add_diagonal,
    gemm,
    get_diag,
    matmul_patch,
    scale_cols,
    scale_rows,
    set_diagonal,
    shift_diagoal,
    shift_diagonal,
    symmetrize,
    transpose,
    zero_diagonal,
)
from .ops_vector import (  # noqa: F401
    enum,
    pack,
    scan_add,
    scan_copy,
    unpack,
)
from .ops_gop import (  # noqa: F401
    brdcst,
    gop,
    gop_absmax,
    gop_absmin,
    gop_add,
    gop_max,
    gop_min,
    gop_multiply,
    pgroup_brdcst,
    pgroup_gop,
    pgroup_gop_absmax,
    pgroup_gop_absmin,
    pgroup_gop_add,
    pgroup_gop_max,
    pgroup_gop_min,
    pgroup_gop_multiply,
)
from .ops_ghosts import (  # noqa: F401
    update_ghost_dir,
    update_ghosts,
    update_ghosts_dir,
)
from .ops_print import (  # noqa: F401
    print_distribution,
    print_patch,
    print_stdout,
    summarize,
)

from ._linalg import diag, diag_reuse, diag_std, llt_solve, lu_solve, solve, spd_invert  # noqa: E402,F401
from ._object import GlobalArray  # noqa: E402,F401

zip = state.slices  # ga4py's name (it shadows the builtin there too)

_rt.on_init(state.after_init)
_rt.on_finalize(state.at_finalize)
initialize()
