"""Test-wide settings.

Hypothesis runs derandomized by default, so CI sees the same examples on every run and a red
build always means a change broke something.  Explore new examples locally with
``GPUMPI_HYPOTHESIS=explore python -m pytest`` (random seeds, more examples) and add what it
finds as explicit ``@example`` cases.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None, max_examples=500)
settings.load_profile(os.environ.get("GPUMPI_HYPOTHESIS", "ci"))
