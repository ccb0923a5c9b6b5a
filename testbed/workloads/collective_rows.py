"""A collective's results: one row per size (nccl-tests' time, algbw and busbw against the bound, the switches'
and NICs' bytes, the transport's counters), the checks over the rows, the tables and the summary line."""
from __future__ import annotations

from testbed.fabric import ovs
from testbed.model import bounds, multicast_minimum
from testbed.workloads import collective_phases, traffic
from testbed.workloads.collective_fabric import cluster, itemsize, model_algo, multicast_scope, ranks


def row(fabric, spec: dict, size: int, outs: list[dict], before: dict, after: dict, hb_bytes: int = 0,
        pfc_growth: dict | None = None) -> dict:
    n = outs[0].get("world", len(outs))
    iters = min(len(o["times"]) for o in outs)
    # an iteration takes as long as its slowest rank (of those that ran it: a spare joins late);
    # report the mean over iterations
    per_iter = [max(o["times"][i] for o in outs if o["times"][i] is not None) for i in range(iters)]
    seconds = sum(per_iter) / iters
    nbytes = outs[0]["count"] * itemsize(spec) * (n if spec["op"] == "allgather" else 1)
    algbw = nbytes / seconds / 1e6
    busbw = algbw * bounds.bus_factor(spec["op"], n)
    bound = bounds.bound_busbw(spec["op"], model_algo(fabric, spec), nbytes, cluster(fabric)) / 1e6
    counters = {}
    for o in outs:
        for k, v in o.get("counters", {}).items():
            counters[k] = counters.get(k, 0) + v
    return {"type": "collective", "op": spec["op"], "algo": spec["algo"], "ranks": n, "bytes": nbytes,
            "requested_bytes": size,
            "count": outs[0]["count"], "dtype": spec.get("dtype", "float32"), "seconds": round(seconds, 6),
            "algbw_MBps": round(algbw, 4), "busbw_MBps": round(busbw, 4), "bound_busbw_MBps": round(bound, 4),
            "bus_ratio": round(busbw / bound, 4), "correct": all(o["correct"] is not False for o in outs),
            "fabric_bytes": sum(ovs.growth(before, after, p) for p in after),
            "uplink_bytes": (up := traffic.uplink_bytes(fabric, before, after)),
            "uplink_imbalance": round(max(up.values()) / (sum(up.values()) / len(up)), 3)
            if up and sum(up.values()) else None,
            "out_of_order": counters.get("out_of_order", 0),
            "retransmits": counters.get("retransmits", 0),
            "ecn_marked_packets": counters.get("ecn_ce_received", 0),
            "cnp_sent": counters.get("cnp_sent", 0), "cnp_received": counters.get("cnp_received", 0),
            **(pfc_growth or {"pfc_pauses": 0, "pfc_paused_s": 0.0}),
            "send_nic_bytes": send_nic_bytes(fabric, before, after),
            "recovered_chunks": sum(o.get("recovered_chunks", 0) for o in outs),
            "drops": sum(v for k, v in counters.items() if k.startswith("drop")),
            "transport": {k: v for k, v in sorted(counters.items()) if v and not k.endswith(("packets", "bytes"))},
            "rank_cpu_s": rank_cpu(outs, iters),
            **collective_phases.extra_fields(spec["op"], spec["algo"], nbytes, cluster(fabric), outs),
            **link_traffic(fabric, spec, outs, before, after, hb_bytes)}


def rank_cpu(outs: list[dict], iters: int) -> dict | None:
    """The ranks' own CPU seconds per measured operation, every rank together: {user, system}; None if a rank
    did not say (a spare that joined late)."""
    steps = [o.get("cpu") or [] for o in outs]
    if not iters or any(len(c) < iters or None in c[:iters] for c in steps):
        return None
    return {part: round(sum(c[i][k] for c in steps for i in range(iters)) / iters, 6)
            for k, part in enumerate(("user", "system"))}


def link_traffic(fabric, spec: dict, outs: list[dict], before: dict, after: dict, hb_bytes: int) -> dict:
    """Bytes on all links as SPCL counts them (NIC sends + switch egress, and the HB links' both ways),
    over the warm-up and measured iterations; multicast rows add the minimal trees' bytes for as many
    operations and the ratio of the network's bytes to them (1 = every shard once over each tree link)."""
    network = send_nic_bytes(fabric, before, after) + sum(ovs.growth(before, after, p) for p in after)
    out = {"hb_bytes": hb_bytes, "link_bytes": network + hb_bytes}
    hosts = [h.name for h in ranks(fabric)]
    n = outs[0].get("world", len(outs))
    if spec["algo"] != "multicast" or n != len(hosts):
        return out                          # a re-formed job has other members than the fabric's GPUs
    ops = spec.get("warmup", 1) + min(len(o["times"]) for o in outs)
    if spec["op"] == "allgather":
        per_op = multicast_minimum.allgather_minimum(fabric, hosts, outs[0]["count"] * itemsize(spec),
                                                     multicast_scope(fabric, spec))
    else:
        per_op = multicast_minimum.broadcast_minimum(fabric, hosts, hosts[spec.get("root", 0)],
                                                     outs[0]["count"] * itemsize(spec))
    out.update(tree_min_bytes=ops * per_op, tree_ratio=round(network / (ops * per_op), 4) if per_op else None)
    return out


