r"""The named stochastic-gradient kernels as data: each preset is a name, its docstring
(:mod:`numpyro_sgrld.presets.docs`,
:mod:`numpyro_sgrld.presets.momentum_docs`) and its *pieces*, a function of the preset's own options
giving the arguments of :class:`~numpyro_sgrld.SGMCMC` it fixes (a metric, an integrator,
optionally the Γ correction, a cyclical preset's schedule and cycles); :func:`preset` makes the
class. Every other argument is the kernel's own (``gradient=``, ``control_variate=``,
``step_size=None`` and its one rule for every metric, :func:`~numpyro_sgrld.warmup.choices.
kernel_metric`, ...).

=============  ======================  ======================
kernel         metric                  integrator
=============  ======================  ======================
SGLD           identity (or any)       langevin
PSGLD          rmsprop                 langevin
MongeSGLD      monge                   langevin
ShampooSGLD    shampoo                 langevin
WenzelSGLD     wenzel                  langevin
AdamSGLD       identity (or any)       adaptive_drift
BNPSGLD        bnp                     langevin
SGHMC          identity (or any)       sghmc
BAOAB          identity (or any)       baoab
SGNHT          identity (or constant)  sgnht
BADODAB        identity (or constant)  badodab
CyclicalSGLD   identity (or any)       langevin, cycles
CyclicalSGHMC  identity (or any)       sghmc, cycles
=============  ======================  ======================
"""

import inspect
from functools import partial

from numpyro_sgrld.core.integrators import (
    adaptive_drift,
    badodab,
    baoab,
    langevin,
    sghmc,
    sgnht,
)
from numpyro_sgrld.core.metrics import bnp, monge, rmsprop, shampoo, wenzel
from numpyro_sgrld.core.metrics.monge import AUTO_FREEZE
from numpyro_sgrld.presets import docs, momentum_docs
from numpyro_sgrld.sampler.kernel import SGMCMC
from numpyro_sgrld.warmup.cycles import CYCLE_LENGTH, cycles_of, position

__all__ = [
    "CYCLE_LENGTH",
    "KERNELS",
    "Cyclical",
    "preset",
    "LangevinKernel",
    "SGLD",
    "SGHMC",
    "PSGLD",
    "MongeSGLD",
    "ShampooSGLD",
    "WenzelSGLD",
    "AdamSGLD",
    "BNPSGLD",
    "BAOAB",
    "SGNHT",
    "BADODAB",
    "CyclicalSGLD",
    "CyclicalSGHMC",
]


def preset(name, doc, pieces, base=SGMCMC):
    """The preset class ``name``: a subclass of ``base`` (:class:`~numpyro_sgrld.SGMCMC`, or
    a class derived from it) whose constructor takes ``model``, ``step_size``, the keyword
    options of ``pieces(step_size, **options) -> dict`` and every argument of
    :class:`~numpyro_sgrld.SGMCMC` that ``pieces`` does not fix (an argument it fixes is
    refused by name)."""
    own = [p for p in inspect.signature(pieces).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY]

    def __init__(self, model=None, step_size=None, **kwargs):
        options = {p.name: kwargs.pop(p.name) for p in own if p.name in kwargs}
        missing = [p.name for p in own if p.default is p.empty and p.name not in options]
        if missing:
            raise TypeError(f"{name}() needs the keyword argument {missing[0]!r}.")
        fixed = pieces(step_size, **options)
        clash = sorted(set(fixed) & set(kwargs))
        if clash:
            raise TypeError(f"{name} sets {clash[0]!r} itself: give it to SGMCMC(...) to choose "
                            f"it, or use {name}'s own options ({', '.join(p.name for p in own)}).")
        step_size = fixed.pop("step_size", step_size)
        base.__init__(self, model, step_size, **fixed, **kwargs)

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                  inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=None),
                  inspect.Parameter("step_size", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=None),
                  *own, inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    __init__.__signature__ = inspect.Signature(parameters)
    __init__.__qualname__ = f"{name}.__init__"
    return type(name, (base,), {"__init__": __init__, "__doc__": doc, "__module__": __name__,
                                "__qualname__": name})


class Cyclical(SGMCMC):
    """What a cyclical preset adds to :class:`~numpyro_sgrld.SGMCMC` given its
    :class:`~numpyro_sgrld.warmup.cycles.Cycles`: a draw's place in its cycle, and the
    cycle's shape."""

    def cycle_position(self, i):
        r"""``(cycle, step_in_cycle)`` of the step that produced the state with counter ``i``
        (the ``i`` extra field of a draw): ``(k - 1) // L`` and ``(k - 1) % L`` for
        ``k = i - W``, ``W`` the warm-up's length when the step is adapted (the cycles begin
        after it), else 0. Every draw has ``step_in_cycle >= E`` (a sampling step)."""
        return position(self.cycles, self.cycle_start, i)

    @property
    def cycle_length(self):
        """:math:`L`, steps per cycle (exploration included)."""
        return self.cycles.length

    @property
    def exploration_steps(self):
        r""":math:`E = \lceil\beta L\rceil`, exploration steps at the start of each cycle."""
        return self.cycles.explore


# -- the table: each preset's pieces, then its class -------------------------------------------


def _langevin(step_size, *, metric):
    return dict(metric=metric, integrator=langevin())


def _sgld(step_size, *, metric=None):
    return dict(metric=metric, integrator=langevin())


def _psgld(step_size, *, decay=0.99, eps=1e-8, correction=None, bias_correction=True):
    return dict(metric=rmsprop(decay, eps, bias_correction=bias_correction),
                integrator=langevin(), correction=correction)


