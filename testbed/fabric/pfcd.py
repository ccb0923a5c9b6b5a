"""The pause process of fabric.pfc (pfc.py): reads the congestion points' queues every period, and the switches'
flow counters (what each upstream port sent into each queue, dpflows.py) as often as the queues need them, and
closes and opens the upstream ports' gates as pfc.Pausing says.

    python -m testbed.fabric.pfcd --tag TAG       (the tag only names it for `testbed clean`)

Commands on stdin, one JSON object a line, each answered with one on stdout:
    {"op": "start", "plan": Plan.to_json(), "period_s": S}   gates ready (their kick filters), then the loop runs
    {"op": "stats"}                                           the counters so far
End of input: every paused gate is opened, and the process exits.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import select
import socket
import struct
import sys
import time

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_GETQDISC
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from testbed.fabric.dpflows import DatapathError, PortToPort
from testbed.fabric.ecn import PauseClock
from testbed.fabric.linuxcalls import bpf_load, bpf_map_fd, bpf_map_write, netns
from testbed.fabric.links import GATE_BURST, GATE_OPEN
from testbed.fabric.pfc import PAUSED_FRAME_S, Gate, Pausing, Plan, QueueParts
from testbed.fabric.rtnl import RTM_NEWQDISC, TC_H_ROOT, TCA_STATS2, TCA_STATS_QUEUE, TCMSG, attributes, devices, dump, \
    messages

HTB = 0x00100000            # the port's htb, 10: (tc handles are hex)
GATE_PARENT = 0x00100002    # the data class, 10:2
GATE = 0x00120000           # the gate, 12:
KICK_PREF = 2               # after the heartbeats' filter (pref 1) on the htb
ETH_P_PAUSE = 0x8808        # MAC control: what a real port's pause frames are
SKB_PROTOCOL = 16           # offsetof(struct __sk_buff, protocol): the ethertype, network order
TC_ACT_STOLEN, TC_ACT_UNSPEC = 4, -1
# a PFC frame (802.1Qbb): to the MAC-control address, opcode 0x0101, no class paused: only its arrival matters
KICK_FRAME = bytes.fromhex("0180c2000001" "020000000000" "8808" "0101" "0000") + bytes(46)
FLOWS_BUSY_S = 0.01         # the flow counters are read this often while a queue is building (above half Xon)
FLOWS_IDLE_S = 0.1          # and this often otherwise; at once when a queue passes Xoff


def paused_gate(mtu: int) -> tuple[str, int]:
    """A closed gate's rate and bucket: one frame, refilled in PAUSED_FRAME_S. tbf keeps its bucket as the time the
    rate takes to fill it, in at most 2^32 ns (4.3 s): a slower rate would shrink the bucket below a frame, and
    tbf drops what does not fit its bucket."""
    burst = mtu + 100
    return f"{math.ceil(burst * 8 / PAUSED_FRAME_S)}bit", burst


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def kick_program() -> bytes:
    """tc direct action on the port's htb: MAC-control frames are taken (the kick's job is done once it reached
    the qdisc), every other frame goes on to the next filter."""
    return b"".join([
        insn(0x61, dst=2, src=1, off=SKB_PROTOCOL),                # r2 = skb->protocol
        insn(0x55, dst=2, off=2, imm=socket.htons(ETH_P_PAUSE)),   # if r2 != MAC control: goto next
        insn(0xb7, dst=0, imm=TC_ACT_STOLEN),
        insn(0x95),
        insn(0xb7, dst=0, imm=TC_ACT_UNSPEC),                     # next: the following filter classifies it
        insn(0x95)])


class Namespace:
    """One namespace's netlink socket, and a packet socket per gate in it to send kicks on."""

    def __init__(self, path: str | None):
        self.path = path
        with netns(path):
            self.ipr = IPRoute()
        self.index: dict[str, int] = {}
        self.kick: dict[str, socket.socket] = {}
        self.marking: dict[str, tuple[int, PauseClock]] = {}    # dev -> its ECN program's pause map (fd), clock

    def add_gate(self, gate: Gate) -> None:
        found = devices(dump(self.ipr, ifinfmsg(), RTM_GETLINK))
        self.index[gate.dev] = found[gate.dev][0]
        with netns(self.path):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        sock.bind((gate.dev, 0))
        self.kick[gate.dev] = sock
        fd = bpf_load(kick_program(), name=b"tb_pfc_kick")
        try:
            self.ipr.tc("replace-filter", "bpf", self.index[gate.dev], parent=HTB, prio=KICK_PREF, fd=fd,
                        name="tb-pfc-kick", direct_action=True)
        finally:
            os.close(fd)
        if gate.ecn_pause is not None:
            self.marking[gate.dev] = (bpf_map_fd(gate.ecn_pause), PauseClock())

    def set_gate(self, gate: Gate, paused: bool) -> None:
        rate, burst = paused_gate(gate.mtu) if paused else (GATE_OPEN, GATE_BURST)
        self.ipr.tc("change", "tbf", self.index[gate.dev], handle=GATE, parent=GATE_PARENT, rate=rate, burst=burst,
                    limit=gate.limit)
        if gate.dev in self.marking:        # its marking program's virtual queue stops and starts with it
            fd, clock = self.marking[gate.dev]
            now = time.monotonic_ns()
            bpf_map_write(fd, 0, clock.pause(now) if paused else clock.resume(now))
        if not paused:
            self.kick[gate.dev].send(KICK_FRAME)

    def close(self) -> None:
        for sock in self.kick.values():
            sock.close()
        for fd, _ in self.marking.values():
            os.close(fd)
        self.ipr.close()


