"""Test-wide settings.

Hypothesis runs derandomized by default, so CI sees the same examples on every run and a red
build always means a change broke something.  Explore new examples locally with
``GPUMPI_HYPOTHESIS=explore python -m pytest`` (random seeds, more examples) and add what it
finds as explicit ``@example`` cases.

Device kernels run on numba-cuda's simulator unless ``GPUMPI_TEST_REAL_GPU=1``.  numba reads
``NUMBA_ENABLE_CUDASIM`` when it is imported, and a test module collected early imports it
(``tests/ipc/test_fastring.py``), so the switch is set here, before any test module is
collected; setting it only in ``tests/kernels/conftest.py`` left it to the order of
collection and to whether numba had compiled anything since (with warm caches it had not,
and ``numba.cuda`` came up as the driverless real one).
"""

import os

if os.environ.get("GPUMPI_TEST_REAL_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None, max_examples=500)
settings.load_profile(os.environ.get("GPUMPI_HYPOTHESIS", "ci"))
