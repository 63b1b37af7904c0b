r"""Batch Normalization Preconditioning (Lange, Deng, Ye & Lin 2023, Algorithm 1).

For a dense layer :math:`a = W^\top h + b` (Haiku's layout: ``w`` of shape ``(m, n_out)``) the
preconditioner is built from the layer's **inputs** :math:`h` on the current minibatch, not from
gradients. With the minibatch mean and variance :math:`\mu_A, \sigma_A^2 \in \mathbb R^m` of the
inputs (``n`` rows), running averages

.. math::
    \mu \leftarrow \rho\mu + (1-\rho)\mu_A, \qquad
    \sigma^2 \leftarrow \rho\sigma^2 + (1-\rho)\sigma_A^2 \qquad (\mu_0 = 0,\ \sigma_0 = 1),

:math:`\tilde\sigma^2 = \sigma^2 + \epsilon_1\max_j\sigma_j^2 + \epsilon_2` and
:math:`q^2 = \max(m/n, 1)`, each output unit's parameters :math:`\hat w = (b_i, w_{\cdot i})`
get :math:`P = UD`,

.. math::
    U = \begin{pmatrix} 1 & -\mu^\top \\ 0 & I \end{pmatrix}, \qquad
    D = \begin{pmatrix} 1 & 0 \\ 0 & \mathrm{diag}(\tilde\sigma) \end{pmatrix}^{-1},

the same for every unit of the layer (weights and bias together: one :math:`(m+1)\times(m+1)`
block, not independent diagonals). The drift is :math:`PP^\top\nabla\hat U/q^2` (Algorithm 1,
steps 4–5):

.. math::
    g_w \leftarrow \frac{g_w - \mu\,g_b^\top}{q^2\,\tilde\sigma^2}, \qquad
    g_b \leftarrow \frac{g_b}{q^2} - g_w^\top\mu \quad\text{(the new } g_w\text{)},

and the noise :math:`P\xi/s` (steps 6–7): :math:`\xi_w \leftarrow \xi_w/(\tilde\sigma s)`,
:math:`\xi_b \leftarrow \xi_b/s - \xi_w^\top\mu`.

**The noise scale** ``s``. The paper prints :math:`s = \sqrt q` (steps 6–7), whose noise
covariance is :math:`PP^\top/q` while the drift is :math:`PP^\top/q^2`: for a layer with more
inputs than the minibatch has rows (:math:`q > 1`) that samples the layer at temperature
:math:`q` instead of 1. ``noise_scale="consistent"`` (the default) uses :math:`s = q`, so that
the noise covariance is the drift's preconditioner and the chain targets the posterior;
``noise_scale="as_printed"`` uses :math:`\sqrt q`, Algorithm 1 as printed. Both agree when
:math:`m \le n`.

**Which parameters.** A layer is preconditioned when the model records its inputs as the
auxiliary value ``"layer_inputs:{path}"`` (rows × m) and its weight ``"{path}/w"`` is a latent
site of shape ``(m, n_out)``, or ``(*spatial, c_in, c_out)`` for a convolution, whose inputs
are then its **patches** (rows: batch × output positions; features in the kernel's row-major
order, so that the convolution is exactly the dense map ``patches @ w.reshape(m, c_out)``, and
Algorithm 1 on it is Algorithm 1 on a dense layer, with :math:`m = c_{in}\prod k` and
:math:`n` = batch × output positions). :func:`numpyro_sgrld.random_haiku_module` records both
for every ``hk.Linear`` and every channels-last ``hk.ConvND`` without feature groups or mask.
Its bias ``"{path}/b"`` joins the block when it is a latent site (without a bias,
:math:`P = D`). Every other parameter — priors' scale sites, a regressor's noise scale, other
layers — gets the identity.

**The Γ term** (Rensmeyer & Niggemann 2023: a position-dependent metric needs the drift
:math:`\Gamma_i = \sum_j\partial_j G^{-1}_{ij}`, without which pSGLD, Monge and Shampoo SGRLD
converge to :math:`\propto p(\theta)/\det`-type laws even as :math:`h \to 0`). Lange et al. drop
Γ citing Li et al. (2016). For BNP it vanishes: the block of layer :math:`\ell` depends on
:math:`\theta` only through the inputs :math:`h^{(\ell-1)}`, which are functions of the
*earlier* layers' parameters and the data, and the preconditioner is block diagonal by layer,
so :math:`\partial_j G^{-1}_{ij} = 0` whenever :math:`i` and :math:`j` are in the same block —
and it is zero otherwise. (Not so for a module applied to its own outputs — a recurrence, or
shared weights along a path: its inputs then depend on its own parameters.) Γ ≡ 0 for the
instantaneous BNP metric (checked by automatic differentiation in ``tests/test_bnp.py``);
what remains is the lag of the running averages,
the same first-order effect as for any moving-average metric. ``correction=`` is therefore
refused for this metric (there is nothing to correct).

Parameter mapping to the paper: ``decay`` :math:`\rho`, ``eps1`` :math:`\epsilon_1`, ``eps2``
:math:`\epsilon_2`; the paper's learning rate :math:`\alpha` is ``step_size`` ×
:math:`N` when the paper's loss is the mean over the data (ours is the potential, a sum).
"""

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from numpyro_sgrld.core.checks import flag, real
from numpyro_sgrld.core.correction import NoLag
from numpyro_sgrld.core.metrics._base import Aux, Metric, Preconditioner, check_decay, step_context

