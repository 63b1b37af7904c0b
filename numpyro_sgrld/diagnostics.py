"""At its public path: :mod:`numpyro_sgrld.analysis.diagnostics` (its ``__all__``)."""

from numpyro_sgrld.analysis.diagnostics import *  # noqa: F403
from numpyro_sgrld.analysis.diagnostics import __all__  # noqa: F401
