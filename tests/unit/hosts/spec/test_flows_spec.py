"""The traffic programs' specs (hosts/spec/flows.py): flows as JSON, the probe's as command-line flags."""
import pytest

from hosts.spec import FlowsSpec, Listen, ProbeSpec, Send, SpecError


def test_flows_round_trip():
    spec = FlowsSpec(start_at=1.5, deadline=9.0,
                     listen=(Listen(flow=3, proto="udp", port=6001, bytes=4096, rate_mbps=4.5),),
                     send=(Send(flow=4, proto="tcp", dst="10.11.1.1", dport=6001, sport=5001, bytes=8192,
                                rate_mbps=4.5, sport_mode="packet", split=2),))
    assert FlowsSpec.from_json(spec.to_json()) == spec
    assert FlowsSpec.from_dict({"start_at": 1, "deadline": 2}) == FlowsSpec(start_at=1, deadline=2)


@pytest.mark.parametrize("doc,named", [
    ({"start_at": 1, "deadline": 2, "send": [{"flow": 1}]}, r"send\[0\].proto: required key of Send missing"),
    ({"start_at": 1, "deadline": 2, "listen": [{"flow": 1, "proto": "sctp", "port": 1, "bytes": 1}]},
     r"listen\[0\].proto: 'sctp' is not one of"),
    ({"start_at": "now", "deadline": 2}, "start_at: expected float"),
    ({"start_at": 1, "deadline": 2, "receive": []}, "receive: unknown key in FlowsSpec"),
])
def test_flows_rejects_naming_the_key(doc, named):
    with pytest.raises(SpecError, match="^" + named):
        FlowsSpec.from_dict(doc)


@pytest.mark.parametrize("spec", [
    ProbeSpec(until=100.5),
    ProbeSpec(until=100.5, targets=("10.11.0.2", "10.12.0.2"), expected=(), not_before=99.25, port=7001),
    ProbeSpec(until=100.5, targets=("10.11.0.2",), expected=("10.11.0.2",)),
])
def test_probe_argv_round_trip(spec):
    assert ProbeSpec.from_argv(spec.to_argv()) == spec
    assert ProbeSpec.from_json(spec.to_json()) == spec


def test_probe_defaults_are_the_flags_defaults():
    assert ProbeSpec.from_argv(["--until", "5"]) == ProbeSpec(until=5.0)
