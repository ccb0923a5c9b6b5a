"""The routing controller as a process (controllers/run.py under os-ken, on loopback), and a read-only view
of what it reports: installed switches, ports it saw go down, route updates, multicast groups."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from mininet.node import RemoteController

from controllers import state
from testbed import PROJECT_ROOT
from testbed.fabric.links import controller_mode


class ControllerError(RuntimeError):
    pass


class LoopbackController(RemoteController):
    """Our controller on 127.0.0.1, for Mininet. The testbed waits for it itself: Mininet's check speaks
    telnet to the OpenFlow port and chokes on the binary HELLO it gets back."""

    def checkListening(self):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT_ATTEMPTS = 3


class PortTaken(Exception):
    """Another process listens on the port picked for the controller."""


def listens(pid: int, port: int) -> bool:
    """Whether process pid owns the socket listening on 127.0.0.1:port (/proc/net/tcp and the process's fds)."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":      # local address, LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                return True
        except OSError:
            pass
    return False


class Controller:
    """One controller process per fabric; its files live in the run directory."""

    def __init__(self, run_dir: str, routing: str, failover: bool, delay_ms: float = 0.0, route_groups: bool = False):
        self.run_dir, self.routing, self.failover, self.delay_ms = run_dir, routing, failover, delay_ms
        self.route_groups = route_groups         # a group per multi-path route: link bytes by destination
        self.port = free_port()
        self.topology_path = os.path.join(run_dir, "topology.json")
        self.state_path = os.path.join(run_dir, "controller-state.json")
        self.log_path = os.path.join(run_dir, "controller.log")
        self.proc: subprocess.Popen | None = None

    def launch(self, fabric) -> int:
        """Start it without waiting (it takes ~0.5 s to listen: the caller may build the network meanwhile);
        returns its PID. wait_listening() before any switch is pointed at it."""
        with open(self.topology_path, "w") as f:
            json.dump(fabric.to_controller(), f)
        return self._spawn()

    def wait_listening(self, timeout: float = 30) -> int:
        """Until it listens on self.port; returns its PID. free_port only picked a port: if another process
        took it first, the controller is started again on a new one (read self.port afterwards)."""
        for _ in range(PORT_ATTEMPTS):
            try:
                return self._await_listen(timeout)
            except PortTaken:
                self.stop()
                self.port = free_port()
                self._spawn()
        raise ControllerError(f"no free port for the controller after {PORT_ATTEMPTS} attempts")

    def _spawn(self) -> int:
        env = dict(os.environ, PYTHONPATH=PROJECT_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "controllers.run", "--topology", self.topology_path,
                 "--mode", controller_mode(self.routing), "--port", str(self.port), "--state", self.state_path,
                 "--delay-ms", str(self.delay_ms)] + (["--failover"] if self.failover else [])
                + (["--route-groups"] if self.route_groups else []),
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=PROJECT_ROOT, start_new_session=True)
        return self.proc.pid

    def _await_listen(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and "Address already in use" in self._tail():
                raise PortTaken()
            self._check_alive()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            except OSError:
                time.sleep(0.05)
                continue
            if listens(self.proc.pid, self.port):
                return self.proc.pid
            raise PortTaken()           # another process listens there
        raise ControllerError(f"the controller did not listen on 127.0.0.1:{self.port} within {timeout:.0f} s")

    def wait_routes(self, switches: set[str], timeout: float) -> None:
        """Wait until the controller reports every given SDN switch's routes installed."""
        deadline = time.monotonic() + timeout
        state: dict = {}
        while time.monotonic() < deadline:
            self._check_alive()
            state = self.view()
            if state.get("errors"):
                raise ControllerError(f"switches rejected the controller's rules: {state['errors'][0]}")
            if switches <= set(state.get("switches", {})):
                return
            time.sleep(0.05)
        missing = sorted(switches - set(state.get("switches", {})))
        raise ControllerError(f"routes not installed within {timeout:.0f} s on: {', '.join(missing)}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    # -- the read-only view ---------------------------------------------------------------------
    def view(self) -> dict:
        """The controller's state: installed switches, ports it saw down, route-update events ({} before any)."""
        return state.read_routing(self.state_path)

    def multicast_groups(self) -> dict:
        """The multicast app's view: group -> {members, trees (switch -> tree ports), unreachable}."""
        return state.multicast_groups(self.state_path)

    def multicast_installed(self) -> bool:
        """Whether every switch has acknowledged (barrier reply) the multicast rules of the current groups."""
        return state.multicast_installed(self.state_path)

    def installed_members(self) -> dict[str, list[str]]:
        """group -> members of the groups whose trees every switch has acknowledged ({} while any is pending)."""
        return state.installed_members(self.state_path)

    def multicast_removed(self) -> dict:
        """What the multicast trees' deleted flows forwarded, by switch and flow key; deletions not yet counted; the
        hosts that joined each group (controllers/state.py multicast_removed)."""
        return state.multicast_removed(self.state_path)

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ControllerError(f"the controller exited (status {self.proc.returncode}): {self._tail()}")

    def _tail(self) -> str:
        try:
            with open(self.log_path) as f:
                return " | ".join(line.strip() for line in f.readlines()[-3:])
        except OSError:
            return "no controller log"

