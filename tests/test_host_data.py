"""Rows kept on the host (``numpyro_sgrld.data.sharding.HostRows``, a memory-mapped file): the same
draws as the rows in memory, and the full-data potential summed chunk by chunk."""

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from numpyro_sgrld import SGLD
from numpyro_sgrld.data import host_data
from numpyro_sgrld.data.sharding import HostRows
from numpyro_sgrld.data.subsample import SubsamplePlate, full_batch

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


@pytest.mark.slow
def test_at_the_defaults_rows_on_disk_give_the_draws_of_the_rows_in_memory(files):
    """With one chunk the full-data passes are the same sums as in memory: the default
    kernel's draws from the file are those from memory, bit for bit."""
    X, y, folder = files
    in_memory, _ = _draws(SGLD(model), X, y)
    on_disk, _ = _draws(SGLD(model), *_on_disk(folder))
    np.testing.assert_array_equal(in_memory, on_disk)


def _mapped_kib(path):
    """The resident kibibytes of the process's mappings of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        if "-" in line.split(" ", 1)[0]:  # a mapping's first line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc")
def test_a_large_file_is_read_row_by_row_and_never_mapped(files, tmp_path, monkeypatch):
    """Above the budget, rows are read from the file (``os.pread``) into the minibatch: the
    rows asked for, of the file, of a view of it (rows from 7 on, two columns) and of a
    Fortran-ordered file (whose rows are not contiguous: read through the mapping, released),
    and none of the file's pages in the process's mapping; below the budget they are read
    through the mapping, which then holds pages (the measure can see them)."""
    X, _, _ = files
    np.save(tmp_path / "X.npy", X)  # a file of this test's own: no other test maps it
    np.save(tmp_path / "F.npy", np.asfortranarray(X))
    rng = np.random.default_rng(1)
    idx = [rng.integers(0, N - 7, BATCH) for _ in range(20)]
    monkeypatch.setattr(host_data, "MAPPED_BUDGET", 0)
    whole = np.load(tmp_path / "X.npy", mmap_mode="r")
    for array, expected in ((whole, X), (whole[7:, 1:3], X[7:, 1:3]),
                            (np.load(tmp_path / "F.npy", mmap_mode="r"), X)):
        source = HostRows(array).source
        assert (source.file is None) == (array.strides[0] == 4)  # the Fortran-ordered one
        for i in idx + [np.arange(100, 300)]:  # scattered rows, then a chunk
            np.testing.assert_array_equal(source.gather(i), expected[i])
        if source.file is not None:  # read from the file: no row outside it
            with pytest.raises(IndexError, match="row indices from -1 to"):
                source.gather(np.array([-1, 3]))
    assert _mapped_kib(tmp_path / "X.npy") == 0
    monkeypatch.setattr(host_data, "MAPPED_BUDGET", 1 << 29)
    source = HostRows(np.load(tmp_path / "X.npy", mmap_mode="r")).source
    np.testing.assert_array_equal(source.gather(idx[0]), X[idx[0]])
    assert source.file is None and _mapped_kib(tmp_path / "X.npy") > 0


@pytest.mark.parametrize("chains", [1, pytest.param(2, marks=pytest.mark.slow)],
                         ids=["one chain", "vectorised chains"])
def test_each_step_reads_its_rows_in_one_call_started_the_step_before(files, monkeypatch,
                                                                      chains):
    """Rows read from the file, at a fixed step: every step is one host call for both arrays,
    which finds its rows' reads started by the call of the step before (but the first step's),
    and the draws are those of the rows in memory, bit for bit."""
    X, y, folder = files
    monkeypatch.setattr(host_data, "MAPPED_BUDGET", 0)
    asked, found = set(), []
    request, gather_all = host_data._Reader.request, host_data._gather_all

    def logged_request(self, key, flat):
        asked.add((self.file.path, key))
        return request(self, key, flat)

    def logged_gather_all(sources, idx, ahead):
        key = np.asarray(idx).reshape(-1).astype(np.int64).tobytes()
        found.append(tuple((s.file.path, key) in asked for s in sources))
        return gather_all(sources, idx, ahead)

    monkeypatch.setattr(host_data._Reader, "request", logged_request)
    monkeypatch.setattr(host_data, "_gather_all", logged_gather_all)

    def draws(*args):
        mcmc = MCMC(SGLD(model, 1e-3), num_warmup=0, num_samples=100, num_chains=chains,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The draws cannot be trusted")
            mcmc.run(jax.random.PRNGKey(0), *args)
        return np.asarray(mcmc.get_samples()["w"])

    on_disk = draws(*_on_disk(folder))
    assert found == [(False, False)] + [(True, True)] * 99
    np.testing.assert_array_equal(on_disk, draws(X, y))


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
