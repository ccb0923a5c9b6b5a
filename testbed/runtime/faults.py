"""Fault injection into a running fabric: links and switches, GPUs (their rank processes) and GPUs' cables.

Targets:
  rail0-spine1      a switch-to-switch link (either order)
  path:s0g0>s1g1    the first switch-to-switch link of the single-path route from s0g0 to s1g1
  s0g0/nic          a GPU's (or CPU host's) NIC link; s0g0/hb its HB-domain link
  spine1            a whole switch (every port)
A link goes down at both ends, as a cut cable does: switch ports are set down through OpenFlow port
config (the controller gets PORT_STATUS; watch-port buckets stop using them) and host interfaces are
set down in the host's namespace. GPU faults and the cables of GPUs (nic-down, partition) are found and
recovered from by the job itself (its heartbeats over the network and its progress watchdog); their
outcome says when and how (`detected_by`), see Schedule and fault_outcomes.py.
"""
from __future__ import annotations

import heapq
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from testbed.fabric.links import switch_port, sysname
from testbed.fabric.topo import Link


class FaultError(ValueError):
    """A fault target that does not exist in the fabric."""


def path_uplink(fabric, src: str, dst: str) -> Link:
    """The first switch-to-switch link on the single-path route from src to dst (the controller's
    preferred equal-cost port at the source's leaf)."""
    from controllers.routes import Topology
    for h in (src, dst):
        if h not in fabric.hosts:
            raise FaultError(f"unknown host {h!r} in path target")
    topo = Topology(fabric.to_controller())
    leaf, _ = topo.host_port[src]
    ports = topo.ordered_routes()[leaf].get(fabric.hosts[dst].ip)
    if not ports:
        raise FaultError(f"no route from {src} to {dst} on this fabric")
    for l in fabric.links:
        if (l.a, l.a_port) == (leaf, ports[0]) or (l.b, l.b_port) == (leaf, ports[0]):
            if l.kind != "nic":
                return l
    raise FaultError(f"{src} and {dst} share a switch: their path has no switch-to-switch link")


def resolve(fabric, target: str) -> list[Link]:
    """The links a target names."""
    if target.startswith("path:"):
        src, _, dst = target[5:].partition(">")
        return [path_uplink(fabric, src.strip(), dst.strip())]
    if "/" in target:
        host, kind = target.split("/", 1)
        if host not in fabric.hosts or kind not in ("nic", "hb"):
            raise FaultError(f"unknown fault target {target!r}: expected HOST/nic or HOST/hb")
        try:
            return [fabric.attachment(host, kind)]
        except KeyError:
            raise FaultError(f"{host} has no {kind} link") from None
    if target in fabric.switches:
        return [l for l in fabric.links if target in (l.a, l.b)]
    if "-" in target:
        a, b = target.split("-", 1)
        found = [l for l in fabric.links if {l.a, l.b} == {a, b}]
        if found:
            return found
    raise FaultError(f"unknown fault target {target!r}: expected a link like rail0-spine1, HOST/nic, "
                     f"HOST/hb, path:SRC>DST or a switch name")


def _ends(net, link: Link):
    """(kind, node, port) for both ends."""
    for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
        yield ("host" if node in net.fabric.hosts else "switch"), node, port


def set_patch(net, link: Link, up: bool) -> None:
    """Patch ports ignore OpenFlow's port-down config, so a cut is their removal (the switches send
    PORT_STATUS delete/add), and repair re-creates them with the same port numbers."""
    ends = [(sysname(link.a), switch_port(link.a, link.a_port), link.a_port),
            (sysname(link.b), switch_port(link.b, link.b_port), link.b_port)]
    cmd = ["ovs-vsctl"]
    for i, (br, port, number) in enumerate(ends):
        if up:
            peer = ends[1 - i][1]
            cmd += ["--", "--may-exist", "add-port", br, port, "--", "set", "interface", port, "type=patch",
                    f"options:peer={peer}", f"ofport_request={number}"]
        else:
            cmd += ["--", "--if-exists", "del-port", br, port]
    net.run_at(link.a, cmd)       # patch ports join switches of one machine


