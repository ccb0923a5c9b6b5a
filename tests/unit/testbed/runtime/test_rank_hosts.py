"""Ranks that share processes (testbed/runtime/rank_hosts.py): how a job's ranks are grouped, what each group's
process is told, how its result goes back to each rank, and which scenarios refuse it before bring-up."""
from __future__ import annotations

import copy
import json

import pytest

from testbed import runner
from testbed.runtime import rank_hosts
from testbed.scenario import ScenarioError, validate

RANK = "hosts.agents.collective_rank"


def names(n: int) -> list[str]:
    return [f"h{i}" for i in range(n)]


@pytest.mark.parametrize("n, per, sizes", [(6, 4, [3, 3]), (7, 3, [3, 2, 2]), (64, 32, [32, 32]), (5, 1, [1] * 5),
                                           (3, 8, [3]), (65, 32, [22, 22, 21])])
def test_ranks_are_cut_into_as_few_processes_as_fit_their_sizes_within_one(n, per, sizes):
    got = rank_hosts.groups(names(n), per)
    assert [len(g) for g in got] == sizes
    assert [h for g in got for h in g] == names(n)          # every rank once, in order


class FakeNet:
    class Node:
        def __init__(self, pid):
            self.pid = pid

    def host(self, name):
        return self.Node(1000 + int(name[1:]))


def test_a_rank_process_is_told_each_of_its_ranks_namespace_and_spec():
    commands = {h: [RANK, f"/store/rank{i}.json"] for i, h in enumerate(names(5))}
    argv, members = rank_hosts.commands(FakeNet(), commands, 3)
    assert members == {"h0": ["h0", "h1", "h2"], "h3": ["h3", "h4"]}
    assert argv["h3"] == [rank_hosts.PROGRAM, "/proc/1003/ns/net", "/store/rank3.json", "/proc/1004/ns/net",
                          "/store/rank4.json"]


def test_only_collective_ranks_share_a_process():
    with pytest.raises(ValueError, match="h1: only hosts.agents.collective_rank ranks share processes"):
        rank_hosts.commands(FakeNet(), {"h0": [RANK, "a"], "h1": ["hosts.agents.flows", "b"]}, 2)


def result(rank: int) -> dict:
    return {"rank": rank, "host": f"h{rank}", "recoveries": [], "lost_steps": 0, "count": 4, "times": [0.1],
            "phases": [None], "correct": True, "counters": {}, "world": 4, "epoch": 0, "steps": 2}


def test_each_rank_gets_its_own_result_back_and_a_dead_process_fails_all_its_ranks_naming_why():
    members = {"h0": ["h0", "h1"], "h2": ["h2", "h3"]}
    results = {"h0": {"ranks": [result(0), result(1)]}}
    errors = ["h2: hosts.agents.rank_host was killed: no output"]
    by_host, failed = rank_hosts.split(results, errors, members)
    assert by_host == {"h0": result(0), "h1": result(1)}
    assert failed == [f"{h}: in the rank process of h2, h3: hosts.agents.rank_host was killed: no output"
                      for h in ("h2", "h3")]


def test_a_rank_result_its_schema_rejects_or_a_missing_one_is_an_error_of_that_rank():
    bad = {**result(1), "times": "fast"}
    by_host, failed = rank_hosts.split({"h0": {"ranks": [result(0), bad]}}, [], {"h0": ["h0", "h1"]})
    assert list(by_host) == ["h0"] and failed[0].startswith("h1: hosts.agents.collective_rank printed a result "
                                                            "its schema rejects: times")
    by_host, failed = rank_hosts.split({"h0": {"ranks": [result(0)]}}, [], {"h0": ["h0", "h1"]})
    assert by_host == {} and failed == [f"{h}: the rank process of h0, h1 printed 1 results for 2 ranks"
                                        for h in ("h0", "h1")]


def test_a_rank_process_that_ends_is_reported_as_each_of_its_ranks():
    seen = []
    hook = rank_hosts.on_exit(lambda host, rc, out, err: seen.append((host, rc)), {"h0": ["h0", "h1"]})
    hook("h0", -9, "", "")
    assert seen == [("h0", -9), ("h1", -9)]


SCENARIO = {"name": "x", "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2},
            "workloads": [{"type": "collective", "name": "ar", "op": "allreduce", "algo": "ring", "sizes": ["64KiB"],
                           "ranks_per_process": 2}]}


@pytest.mark.parametrize("change, words", [
    ({"hosts": "docker"}, "ranks_per_process needs namespace hosts"),
    ({"machines": [{"name": "m1", "address": "10.0.0.1"}, {"name": "m2", "address": "10.0.0.2"}]},
     "ranks_per_process does not work across machines yet"),
    ({"faults": [{"at": 1, "kind": "gpu-crash", "target": "s0g1"}, {"at": 2, "kind": "gpu-stall", "target": "s1g0",
                                                                      "duration": 1}]},
     "ranks_per_process: the faults gpu-crash, gpu-stall strike a GPU's own rank process"),
])
def test_what_needs_a_process_per_rank_refuses_shared_ones_before_bring_up(change, words):
    with pytest.raises(ScenarioError, match=words):
        doc = validate({**copy.deepcopy(SCENARIO), **change})
        runner.check(doc, runner.fabric_of(doc))


def test_shared_processes_with_link_faults_are_accepted():
    doc = validate({**copy.deepcopy(SCENARIO), "faults": [{"at": 1, "kind": "link-down", "target": "rail0-spine1"}]})
    runner.check(doc, runner.fabric_of(doc))


@pytest.mark.parametrize("bad", [0, -1, 2.5, "two"])
def test_a_ranks_per_process_that_is_not_a_whole_number_from_one_is_refused(bad):
    doc = copy.deepcopy(SCENARIO)
    doc["workloads"][0]["ranks_per_process"] = bad
    with pytest.raises(ScenarioError, match="ranks_per_process"):
        validate(doc)


def test_each_rank_result_is_kept_in_its_own_hosts_folder(tmp_path):
    class Net:
        out_dir = str(tmp_path)
    rank_hosts.keep(Net(), {"h1": result(1)})
    kept = (tmp_path / "hosts" / "h1" / "collective_rank.stdout").read_text()
    assert json.loads(kept) == result(1)
