"""A fault kind: everything the testbed knows about one `kind:` of a scenario's faults, in one object.

The schedule, the scenario schema, `testbed fault`, the outcomes and the report ask the kind; none of them
compares kind names. A kind answers:

    name, doc, target, properties   its part of the scenario schema (testbed/faults/schema.py)
    check(fabric, fault)            raise FaultError naming the problem, before anything is brought up
    steps(fault)                    [(seconds after `at`'s origin, up)]: when it strikes and is undone
    inject(net, fault, up) -> dict  strike (up=False) or undo (up=True) now; the log record
    restore(net, fault)             what is still down when the workloads end is put back (or nothing)
    ports(fabric, fault)            the switch ports it takes down (None: the controller does not see it)
    hit(fabric, fault)              (links, hosts) it hits, drawn in red on the fabric
    outcome(record, workloads, t0, fabric)   fill in what it did from the workloads' results
    missed                          the failed check's detail when it hit no process
    describe(record) -> str         its line in the run's summary
    by_job                          its outcome comes from the job (detection, re-forming), not the controller
    recovery                        the report's recovery column when the outcome names none
    hand                            `testbed fault` actions that run it: {action: up}
    back                            the kind that brings its GPU back into the job (None: none does)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field


class FaultError(ValueError):
    """A fault target that does not exist in the fabric."""


@dataclass(frozen=True)
class Target:
    """What a kind's `target` names, and the schema's words for it ({kinds}: the kinds that take it)."""
    phrase: str


@dataclass(frozen=True)
class FaultKind:
    name: str
    doc: str
    target: Target
    properties: dict = field(default_factory=dict)
    hand: dict = field(default_factory=dict)
    by_job: bool = False
    recovery: str = "-"
    missed: str = "hit no process: no rank ran on the target when it was injected"
    back: str | None = None

    def check(self, fabric, fault: dict) -> None:
        raise NotImplementedError

    def steps(self, fault: dict) -> list[tuple[float, bool]]:
        """Down at `at`, up again after `duration` if it has one."""
        steps = [(fault["at"], False)]
        if "duration" in fault:
            steps.append((fault["at"] + fault["duration"], True))
        return steps

    def inject(self, net, fault: dict, up: bool) -> dict:
        raise NotImplementedError

    def restore(self, net, fault: dict) -> None:
        """Nothing to put back (a crash stays crashed: the fabric goes down next)."""

    def ports(self, fabric, fault: dict) -> set | None:
        return None

    def hit(self, fabric, fault: dict) -> tuple[set, set]:
        raise NotImplementedError

    def outcome(self, record: dict, workloads: list[dict], t0: float, fabric) -> None:
        """Nothing to add."""

    def describe(self, record: dict) -> str:
        raise NotImplementedError


def log_entry(fault: dict, up: bool) -> dict:
    """The schedule's log entry of one step, timed now: {"target", "up", "at"}; the kind adds what it reached."""
    return {"target": fault["target"], "up": up, "at": time.time()}