def send_nic_bytes(fabric, before: dict, after: dict) -> int:
    """Bytes the GPUs' NICs sent: what the switches received on their GPU-facing ports."""
    ports = [f"{l.b}:{l.b_port}" if l.a in fabric.hosts else f"{l.a}:{l.a_port}"
             for l in fabric.links if l.kind == "nic"]
    return sum(after[p]["rx_bytes"] - before[p]["rx_bytes"] for p in ports if p in after)


def summarize(spec: dict, n: int, rows: list[dict], errors: list[str]) -> dict:
    checks = []
    if errors:
        checks.append({"name": "completed", "ok": False, "detail": errors[0]})
    wrong = [r["bytes"] for r in rows if not r["correct"]]
    if spec.get("check", True):
        checks.append({"name": "correct", "ok": not wrong and bool(rows),
                       "detail": f"{len(rows) - len(wrong)}/{len(rows)} sizes equal numpy's result on every rank"})
    ceiling = spec.get("expect", {}).get("max_tree_ratio")
    if ceiling is not None and rows:
        worst = max((r.get("tree_ratio") or 0 for r in rows), default=0)
        checks.append({"name": "tree_minimum", "ok": worst <= ceiling and all(r.get("tree_ratio") for r in rows),
                       "detail": f"network bytes / minimal trees' bytes <= {worst:.2f} (expected <= {ceiling})"})
    floor = spec.get("expect", {}).get("min_bus_ratio")
    if floor is not None and rows:
        worst = min(r["bus_ratio"] for r in rows)
        checks.append({"name": "busbw", "ok": worst >= floor,
                       "detail": f"busbw/bound >= {worst:.2f} (expected >= {floor})"})
    return {"type": "collective", "ok": all(c["ok"] for c in checks), "op": spec["op"], "algo": spec["algo"],
            "ranks": n, "rows": rows, "checks": checks}


def table(result: dict) -> str:
    """nccl-tests style rows."""
    return "\n".join([table_header(result["op"], result["algo"], result["ranks"])] +
                     [table_row(r) for r in result["rows"]])


def table_header(op: str, algo: str, ranks: int) -> str:
    return (f"#  {op} / {algo}, {ranks} ranks\n"
            f"# {'size':>10} {'count':>10} {'type':>8} {'time(us)':>12} {'algbw MB/s':>11} {'busbw MB/s':>11} "
            f"{'bound':>8} {'ratio':>6} {'check':>6}")


def table_row(r: dict) -> str:
    """One size's row (after a note if the size ran rounded)."""
    note = f"# note: {r['requested_bytes']} B asked, {r['bytes']} B ran (whole {r['dtype']} elements)\n" \
        if r.get("requested_bytes", r["bytes"]) != r["bytes"] else ""
    return (f"{note}  {r['bytes']:>10} {r['count']:>10} {r['dtype']:>8} {r['seconds'] * 1e6:>12.0f} "
            f"{r['algbw_MBps']:>11.3f} {r['busbw_MBps']:>11.3f} {r['bound_busbw_MBps']:>8.3f} "
            f"{r['bus_ratio']:>6.2f} {'ok' if r['correct'] else 'WRONG':>6}") + \
        (f"\n{phases}" if (phases := collective_phases.table_lines(r)) else "") + \
        (f"\n#   network {r['link_bytes'] - r['hb_bytes']} B, minimal trees {r['tree_min_bytes']} B, "
         f"ratio {r['tree_ratio']:.2f}" if r.get("tree_ratio") else "")


def summary(w: dict) -> str:
    best = max((r["bus_ratio"] for r in w["rows"]), default=0)
    what = f"{w['op']}/{w['algo']} on {w['ranks']} ranks, {len(w['rows'])} sizes, best busbw/bound {best:.2f}"
    trees = [r["tree_ratio"] for r in w["rows"] if r.get("tree_ratio")]
    if trees:                       # how close the multicast came to each shard once over each tree link
        what += f", network bytes / tree minimum {min(trees):.2f}" + (f"-{max(trees):.2f}" if len(trees) > 1 else "")
    rounded = [r for r in w["rows"] if r.get("requested_bytes", r["bytes"]) != r["bytes"]]
    if rounded:                     # what ran is not what was asked: say so where the figures are read
        what += "; ROUNDED: " + ", ".join(f"{r['requested_bytes']} B asked, {r['bytes']} B ran" for r in rounded)
    for rec in w.get("recoveries", []):
        if rec["policy"] == "rejoin":
            what += f"; {', '.join(rec['joined'])} rejoined" if rec.get("reformed_at") else "; a rejoin did not complete"
            continue
        what += (f"; recovered ({rec['policy']}) from the failure of {', '.join(rec['failed'] or ['?'])}"
                 if rec.get("reformed_at") else f"; {rec['policy']} recovery did not complete")
    return what


def tables(w: dict) -> list[str]:
    return [table(w)]
