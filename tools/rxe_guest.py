"""Linux kernel Soft-RoCE (rdma_rxe) in a QEMU guest, reachable through a TAP.

The machines this testbed runs on have no kernel RDMA, but the stock Debian 6.1 kernel runs under QEMU's
software emulation (TCG) and brings its own ``rdma_rxe``. :class:`RxeGuest` boots one such guest with a
virtio NIC on a TAP device, waits until ``rxe0`` is ACTIVE, runs shell commands in it over the serial
console (output and exit status come back) and tears everything down again.

The guest image (kernel + busybox initramfs with rdma-core, perftest, python3 and pyverbs) is prepared by
``scripts/rxe-guest-build`` into ``build/rxe-guest/``.

The TAP is the guest's only network: attach it to a Linux bridge or an Open vSwitch bridge (it is an
ordinary port) to put the guest on an emulated fabric. Nothing else is connected and no routing is set up.

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
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent   # tools/ sits at the repository's top
DEFAULT_IMAGE_DIR = Path(os.environ.get("RXE_GUEST_DIR", REPO / "build" / "rxe-guest"))
BUILD_SCRIPT = REPO / "scripts" / "rxe-guest-build"
QEMU = "qemu-system-x86_64"
DEFAULT_KERNEL_ARGS = os.environ.get("RXE_GUEST_KERNEL_ARGS", "")

_LIVE: "set[RxeGuest]" = set()
_LIVE_LOCK = threading.Lock()


class RxeGuestError(RuntimeError):
    """The guest could not be started, died, or did not answer in time."""


def image_files(image_dir: Path | str | None = None) -> tuple[Path, Path] | None:
    """(kernel, initrd) of a prepared guest image, or None when it has not been built."""
    d = Path(image_dir) if image_dir else DEFAULT_IMAGE_DIR
    i = d / "initrd.gz"
    for k in (d / "vmlinux", d / "vmlinuz"):  # the uncompressed kernel boots ~2 s faster under TCG
        if k.is_file() and i.is_file():
            return k, i
    return None


def missing_requirements(image_dir: Path | str | None = None) -> str | None:
    """Why guests cannot run here (a sentence), or None if they can."""
    if os.geteuid() != 0:
        return "needs root (TAP devices)"
    if not shutil.which(QEMU):
        return f"{QEMU} not installed (apt-get install qemu-system-x86)"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun missing"
    if image_files(image_dir) is None:
        return f"guest image not built ({BUILD_SCRIPT.relative_to(REPO)})"
    return None


def image_is_current(image_dir: Path | str | None = None) -> bool:
    """Whether the image was built by the present build script (its manifest records the script's hash)."""
    import hashlib
    d = Path(image_dir) if image_dir else DEFAULT_IMAGE_DIR
    try:
        first = (d / "manifest").read_text().splitlines()[0]
        want = hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:16]
    except (OSError, IndexError):
        return False
    return f"script={want}" in first.split()


def image_has_python(image_dir: Path | str | None = None) -> bool:
    """Whether the image carries python3 + pyverbs (see RXE_GUEST_PYTHON in the build script)."""
    d = Path(image_dir) if image_dir else DEFAULT_IMAGE_DIR
    try:
        return any(l.startswith("python ") and "python3-pyverbs=" in l for l in (d / "manifest").read_text().splitlines())
    except OSError:
        return False


