"""The trainer in a GPU host: input from local preprocessing and/or tf.data.service, an emulated GPU.

    python -m hosts.agents.tfdata_trainer '{"pipeline": "compute", "policy": "fastflow", "service": "grpc://IP:PORT",
                                      "gpu_steps_per_s": 20, "seconds": 8}'

The argument is a TrainerSpec as JSON (hosts/spec/tfdata.py: its fields and defaults).

policy "profile" profiles Gthp, Lthp/Pcycle and Rthp/Ocycle of each candidate pipeline and decides with
Algorithm 1 (no training: the launcher restarts the servers, then trains with the decision); "fastflow"
does both in one process; "fixed" trains with `ratio` of the batches from candidate `candidate`
(0: TF-NO, 1: TF-DSR). Prints one JSON line: measurements, every
profiled metric and the decision. The launcher sets the local CPU budget (`budget.limit`) on the PID; with
"start_signal": true in the spec, the trainer first prints {"ready": true} once TensorFlow is imported and
waits for a line on stdin, so that the launcher can set the budget then: importing TensorFlow (seconds of
CPU) is not what the budget is for, and under 0.3 cores it would take three times as long.
"""
from __future__ import annotations

import json
import os
import sys
import time

from hosts.tfdata import budget
from hosts.tfdata.gpu import EmulatedGPU
from hosts.tfdata.mix import Mixer
from hosts.tfdata.policy import Candidate, Profile, decide
from hosts.spec.tfdata import TrainerSpec


def measure(local_ds, remote_ds, ratio: float, gpu: EmulatedGPU, seconds: float, warmup_s: float) -> dict:
    """Train for warmup_s + seconds; steps/s and local CPU per step over the last `seconds`."""
    mixer = Mixer(iter(local_ds) if local_ds is not None and ratio < 1 else None,
                  iter(remote_ds) if remote_ds is not None and ratio > 0 else None, ratio)
    try:
        end_warm = time.monotonic() + warmup_s
        while time.monotonic() < end_warm:
            gpu.step(mixer.get()[0])
        taken0 = dict(mixer.taken)
        cpu0, t0 = budget.cpu_seconds(), time.monotonic()
        steps = 0
        while time.monotonic() - t0 < seconds:
            gpu.step(mixer.get()[0])
            steps += 1
        wall, cpu = time.monotonic() - t0, budget.cpu_seconds() - cpu0
    finally:
        mixer.close()
    got = {k: mixer.taken[k] - taken0[k] for k in taken0}
    return {"steps": steps, "seconds": round(wall, 3), "steps_per_s": steps / wall,
            "cpu_s": round(cpu, 3), "cpu_per_step": cpu / max(1, steps), "cpu_cores": cpu / wall,
            "local_batches": got["local"], "remote_batches": got["remote"],
            "measured_ratio": got["remote"] / max(1, steps)}


def gpu_alone(first_batch, gpu: EmulatedGPU, seconds: float) -> float:
    """Gthp: the model on one cached batch, no input pipeline."""
    t0, steps = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        gpu.step(first_batch)
        steps += 1
    return steps / (time.monotonic() - t0)


def fastflow(spec: TrainerSpec, pipelines, cfg: dict, gpu: EmulatedGPU) -> tuple[dict, dict]:
    """Profile and decide; the profile's `wall_s` is what profiling cost, which FastFlow's own time must include."""
    start = time.monotonic()
    kind, svc, t = spec.pipeline, spec.service, spec.profile_s
    warm = spec.warmup_s
    local_ds = pipelines.local(kind, cfg)
    gthp = gpu_alone(next(iter(local_ds)), gpu, min(t, 1.5))
    loc = measure(local_ds, None, 0.0, gpu, t, warm)
    prof = {"Gthp": gthp, "Lthp": loc["steps_per_s"], "Pcycle": loc["cpu_per_step"], "local": loc, "candidates": {}}
    cands = {}
    for name in spec.candidates:
        r = measure(None, pipelines.remote(kind, cfg, name, svc), 1.0, gpu, t, warm)
        prof["candidates"][name] = {"Rthp": r["steps_per_s"], "Ocycle": r["cpu_per_step"], "run": r}
        cands[name] = Candidate(rthp=r["steps_per_s"], ocycle=r["cpu_per_step"])
    decision = decide(Profile(gthp, loc["steps_per_s"], loc["cpu_per_step"], cands), spec.threshold)
    prof["wall_s"] = round(time.monotonic() - start, 3)
    return prof, decision


def main(argv=None) -> None:
    spec = TrainerSpec.from_json((argv or sys.argv[1:])[0])
    import tensorflow as tf
    from hosts.tfdata import pipelines
    if spec.start_signal:
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()
    tf.random.set_seed(spec.seed)
    kind = spec.pipeline
    cfg = pipelines.config(kind, spec.pipeline_cfg)
    gpu = EmulatedGPU(spec.gpu_steps_per_s)
    out = {"policy": spec.policy, "pipeline": kind, "config": cfg}
    if spec.policy in ("fastflow", "profile"):
        prof, decision = fastflow(spec, pipelines, cfg, gpu)
        out |= {"profile": prof, "decision": decision}
        if spec.policy == "profile":
            print(json.dumps(out), flush=True)
            os._exit(0)
        ratio, cand = decision["off_ratio"], decision["pipeline"] or "p'3"
    else:
        ratio, cand = spec.ratio, spec.candidate
    r = measure(pipelines.local(kind, cfg) if ratio < 1 else None,
                pipelines.remote(kind, cfg, cand, spec.service) if ratio > 0 else None,
                ratio, gpu, spec.seconds, spec.warmup_s)
    out |= {"off_ratio": ratio, "candidate": cand if ratio > 0 else None, **r,
            "throughput_eps": r["steps_per_s"] * cfg["batch"],
            "epoch_seconds": spec.epoch_batches / max(1e-9, r["steps_per_s"])}
    print(json.dumps(out), flush=True)
    os._exit(0)                          # skip TF's slow teardown of lingering service iterators


if __name__ == "__main__":
    main()
