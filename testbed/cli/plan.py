"""`testbed plan`: full-scale switch, transceiver, cost and power counts, the emulated miniature, and predictions.

    testbed plan --gpus 32768 --hb-size 256 --radix 64 [--kind rail-only|rail-optimized|clos] [--oversubscription X]
                 [--predict dense|moe|both] [--calibration FILE] [--plot DIR] [--json] [--table2]

The counting method is documented in testbed.planning.counts, cost and power in testbed.planning.costs, the
miniature in testbed.planning.miniature, the iteration-time model in testbed.planning.prediction and calibration
in testbed.planning.calibration. Bad input prints one line `testbed plan: error: ...` and returns 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from testbed.fabric.kinds import NAMES, RAIL_ONLY, RAIL_OPTIMIZED
from testbed.planning import calibration as calib
from testbed.planning.costs import UnitCosts, savings
from testbed.planning.counts import PAPER_HB_SIZE, PlanError, count, paper_table
from testbed.planning.miniature import (
    DEFAULT_GPUS_PER_SERVER,
    DEFAULT_NIC_MBPS,
    DEFAULT_SERVERS,
    check_miniature,
    scaled_parameters,
)
from testbed.planning.prediction import FABRICS, Hardware, predict, preset
from testbed.planning.report import fabric_rows, savings_line, table, units_line
from testbed.planning.report import paper_table as paper_text

PROG = "testbed plan"
UNCALIBRATED = ("UNCALIBRATED: every collective at its analytical bound (efficiency 1.0); pass --calibration "
                "FILE (efficiency factors, or a testbed results.json) to calibrate")
SENSITIVITY = 0.8                          # the uniform efficiency shown next to uncalibrated predictions


def _one_line_error(message: str):
    """argparse errors as one line on stderr and exit status 2, instead of a usage block."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="full-scale fabric counts, costs and iteration-time predictions",
                              description=__doc__.split("\n\n")[0])
    p.error = _one_line_error
    p.add_argument("--gpus", type=int, help="GPUs in the cluster")
    p.add_argument("--hb-size", type=int, help="GPUs per HB (NVLink) domain, K")
    p.add_argument("--radix", type=int, help="ports per switch, R")
    p.add_argument("--kind", choices=NAMES, help="count one fabric only (default: rail-optimized and rail-only)")
    p.add_argument("--oversubscription", type=float, default=1.0, help="leaf down:up ratio (default 1, non-blocking)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--table2", action="store_true",
                   help=f"reproduce Table II of the Rail-only paper (HB size {PAPER_HB_SIZE} unless --hb-size)")
    c = p.add_argument_group("cost and power assumptions")
    d = UnitCosts()
    c.add_argument("--port-usd", type=float, default=d.port_usd)
    c.add_argument("--transceiver-usd", type=float, default=d.transceiver_usd)
    c.add_argument("--port-watts", type=float, default=d.port_watts)
    c.add_argument("--transceiver-watts", type=float, default=d.transceiver_watts)
    m = p.add_argument_group("emulated miniature")
    m.add_argument("--mini-servers", type=int, default=DEFAULT_SERVERS)
    m.add_argument("--mini-gpus-per-server", type=int, default=DEFAULT_GPUS_PER_SERVER)
    m.add_argument("--mini-nic-mbps", type=float, default=DEFAULT_NIC_MBPS)
    r = p.add_argument_group("prediction (testbed.planning.prediction documents the model and defaults)")
    r.add_argument("--predict", nargs="?", const="both", choices=("dense", "moe", "both"),
                   help="predict iteration time on rail-optimized and rail-only (default: both models)")
    r.add_argument("--calibration", metavar="FILE", help="efficiency factors JSON or a testbed results.json")
    r.add_argument("--plot", metavar="DIR", help="write PNG plots of predicted iteration time to DIR")
    h = Hardware()
    r.add_argument("--gpu-tflops", type=float, default=h.gpu_tflops)
    r.add_argument("--utilisation", type=float, default=h.utilisation)
    r.add_argument("--hb-gbps", type=float, default=h.hb_gbps, help="C_F per GPU and direction")
    r.add_argument("--nic-gbps", type=float, default=h.nic_gbps, help="C_S per GPU and direction")
    for name in ("tp", "pp", "dp", "ep", "layers", "hidden", "seq-len", "global-batch", "micro-batch", "experts",
                 "top-k"):
        r.add_argument(f"--{name}", type=int, help="override the preset")
    p.set_defaults(func=run)
    return p


