"""Streaming draws to disk: the file equals one in-memory run, an interrupted run resumes to
the same file, on-the-fly predictive metrics equal those of all draws, bad input is refused."""

import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC, Predictive
from numpyro_sgrld.models import linear_regression as lr
from numpyro_sgrld.models.bnn import mlp_classifier, mlp_regressor

import numpyro_sgrld
from numpyro_sgrld import SGLD, load_checkpoint, priors, save_checkpoint, to_inference_data
from numpyro_sgrld.analysis.predictive import classification_metrics, regression_metrics
from numpyro_sgrld.analysis.streaming import (
    Accumulator,
    checkpoint_path,
    classification_accumulator,
    classification_metrics_from,
    load_streamed,
    regression_accumulator,
    regression_metrics_from,
    run_streaming,
)

X, Y, _ = lr.make_data(seed=1, num_data=100, num_features=3)
# jit_model_args: one compiled program for all segments (run_streaming warns without it)
CHAINS = dict(num_chains=2, chain_method="vectorized", progress_bar=False,
              jit_model_args=True)


def regression(X, y=None):
    return lr.model(X, y, subsample_size=10)


def _mcmc(num_warmup=10, num_samples=24, thinning=2, **kw):
    """12 kept draws per chain: 3 segments of 4."""
    return MCMC(SGLD(regression, 1e-3), num_warmup=num_warmup, num_samples=num_samples,
                thinning=thinning, **{**CHAINS, **kw})


def _groups(idata):
    return {g: getattr(idata, g) for g in ("posterior", "sample_stats")}


def _assert_same_file(path, other):
    a, b = _groups(load_streamed(path, lazy=False)), _groups(load_streamed(other, lazy=False))
    for group in a:
        assert set(a[group].data_vars) == set(b[group].data_vars)
        for name in a[group].data_vars:
            np.testing.assert_array_equal(a[group][name].values, b[group][name].values)
        np.testing.assert_array_equal(a[group]["draw"].values, b[group]["draw"].values)


def test_streamed_draws_equal_one_in_memory_run(tmp_path):
    full = _mcmc()
    full.run(random.PRNGKey(3), X, Y, extra_fields=("step_size",))
    expected = _groups(to_inference_data(full, X, Y, log_likelihood=False))

    mcmc = _mcmc()
    run = run_streaming(mcmc, tmp_path / "run.nc", random.PRNGKey(3), X, Y, segment_draws=4)
    assert run.complete and run.num_draws == 12
    got = _groups(load_streamed(tmp_path / "run.nc", lazy=False))
    for group, ds in expected.items():
        assert set(got[group].data_vars) == set(ds.data_vars), group
        for name, da in ds.data_vars.items():
            assert got[group][name].dims == da.dims and got[group][name].dtype == da.dtype
            np.testing.assert_array_equal(got[group][name].values, da.values)  # bit for bit
        for coord in ds.coords:
            np.testing.assert_array_equal(got[group][coord].values, ds[coord].values)
    assert got["posterior"].sizes["draw"] == 12
    # the MCMC object is left as given, holding the last segment only
    assert mcmc.num_samples == 24 and mcmc.post_warmup_state is None
    assert mcmc.get_samples(group_by_chain=True)["w"].shape == (2, 4, 3)
    np.testing.assert_array_equal(np.asarray(mcmc.last_state.z["w"]),
                                  np.asarray(full.last_state.z["w"]))
    # the checkpoint beside the file holds the state, and no draws
    saved = load_checkpoint(checkpoint_path(tmp_path / "run.nc"))
    assert saved.num_draws == (4, 4, 4) and saved.samples == {}
    np.testing.assert_array_equal(np.asarray(saved.state.i), np.asarray(full.last_state.i))
    with pytest.raises(ValueError, match="`previous` holds no draws.*keep_draws=False"):
        save_checkpoint(mcmc, tmp_path / "with-draws.ckpt", previous=saved)


class _Total(NamedTuple):
    w_sum: object
    count: int


def _summing(fail_on_call=None):
    """An accumulator of the sum of the draws of ``w``; raises on its ``fail_on_call``-th
    update (an interruption after a segment was appended, before it was committed)."""
    calls = []

    def update(total, samples):
        calls.append(1)
        if len(calls) == fail_on_call:
            raise KeyboardInterrupt("stopped")
        return _Total(total.w_sum + samples["w"].sum(axis=(0, 1)), total.count + 1)

    return Accumulator(lambda: _Total(np.zeros(3), 0), update)


