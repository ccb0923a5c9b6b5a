"""Bring a fabric model up on Mininet + Open vSwitch with the routing controller, and tear it down.

    with Network(build("rail-optimized", 2, 4), routing="ecmp") as net:
        net.host("s0g0").cmd("ping -c1 10.11.1.0")

Rail, ToR, spine and front-end switches are OVS bridges (userspace datapath here, kernel where the
module exists) controlled over OpenFlow 1.5 by controllers/fabric_app.py on loopback; HB domains are
Linux bridges. Host NICs are shaped with tbf at both ends of their veth; uplinks are OVS patch ports
(fastest here) unless oversubscribed, then tbf-shaped veths. Hosts use static neighbour entries.
Everything carries the testbed prefix and is recorded in the run directory for `testbed clean`.

Hosts are network namespaces (Mininet's hosts, the default) or Docker containers (hosts="docker",
testbed/fabric/hosts/dockerhost.py), with the same cabling, addressing and workloads.
"""
from __future__ import annotations

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
from testbed.fabric import ovs, runstate
from testbed.fabric.controller import Controller, ControllerError, LoopbackController
from testbed.fabric.hosts import BackendUnavailable, backend_class, softroce
from testbed.fabric.links import HB_MTU, interface, is_patch, mtu_of, switch_port, sysname, tbf
from testbed.fabric.topo import Fabric


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
                 controller_delay_ms: float = 0.0):
        try:
            backend = backend_class(hosts)
        except BackendUnavailable as exc:
            raise NetworkError(str(exc)) from None
        self.fabric = fabric
        self.routing = routing
        self.failover = failover
        self.controller_delay_ms = controller_delay_ms
        self.hosts = hosts
        self.host_limits = host_limits or {}
        self.rdma = {"transport": "uroce", "detail": "not brought up"}
        self.run_dir = run_dir or os.path.join(RUN_ROOT, f"run-{os.getpid()}-{int(time.time() * 1000)}")
        self.backend = backend(self.run_dir, **self.host_limits)
        self.mn: Mininet | None = None
        self.controller: Controller | None = None
        self.timings: dict[str, float] = {}
        self._lock_fd: int | None = None

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
        ovs.require_running()
        self._take_fabric_lock()
        self.timings["lock_wait_s"] = time.monotonic() - t0     # queued behind another run: not bring-up
        t0 = time.monotonic()
        self._refuse_concurrent_run()
        os.makedirs(self.run_dir, exist_ok=True)
        self._record(bridges=[sysname(s.name) for s in self.fabric.switches.values()],
                     fabric={"kind": self.fabric.kind, **self.fabric.params}, hosts=self.hosts)
        self.timings.update(self.backend.start(list(self.fabric.hosts), self._record))
        self.controller = Controller(self.run_dir, self.routing, self.failover, self.controller_delay_ms)
        self._record(controller_pid=self._controller_call(self.controller.start, self.fabric))
        setLogLevel("error")   # Mininet warns about br_netfilter sysctls we do not rely on
        self.mn = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, waitConnected=False)
        self.mn.addController(LoopbackController("tb-c0", ip="127.0.0.1", port=self.controller.port))
        self._add_nodes()
        self.mn.build()
        self._record(host_pids={h.name: h.pid for h in self.mn.hosts},
                     switch_pids={s.name: s.pid for s in self.mn.switches})
        self.mn.start()
        self._configure_hosts()
        self.rdma = softroce.attach(self)      # kernel Soft-RoCE per host where the kernel has it
        self._shape()
        self._disable_standby_ports()
        self._controller_call(self.controller.wait_routes, {s.name for s in self.fabric.sdn_switches()}, ready_timeout)
        self.timings["bring_up_s"] = time.monotonic() - t0

    def stop(self) -> None:
        t0 = time.monotonic()
        try:
            if self.mn is not None:
                try:
                    self.mn.stop()
                finally:
                    self.mn = None
        finally:
            self.backend.stop()
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        shutil.rmtree(self.run_dir, ignore_errors=True)     # nothing left for `testbed clean` to do
        if self._lock_fd is not None:
            runstate.release_lock(self._lock_fd)
            self._lock_fd = None
        self.timings["tear_down_s"] = time.monotonic() - t0

    def _take_fabric_lock(self) -> None:
        """One fabric per machine. A second run is refused, or with TESTBED_WAIT_FOR_FABRIC=SECONDS queues
        behind the running one."""
        try:
            self._lock_fd = runstate.take_lock(float(os.environ.get("TESTBED_WAIT_FOR_FABRIC", "0") or 0))
        except runstate.FabricBusy as exc:
            raise NetworkError(str(exc)) from None

    def _refuse_concurrent_run(self) -> None:
        """Switch names are the same in every run: a second fabric would clobber a running one."""
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
            if sw.sdn:
                mn.addSwitch(sysname(sw.name), cls=OVSSwitch, datapath=dp, protocols=protocols,
                             dpid=f"{sw.dpid:016x}", failMode="secure", inband=False)
            else:
                mn.addSwitch(sysname(sw.name), cls=LinuxBridge)
        for h in fab.hosts.values():
            mn.addHost(h.name, ip=f"{h.ip}/16", mac=h.mac, **self.backend.node_params(h.name))
        for l in fab.links:
            a_host, b_host = l.a in fab.hosts, l.b in fab.hosts
            n1 = mn.get(l.a if a_host else sysname(l.a))
            n2 = mn.get(l.b if b_host else sysname(l.b))
            i1, i2 = interface(fab, l.a, l.a_port), interface(fab, l.b, l.b_port)     # as `topo --json` names them
            patch = self.is_patch(l)
            mn.addLink(n1, n2, port1=l.a_port, port2=l.b_port, intfName1=i1, intfName2=i2,
                       cls=OVSLink if patch else Link)

    def is_patch(self, link) -> bool:
        return is_patch(self.fabric, link)

    def _configure_hosts(self) -> None:
        fab = self.fabric
        nic_peers = list(fab.hosts.values())
        for h in fab.hosts.values():
            node = self.mn.get(h.name)
            lines = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
                     f"ip link set eth0 mtu {fab.params['nic_mtu']} address {h.mac}"]
            neigh = [f"neigh replace {p.ip} lladdr {p.mac} dev eth0 nud permanent"
                     for p in nic_peers if p.name != h.name]
            if h.hb_ip:
                lines += [f"ip link set eth1 mtu {HB_MTU} address {h.hb_mac}",
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

    def _disable_standby_ports(self) -> None:
        """Spares' NIC ports are cabled but disabled, until a job brings a spare onto its rail (testbed.fabric.spares)."""
        for l in self.fabric.links:
            if l.standby:
                subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "mod-port", sysname(l.b), str(l.b_port), "down"],
                               check=True, capture_output=True)

    def _shape(self) -> None:
        """tbf at both ends of every shaped link (the host side in the host's namespace)."""
        fab, cmds = self.fabric, []
        for l in fab.links:
            if self.is_patch(l):
                continue
            mtu = mtu_of(fab, l)
            for node, port in ((l.a, l.a_port), (l.b, l.b_port)):
                if node in fab.hosts:
                    self.mn.get(node).cmd(tbf(f"eth{port}", l.mbps, mtu))
                else:
                    dev = switch_port(node, port)
                    if mtu != 1500:         # veths come up at 1500
                        cmds.append(f"ip link set {dev} mtu {mtu}")
                    cmds.append(tbf(dev, l.mbps, mtu))
        subprocess.run(["sh", "-c", "\n".join(cmds)], check=True, capture_output=True)

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
        bridges = self.sdn_bridges()
        raw = ovs.port_counters(list(bridges))
        return {f"{bridges[br]}:{port}": c for (br, port), c in sorted(raw.items())}

    def controller_view(self) -> dict:
        """The controller's state: installed switches, ports it saw down, route-update events."""
        return self.controller.view()

    def multicast_groups(self) -> dict:
        return self.controller.multicast_groups()

    def multicast_installed(self) -> bool:
        return self.controller.multicast_installed()

    def _record(self, **items) -> None:
        """Merge into the run's state file, which `testbed clean` reads after a crash."""
        runstate.record(self.run_dir, **items)
