"""`testbed clean`: remove what runs of the testbed left behind, and nothing else.

Runs still in progress (their own process alive) keep their bridges, links and processes.

Only objects carrying the testbed prefix, processes recorded by PID in a run's state file (and
still looking like what was recorded), and processes in a run's cgroup (fabric/lifeline.py) are touched.
With TESTBED_FABRIC_TAG set, only that tag's runs and names: another tag's fabric is another user's. Never name patterns of other tools. Docker
containers are ours when they carry the testbed's label and name prefix; images are kept (a cache).
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import time

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkDumpInterrupted

from testbed import PREFIX, RUN_ROOT
from testbed.fabric import lifeline, ovs, runstate
from testbed.fabric.links import fabric_tag, node_of


def mine(name: str) -> bool:
    """Whether a bridge, link, namespace or container name is of this fabric tag (any tag if none is set)."""
    return name.startswith(PREFIX + fabric_tag())


def runs() -> tuple[dict[str, dict], set[str]]:
    """(run directory -> state, the run directories still in progress) of this fabric tag's runs."""
    tag = fabric_tag()
    states = {d: st for d, st in runstate.all_runs().items() if not tag or st.get("tag", "") == tag}
    return states, {d for d, st in states.items() if runstate.alive(st)}


def stale_cgroups(states: dict[str, dict], live: set[str]) -> list[str]:
    """The cgroups of runs whose owner is gone, and of runs that left no state (killed as they began)."""
    in_use = {states[d].get("cgroup") for d in live}
    return [cg for cg in lifeline.ours(fabric_tag()) if cg not in in_use]


def left_run_dirs(states: dict[str, dict], live: set[str]) -> list[str]:
    """Run directories of runs that are gone: of this tag, or without a state yet (killed as they began: the
    PID in their name is gone)."""
    found = []
    for run_dir in glob.glob(os.path.join(RUN_ROOT, "run-*")):
        pid = os.path.basename(run_dir).split("-")[1]
        stateless = not runstate.load(run_dir) and not os.path.exists(f"/proc/{pid}")
        if run_dir not in live and (run_dir in states or stateless or not fabric_tag()):
            found.append(run_dir)
    return found


def left_processes(states: dict[str, dict], live: set[str]) -> list[int]:
    """The PIDs `clean` would kill: recorded by runs that are gone (and still what was recorded), or in their
    cgroups."""
    dead = {d: st for d, st in states.items() if d not in live}
    pids = {pid for pid, marker in stale_processes(dead) if pid and marker in _cmdline(pid)}
    for cgroup in stale_cgroups(states, live):
        pids.update(lifeline.processes(cgroup))
    return sorted(pids)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _kill(pid: int, must_contain: str) -> bool:
    """SIGKILL pid if it is alive and its command line still shows what we started."""
    if pid and must_contain in _cmdline(pid):
        try:
            os.kill(pid, signal.SIGKILL)
            return True
        except ProcessLookupError:
            pass
    return False


def stale_processes(states: dict[str, dict]) -> list[tuple[int, str]]:
    """(pid, marker) of processes recorded by runs whose owner is gone."""
    found = []
    for state in states.values():
        if "controller_pid" in state:
            found.append((state["controller_pid"], "controllers.run"))
        for pid in state.get("tunnel_pids", []):         # the controller's tunnels to machines
            found.append((pid, "127.0.0.1:"))
        for name, pid in {**state.get("host_pids", {}), **state.get("switch_pids", {})}.items():
            found.append((pid, f"mininet:{name}"))
        for pid in state.get("delay_pids", []):          # the links' delay process (fabric/delay.py)
            found.append((pid, "testbed.fabric.delayd"))
        for pid in state.get("pfc_pids", []):            # the pause process (fabric/pfc.py)
            found.append((pid, "testbed.fabric.pfcd"))
    return found


def _links(ipr: IPRoute, attempts: int = 10) -> list:
    """Every link of the root namespace; a dump that other fabrics' link changes interrupt is taken again."""
    for _ in range(attempts - 1):
        try:
            return list(ipr.get_links())
        except NetlinkDumpInterrupted:
            time.sleep(0.05)
    return list(ipr.get_links())


def left_containers(live: set[str]) -> list:
    """The testbed's containers of this tag (label and name prefix) whose run is not in progress; containers
    acting as machines are their starter's to stop."""
    try:
        from testbed.fabric.backends import dockerhost
        client = dockerhost.engine()
    except Exception:          # no Docker engine (or no SDK): no containers of ours can be running
        return []
    return [c for c in client.containers.list(all=True, filters={"label": dockerhost.LABEL})
            if mine(c.name) and c.labels.get(f"{dockerhost.LABEL}.run") not in live
            and f"{dockerhost.LABEL}.machine" not in c.labels]


