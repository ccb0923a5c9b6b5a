"""results.json's versioned schema: a real run's file follows it, broken ones are rejected with the path named,
docs/results.schema.json is the schema's current text, and every time is on one base (Unix time only under
*_at keys and timings.workloads_start; the rest seconds from the workloads' start, or durations)."""
import copy
import json
import os

import pytest

from testbed.results import results_schema as rs

from tests.paths import ROOT
from tests.results_schema_check import check_tree, epoch_outside_at, problems

SAMPLE = os.path.join(ROOT, "tests", "data", "results", "sample.json")   # a real run of sample.yaml beside it
T0 = 1795556870.768363


def sample() -> dict:
    with open(SAMPLE) as f:
        return json.load(f)


MINIMAL = {"schema_version": "1.0", "scenario": "s", "testbed_version": "0.1.0",
           "started": "2026-11-24T21:47:50+00:00", "ok": False,
           "fabric": {"kind": "clos", "servers": 2, "gpus_per_server": 2, "switches": 3, "hosts": 4, "links": 8,
                      "spares": 0, "routing": "ecmp", "failover": True, "controller_delay_ms": 0, "datapath": "user",
                      "host_backend": "netns", "nic_mbps": 10.0, "hb_mbps": 90.0},
           "workloads": [], "links": {}, "checks": [{"name": "error", "ok": False, "detail": "RuntimeError: x"}],
           "timings": {"tear_down_s": 0.2}, "warnings": [], "report": ["summary.md"]}


def test_a_real_run_follows_the_schema_and_the_time_base():
    r = sample()
    assert r["schema_version"] == rs.SCHEMA_VERSION
    assert {w["type"] for w in r["workloads"]} == {"connectivity", "traffic", "collective"}
    assert r["faults"] and r["captures"] and r["link_usage"]
    assert problems(r) == []


def test_a_minimal_run_that_failed_before_its_workloads_follows_it():
    assert problems(MINIMAL) == []


def broken(change):
    r = sample()
    change(r)
    return rs.errors(r)


@pytest.mark.parametrize("change, where", [
    (lambda r: r.pop("schema_version"), "(top): 'schema_version' is a required property"),
    (lambda r: r.update(schema_version="2.0"), "schema_version: '2.0' does not match"),
    (lambda r: r.update(ok="yes"), "ok: 'yes' is not of type 'boolean'"),
    (lambda r: r.update(extra=1), "(top): Additional properties are not allowed ('extra' was unexpected)"),
    (lambda r: r["faults"][0].update(at=1.0), "faults.0: Additional properties are not allowed ('at' was"),
    (lambda r: r["timings"].pop("tear_down_s"), "timings: 'tear_down_s' is a required property"),
    (lambda r: r["workloads"][2].pop("wall_s"), "workloads.2: 'wall_s' is a required property"),
    (lambda r: r["workloads"][1]["per_flow"][0]["silences"].append([1.0, 2.0, 3.0]),
     "workloads.1.per_flow.0.silences."),
    (lambda r: r["workloads"][2]["rows"][0].update(bus_ratio="0.9"), "workloads.2.rows.0.bus_ratio: '0.9' is not"),
    (lambda r: r["captures"][0].pop("file"), "captures.0: 'file' is a required property"),
    (lambda r: r["workloads"][0].update(type="mystery"), "workloads.0.type: 'mystery' is not one of"),
])
def test_a_broken_file_is_rejected_naming_where(change, where):
    errors = broken(change)
    assert any(e.startswith(where) for e in errors), errors


def test_workload_records_stay_open_to_new_keys_within_a_major_version():
    assert broken(lambda r: r["workloads"][2]["rows"][0].update(new_counter=3)) == []
    assert broken(lambda r: r.update(schema_version="1.7")) == []


def test_the_published_schema_is_the_current_one():
    with open(os.path.join(ROOT, "docs", "results.schema.json")) as f:
        assert json.load(f) == rs.schema(), "regenerate: python -m testbed.results.results_schema > " \
                                            "docs/results.schema.json"


