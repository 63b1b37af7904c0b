"""At its public path: :mod:`numpyro_sgrld.analysis.predictive` (its ``__all__``)."""

from numpyro_sgrld.analysis.predictive import *  # noqa: F403
from numpyro_sgrld.analysis.predictive import __all__  # noqa: F401
