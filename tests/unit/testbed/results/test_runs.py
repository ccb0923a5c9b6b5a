"""Runs that reproduce: a results folder keeps its scenario and environment, runs again with --again, and
`testbed ls` / `testbed compare` read past runs."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from testbed.results import runs

from tests.paths import ROOT


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def fake_run(folder, started, ratio, detected, ok=True):
    os.makedirs(folder)
    r = {"scenario": "s", "started": started, "ok": ok,
         "workloads": [{"name": "ar", "type": "collective",
                        "rows": [{"op": "allreduce", "algo": "ring", "bytes": 1 << 20, "seconds": 1.0 / ratio,
                                  "busbw_MBps": ratio, "bus_ratio": ratio}]}],
         "faults": [{"kind": "link-down", "target": "rail0-spine0", "at_s": 2.0, "detected_s": 2.0 + detected,
                     "recovered_s": None}],
         "checks": [{"name": "c", "ok": ok}]}
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(r, f)
    return r


def test_ls_and_compare_read_past_runs(tmp_path):
    fake_run(tmp_path / "results" / "s" / "b", "2026-01-02T00:00:00+00:00", 0.8, 0.02, ok=False)
    fake_run(tmp_path / "results" / "s" / "a", "2026-01-01T00:00:00+00:00", 0.9, 0.01)
    (tmp_path / "results" / "junk").mkdir()
    (tmp_path / "results" / "junk" / "results.json").write_text("{not json")
    p = cli("ls", str(tmp_path / "results"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "results/s/a" in lines[2] and "ar 0.90" in lines[2] and "yes" in lines[2]   # oldest first
    assert "results/s/b" in lines[3] and " NO " in lines[3] and "0/1" in lines[3]
    p = cli("compare", str(tmp_path / "results" / "s" / "a"), str(tmp_path / "results" / "s" / "b"))
    assert p.returncode == 0, p.stderr
    (tmp_path / "results" / "junk" / "results.json").unlink()      # read past above; the schema check would fail it
    row = next(l for l in p.stdout.splitlines() if "allreduce/ring" in l and "busbw/bound" in l)
    assert row.split()[-3:] == ["0.9", "0.8", "0.89"]
    fault = next(l for l in p.stdout.splitlines() if "rail0-spine0" in l and "detected" in l)
    assert fault.split()[-1] == "2.00"
    p = cli("compare", str(tmp_path / "results" / "s" / "a"), str(tmp_path / "nowhere"))
    assert p.returncode == 2 and "no results.json" in p.stderr and "Traceback" not in p.stderr


def test_ls_flags_a_run_of_another_major_schema_version(tmp_path):
    for name, version in (("old", None), ("future", "2.1")):
        fake_run(tmp_path / "results" / name, f"2026-01-0{len(name)}T00:00:00+00:00", 0.9, 0.01)
        if version:
            path = tmp_path / "results" / name / "results.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": version}))
    (tmp_path / "results" / "now").mkdir()          # a real run's (1.0)
    with open(os.path.join(ROOT, "tests", "data", "results", "sample.json")) as f:
        (tmp_path / "results" / "now" / "results.json").write_text(f.read())
    p = cli("ls", str(tmp_path / "results"))
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 4, p.stdout + p.stderr
    assert p.stderr.splitlines() == [f"warning: {os.path.relpath(tmp_path / 'results' / 'future', ROOT)}: "
                                     "results.json schema 2.1; this testbed reads 1.x, figures may be misread"]


def test_run_needs_a_scenario_or_a_results_folder(tmp_path):
    p = cli("run")
    assert p.returncode == 2 and "--again RESULTS_DIR" in p.stderr
    p = cli("run", "--again", str(tmp_path))
    assert p.returncode == 2 and "not a results folder with a scenario.yaml" in p.stderr


def test_record_keeps_the_scenario_as_run_and_the_environment(tmp_path):
    doc = {"name": "x", "fabric": {"kind": "clos", "servers": 3}, "workloads": [{"type": "connectivity"}]}
    runs.record(str(tmp_path), doc)
    with open(tmp_path / "scenario.yaml") as f:
        assert yaml.safe_load(f) == doc
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["cpus"] == os.cpu_count() and env["kernel"] == os.uname().release and env["python"]
    assert env["git_commit"] is None or len(env["git_commit"]) == 40


@pytest.mark.root
def test_a_run_runs_again_from_its_folder_and_the_two_compare(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: again\nfabric: {kind: rail-only, servers: 2, gpus_per_server: 2}\n"
                        "workloads: [{type: collective, op: allreduce, algo: ring, sizes: [64KiB], iterations: 1}]\n"
                        "capture: [{point: s0g0/nic, filter: udp port 4791}]\n")
    a, b = tmp_path / "a", tmp_path / "b"
    p = cli("run", str(scenario), "--set", "workloads.0.sizes=[128KiB]", "--out", str(a))
    assert p.returncode == 0, p.stdout + p.stderr
    assert yaml.safe_load((a / "scenario.yaml").read_text())["workloads"][0]["sizes"] == ["128KiB"]  # as run
    r = json.loads((a / "results.json").read_text())
    assert r["captures"][0]["file"] == os.path.join("pcaps", "s0g0_nic.pcap")      # relative to the folder
    assert all(not os.path.isabs(p) and (a / p).exists() for p in r["report"])
    p = cli("run", "--again", str(a), "--out", str(b))
    assert p.returncode == 0, p.stdout + p.stderr
    rb = json.loads((b / "results.json").read_text())
    assert rb["workloads"][0]["rows"][0]["bytes"] == 128 * 1024                    # the --set value, again
    p = cli("compare", str(a), str(b))
    assert p.returncode == 0 and "allreduce/ring 131072" in p.stdout, p.stdout + p.stderr
