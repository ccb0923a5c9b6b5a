"""Docker host backend: every emulated host is a container (name tb-<host>, tb-<tag><host> under a fabric tag;
CPU and memory limits), whose network namespace Mininet cables like any host's.

    containers = Containers(client, image, run_dir, cpus=1.0, memory=1 << 30)
    containers.start(["s0g0", "s0g1"])               # in parallel
    mn.addHost("s0g0", cls=DockerHost, pod=containers["s0g0"])

The network namespace belongs to a holder container started with `--network none` (tb-<host>-net, like a
Kubernetes pod's pause container); the host's container joins it (`--network container:`). So a killed
host container keeps its cabling, and is started again, in the same namespace, when the next process
is launched in it, as a namespace host runs the next workload's processes after a GPU crash.

A DockerHost has two sides, the way Containernet's Docker hosts do:
- its shell (`cmd`, and so every link, address, neighbour and qdisc Mininet or the testbed sets up) runs
  in the holder's network namespace with the machine's own tools (nsenter --net), so the image needs
  none of them and veths move in by the shell's PID, as for any Mininet host;
- `popen` runs a process inside the container: its mount, UTS, IPC, network and PID namespaces, its
  cgroups (so the CPU and memory limits apply and `docker pause` freezes it), the image's environment
  and working directory, and the image's Python (`DockerHost.python`).
The CPU limit is Docker's (cgroup v1 or v2 alike); after a start it is read back from the container's cgroup
(hosts.cgroups), since Docker only warns when it cannot apply one.
A GPU failure is the host container's: `docker kill` (crash), `docker pause` (hang), `docker unpause`
(resume). mpirun's remote shell between Docker hosts is ssh over the fabric (testbed.fabric.backends.mpissh).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from mininet.node import Host

from hosts import cgroups
from testbed.fabric import lifeline
from testbed.fabric.links import sysname
from testbed.fabric.backends.base import AttachedHost, LocalProcesses, RemoteShell
from testbed.fabric.backends.engine import DockerUnavailable, engine  # noqa: F401 (dockerhost.engine: the API)
from testbed.fabric.backends.mpissh import Ssh

LABEL = "testbed"                     # every container of ours carries it, with the run directory
# nsenter keeps the caller's capabilities (all of root's): a workload process gets Docker's default set only,
# as the container's init and `docker exec` have (setpriv: util-linux, in every Debian image)
DEFAULT_CAPS = ("chown", "dac_override", "fsetid", "fowner", "mknod", "net_raw", "setgid", "setuid", "setfcap",
                "setpcap", "net_bind_service", "sys_chroot", "kill", "audit_write")
DROP_CAPS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all," + ",".join("+" + c for c in DEFAULT_CAPS)]


def container_name(host: str) -> str:
    return sysname(host)


def holder_name(host: str) -> str:
    """The container that holds the host's network namespace."""
    return sysname(host) + "-net"


def cgroup_procs(pid: int) -> list[str]:
    """The cgroup.procs files of every cgroup hierarchy process `pid` belongs to (v1 and v2)."""
    return [os.path.join(d, "cgroup.procs") for d in cgroups.process_cgroups(pid)
            if os.path.exists(os.path.join(d, "cgroup.procs"))]


def cpu_limit(pid: int) -> tuple[float | None, str]:
    """(CPU limit in cores of the cgroup process `pid` is in, None if unlimited; which cgroup version)."""
    h = cgroups.detect()
    return h.limit_cores(h.of_process(pid)), f"cgroup v{h.version}"


def started_processes(container) -> int:
    """How many processes the testbed started in the container (each is the child of an nsenter)."""
    top = container.top(ps_args="-eo pid,ppid,args")
    rows = {r[0]: r for r in top.get("Processes") or []}
    return sum(1 for _, ppid, _ in rows.values() if ppid in rows and rows[ppid][2].startswith("nsenter"))


def container_fault(container, sig, idle: bool = True) -> int:
    """A GPU failure on a Docker host: SIGKILL kills the container, SIGSTOP pauses it, SIGCONT resumes it.
    Returns how many of the processes the testbed started in it were hit. idle=False: a container where none
    runs yet is left alone (a fault timed from a workload's start waits for its rank, as on a namespace host)."""
    import docker
    try:
        container.reload()
        hit = started_processes(container) if container.status in ("running", "paused") else 0
        if not hit and not idle and sig in (signal.SIGKILL, signal.SIGSTOP):
            return 0      # struck now, the rank could not start, and the fault would never be recorded
        if sig == signal.SIGKILL and container.status in ("running", "paused"):
            container.kill()
        elif sig == signal.SIGSTOP and container.status == "running":
            container.pause()
        elif sig == signal.SIGCONT and container.status == "paused":
            container.unpause()
        else:
            return 0
        return hit
    except docker.errors.APIError:
        return 0          # already gone


