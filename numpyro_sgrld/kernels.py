r"""Public stochastic-gradient kernels: thin classes that pick a metric and an integrator."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random

from numpyro_sgrld._adapter import SGMCMCKernel
from numpyro_sgrld._tree import tree_normal, tree_where
from numpyro_sgrld.integrators import langevin, sghmc
from numpyro_sgrld.metrics import identity

__all__ = ["LangevinKernel", "SGLD", "SGHMC", "SGHMCState"]


class LangevinKernel(SGMCMCKernel):
    r"""Riemannian Langevin kernel for any :class:`~numpyro_sgrld.metrics.Metric`.

    .. math::
        \theta \leftarrow \theta - h\,D\nabla\hat U + h\,\Gamma + \sqrt{2hT}\,D^{1/2}\xi.

    The kernel's ``sampler_state`` is the metric's state. Keyword arguments are those of
    :class:`~numpyro_sgrld._adapter.SGMCMCKernel`.
    """

    def __init__(self, model=None, step_size=None, *, metric, **kwargs):
        super().__init__(model, step_size, **kwargs)
        self._metric = metric

    def _init_sampler(self, key, z):
        return self._metric.init(z)

    def _transition(self, key, z, sampler_state, grad, grad_fn, step_size, i):
        preconditioner, sampler_state = self._metric.update(grad, sampler_state, z)
        return langevin(key, z, grad, preconditioner, step_size, self._temperature), sampler_state


class SGLD(LangevinKernel):
    r"""Stochastic gradient Langevin dynamics (Welling & Teh 2011).

    Discretises :math:`d\theta = -\nabla U(\theta)\,dt + \sqrt{2T}\,dW` with a minibatch
    gradient:

    .. math::
        \theta_{t+1} = \theta_t - h_t \nabla\hat U(\theta_t) + \sqrt{2 h_t T}\,\xi_t,
        \qquad \xi_t \sim \mathcal N(0, I).

    Parameter mapping: ``step_size`` :math:`h = \epsilon/2` of Welling & Teh
    (who write :math:`\frac{\epsilon}{2}\nabla\log p + \mathcal N(0, \epsilon)`), or
    :math:`h = \mathrm{lr}/N` for a learning rate on the mean log-likelihood.

    **Known bias.** With a constant step the chain's stationary law is not the posterior: on a
    Gaussian :math:`\mathcal N(0, \sigma^2)` with exact gradients its variance is
    :math:`\sigma^2 / (1 - h / (2\sigma^2))`, and minibatch noise adds roughly
    :math:`h \cdot \mathrm{Var}[\nabla\hat U]/2` more (Vollmer, Zygalakis & Teh 2016). Both
    vanish as :math:`h \to 0`; a decaying schedule removes them asymptotically.

    **State size:** none beyond the position.

    :param model: NumPyro model.
    :param step_size: :math:`h`, float > 0 or a schedule.
    :param kwargs: ``potential_fn``, ``temperature``, ``num_data``, ``batching``,
        ``init_strategy`` (see :class:`~numpyro_sgrld._adapter.SGMCMCKernel`).

    Example::

        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> from numpyro_sgrld import SGLD
        >>> def model():
        ...     numpyro.sample("theta", dist.Normal(0.0, 1.0))
        >>> mcmc = MCMC(SGLD(model, step_size=0.05), num_warmup=100, num_samples=500,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0))
        >>> mcmc.get_samples()["theta"].shape
        (500,)
    """

    def __init__(self, model=None, step_size=None, **kwargs):
        super().__init__(model, step_size, metric=identity(), **kwargs)


class SGHMCState(NamedTuple):
    """SGHMC's own state: the momentum ``v`` (same tree as the position)."""

    momentum: Any


def _check_friction(friction, noise_estimate):
    if not (isinstance(friction, (int, float)) and 0 < friction <= 1):
        raise ValueError(
            f"`friction` must be in (0, 1] (the momentum decay alpha; 0.01 to 0.1 is typical), "
            f"got {friction!r}."
        )
    if not (isinstance(noise_estimate, (int, float)) and 0 <= noise_estimate < friction):
        raise ValueError(
            f"`noise_estimate` must satisfy 0 <= noise_estimate < friction ({friction}), "
            f"got {noise_estimate!r}: the injected noise variance 2(friction - noise_estimate)h "
            "must stay positive. Lower it or raise `friction`."
        )


