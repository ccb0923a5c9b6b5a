"""The collective workload's `loss`: iptables rules in each rank's namespace, checked as they go in, and the
packets they dropped counted when they come out (a loss that silently failed to apply measured nothing)."""
from types import SimpleNamespace

import pytest

from testbed.workloads import collective

LISTING = """Chain OUTPUT (policy ACCEPT 120 packets, 99000 bytes)
    pkts      bytes target     prot opt in     out     source               destination
      17    69632 DROP       0    --  *      eth0    0.0.0.0/0            0.0.0.0/0            statistic mode random probability 0.01000000000
       3      246 DROP       0    --  *      eth1    0.0.0.0/0            0.0.0.0/0            statistic mode random probability 0.01000000000
"""


class Node:
    def __init__(self, refuse: bool = False):
        self.said, self.refuse = [], refuse

    def cmd(self, command: str) -> str:
        self.said.append(command)
        if command.startswith("iptables -w -L"):
            return LISTING
        if self.refuse:
            return "iptables: Resource temporarily unavailable.\ntb-iptables=4\n"
        return "tb-iptables=0\n"


def a_net(nodes: dict):
    return SimpleNamespace(host=lambda name: nodes[name])


def test_rules_go_in_on_both_interfaces_and_their_drops_are_counted_on_the_way_out():
    nodes = {"s0g0": Node(), "s0g1": Node()}
    hosts = [SimpleNamespace(name=n) for n in nodes]
    assert collective.random_loss(a_net(nodes), hosts, 0.01, on=True) == 0
    assert collective.random_loss(a_net(nodes), hosts, 0.01, on=False) == 2 * (17 + 3)
    for node in nodes.values():
        added = [c for c in node.said if " -A OUTPUT" in c]
        removed = [c for c in node.said if " -D OUTPUT" in c]
        assert [c.split(" -o ")[1].split()[0] for c in added] == ["eth0", "eth1"] == \
            [c.split(" -o ")[1].split()[0] for c in removed]
        assert all("--probability 0.01 -j DROP" in c for c in added + removed)


def test_a_rule_that_does_not_go_in_is_an_error_naming_the_host():
    nodes = {"s1g0": Node(refuse=True)}
    with pytest.raises(RuntimeError, match="s1g0: the random-loss rule on eth0 did not go in: iptables: Resource"):
        collective.random_loss(a_net(nodes), [SimpleNamespace(name="s1g0")], 0.05, on=True)


def test_the_rules_that_went_in_come_out_again_when_a_host_refuses_its_own(monkeypatch):
    nodes = {"s0g0": Node(), "s0g1": Node(refuse=True)}
    hosts = [SimpleNamespace(name=n) for n in nodes]
    monkeypatch.setattr(collective, "validate", lambda fabric, spec: None)
    monkeypatch.setattr(collective, "ranks", lambda fabric: hosts)
    monkeypatch.setattr(collective, "_run", lambda net, spec, hosts: pytest.fail("ran without its loss"))
    with pytest.raises(RuntimeError, match="s0g1: the random-loss rule on eth0"):
        collective.run(SimpleNamespace(fabric=None, host=lambda name: nodes[name]), {"loss": 0.01})
    removed = [c.split(" -o ")[1].split()[0] for c in nodes["s0g0"].said if " -D OUTPUT" in c]
    assert removed == ["eth0", "eth1"]
