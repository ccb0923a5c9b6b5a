"""The link keys of a scenario's fabric (delay_us, queue_kb, links, ideal_uplinks, time_scale): bad values are one
line and exit status 2 before anything is brought up, and so is a delay where no delay path works."""
import subprocess
import sys

import pytest

from testbed.fabric import delay
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from tests.paths import ROOT


def validate(tmp_path, fabric: str) -> subprocess.CompletedProcess:
    path = tmp_path / "scenario.yaml"
    path.write_text(f"name: f\nfabric: {fabric}\nworkloads: [{{type: connectivity}}]\n")
    return subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("fabric, message", [
    ("{kind: clos, delay_us: -5}", "delay_us"),
    ("{kind: clos, delay_us: {nic: 5, spine: 3}}", "spine"),
    ("{kind: clos, queue_kb: 0}", "queue_kb"),
    ("{kind: clos, queue_kb: {uplink: 0}}", "queue_kb"),
    ("{kind: clos, links: {tor7-spine0: {delay_us: 5}}}", "links: no link named 'tor7-spine0' in this fabric"),
    ("{kind: clos, links: {tor0-spine0: {rate: 5}}}", "rate"),
    ("{kind: clos, time_scale: 0}", "time_scale"),
    ("{kind: clos, nic_mbps: 400000, time_scale: 2}", "nic_mbps must be a rate in Mbit/s"),
])
def test_a_bad_link_key_is_one_line_and_exit_2(tmp_path, fabric, message):
    p = validate(tmp_path, fabric)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_good_link_keys_validate(tmp_path):
    p = validate(tmp_path, "{kind: clos, delay_us: {nic: 5, uplink: 10}, queue_kb: 512, ideal_uplinks: true, "
                           "links: {tor0-spine0: {mbps: 2, delay_us: 50}}, nic_mbps: 50000, time_scale: 10000}")
    assert p.returncode == 0, p.stderr


def test_a_delay_where_no_path_works_is_refused_before_anything_is_made(monkeypatch, tmp_path):
    monkeypatch.setattr(delay, "path_problems", lambda: {"netem": "unknown qdisc", "userspace": "no BPF"})
    with pytest.raises(delay.DelayUnavailable, match="netem: unknown qdisc; userspace: no BPF"):
        Network(build("clos", 2, 2, delay_us={"uplink": 100}), run_dir=str(tmp_path / "run"))
    net = Network(build("clos", 2, 2), run_dir=str(tmp_path / "run"))      # no delay: no path asked for
    assert net.delay_path is None
