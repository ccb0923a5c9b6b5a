"""mpirun's remote shell on Docker hosts: ssh, as on a real cluster.

A process in one container cannot enter another (no `docker exec` inside), so mpirun in a job's first host
starts its daemons (orted) in the others the way it does between real nodes: by ssh over the network.

    ssh = Ssh(folder)                                  # one per run, in the run directory every container mounts
    shell = ssh.open({"10.11.0.1": node0, ...}, job)   # sshd up in each host, mpirun's agent and its config
    ...                                                # mpirun --mca plm_rsh_agent "<shell.agent>"
    shell.close()                                      # the hosts' sshd stop once no running job needs them

- keys: a client key pair and a host key, made once per run by the image's ssh-keygen, in `folder`; the
  client trusts that host key at the job's addresses only (known_hosts), so nothing is taken on first use;
- sshd: the image's, started in each host of the job (inside its container: its namespaces, cgroups and
  capabilities, as the job's processes) on the host's fabric address and port 22 only, so the daemons' launch
  and the job's traffic both stay on the fabric NICs; its sessions get the image's environment (SetEnv);
- jobs that run at once share a host's sshd; it stops when the last of them ends, and one killed with its
  container (a GPU crash) is started again by the next job.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time

from testbed.fabric.backends.base import RemoteShell

PORT = 22
KEY, HOST_KEY = "id_ed25519", "host_ed25519"
READY = "Server listening on"          # sshd -e says it once bound
STARTUP_S = 10.0


def sshd_config(folder: str, env: list[str]) -> str:
    """The job hosts' sshd: public-key root login with the run's keys only, no PAM, no forwarding, the
    image's environment in every session (PATH, PYTHONPATH). The address is given per host (-o)."""
    lines = [f"Port {PORT}", f"HostKey {folder}/{HOST_KEY}", f"AuthorizedKeysFile {folder}/authorized_keys",
             "PermitRootLogin prohibit-password", "PubkeyAuthentication yes", "PasswordAuthentication no",
             "KbdInteractiveAuthentication no", "UsePAM no", "UseDNS no", "PidFile none",
             # the run directory is the machine's; its owner and modes are not a user's home's
             "StrictModes no",
             "AllowTcpForwarding no", "X11Forwarding no", "PrintMotd no", "LogLevel INFO"]
    if env:
        lines.append("SetEnv " + " ".join(f'"{e}"' for e in env))
    return "\n".join(lines) + "\n"


def ssh_config(folder: str) -> str:
    """mpirun's ssh: the run's key, the run's host key as the only one trusted, never a prompt."""
    return "\n".join(["Host *", "  User root", f"  Port {PORT}", f"  IdentityFile {folder}/{KEY}",
                      "  IdentitiesOnly yes", f"  UserKnownHostsFile {folder}/known_hosts",
                      "  GlobalKnownHostsFile /dev/null", "  StrictHostKeyChecking yes", "  BatchMode yes",
                      "  CheckHostIP no", "  ForwardX11 no", "  ConnectTimeout 10", "  LogLevel ERROR"]) + "\n"


def known_hosts(addresses, host_public_key: str) -> str:
    """The run's host key, trusted at these fabric addresses."""
    key = " ".join(host_public_key.split()[:2])            # type and key, not the comment
    return "".join(f"{a} {key}\n" for a in sorted(addresses))


def agent(folder: str) -> str:
    """mpirun's plm_rsh_agent: ssh with the run's config."""
    return f"ssh -F {folder}/ssh_config"


class Ssh:
    """The sshd of the hosts in running MPI jobs, and the run's keys (see the module docstring)."""

    def __init__(self, folder: str, env: list[str]):
        self.folder, self.env = folder, env
        self.lock = threading.Lock()
        self.daemons: dict[str, tuple] = {}            # host -> (sshd process, the jobs using it)
        self.known: set[str] = set()

    def open(self, nodes: dict, job: str) -> RemoteShell:
        """sshd running in every host of `nodes` ({fabric address: live DockerHost}) for job `job`."""
        with self.lock:
            first = next(iter(nodes.values()))
            if not os.path.exists(os.path.join(self.folder, KEY)):
                self._keys(first)
            self._trust(nodes)
            started = []
            for ip, node in nodes.items():
                proc, jobs = self.daemons.get(node.name, (None, set()))
                if proc is None or proc.poll() is not None:      # none yet, or gone with its container
                    proc, jobs = self._sshd(node, ip), set()
                    started.append((node.name, proc))
                self.daemons[node.name] = (proc, jobs | {job})
            for name, proc in started:
                self._wait_listening(name, proc)
        return RemoteShell(agent(self.folder), release=lambda: self.release(list(nodes.values()), job))

    def release(self, nodes: list, job: str) -> None:
        """Job `job` has ended: stop the sshd no other running job uses."""
        with self.lock:
            for node in nodes:
                proc, jobs = self.daemons.get(node.name, (None, set()))
                if job not in jobs:
                    continue
                jobs = jobs - {job}
                self.daemons[node.name] = (proc, jobs)
                if not jobs:
                    del self.daemons[node.name]
                    stop(proc)

    def close(self) -> None:
        with self.lock:
            for proc, _ in self.daemons.values():
                stop(proc)
            self.daemons = {}

    def _keys(self, node) -> None:
        os.makedirs(self.folder, exist_ok=True)
        for name in (KEY, HOST_KEY):
            p = node.popen(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"testbed-{name}",
                            "-f", os.path.join(self.folder, name)])
            out, err = p.communicate(timeout=30)
            if p.returncode != 0:
                raise RuntimeError(f"ssh-keygen in {node.name} failed: {(err or out).decode().strip()[-200:]}")
        with open(os.path.join(self.folder, f"{KEY}.pub")) as f, \
                open(os.path.join(self.folder, "authorized_keys"), "w") as out:
            out.write(f.read())
        for name, text in (("sshd_config", sshd_config(self.folder, self.env)), ("ssh_config", ssh_config(self.folder))):
            with open(os.path.join(self.folder, name), "w") as f:
                f.write(text)

    def _trust(self, nodes: dict) -> None:
        if set(nodes) <= self.known:
            return
        self.known |= set(nodes)
        with open(os.path.join(self.folder, f"{HOST_KEY}.pub")) as f:
            text = known_hosts(self.known, f.read())
        with open(os.path.join(self.folder, "known_hosts"), "w") as f:
            f.write(text)

    def _sshd(self, node, ip: str):
        with open(os.path.join(self.folder, f"sshd-{node.name}.log"), "w") as log:
            # /run/sshd: sshd's privilege-separation directory, which the image's /run lacks
            return node.popen(["sh", "-c", 'mkdir -p -m 0755 /run/sshd && exec "$@"', "sshd", "/usr/sbin/sshd",
                               "-D", "-e", "-f", os.path.join(self.folder, "sshd_config"), "-o",
                               f"ListenAddress={ip}:{PORT}"], stdout=log, stderr=log)

    def _wait_listening(self, name: str, proc) -> None:
        path = os.path.join(self.folder, f"sshd-{name}.log")
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            with open(path, errors="replace") as f:
                text = f.read()
            if READY in text:
                return
            if proc.poll() is not None:
                last = (text.strip().splitlines() or [f"exited {proc.returncode}"])[-1]
                raise RuntimeError(f"sshd in {name} did not start: {last}")
            time.sleep(0.02)
        stop(proc)
        raise RuntimeError(f"sshd in {name} did not listen within {STARTUP_S:g} s")


def stop(proc) -> None:
    """sshd's listener ends on SIGTERM; SIGKILL if it has not within 3 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
