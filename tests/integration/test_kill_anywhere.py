"""SIGKILL `testbed run` at seeded random moments: nothing of the run outlives it, `testbed status` names what it
left, `testbed clean` removes exactly that (objects of other names and other fabric tags stay), and the next run
passes.

Every test here runs under a fabric tag (the worker's, or its own), so `testbed clean` never touches another tag's
runs on a shared machine.
"""
from __future__ import annotations

import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from testbed import PREFIX, RUN_ROOT
from testbed.fabric import lifeline, ovs, runstate

pytestmark = pytest.mark.root

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = 47
TAG = os.environ.get("TESTBED_FABRIC_TAG") or "k"
OTHER = "z" if TAG != "z" else "y"        # a fabric tag that is not ours: its objects must stay

COLLECTIVE = """\
name: kill-collective
description: a small collective with a capture and a link flap, killed anywhere
fabric: {kind: rail-only, servers: 2, gpus_per_server: 2, nic_mbps: 20}
workloads:
  - {type: collective, name: ring, op: allreduce, algo: ring, sizes: [1MiB], iterations: 2}
faults:
  - {workload: ring, at: 0.5, kind: link-flap, target: s0g0-rail0, duration: 0.5, count: 1}
capture:
  - {point: s0g0/nic, filter: "udp port 4791", max_packets: 20000}
"""
OFFLOAD = """\
name: kill-offload
description: tf.data.service workers and a trainer, killed anywhere
fabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2, spines: 1, nic_mbps: 100, cpu_hosts: 2}
workloads:
  - {type: offload, pipelines: [compute], gpu_steps_per_s: 25, local_cores: 0.3, worker_cores: 0.3,
     seconds: 3, ratios: [0, 0.5], repeats: 1}
"""
CHURN = """\
name: kill-churn
description: GPUs failing and returning under an AllReduce with a shared state, killed anywhere
fabric: {kind: rail-only, servers: 2, gpus_per_server: 2, nic_mbps: 20}
workloads:
  - {type: churn, duration_s: 20, seed: 3, size: 64KiB, algo: ring, kinds: [gpu-crash, nic-down], interval_s: 3,
     down_s: [1, 2], gap_s: 2}
"""
DOCKER = """\
name: kill-docker
description: a collective on Docker hosts with a GPU crash, killed anywhere
fabric: {kind: rail-only, servers: 2, gpus_per_server: 2, nic_mbps: 20}
hosts: docker
workloads:
  - {type: collective, name: ring, op: allreduce, algo: ring, sizes: [1MiB], iterations: 3, recovery: shrink}
faults:
  - {workload: ring, at: 1.0, kind: gpu-crash, target: s1g1}
"""
# the other workload types, for the long sweep
CONCURRENT = """\
name: kill-concurrent
description: a multicast AllGather beside background traffic, alone and together, killed anywhere
fabric: {kind: rail-optimized, servers: 4, gpus_per_server: 1, spines: 2, nic_mbps: 10}
workloads:
  - type: concurrent
    jobs:
      - {name: gather, type: collective, op: allgather, algo: multicast, sizes: [256KiB], iterations: 2,
         placement: {servers: [0, 1]}}
      - {name: load, type: traffic, pattern: permutation, protocol: udp, size: 1MiB, load: 0.9,
         expect: {max_loss: 0.5}, placement: {servers: [2, 3]}}
"""
SITES = """\
name: kill-sites
description: Streaming DiLoCo across two sites over a delayed WAN link, killed anywhere
fabric:
  kind: clos
  gpus_per_server: 1
  spines: 1
  nic_mbps: 20
  sites: {eu: {servers: 2}, us: {servers: 2}}
  wan: [{a: eu, b: us, mbps: 5, delay_us: 10000, queue_kb: 256}]
workloads:
  - {type: diloco, variants: [streaming], steps: 8, sync_every: 4, fragments: 2, size: 64KiB, compute_s: 0.3}
"""
PROGRAM = """\
name: kill-program
description: mpirun and mpi4py ranks on the fabric, killed anywhere
fabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2, spines: 1, nic_mbps: 50}
workloads:
  - {type: program, launcher: mpirun, timeout_s: 90,
     command: "{python} hosts/programs/mpi_sweep.py --ops allreduce,allgather --sizes 4KiB,64KiB,512KiB"}
"""
TRAINING = """\
name: kill-training
description: a (2, 2, 2) training iteration, killed anywhere
fabric: {kind: rail-only, servers: 4, gpus_per_server: 2, nic_mbps: 5}
workloads:
  - {type: training_iteration, plan: {tp: 2, pp: 2, dp: 2}, micro_batches: 2, target_s: 6}
"""


