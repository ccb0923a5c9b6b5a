"""Bytes from port to port out of Open vSwitch's datapath flows (`dpctl/dump-flows --names`), ECMP's recirculated
flows included; a flow's count read as growth between reads."""
from testbed.fabric import dpflows

DUMP = """flow-dump from the main thread:
recirc_id(0),in_port(sw-p1),eth_type(0x0800),ipv4(dst=10.11.1.1,proto=17,frag=no), packets:10, bytes:1000, used:0.010s, actions:sw-p2
recirc_id(0),in_port(sw-p3),eth_type(0x0800),ipv4(dst=10.11.0.2,frag=no), packets:5, bytes:500, used:0.1s, actions:hash(l4(0)),recirc(0x5)
recirc_id(0x5),dp_hash(0x1/0xf),in_port(sw-p3),eth_type(0x0800),ipv4(frag=no), packets:5, bytes:500, used:0.1s, actions:set(eth(src=02:00:00:00:00:01,dst=02:00:00:00:00:02)),sw-p4
recirc_id(0),in_port(other-p1),eth_type(0x0800),ipv4(frag=no), packets:9, bytes:900, used:0.1s, actions:other-p2
recirc_id(0),in_port(sw-p2),eth_type(0x86dd),ipv6(frag=no), packets:1, bytes:70, used:never, actions:drop
"""


class Fake:
    def __init__(self, dumps):
        self.dumps = list(dumps)

    def call(self, method, *params):
        return "netdev@ovs-netdev\n" if method == "dpctl/dump-dps" else self.dumps.pop(0)

    def close(self):
        pass


def test_outputs_are_the_bare_ports_of_an_action_list():
    assert dpflows.outputs("set(eth(src=a,dst=b)),sw-p4,sw-p5") == ["sw-p4", "sw-p5"]
    assert dpflows.outputs("hash(l4(0)),recirc(0x5)") == [] and dpflows.outputs("drop") == []


def test_port_to_port_bytes_grow_between_reads_and_a_new_flow_counts_from_zero():
    later = DUMP.replace("bytes:1000", "bytes:1600").replace("packets:5, bytes:500, used:0.1s, actions:set",
                                                              "packets:2, bytes:200, used:0.1s, actions:set")
    reader = dpflows.PortToPort({("sw-p1", "sw-p2"), ("sw-p3", "sw-p4"), ("sw-p2", "sw-p1")}, Fake([DUMP, later]))
    assert reader.read() == {("sw-p1", "sw-p2"): 1000, ("sw-p3", "sw-p4"): 500}
    assert reader.read() == {("sw-p1", "sw-p2"): 600, ("sw-p3", "sw-p4"): 200}     # the recirculated flow was new
