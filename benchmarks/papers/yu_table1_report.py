"""Table 1, Fig. 3 and the equal-compute comparison (Yu et al. 2023, appendix A.6) from the
rows that ``benchmarks/papers/yu_table1_long.py`` writes.

    python benchmarks/papers/yu_table1_report.py docs/results/yu_table1_long.jsonl \
        --figure docs/images/yu_fig3.png

Prints a Markdown table: per run, the ensemble's test log-probability, accuracy and ECE at the
last epoch reached, the paper's numbers beside it, the wall time per epoch the long run
recorded (median over segments after the first, which also compiles; rough: the long runs
share the machine with other work), the cost per step relative to identity, and the metrics
each sampler reached at identity's compute for its epochs (equal compute, A.6). With
``--costs`` (``benchmarks/speed/yu_step_cost.py``'s JSON, measured side by side on a quiet machine)
the cost ratios are those; without it, the ratios of the recorded wall times.

    python benchmarks/papers/yu_table1_report.py docs/results/yu_table1_long.jsonl \
        --costs docs/results/yu_step_cost.json
"""

import argparse
import json
from collections import defaultdict

import numpy as np

# Yu et al., Tables 1 and 8 (W = 400): test log-probability, accuracy and ECE, each as
# (mean, standard deviation over their 10 runs). With the Gaussian prior Monge's best alpha²
# was 0 ("identity is optimal"), so it has no row of its own.
PUBLISHED = {
    ("identity", "horseshoe", 400): ((-0.0750, 0.0004), (0.9823, 0.0003), (0.0281, 0.0004)),
    ("Wenzel", "horseshoe", 400): ((-0.0768, 0.0009), (0.9807, 0.0003), (0.0248, 0.0005)),
    ("RMSprop", "horseshoe", 400): ((-0.0678, 0.0011), (0.9798, 0.0008), (0.0124, 0.0009)),
    ("Monge", "horseshoe", 400): ((-0.0629, 0.0009), (0.9831, 0.0005), (0.0180, 0.0009)),
    ("Shampoo", "horseshoe", 400): ((-0.0641, 0.0009), (0.9820, 0.0006), (0.0164, 0.0008)),
    ("identity", "gaussian", 400): ((-0.1310, 0.0004), (0.9685, 0.0005), (0.0430, 0.0004)),
    ("Wenzel", "gaussian", 400): ((-0.1315, 0.0002), (0.9686, 0.0003), (0.0438, 0.0004)),
    ("RMSprop", "gaussian", 400): ((-0.1307, 0.0005), (0.9689, 0.0004), (0.0447, 0.0003)),
    ("Shampoo", "gaussian", 400): ((-0.1286, 0.0003), (0.9689, 0.0004), (0.0421, 0.0003)),
}
PAPER_RUNS = 10
PAPER_EPOCHS = 400


def paper_z(value, published):
    """``(ours - their mean) / sqrt(sd^2 (1 + 1/10))``: one run of ours against the spread
    of their runs and the uncertainty of their mean (both from their standard deviation)."""
    mean, sd = published
    return (value - mean) / (sd * np.sqrt(1.0 + 1.0 / PAPER_RUNS))


def _published(key, rows):
    """The paper's cell and the z-scores of the run's row at the paper's 400 epochs."""
    pub = PUBLISHED.get(key)
    if pub is None:
        return "—", "—"
    text = " / ".join(f"{m:.4f} ± {s:.4f}" for m, s in pub)
    r = next((row for row in rows if row["epoch"] == PAPER_EPOCHS), None)
    if r is None:
        return text, "— (not at 400 epochs)"
    zs = [paper_z(r[k], p) for k, p in zip(("log_prob", "accuracy", "ece"), pub)]
    return text, ", ".join(f"{z:+.1f}" for z in zs)


def load(path):
    runs = defaultdict(list)
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            runs[row["run"]].append(row)
    for rows in runs.values():
        rows.sort(key=lambda r: r["epoch"])
    return runs


def seconds_per_epoch(rows):
    """Median wall time per epoch over the segments after the first (which also compiles)."""
    per = [r["seconds_total"] / (r["epoch"] - p["epoch"]) for p, r in zip(rows, rows[1:])]
    return float(np.median(per)) if per else float("nan")


def at_epochs(rows, epochs):
    """The last row at or before ``epochs`` epochs (``None`` if there is none)."""
    best = None
    for r in rows:
        if r["epoch"] <= epochs + 1e-9:
            best = r
    return best


def _label(r):
    """The sampler, with the training split when it is not MNIST's classic one."""
    split = r.get("split", "classic")
    return r["sampler"] if split == "classic" else f"{r['sampler']} ({split} split)"


