"""benchmarks/soak.py: a failed run is named with its failed checks (or its last line of stderr) and its folder
is kept, under the testbed's prefix, after the soak's own temporary one is gone."""
import json
import os
import shutil
import subprocess
import sys

from testbed import PREFIX
from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import soak  # noqa: E402


def test_a_failed_run_names_its_failed_checks_and_keeps_its_folder(tmp_path):
    run = tmp_path / "run-3"
    (run / "hosts" / "s0g0").mkdir(parents=True)
    (run / "hosts" / "s0g0" / "collective_rank.stderr").write_text("Thread 0x1 (most recent call first):\n")
    (run / "results.json").write_text(json.dumps({"checks": [
        {"name": "collective#0: completed", "ok": False, "detail": "s0g0: still running after 55 s"},
        {"name": "connectivity", "ok": True, "detail": ""}]}))
    why = soak.failure(str(run), subprocess.CompletedProcess([], 1, "", "ignored"))
    assert why.startswith(" (collective#0: completed: s0g0: still running after 55 s, kept in ")
    kept = why.rsplit("kept in ", 1)[1].rstrip(")")
    try:
        assert os.path.basename(kept).startswith(f"{PREFIX}soak-failed-")
        assert (open(os.path.join(kept, "hosts", "s0g0", "collective_rank.stderr")).read()
                == "Thread 0x1 (most recent call first):\n")
    finally:
        shutil.rmtree(kept)


def test_a_run_that_wrote_no_results_is_named_by_its_last_line_of_stderr(tmp_path):
    why = soak.failure(str(tmp_path / "never-made"), subprocess.CompletedProcess([], 2, "", "a\ntestbed run: error: x\n"))
    assert why == " (testbed run: error: x)"
