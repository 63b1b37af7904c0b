"""At its public path: :mod:`numpyro_sgrld.core.gradients` (its ``__all__``)."""

from numpyro_sgrld.core.gradients import *  # noqa: F403
from numpyro_sgrld.core.gradients import __all__  # noqa: F401
