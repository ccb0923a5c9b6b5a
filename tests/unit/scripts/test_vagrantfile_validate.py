"""The Vagrantfile checked by Vagrant itself (`vagrant validate`, with the libvirt provider's plugin, which
checks the provider's settings too), under every environment the VM scripts give it. The settings each
environment yields are checked in test_vm_box.py; this is Vagrant's own reading of the file.
scripts/setup --extras dev installs Vagrant and vagrant-libvirt (`make test` asks for them)."""
import os
import shutil
import subprocess

import pytest

from tests.paths import ROOT

ENVIRONMENTS = {
    "defaults": {},
    "kvm": {"TESTBED_VM_ACCEL": "kvm"},
    "local box, software emulation, offline wheels": {
        "TESTBED_BOX": "tb-debian12", "TESTBED_VM_ACCEL": "tcg", "TESTBED_LIBVIRT_POOL": "tb-pool",
        "TESTBED_LIBVIRT_NETWORK": "tb-vagrant", "TESTBED_WHEELS": "{tmp}/wheels",
        "TESTBED_VM_SERIAL_LOG": "{tmp}/serial.log", "VAGRANT_DEFAULT_PROVIDER": "libvirt"},
}


def validate(vagrantfile_text: str, folder, **env) -> subprocess.CompletedProcess:
    vagrant = shutil.which("vagrant")
    assert vagrant, "vagrant is not installed: scripts/setup --extras dev installs it (make test does)"
    (folder / "Vagrantfile").write_text(vagrantfile_text)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TESTBED_", "VAGRANT_"))}
    # its own home: no boxes, plugins or state of the machine's user are read or written
    home = folder / "vagrant.d"
    plugins = "/usr/share/vagrant-plugins/plugins.d"
    return subprocess.run([vagrant, "validate"], cwd=folder, capture_output=True, text=True, timeout=120,
                          env={**clean, "VAGRANT_CWD": str(folder), "VAGRANT_HOME": str(home),
                               "VAGRANT_CHECKPOINT_DISABLE": "1",
                               **({"VAGRANT_GLOBAL_PLUGINS_FILE": f"{plugins}/vagrant-libvirt.json"}
                                  if os.path.exists(f"{plugins}/vagrant-libvirt.json") else {}), **env})


def vagrantfile() -> str:
    with open(os.path.join(ROOT, "Vagrantfile")) as f:
        return f.read()


@pytest.mark.parametrize("env", ENVIRONMENTS.values(), ids=ENVIRONMENTS.keys())
def test_vagrant_validates_the_vagrantfile(env, tmp_path):
    (tmp_path / "wheels").mkdir()               # Vagrant checks that a synced folder's host path exists
    p = validate(vagrantfile(), tmp_path, **{k: v.format(tmp=tmp_path) for k, v in env.items()})
    assert p.returncode == 0 and "validated successfully" in p.stdout, p.stdout + p.stderr


def test_vagrant_refuses_a_misspelt_libvirt_setting(tmp_path):
    """The check itself: the libvirt provider's settings are read, not only the file's Ruby."""
    text = vagrantfile().replace("lv.default_prefix =", "lv.default_prefixx =")
    assert text != vagrantfile()
    p = validate(text, tmp_path, TESTBED_VM_ACCEL="tcg")
    assert p.returncode != 0 and "default_prefixx" in p.stdout + p.stderr, p.stdout + p.stderr
