"""Network-namespace helpers for tests and benchmarks: a veth pair between two namespaces, and
creating uroce devices inside a namespace from one process (sockets keep the namespace they were
created in, so one process can drive endpoints in several namespaces). Needs root."""
import contextlib
import ctypes
import os
import subprocess
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_lock = threading.Lock()


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


def enter_netns(path: str) -> None:
    """Move the calling thread into the network namespace at `path` (/proc/PID/ns/net, /run/netns/NAME) for
    good: the sockets it opens from now on, and the threads it starts, are that namespace's."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _setns(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def netns(name: str):
    """Run the body with the calling thread in network namespace `name` (from `ip netns add`)."""
    with _lock:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(own)
            os.close(target)


def sh(*args, check=True, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


class VethPair:
    """Namespaces tb-rdma-<tag>-a/-b joined by veth tb-<tag>a/tb-<tag>b with 10.<n>.0.1 and .2/24.
    switch=True puts a Linux bridge (namespace tb-rdma-<tag>-s, bridge tb-<tag>br) between them: one
    switch hop. rate_mbit: tbf on both host ends. close() removes everything (also after a failure)."""

    def __init__(self, tag: str, net: int = 77, rate_mbit=None, mtu: int = 1500, switch: bool = False):
        if len(f"tb-{tag}br") > 15:
            raise ValueError("tag too long for an interface name")
        self.ns = (f"tb-rdma-{tag}-a", f"tb-rdma-{tag}-b")
        self.sw = f"tb-rdma-{tag}-s" if switch else None
        self.ifs = (f"tb-{tag}a", f"tb-{tag}b")
        self.ips = (f"10.{net}.0.1", f"10.{net}.0.2")
        try:
            for ns in self.ns + ((self.sw,) if switch else ()):
                sh("ip", "netns", "add", ns)
            if switch:
                br = f"tb-{tag}br"
                sh("ip", "link", "add", br, "type", "bridge", "stp_state", "0", "mcast_snooping", "0", ns=self.sw)
                sh("ip", "link", "set", br, "up", ns=self.sw)
                for ns, dev in zip(self.ns, self.ifs):
                    port = f"{dev}s"
                    sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.sw)
                    sh("ip", "link", "set", port, "master", br, "mtu", mtu, "up", ns=self.sw)
            else:
                sh("ip", "link", "add", self.ifs[0], "netns", self.ns[0], "type", "veth", "peer", "name",
                   self.ifs[1], "netns", self.ns[1])
            for ns, dev, ip in zip(self.ns, self.ifs, self.ips):
                sh("ip", "addr", "add", f"{ip}/24", "dev", dev, ns=ns)
                sh("ip", "link", "set", dev, "mtu", mtu, "up", ns=ns)
                sh("ip", "link", "set", "lo", "up", ns=ns)
                if rate_mbit:
                    sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                       "burst", "32kb", "limit", "4mb", ns=ns)
        except Exception:
            self.close()
            raise

    def close(self):
        for ns in self.ns + ((self.sw,) if self.sw else ()):
            sh("ip", "netns", "del", ns, check=False)      # removes its veth ends, bridge, iptables rules
