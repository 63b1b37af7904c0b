"""At its public path: :mod:`numpyro_sgrld.host.subsample` (its ``__all__``)."""

from numpyro_sgrld.host.subsample import *  # noqa: F403
from numpyro_sgrld.host.subsample import __all__  # noqa: F401
