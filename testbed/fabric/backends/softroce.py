"""Kernel Soft-RoCE for the emulated hosts, where the kernel has rdma_rxe (the Vagrant VM, not our CI machines).

At bring-up every host gets an rxe device on each of its interfaces, created inside the host's network
namespace (`rdma link add tb-<host>-nic type rxe netdev eth0`; -hb on eth1). The hosts' transport then
picks the `rxe` backend by itself: hosts.rdma.open_device uses a kernel device when one carries the
host's address. This needs an rdma_rxe that supports network namespaces (recent kernels); where the
kernel refuses, the devices made so far are removed and the hosts keep the user-space transport.
The devices go away with their interfaces at tear-down.
"""
from __future__ import annotations

import os
import shutil
import time

from hosts.rdma.rxe import find_gid
from testbed.fabric.links import sysname


def available() -> bool:
    return os.path.isdir("/sys/module/rdma_rxe") and shutil.which("rdma") is not None


def device_names(fabric) -> dict[str, list[tuple[str, str, str]]]:
    """host -> [(rxe device, interface, address)] for every interface of every host."""
    out = {}
    for h in fabric.hosts.values():
        out[h.name] = [(f"{sysname(h.name)}-nic", "eth0", h.ip)]
        if h.hb_ip:
            out[h.name].append((f"{sysname(h.name)}-hb", "eth1", h.hb_ip))
    return out


def attach(net, timeout: float = 5.0) -> dict:
    """Create the hosts' rxe devices; returns {"transport": "rxe"|"uroce", "detail": why}."""
    if not available():
        return {"transport": "uroce", "detail": "no rdma_rxe in this kernel"}
    made, wanted = [], device_names(net.fabric)
    for host, devices in wanted.items():
        for name, dev, _ in devices:
            out = net.host(host).cmd(f"rdma link add {name} type rxe netdev {dev} 2>&1 && echo TB-OK")
            if "TB-OK" not in out:
                detach(net, made)
                return {"transport": "uroce", "detail": f"rdma link add in {host}'s namespace failed "
                                                        f"({out.strip().splitlines()[0] if out.strip() else 'no output'})"}
            made.append((host, name))
    deadline = time.monotonic() + timeout          # the GID tables fill from the interfaces' addresses
    missing = [(n, ip) for devices in wanted.values() for n, _, ip in devices]
    while missing and time.monotonic() < deadline:
        missing = [(n, ip) for n, ip in missing if find_gid(ip, name=n) is None]
        time.sleep(0.05)
    if missing:
        detach(net, made)
        return {"transport": "uroce", "detail": f"{missing[0][0]} has no RoCE v2 GID for {missing[0][1]}"}
    return {"transport": "rxe", "detail": f"{len(made)} rxe devices"}


def detach(net, made: list[tuple[str, str]]) -> None:
    for host, name in made:
        net.host(host).cmd(f"rdma link delete {name}")
