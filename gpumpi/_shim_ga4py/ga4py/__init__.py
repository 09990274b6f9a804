"""ga4py on gpumpi: ``ga4py.ga`` is :mod:`gpumpi.ga`, ``ga4py.gain`` is :mod:`gpumpi.ga.gain`."""
from . import ga, gain  # noqa: F401
