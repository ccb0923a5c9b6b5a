"""The run report: summary.md (measured against the analytical model, with ratios), PNG plots, the fabric
drawn, and report.html with all of it in one page (testbed/results/htmlreport.py).

Plots: link utilisation over time per rail / ToR and spine (faults marked), every link's utilisation over
time as a heatmap with link_usage.json beside it (testbed/results/heatmap.py), and what each workload type
draws of its own (its `report_plots`: the collectives' completion time and busbw against the bound, each
training iteration's traffic matrix); summary.md holds each type's `report_section`.
"""
from __future__ import annotations

import os

from testbed.faults import REGISTRY as FAULT_KINDS
from testbed.figures import plt
from testbed.monitor.fidelity import CPU_BOUND_IDLE_PCT
from testbed.results import draw, heatmap, htmlreport, queues as queue_report
from testbed.workloads import REGISTRY


def by_type(results: dict) -> list[tuple]:
    """Each workload type the run has, in the registry's order, with its workloads' results: each type writes
    its own part of the report."""
    return [(kind, found) for name, kind in REGISTRY.items()
            if (found := [w for w in results["workloads"] if w["type"] == name])]


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
                if FAULT_KINDS[f["kind"]].by_job and f.get(key) is not None:
                    ax.axvline(x - f["at_s"] + f[key], color="red", linewidth=1, linestyle=style)
    ax.set_xlabel("time since the fabric came up (s)")
    ax.set_ylabel("traffic out of the switch (Mbit/s)")
    ax.set_title(f"{results['scenario']}: switch throughput over time")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


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
    for kind, workloads in by_type(results):
        lines += kind.report_section(workloads)
    if results.get("faults"):
        # links: detected = the controller saw it, recovered = every switch acknowledged the new rules,
        # resumed = the cut flows got packets again; GPUs: detected by the peers, recovered = the communicator
        # re-formed (policy in the last column), resumed = the first collective after it completed
        lines += ["## Faults", "", "| kind | target | at s | detected s | recovered s | resumed s | "
                  "lost steps | restored s | recovery |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {x['kind']} | {x['target']} | {x['at_s']} | {x['detected_s']} | {x['recovered_s']} | "
                  f"{x.get('first_success_s', x.get('resumed_s'))} | {x.get('lost_steps')} | {x['restored_s']} | "
                  f"{x.get('recovery') or FAULT_KINDS[x['kind']].recovery} |" for x in results["faults"]]
        lines.append("")
    used = [f"{w['name']} {w['capacity_used']:.2f}" for w in results["workloads"] if w.get("capacity_used") is not None]
    if used:
        lines += [f"Emulation capacity used (CPU busy over the fidelity limit, 1 = the limit): {', '.join(used)}.", ""]
    bound = [w["name"] for w in results["workloads"] if w.get("cpu_bound")]
    if bound:
        lines += [f"**Fidelity warning**: {', '.join(bound)} ran with under {CPU_BOUND_IDLE_PCT:g}% CPU idle on average; "
                  "those figures may measure the emulating machine rather than the links.", ""]
    lines += links_markdown(results)
    lines += queues_markdown(results)
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


def queues_markdown(results: dict) -> list[str]:
    q = results.get("queues")
    if not q:
        return []
    d = q["drops"]
    cpu = f", the sampler used {q['sampler_cpu']:.1%} of a core" if q.get("sampler_cpu") is not None else ""
    lines = ["## Queues over time", "",
             f"Every shaped port's backlog as a fraction of its configured queue: `plots/queue_heatmap.png` (samples "
             f"in `{q['file']}`, every {q['period_s'] * 1000:.0f} ms, {q['ports']} ports{cpu}). "
             f"Drops: {d['overflow']} queue overflow, {d['fault']} by faults, {d['other']} other"
             f"{' (per port below)' if q['drops_by_port'] else ''}.", ""]
    if q["fullest"]:
        lines += ["| port | link | queue KiB | peak KiB | peak / queue | overflow drops |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['port']} | {r['link']} | {kib(r['limit_bytes'])} | {kib(r['peak_bytes'])} | "
                  f"{'-' if r['peak_fraction'] is None else format(r['peak_fraction'], '.2f')} | {r['overflow_drops']} |"
                  for r in q["fullest"]]
        lines.append("")
    if q["drops_by_port"]:
        lines += ["| port | overflow | fault | other |", "|---|---|---|---|"]
        lines += [f"| {r['port']} | {r['overflow']} | {r['fault']} | {r['other']} |" for r in q["drops_by_port"]]
        lines.append("")
    return lines + ecn_markdown(q.get("ecn")) + pfc_markdown(q.get("pfc"))


def ecn_markdown(e: dict | None) -> list[str]:
    """fabric.ecn's marks: in all, and the ports that marked most."""
    if not e:
        return []
    lines = [f"ECN marking on {e['ports']} switch ports: {e['marked_packets']} packets marked CE of "
             f"{e['ect_packets']} ECN-capable (per port in `queues.json`).", ""]
    if e["most_marked"]:
        lines += ["| port | link | ECN-capable | marked CE |", "|---|---|---|---|"]
        lines += [f"| {r['port']} | {r['link']} | {r['ect_packets']} | {r['marked_packets']} |"
                  for r in e["most_marked"]]
        lines.append("")
    return lines


def pfc_markdown(p: dict | None) -> list[str]:
    """fabric.pfc's pauses: in all, and the ports paused longest."""
    if not p:
        return []
    lines = [f"PFC: {p['ports_paused']} of {p['ports']} upstream ports paused, {p['pauses']} pauses, "
             f"{p['paused_s']:.2f} s paused in all (per port in `queues.json`).", ""]
    if p["most_paused"]:
        lines += ["| port | link | pauses | paused s |", "|---|---|---|---|"]
        lines += [f"| {r['port']} | {r['link']} | {r['pauses']} | {r['paused_s']:.3f} |" for r in p["most_paused"]]
        lines.append("")
    return lines


def kib(n) -> str:
    return "-" if n is None else f"{n / 1024:.0f}"


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


def write(results: dict, fabric, timeline, out_dir: str, table: str, queues=None) -> list[str]:
    """Write summary.md and the plots; returns the files written. queues: the run's queue sampler."""
    plots = os.path.join(out_dir, "plots")
    os.makedirs(plots, exist_ok=True)
    written = []
    path = os.path.join(plots, "utilisation.png")
    if timeline is not None and plot_utilisation(fabric, timeline, results, path):
        written.append(path)
    written += heatmap.write(fabric, timeline, results, out_dir)     # before the reports: they name the hottest links
    written += queue_report.write(fabric, queues, results, out_dir)  # and the fullest queues
    path = os.path.join(plots, "fabric.svg")
    written.append(draw.draw_run(fabric, results, path))
    for kind, workloads in by_type(results):
        written += kind.report_plots(workloads, plots)
    path = os.path.join(out_dir, "summary.md")
    with open(path, "w") as f:
        f.write(summary_markdown(results, table))
    written.append(path)
    written.append(htmlreport.write(results, out_dir, table))      # last: it embeds the plots above
    return written
