"""Switch port counters sampled over a run: the utilisation-over-time plot and the per-link heatmap
(testbed/results/heatmap.py) are drawn from them."""
from __future__ import annotations

import subprocess
import time

from testbed.fabric import ovs
from testbed.monitor.background import Background


def counter_delta(then: int, now: int) -> int:
    """How much a counter grew between two samples; a port re-created meanwhile (a cut patch link, a spare
    recabled) restarts from 0, so a counter that went down counts what it holds now."""
    return now - then if now >= then else now


class Timeline(Background):
    """Samples the tx and rx byte counters of every SDN switch port in a thread:
    samples = [(epoch, {"SWITCH:PORT": (tx_bytes, rx_bytes)})].

    A sample costs one revalidator-round wait and one `ovs-ofctl dump-ports` per switch. The wait makes
    patch-port counters current (OVS credits them once per revalidator round, ~0.5 s), so with patch
    uplinks the rounds set the pace whenever `period` is shorter. A switch that is gone or being
    reconfigured (a switch-down fault) is missing from that sample, the others are kept."""

    def __init__(self, net, period: float = 0.25):
        self.net, self.period = net, period
        self.samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
        super().__init__("tb-timeline")

    def sample(self) -> None:
        """Take one sample now (the thread's step; callable directly). Each machine's switches are read on it."""
        bridges = self.net.sdn_bridges()
        groups = {machine: (machine.run if machine else None, group)
                  for machine, group in self.net.bridges_by_machine().items()}
        for run, _ in groups.values():
            try:
                ovs.wait_revalidators(run)
            except (OSError, subprocess.TimeoutExpired):
                pass                     # counters of veth ports are current anyway
        now, ports = time.time(), {}     # after the waits: the counters are of now
        for run, group in groups.values():
            for bridge in group:
                try:
                    counters = ovs.dump_ports(bridge, run)
                except (ovs.OVSError, OSError, subprocess.TimeoutExpired):
                    continue
                ports.update({f"{bridges[bridge]}:{p}": (c["tx_bytes"], c["rx_bytes"]) for p, c in counters.items()})
        if ports:
            self.samples.append((now, ports))

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.sample()
            except Exception:  # noqa: BLE001  the sampler must never end a run; a lost sample is a gap
                pass
            if self._stop.wait(max(0.0, self.period - (time.monotonic() - started))):
                return

    def rates(self, ports: list[str]) -> tuple[list[float], list[float]]:
        """(mid-interval times, Mbit/s out of `ports`, summed) between consecutive samples."""
        times, mbps = [], []
        for (t0, a), (t1, b) in zip(self.samples, self.samples[1:]):
            moved = sum(counter_delta(a[p][0], b[p][0]) for p in ports if p in a and p in b)
            times.append((t0 + t1) / 2)
            mbps.append(moved * 8 / (t1 - t0) / 1e6)
        return times, mbps
