"""At its public path: :mod:`numpyro_sgrld.host.monitor` (its ``__all__``)."""

from numpyro_sgrld.host.monitor import *  # noqa: F403
from numpyro_sgrld.host.monitor import __all__  # noqa: F401
