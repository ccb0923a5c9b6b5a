"""Analytical iteration time of a (p, t, d) parallelism plan on rail-only and rail-optimized fabrics.

    Titer = Tcomp + Ttp + Tpp + Tdp + Ta2a + Tbubble

following the Rail-only paper's critical-path model (Ta2a is zero for dense models):
- Tcomp  = m x 8 N_active b s / (p t) / (F u): forward 2, backward 4 and activation recomputation 2 FLOPs per
           parameter and token (6 without recomputation), m = global batch / (b d) micro-batches.
- Ttp    = m x (l/p) x 6 AllReduces of b s h bytes over the TP group (4 without recomputation).
- Tpp    = m x 2 transfers of b s h bytes to the neighbouring stage (activations forward, gradients back).
- Tdp    = one AllReduce of the stage's gradients over the DP group (expert gradients over the expert-DP group).
- Ta2a   = m x (MoE layers / p) x 6 all-to-alls of b s k h / t bytes per GPU over the expert-parallel group.
- Tbubble = (p - 1) x the per-micro-batch time of a stage (1F1B schedule).

Ranks are laid out as Megatron does (TP fastest, then DP, then PP) on HB domains of K consecutive GPUs; a group of
n GPUs then has x members per HB domain in y domains. Collective times (D = bytes per GPU, C_F = HB and C_S = NIC
bandwidth per GPU and direction):
- ring AllReduce 2 (n-1)/n D / C; hierarchical AllReduce = 2 AGtime = 2 [(x-1) D / (x C_F) + (y-1) D / (x y C_S)]
  (ReduceScatter in the HB domain, AllReduce on the rail, AllGather in the HB domain; network traffic stays in a rail).
- all-to-all with D bytes per GPU pair: rail-optimized max((x-1) D / C_F, x (y-1) D / C_S); rail-only forwards
  through the HB domain: x (y-1) D / C_S + y (x-1) D / C_F.
Each operation uses the fastest algorithm the fabric allows (rail-only cannot run a ring across rails) after its
time is divided by the calibrated efficiency (1.0 = ideal). Pipeline neighbours are t d ranks apart: on the same
rail when K divides t d, inside one HB domain when the pair fits in it, and otherwise on different rails of
neighbouring domains, which rail-only reaches by forwarding through the HB domain (D / C_S + D / C_F).

Defaults: GH200-class GPUs (989 TFLOP/s BF16, 50 % of it sustained), C_F = 3.6 Tb/s and C_S = 400 Gb/s per GPU
and direction (C_S / C_F = 11.1 %, the paper's H100-generation all-to-all overhead), 2-byte activations and
gradients, full activation recomputation.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, replace

from testbed.fabric import kinds
from testbed.fabric.kinds import RAIL_ONLY, RAIL_OPTIMIZED
from testbed.planning.calibration import Calibration
from testbed.planning.counts import PlanError

FABRICS = (RAIL_OPTIMIZED.name, RAIL_ONLY.name)      # the paper's pair: rail-only against its baseline


@dataclass(frozen=True)
class Hardware:
    gpu_tflops: float = 989.0      # H100 / GH200 dense BF16 peak
    utilisation: float = 0.5       # share of peak FLOP/s a Megatron-style run sustains
    hb_gbps: float = 3600.0        # C_F per GPU and direction: NVLink 900 GB/s bidirectional (7.2 Tb/s)
    nic_gbps: float = 400.0        # C_S per GPU and direction: one 400G NIC
    hb_size: int = 256             # K, GPUs per HB domain (GH200)
    gpus: int = 32768


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    seq_len: int
    global_batch: int
    micro_batch: int = 1
    vocab: int = 51200
    act_bytes: int = 2
    grad_bytes: int = 2
    recompute: bool = True
    experts: int = 0               # 0 = dense
    moe_every: int = 2             # every other layer is an MoE layer
    top_k: int = 1
    param_count: float = 0.0       # dense models: the parameter count itself instead of 12 l h^2 + V h

    @property
    def moe_layers(self) -> int:
        return self.layers // self.moe_every if self.experts else 0

    def params(self) -> tuple[float, float, float]:
        """(non-expert parameters, expert parameters, parameters active per token)."""
        if self.param_count and not self.experts:
            return self.param_count, 0.0, self.param_count
        h2 = self.hidden ** 2
        shared = 12 * self.layers * h2 - self.moe_layers * 8 * h2 + self.vocab * self.hidden
        experts = self.moe_layers * self.experts * 8 * h2
        active = shared + self.moe_layers * self.top_k * 8 * h2
        return shared, experts, active


@dataclass(frozen=True)
class Parallelism:
    tp: int
    pp: int
    dp: int
    ep: int = 1                    # expert-parallel group size, within the DP dimension


# Model shapes: GPT-1T as trained by Megatron-LM (the model of the paper's traffic analysis, t=8, p=64) with a
# 16384-sequence batch, and a GPT-MoE in Switch/DeepSpeed-MoE style (an MoE layer every other layer, top-2 routing)
# whose 1024 experts span 32 HB domains x 32 GPUs of a GH200 cluster: the x = y case of the paper's all-to-all.
PRESETS = {
    "dense": (ModelShape("GPT-1T", layers=128, hidden=25600, seq_len=2048, global_batch=16384), dict(tp=8, pp=64)),
    "moe": (ModelShape("GPT-MoE-1024x", layers=32, hidden=4096, seq_len=2048, global_batch=8192, experts=1024,
                       top_k=2), dict(tp=8, pp=4, ep=1024)),
}


@dataclass(frozen=True)
class Group:
    size: int
    x: int                         # members per HB domain (most)
    y: int                         # HB domains spanned
    one_rail: bool                 # all members share a local rank


def group_shape(size: int, stride: int, hb_size: int) -> Group:
    members = [j * stride for j in range(size)]
    domains = Counter(r // hb_size for r in members)
    return Group(size, max(domains.values()), len(domains), len({r % hb_size for r in members}) == 1)


def allreduce(nbytes: float, g: Group, fabric: str, hw: Hardware, cal: Calibration) -> tuple[float, str]:
    if g.size <= 1 or nbytes <= 0:
        return 0.0, "-"
    cf, cs, n = hw.hb_gbps * 1e9 / 8, hw.nic_gbps * 1e9 / 8, g.size
    options = {}
    if g.y == 1:
        options["ring"] = 2 * (n - 1) / n * nbytes / cf
    else:
        if kinds.get(fabric).cross_rail or g.one_rail:
            options["ring"] = 2 * (n - 1) / n * nbytes / cs
        if g.x > 1 or not options:
            options["hierarchical"] = 2 * ((g.x - 1) * nbytes / (g.x * cf) + (g.y - 1) * nbytes / (g.x * g.y * cs))
    return min((t / cal.efficiency("allreduce", a), a) for a, t in options.items())


def alltoall(pair_bytes: float, g: Group, fabric: str, hw: Hardware, cal: Calibration) -> tuple[float, str]:
    if g.size <= 1 or pair_bytes <= 0:
        return 0.0, "-"
    cf, cs, x, y, d = hw.hb_gbps * 1e9 / 8, hw.nic_gbps * 1e9 / 8, g.x, g.y, pair_bytes
    if kinds.get(fabric).cross_rail or y == 1 or g.one_rail:
        algo, t = "direct", max((x - 1) * d / cf, x * (y - 1) * d / cs)
    else:
        algo, t = "rail-forward", x * (y - 1) * d / cs + y * (x - 1) * d / cf
    return t / cal.efficiency("alltoall", algo), algo


def stage_transfer(nbytes: float, plan: Parallelism, fabric: str, hw: Hardware, cal: Calibration) -> float:
    """Worst time to hand b s h bytes to the next stage: in the HB domain, on a rail, or (rail-only) across rails."""
    if plan.pp <= 1:
        return 0.0
    k, step = hw.hb_size, plan.tp * plan.dp
    cf, cs = hw.hb_gbps * 1e9 / 8, hw.nic_gbps * 1e9 / 8
    worst = 0.0
    for r in range(min(hw.gpus - step, k)):        # a pair's case depends only on r mod K
        s = r + step
        if r // k == s // k:
            t = nbytes / cf
        elif r % k == s % k or kinds.get(fabric).cross_rail:
            t = nbytes / cs
        else:
            t = nbytes / cs + nbytes / cf          # forwarded through the HB domain to the right rail
        worst = max(worst, t)
    return worst / cal.efficiency("sendrecv", "p2p")


@dataclass
class Prediction:
    fabric: str
    model: str
    plan: dict
    micro_batches: int
    comp: float
    tp: float
    pp: float
    dp: float
    a2a: float
    bubble: float
    algorithms: dict

    @property
    def iteration(self) -> float:
        return self.comp + self.tp + self.pp + self.dp + self.a2a + self.bubble

    def to_json(self) -> dict:
        out = asdict(self)
        out["iteration"] = self.iteration
        return out


def check(model: ModelShape, plan: Parallelism, hw: Hardware) -> int:
    """Validate the plan against the cluster and model; returns the number of micro-batches m."""
    for name, v in (("--tp", plan.tp), ("--pp", plan.pp), ("--dp", plan.dp), ("--ep", plan.ep)):
        if v < 1:
            raise PlanError(f"{name} must be a positive integer, got {v}")
    for name, v in (("--gpu-tflops", hw.gpu_tflops), ("--hb-gbps", hw.hb_gbps), ("--nic-gbps", hw.nic_gbps)):
        if not v > 0:
            raise PlanError(f"{name} must be positive, got {v}")
    if not 0 < hw.utilisation <= 1:
        raise PlanError(f"--utilisation must be in (0, 1], got {hw.utilisation}")
    if plan.tp * plan.pp * plan.dp != hw.gpus:
        raise PlanError(f"tp {plan.tp} x pp {plan.pp} x dp {plan.dp} = {plan.tp * plan.pp * plan.dp} "
                        f"is not the {hw.gpus} GPUs of the cluster")
    if model.layers % plan.pp:
        raise PlanError(f"--pp {plan.pp} does not divide the {model.layers} layers of {model.name}")
    if model.experts and (plan.dp % plan.ep or model.experts % plan.ep):
        raise PlanError(f"--ep {plan.ep} must divide both dp {plan.dp} and the {model.experts} experts")
    per_step = model.micro_batch * plan.dp
    if model.global_batch % per_step:
        raise PlanError(f"global batch {model.global_batch} is not a multiple of micro-batch x dp = {per_step}")
    return model.global_batch // per_step


def predict(model: ModelShape, plan: Parallelism, hw: Hardware, fabric: str, cal: Calibration) -> Prediction:
    m = check(model, plan, hw)
    t, p, d, e, k = plan.tp, plan.pp, plan.dp, (plan.ep if model.experts else 1), hw.hb_size
    b, s, h = model.micro_batch, model.seq_len, model.hidden
    shared, expert, active = model.params()
    rc = 1 if model.recompute else 0

    comp_mb = (6 + 2 * rc) * active * b * s / (p * t) / (hw.gpu_tflops * 1e12 * hw.utilisation)
    act = b * s * h * model.act_bytes
    tp_one, tp_algo = allreduce(act, group_shape(t, 1, k), fabric, hw, cal)
    tp_mb = model.layers / p * (4 + 2 * rc) * tp_one
    pp_mb = 2 * stage_transfer(act, plan, fabric, hw, cal)
    a2a_one, a2a_algo = alltoall(b * s * model.top_k * h * model.act_bytes / (t * e),
                                 group_shape(e, t, k), fabric, hw, cal)
    a2a_mb = model.moe_layers / p * (4 + 2 * rc) * a2a_one
    dp_time, dp_algo = allreduce(shared / (p * t) * model.grad_bytes, group_shape(d, t, k), fabric, hw, cal)
    if model.experts:
        exp_time, _ = allreduce(expert / (p * t * e) * model.grad_bytes, group_shape(d // e, t * e, k),
                                fabric, hw, cal)
        dp_time += exp_time
    per_mb = comp_mb + tp_mb + pp_mb + a2a_mb
    return Prediction(fabric, model.name, asdict(plan), m, m * comp_mb, m * tp_mb, m * pp_mb, dp_time,
                      m * a2a_mb, (p - 1) * per_mb,
                      {"tp_allreduce": tp_algo, "dp_allreduce": dp_algo, "alltoall": a2a_algo})


def preset(name: str, hw: Hardware, **overrides) -> tuple[ModelShape, Parallelism]:
    """A preset model and its plan on hw.gpus GPUs; dp fills the rest. Overrides: model fields or tp/pp/dp/ep."""
    model, plan = PRESETS[name]
    fields = ModelShape.__dataclass_fields__
    model = replace(model, **{k: v for k, v in overrides.items() if k in fields and v is not None})
    tp = overrides.get("tp") or plan["tp"]
    pp = overrides.get("pp") or plan["pp"]
    if hw.gpus % (tp * pp):
        raise PlanError(f"tp {tp} x pp {pp} = {tp * pp} does not divide the {hw.gpus} GPUs; set --tp and --pp")
    dp = overrides.get("dp") or hw.gpus // (tp * pp)
    ep = overrides.get("ep") or plan.get("ep", 1)
    if model.experts:
        ep = min(ep, dp)
    return model, Parallelism(tp, pp, dp, ep)
