"""MPI-IO's cores: file views (``view``, pure) and the file system calls (``posix``).

``gpumpi.file`` (the ``MPI.File`` API) validates calls and delegates here.
"""
