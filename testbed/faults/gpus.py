"""GPU failures: the rank processes of a GPU host (or of a whole server) are signalled. The job finds them by
its heartbeats over the network or its progress watchdog and recovers (testbed/faults/recovered.py).
"""
from __future__ import annotations

import signal
from dataclasses import dataclass

from testbed.faults.kind import log_entry
from testbed.faults.recovered import JobFault
from testbed.faults.signals import signal_gpus
from testbed.faults.targets import SERVER


@dataclass(frozen=True)
class GpuFault(JobFault):
    """`sig` to the GPU host's processes at `at`; SIGCONT after `duration` if given. resume: still stopped
    when the workloads end, it is resumed so that it can be torn down."""
    sig: int = signal.SIGKILL
    resume: bool = False

    def inject(self, net, fault: dict, up: bool) -> dict:
        hosts = self.hosts(net.fabric, fault)
        rec = log_entry(fault, up)        # the time it struck: before the signals go out
        # timed from a workload's start, it waits for the workload's rank (faults/schedule.py retries a fault that
        # hit nothing); a Docker host's container struck before would keep its rank from starting at all
        idle = up or not fault.get("workload")
        return {**rec, "processes": signal_gpus(net, hosts, signal.SIGCONT if up else self.sig, idle)}

    def restore(self, net, fault: dict) -> None:
        if self.resume:
            signal_gpus(net, self.hosts(net.fabric, fault), signal.SIGCONT)


KINDS = (
    GpuFault("gpu-crash", "the GPU's ranks killed", sig=signal.SIGKILL, hand={"crash": False}, back="gpu-restart"),
    GpuFault("gpu-hang", "stopped", sig=signal.SIGSTOP, resume=True, hand={"hang": False}, back="gpu-restart"),
    # a hung kernel: the rank's main loop blocks at its next kernel, its heartbeats go on (the watchdog finds it)
    GpuFault("gpu-stall", "the GPU hangs, its host alive", sig=signal.SIGUSR2, resume=True,
             hand={"stall": False, "resume": True}, back="gpu-restart"),
    GpuFault("gpu-declared", "declared failed", sig=signal.SIGUSR1, hand={"declare": False}),
    GpuFault("server-down", "a server's GPUs crash", target=SERVER, server=True, sig=signal.SIGKILL),
)
