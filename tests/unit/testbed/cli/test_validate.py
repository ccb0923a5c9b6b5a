"""`testbed validate`, `testbed run --dry-run` and `testbed schema`: checks without root, errors as
FILE:LINE:COLUMN lines with a suggestion for a misspelt key, and a schema editors and jsonschema accept."""
import glob
import json
import os
import subprocess
import sys

import jsonschema
import pytest
import yaml

from testbed.cli import main
from tests.paths import ROOT, SCENARIOS

SHIPPED = sorted(glob.glob(os.path.join(SCENARIOS, "*.yaml")))

TYPOS = """\
name: typos
fabric:
  kind: rail-optimised
  servers: 2
  gpu_per_server: 2
routing: {mode: ecmp, failovr: true}
workloads:
  - type: collective
    op: allreduce
    algo: ring
    size: [1MiB]
  - type: traffic
    expect: {max_los: 0.1}
faults:
  - {at: 1, kind: link-dwn, target: rail0-spine0, duraton: 1}
"""


def cli(capsys, *argv):
    """(exit status, stdout lines, stderr lines) of the command run in-process."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def write(tmp_path, text, name="scenario.yaml"):
    path = tmp_path / name
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return str(path)


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_every_shipped_scenario_validates(capsys, path):
    status, out, err = cli(capsys, "validate", path)
    assert status == 0 and out[0] == f"{path}: ok", (out, err)
    assert err == []


def test_typos_are_named_by_line_and_column_with_the_key_meant(capsys, tmp_path):
    path = write(tmp_path, TYPOS)
    status, out, err = cli(capsys, "validate", path)
    assert status == 2 and out == []
    assert err == [
        f"{path}:3:9: fabric.kind: 'rail-optimised' is not one of ['rail-only', 'rail-optimized', 'clos']; "
        "did you mean 'rail-optimized'?",
        f"{path}:5:3: fabric: Additional properties are not allowed ('gpu_per_server' was unexpected); "
        "did you mean 'gpus_per_server'?",
        f"{path}:6:23: routing: Additional properties are not allowed ('failovr' was unexpected); "
        "did you mean 'failover'?",
        f"{path}:11:5: workloads.0: Additional properties are not allowed ('size' was unexpected); "
        "did you mean 'sizes'?",
        f"{path}:13:14: workloads.1.expect: Additional properties are not allowed ('max_los' was unexpected); "
        "did you mean 'max_loss'?",
        f"{path}:15:19: faults.0.kind: 'link-dwn' is not one of ['link-down', 'link-up', 'link-flap', "
        "'switch-down', 'port-disable', 'gpu-crash', 'gpu-hang', 'gpu-stall', 'gpu-declared', 'server-down', "
        "'nic-down', 'partition', 'gpu-restart', 'nic-up']; did you mean 'link-down'?",
        f"{path}:15:51: faults.0: Additional properties are not allowed ('duraton' was unexpected); "
        "did you mean 'duration'?",
    ]


def test_run_reports_the_first_problem_with_its_line(capsys, tmp_path):
    """`testbed run` stops at the first problem, located the same way (before it asks for root)."""
    path = write(tmp_path, TYPOS)
    status, out, err = cli(capsys, "run", path)
    assert status == 2 and len(err) == 1
    assert err[0].startswith(f"testbed run: error: {path}:") and "did you mean" in err[0]


def test_a_key_far_from_any_allowed_one_lists_the_keys(capsys, tmp_path):
    path = write(tmp_path, "name: x\nfabric: {kind: clos}\nrouting: {zzzzzz: 1}\nworkloads: [{type: connectivity}]\n")
    status, _, err = cli(capsys, "validate", path)
    assert status == 2 and err == [f"{path}:3:11: routing: Additional properties are not allowed ('zzzzzz' was "
                                   "unexpected); the keys here are mode, failover, controller_delay_ms"]


@pytest.mark.parametrize("content,message", [
    ("name: x\nfabric: {kind: clos, servers: two}\nworkloads: [{type: connectivity}]\n",
     "{path}:2:31: fabric.servers: 'two' is not of type 'integer'"),
    ("name: x\nfabric:\n  kind: clos\n   servers: 2\n",
     "{path}:4:11: malformed YAML: mapping values are not allowed here"),
    ("name: x\nfabric: {kind: clos}\nworkloads: [{type: connectivity}]\nname: y\n",
     "{path}:4:1: key 'name' given twice in one mapping (first on line 1); YAML would keep only the last"),
    ("- just\n- a list\n", "{path}:1:1: a scenario must be a YAML mapping with name, fabric and workloads"),
    ("", "{path}: a scenario must be a YAML mapping with name, fabric and workloads"),
    ("name: x\nfabric: {kind: clos}\nworkloads: [{type: connectivity}]\ndescription: 2024-13-45\n",
     "{path}: malformed YAML: month must be in 1..12"),
    (b"name: x\n\xff\xfe\x00\x91 binary", "{path}: not a text file (byte 8 is not UTF-8): a scenario is YAML"),
    (b"\x00\x00\x00", "{path}: not a text file (control character #x0000 at character 0): a scenario is YAML"),
])
def test_bad_files_are_one_line_exit_2(capsys, tmp_path, content, message):
    path = write(tmp_path, content)
    status, out, err = cli(capsys, "validate", path)
    assert status == 2 and out == [] and err == [message.format(path=path)]


def test_missing_file_and_directory(capsys, tmp_path):
    status, out, err = cli(capsys, "validate", str(tmp_path / "nope.yaml"), str(tmp_path))
    assert status == 2 and out == []
    assert err == [f"{tmp_path / 'nope.yaml'}: No such file or directory", f"{tmp_path}: Is a directory"]


def test_every_file_is_reported(capsys, tmp_path):
    bad = write(tmp_path, "name: x\nfabric: {kind: clos, servers: 0}\nworkloads: [{type: connectivity}]\n", "bad.yaml")
    good = os.path.join(SCENARIOS, "smoke.yaml")
    status, out, err = cli(capsys, "validate", bad, good)
    assert status == 2 and out == [f"{good}: ok"]
    assert err == [f"{bad}:2:31: fabric.servers: 0 is less than the minimum of 1"]


def test_checks_past_the_schema_are_located(capsys, tmp_path):
    """What the fabric and the workloads refuse (the same checks `run` makes before bring-up) has a line too."""
    path = write(tmp_path, "name: x\nfabric:\n  kind: clos\n  servers: 500\nworkloads: [{type: connectivity}]\n")
    assert cli(capsys, "validate", path)[2] == [f"{path}:4:12: fabric.servers must be between 1 and 200, got 500"]
    path = write(tmp_path, "name: x\nfabric: {kind: clos}\nworkloads:\n  - {type: connectivity}\n  - {type: offload}\n")
    assert cli(capsys, "validate", path)[2] == [
        f"{path}:5:5: workloads.1: offload needs CPU hosts for tf.data.service: set fabric.cpu_hosts >= 1"]
    path = write(tmp_path, "name: x\nfabric: {kind: clos}\nrouting:\n  mode: split:1\n"
                           "workloads: [{type: connectivity}]\n")
    status, _, err = cli(capsys, "validate", path)
    assert status == 2 and err[0].startswith(f"{path}:4:9: routing.mode: 'split:1' is not a routing mode")


def test_warnings_follow_ok_with_their_lines(capsys, tmp_path):
    path = write(tmp_path, "name: w\nfabric:\n  kind: rail-only\n  spines: 2\n"
                           "workloads:\n  - {type: collective, op: allreduce, algo: hierarchical, sizes: [1001]}\n")
    status, out, err = cli(capsys, "validate", path)
    assert status == 0 and err == []
    assert out == [f"{path}: ok",
                   f"{path}:4:11: warning: fabric.spines: a rail-only fabric has no use for it; ignored",
                   f"{path}:6:5: warning: workloads.0: size 1001 B is not a whole number of float32 elements: "
                   "1000 B will run (and be reported)"]


def test_dry_run_says_what_would_run_with_the_overrides(capsys):
    demo = os.path.join(SCENARIOS, "demo.yaml")
    status, out, err = cli(capsys, "run", "--dry-run", demo, "--set", "fabric.spines=3")
    assert status == 0 and err == []
    assert out[0] == f"{demo}: ok (dry run: nothing brought up). `testbed run` would:"
    assert out[1].startswith("  bring up rail-optimized: 2 servers x 4 GPUs, 1 spare GPU(s) per server, 3 spines")
    assert "  workload 2: allreduce-ring (collective) op=allreduce algo=ring ring=rank sizes=[\"1MiB\", \"2MiB\"] " \
           "iterations=2" in out
    assert "  fault 3 s after allreduce-ring starts: link-flap rail0-spine0 duration=2.0 count=6" in out
    assert '  capture s0g0/nic filter="udp port 4791" max_packets=200000' in out


def test_dry_run_names_a_bad_override(capsys):
    demo = os.path.join(SCENARIOS, "demo.yaml")
    status, out, err = cli(capsys, "run", "--dry-run", demo, "--set", "fabric.servers=500")
    assert status == 2 and out == []
    assert err == [f"{demo} (--set fabric.servers=500): fabric.servers must be between 1 and 200, got 500"]
    status, out, err = cli(capsys, "run", "--dry-run", demo, "--set", "routing.mod=single")
    assert status == 2 and err == [f"{demo} (--set routing.mod=single): routing: Additional properties are not "
                                   "allowed ('mod' was unexpected); did you mean 'mode'?"]


def test_binary_file_through_the_command_is_one_line_without_traceback(tmp_path):
    path = write(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", path], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"{path}: not a text file (byte 0 is not UTF-8): a scenario is YAML\n"


def test_schema_is_a_json_schema_that_accepts_every_shipped_scenario(capsys):
    status, out, _ = cli(capsys, "schema")
    schema = json.loads("\n".join(out))
    assert status == 0
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["$id"].startswith("urn:testbed:scenario:") and schema["title"] and schema["description"]
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    for path in SHIPPED:
        with open(path) as f:
            validator(schema).validate(yaml.safe_load(f))
    with pytest.raises(jsonschema.ValidationError):
        validator(schema).validate(yaml.safe_load(TYPOS))
