"""The shaped ports' queues over time: `queues.json` and `plots/queue_heatmap.png` of every run, drawn from the
queue sampler's samples (testbed/monitor/queues.py), and the drops per port by reason.

One row per shaped port, "NODE>PEER" (the queue of what NODE sends to PEER: a switch port's queue into a host
is "rail0>s1g0", a host's NIC queue "s1g0>rail0"), grouped by tier. One column per sample. The colour is the
backlog as a fraction of the port's configured queue (the qdisc's limit); a cross marks a sample in which the
queue dropped packets. Time 0 is the start of the workloads, as in the link heatmap; faults are vertical lines.

Drops by reason, per port:
  overflow  the queue's own drops (the qdisc's counter): a packet came to a full queue
  fault     the device's drops (frames it could not send: no carrier, its peer down) while a fault held the
            port's link (between the fault's strike and its restore)
  other     the device's drops outside any fault on its link: the emulating machine's, not the fabric's
"""
from __future__ import annotations

import json
import os

import numpy as np

from testbed.faults import REGISTRY as FAULT_KINDS
from testbed.figures import plt
from testbed.monitor.timeline import counter_delta
from testbed.results.heatmap import label_rows

FULLEST = 5                # ports named in the reports
TIER_ORDER = {"nic": 0, "hb": 1, "uplink": 2, "frontend": 3, "wan": 4}


def document(sampler, t0: float) -> dict:
    """The queues.json document: sample times from t0, and per port its qdisc, configured queue, and per sample
    its backlog in bytes and packets and the qdisc's drop counter (null where the sample lacks the port); the
    devices' drop counters at their own, sparser, times."""
    times = [t for t, _ in sampler.samples]
    dtimes = [t for t, _ in sampler.device_drops]
    ports = sorted(sampler.ports, key=lambda p: TIER_ORDER.get(p.tier, 9))      # stable: cabling order within
    out = []
    for p in ports:
        seen = [s.get(p.name) for _, s in sampler.samples]
        if not any(seen):
            continue                                       # never sampled (its namespace was gone)
        out.append({"port": p.name, "link": p.link, "tier": p.tier, "dev": p.dev,
                    "namespace": "root" if p.netns is None else p.node,
                    "qdisc": sampler.kinds.get(p.name), "limit_bytes": sampler.limits.get(p.name),
                    "backlog_bytes": [s and s[0] for s in seen], "backlog_packets": [s and s[1] for s in seen],
                    "drops": [s and s[2] for s in seen],
                    "device_drops": [d.get(p.name) for _, d in sampler.device_drops]}
                   | ({"ecn": sampler.ecn[p.dev]} if p.netns is None and p.dev in sampler.ecn else {})
                   | pfc_of(sampler.pfc, p.name))
    return {"time_base": "workloads_start", "workloads_start": t0, "period_s": sampler.period,
            "cpu_budget": sampler.cpu_budget,
            "times_s": [round(t - t0, 3) for t in times], "device_times_s": [round(t - t0, 3) for t in dtimes],
            "ports": out}


def pfc_of(stats: dict, port: str) -> dict:
    """A port's PFC counters (fabric.pfc): as an upstream port, its pauses and paused time; as a switch queue
    that sends pauses, its Xoff crossings and the time it held them."""
    found = {**stats.get("gates", {}).get(port, {}), **stats.get("points", {}).get(port, {})}
    return {"pfc": found} if found else {}


def growth(counter: list) -> list[int | None]:
    """Per interval between consecutive samples, how much a counter grew (None across a gap)."""
    return [None if a is None or b is None else counter_delta(a, b) for a, b in zip(counter, counter[1:])]


def fault_windows(faults: list[dict], fabric) -> dict[str, list[tuple[float, float]]]:
    """Link name -> (from, to) seconds while a fault held it: from its strike to its restore (or for ever)."""
    out: dict = {}
    for f in faults:
        if f.get("at_s") is None or f.get("kind") not in FAULT_KINDS:
            continue
        try:
            links, _ = FAULT_KINDS[f["kind"]].hit(fabric, f)
        except Exception:  # noqa: BLE001  a target this fabric cannot resolve hit none of its links
            continue
        end = f["restored_s"] if f.get("restored_s") is not None else float("inf")
        for link in links:
            out.setdefault(f"{link.a}-{link.b}", []).append((f["at_s"], end))
    return out


def drops(port: dict, times: list[float], windows: list[tuple[float, float]]) -> dict[str, int]:
    """A port's drops by reason (the module's docstring): overflow from the qdisc's counter; the device's drops
    in intervals that overlap a fault window on its link are the fault's, the rest other."""
    overflow = sum(d or 0 for d in growth(port["drops"]))
    fault = other = 0
    for (t0, t1), d in zip(zip(times, times[1:]), growth(port["device_drops"])):
        if d:
            if any(t0 < end and t1 >= start for start, end in windows):
                fault += d
            else:
                other += d
    return {"overflow": overflow, "fault": fault, "other": other}


