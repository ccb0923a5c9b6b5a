"""Fabric tags: two fabrics side by side on one machine, each under its own names."""
import os
import subprocess
import sys

import pytest

from testbed.fabric import runstate
from testbed.fabric.backends.dockerhost import container_name
from testbed.fabric.links import IFNAMSIZ, TAG_VARIABLE, fabric_tag, node_of, overlong_names, switch_port, sysname
from testbed.fabric.network import Network, NetworkError
from testbed.fabric.kinds import NAMES as KINDS
from testbed.fabric.params import MAX_CPU_HOSTS, MAX_GPUS_PER_SERVER, MAX_SERVERS, MAX_SPARES_PER_SERVER, MAX_SPINES
from testbed.fabric.topo import build

from tests.paths import ROOT


def test_no_tag_keeps_the_names_users_know(monkeypatch):
    monkeypatch.delenv(TAG_VARIABLE, raising=False)
    assert (fabric_tag(), sysname("rail0"), switch_port("spine1", 3)) == ("", "tb-rail0", "tb-spine1-p3")
    assert runstate.lock_path().endswith("/fabric.lock")


def test_a_tag_renames_every_machine_object_and_its_lock(monkeypatch):
    monkeypatch.setenv(TAG_VARIABLE, "1")
    assert (sysname("rail0"), switch_port("spine1", 3), container_name("s0g0")) == \
        ("tb-1rail0", "tb-1spine1-p3", "tb-1s0g0")
    assert runstate.lock_path().endswith("/fabric1.lock")
    assert node_of(sysname("tor12"), "1") == "tor12"


@pytest.mark.parametrize("bad", ["12", "A", "-", " ", "é"])
def test_a_bad_tag_is_refused_before_anything_is_made(monkeypatch, bad):
    monkeypatch.setenv(TAG_VARIABLE, bad)
    with pytest.raises(ValueError, match=TAG_VARIABLE):
        fabric_tag()
    with pytest.raises(NetworkError, match="one lowercase letter or digit"):
        Network(build("rail-only", 2, 2)).start()


@pytest.mark.parametrize("command", [["status"], ["topo", "rail-only", "--servers", "2", "--gpus", "2"]])
def test_every_command_refuses_a_bad_tag_in_one_line(command):
    p = subprocess.run([sys.executable, "-m", "testbed.cli", *command], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, TESTBED_FABRIC_TAG="ab"), timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == [f"testbed {command[0]}: error: TESTBED_FABRIC_TAG='ab': must be empty "
                                             "or one lowercase letter or digit"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", [
    dict(servers=MAX_SERVERS, gpus_per_server=2, spines=2),
    dict(servers=2, gpus_per_server=MAX_GPUS_PER_SERVER, spines=MAX_SPINES, cpu_hosts=MAX_CPU_HOSTS,
         spares_per_server=MAX_SPARES_PER_SERVER, spare_servers=1),
])
def test_the_largest_fabrics_fit_the_kernels_name_limit_under_a_tag(monkeypatch, kind, size):
    monkeypatch.setenv(TAG_VARIABLE, "z")
    fabric = build(kind, **size)
    assert overlong_names(fabric) == []
    longest = max((switch_port(l.b, l.b_port) for l in fabric.links if l.b not in fabric.hosts), key=len)
    assert len(longest) <= IFNAMSIZ


def test_overlong_names_are_named(monkeypatch):
    monkeypatch.setenv(TAG_VARIABLE, "z")
    fabric = build("rail-only", 2, 2)
    monkeypatch.setattr("testbed.fabric.links.PREFIX", "testbed-long-")
    assert "testbed-long-zrail0-p1" in overlong_names(fabric)
