"""The defaults the scenario schema shows (editors, docs/scenario-reference.md) are the ones the code applies."""
import inspect
from types import SimpleNamespace

from hosts.spec import CollectiveRankSpec
from testbed import runner
from testbed.scenario import loader
from testbed.fabric.backends import dockerhost
from testbed.scenario.schema import parse_size
from testbed.workloads import collective, collective_fabric, offload, program, traffic, training, training_plan


def defaults(schema: dict) -> dict:
    return {k: s["default"] for k, s in schema["properties"].items() if "default" in s}


def test_fabric_defaults():
    fabric = runner.fabric_of({"fabric": {"kind": "rail-optimized"}})
    shown = defaults(loader.FABRIC)
    assert shown == {k: getattr(fabric.params, k) for k in shown}
    assert fabric.params.hb_mbps == 9 * fabric.params.nic_mbps          # "Default: 9 x nic_mbps"


def test_docker_host_limit_defaults():
    limits = loader.SCHEMA["properties"]["host_limits"]
    given = inspect.signature(dockerhost.Containers).parameters
    assert defaults(limits) == {"cpus": given["cpus"].default, "memory": "1GiB"}
    assert parse_size("1GiB", loader.MIN_HOST_MEMORY, loader.MAX_HOST_MEMORY) == given["memory"].default


def test_collective_defaults_are_what_every_rank_is_told():
    fabric = runner.fabric_of({"fabric": {"kind": "rail-optimized"}})
    spec = {"type": "collective", "op": "allreduce", "algo": "ring"}
    told = collective._base_spec(SimpleNamespace(fabric=fabric, routing="ecmp"), spec, [], "store", 4096).to_dict()
    shown = defaults(collective.SCHEMA)
    for key in ("dtype", "reduce", "root", "iterations", "warmup", "check", "timeout_s", "recovery",
                "ring", "multicast_scope"):
        assert told[key] == shown[key], key
    assert told["congestion"] is None and shown["congestion"] == "none"
    assert told["heartbeat"] == {**shown["heartbeat"], **defaults(collective.SCHEMA["properties"]["heartbeat"]["anyOf"][1])}
    assert collective_fabric.sizes(spec) == [parse_size(s) for s in ["1MiB"]]       # "Default: the sweep, else 1MiB"
    sweep = collective.SCHEMA["properties"]["sweep"]
    assert collective_fabric.sizes({**spec, "sweep": {"min": 1024, "max": 4096}}) == [1024, 2048, 4096] and \
        defaults(sweep)["factor"] == 2


def test_heartbeat_defaults_are_the_ranks(monkeypatch):
    from hosts.collectives import rank
    got = {}
    monkeypatch.setattr(rank, "Heartbeat", lambda *a, **kw: SimpleNamespace(start=lambda: got.update(kw)))
    rank.start_heartbeat(CollectiveRankSpec.from_dict({"rank": 0, "peers": [], "store": "s", "op": "allreduce",
                                                       "algo": "ring", "bytes": 1, "heartbeat": {}}), {"rank": 0})
    beat = collective.SCHEMA["properties"]["heartbeat"]["anyOf"][1]
    assert defaults(beat) == {"period_s": got["period"], "timeout_s": got["timeout"], "stall_s": got["stall"]}


def test_traffic_defaults():
    fabric = runner.fabric_of({"fabric": {"kind": "rail-optimized"}})
    flows = traffic.plan_flows(fabric, {"type": "traffic"})
    shown = defaults(traffic.SCHEMA)
    assert {f["bytes"] for f in flows} == {parse_size(shown["size"])}
    assert {f["proto"] for f in flows} == {shown["protocol"]}
    assert len(flows) == len(traffic.flow_pairs(fabric, {"pattern": shown["pattern"]})) * shown["flows_per_pair"]
    assert defaults(traffic.SCHEMA["properties"]["expect"]) == {"max_loss": 0.01}


def test_offload_and_training_defaults_are_their_modules():
    assert {k: v for k, v in defaults(offload.SCHEMA).items() if k != "pipeline_cfg"} == offload.DEFAULTS
    shown = defaults(training.SCHEMA)
    assert {k: shown[k] for k in training_plan.DEFAULTS} == training_plan.DEFAULTS
    assert defaults(training.SCHEMA["properties"]["model"]) == training_plan.MODEL
    assert defaults(training.SCHEMA["properties"]["hardware"]) == training_plan.HARDWARE
    assert defaults(program.SCHEMA) == program.DEFAULTS
