"""Open vSwitch on this machine: which datapath to use, whether it runs, and port counters."""
from __future__ import annotations

import os
import re
import subprocess

from testbed import PREFIX


class OVSError(RuntimeError):
    pass


def datapath() -> str:
    """`kernel` where the openvswitch module is loaded, else `user` (netdev); TESTBED_DATAPATH overrides."""
    forced = os.environ.get("TESTBED_DATAPATH")
    if forced in ("kernel", "user"):
        return forced
    return "kernel" if os.path.isdir("/sys/module/openvswitch") else "user"


def vsctl(*args: str, timeout: float = 20) -> str:
    proc = subprocess.run(["ovs-vsctl", f"--timeout={int(timeout)}", *args],
                          capture_output=True, text=True, timeout=timeout + 5)
    if proc.returncode != 0:
        raise OVSError(f"ovs-vsctl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def running() -> bool:
    try:
        vsctl("show", timeout=3)
        return True
    except (OVSError, FileNotFoundError, subprocess.TimeoutExpired):
        return False


def require_running() -> None:
    if not running():
        raise OVSError("Open vSwitch is not running (start it with scripts/ovs-start, or use `make demo`)")


def our_bridges() -> list[str]:
    try:
        out = vsctl("list-br", timeout=5)
    except (OVSError, FileNotFoundError, subprocess.TimeoutExpired):
        return []
    return [b for b in out.split() if b.startswith(PREFIX)]


PORT_STATS_RE = re.compile(r"port\s+(\d+): rx pkts=(\d+), bytes=(\d+).*?tx pkts=(\d+), bytes=(\d+)", re.S)


def _local(argv: list[str], check: bool = True, timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=timeout)


def port_counters(bridges: list[str], run=None) -> dict[tuple[str, int], dict[str, int]]:
    """(bridge, OpenFlow port) -> {tx_bytes, rx_bytes, tx_packets, rx_packets}.

    OpenFlow port stats, not OVSDB's (those refresh every 5 s and stay 0 on patch ports). Patch-port
    counters are credited when the revalidators account datapath flows, so wait for a round first.
    run: how a command runs on the bridges' machine (Machine.run); this machine's by default.
    """
    wait_revalidators(run)
    return {(br, port): c for br in bridges for port, c in dump_ports(br, run).items()}


def wait_revalidators(run=None) -> None:
    """Until the revalidators finish a round (every ~0.5 s), after which patch-port counters are current."""
    (run or _local)(["ovs-appctl", "revalidator/wait"], check=False)


def dump_ports(bridge: str, run=None) -> dict[int, dict[str, int]]:
    """OpenFlow port -> counters of one bridge; one `ovs-ofctl dump-ports`. Ports whose counters OVS
    cannot read (shown as "?") are left out."""
    proc = (run or _local)(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", bridge], check=False)
    if proc.returncode != 0:
        raise OVSError(f"ovs-ofctl dump-ports {bridge}: {proc.stderr.strip()}")
    return {int(port): {"rx_packets": int(rxp), "rx_bytes": int(rxb), "tx_packets": int(txp), "tx_bytes": int(txb)}
            for port, rxp, rxb, txp, txb in PORT_STATS_RE.findall(proc.stdout)}


FLOW_RE = re.compile(r"n_bytes=(\d+),.*?(?:nw_dst=([\d.]+)\S*)?\s+actions=(\S+)")


def dump_flow_bytes(bridge: str, run=None) -> dict[str, int]:
    """What one bridge's flows forwarded, in bytes: "IP>ACTIONS" for a route to one destination address
    (ACTIONS: output:PORT for a single path, group:G for ECMP or spraying), "*>ACTIONS" for the others (the
    drop-everything-else rule: actions=drop); one `ovs-ofctl dump-flows`."""
    proc = (run or _local)(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge], check=False)
    if proc.returncode != 0:
        raise OVSError(f"ovs-ofctl dump-flows {bridge}: {proc.stderr.strip()}")
    first = failover_ports(bridge, run)
    out: dict[str, int] = {}
    for nbytes, dst, actions in FLOW_RE.findall(proc.stdout):
        if actions.startswith("group:") and actions[6:] in first:
            actions = f"output:{first[actions[6:]]}"       # a fast-failover group sends on its first live port
        key = f"{dst or '*'}>{actions}"
        out[key] = out.get(key, 0) + int(nbytes)
    return out


GROUP_RE = re.compile(r"group_id=(\d+),type=ff,bucket=bucket_id:\d+,watch_port:(\d+)")


def failover_ports(bridge: str, run=None) -> dict[str, str]:
    """Fast-failover group id -> the port of its first bucket (where it sends while that port is up)."""
    proc = (run or _local)(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", bridge], check=False)
    if proc.returncode != 0:
        raise OVSError(f"ovs-ofctl dump-groups {bridge}: {proc.stderr.strip()}")
    return dict(GROUP_RE.findall(proc.stdout))


def growth(before: dict, after: dict, port: str, key: str = "tx_bytes") -> int:
    """How much a port counter grew between two counters() snapshots. A port that was removed and
    re-created meanwhile (a cut patch link) restarts from 0; a port missing now counts nothing."""
    now = after.get(port, {}).get(key, 0)
    then = before.get(port, {}).get(key, 0)
    return now - then if now >= then else now
