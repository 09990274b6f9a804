"""``ga4py.ga`` is :mod:`gpumpi.ga` (this module replaces itself in ``sys.modules``)."""
import sys

import gpumpi.ga

sys.modules[__name__] = gpumpi.ga
