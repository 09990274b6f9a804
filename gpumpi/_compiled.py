"""The compiled layer's one switch (L2): whether gpumpi runs its compiled entry points.

Theory of operation
===================
``pip install .`` builds the extension module ``_gpumpi_fast`` (``csrc/_gpumpi_fast.pyx``,
Cython) where a C compiler is there; it holds compiled twins of pure-Python functions of
gpumpi, each with the same contract (DESIGN section 20).  At initialisation the runtime calls
:func:`apply` with ``GPUMPI_COMPILED`` (default on): each compiled function is installed
under its name in the module that defines the Python one and in the modules that import it by
name (:data:`USES`), or the Python ones are put back.  So exactly one of the two runs, chosen
here and nowhere else, and a machine without a compiler runs the Python functions, the same
results a little slower.  The module is a top-level one, so a source checkout run in place
(``python -m pytest`` in the repository) still finds the build ``pip install .`` made; its
``ABI`` must be this module's :data:`ABI`, else it is not used (a stale build).
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["ABI", "USES", "apply", "active", "module", "python_twin"]

#: the interface version of ``_gpumpi_fast`` this gpumpi expects
ABI = 1
#: compiled function -> (defining module, modules that import it by name)
USES = {"host_fast": ("gpumpi._buffers", ("gpumpi._fastpath.api",))}

_python: dict = {}  # name -> the Python function, kept to switch back
_active = False


def module():
    """The compiled module with this gpumpi's ABI, or None (not built here, or a stale build)."""
    try:
        m = importlib.import_module("_gpumpi_fast")
    except ImportError:
        return None
    return m if getattr(m, "ABI", None) == ABI else None


def python_twin(name: str):
    """The Python function ``name`` of :data:`USES` (whichever twin is installed now)."""
    if name not in _python:
        home = USES[name][0]
        _python[name] = getattr(sys.modules[home], name)
    return _python[name]


def active() -> bool:
    """Whether the compiled functions are the ones in use."""
    return _active


def apply(on: bool) -> bool:
    """Install the compiled functions (``on`` and the module is there, and NumPy's array header
    has the layout gpumpi._arrays checked) or the Python ones; True when the compiled ones run."""
    global _active
    import numpy as np

    from . import _arrays, _buffers

    m = module() if on and _arrays.PEEK_OK else None
    if m is not None:
        m.setup(np.ndarray, _buffers.fast_dtypes(), _buffers.fast_dtype, _buffers.fast_datatypes(),
                _buffers.fast_datatypes_fill, _arrays.NP_DATA_OFFSET, _arrays.NP_FLAGS_OFFSET)
    for name, (home, users) in USES.items():
        py = python_twin(name)
        fn = getattr(m, name) if m is not None else py
        for modname in (home, *users):
            user = sys.modules.get(modname)  # not imported yet: it takes the installed one from home
            if user is not None:
                setattr(user, name, fn)
    _active = m is not None
    return _active
