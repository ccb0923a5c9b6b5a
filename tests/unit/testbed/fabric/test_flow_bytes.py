"""Reading what each route forwarded from `ovs-ofctl dump-flows`: a route's own group split by its buckets' counters
(`dump-group-stats`), a fast-failover group without them read as its first port, a multicast tree flow's `all` group
as the ports it copies to."""
import subprocess

from testbed.fabric import ovs

FLOWS = """OFPST_FLOW reply (OF1.3) (xid=0x2):
 cookie=0x4d43000000000000, duration=0.7s, table=0, n_packets=1, n_bytes=60, priority=300,ip,in_port=1,nw_proto=2 actions=CONTROLLER:65535
 cookie=0x4641000000000000, duration=0.7s, table=0, n_packets=10, n_bytes=1234, priority=100,ip,nw_dst=10.11.0.1 actions=output:1
 cookie=0x4641000000000000, duration=0.7s, table=0, n_packets=5, n_bytes=500, priority=100,ip,nw_dst=10.11.0.2 actions=group:1
 cookie=0x4641000000000000, duration=0.7s, table=0, n_packets=4, n_bytes=400, priority=100,ip,nw_dst=10.11.1.2 actions=group:2
 cookie=0x4641000000000000, duration=0.7s, table=0, n_packets=3, n_bytes=262, priority=0 actions=drop
"""
GROUPS = """OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):
 group_id=1,type=ff,bucket=bucket_id:0,watch_port:4,actions=output:4,bucket=bucket_id:1,watch_port:3,actions=output:3
 group_id=2,type=select,selection_method=dp_hash,bucket=bucket_id:0,actions=output:3,bucket=bucket_id:1,actions=output:4
"""


STATS = """OFPST_GROUP reply (OF1.5) (xid=0x6):
 group_id=1,duration=0.7s,ref_count=1,packet_count=5,byte_count=500,bucket0:packet_count=4,byte_count=400,bucket1:packet_count=1,byte_count=100
 group_id=2,duration=0.7s,ref_count=1,packet_count=4,byte_count=400,bucket0:packet_count=1,byte_count=150,bucket1:packet_count=3,byte_count=250
"""


def fake(argv, check=True):
    out = GROUPS if "dump-groups" in argv else FLOWS
    return subprocess.CompletedProcess(argv, 0, out, "")


def with_stats(argv, check=True):
    out = {"dump-groups": GROUPS, "dump-group-stats": STATS}.get(argv[3], FLOWS)
    return subprocess.CompletedProcess(argv, 0, out, "")


def test_each_route_its_destination_and_where_it_sent():
    assert ovs.dump_flow_bytes("tb-rrail0", run=fake) == {
        "*>CONTROLLER:65535": 60, "10.11.0.1>output:1": 1234, "10.11.0.2>output:4": 500,
        "10.11.1.2>group:2": 400, "*>drop": 262}


def test_a_routes_own_group_is_split_by_its_buckets():
    """ECMP and spraying: each bucket's bytes are what its port sent to the route's destination."""
    assert ovs.dump_flow_bytes("tb-rrail0", run=with_stats) == {
        "*>CONTROLLER:65535": 60, "10.11.0.1>output:1": 1234, "10.11.0.2>output:4": 400, "10.11.0.2>output:3": 100,
        "10.11.1.2>output:3": 150, "10.11.1.2>output:4": 250, "*>drop": 262}


def test_a_group_two_routes_share_is_not_split():
    shared = FLOWS.replace("actions=group:1", "actions=group:2")
    run = lambda argv, check=True: subprocess.CompletedProcess(    # noqa: E731
        argv, 0, {"dump-groups": GROUPS, "dump-group-stats": STATS}.get(argv[3], shared), "")
    got = ovs.dump_flow_bytes("tb-rrail0", run=run)
    assert got["10.11.0.2>group:2"] == 500 and got["10.11.1.2>group:2"] == 400


def test_a_multicast_tree_flow_is_keyed_by_its_group_and_the_ports_it_copies_to():
    """What the flow received, each of its `all` group's ports sent in full; two in-ports of one group, two keys."""
    flows = FLOWS + (" cookie=0x4d43000000000000, duration=0.7s, table=0, n_packets=7, n_bytes=7000, priority=200,ip,"
                     "in_port=1,nw_dst=239.1.2.3 actions=group:100000\n"
                     " cookie=0x4d43000000000000, duration=0.7s, table=0, n_packets=2, n_bytes=2000, priority=200,ip,"
                     "in_port=10,nw_dst=239.1.2.3 actions=group:100001\n")
    groups = GROUPS + (" group_id=100000,type=all,bucket=bucket_id:0,actions=output:2,bucket=bucket_id:1,"
                       "actions=output:10\n group_id=100001,type=all,bucket=bucket_id:0,actions=output:1,"
                       "bucket=bucket_id:1,actions=output:2\n")
    run = lambda argv, check=True: subprocess.CompletedProcess(    # noqa: E731
        argv, 0, {"dump-groups": groups, "dump-group-stats": STATS}.get(argv[3], flows), "")
    got = ovs.dump_flow_bytes("tb-rrail0", run=run)
    assert got["239.1.2.3>all:2,10"] == 7000 and got["239.1.2.3>all:1,2"] == 2000
    assert not any(k.startswith("239.1.2.3>group") for k in got)
