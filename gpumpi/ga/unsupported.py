"""Global Arrays calls gpumpi does not support (GA 5 / ga4py P2): each raises ``NotImplementedError`` (L6).

Theory of operation
===================
ga4py programs that probe for these features get the names they import and a clear error
when they call one, never a silent approximation: every process owns at most one block (no
block-cyclic or tiled distributions), there are no restricted arrays (a processor group does
that), no user-registered element types, no per-element ghost access (``access_ghosts``
instead), no ``print_file``, no per-call statistics.
"""

from __future__ import annotations

__all__ = [
    "access_block",
    "access_block_grid",
    "access_block_segment",
    "access_ghost_element",
    "deregister_type",
    "get_block_info",
    "print_file",
    "register_dtype",
    "register_type",
    "release_block",
    "release_block_grid",
    "release_block_segment",
    "release_ghost_element",
    "release_update_block",
    "release_update_block_grid",
    "release_update_block_segment",
    "release_update_ghost_element",
    "set_block_cyclic",
    "set_block_cyclic_proc_grid",
    "set_restricted",
    "set_restricted_range",
    "total_blocks",
]


# --- what gpumpi's GA does not do (GA 5 / ga4py P2 features), each with its reason --------------
def _unsupported(name: str, why: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name}: {why}")

    fn.__name__ = name
    fn.__doc__ = f"Not supported: {why}"
    return fn


_BLOCKS = ("block-cyclic and tiled distributions (several blocks per process) are not supported; "
           "every process owns at most one block")
set_block_cyclic = _unsupported("set_block_cyclic", _BLOCKS)
set_block_cyclic_proc_grid = _unsupported("set_block_cyclic_proc_grid", _BLOCKS)
total_blocks = _unsupported("total_blocks", _BLOCKS)
get_block_info = _unsupported("get_block_info", _BLOCKS)
access_block = _unsupported("access_block", _BLOCKS)
access_block_grid = _unsupported("access_block_grid", _BLOCKS)
access_block_segment = _unsupported("access_block_segment", _BLOCKS)
release_block = _unsupported("release_block", _BLOCKS)
release_update_block = _unsupported("release_update_block", _BLOCKS)
release_block_grid = _unsupported("release_block_grid", _BLOCKS)
release_update_block_grid = _unsupported("release_update_block_grid", _BLOCKS)
release_block_segment = _unsupported("release_block_segment", _BLOCKS)
release_update_block_segment = _unsupported("release_update_block_segment", _BLOCKS)
_RESTRICTED = "restricted arrays are not supported; create the array on a processor group (pgroup_create) instead"
set_restricted = _unsupported("set_restricted", _RESTRICTED)
set_restricted_range = _unsupported("set_restricted_range", _RESTRICTED)
_TYPES = "user-registered element types are not supported; use one of the C_* types (NumPy dtypes)"
register_type = _unsupported("register_type", _TYPES)
register_dtype = _unsupported("register_dtype", _TYPES)
deregister_type = _unsupported("deregister_type", _TYPES)
access_ghost_element = _unsupported("access_ghost_element", "use access_ghosts(g_a) instead (as ga4py says)")
release_ghost_element = _unsupported("release_ghost_element", "use access_ghosts / release_ghosts instead")
release_update_ghost_element = _unsupported("release_update_ghost_element",
                                            "use access_ghosts / release_update_ghosts instead")
print_file = _unsupported("print_file", "as in ga4py; use print_patch, whose output goes to sys.stdout")
