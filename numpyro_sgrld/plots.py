"""At its public path: :mod:`numpyro_sgrld.analysis.plots` (its ``__all__``)."""

from numpyro_sgrld.analysis.plots import *  # noqa: F403
from numpyro_sgrld.analysis.plots import __all__  # noqa: F401
