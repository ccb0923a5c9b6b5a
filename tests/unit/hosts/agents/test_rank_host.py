"""Several ranks in one process (hosts/agents/rank_host.py), in-process: each rank's thread is moved into its
namespace (recorded here: moving needs root; the integration test test_shared_rank_processes.py moves them for
real), the ranks' devices joined by the transport's in-memory fabric."""
import json
import threading

import jsonschema
import pytest

from hosts.agents import collective_rank, rank_host
from hosts.collectives import Communicator
from hosts.rdma import open_device
from hosts.rdma.transport import MemoryFabric
from hosts.spec import CollectiveRankSpec
from hosts.spec.results import RANK_HOST


def peer_specs(n):
    return [{"rank": r, "name": f"s{r // 2}g{r % 2}", "ip": f"10.11.{r // 2}.{r % 2 + 1}",
             "hb_ip": f"10.12.{r // 2}.{r % 2 + 1}", "server": r // 2, "local_rank": r % 2} for r in range(n)]


@pytest.fixture
def entered(monkeypatch):
    """Ranks build their communicator over an in-memory fabric; the namespace each thread enters is recorded.
    Signal handlers are left alone: a rank sharing a process must install none (only the main thread may)."""
    fabric, where = MemoryFabric(), {}

    def build_comm(spec, peers, me, store, heartbeat=None):
        return Communicator(me, peers, store, lambda ip: open_device(ip, backend="uroce", transport=fabric.attach(ip)),
                            timeout=spec.timeout_s, chunk=8192, heartbeat=heartbeat)

    monkeypatch.setattr(collective_rank, "build_comm", build_comm)
    monkeypatch.setattr(rank_host, "enter_netns", lambda path: where.setdefault(threading.current_thread().name, path))
    return where


def spec_files(tmp_path, n, **extra):
    paths = []
    for r in range(n):
        spec = {"rank": r, "peers": peer_specs(n), "store": str(tmp_path / "store"), "op": "allreduce", "algo": "ring",
                "bytes": 12288, "iterations": 2, "warmup": 1, "timeout_s": 2.0, "heartbeat": False, **extra}
        path = tmp_path / f"rank{r}.json"
        path.write_text(json.dumps(spec))
        paths.append(str(path))
    (tmp_path / "store").mkdir()
    return paths


def test_three_ranks_in_one_process_each_in_its_namespace_print_their_results_in_order(tmp_path, entered, capsys):
    paths = spec_files(tmp_path, 3)
    rank_host.main([a for r, p in enumerate(paths) for a in (f"/proc/{100 + r}/ns/net", p)])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    jsonschema.validate(doc, RANK_HOST)
    assert [res["rank"] for res in doc["ranks"]] == [0, 1, 2]
    assert all(res["correct"] is True and res["world"] == 3 and "error" not in res for res in doc["ranks"])
    assert entered == {f"tb-rank{r}": f"/proc/{100 + r}/ns/net" for r in range(3)}
    # each rank's share of the process's CPU, per measured step
    assert all(len(res["cpu"]) == 2 and all(u >= 0 and s >= 0 for u, s in res["cpu"]) for res in doc["ranks"])


def test_a_rank_that_fails_to_start_is_its_own_error_and_the_others_go_on(tmp_path, entered, capsys, monkeypatch):
    real = rank_host.enter_netns

    def enter(path):
        if path.endswith("/2/ns/net"):
            raise PermissionError(1, "Operation not permitted")
        return real(path)
    monkeypatch.setattr(rank_host, "enter_netns", enter)
    paths = spec_files(tmp_path, 3, recovery="shrink", timeout_s=1.0)
    rank_host.main([a for r, p in enumerate(paths) for a in (f"/proc/{r}/ns/net", p)])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    jsonschema.validate(doc, RANK_HOST)
    lost = doc["ranks"][2]
    assert lost["host"] == "s1g0" and lost["error"].startswith("PermissionError: [Errno 1] Operation not permitted")
    for res in doc["ranks"][:2]:         # the survivors shrink without it and finish
        assert res["correct"] is True and res["world"] == 2, res


@pytest.mark.parametrize("argv", [[], ["/proc/1/ns/net"]])
def test_a_command_line_without_namespace_and_spec_pairs_is_refused(argv):
    with pytest.raises(SystemExit, match="usage: rank_host NETNS SPEC.json"):
        rank_host.main(argv)
