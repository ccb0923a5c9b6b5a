"""The live-fabric verbs without a fabric (no root): arguments, one-line errors, the console's commands and the
fabric process's report and teardown, against a state file written here."""
import io
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from testbed import clean
from testbed.cli import fabricd, live, main, up
from testbed.cli.console import Console, link_target
from testbed.cli.errors import UsageError
from testbed.fabric import runstate, topo
from tests.paths import ROOT

PARAMS = {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 1}
HOSTS = ["s0g0", "s0g1", "s1g0", "s1g1"]


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    """runstate and the live verbs look under tmp_path instead of the machine's run root."""
    for module in (runstate, clean, up):
        monkeypatch.setattr(module, "RUN_ROOT", str(tmp_path))
    return tmp_path


def write_state(root, owner_pid, **extra):
    run_dir = root / f"run-{owner_pid}-1"
    run_dir.mkdir()
    state = {"owner_pid": owner_pid, "fabric": PARAMS, "hosts": "netns",
             "host_pids": {h: 1000 + i for i, h in enumerate(HOSTS)}, **extra}
    (run_dir / runstate.STATE_FILE).write_text(json.dumps(state))
    return str(run_dir)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("args,message", [
    (["up"], "give a scenario file or --topo"),
    (["up", "x.yaml", "--topo", "clos"], "give a scenario file or --topo"),
    (["up", "--topo", "ring,servers=2"], "'ring' is not one of"),
    (["up", "--topo", "clos,servers=0"], "fabric.servers: 0 is less than the minimum"),
    (["up", "--topo", "clos,racks=2"], "'racks=2': expected KEY=VALUE with KEY one of servers, gpus"),
    (["up", "--topo", "clos,servers"], "'servers': expected KEY=VALUE"),
    (["up", "--topo", "clos,servers=two"], "fabric.servers: 'two' is not of type 'integer'"),
    (["up", "--topo", "clos", "--set", "fabric.servers=2"], "--set overrides a scenario's values"),
    (["up", "--topo", "clos", "--routing", "zigzag"], "'zigzag' is not a routing mode"),
    (["up", "--topo", "rail-only,servers=2,gpus=100"], "gpus_per_server must be between"),
    (["up", "scenarios/smoke.yaml", "--set", "machines=[{name: m1, address: 10.0.0.1}]"],
     "a live fabric runs on this machine only"),
    (["exec", "s0g0"], "give the command to run"),
    (["exec", "s0g0", "--"], "give the command to run"),
])
def test_bad_arguments_are_one_line_errors(args, message):
    p = subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_topo_spec_becomes_a_scenario_fabric():
    doc = up.topo_doc("rail-optimized, servers=2, gpus=4, spines=1, nic-mbps=10")
    assert doc["fabric"] == {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 4, "spines": 1,
                             "nic_mbps": 10}


def test_verbs_without_a_fabric(run_root, capsys):
    for argv in (["exec", "s0g0", "--", "true"], ["shell", "s0g0"], ["cli"], ["down"]):
        assert "no fabric is up on this machine" in one_line_error(capsys, argv)
    assert main(["status"]) == 0
    assert "no fabric is up" in capsys.readouterr().out


def test_second_up_is_refused(run_root, capsys, monkeypatch):
    monkeypatch.setattr(up, "_spawn", lambda argv: pytest.fail("a second fabric was started"))
    write_state(run_root, os.getpid(), live={"since": 0, "source": "--topo clos"})
    err = one_line_error(capsys, ["up", "--topo", "clos,servers=2,gpus=2"])
    assert f"a fabric is already up (pid {os.getpid()}" in err and "`testbed down` first" in err


def test_bad_host_names_list_the_hosts(run_root, capsys):
    write_state(run_root, os.getpid())
    err = one_line_error(capsys, ["exec", "s9g9", "--", "true"])
    assert "'s9g9' is no host of this fabric; hosts: s0g0, s0g1, s1g0, s1g1" in err
    assert "'rail0' is a switch; hosts: s0g0" in one_line_error(capsys, ["shell", "rail0"])


def test_down_refuses_a_run_and_points_at_clean_after_a_crash(run_root, capsys):
    write_state(run_root, os.getpid())           # a `testbed run` has it: no `live` entry
    assert "belongs to a `testbed run`" in one_line_error(capsys, ["down"])
    for d in run_root.iterdir():
        (d / runstate.STATE_FILE).unlink()
    write_state(run_root, dead_pid(), live={"since": 0, "source": "x"})
    assert "gone without tearing down; `testbed clean` removes what it left" in one_line_error(capsys, ["down"])


