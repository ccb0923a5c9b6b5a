"""Link delay on the path that runs here (the user-space delay line where there is no netem): two namespaces joined
by one veth link, made by the test under the testbed's prefix and fabric tag. A ping measures the configured round
trip within 10% plus a small constant, with and without a rate on the link; a burst keeps its order; jumbo frames
and TCP cross the delay intact; and removing the delay leaves the link as it was and nothing else behind."""
import hashlib
import os
import re
import statistics
import subprocess
import sys
import textwrap

import pytest

from testbed import PREFIX
from testbed.fabric.delay import Delays, End, LinkDelay, choose_path
from testbed.fabric.links import beats_first, fabric_tag, tbf

pytestmark = [pytest.mark.root]

CONSTANT_MS = 0.5       # what the machine adds to a round trip (its veths, a loaded scheduler's wake-ups)


def sh(cmd: str, check: bool = True) -> str:
    done = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and done.returncode:
        raise AssertionError(f"{cmd}: {done.stderr}")
    return done.stdout


class Pair:
    """Two namespaces tb-<tag>lnk-a and -b, one veth link between them (10.77.0.1 - 10.77.0.2); with root_b, b's
    end is in the root namespace, as a switch port is."""

    def __init__(self, mtu: int = 1500, mbps: float | None = None, root_b: bool = False, name: str = "lnk"):
        t = fabric_tag()
        self.tagged = f"{PREFIX}{t}"
        self.ns = {s: f"{PREFIX}{t}{name}-{s}" for s in ("ab" if not root_b else "a")}
        self.dev = {s: f"{PREFIX}{t}{name}{s}" for s in "ab"}
        self.mbps, self.mtu = mbps, mtu
        for ns in self.ns.values():
            sh(f"ip netns add {ns}")
        where = {s: f"netns {self.ns[s]}" if s in self.ns else "" for s in "ab"}
        sh(f"ip link add {self.dev['a']} {where['a']} mtu {mtu} type veth peer name {self.dev['b']} {where['b']} "
           f"mtu {mtu}")
        for i, s in enumerate("ab"):
            sh(self.at(s, f"ip addr add 10.77.0.{i + 1}/24 dev {self.dev[s]}"))
            sh(self.at(s, f"ip link set {self.dev[s]} up"))
            if mbps:        # shaped as the link model shapes ends: its tbf, heartbeats first
                for cmd in (tbf(self.dev[s], mbps, mtu), *beats_first(self.dev[s], mbps, mtu)):
                    sh(self.at(s, cmd))

    def at(self, s: str, cmd: str) -> str:
        return f"ip netns exec {self.ns[s]} {cmd}" if s in self.ns else cmd

    def end(self, s: str) -> End:
        return End(self.dev[s], f"/run/netns/{self.ns[s]}" if s in self.ns else None, mbps=self.mbps, mtu=self.mtu)

    def link(self, delay_us: float, key: str = "1") -> LinkDelay:
        return LinkDelay(key, self.end("a"), self.end("b"), delay_us)

    def ping(self, count: int = 20, size: int = 56) -> list[float]:
        """Round trips in ms, after two pings that resolve the neighbour (ARP crosses the delay too)."""
        ping = self.at("a", f"ping -n -i 0.05 -W 2 -s {size} -M do")
        sh(f"{ping} -q -c 2 10.77.0.2", check=False)
        out = sh(f"{ping} -c {count} 10.77.0.2", check=False)
        return [float(w.split("=")[1]) for w in out.split() if w.startswith("time=")]

    def devices(self, s: str) -> list[str]:
        """The side's devices (in the root namespace only this pair's end and the delay's helpers: other fabrics
        on the machine make and remove their own meanwhile, under other tags or the same prefix)."""
        names = [line.split(":")[1].split("@")[0].strip() for line in sh(self.at(s, "ip -o link show")).splitlines()]
        return [n for n in names if s in self.ns or n == self.dev[s] or n.startswith(f"{self.tagged}dl")]

    def qdiscs(self, s: str) -> str:
        """The end's qdiscs without their handles (a tbf put back gets a new one) or counters (htb's count of
        packets it sent directly: the traffic's, not the configuration's)."""
        shown = sh(self.at(s, f"tc qdisc show dev {self.dev[s]}"))
        return re.sub(r" direct_packets_stat \d+", "", re.sub(r"qdisc (\S+) \S+:", r"qdisc \1", shown))

    def close(self):
        for ns in self.ns.values():      # the link goes with a's namespace
            sh(f"ip netns delete {ns}", check=False)