class SGHMC(SGMCMCKernel):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin 2014, Eq. 15).

    Discretises the second-order Langevin dynamics with friction, unit mass:

    .. math::
        v_{t+1} &= (1 - \alpha) v_t - h\nabla\hat U(\theta_t)
                  + \mathcal N\big(0,\; 2(\alpha - \hat\beta) h T\big), \\
        \theta_{t+1} &= \theta_t + v_{t+1}.

    Parameter mapping to Chen et al.: ``step_size`` :math:`h = \eta` (learning rate),
    ``friction`` :math:`\alpha`, ``noise_estimate`` :math:`\hat\beta`. In continuous time
    :math:`\epsilon = \sqrt{h}` and friction :math:`C = \alpha / \epsilon`. The momentum is
    kept across steps (and across ``MCMC.run`` calls continued from ``last_state``); a fresh
    minibatch is drawn every step.

    **Known bias.** Like SGLD, a constant step gives :math:`O(h)` discretisation bias and the
    unaccounted minibatch noise inflates the spread (by about
    :math:`h\,\mathrm{Var}[\nabla\hat U] / (2(\alpha - \hat\beta))` relative to the injected
    noise); a larger ``friction`` or a good ``noise_estimate`` reduces it.

    **State size:** one momentum per parameter.

    :param model: NumPyro model.
    :param step_size: :math:`h = \eta`, float > 0 or a schedule.
    :param friction: :math:`\alpha \in (0, 1]`, default 0.1.
    :param noise_estimate: :math:`\hat\beta \in [0, \alpha)`, default 0.
    :param initial_momentum: ``"zero"`` (default) or ``"random"`` (:math:`\mathcal N(0, h_0 T)`).
    :param resample_momentum_every: redraw :math:`v \sim \mathcal N(0, h_t T)` every this many
        steps (``None``: never).
    :param kwargs: ``potential_fn``, ``temperature``, ``num_data``, ``batching``,
        ``init_strategy`` (see :class:`~numpyro_sgrld._adapter.SGMCMCKernel`).

    Example::

        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> from numpyro_sgrld import SGHMC
        >>> def model():
        ...     numpyro.sample("theta", dist.Normal(0.0, 1.0))
        >>> mcmc = MCMC(SGHMC(model, step_size=0.01, friction=0.1), num_warmup=100,
        ...             num_samples=500, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0))
        >>> mcmc.get_samples()["theta"].shape
        (500,)
    """

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        friction=0.1,
        noise_estimate=0.0,
        initial_momentum="zero",
        resample_momentum_every=None,
        **kwargs,
    ):
        super().__init__(model, step_size, **kwargs)
        _check_friction(friction, noise_estimate)
        if initial_momentum not in ("zero", "random"):
            raise ValueError(
                f"Unknown initial_momentum={initial_momentum!r}; use 'zero' or 'random'."
            )
        if resample_momentum_every is not None and not (
            isinstance(resample_momentum_every, int) and resample_momentum_every >= 1
        ):
            raise ValueError(
                "`resample_momentum_every` must be a positive integer or None, "
                f"got {resample_momentum_every!r}."
            )
        self._friction = float(friction)
        self._noise_estimate = float(noise_estimate)
        self._initial_momentum = initial_momentum
        self._resample_every = resample_momentum_every

    def _fresh_momentum(self, key, z, step_size):
        scale = jnp.sqrt(step_size * self._temperature)
        return jax.tree.map(lambda n: scale * n, tree_normal(key, z))

    def _init_sampler(self, key, z):
        if self._initial_momentum == "zero":
            return SGHMCState(jax.tree.map(jnp.zeros_like, z))
        step_size = jnp.asarray(self._schedule(0), jnp.result_type(float))
        return SGHMCState(self._fresh_momentum(key, z, step_size))

    def _transition(self, key, z, sampler_state, grad, grad_fn, step_size, i):
        momentum = sampler_state.momentum
        if self._resample_every is not None:
            key, key_momentum = random.split(key)
            resample = (i > 0) & (i % self._resample_every == 0)
            momentum = tree_where(
                resample, self._fresh_momentum(key_momentum, z, step_size), momentum
            )
        z, momentum = sghmc(
            key,
            z,
            momentum,
            grad,
            step_size,
            self._friction,
            self._noise_estimate,
            self._temperature,
        )
        return z, SGHMCState(momentum)
