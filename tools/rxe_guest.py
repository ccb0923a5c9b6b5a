"""One Linux guest with kernel Soft-RoCE (rdma_rxe) under QEMU/TCG, reachable through a TAP.

The stock Debian 6.1 kernel under QEMU's software emulation brings ``rdma_rxe`` to machines without kernel RDMA.
:class:`RxeGuest` boots it (image: :mod:`tools.rxe_guest_image`) with a virtio NIC on a TAP, waits until ``rxe0``
is ACTIVE, runs shell commands over the serial console (output and exit status come back) and tears it all down.
The TAP is its only network, nothing routed: make it a port of a Linux or OVS bridge (:class:`tools.rxe_lan.RxeLan`).

Example::

    with RxeGuest("10.77.0.1", tap="tb-rxe0", bridge="tb-rxebr0") as g:
        print(g.run("ibv_devinfo").output)
        srv = g.spawn(f"ib_write_bw -d rxe0 -x {g.gid_index} -F")
        ...
        srv.wait(30)
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import ipaddress
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tools.rxe_guest_image import BUILD_SCRIPT, DEFAULT_IMAGE_DIR, QEMU, image_files

DEFAULT_KERNEL_ARGS = os.environ.get("RXE_GUEST_KERNEL_ARGS", "")

_LIVE: "set[RxeGuest]" = set()
_LIVE_LOCK = threading.Lock()


class RxeGuestError(RuntimeError):
    """The guest could not be started, died, or did not answer in time."""


def run_ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``ip ARGS`` (in ``netns`` if given); a failure raises RxeGuestError when ``check``."""
    cmd = (["ip", "netns", "exec", netns] if netns else []) + ["ip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RxeGuestError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def _link_exists(name: str, netns: str | None = None) -> bool:
    return run_ip("link", "show", "dev", name, netns=netns, check=False).returncode == 0


def _set_pdeathsig() -> None:  # runs in the child before exec: die with the parent
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


@dataclass
class GuestResult:
    status: int  # exit status of the command in the guest (negative: killed by that signal number)
    output: str  # stdout and stderr, interleaved

    @property
    def ok(self) -> bool:
        return self.status == 0


class GuestProcess:
    """A command running in the guest (see :meth:`RxeGuest.spawn`)."""

    def __init__(self, guest: "RxeGuest", cid: int, cmd: str):
        self.guest, self.id, self.cmd = guest, cid, cmd
        self.pid: int | None = None  # guest PID (== its process group)
        self._chunks: list[str] = []
        self.status: int | None = None
        self._done = threading.Event()
        self._started = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None, check: bool = False) -> GuestResult:
        """Wait for the command to finish. On timeout it is killed and RxeGuestError raised."""
        if not self._done.wait(timeout):
            self.kill()
            self._done.wait(3)
            raise RxeGuestError(f"{self.guest.name}: command timed out after {timeout}s: {self.cmd!r}\n"
                                f"output so far unknown; console tail:\n{self.guest.console_tail()}")
        if self.status is None:
            raise RxeGuestError(f"{self.guest.name}: guest stopped while running {self.cmd!r}")
        res = GuestResult(self.status, self.output)
        if check and not res.ok:
            raise RxeGuestError(f"{self.guest.name}: {self.cmd!r} exited {res.status}:\n{res.output}")
        return res

    @property
    def output(self) -> str:
        try:
            return base64.b64decode("".join(self._chunks)).decode(errors="replace")
        except ValueError:
            return "".join(self._chunks)

    def kill(self, sig: int = signal.SIGTERM) -> None:
        """Signal the command's process group in the guest."""
        self._started.wait(10)  # the guest must have reported the PID, else the signal would be lost
        if not self.done:
            self.guest._send(f"@@K {self.id} {int(sig)}")