def table(runs, costs=None):
    """``costs``: ``{sampler: seconds per step}`` measured side by side (or ``None``: the
    recorded wall times' ratios)."""
    base = {}
    for rows in runs.values():
        r = rows[-1]
        if r["sampler"] == "identity":
            base[(r["prior"], r["width"], r.get("split", "classic"))] = rows
    lines = [
        "| sampler | prior | W | epochs | draws | diverging draws | test log-prob | accuracy "
        "| ECE | Yu et al. log-prob / acc / ECE (± sd over 10 runs) | z vs Yu et al. "
        "| s / epoch (recorded) | cost × identity | at identity's compute: epochs, log-prob, acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rows in runs.values():
        r = rows[-1]
        key = (r["sampler"], r["prior"], r["width"])
        pub, z = _published(key, rows)
        spe = seconds_per_epoch(rows)
        ident = base.get((r["prior"], r["width"], r.get("split", "classic")))
        ratio, equal = "—", "—"
        if costs is not None and r["sampler"] in costs and "identity" in costs:
            cost = costs[r["sampler"]] / costs["identity"]
        elif ident is not None:
            cost = spe / seconds_per_epoch(ident)
        else:
            cost = None
        if cost is not None:
            ratio = f"{cost:.2f}"
            if ident is not None:
                hit = at_epochs(rows, ident[-1]["epoch"] / cost)
                if hit is not None:
                    equal = f"{hit['epoch']}, {hit['log_prob']:.4f}, {hit['accuracy']:.4f}"
        lines.append(
            f"| {_label(r)} | {r['prior']} | {r['width']} | {r['epoch']} | {r['draws']} "
            f"| {r['diverging_draws']} | {r['log_prob']:.4f} | {r['accuracy']:.4f} "
            f"| {r['ece']:.4f} | {pub} | {z} | {spe:.1f} | {ratio} | {equal} |"
        )
    return "\n".join(lines)


def figure(runs, path):
    """Fig. 3: the ensemble's metrics against epochs, one row of panels per prior (the paper's
    Fig. 3 is the horseshoe's), one colour per sampler in every row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    priors = sorted({rows[-1]["prior"] for rows in runs.values()}, key=lambda p: p != "horseshoe")
    samplers = sorted({_label(rows[-1]) for rows in runs.values()})
    colours = dict(zip(samplers, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3))
    fig, axes = plt.subplots(len(priors), 3, figsize=(13, 3.6 * len(priors)), squeeze=False)
    for row, prior in zip(axes, priors):
        for rows in runs.values():
            if rows[-1]["prior"] != prior:
                continue
            label = f"{_label(rows[-1])} (W={rows[-1]['width']})"
            epochs = [r["epoch"] for r in rows]
            for ax, key in zip(row, ("log_prob", "accuracy", "ece")):
                ax.plot(epochs, [r[key] for r in rows], marker=".", label=label,
                        color=colours[_label(rows[-1])])
        for ax, title in zip(row, ("test log-probability", "test accuracy", "ECE")):
            ax.set_xlabel("epoch")
            ax.set_title(f"{prior} prior: ensemble {title}")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def alpha2_sweep(runs, path=None):
    """Yu et al.'s Fig. 4: Monge's ensemble metrics against alpha², identity as alpha² = 0."""
    points = []
    for rows in runs.values():
        r = rows[-1]
        if r["sampler"] == "Monge":
            points.append((r["alpha2"], r))
        elif r["sampler"] == "identity":
            points.append((0.0, r))
    points.sort(key=lambda p: p[0])
    lines = [
        "| alpha² | epochs | diverging draws | test log-prob | accuracy | ECE |",
        "|---|---|---|---|---|---|",
    ]
    for a, r in points:
        lines.append(
            f"| {a:g}{' (identity)' if a == 0 else ''} | {r['epoch']} | {r['diverging_draws']} "
            f"| {r['log_prob']:.4f} | {r['accuracy']:.4f} | {r['ece']:.4f} |"
        )
    if path and points:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(12, 3.3))
        # a chain at chance accuracy (10 classes) has failed: shade it instead of letting its
        # numbers set the axes
        monge = [(a, r) for a, r in points if a > 0 and r["accuracy"] > 0.5]
        failed = [a for a, r in points if a > 0 and r["accuracy"] <= 0.5]
        ident = [r for a, r in points if a == 0]
        for ax, key in zip(axes, ("log_prob", "accuracy", "ece")):
            ax.semilogx([a for a, _ in monge], [r[key] for _, r in monge], "o-", label="Monge")
            for r in ident:
                ax.axhline(r[key], color="gray", ls="--", label="identity (alpha² = 0)")
            if failed:
                ax.axvspan(min(failed) / 1.3, max(failed) * 1.3, color="red", alpha=0.12,
                           label="failed (chance accuracy)")
            ax.set_xlabel("alpha²")
            ax.set_title(f"ensemble {key.replace('_', ' ')}")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows")
    p.add_argument("--figure", default=None)
    p.add_argument("--costs", default=None, help="benchmarks/speed/yu_step_cost.py's JSON file")
    p.add_argument(
        "--alpha2", action="store_true", help="the rows are an alpha² sweep: print Fig. 4's table"
    )
    args = p.parse_args(argv)
    runs = load(args.rows)
    if args.alpha2:
        print(alpha2_sweep(runs, args.figure))
        return
    costs = None
    if args.costs:
        with open(args.costs) as f:
            costs = {k: v["seconds_per_step"] for k, v in json.load(f)["samplers"].items()}
    print(table(runs, costs))
    if args.figure:
        figure(runs, args.figure)


if __name__ == "__main__":
    main()
