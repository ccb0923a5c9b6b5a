"""When the traffic a link fault cut resumed, from the receivers' silences."""
from testbed.fabric.topo import build
from testbed.faults import outcomes

T0 = 1000.0


def traffic_outcomes(records, workloads, t0):
    outcomes.fill(records, workloads, t0, build("rail-optimized", 2, 2))


def cut(at_s=2.0):
    return {"kind": "link-down", "target": "rail0-spine0", "at_s": at_s}


def traffic(*flows):
    return [{"type": "traffic", "per_flow": [{"silences": s} for s in flows]}]


def test_a_silence_that_begins_just_after_the_cut_is_the_cut():
    # packets already past the cut arrive 3 ms after it; a jitter silence before it does not count
    fault = cut()
    traffic_outcomes([fault], traffic([[1001.5, 0.02], [1002.003, 0.63]], [[1002.004, 0.61]]), T0)
    assert fault["flows_cut"] == 2 and fault["resumed_s"] == 2.633


def test_silences_before_or_long_after_the_cut_are_not_it():
    fault = cut()
    traffic_outcomes([fault], traffic([[1001.0, 0.5], [1003.0, 0.2]]), T0)
    assert fault["flows_cut"] == 0 and fault["resumed_s"] is None


def test_a_flow_counts_its_longest_silence_around_the_cut_once():
    fault = cut()
    traffic_outcomes([fault], traffic([[1001.99, 0.03], [1002.05, 0.1]]), T0)
    assert fault["flows_cut"] == 1 and fault["resumed_s"] == 2.15


def test_gpu_faults_and_faults_never_injected_are_left_alone():
    gpu, late = {"kind": "gpu-crash", "target": "s0g0", "at_s": 2.0}, cut(at_s=None)
    traffic_outcomes([gpu, late], traffic([[1002.0, 1.0]]), T0)
    assert "resumed_s" not in gpu and "resumed_s" not in late


def test_the_flows_of_any_workload_are_heard_and_nothing_else():
    # the flows are read by their key, not by the workload's type; a program job's own silences (its NICs' quiet
    # stretches, from its launch) are not a receiver's and stay its own (testbed/workloads/program_faults.py)
    fault = cut()
    job = {"type": "program", "started_at": 1000.5, "silences": [[1.5, 0.6, True]]}
    traffic_outcomes([fault], [job, {"type": "another", "per_flow": [{"silences": [[1002.01, 0.3]]}]}], T0)
    assert fault["flows_cut"] == 1 and fault["resumed_s"] == 2.31