#: Prefix of the auxiliary values that hold a dense layer's inputs: ``"layer_inputs:{path}"``,
#: where ``"{path}/w"`` and ``"{path}/b"`` are the layer's weight and bias sites.
LAYER_INPUTS = "layer_inputs:"

NOISE_SCALES = ("consistent", "as_printed")


class BNPState(NamedTuple):
    """Per dense layer (keyed by the layer's path): the running mean and variance of its
    inputs, :math:`\\mu` and :math:`\\sigma^2` (vectors of the input dimension), as Algorithm 1
    keeps them (from :math:`\\mu_0 = 0`, :math:`\\sigma_0 = 1`); ``count``: updates so far."""

    mean: Any
    var: Any
    count: Any = 0


def layer_inputs_name(path):
    """The auxiliary value's name for the inputs of the dense layer at ``path``."""
    return LAYER_INPUTS + path


def dense_layers(position):
    """The paths of the candidate layers of ``position``: latent sites named ``"{path}/w"`` of
    rank 2 or more (a dense weight, or a convolution's kernel ``(*spatial, c_in, c_out)``, a
    dense map on its patches); whether a layer is preconditioned is decided by whether the
    model records its inputs."""
    return tuple(
        name[: -len("/w")]
        for name, value in position.items()
        if isinstance(name, str) and name.endswith("/w") and jnp.ndim(value) >= 2
    )


def _fan_in(weight):
    return int(np.prod(jnp.shape(weight)[:-1]))


def _check_positive(value, name):
    return real(value, name, low=0, low_open=True)


def _layers_with_inputs(position, aux):
    """``{path: inputs (rows, m)}`` for the layers whose inputs the model recorded; refuses
    recorded inputs that match no latent weight of the right shape."""
    found = {}
    for key, value in (aux or {}).items():
        if not (isinstance(key, str) and key.startswith(LAYER_INPUTS)):
            continue
        path = key[len(LAYER_INPUTS):]
        weight = position.get(path + "/w")
        if weight is None or jnp.ndim(weight) < 2:
            raise ValueError(
                f"BNP: the model records the inputs of the layer {path!r}, but "
                f"{path + '/w'!r} is not a latent weight site (the latent sites are "
                f"{sorted(position)}). BNP preconditions the weight where it is sampled: use a "
                "centred prior on the weight (e.g. priors.horseshoe('layer') or "
                "priors.gaussian), not a non-centred one whose latent site is another name."
            )
        m = _fan_in(weight)
        inputs = jnp.reshape(value, (-1, jnp.shape(value)[-1]))
        if inputs.shape[-1] != m:
            raise ValueError(
                f"BNP: the recorded inputs of {path!r} have {inputs.shape[-1]} features, but "
                f"its weight {path + '/w'!r} has shape {weight.shape} ({m} inputs × outputs)."
            )
        found[path] = inputs
    return found


def _block(mean, tilde, q2, scale):
    """The layer's ``(drift, noise, noise_transpose)`` on ``(w, b)`` (``b`` may be ``None``)."""
    sd = jnp.sqrt(tilde)

    def drift(w, b):
        if b is None:
            return w / (q2 * tilde[:, None]), None
        w = (w - mean[:, None] * b[None, :]) / (q2 * tilde[:, None])
        return w, b / q2 - mean @ w

    def noise(w, b):
        w = w / (sd[:, None] * scale)
        if b is None:
            return w, None
        return w, b / scale - mean @ w

    def noise_transpose(w, b):
        if b is None:
            return w / (sd[:, None] * scale), None
        return (w - mean[:, None] * b[None, :]) / (sd[:, None] * scale), b / scale

    return drift, noise, noise_transpose


