"""Heartbeats on the wire: which network they cross, their datagram, and whether a rank's own port has carrier.

Real jobs beat over a network their collectives do not load: TorchFT's lighthouse and the c10d store over
the hosts' front-end Ethernet, NCCL's bootstrap over its socket interface. The emulated hosts have only
their fabric ports, so a beat crosses the one-hop path the collectives themselves use to that peer
(paths_to): the NIC, through its rail's leaf, to the GPUs of the same rail in other servers, and the HB
domain to the GPUs of its own server; on each, to the rank's two neighbours in a ring of the job's order
(watched), as SWIM-style detectors beat to a few members rather than all. These paths exist on every
fabric kind and cross no spine, so beats add nothing to the spines' counters. A rank whose NIC or cable
died, or whose server is cut off, falls silent exactly on the paths that failed.

A beat is a UDP datagram from PORT on the sender's address of that path to PORT on the peer's:
MAGIC, the beat count, the sender's progress count (the watchdog's input), flags, and the sender's name.
"""
from __future__ import annotations

import fcntl
import socket
import struct

PORT = 29510                 # UDP; the transport's RoCE traffic is on 4791
MAGIC = b"TBHB"
WAITING, LEFT, DECLARED = 1, 2, 4          # flags: waiting on its peers, left the job, GPU declared failed
_HEAD = struct.Struct("<4sQQB")
PATH_NAMES = {"nic": "NIC", "hb": "HB domain"}
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)     # Linux's; Python's socket module may not name it
_TIMESPEC = struct.Struct("@ll")                            # struct timespec
STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)            # recvmsg's room for an arrival stamp


def paths_to(me: dict, peer: dict) -> list[tuple[str, str]]:
    """(path, the peer's address) for each one-hop path from `me` to `peer` (member entries: ip, hb_ip, server,
    local_rank). None between GPUs of other servers and other rails: they hear of each other's failures
    through the watchers that have a path (heartbeat.py, news)."""
    if me.get("server") is not None and me.get("server") == peer.get("server"):
        if me.get("hb_ip") and peer.get("hb_ip"):
            return [("hb", peer["hb_ip"])]
        return [("nic", peer["ip"])]
    if None in (me.get("local_rank"), peer.get("local_rank")) or me["local_rank"] == peer["local_rank"]:
        return [("nic", peer["ip"])]
    return []


def watched(me: dict, members: list[dict]) -> list[tuple[str, str, str]]:
    """(name, path, the peer's address) of the peers `me` beats to and watches, from the job's members in its
    order (`me` among them): on each path kind, its two neighbours in the ring of the members that path
    reaches, in that order (all of them when they are three or fewer), and any member whose neighbour it is.
    Watching is mutual, so a path that dies is found from both its ends, and a rank's degree in the cuts is
    2 where its neighbours' is 1 (membership.decide). Every member of a path's ring is watched by two, and
    their news reaches the rest within a beat: 4 beats per period instead of 14 on 8 servers of 8 GPUs."""
    if not any(m["name"] == me["name"] for m in members):
        raise ValueError(f"{me['name']} is not among the members it watches: the rings need its place in the order")
    order = [me if m["name"] == me["name"] else m for m in members]

    def neighbours(a: dict, path: str) -> set[str]:
        ring = [m["name"] for m in order if m is a or any(p == path for p, _ in paths_to(a, m))]
        i = ring.index(a["name"])
        return {ring[i - 1], ring[(i + 1) % len(ring)]} - {a["name"]}

    mine = {path: neighbours(me, path) for path in PATH_NAMES}
    return [(m["name"], path, addr) for m in order if m is not me for path, addr in paths_to(me, m)
            if m["name"] in mine[path] or me["name"] in neighbours(m, path)]


def encode(count: int, progress: int, flags: int, name: str) -> bytes:
    return _HEAD.pack(MAGIC, count, progress, flags) + name.encode()


def decode(data: bytes) -> tuple[int, int, int, str] | None:
    """(count, progress, flags, name), or None for anything that is not a beat."""
    if len(data) <= _HEAD.size or data[:4] != MAGIC:
        return None
    _, count, progress, flags = _HEAD.unpack_from(data)
    try:
        return count, progress, flags, data[_HEAD.size:].decode()
    except UnicodeDecodeError:
        return None


def open_sockets(me: dict) -> dict[str, socket.socket]:
    """A non-blocking UDP socket bound to PORT on each of the rank's addresses: path -> socket."""
    out = {}
    for path, ip in (("nic", me.get("ip")), ("hb", me.get("hb_ip"))):
        if ip:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((ip, PORT))
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)    # arrivals dated by the kernel
            sock.setblocking(False)
            out[path] = sock
    return out


def stamp(ancillary, default: float) -> float:
    """The kernel's arrival time of a datagram (wall clock, s) from recvmsg's ancillary data, else `default`."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9
    return default


_SIOCGIFFLAGS, _SIOCGIFADDR = 0x8913, 0x8915
_IFF_UP, _IFF_RUNNING = 0x1, 0x40


def links_down(me: dict) -> list[str]:
    """The paths whose port on this host is down or has no carrier (a cut cable: the far end went down), as a
    NIC's port state tells its driver. Read in the calling process's network namespace."""
    wanted = {ip: path for path, ip in (("nic", me.get("ip")), ("hb", me.get("hb_ip"))) if ip}
    down = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                ip = socket.inet_ntoa(fcntl.ioctl(s, _SIOCGIFADDR, req)[20:24])
                flags = struct.unpack_from("H", fcntl.ioctl(s, _SIOCGIFFLAGS, req), 16)[0]
            except OSError:
                continue                  # no IPv4 address
            if ip in wanted and (flags & (_IFF_UP | _IFF_RUNNING)) != (_IFF_UP | _IFF_RUNNING):
                down.append(wanted[ip])
    return sorted(down)
