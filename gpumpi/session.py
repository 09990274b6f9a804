"""MPI sessions (MPI_Session): names only until issue 12 (L5).

``Session`` exists with mpi4py's methods so that programs and test modules that
name it load; ``Session.Init`` raises ``NotImplementedError``, and the only
session is ``SESSION_NULL``, on which every method raises ``MPI.Exception``
(``ERR_SESSION``), as on MPI_SESSION_NULL.  See :mod:`gpumpi._nullobj`.
"""

from __future__ import annotations

from ._nullobj import null_family
from .errors import ERR_SESSION

_WHAT = "MPI sessions are not supported yet (gpumpi issue 12)"

Session = null_family(
    "Session", __name__, "Session context (MPI_Session); not supported yet (issue 12).",
    null=0x38000000, first=-0x48000000, errclass=ERR_SESSION, null_name="SESSION_NULL", what=_WHAT,
    mpi_prefix="MPI_Session_",
    methods=("Attach_buffer", "Call_errhandler", "Create_group", "Detach_buffer", "Finalize", "Flush_buffer",
             "Get_errhandler", "Get_info", "Get_nth_pset", "Get_num_psets", "Get_pset_info", "Iflush_buffer",
             "Set_errhandler"),
    creators=("Init",),
)

#: Null session (MPI_SESSION_NULL).
SESSION_NULL = Session._htable.constant(Session(), "SESSION_NULL")
