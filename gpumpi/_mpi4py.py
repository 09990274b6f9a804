"""Run unmodified mpi4py programs on gpumpi (``gpumpirun --mpi4py``, ``GPUMPI_MPI4PY=1``).

Theory of operation
===================
gpumpi ships a directory, ``gpumpi/_shim``, holding a package named ``mpi4py``.  With
that directory first on ``sys.path`` (the launcher's ``--mpi4py`` puts it on
``PYTHONPATH``; the ``gpumpi-mpi4py.pth`` file installed beside gpumpi does it in any
Python started with ``GPUMPI_MPI4PY=1``), ``import mpi4py`` finds the shim first.

The shim package is the installed mpi4py with one module swapped:

* its ``__path__`` is the shim directory followed by the real package's directory, so
  ``mpi4py.MPI`` is the shim's ``MPI.py`` (which replaces itself by ``gpumpi.MPI``:
  the very same module object) while ``mpi4py.util.pkl5``, ``util.pool``,
  ``util.sync``, ``futures``, ``run``, ``bench``, ``typing`` and ``__main__`` are
  mpi4py's own source files, run on top of gpumpi.MPI (one implementation of each);
* its namespace is the real ``mpi4py/__init__.py`` executed in the shim module, so
  ``mpi4py.rc``, ``profile``, ``get_config`` and ``__version__`` are mpi4py's, and its
  ``__file__`` is the real one (the package's data files, headers and ``.pxd`` files
  are the installed mpi4py's); ``mpi4py.__gpumpi__`` tells the shim apart.  gpumpi.MPI
  reads ``mpi4py.rc`` when it initialises (``gpumpi.MPI._init_at_import``).

One more module is gpumpi's: ``mpi4py.util.dtlib`` is :mod:`gpumpi.util.dtlib` (an
import hook, :class:`_Alias`, hands out that module object under the mpi4py name),
because gpumpi needs the NumPy conversions itself without mpi4py; one implementation,
which follows mpi4py's rule for rule.

On Python before 3.12, ``mpi4py.util.sync`` gets a ``memoryview`` that takes a window
(:class:`_WinBuffers`): mpi4py's Cython ``Win`` exports its memory as a buffer, and a
pure-Python class can do that only from 3.12 on (``Win.__buffer__``).

The compiled ``mpi4py/MPI*.so`` of the real package is never loaded.  Without an
installed mpi4py, ``mpi4py.MPI`` and a minimal ``rc`` still work and the pure-Python
modules raise ``ImportError`` naming the missing package.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")
ENV = "GPUMPI_MPI4PY"
#: gpumpi's ``ga4py`` package (``ga4py.ga`` is :mod:`gpumpi.ga`, ``ga4py.gain`` :mod:`gpumpi.ga.gain`):
#: a directory of its own, so that ``--mpi4py`` alone leaves an installed ga4py alone
GA4PY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim_ga4py")
GA4PY_ENV = "GPUMPI_GA4PY"


def _on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "no", "false", "off")


def enabled() -> bool:
    """True when this process asked for mpi4py programs to run on gpumpi."""
    return _on(ENV) or _on(GA4PY_ENV)


def activate() -> None:
    """Put the shim first on ``sys.path`` (the ``.pth`` hook; idempotent), and gpumpi's ``ga4py``
    with ``GPUMPI_GA4PY`` (ga4py programs import mpi4py too)."""
    dirs = [SHIM_DIR, GA4PY_DIR] if _on(GA4PY_ENV) else [SHIM_DIR]
    for d in reversed(dirs):
        if d not in sys.path:
            sys.path.insert(0, d)


def _is_shim(spec) -> bool:
    """Whether ``spec`` is a gpumpi shim package (this one, or another gpumpi's on the path:
    a source checkout beside an installed copy), never the real mpi4py."""
    try:
        with open(spec.origin, encoding="utf-8") as f:
            return "gpumpi._mpi4py" in f.read(4096)
    except (OSError, TypeError, UnicodeDecodeError):
        return False


def real_spec():
    """The installed mpi4py package's spec (searching ``sys.path`` past every gpumpi shim), or None."""
    for p in sys.path:
        if os.path.abspath(p or os.curdir) == SHIM_DIR:
            continue
        spec = importlib.machinery.PathFinder.find_spec("mpi4py", [p])
        if spec is not None and spec.origin and not _is_shim(spec):
            return spec
    return None