def backlogs(chunks: list[bytes], wanted: dict[int, str]) -> dict[str, int]:
    """Point name -> its root qdisc's backlog (bytes), from an RTM_GETQDISC dump; only the wanted devices'
    messages are read further than their header."""
    out = {}
    for kind, data, start, end in messages(chunks):
        if kind != RTM_NEWQDISC:
            continue
        index, _, parent = struct.unpack_from("=iII", data, start + 4)
        if parent != TC_H_ROOT or index not in wanted:
            continue
        stats = attributes(data, start + TCMSG, end).get(TCA_STATS2)
        queue = attributes(data, *stats).get(TCA_STATS_QUEUE) if stats else None
        if queue:
            out[wanted[index]] = struct.unpack_from("=III", data, queue[0])[1]
    return out


class Watcher:
    def __init__(self, plan: Plan, period_s: float):
        self.plan, self.period_s = plan, period_s
        self.logic = Pausing(plan.points)
        self.namespaces: dict[str | None, Namespace] = {None: Namespace(None)}
        for gate in plan.gates.values():
            if gate.netns not in self.namespaces:
                self.namespaces[gate.netns] = Namespace(gate.netns)
            self.namespaces[gate.netns].add_gate(gate)
        root = self.namespaces[None]
        found = devices(dump(root.ipr, ifinfmsg(), RTM_GETLINK))
        self.wanted = {found[p.dev][0]: p.name for p in plan.points if p.dev in found}
        self.polls, self.errors, self.last_error = 0, 0, None
        self.parts = QueueParts()
        self.feeding = {(i, p.dev): (p.name, g) for p in plan.points for g, i in zip(p.feeds, p.ingress)}
        self.flows: PortToPort | None = None
        self.flow_reads, self.flows_at = 0, 0.0
        if self.feeding:
            try:
                self.flows = PortToPort(set(self.feeding))
                self.flows.read()           # the counters so far: only what comes after counts
            except DatapathError as exc:    # no flow counters: every feed of a queue past Xoff is paused
                self.errors += 1
                self.last_error = f"reading the flow counters: {exc}"
                self.flows = None
        self.cpu0 = time.process_time()

    def poll(self) -> None:
        try:
            queues = backlogs(dump(self.namespaces[None].ipr, tcmsg(), RTM_GETQDISC), self.wanted)
        except OSError as exc:      # a dump another fabric's changes interrupted: the next poll reads again
            self.errors += 1
            self.last_error = f"reading the queues: {exc}"
            return
        now = time.monotonic()
        self.read_flows(now, queues)
        parts = {n: self.parts.parts(n, q) for n, q in queues.items()
                 if n in self.logic.asserting or q > self.logic.points[n].xoff}
        pause, resume = self.logic.step(now, queues, parts)
        self.polls += 1
        self.apply(pause, True)
        self.apply(resume, False)

    def read_flows(self, now: float, queues: dict[str, int]) -> None:
        """Adds what each feed sent into each point since the last reading, when one is due."""
        if self.flows is None:
            return
        points = self.logic.points
        building = any(2 * q > points[n].xon for n, q in queues.items())
        if not (self.logic.crossing(queues) or now - self.flows_at >= (FLOWS_BUSY_S if building else FLOWS_IDLE_S)):
            return
        try:
            sent = self.flows.read()
        except DatapathError as exc:
            self.errors += 1
            self.last_error = f"reading the flow counters: {exc}"
            return
        self.flows_at, self.flow_reads = now, self.flow_reads + 1
        into: dict[str, dict[str, int]] = {}
        for pair, n in sent.items():
            point, gate = self.feeding[pair]
            into.setdefault(point, {})[gate] = n
        for point, batch in into.items():
            self.parts.add(point, batch)

    def apply(self, names: list[str], paused: bool) -> None:
        for name in names:
            gate = self.plan.gates[name]
            try:
                self.namespaces[gate.netns].set_gate(gate, paused)
            except (OSError, KeyError) as exc:     # a host gone or restarted: its port is not there to pause
                self.errors += 1
                self.last_error = f"{name}: {exc}"

    def stats(self) -> dict:
        return {**self.logic.counters(time.monotonic()), "polls": self.polls, "flow_reads": self.flow_reads,
                "errors": self.errors,
                "last_error": self.last_error, "cpu_s": round(time.process_time() - self.cpu0, 3)}

    def close(self) -> None:
        self.apply(self.logic.release(time.monotonic()), False)
        for ns in self.namespaces.values():
            ns.close()
        if self.flows:
            self.flows.close()


def reply(answer: dict) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", default="")
    parser.parse_args()
    watcher = None
    stdin = sys.stdin.fileno()
    buffered = b""
    try:
        while True:
            timeout = watcher.period_s if watcher else None
            ready, _, _ = select.select([stdin], [], [], timeout)
            if watcher:
                watcher.poll()
            if not ready:
                continue
            data = os.read(stdin, 1 << 16)
            if not data:
                return
            buffered += data
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                cmd = json.loads(line)
                try:
                    if cmd["op"] == "start":
                        watcher = Watcher(Plan.from_json(cmd["plan"]), cmd.get("period_s", 0.002))
                        reply({"ok": True})
                    elif cmd["op"] == "stats":
                        reply({"ok": True, **(watcher.stats() if watcher else {})})
                    else:
                        reply({"ok": False, "error": f"unknown op {cmd['op']!r}"})
                except Exception as exc:  # noqa: BLE001  the answer carries it; the caller decides
                    reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        if watcher:
            watcher.close()


if __name__ == "__main__":
    main()
