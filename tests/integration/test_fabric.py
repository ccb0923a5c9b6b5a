"""Integration (root): real fabrics on Open vSwitch with the controller, real packets, real counters."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from testbed import RUN_ROOT
from testbed.fabric import runstate
from testbed.fabric.links import fabric_tag, sysname
from testbed.fabric.network import Network
from testbed.fabric.kinds import NAMES as KINDS
from testbed.fabric.topo import build
from testbed.workloads import connectivity, traffic

pytestmark = pytest.mark.root
from tests.paths import ROOT

FABRIC_OBJECT = re.compile(rf"^tb-{fabric_tag()}(rail|spine|tor|hb|fe)\d")     # this tag's (a worker's, two at a time)


def busy_bridges() -> set[str]:
    """Bridges of runs that other live processes have in progress (not ours to judge)."""
    return {br for st in runstate.all_runs().values()
            if st.get("owner_pid") != os.getpid() and runstate.alive(st) for br in st.get("bridges", [])}


def leftovers() -> list[str]:
    """Fabric bridges, root-namespace links and recorded processes still on the machine."""
    found = []
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    found += [f"bridge {b}" for b in bridges if FABRIC_OBJECT.match(b) and b not in busy_bridges()]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {m}" for m in re.findall(r"^\d+: ([^:@]+)", links, re.M)
              if FABRIC_OBJECT.match(m) and m.split("-p")[0] not in busy_bridges()]
    if os.path.isdir(RUN_ROOT):
        for run in os.listdir(RUN_ROOT):
            state = os.path.join(RUN_ROOT, run, "state.json")
            if os.path.exists(state):
                with open(state) as f:
                    s = json.load(f)
                owner = s.get("owner_pid")
                if owner != os.getpid() and owner and os.path.exists(f"/proc/{owner}"):
                    continue          # another process's run, still in progress
                pids = [s.get("controller_pid")] + list(s.get("host_pids", {}).values())
                found += [f"process {p} of {run}" for p in pids if p and os.path.exists(f"/proc/{p}")]
                found.append(f"state file of {run}")
    return found


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    assert leftovers() == []


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=kw.get("timeout", 300))


@pytest.mark.parametrize("kind", KINDS)
def test_bring_up_and_connectivity(kind):
    fabric = build(kind, 2, 2, spines=2, cpu_hosts=1)
    with Network(fabric, routing="ecmp") as net:
        result = connectivity.run(net, {})
        assert result["ok"], result["checks"]
        assert result["expected_reachable"] > 0
        if kind == "rail-only":
            assert result["expected_reachable"] < result["pairs"]   # isolated pairs exist and stayed so
        counters = net.counters()
        assert set(counters) >= {f"{s.name}:1" for s in fabric.sdn_switches()}
        assert sum(c["rx_bytes"] for c in counters.values()) > 0


@pytest.mark.parametrize("mode,uplinks", [("single", 2), ("ecmp", 4)])
def test_single_keeps_a_pair_on_one_path_ecmp_spreads_it(mode, uplinks):
    """16 UDP flows of one source-destination pair that differ only in source port."""
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=20)
    with Network(fabric, routing=mode) as net:
        result = traffic.run(net, {"pattern": "pairs", "pairs": [["s0g0", "s1g1"]], "flows_per_pair": 16,
                                   "size": "64KiB", "protocol": "udp"})
    assert result["ok"], result["checks"]
    carried = {k: v for k, v in result["uplink_bytes"].items() if v > 0}
    # the pair's path is up rail0->spine and down spine->rail1: 2 links for one path, 4 for both spines
    assert len(carried) == uplinks, result["uplink_bytes"]
    assert sum(result["uplink_bytes"].values()) >= 2 * 16 * 64 * 1024


def test_run_scenario_writes_results_and_passes(tmp_path):
    out = str(tmp_path / "test-results-smoke")
    p = run_cli("run", "scenarios/smoke.yaml", "--out", out)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(os.path.join(out, "results.json")) as f:
        r = json.load(f)
    assert r["ok"] and all(c["ok"] for c in r["checks"])
    assert {k: r["fabric"][k] for k in ("kind", "servers", "gpus_per_server", "switches", "hosts", "links")} == \
        {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 4, "switches": 8, "hosts": 8, "links": 24}
    assert [w["type"] for w in r["workloads"]] == ["connectivity", "traffic", "traffic"]
    assert all(w["ok"] for w in r["workloads"])
    # counters accumulated over the run: the traffic crossed the spines
    spine_tx = sum(v["tx_bytes"] for k, v in r["links"].items() if k.startswith("spine"))
    assert spine_tx >= 2 * 8 * 512 * 1024
    assert "PASS" in p.stdout and "results.json" in p.stdout
    # the report: summary.md and a non-empty PNG of switch throughput over time
    with open(os.path.join(out, "summary.md")) as f:
        assert "# smoke" in f.read()
    png = os.path.join(out, "plots", "utilisation.png")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 5000


def test_run_fails_when_a_check_fails(tmp_path):
    out = str(tmp_path / "test-results-spread")
    p = run_cli("run", "scenarios/ecmp_spread.yaml", "--out", out, "--set", "routing.mode=single",
                "--set", "fabric.servers=2", "--set", "workloads.0.flows_per_pair=2")
    assert p.returncode == 1, p.stdout + p.stderr
    with open(os.path.join(out, "results.json")) as f:
        r = json.load(f)
    failed = [c["name"] for c in r["checks"] if not c["ok"]]
    assert failed == ["ecmp-udp: uplinks-all-used"]


def test_ctrl_c_tears_down(tmp_path):
    # SIGINT as a terminal gives it, even when the suite itself was started in the background (which
    # ignores SIGINT, and its children inherit that)
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", "scenarios/smoke.yaml",
                             "--out", str(tmp_path / "test-results-int")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stdout:
        if re.search(r"\[\d+/\d+\] ", line):          # the progress line of the first workload: "[00:03] [1/3] ..."
            break
    else:
        pytest.fail("the run printed no workload's progress line before it ended")
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted" in out + err


@pytest.mark.alone          # testbed clean also removes namespaces that other tests have not recorded
def test_clean_removes_what_a_killed_run_left():
    script = ("from testbed.fabric.topo import build; from testbed.fabric.network import Network; import os, signal\n"
              "net = Network(build('rail-only', 2, 2)); net.start()\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=120)
    assert leftovers() != []
    p = run_cli("clean")
    assert p.returncode == 0, p.stderr
    assert "removed:" in p.stdout


def test_a_second_fabric_is_refused_or_queued(monkeypatch):
    """The fabric lock: held by another process, a new run is refused with a clear error, or waits
    TESTBED_WAIT_FOR_FABRIC seconds for it; once the holder is gone the next run starts."""
    from testbed.fabric.network import NetworkError
    holder = subprocess.Popen([sys.executable, "-c",
                               "import fcntl, os, sys, time\n"
                               f"fd = os.open({runstate.lock_path()!r}, os.O_CREAT | os.O_RDWR)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("TESTBED_WAIT_FOR_FABRIC", "0")        # whatever the suite was started with
        with pytest.raises(NetworkError, match="another testbed run"):
            Network(build("rail-only", 2, 2)).start()
        monkeypatch.setenv("TESTBED_WAIT_FOR_FABRIC", "1")
        t0 = time.monotonic()
        with pytest.raises(NetworkError, match="TESTBED_WAIT_FOR_FABRIC"):
            Network(build("rail-only", 2, 2)).start()
        assert time.monotonic() - t0 >= 1.0
    finally:
        holder.kill()
        holder.wait()
    monkeypatch.setenv("TESTBED_WAIT_FOR_FABRIC", "30")
    with Network(build("rail-only", 2, 2)) as net:
        assert connectivity.run(net, {})["ok"]


def test_two_fabrics_under_different_tags_run_side_by_side():
    """A fabric tag gives a run its own lock and names: a second fabric comes up beside a running one, both
    carry traffic, and tearing one down leaves the other whole and nothing of its own."""
    other = "y" if fabric_tag() != "y" else "x"
    script = ("import sys\n"
              "from testbed.fabric.network import Network\nfrom testbed.fabric.topo import build\n"
              "from testbed.workloads import connectivity\n"
              "with Network(build('rail-optimized', 2, 2, spines=1)) as net:\n"
              "    print('up', flush=True)\n"
              "    sys.stdin.readline()\n"
              "    print('ok' if connectivity.run(net, {})['ok'] else 'failed', flush=True)\n")
    with Network(build("rail-only", 2, 2)) as net:
        beside = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, text=True,
                                  env=dict(os.environ, TESTBED_FABRIC_TAG=other),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = beside.stdout.readline()
            assert line.strip() == "up", line + beside.stderr.read()
            bridges = set(subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split())
            assert {sysname("rail0"), f"tb-{other}rail0", f"tb-{other}spine0"} <= bridges, bridges
            assert connectivity.run(net, {})["ok"]
            out, err = beside.communicate("\n", timeout=120)
            assert beside.returncode == 0 and out.split()[-1] == "ok", out + err
        finally:
            if beside.poll() is None:
                beside.kill()
                beside.wait()
        assert connectivity.run(net, {})["ok"]         # the other's tear-down left this fabric whole
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not [b for b in bridges if b.startswith(f"tb-{other}")]
    assert f" tb-{other}" not in links
