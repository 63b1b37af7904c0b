"""At its public path: :mod:`numpyro_sgrld.bridges.haiku` (its ``__all__``)."""

from numpyro_sgrld.bridges.haiku import *  # noqa: F403
from numpyro_sgrld.bridges.haiku import __all__  # noqa: F401
