"""The metrics at their public path: :mod:`numpyro_sgrld.core.metrics` (its ``__all__``; its
modules' constants, e.g. ``AUTO_FREEZE``, at ``numpyro_sgrld.core.metrics.<module>``)."""

from numpyro_sgrld.core.metrics import *  # noqa: F403
from numpyro_sgrld.core.metrics import __all__  # noqa: F401