def env() -> dict:
    return dict(os.environ, TESTBED_FABRIC_TAG=TAG)


def tb_cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], cwd=ROOT, env=env(), timeout=timeout,
                          capture_output=True, text=True)


# -- what a run is made of ------------------------------------------------------------------------------------
def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(pid: int) -> set[tuple[int, str]]:
    """(pid, start time) of every process under pid now: who it is, even after the PID is reused."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        st = _stat(int(entry)) if entry.isdigit() else None
        if st:
            children.setdefault(int(st[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            st = _stat(child)
            if st:
                found.add((child, st[19]))
                todo.append(child)
    return found


def alive(proc: tuple[int, str]) -> bool:
    st = _stat(proc[0])
    return bool(st) and st[19] == proc[1] and st[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"


def kill_at(scenario: str, after_s: float, out: str) -> tuple[int, set, int | None]:
    """Start `testbed run`, SIGKILL it after_s later; (its pid, every process seen under it, its exit status if
    it ended first)."""
    return kill_command(["-q", "run", scenario, "--out", out], after_s)


def kill_command(args: list[str], after_s: float) -> tuple[int, set, int | None]:
    """Start `testbed ARGS`, SIGKILL it after_s later (see kill_at)."""
    runner = subprocess.Popen([sys.executable, "-m", "testbed.cli", *args], cwd=ROOT,
                              env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen, deadline = set(), time.monotonic() + after_s
    while time.monotonic() < deadline and runner.poll() is None:
        seen |= descendants(runner.pid)
        time.sleep(0.05)
    ended = runner.poll()
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    return runner.pid, seen, ended


# -- objects of ours and of others ------------------------------------------------------------------------------
def ours_on_machine() -> dict[str, list[str]]:
    """This tag's bridges, root-namespace links, namespaces and cgroups, whoever made them."""
    mine = PREFIX + TAG
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found = {"bridges": [b for b in ovs.our_bridges() if b.startswith(mine)],
             "links": [l.split(": ")[1].split("@")[0] for l in links.splitlines()
                       if l.split(": ")[1].startswith(mine)],
             "namespaces": [n.split()[0] for n in netns.splitlines() if n.startswith(mine)],
             "cgroups": lifeline.ours(TAG),
             "containers": our_containers()}
    return {k: v for k, v in found.items() if v}


def our_containers() -> list[str]:
    """This tag's host containers (containers acting as machines are their starter's)."""
    from testbed.fabric.backends import dockerhost
    try:
        client = dockerhost.engine()
    except Exception:            # no engine: no containers
        return []
    return sorted(c.name for c in client.containers.list(all=True, filters={"label": dockerhost.LABEL})
                  if c.name.startswith(PREFIX + TAG) and f"{dockerhost.LABEL}.machine" not in c.labels)


def runs_of(pid: int) -> list[str]:
    return [d for d, st in runstate.all_runs().items() if st.get("owner_pid") == pid]


@pytest.fixture
def bystanders():
    """A namespace with a process in it, an OVS bridge and a link of other names, and a cgroup with a process of
    another fabric tag: `testbed clean` must leave all of them."""
    ns, br, link = f"xk-keep{TAG}", f"xk-keep{TAG}", f"{PREFIX}{OTHER}keep{TAG}"
    cgroup = os.path.join(lifeline.root() or "/nonexistent", f"{PREFIX}{OTHER}run-keep{TAG}")
    sleeper = other = None
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        sleeper = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "3600"], stdout=subprocess.DEVNULL)
        ovs.vsctl("--may-exist", "add-br", br)
        subprocess.run(["ip", "link", "add", link, "type", "veth", "peer", "name", link + "p"], check=True)
        if lifeline.root():
            os.makedirs(cgroup, exist_ok=True)
            other = subprocess.Popen(["sleep", "3600"], stdout=subprocess.DEVNULL)
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(other.pid))
        yield lambda: _still_there(ns, br, link, sleeper, other)
    finally:
        for proc in (sleeper, other):
            if proc:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", link], capture_output=True)
        ovs.vsctl("--if-exists", "del-br", br)
        if other:
            lifeline.kill(cgroup)


def _still_there(ns, br, link, sleeper, other) -> list[str]:
    gone = []
    if ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout:
        gone.append(f"namespace {ns}")
    if sleeper.poll() is not None:
        gone.append("the process in the namespace")
    if br not in ovs.our_bridges() and br not in ovs.vsctl("list-br").split():
        gone.append(f"bridge {br}")
    if subprocess.run(["ip", "link", "show", link], capture_output=True).returncode:
        gone.append(f"link {link}")
    if other is not None and other.poll() is not None:
        gone.append("the process in another tag's cgroup")
    return gone


