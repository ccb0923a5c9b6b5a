"""The failure detector measured alone on a live fabric: every GPU host runs its heartbeats
(hosts/agents/beat_watch.py) for a while, under random loss and with its NIC's queue kept full, and may
have one of them killed to time the detection. Used by benchmarks/liveness.py and the liveness tests;
not a scenario workload type.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

from hosts.recovery.beats import paths_to
from testbed import PROJECT_ROOT
from testbed.fabric.links import BEAT_MATCH
from testbed.workloads import rank_setup
from testbed.workloads.collective import random_loss
from testbed.workloads.collective_fabric import ranks

FLOOD = 0.8          # the flood's mean rate, in NIC rates: a burst of a queue's worth, drained, then the next


def beat_priority(net, on: bool) -> None:
    """Heartbeats ahead of the bulk queue on the GPU hosts' ports (links.beats_first), or in it (off: the
    filter that picks them out is removed, so they wait in the same FIFO as everything else)."""
    for h in ranks(net.fabric):
        for dev in ("eth0", "eth1"):
            cmd = (f"tc filter add dev {dev} parent 10: protocol all pref 1 handle 1 bpf bytecode '{BEAT_MATCH}' "
                   f"classid 10:1") if on else f"tc filter del dev {dev} parent 10: pref 1"
            net.host(h.name).cmd(cmd + " 2>/dev/null")


def run(net, seconds: float, period: float = 0.15, timeout: float = 1.0, loss: float = 0.0,
        flood: bool = False, kill: str | None = None, kill_at: float | None = None) -> dict:
    """Every GPU host watches its peers for `seconds`; `kill` (a host) has its watcher SIGKILLed `kill_at`
    seconds in. Returns {"hosts": {host: its line}, "false": [{watcher, peer, why, after_s, first_hand}]
    (live peers found failed, seconds after the start, by the watcher itself or by news), "detected_s": seconds from the kill to the first watcher that found it first hand (None if
    none did), "max_silence_s": the longest silence of a live peer, "dropped": packets the loss dropped, "paths":
    the (watcher, peer) pairs watched first hand}."""
    hosts = ranks(net.fabric)
    members = [p.entry() for p in rank_setup.peers(hosts)]
    news = os.path.join(net.run_dir, f"beat-watch-{os.getpid()}")
    shutil.rmtree(news, ignore_errors=True)
    nic = next(link for link in net.fabric.links if link.kind == "nic")
    argv = ["--members", json.dumps(members), "--news", news, "--seconds", str(seconds), "--period", str(period),
            "--timeout", str(timeout)] + (["--flood-mbps", str(FLOOD * nic.mbps), "--burst", str(nic.queue_bytes)] if flood else [])
    if loss:
        random_loss(net, hosts, loss, on=True)
    procs, killed_at, dropped, started = {}, None, 0, time.time()
    try:
        for m in members:
            node = net.host(m["name"])
            procs[m["name"]] = node.popen([node.python, "-m", "hosts.agents.beat_watch", "--me", json.dumps(m), *argv],
                                          cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if kill is not None:
            time.sleep(kill_at)
            procs[kill].kill()
            killed_at = time.time()
        lines = {}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=seconds + 60)
            if name != kill:
                try:
                    lines[name] = json.loads(out.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    raise RuntimeError(f"{name}: beat_watch printed no result: {err.strip()[-300:]}") from None
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if loss:
            dropped = random_loss(net, hosts, loss, on=False)
        shutil.rmtree(news, ignore_errors=True)
    # a live peer found failed, or the one killed found failed before its kill
    false = [{"watcher": w, "peer": peer, "why": f["why"], "after_s": round(f["at"] - started, 2),
              "first_hand": peer in line["first_hand"]}
             for w, line in lines.items() for peer, f in line["failed"].items() if peer != kill or f["at"] < killed_at]
    found = [line["failed"][kill]["at"] for line in lines.values()
             if kill in line["first_hand"] and line["failed"][kill]["at"] >= killed_at]
    return {"hosts": lines, "false": false, "dropped": dropped,
            "detected_s": round(min(found) - killed_at, 3) if found else None,
            "max_silence_s": max(line["heartbeat"]["max_peer_silence_s"] for line in lines.values()),
            "paths": sum(1 for m in members for p in members if p is not m and paths_to(m, p))}
