"""Clos: a ToR switch per server under a spine layer, the baseline without rails."""
from __future__ import annotations

from testbed.fabric.kinds.base import DPID_BASE, FabricKind


class Clos(FabricKind):
    name = "clos"
    summary = "a ToR per server under a spine layer"
    leaf = "tor"
    leaf_unit = "ToR"
    leaf_group = "server"
    rails = False
    planner_leaf = "ToR"
    planner_what = "Clos fabric"

    def leaf_of(self, server: int, rank: int) -> str:
        return f"tor{server}"

    def groups(self, servers: int, gpus_per_server: int) -> tuple[int, int]:
        return servers, gpus_per_server

    def cable_leaves(self, fabric, nic_mbps: float) -> list[str]:
        """A ToR per server, each with its server's GPUs in local-rank order."""
        servers, gpus = fabric.params.servers, fabric.params.gpus_per_server
        leaves = [self.leaf_of(i, 0) for i in range(servers)]
        for i, name in enumerate(leaves):
            fabric.add_switch(name, self.leaf, DPID_BASE[self.leaf] + i)
            for j in range(gpus):
                fabric.add_link(f"s{i}g{j}", name, nic_mbps, "nic")
        return leaves

    def circuit_leaves(self, server: int, leaves: list[str]) -> list[str]:
        return [self.leaf_of(server, 0)]        # a spare GPU stays under its own server's ToR

    def cable_spare_server(self, fabric, server: int, uplink_mbps: float) -> None:
        """Its own ToR under every spine, then its GPUs' NIC links (disabled)."""
        tor = self.leaf_of(server, 0)
        fabric.add_switch(tor, self.leaf, DPID_BASE[self.leaf] + server)
        for x in range(fabric.params.spines):
            fabric.add_link(tor, f"spine{x}", uplink_mbps, "uplink")
        super().cable_spare_server(fabric, server, uplink_mbps)


CLOS = Clos()
