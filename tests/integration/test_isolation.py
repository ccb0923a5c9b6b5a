"""Isolation: what an emulated host must not reach. The controller listens on loopback only; from inside a host
nothing outside the fabric answers (every address of the machine's own interfaces, a public address, the
controller's OpenFlow port, OVSDB), while its fabric peers do; a Docker host's processes hold only the
capabilities listed in docs/docker.md, and OVSDB's socket is not in their file system.

Each "unreachable" check has a control: the same listener answers from the machine itself, so a failure to
connect from the host is the namespace's doing, not a dead listener."""
import json
import os
import socket
import subprocess

import pytest

from testbed.fabric.network import Network
from testbed.fabric.topo import build

PUBLIC = ["1.1.1.1", "8.8.8.8"]
OVSDB_SOCKET = "/var/run/openvswitch/db.sock"
# Docker's default set: what the containers are started with, and all a workload process needs
# (UDP and raw sockets, its own files); no NET_ADMIN, SYS_ADMIN, SYS_PTRACE, SYS_MODULE, DAC_READ_SEARCH ...
DOCKER_CAPS = {"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP",
               "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}
CAP_NAMES = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
             "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
             "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT",
             "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
             "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND",
             "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"]

# Run inside a host (its own Python, no testbed import): try each (address, port), print what happened.
PROBE = """
import json, socket, sys
out = {}
for addr, port in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    s.settimeout(1.0)
    try:
        s.connect((addr, port)); out[f"{addr} {port}"] = "connected"
    except OSError as e:
        out[f"{addr} {port}"] = type(e).__name__ + ": " + str(e)
    finally:
        s.close()
print(json.dumps(out))
"""
STATUS = "import json; print(json.dumps(dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() " \
         "if ':\\t' in l)))"


def machine_addresses() -> list[str]:
    """Every address of the root namespace's interfaces (loopback included), IPv4 and IPv6."""
    out = json.loads(subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True, check=True).stdout)
    return sorted({a["local"] for link in out for a in link.get("addr_info", [])
                   if not a["local"].startswith("fe80")})       # link-local needs a scope: on no fabric link


def listening(pid: int) -> list[tuple[str, str]]:
    """(protocol, local address:port) of every listening TCP socket and bound UDP socket of a process."""
    found = []
    for proto, flag in (("tcp", "-ltnp"), ("udp", "-lunp")):
        out = subprocess.run(["ss", "-H", flag], capture_output=True, text=True, check=True).stdout
        found += [(proto, line.split()[3]) for line in out.splitlines() if f"pid={pid}," in line]
    return found


def probe(host, targets: list[tuple[str, int]]) -> dict[str, str]:
    proc = host.popen([host.python, "-c", PROBE, json.dumps(targets)], text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def listener():
    """A TCP listener on every address of the machine (IPv4 and IPv6), as any service of the machine's would be."""
    s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 0))
    s.listen(64)
    yield s.getsockname()[1]
    s.close()


def check_fabric_isolation(net, listener_port):
    addresses = machine_addresses()
    port = net.controller.port
    targets = [(a, p) for a in addresses for p in (listener_port, port)] + [(a, 53) for a in PUBLIC] \
        + [(a, 443) for a in PUBLIC] + [("127.0.0.1", port), ("127.0.0.1", 6640), ("127.0.0.1", 6653)]
    for addr in addresses:                             # the control: each answers from the machine itself
        socket.create_connection((addr, listener_port), timeout=2).close()
    peer = net.host("s1g1").IP()
    got = probe(net.host("s0g0"), targets + [(peer, 1)])
    print(f"from s0g0: {len(targets)} addresses outside the fabric tried: "
          f"{sorted({v.split(':')[0] for k, v in got.items() if not k.startswith(peer)})}")
    assert got[f"{peer} 1"].startswith("ConnectionRefusedError"), got   # a fabric peer answers (a TCP reset)
    reached = {k: v for k, v in got.items() if v == "connected"}
    assert not reached, f"reachable from inside a host: {reached}"
    # and not a ping either
    host = net.host("s0g0")
    for addr in [a for a in addresses if ":" not in a and not a.startswith("127.")] + PUBLIC:   # 127/8: its own
        out = host.cmd(f"ping -c1 -W1 {addr} >/dev/null 2>&1; echo $?").strip()
        assert out.endswith("1") or out.endswith("2"), f"{addr} answers a ping from s0g0"


@pytest.mark.root
def test_the_controller_listens_on_loopback_only_and_no_host_reaches_outside_the_fabric(listener):
    with Network(build("rail-optimized", 2, 2, spines=1)) as net:
        sockets = listening(net.controller.proc.pid)
        print(f"controller (pid {net.controller.proc.pid}) listens on: {sockets}")
        assert ("tcp", f"127.0.0.1:{net.controller.port}") in sockets
        assert all(addr.startswith("127.0.0.1:") or addr.startswith("[::1]:") for _, addr in sockets), sockets
        check_fabric_isolation(net, listener)


@pytest.mark.root
@pytest.mark.docker
def test_docker_hosts_are_isolated_and_hold_only_the_listed_capabilities(listener):
    from testbed.fabric.backends.dockerhost import DockerUnavailable, engine
    try:
        engine()
    except DockerUnavailable as exc:
        pytest.skip(f"no Docker engine can run here: {exc}")
    with Network(build("rail-optimized", 2, 2, spines=1), hosts="docker") as net:
        check_fabric_isolation(net, listener)
        host = net.host("s0g0")
        proc = host.popen([host.python, "-c", STATUS + f"; import os; print(os.path.exists({OVSDB_SOCKET!r}))"],
                          text=True)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        status, ovsdb_visible = out.splitlines()
        status = json.loads(status)
        caps = {name for bit, name in enumerate(CAP_NAMES) if int(status["CapEff"], 16) >> bit & 1}
        bounding = {name for bit, name in enumerate(CAP_NAMES) if int(status["CapBnd"], 16) >> bit & 1}
        print(f"a workload process in a Docker host: CapEff {sorted(caps)}; CapBnd {sorted(bounding)}")
        assert caps == DOCKER_CAPS and bounding == DOCKER_CAPS, sorted(caps ^ DOCKER_CAPS)
        assert ovsdb_visible == "False", "OVSDB's socket is in the container's file system"
        assert os.path.exists(OVSDB_SOCKET)          # the control: it is there, on the machine
