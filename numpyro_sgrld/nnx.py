"""At its public path: :mod:`numpyro_sgrld.bridges.nnx` (its ``__all__``)."""

from numpyro_sgrld.bridges.nnx import *  # noqa: F403
from numpyro_sgrld.bridges.nnx import __all__  # noqa: F401
