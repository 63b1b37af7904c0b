"""At its public path: :mod:`numpyro_sgrld.host.kernels` (its ``__all__``)."""

from numpyro_sgrld.host.kernels import *  # noqa: F403
from numpyro_sgrld.host.kernels import __all__  # noqa: F401