def bnp(decay=0.99, eps1=1e-2, eps2=1e-4, noise_scale="consistent", bias_correction=False
        ) -> Metric:
    r"""Batch Normalization Preconditioning, Lange et al. (2023) Algorithm 1 (see the module
    docstring for the formulas, the noise scale and the Γ term).

    :param decay: :math:`\rho \in [0, 1)`, the running averages' weight (paper: 0.99; their
        Griewank experiment 0.985).
    :param eps1: :math:`\epsilon_1 > 0`, relative floor of :math:`\tilde\sigma^2` (1e-2).
    :param eps2: :math:`\epsilon_2 > 0`, absolute floor (1e-4): a layer whose inputs are
        constant has :math:`\sigma^2 \to 0` and :math:`\tilde\sigma^2 \to \epsilon_2`.
    :param noise_scale: ``"consistent"`` (noise :math:`P\xi/q`, default) or ``"as_printed"``
        (:math:`P\xi/\sqrt q`, Algorithm 1's steps 6–7 as printed).
    :param bias_correction: use the running averages without their start values,
        :math:`\hat\mu = \mu_t/(1-\rho^t)` and
        :math:`\hat\sigma^2 = (\sigma^2_t - \rho^t)/(1-\rho^t)` (Adam's correction, as
        ``metrics.rmsprop`` has it): the weighted mean of the minibatch statistics seen so
        far, so the first steps are preconditioned by the inputs' statistics rather than by
        :math:`\mu = 0, \sigma = 1` (with inputs of scale :math:`10^3` those first steps
        are as stiff as SGLD's). Default ``False``: Algorithm 1 as printed.

    The model must record each layer's inputs (``"layer_inputs:{path}"``;
    :func:`numpyro_sgrld.random_haiku_module` does it for ``hk.Linear`` and convolutions).
    State: two vectors of each layer's fan-in.
    """
    decay = check_decay(decay)
    bias_correction = flag(bias_correction, "bias_correction")
    eps1 = _check_positive(eps1, "eps1")
    eps2 = _check_positive(eps2, "eps2")
    if noise_scale not in NOISE_SCALES:
        raise ValueError(
            f"Unknown noise_scale={noise_scale!r}; use 'consistent' (noise P xi / q, the "
            "posterior's law) or 'as_printed' (P xi / sqrt(q), Lange et al.'s Algorithm 1 as "
            "printed)."
        )

    def init(position):
        layers = dense_layers(position)
        dtype = jnp.result_type(float)
        mean = {p: jnp.zeros(_fan_in(position[p + "/w"]), dtype) for p in layers}
        var = {p: jnp.ones(_fan_in(position[p + "/w"]), dtype) for p in layers}
        return BNPState(mean, var, jnp.zeros((), jnp.int32))

    def update(grad, state, position, context=None):
        inputs = _layers_with_inputs(position, step_context(context).aux)
        mean, var, blocks = dict(state.mean), dict(state.var), {}
        count = state.count + 1
        if bias_correction:
            weight = 1.0 - decay ** count.astype(jnp.result_type(float))  # 1 - rho^t
        for path, x in inputs.items():
            rows, m = x.shape
            mean[path] = decay * state.mean[path] + (1 - decay) * jnp.mean(x, axis=0)
            var[path] = decay * state.var[path] + (1 - decay) * jnp.var(x, axis=0)
            mu, sigma2 = mean[path], var[path]
            if bias_correction:  # (>= 0 in exact arithmetic; rounding may dip below)
                mu = mu / weight
                sigma2 = jnp.maximum((sigma2 - (1.0 - weight)) / weight, 0.0)
            tilde = sigma2 + eps1 * jnp.max(sigma2) + eps2
            q2 = max(m / rows, 1.0)
            scale = q2 ** 0.5 if noise_scale == "consistent" else q2 ** 0.25
            blocks[path] = _block(mu, tilde, q2, scale)

        def apply(which, tree):
            out = dict(tree)
            for path, fns in blocks.items():
                bias = path + "/b"
                b = tree.get(bias) if bias in position else None
                kernel = tree[path + "/w"]
                w, b = fns[which](jnp.reshape(kernel, (-1, kernel.shape[-1])), b)
                out[path + "/w"] = jnp.reshape(w, kernel.shape)
                if b is not None:
                    out[bias] = b
            return out

        return (
            Preconditioner(
                lambda t: apply(0, t),
                lambda t: apply(1, t),
                noise_transpose=lambda t: apply(2, t),
            ),
            BNPState(mean, var, count),
        )

    return Metric(init, update, name="bnp", traits=(
        NoLag("its Γ is identically zero (each layer's block depends only on earlier layers' "
              "parameters, and the metric is block diagonal by layer), so there is nothing to "
              "correct"),
        Aux((LAYER_INPUTS + "*",),
            "BNP reads each dense layer's inputs; networks built with "
            "numpyro_sgrld.random_haiku_module record them for every hk.Linear and hk.ConvND"),
    ))


__all__ = ["BNPState", "LAYER_INPUTS", "bnp", "dense_layers", "layer_inputs_name"]
