"""The cables of GPUs: the GPU lives on, cut off. nic-down cuts a GPU's NIC cable at the GPU (its port goes
down, the switch loses carrier); partition cuts every NIC cable of a server at the switches (its GPUs lose
carrier and the scale-out network; the server, its processes and its HB domain stay up). The controller
reroutes as for any cut; the job finds and recovers from them as from a GPU failure.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.faults import cut
from testbed.faults.kind import Target, log_entry
from testbed.faults.recovered import JobFault
from testbed.faults.targets import SERVER


@dataclass(frozen=True)
class NicDown(JobFault):
    def inject(self, net, fault: dict, up: bool) -> dict:
        rec = log_entry(fault, up)        # the time it struck: before the cable goes
        return {**cut.inject(net, f"{fault['target']}/nic", up), **rec}

    def restore(self, net, fault: dict) -> None:
        self.inject(net, fault, True)


@dataclass(frozen=True)
class Partition(JobFault):
    target: Target = SERVER
    server: bool = True

    def inject(self, net, fault: dict, up: bool) -> dict:
        rec = log_entry(fault, up)
        return {**rec, "links": cut.cut_at_switches(net, self.hosts(net.fabric, fault), up)}

    def restore(self, net, fault: dict) -> None:
        self.inject(net, fault, True)


KINDS = (NicDown("nic-down", "a GPU's NIC cable cut", back="nic-up"),
         Partition("partition", "a server's NIC cables cut at the switches"))
