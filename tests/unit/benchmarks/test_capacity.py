"""benchmarks/capacity.py's options: ranks sharing processes, and a bad setting named without a traceback."""
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import capacity  # noqa: E402


@pytest.mark.parametrize("setting, ranks, cores, per", [("1", 64, 2, 1), ("8", 64, 2, 8), ("cores", 64, 2, 32),
                                                        ("cores", 7, 2, 4), ("cores", 16, 3, 6), ("cores", 5, 8, 1)])
def test_ranks_per_process_is_a_number_or_the_ranks_spread_over_the_cores(monkeypatch, setting, ranks, cores, per):
    monkeypatch.setattr(capacity.os, "cpu_count", lambda: cores)
    assert capacity.ranks_per_process(capacity.options(["--ranks-per-process", setting]).ranks_per_process,
                                      ranks) == per


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_a_bad_ranks_per_process_is_named_without_a_traceback(bad):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "capacity.py"), "--ranks-per-process", bad],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert f"--ranks-per-process: '{bad}'" in proc.stderr and "Traceback" not in proc.stderr
