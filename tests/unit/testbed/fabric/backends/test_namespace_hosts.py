"""Namespace hosts' own temporary folders: made at start in the run directory, given to what a host starts."""
import os
import stat

from mininet.node import Host

from testbed.fabric.backends.base import Namespaces, NamespaceHost


def host_with(params: dict) -> NamespaceHost:
    node = NamespaceHost.__new__(NamespaceHost)      # no namespace: only popen's environment is under test
    node.params = params
    return node


def started_env(monkeypatch, node, **kwargs) -> dict:
    seen = {}
    monkeypatch.setattr(Host, "popen", lambda self, *a, **kw: seen.update(kw))
    node.popen(["true"], **kwargs)
    return seen.get("env")


def test_each_host_gets_a_world_writable_folder_of_its_own_in_the_run_directory(tmp_path):
    backend = Namespaces(str(tmp_path))
    backend.start(["s0g0", "s1g0"], record=None)
    folders = {h: backend.node_params(h)["tmp_dir"] for h in ("s0g0", "s1g0")}
    assert folders == {h: str(tmp_path / "tmp" / h) for h in folders}
    for path in folders.values():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o1777


def test_what_a_host_starts_has_its_folder_as_tmpdir_and_the_rest_of_the_environment(monkeypatch):
    monkeypatch.setenv("TB_PROBE", "1")
    env = started_env(monkeypatch, host_with({"tmp_dir": "/run/x/tmp/s0g0"}))
    assert env["TMPDIR"] == "/run/x/tmp/s0g0" and env["TB_PROBE"] == "1"
    env = started_env(monkeypatch, host_with({"tmp_dir": "/run/x/tmp/s0g0"}), env={"A": "b"})
    assert env == {"A": "b", "TMPDIR": "/run/x/tmp/s0g0"}


def test_a_callers_own_tmpdir_wins_and_a_host_without_a_folder_is_left_alone(monkeypatch):
    env = started_env(monkeypatch, host_with({"tmp_dir": "/run/x/tmp/s0g0"}), env={"TMPDIR": "/scratch"})
    assert env == {"TMPDIR": "/scratch"}
    assert started_env(monkeypatch, host_with({})) is None