class _Rc:
    """mpi4py.rc when no mpi4py is installed (the same options and defaults)."""

    initialize = True
    threads = True
    thread_level = "multiple"
    finalize = None
    fast_reduce = True
    recv_mprobe = True
    irecv_bufsz = 32768
    errors = "exception"

    def __setattr__(self, name, value):
        if not hasattr(self, name):
            raise TypeError(f"object has no attribute {name!r}")
        super().__setattr__(name, value)

    def __call__(self, **kwargs):
        for key in kwargs:
            if not hasattr(self, key):
                raise TypeError(f"unexpected argument {key!r}")
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __repr__(self):
        return "<mpi4py.rc>"


class _Alias:
    """Import hook: ``mpi4py.util.dtlib`` is gpumpi's module of the same job (one implementation).

    The import system still binds the module as ``mpi4py.util``'s attribute and in
    ``sys.modules`` under the mpi4py name; the module keeps its own ``__name__``.
    """

    NAMES = ("mpi4py.util.dtlib",)

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name in cls.NAMES:
            return importlib.machinery.ModuleSpec(name, cls)
        return None

    @staticmethod
    def create_module(spec):
        from .util import dtlib

        spec.loader_state = dtlib.__spec__
        return dtlib

    @staticmethod
    def exec_module(module) -> None:
        # already run by create_module; the import system set __spec__ to the alias's: restore it
        module.__spec__ = module.__spec__.loader_state


def _memoryview(obj, *args):
    """``memoryview`` that also takes an ``MPI.Win`` (its memory), as mpi4py's Cython Win does."""
    from .rma import Win

    if isinstance(obj, Win):
        return memoryview(obj.tomemory())
    return memoryview(obj, *args)


class _SyncLoader:
    """Runs ``mpi4py.util.sync`` (mpi4py's own source), then lets its ``memoryview(window)`` reach
    the window's memory: a pure-Python class has no buffer protocol before Python 3.12
    (``Win.__buffer__`` serves 3.12 and later)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        module.memoryview = _memoryview


class _WinBuffers:
    """Import hook for ``mpi4py.util.sync`` on Python < 3.12 (see :class:`_SyncLoader`)."""

    NAMES = ("mpi4py.util.sync",)

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in cls.NAMES or sys.version_info >= (3, 12):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _SyncLoader(spec.loader)
        return spec


def adopt(ns: dict) -> None:
    """Make the shim package ``ns`` the installed mpi4py with gpumpi.MPI as its MPI."""
    ns["__gpumpi__"] = True
    here = os.path.dirname(ns["__file__"])
    spec = real_spec()
    if spec is None or not spec.submodule_search_locations:
        ns["__version__"] = "4.1.2"
        ns["__all__"] = ["MPI"]
        ns["rc"] = _Rc()
        sys.modules[ns["__name__"] + ".rc"] = ns["rc"]
        ns["__path__"] = [here]
        return
    real_dir = list(spec.submodule_search_locations)[0]
    if _Alias not in sys.meta_path:
        sys.meta_path.insert(0, _Alias)
    if _WinBuffers not in sys.meta_path:
        sys.meta_path.insert(0, _WinBuffers)
    ns["__path__"] = [here, real_dir]
    with open(spec.origin, encoding="utf-8") as f:
        code = compile(f.read(), spec.origin, "exec")
    exec(code, ns)  # noqa: S102  (mpi4py's own __init__: rc, profile, get_config, ...)
    ns["__path__"] = [here, real_dir]
    # the package's files (headers, .pxd, py.typed, mpi.cfg) are the installed mpi4py's
    ns["__file__"] = spec.origin

    def get_include() -> str:
        """Return the directory in the installed mpi4py that contains header files."""
        return os.path.join(real_dir, "include")

    ns["get_include"] = get_include

