"""GPUs that come back: gpu-restart starts a failed GPU's rank process again (a GPU or its host rebooted, a
process restarted by its supervisor); nic-up mends its cut NIC cable first. Either way the job that dropped the
GPU takes it back at its next step boundary; the outcome is when it was admitted and in the grown communicator.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.faults import cut
from testbed.faults.kind import log_entry
from testbed.faults.recovered import JobFault, rel, since

# The running jobs that take GPUs back (testbed/runtime/recovery.JobManager.rejoin registers itself): each
# hook(host) -> 1 if that job starts the host's rank again (once it has dropped the old one), else 0.
restart_hooks: list = []


@dataclass(frozen=True)
class Return(JobFault):
    """`processes` of its record: the jobs that will restart its rank (0: none). mend: its NIC cable first."""
    missed: str = "no running job (recovery other than abort) had this GPU to take back"
    mend: bool = False

    def steps(self, fault: dict) -> list[tuple[float, bool]]:
        return [(fault["at"], True)]

    def inject(self, net, fault: dict, up: bool) -> dict:
        rec = log_entry(fault, True)
        if self.mend:
            cut.inject(net, f"{fault['target']}/nic", up=True)
        return {**rec, "processes": sum(hook(fault["target"]) for hook in list(restart_hooks))}

    def outcome(self, record: dict, workloads: list[dict], t0: float, fabric) -> None:
        """Admitted (the leader's plan) at detected_s, in the grown communicator at recovered_s, its first
        collective in it done at first_success_s (None: never taken back)."""
        recoveries = [r for w in workloads for r in w.get("recoveries", [])]
        at = t0 + record["at_s"]
        mine = [r for r in recoveries if record["target"] in (r.get("joined") or [])
                and (r.get("decided_at") or 0) >= at]
        r = min(mine, key=lambda r: r["decided_at"]) if mine else {}
        record.update(detected_s=rel(r.get("decided_at"), t0), recovered_s=rel(r.get("reformed_at"), t0),
                      first_success_s=rel(r.get("first_success_at"), t0), lost_steps=r.get("lost_steps"),
                      recovery="rejoin" if r else None, detected_by=None)

    def happened(self, f: dict) -> str:
        return (f"fault {f['kind']} {f['target']}: at {f['at_s']} s, " + (
            f"admitted at {since(f, f['detected_s'])}, in the grown communicator at {since(f, f['recovered_s'])}, "
            f"first collective with it done at {since(f, f['first_success_s'])}" if f.get("recovery")
            else "never rejoined"))


KINDS = (Return("gpu-restart", "a failed GPU's rank started again, rejoining the job at a step boundary"),
         Return("nic-up", "a cut NIC cable mended and its GPU's rank rejoining the same way", mend=True))
