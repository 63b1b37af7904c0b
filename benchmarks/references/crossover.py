r"""Where SG-MCMC beats NUTS on a network: the shuttle classifier at 1,000, 10,000 and 50,000
training rows, each preset's defaults (``presets.py``) against NUTS to its own floor
(``networks.py``), every time on one core.

For each preset and each size N it reads the run's wall time :math:`T_{SG}(N)` (warm-up and
sampling, compile included) and whether its predictive is within the band of the reference
(:func:`numpyro_sgrld.analysis.predictive.within_band`), and NUTS's wall time for reference ensemble
``a``, :math:`T_{NUTS}(N)` (warm-up and draws: the time to an ensemble whose distance to an
independent one is the floor). A preset *wins* at N when it is within the band and
:math:`T_{SG}(N) < T_{NUTS}(N)`. The crossover is the N where :math:`T_{NUTS}/T_{SG} = 1`,
interpolated linearly in :math:`\log N` between the two measured sizes that bracket it;
where the preset is already faster at the smallest size it is extrapolated below it along
NUTS's measured :math:`\log T`–:math:`\log N` slope between the two smallest sizes (the
presets' own time hardly depends on N: each step reads one minibatch), and marked so. A
preset that does not reach the band at a size has no time to the band there. The same is
done for a stricter test, within twice the floor (the band without its absolute allowance
of 0.01, which is wide where the floor is small).

Prints a Markdown table and writes ``docs/results/network_crossover.json``::

    python benchmarks/references/crossover.py
"""

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
SIZES = {"shuttle_1000": 1_000, "shuttle_10000": 10_000, "shuttle": 50_000}


def _rows(path, key):
    rows = [json.loads(line) for line in open(path)] if path.exists() else []
    return {key(r): r for r in rows}


def crossing(sizes, nuts, seconds, close):
    """The crossover of one preset from its cells at the measured ``sizes`` (ascending):
    ``dict(above=N_lo, below=N_hi, estimate=N, extrapolated=bool)``: it wins at every
    measured size from ``below`` up and at none from ``above`` down; ``estimate`` is the N
    where NUTS's time over the preset's is 1 (linear in log N and log ratio between the two
    sizes, or along NUTS's slope below the smallest), ``None`` where the preset loses at the
    largest size or wins, loses and wins again, or where the size below did not reach the band
    (no time to interpolate)."""
    wins = [c and t < n for c, t, n in zip(close, seconds, nuts)]
    none = dict(above=None, below=None, estimate=None, extrapolated=False)
    if not wins[-1]:
        return dict(none, above=sizes[-1])
    j = len(wins) - 1
    while j > 0 and wins[j - 1]:
        j -= 1
    if any(wins[:j]):
        return none
    x = [math.log(n) for n in sizes]
    y = [math.log(n / t) for n, t in zip(nuts, seconds)]
    if j == 0:
        slope = (math.log(nuts[1]) - math.log(nuts[0])) / (x[1] - x[0])
        estimate = math.exp(x[0] - y[0] / slope) if slope > 0 else None
        return dict(above=None, below=sizes[0], estimate=estimate, extrapolated=True)
    estimate = None
    if close[j - 1]:
        estimate = math.exp(x[j - 1] + (x[j] - x[j - 1]) * (-y[j - 1]) / (y[j] - y[j - 1]))
    return dict(above=sizes[j - 1], below=sizes[j], estimate=estimate, extrapolated=False)


def strictly_close(cell):
    """Within twice the floor (the band without its absolute allowance of 0.01, which at a
    floor of 0.0002 is 50 floors wide) and the band's agreement test."""
    agree = cell.get("agreement", 1.0) >= cell.get("floor_agreement", 1.0) - 0.01
    return bool(cell["ratio"] <= 2.0 and agree)


def summarise(references, presets):
    order = [p for p in SIZES if p in references]
    nuts = {p: references[p]["seconds"]["a"] for p in order}
    kernels = list(dict.fromkeys(k for (p, k) in presets if p in SIZES))
    out = dict(sizes={p: SIZES[p] for p in order}, nuts_seconds=nuts, presets={})
    for k in kernels:
        if not all((p, k) in presets for p in order):
            continue
        cells = [presets[(p, k)] for p in order]
        entry = {p: dict(seconds=c["seconds"], close=c["close"], warned=c["warned"],
                         ratio=c["ratio"], wins=bool(c["close"] and c["seconds"] < nuts[p]))
                 for p, c in zip(order, cells)}
        for p, c in zip(order, cells):
            entry[p]["strictly_close"] = strictly_close(c)
            entry[p]["wins_strictly"] = bool(strictly_close(c) and c["seconds"] < nuts[p])
        args = ([SIZES[p] for p in order], [nuts[p] for p in order],
                [c["seconds"] for c in cells])
        out["presets"][k] = dict(cells=entry, **crossing(*args, [c["close"] for c in cells]),
                                 strict=crossing(*args, [strictly_close(c) for c in cells]))
    return out


def _crossover(e, wins):
    if e["below"] is None:
        return f"wins at {', '.join(f'{n:,}' for n in wins)} only" if wins else "none"
    if e["estimate"]:
        return f"{e['estimate']:,.0f}" + (" (extrapolated)" if e["extrapolated"] else "")
    return f"{e['above']:,}–{e['below']:,}"


def table(summary):
    sizes = summary["sizes"]
    head = " | ".join(f"N = {n:,}: s (close)" for n in sizes.values())
    print(f"| preset | {head} | crossover N, band | crossover N, 2x floor |")
    print("|---|" + "---|" * len(sizes) + "---|---|")
    print("| NUTS to its floor | " + " | ".join(f"{summary['nuts_seconds'][p]:.0f}"
                                             for p in sizes) + " | | |")
    for k, e in summary["presets"].items():
        cells = []
        for p in sizes:
            c = e["cells"].get(p)
            close = "2x floor" if c["strictly_close"] else "yes" if c["close"] else "no"
            cells.append(f"{c['seconds']:.0f} ({close}{', warned' if c['warned'] else ''})")
        wins = [[n for p, n in sizes.items() if e["cells"][p][key]]
                for key in ("wins", "wins_strictly")]
        print(f"| {k} | " + " | ".join(cells) + f" | {_crossover(e, wins[0])} | "
              f"{_crossover(e['strict'], wins[1])} |")


def main():
    references = _rows(RESULTS / "network_references.jsonl", lambda r: r["problem"])
    presets = _rows(RESULTS / "network_presets.jsonl", lambda r: (r["problem"], r["kernel"]))
    summary = summarise(references, presets)
    (RESULTS / "network_crossover.json").write_text(json.dumps(summary, indent=1) + "\n")
    table(summary)


if __name__ == "__main__":
    main()
