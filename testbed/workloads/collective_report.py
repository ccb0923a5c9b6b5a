"""The collective workload's part of the run report: its record in results.json (RESULT_SCHEMA), its table
against the analytical model in summary.md and plots/collectives.png (completion time, and busbw beside its bound,
per operation, algorithm and size)."""
from __future__ import annotations

import os

from testbed.schema_words import BOOL, BYTES_BY_PORT, INT, NUM, STR, arr, at, d, dur, nullable, obj

PHASE = obj({"name": STR, "link": STR, "seconds": dur("the phase's mean time."), "samples": INT,
             "bound_seconds": dur("its link's bound."), "ratio": d(nullable(NUM), "bound / measured.")},
            ["name", "link", "seconds"], closed=False)

ROW = obj({
    "op": STR, "algo": STR, "ranks": INT, "bytes": d(INT, "Bytes per rank's buffer (nccl-tests' size)."),
    "requested_bytes": d(INT, "The size asked for (bytes ran in whole elements)."), "count": INT, "dtype": STR,
    "seconds": dur("mean time of the operation (slowest rank per iteration)."),
    "algbw_MBps": NUM, "busbw_MBps": NUM, "bound_busbw_MBps": d(NUM, "The links' bound on busbw."),
    "bus_ratio": d(NUM, "busbw / bound."), "correct": d(BOOL, "Equal to numpy's result on every rank."),
    "fabric_bytes": INT, "uplink_bytes": BYTES_BY_PORT, "uplink_imbalance": d(nullable(NUM), "max / mean uplink."),
    "out_of_order": INT, "retransmits": INT, "send_nic_bytes": INT, "recovered_chunks": INT, "drops": INT,
    "ecn_marked_packets": d(INT, "CE-marked packets the ranks received (the switches' ECN marks, fabric.ecn)."),
    "cnp_sent": d(INT, "CNPs the ranks sent in answer to CE marks (at most one per queue pair per CNP interval)."),
    "cnp_received": d(INT, "CNPs the ranks received (congestion: dcqcn cuts its rate on them)."),
    "pfc_pauses": d(INT, "Pauses of the fabric's upstream ports while the size ran (fabric.pfc; 0 without it)."),
    "pfc_paused_s": dur("the time the fabric's ports were paused, summed over the ports (fabric.pfc)."),
    "transport": d({"type": "object"}, "Non-zero transport counters."),
    "rank_cpu_s": d(nullable({"type": "object", "properties": {"user": NUM, "system": NUM}}),
                    "Seconds (a duration) of CPU the ranks' own processes used per measured operation, all ranks "
                    "together: in user "
                    "space (their transport) and in the kernel on their behalf (system calls; the kernel's softirq "
                    "work and the switches' are not in it). null when a rank did not say (a spare that joined late)."),
    "hb_bytes": d(INT, "Bytes over the HB links, both ways (warm-up included, as every byte counter)."),
    "link_bytes": d(INT, "Bytes on all links (SPCL): NIC sends + switch egress + hb_bytes."),
    "tree_min_bytes": d(INT, "algo multicast: each shard once over each link of its minimal tree, per operation run."),
    "tree_ratio": d(nullable(NUM), "algo multicast: (NIC sends + switch egress) / tree_min_bytes; 1 is the minimum."),
    "phases": arr(PHASE, "Hierarchical algorithms: each phase against its own link's bound."),
    "sequential_bound_busbw_MBps": d(NUM, "Pipelined variant: the sequential algorithm's bound it beats."),
}, ["op", "algo", "bytes", "seconds", "algbw_MBps", "busbw_MBps", "bound_busbw_MBps", "bus_ratio"], closed=False)

RECOVERY = obj({
    "epoch": INT, "policy": STR, "failed": d(nullable(arr(STR)), "The hosts declared failed."),
    "replaced": d({"type": ["object", "null"]}, "Failed host -> spare."), "world": d(nullable(INT), "Ranks after."),
    "lost_steps": d(nullable(INT), "Started steps run again."),
    "detected_at": at("when the first rank noticed the failure."), "detected_by": nullable(STR),
    "decided_at": at("when the verdict was reached."), "reformed_at": at("when every member of the new epoch was in."),
    "first_success_at": at("when the first collective after it completed on every member."),
    "activation_s": dur("how long the manager took to activate a spare."), "error": nullable(STR),
}, ["epoch", "policy"], closed=False)

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "op": STR, "algo": STR, "ranks": INT, "rows": arr(ROW, "One row per size, as nccl-tests prints."),
    "loss_dropped_packets": d(INT, "With `loss`: the packets the ranks' random-loss rules dropped."),
    "first_recovered_at": at("when the communicator first re-formed after a failure."),
    "recoveries": arr(RECOVERY, "One record per re-formed epoch."),
    "heartbeat": obj({"period_s": dur("heartbeat period."), "timeout_s": dur("heartbeat timeout."),
                      "max_peer_silence_s": dur("longest silence of a live peer."),
                      "max_own_gap_s": dur("longest gap between a rank's own beats.")}, closed=False),
}


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
