"""Bring a fabric model up on Mininet + Open vSwitch with the routing controller, and tear it down.

    with Network(build("rail-optimized", 2, 4), routing="ecmp") as net:
        net.host("s0g0").cmd("ping -c1 10.11.1.0")

Rail, ToR, spine and front-end switches are OVS bridges (userspace datapath here, kernel where the
module exists) controlled over OpenFlow 1.5 by controllers/fabric_app.py on loopback; HB domains are
Linux bridges. Every link is a veth shaped with tbf at both ends, its queue the link's; a link with a
propagation delay gets it from testbed.fabric.delay (netem, or the user-space delay line). Unshaped links
(front-end links; uplinks with ideal_uplinks) are OVS patch ports, the fastest path here. Hosts use static
neighbour entries.
Everything carries the testbed prefix and is recorded in the run directory for `testbed clean`.

Hosts are network namespaces (Mininet's hosts, the default) or Docker containers (hosts="docker",
testbed/fabric/backends/dockerhost.py), with the same cabling, addressing and workloads.

With machines=[Machine, ...] the fabric is spread over those machines by rails (testbed/fabric/placement.py):
their switches and namespace hosts are Mininet Cluster Edition's remote nodes, links between machines are
VXLAN tunnels, and every switch-side command runs on the switch's machine (`run_at`). Without it, everything
is on this machine, as always.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time

from mininet.link import Link, OVSLink
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch
from mininet.nodelib import LinuxBridge

from testbed import RUN_ROOT
from testbed.fabric import ecn, lifeline, ovs, pfc, runstate, spares
from testbed.fabric.controller import Controller, ControllerError, LoopbackController
from testbed.fabric.delay import Delays, DelayError, End, LinkDelay, choose_path
from testbed.fabric.backends import BackendUnavailable, backend_class, softroce
from testbed.fabric.links import (IFNAMSIZ, TAG_VARIABLE, fabric_tag, interface, is_patch, overlong_names, switch_port,
                                  shape, sysname)
from testbed.fabric.machines import (VNI_BASE, VXLAN_OVERHEAD, ControllerTunnel, Machine, MachineBridge,
                                     MachineError, MachineHost, MachineLink, MachineSwitch)
from testbed.fabric.machines import check as check_machine
from testbed.fabric.machines import underlay_mtu
from testbed.fabric.placement import PlacementError, place
from testbed.fabric.topo import Fabric

CONTROLLER_PROBE_MS = 30_000    # how long a switch waits for the controller's echo before it reconnects


class NetworkError(RuntimeError):
    pass


def set_host_port(node, run_dir: str, host: str, port: int, up: bool) -> None:
    """A host's ethN down or up (node: anything with .cmd in the host's namespace). Taking a device down
    flushes its neighbour entries, the permanent ones too, so bringing it back restores the static ones from
    the batch file bring-up wrote in the run directory."""
    cmd = f"ip link set eth{port} {'up' if up else 'down'}"
    batch = os.path.join(run_dir, f"neigh-{host}")
    if up and os.path.exists(batch):
        cmd += f" && ip -batch {batch}"
    out = node.cmd(cmd + " || echo TESTBED-FAILED")
    if "TESTBED-FAILED" in out:
        raise NetworkError(f"setting {host} eth{port} {'up' if up else 'down'} failed: {out.strip()}")


class Network:
    def __init__(self, fabric: Fabric, routing: str = "ecmp", run_dir: str | None = None,
                 failover: bool = True, hosts: str = "netns", host_limits: dict | None = None,
                 controller_delay_ms: float = 0.0, machines: list[Machine] | None = None,
                 route_groups: bool = False):
        try:
            backend = backend_class(hosts)
        except BackendUnavailable as exc:
            raise NetworkError(str(exc)) from None
        self.machines = {m.name: m for m in machines or []}
        self.placement = None
        if self.machines:
            if hosts != "netns":
                raise NetworkError(f"hosts: {hosts} cannot be spread over machines; machines run namespace hosts")
            try:
                self.placement = place(fabric, list(self.machines))
            except PlacementError as exc:
                raise NetworkError(str(exc)) from None
        self.tunnels: list[ControllerTunnel] = []
        self.machine_facts: dict[str, dict] = {}
        self.fabric = fabric
        self.routing = routing
        self.failover = failover
        self.controller_delay_ms = controller_delay_ms
        self.route_groups = route_groups      # every multi-path route its own group: link bytes by destination
        self.spares_held = spares.Ledger()    # the spares the running jobs' recoveries took
        self.hosts = hosts
        self.host_limits = host_limits or {}
        self.rdma = {"transport": "uroce", "detail": "not brought up"}
        self.run_dir = run_dir or os.path.join(RUN_ROOT, f"run-{os.getpid()}-{int(time.time() * 1000)}")
        self.backend = backend(self.run_dir, **self.host_limits)
        self.delay_path = self._delay_path()        # before anything is made: DelayUnavailable, one line
        self.delays: Delays | None = None
        self.ecn_object = self._ecn_object()        # likewise: EcnUnavailable, one line
        self._check_pfc()                           # likewise: PfcUnavailable, one line
        self.pauses: pfc.Pauses | None = None
        self.pfc_last: dict = {}                    # the pause process's counters when it stopped
        self.mn: Mininet | None = None
        self.controller: Controller | None = None
        self.timings: dict[str, float] = {}
        self._lock_fd: int | None = None
        self.lifeline: lifeline.Lifeline | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> "Network":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, ready_timeout: float = 60) -> None:
        t0 = time.monotonic()
        self._check_names()
        if self.machines:
            self._check_machines()
        else:
            ovs.require_running()
        self._take_fabric_lock()
        self.timings["lock_wait_s"] = time.monotonic() - t0     # queued behind another run: not bring-up
        t0 = time.monotonic()
        self._refuse_concurrent_run()
        os.makedirs(self.run_dir, exist_ok=True)
        self.lifeline = lifeline.tie(self.run_dir, fabric_tag())     # before anything is started
        self._record(tag=fabric_tag(), cgroup=self.lifeline.cgroup if self.lifeline else None, bridges=[sysname(s.name) for s in self.fabric.switches.values()],
                     fabric=self.fabric.params.to_json(), hosts=self.hosts,
                     machines=[m.to_json() for m in self.machines.values()],
                     placement=self.placement.node_machine if self.placement else {})
        self.timings.update(self.backend.start(list(self.fabric.hosts), self._record))
        self.controller = Controller(self.run_dir, self.routing, self.failover, self.controller_delay_ms,
                                     self.route_groups)
        # The controller starts up (~0.5 s) while Mininet builds; it must listen before the switches start.
        self._record(controller_pid=self._controller_call(self.controller.launch, self.fabric))
        self._open_tunnels()
        setLogLevel("error")   # Mininet warns about br_netfilter sysctls we do not rely on
        self.mn = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, waitConnected=False)
        self.mn.addController(LoopbackController("tb-c0", ip="127.0.0.1", port=self.controller.port))
        self._add_nodes()
        self.mn.build()
        self._record(host_pids={h.name: h.pid for h in self.mn.hosts},
                     switch_pids={s.name: s.pid for s in self.mn.switches},
                     controller_pid=self._controller_call(self.controller.wait_listening))
        self.mn.controllers[0].port = self.controller.port      # a new one if another process took the first
        self.mn.start()
        self._patient_controller_connections()
        self._configure_hosts()
        self.rdma = softroce.attach(self)      # kernel Soft-RoCE per host where the kernel has it
        self._shape()
        self._disable_standby_ports()
        self._controller_call(self.controller.wait_routes, {s.name for s in self.fabric.sdn_switches()}, ready_timeout)
        self.timings["bring_up_s"] = time.monotonic() - t0

    def stop(self) -> None:
        t0 = time.monotonic()
        try:
            if self.pauses is not None:     # before the links go: it opens every gate it closed
                self.pfc_last = self.pauses.close()
                self.pauses = None
            if self.delays is not None:     # before the links go: it puts their ends back as they were
                self.delays.close()
                self.delays = None
        except DelayError:
            pass                            # an end already gone; the helpers go with the namespaces and bridges
        try:
            if self.mn is not None:
                try:
                    try:            # one at a time, before Mininet deletes what is left at once
                        ovs.delete_bridges([sw.name for sw in self.mn.switches if type(sw) is OVSSwitch])
                    except (ovs.OVSError, subprocess.TimeoutExpired):
                        pass
                    self.mn.stop()
                finally:
                    self.mn = None
        finally:
            self.backend.stop()
        for tunnel in self.tunnels:
            tunnel.close()
        self.tunnels = []
        for machine in self.machines.values():
            machine.close()
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        if self.lifeline is not None:
            self.lifeline.cut()         # anything a host program left running goes with the run
            self.lifeline = None
        shutil.rmtree(self.run_dir, ignore_errors=True)     # nothing left for `testbed clean` to do
        if self._lock_fd is not None:
            runstate.release_lock(self._lock_fd)
            self._lock_fd = None
        self.timings["tear_down_s"] = time.monotonic() - t0

    def _check_names(self) -> None:
        """The fabric tag and the device names it gives, before anything is made."""
        try:
            fabric_tag()
        except ValueError as exc:
            raise NetworkError(str(exc)) from None
        overlong = overlong_names(self.fabric)
        if overlong:
            raise NetworkError(f"device names longer than {IFNAMSIZ} characters: {', '.join(overlong[:3])}"
                               f"{' ...' if len(overlong) > 3 else ''}; use fewer ports per switch"
                               f"{' or no ' + TAG_VARIABLE if fabric_tag() else ''}")

    def _take_fabric_lock(self) -> None:
        """One fabric per machine and fabric tag. A second run is refused, or with TESTBED_WAIT_FOR_FABRIC=SECONDS
        queues behind the running one."""
        try:
            self._lock_fd = runstate.take_lock(float(os.environ.get("TESTBED_WAIT_FOR_FABRIC", "0") or 0))
        except runstate.FabricBusy as exc:
            raise NetworkError(str(exc)) from None

    def _refuse_concurrent_run(self) -> None:
        """A tag's switch names are the same in every run: a second fabric would clobber a running one."""
        mine = {sysname(s) for s in self.fabric.switches}
        for run_dir, state in runstate.all_runs().items():
            if state.get("owner_pid") != os.getpid() and runstate.alive(state) and mine & set(state.get("bridges", [])):
                raise NetworkError(f"another testbed run (pid {state['owner_pid']}) is using this machine's fabric "
                                   f"names; wait for it to finish (or `testbed clean` if it is stuck)")

    # -- building -----------------------------------------------------------------------------
    def _add_nodes(self) -> None:
        fab, mn = self.fabric, self.mn
        protocols = "OpenFlow13,OpenFlow15"
        dp = "user" if ovs.datapath() == "user" else "kernel"
        for sw in fab.switches.values():
            on = self._on_machine(sw.name)
            if sw.sdn:
                mn.addSwitch(sysname(sw.name), cls=MachineSwitch if on else OVSSwitch, **on, protocols=protocols,
                             datapath=self.machine_facts[on["machine"].name]["datapath"] if on else dp,
                             dpid=f"{sw.dpid:016x}", failMode="secure", inband=False)
            else:
                mn.addSwitch(sysname(sw.name), cls=MachineBridge if on else LinuxBridge, **on)
        for h in fab.hosts.values():
            on = self._on_machine(h.name)
            params = {"cls": MachineHost, **on} if on else self.backend.node_params(h.name)
            mn.addHost(h.name, ip=f"{h.ip}/16", mac=h.mac, **params)
        for index, l in enumerate(fab.links):
            a_host, b_host = l.a in fab.hosts, l.b in fab.hosts
            n1 = mn.get(l.a if a_host else sysname(l.a))
            n2 = mn.get(l.b if b_host else sysname(l.b))
            i1, i2 = interface(fab, l.a, l.a_port), interface(fab, l.b, l.b_port)     # as `topo --json` names them
            cls, extra = OVSLink if self.is_patch(l) else Link, {}
            if self.machines and cls is Link:       # a veth within a machine, VXLAN between machines
                cls, extra = MachineLink, {"vni": VNI_BASE + index, "mtu": l.mtu}
            mn.addLink(n1, n2, port1=l.a_port, port2=l.b_port, intfName1=i1, intfName2=i2, cls=cls, **extra)

    def is_patch(self, link) -> bool:
        """An OVS patch port: only within one machine."""
        return is_patch(self.fabric, link) and not self.crosses(link)

    # -- machines -----------------------------------------------------------------------------
    def machine_of(self, node: str) -> Machine | None:
        """The machine that emulates a switch or host; None: this one."""
        return self.machines[self.placement.node_machine[node]] if self.placement else None

    def _on_machine(self, node: str) -> dict:
        machine = self.machine_of(node)
        return {"machine": machine} if machine else {}

    def crosses(self, link) -> bool:
        return self.placement is not None and self.machine_of(link.a) != self.machine_of(link.b)

    def run_at(self, node: str, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        """A command in the root namespace of the machine that emulates `node` (its switch ports, its OVS)."""
        return self._run_on(self.machine_of(node), argv, check)

    def _run_on(self, machine: Machine | None, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        if machine is None:
            return subprocess.run(argv, check=check, capture_output=True, text=True)
        try:
            return machine.run(argv, check=check)
        except MachineError as exc:
            raise NetworkError(str(exc)) from None

    def popen_at(self, node: str, argv: list[str], **params) -> subprocess.Popen:
        """A process in the root namespace of the machine that emulates `node` (a capture at a switch port)."""
        machine = self.machine_of(node)
        return machine.popen(argv, **params) if machine else subprocess.Popen(argv, **params)

    def _check_machines(self) -> None:
        """Every machine answers, has what it needs, and carries the links between machines at their MTU."""
        try:
            self.machine_facts = {m.name: check_machine(m) for m in self.machines.values()}
            for l in self.placement.crossing(self.fabric):
                a, b = self.machine_of(l.a), self.machine_of(l.b)
                need = l.mtu + VXLAN_OVERHEAD
                have = underlay_mtu(a, b)
                if have < need:
                    raise NetworkError(f"the {l.kind} link {l.a}-{l.b} crosses from {a.name} to {b.name} with MTU "
                                       f"{need - VXLAN_OVERHEAD}: VXLAN needs an underlay MTU of {need}, and "
                                       f"{a.name}'s is {have} (raise it, or lower fabric.{'hb' if l.kind == 'hb' else 'nic'}_mtu)")
        except MachineError as exc:
            raise NetworkError(str(exc)) from None

    def _open_tunnels(self) -> None:
        """Each machine's switches reach the controller at 127.0.0.1 there, tunnelled to loopback here."""
        try:
            for machine in self.machines.values():
                self.tunnels.append(ControllerTunnel(machine, self.controller.port))
            self._record(tunnel_pids=[t.proc.pid for t in self.tunnels])
            for tunnel in self.tunnels:
                tunnel.wait()
        except MachineError as exc:
            raise NetworkError(str(exc)) from None

    def _configure_hosts(self) -> None:
        fab = self.fabric
        nic_peers = list(fab.hosts.values())
        for h in fab.hosts.values():
            node = self.mn.get(h.name)
            lines = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
                     f"ip link set eth0 mtu {fab.attachment(h.name).mtu} address {h.mac}"]
            neigh = [f"neigh replace {p.ip} lladdr {p.mac} dev eth0 nud permanent"
                     for p in nic_peers if p.name != h.name]
            if h.hb_ip:
                lines += [f"ip link set eth1 mtu {fab.attachment(h.name, 'hb').mtu} address {h.hb_mac}",
                          f"ip addr replace {h.hb_ip}/24 dev eth1", "ip link set eth1 up"]
                neigh += [f"neigh replace {p.hb_ip} lladdr {p.hb_mac} dev eth1 nud permanent"
                          for p in fab.hosts.values() if p.hb_ip and p.server == h.server and p.name != h.name]
            batch = os.path.join(self.run_dir, f"neigh-{h.name}")
            with open(batch, "w") as f:
                f.write("\n".join(neigh) + "\n")
            lines.append(f"ip -batch {batch}")
            out = node.cmd(" && ".join(lines) + " || echo TESTBED-FAILED")
            if "TESTBED-FAILED" in out:
                raise NetworkError(f"configuring host {h.name} failed: {out.strip()}")

    def set_host_port(self, host: str, port: int, up: bool) -> None:
        set_host_port(self.host(host), self.run_dir, host, port, up)

    def _patient_controller_connections(self) -> None:
        """OVS drops a switch's controller connection when an echo goes unanswered for 5 s (its default probe),
        and the reconnect reinstalls every rule, their counters from 0. Our controller is one Python process on a
        shared machine: a flood of packet-ins (a host's IGMP storm, round-robin spraying) can queue an echo
        behind seconds of them, so the switches wait longer before they give up on it."""
        for machine, bridges in self.bridges_by_machine().items():
            sets = [arg for br in bridges for arg in ("--", "set", "controller", br,
                                                      f"inactivity_probe={CONTROLLER_PROBE_MS}")]
            self._run_on(machine, ["ovs-vsctl", "--timeout=20", *sets])

    def _disable_standby_ports(self) -> None:
        """Spares' NIC ports are cabled but disabled, until a job brings a spare onto its rail (testbed.fabric.spares)."""
        for l in self.fabric.links:
            if l.standby:
                self.run_at(l.b, ["ovs-ofctl", "-O", "OpenFlow13", "mod-port", sysname(l.b), str(l.b_port), "down"])

    def _delay_path(self) -> str | None:
        """How the links' delays are made here (testbed.fabric.delay), None if no link has one."""
        delayed = [l for l in self.fabric.links if l.delay_us or l.loss]
        if not delayed:
            return None
        if self.machines:
            raise NetworkError(f"link delay ({delayed[0].name}) is not made on fabrics spread over machines")
        return choose_path()

    def _ecn_object(self) -> str | None:
        """The compiled ECN program where fabric.ecn marks any port (testbed.fabric.ecn), None otherwise."""
        if not ecn.port_ends(self.fabric):
            return None
        if self.machines:
            raise ecn.EcnUnavailable("fabric.ecn: ECN marking is not made on fabrics spread over machines")
        ecn.require()
        return ecn.compiled()

    def _check_pfc(self) -> None:
        if not self.fabric.params.pfc:
            return
        if self.machines:
            raise pfc.PfcUnavailable("fabric.pfc: pauses are not made on fabrics spread over machines")
        wrong = pfc.problems(self.fabric)
        if wrong:
            raise pfc.PfcUnavailable(wrong[0])

    def _start_pauses(self) -> None:
        """The pause process (fabric.pfc), once every gate exists."""
        plan = pfc.Plan.of(self.fabric, lambda host: f"/proc/{self.mn.get(host).pid}/ns/net")
        if self.ecn_object is not None:     # a paused port that marks: its program's queue pauses with it
            marking = {switch_port(node, port) for node, port, _ in ecn.port_ends(self.fabric)}
            names = ecn.map_names()
            plan = dataclasses.replace(plan, gates={
                name: dataclasses.replace(g, ecn_pause=ecn.maps(g.dev, names=names)["ecn_pause"])
                if g.netns is None and g.dev in marking else g for name, g in plan.gates.items()})
        self.pauses = pfc.Pauses(plan)
        self._record(pfc_pids=[self.pauses.pid])

    def pfc_stats(self) -> dict:
        """The pause process's counters (pfc.Pausing.counters and its loop's); empty without fabric.pfc."""
        if self.pauses is None:
            return self.pfc_last
        try:
            return self.pauses.stats()
        except pfc.PfcError:
            return {}

    def pfc_totals(self) -> dict:
        """{pauses, paused_s} over every gate, now (zeros without fabric.pfc)."""
        return pfc.totals(self.pfc_stats())

    def _mark_ecn(self) -> None:
        """The ECN program on every marking switch port's egress, with its link's rate, burst and queue."""
        ends = ecn.port_ends(self.fabric)
        for node, port, _ in ends:
            ecn.attach(switch_port(node, port), self.ecn_object)
        names = ecn.map_names()
        for node, port, l in ends:
            t = ecn.Thresholds.of(self.fabric.params.ecn_thresholds(l.kind))
            ecn.configure(switch_port(node, port), ecn.config(l.mbps, l.mtu, l.queue_bytes, t), names=names)

    def ecn_counters(self) -> dict[str, dict[str, int]]:
        """Switch port device -> what its ECN program counted (empty without fabric.ecn; a port whose device is
        gone is left out)."""
        if self.ecn_object is None:
            return {}
        out, names = {}, ecn.map_names()
        for node, port, _ in ecn.port_ends(self.fabric):
            dev = switch_port(node, port)
            try:
                out[dev] = ecn.counters(dev, names=names)
            except (ecn.EcnUnavailable, KeyError):
                continue
        return out

    def _shape(self) -> None:
        """tbf at both ends of every shaped link, heartbeats first (the host side in the host's namespace); a
        delayed link's ends get their rate and queue with the delay (testbed.fabric.delay), which then owns their
        qdiscs."""
        fab, cmds, delayed = self.fabric, {}, []
        gated = bool(fab.params.pfc)        # every shaped end's data queue gated: PFC may pause it
        for l in fab.links:
            if self.is_patch(l):
                continue
            ends = []
            for node, port in ((l.a, l.a_port), (l.b, l.b_port)):
                if node in fab.hosts:
                    dev, netns = f"eth{port}", f"/proc/{self.mn.get(node).pid}/ns/net"
                    if l.shaped and not (l.delay_us or l.loss):
                        said = self.mn.get(node).cmd(" && ".join(shape(dev, l, pfc.gate_limit(l, True) if gated else None))
                                                     + " || echo TESTBED-FAILED")
                        if "TESTBED-FAILED" in said:
                            raise NetworkError(f"shaping {node} {dev} failed: {said.strip()}")
                else:
                    dev, netns = switch_port(node, port), None
                    mine = cmds.setdefault(self.machine_of(node), [])
                    # no IPv6 of the root namespace's own (router solicitations, MLD reports) on the wire: on a
                    # link between two switches it would reach the other switch and its port counters
                    ipv6 = f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"
                    mine.append(f"[ ! -e {ipv6} ] || echo 1 > {ipv6}")
                    if l.mtu != 1500:         # veths come up at 1500
                        mine.append(f"ip link set {dev} mtu {l.mtu}")
                    if l.shaped and not (l.delay_us or l.loss):
                        mine += shape(dev, l, pfc.gate_limit(l, False) if gated else None)
                ends.append(End.of(l, dev, netns))
            if l.delay_us or l.loss:        # the delay path makes a link's loss too
                delayed.append(LinkDelay(format(len(delayed), "x"), *ends, delay_us=l.delay_us, loss=l.loss))
        for machine, lines in cmds.items():
            if machine is None:         # one tc for all the switch ports' qdiscs: a fork per command cost seconds
                tc = [line[len("tc "):] for line in lines if line.startswith("tc ")]
                lines = [line for line in lines if not line.startswith("tc ")]
            for script in scripts_of(lines):
                self._run_on(machine, ["sh", "-ec", script])
            if machine is None and tc:
                done = subprocess.run(["tc", "-batch", "-"], input="\n".join(tc) + "\n", capture_output=True,
                                      text=True)
                if done.returncode:
                    raise NetworkError(f"shaping the switch ports failed: {done.stderr.strip()[:300]}")
        if self.ecn_object:
            self._mark_ecn()            # before the delays: their divert goes after it on the same egress
        if fab.params.pfc:
            self._start_pauses()
        if delayed:
            self.delays = Delays(self.delay_path)
            try:
                for link in delayed:
                    self.delays.apply(link)
            finally:
                self._record(**self.delays.state())

    def _controller_call(self, fn, *args):
        try:
            return fn(*args)
        except ControllerError as exc:
            raise NetworkError(str(exc)) from None

    # -- use ----------------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        return self.mn.get(name)

    def sdn_bridges(self) -> dict[str, str]:
        return {sysname(s.name): s.name for s in self.fabric.sdn_switches()}

    def counters(self) -> dict[str, dict[str, int]]:
        """"SWITCH:PORT" -> byte and packet counters of every SDN switch port, now."""
        bridges, raw = self.sdn_bridges(), {}
        for machine, group in self.bridges_by_machine().items():
            raw.update(ovs.port_counters(group, run=machine.run if machine else None))
        return {f"{bridges[br]}:{port}": c for (br, port), c in sorted(raw.items())}

    def flow_bytes(self, limit_s: float = 5.0) -> dict[str, dict[str, int]]:
        """SWITCH -> the bytes each of its flows forwarded, now (ovs.dump_flow_bytes): a route's counter is
        its destination's traffic through the switch. The multicast trees' deleted flows count too, from the
        controller's record of their last counters: read once no deletion awaits its count, and again if one
        was counted during the dump (then the flow was in neither or in both)."""
        if self.controller is None:
            return self._dump_flow_bytes()
        deadline = time.monotonic() + limit_s
        while True:
            removed = self.controller.multicast_removed()
            if removed["pending"] and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            live = self._dump_flow_bytes()
            if self.controller.multicast_removed()["bytes"] == removed["bytes"] or time.monotonic() >= deadline:
                break
        for sw, flows in removed["bytes"].items():
            for key, n in flows.items():
                live.setdefault(sw, {})[key] = live.get(sw, {}).get(key, 0) + n
        return live

    def _dump_flow_bytes(self) -> dict[str, dict[str, int]]:
        bridges, out = self.sdn_bridges(), {}
        for machine, group in self.bridges_by_machine().items():
            run = machine.run if machine else None
            ovs.wait_revalidators(run)
            out.update({bridges[br]: ovs.dump_flow_bytes(br, run) for br in group})
        return out

    def bridges_by_machine(self) -> dict:
        """Machine (None: this one) -> the SDN bridges it runs."""
        out: dict = {}
        for bridge, switch in self.sdn_bridges().items():
            out.setdefault(self.machine_of(switch), []).append(bridge)
        return out

    def controller_view(self) -> dict:
        """The controller's state: installed switches, ports it saw down, route-update events."""
        return self.controller.view()

    def multicast_groups(self) -> dict:
        return self.controller.multicast_groups()

    def multicast_installed(self) -> bool:
        return self.controller.multicast_installed()

    def multicast_group_hosts(self) -> dict[str, list[str]]:
        """group -> every host that joined it (the controller's record, kept after the group's trees went)."""
        return self.controller.multicast_removed()["group_hosts"] if self.controller else {}

    def multicast_installed_members(self) -> dict[str, list[str]]:
        return self.controller.installed_members()

    def _record(self, **items) -> None:
        """Merge into the run's state file, which `testbed clean` reads after a crash."""
        runstate.record(self.run_dir, **items)


ARG_MAX_BYTES = 64 << 10       # one argument may not exceed 128 KiB (MAX_ARG_STRLEN): 64 fabric hosts' ports do


def scripts_of(lines: list[str], limit: int = ARG_MAX_BYTES) -> list[str]:
    """Shell lines joined into as few scripts as fit one argument each, in order."""
    scripts, current, size = [], [], 0
    for line in lines:
        if current and size + len(line) + 1 > limit:
            scripts.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    return scripts + (["\n".join(current)] if current else [])
