"""scripts/ovs-start and scripts/ovs-stop: a make invocation stops only the daemon its scripts started, and only
when no other invocation still holds it. The scripts run for real against a fake ovs-ctl (a `sleep` stands for
ovs-vswitchd) and fake system commands first on PATH: the machine's Open vSwitch is never touched."""
import os
import signal
import subprocess

import pytest

from tests.paths import ROOT

SCRIPTS = os.path.join(ROOT, "scripts")
FAKE_CTL = """\
#!/usr/bin/env bash
# ovs-ctl stand-in: start runs a sleep as ovs-vswitchd (pidfile in $OVS_RUNDIR), stop kills it
echo "$*" >> "$FAKE_LOG"
pidf=$OVS_RUNDIR/ovs-vswitchd.pid
alive() { [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; }
case "${@: -1}" in
  start) [[ " $* " == *" --no-ovs-vswitchd "* ]] || { setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$pidf"; } ;;
  status) alive ;;
  stop) alive && kill "$(cat "$pidf")"; rm -f "$pidf" ;;
esac
"""
FAKE_VSCTL = '#!/usr/bin/env bash\necho "ovs-vsctl $*" >> "$FAKE_LOG"\n' \
             '[ "$1" != --timeout=2 ] || { [ -f "$OVS_RUNDIR/ovs-vswitchd.pid" ] && ' \
             'kill -0 "$(cat "$OVS_RUNDIR/ovs-vswitchd.pid")" 2>/dev/null; }\n'
FAKES = {"ovs-ctl": FAKE_CTL, "ovs-vsctl": FAKE_VSCTL,
         "modprobe": "#!/bin/sh\nexit 1\n",                     # no kernel module: the userspace-datapath path
         "sysctl": '#!/bin/sh\necho "sysctl $*" >> "$FAKE_LOG"\n[ "$1" = -n ] && echo 212992\nexit 0\n'}


@pytest.fixture
def env(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in FAKES.items():
        (fake / name).write_text(body)
        (fake / name).chmod(0o755)
    (tmp_path / "ovs").mkdir()
    e = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "TESTBED_OVS_CTL": str(fake / "ovs-ctl"),
         "TESTBED_RUN_DIR": str(tmp_path / "run"), "OVS_RUNDIR": str(tmp_path / "ovs"),
         "FAKE_LOG": str(tmp_path / "log")}
    (tmp_path / "log").touch()
    yield e
    pidf = tmp_path / "ovs" / "ovs-vswitchd.pid"
    if pidf.exists():
        try:
            os.kill(int(pidf.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def vswitchd(env) -> int | None:
    try:
        pid = int(open(os.path.join(env["OVS_RUNDIR"], "ovs-vswitchd.pid")).read())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def stops(env) -> int:
    with open(env["FAKE_LOG"]) as f:
        return sum(1 for line in f if line.strip() == "stop")


class Make:
    """One `make` invocation: a shell that runs ovs-start, waits, then runs ovs-stop (as the Makefile's trap)."""

    def __init__(self, env):
        body = f"trap '{SCRIPTS}/ovs-stop' EXIT; {SCRIPTS}/ovs-start; read go"
        self.p = subprocess.Popen(["bash", "-c", body], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.started = self.p.stdout.readline().strip()

    def finish(self) -> str:
        out, _ = self.p.communicate("go\n", timeout=20)
        return out.strip()


def test_the_last_invocation_stops_the_daemon_its_scripts_started(env):
    a = Make(env)
    assert a.started == "ovs-start: Open vSwitch started (user datapath)" and vswitchd(env)
    assert "sysctl -qw net.core.wmem_default=67108864" in open(env["FAKE_LOG"]).read()
    b = Make(env)
    assert b.started == "ovs-start: Open vSwitch already running"
    assert a.finish() == "ovs-stop: Open vSwitch left running: 1 other run(s) still use it"
    assert vswitchd(env) and stops(env) == 0
    assert b.finish() == "ovs-stop: Open vSwitch stopped"
    assert vswitchd(env) is None and stops(env) == 1
    assert "sysctl -qw net.core.wmem_default=212992" in open(env["FAKE_LOG"]).read()     # restored
    assert not os.path.exists(os.path.join(env["TESTBED_RUN_DIR"], "ovs-started"))


def start_by_hand(env) -> int:
    subprocess.run([env["TESTBED_OVS_CTL"], "start"], env=env, check=True)
    return vswitchd(env)


def test_a_daemon_the_user_started_is_left_running(env):
    mine = start_by_hand(env)
    a = Make(env)
    assert a.started == "ovs-start: Open vSwitch already running"
    assert a.finish() == "" and vswitchd(env) == mine and stops(env) == 0


def test_a_stale_marker_does_not_stop_a_daemon_started_after_ours_went_away(env):
    a = Make(env)
    ours = vswitchd(env)
    os.kill(ours, signal.SIGKILL)                    # ours went away (crashed, or the user stopped it) ...
    subprocess.run(["bash", "-c", "while kill -0 %d 2>/dev/null; do sleep 0.05; done" % ours], timeout=10)
    theirs = start_by_hand(env)                      # ... and the user started their own
    assert a.finish().startswith("ovs-stop: Open vSwitch left running: the daemon running now is not")
    assert vswitchd(env) == theirs and stops(env) == 0
    assert not os.path.exists(os.path.join(env["TESTBED_RUN_DIR"], "ovs-started"))


def test_a_marker_that_names_no_daemon_stops_nothing(env):
    theirs = start_by_hand(env)
    os.makedirs(env["TESTBED_RUN_DIR"])
    with open(os.path.join(env["TESTBED_RUN_DIR"], "ovs-started"), "w") as f:
        f.write("user\n")                            # a marker without the daemon's identity
    out = subprocess.run([f"{SCRIPTS}/ovs-stop"], env=env, capture_output=True, text=True, timeout=20)
    assert out.returncode == 0 and "left running" in out.stdout, out
    assert vswitchd(env) == theirs and stops(env) == 0


def test_the_scripts_take_their_paths_from_the_environment():
    """The guard that keeps this file's tests off the machine's daemon: no fixed path is left in the scripts."""
    for name in ("ovs-start", "ovs-stop"):
        text = open(os.path.join(SCRIPTS, name)).read()
        assert "/usr/share/openvswitch" not in text and "/run/testbed" not in text, name
    lib = open(os.path.join(SCRIPTS, "lib", "ovs.sh")).read()
    assert "${TESTBED_OVS_CTL:-" in lib and "${TESTBED_RUN_DIR:-" in lib and "${OVS_RUNDIR:-" in lib
