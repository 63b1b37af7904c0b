"""One run, one verdict: an ``MCMC`` run of four chains that cannot be trusted ends with one
warning that says so, and one about its rejected steps, over all its chains, whether the chains
are vectorized or drawn one after another (NumPyro's default ``chain_method``, ``"parallel"``,
falls back to that on one device). On the kernels' own loop, which ``sgrld`` runs; on NumPyro's
loop the chains' moments are judged together at the end of the last one
(tests/test_warmup.py)."""

import warnings
from functools import partial

import jax
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
