"""Byte counters of the HB domains' links (Linux bridges, which OpenFlow port stats do not see).

The bridge's end of each HB link is a device on the machine (testbed.fabric.links.switch_port); what it
received is what the GPU sent into its HB domain, what it transmitted is what the domain delivered to
the GPU. Their sum is the HB links' share of "bytes on all links" (SPCL's accounting of traffic).
"""
from __future__ import annotations

from testbed.fabric.links import switch_port


def devices(fabric) -> list[str]:
    """The bridge-side device of every HB link."""
    out = []
    for l in fabric.links:
        if l.kind == "hb":
            node, port = (l.b, l.b_port) if l.b in fabric.switches else (l.a, l.a_port)
            out.append(switch_port(node, port))
    return out


def read(fabric) -> dict[str, int]:
    """device -> rx_bytes + tx_bytes now (a device that is gone counts 0)."""
    out = {}
    for dev in devices(fabric):
        total = 0
        for key in ("rx_bytes", "tx_bytes"):
            try:
                with open(f"/sys/class/net/{dev}/statistics/{key}") as f:
                    total += int(f.read())
            except (OSError, ValueError):
                pass
        out[dev] = total
    return out


def growth(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes over all HB links between two read()s (a re-created device restarts from 0)."""
    return sum(now - before.get(dev, 0) if now >= before.get(dev, 0) else now for dev, now in after.items())
