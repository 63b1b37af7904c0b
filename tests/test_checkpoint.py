"""Checkpoints: a run saved, loaded in a fresh MCMC object and resumed equals one uninterrupted
run; the draws of every segment accumulate; bad input is refused."""

from functools import partial

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import SGHMC, SGLD, load_checkpoint, resume, save_checkpoint


def _data(n=50, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X @ np.arange(1.0, d + 1) + rng.normal(size=n)).astype(np.float32)
    return jnp.asarray(X), jnp.asarray(y)


def regression(X, y, subsample_size=10):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])


@pytest.mark.parametrize("make, chains, warmup", [
    (partial(SGLD, regression, 1e-3), 2, 0),
    # one chain with a momentum state; two vectorised chains whose step is chosen during
    # warm-up (it travels in the state)
    pytest.param(partial(SGHMC, regression, 1e-3, friction=0.2), 1, 50,
                 marks=pytest.mark.slow),
    pytest.param(partial(SGLD, regression), 2, 200, marks=pytest.mark.slow),
], ids=["sgld-two-chains", "sghmc-one-chain", "sgld-adapted-two-chains"])
def test_save_load_resume_equals_one_uninterrupted_run(make, chains, warmup, tmp_path):
    X, y = _data()
    kw = dict(num_warmup=warmup, num_chains=chains, chain_method="vectorized",
              progress_bar=False)
    long = MCMC(make(), num_samples=100, **kw)
    long.run(random.PRNGKey(0), X, y, extra_fields=("step_size",))
    first = MCMC(make(), num_samples=60, **kw)
    first.run(random.PRNGKey(0), X, y, extra_fields=("step_size",))
    path = tmp_path / "run.ckpt"
    save_checkpoint(first, path)
    checkpoint = load_checkpoint(path)
    second = resume(MCMC(make(), num_samples=40, **kw), checkpoint, X, y,
                    extra_fields=("step_size",))
    save_checkpoint(second, path, previous=checkpoint)
    saved = load_checkpoint(path)
    assert saved.num_draws == (60, 40)
    expected = np.asarray(long.get_samples(group_by_chain=True)["w"])
    # bit for bit: the segments run the same compiled steps from the same states and keys
    np.testing.assert_array_equal(saved.samples["w"], expected)
    np.testing.assert_array_equal(saved.extra_fields["step_size"],
                                  long.get_extra_fields(group_by_chain=True)["step_size"])
    np.testing.assert_array_equal(np.asarray(saved.state.i), np.asarray(long.last_state.i))


def test_checkpoint_bad_input(tmp_path):
    X, y = _data()
    with pytest.raises(ValueError, match="has not run.*mcmc.run first"):
        save_checkpoint(MCMC(SGLD(regression, 1e-3), num_warmup=0, num_samples=5), tmp_path / "a")
    mcmc = MCMC(SGLD(regression, 1e-3), num_warmup=0, num_samples=5, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y)
    checkpoint = save_checkpoint(mcmc, tmp_path / "a")
    with pytest.raises(ValueError, match="holds 1 chain.*num_chains=2.*num_chains=1"):
        resume(MCMC(SGLD(regression, 1e-3), num_warmup=0, num_samples=5, num_chains=2,
                    chain_method="vectorized"), checkpoint, X, y)
    (tmp_path / "b").write_bytes(b"\x80\x04K\x01.")  # a pickle of the number 1
    with pytest.raises(ValueError, match="is not a numpyro_sgrld checkpoint"):
        load_checkpoint(tmp_path / "b")
    other = checkpoint._replace(samples={"v": checkpoint.samples["w"]})
    with pytest.raises(ValueError, match="sites \\['w'\\] differ from the checkpoint's \\['v'\\]"):
        save_checkpoint(mcmc, tmp_path / "c", previous=other)


class _FlatState:
    """Unpickles as an earlier version's flat kernel state: the state class called with its
    15 fields."""

    def __reduce__(self):
        from numpyro_sgrld import SGState

        return SGState, tuple(range(15))


def test_a_checkpoint_of_an_earlier_version_is_named_as_such(tmp_path):
    import pickle

    for name, saved in (("flat", {"format": 1, "checkpoint": {"state": _FlatState()}}),
                        ("old", {"format": 1, "checkpoint": {}}),
                        ("step_in_chain", {"format": 2, "checkpoint": {}})):
        (tmp_path / name).write_bytes(pickle.dumps(saved))
        with pytest.raises(ValueError, match="earlier numpyro_sgrld \\(format (1|2|1 or 2)\\)"
                                             ".*run the segment again"):
            load_checkpoint(tmp_path / name)
