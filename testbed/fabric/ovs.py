"""Open vSwitch on this machine: which datapath to use, whether it runs, and port counters."""
from __future__ import annotations

import os
import re
import subprocess
import time

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


def delete_bridges(names: list[str], pause_s: float = 0.02) -> None:
    """Delete bridges one at a time, with a pause between. The userspace datapath forwards every bridge's
    packets, other fabrics' too, in ovs-vswitchd's main thread, which a deletion holds while it removes the
    bridge's ports: one transaction for a 16-GPU fabric's bridges held the packets of another fabric on the
    machine for 0.55-0.6 s, one per bridge for 0.10-0.14 s at most (docs/ecn.md)."""
    for name in names:
        vsctl("--if-exists", "del-br", name)
        time.sleep(pause_s)


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
    """What one bridge's flows forwarded, in bytes: "IP>output:PORT" for a route to one destination address
    through one port, "IP>group:G" for one through a group several destinations share, "*>ACTIONS" for the others
    (the drop-everything-else rule: actions=drop). The controller gives every multi-path route a select
    (ECMP, spraying) or fast-failover group of its own, whose buckets count what each port sent: such a route's
    bytes are split by port. A shared fast-failover group counts as its first port (where it sends while that
    port is up). A multicast tree flow sends through an `all` group of its own, which copies every packet to each
    of its ports: "GROUP>all:PORT,PORT" (ports in increasing order), the bytes the flow received, each port sending
    them all. One `ovs-ofctl dump-flows`, `dump-groups` and `dump-group-stats`."""
    proc = (run or _local)(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge], check=False)
    if proc.returncode != 0:
        raise OVSError(f"ovs-ofctl dump-flows {bridge}: {proc.stderr.strip()}")
    flows = FLOW_RE.findall(proc.stdout)
    groups = group_buckets(bridge, run)
    users: dict[str, int] = {}
    for _, _, actions in flows:
        if actions.startswith("group:"):
            users[actions[6:]] = users.get(actions[6:], 0) + 1
    split = bucket_bytes(bridge, run) if any(n == 1 and groups.get(g, ("",))[0] in ("select", "ff")
                                             for g, n in users.items()) else {}
    out: dict[str, int] = {}

    def add(key: str, n: int) -> None:
        out[key] = out.get(key, 0) + n
    for nbytes, dst, actions in flows:
        gid = actions[6:] if actions.startswith("group:") else None
        kind, ports = groups.get(gid, ("", []))
        if gid and dst and users[gid] == 1 and kind in ("select", "ff") and gid in split:
            for port, sent in zip(ports, split[gid]):          # the route's own group: its buckets split it
                add(f"{dst}>output:{port}", sent)
        elif gid and kind == "ff" and ports:
            add(f"{dst or '*'}>output:{ports[0]}", int(nbytes))
        elif gid and dst and users[gid] == 1 and kind == "all" and ports:
            add(f"{dst}>all:{','.join(sorted(ports, key=int))}", int(nbytes))
        else:
            add(f"{dst or '*'}>{actions}", int(nbytes))
    return out


GROUP_RE = re.compile(r"group_id=(\d+),type=(\w+)(\S*)")
BUCKET_PORT_RE = re.compile(r"bucket=bucket_id:\d+,[^=]*?(?:watch_port:\d+,)?actions=output:(\d+)")
BUCKET_BYTES_RE = re.compile(r"bucket\d+:packet_count=\d+,byte_count=(\d+)")


def group_buckets(bridge: str, run=None) -> dict[str, tuple[str, list[str]]]:
    """Group id -> (type, the output port of each bucket in order); one `ovs-ofctl dump-groups`."""
    proc = (run or _local)(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", bridge], check=False)
    if proc.returncode != 0:
        raise OVSError(f"ovs-ofctl dump-groups {bridge}: {proc.stderr.strip()}")
    return {gid: (kind, BUCKET_PORT_RE.findall(rest)) for gid, kind, rest in GROUP_RE.findall(proc.stdout)}


def bucket_bytes(bridge: str, run=None) -> dict[str, list[int]]:
    """Group id -> the bytes each of its buckets sent, in bucket order; one `ovs-ofctl dump-group-stats`."""
    proc = (run or _local)(["ovs-ofctl", "-O", "OpenFlow15", "dump-group-stats", bridge], check=False)
    if proc.returncode != 0:
        raise OVSError(f"ovs-ofctl dump-group-stats {bridge}: {proc.stderr.strip()}")
    return {m.group(1): [int(b) for b in BUCKET_BYTES_RE.findall(m.group(2))]
            for m in re.finditer(r"group_id=(\d+),(\S*)", proc.stdout)}


def growth(before: dict, after: dict, port: str, key: str = "tx_bytes") -> int:
    """How much a port counter grew between two counters() snapshots. A port that was removed and
    re-created meanwhile (a cut patch link) restarts from 0; a port missing now counts nothing."""
    now = after.get(port, {}).get(key, 0)
    then = before.get(port, {}).get(key, 0)
    return now - then if now >= then else now
