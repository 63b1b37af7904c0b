"""What the verdict knows of the kernel that made a run, as one value (:class:`Run`), read once
from any kernel (:func:`describe`): a stochastic-gradient kernel's model, data sizes, network
sites and composed pieces, and for any other kernel (NUTS, HMCECS, none) the same fields at
values that say nothing is known. The verdict and its advice read this value, never the
kernel's attributes."""

from typing import Any, NamedTuple

__all__ = ["INNER_CHOICES", "Run", "describe"]


class Run(NamedTuple):
    """What the verdict knows of a run's kernel.

    - **given** – whether a kernel was given at all.
    - **name** – the kernel's class name (for advice that names it).
    - **model**, **model_args** – the model and the ``(args, kwargs)`` it last ran on.
    - **setup** – the model's :class:`~numpyro_sgrld.sampler.model.ModelSetup` (its
      plates, transforms, a network's evaluation batch).
    - **num_data**, **subsample_plates** – :math:`N` and the subsampled plates.
    - **network_sites** – the sites the bridges marked as a network's weights.
    - **algorithm**, **metric**, **integrator**, **correction**, **temperature** – the
      composed pieces.
    - **adapts_step_size** – whether warm-up chose the step (``None``: not known, a kernel
      that is not a stochastic-gradient one).
    - **target_bias**, **settings**, **cycles** – the adaptation's bias target, the learnt
      settings the kernel started from, a cyclical kernel's cycles.
    - **mixing_hint** – what to advise where more steps may not mix, given by a kernel that
      composes this one (:class:`~numpyro_sgrld.SGGibbs`), in place of a reparametrisation.
    - **bias_hint** – a note on the step's bias that such a kernel adds (what the checks do
      not see within Gibbs, and how to check it).
    - **warmup_advice** – what such a kernel advises in place of a network's longer warm-up
      (within Gibbs, where the draws that mix the scales run after warm-up only); ``None``:
      the longer warm-up.
    - **composed_check** – the check such a kernel makes of what it kept in the run monitor:
      ``composed_check(kept, temperatures, run=..., bound=...)``, a list of problems
      (:func:`numpyro_sgrld.sampler.gibbs_bias_check.problems`); ``None`` without.
    - **judged_name** – the name a site the kernel moves is judged by (within Gibbs, a
      decentred site's ``"{w}_decentered"`` -> ``w``); ``None``: its own.
    """

    given: bool = False
    name: str = ""
    model: Any = None
    model_args: Any = None
    setup: Any = None
    num_data: Any = None
    subsample_plates: tuple = ()
    network_sites: Any = None
    algorithm: Any = None
    metric: Any = None
    integrator: Any = None
    correction: Any = None
    temperature: Any = 1.0
    adapts_step_size: Any = None
    target_bias: Any = None
    settings: Any = None
    cycles: Any = None
    mixing_hint: Any = None
    bias_hint: Any = None
    warmup_advice: Any = None
    composed_check: Any = None
    judged_name: Any = None


#: The fields a composing kernel's :class:`Run` takes from the kernel it runs (its
#: ``judged_kernel``): the step's choices, the hints the composition gives it, and the sites
#: it judges as a network's.
INNER_CHOICES = ("algorithm", "metric", "integrator", "correction", "temperature",
                 "adapts_step_size", "target_bias", "settings", "cycles", "mixing_hint",
                 "bias_hint", "warmup_advice", "composed_check", "network_sites",
                 "judged_name")


def describe(kernel):
    """The :class:`Run` of ``kernel`` (any ``MCMCKernel``, ``None``, or a :class:`Run`, returned
    as it is); a kernel with a ``judged_kernel`` (the SG kernel within
    :class:`~numpyro_sgrld.SGGibbs`) has that kernel's :data:`INNER_CHOICES`, its own model."""
    if isinstance(kernel, Run):
        return kernel
    if kernel is None:
        return Run()
    fields = {name: getattr(kernel, name, default)
              for name, default in Run._field_defaults.items()
              if name not in ("given", "name")}
    inner = getattr(kernel, "judged_kernel", None)
    if inner is not None:  # a composing kernel's choices are those of the kernel it runs
        fields.update({name: getattr(inner, name, Run._field_defaults[name])
                       for name in INNER_CHOICES})
    fields["subsample_plates"] = fields["subsample_plates"] or ()
    return Run(given=True, name=type(kernel).__name__, **fields)
