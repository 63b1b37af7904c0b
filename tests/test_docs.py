"""Every Python block of README.md and docs/*.md runs as written: the blocks of a page run in
order in one namespace, as a reader pasting them into one interpreter would run them, and a page
defines every name (data included) it uses.

The default run runs them with the runs shortened (every ``num_warmup=`` and ``num_samples=``
literal divided by :data:`SHORTEN`, at least :data:`SHORTEST`); the slow set runs them exactly
as written and checks that every stochastic-gradient run on a page ends with split R-hat at
most 1.01 and bulk ESS at least 100 (:func:`numpyro_sgrld.check`)."""

import re
from pathlib import Path

import pytest
from numpyro.infer import MCMC

import numpyro_sgrld
from numpyro_sgrld import SGMCMC

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# pages whose examples repeat what their own test files check, and take seconds to compile:
# in the slow set (tests/test_streaming.py, test_conv.py, test_bnp.py, test_sampling_loop.py,
# test_adapter.py, test_adaptation.py and test_gibbs.py run in the default run)
SLOW_PAGES = {"streaming.md", "conv_nets.md", "bnp.md", "scaling.md", "subsampling.md",
              "step_size.md", "gibbs.md"}


SHORTEN = 10
SHORTEST = 200
LENGTH = re.compile(r"\b(num_warmup|num_samples)=(\d[\d_]*)")


def _blocks(page):
    return BLOCK.findall(page.read_text())


def _shortened(code):
    def short(m):
        n = int(m.group(2).replace("_", ""))
        return f"{m.group(1)}={max(min(n, SHORTEST), n // SHORTEN)}"

    return LENGTH.sub(short, code)


def _run_page(page, shorten):
    """Run a page's blocks in one namespace; the ``MCMC`` runs of stochastic-gradient kernels
    found in it after each block, by identity."""
    namespace = {"__name__": "__docs__"}
    runs = {}
    try:
        for number, code in enumerate(_blocks(page), 1):
            try:
                code = _shortened(code) if shorten else code
                exec(compile(code, f"{page.name}, block {number}", "exec"), namespace)
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{page.name}, block {number} fails: {type(e).__name__}: {e}")
            for name, value in list(namespace.items()):
                if (isinstance(value, MCMC) and isinstance(value.sampler, SGMCMC)
                        and value._states is not None):
                    runs[id(value)] = (f"block {number}, {name}", value)
    finally:  # a page may opt in for "the rest of the program": not for the other tests
        numpyro_sgrld.disable_fast_sampling_loop()
    return list(runs.values())


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if _blocks(p) and p.name not in SLOW_PAGES],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    """Every page's examples run, shortened (the slow pages run as written in the slow set:
    some of them assert on their own run lengths)."""
    monkeypatch.chdir(tmp_path)  # a page that writes files writes them here
    _run_page(page, shorten=True)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_examples_converge_as_written(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failed = []
    for where, mcmc in _run_page(page, shorten=False):
        if mcmc.num_samples < 1000:
            continue  # a demonstration of a call, not of a posterior
        v = numpyro_sgrld.check(mcmc, warn=False)
        if not v.trusted:
            failed.append(f"{where}: {v}")
    assert not failed, "\n".join(failed)


def test_every_page_with_code_is_tested():
    assert [p.name for p in PAGES if _blocks(p)], "no Python block found: the pattern broke"
