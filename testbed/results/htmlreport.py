"""report.html: the run in one self-contained page (plots and the fabric drawing embedded, no network needed).

The configuration and environment, warnings, checks, each workload type's table (its `report_table`: the
collectives against their bound, human sizes, '-' for what was not measured; rows of a workload that a fault hit
marked), the faults with their times relative to the
workload they fell in, the busiest links, the captures with links, every plot, and the text summary as the
terminal showed it.
"""
from __future__ import annotations

import base64
import html
import json
import os

from testbed.workloads import REGISTRY, hook
from testbed.workloads.collective_report import text


def controller_delay(fabric: dict) -> str:
    """The routing's added controller delay, as the reports' fabric line says it."""
    delay = fabric.get("controller_delay_ms")
    return f", controller delayed {delay} ms" if delay else ""


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.pass { color: #1b7e1b; font-weight: bold; } .fail { color: #b00020; font-weight: bold; }
tr.hit td { background: #fff3e0; } .warn { background: #fff8e1; padding: 0.5em 1em; border-left: 4px solid #ffb300; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; } pre { background: #f7f7f7; padding: 1em; overflow-x: auto; }
"""


def cell(v, digits=3) -> str:
    """A table cell as summary.md writes it (collective_report.text), escaped for HTML."""
    return html.escape(text(v, digits))


def table(headers: list[str], rows: list[list], left: int = 1, marks: list[bool] | None = None) -> str:
    def tag(name, i):                  # the first `left` columns are text: left-aligned
        return f'<{name} class="l">' if i < left else f"<{name}>"
    head = "".join(f"{tag('th', i)}{html.escape(h)}</th>" for i, h in enumerate(headers))
    body = []
    for k, r in enumerate(rows):
        cls = ' class="hit"' if marks and marks[k] else ""
        body.append(f"<tr{cls}>" + "".join(f"{tag('td', i)}{c}</td>" for i, c in enumerate(r)) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def during(results: dict, at_s) -> dict | None:
    """The workload that was running at `at_s` (seconds after the workloads started)."""
    for w in results.get("workloads", []):
        if at_s is not None and w.get("started_s") is not None and \
                w["started_s"] <= at_s <= w["started_s"] + w.get("wall_s", 0):
            return w
    return None


def embedded(path: str) -> str:
    kind = "image/svg+xml" if path.endswith(".svg") else "image/png"
    with open(path, "rb") as f:
        return f'<img alt="{html.escape(os.path.basename(path))}" src="data:{kind};base64,' \
               f'{base64.b64encode(f.read()).decode()}">'


def workload_tables(results: dict) -> str:
    """Each workload type's table (its `report_table` hook); rows of a workload that a fault hit are shaded."""
    hit = {w["name"] for f in results.get("faults", []) if (w := during(results, f.get("at_s")))}
    parts = []
    for name in REGISTRY:
        found = [w for w in results.get("workloads", []) if w.get("type") == name]
        t = hook(name, "report_table")(found) if found else None
        if not t or not t["rows"]:
            continue
        marks = [workload in hit for workload, _ in t["rows"]]
        rows = [[html.escape(c) for c in cells] for _, cells in t["rows"]]
        note = '<p>Shaded rows belong to a workload that a fault hit.</p>' if any(marks) else ""
        parts.append(f"<h2>{html.escape(t['title'])}</h2>" + table(t["headers"], rows, left=t["left"], marks=marks)
                     + note)
    return "".join(parts)


def faults_section(results: dict) -> str:
    rows = []
    for f in results.get("faults", []):
        w = during(results, f.get("at_s"))
        base = w["started_s"] if w else 0.0

        def rel(key):
            return cell(round(f[key] - base, 3)) if f.get(key) is not None else "-"
        rows.append([html.escape(f["kind"]), html.escape(f["target"]), html.escape(w["name"]) if w else "-",
                     rel("at_s"), rel("detected_s"), rel("recovered_s"),
                     rel("first_success_s") if f.get("first_success_s") is not None else rel("resumed_s"),
                     rel("restored_s"), html.escape(str(f.get("recovery") or "-"))])
    if not rows:
        return ""
    return ("<h2>Faults</h2><p>Seconds after the start of the workload each fault fell in.</p>" +
            table(["kind", "target", "during", "at", "detected", "recovered", "resumed", "restored", "recovery"],
                  rows, left=3))


def links_section(results: dict) -> str:
    usage = results.get("link_usage")
    if not usage or not usage["hottest"]:
        return ""
    return ("<h2>Busiest links</h2><p>Peak and mean utilisation (busier direction / link rate) over the sampling "
            f"intervals; every link over time in the heatmap below, the samples in "
            f'<a href="{html.escape(usage["file"])}">{html.escape(usage["file"])}</a>.</p>' +
            table(["link", "tier", "peak", "mean"], [[html.escape(h["link"]), html.escape(h["tier"]),
                                                     cell(h["peak"], 2), cell(h["mean"], 2)]
                                                    for h in usage["hottest"]], left=2))


def queues_section(results: dict) -> str:
    q = results.get("queues")
    if not q:
        return ""
    d = q["drops"]
    parts = [f"<h2>Queues</h2><p>Every shaped port's backlog over time in the queue heatmap below, the samples in "
             f'<a href="{html.escape(q["file"])}">{html.escape(q["file"])}</a>. Drops: {d["overflow"]} queue '
             f"overflow, {d['fault']} by faults, {d['other']} other.</p>"]
    if q["fullest"]:
        parts.append(table(["port", "link", "queue bytes", "peak bytes", "peak / queue", "overflow drops"],
                           [[html.escape(r["port"]), html.escape(r["link"]), cell(r["limit_bytes"]),
                             cell(r["peak_bytes"]), cell(r["peak_fraction"], 2), cell(r["overflow_drops"])]
                            for r in q["fullest"]], left=2))
    e = q.get("ecn")
    if e:
        parts.append(f"<p>ECN marking on {e['ports']} switch ports: {e['marked_packets']} packets marked CE of "
                     f"{e['ect_packets']} ECN-capable.</p>")
        if e["most_marked"]:
            parts.append(table(["port", "link", "ECN-capable", "marked CE"],
                               [[html.escape(r["port"]), html.escape(r["link"]), cell(r["ect_packets"]),
                                 cell(r["marked_packets"])] for r in e["most_marked"]], left=2))
    p = q.get("pfc")
    if p:
        parts.append(f"<p>PFC: {p['ports_paused']} of {p['ports']} upstream ports paused, {p['pauses']} pauses, "
                     f"{p['paused_s']:.2f} s paused in all.</p>")
        if p["most_paused"]:
            parts.append(table(["port", "link", "pauses", "paused s"],
                               [[html.escape(r["port"]), html.escape(r["link"]), cell(r["pauses"]),
                                 cell(r["paused_s"], 3)] for r in p["most_paused"]], left=2))
    return "".join(parts)


def write(results: dict, out_dir: str, summary_text: str) -> str:
    """Write out_dir/report.html; returns its path."""
    f = results["fabric"]
    ok = results.get("ok")
    parts = [f"<h1>{html.escape(results['scenario'])} "
             f"<span class=\"{'pass' if ok else 'fail'}\">{'PASS' if ok else 'FAIL'}</span></h1>",
             f"<p>{html.escape(f['kind'])}: {f['servers']} servers x {f['gpus_per_server']} GPUs, {f['switches']} "
             f"switches; NIC {f['nic_mbps']} Mbit/s, HB {f['hb_mbps']} Mbit/s; routing {html.escape(f['routing'])}"
             f"{' with data-plane failover' if f.get('failover') else ''}"
             f"{controller_delay(f)}; {html.escape(str(f.get('datapath')))} "
             f"datapath; hosts {html.escape(str(f.get('host_backend')))}; transport "
             f"{html.escape(str(f.get('transport', '-')))}. Started {html.escape(results.get('started', '-'))}.</p>"]
    env_path = os.path.join(out_dir, "environment.json")
    if os.path.exists(env_path):
        with open(env_path) as fh:
            env = json.load(fh)
        parts.append("<p>" + html.escape(f"testbed {env.get('testbed_version')} ({(env.get('git_commit') or '-')[:12]}"
                                         f"{', modified' if env.get('git_dirty') else ''}), kernel {env.get('kernel')}, "
                                         f"Open vSwitch {env.get('openvswitch')}, Python {env.get('python')}, "
                                         f"{env.get('cpus')} CPUs; command: {' '.join(env.get('command', []))}")
                     + "</p>")
    if results.get("warnings"):
        parts.append('<div class="warn"><b>Warnings</b><ul>' +
                     "".join(f"<li>{html.escape(w)}</li>" for w in results["warnings"]) + "</ul></div>")
    parts.append("<h2>Checks</h2>" + table(["check", "result", "detail"], [
        [html.escape(c["name"]), f"<span class=\"{'pass' if c['ok'] else 'fail'}\">{'PASS' if c['ok'] else 'FAIL'}</span>",
         html.escape(c.get("detail", ""))] for c in results.get("checks", [])], left=3))
    parts.append(workload_tables(results))
    parts.append(faults_section(results))
    parts.append(links_section(results))
    parts.append(queues_section(results))
    if results.get("captures"):
        parts.append("<h2>Captures</h2>" + table(
            ["point", "file", "packets", "RoCE", "truncated", "bad ICRC", "malformed"],
            [[html.escape(c["point"]), f'<a href="{html.escape(c["file"])}">{html.escape(os.path.basename(c["file"]))}</a>',
              cell(c.get("packets")), cell(c.get("roce_packets")), cell(c.get("truncated")), cell(c.get("bad_icrc")),
              cell(c.get("malformed"))] for c in results["captures"]], left=2))
    plots = os.path.join(out_dir, "plots")
    names = sorted(os.listdir(plots)) if os.path.isdir(plots) else []
    names.sort(key=lambda n: n != "fabric.svg")                  # the fabric first
    if names:
        parts.append("<h2>Plots</h2>" + "".join(embedded(os.path.join(plots, n)) for n in names))
    parts.append(f"<h2>Summary as printed</h2><pre>{html.escape(summary_text)}</pre>")
    path = os.path.join(out_dir, "report.html")
    with open(path, "w") as fh:
        fh.write(f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
                 f"{html.escape(results['scenario'])}: testbed report</title><style>{STYLE}</style></head><body>"
                 + "".join(parts) + "</body></html>")
    return path