def test_an_interrupted_run_resumes_to_the_same_file(tmp_path):
    whole = run_streaming(_mcmc(), tmp_path / "whole.nc", random.PRNGKey(5), X, Y,
                          segment_draws=4, accumulator=_summing())
    path = tmp_path / "run.nc"
    first = run_streaming(_mcmc(), path, random.PRNGKey(5), X, Y, segment_draws=4,
                          accumulator=_summing(), max_segments=1)
    assert not first.complete and first.num_draws == 4
    with pytest.raises(KeyboardInterrupt):  # the second segment is appended, not committed
        run_streaming(_mcmc(), path, random.PRNGKey(5), X, Y, segment_draws=4,
                      accumulator=_summing(fail_on_call=1), resume=True)
    assert load_streamed(path, lazy=False).posterior.sizes["draw"] == 8
    # a fresh MCMC object resumes from the checkpoint (the key is not used again)
    last = run_streaming(_mcmc(), path, random.PRNGKey(99), X, Y, segment_draws=4,
                         accumulator=_summing(), resume=True)
    assert last.complete and last.num_draws == 12
    _assert_same_file(path, tmp_path / "whole.nc")
    np.testing.assert_array_equal(last.accumulated.w_sum, whole.accumulated.w_sum)
    assert last.accumulated.count == whole.accumulated.count == 3
    # resuming a finished run runs nothing
    again = run_streaming(_mcmc(), path, random.PRNGKey(5), X, Y, segment_draws=4,
                          accumulator=_summing(fail_on_call=1), resume=True)
    assert again.complete and again.num_draws == 12


@pytest.mark.slow
def test_on_the_fly_classification_metrics_equal_those_of_all_draws(tmp_path):
    rng = np.random.default_rng(0)
    X_all = rng.normal(size=(90, 4)).astype(np.float32)
    y_all = (X_all[:, 0] > 0).astype(np.int32) + (X_all[:, 1] > 0.5).astype(np.int32)
    X_train, y_train, X_test, y_test = X_all[:60], y_all[:60], X_all[60:], y_all[60:]
    net = partial(mlp_classifier, hidden=(5,), num_classes=3, prior=priors.gaussian())
    mcmc = MCMC(SGLD(partial(net, subsample_size=10), 1e-3), num_warmup=0, num_samples=12,
                **CHAINS)
    run = run_streaming(mcmc, tmp_path / "bnn.nc", random.PRNGKey(0), X_train, y_train,
                        segment_draws=4,
                        accumulator=classification_accumulator(net, X_test, batch_size=16))
    assert run.accumulated.num_draws == 24  # 2 chains x 12 draws
    idata = load_streamed(tmp_path / "bnn.nc", lazy=False)
    assert "net/mlp/linear_0/w" in idata.posterior  # site names with "/" come back
    draws = {k: v.values.reshape((-1,) + v.shape[2:]) for k, v in idata.posterior.items()}
    expected = classification_metrics(net, draws, X_test, y_test, batch_size=16)
    got = classification_metrics_from(run.accumulated, y_test)
    np.testing.assert_allclose(got["probs"], expected["probs"], rtol=1e-5, atol=1e-7)
    for key in ("log_prob", "accuracy", "ece", "mce"):
        assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
    assert 0 < got["accuracy"] < 1 and got["log_prob"] < 0