def _positive(args, *names, zero_ok=False):
    for name in names:
        v = getattr(args, name.replace("-", "_"))
        if v is not None and not (v >= 0 if zero_ok else v > 0):
            raise PlanError(f"--{name} must be {'non-negative' if zero_ok else 'positive'}, got {v:g}")


def run(args) -> int:
    try:
        report = build_report(args)
    except PlanError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report["json"], indent=2) if args.json else report["text"])
    return 0


def build_report(args) -> dict:
    _positive(args, "port-usd", "transceiver-usd", "port-watts", "transceiver-watts", zero_ok=True)
    _positive(args, "mini-servers",
              "mini-gpus-per-server", "mini-nic-mbps", "gpu-tflops", "hb-gbps", "nic-gbps", "tp", "pp", "dp",
              "ep", "layers", "hidden", "seq-len", "global-batch", "micro-batch", "experts", "top-k")
    units = UnitCosts(args.port_usd, args.transceiver_usd, args.port_watts, args.transceiver_watts)
    if args.table2:
        return _table2(args, units)
    for name in ("gpus", "hb_size", "radix"):
        if getattr(args, name) is None:
            raise PlanError(f"--{name.replace('_', '-')} is required (or use --table2)")
    text, out = [], {"units": units.to_json()}
    kinds = [args.kind] if args.kind else list(FABRICS)
    fabrics = [count(k, args.gpus, args.hb_size, args.radix, args.oversubscription) for k in kinds]
    servers = args.gpus // args.hb_size
    text.append(f"Fabric plan: {args.gpus} GPUs in {servers} HB domains of {args.hb_size} ({args.hb_size} rails "
                f"of {servers} GPUs), radix {args.radix}, "
                + ("non-blocking" if args.oversubscription == 1 else f"oversubscription {args.oversubscription:g}:1"))
    text.append(fabric_rows(fabrics, units))
    text += [f"  {f.kind}: {n}" for f in fabrics for n in f.notes]
    out["fabrics"] = [f.to_json() for f in fabrics]
    if len(fabrics) == 2:
        s = savings(fabrics[0], fabrics[1], units)
        text.append(savings_line(s))
        out["savings"] = s.to_json()
    text.append(units_line(units))
    text.append("")
    mini_text, out["miniature"] = _miniature(args, fabrics)
    text += mini_text
    if args.predict or args.plot:
        pred_text, out["prediction"] = _predictions(args)
        text += [""] + pred_text
    return {"text": "\n".join(text), "json": out}


def _table2(args, units) -> dict:
    k = args.hb_size or PAPER_HB_SIZE
    pairs = paper_table(k)
    sav = [savings(so, ro, units) for so, ro in pairs]
    text = [f"Table II (Rail-only paper) computed by the counting method: HB domains of {k} GPUs (GH200), "
            "non-blocking; SOTA = rail-optimized fat tree", paper_text(pairs, sav), units_line(units)]
    rows = [{"gpus": so.gpus, "radix": so.radix, "rail_optimized": so.to_json(), "rail_only": ro.to_json(),
             "savings": s.to_json()} for (so, ro), s in zip(pairs, sav)]
    return {"text": "\n".join(text), "json": {"hb_size": k, "units": units.to_json(), "table2": rows}}


