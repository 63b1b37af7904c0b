"""At its public path: :mod:`numpyro_sgrld.host.verdict` (its ``__all__``)."""

from numpyro_sgrld.host.verdict import *  # noqa: F403
from numpyro_sgrld.host.verdict import __all__  # noqa: F401
