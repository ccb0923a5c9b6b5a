"""Faults the job itself finds and recovers from (GPU failures, the cables of GPUs): the controller does not
see them, the job's ranks do (heartbeats, the progress watchdog, the transport). Their outcome is the job's:
when the first peer noticed, by what, when the communicator had re-formed and with what policy.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.faults.kind import FaultKind, Target
from testbed.faults.targets import GPU_HOST, gpu_host, server_hosts


def rel(t, t0: float):
    """Seconds after the workloads started (None for never)."""
    return round(t - t0, 4) if t else None


def since(f: dict, t) -> str:
    return f"{t} s (+{t - f['at_s']:.2f} s)" if t is not None and f["at_s"] is not None else "never"


@dataclass(frozen=True)
class JobFault(FaultKind):
    """A fault of GPU hosts: target a GPU host, or (server=True) a server and its spares."""
    target: Target = GPU_HOST
    by_job: bool = True
    server: bool = False

    def hosts(self, fabric, fault: dict) -> list[str]:
        return (server_hosts if self.server else gpu_host)(fabric, self.name, fault["target"])

    def check(self, fabric, fault: dict) -> None:
        self.hosts(fabric, fault)

    def hit(self, fabric, fault: dict) -> tuple[set, set]:
        return set(), set(self.hosts(fabric, fault))

    def outcome(self, record: dict, workloads: list[dict], t0: float, fabric) -> None:
        """Detected when the first peer noticed the failure, recovered when the communicator had re-formed
        (every member of the new epoch in), first success when the first collective after that completed on
        every member, and the started steps that were lost (run again); `recovery` names the policy."""
        recoveries = [r for w in workloads for r in w.get("recoveries", [])]
        at, hosts = t0 + record["at_s"], set(self.hosts(fabric, record))
        mine = [r for r in recoveries if r.get("detected_at") and r["detected_at"] >= at - 0.01
                and hosts & set(r.get("failed") or hosts)]
        if mine:
            r = min(mine, key=lambda r: r["detected_at"])
            record.update(detected_s=rel(r["detected_at"], t0), detected_by=r.get("detected_by"),
                          recovered_s=rel(r["reformed_at"], t0),
                          first_success_s=rel(r["first_success_at"], t0), lost_steps=r["lost_steps"],
                          recovery=r["policy"], replaced_by=r.get("replaced") or None)
        else:           # abort (or nothing noticed it): detection only
            seen = [w["first_error_at"] for w in workloads if w.get("first_error_at")
                    and w["first_error_at"] >= at - 0.01]
            record.update(detected_s=rel(min(seen), t0) if seen else None, recovery="abort" if seen else None)

    def describe(self, f: dict) -> str:
        return self.happened(f) + (": it hit no process (no rank ran on the target)" if f.get("processes") == 0
                                   else "")

    def happened(self, f: dict) -> str:
        """When the peers noticed, when the job had re-formed, the first success."""
        line = f"fault {f['kind']} {f['target']}: at {f['at_s']} s, detected at {since(f, f['detected_s'])}" + \
            (f" by {f['detected_by']}" if f.get("detected_by") else "")
        if f.get("recovery") in (None, "abort"):
            return line + (", job aborted" if f.get("recovery") else "")
        how = f["recovery"] + (f" by {', '.join(f['replaced_by'].values())}" if f.get("replaced_by") else "")
        return (line + f", re-formed ({how}) at {since(f, f['recovered_s'])}, first collective after it done at "
                f"{since(f, f['first_success_s'])}, {f['lost_steps']} step(s) lost")
