"""Integration (root): ranks sharing processes (`ranks_per_process`, hosts/agents/rank_host.py): each rank in its
own host's network namespace, exact results, and a rank process that dies fails its ranks, naming them."""
import threading
import time

import pytest

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import collective

pytestmark = pytest.mark.root


def watch_rank_processes(net, monkeypatch) -> list:
    """The rank processes the job starts, as they start (every GPU host's popen watched)."""
    started = []
    for h in net.fabric.gpus():
        node = net.host(h.name)
        real = node.popen

        def popen(argv, *a, real=real, **k):
            proc = real(argv, *a, **k)
            if "hosts.agents.rank_host" in argv:
                started.append(proc)
            return proc
        monkeypatch.setattr(node, "popen", popen)
    return started


def test_six_ranks_in_two_processes_each_in_its_own_namespace_match_numpy(monkeypatch):
    fabric = build("rail-optimized", 2, 3, spines=2, nic_mbps=10)
    with Network(fabric) as net:
        started = watch_rank_processes(net, monkeypatch)
        result = collective.run(net, {"op": "allreduce", "algo": "ring", "ring": "rank", "sizes": ["192KiB"],
                                      "iterations": 2, "ranks_per_process": 4})
        alltoall = collective.run(net, {"op": "alltoall", "algo": "direct", "sizes": ["96KiB"], "iterations": 1,
                                        "ranks_per_process": 4})
    assert result["ok"] and alltoall["ok"], (result["checks"], alltoall["checks"])
    assert len(started) == 4                 # 3 + 3 ranks, twice
    row = result["rows"][0]
    assert row["correct"] and row["ranks"] == 6
    # a rank that opened its device outside its host's namespace could not bind its address: the ring crossed
    # the fabric, every server-crossing hop over a NIC
    assert row["fabric_bytes"] > 2 * (5 / 6) * (192 << 10) * (2 / 6)
    assert row["rank_cpu_s"]["user"] > 0     # the ranks' shares of their processes' CPU


def test_a_rank_process_killed_fails_each_of_its_ranks_naming_it(monkeypatch):
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=10)
    with Network(fabric) as net:
        started = watch_rank_processes(net, monkeypatch)

        def kill_soon():
            time.sleep(2.5)
            started[-1].kill()
        threading.Thread(target=kill_soon, daemon=True).start()
        t0 = time.monotonic()
        result = collective.run(net, {"op": "allreduce", "algo": "ring", "sizes": ["4MiB"], "iterations": 3,
                                      "timeout_s": 10, "ranks_per_process": 2})
        took = time.monotonic() - t0
    assert not result["ok"]
    detail = result["checks"][0]["detail"]
    assert "s1g0: in the rank process of s1g0, s1g1: hosts.agents.rank_host was killed" in detail, detail
    assert took < 60


@pytest.mark.slow
def test_sixty_four_gpus_keep_their_ring_allreduce_exact():
    """The largest grid of docs/capacity.md, 8x8, its 64 ranks in two processes (one per core here): every rank's
    result equals numpy's. Exactness, not speed: the machine may not keep 64 GPUs link-bound."""
    fabric = build("rail-optimized", 8, 8, spines=2, nic_mbps=10)
    with Network(fabric) as net:
        result = collective.run(net, {"op": "allreduce", "algo": "ring", "ring": "rank", "sizes": ["1MiB"],
                                      "iterations": 1, "ranks_per_process": 32})
    assert result["ok"], result["checks"]
    row = result["rows"][0]
    assert row["correct"] and row["ranks"] == 64 and row["bytes"] == 1 << 20
