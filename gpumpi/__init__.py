"""gpumpi: a GPU-aware, array-centric MPI for Python.

``from gpumpi import MPI`` is a drop-in for ``from mpi4py import MPI``.  Importing
``gpumpi`` itself is cheap: it imports neither numba nor cupy and starts nothing;
``gpumpi.MPI`` initialises the world when it is first imported (as mpi4py does).
"""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__", "MPI", "init", "query_gpu_support", "testing"]


def __getattr__(name):  # lazy submodules: nothing heavy at import
    import importlib

    if name in ("MPI", "testing", "launch"):
        return importlib.import_module(f"gpumpi.{name}")
    if name == "init":
        from .MPI import _gpumpi_init

        return _gpumpi_init
    if name == "query_gpu_support":
        from ._runtime import query_gpu_support

        return query_gpu_support
    raise AttributeError(f"module 'gpumpi' has no attribute {name!r}")
