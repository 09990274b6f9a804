"""The directory that ``gpumpirun --mpi4py`` (or ``GPUMPI_MPI4PY=1``) puts first on ``sys.path``.

It holds one package, ``mpi4py``, that makes unmodified mpi4py programs run on gpumpi:
see :mod:`gpumpi._mpi4py`.  Nothing here is imported by gpumpi itself.
"""
