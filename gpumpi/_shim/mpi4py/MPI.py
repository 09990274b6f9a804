"""``mpi4py.MPI`` is ``gpumpi.MPI`` (the same module object)."""

import sys

import gpumpi.MPI

sys.modules[__name__] = gpumpi.MPI
