"""At its public path: :mod:`numpyro_sgrld.host.sharding` (its ``__all__``)."""

from numpyro_sgrld.host.sharding import *  # noqa: F403
from numpyro_sgrld.host.sharding import __all__  # noqa: F401
