"""The queues of the shaped ports, sampled over a run: every shaped link end's backlog (bytes and packets) and
drop counters, read from its root qdisc by netlink, and drawn by testbed/results/queues.py.

A shaped link has a rate limiter (tbf) at both ends: a host's end is ethN in the host's namespace, a switch's
end is its port device in the root namespace (the switch sends into it, so its queue is what waits to go out
of that switch port). The port's configured queue is read from the qdisc itself (tbf's `limit`), so it is the
one in force whatever set it.

One thread samples the whole fabric: it opens one netlink socket (pyroute2's) in each namespace (a socket
stays in the namespace it was made in) and dumps each namespace's qdiscs once per sample, reading of each
message only the fields it needs. Where a sample still costs more than CPU_BUDGET of a core at the period
asked (a very large fabric, a root namespace with very many devices), the period stretches to stay within it
(results.json records the period kept). Every `device_every`-th sample it also dumps each namespace's devices
for their own drop counters (tx_dropped: frames a device could not send, as when a cut took its carrier away),
which the report tells apart from the queues' overflow drops.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_GETQDISC
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from testbed.fabric.linuxcalls import netns
from testbed.fabric.links import interface
from testbed.fabric.rtnl import RTM_NEWQDISC, TBF_LIMIT_AT, TC_H_ROOT, TCA_KIND, TCA_OPTIONS, TCA_STATS2, \
    TCA_STATS_QUEUE, TCA_TBF_PARMS, TCMSG, attributes, devices, dump, messages
from testbed.monitor.background import Background

PERIOD_S = 0.05             # fine enough to see a queue build: a NIC queue drains in tenths of a second
CPU_BUDGET = 0.05           # of a core: where a sample costs more (many ports), the period stretches to fit
DEVICE_EVERY = 10           # the devices' drop counters every 10th sample (a device dump per namespace)


@dataclass(frozen=True)
class Port:
    """One shaped link end: the queue of what `node` sends to `peer`."""
    node: str
    peer: str
    link: str              # "A-B" as cabled
    tier: str              # nic | hb | uplink | frontend
    dev: str               # the device in its namespace
    netns: str | None      # /proc/PID/ns/net of a host, None: the root namespace

    @property
    def name(self) -> str:
        return f"{self.node}>{self.peer}"


@dataclass(frozen=True)
class Qdisc:
    """What a root qdisc reports: its backlog and drop counter, its kind and configured queue (bytes; None
    where the kind has no byte limit)."""
    kind: str
    backlog_bytes: int
    backlog_packets: int
    drops: int
    limit_bytes: int | None


def shaped_ports(net) -> list[Port]:
    """Both ends of every shaped link emulated on this machine (links between machines are VXLAN, measured
    there), spares' reserved circuits included."""
    fabric = net.fabric
    links = fabric.links + [c for cs in fabric.circuits.values() for c in cs[1:]]
    out, seen = [], set()
    for l in links:
        if net.is_patch(l):
            continue
        for node, port, peer in ((l.a, l.a_port, l.b), (l.b, l.b_port, l.a)):
            if net.machine_of(node) is not None or (node, port) in seen:
                continue
            seen.add((node, port))
            ns = f"/proc/{net.host(node).pid}/ns/net" if node in fabric.hosts else None
            out.append(Port(node, peer, f"{l.a}-{l.b}", l.kind, interface(fabric, node, port), ns))
    return out


def root_qdiscs(chunks: list[bytes]) -> dict[int, Qdisc]:
    """ifindex -> its root qdisc, from an RTM_GETQDISC dump's messages."""
    out = {}
    for kind, data, start, end in messages(chunks):
        if kind != RTM_NEWQDISC:
            continue
        index, _, parent = struct.unpack_from("=iII", data, start + 4)
        if parent != TC_H_ROOT:
            continue
        nla = attributes(data, start + TCMSG, end)
        if TCA_KIND not in nla or TCA_STATS2 not in nla:
            continue
        name = data[slice(*nla[TCA_KIND])].rstrip(b"\0").decode()
        queue = attributes(data, *nla[TCA_STATS2]).get(TCA_STATS_QUEUE)
        if queue is None:
            continue
        qlen, backlog, drops = struct.unpack_from("=III", data, queue[0])
        limit = None
        if name == "tbf" and TCA_OPTIONS in nla:
            parms = attributes(data, *nla[TCA_OPTIONS]).get(TCA_TBF_PARMS)
            if parms:
                limit = struct.unpack_from("=I", data, parms[0] + TBF_LIMIT_AT)[0]
        out[index] = Qdisc(name, backlog, qlen, drops, limit)
    return out


