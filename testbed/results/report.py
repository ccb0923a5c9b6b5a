"""The run report: summary.md (measured against the analytical model, with ratios), PNG plots, the fabric
drawn, and report.html with all of it in one page (testbed/results/htmlreport.py).

Plots: link utilisation over time per rail / ToR and spine (faults marked), every link's utilisation over
time as a heatmap with link_usage.json beside it (testbed/results/heatmap.py), completion time and
busbw against the bound per collective operation and algorithm, and the traffic matrix of every
training iteration (bytes between GPU pairs, per phase).
"""
from __future__ import annotations

import os

import matplotlib
import numpy as np

from testbed.monitor.fidelity import CPU_BOUND_IDLE_PCT
from testbed.results import draw, heatmap, htmlreport
from testbed.runtime.faults import GPU_FAULTS

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def switch_ports(fabric, switch: str) -> list[str]:
    return [f"{node}:{port}" for l in fabric.links for node, port in ((l.a, l.a_port), (l.b, l.b_port))
            if node == switch]


def plot_utilisation(fabric, timeline, results: dict, path: str) -> bool:
    if len(timeline.samples) < 3:
        return False
    t_start = timeline.samples[0][0]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for sw in fabric.sdn_switches():
        times, mbps = timeline.rates(switch_ports(fabric, sw.name))
        if max(mbps, default=0) > 0:
            ax.plot([t - t_start for t in times], mbps, label=sw.name,
                    linestyle="--" if sw.kind == "spine" else "-")
    for f in results.get("faults", []):
        if f.get("at_s") is not None and "workloads_start" in results.get("timings", {}):
            x = results["timings"]["workloads_start"] - t_start + f["at_s"]
            ax.axvline(x, color="red", linewidth=1)
            ax.annotate(f"{f['kind']} {f['target']}", (x, ax.get_ylim()[1] * 0.95), color="red", fontsize=8)
            # a GPU failure's recovery timeline: noticed by the peers, communicator re-formed
            for key, style in (("detected_s", ":"), ("recovered_s", "--")):
                if f["kind"] in GPU_FAULTS and f.get(key) is not None:
                    ax.axvline(x - f["at_s"] + f[key], color="red", linewidth=1, linestyle=style)
    ax.set_xlabel("time since the fabric came up (s)")
    ax.set_ylabel("traffic out of the switch (Mbit/s)")
    ax.set_title(f"{results['scenario']}: switch throughput over time")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_collectives(results: dict, path: str) -> bool:
    rows = [(w["name"], r) for w in results["workloads"] if w["type"] == "collective" for r in w["rows"]]
    if not rows:
        return False
    labels = [f"{r['op']}/{r['algo']}\n{r['bytes'] >> 10} KiB" for _, r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    xs = range(len(rows))
    a1.bar(xs, [r["seconds"] for _, r in rows], color="tab:blue")
    a1.set_xticks(list(xs), labels, fontsize=7, rotation=30, ha="right")
    a1.set_ylabel("completion time (s)")
    a1.set_title("completion time")
    a2.bar([x - 0.2 for x in xs], [r["busbw_MBps"] for _, r in rows], width=0.4, label="measured busbw")
    a2.bar([x + 0.2 for x in xs], [r["bound_busbw_MBps"] for _, r in rows], width=0.4, label="bound")
    a2.set_xticks(list(xs), labels, fontsize=7, rotation=30, ha="right")
    a2.set_ylabel("MB/s")
    a2.set_title("busbw against the analytical bound")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_traffic_matrix(workload: dict, path: str) -> bool:
    """Heatmaps of the bytes each GPU sent each other GPU in a training iteration (rows: sender), in all and per
    phase, with the HB domains outlined: TP stays inside the squares, PP and DP run along rails between them."""
    tr = workload.get("traffic")
    if not tr:
        return False
    names, n = tr["gpus"], len(tr["gpus"])
    edges = [i for i in range(1, n) if tr["servers"][i] != tr["servers"][i - 1]]
    panels = [("all phases", tr["bytes"]), ("TP AllReduce", tr["tp"]), ("pipeline (PP)", tr["pp"]),
              ("DP AllReduce", tr["dp"])]
    fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4, 4.4))
    for ax, (title, matrix) in zip(axes, panels):
        kb = np.array(matrix, dtype=float) / 1e3
        im = ax.imshow(np.ma.masked_equal(kb, 0), cmap="viridis", vmin=0)
        for edge in edges:                                  # HB-domain boundaries
            ax.axhline(edge - 0.5, color="red", linewidth=1)
            ax.axvline(edge - 0.5, color="red", linewidth=1)
        ax.set_xticks(range(n), names, rotation=90, fontsize=7)
        ax.set_yticks(range(n), names, fontsize=7)
        ax.set_xlabel("receiver")
        ax.set_title(f"{title}: {kb.sum() / 1e3:.2f} MB", fontsize=9)
        if n <= 16:
            for (a, b), v in np.ndenumerate(kb):
                if v:
                    ax.text(b, a, f"{v:.0f}", ha="center", va="center", fontsize=5,
                            color="black" if v > 0.6 * kb.max() else "white")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="kB")
    axes[0].set_ylabel("sender")
    p = workload["plan"]
    fig.suptitle(f"{workload['name']}: bytes between GPUs, p={p['pp']} t={p['tp']} d={p['dp']} on "
                 f"{workload['fabric']} (red: HB domains; {workload['traffic']['cross_rail_bytes']} B between "
                 "different servers and rails)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def training_markdown(results: dict) -> list[str]:
    lines = []
    for w in results["workloads"]:
        if w["type"] != "training_iteration" or "measured" not in w:
            continue
        p = w["plan"]
        lines += [f"## Training iteration {w['name']}: measured against T = Tcomp + Ttp + Tpp + Tdp + Tbubble", "",
                  f"p={p['pp']}, t={p['tp']}, d={p['dp']}, m={w['micro_batches']}, {w['schedule']}; message sizes "
                  f"x{w['scale']:.3g}, so times x{w['dilation']:.3g} of the full-scale cluster.", "",
                  "| phase | predicted s | measured s | ratio | full-scale predicted ms | measured equivalent ms |",
                  "|---|---|---|---|---|---|"]
        for k in ("comp", "tp", "pp", "dp", "bubble", "iteration"):
            r = w["ratio"][k]
            lines.append(f"| {k} | {w['predicted'][k]:.3f} | {w['measured'][k]:.3f} | "
                         f"{'-' if r is None else f'{r:.2f}'} | {w['full_scale']['predicted'][k] * 1e3:.2f} | "
                         f"{w['full_scale']['measured_equivalent'][k] * 1e3:.2f} |")
        b = w["bubble_ratio"]
        lines += ["", f"Bubble ratio (p-1)/(p-1+m) = {b['formula']:.3f}, measured {b['measured']:.3f}. Traffic "
                      f"matrix: `plots/traffic_matrix_{w['name']}.png`.", ""]
    return lines


def summary_markdown(results: dict, table: str) -> str:
    f = results["fabric"]
    lines = [f"# {results['scenario']}", "",
             f"{f['kind']}: {f['servers']} servers x {f['gpus_per_server']} GPUs, {f['switches']} switches, "
             f"NIC {f['nic_mbps']} Mbit/s, HB {f['hb_mbps']} Mbit/s, routing {f['routing']}"
             f"{' with data-plane failover' if f.get('failover') else ''}"
             f"{htmlreport.controller_delay(f)}, {f['datapath']} datapath. "
             f"Result: **{'PASS' if results['ok'] else 'FAIL'}**.", ""]
    if results.get("warnings"):
        lines += ["## Warnings", ""] + [f"- {w}" for w in results["warnings"]] + [""]
    rows = [r for w in results["workloads"] if w["type"] == "collective" for r in w["rows"]]
    if rows:
        lines += ["## Collectives: measured against the analytical model", "",
                  "| op | algo | ranks | bytes | time s | busbw MB/s | bound MB/s | ratio | model time s | correct |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            model_t = r["seconds"] * r["bus_ratio"]
            asked = f" ({r['requested_bytes']} asked)" if r.get("requested_bytes", r["bytes"]) != r["bytes"] else ""
            lines.append(f"| {r['op']} | {r['algo']} | {r['ranks']} | {r['bytes']}{asked} | {r['seconds']:.3f} | "
                         f"{r['busbw_MBps']:.3f} | {r['bound_busbw_MBps']:.3f} | {r['bus_ratio']:.2f} | "
                         f"{model_t:.3f} | {'yes' if r['correct'] else 'NO'} |")
        lines.append("")
    lines += training_markdown(results)
    if results.get("faults"):
        # links: detected = the controller saw it, recovered = every switch acknowledged the new rules,
        # resumed = the cut flows got packets again; GPUs: detected by the peers, recovered = the communicator
        # re-formed (policy in the last column), resumed = the first collective after it completed
        lines += ["## Faults", "", "| kind | target | at s | detected s | recovered s | resumed s | "
                  "lost steps | restored s | recovery |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {x['kind']} | {x['target']} | {x['at_s']} | {x['detected_s']} | {x['recovered_s']} | "
                  f"{x.get('first_success_s', x.get('resumed_s'))} | {x.get('lost_steps')} | {x['restored_s']} | "
                  f"{x.get('recovery') or ('-' if x['kind'] in GPU_FAULTS else 'reroute')} |" for x in results["faults"]]
        lines.append("")
    used = [f"{w['name']} {w['capacity_used']:.2f}" for w in results["workloads"] if w.get("capacity_used") is not None]
    if used:
        lines += [f"Emulation capacity used (CPU busy over the fidelity limit, 1 = the limit): {', '.join(used)}.", ""]
    bound = [w["name"] for w in results["workloads"] if w.get("cpu_bound")]
    if bound:
        lines += [f"**Fidelity warning**: {', '.join(bound)} ran with under {CPU_BOUND_IDLE_PCT:g}% CPU idle on average; "
                  "those figures may measure the emulating machine rather than the links.", ""]
    lines += links_markdown(results)
    lines += ["## Summary", "", "```", table, "```", ""]
    if results.get("captures"):
        lines += capture_section(results["captures"])
    lines += ["Link delays are not emulated (no netem on this kernel); data-centre propagation delays are "
              "microseconds, below what the emulation resolves.", ""]
    return "\n".join(lines)


def links_markdown(results: dict) -> list[str]:
    usage = results.get("link_usage")
    if not usage:
        return []
    lines = ["## Links over time", "", f"Every link's utilisation over time: `plots/link_heatmap.png` (samples in "
             f"`{usage['file']}`). The busiest links, by their peak over a sampling interval:", "",
             "| link | tier | peak | mean |", "|---|---|---|---|"]
    lines += [f"| {h['link']} | {h['tier']} | {h['peak']:.2f} | {h['mean']:.2f} |" for h in usage["hottest"]]
    return lines + [""]


def capture_section(captures: list[dict]) -> list[str]:
    """Per pcap: what it holds, so a reader knows before opening it whether every packet is whole and sound."""
    lines = ["## Captures", "", "| point | file | bytes | packets | RoCE | truncated | bad ICRC | malformed |",
             "|---|---|---|---|---|---|---|---|"]
    for c in captures:
        if "packets" not in c:
            lines.append(f"| {c['point']} | {os.path.basename(c['file'])} | {c['bytes']} | "
                         f"unreadable: {c.get('error', '?')} | | | | |")
            continue
        checked = c["roce_packets"] - c["truncated"]
        icrc = f"{c['bad_icrc']}" + (f" (of {c['icrc_checked']} checked)" if c["icrc_checked"] < checked else "")
        lines.append(f"| {c['point']} | {os.path.basename(c['file'])} | {c['bytes']} | {c['packets']} | "
                     f"{c['roce_packets']} | {c['truncated']} | {icrc} | {c['malformed']} |")
    if any(c.get("truncated") for c in captures):
        lines.append("\nTruncated packets were cut by the capture's snaplen: their ICRC cannot be checked, and "
                     "Wireshark marks them malformed although they were whole on the wire.")
    return lines + [""]


def write(results: dict, fabric, timeline, out_dir: str, table: str) -> list[str]:
    """Write summary.md and the plots; returns the files written."""
    plots = os.path.join(out_dir, "plots")
    os.makedirs(plots, exist_ok=True)
    written = []
    path = os.path.join(plots, "utilisation.png")
    if timeline is not None and plot_utilisation(fabric, timeline, results, path):
        written.append(path)
    written += heatmap.write(fabric, timeline, results, out_dir)     # before the reports: they name the hottest links
    path = os.path.join(plots, "fabric.svg")
    written.append(draw.draw_run(fabric, results, path))
    path = os.path.join(plots, "collectives.png")
    if plot_collectives(results, path):
        written.append(path)
    for w in results["workloads"]:
        path = os.path.join(plots, f"traffic_matrix_{w['name']}.png")
        if w["type"] == "training_iteration" and plot_traffic_matrix(w, path):
            written.append(path)
    path = os.path.join(out_dir, "summary.md")
    with open(path, "w") as f:
        f.write(summary_markdown(results, table))
    written.append(path)
    written.append(htmlreport.write(results, out_dir, table))      # last: it embeds the plots above
    return written
