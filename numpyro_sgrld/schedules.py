"""At its public path: :mod:`numpyro_sgrld.core.schedules` (its ``__all__``)."""

from numpyro_sgrld.core.schedules import *  # noqa: F403
from numpyro_sgrld.core.schedules import __all__  # noqa: F401
