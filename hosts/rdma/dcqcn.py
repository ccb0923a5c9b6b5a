"""DCQCN's reaction point: the rate of an RC queue pair driven by congestion notification packets (CNPs).

Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015. Switches mark ECN's CE on
packets queued above a threshold; the receiver answers them with CNPs (at most one per queue pair per CNP
interval, engine.py); the sender here

- on a CNP: target Rt <- Rc, Rc <- Rc (1 - alpha/2) (at most once per rate_reduce_monitor_period, never below
  the minimum rate, never by more than rpg_min_dec_fac), then alpha <- (1 - g) alpha + g. As ConnectX does
  (clamp_tgt_rate 0, clamp_tgt_rate_after_time_inc 1), the target takes the current rate only if the timer has
  raised the rate since the last cut: a run of cuts on one congestion episode keeps the rate before it as the
  target, which fast recovery then climbs back to (clamp_tgt_rate 1 gives the paper's rule, Rt <- Rc on every
  cut, which leaves a sender whose marks arrived a queue late far below its share);
- every alpha period without a CNP: alpha <- (1 - g) alpha;
- after a cut, counts rate-increase timer periods (T) and rpg_byte_reset-byte chunks sent (BC); each time one
  of them advances it raises the rate: while both are below F, fast recovery Rc <- (Rt + Rc) / 2; once one
  passes F, additive increase Rt += R_AI first; once both do, hyper increase Rt += R_HAI first (a fixed step, as
  the authors' simulator does). A cut resets both counters. Delay and loss are not its signals.

Defaults are ConnectX's (the firmware's DCQCN parameters, named as MLNX_OFED names them), with three exceptions
from the paper: F = 5 stages (rpg_threshold), the CNP interval N = 50 us and, with it, the alpha timer's 55 us
(dce_tcp_rtt). The last two go together: alpha rises once per CNP and decays once per alpha period, so ConnectX's
1 us period against CNPs 50 us apart decays it fifty times per rise and holds it near 1/50 under any congestion;
each cut is then ~1% and an incast's queue stays at its buffer.

Scaling. A fabric with `fabric.time_scale: K` runs a real fabric's rates divided by K and its delays multiplied
by K, so a packet takes K times longer and a bandwidth-delay product holds the same number of packets. DCQCN is
scaled the same way: every timer (rate increase, alpha, rate-reduce monitor period, CNP interval) x K, every rate
(R_AI, R_HAI, the minimum rate) / K, and byte counts unchanged. Each of its loops then sees the same number of
packets, round trips and timer ticks per event as on the real fabric, so the dynamics are the real ones in slow
motion. Left unscaled, a 300 us timer fires every few packets of a 10 Mbit/s link and R_AI = 5 Mbit/s is half
of it: DCQCN would not be DCQCN. Without a time scale (K = 1) the parameters are ConnectX's as they stand.

Every method takes the time (`now`, seconds, any monotonic clock): timers are evaluated lazily when the queue
pair sends or hears a CNP, and a test can drive them with a fake clock.
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class DcqcnParams:
    """DCQCN's parameters as on a real fabric (before time scaling), ConnectX's names and defaults."""
    dce_tcp_g: int = 1019                        # alpha gain, g = (1024 - dce_tcp_g) / 1024 (~1/205)
    dce_tcp_rtt_us: float = 55                   # the alpha timer's period (the paper's; ConnectX ships 1)
    initial_alpha_value: int = 1023              # alpha on the first CNP, /1024
    rpg_min_dec_fac: int = 50                    # largest cut per CNP, percent
    rpg_min_rate_mbps: float = 1                 # the rate never falls below it
    rate_reduce_monitor_period_us: float = 4     # at most one cut per period
    rpg_time_reset_us: float = 300               # the rate-increase timer's period
    rpg_byte_reset: int = 32767                  # bytes sent per byte-counter stage
    rpg_threshold: int = 5                       # F: stages of fast recovery (the paper's; ConnectX ships 1)
    rpg_ai_rate_mbps: float = 5                  # R_AI, additive increase
    rpg_hai_rate_mbps: float = 50                # R_HAI, hyper increase
    cnp_interval_us: float = 50                  # notification point: one CNP per QP per interval (N)
    clamp_tgt_rate: int = 0                      # 1: Rt <- Rc on every cut; 0: only after a timer increase

    @property
    def g(self) -> float:
        return (1024 - self.dce_tcp_g) / 1024


def cnp_interval(time_scale: float = 1.0, params: DcqcnParams = DcqcnParams()) -> float:
    """The notification point's CNP interval in seconds under `time_scale`."""
    return params.cnp_interval_us * 1e-6 * time_scale


