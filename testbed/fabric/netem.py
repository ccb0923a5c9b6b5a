"""The netem path of link delay: where the kernel has netem (the VM's Debian kernel, most distribution kernels).

Pure command lines; testbed.fabric.delay runs them. A direction's delay sits on its sending end, under the
end's tbf when it has a rate (as Mininet's TCLink(delay=) arranges them): the tbf's queue is then netem's,
and for a first-in first-out link with a fixed delay every frame leaves when it would have left a rate limiter
followed by a wire of that delay.
"""
from __future__ import annotations

from testbed.fabric.links import beats_first, tbf, tbf_burst, tbf_limit

NETEM_MIN_LIMIT = 1000      # packets; netem's own default


def netem_limit(delay_us: float, mbps: float | None, mtu: int, queue: int | None = None) -> int:
    """Packets netem may hold: what a full tbf queue holds plus one delay's worth of traffic at the rate
    (without a rate, its default): a limit in packets, where tbf's is in bytes."""
    if not mbps:
        return NETEM_MIN_LIMIT
    in_flight = mbps * 1e6 / 8 * delay_us / 1e6
    queue = queue or tbf_limit(mbps, mtu)
    return max(NETEM_MIN_LIMIT, int((queue + in_flight) / 64) + 1)     # small frames count too


def apply(dev: str, delay_us: float, mbps: float | None = None, mtu: int = 1500, queue: int | None = None,
          loss: float = 0.0) -> list[str]:
    """Command lines that give the end dev a one-way delay (and its rate and queue, if any; a share of frames
    lost, if loss)."""
    netem = f"netem delay {delay_us:g}us limit {netem_limit(delay_us, mbps, mtu, queue)}" + \
        (f" loss random {loss * 100:g}%" if loss else "")
    if not mbps:
        return [f"tc qdisc replace dev {dev} root handle 1: {netem}"]
    return [f"tc qdisc replace dev {dev} root handle 1: tbf rate {mbps}mbit burst {tbf_burst(mbps, mtu)} "
            f"limit {queue or tbf_limit(mbps, mtu)}",
            f"tc qdisc replace dev {dev} parent 1:1 handle 20: {netem}"]     # in the place of the beats' htb


def remove(dev: str, mbps: float | None = None, mtu: int = 1500, queue: int | None = None) -> list[str]:
    """Command lines that take the delay away and leave the end as it was: its tbf alone, or no qdisc."""
    gone = f"tc qdisc del dev {dev} root"
    # a replaced tbf would keep netem as its child
    return [gone, tbf(dev, mbps, mtu, queue), *beats_first(dev, mbps, mtu, queue)] if mbps else [gone]


PROBE = "tc qdisc add dev {dev} root netem delay 1ms"
