"""Where a key or value is in a scenario file: the line and column errors name."""
import pytest

from testbed.scenario.marks import Marks, message_path, parse
from testbed.scenario.schema import ScenarioError

TEXT = """\
name: m
fabric:
  kind: clos
  servers: 2
workloads:
  - type: collective
    sizes: [1MiB, 2MiB]
    heartbeat: {period_s: 0.1}
  - {type: connectivity}
"""


@pytest.fixture
def marks():
    data, root = parse(TEXT)
    assert data["workloads"][1] == {"type": "connectivity"}
    return Marks("f.yaml", root)


@pytest.mark.parametrize("path,key,where", [
    ((), None, (1, 1)),
    (("fabric",), None, (2, 1)),                    # a mapping: its key
    (("fabric", "servers"), None, (4, 12)),         # a scalar: the value itself
    (("fabric",), "servers", (4, 3)),               # a key under a mapping
    (("workloads", 0, "sizes", 1), None, (7, 19)),
    (("workloads", "1"), None, (9, 5)),             # a list item, by int or str index
    (("workloads", 0, "heartbeat"), "period_s", (8, 17)),
    (("fabric", "spines"), None, (2, 1)),           # not in the file: its parent
    (("workloads", 5, "x"), None, (5, 1)),
])
def test_positions(marks, path, key, where):
    assert marks.position(path, key) == where


def test_located_errors_take_their_path_or_the_one_their_message_starts_with(marks):
    assert str(marks.located(ScenarioError("workloads.0.sizes: too big"))) == "f.yaml:7:5: workloads.0.sizes: too big"
    assert str(marks.located(ScenarioError("bad", ("fabric",), "servers"))) == "f.yaml:4:3: bad"
    assert str(marks.located(ScenarioError("no path here"))) == "f.yaml:1:1: no path here"


def test_overridden_values_are_named_by_their_set(marks):
    marks.overridden.append((("fabric", "servers"), "fabric.servers=0"))
    assert marks.where(("fabric", "servers")) == "f.yaml (--set fabric.servers=0)"
    assert marks.where(("fabric",), "servers") == "f.yaml (--set fabric.servers=0)"
    assert marks.where(("fabric", "kind")) == "f.yaml:3:9"


def test_message_path():
    assert message_path("workloads.0.sizes: size 'x' is not a size") == ("workloads", "0", "sizes")
    assert message_path("host_limits: CPU and memory limits are for Docker hosts") == ("host_limits",)
    assert message_path("servers must be between 1 and 200") == ()


def test_duplicate_keys_are_named_at_the_second(marks):
    marks.duplicate_keys()                      # none in TEXT
    _, root = parse("a: 1\nb:\n  c: 1\n  d: 2\n  c: 3\na: 2\n")
    with pytest.raises(ScenarioError, match=r"^x.yaml:5:3: key 'c' given twice in one mapping \(first on line 3\)"):
        Marks("x.yaml", root).duplicate_keys()
