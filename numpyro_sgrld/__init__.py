"""numpyro-sgrld: stochastic-gradient MCMC kernels for NumPyro models.

Every kernel is a :class:`numpyro.infer.mcmc.MCMCKernel`: ``MCMC(SGLD(model, step_size=...))``
runs on ordinary NumPyro models with ``numpyro.plate(..., subsample_size=n)``. A kernel is a
metric (:mod:`~numpyro_sgrld.core.metrics`) × an integrator
(:mod:`~numpyro_sgrld.core.integrators`) × a
gradient estimator (:mod:`~numpyro_sgrld.core.gradients`), composed by :class:`SGMCMC`; the named
kernels are presets of it.
"""

from numpyro_sgrld import warmup
from numpyro_sgrld.analysis import diagnostics, inference_data, plots, predictive, streaming
from numpyro_sgrld.analysis.checkpoint import Checkpoint, load_checkpoint, resume, save_checkpoint
from numpyro_sgrld.analysis.diagnostics import (
    bias_vs_step_size,
    compare_to_reference,
    energy_distance,
    kernel_stein_discrepancy,
    model_scores,
    score_function,
)
from numpyro_sgrld.analysis.inference_data import (
    SG_EXTRA_FIELDS,
    load_netcdf,
    reference_posterior,
    save_netcdf,
    to_inference_data,
)
from numpyro_sgrld.analysis.predictive import (
    agreement,
    calibration_bins,
    classification_metrics,
    expected_calibration_error,
    maximum_calibration_error,
    predict_sites,
    predictive_probs,
    regression_metrics,
    total_variation,
    wasserstein2,
)
from numpyro_sgrld.analysis.streaming import (
    Accumulator,
    StreamedRun,
    classification_accumulator,
    classification_metrics_from,
    load_streamed,
    regression_accumulator,
    regression_metrics_from,
    run_streaming,
)
from numpyro_sgrld.bridges import conv_priors, priors
from numpyro_sgrld.bridges.equinox import random_eqx_module  # imports equinox only when called
from numpyro_sgrld.bridges.haiku import random_haiku_module
from numpyro_sgrld.bridges.nnx import random_nnx_module  # imports flax.nnx only when called
from numpyro_sgrld.core import correction, equipartition, gradients, integrators, metrics, schedules
from numpyro_sgrld.core.algorithm import Algorithm, ProposalCheck, checked, compose
from numpyro_sgrld.core.composition import SamplerState
from numpyro_sgrld.core.schedules import constant, cyclical, polynomial_decay
from numpyro_sgrld.core.state import ChainState
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.data import sharding
from numpyro_sgrld.data.sharding import data_mesh
from numpyro_sgrld.data.subsample import SubsamplePlate, find_subsample_plates, full_batch
from numpyro_sgrld.presets.table import (
    BADODAB,
    BAOAB,
    BNPSGLD,
    PSGLD,
    SGHMC,
    SGLD,
    SGNHT,
    AdamSGLD,
    CyclicalSGHMC,
    CyclicalSGLD,
    LangevinKernel,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
)
from numpyro_sgrld.sampler.compat import (
    disable_fast_sampling_loop,
    enable_fast_sampling_loop,
    fast_sampling_loop,
)
from numpyro_sgrld.sampler.conditionals import CONDITIONAL, Conditional, JointMove
from numpyro_sgrld.sampler.gibbs import SGGibbs, SGGibbsState
from numpyro_sgrld.sampler.kernel import SGMCMC, SGState
from numpyro_sgrld.sampler.potentials import auxiliary, minibatch_potential
from numpyro_sgrld.verdict import judge as verdict
from numpyro_sgrld.verdict.judge import Verdict, check
from numpyro_sgrld.warmup.cycles import Cycles
from numpyro_sgrld.warmup.settings import LearntSettings, learnt_settings

__version__ = "0.1.0"

__all__ = [
    "SGMCMC",
    "SGGibbs",
    "SGGibbsState",
    "CONDITIONAL",
    "Conditional",
    "JointMove",
    "Algorithm",
    "ChainState",
    "Cycles",
    "LearntSettings",
    "learnt_settings",
    "ProposalCheck",
    "checked",
    "compose",
    "trait",
    "Verdict",
    "check",
    "verdict",
    "warmup",
    "SamplerState",
    "auxiliary",
    "gradients",
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
    "LangevinKernel",
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "resume",
    "SGState",
    "enable_fast_sampling_loop",
    "disable_fast_sampling_loop",
    "fast_sampling_loop",
    "full_batch",
    "find_subsample_plates",
    "SubsamplePlate",
    "minibatch_potential",
    "constant",
    "polynomial_decay",
    "cyclical",
    "schedules",
    "equipartition",
    "sharding",
    "data_mesh",
    "metrics",
    "integrators",
    "correction",
    "diagnostics",
    "predictive",
    "priors",
    "random_haiku_module",
    "conv_priors",
    "streaming",
    "run_streaming",
    "load_streamed",
    "StreamedRun",
    "Accumulator",
    "classification_accumulator",
    "classification_metrics_from",
    "regression_accumulator",
    "regression_metrics_from",
    "random_nnx_module",
    "random_eqx_module",
    "predict_sites",
    "predictive_probs",
    "agreement",
    "total_variation",
    "wasserstein2",
    "classification_metrics",
    "regression_metrics",
    "expected_calibration_error",
    "maximum_calibration_error",
    "calibration_bins",
    "inference_data",
    "plots",
    "to_inference_data",
    "save_netcdf",
    "load_netcdf",
    "reference_posterior",
    "SG_EXTRA_FIELDS",
    "compare_to_reference",
    "energy_distance",
    "kernel_stein_discrepancy",
    "model_scores",
    "score_function",
    "bias_vs_step_size",
]
