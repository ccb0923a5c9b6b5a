"""A scenario's faults injected at their times while the workloads run, and restored at the end; what each
kind does is its FaultKind's (testbed/faults/), when it does it is here.

A fault's `at` counts from the start of the workloads, or from the start of the workload its `workload` names
(the runner reports each start). A GPU fault timed from a workload that finds no rank on its target yet (its
processes still being started: seconds on a slow or emulated machine) waits for one while that workload runs,
and says how long it waited (`waited_s`); once the workload is over it strikes as it is, and hits nothing. Everything still down when the workloads end is restored before the fabric is
torn down. GPU faults and the cables of GPUs are found and recovered from by the job itself; their outcome says
when and how (testbed/faults/outcomes.py).
"""
from __future__ import annotations

import heapq
import threading
import time

from testbed.faults import REGISTRY

RETRY_S = 0.1           # how often a GPU fault waiting for its target's rank looks again


def check_target(fabric, fault: dict) -> None:
    """FaultError naming the problem if the fault's target is not one its kind can hit in this fabric."""
    REGISTRY[fault["kind"]].check(fabric, fault)


class Schedule:
    """Faults of a scenario, injected at their `at` by a thread."""

    def __init__(self, net, faults: list[dict]):
        self.net = net
        self.faults = faults
        self.steps: list[tuple[float, int, bool]] = []      # (time after t0, fault index, up), a heap
        self.anchored: dict[str, list[tuple[float, int, bool]]] = {}     # workload -> steps after its start
        for i, f in enumerate(faults):
            check_target(net.fabric, f)                      # fail early on unknown targets
            steps = [(at, i, up) for at, up in REGISTRY[f["kind"]].steps(f)]
            if "workload" in f:
                self.anchored.setdefault(f["workload"], []).extend(steps)
            else:
                self.steps += steps
        heapq.heapify(self.steps)
        self.log: list[dict] = []
        self.running: str | None = None                     # the workload running now
        self.due: dict[int, float] = {}                     # fault -> when it was first due (those that waited)
        self.t0 = 0.0
        self._cv = threading.Condition()
        self._stopped = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-faults")

    def start(self) -> None:
        self.t0 = time.time()
        self._thread.start()

    def workload_started(self, name: str) -> None:
        """Schedule the faults anchored to this workload from now."""
        with self._cv:
            self.running = name
            since = time.time() - self.t0
            for at, i, up in self.anchored.pop(name, []):
                heapq.heappush(self.steps, (since + at, i, up))
            self._cv.notify()

    def _next(self):
        """The next step when it is due, or None once stopped."""
        with self._cv:
            while not self._stopped:
                if not self.steps:
                    self._cv.wait()
                    continue
                due = self.t0 + self.steps[0][0] - time.time()
                if due <= 0:
                    return heapq.heappop(self.steps)
                self._cv.wait(due)
            return None

    def _run(self) -> None:
        while (step := self._next()) is not None:
            due, i, up = step
            f = self.faults[i]
            rec = REGISTRY[f["kind"]].inject(self.net, f, up)
            if not up and rec.get("processes") == 0 and f.get("workload") == self.running:
                self._later(i, due)         # its workload has not started a rank on the target yet
                continue
            if i in self.due:
                rec["waited_s"] = round(rec["at"] - self.t0 - self.due[i], 4)
            self.log.append({**rec, "fault": i})

    def _later(self, i: int, due: float) -> None:
        """Try fault i again shortly; the steps still to come for it (its undoing) move with it."""
        self.due.setdefault(i, due)
        again = time.time() - self.t0 + RETRY_S
        with self._cv:
            self.steps = [(t + again - due if j == i else t, j, up) for t, j, up in self.steps]
            heapq.heapify(self.steps)
            heapq.heappush(self.steps, (again, i, False))

    def stop(self) -> None:
        """Stop injecting and restore what is down (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._cv:
            self._stopped = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join()
        down = {}
        for rec in self.log:
            down[rec["target"]] = not rec["up"]
        for target, is_down in down.items():
            # a target is restored by the first fault that names it
            fault = next(f for f in self.faults if f["target"] == target)
            if is_down:
                REGISTRY[fault["kind"]].restore(self.net, fault)

    def results(self, port_events: list[dict]) -> list[dict]:
        """Per fault: when it was injected, detected by the controller, and routed around (seconds
        after the workloads started)."""
        out = []
        for i, f in enumerate(self.faults):
            mine = [r for r in self.log if r["fault"] == i]
            first = next((r for r in mine if not r["up"]), mine[0] if mine else None)
            rec = {"kind": f["kind"], "target": f["target"], "at_s": None, "detected_s": None,
                   "recovered_s": None, "restored_s": None, "first_success_s": None, "lost_steps": None}
            if first:
                self._timed(rec, f, first, mine, port_events)
            out.append(rec)
        return out

    def _timed(self, rec: dict, fault: dict, first: dict, mine: list[dict], port_events: list[dict]) -> None:
        rec["at_s"] = round(first["at"] - self.t0, 4)
        if "processes" in first:
            rec["processes"] = first["processes"]       # GPU faults: rank processes signalled
        if "waited_s" in first:
            rec["waited_s"] = first["waited_s"]         # for its target's rank to start
        # events on the fault's own ports (spares coming up are others); None for the faults the controller
        # does not see (the runner fills them in from the workloads' recoveries)
        ports = REGISTRY[fault["kind"]].ports(self.net.fabric, fault)
        seen = [e for e in port_events if e["at"] >= first["at"] - 0.001
                and ports is not None and (e["switch"], e["port"]) in ports]
        if seen:
            # three stages: the controller saw it, computed new routes, and the last switch it
            # changed acknowledged them (barrier reply): only then is the fabric rerouted
            ev = seen[0]
            rec["detected_s"] = round(ev["at"] - self.t0, 4)
            rec["computed_s"] = round(ev["at"] + ev["computed_s"] - self.t0, 4)
            if ev.get("installed_at"):
                rec["installed_s"] = rec["recovered_s"] = round(ev["installed_at"] - self.t0, 4)
        back = next((r for r in mine if r["up"] and r["at"] > first["at"]), None)
        if back:
            rec["restored_s"] = round(back["at"] - self.t0, 4)
