"""At its public path: :mod:`numpyro_sgrld.analysis.checkpoint` (its ``__all__``)."""

from numpyro_sgrld.analysis.checkpoint import *  # noqa: F403
from numpyro_sgrld.analysis.checkpoint import __all__  # noqa: F401
