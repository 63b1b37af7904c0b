"""At its public path: :mod:`numpyro_sgrld.app.compare` (its ``__all__``)."""

from numpyro_sgrld.app.compare import *  # noqa: F403
from numpyro_sgrld.app.compare import __all__  # noqa: F401
