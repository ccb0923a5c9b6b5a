"""The `diloco` workload without a fabric: its sites and bad input (one line each, exit 2 from the command), the
compute scaling, and its figures and checks from real rank outputs (ranks run in-process over the transport's
in-memory fabric)."""
import dataclasses

import jsonschema
import numpy as np
import pytest

from hosts.collectives import diloco as dl
from hosts.collectives.diloco_rank import run_rank
from testbed.cli import main
from testbed.fabric.topo import build
from testbed.results import results_schema
from testbed.scenario.schema import ScenarioError
from testbed.workloads import diloco, rank_setup
from tests.unit.hosts.collectives.test_algorithms import run_ranks

FABRIC = build("rail-optimized", 2, 2, nic_mbps=20)
SITES = [["s0g0", "s0g1"], ["s1g0", "s1g1"]]


@pytest.mark.parametrize("change,message", [
    ({"sites": [["s0g0", "s0g1"], ["s1g0", "s9g9"]]},
     "diloco sites[1]: unknown GPU host 's9g9' (the fabric has s0g0, s0g1, s1g0, s1g1)"),
    ({"sites": [["s0g0", "s0g1"], ["s1g0", "s0g1"]]},
     "diloco sites[1]: s0g1 is already in sites[0] (sites may not overlap)"),
    ({"sites": [["s0g0", "s0g1", "s1g0"]]}, "diloco needs at least 2 sites, got 1"),
    ({"sites": None}, "diloco needs `sites:`, groups of GPU host names (e.g. [[s0g0, s0g1], [s1g0, s1g1]]): this "
                      "fabric declares no sites"),
    ({"sync_every": 4, "fragments": 3}, "diloco fragments 3 do not divide sync_every 4 (a fragment every H/P steps)"),
    ({"sync_every": 6, "fragments": 3, "size": 1000},
     "diloco fragments 3 do not divide the 250 parameters of size 1000"),
    ({"size": 1001}, "diloco size 1001: not a whole number of float32 parameters (4 bytes each)"),
    ({"rejoin": True, "variants": ["ddp", "streaming"]},
     "diloco rejoin: applies to the diloco variant, not in variants ['ddp', 'streaming']"),
    ({"variants": ["ddp", "diloco"], "quantize": 8, "faults_from_run": 3},
     "diloco faults_from_run 3: there are 3 runs (ddp, diloco, diloco 8-bit), numbered from 0"),
    ({"rejoin": True, "variants": ["diloco", "streaming"]},
     "diloco rejoin: not with streaming (its fragments' exchanges overlap the next inner steps, so there is no "
     "outer-step boundary at which a site can leave and be handed the state); use variants [diloco]"),
])
def test_what_cannot_run_is_refused_in_one_line(change, message):
    spec = {k: v for k, v in {"type": "diloco", "sites": SITES, **change}.items() if v is not None}
    with pytest.raises(ScenarioError) as err:
        diloco.validate(FABRIC, spec)
    assert str(err.value) == message


def test_fragments_need_not_divide_without_streaming():
    diloco.validate(FABRIC, {"type": "diloco", "sites": SITES, "variants": ["ddp", "diloco"], "fragments": 3})


@pytest.mark.parametrize("workload,line", [
    ("{type: diloco, sites: [[s0g0], [s1g0]], sync_every: 0}", "workloads.0.sync_every: 0 is less than the minimum"),
    ("{type: diloco, sites: [[s0g0], [s1g0]], variants: [local-sgd]}", "workloads.0.variants.0: 'local-sgd' is not"),
    ("{type: diloco, sites: [[s0g0], [s9g0]]}", "diloco sites[1]: unknown GPU host 's9g0'"),
    ("{type: diloco, sites: [[s0g0], [s1g0]], quantize: 3}", "workloads.0.quantize"),
    ("{type: diloco, sites: [[s0g0], [s1g0]], rejoin: sometimes}", "workloads.0.rejoin: 'sometimes' is not of type"),
    ("{type: diloco, sites: [[s0g0], [s1g0]], rejoin: true, variants: [ddp]}", "diloco rejoin: applies to the "
                                                                               "diloco variant"),
    ("{type: diloco, sites: [[s0g0], [s1g0]], rejoin: true}", "diloco rejoin: not with streaming"),
])
def test_the_command_says_it_in_one_line_and_exits_2(capsys, tmp_path, workload, line):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nfabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2}\n"
                    f"workloads:\n  - {workload}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and line in err[0], err


