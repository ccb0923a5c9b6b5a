"""A fault timed from a workload but injected after that workload ended fails the run's checks."""
from testbed.faults.timing import late_checks

WORKLOADS = [{"name": "first", "started_s": 0.0, "wall_s": 5.0}, {"name": "second", "started_s": 5.5, "wall_s": 20.0}]


def test_a_fault_after_its_workload_ended_fails_and_one_within_it_passes():
    faults = [{"at": 8.0, "kind": "link-down", "target": "rail0-spine0", "workload": "first"},
              {"at": 3.0, "kind": "gpu-crash", "target": "s1g0", "workload": "second"},
              {"at": 8.0, "kind": "link-down", "target": "rail1-spine0"}]         # not timed from a workload
    records = [{"at_s": 8.01}, {"at_s": 8.5}, {"at_s": 8.0}]
    checks = late_checks(faults, records, WORKLOADS)
    assert [c["name"] for c in checks] == ["faults.0 link-down rail0-spine0"]
    assert not checks[0]["ok"]
    assert checks[0]["detail"] == ("injected at 8.01 s (8 s after first started), after first had ended at 5.00 s: "
                                   "first never saw it")


def test_a_fault_never_injected_is_left_to_the_fault_checks():
    faults = [{"at": 30.0, "kind": "link-down", "target": "rail0-spine0", "workload": "second"}]
    assert late_checks(faults, [{"at_s": None}], WORKLOADS) == []
