"""At its public path: :mod:`numpyro_sgrld.bridges.equinox` (its ``__all__``)."""

from numpyro_sgrld.bridges.equinox import *  # noqa: F403
from numpyro_sgrld.bridges.equinox import __all__  # noqa: F401