@pytest.fixture
def pair(request):
    made = []

    def make(**kw) -> Pair:
        p = Pair(**kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()


def test_the_user_space_path_is_the_one_that_runs_here():
    assert choose_path() in ("netem", "userspace")


@pytest.mark.parametrize("mbps", [None, 10], ids=["unshaped", "10mbit"])
@pytest.mark.parametrize("delay_ms", [1, 5, 20])
def test_ping_measures_the_configured_round_trip(pair, delay_ms, mbps):
    p = pair(mbps=mbps)
    with Delays() as delays:
        delays.apply(p.link(delay_ms * 1000))
        rtts = p.ping()
        stats = delays.stats() if delays.path == "userspace" else {}
    want = 2 * delay_ms
    assert len(rtts) >= 18, rtts
    print(f"delay {delay_ms} ms, {mbps or 'no'} rate: RTT median {statistics.median(rtts):.3f} ms, "
          f"min {min(rtts):.3f}, max {max(rtts):.3f} (want {want})")
    assert abs(statistics.median(rtts) - want) <= 0.1 * want + CONSTANT_MS, rtts
    assert min(rtts) >= want - 0.05, rtts          # never shorter than asked (a few us of batching aside)
    assert all(s["dropped"] == s["send_errors"] == 0 for s in stats.values()), stats


RECEIVER = textwrap.dedent("""
    import socket, struct, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)          # SO_RCVBUFFORCE: a slow reader loses nothing
    s.bind(("10.77.0.2", 5001)); s.settimeout(3)
    print("ready", flush=True)
    seen = []
    try:
        while True:
            seen.append(struct.unpack("!I", s.recv(2048)[:4])[0])
    except socket.timeout:
        pass
    print(" ".join(map(str, seen)))
""")
SENDER = textwrap.dedent("""
    import socket, struct, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 212992)     # a host's default, under the tbf's limit
    for i in range(int(sys.argv[1])):
        s.sendto(struct.pack("!I", i) + bytes(996), ("10.77.0.2", 5001))
""")


def test_a_burst_keeps_its_order_and_loses_nothing_on_a_shaped_link(pair):
    p = pair(mbps=50)
    n = 2000        # 2 MB at once: the sender blocks on its rate limiter's queue (its frames are held there on its
    #                 socket's account, as in a qdisc on its own NIC), then the delay line holds ~30 KB
    with Delays() as delays:
        delays.apply(p.link(5000))
        p.ping(count=1)         # the neighbour resolved: a burst into an unresolved one is cut to a few frames
        rx = subprocess.Popen(["ip", "netns", "exec", p.ns["b"], sys.executable, "-c", RECEIVER],
                              stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "ready"
        subprocess.run(["ip", "netns", "exec", p.ns["a"], sys.executable, "-c", SENDER, str(n)], check=True)
        seen = [int(x) for x in rx.communicate(timeout=30)[0].split()]
    assert seen == list(range(n)), (len(seen), [x for i, x in enumerate(seen) if i != x][:10])


TCP_RX = textwrap.dedent("""
    import hashlib, socket
    srv = socket.create_server(("10.77.0.2", 5002)); print("ready", flush=True)
    c, _ = srv.accept(); h = hashlib.sha256(); n = 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        h.update(b); n += len(b)
    print(n, h.hexdigest())
""")
TCP_TX = textwrap.dedent("""
    import socket, sys
    data = open(sys.argv[1], "rb").read()
    c = socket.create_connection(("10.77.0.2", 5002)); c.sendall(data); c.close()
""")


def test_jumbo_frames_and_tcp_cross_a_delayed_link_intact(pair, tmp_path):
    p = pair(mtu=9000, mbps=20)
    data = os.urandom(2 << 20)
    (tmp_path / "data").write_bytes(data)
    with Delays() as delays:
        delays.apply(p.link(5000))
        rtts = p.ping(count=10, size=8972)          # a 9000-byte IP packet, not fragmented
        assert len(rtts) >= 9 and abs(statistics.median(rtts) - 10) <= 1 + CONSTANT_MS, rtts
        rx = subprocess.Popen(["ip", "netns", "exec", p.ns["b"], sys.executable, "-c", TCP_RX],
                              stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "ready"
        subprocess.run(["ip", "netns", "exec", p.ns["a"], sys.executable, "-c", TCP_TX, str(tmp_path / "data")],
                       check=True, timeout=60)
        got = rx.communicate(timeout=30)[0].split()
    assert got == [str(len(data)), hashlib.sha256(data).hexdigest()]


@pytest.mark.parametrize("mbps, root_b", [(None, False), (10, False), (10, True)],
                         ids=["unshaped", "10mbit", "10mbit-root-end"])
def test_removing_the_delay_leaves_the_link_as_it_was(pair, mbps, root_b):
    p = pair(mbps=mbps, root_b=root_b)
    assert statistics.median(p.ping(count=2)) < 5                   # both ends up
    before = {s: (p.devices(s), p.qdiscs(s)) for s in "ab"}
    with Delays() as delays:
        delays.apply(p.link(20_000))
        assert statistics.median(p.ping(count=5)) >= 40
        state = delays.state()
        pid = state["delay_pids"][0] if delays.path == "userspace" else None
        if pid:         # what `testbed clean` looks for: the process by PID and marker, the root's helpers kept
            assert "testbed.fabric.delayd" in open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
            assert state["delay_devices"] == (["tb-" + fabric_tag() + "dl1b", "tb-" + fabric_tag() + "dl1bp"]
                                              if root_b else [])
        assert delays.remove("1") == []
        assert statistics.median(p.ping(count=5)) < 5
    after = {s: (p.devices(s), p.qdiscs(s)) for s in "ab"}
    assert after == before
    assert pid is None or not os.path.exists(f"/proc/{pid}")
    assert f"{PREFIX}{fabric_tag()}dl" not in sh("ip -o link show") + "".join(sh(p.at("a", "ip -o link show")))


def test_an_end_that_goes_away_leaves_the_other_links_delayed(pair):
    first, second = pair(), pair(name="lnk2")
    with Delays() as delays:
        delays.apply(first.link(5000))
        delays.apply(second.link(5000, key="2"))
        sh(f"ip netns delete {first.ns['b']}")         # a host crashed: its end, and the helpers there, vanish
        first.ns.pop("b")
        assert abs(statistics.median(second.ping(count=10)) - 10) <= 1 + CONSTANT_MS
        assert delays.proc.poll() is None
    left = "".join(sh(p.at(s, "ip -o link show")) for p in (first, second) for s in p.ns)
    assert f"{PREFIX}{fabric_tag()}dl" not in left
