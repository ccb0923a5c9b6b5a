"""The wan_transfer workload's part of the run report: its record in results.json (RESULT_SCHEMA), its summary
line, its table (one row per connection count) and its section of summary.md."""
from __future__ import annotations

from testbed.schema_words import BOOL, INT, NUM, STR, arr, d, obj

RUN = obj({
    "connections": d(INT, "Parallel RC queue pairs."), "seconds": d(NUM, "First WRITE posted to the last one "
                                                                         "acknowledged."),
    "mbps": d(NUM, "Payload Mbit/s."), "of_rate": d(NUM, "mbps / the WAN link's rate."),
    "rtt_ms": d(NUM, "Round trip before the transfer: median of 1-byte WRITEs."),
    "window_mbps": d(NUM, "N x window x MTU / RTT."), "predicted_mbps": d(NUM, "min(window_mbps, the WAN's payload "
                                                                               "rate)."),
    "of_predicted": d(NUM, "mbps / predicted_mbps."), "window_bound": d(BOOL, "The windows cover less than the "
                                                                              "bandwidth-delay product."),
    "exact": d(BOOL, "The receiver's bytes equal the payload."), "wrong_bytes": INT, "retransmits": INT,
    "timeouts": INT,
})

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "from": STR, "to": STR, "sites": arr(STR, "The sender's and the receiver's site."),
    "wan_link": d(STR, "The WAN link between them."), "wan_mbps": d(NUM, "Its rate."),
    "wan_payload_mbps": d(NUM, "Its rate in payload: x MTU / (MTU + headers)."),
    "delay_us": d(NUM, "Its one-way delay."), "mtu": d(INT, "RoCE MTU: payload bytes per packet."),
    "window": d(INT, "Packets in flight per queue pair."), "window_bytes": INT, "size": d(INT, "Bytes per transfer."),
    "bdp_bytes": d(NUM, "The WAN's payload rate x the smallest measured round trip."),
    "connections_to_fill": d(INT, "The fewest windows that cover the bandwidth-delay product."),
    "errors": arr(STR), "runs": arr(RUN, "One per connection count."),
}


def summary(result: dict) -> str:
    if not result["runs"]:
        return "did not complete: " + "; ".join(result["errors"])
    parts = [f"{r['connections']}: {r['mbps']:.2f} Mbit/s ({r['of_rate']:.2f} of the WAN, {r['of_predicted']:.2f} "
             "of predicted)" for r in result["runs"]]
    return (f"{result['wan_link']} {result['wan_mbps']:g} Mbit/s, window {result['window']} pkts: " + ", ".join(parts)
            + ("" if all(r["exact"] for r in result["runs"]) else "; DATA DIFFER"))


def headline(result: dict) -> str:
    return f"{result.get('name', 'wan_transfer')} " + summary(result)


def comparable(result: dict) -> dict[tuple, dict]:
    return {(result["name"], f"{r['connections']} connections", result["size"]): {
        "Mbit/s": r["mbps"], "of WAN": r["of_rate"], "RTT ms": r["rtt_ms"]} for r in result.get("runs", [])}


def table(result: dict) -> str:
    lines = [f"#  wan_transfer {result['from']} -> {result['to']} over {result['wan_link']} ({result['wan_mbps']:g} "
             f"Mbit/s, {result['delay_us'] / 1e3:g} ms one way), {result['size']} B, window {result['window']} x "
             f"{result['mtu']} B" + (f", BDP {result['bdp_bytes'] / 1e3:.1f} kB: {result['connections_to_fill']} "
                                     "windows fill it" if "bdp_bytes" in result else ""),
             f"# {'conns':>5} {'RTT ms':>7} {'Mbit/s':>7} {'of WAN':>7} {'window/RTT':>10} {'predicted':>9} "
             f"{'of pred':>7} {'retx':>5} {'data':>6}"]
    for r in result["runs"]:
        lines.append(f"  {r['connections']:>5} {r['rtt_ms']:>7.1f} {r['mbps']:>7.2f} {r['of_rate']:>7.2f} "
                     f"{r['window_mbps']:>10.2f} {r['predicted_mbps']:>9.2f} {r['of_predicted']:>7.2f} "
                     f"{r['retransmits']:>5} {'exact' if r['exact'] else 'DIFFER':>6}")
    return "\n".join(lines)


def tables(result: dict) -> list[str]:
    return [table(result)]


def report_section(workloads: list[dict]) -> list[str]:
    lines = []
    for w in workloads:
        lines += [f"## WAN transfer {w.get('name', '')}: parallel connections over a long fat pipe", "",
                  f"{w['from']} ({w['sites'][0]}) -> {w['to']} ({w['sites'][1]}) over {w['wan_link']}, "
                  f"{w['wan_mbps']:g} Mbit/s, {w['delay_us'] / 1e3:g} ms one way; window {w['window']} packets of "
                  f"{w['mtu']} B per queue pair.", "",
                  "| connections | RTT ms | Mbit/s | of WAN rate | min(N window / RTT, rate) | of predicted | data |",
                  "|---|---|---|---|---|---|---|"]
        for r in w["runs"]:
            lines.append(f"| {r['connections']} | {r['rtt_ms']:.1f} | {r['mbps']:.2f} | {r['of_rate']:.2f} | "
                         f"{r['predicted_mbps']:.2f} | {r['of_predicted']:.2f} | "
                         f"{'exact' if r['exact'] else 'differ'} |")
        if not w["runs"]:
            lines.append("| did not complete | | | | | | |")
        lines.append("")
    return lines


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    return []
