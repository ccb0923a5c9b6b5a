"""The typed specs between the testbed and its host programs, which both sides import: what the testbed tells
each agent (frozen dataclasses, to_json / from_json; their fields hold the hosts' only defaults) and what each
agent prints back (results.py: a JSON Schema per program, which the testbed checks the line against).
"""
from hosts.spec.base import Spec, SpecError
from hosts.spec.flows import FlowsSpec, Listen, ProbeSpec, Send
from hosts.spec.peers import Member, Peer
from hosts.spec.rank import (CollectiveRankSpec, DilocoRankSpec, HeartbeatSpec, Join, Parallelism, PortMtus, PortRates, RankSpec,
                             Rejoin, TrainingRankSpec)
from hosts.spec.tfdata import ServiceSpec, TrainerSpec

__all__ = ["CollectiveRankSpec", "DilocoRankSpec", "FlowsSpec", "HeartbeatSpec", "Join", "Listen", "Member", "Parallelism", "Peer",
           "PortMtus", "PortRates", "ProbeSpec", "RankSpec", "Rejoin", "Send", "ServiceSpec", "Spec", "SpecError",
           "TrainerSpec", "TrainingRankSpec"]
