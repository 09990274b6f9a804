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

Methods are put in place by the modules that define them: each registers an *installer*
(:func:`register`), a function of the compiled module (or None: the Python methods), which
:func:`apply` runs with its choice (and :func:`register` at once, with the choice made so far),
so this module imports none of the API's.  The engine asks :func:`rings` for the compiled
methods' view of its rings.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["ABI", "USES", "active", "apply", "dressed", "module", "python_twin", "register", "rings"]

#: the interface version of ``_gpumpi_fast`` this gpumpi expects
ABI = 4
#: compiled function -> (defining module, modules that import it by name)
USES = {"host_fast": ("gpumpi._buffers", ("gpumpi._fastpath.api",))}

_python: dict = {}  # name -> the Python function, kept to switch back
_active = False
_installers: list = []  # register()'s


def register(installer) -> None:
    """Have ``installer(m)`` put the compiled module ``m``'s methods in place (``m`` None: the
    Python ones) now, with the choice made so far, and at every :func:`apply`."""
    _installers.append(installer)
    installer(module() if _active else None)


def dressed(call, python):
    """``call`` dressed as ``python`` (name, docstring, signature: mpi4py's introspection and the
    docs see the same method): a compiled method as its Python twin, or a fast path as the
    general path it decorates; no ``__wrapped__`` (that marks a profiler's wrapper,
    ``GPUMPI_PROFILE``, NVTX)."""
    import functools
    import inspect

    functools.update_wrapper(call, python, updated=())
    call.__dict__.pop("__wrapped__", None)
    call.__signature__ = inspect.signature(python)
    return call


def rings(engine, send_addr: int, recv_addr: int, rounds_addr: int, far_send: int = 0, far_recv: int = 0):
    """The compiled methods' view of ``engine``'s rings and state (``_gpumpi_fast.Rings``:
    the C entry points of ``gpumpi.ipc.fastring`` at ``send_addr``/``recv_addr``/``rounds_addr``, and of
    ``gpumpi.ipc.fastmpi`` at ``far_send``/``far_recv``, 0 where there is none), where the
    compiled module is built (whether or not it is in use now: :func:`apply` may switch it on
    later); None where it is not."""
    m = module()
    return None if m is None else m.Rings(engine, send_addr, recv_addr, rounds_addr, far_send, far_recv)


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
    for installer in _installers:
        installer(m)
    return _active
