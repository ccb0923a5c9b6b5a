"""A hostile host: one emulated host sends malformed and adversarial frames (hosts/agents/fuzz.py: broken IGMP,
thousands of joins, LLDP-looking frames, an ARP storm, RoCEv2 with bad ICRC, far PSNs and 2 GiB lengths at
the others' queue pairs) while an AllReduce runs on every GPU host. The controller stays up with no exception
in its log, its multicast groups and the switches' flow tables stay bounded (the per-host group cap), the
AllReduce completes equal to numpy, and the switch, controller and transport counters show what was dropped (the
fuzzer interleaves its kinds, so the RoCEv2 junk arrives while the ranks' transports are up)."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from controllers import state
from controllers.multicast_app import MAX_GROUPS_PER_HOST
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import collective
from tests.paths import ROOT

ATTACKER = "s0g0"


def flows(bridge: str) -> list[str]:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-flows", bridge], capture_output=True, text=True,
                         check=True).stdout
    return [line for line in out.splitlines() if "priority=" in line]


def dropped(bridges) -> int:
    """Packets the fabric's lowest-priority drop rule has matched, over every SDN switch."""
    total = 0
    for br in bridges:
        for line in flows(br):
            if "priority=0" in line and "actions=drop" in line:
                total += int(line.split("n_packets=")[1].split(",")[0])
    return total


def rx_packets(net, counters, name) -> int:
    sw, port = next((l.b, l.b_port) for l in net.fabric.links if l.a == name and l.kind == "nic")
    return counters[f"{sw}:{port}"]["rx_packets"]


def settled(path: str, limit_s: float = 30.0) -> dict:
    """The multicast app's state once it has caught up with the flood: the same ignored counts in two saves a
    second apart (it saves them twice a second)."""
    deadline, last = time.monotonic() + limit_s, None
    while True:
        time.sleep(1.0)
        with open(path) as f:
            now = json.load(f)
        if now["ignored"] == (last or {}).get("ignored") or time.monotonic() > deadline:
            return now
        last = now


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.alone          # the fuzzing must meet the ranks while they run: timing
def test_a_hostile_host_neither_crashes_the_controller_nor_spoils_a_collective():
    fabric = build("rail-optimized", 2, 2, spines=1, nic_mbps=10)
    with Network(fabric) as net:
        bridges = list(net.sdn_bridges())
        flows_before = {br: len(flows(br)) for br in bridges}
        drops_before, counters_before = dropped(bridges), net.counters()
        attacker = net.host(ATTACKER)
        peers = [h.ip for h in fabric.hosts.values() if h.name != ATTACKER]
        t0 = time.monotonic()
        fuzz = attacker.popen([sys.executable, "-m", "hosts.agents.fuzz", "--iface", "eth0", "--src", attacker.IP(),
                               "--peers", ",".join(peers), "--seed", "7", "--groups", "2000", "--count", "500",
                               "--rate", "400"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), text=True)
        results = []
        runner = threading.Thread(target=lambda: results.append((collective.run(
            net, {"op": "allreduce", "algo": "ring", "sizes": ["256KiB"], "iterations": 8, "timeout_s": 60}),
            time.monotonic())))
        runner.start()
        out, err = fuzz.communicate(timeout=120)
        fuzz_end = time.monotonic()
        runner.join(120)
        elapsed = time.monotonic() - t0
        assert fuzz.returncode == 0, err
        sent = json.loads(out.splitlines()[-1])["sent"]

        (result, collective_end), = results
        assert collective_end < fuzz_end, "the AllReduce ran after the fuzzing, not under it"
        assert result["ok"], result["checks"]                        # every rank's buffer equal to numpy's
        assert net.controller.proc.poll() is None, "the controller died"
        with open(net.controller.log_path) as f:
            log = f.read()
        assert "Traceback" not in log and "Exception" not in log and "exception" not in log, log[-2000:]

        mcast = settled(state.multicast_path(net.controller.state_path))
        with open(net.controller.log_path) as f:
            connects = [line for line in f if " connected (dpid " in line]
        # the flood did not cost a switch its controller connection (a reconnect reinstalls every rule)
        assert len(connects) == len(bridges), connects
        ignored = mcast["ignored"].get(ATTACKER, {})
        joined = sum(1 for g in mcast["groups"].values() if ATTACKER in g["members"])
        flows_after = {br: len(flows(br)) for br in bridges}
        drops = dropped(bridges) - drops_before
        frames = rx_packets(net, net.counters(), ATTACKER) - rx_packets(net, counters_before, ATTACKER)
        transport = {k: v for k, v in result["rows"][0]["transport"].items() if k.startswith("drop_")}
        print(f"fuzzer sent {sum(sent.values())} frames in {elapsed:.1f} s {sent}; the attacker's switch port "
              f"received {frames}; drop rules matched {drops}; controller ignored {ignored}, groups of the attacker "
              f"{joined} (cap {MAX_GROUPS_PER_HOST}); flows per bridge {flows_before} -> {flows_after}; "
              f"AllReduce {result['rows'][0]['seconds']:.3f} s, exact; the ranks' transports dropped {transport}")
        assert joined <= MAX_GROUPS_PER_HOST and ignored.get("over_cap", 0) >= sent["igmp-joins"] - 400
        assert ignored.get("not_multicast", 0) >= len(peers) + 2           # peers' unicast addresses, 0/0, bcast
        assert not set(mcast["groups"]) & set(peers + ["0.0.0.0", "255.255.255.255"])
        # a group's rules exist only where it has two members: the attacker alone adds none; bounded anyway
        assert all(flows_after[br] <= flows_before[br] + 4 * MAX_GROUPS_PER_HOST for br in bridges)
        assert frames >= 0.9 * sum(sent.values())                    # the frames reached the fabric ...
        assert drops >= sent["lldp"] + sent["arp"]                   # ... and the switches dropped the junk
        assert len(mcast["errors"]) <= 100
        # the RoCEv2 junk that met a running rank was dropped by its transport, each packet with its reason
        assert transport.get("drop_bad_icrc", 0) >= 1 and len(transport) >= 3, transport
        assert sum(transport.values()) >= 10, transport
