"""Benchmark: a soak. Consecutive runs of a short scenario with faults, each checked for leftovers, and the
long-lived daemons' memory and open files before and after (printed).

    .venv/bin/python benchmarks/soak.py [--runs 100] [--budget SECONDS] [--hosts netns|docker]

Each run is `testbed -q run` (a process of its own, as a user runs it) of a 2x2 rail-optimized fabric: a ring
AllReduce with, in turn, a link flap on a spine link, a GPU crash (shrink recovery) and a NIC cut mended after
0.5 s. After each run nothing of the testbed may be left: no tb- namespace, bridge, link or run directory
(what `testbed clean` would remove), no container of ours, no process of a fabric (controller, Mininet host
shells, rank programs), no Docker cgroup beyond those before the soak. Printed at the end: runs, exit statuses,
leftovers (must be none), and RSS and open file descriptors of ovs-vswitchd, ovsdb-server and dockerd before
and after.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

from testbed import PREFIX
from testbed.cli.live import leftovers
from testbed.fabric import runstate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS = [{"at": 1.0, "kind": "link-flap", "target": "rail0-spine0", "duration": 0.3, "count": 2},
          {"at": 1.0, "kind": "gpu-crash", "target": "s1g1"},
          {"at": 1.0, "kind": "nic-down", "target": "s1g0", "duration": 0.5}]
MARKERS = ("controllers.run", "mininet:", "hosts.agents.", "hosts.collectives.")
DAEMONS = {"ovs-vswitchd": "/var/run/openvswitch/ovs-vswitchd.pid",
           "ovsdb-server": "/var/run/openvswitch/ovsdb-server.pid", "dockerd": None}


def scenario(i: int, hosts: str) -> dict:
    return {"name": f"soak-{i}", "hosts": hosts,
            "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 2, "nic_mbps": 10},
            "workloads": [{"type": "collective", "op": "allreduce", "algo": "ring", "sizes": ["256KiB"],
                           "iterations": 3, "timeout_s": 20, "recovery": "shrink"}],
            "faults": [FAULTS[i % len(FAULTS)]]}


def _pid_of(name: str, pidfile: str | None) -> int | None:
    if pidfile and os.path.exists(pidfile):
        with open(pidfile) as f:
            return int(f.read().strip())
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{d}/comm") as f:
                if f.read().strip() == name:
                    return int(os.path.basename(d))
        except OSError:
            pass
    return None


def daemons() -> dict[str, tuple[int, int] | None]:
    """name -> (RSS in KiB, open file descriptors), None where the daemon is not running."""
    out = {}
    for name, pidfile in DAEMONS.items():
        pid = _pid_of(name, pidfile)
        try:
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            out[name] = (rss, len(os.listdir(f"/proc/{pid}/fd")))
        except (OSError, TypeError, StopIteration):
            out[name] = None
    return out


def live_pids() -> set[int]:
    """Owners of runs still in progress (another user's fabric is not ours to judge) and what they recorded."""
    pids = set()
    for st in runstate.all_runs().values():
        if runstate.alive(st):
            pids |= {st.get("owner_pid"), st.get("controller_pid"), *st.get("host_pids", {}).values()}
    return {p for p in pids if p}


def _ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        found.add(pid)
    return found


def stray_processes() -> list[str]:
    live, me = live_pids(), os.getpid()
    found = []
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(os.path.basename(d))
        try:
            with open(f"{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in MARKERS) and pid not in live and not (_ancestors(pid) & (live | {me})):
            found.append(f"{pid} {cmd[:60]}")
    return found


def containers() -> list[str]:
    try:
        from testbed.fabric.backends import dockerhost
        client = dockerhost.engine()
    except Exception:
        return []
    return [c.name for c in client.containers.list(all=True, filters={"label": dockerhost.LABEL})
            if c.name.startswith(PREFIX)]


def docker_cgroups() -> set[str]:
    return set(glob.glob("/sys/fs/cgroup/*/docker/*/")) | set(glob.glob("/sys/fs/cgroup/system.slice/docker-*"))


def left(cgroups_before: set[str], strays_before: set[str]) -> list[str]:
    found = [f"{kind}: {', '.join(v[:3])}" for kind, v in leftovers().items()]
    found += [f"process {p}" for p in stray_processes() if p not in strays_before]
    found += [f"container {c}" for c in containers()]
    extra = docker_cgroups() - cgroups_before
    return found + ([f"{len(extra)} Docker cgroups"] if extra else [])


WARMUP_RUNS = 10       # a daemon's first fabrics grow its pools and caches once; growth past them would be a leak


def soak(runs: int, budget: float | None = None, hosts: str = "netns") -> dict:
    """`runs` runs of the scenario in turn (stopping after `budget` seconds): per exit status its count, the
    leftovers found after each run, and the daemons' (RSS KiB, open files) before, after the first WARMUP_RUNS
    runs ("warm", None if there were not more) and after."""
    before, cgroups, strays = daemons(), docker_cgroups(), set(stray_processes())
    warm = None
    for p in sorted(strays):                  # not the soak's: left by something before it; reported, not judged
        print(f"before the soak, already there: process {p}")
    statuses, problems, t0 = {}, [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tb-soak-") as tmp:
        for i in range(runs):
            if budget is not None and time.monotonic() - t0 > budget:
                break
            path = os.path.join(tmp, "soak.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(scenario(i, hosts), f)
            t = time.monotonic()
            p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "testbed"), "-q", "run", path,
                                "--out", os.path.join(tmp, f"run-{i}")], capture_output=True, text=True, cwd=ROOT)
            statuses[p.returncode] = statuses.get(p.returncode, 0) + 1
            found = left(cgroups, strays)
            problems += [f"run {i}: {x}" for x in found]
            why = failure(os.path.join(tmp, f"run-{i}"), p) if p.returncode else ""
            print(f"run {i + 1}: {FAULTS[i % len(FAULTS)]['kind']:10s} exit {p.returncode} "
                  f"{time.monotonic() - t:5.1f} s, leftovers: {'; '.join(found) or 'none'}" + why, flush=True)
            if i + 1 == WARMUP_RUNS and runs > WARMUP_RUNS:
                warm = daemons()
    return {"statuses": statuses, "problems": problems, "before": before, "warm": warm, "after": daemons()}


def failure(run_dir: str, p: subprocess.CompletedProcess) -> str:
    """Why a run failed (its failed checks, else its last line of stderr), its folder kept for a look after the
    soak's own is gone."""
    why = ""
    try:
        with open(os.path.join(run_dir, "results.json")) as f:
            why = "; ".join(f"{c['name']}: {c.get('detail', '')}" for c in json.load(f)["checks"] if not c["ok"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    why = why or (p.stderr.strip().splitlines() or ["no output"])[-1]
    kept = ""
    if os.path.isdir(run_dir):
        kept = tempfile.mkdtemp(prefix=f"{PREFIX}soak-failed-")
        shutil.copytree(run_dir, kept, dirs_exist_ok=True, symlinks=True)
        kept = f", kept in {kept}"
    return f" ({why[:400]}{kept})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--budget", type=float, default=None, help="stop starting runs after this many seconds")
    ap.add_argument("--hosts", choices=["netns", "docker"], default="netns")
    args = ap.parse_args()
    t0 = time.monotonic()
    r = soak(args.runs, args.budget, args.hosts)
    statuses, problems, before, after = r["statuses"], r["problems"], r["before"], r["after"]
    runs = sum(statuses.values())
    print(f"\n{runs} runs in {time.monotonic() - t0:.0f} s, exit statuses {statuses}, leftovers: "
          f"{len(problems) or 'none'}")
    warm = r["warm"] or {}
    print(f"{'daemon':14s} {'RSS before':>11s} {f'after {WARMUP_RUNS}':>10s} {'RSS after':>10s} {'fds before':>11s} "
          f"{'fds after':>10s}")
    for name in DAEMONS:
        b, w, a = before[name], warm.get(name), after[name]
        if b is None or a is None:
            print(f"{name:14s} not running")
            continue
        mid = f"{w[0] / 1024:6.1f} MiB" if w else f"{'-':>10s}"
        print(f"{name:14s} {b[0] / 1024:7.1f} MiB {mid} {a[0] / 1024:6.1f} MiB {b[1]:11d} {a[1]:10d}")
    for line in problems[:20]:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
