"""Parallel files (MPI_File): names only, MPI-IO is not planned (L5).

``File`` exists with mpi4py's methods so that programs and test modules that name
it load; opening a file (``File.Open``) and ``File.Delete`` raise
``NotImplementedError``, and the only file is ``FILE_NULL``, on which every method
raises ``MPI.Exception`` (``ERR_FILE``), as on MPI_FILE_NULL.  See
:mod:`gpumpi._nullobj`.
"""

from __future__ import annotations

from ._nullobj import null_family
from .errors import ERR_FILE

_WHAT = "parallel I/O (MPI-IO) is not supported by gpumpi (not planned)"

File = null_family(
    "File", __name__, "File I/O context (MPI_File); MPI-IO is not supported (not planned).",
    null=0, first=-0x40000000, errclass=ERR_FILE, null_name="FILE_NULL", what=_WHAT,
    mpi_prefix="MPI_File_",
    methods=("Call_errhandler", "Close", "Get_amode", "Get_atomicity", "Get_byte_offset", "Get_errhandler",
             "Get_group", "Get_info", "Get_position", "Get_position_shared", "Get_size", "Get_type_extent",
             "Get_view", "Iread", "Iread_all", "Iread_at", "Iread_at_all", "Iread_shared", "Iwrite",
             "Iwrite_all", "Iwrite_at", "Iwrite_at_all", "Iwrite_shared", "Preallocate", "Read", "Read_all",
             "Read_all_begin", "Read_all_end", "Read_at", "Read_at_all", "Read_at_all_begin",
             "Read_at_all_end", "Read_ordered", "Read_ordered_begin", "Read_ordered_end", "Read_shared",
             "Seek", "Seek_shared", "Set_atomicity", "Set_errhandler", "Set_info", "Set_size", "Set_view",
             "Sync", "Write", "Write_all", "Write_all_begin", "Write_all_end", "Write_at", "Write_at_all",
             "Write_at_all_begin", "Write_at_all_end", "Write_ordered", "Write_ordered_begin",
             "Write_ordered_end", "Write_shared"),
    creators=("Open", "Delete"),
    props=("amode", "atomicity", "group", "group_rank", "group_size", "info", "size"),
)

#: Null file (MPI_FILE_NULL).
FILE_NULL = File._htable.constant(File(), "FILE_NULL")


def Register_datarep(datarep: str, read_fn, write_fn, extent_fn) -> None:
    """Register user-defined data representations (MPI_Register_datarep); MPI-IO is not supported."""
    raise NotImplementedError(f"Register_datarep: {_WHAT}")
