"""benchmarks/ovs_ports.py: its idle ports carry the testbed's prefix, and bad options fail with a clear error."""
import os
import subprocess
import sys

import pytest

from testbed import PREFIX
from testbed.fabric.links import IFNAMSIZ

from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import ovs_ports  # noqa: E402


def test_idle_ports_and_their_bridge_carry_the_prefix_and_fit_a_device_name():
    names = [*ovs_ports.idle_port(0), *ovs_ports.idle_port(499), ovs_ports.IDLE_BRIDGE]
    assert all(n.startswith(PREFIX) and len(n) <= IFNAMSIZ for n in names)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("argv, problem", [(["--idle", "ten"], "--idle 'ten'"), (["--idle", "600"], "0-500"),
                                           (["--pps", "0"], "positive")])
def test_bad_options_are_named_without_a_traceback(argv, problem):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "ovs_ports.py"), *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert problem in proc.stderr and "Traceback" not in proc.stderr
