"""One run, one verdict: an ``MCMC`` run of four chains that cannot be trusted ends with one
warning that says so, and one about its rejected steps, over all its chains, whether the chains
are vectorized or drawn one after another (NumPyro's default ``chain_method``, ``"parallel"``,
falls back to that on one device). On the kernels' own loop, which ``sgrld`` runs; on NumPyro's
loop the chains' moments are judged together at the end of the last one
(tests/test_warmup.py)."""

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC
from numpyro_sgrld.models import linear_regression as lr

import numpyro_sgrld as ns

X, Y, _ = lr.make_data(seed=3, num_data=300, num_features=3)
CHAINS, STEPS = 4, 200


def _warnings(chain_method):
    """The warnings of a 4-chain run on the kernels' own loop whose step is far too large
    (most proposals have a potential that is not finite: rejected, and the chains do not
    mix)."""
    kernel = ns.SGLD(partial(lr.model, subsample_size=30), step_size=1e-2)
    options = {} if chain_method is None else {"chain_method": chain_method}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(kernel, num_warmup=0, num_samples=STEPS, num_chains=CHAINS,
                    progress_bar=False, **options)
        with ns.fast_sampling_loop():
            mcmc.run(jax.random.PRNGKey(0), X, Y)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("chain_method", [None, "vectorized"], ids=["default", "vectorized"])
def test_a_run_of_four_chains_gets_one_verdict(chain_method):
    if chain_method is None and jax.local_device_count() >= CHAINS:
        pytest.skip("NumPyro's default runs the chains in parallel here, one per device")
    said = _warnings(chain_method)
    verdicts = [m for m in said if "cannot be trusted" in m]
    assert len(verdicts) == 1, said
    rejected = [m for m in said if "rejected" in m and "cannot be trusted" not in m]
    assert len(rejected) == 1 and f"of {CHAINS * STEPS} steps" in rejected[0], rejected


def _hierarchy(y):
    """``mu ~ N(0, 1)``, ``x ~ N(mu, 1)``, ``y_i ~ N(x, 1)``: ``mu`` a Gibbs site."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    x = numpyro.sample("x", dist.Normal(mu, 1.0))
    with numpyro.plate("data", y.shape[0], subsample_size=10) as idx:
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y[idx])


def _mu_given_x(rng_key, gibbs_sites, hmc_sites):
    """``mu | x ~ N(x / 2, 1 / 2)``."""
    return {"mu": hmc_sites["x"] / 2 + 0.5 ** 0.5 * jax.random.normal(rng_key)}


def _gibbs_verdicts(fast):
    """The verdicts of a run of ``SGGibbs(SGLD)`` far too short to be trusted (20 draws),
    with the fast sampling loop on or off."""
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(_hierarchy, step_size=1e-3), _mu_given_x, ["mu"],
                           decentre=False, control_variate=None, interweave_every=None),
                num_warmup=20, num_samples=20, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if fast:
            with ns.fast_sampling_loop():
                mcmc.run(jax.random.PRNGKey(0), jnp.full(500, 3.0))
        else:
            mcmc.run(jax.random.PRNGKey(0), jnp.full(500, 3.0))
    return [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]


def test_an_sggibbs_run_with_the_fast_loop_on_gets_the_same_verdict():
    """``SGGibbs`` runs on NumPyro's loop with the fast sampling loop on too (only the SG
    kernels have their own), so its SG kernel keeps the run's moments for the verdict either
    way: one verdict, the same as with the opt-in off (before, with the opt-in on the kernel
    kept none, expecting the own loop to judge the draws, and the run was silent)."""
    on, off = _gibbs_verdicts(True), _gibbs_verdicts(False)
    assert len(on) == 1 and on == off, (on, off)


@pytest.mark.slow  # a subprocess with four host devices (as tests/test_chains.py's)
def test_parallel_chains_get_the_verdict_of_the_same_chains_drawn_one_after_another():
    """``chain_method="parallel"`` (one chain per device, ``pmap``), with the fast sampling
    loop on or off and the progress bar on or off: the run too wide to trust gets one verdict,
    the one its chains get drawn one after another (the same chains from the same keys), and
    a run of the same chains at SGLD's defaults stays as quiet as they are (before, parallel
    chains got no verdict at all: the kernel's ``init`` runs inside ``pmap``, where it kept no
    moments, and the own loop judges no draws there). Each device reports its chain's
    moments from the compiled loop; the verdict may come after ``MCMC.run`` returns, so the
    script waits for it (``jax.effects_barrier``)."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import json, warnings
        from functools import partial
        import jax
        from numpyro.infer import MCMC
        import numpyro_sgrld as ns
        from numpyro_sgrld.models import linear_regression as lr
        X, Y, _ = lr.make_data(seed=3, num_data=300, num_features=3)
        out = {}
        for run, step, warmup, samples in (("wrong", 1e-2, 0, 200), ("right", None, 500, 1000)):
            for method, fast, bar in (("sequential", False, False), ("parallel", False, False),
                                      ("parallel", False, True), ("parallel", True, False),
                                      ("parallel", True, True)):
                kernel = ns.SGLD(partial(lr.model, subsample_size=30), step_size=step)
                mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, num_chains=4,
                            chain_method=method, progress_bar=bar)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    if fast:
                        ns.enable_fast_sampling_loop()
                    mcmc.run(jax.random.PRNGKey(0), X, Y)
                    jax.effects_barrier()
                    ns.disable_fast_sampling_loop()
                out[f"{run} {method} fast={fast} bar={bar}"] = [
                    str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
        print(json.dumps(out))
        """
    )
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    said = json.loads(result.stdout.strip().splitlines()[-1])
    for run in ("wrong", "right"):
        sequential = _to_digits(said[f"{run} sequential fast=False bar=False"])
        assert len(sequential) == (run == "wrong"), sequential
        for label, verdicts in said.items():
            if label.startswith(f"{run} parallel"):
                assert _to_digits(verdicts) == sequential, (label, verdicts, sequential)


def _to_digits(texts, digits=6):
    """``texts`` with every number to ``digits`` significant digits: the same chains' moments
    summed in another order (a device's loop, NumPyro's or the kernels') differ in the last
    digits of float64 (the far too wide run's readings are of order 1e34)."""
    import re

    return [re.sub(r"\d+(\.\d+)?", lambda m: f"{float(m.group()):.{digits}g}", t)
            for t in texts]


def test_which_runs_the_kernels_own_loop_judges():
    """The own loop judges the kept draws of an SG kernel's run with the opt-in on: one chain
    whatever its ``chain_method`` (NumPyro's default, "parallel", maps no single chain), and
    "parallel" chains where NumPyro draws them one after another (fewer devices than
    chains); not an ``SGGibbs`` run (NumPyro's loop), nor any run with the opt-in off. There
    the kernel keeps the moments itself (``run_verdict.arm``)."""
    from numpyro_sgrld.sampler.compat import judged_on_own_loop

    sgld = ns.SGLD(partial(lr.model, subsample_size=30))

    def mcmc(kernel, **options):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # not enough devices for parallel chains
            return MCMC(kernel, num_warmup=10, num_samples=10, progress_bar=False, **options)

    one, many = mcmc(sgld), mcmc(sgld, num_chains=jax.local_device_count() + 1)
    gibbs = mcmc(ns.SGGibbs(ns.SGLD(_hierarchy), _mu_given_x, ["mu"]))
    assert not judged_on_own_loop(one)
    with ns.fast_sampling_loop():
        assert judged_on_own_loop(one) and judged_on_own_loop(many)
        assert not judged_on_own_loop(gibbs)
