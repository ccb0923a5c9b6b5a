"""Per-link utilisation over time: `link_usage.json` and `plots/link_heatmap.png` of every run.

From the timeline's samples of every switch port's counters (testbed/monitor/timeline.py). One row per
link, read at its switch end (a host's link at the switch, an uplink at the leaf, a front-end link at
`fe0`), grouped by tier: NIC links by rail (or ToR), CPU hosts' NICs, uplinks, front-end links. One
column per interval between samples. The colour is the busier direction's rate as a fraction of the
link's rate. Time 0 is the start of the workloads, the time base of results.json `faults` (`at_s`),
whose times are drawn as vertical lines.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import matplotlib
import numpy as np

from testbed.monitor.timeline import counter_delta

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS_UP_TO = 80          # rows; beyond this the names would overlap
HOTTEST = 5                # links named in the reports


@dataclass(frozen=True)
class Row:
    link: str              # "A-B" as cabled, e.g. s0g1-rail1, rail0-spine1
    port: str              # the counter read, "SWITCH:PORT" (tx = out of that switch port)
    mbps: float
    tier: str              # nic | cpu | uplink | frontend | wan
    group: str             # the NIC's rail or ToR; the tier otherwise
    standby: bool


def rows(fabric) -> list[Row]:
    """Every link with an OpenFlow switch end (HB domains have no counters), a spare GPU's reserved circuit
    ports included, in tier order: NIC links by leaf, CPU NICs, uplinks, front-end links, WAN links; cabling order within."""
    links = fabric.links + [c for cs in fabric.circuits.values() for c in cs[1:]]
    out = []
    for l in links:
        end = next(((n, p) for n, p in ((l.a, l.a_port), (l.b, l.b_port))
                    if n in fabric.switches and fabric.switches[n].sdn), None)
        if end is None:
            continue
        switch = end[0]
        tier = "cpu" if l.kind == "nic" and fabric.switches[switch].kind == "frontend" else l.kind
        group = switch if tier == "nic" else tier
        out.append(Row(f"{l.a}-{l.b}", f"{switch}:{end[1]}", l.mbps, tier, group, l.standby))
    leaves = [s.name for s in fabric.sdn_switches() if s.kind in ("rail", "tor")]
    order = {"nic": 0, "cpu": 1, "uplink": 2, "frontend": 3, "wan": 4}

    def key(r: Row):
        switch, port = r.port.split(":")
        return order[r.tier], leaves.index(r.group) if r.group in leaves else 0, switch, int(port)
    return sorted(out, key=key)


def utilisation(then: tuple[int, int], now: tuple[int, int], seconds: float, mbps: float) -> float:
    """The busier direction's rate between two (tx, rx) counter samples, as a fraction of the link's rate."""
    moved = max(counter_delta(then[0], now[0]), counter_delta(then[1], now[1]))
    return moved * 8 / seconds / (mbps * 1e6)


def usage(fabric, samples: list[tuple[float, dict]], t0: float) -> dict:
    """The link_usage.json document: sample times from t0, each link's counters per sample and its
    utilisation per interval (null where a sample lacks the port: a switch that was down)."""
    times = [t - t0 for t, _ in samples]
    out = []
    for r in rows(fabric):
        seen = [c.get(r.port) for _, c in samples]
        util = [None if a is None or b is None or ta >= tb else round(utilisation(a, b, tb - ta, r.mbps), 4)
                for (ta, _), (tb, _), a, b in zip(samples, samples[1:], seen, seen[1:])]
        if r.standby and not any(util):
            continue                           # a parked spare's cable that carried nothing: not worth a row
        out.append({"link": r.link, "tier": r.tier, "group": r.group, "port": r.port, "mbps": r.mbps,
                    "tx_bytes": [c and c[0] for c in seen], "rx_bytes": [c and c[1] for c in seen],
                    "utilisation": util})
    return {"time_base": "workloads_start", "workloads_start": t0, "times_s": [round(t, 3) for t in times],
            "links": out}


def hottest(doc: dict, n: int = HOTTEST) -> list[dict]:
    """The n links with the highest peak utilisation, with their mean over the run."""
    rated = []
    for link in doc["links"]:
        known = [u for u in link["utilisation"] if u is not None]
        if known and max(known) > 0:
            rated.append({"link": link["link"], "tier": link["tier"], "peak": round(max(known), 3),
                          "mean": round(sum(known) / len(known), 3)})
    return sorted(rated, key=lambda r: -r["peak"])[:n]


def fault_lines(faults: list[dict]) -> list[tuple[float, str, str]]:
    """(x, linestyle, label) per fault: solid when it struck, dashed when it was undone."""
    lines = []
    for f in faults:
        if f.get("at_s") is not None:
            lines.append((f["at_s"], "-", f"{f['kind']} {f['target']}"))
        if f.get("restored_s") is not None:
            lines.append((f["restored_s"], "--", ""))
    return lines


def figure(doc: dict, faults: list[dict], title: str):
    """The heatmap as a matplotlib figure (the caller saves and closes it)."""
    links, times = doc["links"], doc["times_s"]
    matrix = np.array([[np.nan if u is None else u for u in link["utilisation"]] for link in links], dtype=float)
    fig, ax = plt.subplots(figsize=(10, min(max(3.0, 0.17 * len(links) + 1.6), 40)))
    mesh = ax.pcolormesh(times, np.arange(len(links) + 1), np.ma.masked_invalid(matrix), cmap="inferno",
                         vmin=0, vmax=1, shading="flat")
    fig.colorbar(mesh, ax=ax, extend="max", pad=0.09, label="utilisation (busier direction / link rate)")
    ax.set_facecolor("#d9d9d9")                         # grey: not sampled (the switch did not answer)
    ax.set_ylim(len(links), 0)                          # first row on top
    label_rows(ax, [link["link"] for link in links], [link["group"] for link in links], faults, "#00e5ff", title)
    fig.tight_layout()
    return fig


def label_rows(ax, names: list, groups: list, faults: list, fault_color: str, title: str) -> None:
    """What every heatmap of rows over time draws around its cells: white lines between groups (tiers, rails),
    the row names when they fit, the group names in the right margin, faults as vertical lines, the titles."""
    n = len(names)
    for k in range(1, n):
        if groups[k] != groups[k - 1]:
            ax.axhline(k, color="white", linewidth=1.2)
    if n <= LABELS_UP_TO:
        ax.set_yticks(np.arange(n) + 0.5, names, fontsize=6)
    spans: dict = {}
    for k, group in enumerate(groups):
        spans.setdefault(group, []).append(k)
    for name, ks in spans.items():
        ax.annotate(name, (1.01, 1 - (min(ks) + max(ks) + 1) / 2 / n), xycoords="axes fraction", fontsize=7,
                    va="center")
    top = ax.get_ylim()[1]
    for x, style, label in fault_lines(faults):
        ax.axvline(x, color=fault_color, linewidth=1.4, linestyle=style)
        if label:
            ax.annotate(label, (x, top), xytext=(2, -2), textcoords="offset points", va="top", fontsize=7,
                        color=fault_color, rotation=90)
    ax.set_xlabel("time since the workloads started (s)")
    ax.set_title(title, fontsize=10)


def write(fabric, timeline, results: dict, out_dir: str) -> list[str]:
    """link_usage.json and plots/link_heatmap.png; records the file and the hottest links in
    results["link_usage"]. Returns the files written (none without two samples)."""
    if timeline is None or len(timeline.samples) < 2:
        return []
    t0 = results.get("timings", {}).get("workloads_start", timeline.samples[0][0])
    doc = usage(fabric, timeline.samples, t0)
    path = os.path.join(out_dir, "link_usage.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    results["link_usage"] = {"file": "link_usage.json", "hottest": hottest(doc)}
    written = [path]
    if doc["links"]:
        fig = figure(doc, results.get("faults", []), f"{results['scenario']}: link utilisation over time")
        png = os.path.join(out_dir, "plots", "link_heatmap.png")
        fig.savefig(png, dpi=110)
        plt.close(fig)
        written.append(png)
    return written
