"""The failure detector alone, for measuring it: a rank's heartbeats (hosts/recovery/heartbeat.py) without a
collective, optionally with its NIC's queue kept full.

    python -m hosts.agents.beat_watch --me JSON --members JSON --news DIR --seconds S
        [--period 0.15] [--timeout 1.0] [--flood-mbps M --burst BYTES]

Every GPU host of a fabric runs one at the same time. Each beats to and watches its peers for `--seconds`,
and prints one JSON line: the peers it found failed, first hand or by news (name -> seconds silent, wall
time, why), and its heartbeat stats (the longest silence of a live peer is the margin to the timeout). With
`--flood-mbps`, a thread sends bulk UDP to the peers it reaches over its NIC, in bursts of a queue's worth at
that mean rate: its NIC's queue fills from empty at each burst, as a collective's bulk data (a message
posted at once, a window retransmitted) can fill it.
"""
from __future__ import annotations

import argparse
import json
import socket
import threading
import time

from hosts.recovery import beats
from hosts.recovery.heartbeat import Heartbeat

SO_SNDBUFFORCE = 32
SINK_PORT = 9          # discard: nothing listens, the datagrams only fill the queues on their way
DATAGRAM = 1400


def flood(me: dict, peers: list[dict], mbps: float, burst: int, until: float) -> None:
    """Bulk UDP from the NIC to its one-hop peers: `burst` bytes at once (a full queue drops the excess), as
    often as `mbps` allows. Each burst fills the NIC's queue from empty, the worst case for a beat behind it:
    the one sent just before waits for nothing, the one just after for the whole queue."""
    targets = [addr for p in peers for path, addr in beats.paths_to(me, p) if path == "nic"]
    if not targets:
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 4 * burst)     # the burst fits: the queue, not we, holds it
    sock.bind((me["ip"], 0))
    payload, every, sent = b"\0" * DATAGRAM, burst * 8 / (mbps * 1e6), 0
    start = time.monotonic()
    while time.monotonic() < until:
        for _ in range(burst // DATAGRAM):
            try:
                sock.sendto(payload, (targets[sent % len(targets)], SINK_PORT))
            except OSError:
                pass             # the queue is full (ENOBUFS) or the peer's port is unreachable: keep going
        sent += 1
        time.sleep(max(0.0, start + sent * every - time.monotonic()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--me", required=True, help="this host's member entry (JSON)")
    ap.add_argument("--members", required=True, help="every watcher's member entry (JSON list)")
    ap.add_argument("--news", required=True, help="the directory the watchers share their news in")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--period", type=float, default=0.15)
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--flood-mbps", type=float, default=0.0, help="the flood's mean rate (0: no flood)")
    ap.add_argument("--burst", type=int, default=1 << 20, help="the flood's bytes per burst (the NIC's queue)")
    a = ap.parse_args()
    me, members = json.loads(a.me), json.loads(a.members)
    hb = Heartbeat(a.news, me, period=a.period, timeout=a.timeout, join_grace=30.0).start()
    hb.meet(members)
    hb.watch([m["name"] for m in members])
    until = time.monotonic() + a.seconds
    if a.flood_mbps:
        threading.Thread(target=flood, args=(me, members, a.flood_mbps, a.burst, until), daemon=True).start()
    time.sleep(a.seconds)
    failed = {name: {"silence_s": round(silence, 3), "at": at, "why": hb.why(name)}
              for name, (silence, at) in hb.failed().items()}
    first_hand, stats = hb.suspects(), hb.stats()
    hb.stop()
    print(json.dumps({"host": me["name"], "failed": failed, "first_hand": first_hand, "heartbeat": stats}),
          flush=True)


if __name__ == "__main__":
    main()