# -- the check after each kill ---------------------------------------------------------------------------------
def check_after_kill(pid: int, seen: set, what: str, wait_s: float = 5) -> dict:
    """Nothing of the run survives it (after wait_s); status names what it left; clean removes exactly that.
    Returns what was left (for the record)."""
    deadline = time.monotonic() + wait_s     # the reaper's cgroup kill takes a moment
    while (any(alive(p) for p in seen) or lifeline.ours(TAG)) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [f"{p} {cmdline(p)}" for p, start in seen if alive((p, start))]
    assert not survivors, f"{what}: processes outlived the run: {survivors}"

    left = ours_on_machine()
    status = tb_cli("status", "--json")
    assert status.returncode == 0, status.stderr
    named = json.loads(status.stdout)["leftovers"]
    for run_dir in runs_of(pid):
        assert os.path.basename(run_dir) in named.get("run dirs", []), f"{what}: status misses {run_dir}: {named}"
    for kind in ("bridges", "containers"):
        for name in left.get(kind, []):
            assert name in named.get(kind, []), f"{what}: status misses {kind[:-1]} {name}: {named}"
    assert not named.get("processes"), f"{what}: processes left for clean: {named['processes']}"

    cleaned = tb_cli("clean")
    assert cleaned.returncode == 0, cleaned.stderr
    after = ours_on_machine()
    assert not after, f"{what}: clean left {after}"
    assert not glob.glob(os.path.join(RUN_ROOT, f"run-{pid}-*")), f"{what}: clean left the run directory"
    assert json.loads(tb_cli("status", "--json").stdout)["leftovers"] == {}
    return left


def kill_anywhere(tmp_path, bystanders, points: int | None, budget_s: float | None, every_type: bool = False):
    """Kill each scenario in turn at a seeded moment until `points` kills or `budget_s` seconds; returns the record.
    every_type adds concurrent jobs (multicast and traffic), sites (DiLoCo over a delayed WAN link), an MPI
    program and a training iteration."""
    rng = random.Random(SEED)
    scenarios = [("collective", COLLECTIVE, 30.0), ("churn", CHURN, 30.0)]
    if every_type:
        # horizons a little short of each run's length here, so that most kills land in the run
        scenarios += [("concurrent", CONCURRENT, 15.0), ("sites", SITES, 9.0), ("training", TRAINING, 14.0)]
        if shutil.which("mpirun"):
            scenarios.append(("program", PROGRAM, 8.0))
        else:
            print("SKIP part: no mpirun here (make setup installs Open MPI): no MPI program is killed")
    if _has_tensorflow():
        scenarios.append(("offload", OFFLOAD, 45.0))
    else:
        print("SKIP part: no TensorFlow in this venv (make setup EXTRAS=tf): offload is not killed")
    if _docker_host_image():
        scenarios.append(("docker", DOCKER, 25.0))
    files = {}
    for name, text, _ in scenarios:
        files[name] = str(tmp_path / f"{name}.yaml")
        with open(files[name], "w") as f:
            f.write(text)
    assert tb_cli("clean").returncode == 0          # this tag's leftovers of earlier tests
    t0, record = time.monotonic(), []
    while (points is None or len(record) < points) and (budget_s is None or time.monotonic() - t0 < budget_s):
        name, _, horizon = scenarios[len(record) % len(scenarios)]
        after = round(rng.uniform(0.3, horizon), 2)
        pid, seen, ended = kill_at(files[name], after, str(tmp_path / f"out-{len(record)}"))
        what = f"{name} killed at {after} s"
        assert ended in (None, 0), f"{what}: the run failed before its kill (exit {ended})"
        left = check_after_kill(pid, seen, what)
        record.append((name, after, len(seen), sorted(left), "" if ended is None else " (had ended)"))
        assert not bystanders(), f"{what}: clean removed {bystanders()}"
    print("\n".join(f"{n:<10} killed at {a:6.2f} s{e}: {s:3d} processes, left {l or 'nothing'}"
                    for n, a, s, l, e in record))
    final = tb_cli("-q", "run", files["collective"], "--out", str(tmp_path / "out-final"), timeout=300)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    return record


def _docker_host_image() -> bool:
    """Whether Docker hosts can run here; their image is built first, so that a kill finds a run, not a build."""
    from testbed.fabric.backends import dockerhost, image
    try:
        image.ensure(dockerhost.engine())
        return True
    except Exception as exc:
        print(f"SKIP part: Docker hosts cannot run here ({exc}): no run on Docker hosts is killed")
        return False


