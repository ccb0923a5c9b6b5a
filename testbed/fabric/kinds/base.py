"""What every fabric kind answers: its leaves and how GPUs are cabled to them, whether it has spines, which
GPUs its network joins, and what it tells the planner. One subclass per kind, in this package.

A kind cables leaves and NIC links only; testbed/fabric/topo.py adds the hosts, spines, HB domains, CPU hosts
and spares around them, the same for every kind. The defaults here are a rail fabric's: one leaf per local
rank (a rail switch), every server's GPU j on rail j.
"""
from __future__ import annotations

DPID_BASE = {"rail": 0x100, "tor": 0x200, "spine": 0x300, "frontend": 0x400}


class FabricKind:
    name: str = ""
    summary: str = ""                  # a few words for the scenario schema: what the design is
    leaf: str = "rail"                 # the switch kind of its leaves
    leaf_unit: str = "rail"            # what a machine must take whole when the fabric is spread over machines
    leaf_group: str = "rail"           # what one leaf holds: the GPUs of one rail, or of one server
    rails: bool = True                 # its leaves are rails (a GPU's NIC leaf follows its local rank)
    spines: bool = True                # a spine layer over the leaves
    cross_rail: bool = True            # the network joins GPUs of different rails
    ignored: tuple[str, ...] = ()      # fabric parameters it has no use for (given anyway, they are ignored)
    planner_leaf: str = "rail leaf"    # the planner's name of its lowest switch tier
    planner_what: str = ""             # the planner's name of the whole fabric, in its errors

    def __repr__(self) -> str:
        return f"<fabric kind {self.name}>"

    # -- cabling ----------------------------------------------------------------------------------
    def leaf_of(self, server: int, rank: int) -> str:
        """The leaf a GPU of this server and local rank is cabled to."""
        return f"rail{rank}"

    def groups(self, servers: int, gpus_per_server: int) -> tuple[int, int]:
        """(leaves, GPUs under each leaf) of a fabric of this size (spares aside)."""
        return gpus_per_server, servers

    def cable_leaves(self, fabric, nic_mbps: float) -> list[str]:
        """Add the leaves and every active GPU's NIC link to its leaf; returns the leaves. Cabling order
        fixes port numbers: leaf by leaf, each leaf's GPUs in server order."""
        servers, gpus = fabric.params.servers, fabric.params.gpus_per_server
        leaves = [self.leaf_of(0, j) for j in range(gpus)]
        for j, name in enumerate(leaves):
            fabric.add_switch(name, self.leaf, DPID_BASE[self.leaf] + j)
            for i in range(servers):
                fabric.add_link(f"s{i}g{j}", name, nic_mbps, "nic")
        return leaves

    def circuit_leaves(self, server: int, leaves: list[str]) -> list[str]:
        """The leaves a spare GPU of this server can be switched onto (its optical circuit switch's ports)."""
        return leaves

    def cable_spare_server(self, fabric, server: int, uplink_mbps: float) -> None:
        """A spare server's NIC links, disabled (its hosts exist already): on their rails."""
        for j in range(fabric.params.gpus_per_server):
            fabric.add_link(f"s{server}g{j}", self.leaf_of(server, j), fabric.params.nic_mbps, "nic", standby=True)

    # -- paths --------------------------------------------------------------------------------------
    def reachable(self, src, dst) -> bool:
        """Whether the network (not the HB domain) joins two active hosts."""
        return True
