r"""Gradient estimators: ``(position, minibatch) -> (value, grad)``.

The default estimator differentiates NumPyro's own minibatch potential

.. math::
    \hat U(\theta) = -\log p(\theta) - \frac{N}{n}\sum_{i \in B} \log p(y_i \mid \theta)

(the ``N/n`` scaling comes from ``numpyro.plate(..., subsample_size=n)``), evaluated on the
unconstrained space with the Jacobians of the constraining transforms included. Control variates
or other estimators can be added as other functions of the same signature.
"""

import jax
from numpyro import handlers
from numpyro.infer.util import potential_energy

__all__ = ["minibatch_potential", "value_and_grad_estimator"]


def minibatch_potential(model, model_args=(), model_kwargs=None):
    """The potential :math:`\\hat U(z; \\text{idx})` of ``model`` with the subsample plates'
    indices substituted by ``idx`` (a dict ``{plate_name: indices}``); ``z`` is a dict of
    unconstrained latent values."""
    model_kwargs = {} if model_kwargs is None else model_kwargs

    def potential(z, idx):
        return potential_energy(handlers.substitute(model, data=idx), model_args, model_kwargs, z)

    return potential


def value_and_grad_estimator(potential):
    """Default estimator: the exact gradient of the minibatch potential, by reverse mode."""
    return jax.value_and_grad(potential)
