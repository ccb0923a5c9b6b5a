"""Faults echoed as they happen: injections from the schedule's log, a link fault's stages once the controller's
state shows them, a GPU fault's detection and re-forming once its workload reports; each event once."""
from testbed.fabric import topo
from testbed.faults.echo import FaultEcho
from testbed.faults.schedule import Schedule

T0 = 1000.0


class FakeNet:
    def __init__(self):
        self.fabric = topo.build("rail-optimized", servers=2, gpus_per_server=2, spines=2, spares_per_server=1)
        self.port_events = []

    def controller_view(self):
        return {"port_events": self.port_events}


class Recorder:
    def __init__(self):
        self.events = []

    def fault(self, kind, target, event, t, at=None, how=""):
        self.events.append((kind, target, event, round(t, 3), at, how))


def echo_of(faults):
    net, report = FakeNet(), Recorder()
    schedule = Schedule(net, faults)          # not started: the test writes its log
    schedule.t0 = T0
    return FaultEcho(schedule, net, report), schedule, net, report


def test_a_link_fault_is_echoed_at_injection_then_at_each_stage_the_controller_reaches():
    echo, schedule, net, report = echo_of([{"at": 3.0, "kind": "link-down", "target": "rail0-spine0", "duration": 1.0}])
    echo.poll()
    assert report.events == []
    schedule.log.append({"target": "rail0-spine0", "up": False, "at": T0 + 3.0, "fault": 0})
    echo.poll(final=True)
    assert report.events == [("link-down", "rail0-spine0", "injected", 3.0, None, "")]
    net.port_events.append({"switch": "rail0", "port": 3, "at": T0 + 3.012, "computed_s": 0.004})
    echo.poll(final=True)
    assert report.events[1:] == [("link-down", "rail0-spine0", "detected", 3.012, 3.0, "")]
    net.port_events[0]["installed_at"] = T0 + 3.031
    net.port_events.append({"switch": "spine0", "port": 1, "at": T0 + 3.02, "computed_s": 0.001})
    schedule.log.append({"target": "rail0-spine0", "up": True, "at": T0 + 4.0, "fault": 0})
    echo.poll(final=True)
    echo.poll(final=True)
    assert report.events[2:] == [("link-down", "rail0-spine0", "repaired", 4.0, None, ""),
                                 ("link-down", "rail0-spine0", "installed", 3.031, 3.0, "")]


def test_a_port_event_of_another_port_is_not_this_faults_detection():
    echo, schedule, net, report = echo_of([{"at": 3.0, "kind": "link-down", "target": "rail0-spine0"}])
    schedule.log.append({"target": "rail0-spine0", "up": False, "at": T0 + 3.0, "fault": 0})
    net.port_events.append({"switch": "rail1", "port": 3, "at": T0 + 3.01, "computed_s": 0.0, "installed_at": T0 + 3.02})
    echo.poll(final=True)
    assert [e[2] for e in report.events] == ["injected"]


def test_a_gpu_fault_is_echoed_when_its_workload_reports_the_recovery():
    echo, schedule, net, report = echo_of([{"at": 6.0, "kind": "gpu-crash", "target": "s1g1"}])
    schedule.log.append({"target": "s1g1", "up": False, "at": T0 + 6.0, "fault": 0, "processes": 1})
    echo.poll()
    recovery = {"epoch": 1, "policy": "spare", "failed": ["s1g1"], "replaced": {"s1g1": "s1spare0"},
                "detected_at": T0 + 6.95, "detected_by": "heartbeat", "reformed_at": T0 + 7.9,
                "first_success_at": T0 + 8.5, "lost_steps": 1}
    echo.workload_ended({"type": "traffic"})                  # a workload that saw nothing: nothing more
    assert len(report.events) == 1
    echo.workload_ended({"type": "collective", "recoveries": [recovery], "first_error_at": T0 + 6.95})
    echo.workload_ended({"type": "collective", "recoveries": [recovery], "first_error_at": T0 + 6.95})
    assert report.events == [("gpu-crash", "s1g1", "injected", 6.0, None, ""),
                             ("gpu-crash", "s1g1", "detected", 6.95, 6.0, "by heartbeat"),
                             ("gpu-crash", "s1g1", "recovered", 7.9, 6.0, "(spare with s1spare0)")]
