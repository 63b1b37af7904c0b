"""The library's own random draws inside a compiled step: uniforms and signs cut from one call
of the bit generator, the uniform minibatches of its probes, and the slice step's single
draw of uniforms (each ``jax.random`` call is a separate threefry hash in the compiled
program, compiled on its own)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from conftest import bonferroni_z
from jax import random
from numpyro import handlers

from numpyro_sgrld.core.tree import tree_rademacher, uniform_bits, uniform_from_bits
from numpyro_sgrld.data.subsample import UniformSubsample


def test_uniforms_from_bits_are_jaxs_uniforms():
    """The same bits give ``jax.random.uniform``'s values, bit for bit, in both widths."""
    key = random.PRNGKey(7)
    ours = uniform_from_bits(uniform_bits(key, (1000,), jnp.float32), jnp.float32)
    np.testing.assert_array_equal(ours, random.uniform(key, (1000,)))
    assert float(ours.min()) >= 0.0 and float(ours.max()) < 1.0


def test_rademacher_signs_keep_the_tree_and_are_fair():
    """±1 only, in each leaf's shape and dtype; the share of +1 over 40,000 signs within its
    binomial error (z against 1/2), and the leaves not copies of one another."""
    like = {"a": jnp.zeros((100, 200), jnp.float32), "b": jnp.zeros((200, 100), jnp.float32)}
    signs = tree_rademacher(random.PRNGKey(3), like)
    for name, x in like.items():
        assert signs[name].shape == x.shape and signs[name].dtype == x.dtype
        assert set(np.unique(np.asarray(signs[name]))) == {-1.0, 1.0}
    flat = np.concatenate([np.ravel(signs["a"]), np.ravel(signs["b"])])
    z = (np.mean(flat > 0) - 0.5) / np.sqrt(0.25 / flat.size)
    assert abs(z) < bonferroni_z(1), z
    assert not np.array_equal(np.ravel(signs["a"]), np.ravel(signs["b"]))


def test_uniform_subsample_draws_rows_uniformly_and_scales_the_minibatch():
    """A probe's minibatch: ``n`` indices in ``0..N-1``, each row equally likely (every row's
    count over 2,000 minibatches within its binomial error), and the observed site scaled by
    ``N / n`` as NumPyro scales a subsample plate."""
    size, n = 50, 10

    def model():
        with numpyro.plate("rows", size, subsample_size=n) as idx:
            numpyro.sample("y", dist.Normal(0.0, 1.0), obs=jnp.zeros(size)[idx])

    def indices(key):
        trace = handlers.trace(UniformSubsample(handlers.seed(model, key), key=key)).get_trace()
        return trace["rows"]["value"], trace["y"]["scale"]

    idx, scale = jax.jit(jax.vmap(indices))(random.split(random.PRNGKey(0), 2000))
    assert idx.shape == (2000, n) and int(idx.min()) >= 0 and int(idx.max()) < size
    np.testing.assert_allclose(scale, size / n)
    counts = np.bincount(np.ravel(idx), minlength=size)
    p = 1.0 / size
    z = (counts - idx.size * p) / np.sqrt(idx.size * p * (1 - p))
    assert np.all(np.abs(z) < bonferroni_z(size)), z


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
