"""At its public path: :mod:`numpyro_sgrld.bridges.conv_priors` (its ``__all__``)."""

from numpyro_sgrld.bridges.conv_priors import *  # noqa: F403
from numpyro_sgrld.bridges.conv_priors import __all__  # noqa: F401
