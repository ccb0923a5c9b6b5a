"""The result lines' schemas (hosts/spec/results.py) are valid JSON Schemas and fit what the agents print: the
flows and the probe run here on loopback (the rank programs' outputs are checked in their own tests,
test_collective_rank*.py and test_training_rank.py)."""
import json
import socket
import time

import jsonschema
import pytest

from hosts.agents import flows, probe
from hosts.spec import FlowsSpec, Listen, Send
from hosts.spec.results import RESULTS, TFDATA_SERVICE, TFDATA_TRAINER


def printed(doc):
    return json.loads(json.dumps(doc))


@pytest.mark.parametrize("program", sorted(RESULTS))
def test_every_schema_is_a_json_schema(program):
    jsonschema.Draft7Validator.check_schema(RESULTS[program])


def free_port(kind) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_flows_result_fits():
    udp, tcp = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    start = time.time() + 0.3
    spec = FlowsSpec(start_at=start, deadline=start + 10, listen=(
        Listen(flow=1, proto="udp", port=udp, bytes=8 * flows.DATAGRAM, rate_mbps=20.0),
        Listen(flow=2, proto="tcp", port=tcp, bytes=4096, rate_mbps=20.0)), send=(
        Send(flow=1, proto="udp", dst="127.0.0.1", dport=udp, sport=free_port(socket.SOCK_DGRAM),
             bytes=8 * flows.DATAGRAM, rate_mbps=20.0),
        Send(flow=2, proto="tcp", dst="127.0.0.1", dport=tcp, sport=free_port(socket.SOCK_STREAM), bytes=4096,
             rate_mbps=20.0)))
    out = printed(flows.run(spec))
    jsonschema.validate(out, RESULTS["hosts.agents.flows"])
    assert sorted(r["flow"] for r in out["received"]) == [1, 2] and all("error" not in r for r in out["received"])


def test_the_probe_result_fits():
    out = printed(probe.probe(["127.0.0.1"], time.time() + 0.3, free_port(socket.SOCK_DGRAM),
                              address="127.0.0.1"))
    jsonschema.validate(out, RESULTS["hosts.agents.probe"])


def test_the_trainer_and_service_lines_fit_and_a_wrong_one_does_not():
    fixed = {"policy": "fixed", "pipeline": "compute", "config": {"batch": 8}, "off_ratio": 0.5, "candidate": "p'2",
             "steps": 40, "seconds": 6.0, "steps_per_s": 6.6, "cpu_s": 1.2, "cpu_per_step": 0.03, "cpu_cores": 0.2,
             "local_batches": 20, "remote_batches": 20, "measured_ratio": 0.5, "throughput_eps": 52.8,
             "epoch_seconds": 150.0}
    profile = {"policy": "profile", "pipeline": "compute", "config": {}, "profile": {"Gthp": 25.0},
               "decision": {"off_ratio": 0.0, "pipeline": None}}
    for line in ({"ready": True}, fixed, profile):
        jsonschema.validate(line, TFDATA_TRAINER)
    jsonschema.validate({"role": "worker", "pid": 4242, "port": 5051}, TFDATA_SERVICE)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**fixed, "steps": "40"}, TFDATA_TRAINER)
