"""The exact methods' own times to the target on the large problem, measured once per machine
and cached beside the reference (:func:`numpyro_sgrld.core.cache.cache_dir`).

The live race stops NUTS and HMCECS at a few times the fastest SG kernel's time (what it
takes to tell whether that kernel is that much faster), often before they have finished
warm-up: a bound, not a ratio. On the first run each of them runs instead until it reaches the
target (or :data:`LIMIT`), and that time, with the draws and errors it had, is stored; every
later run on the same setting, machine and library versions reads it, so the report states a
measured speed-up (and the live race, still capped, says whether today's run agrees)."""

import hashlib
import json
import os
import platform
import time

from numpyro_sgrld.core.cache import cache_dir

__all__ = ["LIMIT", "MEASURED", "load", "save"]

#: The methods whose own time to the target is measured once and cached.
MEASURED = ("NUTS", "HMCECS")
#: The most seconds such a measurement runs (a method not there by then is stored as not
#: reached: a lower bound).
LIMIT = 900.0


def _key(setting, method):
    import jax
    import numpyro

    fields = {**setting._asdict(), "method": method, "jax": jax.__version__,
              "numpyro": numpyro.__version__, "cpus": os.cpu_count(),
              "machine": platform.machine(), "backend": jax.default_backend()}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def _path(setting, method):
    return cache_dir() / "reference" / f"time-to-target-{method}-{_key(setting, method)}.json"


def load(setting, method):
    """``(fields of its RaceResult, the date it was measured)`` of ``method`` on ``setting``,
    or ``None``."""
    path = _path(setting, method)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data["result"], data["measured"]


def save(setting, method, result):
    """Store ``method``'s :class:`~numpyro_sgrld.app.time_to_accuracy.RaceResult`."""
    path = _path(setting, method)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"result": {k: (float(v) if isinstance(v, float) else v)
                         for k, v in result._asdict().items()},
              "measured": time.strftime("%Y-%m-%d")}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