def properties(node, path=""):
    """(path, name, schema) of every property the schema describes."""
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            yield f"{path}.{name}", name, sub
        for k, v in node.items():
            yield from properties(v, f"{path}.{k}" if k != "properties" else path)
    elif isinstance(node, list):
        for v in node:
            yield from properties(v, path)


def test_every_time_key_says_its_base():
    seen = 0
    for path, name, sub in properties(rs.schema()):
        text = sub.get("description", "")
        if name.endswith("_at") or name == "workloads_start":
            assert text.startswith("Unix time"), path
            seen += 1
        elif name.endswith("_s") and not name.endswith("_per_s"):          # steps_per_s is a rate
            assert text.startswith(("Seconds from timings.workloads_start", "Seconds (a duration)")), path
            seen += 1
        else:
            assert not text.startswith("Unix time"), path
    assert seen > 30


def test_flows_are_put_on_the_workloads_time_base():
    r = {"timings": {"workloads_start": T0}, "workloads": [
        {"type": "traffic", "per_flow": [{"max_gap_s": 0.25, "gap_at": T0 + 3.5, "silences": [[T0 + 3.5, 0.25]]},
                                         {"max_gap_s": None, "gap_at": None, "silences": []}]},
        {"type": "collective", "first_error_at": T0 + 1}]}
    before = copy.deepcopy(r)
    assert epoch_outside_at(before) == [".workloads[0].per_flow[0].silences[0][0]: %s looks like Unix time in a "
                                        "list" % (T0 + 3.5)]
    rs.relative_times(r)
    flows = r["workloads"][0]["per_flow"]
    assert flows[0] == {"max_gap_s": 0.25, "gap_start_s": 3.5, "silences": [[3.5, 0.25]]}
    assert flows[1] == {"max_gap_s": None, "gap_start_s": None, "silences": []}
    assert r["workloads"][1] == before["workloads"][1]          # *_at keys stay Unix time
    assert epoch_outside_at(r) == []


def test_a_moment_under_a_key_not_named_for_it_is_found():
    assert epoch_outside_at({"timings": {"workloads_start": T0}, "faults": [{"at_s": T0}]}) == \
        [f".faults[0].at_s: {T0} looks like Unix time, not a *_at key"]
    other_numbers = {"timings": {"workloads_start": T0}, "links": {"rail0:1": {"tx_bytes": int(T0)}},
                     "workloads": [{"model": {"params": 3.2e9}}]}        # bytes are integers, a model is no moment
    assert epoch_outside_at(other_numbers) == []
    started = {"started": "2026-11-24T21:47:50+00:00", "timings": {}, "workloads": [{"recovered": T0}]}
    assert epoch_outside_at(started) == [f".workloads[0].recovered: {T0} looks like Unix time, not a *_at key"]


def test_only_files_a_run_wrote_are_checked(tmp_path):
    (tmp_path / "made-up").mkdir()
    (tmp_path / "made-up" / "results.json").write_text(json.dumps({"ok": True}))     # a test's own fake
    (tmp_path / "future").mkdir()
    (tmp_path / "future" / "results.json").write_text(json.dumps({"schema_version": "2.0"}))   # not ours to read
    assert check_tree(str(tmp_path)) == []
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps({**MINIMAL, "ok": "maybe"}))
    assert check_tree(str(tmp_path)) == [f"{tmp_path}/run/results.json: ok: 'maybe' is not of type 'boolean'"]
    (tmp_path / "run" / "results.json").write_text(json.dumps(MINIMAL))      # fixed: the fixture finds nothing
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "results.json").write_text('{"schema_version": "1.')      # a run cut off mid-write
    [problem] = check_tree(str(tmp_path))
    assert problem.startswith(f"{tmp_path}/cut/results.json: not JSON")
    (tmp_path / "cut" / "results.json").unlink()


def test_versions_this_schema_reads():
    assert rs.known_version({"schema_version": "1.3"})
    assert not rs.known_version({"schema_version": "2.0"}) and not rs.known_version({})
