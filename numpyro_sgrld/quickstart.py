"""At its public path: :mod:`numpyro_sgrld.app.quickstart` (its ``__all__``)."""

from numpyro_sgrld.app.quickstart import *  # noqa: F403
from numpyro_sgrld.app.quickstart import __all__  # noqa: F401
