"""Open vSwitch on this machine: which datapath to use, whether it runs, and port counters."""
from __future__ import annotations

import json
import os
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


def port_counters(bridges: list[str]) -> dict[tuple[str, int], dict[str, int]]:
    """(bridge, OpenFlow port) -> {tx_bytes, rx_bytes, tx_packets, rx_packets}, from OVSDB in one call."""
    out = vsctl("--format=json", "--columns=name,ofport,statistics", "list", "Interface")
    owner: dict[str, str] = {}
    for br in bridges:
        for port in vsctl("list-ports", br).split():
            owner[port] = br
    table = json.loads(out)
    cols = table["headings"]
    counters: dict[tuple[str, int], dict[str, int]] = {}
    for row in table["data"]:
        rec = dict(zip(cols, row))
        br = owner.get(rec["name"])
        if br is None or not isinstance(rec["ofport"], int) or rec["ofport"] < 1:
            continue
        stats = dict(rec["statistics"][1]) if rec["statistics"][0] == "map" else {}
        counters[(br, rec["ofport"])] = {k: int(stats.get(k, 0)) for k in
                                         ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")}
    return counters