def test_rejoin_reaches_the_diloco_ranks_float32_and_quantised():
    s = diloco.settings({"type": "diloco", "rejoin": True, "quantize": 8, "variants": ["ddp", "diloco"]})
    assert diloco.runs(s) == [("ddp", 0), ("diloco", 0), ("diloco", 8)]
    assert [diloco.rejoins(s, v, b) for v, b in diloco.runs(s)] == [False, True, True]
    assert not diloco.rejoins(diloco.settings({"type": "diloco"}), "diloco", 0)


def test_compute_is_the_full_scale_step_dilated():
    s = diloco.settings({"type": "diloco", "size": "1MiB", "full_scale": {"params": 1e9, "step_s": 2.0,
                                                                          "wan_gbps": 10}})
    d = (2 ** 20 / 4e9) * (10e9 / 20e6)
    assert diloco.dilation(FABRIC, s) == pytest.approx(d)
    assert diloco.compute_s(FABRIC, s) == pytest.approx(2.0 * d)
    assert diloco.compute_s(FABRIC, {**s, "compute_s": 0.25}) == 0.25
    assert diloco.runs(diloco.settings({"type": "diloco", "quantize": [8, 4]})) == [
        ("ddp", 0), ("diloco", 0), ("diloco", 8), ("diloco", 4), ("streaming", 0), ("streaming", 8),
        ("streaming", 4)]


def run_in_process(s, variant, bits):
    """The ranks of one run over the in-memory fabric, as the workload launches them."""
    hosts = [h for site in diloco.sites_of(FABRIC, s) for h in site]
    peers = list(rank_setup.peers(hosts))
    sites = [[0, 1], [2, 3]]
    common = dataclasses.replace(diloco.rank_spec(s, FABRIC, "ecmp", peers, sites, "", variant, bits),
                                 rate_limit_bps=None, compute_s=0.0)
    out = run_ranks(peers, lambda c: run_rank(dataclasses.replace(common, rank=c.rank), c, c.store))
    return {h.name: o for h, o in zip(hosts, [out[r] for r in range(len(hosts))])}, sites, common


def test_figures_and_checks_from_real_rank_outputs():
    s = diloco.settings({"type": "diloco", "sites": SITES, "size": "8KiB", "quantize": 8})
    result = {"sites": SITES, "gpus": 4, "variants": []}
    refs = {}
    for variant, bits in diloco.runs(s):
        out, sites, common = run_in_process(s, variant, bits)
        refs[variant, bits] = dl.reference(variant, sites, common.count, s["steps"], s["sync_every"], s["fragments"],
                                           s["seed"], s["inner_lr"], s["outer_lr"], s["momentum"], s["mix"], bits)
        result["variants"].append(diloco.measure(variant, bits, 0.5, sites, out, [], refs[variant, bits],
                                                 refs.get((variant, 0))))
    checks = {c["name"]: c for c in diloco.checks(result, s)}
    assert all(c["ok"] for c in checks.values()), checks
    assert "bit-equal" in checks["replicas exact"]["detail"] and "8-bit diloco" in checks["replicas exact"]["detail"]
    rows = {(r["variant"], r["quantize"]): r for r in result["variants"]}
    assert rows["diloco", 0]["wan_bytes_per_step"] == rows["ddp", 0]["wan_bytes_per_step"] / 4
    assert rows["streaming", 0]["peak_wan_bytes"] == rows["diloco", 0]["peak_wan_bytes"] / 2
    assert rows["diloco", 8]["peak_wan_bytes"] == 2 * dl.payload_bytes(2048, 8)
    assert 0 < rows["diloco", 8]["quantization_max_dev"] < 0.25
    # the record fits results.json's schema
    record = {**result, "type": "diloco", "name": "d", "leaders": ["s0g0", "s1g0"], "count": 2048, "bytes": 8192,
              "steps": 8, "sync_every": 4, "fragments": 2, "compute_s": 0.5, "dilation": 1.0, "ok": True,
              "started_s": 0.0, "wall_s": 9.0, "cpu_bound": False}
    jsonschema.validate(record, results_schema.workload())
    assert "diloco" in diloco.summary(record) and "exact" in diloco.tables(record)[0]
    assert diloco.comparable(record)["d", "streaming", 8192]["peak WAN B"] == rows["streaming", 0]["peak_wan_bytes"]


