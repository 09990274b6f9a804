"""``mpi4py`` on gpumpi: ``from mpi4py import MPI`` gives ``gpumpi.MPI``.

The rest of the package (``rc``, ``util.pkl5/dtlib/pool/sync``, ``futures``, ``run``,
``bench``, ``python -m mpi4py``) is mpi4py's own pure-Python code, loaded from the
installed mpi4py: see :mod:`gpumpi._mpi4py`.
"""

from gpumpi._mpi4py import adopt as _adopt

_adopt(globals())
del _adopt
