"""Integration (root): the queue sampler under an incast, and without congestion.

Three paced UDP senders at 0.9 x NIC each converge on s1g0: the switch port into it (rail0>s1g0) gets 2.7
times what it can send. Its queue fills and then drops; the sampled backlog never exceeds the queue the
port's tbf is configured with, give or take one frame: the port's bulk queue is a bfifo that admits a packet only
while backlog + the packet's length <= limit (net/sched/sch_fifo.c), and tbf holds one more, the packet it has
peeked at and waits to have tokens for, which it counts but the bfifo (under the heartbeats' htb) no longer does.
"""
import json
import os
import subprocess
import sys

import pytest

from hosts.rdma.mtu import NIC_MTU
from tests.paths import ROOT

pytestmark = [pytest.mark.root, pytest.mark.alone]   # paced senders need the CPU to keep their pace

ONE_FRAME = NIC_MTU + 14                # the packet tbf holds as it waits for tokens: an Ethernet frame at most
FABRIC = "fabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2, spines: 2, nic_mbps: 10}\n"
INCAST = """
name: queues-incast
""" + FABRIC + """
workloads:
  - {type: traffic, name: incast, pattern: pairs, pairs: [[s0g0, s1g0], [s0g1, s1g0], [s1g1, s1g0]],
     protocol: udp, size: 2MiB, rate_mbps: 9, expect: {max_loss: 1}}
"""
CALM = """
name: queues-calm
""" + FABRIC + """
workloads:
  - {type: traffic, name: calm, pattern: pairs, pairs: [[s0g0, s1g0]], protocol: udp, size: 2MiB, rate_mbps: 9,
     expect: {max_loss: 1}}      # its subject is the queues: a loaded machine may lose a little
"""
CUT = """
name: queues-cut
""" + FABRIC + """
workloads:
  - {type: traffic, name: cut, pattern: pairs, pairs: [[s0g0, s1g0]], protocol: udp, size: 3MiB, rate_mbps: 9,
     expect: {max_loss: 1}}
faults:
  - {workload: cut, at: 1.0, kind: link-down, target: s1g0-rail0, duration: 1.0}
"""
BOTTLENECK = "rail0>s1g0"


def run(tmp_path, text: str, passes: bool = True) -> tuple[dict, dict]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    out = str(tmp_path / "run")
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--out", out], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0 if passes else p.returncode in (0, 1), p.stdout + p.stderr
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    with open(os.path.join(out, results["queues"]["file"])) as f:
        doc = json.load(f)
    assert "plots/queue_heatmap.png" in results["report"]
    return results, {p["port"]: p for p in doc["ports"]}


def test_an_incast_fills_the_port_queue_to_its_limit_and_drops_beyond_it(tmp_path):
    results, ports = run(tmp_path, INCAST)
    port = ports[BOTTLENECK]
    limit = port["limit_bytes"]
    assert port["qdisc"] == "tbf" and limit and limit > 0, port
    backlog = [b for b in port["backlog_bytes"] if b is not None]
    assert max(backlog) <= limit + ONE_FRAME, (max(backlog), limit)
    assert max(backlog) >= 0.5 * limit, (max(backlog), limit)          # the queue built up, as sampled
    by_port = {r["port"]: r for r in results["queues"]["drops_by_port"]}
    assert by_port[BOTTLENECK]["overflow"] > 0, by_port
    assert by_port[BOTTLENECK]["fault"] == 0, by_port                   # no fault in this run
    # the receiver lost what the queue dropped: at least as many packets, never fewer
    lost = results["workloads"][0]["lost_packets"]
    assert lost >= by_port[BOTTLENECK]["overflow"] > 0, (lost, by_port)
    # the senders' own NIC queues stay short: they pace below their NIC's rate
    for sender in ("s0g0>rail0", "s0g1>rail1", "s1g1>rail1"):
        assert max(b or 0 for b in ports[sender]["backlog_bytes"]) < 0.1 * ports[sender]["limit_bytes"], sender


def test_without_congestion_the_queues_stay_empty(tmp_path):
    """One flow paced below its path's rate builds no standing queue: every port's backlog averages under 1% of
    its queue over the run. What the samples do see are bursts the emulating machine releases after a scheduling
    stall (a switch thread descheduled for 50 ms lets 56 KB of a 9 Mbit/s flow arrive at once: measured up to
    66 KB, 6% of the queue, at a load average of 10 on 2 cores), so a single sample may reach 15%."""
    results, ports = run(tmp_path, CALM)
    assert results["queues"]["drops"]["overflow"] == 0, results["queues"]
    for name, port in ports.items():
        if port["limit_bytes"]:
            seen = [b for b in port["backlog_bytes"] if b is not None]
            assert sum(seen) / len(seen) <= 0.01 * port["limit_bytes"], (name, seen)
            assert max(seen) <= 0.15 * port["limit_bytes"], (name, max(seen), port["limit_bytes"])
    assert len(ports[BOTTLENECK]["backlog_bytes"]) >= 20          # sampled throughout the 2 s flow


def test_what_a_cut_link_loses_is_not_counted_as_overflow(tmp_path):
    """s1g0's end of its NIC cable is cut for 1 s under a flow into it. The flow loses packets, none of them to a
    full queue: no port counts an overflow. (With the userspace datapath the switch loses them in its pipeline,
    sending nothing to a port without carrier, so no device counts them either: `fault` stays 0 here.)"""
    results, ports = run(tmp_path, CUT, passes=False)        # no path around a cut NIC cable: checks may fail
    assert results["faults"][0]["at_s"] is not None and results["workloads"][0]["lost_packets"] > 0, results
    assert results["queues"]["drops"]["overflow"] == 0, results["queues"]
    assert results["queues"]["drops"]["other"] == 0, results["queues"]      # nothing put outside the fault
