"""Reachability probe run inside an emulated host: answers probes and probes a list of targets.

    python -m hosts.agents.probe --targets 10.11.0.2,10.12.0.2 --until EPOCH [--port 7000]

Every host of a fabric runs one at the same time; each answers the others' PINGs with a PONG and
retries its own PINGs until the shared deadline, so start-up skew between hosts costs nothing.
UDP, like the RoCEv2 traffic the fabric is for. Prints {"reached": [...], "unreached": [...]} as JSON.
"""
from __future__ import annotations

import argparse
import json
import socket
import time

RETRY_S = 0.2


def probe(targets: list[str], until: float, port: int) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    reached: set[str] = set()
    next_round = 0.0
    while (now := time.time()) < until:
        if now >= next_round:
            for ip in targets:
                if ip not in reached:
                    try:
                        sock.sendto(b"PING", (ip, port))
                    except OSError:
                        pass      # e.g. no route: simply unreached
            next_round = now + RETRY_S
        sock.settimeout(max(0.001, min(next_round, until) - time.time()))
        try:
            data, (peer, peer_port) = sock.recvfrom(64)
        except (socket.timeout, BlockingIOError):
            continue
        except OSError:
            continue
        if data == b"PING":
            sock.sendto(b"PONG", (peer, peer_port))
        elif data == b"PONG":
            reached.add(peer)
    sock.close()
    return {"reached": sorted(reached), "unreached": sorted(set(targets) - reached)}


def main() -> None:
    ap = argparse.ArgumentParser(description="UDP reachability probe")
    ap.add_argument("--targets", default="")
    ap.add_argument("--until", type=float, required=True, help="wall-clock deadline (epoch seconds)")
    ap.add_argument("--port", type=int, default=7000)
    args = ap.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    print(json.dumps(probe(targets, args.until, args.port)), flush=True)


if __name__ == "__main__":
    main()
