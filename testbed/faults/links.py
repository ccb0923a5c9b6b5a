"""Link and switch faults: cables cut, mended, flapped or their ports disabled. The controller sees them
(PORT_STATUS) and reroutes; their outcome is its three stages (the schedule's results) and when the traffic
they cut resumed, from the receivers' view; a cut that leaves sites without a WAN path between them says which
(`sites_apart`).
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.fabric import sites
from testbed.faults import cut
from testbed.faults.kind import FaultKind, Target
from testbed.faults.targets import LINKS, resolve, switch_ports

CUT_SILENCE_WITHIN_S = 0.25


def resumed(flows: list[list], at: float) -> tuple[float | None, int]:
    """When the last of the flows a cut at `at` silenced was heard again, and how many it silenced. flows: each
    flow's silences [(start, length)] (Unix times). A flow was cut if one of its silences ended after the cut
    and began at most CUT_SILENCE_WITHIN_S after it; its longest such silence is the cut's."""
    ends = []
    for silences in flows:
        cut_by = [(length, start + length) for start, length in silences
                  if start <= at + CUT_SILENCE_WITHIN_S and start + length >= at]
        if cut_by:
            ends.append(max(cut_by)[1])
    return (max(ends) if ends else None), len(ends)


def _parts(w: dict) -> list[dict]:
    """The workload's result, and a concurrent workload's jobs' results alone and together (their flows)."""
    return [w] + [j[part] for j in w.get("jobs", []) if isinstance(j, dict)
                  for part in ("alone", "together") if isinstance(j.get(part), dict)]


@dataclass(frozen=True)
class LinkFault(FaultKind):
    """Cables cut at `at` (carrier lost), mended after `duration` if given; disable: the switch port
    configured down by OpenFlow instead (the switch knows at once)."""
    target: Target = LINKS
    recovery: str = "reroute"
    disable: bool = False

    def check(self, fabric, fault: dict) -> None:
        resolve(fabric, fault["target"])

    def inject(self, net, fault: dict, up: bool) -> dict:
        return cut.inject(net, fault["target"], up, disable=self.disable)

    def restore(self, net, fault: dict) -> None:
        self.inject(net, fault, True)

    def ports(self, fabric, fault: dict) -> set:
        return switch_ports(fabric, fault["target"])

    def hit(self, fabric, fault: dict) -> tuple[set, set]:
        return set(resolve(fabric, fault["target"])), set()

    def outcome(self, record: dict, workloads: list[dict], t0: float, fabric) -> None:
        """When traffic resumed, from the receivers' view. A workload that measures flows (the traffic
        workload, and a concurrent workload's traffic jobs) lists them under `per_flow`, each UDP flow with its silences (over 1.5 packet times; Unix time
        until the run's `relative_times`): they are read whatever the workload's type. A flow was cut by the
        fault if one of its silences ended after the fault and began at most CUT_SILENCE_WITHIN_S after it: the
        packets already past the cut (in downstream queues) still arrive, so the silence begins a little later
        than the cut (measured: 3 ms; more on a loaded machine). Its longest such silence is the cut's; the
        traffic resumed when the last cut flow got a packet again (seconds after the workloads started; None if
        no flow was silent across it: nothing the receivers could see)."""
        flows = [f.get("silences") or [] for w in workloads for part in _parts(w) for f in part.get("per_flow", [])]
        back, silenced = resumed(flows, t0 + record["at_s"])
        record["resumed_s"] = round(back - t0, 4) if back is not None else None
        record["flows_cut"] = silenced
        split = sites.apart(fabric, resolve(fabric, record["target"]))
        if split:           # no other path between sites: nothing reroutes until the fault is undone
            record["sites_apart"] = split

    def describe(self, f: dict) -> str:
        return (f"fault {f['kind']} {f['target']}: at {f['at_s']} s, controller saw it at {f['detected_s']} s, "
                f"rules installed (every switch acknowledged) at {f.get('installed_s')} s"
                + (f", traffic resumed at {f['resumed_s']} s ({f['flows_cut']} flows cut)"
                   if f.get("resumed_s") is not None else "")
                + (f", sites apart until restored: {' | '.join(', '.join(g) for g in f['sites_apart'])}"
                   if f.get("sites_apart") else "")
                + f", restored at {f['restored_s']} s")


@dataclass(frozen=True)
class LinkUp(LinkFault):
    """Mended at `at`."""

    def steps(self, fault: dict) -> list[tuple[float, bool]]:
        return [(fault["at"], True)]


@dataclass(frozen=True)
class LinkFlap(LinkFault):
    """Down and up `count` times (default 3), `duration` (default 0.5 s) each way."""

    def steps(self, fault: dict) -> list[tuple[float, bool]]:
        period, steps = fault.get("duration", 0.5), []
        for k in range(fault.get("count", 3)):
            steps += [(fault["at"] + 2 * k * period, False), (fault["at"] + (2 * k + 1) * period, True)]
        return steps


KINDS = (
    LinkFault("link-down", "cables cut (carrier lost)", hand={"down": False}),
    LinkUp("link-up", "mended", hand={"up": True}),
    LinkFlap("link-flap", "down and up `count` times",
             properties={"count": {"type": "integer", "minimum": 1, "maximum": 100, "default": 3,
                                   "description": "link-flap: the number of down-up cycles."}}),
    LinkFault("switch-down", "cables cut (carrier lost)"),
    LinkFault("port-disable", "the switch port set down by OpenFlow", disable=True),
)