def set_link(net, link: Link, up: bool, disable: bool = False) -> None:
    """Cut (or mend) a cable: one end's interface goes down, so the other end loses carrier and each switch
    learns of it from its own port, as from a pulled cable or a dead transceiver; a host's end is the one cut.
    disable=True is the `port-disable` fault instead: the switch port is configured down by OpenFlow (the
    switch knows at once) and the host's end goes down too."""
    if net.is_patch(link):
        return set_patch(net, link, up)      # a patch port has no carrier: its removal is the cut
    state = "up" if up else "down"
    ends = list(_ends(net, link))
    if not disable and not net.crosses(link):
        # one end: a host's NIC if the cable has one, else the first switch's veth (the other end loses carrier;
        # a VXLAN tunnel between machines carries no carrier, so there both ends go down, as both ends of a cut
        # fibre lose light)
        ends = [next((e for e in ends if e[0] == "host"), ends[0])]

    def set_end(end) -> None:
        kind, node, port = end
        if kind == "host":
            net.set_host_port(node, port, up)
        elif disable and net.fabric.switches[node].sdn:
            net.run_at(node, ["ovs-ofctl", "-O", "OpenFlow13", "mod-port", sysname(node), str(port), state])
        else:       # a switch's veth (or VXLAN device) in its machine's root namespace, or an HB bridge port
            net.run_at(node, ["ip", "link", "set", switch_port(node, port), state])
    if len(ends) == 1:
        set_end(ends[0])
    else:           # both ends at once, as a cable's (over ssh, one after the other would open a window of loss)
        with ThreadPoolExecutor(len(ends)) as pool:
            list(pool.map(set_end, ends))


def inject(net, target: str, up: bool = False, disable: bool = False) -> dict:
    """Take a target down (or up); returns {"target", "up", "at"} with the wall-clock time."""
    links = resolve(net.fabric, target)
    at = time.time()
    for link in links:
        set_link(net, link, up, disable)
    return {"target": target, "up": up, "at": at, "links": len(links)}


GPU_KINDS = {"gpu-crash": signal.SIGKILL, "gpu-hang": signal.SIGSTOP, "gpu-declared": signal.SIGUSR1,
             "gpu-stall": signal.SIGUSR2}
RANK_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)     # handled by the rank program itself, sent to it alone
RANK_PROGRAM = "hosts.agents.collective_rank"
SERVER_KINDS = ("server-down", "partition")          # targets a server (s1), not a GPU host


def gpu_hosts(fabric, kind: str, target: str) -> list[str]:
    if kind in SERVER_KINDS:         # the whole server, its spares included
        hosts = [h.name for h in fabric.gpus() + fabric.spares() if f"s{h.server}" == target]
    else:
        hosts = [target] if target in fabric.hosts and fabric.hosts[target].kind in ("gpu", "spare") else []
    if not hosts:
        raise FaultError(f"unknown {kind} target {target!r}: expected a GPU host like s0g1"
                         + (f" ({kind}: a server like s1)" if kind in SERVER_KINDS else ""))
    return hosts


def cut_nics(net, kind: str, target: str, up: bool) -> dict:
    """nic-down: a GPU's NIC cable cut at the GPU (its port goes down, the switch loses carrier); partition:
    every NIC cable of a server cut at the switches (its GPUs lose carrier and the scale-out network; the
    server, its processes and its HB domain stay up). Either way the controller sees PORT_STATUS and the
    ranks see their beats stop on the NIC."""
    at = time.time()
    if kind == "nic-down":
        return {**inject(net, f"{target}/nic", up), "target": target, "at": at}
    links = [net.fabric.attachment(h, "nic") for h in gpu_hosts(net.fabric, kind, target)
             if net.fabric.hosts[h].kind == "gpu"]
    for link in links:
        node, port = (link.b, link.b_port) if link.a in net.fabric.hosts else (link.a, link.a_port)
        net.run_at(node, ["ip", "link", "set", switch_port(node, port), "up" if up else "down"])
    return {"target": target, "up": up, "at": at, "links": len(links)}


def host_processes(net, host: str) -> list[int]:
    """PIDs running in an emulated host (on its machine), except its shell and the testbed's tools there."""
    return list(net.host(host).processes())


def rank_processes(net, host: str) -> list[int]:
    """PIDs of collective rank processes in a host."""
    return [pid for pid, cmdline in net.host(host).processes().items() if RANK_PROGRAM in cmdline]


def signal_gpus(net, hosts: list[str], sig) -> int:
    """A GPU failure: the rank processes of these hosts crash (SIGKILL), hang (SIGSTOP) or resume; the rank
    programs alone get SIGUSR1 (declared failed) and SIGUSR2 (a stalled GPU: its main loop blocks, the process
    lives on). A Docker host crashes and hangs as a whole: its container is killed, paused or unpaused."""
    hit = 0
    for host in hosts:
        node = net.host(host)
        if sig in RANK_SIGNALS:
            pids = rank_processes(net, host)
        else:
            failed = node.fail(sig)          # the backend's own way (a container), if it has one
            if failed is not None:
                hit += failed
                continue
            pids = host_processes(net, host)
        hit += node.signal(pids, sig)
    return hit