def _miniature(args, fabrics) -> tuple[list[str], dict]:
    servers = min(args.mini_servers, args.gpus // args.hb_size)
    gps = min(args.mini_gpus_per_server, args.hb_size)
    text = [f"Emulated miniature: {servers} servers x {gps} GPUs, built with testbed.fabric.topo.build and counted "
            "against the plan"]
    out, rows = {}, {}
    for f in fabrics:
        check = check_miniature(f.kind, servers, gps, args.oversubscription, args.mini_nic_mbps,
                                args.hb_gbps / args.nic_gbps)
        out[f.kind] = check.to_json()
        if check.not_comparable:
            text.append(f"  {f.kind}: not compared: {check.not_comparable}")
            continue
        verdict = "match" if check.ok else "DIFFER"
        text.append(f"  {f.kind} (radix {check.planned.radix}): planned and emulated counts {verdict}")
        for row in check.rows:
            rows.setdefault(row.item, {})[f.kind] = f"{row.planned:g}/{row.emulated:g}"
        scaled = scaled_parameters(f, check.planned, args.nic_gbps, args.hb_gbps, args.mini_nic_mbps, check.spines)
        out[f.kind]["scaled"] = scaled
        text += [f"    scaled: {line}" for line in scaled]
    compared = [f.kind for f in fabrics if not out[f.kind]["not_comparable"]]
    if compared:
        text.append(table(["item (planned/emulated)"] + compared,
                          [[item] + [v.get(k, "") for k in compared] for item, v in rows.items()]))
    return text, out


def _workloads(args, hw: Hardware) -> dict:
    which = ["dense", "moe"] if (args.predict or "both") == "both" else [args.predict]
    overrides = {"tp": args.tp, "pp": args.pp, "dp": args.dp, "ep": args.ep, "layers": args.layers,
                 "hidden": args.hidden, "seq_len": args.seq_len, "global_batch": args.global_batch,
                 "micro_batch": args.micro_batch, "top_k": args.top_k}
    out = {}
    for name in which:
        extra = {"experts": args.experts} if name == "moe" else {}
        out[name] = preset(name, hw, **overrides, **extra)
    return out


def _predictions(args) -> tuple[list[str], dict]:
    hw = Hardware(args.gpu_tflops, args.utilisation, args.hb_gbps, args.nic_gbps, args.hb_size, args.gpus)
    cal = calib.load(args.calibration) if args.calibration else calib.Calibration()
    ideal = calib.Calibration()
    workloads = _workloads(args, hw)
    text = [f"Predicted iteration time: {hw.gpus} GPUs, HB domain {hw.hb_size}, {hw.gpu_tflops:g} TFLOP/s x "
            f"{hw.utilisation:g} per GPU, C_F {hw.hb_gbps:g} Gb/s, C_S {hw.nic_gbps:g} Gb/s"]
    text.append(f"calibrated from {cal.source}" if cal.calibrated else UNCALIBRATED)
    out = {"hardware": hw.__dict__, "calibration": cal.to_json(), "workloads": {}}
    header = ["model", "fabric", "calibration", "Titer s", "comp", "tp", "pp", "dp", "a2a", "bubble",
              "vs rail-opt", "algorithms (tp, dp, a2a)"]
    rows = []
    for label, (model, plan) in workloads.items():
        runs = {"ideal": ideal, "calibrated": cal} if cal.calibrated else \
            {"ideal": ideal, f"uniform {SENSITIVITY:g}": calib.uniform(SENSITIVITY)}
        entry = {"model": model.__dict__, "plan": plan.__dict__, "predictions": {}}
        for run_name, c in runs.items():
            preds = {f: predict(model, plan, hw, f, c) for f in FABRICS}
            base = preds[RAIL_OPTIMIZED.name].iteration
            for f, pr in preds.items():
                rows.append([model.name, f, run_name, f"{pr.iteration:.4g}"]
                            + [f"{getattr(pr, k):.4g}" for k in ("comp", "tp", "pp", "dp", "a2a", "bubble")]
                            + [f"{(pr.iteration / base - 1) * 100:+.2f}%",
                               ", ".join(pr.algorithms.values())])
            entry["predictions"][run_name] = {f: pr.to_json() for f, pr in preds.items()}
            entry["predictions"][run_name]["rail_only_slowdown"] = preds[RAIL_ONLY.name].iteration / base - 1
        out["workloads"][label] = entry
        if label == "moe":
            a = entry["predictions"]["ideal"]
            ro, rp = a[RAIL_ONLY.name]["a2a"], a[RAIL_OPTIMIZED.name]["a2a"]
            if rp:
                text.append(f"MoE all-to-all on rail-only takes {(ro / rp - 1) * 100:.1f}% longer (HB forwarding; "
                            f"C_S/C_F = {hw.nic_gbps / hw.hb_gbps * 100:.1f}%)")
    text.append(table(header, rows, right=set(range(3, 11))))
    if cal.calibrated:
        used = [f"{op}/{algo} {cal.efficiency(op, algo):.3g}" + ("" if cal.measured(op, algo) else " (default)")
                for op, algos in calib.OPS.items() for algo in algos]
        text.append("efficiencies: " + ", ".join(used))
    else:
        text.append(f"('uniform {SENSITIVITY:g}' rows: every op at {SENSITIVITY:g} of its bound, to show the "
                    "sensitivity to calibration)")
    if args.plot:
        from testbed.planning.plots import plot_all  # matplotlib only when plotting
        out["plots"] = plot_all(args.plot, workloads, hw, cal)
        text.append("plots: " + ", ".join(out["plots"]))
    return text, out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="testbed")
    parser.error = _one_line_error
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)
