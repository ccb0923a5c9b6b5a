"""docs/scenario-reference.md, generated from the scenario schema: every key with its type, default and meaning.

`testbed schema --markdown` prints it; a unit test fails when the committed page differs, so it stays current.
"""
from __future__ import annotations

import json
import re

from testbed.workloads import REGISTRY

DEFAULT_IN_TEXT = re.compile(r"\s*Default: (.*?)\.?$")
HEADER = """# Scenario reference

Every key a scenario file may hold, with its type, default and meaning. Generated from the scenario schema
(`testbed schema --markdown > docs/scenario-reference.md`; do not edit by hand). The schema itself, for editors,
is `testbed schema`; [your first scenario](first-scenario.md#check-it-before-you-run-it) shows how to check a
file and set up an editor.

Sizes are bytes: an integer, or a number with a unit: `4096`, `64KiB`, `1MiB`, `10MB` (KiB, MiB, GiB are powers
of 2; KB, MB, GB of 10). Rates are Mbit/s unless the key says otherwise.
"""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _literal(value) -> str:
    return f"`{value}`" if isinstance(value, str) and value else f"`{json.dumps(value)}`"


def type_of(s: dict) -> str:
    """A schema in a few words: 'integer >= 1', 'one of `udp`, `tcp`', 'list of size', ..."""
    if "enum" in s:
        return "one of " + ", ".join(_literal(v) for v in s["enum"])
    if "const" in s:
        return _literal(s["const"])
    if "anyOf" in s:
        return " or ".join(type_of(a) for a in s["anyOf"])
    t = s.get("type")
    if t == ["integer", "string"]:
        return "size"
    if t == "array":
        return f"list of {type_of(s.get('items', {}))}" if s.get("items") else "list"
    if t == "object":
        return "mapping"
    words = [t or "any"]
    lo, hi = s.get("minimum"), s.get("maximum")
    if "exclusiveMinimum" in s:
        words.append(f"> {s['exclusiveMinimum']:g}" + (f", <= {hi:g}" if hi is not None else ""))
    elif lo is not None:
        words.append(f"{lo:g} to {hi:g}" if hi is not None else f">= {lo:g}")
    elif hi is not None:
        words.append(f"<= {hi:g}")
    return " ".join(words)


def default_and_meaning(s: dict, required: bool) -> tuple[str, str]:
    """The default column (the schema's default, `required`, or the 'Default: ...' its description ends with)."""
    text = s.get("description", "")
    said = DEFAULT_IN_TEXT.search(text)
    meaning = text[:said.start()] if said else text
    if "default" in s:
        return _literal(s["default"]), meaning
    return ("required" if required else said.group(1) if said else "-"), meaning


def inner_mappings(s: dict, prefix: str):
    """(schema, key prefix) of the mappings a key holds: its own keys, or any name's (figures.<name>.regex)."""
    for a in s.get("anyOf", [s]):
        if a.get("properties"):
            yield a, prefix
        elif isinstance(a.get("additionalProperties"), dict) and a["additionalProperties"].get("properties"):
            yield a["additionalProperties"], f"{prefix}<name>."


def rows(schema: dict, prefix: str = "", nested: bool = True) -> list[str]:
    """A table row per key, and (nested) the keys of a mapping after it, as parent.key."""
    out = []
    required = set(schema.get("required", []))
    for key, s in schema.get("properties", {}).items():
        default, meaning = default_and_meaning(s, key in required)
        out.append(f"| `{prefix}{key}` | {_cell(type_of(s))} | {_cell(default)} | {_cell(meaning)} |")
        if nested:
            for inner, sub in inner_mappings(s, f"{prefix}{key}."):
                out += rows(inner, sub)
    return out


def table(schema: dict, prefix: str = "", nested: bool = True) -> list[str]:
    return ["| Key | Type | Default | Meaning |", "|---|---|---|---|", *rows(schema, prefix, nested), ""]


def markdown(schema: dict) -> str:
    """The reference page of a scenario schema (testbed.scenario.SCHEMA)."""
    props = schema["properties"]
    lines = [HEADER, "## Top level", "", schema.get("description", "") + " Mappings and lists have their own "
             "sections below.", "", *table(schema, nested=False)]
    for key, s in props.items():
        if s.get("properties"):
            lines += [f"## {key}", "", s.get("description", ""), "", *table(s, f"{key}.")]
    for key in ("faults", "capture"):
        item = props[key]["items"]
        lines += [f"## {key}", "", f"{props[key]['description']} {item.get('description', '')}", "", *table(item)]
    lines += ["## workloads", "", props["workloads"]["description"] + " Every item has `type`; the sections below "
              "give each type's other keys.", "", *table(props["workloads"]["items"], nested=False)]
    for name, module in REGISTRY.items():
        lines += [f"### type: {name}", "", module.SCHEMA.get("description", ""), "",
                  *table({**module.SCHEMA, "properties": {k: v for k, v in module.SCHEMA["properties"].items()
                                                           if k != "type"}})]
    return "\n".join(lines).rstrip() + "\n"
