"""At its public path: :mod:`numpyro_sgrld.analysis.distances` (its ``__all__``)."""

from numpyro_sgrld.analysis.distances import *  # noqa: F403
from numpyro_sgrld.analysis.distances import __all__  # noqa: F401
