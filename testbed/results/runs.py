"""Past runs: what a results folder keeps of how it ran, and `testbed ls` / `testbed compare` over such folders.

Beside results.json, summary.md, plots/ and pcaps/, every run writes
  scenario.yaml      the scenario exactly as it ran (after --set): `testbed run --again DIR` runs it again
  environment.json   the command line, the testbed's version and git commit, kernel, Open vSwitch, Python,
                     CPU count and memory of the machine it ran on
  hosts/HOST/        what the host programs printed (testbed/runtime/hostlogs.py)
Paths inside results.json are relative to its folder, so a folder can be moved or shared whole; its schema is
versioned (testbed/results/results_schema.py) and `testbed ls` flags a folder of another major version.
"""
from __future__ import annotations

import datetime
import glob
import json
import os
import platform
import subprocess
import sys

import yaml

from testbed import PROJECT_ROOT, __version__
from testbed.results import results_schema


class RunsError(ValueError):
    pass


def _output(argv: list[str], cwd: str | None = None) -> str | None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def environment() -> dict:
    """Where and with what a run ran: enough to tell two runs' conditions apart."""
    commit = _output(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT)
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT)
    ovs = _output(["ovs-vsctl", "--version"])
    with open("/proc/meminfo") as f:
        mem_kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal:")))
    return {"command": [os.path.basename(sys.argv[0]), *sys.argv[1:]], "testbed_version": __version__,
            "git_commit": commit, "git_dirty": bool(dirty) if commit else None, "kernel": platform.release(),
            "openvswitch": ovs.splitlines()[0].split()[-1] if ovs else None, "python": platform.python_version(),
            "cpus": os.cpu_count(), "memory_gib": round(mem_kib / 2**20, 1),
            "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def record(out_dir: str, scenario: dict) -> None:
    """Write scenario.yaml and environment.json into a run's folder."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "scenario.yaml"), "w") as f:
        f.write(f"# as run by testbed {__version__}; `testbed run --again {out_dir}` runs it again\n")
        yaml.safe_dump(scenario, f, sort_keys=False)
    with open(os.path.join(out_dir, "environment.json"), "w") as f:
        json.dump(environment(), f, indent=2)


def scenario_of(run_dir: str) -> str:
    """The scenario file a results folder ran (for --again)."""
    path = os.path.join(run_dir, "scenario.yaml")
    if not os.path.isfile(path):
        raise RunsError(f"{run_dir}: not a results folder with a scenario.yaml (runs write one since 0.1)")
    return path


def load(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "results.json")) as f:
            return json.load(f)
    except OSError:
        raise RunsError(f"{run_dir}: no results.json (not a results folder)") from None
    except ValueError as exc:
        raise RunsError(f"{run_dir}: results.json is not valid JSON ({exc})") from None


def find(root: str) -> list[str]:
    """Results folders under root, oldest first."""
    found = [os.path.dirname(p) for p in glob.glob(os.path.join(root, "**", "results.json"), recursive=True)]
    return sorted(found, key=lambda d: (load_quietly(d).get("started") or "", d))


def load_quietly(run_dir: str) -> dict:
    try:
        return load(run_dir)
    except RunsError:
        return {}


def version_problem(r: dict) -> str | None:
    """Why this testbed may misread a results.json: written under another major schema version."""
    version = r.get("schema_version")
    if version is None or results_schema.known_version(r):
        return None
    return f"results.json schema {version}; this testbed reads {results_schema.MAJOR}.x, figures may be misread"


def headline(r: dict) -> str:
    """One line: what ran and its best figure (each type's `headline`)."""
    from testbed.workloads import hook      # the workloads load the runtime: only when a run is listed
    return ", ".join(hook(w.get("type"), "headline")(w) for w in r.get("workloads", []))


def rows(r: dict) -> dict[tuple, dict]:
    """Comparable figures of a run, keyed so that the same measurement in two runs has the same key."""
    from testbed.workloads import hook
    out = {}
    for w in r.get("workloads", []):
        out.update(hook(w.get("type"), "comparable")(w))
    for f in r.get("faults", []):
        if f.get("at_s") is not None:
            out[("fault", f["kind"], f["target"])] = {
                "detected after s": _after(f, "detected_s"), "recovered after s": _after(f, "recovered_s")}
    return out


def _after(fault: dict, key: str):
    return round(fault[key] - fault["at_s"], 4) if fault.get(key) is not None else None


def compare(a: dict, b: dict) -> list[str]:
    """Lines of a table: each measurement of A and B side by side, with B / A."""
    ra, rb = rows(a), rows(b)
    lines = [f"{'measurement':<52} {'figure':<18} {'A':>12} {'B':>12} {'B/A':>7}"]
    for key in list(ra) + [k for k in rb if k not in ra]:
        fa, fb = ra.get(key, {}), rb.get(key, {})
        for name in list(fa) + [n for n in fb if n not in fa]:
            va, vb = fa.get(name), fb.get(name)
            ratio = f"{vb / va:.2f}" if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va else "-"
            label = " ".join(str(k) for k in key)
            lines.append(f"{label:<52} {name:<18} {_fmt(va):>12} {_fmt(vb):>12} {ratio:>7}")
    lines.append(f"{'checks':<52} {'passed':<18} {checks_passed(a):>12} {checks_passed(b):>12}")
    return lines


def _fmt(v) -> str:
    return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def checks_passed(r: dict) -> str:
    checks = r.get("checks", [])
    return f"{sum(c['ok'] for c in checks)}/{len(checks)}"
