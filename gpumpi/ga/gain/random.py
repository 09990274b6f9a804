"""gain's random numbers (GA ``gain/random.pyx``): ``random_sample`` and ``seed``.

Theory of operation
===================
Each rank draws the values of its own block from NumPy's global generator; :func:`seed` seeds
rank ``r`` with ``seed + r`` (GA's rule), so blocks differ between ranks and a run is
reproducible for a given seed, rank count and distribution.  A scalar draw (``size=None``) is
rank 0's, broadcast.  The values are therefore not NumPy's ``random_sample(size)`` stream.
"""

from __future__ import annotations

import numpy as np

from .core import comm, me, ndarray, should_distribute, sync

__all__ = ["random_sample", "seed"]


def random_sample(size=None):
    """Floats uniform in ``[0, 1)`` (gain/NumPy ``random.random_sample``). Collective."""
    if size is None:
        return comm().bcast(np.random.random_sample() if me() == 0 else None, root=0)
    if not should_distribute(size):
        got = np.random.random_sample(size) if me() == 0 else None
        return comm().bcast(got, root=0)
    a = ndarray(size, np.float64)
    sync()
    loc = a.access()
    if loc is not None:
        loc[...] = np.random.random_sample(loc.shape)
        a.release_update()
    sync()
    return a


def seed(seed=None) -> None:
    """Seed NumPy's generator with ``seed + rank`` (gain ``random.seed``); ``None`` reseeds from
    the OS. Local."""
    if seed is None:
        np.random.seed()
    elif isinstance(seed, (int, np.integer)):
        np.random.seed(int(seed) + me())
    else:
        np.random.seed(np.asarray(seed) + me())
