"""The collective workload's part of the run report: its table against the analytical model in summary.md and
plots/collectives.png (completion time, and busbw beside its bound, per operation, algorithm and size)."""
from __future__ import annotations

import os


def report_section(workloads: list[dict]) -> list[str]:
    rows = [r for w in workloads for r in w["rows"]]
    if not rows:
        return []
    lines = ["## Collectives: measured against the analytical model", "",
             "| op | algo | ranks | bytes | time s | busbw MB/s | bound MB/s | ratio | model time s | correct |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        model_t = r["seconds"] * r["bus_ratio"]
        asked = f" ({r['requested_bytes']} asked)" if r.get("requested_bytes", r["bytes"]) != r["bytes"] else ""
        lines.append(f"| {r['op']} | {r['algo']} | {r['ranks']} | {r['bytes']}{asked} | {r['seconds']:.3f} | "
                     f"{r['busbw_MBps']:.3f} | {r['bound_busbw_MBps']:.3f} | {r['bus_ratio']:.2f} | "
                     f"{model_t:.3f} | {'yes' if r['correct'] else 'NO'} |")
    return lines + [""]


def headline(w: dict) -> str:
    if not w.get("rows"):
        return w.get("name", "collective")
    return f"{w['name']} {max(x['bus_ratio'] for x in w['rows']):.2f}"


def comparable(w: dict) -> dict[tuple, dict]:
    return {(w["name"], f"{x['op']}/{x['algo']}", x["bytes"]): {
        "time s": x["seconds"], "busbw MB/s": x["busbw_MBps"], "busbw/bound": x["bus_ratio"]}
        for x in w.get("rows", [])}


def report_table(workloads: list[dict]) -> dict | None:
    """report.html's table: every size measured against the analytical bound."""
    rows = [(w["name"], [w["name"], f"{r['op']}/{r['algo']}", str(r["ranks"]), human(r["bytes"]), text(r["seconds"]),
                         text(r.get("busbw_MBps")), text(r.get("bound_busbw_MBps")), text(r.get("bus_ratio"), 2),
                         text(r.get("correct"))])
            for w in workloads for r in w.get("rows", [])]
    return {"title": "Collectives: measured against the analytical bound", "left": 2, "rows": rows,
            "headers": ["workload", "op/algo", "ranks", "size", "time s", "busbw MB/s", "bound MB/s", "ratio",
                        "correct"]}


def human(n) -> str:
    if n is None:
        return "-"
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            v = n / f
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n} B"


def text(v, digits=3) -> str:
    """A table cell: '-' for what was not measured, yes/NO, floats to `digits` places."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    rows = [r for w in workloads for r in w["rows"]]
    if not rows:
        return []
    from testbed.figures import plt     # matplotlib only when there is a report to draw
    labels = [f"{r['op']}/{r['algo']}\n{r['bytes'] >> 10} KiB" for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    xs = range(len(rows))
    a1.bar(xs, [r["seconds"] for r in rows], color="tab:blue")
    a1.set_xticks(list(xs), labels, fontsize=7, rotation=30, ha="right")
    a1.set_ylabel("completion time (s)")
    a1.set_title("completion time")
    a2.bar([x - 0.2 for x in xs], [r["busbw_MBps"] for r in rows], width=0.4, label="measured busbw")
    a2.bar([x + 0.2 for x in xs], [r["bound_busbw_MBps"] for r in rows], width=0.4, label="bound")
    a2.set_xticks(list(xs), labels, fontsize=7, rotation=30, ha="right")
    a2.set_ylabel("MB/s")
    a2.set_title("busbw against the analytical bound")
    a2.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(plots_dir, "collectives.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
