"""Faults shown as they happen: each injection and repair as the schedule makes it; for a link or switch fault,
when the controller saw it and when every switch had acknowledged the new rules, as soon as the controller's
state shows them; for a GPU fault (or a GPU's cable), when it was detected and the job re-formed, as soon as
the workload that saw it reports (its ranks tell when their launch ends: there is no live view of them).

The figures are those of results.json (testbed/faults/schedule.py Schedule.results, outcomes.py): this
module only watches them appear.
"""
from __future__ import annotations

import threading
import time

from testbed.faults import REGISTRY, outcomes
from testbed.monitor.background import Background


class FaultEcho(Background):
    """Polls the schedule's log (and the controller's state while a link fault injected less than WAIT_S ago
    awaits its stages) from a thread, and reports each new event once. Polling is light (a list, a small JSON
    file, a few times a second) so as not to take CPU from what is measured."""
    WAIT_S = 10.0

    def __init__(self, schedule, net, report, period_s: float = 0.25):
        self.schedule, self.net, self.report, self.period_s = schedule, net, report, period_s
        self.seen = 0                    # entries of schedule.log reported
        self.echoed: set[tuple[int, str]] = set()
        self.lock = threading.Lock()
        super().__init__("tb-fault-echo")

    def start(self) -> FaultEcho:
        return super().start() if self.schedule.faults else self

    def stop(self) -> None:
        """Stop watching, after a last look (a detection may land after the last workload)."""
        super().stop()
        self.poll(final=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.poll()

    def poll(self, final: bool = False) -> None:
        window = float("inf") if final else self.WAIT_S
        with self.lock:
            t0, log = self.schedule.t0, list(self.schedule.log)
            for rec in log[self.seen:]:
                f = self.schedule.faults[rec["fault"]]
                self.report.fault(f["kind"], f["target"], "repaired" if rec["up"] else "injected", rec["at"] - t0)
            self.seen = len(log)
            now = time.time()
            waiting = [i for i, f in enumerate(self.schedule.faults) if not REGISTRY[f["kind"]].by_job
                       and (i, "installed") not in self.echoed
                       and any(r["fault"] == i and not r["up"] and now - r["at"] < window for r in log)]
            if waiting:
                try:
                    events = self.net.controller_view().get("port_events", [])
                except (OSError, ValueError):        # the state file being rewritten: next time
                    return
                records = self.schedule.results(events)
                for i in waiting:
                    self._stages(i, records[i], ("detected", "detected_s"), ("installed", "installed_s"))

    def workload_ended(self, result: dict) -> None:
        """A workload ended: what its ranks reported about the GPU faults (detection, re-forming)."""
        with self.lock:
            records = self.schedule.results([])
            outcomes.fill(records, [result], self.schedule.t0, self.net.fabric)
            for i, rec in enumerate(records):
                if REGISTRY[rec["kind"]].by_job and rec["at_s"] is not None:
                    self._stages(i, rec, ("detected", "detected_s"), ("recovered", "recovered_s"))

    def _stages(self, i: int, rec: dict, *stages) -> None:
        for event, key in stages:
            if rec.get(key) is not None and (i, event) not in self.echoed:
                self.echoed.add((i, event))
                self.report.fault(rec["kind"], rec["target"], event, rec[key], at=rec["at_s"], how=_how(rec, event))


def _how(rec: dict, event: str) -> str:
    if event == "detected" and rec.get("detected_by"):
        return f"by {rec['detected_by']}"
    if event == "recovered" and rec.get("recovery"):
        spare = f" with {', '.join(rec['replaced_by'].values())}" if rec.get("replaced_by") else ""
        return f"({rec['recovery']}{spare})"
    return ""