def summary(doc: dict, faults: list[dict], fabric, n: int = FULLEST) -> dict:
    """What results.json keeps: the fullest ports (peak backlog, bytes and fraction of the configured queue),
    the drops by reason in all and per port that dropped any."""
    windows = fault_windows(faults, fabric)
    per_port, fullest = [], []
    for p in doc["ports"]:
        by = drops(p, doc["device_times_s"], windows.get(p["link"], []))
        if any(by.values()):
            per_port.append({"port": p["port"], "link": p["link"], **by})
        peak = max((b for b in p["backlog_bytes"] if b is not None), default=0)
        fullest.append({"port": p["port"], "link": p["link"], "tier": p["tier"], "limit_bytes": p["limit_bytes"],
                        "peak_bytes": peak, "peak_fraction": round(peak / p["limit_bytes"], 4)
                        if p["limit_bytes"] else None, "overflow_drops": by["overflow"]})
    fullest.sort(key=lambda r: (-(r["peak_fraction"] or 0), -r["peak_bytes"]))
    return {"drops": {k: sum(r[k] for r in per_port) for k in ("overflow", "fault", "other")},
            "drops_by_port": per_port, "fullest": [r for r in fullest if r["peak_bytes"]][:n]} | ecn_summary(doc, n) | pfc_summary(doc, n)


def ecn_summary(doc: dict, n: int = FULLEST) -> dict:
    """With fabric.ecn: the packets the switch ports saw ECN-capable and marked CE, in all and on the ports that
    marked most."""
    ports = [p for p in doc["ports"] if "ecn" in p]
    if not ports:
        return {}
    rows = sorted(({"port": p["port"], "link": p["link"], "ect_packets": p["ecn"]["ect_packets"],
                    "marked_packets": p["ecn"]["marked_packets"]} for p in ports), key=lambda r: -r["marked_packets"])
    return {"ecn": {"ports": len(ports), "ect_packets": sum(r["ect_packets"] for r in rows),
                    "marked_packets": sum(r["marked_packets"] for r in rows),
                    "most_marked": [r for r in rows if r["marked_packets"]][:n]}}


def pfc_summary(doc: dict, n: int = FULLEST) -> dict:
    """With fabric.pfc: the pauses of the upstream ports, in all and on the ports paused longest."""
    ports = [p for p in doc["ports"] if "pauses" in p.get("pfc", {})]
    if not ports:
        return {}
    rows = sorted(({"port": p["port"], "link": p["link"], "pauses": p["pfc"]["pauses"],
                    "paused_s": p["pfc"]["paused_s"]} for p in ports), key=lambda r: -r["paused_s"])
    return {"pfc": {"ports": len(ports), "ports_paused": sum(1 for r in rows if r["pauses"]),
                    "pauses": sum(r["pauses"] for r in rows), "paused_s": round(sum(r["paused_s"] for r in rows), 3),
                    "most_paused": [r for r in rows if r["pauses"]][:n]}}


def fractions(doc: dict) -> np.ndarray:
    """port x sample: backlog / configured queue (NaN where unknown)."""
    return np.array([[np.nan if b is None or not p["limit_bytes"] else b / p["limit_bytes"]
                      for b in p["backlog_bytes"]] for p in doc["ports"]], dtype=float)


def figure(doc: dict, faults: list[dict], title: str):
    """The queue heatmap as a matplotlib figure (the caller saves and closes it)."""
    ports, times = doc["ports"], doc["times_s"]
    fig, ax = plt.subplots(figsize=(10, min(max(3.0, 0.17 * len(ports) + 1.6), 40)))
    mesh = ax.pcolormesh(times, np.arange(len(ports)) + 0.5, np.ma.masked_invalid(fractions(doc)), cmap="viridis",
                         vmin=0, vmax=1, shading="nearest")
    fig.colorbar(mesh, ax=ax, pad=0.09, label="backlog / configured queue")
    ax.set_facecolor("#d9d9d9")                          # grey: not sampled
    ax.set_ylim(len(ports), 0)
    for k, p in enumerate(ports):                         # a cross where the queue dropped packets
        grew = growth(p["drops"])
        xs = [times[i + 1] for i, d in enumerate(grew) if d]
        if xs:
            ax.scatter(xs, [k + 0.5] * len(xs), marker="x", s=14, color="#ff3b30", linewidths=1)
    label_rows(ax, [p["port"] for p in ports], [p["tier"] for p in ports], faults, "#ff9500", title)
    fig.tight_layout()
    return fig


def write(fabric, sampler, results: dict, out_dir: str) -> list[str]:
    """queues.json and plots/queue_heatmap.png; records the file, the drops and the fullest ports in
    results["queues"]. Returns the files written (none without two samples)."""
    if sampler is None or len(sampler.samples) < 2:
        return []
    t0 = results.get("timings", {}).get("workloads_start", sampler.samples[0][0])
    doc = document(sampler, t0)
    path = os.path.join(out_dir, "queues.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    share = sampler.cpu_share()
    results["queues"] = {"file": "queues.json", "period_s": round(sampler.mean_period(), 4), "ports": len(doc["ports"]),
                         "samples": len(doc["times_s"]),
                         "sampler_cpu": None if share is None else round(share, 4),
                         **summary(doc, results.get("faults", []), fabric)}
    written = [path]
    if doc["ports"]:
        fig = figure(doc, results.get("faults", []), f"{results['scenario']}: queue backlog over time")
        png = os.path.join(out_dir, "plots", "queue_heatmap.png")
        fig.savefig(png, dpi=110)
        plt.close(fig)
        written.append(png)
    return written