LINK_KINDS = ("link-down", "link-up", "link-flap", "switch-down", "port-disable")
CABLE_FAULTS = ("nic-down", "partition")        # cables of GPUs: the job detects and recovers, like a GPU failure
RETURNS = ("gpu-restart", "nic-up")             # a GPU (its NIC cable) comes back: its rank rejoins the job
GPU_FAULTS = ("gpu-crash", "gpu-hang", "gpu-stall", "gpu-declared", "server-down") + CABLE_FAULTS + RETURNS

# The running jobs that take GPUs back (testbed/runtime/recovery.JobManager.rejoin registers itself): each
# hook(host) -> 1 if that job starts the host's rank again (once it has dropped the old one), else 0.
restart_hooks: list = []


def bring_back(net, kind: str, target: str) -> dict:
    """gpu-restart: the GPU's rank process is started again (a GPU or its host rebooted, a process restarted
    by its supervisor); nic-up: the GPU's NIC cable is mended first. Either way the job that dropped the GPU
    takes it back at its next step boundary. `processes`: the jobs that will restart its rank (0: none)."""
    at = time.time()
    if kind == "nic-up":
        inject(net, f"{target}/nic", up=True)
    return {"target": target, "up": True, "at": at, "processes": sum(hook(target) for hook in list(restart_hooks))}


def check_target(fabric, fault: dict) -> None:
    if fault["kind"] in GPU_FAULTS:
        gpu_hosts(fabric, fault["kind"], fault["target"])
    else:
        resolve(fabric, fault["target"])


