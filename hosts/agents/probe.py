"""Reachability probe run inside an emulated host: answers probes and probes a list of targets.

    python -m hosts.agents.probe --targets 10.11.0.2,10.12.0.2 --until EPOCH
        [--expected 10.11.0.2] [--not-before EPOCH] [--port 7000]

Every host of a fabric runs one at the same time; each answers the others' PINGs with a PONG and
retries its own PINGs, so start-up skew between hosts costs nothing. UDP, like the RoCEv2 traffic the
fabric is for. Prints {"reached": [...], "unreached": [...]} as JSON.

A probe stops at `--until` at the latest, or, if it started after `--not-before` (a slow machine: Python takes
seconds to start under software emulation), the whole window `until - not_before` after its own start. It stops earlier once its part is settled: it has reached every
`--expected` address and heard a PING from each of them (reachability is symmetric, so those are the hosts
that need its PONGs), and for LINGER_S (three retry rounds) every probe has been running (from
`--not-before`: an isolated target that leaks has had the time to answer) and no PING has come (a peer
whose PONG was lost asks again within RETRY_S).
"""
from __future__ import annotations

import json
import socket
import time

from hosts.spec.flows import ProbeSpec

RETRY_S = 0.2
LINGER_S = 0.6      # three retry rounds


def probe(targets: list[str], until: float, port: int, expected: set[str] | None = None,
          not_before: float = 0.0, address: str = "0.0.0.0") -> dict:
    """expected=None: run to `until` (nothing is known about which targets should answer)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    if 0 < not_before < time.time():
        until = max(until, time.time() + (until - not_before))     # a late start still gets its whole window
    reached: set[str] = set()
    heard: set[str] = set()
    next_round, last_ping = 0.0, time.time()
    while (now := time.time()) < until:
        if expected is not None and now - max(not_before, last_ping) >= LINGER_S \
                and expected <= reached and expected <= heard:
            break
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
        except OSError:       # a timeout, or e.g. an ICMP error reported on the socket
            continue
        if data == b"PING":
            heard.add(peer)
            last_ping = time.time()
            sock.sendto(b"PONG", (peer, peer_port))
        elif data == b"PONG":
            reached.add(peer)
    sock.close()
    return {"reached": sorted(reached), "unreached": sorted(set(targets) - reached)}


def main() -> None:
    spec = ProbeSpec.from_argv()
    expected = None if spec.expected is None else set(spec.expected)
    print(json.dumps(probe(list(spec.targets), spec.until, spec.port, expected, spec.not_before)), flush=True)


if __name__ == "__main__":
    main()
