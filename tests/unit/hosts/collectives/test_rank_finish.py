"""A rank's teardown: once every rank passed the final barrier nothing of the job is outstanding, so the
devices close at once; a rank whose peer never arrives keeps answering retransmissions (the linger)."""
import threading
import time

from hosts.collectives import rank
from hosts.collectives.store import FileStore


class Comm:
    group_hold_s = 0

    def __init__(self):
        self.closed_with = []

    def close(self, linger=None):
        self.closed_with.append(linger)


def test_every_rank_at_the_final_barrier_closes_at_once(tmp_path):
    store, comms = FileStore(str(tmp_path)), [Comm(), Comm()]
    threads = [threading.Thread(target=rank.finish, args=(comms[r], store, r, 2)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=15)
    assert [c.closed_with for c in comms] == [[0], [0]]


def test_a_peer_that_never_arrives_leaves_the_linger(tmp_path, monkeypatch):
    store, comm = FileStore(str(tmp_path)), Comm()
    real_barrier = store.barrier
    monkeypatch.setattr(store, "barrier", lambda name, r, world, timeout=None: real_barrier(name, r, world, 0.2))
    rank.finish(comm, store, 0, 2)
    assert comm.closed_with == [None]


def test_a_multicast_job_holds_its_groups_before_closing(tmp_path):
    comm = Comm()
    comm.group_hold_s = 0.3
    t0 = time.monotonic()
    rank.finish(comm, FileStore(str(tmp_path)), 0, 1)
    assert time.monotonic() - t0 >= 0.3 and comm.closed_with == [0]
