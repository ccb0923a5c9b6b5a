"""Workload `diloco`: low-communication training across sites (DiLoCo, Streaming DiLoCo) against plain data
parallelism, measured by what crosses sites.

Each site (diloco_sites.py) is a data-parallel replica; every GPU host of a site runs hosts.agents.diloco_rank
(hosts/collectives/diloco_rank.py): inner steps of emulated compute and a ring AllReduce of the gradients inside
the site, and, as the variant says, an exchange across sites through one leader per site: the gradients every
step (`ddp`), the pseudo-gradients every H steps with a Nesterov outer step (`diloco`), or P fragments in turn
overlapped with the inner steps (`streaming`), in float32 or quantised to 8 or 4 bits with error feedback. The
variants run one after the other on the same sites.

The parameters are real float32 tensors driven by a seeded synthetic gradient; hosts.collectives.diloco.reference
computes every site's parameters for the same seed in numpy, and every replica must equal them bit for bit (the
quantised runs too: the reference quantises alike; how far quantisation moved the parameters is reported).

Scaling, as the training workload's: the emulated exchange of `size` bytes over the emulated NIC takes dilation
= (size / full-scale model bytes) x (full-scale link rate / emulated NIC rate) times as long as the full-scale
one, and the compute sleep is the full-scale step time x dilation (unless `compute_s` is given).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time

import numpy as np

from hosts.collectives import diloco as dl
from hosts.spec.rank import DilocoRankSpec
from testbed.fabric import ovs
from testbed.runtime.launch import run_on_hosts
from testbed.scenario.schema import NAME, POSITIVE_INT, RATE, SIZE, ScenarioError, parse_size
from testbed.workloads import diloco_wire, rank_setup
from testbed.workloads.diloco_report import (  # noqa: F401 (its part of the report)
    RESULT_SCHEMA, comparable, headline, label, report_plots, report_section, summary, tables)
from testbed.workloads.diloco_sites import sites_of

VARIANTS = ["ddp", "diloco", "streaming"]
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type"],
    "description": "Training across sites: DDP, DiLoCo and Streaming DiLoCo, their WAN bytes per inner step, peak "
                   "WAN rate and step time, every replica checked against a numpy reference.",
    "properties": {
        "type": {"const": "diloco", "description": "DiLoCo across sites."}, "name": NAME,
        "sites": {"type": "array", "minItems": 1,
                  "items": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                  "description": "Groups of GPU host names, one per site; a site's first host is its leader (it "
                                 "crosses sites). Default: the fabric's sites."},
        "variants": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": VARIANTS},
                     "default": VARIANTS, "description": "What runs, in turn: ddp (the baseline), diloco, streaming."},
        "steps": {**POSITIVE_INT, "maximum": 10000, "default": 8, "description": "Inner steps per variant."},
        "sync_every": {**POSITIVE_INT, "default": 4, "description": "H: inner steps between synchronisations."},
        "fragments": {**POSITIVE_INT, "default": 2, "description": "P (streaming): fragments synced in turn, one "
                      "every H/P steps; divides H and the parameter count."},
        "size": {**SIZE, "default": "256KiB", "description": "The parameters' bytes (float32)."},
        "quantize": {"anyOf": [{"enum": [0, 4, 8]}, {"type": "array", "uniqueItems": True,
                                                      "items": {"enum": [4, 8]}}], "default": 0,
                     "description": "Bits of the exchanged pseudo-gradients (with error feedback): each width "
                                    "listed adds quantised runs of diloco and streaming. 0: float32 only."},
        "inner_lr": {**RATE, "default": 0.05, "description": "Inner SGD learning rate."},
        "outer_lr": {**RATE, "default": 0.7, "description": "Outer Nesterov learning rate (DiLoCo's 0.7)."},
        "momentum": {"type": "number", "minimum": 0, "maximum": 0.999, "default": 0.9,
                     "description": "Outer Nesterov momentum (DiLoCo's 0.9)."},
        "mix": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5,
                "description": "Streaming: the share of a fragment's local value kept when its sync lands."},
        "seed": {"type": "integer", "minimum": 0, "default": 0, "description": "Parameters and gradients' seed."},
        "compute_s": {"type": "number", "minimum": 0, "maximum": 600,
                      "description": "Emulated compute per inner step. Default: full_scale.step_s x dilation."},
        "full_scale": {"type": "object", "additionalProperties": False, "default": {},
                       "description": "The training the run stands for, to scale the compute sleep.",
                       "properties": {"params": {**RATE, "default": 1.0e9, "description": "Parameter count."},
                                      "bytes_per_param": {"enum": [2, 4], "default": 4, "description": "Bytes "
                                                          "exchanged per parameter."},
                                      "step_s": {**RATE, "default": 1.0, "description": "Seconds per inner step."},
                                      "wan_gbps": {**RATE, "default": 100.0, "description": "Cross-site link, "
                                                   "Gbit/s."}}},
        "rejoin": {"type": "boolean", "default": False,
                   "description": "DiLoCo (float32 or quantised; not with streaming): a site cut off for longer than the transport's retries leaves "
                                  "the outer steps, trains alone, and rejoins with the global state from site 0; "
                                  "the membership history is reported and the reference models it."},
        "faults_from_run": {"type": "integer", "minimum": 0, "default": 0,
                            "description": "Faults anchored to this workload (a fault's `workload:`) count from the "
                                           "start of this run, 0 the first: the runs go each variant in float32, then "
                                           "its quantised runs, so a fault can strike a quantised run."},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 3600, "default": 60,
                      "description": "Seconds a rank waits on its peers before failing."},
    },
}
times_its_faults = True        # from the start of its run `faults_from_run` (runner: net.start_faults)
DEFAULTS = {k: v["default"] for k, v in SCHEMA["properties"].items() if "default" in v}
FULL_SCALE = {k: v["default"] for k, v in SCHEMA["properties"]["full_scale"]["properties"].items()}


def settings(spec: dict) -> dict:
    s = {**DEFAULTS, **spec, "full_scale": {**FULL_SCALE, **spec.get("full_scale", {})}}
    q = s["quantize"]
    s["bits"] = [b for b in ([q] if isinstance(q, int) else q) if b]
    return s


def dilation(fabric, s: dict) -> float:
    fs = s["full_scale"]
    return (parse_size(s["size"]) / (fs["params"] * fs["bytes_per_param"])) * \
        (fs["wan_gbps"] * 1e9 / (fabric.params.nic_mbps * 1e6))


def compute_s(fabric, s: dict) -> float:
    return s["compute_s"] if "compute_s" in s else s["full_scale"]["step_s"] * dilation(fabric, s)


def count_of(s: dict) -> int:
    size = parse_size(s["size"], low=8)
    if size % 4:
        raise ScenarioError(f"diloco size {s['size']!r}: not a whole number of float32 parameters (4 bytes each)",
                            key="size")
    return size // 4


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    s = settings(spec)
    sites_of(fabric, s)
    count, h, p = count_of(s), s["sync_every"], s["fragments"]
    if "streaming" in s["variants"]:
        if h % p:
            raise ScenarioError(f"diloco fragments {p} do not divide sync_every {h} (a fragment every H/P steps)",
                                key="fragments")
        if count % p:
            raise ScenarioError(f"diloco fragments {p} do not divide the {count} parameters of size {s['size']}",
                                key="fragments")


    if s["rejoin"] and "diloco" not in s["variants"]:
        raise ScenarioError(f"diloco rejoin: applies to the diloco variant, not in variants {s['variants']}",
                            key="rejoin")
    if s["faults_from_run"] >= len(runs(s)):
        raise ScenarioError(f"diloco faults_from_run {s['faults_from_run']}: there are {len(runs(s))} runs "
                            f"({', '.join(f'{v} {b}-bit' if b else v for v, b in runs(s))}), numbered from 0",
                            key="faults_from_run")
    if s["rejoin"] and "streaming" in s["variants"]:
        raise ScenarioError("diloco rejoin: not with streaming (its fragments' exchanges overlap the next inner "
                            "steps, so there is no outer-step boundary at which a site can leave and be handed "
                            "the state); use variants [diloco]", key="rejoin")


def warnings(fabric, spec: dict) -> list[str]:
    s = settings(spec)
    out = []
    if s["steps"] < s["sync_every"] and set(s["variants"]) & {"diloco", "streaming"}:
        out.append(f"diloco: {s['steps']} steps < sync_every {s['sync_every']}: DiLoCo never synchronises")
    if s["bits"] and not set(s["variants"]) & {"diloco", "streaming"}:
        out.append("diloco: quantize applies to diloco and streaming only; ddp exchanges float32")
    return out


def runs(s: dict) -> list[tuple[str, int]]:
    """(variant, bits) in the order they run: each variant in float32, then its quantised runs."""
    return [(v, b) for v in s["variants"] for b in [0] + (s["bits"] if v != "ddp" else [])]


def rank_spec(s: dict, fabric, routing: str, peers, sites: list[list[int]], store: str, variant: str,
              bits: int) -> DilocoRankSpec:
    return DilocoRankSpec(
        rank=0, peers=tuple(peers), store=store, sites=tuple(map(tuple, sites)), variant=variant, steps=s["steps"],
        sync_every=s["sync_every"], fragments=s["fragments"], count=count_of(s), seed=s["seed"],
        inner_lr=s["inner_lr"], outer_lr=s["outer_lr"], momentum=s["momentum"], mix=s["mix"], quantize=bits,
        compute_s=compute_s(fabric, s), timeout_s=s["timeout_s"], rejoin=rejoins(s, variant, bits),
        **rank_setup.transport(fabric, routing))


def rejoins(s: dict, variant: str, bits: int) -> bool:
    """Sites leave and rejoin in DiLoCo, float32 or quantised (streaming is refused by validate)."""
    return s["rejoin"] and variant == "diloco"


def run(net, spec: dict) -> dict:
    fabric, s = net.fabric, settings(spec)
    began = time.time()
    validate(fabric, spec)
    site_hosts = sites_of(fabric, s)
    hosts = [h for site in site_hosts for h in site]
    sites, r = [], 0
    for site in site_hosts:
        sites.append(list(range(r, r + len(site))))
        r += len(site)
    result = {"type": "diloco", "sites": [[h.name for h in site] for site in site_hosts],
              "leaders": [site[0].name for site in site_hosts], "gpus": len(hosts), "count": count_of(s),
              "bytes": 4 * count_of(s), "steps": s["steps"], "sync_every": s["sync_every"],
              "fragments": s["fragments"], "compute_s": compute_s(fabric, s), "dilation": dilation(fabric, s),
              "variants": []}
    ports = diloco_wire.cross_ports(net, site_hosts)
    if ports is not None:
        result["sampled_ports"] = [dev for dev, _ in ports]
        result["sampled_ports_mbps"] = sum(mbps for _, mbps in ports)
    refs = {}
    for i, (variant, bits) in enumerate(runs(s)):
        if i == s["faults_from_run"]:
            getattr(net, "start_faults", lambda: None)()
        store = os.path.join(net.run_dir, "store", f"diloco-{variant}-{bits}-{time.monotonic_ns()}")
        os.makedirs(store)
        common = rank_spec(s, fabric, net.routing, rank_setup.peers(hosts), sites, store, variant, bits)
        commands = {}
        for rank, h in enumerate(hosts):
            path = os.path.join(store, f"rank{rank}.json")
            dataclasses.replace(common, rank=rank).save(path)
            commands[h.name] = ["hosts.agents.diloco_rank", path]
        budget = s["steps"] * (3 * common.compute_s + 10) + s["timeout_s"] + 30
        before = net.counters() if fabric.wan_links() else None
        try:
            with diloco_wire.sampler(result["sampled_ports"]) if ports is not None else contextlib.nullcontext() as wire:
                out, failed = run_on_hosts(net, commands, timeout=budget, partial=True)
        finally:
            shutil.rmtree(store, ignore_errors=True)
        link_bytes = wan_link_bytes(fabric, before, net.counters()) if before is not None else None
        failed += [f"{hosts[o['rank']].name}: {o['error']}" for o in out.values() if "error" in o]
        history = membership(out, sites, began) if common.rejoin else None
        try:
            refs[variant, bits] = dl.reference(variant, sites, common.count, s["steps"], s["sync_every"],
                                               s["fragments"], s["seed"], s["inner_lr"], s["outer_lr"],
                                               s["momentum"], s["mix"], bits,
                                               **({} if history is None else {"members": history["members"],
                                                                             "resyncs": history["resyncs"]}))
        except ValueError as exc:
            failed.append(f"the ranks' {exc}")
            refs[variant, bits] = None
        row = measure(variant, bits, common.compute_s, sites, out, failed, refs[variant, bits], refs.get((variant, 0)))
        if history is not None:
            row["membership"] = history
        if link_bytes is not None and "replicas" in row:
            row["wan_link_bytes_per_step"] = link_bytes / s["steps"]
        if wire is not None and "replicas" in row:
            bounds = diloco_wire.step_bounds(list(out.values()), [site[0] for site in sites])
            row.update(diloco_wire.figures(wire.samples, bounds, common.compute_s))
        result["variants"].append(row)
    result["checks"] = checks(result, s)
    result["ok"] = all(c["ok"] for c in result["checks"])
    return result


def membership(out: dict, sites: list[list[int]], began: float) -> dict | None:
    """The membership history as the anchor (site 0's leader) decided it, every leader's leaving and rejoining
    (event_s: seconds since the workload began, as the runner's started_s counts them on the faults' time base),
    and the bytes of the state handed over; None without the anchor's output."""
    anchor = next((o for o in out.values() if o.get("rank") == sites[0][0] and "membership" in o), None)
    if anchor is None:
        return None
    m = anchor["membership"]
    leaders = {ranks[0]: i for i, ranks in enumerate(sites)}
    events = sorted(({**e, "site": leaders[o["rank"]], "event_s": round(e["event_at"] - began, 3)}
                     for o in out.values() if o.get("rank") in leaders
                     for e in o.get("membership", {}).get("events", [])), key=lambda e: e["event_at"])
    return {"members": m["members"], "resyncs": [tuple(x) for x in m["resyncs"]], "events": events,
            "resync_bytes": m["resync_bytes"]}


def wan_link_bytes(fabric, before: dict, after: dict) -> int:
    """The bytes the fabric's WAN links carried, both ways, by their own ports' counters: what crossed sites
    whoever sent it, not the ranks' own accounting."""
    return sum(ovs.growth(before, after, f"{l.a}:{l.a_port}") + ovs.growth(before, after, f"{l.b}:{l.b_port}")
               for l in fabric.wan_links())


def measure(variant: str, bits: int, window_s: float, sites: list[list[int]], out: dict, failed: list[str],
            ref: dict, float_ref: dict | None) -> dict:
    """One variant's figures: WAN bytes per inner step (payload and on the wire), the peak step's WAN bytes and
    the rate that step needs to hide its exchange behind the compute window, the wall-clock per step, and
    every replica against the reference."""
    row = {"variant": variant, "quantize": bits, "completed": not failed, "errors": failed[:4]}
    outs = sorted((o for o in out.values() if "steps" in o), key=lambda o: o["rank"])
    if failed or len(outs) != sum(map(len, sites)):
        return row
    steps = len(outs[0]["steps"])
    per_step = [sum(o["steps"][t]["wan_wire_bytes"] for o in outs) for t in range(steps)]
    payload = [sum(o["steps"][t]["wan_bytes"] for o in outs) for t in range(steps)]
    wan_s = sum(o["steps"][t]["wan_s"] for o in outs for t in range(steps) if o["steps"][t]["wan_bytes"])
    peak = max(range(steps), key=lambda t: per_step[t])
    wall = max(o["steps"][-1]["end"] for o in outs) - min(o["steps"][0]["start"] for o in outs)
    site_of = {r: i for i, ranks in enumerate(sites) for r in ranks}
    wrong = [o["rank"] for o in outs if o["theta"] != dl.digest(ref["theta"][site_of[o["rank"]]])
             or o["outer"] != dl.digest(ref["outer"])]
    row.update({
        "wan_bytes_per_step": sum(payload) / steps, "wan_wire_bytes_per_step": sum(per_step) / steps,
        "peak_wan_bytes": payload[peak], "peak_wan_wire_bytes": per_step[peak], "peak_step": peak,
        "peak_wan_mbps": per_step[peak] * 8 / window_s / 1e6 if window_s > 0 else None,
        "wan_achieved_mbps": sum(payload) * 8 / wan_s / 1e6 if wan_s > 0 else None,
        "step_s": wall / steps, "loss": float(np.mean(ref["loss"])),
        "replicas": {"ranks": len(outs), "wrong": wrong,
                     "outer_agree": len({o["outer"] for o in outs}) == 1,
                     "sites_agree": all(len({o["theta"] for o in outs if site_of[o["rank"]] == i}) == 1
                                        for i in range(len(sites)))}})
    if bits and float_ref is not None:
        row["quantization_max_dev"] = float(np.max(np.abs(ref["outer"] - float_ref["outer"])))
    return row


def pick(result: dict, variant: str, bits: int = 0) -> dict | None:
    return next((r for r in result["variants"] if r["variant"] == variant and r["quantize"] == bits
                 and "replicas" in r), None)


def checks(result: dict, s: dict) -> list[dict]:
    rows, h, p = result["variants"], s["sync_every"], s["fragments"]
    bad = [f"{label(r)}: {'; '.join(r['errors']) or 'no output'}" for r in rows if "replicas" not in r]
    out = [{"name": "completed", "ok": not bad, "detail": "; ".join(bad) or f"{len(rows)} runs on "
            f"{len(result['sites'])} sites, {result['gpus']} GPUs"}]
    done = [r for r in rows if "replicas" in r]
    wrong = [f"{label(r)} ranks {r['replicas']['wrong']}"
             for r in done if r["replicas"]["wrong"] or not r["replicas"]["outer_agree"]]
    quant = [f"{r['quantize']}-bit {r['variant']} max |outer - float32 run's| {r['quantization_max_dev']:.2g}"
             for r in done if r.get("quantization_max_dev") is not None]
    churn = [f"{label(r)} outer steps' sites {r['membership']['members']}, state handed over after "
             f"{r['membership']['resyncs']} ([inner steps done, site])" for r in done if r.get("membership")]
    out.append({"name": "replicas exact", "ok": bool(done) and not wrong,
                "detail": "; ".join(wrong) if wrong else
                "every replica's parameters bit-equal to the numpy reference (float32 exchange exact; quantised "
                "runs exact to a reference that quantises alike" + (f": {'; '.join(quant)}" if quant else "") + ")"
                + (f"; the reference models the membership history: {'; '.join(churn)}" if churn else "")})
    ddp, di, st = pick(result, "ddp"), pick(result, "diloco"), pick(result, "streaming")
    if ddp and di:
        pay, wire = di["wan_bytes_per_step"] / ddp["wan_bytes_per_step"], \
            di["wan_wire_bytes_per_step"] / ddp["wan_wire_bytes_per_step"]
        link = (di["wan_link_bytes_per_step"] / ddp["wan_link_bytes_per_step"]
                if ddp.get("wan_link_bytes_per_step") and "wan_link_bytes_per_step" in di else None)
        out.append({"name": "diloco wan bytes", "ok": pay <= 1 / h and wire <= 1.1 / h and (link or 0) <= 1.1 / h,
                    "detail": f"DiLoCo / DDP WAN bytes per inner step {pay:.3f} payload, {wire:.3f} on the wire "
                              + (f", {link:.3f} by the WAN links' counters " if link is not None else " ")
                              + f"(1/H = {1 / h:.3f}; wire allowed 10% for headers and retransmissions)"})
    if di and st:
        ratio = st["peak_wan_wire_bytes"] / di["peak_wan_wire_bytes"]
        sampled = (st["sampled_peak_wan_bytes"] / di["sampled_peak_wan_bytes"]
                   if di.get("sampled_peak_wan_bytes") and "sampled_peak_wan_bytes" in st else None)
        # the sampled peak tells the bursts apart only while DiLoCo's drains within the window
        held = sampled is not None and diloco_wire.fits(di["peak_wan_wire_bytes"], result["sampled_ports_mbps"],
                                                         result["compute_s"])
        text = "" if sampled is None else f", {sampled:.3f} by the cross-site ports' sampled counters" + (
            "" if held else " (not held: DiLoCo's sync does not drain within 80% of a step's compute at the ports' "
                            "rate, so the window may cut its peak: the link sets the pace)")
        out.append({"name": "streaming peak", "ok": 0.8 / p <= ratio <= 1.2 / p and
                    (not held or 0.75 / p <= sampled <= 1.25 / p),
                    "detail": f"Streaming / DiLoCo peak WAN bytes in a step {ratio:.3f} on the wire{text} (1/P = "
                              f"{1 / p:.3f}, within 20%; sampled within 25%: a window's edges fall between samples)"})
    return out


def start_line(spec: dict) -> str:
    s = settings(spec)
    return f"diloco {'/'.join(s['variants'])} H={s['sync_every']} P={s['fragments']}"
