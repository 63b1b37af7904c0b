"""NumPyro's own tests give the same per-test outcomes with and without numpyro_sgrld.

    # test_util.py (PyPI sdist); with a NumPyro checkout also test/infer/test_mcmc.py
    python benchmarks/accuracy/numpyro_own_tests.py
    python benchmarks/accuracy/numpyro_own_tests.py --numpyro-src ~/numpyro
    python benchmarks/accuracy/numpyro_own_tests.py --numpyro-src ~/numpyro -- \
        -k "fori_collect or jit"

Runs the test files of the installed NumPyro release (default: ``test/test_util.py`` and
``test/infer/test_mcmc.py``) once per mode:

- ``none``: plain NumPyro;
- ``import``: ``pytest -p numpyro_sgrld`` (the package imported before any test, as a plugin
  module: what every program that imports it does to NumPyro);
- ``opt-in``: the same plus :func:`numpyro_sgrld.enable_fast_sampling_loop` (NumPyro's tests run
  no kernel of ours, so every run must go through NumPyro's own loop unchanged),

each in a fresh interpreter, and compares the outcome of every test (JUnit XML: passed, failed,
error, skipped). Prints the counts per mode and every test whose outcome differs; exits 1 if any
does.

The test files come from NumPyro's source distribution on PyPI (``pip download --no-deps
--no-binary :all: numpyro==<installed version>``, the only download), whose ``test/`` folder
holds ``test_util.py`` but not ``test/infer/`` (NumPyro 0.22.0). For ``test_mcmc.py`` pass
``--numpyro-src`` a checkout of the release's tag (``git clone --depth 1 --branch 0.22.0
https://github.com/pyro-ppl/numpyro``). The files are copied with NumPyro's ``pyproject.toml``
(its pytest settings: warnings are errors) into a scratch folder and run against the *installed*
NumPyro, not the checkout's. Extra pytest arguments follow ``--`` (e.g. ``-k``);
``--parallel`` runs the three modes at once (one process each).
"""

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from functools import partial
from pathlib import Path

DEFAULT_FILES = ("test/test_util.py", "test/infer/test_mcmc.py")
MODES = ("none", "import", "opt-in")
_OPT_IN_PLUGIN = "import numpyro_sgrld\n\nnumpyro_sgrld.enable_fast_sampling_loop()\n"


def _installed_numpyro():
    import numpyro

    return numpyro.__version__


def _from_sdist(version, scratch):
    """NumPyro's sdist of ``version`` from PyPI, unpacked; returns its root folder."""
    download = scratch / "sdist"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--quiet", f"numpyro=={version}", "-d", str(download)],
        check=True,
    )
    (archive,) = download.glob("numpyro-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(download, filter="data")
    return download / f"numpyro-{version}"


def _prepare(src, files, work):
    """``work`` holding ``src``'s ``test/`` tree and ``pyproject.toml`` (no ``numpyro/`` package,
    so the installed NumPyro is the one imported)."""
    missing = [f for f in files if not (src / f).is_file()]
    if missing:
        raise SystemExit(
            f"{', '.join(missing)} not found under {src}. NumPyro's PyPI sdist ships "
            "test/test_util.py but not test/infer/; pass --numpyro-src PATH, a checkout of the "
            "installed release's tag (git clone --depth 1 --branch <version> "
            "https://github.com/pyro-ppl/numpyro), or choose --files."
        )
    shutil.copytree(src / "test", work / "test")
    shutil.copy(src / "pyproject.toml", work / "pyproject.toml")
    (work / "_sgrld_opt_in_plugin.py").write_text(_OPT_IN_PLUGIN)


def _start(work, files, mode, extra, out):
    """pytest on ``files`` in ``mode``, started; its log (one line per test) in ``out``."""
    xml = out / f"junit-{mode}.xml"
    plugin = {"none": [], "import": ["-p", "numpyro_sgrld"],
              "opt-in": ["-p", "_sgrld_opt_in_plugin"]}[mode]
    cmd = [sys.executable, "-m", "pytest", "-c", "pyproject.toml", "--rootdir", ".",
           "-p", "no:cacheprovider", "--color=no", f"--junitxml={xml}", *plugin, *files, *extra]
    log = open(out / f"log-{mode}.txt", "w")  # closed in save_figure
    proc = subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT)
    return proc, log, xml, time.perf_counter()


def save_figure(started):
    proc, log, xml, start = started
    rc = proc.wait()
    log.close()
    return xml, rc, time.perf_counter() - start


def _outcomes(xml):
    """``{test id: outcome}`` from a JUnit XML report."""
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcome = next((t for t in ("failure", "error", "skipped") if t in tags), "passed")
        outcomes[name] = {"failure": "failed"}.get(outcome, outcome)
    return outcomes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numpyro-src", type=Path,
                        help="a checkout of the installed NumPyro release (default: PyPI sdist)")
    parser.add_argument("--files", nargs="+", default=None,
                        help="test files relative to the NumPyro source root (default: "
                        f"{' '.join(DEFAULT_FILES)}; test/test_util.py alone without "
                        "--numpyro-src)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--parallel", action="store_true",
                        help="run the modes at the same time (one process each)")
    parser.add_argument("--out", type=Path, default=Path("numpyro-own-tests"),
                        help="folder for the JUnit reports and logs")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    version = _installed_numpyro()
    files = args.files or (list(DEFAULT_FILES) if args.numpyro_src else [DEFAULT_FILES[0]])
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        src = args.numpyro_src.expanduser().resolve() if args.numpyro_src else _from_sdist(
            version, scratch)
        work = scratch / "work"
        work.mkdir()
        _prepare(src, files, work)
        print(f"NumPyro {version} (installed), tests from {src}: {' '.join(files)}"
              + (f" {' '.join(args.pytest_args)}" if args.pytest_args else ""))
        results = {}
        start = partial(_start, work, files, extra=args.pytest_args, out=out)
        started = {m: start(m) for m in args.modes} if args.parallel else {}
        for mode in args.modes:
            xml, rc, seconds = save_figure(started.get(mode) or start(mode))
            results[mode] = _outcomes(xml)
            counts = Counter(results[mode].values())
            print(f"{mode:>7}: " + ", ".join(f"{counts[k]} {k}" for k in
                                             ("passed", "failed", "error", "skipped"))
                  + f" ({len(results[mode])} tests, pytest exit {rc}, {seconds:.0f} s)",
                  flush=True)
    base, *others = args.modes
    differ = 0
    for mode in others:
        tests = sorted(results[base].keys() | results[mode].keys())
        for t in tests:
            a, b = results[base].get(t, "absent"), results[mode].get(t, "absent")
            if a != b:
                differ += 1
                print(f"DIFFERS ({base} -> {mode}): {t}: {a} -> {b}")
    print("same outcomes in every mode" if not differ else f"{differ} outcomes differ")
    print(f"reports and logs: {out}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
