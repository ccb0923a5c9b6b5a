"""mpirun's ssh on Docker hosts without a fabric: the configs (keys of the run only, the image's environment,
nothing asked), the trusted host key per address, and a host's sshd shared by the jobs that run at once."""
from testbed.fabric.backends import mpissh


def options(text: str) -> dict:
    return {line.split(None, 1)[0]: line.split(None, 1)[1] for line in text.strip().splitlines()}


def test_sshd_takes_the_runs_keys_only_and_gives_sessions_the_images_environment():
    conf = options(mpissh.sshd_config("/run/tb/ssh", ["PATH=/usr/bin:/bin", "PYTHONPATH=/opt/testbed"]))
    assert conf["Port"] == "22" and conf["HostKey"] == "/run/tb/ssh/host_ed25519"
    assert conf["AuthorizedKeysFile"] == "/run/tb/ssh/authorized_keys"
    assert conf["PasswordAuthentication"] == "no" and conf["KbdInteractiveAuthentication"] == "no"
    assert conf["PermitRootLogin"] == "prohibit-password" and conf["AllowTcpForwarding"] == "no"
    assert conf["SetEnv"] == '"PATH=/usr/bin:/bin" "PYTHONPATH=/opt/testbed"'
    assert "ListenAddress" not in conf            # per host, on the command line: its fabric address
    assert "SetEnv" not in options(mpissh.sshd_config("/f", []))


def test_mpiruns_ssh_uses_the_runs_key_trusts_only_the_runs_host_key_and_never_prompts():
    conf = options(mpissh.ssh_config("/run/tb/ssh").replace("Host *\n", ""))
    assert conf["IdentityFile"] == "/run/tb/ssh/id_ed25519" and conf["IdentitiesOnly"] == "yes"
    assert conf["UserKnownHostsFile"] == "/run/tb/ssh/known_hosts" and conf["GlobalKnownHostsFile"] == "/dev/null"
    assert conf["StrictHostKeyChecking"] == "yes" and conf["BatchMode"] == "yes" and conf["User"] == "root"
    assert mpissh.agent("/run/tb/ssh") == "ssh -F /run/tb/ssh/ssh_config"


def test_known_hosts_lists_the_host_key_at_every_address_without_its_comment():
    text = mpissh.known_hosts({"10.11.1.1", "10.11.0.1"}, "ssh-ed25519 AAAAC3Nz testbed-host_ed25519\n")
    assert text == "10.11.0.1 ssh-ed25519 AAAAC3Nz\n10.11.1.1 ssh-ed25519 AAAAC3Nz\n"


class Proc:
    def __init__(self):
        self.returncode = None
        self.signals = []

    def poll(self):
        return self.returncode

    def terminate(self):
        self.signals.append("TERM")
        self.returncode = -15

    def wait(self, timeout=None):
        return self.returncode

    def kill(self):
        self.returncode = -9


class Node:
    def __init__(self, name):
        self.name = name


def fleet(tmp_path, monkeypatch):
    ssh = mpissh.Ssh(str(tmp_path), [])
    started = []

    def sshd(node, ip):
        started.append((node.name, ip))
        return Proc()
    monkeypatch.setattr(ssh, "_keys", lambda node: None)
    monkeypatch.setattr(ssh, "_trust", lambda nodes: None)
    monkeypatch.setattr(ssh, "_sshd", sshd)
    monkeypatch.setattr(ssh, "_wait_listening", lambda name, proc: None)
    return ssh, started


def test_jobs_at_once_share_a_hosts_sshd_which_stops_when_the_last_of_them_ends(tmp_path, monkeypatch):
    ssh, started = fleet(tmp_path, monkeypatch)
    a, b, c = Node("s0g0"), Node("s0g1"), Node("s1g0")
    one = ssh.open({"10.11.0.1": a, "10.11.0.2": b}, "job1")
    two = ssh.open({"10.11.0.2": b, "10.11.1.1": c}, "job2")
    assert started == [("s0g0", "10.11.0.1"), ("s0g1", "10.11.0.2"), ("s1g0", "10.11.1.1")]
    assert one.agent == f"ssh -F {tmp_path}/ssh_config" and one.env == {}
    shared = ssh.daemons["s0g1"][0]
    one.close()
    assert set(ssh.daemons) == {"s0g1", "s1g0"} and shared.returncode is None    # job2 still uses it
    one.close()                                                                  # twice: nothing more
    two.close()
    assert ssh.daemons == {} and shared.signals == ["TERM"]


def test_an_sshd_gone_with_its_container_is_started_again_and_the_old_jobs_end_leaves_it(tmp_path, monkeypatch):
    ssh, started = fleet(tmp_path, monkeypatch)
    a = Node("s0g0")
    one = ssh.open({"10.11.0.1": a}, "job1")
    ssh.daemons["s0g0"][0].returncode = -9            # a GPU crash killed the container
    two = ssh.open({"10.11.0.1": a}, "job2")
    assert len(started) == 2
    fresh = ssh.daemons["s0g0"][0]
    one.close()
    assert fresh.returncode is None                   # job1 did not hold the new one
    two.close()
    assert fresh.signals == ["TERM"] and ssh.daemons == {}
