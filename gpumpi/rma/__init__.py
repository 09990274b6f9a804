"""One-sided communication (MPI RMA): windows, their epochs and their runtimes (L5).

Theory of operation
===================
One module per concept; :mod:`gpumpi.rma.epochs` is pure (L1), the rest is L5:

* :mod:`gpumpi.rma.epochs` -- which window call is legal when (the epoch state machine).
"""

__all__: list = []