def ensure_image(image_dir: Path | str | None = None, timeout: float = 600) -> str | None:
    """Build the guest image if it is missing or was made by an older build script. Returns None on success,
    else the reason it is unavailable (an existing older image is still used if a rebuild fails)."""
    env = dict(os.environ)
    if image_dir:
        env["RXE_GUEST_DIR"] = str(image_dir)
    if image_files(image_dir) is None or not image_is_current(image_dir):
        if not shutil.which(QEMU):
            return f"{QEMU} not installed (apt-get install qemu-system-x86)"
        try:
            r = subprocess.run([str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{BUILD_SCRIPT.name} failed: {e}"
        if r.returncode != 0 and image_files(image_dir) is None:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return f"{BUILD_SCRIPT.name} failed: {' | '.join(tail)}"
    return missing_requirements(image_dir)


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", netns] if netns else []) + ["ip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RxeGuestError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def _link_exists(name: str, netns: str | None = None) -> bool:
    return _ip("link", "show", "dev", name, netns=netns, check=False).returncode == 0


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
            _ip("link", "del", "dev", self.tap, netns=self.netns, check=False)
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
            _ip("tuntap", "add", "dev", self.tap, "mode", "tap", netns=self.netns)
            self._own_tap = True
        _ip("link", "set", "dev", self.tap, "mtu", str(self.mtu), netns=self.netns)
        if self.bridge:
            _ip("link", "set", "dev", self.tap, "master", self.bridge, netns=self.netns)
        _ip("link", "set", "dev", self.tap, "up", netns=self.netns)

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


_PERF_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)


def parse_perftest(output: str) -> dict | None:
    """The result row of a perftest BW tool: bytes, iterations, bw_peak/bw_avg (perftest's MB/s = MiB/s),
    msg_rate (Mpps)."""
    m = _PERF_ROW.findall(output)
    if not m:
        return None
    b, it, peak, avg, rate = m[-1]
    return {"bytes": int(b), "iterations": int(it), "bw_peak_MBps": float(peak), "bw_avg_MBps": float(avg),
            "msg_rate_Mpps": float(rate)}


def run_pair(server: "RxeGuest", client: "RxeGuest", server_cmd: str, client_cmd: str,
             timeout: float = 60) -> tuple[GuestResult, GuestResult]:
    """Run a server command on one guest and, once it listens, the client command on the other.

    ``client_cmd`` may contain ``{server}`` (the server's IP). Both results are returned; the server is
    killed if the client fails first.
    """
    srv = server.spawn(server_cmd)
    # the tools listen on TCP 18515 (or -p); wait until the socket is open before starting the client
    port = re.search(r"(?:-p|--port[= ])\s*(\d+)", server_cmd)
    server.wait_listen(int(port.group(1)) if port else 18515, timeout=min(timeout, 20), proc=srv)
    cli = client.spawn(client_cmd.format(server=server.ip))
    try:
        cres = cli.wait(timeout)
    except RxeGuestError:
        srv.kill()
        raise
    try:
        sres = srv.wait(10 if cres.ok else 3)
    except RxeGuestError as e:
        sres = GuestResult(-1, str(e))
    return sres, cres


class RxeLan:
    """A private L2 segment for guests: a Linux bridge in its own network namespace, nothing else attached.

    ``RxeLan(tag=None, subnet="10.77.0.0/24")`` creates netns ``tb-rxe-<tag>`` holding bridge
    ``tb-rxebr<tag>``. :meth:`guest` makes an :class:`RxeGuest` whose TAP lives on that bridge;
    :meth:`host` adds a network namespace ``tb-rxe-<tag>-h<N>`` with a veth into the bridge (an "emulated
    host" for user-space endpoints); :meth:`capture` runs tcpdump on the bridge. :meth:`close` stops the
    guests and deletes everything by name. No address is given to the bridge and nothing is routed: the
    segment reaches nothing outside.
    """

    def __init__(self, tag: str | None = None, subnet: str = "10.77.0.0/24"):
        self.tag = tag or str(os.getpid() % 100000)
        if len(f"tb-rxebr{self.tag}") > 15 or len(f"tb-rxh{self.tag}p99") > 15:
            raise ValueError(f"tag too long: {self.tag}")
        self.netns = f"tb-rxe-{self.tag}"
        self.bridge = f"tb-rxebr{self.tag}"
        self.net = ipaddress.IPv4Network(subnet)
        self.guests: list[RxeGuest] = []
        self.hosts: list[str] = []
        self._captures: list[subprocess.Popen] = []
        self.capture_stats = ""  # tcpdump's closing statistics of the last stopped capture
        self._n = 0
        try:
            subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True, text=True)
            _ip("link", "set", "lo", "up", netns=self.netns)
            _ip("link", "add", self.bridge, "type", "bridge", "stp_state", "0", "mcast_snooping", "0",
                netns=self.netns)
            _ip("link", "set", self.bridge, "up", netns=self.netns)
        except BaseException:
            self.close()
            raise

    def addr(self, n: int) -> str:
        """The n-th address of the subnet (1-based)."""
        return str(self.net.network_address + n)

    def guest(self, ip: str, **kw) -> RxeGuest:
        """A (not yet started) guest with its TAP on this segment."""
        self._n += 1
        tap = f"tb-rxe{self.tag}g{self._n}"
        g = RxeGuest(ip, tap=tap, bridge=self.bridge, netns=self.netns, prefixlen=self.net.prefixlen, **kw)
        self.guests.append(g)
        return g

    def host(self, ip: str, mtu: int = 1500) -> str:
        """Create an emulated host (netns + veth into the bridge) with address ip; returns the netns name.

        Inside it the interface is ``tb-rxh<tag>p<N>``; run programs there with ``ip netns exec NAME``.
        """
        n = len(self.hosts) + 1
        ns = f"{self.netns}-h{n}"
        outer, inner = f"tb-rxh{self.tag}h{n}", f"tb-rxh{self.tag}p{n}"
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True, text=True)
        self.hosts.append(ns)
        _ip("link", "add", outer, "mtu", str(mtu), "type", "veth", "peer", "name", inner, "netns", ns,
            netns=self.netns)
        _ip("link", "set", outer, "master", self.bridge, "up", netns=self.netns)
        _ip("link", "set", "lo", "up", netns=ns)
        _ip("link", "set", inner, "mtu", str(mtu), "up", netns=ns)
        _ip("addr", "add", f"{ip}/{self.net.prefixlen}", "dev", inner, netns=ns)
        return ns

    def capture(self, path: str | Path, bpf: str = "udp port 4791", snaplen: int = 0) -> subprocess.Popen:
        """Start tcpdump on the bridge writing to path; stop it with :meth:`stop_capture`.

        Whole frames are kept (snaplen defaults to the bridge MTU + Ethernet header); the kernel buffer is
        sized so that bursts are not dropped while the emulation keeps the CPUs busy.
        """
        if not snaplen:
            r = _ip("-o", "link", "show", "dev", self.bridge, netns=self.netns, check=False).stdout
            m = re.search(r"mtu (\d+)", r)
            mtu = int(m.group(1)) if m else 1500
            snaplen = max(mtu, 1500) + 18
        p = subprocess.Popen(["ip", "netns", "exec", self.netns, "tcpdump", "-i", self.bridge, "-w", str(path),
                              "--immediate-mode", "-B", "65536", "-s", str(snaplen), "-n", *bpf.split()],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._captures.append(p)
        # tcpdump reports "listening on" once the capture is open
        t_end = time.monotonic() + 5
        line = b""
        while time.monotonic() < t_end and p.poll() is None:
            line = p.stderr.readline()
            if b"listening" in line:
                break
        return p

    def stop_capture(self, p: subprocess.Popen) -> None:
        if p.poll() is None:
            time.sleep(0.3)  # let the last packets be written
            p.send_signal(signal.SIGINT)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(3)
        if p in self._captures:
            self._captures.remove(p)
        if p.stderr:
            self.capture_stats = p.stderr.read().decode(errors="replace")
            p.stderr.close()

    def close(self) -> None:
        for g in self.guests:
            g.stop()
        for p in list(self._captures):
            self.stop_capture(p)
        for ns in self.hosts:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.hosts.clear()
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)

    def __enter__(self) -> "RxeLan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for g in live:
        g.stop()
