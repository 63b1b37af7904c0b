"""At its public path: :mod:`numpyro_sgrld.analysis.streaming` (its ``__all__``)."""

from numpyro_sgrld.analysis.streaming import *  # noqa: F403
from numpyro_sgrld.analysis.streaming import __all__  # noqa: F401
