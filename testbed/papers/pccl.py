"""The Prime Collective Communications Library technical report (the abstract among the seeds): collectives over
the public internet with peers that fail and join; "by dispatching to multiple connections, we can efficiently
utilize cross-continental long-fat-pipe TCP WAN links" (45 Gbit/s across Europe); "exact bit-parity of the shared
state across peers in all cases induced by graceful or abrupt peer churn".

Its claims beside ours:
- one connection over a long fat pipe is bound by its window: its throughput over a window per round trip (why
  PCCL dispatches to several);
- several connections fill the pipe: eight connections' throughput over the WAN link's rate (the `wan_transfer`
  workload on scenarios/pccl_wan.yaml: two Clos sites joined by 5 Mbit/s, 20 ms one way; docs/sites.md);
- bit-parity under churn: the `churn` workload (scenarios/churn.yaml, GPUs crashing, hanging, stalling and losing
  their NIC, then rejoining), every rank's shared state after every step against numpy's and every other
  rank's; the count of states that differ.
"""
from __future__ import annotations

import os
from typing import Callable

from testbed.papers import REPRODUCED, Claim, short_of_cpu

NAME = "pccl"
TITLE = "Prime Collective Communications Library (PCCL), technical report"
SOURCE = ("the PCCL abstract among the seeds: multiple connections fill long-fat-pipe WAN links; bit-parity of the "
          "shared state under peer churn")

SETTINGS = {True: {"repeats": 1, "churn_s": 45}, False: {"repeats": 3, "churn_s": 180}}
CONNECTIONS = 8


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    s = SETTINGS[quick]
    pipes, churns = [], []
    for i in range(s["repeats"]):
        echo(f"pccl: 512 KiB over 1 then {CONNECTIONS} connections across the long fat pipe, run {i + 1} of "
             f"{s['repeats']}")
        pipes.append(_pipe(os.path.join(out_dir, f"pipe-{i + 1}")))
        echo(f"pccl: {s['churn_s']} s of churn under a shared state, run {i + 1} of {s['repeats']}")
        churns.append(_churn(s["churn_s"], i + 1, os.path.join(out_dir, f"churn-{i + 1}")))
    return _claims_of(pipes, churns, s["churn_s"])


def _claims_of(pipes: list[dict], churns: list[dict], churn_s: float) -> list[Claim]:
    p = pipes[0]
    pipe = (f"two Clos 2x2 sites joined by a WAN link of {p['wan_mbps']:g} Mbit/s and {p['delay_us'] / 1e3:g} ms one "
            f"way (bandwidth-delay product {p['bdp_bytes'] / 1e3:.0f} kB), {p['size'] // 1024} KiB over RC queue "
            f"pairs of {p['window']} packets of {p['mtu']} B in flight each, {len(pipes)} run(s)")
    failures = sum(c["failures"] for c in churns)
    churn = (f"scenarios/churn.yaml for {churn_s:g} s per run (rail-optimized 2x4, ring AllReduce of a 64 KiB "
             f"shared state, seeds 1-{len(churns)}): {failures} failures and {sum(c['rejoins'] for c in churns)} "
             f"rejoins, {sum(c['steps_completed'] for c in churns)} steps in all")
    out = [
        Claim("one-window-bound", "one connection over a long fat pipe: its throughput / a window per round trip",
              1.0, 0.15, pipe, [r["runs"][1]["mbps"] / r["runs"][1]["window_mbps"] for r in pipes]),
        Claim("many-fill-the-pipe", f"{CONNECTIONS} connections fill the long fat pipe: their throughput / the WAN "
              "link's rate", 1.0, 0.15, pipe, [r["runs"][CONNECTIONS]["of_rate"] for r in pipes]),
        Claim("bit-parity", "bit-parity of the shared state under churn: step states that differ from numpy's or "
              "another rank's", 0, 0.0, churn, [c["divergence"]["divergent"] for c in churns]),
    ]
    least = min((r["idle"] for r in pipes if r["idle"] is not None), default=None)
    for claim in out[:2]:
        if claim.verdict != REPRODUCED:
            claim.why = short_of_cpu(least) or ("the link's rate counts headers too: the payload can fill it only to "
                                                f"{p['wan_payload_mbps'] / p['wan_mbps']:.2f}")
    if out[2].verdict != REPRODUCED:
        out[2].why = "ranks' shared states differ after a recovery: the churn runs' results say which steps"
    return out


def _pipe(out_dir: str) -> dict:
    from testbed import PROJECT_ROOT, runner
    from testbed.scenario import load
    doc = load(os.path.join(PROJECT_ROOT, "scenarios", "pccl_wan.yaml"),
               [f"workloads.0.connections=[1, {CONNECTIONS}]"])
    out = runner.run(doc, out_dir, echo=lambda *a: None)
    w = out["workloads"][0] if out["workloads"] else {}
    runs = {r["connections"]: r for r in w.get("runs", [])}
    if not out["ok"] or set(runs) != {1, CONNECTIONS}:
        raise RuntimeError(f"pccl long fat pipe: {[c['detail'] for c in out['checks'] if not c['ok']]}")
    return {**w, "runs": runs, "idle": w.get("cpu_idle_mean_pct")}


def _churn(seconds: float, seed: int, out_dir: str) -> dict:
    from testbed import PROJECT_ROOT, runner
    from testbed.scenario import load
    doc = load(os.path.join(PROJECT_ROOT, "scenarios", "churn.yaml"),
               [f"workloads.0.duration_s={seconds:g}", f"workloads.0.seed={seed}"])
    out = runner.run(doc, out_dir, echo=lambda *a: None)
    w = out["workloads"][0] if out["workloads"] else {}
    if w.get("divergence") is None or not w.get("failures"):
        raise RuntimeError(f"pccl churn: {'no failure struck' if w.get('divergence') is not None else 'no parity'}: "
                           f"{[c['detail'] for c in out['checks'] if not c['ok']]}")
    return w
