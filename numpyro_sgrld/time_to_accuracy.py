"""At its public path: :mod:`numpyro_sgrld.app.time_to_accuracy` (its ``__all__``)."""

from numpyro_sgrld.app.time_to_accuracy import *  # noqa: F403
from numpyro_sgrld.app.time_to_accuracy import __all__  # noqa: F401
