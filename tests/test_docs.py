"""Every Python block of README.md and docs/*.md runs as written: the blocks of a page run in
order in one namespace, as a reader pasting them into one interpreter would run them, and a page
defines every name (data included) it uses."""

import re
from pathlib import Path

import pytest

import numpyro_sgrld

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# pages whose examples repeat what their own test files check, and take seconds to compile:
# in the slow set (tests/test_streaming.py, test_conv.py, test_bnp.py, test_sampling_loop.py,
# test_adapter.py and test_adaptation.py run in the default run)
SLOW_PAGES = {"streaming.md", "conv_nets.md", "bnp.md", "scaling.md", "subsampling.md",
              "step_size.md"}


def _blocks(page):
    return BLOCK.findall(page.read_text())


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PAGES else p
        for p in PAGES
        if _blocks(p)
    ],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a page that writes files writes them here
    namespace = {"__name__": "__docs__"}
    try:
        for number, code in enumerate(_blocks(page), 1):
            try:
                exec(compile(code, f"{page.name}, block {number}", "exec"), namespace)
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{page.name}, block {number} fails: {type(e).__name__}: {e}")
    finally:  # a page may opt in for "the rest of the program": not for the other tests
        numpyro_sgrld.disable_fast_sampling_loop()


def test_every_page_with_code_is_tested():
    assert [p.name for p in PAGES if _blocks(p)], "no Python block found: the pattern broke"
