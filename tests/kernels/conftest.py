"""Kernel tests: device kernels run on numba-cuda's simulator unless ``GPUMPI_TEST_REAL_GPU=1``.

``NUMBA_ENABLE_CUDASIM`` is read when ``numba.cuda`` is first imported, so it is set here,
at collection time, before any test imports it.  ``dtgen`` (random datatype specs) lives
with the datatype tests.
"""

import os
import pathlib
import sys

if os.environ.get("GPUMPI_TEST_REAL_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

_DATATYPES = str(pathlib.Path(__file__).resolve().parents[1] / "datatypes")
if _DATATYPES not in sys.path:
    sys.path.insert(0, _DATATYPES)
