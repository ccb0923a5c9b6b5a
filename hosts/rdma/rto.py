"""The retransmission timeout of an RC queue pair: fixed, as InfiniBand's `timeout` attribute and Linux rxe have
it, or adaptive, as TCP's (RFC 6298).

Adaptive: each round-trip sample R of a packet sent once (Karn's rule: the caller drops the sample of any
packet it retransmitted, whose ACK could answer either transmission) updates

    SRTT   <- 7/8 SRTT + 1/8 R                    (the first sample: SRTT = R, RTTVAR = R/2)
    RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R|
    RTO     = clamp(SRTT + 4 RTTVAR, lo, hi)

Each timeout doubles the RTO (up to `hi`). The doubled value holds until a new sample comes in, which needs new data
sent once and acknowledged (RFC 6298 5.7, Karn's algorithm): acknowledgements of retransmitted data do not reset it,
or a path whose round trip has outgrown the estimate would time out again at once. Before the first sample the RTO
is the initial value but at most FIRST_RTO (RFC 6298's 1 s): the initial value is sized as a ceiling for full queues
(seconds on a slow link), and a loss before the first round trip (a cut as a job starts) would otherwise cost it
twice, once for the lone resend of the oldest packet and once more before going back N. The bounds keep it sane
where the estimate is thin: `lo` above the scheduling jitter of the hosts, `hi` at what a fixed timer would be sized
for (the worst queueing on the path).
"""
from __future__ import annotations

MIN_RTO = 0.05      # s: the default floor, above the scheduling jitter of Python hosts on a busy machine
FIRST_RTO = 1.0     # s: the most the RTO is before any round trip is measured (RFC 6298 2.1); backoff still doubles it


class RetransmitTimeout:
    """The RTO of one queue pair. `initial`: the RTO before any sample, and the RTO itself when not adaptive."""

    def __init__(self, initial: float, *, adaptive: bool = True, lo: float | None = None, hi: float | None = None):
        if initial <= 0:
            raise ValueError("the retransmission timeout must be positive")
        lo = min(initial, MIN_RTO) if lo is None else lo
        hi = max(initial, lo) if hi is None else hi
        if adaptive and not 0 < lo <= hi:
            raise ValueError(f"retransmission timeout bounds must satisfy 0 < lo <= hi, not lo={lo} hi={hi}")
        self.initial, self.adaptive, self.lo, self.hi = initial, adaptive, lo, hi
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.backoff = 0            # doublings since the last sample: stops growing at the ceiling
        self.timeouts = 0           # timeouts since the last sample: keeps counting at the ceiling
        self.samples = 0

    @property
    def base(self) -> float:
        """The RTO without backoff."""
        if not self.adaptive:
            return self.initial
        if self.srtt is None:
            return min(max(min(self.initial, FIRST_RTO), self.lo), self.hi)
        return min(max(self.srtt + 4 * self.rttvar, self.lo), self.hi)

    @property
    def rto(self) -> float:
        """Seconds without progress before the QP retransmits."""
        if not self.adaptive:
            return self.initial
        return min(self.base * 2 ** self.backoff, self.hi)

    def sample(self, rtt: float) -> None:
        """A round trip measured on a packet that was sent once: the path works, the backoff ends."""
        self.samples += 1
        self.backoff = self.timeouts = 0
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def timed_out(self) -> None:
        """The timer fired: wait twice as long for the retransmission (a congested or broken path)."""
        self.timeouts += 1
        if self.adaptive and self.base * 2 ** self.backoff < self.hi:
            self.backoff += 1