class RxeGuest:
    """One QEMU/TCG guest running Linux with kernel rxe (``rxe0`` on ``eth0``).

    ``RxeGuest(ip, *, tap=None, mac=None, prefixlen=24, bridge=None, netns=None, mtu=1500, name=None,
    image_dir=None, mem_mb=1024, boot_timeout=90)``

    - ``ip``: IPv4 address of the guest's eth0 (``prefixlen`` bits of netmask).
    - ``tap``: TAP device name (<= 15 chars; ``tb-`` prefix recommended). If it does not exist it is created
      (and deleted by :meth:`stop`); if the caller created it, it is left in place. Default: ``tb-rxe<N>``.
    - ``mac``: guest MAC; default ``52:54:00`` + the last three bytes of ``ip``.
    - ``bridge``: if given, the TAP is enslaved to this Linux bridge (for OVS, leave it None and add the TAP
      with ``ovs-vsctl add-port`` yourself).
    - ``netns``: run QEMU (and create the TAP) inside this named network namespace.
    - ``mtu``: MTU of the TAP and of the guest's eth0 (rxe's active MTU follows it: 1500 -> 1024 B).

    :meth:`start` boots and waits for ``rxe0`` ACTIVE; :meth:`run` / :meth:`spawn` run ``sh`` commands in
    the guest; :meth:`stop` kills QEMU by PID and removes the TAP it created. Also usable as a context
    manager; guests still running at interpreter exit are stopped.
    """

    _counter = 0

    def __init__(self, ip: str, *, tap: str | None = None, mac: str | None = None, prefixlen: int = 24,
                 bridge: str | None = None, netns: str | None = None, mtu: int = 1500, name: str | None = None,
                 image_dir: Path | str | None = None, mem_mb: int = 1024, boot_timeout: float = 90,
                 die_with_parent: bool = True, kernel_args: str = DEFAULT_KERNEL_ARGS):
        addr = ipaddress.IPv4Address(ip)
        RxeGuest._counter += 1
        self.ip = str(addr)
        self.prefixlen = prefixlen
        self.tap = tap or f"tb-rxe{os.getpid() % 10000}g{RxeGuest._counter}"[:15]
        if len(self.tap) > 15:
            raise ValueError(f"TAP name too long: {self.tap}")
        b = addr.packed
        self.mac = mac or "52:54:00:%02x:%02x:%02x" % (b[1], b[2], b[3])
        self.bridge, self.netns, self.mtu = bridge, netns, mtu
        self.name = name or self.tap
        self.image_dir = Path(image_dir) if image_dir else DEFAULT_IMAGE_DIR
        self.mem_mb, self.boot_timeout, self.die_with_parent = mem_mb, boot_timeout, die_with_parent
        self.kernel_args = kernel_args
        self.proc: subprocess.Popen | None = None
        self.boot_seconds: float | None = None  # wall time from QEMU start to rxe0 ACTIVE
        self.info: dict[str, str] = {}  # from the guest's READY line: kernel, uptime, mac, ip, gidx
        self._own_tap = False
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._console: list[str] = []
        self._procs: dict[int, GuestProcess] = {}
        self._next_id = 0
        self._ready = False
        self._failed: str | None = None
        self._reader: threading.Thread | None = None
        self._t0 = 0.0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "RxeGuest":
        """Boot the guest and wait until rxe0 is ACTIVE (raises RxeGuestError, cleaning up, on failure)."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> "RxeGuest":
        """Start QEMU without waiting for the guest (boot several guests in parallel, then wait_ready)."""
        files = image_files(self.image_dir)
        if files is None:
            raise RxeGuestError(f"guest image missing in {self.image_dir}: run {BUILD_SCRIPT}")
        kernel, initrd = files
        try:
            self._setup_tap()
            append = (f"console=ttyS0 quiet loglevel=1 panic=-1 {self.kernel_args} "
                      f"tb.ip={self.ip}/{self.prefixlen} tb.mtu={self.mtu}").replace("  ", " ")
            cmd = [QEMU, "-accel", "tcg", "-cpu", "max", "-m", str(self.mem_mb), "-smp", "1",
                   "-display", "none", "-nodefaults", "-no-reboot", "-monitor", "none",
                   "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
                   "-netdev", f"tap,id=n0,ifname={self.tap},script=no,downscript=no",
                   "-device", f"virtio-net-pci,netdev=n0,mac={self.mac}",
                   "-serial", "stdio"]
            if self.netns:
                cmd = ["ip", "netns", "exec", self.netns] + cmd
            self._t0 = time.monotonic()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, bufsize=0,
                                         preexec_fn=_set_pdeathsig if self.die_with_parent else None)
            with _LIVE_LOCK:
                _LIVE.add(self)
            self._reader = threading.Thread(target=self._read_loop, name=f"rxe-guest-{self.name}", daemon=True)
            self._reader.start()
            return self
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float | None = None) -> "RxeGuest":
        """Wait until rxe0 is ACTIVE; on failure or timeout the guest is stopped and RxeGuestError raised."""
        if self.proc is None:
            raise RxeGuestError(f"{self.name}: not launched")
        try:
            deadline = self._t0 + (timeout if timeout is not None else self.boot_timeout)
            with self._cond:
                while not self._ready and self._failed is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RxeGuestError(f"{self.name}: rxe0 not ACTIVE after {self.boot_timeout}s\n"
                                            f"{self.console_tail()}")
                    self._cond.wait(min(left, 0.5))
                if self._failed is not None:
                    raise RxeGuestError(f"{self.name}: guest failed: {self._failed}\n{self.console_tail()}")
            if self.boot_seconds is None:
                self.boot_seconds = time.monotonic() - self._t0
            return self
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill QEMU (by PID) and delete the TAP if this object created it. Safe to call repeatedly."""
        p = self.proc
        if p is not None:
            if p.poll() is None:
                try:
                    p.terminate()
                    p.wait(3)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(3)
                except ProcessLookupError:
                    pass
            for f in (p.stdin, p.stdout):
                try:
                    f and f.close()
                except OSError:
                    pass
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(2)
        if self._own_tap:
            run_ip("link", "del", "dev", self.tap, netns=self.netns, check=False)
            self._own_tap = False
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def __enter__(self) -> "RxeGuest":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """PID of the QEMU process on the host."""
        return self.proc.pid if self.proc else None

    @property
    def gid_index(self) -> int:
        """Index of rxe0's RoCE v2 IPv4-mapped GID (for ``ibv_rc_pingpong -g`` / perftest ``-x``)."""
        return int(self.info.get("gidx", "1"))

    # ------------------------------------------------------------------ commands
    def spawn(self, cmd: str) -> GuestProcess:
        """Start a ``sh`` script in the guest (own session, stdin /dev/null) and return at once."""
        if not self._ready or not self.alive:
            st = self.proc.poll() if self.proc else None
            raise RxeGuestError(f"{self.name}: guest not running (QEMU exit status {st})\n{self.console_tail()}")
        payload = base64.b64encode(cmd.encode()).decode()
        if len(payload) > 3800:
            raise ValueError("command too long for the serial protocol (max ~2.8 KB)")
        with self._lock:
            self._next_id += 1
            gp = GuestProcess(self, self._next_id, cmd)
            self._procs[gp.id] = gp
        self._send(f"@@C {gp.id} {payload}")
        return gp

    def run(self, cmd: str, timeout: float = 60, check: bool = False) -> GuestResult:
        """Run a ``sh`` script in the guest and wait for its exit status and output."""
        return self.spawn(cmd).wait(timeout, check=check)

    def wait_listen(self, port: int, timeout: float = 20, proc: GuestProcess | None = None) -> bool:
        """Wait until something in the guest listens on TCP ``port`` (False on timeout or if proc ended)."""
        deadline = time.monotonic() + timeout
        pat = ":%04X 00000000:0000 0A" % port
        while time.monotonic() < deadline and not (proc is not None and proc.done):
            if self.run(f"grep -q '{pat}' /proc/net/tcp /proc/net/tcp6 2>/dev/null", timeout=10).ok:
                return True
            time.sleep(0.1)
        return False

    def console_tail(self, n: int = 30) -> str:
        """Last lines the guest printed on its console outside the command protocol (boot messages)."""
        with self._lock:
            return "\n".join(self._console[-n:])

    # ------------------------------------------------------------------ internals
    def _setup_tap(self) -> None:
        if not _link_exists(self.tap, self.netns):
            if not self.tap.startswith("tb-"):
                raise RxeGuestError(f"refusing to create TAP {self.tap!r}: testbed objects are named tb-*")
            run_ip("tuntap", "add", "dev", self.tap, "mode", "tap", netns=self.netns)
            self._own_tap = True
        run_ip("link", "set", "dev", self.tap, "mtu", str(self.mtu), netns=self.netns)
        if self.bridge:
            run_ip("link", "set", "dev", self.tap, "master", self.bridge, netns=self.netns)
        run_ip("link", "set", "dev", self.tap, "up", netns=self.netns)

    def _send(self, line: str) -> None:
        p = self.proc
        if p is None or p.poll() is not None or p.stdin is None:
            raise RxeGuestError(f"{self.name}: guest not running")
        try:
            p.stdin.write(line.encode() + b"\n")
            p.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as e:
            raise RxeGuestError(f"{self.name}: serial console closed: {e}") from e

    _LINE = re.compile(r"@@(READY|FAIL|B|O|E) ?(.*)")

    def _read_loop(self) -> None:
        f = self.proc.stdout
        buf = b""
        while True:
            try:
                chunk = f.read1(65536) if hasattr(f, "read1") else os.read(f.fileno(), 65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                self._handle(raw.decode(errors="replace").rstrip("\r"))
        with self._cond:
            if not self._ready and self._failed is None:
                self._failed = f"QEMU exited (status {self.proc.poll()})"
            for gp in self._procs.values():
                gp._started.set()
                gp._done.set()
            self._cond.notify_all()

    def _handle(self, line: str) -> None:
        i = line.find("@@")
        m = self._LINE.match(line[i:]) if i >= 0 else None
        with self._cond:
            if m is None:
                self._console.append(line)
                del self._console[:-500]
                return
            kind, rest = m.groups()
            if kind == "READY":
                self.info = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
                self._ready = True
                self._cond.notify_all()
            elif kind == "FAIL":
                self._failed = rest
                self._cond.notify_all()
            else:
                parts = rest.split(" ", 1)
                try:
                    gp = self._procs.get(int(parts[0]))
                except ValueError:
                    gp = None
                if gp is None:
                    return
                arg = parts[1] if len(parts) > 1 else ""
                if kind == "B":
                    gp.pid = int(arg) if arg.isdigit() else None
                    gp._started.set()
                elif kind == "O":
                    gp._chunks.append(arg.strip())
                elif kind == "E":
                    st = int(arg) if arg.strip().lstrip("-").isdigit() else 255
                    gp.status = -(st - 128) if st > 128 else st  # sh reports signal N as 128+N
                    gp._started.set()
                    gp._done.set()
                    self._procs.pop(gp.id, None)


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for g in live:
        g.stop()
