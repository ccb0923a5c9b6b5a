"""Delay-based congestion control for paced RC queue pairs (Swift's rules, applied to a rate).

Without congestion control, senders paced at their NIC's rate overrun an oversubscribed uplink: its
queue overflows, go-back-N resends whole windows into the same queue, and goodput collapses. RoCE
NICs avoid this with DCQCN (ECN marks and CNPs) or with delay-based schemes (TIMELY, Swift); this
one needs nothing from the switches, so it works on any fabric the testbed builds.

The queue pair measures one round trip at a time (rc.py: an ACK request on a first transmission,
timed until the ACK covers it) and hands each sample here. Below the target delay the rate grows additively,
above it shrinks in proportion to the excess, at most once per round trip (Kumar et al., "Swift:
Delay is Simple and Effective for Congestion Control in the Datacenter", SIGCOMM 2020). A NAK or a
retransmission timeout halves it. The target is the least round trip seen plus the time `target_pkts`
packets take at the line rate: the queue each sender may keep, in units that scale with the link.
"""
from __future__ import annotations

import math


class DelayCC:
    def __init__(self, line_bps: float, packet_bytes: int, *, target_pkts: float = 8, ai: float = 0.05,
                 beta: float = 0.8, max_mdf: float = 0.5, min_fraction: float = 0.01):
        self.packet_bytes = packet_bytes
        self.target_pkts, self.ai, self.beta, self.max_mdf = target_pkts, ai, beta, max_mdf
        self.min_fraction = min_fraction
        self.line_bps = line_bps
        self.rate_bps = line_bps            # start at line rate, as RoCE NICs do
        self.base_rtt = math.inf
        self.last_rtt = None
        self._last_decrease = -math.inf
        self.samples = self.decreases = 0

    def set_line_rate(self, bps: float) -> None:
        """The QP's pacing ceiling changed (e.g. the communicator re-shares a link)."""
        self.line_bps = bps
        self.rate_bps = min(self.rate_bps, bps)

    def target(self) -> float:
        return self.base_rtt + self.target_pkts * self.packet_bytes * 8 / self.line_bps

    def rtt_sample(self, rtt: float, now: float) -> None:
        """One round trip measured by the QP (a probe's ACK, `now` when it arrived)."""
        self.samples += 1
        self.last_rtt = rtt
        self.base_rtt = min(self.base_rtt, rtt)
        target = self.target()
        if rtt <= target:
            self.rate_bps += self.ai * self.line_bps
        elif now - self._last_decrease >= rtt:
            self._decrease(max(1 - self.beta * (rtt - target) / rtt, 1 - self.max_mdf), now)
        self.rate_bps = min(self.rate_bps, self.line_bps)

    def lost(self, now: float) -> None:
        """A NAK or a retransmission timeout."""
        rtt = self.last_rtt or 0.0
        if now - self._last_decrease >= rtt:
            self._decrease(1 - self.max_mdf, now)

    def _decrease(self, factor: float, now: float) -> None:
        self.rate_bps = max(self.rate_bps * factor, self.min_fraction * self.line_bps)
        self._last_decrease = now
        self.decreases += 1

    # DCQCN's signals and timers (hosts/rdma/dcqcn.py), which the delay-based control does not use
    wake_at = math.inf

    def cnp(self, now: float) -> None:
        pass

    def advance(self, now: float) -> None:
        pass

    def sent(self, nbytes: int, now: float) -> None:
        pass
