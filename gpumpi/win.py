"""One-sided communication windows (MPI_Win): names only until issue 13 (L5).

gpumpi has no RMA yet.  ``Win`` exists with mpi4py's methods so that programs and
test modules that name it load; creating a window (``Win.Create``, ``Allocate``,
``Allocate_shared``, ``Create_dynamic``) raises ``NotImplementedError``, and the
only window is ``WIN_NULL``, on which every method raises ``MPI.Exception``
(``ERR_WIN``), as on MPI_WIN_NULL.  See :mod:`gpumpi._nullobj`.
"""

from __future__ import annotations

from ._nullobj import null_family
from .errors import ERR_WIN

_WHAT = "one-sided windows (RMA) are not supported yet (gpumpi issue 13)"

Win = null_family(
    "Win", __name__, "Remote memory access context (MPI_Win); not supported yet (issue 13).",
    null=0x20000000, first=-0x60000000, errclass=ERR_WIN, null_name="WIN_NULL", what=_WHAT,
    mpi_prefix="MPI_Win_",
    methods=("Accumulate", "Attach", "Call_errhandler", "Compare_and_swap", "Complete", "Delete_attr",
             "Detach", "Fence", "Fetch_and_op", "Flush", "Flush_all", "Flush_local", "Flush_local_all",
             "Free", "Get", "Get_accumulate", "Get_attr", "Get_errhandler", "Get_group", "Get_info",
             "Get_name", "Lock", "Lock_all", "Post", "Put", "Raccumulate", "Rget", "Rget_accumulate",
             "Rput", "Set_attr", "Set_errhandler", "Set_info", "Set_name", "Shared_query", "Start", "Sync",
             "Test", "Unlock", "Unlock_all", "Wait", "tomemory"),
    creators=("Allocate", "Allocate_shared", "Create", "Create_dynamic", "Create_keyval", "Free_keyval"),
    props=("attrs", "flavor", "group", "group_rank", "group_size", "info", "model", "name"),
)

#: Null window (MPI_WIN_NULL).
WIN_NULL = Win._htable.constant(Win(), "WIN_NULL")
