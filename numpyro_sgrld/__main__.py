"""Command line: ``sgrld`` (or ``python -m numpyro_sgrld``)."""

import argparse
import sys

__all__ = ["main"]


def _quickstart(args):
    from numpyro_sgrld.quickstart import format_table, run_quickstart

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


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="sgrld", description="Stochastic-gradient MCMC for NumPyro: run and compare."
    )
    sub = parser.add_subparsers(dest="command")
    quick = sub.add_parser(
        "quickstart", help="SGLD and SGHMC with subsampling vs NUTS and the closed form"
    )
    for p in (parser, quick):
        p.add_argument("--num-samples", type=int, default=20000, help="draws per chain")
        p.add_argument("--num-chains", type=int, default=4)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--no-progress-bar", action="store_true")
    args = parser.parse_args(argv)
    if args.num_samples < 1 or args.num_chains < 1:
        parser.error("--num-samples and --num-chains must be positive")
    _quickstart(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
