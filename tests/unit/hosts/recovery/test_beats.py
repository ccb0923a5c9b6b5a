"""Who beats to whom (beats.watched): each rank's two neighbours per path in the job's order, mutually, so that a
64-GPU job sends 4 beats per rank per period instead of 14, every rank is still watched, and a cut is still
resolved against the rank whose link died (membership.decide)."""
import itertools
import random
import socket
import time

import pytest

from hosts.recovery import beats
from hosts.recovery.beats import paths_to, watched
from hosts.recovery.membership import decide


def grid(servers, gpus, hb=True):
    return [{"name": f"s{s}g{g}", "ip": f"10.0.{s}.{g + 1}", "hb_ip": f"10.1.{s}.{g + 1}" if hb else None,
             "server": s, "local_rank": g} for s in range(servers) for g in range(gpus)]


def pairs(members):
    return {m["name"]: {(n, path) for n, path, _ in watched(m, members)} for m in members}


@pytest.mark.parametrize("servers,gpus", [(8, 8), (2, 4), (4, 4), (3, 5), (1, 7), (5, 1), (2, 2)])
def test_each_rank_watches_its_ring_neighbours_per_path_mutually_and_everyone_is_watched(servers, gpus):
    members = grid(servers, gpus)
    watch = pairs(members)
    for m in members:
        by_path = {path: {n for n, p in watch[m["name"]] if p == path} for path in ("nic", "hb")}
        assert len(by_path["hb"]) == min(2, gpus - 1) and len(by_path["nic"]) == min(2, servers - 1), (m, by_path)
        for n, path in watch[m["name"]]:
            assert (m["name"], path) in watch[n], f"{m['name']} watches {n} over {path}, not the other way round"
            assert path in {p for p, _ in paths_to(m, next(x for x in members if x["name"] == n))}
    # each path's ring is connected: every rank of a ring of three or more is watched by two on it
    for path in ("nic", "hb"):
        watchers = {m["name"]: sum((m["name"], path) in watch[n] for n in watch) for m in members}
        ring = gpus if path == "hb" else servers
        assert set(watchers.values()) == {min(2, ring - 1)}, (path, watchers)
    if (servers, gpus) == (8, 8):
        assert {len(w) for w in watch.values()} == {4}           # 14 before: every peer one hop away


def test_the_rings_follow_the_jobs_order_and_the_order_needs_the_watcher():
    members = grid(5, 1)                        # one rail: every rank reaches every other over its NIC
    order = [members[i] for i in (0, 3, 1, 4, 2)]
    assert {n for n, _, _ in watched(order[2], order)} == {"s3g0", "s4g0"}        # s1g0 between them
    with pytest.raises(ValueError, match="s1g0 is not among the members"):
        watched(members[1], [m for m in members if m["name"] != "s1g0"])


def test_watching_is_mutual_when_paths_do_not_form_classes():
    """Ranks without an HB port reach their server's others over the NIC, which also reaches their rail: the
    NIC's reach is then no equivalence, and watching must still be mutual (or a live rank is found silent)."""
    members = grid(3, 3)
    for m in members:
        if m["server"] == 1:
            m["hb_ip"] = None
    watch = pairs(members)
    for a, b in itertools.permutations(watch, 2):
        assert {p for n, p in watch[a] if n == b} == {p for n, p in watch[b] if n == a}, (a, b)


def test_a_cut_seen_only_by_ring_neighbours_still_removes_the_rank_whose_link_died():
    """On 6 servers, s3g1's NIC is cut, its carrier still up (a port disabled at the switch): its two rail
    neighbours and it find each other silent; the verdict removes it alone, as with every rail peer watching."""
    members = grid(6, 2)
    names = [m["name"] for m in members]
    cut = "s3g1"
    ann = {}
    for m in members:
        silent = {n for n, path, _ in watched(m, members) if path == "nic" and cut in (n, m["name"])}
        ann[m["name"]] = {"at": 0.0, "step": 5, "in_op": True, "links_down": [], "server": m["server"],
                          "suspects": {n: "heartbeats" for n in silent}}
    assert len(ann[cut]["suspects"]) == 2
    v = decide(names, ann, "shrink")
    assert v["failed"] == [cut] and v["cut_off"] == [cut]


