"""Reduce-scatter-block schedules (L1): ``reduce_scatter``'s algorithms with equal blocks.

Theory of operation
===================
MPI_Reduce_scatter_block is MPI_Reduce_scatter with ``counts = [n] * size``: input
``SBUF[0:size*n]`` (``inplace``: ``RBUF``), result block ``RBUF[0:n]``.  Each builder here
calls its namesake in ``reduce_scatter`` (see there for the algorithms).
"""

from __future__ import annotations

from . import reduce_scatter as _rs
from ._common import check

__all__ = ["ring", "pairwise", "reduce_scatterv"]


def _block(fn, rank, size, n, commute, inplace):
    check("reduce_scatter_block", rank, size, 0, n)
    return fn(rank, size, counts=[n] * size, commute=commute, inplace=inplace, call="reduce_scatter_block")


def ring(rank: int, size: int, *, n: int = 0, commute: bool = True, inplace: bool = False):
    """Ring reduce-scatter-block (MPI_Reduce_scatter_block); commutative operations only."""
    return _block(_rs.ring, rank, size, n, commute, inplace)


def pairwise(rank: int, size: int, *, n: int = 0, commute: bool = True, inplace: bool = False):
    """Pairwise-exchange reduce-scatter-block (MPI_Reduce_scatter_block); commutative operations only."""
    return _block(_rs.pairwise, rank, size, n, commute, inplace)


def reduce_scatterv(rank: int, size: int, *, n: int = 0, commute: bool = True, inplace: bool = False):
    """Reduce-scatter-block (MPI_Reduce_scatter_block) as a rank-order reduce to rank 0 and a scatter."""
    return _block(_rs.reduce_scatterv, rank, size, n, commute, inplace)
