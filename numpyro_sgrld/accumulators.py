"""At its public path: :mod:`numpyro_sgrld.analysis.accumulators` (its ``__all__``)."""

from numpyro_sgrld.analysis.accumulators import *  # noqa: F403
from numpyro_sgrld.analysis.accumulators import __all__  # noqa: F401
