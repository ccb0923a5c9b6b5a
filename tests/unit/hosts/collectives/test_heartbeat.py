"""Communicator heartbeats: a crashed or hung peer is declared failed, a live one under load is not,
a watcher that was itself stopped does not blame its peers, and a collective waiting on a silent peer
fails naming it (in-process ranks over the RoCEv2 engine; peers in other processes for crash and hang)."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from hosts.collectives import CollectiveError, Communicator, FileStore, Peer, algorithms
from hosts.collectives.heartbeat import Heartbeat
from hosts.rdma import open_device
from hosts.rdma.transport import MemoryFabric
from tests.paths import ROOT

PEER = """
import json, os, sys, time
from hosts.collectives.heartbeat import Heartbeat
hb = Heartbeat(sys.argv[1], sys.argv[2], period=0.05, timeout=0.5).start()
if len(sys.argv) > 3:
    hb.watch([sys.argv[3]])
print("up", flush=True)
report = os.path.join(sys.argv[1], "report-" + sys.argv[2])
for _ in range(600):                 # what this process believes, for the test to read
    with open(report + ".tmp", "w") as f:
        json.dump(sorted(hb.failed()), f)
    os.replace(report + ".tmp", report)
    time.sleep(0.1)
"""


def peer_process(directory, name, watch=None):
    proc = subprocess.Popen([sys.executable, "-c", PEER, directory, name] + ([watch] if watch else []),
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def wait_for(predicate, limit=20.0):
    """Poll until predicate() is true; the limit only keeps a broken test from hanging."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_crashed_or_hung_peer_is_declared_failed(tmp_path, sig):
    proc = peer_process(str(tmp_path), "peer")
    hb = Heartbeat(str(tmp_path), "me", period=0.05, timeout=0.5).start()
    hb.watch(["peer"])
    try:
        time.sleep(0.3)
        assert hb.failed() == {}
        os.kill(proc.pid, sig)
        t0 = time.monotonic()
        assert wait_for(lambda: "peer" in hb.failed())
        silence, _ = hb.failed()["peer"]
        assert silence > 0.5                              # declared only after the timeout
        assert "peer missed its heartbeats" in hb.failure()
        print(f"{signal.Signals(sig).name}: declared failed {time.monotonic() - t0:.2f} s after the signal "
              f"(timeout 0.5 s, period 0.05 s)")
    finally:
        hb.stop()
        proc.kill()
        proc.wait()


def test_live_peer_under_cpu_load_is_not_declared_failed(tmp_path):
    """Both cores busy (two spinning processes, and a thread holding the GIL in each heartbeat process)."""
    spin = "import time\nwhile True: sum(range(10000))"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    proc = peer_process(str(tmp_path), "peer")
    hb = Heartbeat(str(tmp_path), "me", period=0.05, timeout=0.5).start()
    hb.watch(["peer"])
    stop = threading.Event()
    gil = threading.Thread(target=lambda: [sum(range(10000)) for _ in iter(stop.is_set, True)], daemon=True)
    gil.start()
    try:
        time.sleep(5)
        assert hb.failed() == {}
        assert hb.max_silence > 0            # it did watch beats arrive
        print(f"under load: longest silence of the live peer {hb.max_silence:.3f} s, own longest beat gap "
              f"{hb.max_loop_gap:.3f} s (timeout 0.5 s)")
    finally:
        stop.set()
        hb.stop()
        for p in burners + [proc]:
            p.kill()
            p.wait()


def test_a_stopped_watcher_does_not_blame_its_peers(tmp_path):
    """The watcher is the one that stops (SIGSTOP for 3 x the timeout) while its peer beats on: when it
    resumes it must restart its clocks, not declare the peer failed."""
    me = Heartbeat(str(tmp_path), "me", period=0.05, timeout=0.5).start()
    watcher = peer_process(str(tmp_path), "watcher", watch="me")
    report = tmp_path / "report-watcher"
    try:
        time.sleep(0.3)
        os.kill(watcher.pid, signal.SIGSTOP)
        time.sleep(1.5)
        os.kill(watcher.pid, signal.SIGCONT)
        time.sleep(1.0)
        assert json.loads(report.read_text()) == []
        me.stop(left=False)                                  # and it does notice a real silence
        assert wait_for(lambda: json.loads(report.read_text()) == ["me"])
    finally:
        watcher.kill()
        watcher.wait()


