"""At its public path: :mod:`numpyro_sgrld.app.report` (its ``__all__``)."""

from numpyro_sgrld.app.report import *  # noqa: F403
from numpyro_sgrld.app.report import __all__  # noqa: F401
