"""Step-size adaptation, at its public path: :mod:`numpyro_sgrld.warmup.adaptation`, where
warm-up's pieces live, re-exported here."""

from numpyro_sgrld.warmup.adaptation import *  # noqa: F403
from numpyro_sgrld.warmup.adaptation import __all__  # noqa: F401
