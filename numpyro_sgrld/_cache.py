"""Where cached files (data read from wheels, reference posteriors) live."""

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$NUMPYRO_SGRLD_CACHE`` when set, else ``$XDG_CACHE_HOME/numpyro_sgrld`` (default
    ``~/.cache/numpyro_sgrld``)."""
    env = os.environ.get("NUMPYRO_SGRLD_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "numpyro_sgrld"
