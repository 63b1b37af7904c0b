"""Where the shared data sets live.

The data folder is, in this order: ``$NUMPYRO_SGRLD_DATA`` when set; ``shared/data`` next to
the project checkout (``<checkout>/../shared/data``) when the package runs from a source
checkout (an editable install, or the tests of a clone). An installed wheel has no checkout:
it finds the data only through ``$NUMPYRO_SGRLD_DATA``, never by walking up from
``site-packages``. Loaders raise :class:`DataNotFoundError` naming every place looked at.
"""

import os
from pathlib import Path

__all__ = ["DataNotFoundError", "data_dir", "data_path", "checkout_root", "candidate_dirs"]

ENV = "NUMPYRO_SGRLD_DATA"


class DataNotFoundError(FileNotFoundError):
    """A shared data file is not present on this machine."""


def checkout_root(here=None):
    """The project checkout this module runs from (the folder with ``pyproject.toml``,
    ``models/`` and ``numpyro_sgrld/``), or ``None`` when it runs from an installed package."""
    folder = Path(here if here is not None else __file__).resolve().parent
    root = folder.parent
    if (
        folder.name == "models"
        and (root / "pyproject.toml").is_file()
        and (root / "numpyro_sgrld" / "__init__.py").is_file()
    ):
        return root
    return None


def candidate_dirs():
    """The data folders looked at, in order (see the module docstring)."""
    found = []
    env = os.environ.get(ENV)
    if env:
        found.append(Path(env))
    root = checkout_root()
    if root is not None:
        found.append(root.parent / "shared" / "data")
    return found


def data_dir():
    """The first candidate folder that exists, else the first candidate, else ``None``."""
    candidates = candidate_dirs()
    for folder in candidates:
        if folder.is_dir():
            return folder
    return candidates[0] if candidates else None


def data_path(*parts) -> Path:
    looked = []
    for folder in candidate_dirs():
        path = folder.joinpath(*parts)
        if path.exists():
            return path
        looked.append(str(path))
    where = "; ".join(looked) if looked else "nowhere: no checkout and no $" + ENV
    raise DataNotFoundError(
        f"Data file {Path(*parts)} not found (looked at: {where}). Point {ENV} at the folder "
        "holding the shared data sets (german_credit/, uci/, posteriordb/)."
    )
