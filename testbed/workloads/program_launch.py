"""How a `program` job's processes start, in the emulated hosts, and end.

Two launchers:
- env: one process per host, started in it by the host backend (`popen`), with the launchers' environment
  (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, TF_CONFIG, ...) set by `env` in front of the command, so it
  reads the same on namespace and Docker hosts;
- mpirun: one `mpirun` in the first host, which starts an orted in every other host through the backend's
  remote shell (`remote_shell`: on namespace hosts hosts/programs/mpi_agent.py, which enters the host by its
  `enter` prefix; on Docker hosts ssh over the fabric); Open MPI writes each rank's output to its own files
  (--output-filename), in a folder of the run directory (which Docker hosts mount), then moved to the logs.

Each process's stdout and stderr go to files in the job's log folder; end times are wall-clock (time.time()),
as faults record theirs.
"""
from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time

from testbed import PROJECT_ROOT

NIC = "eth0"              # every host's NIC; the HB port (eth1) reaches only the GPUs of its own server
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}   # Open MPI refuses root otherwise


def node_key(host) -> str:
    """The node (server) a host belongs to, for LOCAL_RANK: its server, or itself (a CPU host)."""
    return f"s{host.server}" if host.server is not None else host.name


def rank_env(hosts: list, r: int, port: int) -> dict[str, str]:
    """What the common launchers would set for rank r of a job on `hosts` (rank = position in the list):
    torchrun's variables, TF_CONFIG for tf.distribute's multi-worker strategies, and the NIC to use."""
    h = hosts[r]
    nodes = list(dict.fromkeys(node_key(x) for x in hosts))
    local = [x.name for x in hosts if node_key(x) == node_key(h)]
    tf_config = {"cluster": {"worker": [f"{x.ip}:{port}" for x in hosts]}, "task": {"type": "worker", "index": r}}
    return {"RANK": str(r), "WORLD_SIZE": str(len(hosts)), "LOCAL_RANK": str(local.index(h.name)),
            "LOCAL_WORLD_SIZE": str(len(local)), "NODE_RANK": str(nodes.index(node_key(h))),
            "GROUP_RANK": str(nodes.index(node_key(h))), "MASTER_ADDR": hosts[0].ip, "MASTER_PORT": str(port),
            "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
            "GLOO_SOCKET_IFNAME": NIC, "TP_SOCKET_IFNAME": NIC, "TB_HOST": h.name, "PYTHONUNBUFFERED": "1"}


def argv(command, python: str) -> list[str]:
    """The command as argv, `{python}` standing for the host's interpreter (the one that runs `hosts`)."""
    words = shlex.split(command) if isinstance(command, str) else list(command)
    return [w.replace("{python}", python) for w in words]


def with_env(env: dict[str, str], words: list[str]) -> list[str]:
    return ["env", *[f"{k}={v}" for k, v in env.items()], *words]


def start_env(net, hosts: list, spec: dict, logs: str) -> dict:
    """env launcher: rank -> (process, stdout path, stderr path)."""
    procs = {}
    for r, h in enumerate(hosts):
        node = net.host(h.name)
        env = {**rank_env(hosts, r, spec["port"]), **{k: str(v) for k, v in spec["env"].items()}}
        out, err = (os.path.join(logs, f"rank{r}.{s}") for s in ("stdout", "stderr"))
        with open(out, "w") as fo, open(err, "w") as fe:
            procs[r] = (node.popen(with_env(env, argv(spec["command"], node.python)), cwd=PROJECT_ROOT,
                                   stdout=fo, stderr=fe, stdin=subprocess.DEVNULL), out, err)
    return procs


def mpirun_argv(hosts: list, spec: dict, shell, output_dir: str, python: str) -> list[str]:
    """mpirun for one rank per host, its daemons started through `shell` (the backend's RemoteShell), over
    the NICs (TCP, no shared memory)."""
    env = {**rank_env(hosts, 0, spec["port"]), **ROOT_OK, **{k: str(v) for k, v in spec["env"].items()}}
    for per_rank in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "TF_CONFIG", "TB_HOST"):
        env.pop(per_rank)          # Open MPI gives each rank its own (OMPI_COMM_WORLD_RANK, ...)
    env.update(shell.env)
    mca = {"plm": "rsh", "plm_rsh_agent": shell.agent, "pml": "ob1", "btl": "tcp,self",
           "btl_tcp_if_include": NIC, "oob_tcp_if_include": NIC,
           "mpi_yield_when_idle": "1"}        # ranks waiting for the network yield the CPU instead of spinning
    return (with_env(env, ["mpirun", "-np", str(len(hosts)), "--host", ",".join(f"{h.ip}:1" for h in hosts),
                           "--bind-to", "none", "--output-filename", output_dir]
                     + [w for k, v in mca.items() for w in ("--mca", k, v)]
                     + [w for k in env for w in ("-x", k)] + list(spec["mpirun_args"]))
            + argv(spec["command"], python))


def start_mpirun(net, hosts: list, spec: dict, logs: str) -> tuple[dict, object, str]:
    """mpirun launcher: ({0: (mpirun's process, its stdout, its stderr)}, the backend's remote shell (close
    it when the job has ended), the job's folder in the run directory, where the ranks' files are written)."""
    os.makedirs(net.run_dir, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="mpi-", dir=net.run_dir)
    os.chmod(folder, 0o755)               # mkdtemp's 0700 would do for root; the job's files are not secret
    shell = net.backend.remote_shell({h.ip: net.host(h.name) for h in hosts}, folder)
    node = net.host(hosts[0].name)
    words = mpirun_argv(hosts, spec, shell, os.path.join(folder, "out"), node.python)
    out, err = os.path.join(logs, "mpirun.stdout"), os.path.join(logs, "mpirun.stderr")
    try:
        with open(out, "w") as fo, open(err, "w") as fe:
            procs = {0: (node.popen(words, cwd=PROJECT_ROOT, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL),
                         out, err)}
    except BaseException:
        shell.close()
        raise
    return procs, shell, folder


def collect_mpi_output(folder: str, logs: str, world: int) -> None:
    """Open MPI's per-rank files (out/1/rank.N/stdout in the job's folder) as rankN.stdout / rankN.stderr in
    the logs, beside mpirun's; the folder goes."""
    for r in range(world):
        for stream in ("stdout", "stderr"):
            found = glob.glob(os.path.join(folder, "out", "*", f"rank.{r}", stream))
            target = os.path.join(logs, f"rank{r}.{stream}")
            if found:
                shutil.move(found[0], target)
            else:
                open(target, "w").close()
    shutil.rmtree(folder, ignore_errors=True)


def supervise(procs: dict, timeout: float) -> dict[int, dict]:
    """Wait for every process (poll: each end time is when it ended, not when it was looked at); kill what
    outlives the timeout (SIGTERM, then SIGKILL 5 s later). rank -> {exit (None if stopped at the timeout),
    ended_at}."""
    ends: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while len(ends) < len(procs) and time.monotonic() < deadline:
        for r, (p, _, _) in procs.items():
            if r not in ends and p.poll() is not None:
                ends[r] = {"exit": p.returncode, "ended_at": time.time()}
        time.sleep(0.02)
    late = [(r, p) for r, (p, _, _) in procs.items() if r not in ends]
    for _, p in late:
        p.terminate()              # mpirun passes it on to its daemons and ranks in the other hosts
    for r, p in late:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        ends[r] = {"exit": None, "ended_at": time.time()}
    return ends

