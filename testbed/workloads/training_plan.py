"""How a `training_iteration` is sized for the emulated fabric: the full-scale prediction, the scale that brings it
to `target_s` on the emulated links, the scaled message sizes, and the prediction for exactly those sizes
(testbed/workloads/training.py runs it). Every refusal is a ScenarioError with one line, raised before bring-up.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from hosts.collectives.comm import CHUNK, SLOTS
from hosts.collectives.layout import Layout, gpu_of
from testbed.fabric.topo import gpu_host
from testbed.planning.calibration import Calibration
from testbed.planning.prediction import Hardware, ModelShape, Parallelism, Prediction, predict
from testbed.scenario.schema import ScenarioError
from testbed.workloads import collective_fabric

MODEL = {"layers": 4, "hidden": 8192, "seq_len": 2048, "micro_batch": 1, "params": 3.2e9, "bytes_per_param": 2,
         "recompute": True}
HARDWARE = {"gpu_tflops": 989.0, "utilisation": 0.5, "nic_gbps": 400.0, "hb_gbps": 3600.0}
DEFAULTS = {"micro_batches": 4, "schedule": "1f1b", "target_s": 15.0, "iterations": 1, "check": True,
            "timeout_s": 60}
MIN_ACTIVATION = 1024                     # below this, per-message overheads would dominate every transfer
# A pipeline peer holds at most two messages per direction unconsumed (1F1B and GPipe alike); at a quarter of
# the pre-posted receive slots each, sends never wait for the receiver, so their durations are transfers.
MAX_ACTIVATION = SLOTS * CHUNK // 4
MAX_GRADIENT = 64 << 20
MAX_ITERATION_S = 600.0


@dataclass
class Plan:
    layout: Layout
    m: int
    model: ModelShape                     # full scale
    hardware: Hardware
    full: Prediction                      # full-scale prediction
    scale: float                          # message sizes x scale
    dilation_link: float                  # real / emulated NIC rate
    activation_count: int
    gradient_count: int
    emulated: Prediction                  # for the scaled sizes on the emulated links

    @property
    def dilation(self) -> float:
        return self.scale * self.dilation_link

    @property
    def rail_aligned(self) -> bool:
        """Whether every pair of ranks on different servers that exchanges data shares a rail. TP groups stay in a
        server; hierarchical AllReduces cross servers only along rails; a ring follows the group's rail ring."""
        k, lay = self.hardware.hb_size, self.layout
        pairs = [(r, n) for r in range(lay.world) for n in [lay.next_stage(r)] if n is not None]
        if self.emulated.algorithms["dp_allreduce"] == "ring":
            for r in range(lay.world):
                group = [gpu_host(*gpu_of(q, k)) for q in lay.dp_group(r)]
                ring = [h.server * k + h.rank for h in collective_fabric.rail_ring(group)]
                pairs += list(zip(ring, ring[1:] + ring[:1]))
        return all(a // k == b // k or a % k == b % k for a, b in pairs)


def settings(spec: dict) -> dict:
    s = {**DEFAULTS, **spec}
    s["model"] = {**MODEL, **spec.get("model", {})}
    s["hardware"] = {**HARDWARE, **spec.get("hardware", {})}
    return s


def make_plan(fabric, spec: dict) -> Plan:
    """Check the plan against the fabric and size the run; raises ScenarioError with one line."""
    s = settings(spec)
    t, p, d = s["plan"]["tp"], s["plan"]["pp"], s["plan"]["dp"]
    m, md = s["micro_batches"], s["model"]
    n, k = len(fabric.gpus()), fabric.params.gpus_per_server
    if t * p * d != n:
        raise ScenarioError(f"plan tp {t} x pp {p} x dp {d} = {t * p * d} is not the {n} GPUs of the fabric")
    if k % t:
        raise ScenarioError(f"plan tp {t} does not divide the {k} GPUs per server: a TP group must stay inside one "
                            "HB domain")
    if (t * d) % k and k % (t * d):
        raise ScenarioError(f"plan tp x dp = {t * d} neither divides nor is a multiple of the {k} GPUs per server: "
                            "DP groups and pipeline stages would fall unevenly on the servers")
    if not fabric.design.cross_rail and p > 1 and (t * d) % k:
        raise ScenarioError(f"on {fabric.kind}, pipeline neighbours tp x dp = {t * d} ranks apart cross rails between "
                            f"servers, which have no network path; make tp x dp a multiple of the {k} GPUs per "
                            "server")
    if md["layers"] % p:
        raise ScenarioError(f"model.layers {md['layers']} is not a multiple of plan pp {p}")
    bpp = md["bytes_per_param"]
    model = ModelShape("training_iteration", layers=md["layers"], hidden=md["hidden"], seq_len=md["seq_len"],
                       global_batch=m * md["micro_batch"] * d, micro_batch=md["micro_batch"], act_bytes=bpp,
                       grad_bytes=bpp, recompute=md["recompute"], param_count=float(md["params"]))
    hw = Hardware(**s["hardware"], hb_size=k, gpus=n)
    par = Parallelism(tp=t, pp=p, dp=d)
    full = predict(model, par, hw, fabric.kind, Calibration())
    dilation_link = hw.nic_gbps * 1e9 / (fabric.params.nic_mbps * 1e6)
    scale = s.get("scale") or s["target_s"] / (full.iteration * dilation_link)
    tokens = md["micro_batch"] * md["seq_len"] * md["hidden"]
    act = max(1, round(tokens * scale))
    grad = max(1, round(md["params"] / (p * t) * scale))
    how = "raise" if act * bpp < MIN_ACTIVATION else "lower"
    if (t > 1 or p > 1) and not MIN_ACTIVATION <= act * bpp <= MAX_ACTIVATION:     # only TP and PP send them
        raise ScenarioError(f"the scaled activations are {act * bpp} B per micro-batch, outside {MIN_ACTIVATION} B.."
                            f"{MAX_ACTIVATION >> 10} KiB; {how} scale (or target_s)")
    if grad * bpp > MAX_GRADIENT:
        raise ScenarioError(f"the scaled gradients are {grad * bpp / 2**20:.0f} MiB per GPU, above "
                            f"{MAX_GRADIENT >> 20} MiB; lower scale (or target_s)")
    dil = scale * dilation_link
    emu_model = replace(model, act_bytes=act * bpp / tokens, grad_bytes=grad * bpp * p * t / md["params"])
    emu_hw = Hardware(gpu_tflops=hw.gpu_tflops / dil, utilisation=hw.utilisation,
                      hb_gbps=fabric.params.hb_mbps / 1e3, nic_gbps=fabric.params.nic_mbps / 1e3,
                      hb_size=k, gpus=n)
    emulated = predict(emu_model, par, emu_hw, fabric.kind, Calibration())
    if emulated.iteration * s["iterations"] > MAX_ITERATION_S:
        raise ScenarioError(f"the emulated run would take {emulated.iteration * s['iterations']:.0f} s, above "
                            f"{MAX_ITERATION_S:.0f} s; lower scale (or target_s)")
    return Plan(Layout(tp=t, pp=p, dp=d), m, model, hw, full, scale, dilation_link, act, grad, emulated)

