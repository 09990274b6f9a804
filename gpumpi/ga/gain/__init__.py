"""gain: NumPy-like distributed arrays over Global Arrays (GA's ``ga4py.gain``), on gpumpi.

``from gpumpi.ga import gain as np``-style programs get :class:`ndarray`, creation functions,
element-wise ufuncs, reductions, ``dot`` and ``random`` with NumPy's names and results, the
data held in Global Arrays (:mod:`gpumpi.ga`) spread over the default processor group.  Like GA's
gain, every NumPy *class* not defined here (``float32``, ``int64``, ``dtype``...) and
``newaxis`` are taken from NumPy; other NumPy functions are not.  Unlike GA's gain, importing
this module leaves ``sys.stdout`` alone (GA's replaced it with a rank-0-only writer).

The modules: :mod:`~.core` (the array, thresholds, processes), :mod:`~._index` (indexing),
:mod:`~.ufuncs` (element-wise functions and reductions), :mod:`~.methods` (operators and
methods), :mod:`~.creation`, :mod:`~.linalg` (``dot``), :mod:`~.random`,
:mod:`~.notimplemented` (what raises).  Read :mod:`~.core`'s docstring for the rules: which
calls are collective, what distributes, indexing returning NumPy, and freeing (``free()``,
``with``; ``__del__`` defers, never runs a collective).
"""

from __future__ import annotations

import inspect as _inspect
import sys as _sys

import numpy as _np

from ..state import TYPE_CODES as _TYPE_CODES
from . import methods as _methods  # noqa: F401  -- installs the operators and methods on ndarray
from . import random  # noqa: F401
from .core import (  # noqa: F401
    asarray, comm, from_ga, get_dtype, get_shape, get_size_threshold, is_array, is_distributed, me, ndarray,
    nproc, print_sync, set_size_threshold, should_distribute, sync, zeros,
)
from .creation import (  # noqa: F401
    alen, arange, clip, diag, diagonal, empty, empty_like, eye, fromfunction, full, identity, indices,
    linspace, logspace, ones, ones_like, shape, zeros_like,
)
from .linalg import dot  # noqa: F401
from .notimplemented import flatiter, mask_sync  # noqa: F401
from .ufuncs import ALIASES as _ALIASES
from .ufuncs import UFUNCS as _UFUNCS
from .ufuncs import ufunc  # noqa: F401

#: NumPy dtypes to GA type codes (gain ``gatypes``)
gatypes = dict(_TYPE_CODES)
newaxis = None


def listify(thing) -> list:
    """``list(thing)``, or ``[thing]`` when it is not iterable (gain ``listify``)."""
    try:
        return list(thing)
    except TypeError:
        return [thing]


def tuplify(thing) -> tuple:
    """``tuple(thing)``, or ``(thing,)`` when it is not iterable (gain ``tuplify``)."""
    return tuple(listify(thing))


_self = _sys.modules[__name__]
for _name, _uf in _UFUNCS.items():
    setattr(_self, _name, _uf)
for _alias, _name in _ALIASES.items():
    setattr(_self, _alias, _UFUNCS[_name])
for _name in dir(_np):  # GA's gain: every NumPy class it does not define itself
    if not _name.startswith("_") and not hasattr(_self, _name):
        _attr = getattr(_np, _name)
        if _inspect.isclass(_attr):
            setattr(_self, _name, _attr)
del _self, _name, _uf, _alias, _attr
