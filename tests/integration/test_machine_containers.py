"""Containers acting as machines (tools/machines.py): two machines answer ssh with the key as their own
hostnames, run their own Open vSwitch, start Mininet nodes with mnexec, import the `hosts` package, carry
jumbo VXLAN between each other, see the shared run directory, stop on SIGTERM and leave nothing behind.

Needs root and a Docker engine (`make test` starts one with scripts/dockerd-start); skips with the reason
where there is none.
"""
import os
import subprocess
import time

import pytest

from testbed import RUN_ROOT
from tools import machines

pytestmark = [pytest.mark.root, pytest.mark.docker, pytest.mark.alone]     # fixed machine names
NAMES = ["m1", "m2"]


@pytest.fixture(scope="module")
def client(docker_engine):
    return docker_engine


@pytest.fixture(scope="module")
def up(client):
    t0 = time.monotonic()
    try:
        addresses = machines.start(NAMES)
        print(f"machines {', '.join(NAMES)} up in {time.monotonic() - t0:.1f} s: {addresses}")
        yield addresses
    finally:
        machines.stop(NAMES)


def ssh(address: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    key, _ = machines.key_pair()
    return subprocess.run(["ssh", *machines.ssh_options(key), f"root@{address}", command],
                          capture_output=True, text=True, timeout=timeout)


def ok(address: str, command: str) -> str:
    p = ssh(address, command)
    assert p.returncode == 0, f"{command!r} on {address}: exit {p.returncode}: {p.stdout}{p.stderr}"
    return p.stdout


def test_ssh_with_the_key_reaches_each_machine_by_its_hostname(up):
    for name, address in up.items():
        assert ok(address, "hostname").strip() == name
    assert len(set(up.values())) == len(NAMES)


def test_root_logs_in_by_that_key_only(up, tmp_path):
    other = tmp_path / "other-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    p = subprocess.run(["ssh", *machines.ssh_options(str(other)), f"root@{up['m1']}", "true"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 255 and "Permission denied" in p.stderr, p.stderr
    config = dict(line.split(" ", 1) for line in ok(up["m1"], "sshd -T").splitlines() if " " in line)
    assert (config["permitrootlogin"], config["passwordauthentication"], config["usedns"]) == \
        ("without-password", "no", "no"), config


def test_each_machine_runs_its_own_userspace_open_vswitch(up):
    a = up["m1"]
    ok(a, "ovs-vsctl add-br tb-x -- set bridge tb-x datapath_type=netdev")
    try:
        ok(a, "ovs-vsctl br-exists tb-x")
        assert ok(a, "ovs-vsctl get bridge tb-x datapath_type").strip() == "netdev"
        assert ssh(up["m2"], "ovs-vsctl br-exists tb-x").returncode == 2       # m2's switch is its own
        assert ok(a, "ovs-vsctl get Open_vSwitch . other_config:userspace-tso-enable").strip() == '"true"'
    finally:
        ok(a, "ovs-vsctl del-br tb-x")
    assert ssh(a, "ovs-vsctl br-exists tb-x").returncode == 2


def test_mnexec_starts_a_node_in_a_new_network_namespace(up):
    """Mininet's remote node start: a detached shell in a namespace of its own, printing its PID."""
    out = ok(up["m1"], "mnexec -cdn bash -c 'echo $$; ip -o link show'").splitlines()
    assert out[0].strip().isdigit(), out
    assert len(out) == 2 and ": lo:" in out[1], out          # only loopback: a fresh namespace


def test_ssh_sessions_import_numpy_and_the_hosts_package(up):
    out = ok(up["m2"], "echo $PYTHONPATH; python3 -c 'import numpy, hosts; print(hosts.__file__)'").split()
    assert out[0] == "/opt/testbed" and out[1] == "/opt/testbed/hosts/__init__.py", out


def test_jumbo_vxlan_between_machines(up):
    a, b = up["m1"], up["m2"]
    inner = {a: "10.99.42.1", b: "10.99.42.2"}
    try:
        for local, remote in ((a, b), (b, a)):
            ok(local, f"ip link add tb-vx type vxlan id 42 local {local} remote {remote} dstport 4789 && "
                      f"ip link set tb-vx mtu 9000 up && ip addr add {inner[local]}/24 dev tb-vx")
        for local, remote in ((a, b), (b, a)):
            out = ok(local, f"ping -M do -s 8972 -c 3 -i 0.2 -W 2 {inner[remote]}")
            assert " 0% packet loss" in out, out
    finally:
        for address in (a, b):
            ssh(address, "ip link del tb-vx")


def test_run_directory_is_shared_with_the_host(up):
    os.makedirs(os.path.join(RUN_ROOT, "machines"), exist_ok=True)
    path = os.path.join(RUN_ROOT, "machines", f"tb-probe-{os.getpid()}")
    with open(path, "w") as f:
        f.write("written on the host\n")
    try:
        for address in up.values():
            assert ok(address, f"cat {path}") == "written on the host\n"
    finally:
        os.remove(path)


def test_sigterm_stops_a_machine_cleanly_and_stop_leaves_nothing(client, up):
    c = client.containers.get(machines.CONTAINER_PREFIX + "m2")
    t0 = time.monotonic()
    c.stop(timeout=10)
    c.reload()
    assert c.attrs["State"]["ExitCode"] == 0 and time.monotonic() - t0 < 5, c.attrs["State"]
    machines.stop()
    left = [c.name for c in client.containers.list(all=True) if c.name.startswith(machines.CONTAINER_PREFIX)]
    assert left == []
    assert [n.name for n in client.networks.list() if n.name == machines.NETWORK] == []
