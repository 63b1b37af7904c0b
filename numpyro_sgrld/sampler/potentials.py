r"""A NumPyro model as the potentials the gradient estimators differentiate
(:mod:`numpyro_sgrld.core.gradients`): the minibatch potential

.. math::
    \hat U(\theta) = -\log p(\theta) - \frac{N}{n}\sum_{i \in B} \log p(y_i \mid \theta)

with the subsample plates' indices substituted (the ``N/n`` scaling comes from
``numpyro.plate(..., subsample_size=n)``), on the unconstrained space with the Jacobians of
the constraining transforms, and the auxiliary values a model records in the same pass
(:func:`auxiliary`)."""

from numpyro import handlers
from numpyro.infer.util import potential_energy
from numpyro.primitives import Messenger, apply_stack

__all__ = ["AUX_SITE", "auxiliary", "minibatch_potential", "minibatch_potential_with_aux"]


def minibatch_potential(model, model_args=(), model_kwargs=None):
    """The potential :math:`\\hat U(z; \\text{idx})` of ``model`` with the subsample plates'
    indices substituted by ``idx`` (a dict ``{plate_name: indices}``); ``z`` is a dict of
    unconstrained latent values."""
    model_kwargs = {} if model_kwargs is None else model_kwargs

    def potential(z, idx):
        return potential_energy(handlers.substitute(model, data=idx), model_args, model_kwargs, z)

    return potential


AUX_SITE = "auxiliary"


def auxiliary(name, value):
    """Record ``value`` as an auxiliary value of this minibatch's forward pass, under ``name``
    (e.g. a layer's inputs, for a metric that reads them): the stochastic-gradient kernels hand
    it to the metric in :attr:`StepContext.aux <numpyro_sgrld.core.metrics.StepContext>`, from the
    same pass that computes the gradient. Returns ``value``. Outside those kernels (``NUTS``,
    ``Predictive``) it does nothing: the site carries no density and is not recorded as a
    sample."""
    msg = apply_stack({"type": AUX_SITE, "name": name, "value": value, "cond_indep_stack": []})
    return msg["value"]


class _CollectAux(Messenger):
    """Collects the values of :func:`auxiliary` sites while the model runs."""

    def __init__(self, fn=None):
        self.values = {}
        super().__init__(fn)

    def postprocess_message(self, msg):
        if msg["type"] == AUX_SITE:
            self.values[msg["name"]] = msg["value"]


def minibatch_potential_with_aux(model, model_args=(), model_kwargs=None):
    """``(z, idx) -> (value, aux)``: :func:`minibatch_potential` and the dict of the values the
    model recorded with :func:`auxiliary` in the same pass (empty when it records none)."""
    model_kwargs = {} if model_kwargs is None else model_kwargs

    def potential(z, idx):
        collect = _CollectAux(handlers.substitute(model, data=idx))
        value = potential_energy(collect, model_args, model_kwargs, z)
        return value, collect.values

    return potential