def announcements_of_a_partition(members, side_of):
    """Every rank's announcement when the NIC paths between sides are dead with carrier up: it suspects the
    neighbours it watches across, and hears the others it watches."""
    ann = {}
    for m in members:
        watched_now = watched(m, members)
        across = {n for n, path, _ in watched_now if path == "nic" and side_of(n) != side_of(m["name"])}
        ann[m["name"]] = {"at": 0.0, "step": 5, "in_op": True, "links_down": [], "server": m["server"],
                          "suspects": {n: "heartbeats" for n in across},
                          "hears": sorted({n for n, _, _ in watched_now} - across)}
    return ann


@pytest.mark.parametrize("servers,gpus,other_side,goes", [
    (8, 1, {2, 3, 6, 7}, {2, 3, 6, 7}),         # a ring split in four runs, equal sides: the first rank's stays
    (6, 1, {3, 5}, {3, 5}),                     # runs [0 1 2] [3] [4] [5]: the smaller side goes
    (8, 8, {1, 3, 5, 7}, {1, 3, 5, 7}),         # every other server: each rail ring cut at every hop
    (8, 8, {2, 3, 6, 7}, {2, 3, 6, 7}),         # servers in runs of two, their HB domains joining each rail's runs
    (5, 2, {0, 2}, {0, 2}),                     # the smaller side, even with the first rank in it
])
def test_a_partition_that_leaves_carrier_up_and_splits_the_rings_in_runs_removes_one_side_whole(
        servers, gpus, other_side, goes):
    members = grid(servers, gpus)
    names = [m["name"] for m in members]
    server = {m["name"]: m["server"] for m in members}
    ann = announcements_of_a_partition(members, lambda n: server[n] in other_side)
    v = decide(names, ann, "shrink")
    assert sorted(v["failed"]) == sorted(n for n in names if server[n] in goes)
    assert v["cut_off"] == sorted(v["failed"], key=names.index, reverse=True)


def test_three_sides_fall_back_to_rank_by_rank_and_still_leave_no_cut():
    members = grid(3, 1)                                    # every rank alone: cuts make a triangle
    names = [m["name"] for m in members]
    ann = announcements_of_a_partition(members, lambda n: n)
    v = decide(names, ann, "shrink")
    assert v["failed"] == ["s1g0", "s2g0"] and v["cut_off"] == ["s2g0", "s1g0"]     # rank by rank, the later first


def test_one_cut_between_groups_a_late_beat_left_apart_removes_one_rank_not_a_group():
    """s0g0-s1g0's path died (carrier up); s3g0 and s4g0 have not heard each other within half a timeout (a late
    beat), so the others form two groups: one cut between them is no partition, and only s1g0 goes."""
    members = grid(6, 1)
    names = [m["name"] for m in members]
    ann = announcements_of_a_partition(members, lambda n: n == "s1g0")
    ann["s1g0"]["suspects"] = {"s0g0": "heartbeats"}
    ann["s1g0"]["hears"] = ["s2g0"]
    ann["s2g0"]["suspects"], ann["s2g0"]["hears"] = {}, ["s1g0", "s3g0"]
    ann["s3g0"]["hears"].remove("s4g0")
    ann["s4g0"]["hears"].remove("s3g0")
    assert decide(names, ann, "shrink")["failed"] == ["s1g0"]


def test_a_beat_is_dated_by_its_arrival_not_by_when_the_thread_reads_it():
    """The heartbeat thread reads its sockets once a period: a beat that waited there keeps the kernel's time."""
    ip = f"127.{random.randrange(1, 255)}.{random.randrange(0, 255)}.{random.randrange(1, 255)}"   # runs apart
    rx = beats.open_sockets({"ip": ip})["nic"]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            before = time.time()
            tx.sendto(beats.encode(1, 0, 0, "s0g0"), (ip, beats.PORT))
            after = time.time()            # on loopback the kernel stamps the beat within sendto, however loaded
            time.sleep(0.3)
            data, anc, _, _ = rx.recvmsg(256, beats.STAMP_SPACE)
            read = time.time()
        at = beats.stamp(anc, read)
        assert beats.decode(data) == (1, 0, 0, "s0g0")
        assert before - 0.01 <= at <= after + 0.01 and read - at > 0.2, (before, at, after, read)
        assert beats.stamp([], 5.0) == 5.0            # no stamp: the caller's time
    finally:
        rx.close()
