"""A private L2 segment of kernel-rxe guests (:class:`RxeLan`), and running perftest-style tool pairs on it.

Example::

    with RxeLan(subnet="10.77.0.0/24") as lan:
        a, b = lan.guest(lan.addr(1)), lan.guest(lan.addr(2))
        a.start(); b.start()
        srv, cli = run_pair(a, b, f"ib_write_bw -d rxe0 -F -x {a.gid_index}",
                            f"ib_write_bw -d rxe0 -F -x {b.gid_index} {{server}}")
        print(parse_perftest(cli.output))
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tools.rxe_guest import GuestResult, RxeGuest, RxeGuestError, run_ip

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


def run_pair(server: RxeGuest, client: RxeGuest, server_cmd: str, client_cmd: str,
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
            run_ip("link", "set", "lo", "up", netns=self.netns)
            run_ip("link", "add", self.bridge, "type", "bridge", "stp_state", "0", "mcast_snooping", "0",
                   netns=self.netns)
            run_ip("link", "set", self.bridge, "up", netns=self.netns)
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
        run_ip("link", "add", outer, "mtu", str(mtu), "type", "veth", "peer", "name", inner, "netns", ns,
               netns=self.netns)
        run_ip("link", "set", outer, "master", self.bridge, "up", netns=self.netns)
        run_ip("link", "set", "lo", "up", netns=ns)
        run_ip("link", "set", inner, "mtu", str(mtu), "up", netns=ns)
        run_ip("addr", "add", f"{ip}/{self.net.prefixlen}", "dev", inner, netns=ns)
        return ns

    def capture(self, path: str | Path, bpf: str = "udp port 4791", snaplen: int = 0) -> subprocess.Popen:
        """Start tcpdump on the bridge writing to path; stop it with :meth:`stop_capture`.

        Whole frames are kept (snaplen defaults to the bridge MTU + Ethernet header); the kernel buffer is
        sized so that bursts are not dropped while the emulation keeps the CPUs busy.
        """
        if not snaplen:
            r = run_ip("-o", "link", "show", "dev", self.bridge, netns=self.netns, check=False).stdout
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
