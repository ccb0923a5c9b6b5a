"""Containers acting as machines, for testing fabrics spread over several machines.

A machine is a container of the tb-machine image (docker/machine/) that looks like a small Linux server:
its own hostname, an address on the management network tb-mgmt, sshd taking root's login by key only,
and its own Open vSwitch (userspace datapath). Mininet's remote side reaches it over ssh; the run
directory is shared with it at the same path, as it would be on a cluster's shared file system.

    addresses = start(["m1", "m2"])          # {"m1": "172.17.0.2", ...}, sshd and OVS answering
    key, _ = key_pair()
    subprocess.run(["ssh", *ssh_options(key), f"root@{addresses['m1']}", "ovs-vsctl show"])
    stop(["m1", "m2"])                       # or stop() for every machine

    python -m tools.machines up m1,m2        # the same by hand; `down` removes them

tb-mgmt is an internal Docker bridge (nothing on it reaches beyond this host) whose MTU leaves room for
VXLAN between machines with 9000-byte inner frames. Docker's --privileged is not used: it fails where
CAP_SYS_RESOURCE is outside the bounding set, so a machine gets every other capability, no seccomp or
AppArmor profile, and /dev/net/tun (the userspace datapath's bridge ports, ssh tunnels). A machine cannot
set net.core.wmem_default: it is global (read-only inside a network namespace), so it has the host's.
Machines belong to no run; `testbed clean` leaves them (what started them stops them).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from testbed import PREFIX, RUN_ROOT
from testbed.fabric.backends import image

MACHINE_IMAGE = f"{PREFIX}machine:latest"
NETWORK = f"{PREFIX}mgmt"
CONTAINER_PREFIX = f"{PREFIX}machine-"
LABEL = "testbed"
KEY_DIR = os.path.join(RUN_ROOT, "machines")
KEY = os.path.join(KEY_DIR, f"{PREFIX}machine-key")
SSH_UNREACHABLE = 255       # ssh's own failures; any other status is the remote command's


class MachineError(RuntimeError):
    pass


def _client():
    from testbed.fabric.backends.engine import engine
    return engine()


def ensure_image(client, echo=print) -> str:
    """tb-machine:latest, (re)built only when it is missing or its inputs changed (tb-host first)."""
    try:
        return image.derived(client, "machine", echo=echo)
    except image.ImageError as exc:
        raise MachineError(str(exc)) from None


def key_pair() -> tuple[str, str]:
    """(private key path, public key text): one ed25519 key for every machine, made on first use."""
    if not os.path.exists(KEY):
        os.makedirs(KEY_DIR, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=PREFIX, dir=KEY_DIR) as tmp:
            made = os.path.join(tmp, "key")
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{PREFIX}machine", "-f", made],
                           check=True, capture_output=True)
            os.chmod(made, 0o600)
            try:
                os.link(made, KEY)          # atomic and first-wins: concurrent callers end up with one key
            except FileExistsError:
                pass
    public = subprocess.run(["ssh-keygen", "-y", "-f", KEY], check=True, capture_output=True, text=True)
    return KEY, public.stdout.strip()


def ssh_options(key: str) -> list[str]:
    """What an ssh client needs to log in to a machine: the key, and no host-key prompts (every machine
    makes a new host key when it starts)."""
    return ["-i", key, "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]


def _network(client, mtu: int):
    import docker
    try:
        return client.networks.get(NETWORK)
    except docker.errors.NotFound:
        return client.networks.create(NETWORK, driver="bridge", internal=True, labels={LABEL: "1"},
                                      options={"com.docker.network.driver.mtu": str(mtu)})


def _run(client, name: str, public_key: str):
    import docker
    container = CONTAINER_PREFIX + name
    try:
        client.containers.get(container).remove(force=True)     # a machine of that name left behind
    except docker.errors.NotFound:
        pass
    return client.containers.run(
        MACHINE_IMAGE, name=container, hostname=name, network=NETWORK, detach=True,
        labels={LABEL: "1", f"{LABEL}.machine": name},
        cap_add=["ALL"], cap_drop=["SYS_RESOURCE"], devices=["/dev/net/tun:/dev/net/tun:rwm"],
        security_opt=["seccomp=unconfined", "apparmor=unconfined"],
        volumes={RUN_ROOT: {"bind": RUN_ROOT, "mode": "rw"}}, environment={"TB_AUTHORIZED_KEY": public_key})


def _probe(address: str, key: str) -> str | None:
    """None when the machine answers ssh with the key and its Open vSwitch; else what is not ready."""
    p = subprocess.run(["ssh", *ssh_options(key), "-o", "ConnectTimeout=2", f"root@{address}",
                        "ovs-vsctl --timeout=2 show"], capture_output=True, text=True, timeout=15)
    if p.returncode == 0:
        return None
    what = "sshd does not answer" if p.returncode == SSH_UNREACHABLE else "`ovs-vsctl show` fails"
    return f"{what}: {(p.stderr or p.stdout).strip()[-200:] or f'exit status {p.returncode}'}"


def start(names: list[str], mtu: int = 9216, timeout: float = 60.0) -> dict[str, str]:
    """Start one machine per name (container tb-machine-NAME, hostname NAME) on tb-mgmt and wait until
    each answers ssh and `ovs-vsctl show`; returns their addresses on tb-mgmt. The network is created
    with `mtu` if it is missing (an existing one keeps its own). A machine that is not ready in time is
    left as it is, for its logs; stop() removes it."""
    for name in names:
        if not name or not all(c.isalnum() or c == "-" for c in name) or name.startswith("-"):
            raise MachineError(f"machine name {name!r}: use letters, digits and '-' (it becomes a hostname)")
    client = _client()
    ensure_image(client)
    key, public_key = key_pair()
    os.makedirs(RUN_ROOT, exist_ok=True)
    _network(client, mtu)
    containers = {name: _run(client, name, public_key) for name in names}
    addresses = {}
    for name, c in containers.items():
        c.reload()
        addresses[name] = c.attrs["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
    waiting = {name: "not probed yet" for name in names}
    deadline = time.monotonic() + timeout
    while waiting:
        for name in list(waiting):
            c = containers[name]
            c.reload()
            if c.status != "running":
                logs = c.logs(tail=5).decode(errors="replace").strip().replace("\n", " | ")
                raise MachineError(f"machine {name}: its container {c.name} is {c.status}: {logs}")
            problem = _probe(addresses[name], key)
            if problem is None:
                del waiting[name]
            else:
                waiting[name] = problem
        if waiting and time.monotonic() > deadline:
            raise MachineError("; ".join(f"machine {n} ({addresses[n]}) not ready after {timeout:.0f} s: {w}"
                                         for n, w in waiting.items()))
        if waiting:
            time.sleep(0.2)
    return addresses


def stop(names: list[str] | None = None) -> None:
    """Stop and remove the named machines (every machine when None), then tb-mgmt once no container is
    left on it. Only containers named tb-machine-* and labelled testbed are touched."""
    import docker
    client = _client()
    ours = [c for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"})
            if c.name.startswith(CONTAINER_PREFIX)]
    if names is not None:
        wanted = {CONTAINER_PREFIX + n for n in names}
        ours = [c for c in ours if c.name in wanted]
    for c in ours:
        c.stop(timeout=10)          # SIGTERM: the entrypoint stops sshd and Open vSwitch
        c.remove(force=True)
    try:
        network = client.networks.get(NETWORK)
    except docker.errors.NotFound:
        return
    network.reload()
    if not network.attrs.get("Containers"):
        network.remove()


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m tools.machines", description="containers acting as machines")
    sub = p.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="start machines and print their addresses")
    up.add_argument("names", help="comma-separated machine names, e.g. m1,m2")
    up.add_argument("--mtu", type=int, default=9216)
    down = sub.add_parser("down", help="remove machines (all when no names are given)")
    down.add_argument("names", nargs="?", help="comma-separated machine names")
    args = p.parse_args(argv)
    names = [n for n in (args.names or "").split(",") if n] or None
    try:
        if args.verb == "up":
            for name, address in start(names or [], args.mtu).items():
                print(f"{name} {address}")
            key, _ = key_pair()
            print(f"ssh {' '.join(ssh_options(key))} root@ADDRESS")
        else:
            stop(names)
    except Exception as exc:        # one line, not a traceback, for a command typed by hand
        print(f"machines: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
