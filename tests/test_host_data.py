"""Rows kept on the host (``numpyro_sgrld.sharding.HostRows``, a memory-mapped file): the same
draws as the rows in memory, and the full-data potential summed chunk by chunk."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from numpyro_sgrld import SGLD
from numpyro_sgrld.host import host_data
from numpyro_sgrld.host.subsample import SubsamplePlate, full_batch
from numpyro_sgrld.sharding import HostRows

N, D, BATCH = 6000, 4, 200


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype(np.float32)
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ rng.normal(size=D)))).astype(np.float32)
    folder = tmp_path_factory.mktemp("rows")
    np.save(folder / "X.npy", X)
    np.save(folder / "y.npy", y)
    return X, y, folder


def model(X, y):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("obs", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def _on_disk(folder):
    return (HostRows(np.load(folder / "X.npy", mmap_mode="r")),
            HostRows(np.load(folder / "y.npy", mmap_mode="r")))


def _draws(kernel, *args):
    mcmc = MCMC(kernel, num_warmup=200, num_samples=300, progress_bar=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The draws cannot be trusted")
        mcmc.run(jax.random.PRNGKey(0), *args)
    return np.asarray(mcmc.get_samples()["w"]), mcmc.last_state


@pytest.mark.parametrize("step_size", [1e-3, pytest.param(None, marks=pytest.mark.slow)],
                         ids=["fixed step", "defaults"])
def test_rows_on_disk_give_the_draws_of_the_rows_in_memory(files, step_size, monkeypatch):
    """Each step's rows gathered from the file are the rows in memory: the same draws bit for
    bit (at the defaults too: with one chunk the full-data passes are the same sums). At the
    fixed step the file is read as a large one is, in blocks with the mapping released."""
    X, y, folder = files
    if step_size is not None:
        monkeypatch.setattr(host_data, "MAPPED_BUDGET", 0)
    in_memory, _ = _draws(SGLD(model, step_size), X, y)
    on_disk, _ = _draws(SGLD(model, step_size), *_on_disk(folder))
    np.testing.assert_array_equal(in_memory, on_disk)


def test_the_full_data_potential_is_summed_chunk_by_chunk(files):
    """With chunks of at most 1,000 rows (6 of them), the chunked potential and its gradient
    are the full-data ones up to float32 rounding."""
    X, y, folder = files
    plate = SubsamplePlate("data", N, BATCH)
    assert host_data.num_chunks(N, 1000) == 6 and host_data.num_chunks(7, 2) == 7
    Xh, yh = _on_disk(folder)
    chunked = host_data.chunked_full_potential(model, (Xh, yh), {}, plate, chunk_rows=1000)
    from numpyro.infer.util import potential_energy

    z = {"w": jnp.array([0.3, -0.2, 0.5, 0.1])}
    exact = potential_energy(full_batch(model), (X, y), {}, z)
    np.testing.assert_allclose(chunked(z), exact, rtol=1e-5)
    np.testing.assert_allclose(jax.grad(chunked)(z)["w"],
                               jax.grad(lambda z: potential_energy(full_batch(model), (X, y),
                                                                   {}, z))(z)["w"],
                               rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_the_default_kernel_runs_on_chunked_full_data_passes(files, monkeypatch):
    """The default kernel on chunks of 1,000 rows: control variates switched on (their
    centre's full-data gradient) and the window ends' full-data Hessian, chunk by chunk."""
    _, _, folder = files
    monkeypatch.setattr(host_data, "CHUNK_ROWS", 1000)
    draws, state = _draws(SGLD(model), *_on_disk(folder))
    assert np.all(np.isfinite(draws)) and bool(state.gradient_state.active)


def test_host_rows_refuse_what_they_cannot_stream(files):
    _, _, folder = files
    Xh, yh = _on_disk(folder)
    with pytest.raises(TypeError, match="indexed by one vector of row indices"):
        Xh[0, 1]
    with pytest.raises(TypeError, match="takes a NumPy array of rows"):
        HostRows([1.0, 2.0])
    with pytest.raises(ValueError, match="streams the rows of one subsample plate"):
        host_data.one_plate(())
