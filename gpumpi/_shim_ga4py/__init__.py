"""The directory that ``gpumpirun --ga4py`` puts first on ``sys.path``.

It holds one package, ``ga4py``, whose ``ga`` is :mod:`gpumpi.ga` and whose ``gain`` is
:mod:`gpumpi.ga.gain`, so unmodified ga4py programs (``from ga4py import ga, gain``) run on
gpumpi.  Nothing here is imported by gpumpi itself.
"""
