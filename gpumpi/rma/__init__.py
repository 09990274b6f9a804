"""One-sided communication (MPI RMA): ``Win``, its epochs and the runtimes that move its bytes (L5).

Theory of operation
===================
A window is memory every member of a communicator exposes; an origin reads, writes and
updates a target's memory without the target's help, inside the epochs MPI defines (DESIGN
section 12).  One module per concept, imports going down this list:

* :mod:`gpumpi.rma.epochs` -- which window call is legal when: the epoch state machine
  (pure, layer 1; every other module here is layer 5);
* :mod:`gpumpi.rma.origin` -- the origin's side of an operation: its bytes packed and
  unpacked, its types checked;
* :mod:`gpumpi.rma.local` -- the runtime of a window on one node: every member's memory
  reached through the transports' one-sided capabilities (:mod:`gpumpi.ipc.base`); locks and
  counters in shared control blocks; accumulates by atomic instructions;
* :mod:`gpumpi.rma.mpi` -- the runtime of a window across nodes, carried by the MPI
  library's RMA (same interface as ``local``'s);
* :mod:`gpumpi.rma.near` -- the near path: one call into machine code for an operation on
  mapped memory in a passive target epoch, and its caches (one object);
* :mod:`gpumpi.rma.creation` -- ``Win``'s creation face (``Create``, ``Allocate``,
  ``Allocate_shared``, ``Create_dynamic``, ``Attach``/``Detach``, ``Free``) and the state every
  reference to a window shares;
* :mod:`gpumpi.rma.win` -- the ``Win`` class: validates and delegates.

The runtime (the progress engine) is reached only through :mod:`gpumpi._services`.
"""

from .creation import keep_memory
from .win import WIN_NULL, Win

__all__ = ["Win", "WIN_NULL", "keep_memory"]
