"""At its public path: :mod:`numpyro_sgrld.core.integrators` (its ``__all__``)."""

from numpyro_sgrld.core.integrators import *  # noqa: F403
from numpyro_sgrld.core.integrators import __all__  # noqa: F401
