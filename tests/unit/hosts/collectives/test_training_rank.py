"""The training-iteration rank program: the rank layout, the pipeline schedules, and whole iterations run
in-process (ranks are threads over the transport's in-memory fabric: real RoCEv2 packets, no namespaces)."""
import json

import jsonschema
import numpy as np
import pytest

from hosts.collectives import training
from hosts.collectives.layout import Layout, gpu_of
from hosts.collectives.schedule import SCHEDULES, in_flight, simulate
from hosts.collectives.subcomm import SubComm
from hosts.spec import TrainingRankSpec
from hosts.spec.results import TRAINING_RANK
from tests.unit.hosts.collectives.test_algorithms import peers_grid, run_ranks

PLANS = [(1, 1, 1), (2, 2, 2), (4, 2, 1), (2, 1, 4), (1, 4, 2), (2, 3, 2), (3, 2, 2)]


@pytest.mark.parametrize("t,p,d", PLANS)
def test_groups_partition_the_ranks_in_megatron_order(t, p, d):
    lay = Layout(tp=t, pp=p, dp=d)
    assert sorted(lay.rank(*lay.coords(r)) for r in range(lay.world)) == list(range(lay.world))
    tp_groups = {tuple(lay.tp_group(r)) for r in range(lay.world)}
    dp_groups = {tuple(lay.dp_group(r)) for r in range(lay.world)}
    assert len(tp_groups) == p * d and all(len(g) == t for g in tp_groups)
    assert len(dp_groups) == p * t and all(len(g) == d for g in dp_groups)
    assert sorted(r for g in tp_groups for r in g) == sorted(r for g in dp_groups for r in g) == list(range(lay.world))
    for r in range(lay.world):
        tp, dp, stage = lay.coords(r)
        assert lay.tp_group(r) == list(range(r - tp, r - tp + t))             # TP fastest: neighbouring ranks
        assert all(lay.coords(q)[0] == tp and lay.coords(q)[2] == stage for q in lay.dp_group(r))
        nxt = lay.next_stage(r)
        assert (nxt is None) == (stage == p - 1)
        if nxt is not None:
            assert lay.coords(nxt) == (tp, dp, stage + 1) and lay.prev_stage(nxt) == r


def test_small_plan_by_hand():
    lay = Layout(tp=2, pp=2, dp=2)
    assert lay.tp_group(0) == [0, 1] and lay.dp_group(0) == [0, 2] and lay.dp_group(5) == [5, 7]
    assert lay.next_stage(0) == 4 and lay.prev_stage(4) == 0 and lay.next_stage(4) is None
    assert lay.peers(0) == [1, 2, 4] and lay.peers(7) == [3, 5, 6]
    assert lay.roles()[(0, 4)] == {"pp"} and lay.roles()[(0, 1)] == {"tp"} and (0, 3) not in lay.roles()


@pytest.mark.parametrize("servers,per,t,p,d,rail_aligned", [
    (4, 2, 2, 2, 2, True),      # TP fills the server: DP and PP along the rails of other servers
    (2, 4, 2, 2, 2, True),      # DP inside the server, PP along the rails
    (2, 4, 4, 1, 2, True),
    (2, 4, 2, 4, 1, False),     # pipeline neighbours 2 ranks apart: s0g2 -> s1g0 crosses rails
])
def test_placement_on_servers(servers, per, t, p, d, rail_aligned):
    lay = Layout(tp=t, pp=p, dp=d)
    assert lay.world == servers * per
    for a, b in lay.roles():
        if b in lay.tp_group(a):
            assert gpu_of(a, per)[0] == gpu_of(b, per)[0]                 # TP inside the HB domain
    aligned = all(gpu_of(a, per)[0] == gpu_of(b, per)[0] or gpu_of(a, per)[1] == gpu_of(b, per)[1]
                  for a, b in lay.roles())
    assert aligned == rail_aligned


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("p,m", [(1, 1), (1, 3), (2, 1), (2, 4), (3, 2), (4, 4), (4, 8), (5, 3)])
def test_schedules_run_every_pass_once_and_idle_p_minus_1_passes(schedule, p, m):
    for s in range(p):
        steps = SCHEDULES[schedule](s, p, m)
        assert sorted(steps) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        assert all(steps.index(("F", i)) < steps.index(("B", i)) for i in range(m))
        if schedule == "1f1b":                  # 1F1B keeps at most p - s micro-batches' activations
            assert in_flight(steps) == min(p - s, m)
        else:
            assert in_flight(steps) == m
    f, b = 1.0, 2.0
    makespan = simulate(p, m, schedule, f, b)
    assert makespan == pytest.approx((m + p - 1) * (f + b))
    assert (makespan - m * (f + b)) / makespan == pytest.approx((p - 1) / (p - 1 + m))


