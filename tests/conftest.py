import importlib.util
import os
from pathlib import Path

# The tests check behaviour, not code generation: XLA's CPU backend at optimisation level 0
# compiles about a third faster, and compiling is most of this suite's time. (Read when the
# backend starts, so before any computation; subprocesses started by tests inherit it. The
# benchmarks compile as users do.)
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]
).strip()

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import pytest
from numpyro_sgrld.models._data import DataNotFoundError

jax.config.update("jax_platform_name", "cpu")
# A compilation cache for the run (per process, or shared where the variable is inherited):
# tests that build the same program (the same kernel on the same model and shapes) compile it
# once. A fresh directory per run, removed at its end by the process that made it: nothing
# carries over between runs.
if "NUMPYRO_SGRLD_TEST_JAX_CACHE" not in os.environ:
    os.environ["NUMPYRO_SGRLD_TEST_JAX_CACHE"] = tempfile.mkdtemp(prefix="jax-cache-")
    atexit.register(shutil.rmtree, os.environ["NUMPYRO_SGRLD_TEST_JAX_CACHE"], True)
jax.config.update("jax_compilation_cache_dir", os.environ["NUMPYRO_SGRLD_TEST_JAX_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


#: Tests that run only in the slow set (``pytest -m slow``), besides those marked where they
#: are written: each takes about 4 s or more in one process (``pytest -p no:xdist
#: --durations=60``), most of it compiling, and the default run must stay under five minutes
#: on two cores. The modules they test keep faster tests in
#: the default run.
SLOW = frozenset(
    [
        "tests/test_composition.py::test_step_size_none_applies_one_rule_to_a_users_metric_and_a_presets",
        "tests/test_composition.py::test_auxiliary_sites_do_nothing_outside_the_kernels",
        "tests/test_step_cost.py::test_the_sampling_loop_adds_at_most_two_percent_to_a_step",
        "tests/test_docs.py::test_code_blocks_run[docs/composition.md]",
        "tests/test_equipartition.py::test_minibatch_noise_is_read_as_the_discretised_chains_exact_law",
        "tests/test_metrics.py::test_shampoo_warm_start_is_the_curvatures_statistic_with_roots_at_once",
        "tests/test_sharded_data.py::test_two_processes_each_holding_half_the_rows_sample_the_discretised_law",
        "tests/test_warmup.py::test_the_adapted_step_its_inflation_and_the_preconditioner_reach_inference_data",
        "tests/test_performance.py::test_other_run_lengths_and_kernels_compile_their_own_loop",
        "tests/test_adapter.py::test_recorded_potential_is_the_minibatch_estimate_of_the_step",
        "tests/test_cyclical.py::test_by_default_the_cycles_begin_after_warm_up_at_the_adapted_peak",
        "tests/test_chains.py::test_continuing_from_last_state_equals_one_long_run[sgld]",
        "tests/test_chains.py::test_same_key_same_samples[sghmc]",
        "tests/test_adaptation.py::test_adapted_step_is_target_bias_over_the_worst_directions_inflation[sgld]",
        "tests/test_adaptation.py::test_adaptive_presets_sample_in_the_coordinates_learnt_in_warm_up[MongeSGLD]",
        "tests/test_adaptation.py::test_adaptive_presets_sample_in_the_coordinates_learnt_in_warm_up[PSGLD]",
        "tests/test_adaptation.py::test_every_preset_adapts_its_step[PSGLD]",
        "tests/test_adaptation.py::test_the_step_freezes_after_warmup_and_travels_with_the_state",
        "tests/test_adaptation.py::test_vectorised_chains_give_the_sequential_chains_steps_and_draws",
        "tests/test_adapter.py::test_control_variate_options",
        "tests/test_adapter.py::test_find_plates_several_and_nested",
        "tests/test_adapter.py::test_minibatch_potential_matches_hand_computation",
        "tests/test_adapter.py::test_postprocess_returns_constrained_values_and_full_data_deterministics",
        "tests/test_adapter.py::test_postprocess_without_deterministic_sites_does_not_replay_the_model",
        "tests/test_adapter.py::test_rejected_steps_keep_a_finite_state_whatever_failed",
        "tests/test_badodab.py::test_thermostat_and_positions_with_exact_gradients[1.0]",
        "tests/test_bias.py::test_corrected_kernels_sample_the_target[psgld]",
        "tests/test_bias.py::test_monge_with_its_default_alpha2_and_gamma_samples_the_target",
        "tests/test_bias.py::test_uncorrected_kernels_converge_to_the_predicted_biased_density[psgld]",
        "tests/test_bnn.py::test_init_to_unit_scales_starts_horseshoe_scales_at_one[layer]",
        "tests/test_bnp.py::test_bad_input_is_refused_with_the_fix",
        "tests/test_bnp.py::test_gamma_of_the_instantaneous_bnp_metric_is_zero",
        "tests/test_bnp.py::test_stationary_covariance_is_the_discretised_chains_law[consistent]",
        "tests/test_chains.py::test_vectorized_chains_equal_sequential_chains[sgld-epoch]",
        "tests/test_chains.py::test_vectorized_state_shapes",
        "tests/test_checkpoint.py::test_save_load_resume_equals_one_uninterrupted_run[sgld-two-chains]",
        "tests/test_composition.py::test_a_metric_reads_the_models_auxiliary_values_of_the_same_minibatch",
        "tests/test_composition.py::test_langevin_with_a_constant_metric_has_the_discretised_law",
        "tests/test_composition.py::test_momentum_integrator_with_any_metric_has_the_discretised_law[rmsprop]",
        "tests/test_conv.py::test_other_parameters_get_the_gaussian_prior_and_arguments_are_checked",
        "tests/test_diagnostics.py::test_reference_posterior_is_cached",
        "tests/test_diagnostics.py::test_to_inference_data_on_a_subsampled_model",
        "tests/test_diagnostics.py::test_to_inference_data_on_nuts_full_batch",
        "tests/test_docs.py::test_code_blocks_run[README.md]",
        "tests/test_docs.py::test_code_blocks_run[docs/bnn.md]",
        "tests/test_docs.py::test_code_blocks_run[docs/cyclical.md]",
        "tests/test_docs.py::test_code_blocks_run[docs/diagnostics.md]",
        "tests/test_docs.py::test_code_blocks_run[docs/quickstart.md]",
        "tests/test_nnx_equinox.py::test_an_equinox_linear_784_to_400_gets_the_he_scale_of_its_784_inputs",
        "tests/test_no_silent_errors.py::test_the_warning_counts_the_rejections_after_the_adaptations_warm_up",
        "tests/test_performance.py::test_reused_loop_gives_the_samples_of_a_fresh_one",
        "tests/test_reference_updates.py::test_our_update_equals_the_authors_step_for_step[Shampoo]",
        "tests/test_sampling_loop.py::test_other_kernels_keep_numpyros_loop",
        "tests/test_sampling_loop.py::test_progress_bar_runs_one_compiled_call_per_update",
        "tests/test_sampling_loop.py::test_same_draws_as_numpyros_loop[groups-of-16-adapted]",
        "tests/test_sampling_loop.py::test_same_draws_as_numpyros_loop[segments-adapted]",
        "tests/test_sgnht.py::test_thermostat_and_positions_with_exact_gradients",
        "tests/test_statistical.py::test_adaptive_kernels_on_conjugate_regression[psgld]",
        "tests/test_statistical.py::test_nuts_on_full_batch_matches_closed_form",
        "tests/test_statistical.py::test_sgld_stationary_variance_is_that_of_the_discretised_chain[0.8]",
        "tests/test_statistical.py::test_subsampled_kernels_on_conjugate_regression[sgld]",
        "tests/test_steps.py::test_every_kernel_on_several_shapes_and_chain_methods[sgld]",
        "tests/test_steps.py::test_shampoo_on_a_site_larger_than_a_block",
        "tests/test_steps.py::test_wenzel_refreshes_once_per_epoch",
        "tests/test_streaming.py::test_an_interrupted_run_resumes_to_the_same_file",
        "tests/test_streaming.py::test_rejected_steps_and_non_finite_values_are_written_and_flagged",
        "tests/test_streaming.py::test_streamed_draws_equal_one_in_memory_run",
        "tests/test_svrg.py::test_svrg_is_unbiased_and_exact_at_its_anchor",
        "tests/test_warmup.py::test_a_small_model_learns_the_dense_inverse_hessian_and_a_large_one_a_diagonal",
        "tests/test_warmup.py::test_control_variates_switch_on_where_they_cut_the_noise_and_not_on_full_batches",
        "tests/test_warmup.py::test_numpyros_own_loop_warns_at_the_end_with_the_verdict_of_the_draws[sequential]",
        "tests/test_warmup.py::test_sgld_learns_a_preconditioner_at_least_the_conditional_variances",
        "tests/test_warmup.py::test_the_switch_compares_the_noise_with_and_without_the_centre",
        "tests/test_sampling_loop.py::test_after_warmup_the_default_step_has_no_branch[SGLD]",
        "tests/test_step_cost.py::test_a_checked_step_costs_at_most_five_percent_more_than_the_update_by_hand[SGLD]",
        "tests/test_step_cost.py::test_a_networks_function_space_reading_adds_at_most_five_percent_to_a_step",
        "tests/test_step_cost.py::test_the_equipartition_check_adds_at_most_five_percent_to_a_step[logistic]",
        "tests/test_conv.py::test_logits_agree_across_convolutions_and_chunks",
        "tests/test_contiguous.py::test_rows_on_disk_are_one_read_a_step_and_the_control_variates_centre_no_call",
        "tests/test_diagnostics.py::test_z_scores_are_standard_normal_on_exact_draws",
        "tests/test_reference_updates.py::test_our_defaults_differ_from_the_authors_where_documented[Shampoo]",
        "tests/test_cyclical.py::test_draws_are_sampling_stage_states_with_their_cycle_and_stage[CyclicalSGLD]",
        "tests/test_bnn.py::test_mcmcs_own_loop_streams_the_evaluation_batch_every_few_steps",
        "tests/test_host_data.py::test_each_step_reads_its_rows_in_one_call_started_the_step_before"
        "[one chain]",
        "tests/test_reference_updates.py::test_our_update_equals_the_authors_step_for_step[identity]",
        "tests/test_warmup.py::test_the_advice_for_chains_that_have_not_mixed_fits_the_model",
        "tests/test_sgnht.py::test_warm_up_settles_a_thermostat_heated_on_the_way_in",
        "tests/test_baoab.py::test_baoab_samples_a_gaussian_exactly_where_sglds_variance_is_inflated",
        "tests/test_host_data.py::test_the_full_data_potential_is_summed_chunk_by_chunk",
        "tests/test_cyclical.py::test_the_exploration_stage_is_noise_free_gradient_descent_on_the_schedule",
        "tests/test_metrics.py::test_shampoo_matrix_site_equals_explicit_kronecker_product",
        "tests/test_contiguous.py::test_shuffled_rows_is_a_uniform_permutation_written_bucket_by_bucket",
        "tests/test_adapter.py::test_epoch_batching_sweeps_without_replacement",
        "tests/test_warmup.py::test_a_newton_step_that_overshoots_is_shortened_until_the_potential_falls",
        "tests/test_step_cost.py::test_the_equipartition_check_adds_at_most_five_percent_to_a_step[mlp]",
        "tests/test_adapter.py::test_progress_bar_diagnostics_string",
        "tests/test_chains.py::test_jit_model_args_gives_the_same_samples",
        "tests/test_adapter.py::test_potential_fn_interface",
        "tests/test_gibbs.py::test_a_networks_decentred_weights_are_judged_as_a_networks",
        "tests/test_gibbs.py::test_a_networks_per_unit_scales_are_judged_up_to_relabelling",
        "tests/test_gibbs.py::test_a_networks_control_variates_are_turned_off_by_the_retest",
        "tests/test_gibbs.py::test_without_a_gibbs_fn_the_updates_the_priors_declare_run",
        "tests/test_gibbs.py::test_the_verdict_notes_what_it_cannot_see_within_gibbs",
        "tests/test_gibbs.py::test_warm_up_retests_the_control_variates_after_its_approach",
        "tests/test_sampling_loop.py::"
        "test_the_loop_over_steps_has_a_known_trip_count_and_no_branch[SGLD]",
        "tests/test_interweave_schedule.py::"
        "test_the_auto_rate_counts_one_chains_elements_with_vectorised_chains",
        "tests/test_composition.py::"
        "test_the_step_takes_its_step_size_as_an_input_and_its_state_holds_no_warm_up",
        "tests/test_gibbs_kick.py::test_the_half_kick_is_carried_for_a_model_given_numpy_data",
        "tests/test_gibbs_kick.py::"
        "test_a_step_without_a_sweep_leaves_the_closing_half_kick_as_its_own",
        "tests/test_adapter.py::test_extra_fields_and_thinning",
        "tests/test_one_verdict.py::test_a_run_of_four_chains_gets_one_verdict[vectorized]",
        "tests/test_verdict_rules.py::test_mixed_runs_pass_the_rhat_rule_at_its_family_error[4]",
        "tests/test_gibbs.py::"
        "test_chains_started_away_from_the_centre_keep_control_variates_only_where_they_pay[mode]",
        "tests/test_gibbs.py::"
        "test_the_control_variates_centre_is_searched_with_the_children_non_centred",
        "tests/test_composition.py::test_an_algorithm_value_gives_the_draws_of_its_pieces",
        "tests/test_interweave_schedule.py::"
        "test_a_sweep_draws_non_centred_after_warm_up_whatever_the_far_test_says[True]",
        "tests/test_interweave_schedule.py::"
        "test_a_number_of_steps_interweaves_on_the_sweeps_after_warm_up[10-4-31]",
        "tests/test_interweave_schedule.py::"
        "test_a_number_of_steps_interweaves_on_the_sweeps_after_warm_up[7-1-30]",
        "tests/test_verdict_rules.py::test_runs_far_below_the_trusted_ess_fail[4]",
        "tests/test_adaptation.py::"
        "test_the_frozen_step_is_the_bias_target_on_a_noiseless_gaussian[baoab]",
        "tests/test_equipartition.py::"
        "test_readings_and_their_errors_agree_with_exact_values_over_replicates[0.95]",
        "tests/test_gibbs_kick.py::"
        "test_the_closing_half_kick_is_the_ended_potentials_gradient_on_any_minibatch[BAOAB]",
        "tests/test_gibbs.py::"
        "test_chains_started_away_from_the_centre_keep_control_variates_only_where_they_pay[auto]",
        "tests/test_interweave_schedule.py::"
        "test_the_half_kick_is_carried_unless_an_interwoven_draw_moved_the_children[False-True]",
        "tests/test_gibbs_full_step.py::test_sggibbs_sets_the_rule_for_its_own_draws",
        "tests/test_horseshoe_ridge.py::"
        "test_the_ridge_move_leaves_the_horseshoes_scales_law_invariant[ridge]",
        "tests/test_gibbs.py::test_the_data_curvature_is_learnt_in_warm_up_and_frozen_after_it",
        "tests/test_equipartition.py::"
        "test_readings_and_their_errors_agree_with_exact_values_over_replicates[0.0]",
        "tests/test_baselines.py::test_mandt_step_is_the_closed_form_on_the_conjugate_regression",
        "tests/test_bnp.py::test_running_statistics_after_k_steps_and_constant_inputs",
        "tests/test_adapter.py::test_init_params_and_init_strategy",
        "tests/test_diagnostics.py::test_kernel_stein_discrepancy",
    ]
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the tests of :data:`SLOW` slow, before ``-m`` selects."""
    for item in items:
        if item.nodeid in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def german_credit():
    from numpyro_sgrld.models.logistic_regression import load_german_credit

    try:
        return load_german_credit()
    except DataNotFoundError as err:
        pytest.skip(f"German credit data not available: {err}")


@pytest.fixture(scope="session")
def uci_concrete():
    from numpyro_sgrld.models.uci import load_uci_split

    try:
        return load_uci_split("concrete", 0)
    except DataNotFoundError as err:
        pytest.skip(f"UCI data not available: {err}")


def load_benchmark(name):
    """The script ``benchmarks/<kind>/<name>.py`` as a module; skips the test when it is not
    there (an installed package without the benchmarks)."""
    found = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob(f"*/{name}.py"))
    path = found[0] if found else Path("benchmarks") / "*" / f"{name}.py"
    if not found:
        pytest.skip(f"{path} is not there (an installed package without the benchmarks)")
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ Monte Carlo tolerances
FAMILY_LEVEL = 1e-3  # family-wise false-alarm probability of one test's comparisons


def bonferroni_z(num_comparisons, level=FAMILY_LEVEL):
    """The two-sided z threshold that keeps the chance of any false alarm among
    ``num_comparisons`` standard normal z-scores below ``level`` (Bonferroni)."""
    from scipy import stats

    return float(stats.norm.isf(level / (2 * num_comparisons)))


def mcse(draws):
    """ArviZ's ESS-based Monte Carlo standard errors of each coordinate's mean and sd, for
    ``draws`` of shape (chains, draws, ...)."""
    import numpy as np

    from numpyro_sgrld.analysis import arviz_io as _arviz

    draws = np.asarray(draws, np.float64)
    draws = draws.reshape(draws.shape[:2] + (-1,))
    columns = [draws[..., j] for j in range(draws.shape[-1])]
    se_mean = np.array([_arviz.mcse(x, method="mean") for x in columns])
    se_sd = np.array([_arviz.mcse(x, method="sd") for x in columns])
    return se_mean, se_sd


def moment_z_scores(draws, mean, sd, ref_mean_se=0.0, ref_sd_se=0.0):
    """z-scores of the per-coordinate mean and sd of ``draws`` (chains, draws, d) against
    ``mean`` and ``sd``; standard errors are ArviZ's ESS-based MCSEs of the draws, combined in
    quadrature with the reference's own standard errors (0 for an exact reference). Returns
    ``(z_mean, z_sd)``."""
    import numpy as np

    draws = np.asarray(draws, np.float64)
    draws = draws.reshape(draws.shape[:2] + (-1,))
    se_mean, se_sd = mcse(draws)
    z_mean = (draws.mean(axis=(0, 1)) - mean) / np.hypot(se_mean, ref_mean_se)
    z_sd = (draws.std(axis=(0, 1)) - sd) / np.hypot(se_sd, ref_sd_se)
    return z_mean, z_sd


def assert_moments(draws, mean, sd, ref_mean_se=0.0, ref_sd_se=0.0, level=FAMILY_LEVEL):
    """Every coordinate's mean and sd within the Bonferroni z of ``level`` over the 2d
    comparisons. Returns the largest |z|."""
    import numpy as np

    z_mean, z_sd = moment_z_scores(draws, mean, sd, ref_mean_se, ref_sd_se)
    z = np.concatenate([z_mean, z_sd])
    limit = bonferroni_z(z.size, level)
    assert np.all(np.abs(z) < limit), (z_mean, z_sd, limit)
    return float(np.abs(z).max())


def regression_sg_law(X, y, subsample_size, step_size, kind="sgld", prior_scale=1.0,
                      noise_scale=0.5, drift=None, noise=None, grad_noise=None, friction=None,
                      control_variate=False):
    r"""Stationary covariance of ``w`` for the *discretised* stochastic-gradient chain on the
    conjugate regression of ``models.linear_regression`` with minibatches drawn with
    replacement. The drift is linear, :math:`\nabla\hat U(w) = A(w - \mu) + \varepsilon`, and
    the minibatch noise :math:`\varepsilon` has mean 0 and covariance
    :math:`B(w) = (N^2/n)\,\mathrm{Cov}_i[\nabla\ell_i(w)]`, quadratic in :math:`w`, so the
    chain's stationary mean is the posterior mean and its second moments solve a discrete
    Lyapunov equation with :math:`E[B(w)]` (a fixed point, as :math:`E[B]` depends on the
    covariance itself) — exact for these moments whatever the law of the noise.

    ``kind="sgld"``: :math:`w' = w - hP\nabla\hat U + \sqrt{2h}R^{1/2}\xi` with drift
    preconditioner ``drift`` (P, default I) and noise covariance ``noise`` (R, default P); the
    gradient noise enters through ``grad_noise`` (default P). ``kind="sghmc"``:
    :math:`v' = (1-\alpha)v - h\nabla\hat U + N(0, 2\alpha h)`, :math:`w' = w + v'`.

    ``control_variate=True``: the gradient estimator is centred at the posterior mean
    :math:`\hat w` (:math:`\nabla\hat U(w) - \nabla\hat U(\hat w) + \nabla U(\hat w)`), so
    only :math:`\mathrm{Cov}_i[\nabla\ell_i(w) - \nabla\ell_i(\hat w)]` remains.

    Returns ``(mean, cov, expected_B)``; ``expected_B`` is :math:`E[B(w)]`, whose diagonal over
    :math:`N^2` is the expected square of the per-datum gradient's noise (for adaptive metrics).
    """
    import numpy as np
    from scipy.linalg import solve_discrete_lyapunov

    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    N, d = X.shape
    n, h, s2 = subsample_size, step_size, noise_scale**2
    A = np.eye(d) / prior_scale**2 + X.T @ X / s2
    mu = np.linalg.solve(A, X.T @ y / s2)
    r = np.zeros(N) if control_variate else X @ mu - y
    K = X.T @ X / (N * s2)
    g0 = X.T @ r / (N * s2)

    def expected_B(cov):
        quad = np.einsum("ij,jk,ik->i", X, cov, X)  # x_i' cov x_i
        second = (X * (r**2 + quad)[:, None]).T @ X / (N * s2**2)
        return N**2 / n * (second - np.outer(g0, g0) - K @ cov @ K.T)

    P = np.eye(d) if drift is None else np.asarray(drift, np.float64)
    R = P if noise is None else np.asarray(noise, np.float64)
    G = P if grad_noise is None else np.asarray(grad_noise, np.float64)
    cov = np.linalg.inv(A)
    for _ in range(50):
        B = expected_B(cov)
        if kind == "sgld":
            M = np.eye(d) - h * P @ A
            new = solve_discrete_lyapunov(M, 2 * h * R + h**2 * G @ B @ G.T)
        elif kind == "sghmc":
            a = friction
            F = np.block([[np.eye(d) - h * A, (1 - a) * np.eye(d)], [-h * A, (1 - a) * np.eye(d)]])
            S = 2 * a * h * np.eye(d) + h**2 * B
            new = solve_discrete_lyapunov(F, np.block([[S, S], [S, S]]))[:d, :d]
        else:
            raise ValueError(kind)
        if np.allclose(new, cov, rtol=1e-12, atol=0):
            break
        cov = new
    return mu, new, expected_B(new)


def noisy_location(N=1000, n=10, d=5, seed=1):
    """The thermostat tests' location model: θ ∈ R^d with a N(0, 10²) prior, N points
    y_i ~ N(0, I), minibatches of ``n`` indices drawn with replacement. Returns ``(model, y,
    sigma2, start)``: the gradient noise's variance per coordinate, N² S² (N − 1) / (N n) (S² the
    data's sample variance), and an init strategy at the posterior mode (ȳ, up to the prior)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import init_to_value

    y = jax.random.normal(jax.random.PRNGKey(seed), (N, d))

    def model(y):
        theta = numpyro.sample("theta", dist.Normal(0.0, 10.0).expand([d]).to_event(1))
        with numpyro.plate("data", N, subsample_size=n) as idx:
            numpyro.sample("y", dist.Normal(theta, 1.0).to_event(1), obs=y[idx])

    S2 = np.asarray(jnp.var(y, axis=0, ddof=1))
    sigma2 = N**2 * S2 * (N - 1) / (N * n)
    return model, y, sigma2, init_to_value(values={"theta": jnp.mean(y, axis=0)})


def thermostats(kernel, chains, steps, *args):
    """``(MCMC, the thermostats of the chains' last states)`` of a vectorised run that keeps
    one draw per chain."""
    import jax
    import numpy as np
    from numpyro.infer import MCMC

    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, thinning=steps, num_chains=chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *args)
    return mcmc, np.asarray(mcmc.last_state.sampler_state.integrator.thermostat)


def z_of_mean(x, expected):
    """The z-score of the sample mean of independent ``x`` against ``expected``."""
    import numpy as np

    return (x.mean() - expected) / (x.std(ddof=1) / np.sqrt(len(x)))


def check_thermostat_absorbs_noise(kernel, A=1.0, h=2e-5, chains=100, steps=500_000):
    """:func:`noisy_location` (N = 1000, d = 5, minibatches of 10 indices drawn with
    replacement, the gradient-noise variance σ² per coordinate known exactly) sampled by the
    thermostat ``kernel(model, h, diffusion=A, init_strategy=...)``: the thermostat settles at
    A + hσ²/(2T) (Ding et al.: the diffusion the noise adds), here about 2, not at A (both
    z-tested, Bonferroni over the two). ``chains`` chains of ``steps`` steps (10 units of time;
    the thermostat relaxes over a few), started at the posterior mode: from far away the first
    gradients (N times the distance) heat the thermostat far above its equilibrium, from which
    it cools by only T·h a step."""
    model, y, sigma2, start = noisy_location()
    expected = A + h * sigma2.mean() / 2
    _, xi = thermostats(kernel(model, h, diffusion=A, init_strategy=start), chains, steps, y)
    limit = bonferroni_z(2)
    assert abs(z_of_mean(xi, expected)) < limit, (xi.mean(), expected)
    assert abs(z_of_mean(xi, A)) > limit


def weakly_informed_regression(X, y):
    """``w_j ~ N(0, tau^2)``, ``tau ~ Gamma(2, 2)``, ``y ~ N(X w, 1)`` with a subsampled data
    plate: with predictors small enough the data barely touch the weights, and ``tau``'s law is
    its prior's and its children's alone (``test_gibbs.py``, ``test_gibbs_bias_check.py``)."""
    import numpyro
    import numpyro.distributions as dist

    tau = numpyro.sample("tau", dist.Gamma(2.0, 2.0))
    w = numpyro.sample("w", dist.Normal(0.0, tau).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])


def exact_log_tau(X, y):
    """``log tau``'s posterior mean and sd under :func:`weakly_informed_regression` (given
    ``tau``, ``y ~ N(0, tau^2 X X^T + I)``: a quadrature over ``log tau``)."""
    import numpy as np

    log_tau = np.linspace(-6.0, 3.0, 3000)
    eigenvalues, vectors = np.linalg.eigh(X @ X.T)
    variances = np.exp(2 * log_tau)[:, None] * eigenvalues + 1.0
    log_p = (-0.5 * np.sum(np.log(variances) + (vectors.T @ y) ** 2 / variances, axis=1)
             + 2.0 * log_tau - 2.0 * np.exp(log_tau))
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    mean = np.sum(p * log_tau)
    return mean, np.sqrt(np.sum(p * (log_tau - mean) ** 2))
