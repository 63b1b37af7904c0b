"""At its public path: :mod:`numpyro_sgrld.bridges.priors` (its ``__all__``)."""

from numpyro_sgrld.bridges.priors import *  # noqa: F403
from numpyro_sgrld.bridges.priors import __all__  # noqa: F401
