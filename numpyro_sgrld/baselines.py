"""At its public path: :mod:`numpyro_sgrld.analysis.baselines` (its ``__all__``)."""

from numpyro_sgrld.analysis.baselines import *  # noqa: F403
from numpyro_sgrld.analysis.baselines import __all__  # noqa: F401
