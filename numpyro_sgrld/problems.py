"""At its public path: :mod:`numpyro_sgrld.app.problems` (its ``__all__``)."""

from numpyro_sgrld.app.problems import *  # noqa: F403
from numpyro_sgrld.app.problems import __all__  # noqa: F401
