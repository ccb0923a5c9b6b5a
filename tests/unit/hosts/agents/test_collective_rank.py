"""The collective rank program's run across epochs, in-process: ranks are threads, their devices joined by the
transport's in-memory fabric (as in the collectives' test_algorithms.py), heartbeats off. The integration tests
run it for real in emulated hosts (test_collective_fabric.py, test_recovery.py)."""
import json
import threading

import jsonschema
import pytest

from hosts.agents import collective_rank
from hosts.collectives import Communicator
from hosts.collectives.store import FileStore
from hosts.rdma import open_device
from hosts.rdma.transport import MemoryFabric
from hosts.spec import CollectiveRankSpec
from hosts.spec.results import COLLECTIVE_RANK
from hosts.recovery.membership import Membership


def peer_specs(n):
    return [{"rank": r, "name": f"s{r // 2}g{r % 2}", "ip": f"10.11.{r // 2}.{r % 2 + 1}",
             "hb_ip": f"10.12.{r // 2}.{r % 2 + 1}", "server": r // 2, "local_rank": r % 2} for r in range(n)]


@pytest.fixture
def in_memory(monkeypatch):
    """Ranks build their communicator over an in-memory fabric, and install no signal handler (threads)."""
    fabric = MemoryFabric()

    def build_comm(spec, peers, me, store, heartbeat=None):
        return Communicator(me, peers, store, lambda ip: open_device(ip, backend="uroce", transport=fabric.attach(ip)),
                            timeout=spec.timeout_s, chunk=8192, heartbeat=heartbeat)

    monkeypatch.setattr(collective_rank, "build_comm", build_comm)
    monkeypatch.setattr(collective_rank.signal, "signal", lambda *a: None)


def run(specs: list[dict]) -> list[dict]:
    out: list = [None] * len(specs)

    def one(i):
        rank = collective_rank.CollectiveRank(CollectiveRankSpec.from_dict(specs[i]))
        if rank.start():
            while rank.run_epoch():
                pass
            rank.stop_heartbeat()
        out[i] = rank.result

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(specs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for res in out:                      # as the rank prints it, which the launcher checks
        jsonschema.validate(json.loads(json.dumps(res)), COLLECTIVE_RANK)
    return out


def base(tmp_path, **extra):
    return {"peers": peer_specs(4), "store": str(tmp_path), "op": "allreduce", "algo": "ring", "bytes": 4096,
            "iterations": 2, "warmup": 1, "timeout_s": 1.0, "heartbeat": False, **extra}


def test_ranks_complete_and_check_their_results(tmp_path, in_memory):
    results = run([{**base(tmp_path), "rank": r} for r in range(4)])
    for r, res in enumerate(results):
        assert res["correct"] is True and res["world"] == 4 and res["epoch"] == 0, res
        assert len(res["times"]) == 2 and all(t > 0 for t in res["times"])
        assert res["host"] == peer_specs(4)[r]["name"] and res["recoveries"] == [] and "error" not in res


def test_survivors_shrink_without_a_rank_that_never_came(tmp_path, in_memory):
    spec = base(tmp_path, recovery="shrink")
    results = run([{**spec, "rank": r} for r in range(3)])          # rank 3 (s1g1) never runs
    for res in results:
        assert res["correct"] is True and res["world"] == 3 and res["epoch"] == 1, res
        rec, = res["recoveries"]
        assert rec["failed"] == ["s1g1"] and rec["world"] == 3
    assert Membership(FileStore(str(tmp_path))).verdict(1)["failed"] == ["s1g1"]


def test_abort_reports_the_error(tmp_path, in_memory):
    results = run([{**base(tmp_path), "rank": r} for r in range(3)])
    assert all("error" in res and "correct" not in res for res in results)


def test_a_spare_that_is_not_needed_leaves(tmp_path, in_memory):
    Membership(FileStore(str(tmp_path))).set_members(1, {"error": "no spare left"})
    me = {k: v for k, v in peer_specs(4)[3].items() if k != "rank"}
    res, = run([{**base(tmp_path), "rank": 3, "join": {"epoch": 1, "me": me}}])
    assert res["left"] == "not needed: no spare left" and "heartbeat" not in res
