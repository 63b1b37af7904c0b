"""The library's own random draws inside a compiled step: uniforms cut from one call of the bit
generator, and the slice step's single draw of uniforms (each ``jax.random`` call is a
separate threefry hash in the compiled program, compiled on its own)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import random

from numpyro_sgrld.core.tree import uniform_bits, uniform_from_bits


def test_uniforms_from_bits_are_jaxs_uniforms():
    """The same bits give ``jax.random.uniform``'s values, bit for bit, in both widths."""
    key = random.PRNGKey(7)
    ours = uniform_from_bits(uniform_bits(key, (1000,), jnp.float32), jnp.float32)
    np.testing.assert_array_equal(ours, random.uniform(key, (1000,)))
    assert float(ours.min()) >= 0.0 and float(ours.max()) < 1.0


def test_a_sites_slice_update_draws_its_uniforms_in_one_call():
    """The slice update of a 25-element data-free site (every element at once) holds one
    threefry hash in its compiled program, where a key split per element, and per step a
    split, an exponential and two uniforms, and in the loop a split and a uniform, held
    seven."""
    from numpyro_sgrld.sampler.conditionals import DataFreeSite, slice_update

    def model():
        lam = numpyro.sample("lam", dist.HalfCauchy(jnp.ones(25)).to_event(1))
        numpyro.sample("w", dist.Normal(0.0, lam).to_event(1))

    site = DataFreeSite(("lam", "w"), dist.biject_to(dist.constraints.positive))
    draw = slice_update(model, "lam", site, (), {}, independent=True)
    values = {"lam": jnp.ones(25), "w": jnp.linspace(-1.0, 1.0, 25)}
    text = jax.jit(lambda k, v: draw(k, v, values)).lower(
        random.PRNGKey(0), values["lam"]).as_text()
    assert text.count("call @threefry2x32") == 1, text.count("call @threefry2x32")
