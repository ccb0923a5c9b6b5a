"""scripts/lib/holders.sh: a service started for one run is not stopped under another run that still uses it."""
import os
import subprocess

from tests.paths import ROOT

LIB = os.path.join(ROOT, "scripts", "lib", "holders.sh")


def in_shell(body: str, run_dir, wait: bool = True):
    """Run body in a child script of a fresh shell, as a Makefile recipe runs scripts/ovs-start."""
    script = f'bash -c \'. "{LIB}"; {body}\''
    argv = ["bash", "-c", f"{script}; sleep 30" if not wait else script]
    env = {**os.environ, "TESTBED_RUN_DIR": str(run_dir)}
    if wait:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=20).stdout.strip()
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)


def test_last_live_holder_decides(tmp_path):
    other = in_shell("hold svc; echo held", tmp_path, wait=False)
    try:
        assert other.stdout.readline().strip() == "held"
        # a run that holds and releases while the other run is alive sees one other holder: do not stop
        assert in_shell("hold svc; release svc", tmp_path) == "1"
        assert len(os.listdir(tmp_path / "holders" / "svc")) == 1
    finally:
        other.kill()
        other.wait()
    # the other run's shell is gone: it no longer counts, and its entry is pruned
    assert in_shell("hold svc; release svc", tmp_path) == "0"
    assert os.listdir(tmp_path / "holders" / "svc") == []


def test_release_without_hold_counts_only_live_holders(tmp_path):
    os.makedirs(tmp_path / "holders" / "svc")
    (tmp_path / "holders" / "svc" / "999999999-1").touch()     # no such process
    assert in_shell("release svc", tmp_path) == "0"
