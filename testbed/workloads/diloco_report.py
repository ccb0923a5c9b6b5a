"""The diloco workload's part of the run report: its record in results.json (RESULT_SCHEMA), its summary line,
its table (one row per variant) and its section of summary.md."""
from __future__ import annotations

from testbed.schema_words import BOOL, INT, NUM, STR, arr, at, d, dur, nullable, obj

VARIANT = obj({
    "variant": STR, "quantize": d(INT, "Bits of the exchanged pseudo-gradients (0: float32)."),
    "completed": BOOL, "errors": arr(STR),
    "wan_bytes_per_step": d(NUM, "Payload bytes sent across sites per inner step, all ranks."),
    "wan_wire_bytes_per_step": d(NUM, "IP bytes the queue pairs to other sites sent per inner step (headers, "
                                      "acknowledgements and retransmissions included)."),
    "peak_wan_bytes": d(NUM, "Payload bytes across sites in the step that sent most."),
    "peak_wan_wire_bytes": d(NUM, "IP bytes across sites in that step."), "peak_step": INT,
    "peak_wan_mbps": d(nullable(NUM), "That step's WAN bytes over the compute window: the rate that hides it."),
    "wan_link_bytes_per_step": d(NUM, "Bytes the fabric's WAN links carried per inner step, both ways, by their "
                                      "ports' own counters (fabric.sites only)."),
    "sampled_wan_bytes_per_step": d(NUM, "Bytes the cross-site ports (sampled_ports) sent per inner step, by "
                                         "their queues' own counters sampled over the run."),
    "sampled_peak_wan_bytes": d(NUM, "The most bytes those ports sent within any window of one inner step's "
                                     "compute (sampled_window_s), from the samples: what had to cross while a "
                                     "step computed. Tops out at the link's rate x the window when a burst "
                                     "outlasts it."),
    "sampled_peak_wan_mbps": d(nullable(NUM), "That over the window: the peak rate seen on the wire."),
    "sampled_window_s": dur("the window of the sampled peak: one inner step's compute."),
    "sampled_period_s": dur("mean period between the samples of the cross-site ports."),
    "wan_achieved_mbps": d(nullable(NUM), "WAN payload over the time spent in the exchanges."),
    "step_s": dur("wall-clock per inner step."), "loss": d(NUM, "The reference's loss after the last step."),
    "replicas": {"type": "object"}, "quantization_max_dev": NUM,
    "membership": d(obj({
        "members": arr(arr(INT), "The sites taking part in each outer step."),
        "resyncs": arr(arr(INT), "[inner steps done, site]: a site back took the global state then."),
        "events": arr(obj({"event": d(STR, "left or rejoined."), "site": INT, "outer_step": INT, "done": INT,
                           "event_at": at("when the site's leader left or came back."),
                           "event_s": dur("the same, since the workload began (add its started_s for the "
                                          "faults' time base).")})),
        "resync_bytes": d(INT, "Bytes of state (outer parameters and momentum) handed to sites coming back.")}),
        "rejoin: which sites took part in which outer step, and when a site left and came back."),
})

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "sites": arr(arr(STR), "GPU host names per site."), "leaders": arr(STR, "The host crossing sites per site."),
    "gpus": INT, "count": d(INT, "float32 parameters."), "bytes": INT, "steps": INT, "sync_every": INT,
    "fragments": INT, "compute_s": dur("emulated compute per inner step."),
    "dilation": d(NUM, "Emulated / full-scale time of an exchange."),
    "sampled_ports": arr(STR, "The ports whose sampled counters measure what crosses sites: the WAN links' ends, "
                              "or the leaders' NIC ports where each site is one server; absent otherwise."),
    "sampled_ports_mbps": d(NUM, "Their links' rates, summed: a burst drains at most this fast."),
    "variants": arr(VARIANT, "One per run."),
}


def label(row: dict) -> str:
    return row["variant"] + (f" {row['quantize']}-bit" if row["quantize"] else "")


def _ddp(result: dict) -> dict | None:
    return next((r for r in result["variants"] if r["variant"] == "ddp" and "replicas" in r), None)


