"""Scenario fuzzing: documents drawn from the scenario schema (mostly valid, then broken in one place) and raw
text, each checked by `testbed validate` in-process. Every one must end in a clean accept (exit 0, "FILE: ok")
or in located error lines with exit 2: never a traceback, never an exception escaping, never exit 1 (main()'s
"unexpected error" path).

Derandomized and bounded, so CI sees the same examples every run and the file takes seconds."""
import contextlib
import io
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from testbed.cli import main
from testbed.scenario import SCHEMA

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=250,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# strings a scenario uses (host, link, switch names, sizes, modes) beside arbitrary text, so that drawn documents
# reach the checks past the schema (targets, sizes, routing modes) and not only the type errors
WORDS = ["s0g0", "s1g1", "s0g1/nic", "s1g0/hb", "s1", "rail0", "rail0-spine1", "spine0", "path:s0g0>s1g1",
         "rail1:2", "cpu0", "4096", "64KiB", "1MiB", "10MB", "1.5GiB", "0B", "9" * 400 + "B", "ecmp", "split:4",
         "split:17", "udp port 4791", "collective#0", "python3 -c pass", ""]
JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
                    | st.sampled_from(WORDS),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                max_size=3),
                    max_leaves=8)


def _number(schema, integer):
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0 if integer else 0.0))
    high = schema.get("maximum", low + 300)
    if integer:
        near = st.integers(int(low), int(min(high, low + 6)))       # small fabrics: most documents get far
        return near | st.integers(int(low), int(high))
    return st.floats(low, high, exclude_min="exclusiveMinimum" in schema, allow_nan=False)


def _string(schema):
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: "\n" not in s)
    return st.sampled_from(schema.get("examples", []) + WORDS) | st.text(min_size=schema.get("minLength", 0),
                                                                        max_size=16)


def from_schema(schema):
    """A strategy for values that (mostly) follow this part of the schema."""
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(branch) for branch in schema["anyOf"]])
    kinds = schema.get("type", "object")
    if isinstance(kinds, list):
        return st.one_of([from_schema({**schema, "type": k}) for k in kinds])
    if kinds == "object":
        if "allOf" in schema:       # workloads (and a concurrent workload's jobs): each item's type picks its schema
            return st.sampled_from([case["then"] for case in schema["allOf"]]).flatmap(from_schema)
        props = schema.get("properties", {})
        required = schema.get("required", [])
        return st.fixed_dictionaries({k: from_schema(props[k]) for k in required},
                                     optional={k: from_schema(v) for k, v in props.items() if k not in required})
    if kinds == "array":
        low = schema.get("minItems", 0)
        return st.lists(from_schema(schema.get("items", {})), min_size=low,
                        max_size=min(schema.get("maxItems", low + 3), low + 3))
    if kinds in ("integer", "number"):
        return _number(schema, kinds == "integer")
    if kinds == "string":
        return _string(schema)
    return st.booleans()


def _paths(node, here=()):
    """Every place in the document: a mutation picks one."""
    yield here
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield from _paths(v, here + (k,))


@st.composite
def broken(draw, docs=from_schema(SCHEMA)):
    """A drawn document with one place replaced by junk, deleted, or given an unknown key."""
    doc = draw(docs)
    where = draw(st.sampled_from(list(_paths(doc))))
    if not where:
        return draw(JUNK)
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    how = draw(st.sampled_from(["replace", "delete", "unknown-key"]))
    if how == "replace" or (how == "unknown-key" and not isinstance(parent[where[-1]], dict)):
        parent[where[-1]] = draw(JUNK)
    elif how == "delete":
        del parent[where[-1]]
    else:
        parent[where[-1]][draw(st.text(min_size=1, max_size=8))] = draw(JUNK)
    return doc


_DIR = ""      # the module's scratch folder, under pytest's own temporary folders (they prune themselves)


@pytest.fixture(scope="module", autouse=True)
def scratch(tmp_path_factory):
    global _DIR
    _DIR = str(tmp_path_factory.mktemp("fuzz"))


def validate(content) -> tuple[int, str, str, str]:
    """(exit status, stdout, stderr, path) of `testbed validate` on a file holding this document (or raw text)."""
    path = os.path.join(_DIR, "scenario.yaml")
    if isinstance(content, bytes):
        data = content
    elif isinstance(content, str):
        data = content.encode("utf-8", "surrogatepass")
    else:
        data = yaml.safe_dump(content, allow_unicode=True).encode("utf-8", "surrogatepass")
    with open(path, "wb") as f:
        f.write(data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["validate", path])
    return status, out.getvalue(), err.getvalue(), path


def assert_clean(content):
    status, out, err, path = validate(content)
    assert "Traceback" not in out + err
    assert status in (0, 2), f"exit {status} (an unexpected error): {err.strip()}"
    if status == 0:
        assert out.startswith(f"{path}: ok") and not err
    else:
        lines = err.splitlines()
        assert lines and not out, "exit 2 says why on stderr, and prints nothing else"
        assert all(line.startswith(path) for line in lines), lines     # each located: FILE[:LINE:COLUMN]: ...


@FUZZ
@given(from_schema(SCHEMA))
def test_documents_from_the_schema_validate_or_fail_cleanly(doc):
    assert_clean(doc)


@FUZZ
@given(broken())
def test_documents_broken_in_one_place_fail_cleanly(doc):
    assert_clean(doc)


@settings(FUZZ, max_examples=100)
@given(st.text(max_size=200) | st.binary(max_size=200)
       | st.lists(st.sampled_from(["name: x\n", "fabric:\n", "  kind: clos\n", "workloads:\n", "  - type: traffic\n",
                                   "- ", "  ", ": ", "{", "[", "&a ", "*a", "!!python/object:os.system ", "'",
                                   "\t", "---\n", "...\n", "? ", "|\n", "1e400", "\x00", "\ufeff"]),
                  max_size=12).map("".join))
def test_any_text_fails_cleanly(text):
    assert_clean(text)


def test_the_generator_reaches_valid_documents():
    """The first property is only as good as its documents: some of them must get all the way to 'ok'
    (about 2 in 100 do: every workload type, fault and capture drawn must pass its checks)."""
    seen = []

    @settings(FUZZ, max_examples=150)
    @given(from_schema(SCHEMA))
    def collect(doc):
        # machines and host_image are fuzzed by the properties above; drawn here, each halves the share of
        # documents that can pass (machines need as many rails, host_image needs Docker hosts and no machines)
        if isinstance(doc, dict):
            doc = {k: v for k, v in doc.items() if k not in ("machines", "host_image")}
        seen.append(validate(doc)[0])
    collect()
    assert 0 in seen and 2 in seen, seen


def test_a_size_too_long_for_a_float_is_out_of_range():
    """Found by the fuzzing above: float('9' * 400) is inf, and int(inf) raised OverflowError (exit 1)."""
    status, _, err, _ = validate({"name": "x", "fabric": {"kind": "clos"},
                                  "workloads": [{"type": "collective", "op": "allreduce", "algo": "ring",
                                                 "sizes": ["9" * 400 + "B"]}]})
    assert status == 2 and "must be between 1 B and 1 GiB" in err