def test_a_replica_that_differs_fails_the_check():
    s = diloco.settings({"type": "diloco", "sites": SITES, "size": "4KiB", "variants": ["diloco"]})
    out, sites, common = run_in_process(s, "diloco", 0)
    ref = dl.reference("diloco", sites, common.count, 8, 4, 2, 0, 0.05, 0.7, 0.9, 0.5, 0)
    ref["theta"][1] = ref["theta"][1].copy()
    ref["theta"][1][7] += 1e-6
    row = diloco.measure("diloco", 0, 0.5, sites, out, [], ref, None)
    assert row["replicas"]["wrong"] == [2, 3]
    check = next(c for c in diloco.checks({"sites": SITES, "gpus": 4, "variants": [row]}, s)
                 if c["name"] == "replicas exact")
    assert not check["ok"] and "ranks [2, 3]" in check["detail"]


def test_wan_link_bytes_come_from_the_wan_links_counters_and_the_check_holds_them_to_1_over_h():
    from testbed.fabric.topo import build
    sited = build("clos", 1, 2, spines=1, nic_mbps=20, sites={"eu": {}, "us": {}},
                  wan=[{"a": "eu", "b": "us", "mbps": 5, "delay_us": 10000}])
    (link,) = sited.wan_links()
    ends = [f"{link.a}:{link.a_port}", f"{link.b}:{link.b_port}"]
    before = {p: {"tx_bytes": 1000} for p in ends} | {"eutor0:1": {"tx_bytes": 0}}
    after = {ends[0]: {"tx_bytes": 41000}, ends[1]: {"tx_bytes": 3000}, "eutor0:1": {"tx_bytes": 10 ** 9}}
    assert diloco.wan_link_bytes(sited, before, after) == 40000 + 2000        # the WAN link's ports only
    s = diloco.settings({"type": "diloco", "sites": SITES, "variants": ["ddp", "diloco"]})
    row = {"replicas": {"wrong": [], "outer_agree": True}, "wan_bytes_per_step": 100.0,
           "wan_wire_bytes_per_step": 110.0}
    ddp = {**row, "variant": "ddp", "quantize": 0, "wan_link_bytes_per_step": 120.0}
    fine = {**row, "variant": "diloco", "quantize": 0, "wan_bytes_per_step": 25.0, "wan_wire_bytes_per_step": 27.5,
            "wan_link_bytes_per_step": 30.0}
    check = next(c for c in diloco.checks({"sites": SITES, "gpus": 4, "variants": [ddp, fine]}, s)
                 if c["name"] == "diloco wan bytes")
    assert check["ok"] and "0.250 by the WAN links' counters" in check["detail"]
    more = {**fine, "wan_link_bytes_per_step": 60.0}              # the links carried more than the ranks counted
    check = next(c for c in diloco.checks({"sites": SITES, "gpus": 4, "variants": [ddp, more]}, s)
                 if c["name"] == "diloco wan bytes")
    assert not check["ok"] and "0.500 by the WAN links' counters" in check["detail"]


def test_the_membership_history_is_the_anchors_with_every_leaders_events():
    sites = [[0, 1], [2, 3]]
    hist = {"members": [[0], [0, 1]], "resyncs": [[4, 1]], "events": [], "resync_bytes": 64}
    out = {"a": {"rank": 0, "membership": hist},
           "b": {"rank": 2, "membership": {**hist, "resync_bytes": 64, "events": [
               {"event": "rejoined", "outer_step": 0, "done": 4, "event_at": 105.5},
               {"event": "left", "outer_step": 0, "done": 4, "event_at": 102.0}]}},
           "c": {"rank": 3, "membership": {**hist, "events": [{"event": "left", "event_at": 102.0}]}}}
    m = diloco.membership(out, sites, 100.0)
    assert m["members"] == [[0], [0, 1]] and m["resyncs"] == [(4, 1)] and m["resync_bytes"] == 64
    assert [(e["event"], e["site"], e["event_s"]) for e in m["events"]] == [("left", 1, 2.0), ("rejoined", 1, 5.5)]
    assert diloco.membership({"b": out["b"]}, sites, 100.0) is None       # no anchor, no history
    ref = dl.reference("diloco", sites, 16, 8, 4, 1, 0, 0.05, 0.7, 0.9, 0.5, 0, members=m["members"],
                       resyncs=m["resyncs"])
    assert np.array_equal(ref["theta"][0], ref["theta"][1])
