"""Build hook: installs ``gpumpi-mpi4py.pth`` beside the package (the metadata is in pyproject.toml).

The one-line ``.pth`` file lets ``GPUMPI_MPI4PY=1`` run unmodified mpi4py programs on
gpumpi in any Python started by any launcher (see :mod:`gpumpi._mpi4py`); without that
variable it only reads ``os.environ``.
"""

import os

from setuptools import setup
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


setup(cmdclass={"build_py": BuildPyWithPth})