class _Namespace:
    """One namespace's netlink socket and the indexes of its ports' devices."""

    def __init__(self, path: str | None, ports: list[Port]):
        with netns(path):
            self.ipr = IPRoute()
        self.ports, self.index = ports, {}

    def devices(self) -> dict[str, tuple[int, int]]:
        """Its devices now (index, tx_dropped); refreshes the ports' indexes."""
        found = devices(dump(self.ipr, ifinfmsg(), RTM_GETLINK))
        self.index = {p.name: found[p.dev][0] for p in self.ports if p.dev in found}
        return found

    def read(self) -> dict[str, Qdisc]:
        if len(self.index) < len(self.ports):
            self.devices()                         # a device not yet seen, or re-created (a new index)
        qdiscs = root_qdiscs(dump(self.ipr, tcmsg(), RTM_GETQDISC))
        out = {}
        for p in self.ports:
            q = qdiscs.get(self.index.get(p.name))
            if q is None:
                self.index.pop(p.name, None)       # gone or re-created: look it up next time
            else:
                out[p.name] = q
        return out

    def device_drops(self) -> dict[str, int]:
        found = self.devices()
        return {p.name: found[p.dev][1] for p in self.ports if p.dev in found}

    def close(self) -> None:
        self.ipr.close()


class QueueSampler(Background):
    """Samples every port's queue in a thread:
    samples = [(epoch, {port name: (backlog bytes, backlog packets, qdisc drops)})],
    device_drops = [(epoch, {port name: tx_dropped})], and each port's last seen qdisc kind and limit.
    A port whose device or qdisc is missing from a sample (its host restarted, its link re-created) is left out
    of that sample; the others are kept. cpu_s is the sampling thread's own CPU time."""

    def __init__(self, ports: list[Port], period: float = PERIOD_S, device_every: int = DEVICE_EVERY,
                 cpu_budget: float = CPU_BUDGET):
        self.ports, self.period, self.device_every, self.cpu_budget = ports, period, device_every, cpu_budget
        self.samples: list[tuple[float, dict[str, tuple[int, int, int]]]] = []
        self.device_drops: list[tuple[float, dict[str, int]]] = []
        self.kinds: dict[str, str] = {}
        self.limits: dict[str, int | None] = {}
        self.cpu_s = 0.0
        self.started = self.ended = None
        self.ecn: dict[str, dict[str, int]] = {}   # switch port device -> its ECN counters at the end (fabric.ecn)
        self.pfc: dict = {}                        # the pause process's counters at the end (fabric.pfc)
        super().__init__("tb-queues")

    @classmethod
    def of(cls, net, **kwargs) -> "QueueSampler":
        return cls(shaped_ports(net), **kwargs)

    def _open(self) -> list[_Namespace]:
        by_ns: dict = {}
        for p in self.ports:
            by_ns.setdefault(p.netns, []).append(p)
        out = []
        for path, ports in by_ns.items():
            try:
                out.append(_Namespace(path, ports))
            except OSError:
                continue                          # a host that is already gone: its ports are never sampled
        return out

    def sample(self, namespaces: list[_Namespace], devices: bool) -> None:
        """One sample of every namespace now (the thread's step)."""
        now, queues, drops = time.time(), {}, {}
        for ns in namespaces:
            try:
                read = ns.read()
                if devices:
                    drops.update(ns.device_drops())
            except OSError:
                continue
            for name, q in read.items():
                queues[name] = (q.backlog_bytes, q.backlog_packets, q.drops)
                self.kinds[name], self.limits[name] = q.kind, q.limit_bytes
        if queues:
            self.samples.append((now, queues))
        if drops:
            self.device_drops.append((now, drops))

    def _run(self) -> None:
        cpu0 = time.thread_time()
        self.started = time.monotonic()
        namespaces = self._open()
        try:
            k = 0
            while True:
                began, cpu = time.monotonic(), time.thread_time()
                try:
                    self.sample(namespaces, devices=k % self.device_every == 0)
                except Exception:  # noqa: BLE001  the sampler must never end a run; a lost sample is a gap
                    pass
                k += 1
                period = max(self.period, (time.thread_time() - cpu) / self.cpu_budget)
                if self._stop.wait(max(0.0, period - (time.monotonic() - began))):
                    break
            self.sample(namespaces, devices=True)          # the counters at the stop: the last word on drops
        finally:
            for ns in namespaces:
                ns.close()
            self.ended = time.monotonic()
            self.cpu_s = time.thread_time() - cpu0

    def mean_period(self) -> float | None:
        """The period kept: the mean interval between samples."""
        if len(self.samples) < 2:
            return None
        return (self.samples[-1][0] - self.samples[0][0]) / (len(self.samples) - 1)

    def cpu_share(self) -> float | None:
        """The thread's CPU time over its wall time (1 = a whole core)."""
        if self.started is None or self.ended is None or self.ended <= self.started:
            return None
        return self.cpu_s / (self.ended - self.started)