def _has_tensorflow() -> bool:
    return subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True).returncode == 0


def test_killed_runs_leave_nothing_running_and_clean_removes_the_rest(tmp_path, bystanders):
    # one kill of each kind `make test` has (collective, churn, offload, Docker hosts): the 32 of every kind are
    # `make test-long`'s
    record = kill_anywhere(tmp_path, bystanders, points=4, budget_s=None)
    assert len(record) == 4 and len({name for name, *_ in record}) >= 3, record


@pytest.mark.long
@pytest.mark.timeout(2400)          # 32 kills of runs up to 45 s long, each with its check and clean
def test_killed_at_thirty_two_points(tmp_path, bystanders):
    record = kill_anywhere(tmp_path, bystanders, points=32, budget_s=None, every_type=True)
    assert len({name for name, *_ in record}) >= 7, record


def test_up_killed_while_its_fabric_comes_up_leaves_nothing(bystanders):
    """SIGKILL `testbed up` at seeded moments of bring-up: its detached fabric process, tied to it until the
    fabric is ready, tears down what it made and exits; nothing is left for `testbed clean` but what status names.
    A kill that lands after the fabric reported ready (`up` printing, say) leaves a fabric kept up, as asked."""
    assert tb_cli("clean").returncode == 0
    topo = "rail-optimized,servers=2,gpus_per_server=2,spines=2,delay_us=200"
    t0 = time.monotonic()
    up = tb_cli("up", "--topo", topo)
    whole_s = time.monotonic() - t0
    assert up.returncode == 0, up.stderr
    assert tb_cli("down").returncode == 0
    rng, record = random.Random(SEED), []
    while len([r for r in record if not r[2]]) < 4 and len(record) < 8:
        after = round(rng.uniform(0.3, 0.9 * whole_s), 2)
        pid, seen, ended = kill_command(["up", "--topo", topo], after)
        what = f"up killed at {after} s of {whole_s:.1f}"
        assert ended in (None, 0), f"{what}: `testbed up` failed before its kill (exit {ended})"
        was_up = _kept_up(seen, what)
        if was_up:
            assert tb_cli("down").returncode == 0
        left = check_after_kill(pid, seen, what)
        record.append((after, len(seen), was_up, sorted(left)))
        assert not bystanders(), f"{what}: clean removed {bystanders()}"
    print(f"`testbed up` alone: {whole_s:.1f} s")
    print("\n".join(f"up killed at {a:5.2f} s{' (was up)' if e else ''}: {n:3d} processes, left {l or 'nothing'}"
                    for a, n, e, l in record))
    assert len([r for r in record if not r[2]]) >= 4, record


def _kept_up(seen: set, what: str, settle_s: float = 8.0, wait_s: float = 60.0) -> bool:
    """Whether the fabric process of a killed `up` kept its fabric (it had reported ready) rather than tearing
    down: it is still there, its fabric live, settle_s after the kill. It must not hang in bring-up."""
    fabricd = [p for p in seen if alive(p) and "up --foreground" in cmdline(p[0])]
    if not fabricd:             # killed before it started it, or it has torn down already
        return False
    t0 = time.monotonic()
    while alive(fabricd[0]) and time.monotonic() - t0 < wait_s:
        if time.monotonic() - t0 > settle_s and "live" in runstate.live_fabrics().get(TAG, ("", {}))[1]:
            return True
        time.sleep(0.1)
    assert not alive(fabricd[0]), f"{what}: the fabric process neither came up nor went in {wait_s:.0f} s"
    return False


def test_a_fabric_kept_up_dies_with_its_daemon_only(tmp_path):
    """`testbed up` returns and its fabric stays; a SIGKILL of the daemon that owns it takes its processes down."""
    assert tb_cli("clean").returncode == 0
    up = tb_cli("up", "--topo", "rail-only,servers=2,gpus_per_server=2")
    assert up.returncode == 0, up.stderr
    live = runstate.live_fabrics()[TAG]
    owner, cgroup = live[1]["owner_pid"], live[1]["cgroup"]
    members = lifeline.processes(cgroup)
    assert owner in members and len(members) > 4          # the daemon, its controller and the hosts' shells
    os.kill(owner, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while os.path.isdir(cgroup) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.isdir(cgroup)
    assert not [p for p in members if _stat(p) and _stat(p)[0] != "Z"]
    assert tb_cli("clean").returncode == 0
    assert not ours_on_machine()
