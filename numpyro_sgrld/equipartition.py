"""At its public path: :mod:`numpyro_sgrld.core.equipartition` (its ``__all__``)."""

from numpyro_sgrld.core.equipartition import *  # noqa: F403
from numpyro_sgrld.core.equipartition import __all__  # noqa: F401
