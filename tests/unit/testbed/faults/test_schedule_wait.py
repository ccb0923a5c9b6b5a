"""A GPU fault timed from a workload waits, while that workload runs, for a rank to start on its target (on a
slow or emulated machine the ranks take seconds to start), says how long it waited, and moves its undoing
with it; once another workload runs it strikes as it is and hits nothing (the run's check then fails)."""
import signal
import time
from types import SimpleNamespace

from testbed.fabric.topo import build
from testbed.faults.schedule import Schedule


class SlowHost:
    """An emulated host whose rank process appears after `empty` looks; records the signals it gets."""

    def __init__(self, empty: int):
        self.empty, self.looks, self.signals = empty, 0, []

    def fail(self, sig, idle=True):
        return None                                  # a namespace host: its processes are signalled one by one

    def processes(self) -> dict:
        self.looks += 1
        return {} if self.looks <= self.empty else {4242: "python -m hosts.agents.collective_rank {}"}

    def signal(self, pids, sig) -> int:
        self.signals.append((time.time(), sig, list(pids)))
        return len(pids)


def schedule(fault: dict, empty: int):
    host = SlowHost(empty)
    net = SimpleNamespace(fabric=build("rail-optimized", 2, 2), host=lambda name: host)
    return Schedule(net, [fault]), host


def run(sched: Schedule, seconds: float, *workloads: str) -> None:
    sched.start()
    for name in workloads:
        sched.workload_started(name)
    time.sleep(seconds)
    sched.stop()


def test_a_crash_waits_for_the_rank_and_says_how_long():
    sched, host = schedule({"kind": "gpu-crash", "target": "s1g1", "at": 0.05, "workload": "w"}, empty=4)
    run(sched, 1.5, "w")
    [rec] = sched.results([])
    [hit] = [s for s in host.signals if s[2]]
    assert rec["processes"] == 1 and hit[1] == signal.SIGKILL and hit[2] == [4242]
    assert 0.3 <= rec["waited_s"] <= 1.0                # four empty looks, 0.1 s apart
    assert abs(rec["at_s"] - (0.05 + rec["waited_s"])) < 0.1


def test_a_hang_is_resumed_its_duration_after_it_struck():
    sched, host = schedule({"kind": "gpu-hang", "target": "s1g1", "at": 0.05, "duration": 0.3, "workload": "w"},
                           empty=3)
    run(sched, 1.5, "w")
    stop, cont = [s for s in host.signals if s[2]][:2]
    assert stop[1] == signal.SIGSTOP and cont[1] == signal.SIGCONT
    assert cont[0] - stop[0] >= 0.3 - 0.02             # not shortened by the wait
    [rec] = sched.results([])
    assert rec["waited_s"] > 0.15 and rec["restored_s"] > rec["at_s"]


def test_no_wait_once_another_workload_runs():
    sched, host = schedule({"kind": "gpu-crash", "target": "s1g1", "at": 0.2, "workload": "w"}, empty=10 ** 6)
    sched.start()
    sched.workload_started("w")
    time.sleep(0.5)
    sched.workload_started("next")                     # w is over: the fault strikes as it is, no more looks
    time.sleep(0.3)
    looks = host.looks
    time.sleep(0.3)
    sched.stop()
    [rec] = sched.results([])
    assert rec["processes"] == 0 and rec["waited_s"] > 0.2
    assert host.looks == looks


def test_a_fault_timed_from_the_start_of_the_workloads_does_not_wait():
    sched, host = schedule({"kind": "gpu-crash", "target": "s1g1", "at": 0.05}, empty=10 ** 6)
    run(sched, 0.5, "w")
    [rec] = sched.results([])
    assert rec["processes"] == 0 and "waited_s" not in rec and host.looks == 1
