"""Integration (root): a fabric kept up by `testbed up`, used from other processes (status, exec, the console
through a terminal) and taken down by `testbed down`, leaving nothing of its own behind."""
import json
import os
import re
import select
import subprocess
import sys
import time

import pytest

from testbed.fabric import runstate
from tests.paths import ROOT

pytestmark = [pytest.mark.root, pytest.mark.alone, pytest.mark.timeout(1500)]     # machine-wide leftovers

TOPO = "rail-optimized,servers=2,gpus=2,spines=1,nic_mbps=5"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def cli(*args, timeout=120, env=None):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


class Terminal:
    """A program on a pseudo-terminal, read until what is expected appears (pexpect's idea, in a few lines)."""

    def __init__(self, argv, env):
        master, slave = os.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.fd, self.seen = master, ""

    def expect(self, pattern: str, timeout: float = 30) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.seen)
            if match:
                self.seen = self.seen[match.end():]
                return match
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in {self.seen[-2000:]!r}"
            if select.select([self.fd], [], [], min(left, 0.5))[0]:
                try:
                    self.seen += ANSI.sub("", os.read(self.fd, 65536).decode(errors="replace"))
                except OSError:         # the program closed the terminal
                    assert False, f"terminal closed before {pattern!r}: {self.seen[-2000:]!r}"

    def command(self, line: str, timeout: float = 30) -> str:
        """Send a line; the output up to the next prompt."""
        os.write(self.fd, line.encode() + b"\n")
        return self.expect(r"([\s\S]*?)testbed> ", timeout).group(1)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        os.close(self.fd)


def test_up_status_exec_console_down(tmp_path):
    env = {**os.environ, "TESTBED_WAIT_FOR_FABRIC": os.environ.get("TESTBED_WAIT_FOR_FABRIC", "1200"),
           "HOME": str(tmp_path)}          # the console's history file goes here
    t0 = time.monotonic()
    up = cli("up", "--topo", TOPO, timeout=1300, env=env)
    assert up.returncode == 0, up.stderr
    print(f"\n{up.stdout.splitlines()[0]} (measured {time.monotonic() - t0:.1f} s, queueing included)")
    try:
        run_dir, state = _check_status_and_exec(env)
        _drive_console(env, tmp_path)
    finally:
        t1 = time.monotonic()
        down = cli("down", env=env)
    print(f"down in {time.monotonic() - t1:.1f} s")
    assert down.returncode == 0 and "fabric down in" in down.stdout, down.stderr
    _check_nothing_left(run_dir, state)


def _check_status_and_exec(env) -> dict:
    status = cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["up"] and report["by"] == "testbed up" and report["source"] == f"--topo {TOPO}"
    assert [h["name"] for h in report["hosts"]] == ["s0g0", "s0g1", "s1g0", "s1g1"]
    assert len(report["links"]) == 10 and all(l["state"] == "up" for l in report["links"]), report["links"]
    again = cli("up", "--topo", TOPO, env=env)
    assert again.returncode == 2 and "a fabric is already up" in again.stderr
    ping = cli("exec", "s0g0", "--", "ping", "-c1", "-W2", "10.11.1.2", env=env)       # s1g1, across the spine
    assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout + ping.stderr
    assert cli("exec", "s0g0", "--", "sh", "-c", "exit 7", env=env).returncode == 7
    tmp = cli("exec", "s1g0", "--", "sh", "-c", 'touch "$TMPDIR/x" && echo "$TMPDIR"', env=env)
    assert tmp.returncode == 0 and tmp.stdout.strip().endswith("/tmp/s1g0"), tmp.stdout + tmp.stderr   # the host's own
    bad = cli("exec", "s5g0", "--", "true", env=env)
    assert bad.returncode == 2 and "hosts: s0g0, s0g1, s1g0, s1g1" in bad.stderr
    return runstate.live_fabric()


def _drive_console(env, home):
    term = Terminal([sys.executable, "-m", "testbed.cli", "cli"], env)
    try:
        term.expect("testbed> ")
        assert "*** Results: 0% dropped (12/12 received)" in term.command("pingall", 60)
        assert "s1g0 - rail0: down (1 link)" in term.command("link s1g0 rail0 down")
        for _ in range(20):            # as the switch sees it: its port loses carrier
            links = term.command("links")
            if re.search(r"s1g0:eth0\s+rail0:2\s+nic\s+5 Mb/s\s+down", links):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the cut link is not down in `links`:\n{links}")
        assert "100% packet loss" in term.command("s0g0 ping -c1 -W1 s1g0")
        assert "s1g0 - rail0: up (1 link)" in term.command("link s1g0 rail0 up")
        for _ in range(20):            # the controller reinstates the route when the port comes back
            if " 0% packet loss" in term.command("s0g0 ping -c1 -W1 s1g0"):
                break
        else:
            pytest.fail("s0g0 cannot reach s1g0 after its link came back up")
        got = float(re.search(r"([\d.]+) Mbit/s received", term.command("iperf s0g0 s1g1 2", 60)).group(1))
        assert 1 < got <= 5 * 1.2, got           # a 5 Mb/s NIC carries it
        assert "eth0 10.11.1.2" in term.command("hos\t")        # completed to `hosts`
        os.write(term.fd, b"exit\n")
        assert term.proc.wait(timeout=30) == 0
    finally:
        term.close()
    with open(home / ".testbed_history") as f:
        assert "pingall" in f.read().split()


def _check_nothing_left(run_dir: str, state: dict):
    """Nothing of this fabric: its state, processes (the hosts' namespaces with them), bridges and
    links (another run may have the machine's fabric, with the same switch names, by now)."""
    assert not os.path.exists(run_dir)
    pids = [state["owner_pid"], state["controller_pid"], *state["host_pids"].values()]
    assert not [(pid, _cmdline(pid)) for pid in pids if _running(pid)]
    bridges = set(subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split())
    links = re.findall(r"^\d+: ([^:@]+)", subprocess.run(["ip", "-o", "link"], capture_output=True,
                                                            text=True).stdout, re.M)
    busy = {br for st in runstate.all_runs().values() if runstate.alive(st) for br in st.get("bridges", [])}
    ours = set(state["bridges"]) - busy          # read after the machine's: a run started meanwhile is in it
    assert not ours & bridges and not [l for l in links if l.split("-p")[0] in ours]
    assert not any(st.get("live") for st in runstate.all_runs().values())


def _running(pid: int) -> bool:
    """Alive and not a zombie (the fabric process, orphaned when `up` returned, waits for a reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return "(gone)"
