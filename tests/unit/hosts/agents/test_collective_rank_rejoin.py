"""A rank that comes back joins a running job in-process: ranks are threads over the transport's in-memory
fabric (real RoCEv2 packets, no namespaces, no heartbeats). The job grows at a step boundary, the newcomer is
sent the shared state by a live member, and every rank's state after every step is numpy's."""
import json
import threading
import time

import jsonschema
import pytest

from hosts.agents import collective_rank
from hosts.collectives import Communicator
from hosts.rdma import open_device
from hosts.rdma.transport import MemoryFabric
from hosts.spec import CollectiveRankSpec
from hosts.spec.results import COLLECTIVE_RANK
from hosts.recovery.membership import member_entry
from testbed.workloads import state_parity

NAMES = ["s0g0", "s0g1", "s1g0", "s1g1"]


def entry(name):
    return member_entry(name, f"10.11.{name[1]}.{int(name[3]) + 1}", None, int(name[1]), int(name[3]))


@pytest.fixture
def memory_comms(monkeypatch):
    fabric = MemoryFabric()

    def build_comm(spec, peers, me, store, heartbeat=None):
        return Communicator(me, peers, store, lambda ip: open_device(ip, backend="uroce",
                                                                     transport=fabric.attach(ip)),
                            timeout=spec.timeout_s, chunk=8192)
    monkeypatch.setattr(collective_rank, "build_comm", build_comm)


def spec_for(tmp_path, rank, **extra):
    peers = [{**entry(n), "rank": i} for i, n in enumerate(NAMES[:3])]      # s1g0... s1g1 starts without s1g0
    peers[2] = {**entry("s1g1"), "rank": 2}
    return CollectiveRankSpec.from_dict({
        "rank": rank, "peers": peers, "store": str(tmp_path), "op": "allreduce", "algo": "ring",
        "bytes": 4096, "dtype": "float32", "iterations": 200, "warmup": 0, "timeout_s": 20,
        "recovery": "shrink", "heartbeat": False, "admit": True, "state": True, **extra})


def run(ranks, pause=0.3):
    outputs = {}

    def main(r):
        if r.start():
            while r.run_epoch():
                pass
        outputs[r.me] = r.result
    threads = [threading.Thread(target=main, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
        time.sleep(pause)          # the last ones (newcomers) ask while the job runs
    for t in threads:
        t.join(60)
    for res in outputs.values():         # as the rank prints it, which the launcher checks
        jsonschema.validate(json.loads(json.dumps(res)), COLLECTIVE_RANK)
    return outputs


def test_a_rank_that_comes_back_is_admitted_at_a_step_boundary_and_sent_the_state(tmp_path, memory_comms):
    ranks = [collective_rank.CollectiveRank(spec_for(tmp_path, r)) for r in range(3)]
    ranks.append(collective_rank.CollectiveRank(spec_for(tmp_path, 3, rejoin={"me": entry("s1g0")})))
    out = run(ranks)
    assert set(out) == set(NAMES) and all("world" in o for o in out.values()), {n: {k: v for k, v in o.items() if k not in ("state", "times", "phases")} for n, o in out.items()}
    assert {o["world"] for o in out.values()} == {4} and all(o["correct"] for o in out.values())
    assert {o["steps"] for o in out.values()} == {200}
    grow, = out["s0g0"]["recoveries"]
    assert grow["policy"] == "rejoin" and grow["joined"] == ["s1g0"] and grow["lost_steps"] == 0
    assert 0 < grow["world"] == 4 and out["s1g0"]["joined"]["rejoined"]
    parity = state_parity.check(list(out.values()), out["s0g0"]["count"])
    assert parity["ranks"] == 4 and parity["divergent"] == 0 and parity["sync_mismatches"] == 0
    assert parity["synced"] == 1 and parity["steps"] == 200
    assert out["s1g0"]["state"]["history"][0][0] > 0           # it joined a running job
    assert out["s1g0"]["recoveries"] == []                     # no epoch before the one it joined


def test_the_leader_stops_the_job_when_its_time_is_up(tmp_path, memory_comms):
    until = time.time() + 2.0
    out = run([collective_rank.CollectiveRank(spec_for(tmp_path, r, until=until)) for r in range(3)])
    steps = {o["steps"] for o in out.values()}
    assert len(steps) == 1 and steps.pop() > 3 and time.time() - until < 10      # together, at one boundary


def test_a_later_newcomer_is_given_the_jobs_history_with_the_state(tmp_path, memory_comms):
    ranks = [collective_rank.CollectiveRank(spec_for(tmp_path, r, iterations=600)) for r in range(3)]
    ranks += [collective_rank.CollectiveRank(spec_for(tmp_path, 3 + i, iterations=600, rejoin={"me": entry(n)}))
              for i, n in enumerate(["s1g0", "s2g0"])]
    out = run(ranks, pause=1.0)
    assert {o.get("world") for o in out.values()} == {5}, {n: o.get("left") for n, o in out.items()}
    first, second = out["s0g0"]["recoveries"]
    assert first["joined"] == ["s1g0"] and second["joined"] == ["s2g0"]
    # the second newcomer was not there when the first came in, and still reports that epoch
    assert [r["epoch"] for r in out["s2g0"]["recoveries"]] == [first["epoch"]]
    assert out["s2g0"]["recoveries"][0]["joined"] == ["s1g0"]
