"""The queues of the shaped ports, sampled over a run: every shaped link end's backlog (bytes and packets) and
drop counters, read from its root qdisc by netlink, and drawn by testbed/results/queues.py.

A shaped link has a rate limiter (tbf) at both ends: a host's end is ethN in the host's namespace, a switch's
end is its port device in the root namespace (the switch sends into it, so its queue is what waits to go out
of that switch port). The port's configured queue is read from the qdisc itself (tbf's `limit`), so it is the
one in force whatever set it.

One thread samples the whole fabric: it opens one netlink socket in each namespace (a socket stays in the
namespace it was made in) and dumps each namespace's qdiscs once per sample. Decoding a qdisc's message costs
~0.1 ms of CPU, so a fabric with many ports (or a root namespace with many devices) costs more per sample: the
period then stretches so that the sampler stays within CPU_BUDGET of a core (results.json records the period
kept). Every `device_every`-th sample it
also reads each port device's own drop counter (tx_dropped: frames the device could not send, as when a cut
took its carrier away), which the report tells apart from the queue's overflow drops.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from pyroute2 import IPRoute

from testbed.fabric.linuxcalls import netns
from testbed.fabric.links import interface

TC_H_ROOT = 0xFFFFFFFF
PERIOD_S = 0.05             # fine enough to see a queue build: a NIC queue drains in tenths of a second
CPU_BUDGET = 0.05           # of a core: where a sample costs more (many ports), the period stretches to fit
DEVICE_EVERY = 10           # the devices' drop counters every 10th sample (a netlink request per port)


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


def root_qdiscs(messages) -> dict[int, Qdisc]:
    """ifindex -> its root qdisc, from RTM_NEWQDISC messages (pyroute2's get_qdiscs)."""
    out = {}
    for m in messages:
        if m["parent"] != TC_H_ROOT:
            continue
        kind = m.get_attr("TCA_KIND")
        stats = m.get_attr("TCA_STATS2")
        queue = stats.get_attr("TCA_STATS_QUEUE") if stats else None
        if queue is None:
            continue
        limit = None
        if kind == "tbf":
            options = m.get_attr("TCA_OPTIONS")
            parms = options.get_attr("TCA_TBF_PARMS") if options else None
            limit = parms["limit"] if parms else None
        out[m["index"]] = Qdisc(kind, queue["backlog"], queue["qlen"], queue["drops"], limit)
    return out


class _Namespace:
    """One namespace's netlink socket and the indexes of its ports' devices."""

    def __init__(self, path: str | None, ports: list[Port]):
        with netns(path):
            self.ipr = IPRoute()
        self.ports, self.index = ports, {}

    def lookup(self) -> None:
        """Device indexes of ports not yet known (a device re-created gets a new one: looked up again)."""
        for p in self.ports:
            if p.name not in self.index:
                found = self.ipr.link_lookup(ifname=p.dev)
                if found:
                    self.index[p.name] = found[0]

    def read(self) -> dict[str, Qdisc]:
        self.lookup()
        qdiscs = root_qdiscs(self.ipr.get_qdiscs())
        out = {}
        for p in self.ports:
            q = qdiscs.get(self.index.get(p.name))
            if q is None:
                self.index.pop(p.name, None)       # gone or re-created: look it up next time
            else:
                out[p.name] = q
        return out

    def device_drops(self) -> dict[str, int]:
        out = {}
        for p in self.ports:
            if p.name in self.index:
                try:
                    link = self.ipr.get_links(self.index[p.name])[0]
                except Exception:  # noqa: BLE001  the device went away meanwhile
                    continue
                stats = link.get_attr("IFLA_STATS64") or {}
                out[p.name] = stats.get("tx_dropped", 0)
        return out

    def close(self) -> None:
        self.ipr.close()


class QueueSampler:
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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-queues")

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

    def start(self) -> "QueueSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

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
