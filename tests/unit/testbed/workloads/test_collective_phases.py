"""Per-phase figures of hierarchical collectives: the ranks' phase logs become one line per phase with its own
bound (the link it uses), the pipelined variant is set against the sequential bound, and every fabric kind and
grid (odd sizes, non-power-of-two ranks, 3 servers) gets them."""
import dataclasses

import pytest

from testbed.fabric import kinds, topo
from testbed.model import bounds
from testbed.scenario.schema import ScenarioError
from testbed.workloads import collective, collective_fabric, collective_phases, collective_rows

C = bounds.Cluster(x=4, y=2, c_s=0.625e6, c_f=5.625e6)      # 2 x 4, NIC 5 Mbit/s, HB 45 Mbit/s


def outs(logs_by_rank):
    """Rank outputs as collective_rank prints them: per measured iteration, [(phase, seconds), ...]."""
    return [{"phases": iters} for iters in logs_by_rank]


def test_each_phase_is_the_mean_over_ranks_and_iterations_against_its_own_bound():
    log = [[("hb_reduce_scatter", 0.6), ("rail_exchange", 1.8), ("hb_allgather", 0.6)],
           [("hb_reduce_scatter", 0.7), ("rail_exchange", 1.9), ("hb_allgather", 0.5)]]
    rows = collective_phases.phase_rows("allreduce", "hierarchical", 4 << 20, C, outs([log, log]))
    assert [r["name"] for r in rows] == ["hb_reduce_scatter", "rail_exchange", "hb_allgather"]
    assert [r["link"] for r in rows] == ["hb", "nic", "hb"]
    rs, rail, _ = rows
    assert rs["seconds"] == pytest.approx(0.65) and rail["seconds"] == pytest.approx(1.85)
    assert rs["samples"] == 2
    bound = 3 / 4 * (4 << 20) / C.c_f
    assert rs["bound_seconds"] == pytest.approx(bound, rel=1e-5)
    assert rs["ratio"] == pytest.approx(bound / 0.65, rel=1e-3)
    assert rail["bound_seconds"] == pytest.approx(2 * 1 / 2 * (1 << 20) / C.c_s, rel=1e-5)


def test_an_iteration_a_rank_did_not_log_is_skipped():
    log = [[("rail_allgather", 0.5), ("hb_allgather", 0.3)], None]
    rows = collective_phases.phase_rows("allgather", "hierarchical", 2 << 20, C, outs([log]))
    assert [r["seconds"] for r in rows] == [0.5, 0.3]


def test_flat_algorithms_add_nothing():
    assert collective_phases.extra_fields("allreduce", "ring", 1 << 20, C, outs([[[]], [None]])) == {}
    assert collective_phases.rank_options({"op": "allreduce", "algo": "ring"}, 1 << 20, C) == {}


def test_the_pipelined_row_carries_its_own_bound_and_the_sequential_one():
    log = [[("pipelined", 2.0)]]
    extra = collective_phases.extra_fields("allreduce", "hierarchical-pipelined", 4 << 20, C, outs([log, log]))
    (ph,) = extra["phases"]
    assert ph["link"] == "hb+nic" and ph["bound_seconds"] == pytest.approx(
        bounds.pipelined_time("allreduce", 4 << 20, C), rel=1e-5)
    seq = bounds.bound_busbw("allreduce", "hierarchical", 4 << 20, C) / 1e6
    assert extra["sequential_bound_busbw_MBps"] == pytest.approx(seq, rel=1e-4)
    # the ranks are told the piece count the model assumed
    opts = collective_phases.rank_options({"op": "allreduce", "algo": "hierarchical-pipelined"}, 4 << 20, C)
    assert opts == {"pieces": bounds.pipeline_pieces("allreduce", 4 << 20, C)}


def test_the_table_prints_a_line_per_phase_under_the_row():
    row = {"bytes": 4 << 20, "requested_bytes": 4 << 20, "count": 1 << 20, "dtype": "float32", "seconds": 3.0,
           "algbw_MBps": 1.4, "busbw_MBps": 2.45, "bound_busbw_MBps": 2.625, "bus_ratio": 0.93, "correct": True,
           "phases": [{"name": "hb_reduce_scatter", "link": "hb", "seconds": 0.59, "samples": 2,
                       "bound_seconds": 0.559, "ratio": 0.95},
                      {"name": "rail_exchange", "link": "nic", "seconds": 1.82, "samples": 2,
                       "bound_seconds": 1.678, "ratio": 0.92}]}
    lines = collective_rows.table_row(row).splitlines()
    assert len(lines) == 3 and lines[0].split()[0] == str(4 << 20)
    assert lines[1].startswith("#   phase hb_reduce_scatter") and "590000 us" in lines[1] and "0.95" in lines[1]
    assert " nic " in lines[2] and lines[2].endswith("0.92")
    pipe = {**row, "phases": [], "sequential_bound_busbw_MBps": 2.0}
    assert collective_rows.table_row(pipe).splitlines()[-1].endswith("busbw is 1.23 of it")


@pytest.mark.parametrize("kind", kinds.NAMES)
@pytest.mark.parametrize("servers,per", [(2, 4), (3, 2), (3, 3), (2, 1)])
@pytest.mark.parametrize("op,algo", [("allreduce", "hierarchical"), ("allreduce", "hierarchical-pipelined"),
                                     ("allgather", "hierarchical"), ("allgather", "hierarchical-pipelined"),
                                     ("alltoall", "two-step")])
def test_every_fabric_kind_and_grid_takes_them_with_a_bound_per_phase(kind, servers, per, op, algo):
    fabric = topo.build(kind, servers=servers, gpus_per_server=per, **({"spines": 2} if kind != "rail-only" else {}))
    spec = {"type": "collective", "op": op, "algo": algo, "sizes": ["3000001"]}   # odd: rounded to elements
    collective.validate(fabric, spec)                      # no cross-rail path needed, even on rail-only
    c = collective_fabric.cluster(fabric)
    nbytes = collective_fabric.ran_bytes(op, 3000001, 4, servers * per)
    names = {"allreduce": ["hb_reduce_scatter", "rail_exchange", "hb_allgather"],
             "allgather": ["rail_allgather", "hb_allgather"], "alltoall": ["hb_exchange", "rail_exchange"]}[op]
    if algo == "hierarchical-pipelined":
        names = ["pipelined"]
    log = [[(n, 0.1) for n in names]]
    rows = collective_phases.phase_rows(op, algo, nbytes, c, outs([log] * (servers * per)))
    assert [r["name"] for r in rows] == names
    for r in rows:
        assert r["bound_seconds"] is not None and r["bound_seconds"] >= 0
        if r["bound_seconds"]:
            assert r["ratio"] == pytest.approx(r["bound_seconds"] / 0.1, rel=1e-3)
    assert sum(r["bound_seconds"] for r in rows) == pytest.approx(
        bounds.time_model(op, algo, nbytes, c), rel=1e-4)


def test_pipelined_needs_whole_servers():
    fabric = topo.build("rail-only", servers=2, gpus_per_server=2)
    fabric.params = dataclasses.replace(fabric.params, gpus_per_server=3)      # a grid the fabric does not fill
    with pytest.raises(ScenarioError, match="whole servers"):
        collective.validate(fabric, {"op": "allreduce", "algo": "hierarchical-pipelined"})
