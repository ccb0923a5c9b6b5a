"""The scenario schema's `faults:` item is generated from the fault kinds: a kind's name, what it breaks, what its
target names and the keys it adds appear there and nowhere else."""
from dataclasses import dataclass

from testbed import scenario
from testbed.faults import REGISTRY, SCHEMA
from testbed.faults.kind import FaultKind, Target
from testbed.faults.schema import fault_schema
from testbed.faults.targets import SERVER


def test_the_scenario_schema_takes_the_faults_item_from_the_kinds():
    assert scenario.SCHEMA["properties"]["faults"]["items"] is SCHEMA
    assert SCHEMA["properties"]["kind"]["enum"] == list(REGISTRY)
    assert SCHEMA["properties"]["count"] == REGISTRY["link-flap"].properties["count"]


def test_kinds_that_share_what_they_break_or_their_target_share_a_clause():
    kind = SCHEMA["properties"]["kind"]["description"]
    assert kind.startswith("What fails. link-down, switch-down: cables cut (carrier lost); link-up: mended; ")
    assert all(name in kind for name in REGISTRY)
    assert SCHEMA["properties"]["target"]["description"].endswith("; for server-down and partition a server (s1).")


@dataclass(frozen=True)
class Melt(FaultKind):
    """A kind that is not registered: a new one shows up in the schema it is given."""


def test_a_new_kind_adds_its_name_words_and_keys():
    melt = Melt("switch-melt", "the switch melts", SERVER, properties={"heat": {"type": "number"}})
    schema = fault_schema([*REGISTRY.values(), melt])
    assert schema["properties"]["kind"]["enum"][-1] == "switch-melt"
    assert schema["properties"]["kind"]["description"].endswith("; switch-melt: the switch melts.")
    assert "for server-down and partition and switch-melt a server" in schema["properties"]["target"]["description"]
    assert schema["properties"]["heat"] == {"type": "number"}
    assert Target("x").phrase == "x"


def test_a_scenario_with_an_unknown_kind_or_key_is_refused_with_a_suggestion():
    doc = {"name": "x", "fabric": {"kind": "rail-optimized"}, "workloads": [{"type": "connectivity"}],
           "faults": [{"at": 1, "kind": "link-dwn", "target": "rail0-spine0"}]}
    errors = [str(e) for e in scenario.problems(doc)]
    assert any("faults.0.kind" in e and "did you mean 'link-down'" in e for e in errors), errors
