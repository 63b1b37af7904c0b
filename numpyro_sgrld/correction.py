"""At its public path: :mod:`numpyro_sgrld.core.correction` (its ``__all__``)."""

from numpyro_sgrld.core.correction import *  # noqa: F403
from numpyro_sgrld.core.correction import __all__  # noqa: F401