def summary(result: dict) -> str:
    ddp = _ddp(result)
    parts = []
    for r in result["variants"]:
        if "replicas" not in r:
            parts.append(f"{label(r)} did not complete")
            continue
        rel = f" (x{r['wan_bytes_per_step'] / ddp['wan_bytes_per_step']:.3f} of ddp)" if ddp and r is not ddp else ""
        parts.append(f"{label(r)} {r['wan_bytes_per_step'] / 1e3:.1f} kB/step{rel} {r['step_s']:.2f} s/step")
    return f"H={result['sync_every']} P={result['fragments']}: " + ", ".join(parts)


def headline(result: dict) -> str:
    return f"{result.get('name', 'diloco')} " + summary(result)


def comparable(result: dict) -> dict[tuple, dict]:
    return {(result["name"], label(r), result["bytes"]): {
        "WAN B/step": r["wan_bytes_per_step"], "peak WAN B": r["peak_wan_bytes"], "s/step": r["step_s"]}
        for r in result.get("variants", []) if "replicas" in r}


def table(result: dict) -> str:
    lines = [f"#  diloco on {len(result['sites'])} sites ({result['gpus']} GPUs), {result['bytes']} B of parameters, "
             f"H={result['sync_every']}, P={result['fragments']}, {result['steps']} steps, compute "
             f"{result['compute_s']:.3f} s/step",
             f"# {'variant':<16} {'WAN B/step':>11} {'wire B/step':>12} {'/ddp':>6} {'peak B':>9} {'peak Mbit/s':>11} "
             f"{'sampled peak B':>14} {'s/step':>7} {'loss':>8} {'replicas':>9}"]
    ddp = _ddp(result)
    for r in result["variants"]:
        if "replicas" not in r:
            lines.append(f"  {label(r):<16} (did not complete)")
            continue
        rel = r["wan_bytes_per_step"] / ddp["wan_bytes_per_step"] if ddp else None
        ok = not r["replicas"]["wrong"] and r["replicas"]["outer_agree"]
        peak = "-" if r["peak_wan_mbps"] is None else f"{r['peak_wan_mbps']:.2f}"
        sampled = f"{r['sampled_peak_wan_bytes']:.0f}" if "sampled_peak_wan_bytes" in r else "-"
        lines.append(f"  {label(r):<16} {r['wan_bytes_per_step']:>11.0f} {r['wan_wire_bytes_per_step']:>12.0f} "
                     f"{'-' if rel is None else f'{rel:.3f}':>6} {r['peak_wan_bytes']:>9.0f} {peak:>11} "
                     f"{sampled:>14} {r['step_s']:>7.3f} {r['loss']:>8.4f} {'exact' if ok else 'DIFFER':>9}")
    return "\n".join(lines)


def tables(result: dict) -> list[str]:
    return [table(result)]


def report_section(workloads: list[dict]) -> list[str]:
    lines = []
    for w in workloads:
        lines += [f"## DiLoCo {w.get('name', '')}: what crosses sites", "",
                  f"{len(w['sites'])} sites ({', '.join('+'.join(s) for s in w['sites'])}), leaders "
                  f"{', '.join(w['leaders'])}; H={w['sync_every']}, P={w['fragments']}.", "",
                  "| variant | WAN bytes / step | wire bytes / step | peak step bytes | peak Mbit/s | "
                  "sampled peak step bytes | s / step | replicas |", "|---|---|---|---|---|---|---|---|"]
        for r in w["variants"]:
            if "replicas" not in r:
                lines.append(f"| {label(r)} | did not complete | | | | | | |")
                continue
            ok = not r["replicas"]["wrong"] and r["replicas"]["outer_agree"]
            peak = "-" if r["peak_wan_mbps"] is None else f"{r['peak_wan_mbps']:.2f}"
            sampled = f"{r['sampled_peak_wan_bytes']:.0f}" if "sampled_peak_wan_bytes" in r else "-"
            lines.append(f"| {label(r)} | {r['wan_bytes_per_step']:.0f} | {r['wan_wire_bytes_per_step']:.0f} | "
                         f"{r['peak_wan_bytes']:.0f} | {peak} | {sampled} | {r['step_s']:.3f} | "
                         f"{'exact' if ok else 'differ'} |")
        lines.append("")
    return lines


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    return []