class DcqcnCC:
    """The rate of one queue pair under DCQCN. Same interface as cc.DelayCC (rate_bps, decreases,
    set_line_rate, rtt_sample, lost) plus cnp(now) and sent(nbytes, now)."""

    def __init__(self, line_bps: float, *, time_scale: float = 1.0, params: DcqcnParams | None = None,
                 **overrides):
        p = dataclasses.replace(params or DcqcnParams(), **overrides)
        if time_scale < 1 or p.rpg_threshold < 1 or p.rpg_byte_reset < 1 or not 0 <= p.dce_tcp_g <= 1024:
            raise ValueError(f"bad DCQCN parameters (time_scale {time_scale}): {p}")
        self.params, self.time_scale = p, time_scale
        us = 1e-6 * time_scale
        self.g, self.F = p.g, p.rpg_threshold
        self.alpha_period = p.dce_tcp_rtt_us * us
        self.reduce_period = p.rate_reduce_monitor_period_us * us
        self.time_reset = p.rpg_time_reset_us * us
        self.byte_reset = p.rpg_byte_reset
        self.ai_bps = p.rpg_ai_rate_mbps * 1e6 / time_scale
        self.hai_bps = p.rpg_hai_rate_mbps * 1e6 / time_scale
        self.min_bps = p.rpg_min_rate_mbps * 1e6 / time_scale
        self.max_cut = p.rpg_min_dec_fac / 100
        self.clamp_always = bool(p.clamp_tgt_rate)
        self.line_bps = line_bps
        self.rate_bps = self.target_bps = line_bps     # Rc, Rt: start at line rate, as NICs do
        self.alpha = p.initial_alpha_value / 1024
        self.t_stage = self.b_stage = 0                 # T and BC
        self._bytes = 0                                 # sent since the last byte-counter stage
        self._inc_at = math.inf                         # next rate-increase timer expiry (armed by a cut)
        self._alpha_at = math.inf                       # next alpha timer expiry (armed by a CNP)
        self._last_cut = -math.inf
        self.decreases = self.increases = self.cnps = 0

    @property
    def wake_at(self) -> float:
        """When the rate-increase timer next raises the rate (inf: not recovering)."""
        return self._inc_at

    @property
    def recovering(self) -> bool:
        """Cut and not yet back at line rate (the timer and byte counter run)."""
        return self._inc_at != math.inf

    def set_line_rate(self, bps: float) -> None:
        """The QP's pacing ceiling changed: a QP at line rate follows it, one recovering is capped by it."""
        if not self.recovering:
            self.rate_bps = self.target_bps = bps
        self.line_bps = bps
        self.rate_bps, self.target_bps = min(self.rate_bps, bps), min(self.target_bps, bps)

    def cnp(self, now: float) -> None:
        """A CNP for this queue pair arrived."""
        self.advance(now)
        self.cnps += 1
        if now - self._last_cut >= self.reduce_period:
            if self.clamp_always or self.t_stage > 0:
                self.target_bps = self.rate_bps
            self.rate_bps = max(self.rate_bps * max(1 - self.alpha / 2, 1 - self.max_cut), self.min_bps)
            self._last_cut = now
            self.decreases += 1
            self.t_stage = self.b_stage = self._bytes = 0
            self._inc_at = now + self.time_reset
        self.alpha = (1 - self.g) * self.alpha + self.g
        self._alpha_at = now + self.alpha_period

    def sent(self, nbytes: int, now: float) -> None:
        """The queue pair put `nbytes` on the wire (the byte counter)."""
        if not self.recovering:
            return
        self.advance(now)
        self._bytes += nbytes
        while self._bytes >= self.byte_reset and self.recovering:
            self._bytes -= self.byte_reset
            self.b_stage += 1
            self._increase()

    def advance(self, now: float) -> None:
        """Run the alpha timer and the rate-increase timer up to `now`."""
        if now >= self._alpha_at:
            n = int((now - self._alpha_at) // self.alpha_period) + 1
            self.alpha *= (1 - self.g) ** n
            self._alpha_at += n * self.alpha_period
        while now >= self._inc_at:
            self._inc_at += self.time_reset
            self.t_stage += 1
            self._increase()

    def _increase(self) -> None:
        t, b = self.t_stage, self.b_stage
        if min(t, b) > self.F:
            self.target_bps += self.hai_bps         # hyper increase
        elif max(t, b) > self.F:
            self.target_bps += self.ai_bps          # additive increase
        # else fast recovery: towards the rate before the last cut
        self.target_bps = min(self.target_bps, self.line_bps)
        self.rate_bps = (self.target_bps + self.rate_bps) / 2
        self.increases += 1
        if self.rate_bps >= self.line_bps * (1 - 1e-6):
            self.rate_bps = self.target_bps = self.line_bps
            self._inc_at = math.inf                 # back at line rate: nothing left to recover

    # the delay-based control's signals, which DCQCN does not use
    def rtt_sample(self, rtt: float, now: float) -> None:
        pass

    def lost(self, now: float) -> None:
        pass
