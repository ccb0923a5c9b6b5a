"""The recovery membership keys (hosts/recovery/membership.py), over a FileStore in a temporary directory:
what the ranks write and the testbed's job manager reads, and the other way round."""
import os

import pytest

from hosts.collectives.comm import Peer
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.recovery.membership import Membership, decide, epoch_dir, member_entry, peer_entry, spare_spec_path


def test_announcements_verdict_and_members_per_epoch(tmp_path):
    ranks = Membership(FileStore(str(tmp_path), timeout=1))
    manager = Membership(FileStore(str(tmp_path), timeout=1))      # another process's view of the same job
    assert ranks.announced(1, ["a", "b"]) == {}
    ranks.announce(1, "b", {"at": 1.0, "step": 3, "in_op": True})
    ranks.announce(1, "a", {"at": 2.0, "step": 2, "in_op": False})
    assert list(manager.announced(1, ["a", "b", "c"])) == ["a", "b"]          # in the order asked
    assert manager.announced(1, ["b"])["b"]["step"] == 3
    assert manager.announced(2, ["a", "b"]) == {}                             # epochs are separate
    assert not manager.has_verdict(1)
    ranks.set_verdict(1, {"failed": ["c"], "step": 2})
    assert manager.has_verdict(1) and manager.verdict(1)["failed"] == ["c"] and not manager.has_verdict(2)
    assert not ranks.has_members(1)
    manager.set_members(1, {"members": [{"name": "a"}, {"name": "b"}], "step": 2})
    assert ranks.has_members(1) and ranks.members(1)["members"][1]["name"] == "b"


def test_the_keys_on_disk_are_the_ones_running_jobs_use(tmp_path):
    """The same names as before the module existed: a store written by either side stays readable."""
    store = FileStore(str(tmp_path))
    job = Membership(store)
    job.announce(3, "s0g1", {"step": 0})
    job.set_verdict(3, {"failed": []})
    job.set_members(3, {"members": []})
    for key in ("epoch3/alive/s0g1", "epoch3/failed", "epoch3/members"):
        assert store.exists(key), key
    assert epoch_dir("/job", 3) == os.path.join("/job", "epoch3")
    assert spare_spec_path("/job", "s1g0", 2) == os.path.join("/job", "spare-s1g0-epoch2.json")


def test_waiting_for_members_times_out_naming_what_it_waited_for(tmp_path):
    job = Membership(FileStore(str(tmp_path), timeout=5))
    with pytest.raises(StoreTimeout, match="the new membership"):
        job.members(1, timeout=0.05, what="the new membership")


def test_peer_and_member_entries_are_what_the_rank_programs_read():
    peer = peer_entry(2, "s1g0", "10.11.1.1", "10.12.1.1", 1, 0)
    assert peer == {"rank": 2, "name": "s1g0", "ip": "10.11.1.1", "hb_ip": "10.12.1.1", "server": 1, "local_rank": 0}
    assert list(peer) == ["rank", "name", "ip", "hb_ip", "server", "local_rank"]
    assert Peer(**peer).local_rank == 0
    member = member_entry("s1g0", "10.11.1.1", "10.12.1.1", 1, 0)
    assert member == {k: v for k, v in peer.items() if k != "rank"}
    assert Peer(rank=5, **member).name == "s1g0"


def announce(step=3, in_op=True, suspects=(), links_down=(), server=None):
    return {"at": 1.0, "step": step, "in_op": in_op, "suspects": {s: "heartbeats" for s in suspects},
            "links_down": list(links_down), "server": server}


NAMES = ["s0g0", "s0g1", "s1g0", "s1g1"]


def test_a_rank_that_did_not_announce_failed_and_the_step_is_the_earliest_unfinished():
    v = decide(NAMES, {"s0g0": announce(3), "s0g1": announce(2, in_op=False), "s1g0": announce(3)}, "shrink")
    assert v["failed"] == ["s1g1"] and v["cut_off"] == [] and v["step"] == 2 and v["lost_steps"] == 2


def test_a_cut_nic_removes_the_rank_whose_own_port_is_down():
    """Both ends of a cut rail link find each other failed; the tie goes against the one without carrier."""
    ann = {n: announce() for n in NAMES}
    ann["s0g1"] = announce(suspects=["s1g1"])
    ann["s1g1"] = announce(suspects=["s0g1"], links_down=["nic"])
    assert decide(NAMES, ann, "shrink")["failed"] == ["s1g1"]
    ann["s1g1"]["links_down"], ann["s0g1"]["links_down"] = [], ["nic"]
    assert decide(NAMES, ann, "shrink")["failed"] == ["s0g1"]


def test_the_rank_cut_from_most_peers_goes_first_and_a_partition_keeps_the_first_ranks_side():
    names = [f"s{i}g0" for i in range(3)]
    ann = {"s0g0": announce(suspects=["s2g0"]), "s1g0": announce(suspects=["s2g0"]),
           "s2g0": announce(suspects=["s0g0", "s1g0"])}
    assert decide(names, ann, "shrink")["failed"] == ["s2g0"]
    ann = {"s0g0": announce(suspects=["s1g0"]), "s0g1": announce(suspects=["s1g1"]),
           "s1g0": announce(suspects=["s0g0"]), "s1g1": announce(suspects=["s0g1"])}
    v = decide(NAMES, ann, "migrate")
    assert v["failed"] == ["s1g0", "s1g1"] and v["cut_off"] == ["s1g1", "s1g0"]


def test_a_partitioned_server_goes_whole_even_before_its_second_gpu_is_suspected():
    """Both of server 1's NICs lost carrier; only s1g0's cut has been seen by heartbeats so far."""
    ann = {"s0g0": announce(suspects=["s1g0"], server=0), "s0g1": announce(server=0),
           "s1g0": announce(suspects=["s0g0"], links_down=["nic"], server=1),
           "s1g1": announce(links_down=["nic"], server=1)}
    v = decide(NAMES, ann, "migrate")
    assert v["failed"] == ["s1g0", "s1g1"] and sorted(v["cut_off"]) == ["s1g0", "s1g1"]


def test_a_dead_nic_in_a_job_within_one_server_is_not_a_reason_to_go():
    names = ["s0g0", "s0g1"]
    ann = {"s0g0": announce(server=0), "s0g1": announce(links_down=["nic"], server=0)}
    assert decide(names, ann, "shrink")["failed"] == []
