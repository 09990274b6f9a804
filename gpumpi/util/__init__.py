"""Utilities mirroring ``mpi4py.util`` (L6)."""