def test_a_peer_that_left_is_not_a_failure_and_one_that_never_came_is(tmp_path):
    peer = Heartbeat(str(tmp_path), "peer", period=0.05, timeout=0.3).start()
    me = Heartbeat(str(tmp_path), "me", period=0.05, timeout=0.3, join_grace=0.6).start()
    me.watch(["peer", "ghost"])
    try:
        time.sleep(0.2)
        peer.stop(left=True)
        assert wait_for(lambda: "ghost" in me.failed())
        time.sleep(0.5)
        assert set(me.failed()) == {"ghost"}
    finally:
        me.stop()


def test_collective_waiting_on_a_silent_peer_fails_naming_it():
    """Rank 3 hangs after a first AllReduce: its heartbeats stop and the network no longer reaches it (as
    when SIGSTOP stops all its threads). The others' second AllReduce fails with the heartbeat's verdict,
    not with a transport error (retransmission timer 2 s) nor the 30 s no-progress timeout."""
    peers = [Peer(rank=i * 2 + j, name=f"s{i}g{j}", ip=f"10.11.{i}.{j + 1}", hb_ip=f"10.12.{i}.{j + 1}",
                  server=i, local_rank=j) for i in range(2) for j in range(2)]
    hung, done = threading.Event(), threading.Event()
    silent = {socket.inet_aton(peers[3].ip), socket.inet_aton(peers[3].hb_ip)}
    fabric = MemoryFabric(drop=lambda pkt: hung.is_set() and (pkt[12:16] in silent or pkt[16:20] in silent))
    store_dir = tempfile.mkdtemp(prefix="tb-store-")
    errors, results = {}, {}

    def rank_main(me):
        hb = Heartbeat(os.path.join(store_dir, "heartbeats"), me.name, period=0.05, timeout=0.5).start()
        comm = Communicator(me, peers, FileStore(store_dir, timeout=30),
                            lambda ip: open_device(ip, backend="uroce", transport=fabric.attach(ip)),
                            timeout=30, chunk=8192, rc_timeout=2.0, heartbeat=hb)
        try:
            x = np.ones(200_000, dtype=np.float32)
            results[me.rank] = algorithms.allreduce(comm, x, "sum", "ring")[0]     # all four: it works
            if me.rank == 3:
                hung.set()
                hb.stop(left=False)
                done.wait(60)
                return
            t0 = time.monotonic()
            try:
                algorithms.allreduce(comm, x, "sum", "ring")
            except CollectiveError as exc:
                errors[me.rank] = (str(exc), time.monotonic() - t0)
        finally:
            comm.close(linger=0)
            if me.rank != 3:
                hb.stop()

    threads = [threading.Thread(target=rank_main, args=(p,)) for p in peers]
    for t in threads:
        t.start()
    for t in threads[:3]:
        t.join(60)
    done.set()
    threads[3].join(10)
    assert results == {r: 4.0 for r in range(4)}
    assert set(errors) == {0, 1, 2}
    for message, _ in errors.values():
        assert "rank 3 (s1g1) missed its heartbeats" in message and "allreduce/ring" in message
    print(f"every survivor failed {max(t for _, t in errors.values()):.2f} s into the second AllReduce "
          f"(heartbeat timeout 0.5 s)")


def test_a_declared_failure_is_seen_at_once_and_named():
    """DECLARED needs no silence: the watcher fails the peer on its next look, however long the timeout."""
    with tempfile.TemporaryDirectory() as d:
        watcher = Heartbeat(d, "a", period=0.05, timeout=30.0).start()
        peer = Heartbeat(d, "b", period=0.05, timeout=30.0).start()
        watcher.watch(["b"])
        time.sleep(0.2)
        assert watcher.failure() is None
        peer.declare_failed()
        assert wait_for(lambda: watcher.failure() is not None, limit=5.0)
        assert watcher.failure() == "b was declared failed"
        watcher.stop()
