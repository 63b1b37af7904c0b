"""A benchmark's record: what a command printed, with the machine and the versions.

    python benchmarks/record.py docs/results/speed_logreg.json -- \
        python benchmarks/speed/speed.py --problem logreg

runs the command, passes its output through, and writes one JSON object: the command, its
exit status, the commit (``+changes`` when the library or the benchmarks differ from it), the
start time and wall time, the versions of the command's Python packages, the CPUs the process
may use and the load average at the start and the end, the printed text, and every Markdown
table in it as ``{"title", "columns", "rows"}`` (the title is the last non-table line printed
before the table). A script's tables so become its raw output under ``docs/results/``.
"""

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _warning(line):
    """Whether ``line`` is a warning Python printed (``path:line: SomeWarning: ...``) or the
    indented source line it shows under one."""
    return bool(re.match(r"^\S.*:\d+: \w*Warning: ", line)) or line.startswith("  ")


def tables(text):
    """Every Markdown table in ``text``: ``[{"title", "columns", "rows"}]``."""
    out, title, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        is_table = (
            line.startswith("|")
            and i + 1 < len(lines)
            and set(lines[i + 1].strip().replace("|", "")) <= set("-: ")
            and lines[i + 1].strip().startswith("|")
        )
        if is_table:
            columns, rows = _cells(line), []
            i += 2
            while i < len(lines) and (lines[i].strip().startswith("|") or _warning(lines[i])):
                if not _warning(lines[i]):  # a warning printed between two rows is no row
                    rows.append(_cells(lines[i]))
                i += 1
            out.append({"title": title, "columns": columns, "rows": rows})
            continue
        if line:
            title = line
        i += 1
    return out


def _commit():
    try:
        root = Path(__file__).resolve().parents[1]
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "numpyro_sgrld", "benchmarks"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _machine():
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpus_allowed": sorted(cpus) if cpus is not None else None,
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _versions_of(python):
    code = ("import json, importlib, platform; out = {'python': platform.python_version()}\n"
            "for n in ('jax', 'jaxlib', 'numpyro', 'arviz', 'numpy', 'blackjax'):\n"
            "    try: out[n] = importlib.import_module(n).__version__\n"
            "    except Exception: pass\n"
            "print(json.dumps(out))")
    try:
        return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                         check=True).stdout)
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None


def run(out, command):
    """Run ``command``, pass its output through, and write its record to ``out``."""
    started = datetime.datetime.now(datetime.UTC)
    machine_start, commit = _machine(), _commit()  # the code the command runs
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    printed = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        printed.append(line)
    rc = proc.wait()
    ended = datetime.datetime.now(datetime.UTC)
    text = "".join(printed)
    python = command[0] if command[0].startswith(("python", "/")) else sys.executable
    record = {
        "command": " ".join(command),
        "exit_status": rc,
        "commit": commit,
        "started": started.isoformat(timespec="seconds"),
        "wall_s": round((ended - started).total_seconds(), 1),
        "versions": _versions_of(python),
        "machine_at_start": machine_start,
        "machine_at_end": _machine(),
        "tables": tables(text),
        "printed": text,
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"record written to {out} (exit status {rc})", flush=True)
    return rc


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: python benchmarks/record.py OUT.json -- COMMAND ...")
    sys.exit(run(sys.argv[1], sys.argv[3:]))