@pytest.mark.slow
def test_regression_sums_over_segments_equal_the_metrics_of_all_draws():
    rng = np.random.default_rng(1)
    X_test = jnp.asarray(rng.normal(size=(25, 2)), jnp.float32)
    y_test = rng.normal(size=25).astype(np.float32)
    net = partial(mlp_regressor, hidden=(3,))
    trace = handlers.trace(handlers.seed(net, 0)).get_trace(X_test)
    draws = {  # 2 chains x 6 draws of every latent site
        name: rng.normal(size=(2, 6) + np.shape(site["value"])).astype(np.float32)
        for name, site in trace.items() if site["type"] == "sample" and not site["is_observed"]
    }
    draws["sigma"] = np.abs(draws["sigma"]) + 0.1
    accumulator = regression_accumulator(net, X_test, y_test, batch_size=10)
    sums = accumulator.init()
    for start in (0, 2, 4):  # three segments of 2 draws per chain
        sums = accumulator.update(sums, {k: v[:, start : start + 2] for k, v in draws.items()})
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in draws.items()}
    out = Predictive(net, flat, return_sites=["mean"])(random.PRNGKey(1), X_test)
    mean, scale = np.asarray(out["mean"]), flat["sigma"][:, None]
    expected = regression_metrics(mean, scale, y_test)
    got = regression_metrics_from(sums, y_test)
    assert sums.num_draws == 12
    assert got["rmse"] == pytest.approx(expected["rmse"], rel=1e-6)
    assert got["test_ll"] == pytest.approx(expected["test_ll"], rel=1e-5)
    np.testing.assert_allclose(got["mean"], mean.mean(axis=0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["variance"], mean.var(axis=0) + np.mean(scale**2), rtol=1e-5)


def test_bad_input_is_refused_with_the_argument_and_the_fix(tmp_path):
    path = tmp_path / "run.nc"
    call = partial(run_streaming, path=path, rng_key=random.PRNGKey(0))

    def streaming(mcmc, **kw):
        return call(mcmc, **{"segment_draws": 4, **kw})

    for bad in (0, -2, 2.5, True, None):
        with pytest.raises(ValueError, match=f"`segment_draws` must be an integer >= 1, got "
                           f"{bad!r}.*kept draws per chain"):
            streaming(_mcmc(), segment_draws=bad)
    with pytest.raises(ValueError, match=r"`segment_draws`=5 does not divide the run's 12 kept "
                       r"draws per chain \(num_samples=24 / thinning=2\).*e.g. 4 or 6"):
        streaming(_mcmc(), segment_draws=5)
    with pytest.raises(ValueError, match="num_samples=25 is not a multiple of its thinning=2.*"
                       "num_samples=24 or 26"):
        streaming(_mcmc(num_samples=25))
    with pytest.raises(ValueError, match="`max_segments` must be an integer >= 1, got 0"):
        streaming(_mcmc(), max_segments=0)
    with pytest.raises(TypeError, match="`accumulator` must be an Accumulator"):
        streaming(_mcmc(), accumulator=lambda s: s)
    with pytest.raises(TypeError, match="`extra_fields` must be a tuple of field names"):
        streaming(_mcmc(), extra_fields="step_size")
    assert not path.exists()  # nothing was run or written

    path.write_bytes(b"not a streamed run")
    with pytest.raises(FileExistsError, match="run.nc.*exist.*resume=False: pass resume=True"):
        streaming(_mcmc())
    with pytest.raises(FileExistsError, match="checkpoint .* does not.*not a streamed run.*"
                       "remove the file"):
        streaming(_mcmc(), resume=True)
    path.unlink()

    # a run saved with some settings is not resumed with others
    run_streaming(_mcmc(), path, random.PRNGKey(0), X, Y, segment_draws=4, max_segments=1)
    with pytest.raises(ValueError, match="has num_chains=2, segment_draws=4; this call has "
                       "num_chains=1, segment_draws=6.*settings it was started with"):
        run_streaming(_mcmc(num_chains=1), path, random.PRNGKey(0), X, Y, segment_draws=6,
                      resume=True)
    with pytest.raises(ValueError, match="accumulator=False.*accumulator=True"):
        run_streaming(_mcmc(), path, random.PRNGKey(0), X, Y, segment_draws=4, resume=True,
                      accumulator=_summing())
    checkpoint_path(path).rename(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError, match="stopped before its first segment was committed"):
        run_streaming(_mcmc(), path, random.PRNGKey(0), X, Y, segment_draws=4, resume=True)
    (tmp_path / "elsewhere").rename(checkpoint_path(path))
    path.unlink()
    with pytest.raises(FileNotFoundError, match="checkpoint .* is there but the draws file"):
        run_streaming(_mcmc(), path, random.PRNGKey(0), X, Y, segment_draws=4, resume=True)


def with_root(X, y=None):
    """The regression with a deterministic site that is NaN where a weight is negative."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.deterministic("sqrt_w", jnp.sqrt(w))
    with numpyro.plate("data", X.shape[0], subsample_size=10) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 0.5), obs=y[idx])


def test_rejected_steps_and_non_finite_values_are_written_and_flagged(tmp_path):
    """A step far too large: every proposal overflows, and the next step finds it not finite
    and goes back (``diverging``), so every second step is rejected and the chain never leaves
    its start; the NaN values of a deterministic site are written as they are, not dropped."""
    mcmc = MCMC(SGLD(with_root, 1e30), num_warmup=0, num_samples=8, **CHAINS)
    run_streaming(mcmc, tmp_path / "run.nc", random.PRNGKey(0), X, Y, segment_draws=4)
    idata = load_streamed(tmp_path / "run.nc", lazy=False)
    w, root = idata.posterior["w"].values, idata.posterior["sqrt_w"].values
    np.testing.assert_array_equal(idata.sample_stats["diverging"].values,
                                  np.tile([False, True], (2, 4)))
    np.testing.assert_array_equal(idata.sample_stats["num_rejected"].values[:, -1], [4, 4])
    assert np.all(w == w[:, :1]) and np.all(np.isfinite(w))
    assert (w < 0).any() and np.array_equal(np.isnan(root), w < 0)


def test_a_run_that_would_recompile_every_segment_is_warned_about():
    # NumPyro's loop without jit_model_args compiles each segment anew with the data as
    # constants, and memory grows by about the data's size per segment (docs/streaming.md)
    from numpyro_sgrld.analysis.streaming import _warn_if_recompiling

    with pytest.warns(UserWarning, match="jit_model_args=False.*each segment again.*"
                      "jit_model_args=True.*enable_fast_sampling_loop"):
        _warn_if_recompiling(_mcmc(jit_model_args=False), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_if_recompiling(_mcmc(jit_model_args=True), 3)
        _warn_if_recompiling(_mcmc(jit_model_args=False), 1)  # one segment compiles once
        with numpyro_sgrld.fast_sampling_loop():  # the SG kernels' own loop keeps one program
            _warn_if_recompiling(_mcmc(jit_model_args=False), 3)
    # mapped chains (a callable chain_method, as "parallel"'s pmap) compile again on either
    # loop: warned, and the opt-in is not offered as the fix
    with numpyro_sgrld.fast_sampling_loop(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _warn_if_recompiling(_mcmc(jit_model_args=False, num_chains=2, chain_method=jax.vmap),
                             3)
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and said[0].endswith("jit_model_args=True)."), said
