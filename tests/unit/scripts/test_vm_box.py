"""The VM's pieces that can be checked without booting it (no root, no libvirt): the Vagrantfile's settings
under each environment (read by Ruby with a stand-in for Vagrant's configuration object), the local box's
metadata and package list, the VM scripts' syntax, and the scenario `make vm-test` runs inside the VM.
Booting it is `make vm-test` (minutes to an hour under software emulation; not part of `make test`)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from testbed import scenario

from tests.paths import ROOT
VM_SCRIPTS = ["vm-box", "vm-up", "vm-down", "vm-test", "vm-check", "vm-vagrant", "libvirt-start",
              "libvirt-stop", "provision-kernel", "setup"]

# A stand-in for Vagrant.configure: records every setting, call and block, and prints them as JSON.
RUBY_RECORDER = r'''
require "json"
class Rec
  def initialize; @h = {}; end
  def method_missing(name, *args, **kw, &blk)
    n = name.to_s
    if n.end_with?("=")
      @h[n.chomp("=")] = args[0]
    elsif blk
      sub = Rec.new; blk.call(sub); (@h[n] ||= {})[args[0].to_s] = sub
    elsif args.empty? && kw.empty?
      @h[n] ||= Rec.new
    else
      (@h[n] ||= []) << { "args" => args, "kw" => kw }
    end
  end
  def respond_to_missing?(*) = true
  def to_json(*a) = @h.to_json(*a)
end
module Vagrant
  def self.configure(_version)
    c = Rec.new; yield c; puts JSON.generate(c)
  end
end
load ARGV[0]
'''


def vagrantfile(**env) -> dict:
    ruby = shutil.which("ruby")
    if ruby is None:
        pytest.skip("ruby is not installed (Vagrant brings it)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TESTBED_")}
    proc = subprocess.run([ruby, "-e", RUBY_RECORDER, os.path.join(ROOT, "Vagrantfile")],
                          env={**clean, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_vagrantfile_defaults_to_ubuntu_and_provisions_with_setup():
    cfg = vagrantfile(TESTBED_VM_ACCEL="kvm")
    vm = cfg["vm"]
    assert vm["box"] == "bento/ubuntu-24.04"
    assert [p["args"][0] for p in vm["provision"]] == ["setup", "kernel"]
    assert [p["kw"]["inline"] for p in vm["provision"]] == ["cd /vagrant && scripts/setup",
                                                             "cd /vagrant && scripts/provision-kernel"]
    lv = vm["provider"]["libvirt"]
    assert lv["cpus"] == 4 and lv["memory"] == 8192
    assert "driver" not in lv and "boot_timeout" not in vm          # hardware virtualisation: defaults
    assert lv["default_prefix"].startswith("tb-")


def test_vagrantfile_takes_the_local_box_and_software_emulation():
    cfg = vagrantfile(TESTBED_BOX="tb-debian12", TESTBED_VM_ACCEL="tcg", TESTBED_LIBVIRT_POOL="tb-pool",
                      TESTBED_LIBVIRT_NETWORK="tb-vagrant")
    vm, lv = cfg["vm"], cfg["vm"]["provider"]["libvirt"]
    assert vm["box"] == "tb-debian12"
    assert lv["driver"] == "qemu" and lv["cpus"] <= 2 and vm["boot_timeout"] >= 900
    assert lv["storage_pool_name"] == "tb-pool" and lv["management_network_name"] == "tb-vagrant"


def test_vagrantfile_installs_wheels_offline_when_given():
    cfg = vagrantfile(TESTBED_VM_ACCEL="tcg", TESTBED_WHEELS="/tmp/wheels")
    folders = {f["args"][1]: f for f in cfg["vm"]["synced_folder"]}
    assert folders["/var/cache/testbed/wheels"]["args"][0] == "/tmp/wheels"
    for p in cfg["vm"]["provision"]:
        assert p["kw"]["env"] == {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/var/cache/testbed/wheels",
                                  "TESTBED_VM_TCG": "1", "TESTBED_EXTRAS": "tf"}
    kvm = vagrantfile(TESTBED_VM_ACCEL="kvm")["vm"]["provision"]
    assert all(p["kw"]["env"] == {"TESTBED_EXTRAS": "tf"} for p in kvm)     # the VM runs offload too


def test_vagrantfile_copies_the_saved_host_image_in_when_given():
    folders = {f["args"][1]: f["args"][0] for f in vagrantfile(TESTBED_VM_ACCEL="tcg",
                                                               TESTBED_IMAGES="/tmp/images")["vm"]["synced_folder"]}
    assert folders["/var/cache/testbed/images"] == "/tmp/images"
    with open(os.path.join(ROOT, "scripts", "provision-kernel")) as f:
        assert "/var/cache/testbed/images/tb-host.tar" in f.read()        # what provisioning loads
    plain = vagrantfile(TESTBED_VM_ACCEL="tcg")["vm"]["synced_folder"]
    assert "/var/cache/testbed/images" not in {f["args"][1] for f in plain}


def vm_box(option: str) -> str:
    proc = subprocess.run([os.path.join(ROOT, "scripts", "vm-box"), option], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_box_metadata_is_a_libvirt_qcow2_box():
    meta = json.loads(vm_box("--print-metadata"))
    assert meta["provider"] == "libvirt" and meta["format"] == "qcow2"
    assert isinstance(meta["virtual_size"], int) and meta["virtual_size"] >= 10


def test_box_carries_every_package_provisioning_installs():
    packages = set(vm_box("--print-packages").split())
    with open(os.path.join(ROOT, "scripts", "setup")) as f:
        setup = re.search(r"^APT_PACKAGES=\((.*?)^\)", f.read(), re.S | re.M).group(1)
    assert set(setup.split()) <= packages                       # so scripts/setup finds them installed
    assert {"openssh-server", "sudo", "systemd-sysv", "python3-pyverbs", "rsync"} <= packages


@pytest.mark.parametrize("name", VM_SCRIPTS)
def test_vm_scripts_parse(name):
    path = os.path.join(ROOT, "scripts", name)
    assert os.access(path, os.X_OK)
    assert subprocess.run(["bash", "-n", path], capture_output=True).returncode == 0


def test_vm_smoke_scenario_has_what_vm_test_checks():
    doc = scenario.load(os.path.join(ROOT, "scenarios", "vm_smoke.yaml"))
    kinds = {(w["type"], w.get("op"), w.get("algo")) for w in doc["workloads"]}
    assert ("connectivity", None, None) in kinds
    assert ("collective", "allreduce", "ring") in kinds and ("collective", "allgather", "ring") in kinds
    assert {f["kind"] for f in doc["faults"]} >= {"link-down", "gpu-crash"}
    assert doc["capture"] and all(w.get("check", True) for w in doc["workloads"])


def test_vm_check_runs_the_smoke_scenario_on_docker_hosts_too():
    """`make vm-test` runs one check on Docker hosts (kernel rxe inside the containers): it is among the
    default checks, and the scenario it runs is valid with hosts: docker."""
    with open(os.path.join(ROOT, "scripts", "vm-check")) as f:
        text = f.read()
    default = re.search(r'VM_CHECKS:-([^}]*)\}', text).group(1).split()
    assert "docker" in default and "vm_smoke" in default
    assert re.search(r"^\s*docker\) check docker docker_hosts ;;", text, re.M)
    doc = scenario.load(os.path.join(ROOT, "scenarios", "vm_smoke.yaml"), overrides=["hosts=docker"])
    assert doc["hosts"] == "docker"


def test_makefile_has_the_vm_targets():
    with open(os.path.join(ROOT, "Makefile")) as f:
        text = f.read()
    assert re.search(r"^vm: ", text, re.M) and re.search(r"^vm-test: ", text, re.M)
