"""Command line: ``sgrld`` (or ``python -m numpyro_sgrld``).

``sgrld`` alone runs ``sgrld compare`` with its defaults: the SG kernels on Bayesian logistic
regression of German credit against NUTS (the bias of each), then the time to a stated
accuracy on a logistic regression with a million rows against NUTS, HMCECS and MALA, with a
report folder ``sgrld-report`` that opens with a verdict.

The commands run with :func:`numpyro_sgrld.fast_sampling_loop` on: they are programs of their
own (nothing else in the process shares NumPyro with them), ``compare`` continues each kernel's
chains run after run until its ESS target, which without the opt-in recompiles NumPyro's loop
on every run, and the progress bar (on by default) would otherwise cost a Python dispatch per
step. NUTS, the reference, runs on NumPyro's loop either way.
"""

import argparse
import contextlib
import sys
import warnings
from pathlib import Path

__all__ = ["main"]


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in the help, except where there is none to show."""

    def _get_help_string(self, action):
        if action.default in (None, False, []) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _quickstart(args):
    from numpyro_sgrld.app.quickstart import format_table, run_quickstart

    print(
        "Conjugate Bayesian linear regression, N = 2000, d = 5, minibatch 100;\n"
        "errors against the closed-form posterior (in posterior standard deviations).\n"
    )
    rows = run_quickstart(
        num_samples=args.num_samples,
        num_chains=args.num_chains,
        seed=args.seed,
        progress_bar=not args.no_progress_bar,
    )
    print()
    print(format_table(rows))


def _kernel_name(text):
    """Kernel names as in the table; ``+G`` may stand for ``+Γ`` (e.g. ``PSGLD+G``)."""
    return text.replace("+G", "+Γ")


def _step_size(text):
    name, sep, value = text.partition("=")
    name = _kernel_name(name)
    try:
        h = float(value)
    except ValueError:
        h = None
    if not sep or h is None or not h > 0:
        raise argparse.ArgumentTypeError(
            f"expected KERNEL=STEP with STEP > 0 (e.g. SGLD=1e-4), got {text!r}"
        )
    return name, h


def _compare(args, parser):
    from numpyro_sgrld.app.compare import KERNELS, check_options, format_table, run_compare
    from numpyro_sgrld.app.time_to_accuracy import Setting

    try:
        check_options(
            args.model,
            args.kernels,
            dict(args.step_size or []),
            args.num_steps,
            args.num_warmup,
            args.thinning,
            args.num_chains,
            args.reference_samples,
        )
    except ValueError as err:
        parser.error(str(err))
    if not args.budget > 0:
        parser.error(f"--budget must be > 0, got {args.budget}")
    if args.large_rows < 1000:
        parser.error(f"--large-rows must be at least 1000, got {args.large_rows}")
    unknown = [k for k in args.large_kernels if k not in KERNELS]
    if unknown:
        parser.error(f"--large-kernels: unknown {unknown}; choose from {list(KERNELS)}")
    large = None if args.no_large else Setting(num_data=args.large_rows, seed=args.seed)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.target_ess < 0:
        parser.error(f"--target-ess must be >= 0, got {args.target_ess}")

    rows = run_compare(
        model=args.model,
        kernels=args.kernels,
        step_sizes=dict(args.step_size or []),
        num_steps=args.num_steps,
        num_warmup=args.num_warmup,
        thinning=args.thinning,
        num_chains=args.num_chains,
        reference_samples=args.reference_samples,
        bias_kernels=args.bias_kernels,
        seed=args.seed,
        out=args.out,
        progress_bar=not args.no_progress_bar,
        target_ess=args.target_ess,
        budget=args.budget,
        gamma_panel=args.gamma_panel,
        large=large,
        large_kernels=tuple(args.large_kernels),
        workers=args.workers,
    )
    print()
    print(format_table(rows))
    verdict = [line for line in (Path(args.out) / "report.md").read_text().splitlines()
               if line.startswith("**Verdict.**")]
    print("\n" + "\n".join(verdict).replace("**", ""))
    print(f"\nReport: {args.out}/report.md")


def _add_compare_options(p):
    from numpyro_sgrld.app.compare import BASELINES, DEFAULT_KERNELS, KERNELS, PROBLEMS
    from numpyro_sgrld.app.time_to_accuracy import SG_DEFAULT, Setting

    names = list(KERNELS) + list(BASELINES)
    p.add_argument("--model", default="german_credit", choices=sorted(PROBLEMS),
                   help="the first problem: the bias of each kernel against NUTS")
    p.add_argument(
        "--kernels",
        nargs="+",
        default=None,
        type=_kernel_name,
        metavar="KERNEL",
        help=f"kernels and baselines to run on it, or 'all', from: {', '.join(names)} "
        f"(default: {' '.join(DEFAULT_KERNELS)}; BNPSGLD only on a network model, "
        "digits_mlp; baselines: MALA on the full data (also accepted as LMC), "
        "BayesByBackprop = mean-field VI, ConstantSGD = Mandt et al.'s constant-rate SGD)",
    )
    p.add_argument(
        "--step-size",
        type=_step_size,
        action="append",
        metavar="KERNEL=STEP",
        help="fix a kernel's step size, e.g. --step-size SGLD=5e-5 (repeatable; default: "
        "every kernel chooses its step during warm-up, step_size=None)",
    )
    p.add_argument("--num-steps", type=int, default=20000, help="steps per chain after warm-up")
    p.add_argument("--num-warmup", type=int, default=2000,
                   help="warm-up steps (at least 200 where a kernel adapts its step)")
    p.add_argument("--thinning", type=int, default=5, help="keep every n-th step")
    p.add_argument("--num-chains", type=int, default=4, help="vectorized chains per kernel")
    p.add_argument("--reference-samples", type=int, default=1000,
                   help="NUTS draws per chain (4 chains) for the reference")
    p.add_argument(
        "--bias-kernels",
        nargs="*",
        default=[],
        type=_kernel_name,
        metavar="KERNEL",
        help="kernels whose bias is traced over 4 step sizes (a bias plot; slow)",
    )
    p.add_argument(
        "--gamma-panel",
        action="store_true",
        help="add the Γ panel: pSGLD with and without Γ on the 1-D target of "
        "Rensmeyer & Niggemann",
    )
    p.add_argument(
        "--target-ess",
        type=float,
        default=200,
        help="continue each kernel (up to 5x --num-steps) until its smallest bulk ESS reaches "
        "this (0: fixed length)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=1.0,
        help="scale the SG runs (steps and the cap on continuing them); e.g. 5 for a longer, "
        "more precise comparison",
    )
    p.add_argument("--no-large", action="store_true",
                   help="leave out the second problem, time to accuracy on a large data set")
    p.add_argument("--large-kernels", nargs="+", default=list(SG_DEFAULT), type=_kernel_name,
                   metavar="KERNEL", help="SG kernels raced on the large data set")
    p.add_argument("--large-rows", type=int, default=Setting().num_data,
                   help="rows of the large data set")
    p.add_argument("--workers", type=int, default=2,
                   help="runs of the first problem at a time, each in its own process (the "
                   "large problem's race runs one method at a time)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="sgrld-report", help="report folder")
    p.add_argument("--no-progress-bar", action="store_true",
                   help="no progress bar for the reference NUTS run")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="sgrld", description="Stochastic-gradient MCMC for NumPyro: run and compare."
    )
    sub = parser.add_subparsers(dest="command")
    compare = sub.add_parser(
        "compare", help="SG kernels against exact methods on two problems, with a report "
        "(default)", formatter_class=_Formatter,
    )
    _add_compare_options(compare)
    quick = sub.add_parser(
        "quickstart", help="SGLD and SGHMC with subsampling vs NUTS and the closed form",
        formatter_class=_Formatter,
    )
    quick.add_argument("--num-samples", type=int, default=20000, help="draws per chain")
    quick.add_argument("--num-chains", type=int, default=4)
    quick.add_argument("--seed", type=int, default=0)
    quick.add_argument("--no-progress-bar", action="store_true")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("compare", "quickstart", "-h", "--help"):
        argv = ["compare", *argv]
    args = parser.parse_args(argv)
    if args.command == "quickstart" and (args.num_samples < 1 or args.num_chains < 1):
        parser.error("--num-samples and --num-chains must be positive")
    with _fast_loop():
        if args.command == "quickstart":
            _quickstart(args)
        else:
            _compare(args, parser)
    return 0


@contextlib.contextmanager
def _fast_loop():
    """The kernels' own sampling loop for the command (see the module docstring); on a NumPyro
    it was not tested with, a warning and NumPyro's loop (same draws, slower)."""
    from numpyro_sgrld import fast_sampling_loop

    loop = fast_sampling_loop()
    try:
        loop.__enter__()
    except RuntimeError as e:
        warnings.warn(f"{e} Continuing on NumPyro's loop.", UserWarning, stacklevel=3)
        yield
        return
    try:
        yield
    finally:
        loop.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main())