class Containers:
    """The containers of one run: started in parallel, removed together (also after a failure)."""

    def __init__(self, client, image: str, run_dir: str, cpus: float = 1.0, memory: int = 1 << 30):
        self.client, self.image, self.run_dir = client, image, run_dir
        self.cpus, self.memory = cpus, memory
        self.by_host: dict = {}
        self.env = client.images.get(image).attrs["Config"].get("Env") or []     # PATH, PYTHONPATH

    def __getitem__(self, host: str):
        return self.by_host[host]

    def _devices(self) -> dict:
        """Kernel RDMA devices for pyverbs inside the container (the rxe transport), where the kernel has them."""
        from testbed.fabric.backends import softroce
        if not softroce.available():
            return {}
        os.makedirs("/dev/infiniband", exist_ok=True)     # the rxe devices' nodes appear in it at bring-up
        return {"volumes": {"/dev/infiniband": {"bind": "/dev/infiniband", "mode": "rw"}},
                "device_cgroup_rules": ["c 231:* rwm"]}          # 231: the uverbs character devices

    def _run(self, name: str, **options):
        import docker
        try:      # a container of a run that crashed (the fabric lock says no other run of this tag is up)
            self.client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
        c = self.client.containers.run(
            self.image, name=name, detach=True, init=True,   # init: reaps what the testbed's processes leave
            labels={LABEL: "1", f"{LABEL}.run": self.run_dir, f"{LABEL}.owner_pid": str(os.getpid())}, **options)
        c.reload()
        if c.status != "running":
            raise RuntimeError(f"container {name} is {c.status}: {c.logs(tail=3).decode(errors='replace').strip()}")
        return c

    def _start_one(self, host: str) -> tuple:
        """(holder, host container) of one host."""
        holder = self._run(holder_name(host), hostname=host, network_mode="none", nano_cpus=int(0.05 * 1e9),
                           mem_limit=32 << 20)
        extra = self._devices()
        volumes = {self.run_dir: {"bind": self.run_dir, "mode": "rw"}, **extra.pop("volumes", {})}
        c = self._run(container_name(host), network_mode=f"container:{holder.id}", nano_cpus=int(self.cpus * 1e9),
                      mem_limit=self.memory, memswap_limit=self.memory, volumes=volumes, **extra)
        # Docker drops a CPU limit with only a warning where the cpu controller is missing: check it is there
        try:
            cores, version = cpu_limit(c.attrs["State"]["Pid"])
        except (cgroups.CgroupError, OSError, ValueError) as e:
            raise RuntimeError(f"cannot check the CPU limit of {c.name}: {e}") from None
        if cores is None or abs(cores - self.cpus) > 0.01:
            raise RuntimeError(f"the CPU limit of {c.name} is {cores} cores ({version}), not the {self.cpus} asked for")
        return holder, c

    def start(self, hosts: list[str]) -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:         # dockerd works on several at once
            futures = {h: pool.submit(self._start_one, h) for h in hosts}
            errors = []
            for h, fut in futures.items():
                try:
                    self.by_host[h] = fut.result()
                except Exception as exc:
                    errors.append(f"{h}: {exc}")
        if errors:
            raise RuntimeError("starting containers failed: " + "; ".join(errors[:3]))

    def remove(self) -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:     # host containers first: they use the holders
            list(pool.map(self._remove_one, [c for _, c in self.by_host.values()]))
            list(pool.map(self._remove_one, [h for h, _ in self.by_host.values()]))
        self.by_host = {}

    @staticmethod
    def _remove_one(container) -> None:
        import docker
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass


