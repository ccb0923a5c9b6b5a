"""The survivors' agreement after a failure (collective_rank.agree): a survivor that announced while it still
heard the dead peer (within half a timeout of its death) announces again once it no longer does, so the others
decide at once rather than waiting for that peer to the deadline."""
import threading
import time

from hosts.agents.collective_rank import agree
from hosts.collectives.store import FileStore
from hosts.recovery.membership import Membership, member_entry
from hosts.spec import CollectiveRankSpec, Peer

ORDER = ["s0g0", "s0g1", "s1g0", "s1g1"]
DEAD = "s1g1"


def m(name):
    return member_entry(name, f"10.0.0.{ORDER.index(name) + 1}", None, int(name[1]), int(name[3]))


class Beats:
    """A survivor's heartbeats: the dead peer found failed at `failed_at`, heard on a direct path until
    `hears_until` (wall time)."""

    def __init__(self, failed_at: float, hears_until: float):
        self.failed_at, self.hears_until = failed_at, hears_until

    def failed(self):
        return {DEAD: (1.0, self.failed_at)}

    def suspects(self):
        return {DEAD: "heartbeats"}

    def hears(self):
        return [DEAD] if time.time() < self.hears_until else []

    def alive_since_failed(self, name):
        return False


def test_a_survivor_that_still_heard_the_dead_peer_when_it_announced_does_not_hold_the_others(tmp_path):
    job = Membership(FileStore(str(tmp_path), timeout=5))
    members = [m(n) for n in ORDER]
    spec = CollectiveRankSpec(rank=0, peers=tuple(Peer(**m(n), rank=i) for i, n in enumerate(ORDER)), store="",
                              op="allreduce", algo="ring", bytes=0, recovery="shrink", timeout_s=5)
    now = time.time()
    # s0g0 (the first survivor, who writes the verdict) announces at once while it still hears the dead peer
    beats = {"s0g0": Beats(now, now + 0.5), "s0g1": Beats(now, now), "s1g0": Beats(now, now)}
    out, took = {}, {}

    def rank(name):
        t = time.monotonic()
        out[name] = agree(spec, job, beats[name], 1, members, name, 3, True, [])
        took[name] = time.monotonic() - t
    threads = [threading.Thread(target=rank, args=(n,)) for n in beats]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(out) == set(beats), out
    for name, decision in out.items():
        assert "error" not in decision, decision
        assert decision["failed"] == [DEAD] and [x["name"] for x in decision["members"]] == ORDER[:3], decision
        assert took[name] < 5, took           # without announcing again: the deadline, 42 s
