"""Packet captures during a run: tcpdump at hosts' interfaces and at switch ports, one file per point.

Points:
  s0g0/nic, s0g0/hb     a host's NIC or HB port, captured inside the host's namespace
  rail0:3               a switch port (its veth in the root namespace); OVS patch ports have no
                        interface to capture on (uplinks are, with fabric.ideal_uplinks)
"""
from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import time

from testbed.fabric.links import is_patch, switch_port
from testbed.monitor import pcap

ETHERNET_HEADER = 14
WHOLE_FRAMES = 262144              # tcpdump's own default snaplen: every frame whole
REPORT_ICRC_LIMIT = 5000           # ICRCs the run's report checks per pcap (scapy: ~1 ms each)


class CaptureError(ValueError):
    pass


def file_name(point: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", point) + ".pcap"


def interface(fabric, point: str) -> tuple[str | None, str]:
    """(host or None for the root namespace, interface name) of a capture point."""
    node, dev = where(fabric, point)
    return (node if node in fabric.hosts else None), dev


def where(fabric, point: str) -> tuple[str, str]:
    """(the host or switch, interface name) of a capture point."""
    if "/" in point:
        host, kind = point.split("/", 1)
        if host not in fabric.hosts or kind not in ("nic", "hb") or (kind == "hb" and not fabric.hosts[host].hb_ip):
            raise CaptureError(f"unknown capture point {point!r}: expected HOST/nic, HOST/hb or SWITCH:PORT")
        return host, "eth0" if kind == "nic" else "eth1"
    switch, _, port = point.partition(":")
    if switch not in fabric.switches or not port.isdigit():
        raise CaptureError(f"unknown capture point {point!r}: expected HOST/nic, HOST/hb or SWITCH:PORT")
    for link in fabric.links:
        for node, p in ((link.a, link.a_port), (link.b, link.b_port)):
            if node == switch and p == int(port):
                if is_patch(fabric, link):
                    raise CaptureError(f"{point} is an OVS patch port, which has no interface to capture on; "
                                       f"capture at a host NIC instead")
                return switch, switch_port(switch, port)
    raise CaptureError(f"switch {switch} has no port {port}")


def validate(fabric, specs: list[dict]) -> None:
    for spec in specs:
        interface(fabric, spec["point"])


def largest_frame(fabric, point: str) -> int:
    """The longest frame a capture point can see: its link's MTU plus the Ethernet header."""
    if "/" in point:
        host, kind = point.split("/", 1)
        link = fabric.attachment(host, kind)
    else:
        switch, _, port = point.partition(":")
        link = next(l for l in fabric.links
                    if (l.a, l.a_port) == (switch, int(port)) or (l.b, l.b_port) == (switch, int(port)))
    return link.mtu + ETHERNET_HEADER


def snaplen_warnings(fabric, specs: list[dict]) -> list[str]:
    """One line per capture whose snaplen cuts frames: what a reader of that pcap cannot check."""
    out = []
    for i, spec in enumerate(specs):
        snaplen, frame = spec.get("snaplen", WHOLE_FRAMES), largest_frame(fabric, spec["point"])
        if snaplen < frame:
            out.append(f"capture.{i}: snaplen {snaplen} cuts frames at {spec['point']} (up to {frame} bytes): "
                       f"RoCE payloads and ICRCs in that pcap will not be checkable, and Wireshark will call the "
                       f"cut packets malformed; leave snaplen out to capture whole packets")
    return out


def contents(path: str) -> dict:
    """What a pcap holds, for the report: packets, RoCE packets, truncated, bad ICRC, malformed."""
    try:
        s = pcap.summarize(path, icrc_limit=REPORT_ICRC_LIMIT)
    except (pcap.PcapError, OSError) as exc:
        return {"error": str(exc)}
    return {k: s[k] for k in ("packets", "roce_packets", "truncated", "bad_icrc", "icrc_checked", "malformed")}


class Captures:
    """Start tcpdump for every point; stop() flushes them and returns what was captured."""

    def __init__(self, net, specs: list[dict], out_dir: str):
        self.net, self.specs = net, specs
        self.dir = os.path.join(out_dir, "pcaps")
        self.procs: list[tuple[dict, str, subprocess.Popen]] = []

    def start(self) -> None:
        if not self.specs:
            return
        os.makedirs(self.dir, exist_ok=True)
        for spec in self.specs:
            node, dev = where(self.net.fabric, spec["point"])
            path = os.path.join(self.dir, file_name(spec["point"]))
            # the pcap comes on tcpdump's stdout, so it lands here whichever machine captures
            argv = ["tcpdump", "-i", dev, "-w", "-", "-U", "-n", "-s", str(spec.get("snaplen", WHOLE_FRAMES)),
                    "-c", str(spec.get("max_packets", 1_000_000))]
            if spec.get("filter"):
                argv += spec["filter"].split()
            # the machine's tcpdump, in the host's network namespace (Docker hosts: not in the container)
            popen = self.net.host(node).tool_popen if node in self.net.fabric.hosts else \
                functools.partial(self.net.popen_at, node)
            with open(path, "wb") as out:
                self.procs.append((spec, path, popen(argv, stdout=out, stderr=subprocess.PIPE)))
        time.sleep(0.5)      # tcpdump needs a moment before it sees packets
        for spec, _, proc in self.procs:
            if proc.poll() is not None:
                raise CaptureError(f"tcpdump at {spec['point']} failed: {proc.stderr.read().decode().strip()}")

    def stop(self) -> list[dict]:
        out = []
        for spec, path, proc in self.procs:
            ended = proc.poll()             # before we asked: it died (and its file may be cut short)
            if ended is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            out.append({"point": spec["point"], "file": path, "filter": spec.get("filter", ""),
                        "snaplen": spec.get("snaplen", WHOLE_FRAMES),
                        "bytes": os.path.getsize(path) if os.path.exists(path) else 0, **contents(path),
                        **({"ended_early": f"tcpdump exited with {ended} before the run ended"}
                           if ended is not None else {})})
        self.procs = []
        return out
