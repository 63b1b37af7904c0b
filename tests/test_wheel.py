"""The package as a user installs it: a built wheel, not the editable checkout.

Slow (builds a wheel): ``python -m pytest -m slow tests/test_wheel.py``. The wheel carries
``numpyro_sgrld.models`` with the bundled German credit data; the shared-data lookup must not
walk up from ``site-packages`` and finds the data only through ``$NUMPYRO_SGRLD_DATA``; the
reader process of ``HostRows``, a script of the package, runs from the wheel.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from numpyro_sgrld.models._data import DataNotFoundError, data_dir

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import sys, numpyro_sgrld
from numpyro_sgrld.models import _data, logistic_regression
assert numpyro_sgrld.__file__.startswith(sys.argv[1]), numpyro_sgrld.__file__
assert _data.checkout_root() is None
X, y = logistic_regression.load_german_credit()
assert X.shape == (1000, 25), X.shape
if _data.candidate_dirs():
    from numpyro_sgrld.models import sblrc_blr
    assert sblrc_blr.load()[0].shape == (100, 5)
else:
    try:
        _data.data_path("posteriordb", "sblrc-blr")
    except _data.DataNotFoundError as err:
        assert "no checkout" in str(err), err
    else:
        raise AssertionError("found data without a checkout or $NUMPYRO_SGRLD_DATA")
import os, tempfile, numpy as np
from numpyro_sgrld.data import host_data
host_data.MAPPED_BUDGET = 0  # read by the file's reader process, run from the wheel
path = os.path.join(tempfile.mkdtemp(), "X.npy")
X = np.asarray(X, np.float32)
np.save(path, X)
from numpyro_sgrld.data.sharding import HostRows
rows = HostRows(np.load(path, mmap_mode="r")).source.gather(np.array([5, 999, 0, 5]))
assert np.array_equal(rows, X[[5, 999, 0, 5]])
print("ok")
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp / "dist"), str(ROOT)],
        check=True,
    )
    wheel = next((tmp / "dist").glob("numpyro_sgrld-*.whl"))
    target = tmp / "target"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        check=True,
    )
    return target


def _run(target, code_or_args, env_extra=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if k != "NUMPYRO_SGRLD_DATA"}
    env["PYTHONPATH"] = str(target)
    env.update(env_extra or {})
    args = code_or_args if isinstance(code_or_args, list) else ["-c", code_or_args, str(target)]
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_wheel_loads_models_and_never_looks_above_site_packages(installed, tmp_path):
    done = _run(installed, CHECK, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.slow
def test_wheel_finds_the_shared_data_through_the_environment(installed, tmp_path):
    try:
        folder = data_dir()
        if folder is None or not (folder / "posteriordb").is_dir():
            raise DataNotFoundError(str(folder))
    except DataNotFoundError as err:
        pytest.skip(f"shared data not available: {err}")
    done = _run(installed, CHECK, {"NUMPYRO_SGRLD_DATA": str(folder)}, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.slow
def test_wheel_runs_the_command_line(installed, tmp_path):
    done = _run(installed, ["-m", "numpyro_sgrld", "quickstart", "--num-samples", "300",
                            "--num-chains", "1", "--no-progress-bar"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