class Schedule:
    """Faults of a scenario, injected at their `at` by a thread: seconds after the workloads start, or
    after the start of the workload named by the fault's `workload` (the runner reports each start).

    link-down / switch-down: cables cut at `at` (carrier lost), mended after `duration` if given;
    port-disable: the switch port configured down by OpenFlow instead (the switch knows at once);
    link-up: up at `at`;
    link-flap: down and up `count` times (default 3), `duration` (default 0.5 s) each way;
    gpu-crash / server-down: the GPU host's (server's) rank processes are killed (SIGKILL);
    gpu-hang: they are stopped (SIGSTOP), and resumed after `duration` if given;
    gpu-stall: the GPU hangs with its host alive (SIGUSR2 to the rank: its main loop blocks at its next kernel,
      its heartbeats go on; the peers' progress watchdog finds it), resumed (SIGCONT) after `duration` if given;
    gpu-declared: the GPU is declared failed (SIGUSR1: the rank tells its peers and leaves);
    gpu-restart: the GPU comes back: its rank process is started again and rejoins the job (recovery other
      than abort) at a step boundary; nic-up: a GPU's NIC cable is mended and its rank comes back the same way;
    nic-down: a GPU's NIC cable is cut at the GPU (target a GPU host); partition: a server's NIC cables are cut
      at the switches (target a server like s1): its ranks live on, cut off; both mended after `duration`.
    (Docker hosts: docker kill, docker pause, docker unpause of the host's container.)
    Everything still down when the workloads end is restored before the fabric is torn down.
    """

    def __init__(self, net, faults: list[dict]):
        self.net = net
        self.faults = faults
        self.steps: list[tuple[float, int, bool]] = []      # (time after t0, fault index, up), a heap
        self.anchored: dict[str, list[tuple[float, int, bool]]] = {}     # workload -> steps after its start
        for i, f in enumerate(faults):
            check_target(net.fabric, f)                      # fail early on unknown targets
            steps = []
            if f["kind"] in ("link-up",) + RETURNS:
                steps.append((f["at"], i, True))
            elif f["kind"] == "link-flap":
                period = f.get("duration", 0.5)
                for k in range(f.get("count", 3)):
                    steps += [(f["at"] + 2 * k * period, i, False), (f["at"] + (2 * k + 1) * period, i, True)]
            else:
                steps.append((f["at"], i, False))
                if "duration" in f:
                    steps.append((f["at"] + f["duration"], i, True))
            if "workload" in f:
                self.anchored.setdefault(f["workload"], []).extend(steps)
            else:
                self.steps += steps
        heapq.heapify(self.steps)
        self.log: list[dict] = []
        self.t0 = 0.0
        self._cv = threading.Condition()
        self._stopped = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-faults")

    def start(self) -> None:
        self.t0 = time.time()
        self._thread.start()

    def workload_started(self, name: str) -> None:
        """Schedule the faults anchored to this workload from now."""
        with self._cv:
            since = time.time() - self.t0
            for at, i, up in self.anchored.pop(name, []):
                heapq.heappush(self.steps, (since + at, i, up))
            self._cv.notify()

    def _next(self):
        """The next step when it is due, or None once stopped."""
        with self._cv:
            while not self._stopped:
                if not self.steps:
                    self._cv.wait()
                    continue
                due = self.t0 + self.steps[0][0] - time.time()
                if due <= 0:
                    return heapq.heappop(self.steps)
                self._cv.wait(due)
            return None

    def _run(self) -> None:
        while (step := self._next()) is not None:
            _, i, up = step
            f = self.faults[i]
            if f["kind"] in LINK_KINDS:
                rec = inject(self.net, f["target"], up, disable=f["kind"] == "port-disable")
            elif f["kind"] in CABLE_FAULTS:
                rec = cut_nics(self.net, f["kind"], f["target"], up)
            elif f["kind"] in RETURNS:
                rec = bring_back(self.net, f["kind"], f["target"])
            else:
                hosts = gpu_hosts(self.net.fabric, f["kind"], f["target"])
                sig = signal.SIGCONT if up else GPU_KINDS.get(f["kind"], signal.SIGKILL)
                rec = {"target": f["target"], "up": up, "at": time.time(),
                       "processes": signal_gpus(self.net, hosts, sig)}
            self.log.append({**rec, "fault": i})

    def stop(self) -> None:
        """Stop injecting and restore what is down (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._cv:
            self._stopped = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join()
        down = {}
        for rec in self.log:
            down[rec["target"]] = not rec["up"]
        for target, is_down in down.items():
            kind = next(f["kind"] for f in self.faults if f["target"] == target)
            if is_down and kind in LINK_KINDS:
                inject(self.net, target, up=True, disable=kind == "port-disable")
            elif is_down and kind in CABLE_FAULTS:
                cut_nics(self.net, kind, target, up=True)
            elif is_down and kind in ("gpu-hang", "gpu-stall"):     # a hung rank is resumed so it can be torn down
                signal_gpus(self.net, gpu_hosts(self.net.fabric, kind, target), signal.SIGCONT)

    def _ports(self, fault: dict) -> set | None:
        """The switch ports a link or switch fault takes down (None for GPU faults, which the
        controller does not see: the runner fills them in from the workloads' recoveries)."""
        if fault["kind"] in GPU_FAULTS:
            return None
        fabric = self.net.fabric
        return {(node, port) for link in resolve(fabric, fault["target"])
                for node, port in ((link.a, link.a_port), (link.b, link.b_port)) if node in fabric.switches}

    def results(self, port_events: list[dict]) -> list[dict]:
        """Per fault: when it was injected, detected by the controller, and routed around (seconds
        after the workloads started)."""
        out = []
        for i, f in enumerate(self.faults):
            mine = [r for r in self.log if r["fault"] == i]
            first = next((r for r in mine if not r["up"]), mine[0] if mine else None)
            rec = {"kind": f["kind"], "target": f["target"], "at_s": None, "detected_s": None,
                   "recovered_s": None, "restored_s": None, "first_success_s": None, "lost_steps": None}
            if first:
                rec["at_s"] = round(first["at"] - self.t0, 4)
                if "processes" in first:
                    rec["processes"] = first["processes"]       # GPU faults: rank processes signalled
                ports = self._ports(f)      # events on the fault's own ports (spares coming up are others)
                seen = [e for e in port_events if e["at"] >= first["at"] - 0.001
                        and ports is not None and (e["switch"], e["port"]) in ports]
                if seen:
                    # three stages: the controller saw it, computed new routes, and the last switch it
                    # changed acknowledged them (barrier reply): only then is the fabric rerouted
                    ev = seen[0]
                    rec["detected_s"] = round(ev["at"] - self.t0, 4)
                    rec["computed_s"] = round(ev["at"] + ev["computed_s"] - self.t0, 4)
                    if ev.get("installed_at"):
                        rec["installed_s"] = rec["recovered_s"] = round(ev["installed_at"] - self.t0, 4)
                back = next((r for r in mine if r["up"] and r["at"] > first["at"]), None)
                if back:
                    rec["restored_s"] = round(back["at"] - self.t0, 4)
            out.append(rec)
        return out
