"""Where the shared data sets live.

The data folder is ``$NUMPYRO_SGRLD_DATA`` when set, else ``shared/data`` next to the project
checkout (``<checkout>/../shared/data``). Loaders raise :class:`DataNotFoundError` with this
explanation when a file is missing; tests turn it into a skip.
"""

import os
from pathlib import Path

__all__ = ["DataNotFoundError", "data_dir", "data_path"]


class DataNotFoundError(FileNotFoundError):
    """A shared data file is not present on this machine."""


def data_dir() -> Path:
    env = os.environ.get("NUMPYRO_SGRLD_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def data_path(*parts) -> Path:
    path = data_dir().joinpath(*parts)
    if not path.exists():
        raise DataNotFoundError(
            f"Data file {path} not found. Point NUMPYRO_SGRLD_DATA at the folder holding the "
            "shared data sets (german_credit/, uci/, posteriordb/)."
        )
    return path
