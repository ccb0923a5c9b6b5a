"""The `training_iteration` workload without a fabric: the plan's checks, the scaled analytical model (checked
against hand-computed formulas), the rank placement on GPUs, and the analysis of real rank outputs (ranks run
in-process over the transport's in-memory fabric)."""
import copy
import dataclasses

import pytest

from hosts.collectives import Peer
from hosts.collectives import training as rank_program
from testbed.fabric.topo import build
from testbed.scenario.schema import ScenarioError
from testbed.workloads import collective_fabric, training
from tests.unit.hosts.collectives.test_algorithms import run_ranks

PLAN = {"plan": {"tp": 2, "pp": 2, "dp": 2}}


def test_the_scaled_model_is_the_formulas_at_the_emulated_rates():
    fabric = build("rail-only", 4, 2, nic_mbps=5)                     # HB 45 Mbit/s
    plan = training.make_plan(fabric, {**PLAN, "scale": 0.001})
    m, c_s, c_f = 4, 5e6 / 8, 45e6 / 8
    act, grad = 16777 * 2, 800000 * 2                                 # b s h and params / (p t), x0.001, 2 B each
    assert (plan.activation_count * 2, plan.gradient_count * 2) == (act, grad)
    assert plan.dilation == pytest.approx(0.001 * 400e9 / 5e6)
    full_comp = m * 8 * 3.2e9 * 2048 / (2 * 2) / (989e12 * 0.5)       # 8 FLOPs per parameter and token
    e = training.phases(plan.emulated)
    assert e["comp"] == pytest.approx(plan.dilation * full_comp)
    assert e["tp"] == pytest.approx(m * (4 / 2) * 6 * (2 * (2 - 1) / 2 * act / c_f))   # 6 ring AllReduces per layer
    assert e["pp"] == pytest.approx(m * 2 * act / c_s)                 # neighbours on one rail: the NIC
    assert e["dp"] == pytest.approx(2 * (2 - 1) / 2 * grad / c_s)      # ring along the rail
    per_mb = (e["comp"] + e["tp"] + e["pp"]) / m
    assert e["bubble"] == pytest.approx((2 - 1) * per_mb)
    assert e["bubble"] / (e["iteration"] - e["dp"]) == pytest.approx((2 - 1) / (2 - 1 + m))
    assert plan.emulated.algorithms["dp_allreduce"] == "ring"


@pytest.mark.parametrize("kind", ["rail-only", "rail-optimized"])
def test_emulated_prediction_is_the_full_scale_one_dilated(kind):
    """With the cluster's HB/NIC ratio (9) kept, every phase stretches by the same factor."""
    fabric = build(kind, 4, 2, nic_mbps=5)
    plan = training.make_plan(fabric, {**PLAN, "target_s": 12})
    e, f = training.phases(plan.emulated), training.phases(plan.full)
    for k in training.PHASES:
        assert e[k] == pytest.approx(plan.dilation * f[k], rel=1e-3), k
    assert e["iteration"] == pytest.approx(12, rel=1e-3)


def test_parameter_count_sets_compute_and_gradients():
    fabric = build("rail-optimized", 2, 4, nic_mbps=5)
    small = training.make_plan(fabric, {**PLAN, "scale": 0.001, "model": {"params": 1e9}})
    big = training.make_plan(fabric, {**PLAN, "scale": 0.001, "model": {"params": 2e9}})
    assert big.emulated.comp == pytest.approx(2 * small.emulated.comp)
    assert big.gradient_count == 2 * small.gradient_count == 2 * round(1e9 / 4 * 0.001)


@pytest.mark.parametrize("kind,servers,per,t,p,d,aligned,dp_algo", [
    ("rail-only", 4, 2, 2, 2, 2, True, "ring"),                     # DP along a rail
    ("rail-only", 2, 4, 2, 2, 2, True, "ring"),                     # DP inside the HB domain (at C_F)
    ("rail-only", 2, 4, 1, 1, 8, True, "hierarchical"),             # rail-only cannot ring across rails
    ("rail-optimized", 2, 4, 1, 1, 8, True, "hierarchical"),        # faster than the NIC-bound ring
    ("rail-optimized", 2, 4, 2, 4, 1, False, "-"),                  # s0g2 -> s1g0 crosses rails over a spine
])
def test_placement_and_algorithms(kind, servers, per, t, p, d, aligned, dp_algo):
    fabric = build(kind, servers, per, nic_mbps=5)
    plan = training.make_plan(fabric, {"plan": {"tp": t, "pp": p, "dp": d}, "model": {"layers": 8}})
    assert plan.rail_aligned == aligned
    assert plan.emulated.algorithms["dp_allreduce"] == dp_algo
    layout = training.describe(plan, training.settings({"plan": {"tp": t, "pp": p, "dp": d}}), fabric,
                               collective_fabric.ranks(fabric))["layout"]
    assert [x["gpu"] for x in layout] == [f"s{i}g{j}" for i in range(servers) for j in range(per)]
    assert all(x["rank"] == x["tp"] + t * (x["dp"] + d * x["stage"]) for x in layout)


