"""Rejoining: the bookkeeping of ranks that come back (the join keys, the leader's plan, admit()'s order, the
growth agreement) and the shared state a newcomer is sent (rollback of a lost step, parity against numpy)."""
import threading

import numpy as np

from hosts.agents.collective_rank import agree
from hosts.collectives.benchmark import make_input
from hosts.collectives.store import FileStore
from hosts.spec import CollectiveRankSpec, Peer
from hosts.recovery.membership import Membership, admit, member_entry
from hosts.recovery.shared_state import SharedState, digest, expected_digests, past_records, steps_worlds
from testbed.workloads import state_parity


def m(name):
    return member_entry(name, f"10.0.0.{name[-1]}", None, int(name[1]), int(name[3]))


ORDER = ["s0g0", "s0g1", "s1g0", "s1g1"]


def names(members):
    return [x["name"] for x in members]


def test_a_newcomer_takes_its_place_in_the_original_order():
    assert names(admit([m("s0g0"), m("s0g1"), m("s1g1")], [m("s1g0")], ORDER)) == ORDER
    # two came back, in either order: the job is numbered as it began
    assert names(admit([m("s0g0"), m("s1g1")], [m("s1g0"), m("s0g1")], ORDER)) == ORDER
    assert names(admit([m("s1g1")], [m("s0g0")], ORDER)) == ["s0g0", "s1g1"]
    # a member is not added twice; a host the job did not begin with goes after every member it follows
    assert names(admit([m("s0g0"), m("s1g0")], [m("s0g0")], ORDER)) == ["s0g0", "s1g0"]
    assert names(admit([m("s0g0"), m("s1g0")], [m("s2g0")], ORDER)) == ["s0g0", "s1g0", "s2g0"]


def test_join_requests_answers_and_plans_in_the_store(tmp_path):
    job = Membership(FileStore(str(tmp_path), timeout=1))
    assert job.join_requests() == {} and job.plan(1, 5) == {}
    job.request_join("s1g0", m("s1g0"))
    job.request_join("s0g1", m("s0g1"))
    assert list(job.join_requests()) == ["s1g0", "s0g1"]          # oldest first
    assert job.join_requests()["s0g1"]["me"] == m("s0g1")
    job.answer_join("s1g0", {"epoch": 3})
    assert list(job.join_requests()) == ["s0g1"] and job.joined("s1g0", timeout=0.1) == {"epoch": 3}
    job.request_join("s1g0", m("s1g0"))          # its next life: the old answer is gone
    assert not job.store.exists("joined/s1g0")
    job.set_plan(2, 7, {"grow": {"s0g1": m("s0g1")}})
    assert job.plan(2, 7) == {"grow": {"s0g1": m("s0g1")}} and job.plan(2, 8) == {}


def test_growth_is_an_epoch_agreed_like_a_recovery_with_no_step_lost(tmp_path):
    job = Membership(FileStore(str(tmp_path), timeout=5))
    members = [m("s0g0"), m("s0g1"), m("s1g1")]
    spec = CollectiveRankSpec(rank=0, peers=tuple(Peer(**m(n), rank=i) for i, n in enumerate(ORDER)), store="",
                              op="allreduce", algo="ring", bytes=0, recovery="shrink", timeout_s=5)
    job.request_join("s1g0", m("s1g0"))
    joining = {"s1g0": m("s1g0")}
    out = {}

    def rank(name):
        out[name] = agree(spec, job, None, 4, members, name, 12, False, [], joining)
    threads = [threading.Thread(target=rank, args=(x["name"],)) for x in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for decision in out.values():
        assert names(decision["members"]) == ORDER
        assert decision["step"] == 12 and decision["lost_steps"] == 0 and decision["failed"] == []
        assert decision["joined"] == ["s1g0"]
    assert len(out) == 3 and job.joined("s1g0", timeout=1) == {"epoch": 4} and job.join_requests() == {}


def test_the_state_is_rolled_back_when_its_step_is_run_again():
    s = SharedState(4, fresh=True)
    one = np.ones(4, np.float32)
    s.apply(0, 4, one)
    s.apply(1, 4, one)
    s.resume_at(1)                  # step 1 was lost: undone, to be run again
    assert s.value.tolist() == [1] * 4 and [h[0] for h in s.history] == [0] and s.worlds == [[4, 1]]
    s.apply(1, 3, 2 * one)
    s.resume_at(2)                  # resumes after its last step: nothing undone
    assert s.value.tolist() == [3] * 4 and s.worlds == [[4, 1], [3, 1]]
    assert steps_worlds(s.worlds) == [4, 3]


def test_state_digests_follow_numpys_sum_of_the_inputs_for_each_steps_world():
    count = 64
    total = lambda w: np.sum([make_input(r, count, np.float32) for r in range(w)], axis=0).astype(np.float32)
    assert expected_digests([4, 3], count) == [digest(total(4)), digest(total(4) + total(3))]


def state_of(worlds, count, host, skip=0, corrupt=None):
    s = SharedState(count, fresh=True)
    for step, w in enumerate(worlds):
        s.apply(step, w, np.sum([make_input(r, count, np.float32) for r in range(w)], axis=0).astype(np.float32))
    history = s.history[skip:]
    if corrupt is not None:
        history[corrupt] = [history[corrupt][0], history[corrupt][1], "0" * 16]
    return {"host": host, "state": {"history": history, "worlds": s.worlds, "diverged": 0, "synced": 0}}


def test_parity_finds_a_rank_whose_state_differs_from_numpys():
    worlds = [4, 4, 3, 3, 4]
    good = [state_of(worlds, 32, "a"), state_of(worlds, 32, "b", skip=3)]     # b joined at step 3
    assert state_parity.check(good, 32) == {"ranks": 2, "steps": 5, "divergent": 0, "first_divergent": None,
                                            "sync_mismatches": 0, "synced": 0}
    bad = state_parity.check(good + [state_of(worlds, 32, "c", corrupt=2)], 32)
    assert bad["divergent"] == 1 and bad["first_divergent"] == 2
    # a rank that counts another world for a step diverges on every step it reports
    other = state_of([4, 4, 4, 3, 4], 32, "d")
    assert state_parity.check(good + [other], 32)["divergent"] == 5


def test_a_newcomer_keeps_every_members_records_of_the_past_epochs():
    # the first holder joined in epoch 3 and never recorded it; another member did, with its own times
    first_holder = [{"epoch": 1, "policy": "shrink", "failed": ["s0g1"]}, {"epoch": 2, "policy": "rejoin"}]
    other = first_holder + [{"epoch": 3, "policy": "rejoin", "joined": ["s0g0"]},
                            {"epoch": 4, "policy": "shrink", "failed": ["s1g0"], "detected_at": 7.5}]
    third = [{"epoch": 4, "policy": "shrink", "failed": ["s1g0"], "detected_at": 7.2}]
    merged = past_records([first_holder, third, other, []])
    assert [r["epoch"] for r in merged] == [1, 2, 3, 4]               # epoch 3 kept, one record per epoch
    assert merged[:2] == first_holder and merged[3]["detected_at"] == 7.2     # the first log's, where it has one
    assert past_records([]) == []
