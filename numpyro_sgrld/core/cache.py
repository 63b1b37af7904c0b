"""Where cached files (data read from wheels, reference posteriors) live, and a bounded
in-memory table for compiled programs."""

import os
from pathlib import Path

__all__ = ["cache_dir", "lru_get"]


def cache_dir() -> Path:
    """``$NUMPYRO_SGRLD_CACHE`` when set, else ``$XDG_CACHE_HOME/numpyro_sgrld`` (default
    ``~/.cache/numpyro_sgrld``)."""
    env = os.environ.get("NUMPYRO_SGRLD_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "numpyro_sgrld"


def lru_get(table, key, make, max_size):
    """``table[key]`` (an ``OrderedDict``), built by ``make()`` on a miss; beyond ``max_size``
    entries the least recently used one is dropped (an entry keeps what ``make`` captured
    alive: kernels, data)."""
    if key in table:
        table.move_to_end(key)
        return table[key]
    value = table[key] = make()
    if len(table) > max_size:
        table.popitem(last=False)
    return value