def test_simulate_detects_a_schedule_that_deadlocks(monkeypatch):
    monkeypatch.setitem(SCHEDULES, "backwards-first", lambda s, p, m: [("B", i) for i in range(m)] +
                        [("F", i) for i in range(m)])
    with pytest.raises(RuntimeError, match="deadlocks"):
        simulate(2, 2, "backwards-first", 1.0, 1.0)


# -- whole iterations, in-process ---------------------------------------------------------------

def run_training(servers, per, spec, timeout=30.0):
    out = run_ranks(peers_grid(servers, per), lambda c: training.run_rank(spec, c, c.store), timeout=timeout)
    for o in out.values():               # as the rank prints it, which the launcher checks
        jsonschema.validate(json.loads(json.dumps(o)), TRAINING_RANK)
    return out


def spec_for(t, p, d, m=3, schedule="1f1b", layers=2, dp_algo="ring", **extra):
    # rank, peers and store are the communicator's here (run_ranks)
    return TrainingRankSpec.from_dict({
        "rank": 0, "peers": [], "store": "", "plan": {"tp": t, "pp": p, "dp": d}, "micro_batches": m,
        "schedule": schedule, "layers": layers, "recompute": True, "activation_count": 1500 + 7,
        "gradient_count": 5000 + 3, "dtype": "float16", "compute_s": 0.002, "tp_algo": "ring", "dp_algo": dp_algo,
        "iterations": 1, "check": True, **extra})


@pytest.mark.parametrize("servers,per,t,p,d,schedule,dp_algo", [
    (2, 4, 2, 2, 2, "1f1b", "ring"),
    (4, 2, 2, 2, 2, "gpipe", "ring"),
    (2, 4, 1, 4, 2, "1f1b", "ring"),
    (2, 4, 1, 1, 8, "1f1b", "hierarchical"),
    (1, 3, 3, 1, 1, "1f1b", "ring"),
])
def test_an_iteration_is_exact_and_sends_what_the_plan_says(servers, per, t, p, d, schedule, dp_algo):
    spec = spec_for(t, p, d, schedule=schedule, dp_algo=dp_algo)
    out = run_training(servers, per, spec)
    lay, m, act, grad = Layout(tp=t, pp=p, dp=d), spec.micro_batches, 2 * spec.activation_count, \
        2 * spec.gradient_count
    ars = m * spec.layers * 6                          # 2 forward, 2 recomputation, 2 backward per layer
    for r, o in out.items():
        want = {"tp": True if t > 1 else None, "pp": True if p > 1 else None, "dp": True if d > 1 else None}
        assert o["correct"] == want, (r, o["correct"])
        it = o["iterations"][0]
        assert it["tp_allreduces"] == (ars if t > 1 else 0)
        assert set(o["sent"]["tp"]) <= set(lay.tp_group(r)) - {r}
        assert set(o["sent"]["dp"]) <= set(lay.dp_group(r)) - {r}
        assert set(o["sent"]["pp"]) == {x for x in (lay.prev_stage(r), lay.next_stage(r)) if x is not None}
        assert all(v == m * act for v in o["sent"]["pp"].values())
        assert set(o["wire_sent"]) == set(lay.peers(r))   # connected to every peer before the clock started
    total = {ph: sum(v for o in out.values() for v in o["sent"][ph].values()) for ph in ("tp", "pp", "dp")}
    assert total["tp"] == p * d * ars * 2 * (t - 1) * act                 # ring: 2(t-1) x the data per group
    assert total["dp"] == p * t * 2 * (d - 1) * grad                      # ring and hierarchical alike
    assert total["pp"] == 2 * m * (p - 1) * t * d * act


def test_a_wrong_allreduce_is_caught(monkeypatch):
    """The checks are real: an AllReduce that does not reduce makes every TP and DP result wrong."""
    monkeypatch.setattr(training.algorithms, "allreduce", lambda comm, x, op, algo: x)
    out = run_training(4, 2, spec_for(2, 2, 2, m=2))
    assert all(o["correct"]["tp"] is False and o["correct"]["dp"] is False for o in out.values())
    assert all(o["correct"]["pp"] is True for o in out.values())


def test_subcomm_renumbers_and_tallies():
    class Parent:
        rank, chunk, op = 5, 8192, ""
        peers = peers_grid(2, 4)

        def __init__(self):
            self.calls = []

        def exchange(self, sends=(), recvs=()):
            self.calls.append((sends, recvs))

    parent = Parent()
    sub = SubComm(parent, [1, 5], "dp")
    assert (sub.rank, sub.world, sub.me.name, sub.me.server) == (1, 2, "s1g1", 1)
    sub.op = "allreduce/ring"
    x = np.zeros(10, dtype=np.float32)
    sub.exchange(sends=[(0, x)], recvs=[(0, x)])
    assert parent.op == "dp allreduce/ring"
    assert [r for r, _ in parent.calls[0][0]] == [1] and sub.sent == {1: 40}
    with pytest.raises(ValueError, match="not a member"):
        SubComm(parent, [0, 1], "tp")
