"""``ga4py.gain`` is :mod:`gpumpi.ga.gain` (this module replaces itself in ``sys.modules``)."""
import sys

import gpumpi.ga.gain

sys.modules[__name__] = gpumpi.ga.gain
