"""`testbed paper rail-only --quick` end to end: every claim ran and has a verdict, every claim called reproduced
lies within its stated tolerance of the paper's figure, one that differs says why, Table II matches cell by cell,
and the report is written."""
import json
import os
import subprocess
import sys

import pytest

from testbed import PROJECT_ROOT
from testbed.papers import DIFFERS, NOT_RUN, REPRODUCED

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_rail_only_quick_gives_a_complete_verdict_table(tmp_path):
    env = dict(os.environ, TESTBED_FABRIC_TAG=os.environ.get("TESTBED_FABRIC_TAG") or "p")
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "paper", "rail-only", "--quick", "--out",
                           str(tmp_path)], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads((tmp_path / "paper.json").read_text())
    claims = {c["key"]: c for c in doc["claims"]}
    assert {"alltoall-overhead", "hierarchical-allgather", "dense-iteration"} <= set(claims)
    assert len([k for k in claims if k.startswith("table2-")]) == 36
    for c in claims.values():
        assert c["verdict"] != NOT_RUN and c["ours"], c
        if c["verdict"] == REPRODUCED:
            assert abs(c["median"] - c["paper"]) <= c["tolerance"] * abs(c["paper"]) + 1e-9, c
        elif c["verdict"] == DIFFERS:
            assert c["why"], f"a claim differs with no reason given: {c}"
    assert all(c["verdict"] == REPRODUCED for k, c in claims.items() if k.startswith("table2-"))
    print("\n".join(f"{k}: paper {c['paper']}, ours {c['median']:.3f} ({c['verdict']})"
                    for k, c in claims.items() if not k.startswith("table2-")))
    assert (tmp_path / "paper.md").read_text().count("\n| ") == len(claims) + 1