@pytest.mark.parametrize("spec,message", [
    ({"plan": {"tp": 2, "pp": 2, "dp": 1}}, "plan tp 2 x pp 2 x dp 1 = 4 is not the 8 GPUs"),
    ({"plan": {"tp": 3, "pp": 1, "dp": 1}}, "is not the 8 GPUs"),
    ({"plan": {"tp": 1, "pp": 1, "dp": 8}, "scale": 0.02}, "the scaled gradients are 122 MiB per GPU, above 64 MiB"),
    ({"plan": {"tp": 2, "pp": 4, "dp": 1}, "model": {"layers": 6}}, "model.layers 6 is not a multiple of plan pp 4"),
    ({**PLAN, "scale": 1e-7}, "outside 1024 B..256 KiB; raise scale"),
    ({**PLAN, "scale": 0.01, "micro_batches": 64, "model": {"hidden": 1024}}, "the emulated run would take"),
])
def test_bad_plans_get_one_line(spec, message):
    with pytest.raises(ScenarioError, match=message) as exc:
        training.make_plan(build("rail-optimized", 2, 4, nic_mbps=5), spec)
    assert "\n" not in str(exc.value)


def test_uneven_groups_are_refused():
    with pytest.raises(ScenarioError, match="neither divides nor is a multiple of the 4 GPUs per server"):
        training.make_plan(build("rail-optimized", 3, 4, nic_mbps=5), {"plan": {"tp": 2, "pp": 2, "dp": 3}})


# -- the analysis, on the outputs of real ranks ----------------------------------------------------

def run_ranks_in_process(fabric, plan, s):
    hosts = collective_fabric.ranks(fabric)
    peers = [Peer(rank=r, name=h.name, ip=h.ip, hb_ip=h.hb_ip, server=h.server, local_rank=h.rank)
             for r, h in enumerate(hosts)]
    spec = dataclasses.replace(training.rank_spec(plan, s, fabric, "ecmp", tuple(peers), ""), compute_s=0.001)
    outs = run_ranks(peers, lambda c: rank_program.run_rank(spec, c, c.store), timeout=30)
    return hosts, [outs[r] for r in sorted(outs)]


def analyse(plan, s, fabric, hosts, outs):
    result = training.describe(plan, s, fabric, hosts)
    result.update(training.measure(plan, outs))
    result["traffic"] = training.traffic_matrix(plan, hosts, outs)
    result.update(spine_bytes=None, nic_bytes=0)
    return result, training.checks(plan, s, fabric, result)


def test_analysis_of_real_rank_outputs():
    fabric = build("rail-only", 4, 2, nic_mbps=5)
    spec = {**PLAN, "micro_batches": 2, "scale": 0.0001}
    plan, s = training.make_plan(fabric, spec), training.settings(spec)
    hosts, outs = run_ranks_in_process(fabric, plan, s)
    result, checks = analyse(plan, s, fabric, hosts, outs)
    assert all(c["ok"] for c in checks), checks
    assert {c["name"] for c in checks} == {"correct", "traffic matrix", "rails carry it"}
    tr = result["traffic"]
    names = tr["gpus"]
    for a, row in enumerate(tr["tp"]):
        for b, v in enumerate(row):
            if v:
                assert names[a][:2] == names[b][:2]                              # one server
    for ph in ("pp", "dp"):
        pairs = [(names[a], names[b]) for a, row in enumerate(tr[ph]) for b, v in enumerate(row) if v]
        assert pairs and all(x[:2] != y[:2] and x[-1] == y[-1] for x, y in pairs)   # other server, same rail
    assert tr["cross_rail_bytes"] == 0
    assert set(result["measured"]) == set(result["predicted"]) == set(result["ratio"]) == set(training.PHASES)
    assert result["measured"]["pp"] > 0 and result["measured"]["dp"] > 0
    assert result["bubble_ratio"]["formula"] == pytest.approx(1 / 3)

    # a byte where the plan has no traffic fails the matrix check and the rails check
    stray = copy.deepcopy(outs)
    stray[0]["sent"]["tp"][7] = 100                                               # s0g0 -> s3g1
    _, bad = analyse(plan, s, fabric, hosts, stray)
    detail = {c["name"]: (c["ok"], c["detail"]) for c in bad}
    assert detail["traffic matrix"][0] is False
    assert "tp s0g0->s3g1" in detail["traffic matrix"][1]
    assert "TP bytes leave the HB domain" in detail["traffic matrix"][1]
    assert detail["rails carry it"] == (False, "100 B between GPUs of different servers and rails")
