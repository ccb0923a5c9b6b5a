"""Bytes forwarded from one switch port to another, from Open vSwitch's datapath flows.

A datapath flow always matches its input port exactly (recirculated ones too: ECMP's select groups hash, then
recirculate to a flow per bucket), and its actions name the ports it outputs to, so its byte counter is traffic
from one port to others. The OpenFlow flows of the fabric's controller match destinations only, and port counters
do not say where a port's frames went. The flows are read over ovs-vswitchd's control socket (a JSON-RPC call,
as ovs-appctl makes it, without a process per reading).

    reader = PortToPort({("tb-rrail0-p1", "tb-rrail0-p2"), ...})   # the (in, out) port pairs wanted
    reader.read()     # -> {(in, out): bytes since the last read}

Counters of flows the datapath deleted between two reads are lost (their bytes since the read before), as are
packets handled in the slow path (a flow's first).
"""
from __future__ import annotations

import json
import os
import re
import socket

RUNDIR = "/var/run/openvswitch"
FLOW = re.compile(r"in_port\(([^)]*)\).*?, packets:\d+, bytes:(\d+), used:[^,]*, actions:(.*)$")


class DatapathError(RuntimeError):
    """ovs-vswitchd's control socket could not be reached or answered with an error."""


class Control:
    """ovs-vswitchd's unixctl socket: the commands ovs-appctl sends, as JSON-RPC."""

    def __init__(self, rundir: str | None = None, timeout_s: float = 2.0):
        rundir = rundir or os.environ.get("OVS_RUNDIR", RUNDIR)
        try:
            with open(os.path.join(rundir, "ovs-vswitchd.pid")) as f:
                pid = int(f.read().strip())
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout_s)
            self.sock.connect(os.path.join(rundir, f"ovs-vswitchd.{pid}.ctl"))
        except (OSError, ValueError) as exc:
            raise DatapathError(f"ovs-vswitchd's control socket in {rundir}: {exc}") from None
        self.ids = 0
        self.decoder = json.JSONDecoder()

    def call(self, method: str, *params: str) -> str:
        self.ids += 1
        try:
            self.sock.sendall(json.dumps({"id": self.ids, "method": method, "params": list(params)}).encode())
            data = b""
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise DatapathError(f"{method}: ovs-vswitchd closed its control socket")
                data += chunk
                try:
                    answer, _ = self.decoder.raw_decode(data.decode())
                    break
                except ValueError:      # not all of it yet
                    continue
        except OSError as exc:
            raise DatapathError(f"{method}: {exc}") from None
        if answer.get("error"):
            raise DatapathError(f"{method}: {str(answer['error']).strip()}")
        return answer.get("result") or ""

    def close(self) -> None:
        self.sock.close()


def outputs(actions: str) -> list[str]:
    """The ports an action list outputs to: its top-level items that are bare names (not set(...), hash(...),
    recirc(...), drop ...)."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(actions + ","):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(actions[start:i].strip())
            start = i + 1
    return [a for a in items if a and "(" not in a and a != "drop"]


def flows(text: str, ports: set[str]):
    """(flow, in_port, bytes, outputs) for each datapath flow in `dpctl/dump-flows --names` text whose input port
    is one of `ports`; flow: its match, which names it within a dump."""
    for line in text.splitlines():
        m = FLOW.search(line)
        if m and m.group(1) in ports:
            yield line[:line.index(", packets:")], m.group(1), int(m.group(2)), outputs(m.group(3))


class PortToPort:
    """Bytes from port to port, for the (in, out) pairs wanted, between one read and the next."""

    def __init__(self, pairs: set[tuple[str, str]], control: Control | None = None):
        self.pairs = pairs
        self.inputs = {i for i, _ in pairs}
        self.control = control or Control()
        self.datapaths = self.control.call("dpctl/dump-dps").split()
        self.last: dict[tuple[str, str], int] = {}      # (datapath, flow) -> its bytes at the last read

    def read(self) -> dict[tuple[str, str], int]:
        sent: dict[tuple[str, str], int] = {}
        seen = {}
        for dp in self.datapaths:
            for flow, port, count, outs in flows(self.control.call("dpctl/dump-flows", "--names", dp), self.inputs):
                key = (dp, flow)
                before = self.last.get(key, 0)
                grew = count - before if count >= before else count   # a smaller count: a new flow of that match
                seen[key] = count
                for out in outs:
                    if (port, out) in self.pairs and grew:
                        sent[(port, out)] = sent.get((port, out), 0) + grew
        self.last = seen
        return sent

    def close(self) -> None:
        self.control.close()
