"""docs/scenario-reference.md is what the generator makes of today's schema, and it names every key."""
import os

from testbed import scenario
from testbed.scenario import reference
from testbed.cli import main
from tests.paths import ROOT

PAGE = os.path.join(ROOT, "docs", "scenario-reference.md")


def keys(schema: dict, prefix: str = ""):
    """Every key of a schema as the reference writes it (parent.key inside mappings)."""
    for key, s in schema.get("properties", {}).items():
        yield prefix + key
        for inner in s.get("anyOf", [s]):
            yield from keys(inner, f"{prefix}{key}.")
            if isinstance(inner.get("additionalProperties"), dict):          # any name: figures.<name>.regex
                yield from keys(inner["additionalProperties"], f"{prefix}{key}.<name>.")


def test_committed_reference_is_current(capsys):
    assert main(["schema", "--markdown"]) == 0
    generated = capsys.readouterr().out
    assert generated == reference.markdown(scenario.SCHEMA)
    with open(PAGE) as f:
        assert f.read() == generated, "docs/scenario-reference.md is stale: regenerate it with " \
            "`testbed schema --markdown > docs/scenario-reference.md`"


def test_reference_names_every_key_with_a_meaning_and_a_default():
    """Every key has a description (editors show it) and a default: the schema's, `required`, or what its
    description says ("Default: 9 x nic_mbps")."""
    page = reference.markdown(scenario.SCHEMA)
    schema = scenario.SCHEMA
    sections = [("", schema)] + [(f"{k}.", s) for k, s in schema["properties"].items() if s.get("properties")]
    sections += [("", schema["properties"][k]["items"]) for k in ("faults", "capture")]
    sections += [("", w["then"]) for w in schema["properties"]["workloads"]["items"]["allOf"]]
    for prefix, s in sections:
        for key in keys(s, prefix):
            rows = [line for line in page.splitlines() if line.startswith(f"| `{key}` |")]
            assert rows, key
            for row in rows:
                _, _, default, meaning = row[2:-2].split(" | ")
                assert default != "-", f"{key}: no default (add one, or 'Default: ...' to its description)"
                assert meaning.strip(), f"{key}: no description"


def test_types_read_as_words():
    t = reference.type_of
    assert t({"type": "integer", "minimum": 1, "maximum": 100}) == "integer 1 to 100"
    assert t({"type": "number", "exclusiveMinimum": 0, "maximum": 1}) == "number > 0, <= 1"
    assert t({"type": ["integer", "string"]}) == "size"
    assert t({"type": "array", "items": {"enum": ["a", "b"]}}) == "list of one of `a`, `b`"
    assert t({"anyOf": [{"const": False}, {"type": "object"}]}) == "`false` or mapping"