def stale_containers(live: set[str], echo=print) -> int:
    """Remove the containers left_containers finds."""
    removed = 0
    for c in left_containers(live):
        try:
            c.remove(force=True)
            removed += 1
        except Exception as exc:
            echo(f"clean: container {c.name}: {exc}")
    return removed


def _on_machines(state: dict):
    """(machine, its nodes' shell PIDs) for each machine a run was spread over."""
    from testbed.fabric import machines
    placement, tag = state.get("placement", {}), state.get("tag", "")
    pids = {**state.get("host_pids", {}), **state.get("switch_pids", {})}
    for entry in state["machines"]:
        machine = machines.Machine.from_json(entry)
        yield machine, {n: pid for n, pid in pids.items() if placement.get(node_of(n, tag)) == machine.name}


def clean_machines(state: dict, echo=print, close: bool = True) -> int:
    """What a run spread over machines left on them; a machine that cannot be reached is named. close: end the
    tag's shared ssh connection to each machine too (not while a run of the tag may use it)."""
    from testbed.fabric import machines
    gone = 0
    for machine, nodes in _on_machines(state):
        try:
            gone += machines.clean(machine, nodes, state.get("bridges", []), PREFIX + state.get("tag", ""))
            if close:           # a run killed where it could not be tied (no cgroup v2) left its connection
                machine.close()
        except (machines.MachineError, subprocess.TimeoutExpired) as exc:
            echo(f"clean: machine {machine.name}: {exc}")
    return gone


def left_on_machines(states: dict[str, dict], live: set[str]) -> list[str]:
    """What clean_machines would remove from the machines of runs no longer alive, as MACHINE:OBJECT (read only);
    a machine that cannot be reached is named as MACHINE:unreachable."""
    from testbed.fabric import machines
    found = []
    for run_dir, state in states.items():
        if run_dir in live or not state.get("machines"):
            continue
        for machine, nodes in _on_machines(state):
            try:
                found += [f"{machine.name}:{obj}" for obj in
                          machines.left(machine, nodes, state.get("bridges", []), PREFIX + state.get("tag", ""))]
            except (machines.MachineError, subprocess.TimeoutExpired):
                found.append(f"{machine.name}:unreachable")
    return found


def clean(echo=print) -> dict:
    """Remove what finished or crashed runs left; objects of runs still in progress are kept."""
    removed = {"processes": 0, "bridges": 0, "links": 0, "netns": 0, "containers": 0, "run_dirs": 0}
    states, live = runs()
    in_use = {br for d in live for br in states[d].get("bridges", []) + states[d].get("delay_devices", [])}
    for pid, marker in stale_processes({d: st for d, st in states.items() if d not in live}):
        removed["processes"] += _kill(pid, marker)
    for cgroup in stale_cgroups(states, live):
        removed["processes"] += lifeline.kill(cgroup)
    removed["containers"] = stale_containers(live, echo)

    for br in ovs.our_bridges():
        if br in in_use or not mine(br):
            continue
        try:
            ovs.vsctl("--if-exists", "del-br", br)
            removed["bridges"] += 1
        except ovs.OVSError as exc:
            echo(f"clean: {exc}")

    # Linux bridges (HB domains) and veth ends left in the root namespace.
    with IPRoute() as ipr:
        for link in _links(ipr):
            name = link.get_attr("IFLA_IFNAME")
            if name and mine(name) and name.split("-p")[0] not in in_use \
                    and name not in in_use:
                try:
                    ipr.link("del", index=link["index"])
                    removed["links"] += 1
                except Exception:  # already gone with its peer
                    pass

    # Named namespaces of the testbed (tests create some): kill what runs inside, then delete.
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in (line.split()[0] for line in listing.splitlines() if line.strip()):
        if not mine(ns):
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
                removed["processes"] += 1
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        removed["netns"] += 1

    # Runs spread over machines: what they left on each machine.
    for run_dir, state in states.items():
        if run_dir not in live and state.get("machines"):
            removed["machines"] = removed.get("machines", 0) + clean_machines(state, echo, close=not live)

    for run_dir in left_run_dirs(states, live):
        shutil.rmtree(run_dir, ignore_errors=True)
        removed["run_dirs"] += 1
    return removed
