"""Build hooks (the metadata is in pyproject.toml): ``gpumpi-mpi4py.pth`` and the compiled layer.

The one-line ``.pth`` file lets ``GPUMPI_MPI4PY=1`` run unmodified mpi4py programs on
gpumpi in any Python started by any launcher (see :mod:`gpumpi._mpi4py`); without that
variable it only reads ``os.environ``.

``_gpumpi_fast`` (``csrc/_gpumpi_fast.pyx``) is gpumpi's compiled layer (:mod:`gpumpi._compiled`),
built with Cython (a build requirement in pyproject.toml) and the machine's C compiler.  It is
optional: where it cannot be built (no compiler, no Python headers) the install goes on and
gpumpi runs the Python twins of its functions.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "gpumpi-mpi4py.pth"
LINE = (
    "import os; any(os.environ.get(v, '').strip().lower() not in ('', '0', 'no', 'false', 'off') "
    "for v in ('GPUMPI_MPI4PY', 'GPUMPI_GA4PY')) and __import__('gpumpi._mpi4py').__dict__['_mpi4py'].activate()\n"
)


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, PTH)
        with open(target, "w", encoding="utf-8") as f:
            f.write(LINE)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


def compiled_layer() -> list:
    """The compiled layer's extension, cythonized; none where Cython is missing (a source build
    without pyproject's build requirements), so the install still succeeds."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    ext = Extension("_gpumpi_fast", ["csrc/_gpumpi_fast.pyx"], optional=True, extra_compile_args=["-O2"])
    return cythonize([ext], compiler_directives={"language_level": 3}, quiet=True)


setup(cmdclass={"build_py": BuildPyWithPth}, ext_modules=compiled_layer())
