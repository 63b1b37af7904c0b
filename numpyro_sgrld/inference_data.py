"""At its public path: :mod:`numpyro_sgrld.analysis.inference_data` (its ``__all__``)."""

from numpyro_sgrld.analysis.inference_data import *  # noqa: F403
from numpyro_sgrld.analysis.inference_data import __all__  # noqa: F401