class ContainerProcess(subprocess.Popen):
    """A process in a container, started by nsenter, which forks into the container's PID namespace and
    waits for it. Signals go to that process (nsenter exits as it does); kill() takes both down."""

    def inner_pid(self, wait: float = 1.0) -> int | None:
        deadline = time.monotonic() + wait
        while True:
            try:
                with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
                    kids = f.read().split()
                if kids:
                    return int(kids[0])
            except OSError:
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)

    def send_signal(self, sig) -> None:
        if self.poll() is not None:
            return
        if sig == signal.SIGKILL:
            try:
                os.killpg(self.pid, signal.SIGKILL)      # its own session: nsenter and what it started
            except ProcessLookupError:
                pass
            return
        try:
            os.kill(self.inner_pid() or self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class AttachedContainer(AttachedHost):
    """A live run's Docker host from another process: its GPU failures are its container's (docker kill / pause /
    unpause)."""

    def __init__(self, pid: int, container: str):
        super().__init__(pid)
        self.container = container

    def fail(self, sig, idle: bool = True) -> int | None:
        if sig == signal.SIGUSR1:
            return None
        return container_fault(engine().containers.get(self.container), sig, idle)


class DockerHost(LocalProcesses, Host):
    """A Mininet host whose network namespace is a container's (see the module docstring)."""

    python = "python3"            # the image's interpreter runs the hosts package
    tool_pids: frozenset = frozenset()       # the testbed's own tools in it (captures): spared by GPU faults

    def __init__(self, name, pod=None, containers: Containers | None = None, **params):
        self.holder, self.container = pod
        self.containers = containers
        self.holder_pid = self.holder.attrs["State"]["Pid"]
        self._attach()
        Host.__init__(self, name, **params)

    def _attach(self) -> None:
        """Where processes enter: the host container's init and cgroups (new after a restart)."""
        self.container.reload()
        if self.container.status == "exited":      # killed by a GPU crash: the next launch brings it back
            self.container.start()
            self.container.reload()
        self.container_pid = self.container.attrs["State"]["Pid"]
        self.cgroups = cgroup_procs(self.container_pid)
        lifeline.also(self.container_pid)      # the processes in it die with the run, as a namespace host's do

    def _popen(self, cmd, **params):
        if self.shell is None and cmd[:1] == ["mnexec"]:
            # the node's shell: the holder's network namespace, the machine's tools (not mnexec -n,
            # which would make a new namespace); its own session, as mnexec -d gives, so it can be killed
            cmd = ["nsenter", "--target", str(self.holder_pid), "--net", "--"] + cmd[2:]
            params["start_new_session"] = True
        return super()._popen(cmd, **params)

    def popen(self, *args, **kwargs):
        """A process inside the container (namespaces, cgroups, image environment and working directory)."""
        cmd = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else \
            (args[0].split() if len(args) == 1 else list(args))
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.pop("cwd", None)
        kwargs.pop("mncmd", None)
        if self.container.status != "running" or not os.path.exists(f"/proc/{self.container_pid}"):
            self._attach()
        # the holder's UTS namespace carries the host's name (a container on another's network has none)
        enter = ["sh", "-c", 'for f in $TB_CGROUPS; do echo $$ > "$f" || exit 125; done; exec "$@"', "tb-enter",
                 "nsenter", "--target", str(self.container_pid), "--mount", f"--uts=/proc/{self.holder_pid}/ns/uts",
                 "--ipc", "--net", "--pid",
                 "--wd", "--", *DROP_CAPS, "env", "-i", *self.containers.env]   # --wd: the image's WORKDIR
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "TB_CGROUPS": " ".join(self.cgroups)}
        return ContainerProcess(enter + cmd, env=env, start_new_session=True, **kwargs)

    def tool_popen(self, *args, **kwargs):
        """A process of the machine's own in the container's network namespace (captures)."""
        proc = Host.popen(self, *args, **kwargs)
        self.tool_pids = self.tool_pids | {proc.pid}
        return proc

    def fail(self, sig, idle: bool = True) -> int | None:
        """A Docker host fails as a whole (kill, pause, unpause); a declared failure (SIGUSR1) is the rank's.
        idle=False: not while none of the testbed's processes runs in it (container_fault)."""
        return None if sig == signal.SIGUSR1 else container_fault(self.container, sig, idle)

    def terminate(self):
        super().terminate()
        Containers._remove_one(self.container)
        Containers._remove_one(self.holder)


class Docker:
    """Hosts as Docker containers (a HostBackend): one pair per host from the host image, rebuilt first
    only if its inputs changed."""

    name = "docker"

    def __init__(self, run_dir: str, image: str = "default", **limits):
        self.run_dir, self.image, self.limits = run_dir, image, limits
        self.containers: Containers | None = None
        self.ssh: Ssh | None = None

    @staticmethod
    def require() -> None:
        engine()

    def start(self, hosts: list[str], record) -> dict:
        from testbed.fabric.backends import image
        t0 = time.monotonic()
        client = engine()
        tag = image.flavour(client, self.image, echo=lambda *a: None)
        timings = {"image_s": time.monotonic() - t0}
        self.containers = Containers(client, tag, self.run_dir, **self.limits)
        self.ssh = Ssh(os.path.join(self.run_dir, "ssh"), self.containers.env)
        record(containers=[n for h in hosts for n in (holder_name(h), container_name(h))])
        self.containers.start(hosts)
        return timings

    def node_params(self, host: str) -> dict:
        return {"cls": DockerHost, "pod": self.containers[host], "containers": self.containers}

    @staticmethod
    def enter(host: str, pid: int, tty: bool) -> list[str]:
        """The command prefix that runs a program in a live host from any process: inside its container."""
        return ["docker", "exec", "-i", *(["-t"] if tty else []), container_name(host)]

    @staticmethod
    def attach(host: str, pid: int) -> AttachedContainer:
        """A live host from another process: its GPU failures are its container's."""
        return AttachedContainer(pid, container_name(host))

    def remote_shell(self, nodes: dict, folder: str) -> RemoteShell:
        """mpirun's remote shell for the hosts `nodes` ({fabric address: live node}): ssh over the fabric,
        to an sshd started in each (testbed.fabric.backends.mpissh); `folder` names the job."""
        return self.ssh.open(nodes, folder)

    def stop(self) -> None:
        if self.ssh is not None:
            self.ssh.close()
        if self.containers is not None:
            self.containers.remove()
            self.containers = None