def _monge(step_size, *, alpha2="auto", decay=0.9, correction=None, max_drift_norm=None):
    # with Γ, an adapted alpha2 is fixed after AUTO_FREEZE steps (metrics.monge)
    auto = isinstance(alpha2, str) and alpha2 == "auto"
    freeze = AUTO_FREEZE if auto and correction is not None else None
    return dict(metric=monge(alpha2, decay, max_drift_norm=max_drift_norm, freeze_after=freeze),
                integrator=langevin(), correction=correction)


def _shampoo(step_size, *, decay=0.99, eps=1e-8, update_interval=100, block_size=128,
             correction=None, block_split="even", precondition_vectors=True, ridge="root"):
    metric = shampoo(decay, eps, update_interval, block_size, block_split=block_split,
                     precondition_vectors=precondition_vectors, ridge=ridge)
    return dict(metric=metric, integrator=langevin(), correction=correction)


def _wenzel(step_size, *, decay=0.99, eps=1e-8, update_interval=None, lagged_refresh=False):
    return dict(metric=wenzel(decay, eps, update_interval, lagged_refresh=lagged_refresh),
                integrator=langevin())


def _adam(step_size, *, drift_scale=1.0, beta1=0.9, beta2=0.999, eps=1e-8, metric=None):
    return dict(metric=metric, integrator=adaptive_drift(drift_scale, beta1, beta2, eps))


def _bnp(step_size, *, decay=0.99, eps1=1e-2, eps2=1e-4, noise_scale="consistent",
         bias_correction=False):
    return dict(metric=bnp(decay, eps1, eps2, noise_scale=noise_scale,
                           bias_correction=bias_correction), integrator=langevin())


def _sghmc(step_size, *, friction=0.1, noise_estimate=0.0, initial_momentum="zero",
           resample_momentum_every=None, partial_refresh=0.0, naive=False, metric=None):
    return dict(metric=metric, integrator=sghmc(friction, noise_estimate, initial_momentum,
                                                resample_momentum_every, partial_refresh, naive))


def _baoab(step_size, *, friction=1.0, metric=None):
    return dict(metric=metric, integrator=baoab(friction))


def _sgnht(step_size, *, diffusion=1.0, metric=None):
    return dict(metric=metric, integrator=sgnht(diffusion))


def _badodab(step_size, *, diffusion=1.0, thermal_mass=1.0, metric=None):
    return dict(metric=metric, integrator=badodab(diffusion, thermal_mass))


def _cyclical_sgld(step_size, *, cycle_length=None, exploration=0.5, metric=None):
    schedule, cycles = cycles_of("CyclicalSGLD", step_size, cycle_length, exploration)
    return dict(step_size=schedule, cycles=cycles, metric=metric, integrator=langevin())


def _cyclical_sghmc(step_size, *, cycle_length=None, exploration=0.5, friction=0.1,
                    noise_estimate=0.0, metric=None):
    schedule, cycles = cycles_of("CyclicalSGHMC", step_size, cycle_length, exploration)
    return dict(step_size=schedule, cycles=cycles, metric=metric,
                integrator=sghmc(friction, noise_estimate))


LangevinKernel = preset("LangevinKernel", docs.LangevinKernel, _langevin)
SGLD = preset("SGLD", docs.SGLD, _sgld)
PSGLD = preset("PSGLD", docs.PSGLD, _psgld)
MongeSGLD = preset("MongeSGLD", docs.MongeSGLD, _monge)
ShampooSGLD = preset("ShampooSGLD", docs.ShampooSGLD, _shampoo)
WenzelSGLD = preset("WenzelSGLD", docs.WenzelSGLD, _wenzel)
AdamSGLD = preset("AdamSGLD", docs.AdamSGLD, _adam)
BNPSGLD = preset("BNPSGLD", docs.BNPSGLD, _bnp)
SGHMC = preset("SGHMC", momentum_docs.SGHMC, _sghmc)
BAOAB = preset("BAOAB", momentum_docs.BAOAB, _baoab)
SGNHT = preset("SGNHT", momentum_docs.SGNHT, _sgnht)
BADODAB = preset("BADODAB", momentum_docs.BADODAB, _badodab)
CyclicalSGLD = preset("CyclicalSGLD", momentum_docs.CyclicalSGLD, _cyclical_sgld, Cyclical)
CyclicalSGHMC = preset("CyclicalSGHMC", momentum_docs.CyclicalSGHMC, _cyclical_sghmc, Cyclical)

#: Every preset by the name ``sgrld`` and its reports use (``SGHMC`` with friction 0.1, and
#: the Γ-corrected pSGLD and Monge SGLD as rows of their own).
KERNELS = {
    "SGLD": SGLD,
    "SGHMC": partial(SGHMC, friction=0.1),
    "PSGLD": PSGLD,
    "PSGLD+Γ": partial(PSGLD, correction="exact"),
    "MongeSGLD": MongeSGLD,
    "MongeSGLD+Γ": partial(MongeSGLD, correction="exact"),
    "ShampooSGLD": ShampooSGLD,
    "WenzelSGLD": WenzelSGLD,
    "AdamSGLD": AdamSGLD,
    "BNPSGLD": BNPSGLD,
    "BAOAB": BAOAB,
    "SGNHT": SGNHT,
    "BADODAB": BADODAB,
    "CyclicalSGLD": CyclicalSGLD,
    "CyclicalSGHMC": CyclicalSGHMC,
}
