r"""Wenzel et al.'s (2020) layer-wise metric."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld.core.checks import flag
from numpyro_sgrld.core.correction import GammaBias, NoLag
from numpyro_sgrld.core.metrics._base import (
    Metric,
    Preconditioner,
    check_decay,
    check_interval,
    check_nonnegative,
    step_context,
)


class WenzelState(NamedTuple):
    """``avg``: per-site running mean square :math:`s_p`; ``scale``: the current
    :math:`D_p`; ``count``: steps taken."""

    avg: Any
    scale: Any
    count: Any


def wenzel(decay=0.99, eps=1e-8, update_interval=None, *, lagged_refresh=False) -> Metric:
    r"""Wenzel et al.'s (2020) layer-wise metric, as in bnn_priors and Yu et al. (2023).

    One scalar per latent site p:

    .. math::
        s_p \leftarrow \alpha s_p + (1 - \alpha)\,\mathrm{mean}(\bar g_p^2), \quad
        M_p = s_p + \epsilon, \quad D_p = (M_p / \min_q M_q)^{-1/2},

    :math:`s_p` starting at ones; :math:`D_p` is refreshed every ``update_interval`` steps
    (``None``, the default: one epoch, ``context.steps_per_epoch`` = :math:`N/n` of the largest
    subsample plate) and is 1 before the first refresh. State: two numbers per site.

    ``lagged_refresh=True`` reproduces Yu et al.'s code (bnn_priors' ``WenzelSGLD``): there the
    statistic is updated after the step that used the old :math:`D_p`, and the refresh at the
    end of an epoch takes effect from the next step; by default (our convention: statistics
    first) the step at which the refresh happens already uses it. The two chains differ only
    in the one step at each refresh (``tests/test_reference_updates.py``).
    """
    decay = check_decay(decay)
    eps = check_nonnegative(eps, "eps")
    if update_interval is not None:
        update_interval = check_interval(update_interval)
    lagged_refresh = flag(lagged_refresh, "lagged_refresh")

    def init(position):
        ones = jax.tree.map(lambda x: jnp.ones((), jnp.result_type(x)), position)
        return WenzelState(ones, ones, jnp.zeros((), jnp.int32))

    def update(grad, state, position, context=None):
        context = step_context(context)
        num_data = context.num_data
        interval = context.steps_per_epoch if update_interval is None else update_interval
        count = state.count + 1
        avg = jax.tree.map(
            lambda s, g: decay * s + (1 - decay) * jnp.mean((g / num_data) ** 2), state.avg, grad
        )
        mass = jax.tree.map(lambda s: s + eps, avg)
        smallest = jnp.min(jnp.stack(jax.tree.leaves(mass)))
        fresh = jax.tree.map(lambda m: (m / smallest) ** -0.5, mass)
        scale = jax.tree.map(
            lambda new, old: jnp.where(count % interval == 0, new, old), fresh, state.scale
        )
        used = state.scale if lagged_refresh else scale
        precond = Preconditioner(
            drift=lambda t: jax.tree.map(lambda d, x: d * x, used, t),
            noise=lambda t: jax.tree.map(lambda d, x: jnp.sqrt(d) * x, used, t),
        )
        return precond, WenzelState(avg, scale, count)

    return Metric(init, update, name="wenzel", traits=(NoLag(
        "the layer-wise metric is held constant between refreshes, so it has no moving-average "
        "statistic to differentiate"), GammaBias(correctable=False)))