def test_status_describes_the_fabric(run_root, capsys):
    write_state(run_root, os.getpid(), live={"since": 1.0, "source": "--topo rail-optimized", "routing": "ecmp"})
    assert main(["status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["up"] and report["by"] == "testbed up" and report["routing"] == "ecmp"
    assert [h["name"] for h in report["hosts"]] == HOSTS and report["hosts"][2]["ip"] == "10.11.1.1"
    assert len(report["links"]) == 10 and {l["kind"] for l in report["links"]} == {"nic", "uplink", "hb"}
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "from --topo rail-optimized" in out and "links (10," in out and "s1g1:eth0" in out


def test_status_names_the_fabrics_up_under_other_tags(run_root, capsys, monkeypatch):
    write_state(run_root, os.getpid(), live={"since": 1.0, "source": "--topo rail-optimized", "routing": "ecmp"})
    beside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])    # another live run
    try:
        write_state(run_root, beside.pid, tag="b", fabric={**PARAMS, "kind": "rail-only"})
        monkeypatch.delenv("TESTBED_FABRIC_TAG", raising=False)
        assert main(["status", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["pid"] == os.getpid()
        assert report["other_tags"] == [{"tag": "b", "pid": beside.pid, "kind": "rail-only"}]
        monkeypatch.setenv("TESTBED_FABRIC_TAG", "b")
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        assert f"testbed run pid {beside.pid}" in out
        assert f"also up under fabric tag (none): rail-optimized, pid {os.getpid()}" in out
        monkeypatch.setenv("TESTBED_FABRIC_TAG", "c")
        assert main(["status", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert not report["up"] and [o["tag"] for o in report["other_tags"]] == ["", "b"]
    finally:
        beside.kill()
        beside.wait()


@pytest.fixture
def console(run_root):
    write_state(run_root, os.getpid(), live={"since": 0, "source": "x", "routing": "ecmp"})
    out = io.StringIO()
    return Console(live.attach(), stdin=io.StringIO(), stdout=out), out


def test_link_targets_name_the_fault_target():
    fab = topo.build("rail-optimized", 2, 2, spines=1)
    assert link_target(fab, "s1g0", "rail0") == "s1g0/nic"
    assert link_target(fab, "hb0", "s0g1") == "s0g1/hb"
    assert link_target(fab, "spine0", "rail1") == "spine0-rail1"
    with pytest.raises(UsageError, match="no node 'x'; hosts: s0g0, s0g1, s1g0, s1g1; switches: rail0"):
        link_target(fab, "x", "rail0")
    with pytest.raises(UsageError, match="no cable between rail0 and s1g1; rail0 is cabled to s0g0, s1g0, spine0"):
        link_target(fab, "rail0", "s1g1")


@pytest.mark.parametrize("line,message", [
    ("iperf s0g0", "error: usage: iperf CLIENT SERVER [SECONDS]"),
    ("iperf s0g0 s1g1 forever", "error: SECONDS: 'forever' is not a number"),
    ("iperf s0g0 nowhere", "error: 'nowhere' is no host of this fabric; hosts: s0g0"),
    ("link s0g0 rail0 sideways", "error: usage: link A B down|up"),
    ("link s0g0 rail1 down", "error: no cable between s0g0 and rail1"),
    ("exec s7g7 ls", "error: 's7g7' is no host of this fabric"),
    ("exec s0g0", "error: usage: exec HOST COMMAND"),
    ("frobnicate now", "unknown command 'frobnicate'; commands: dump, exec, exit, help, hosts, iperf, link, links"),
])
def test_console_errors_keep_the_console(console, line, message):
    con, out = console
    assert con.onecmd(line) is False
    assert message in out.getvalue()


def test_console_listing_and_completion(console):
    con, out = console
    con.onecmd("hosts")
    con.onecmd("dump")
    text = out.getvalue()
    assert "s1g1         gpu    eth0 10.11.1.2  eth1 10.12.1.2" in text
    assert "<OVSSwitch spine0 (tb-spine0): 2 ports dpid=" in text and "<LinuxBridge hb1 (tb-hb1): 2 ports>" in text
    assert con.complete_link("s1", "link s1", 5, 7) == ["s1g0", "s1g1"]
    assert con.complete_link("d", "link s1g0 rail0 d", 16, 17) == ["down"]
    assert con.complete_iperf("r", "iperf r", 6, 7) == []
    assert "pingall" in con.completenames("pi") and "s0g1" in con.completenames("s0")
    assert con.onecmd("exit") is True


class FakeNetwork:
    """What the fabric process asks of a Network."""
    fail = None

    def __init__(self, fabric, routing, failover, hosts, host_limits, run_dir, controller_delay_ms=0):
        self.routing, self.failover, self.run_dir = routing, failover, run_dir
        self.rdma, self.timings, self.calls = {"transport": "uroce"}, {"bring_up_s": 0.25}, []

    def start(self):
        self.calls.append("start")
        if self.fail:
            raise RuntimeError(self.fail)

    def stop(self):
        self.calls.append("stop")


@pytest.mark.parametrize("fail", [None, "OVS went away"])
def test_fabric_process_reports_and_tears_down(run_root, monkeypatch, fail):
    made = []

    def network(fabric, **kw):
        made.append(FakeNetwork(fabric, run_dir=str(run_root / "run-1-1"), **kw))
        made[-1].fail = fail
        os.makedirs(made[-1].run_dir, exist_ok=True)
        return made[-1]
    monkeypatch.setattr("testbed.fabric.network.Network", network)
    handlers = {s: signal.getsignal(s) for s in fabricd.STOP_SIGNALS}
    read_end, write_end = os.pipe()
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        status = fabricd.serve(up.topo_doc("rail-optimized,servers=1,gpus=2"), "--topo x", write_end)
    finally:
        timer.cancel()
        for s, h in handlers.items():
            signal.signal(s, h)
    with os.fdopen(read_end) as pipe:
        report = json.loads(pipe.readline())
    assert made[0].calls == ["start", "stop"]
    if fail:
        assert status == 1 and report == {"ok": False, "error": "RuntimeError: OVS went away"}
    else:
        assert status == 0 and report["ok"] and report["pid"] == os.getpid() and report["bring_up_s"] == 0.25
        assert runstate.load(made[0].run_dir)["live"]["source"] == "--topo x"


def test_up_reports_a_fabric_process_that_died(run_root):
    with pytest.raises(up.FabricFailed, match="exited with status 3: no OVS here"):
        up._spawn([sys.executable, "-c", "import sys; print('no OVS here'); sys.exit(3)"])
    reply = "import os, sys; os.write(int(sys.argv[-1]), b'{\"ok\": true, \"pid\": 7, \"bring_up_s\": 1.5}\\n')"
    ok = up._spawn([sys.executable, "-c", reply])
    assert ok == {"ok": True, "pid": 7, "bring_up_s": 1.5}


def test_hosts_are_entered_the_backends_way(run_root):
    write_state(run_root, os.getpid())
    fab = live.attach()
    assert fab.enter("s1g0", ["ip", "addr"]) == ["nsenter", "--target", "1002", "--net", "--",
                                                 "env", f"TMPDIR={fab.run_dir}/tmp/s1g0", "ip", "addr"]
    for d in run_root.iterdir():
        state = json.loads((d / runstate.STATE_FILE).read_text())
        (d / runstate.STATE_FILE).write_text(json.dumps({**state, "hosts": "docker"}))
    fab = live.attach()
    assert fab.enter("s1g0", ["sh"], tty=True) == ["docker", "exec", "-i", "-t", "tb-s1g0", "sh"]
    assert fab.enter("s1g0", ["ping"], netns=True) == ["nsenter", "--target", "1002", "--net", "--", "ping"]


def test_fabric_process_whose_up_is_gone_makes_nothing(run_root, monkeypatch):
    """`testbed up` died before its fabric process armed the parent-death signal: nothing is brought up."""
    made = []

    def network(fabric, **kw):
        made.append(FakeNetwork(fabric, run_dir=str(run_root / "run-1-1"), **kw))
        return made[-1]
    monkeypatch.setattr("testbed.fabric.network.Network", network)
    handlers = {s: signal.getsignal(s) for s in fabricd.STOP_SIGNALS}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        status = fabricd.serve(up.topo_doc("rail-optimized,servers=1,gpus=2"), "--topo x", write_end)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert status == 0 and made[0].calls == ["stop"]
