"""GPUs that come back (gpu-restart, nic-up): the fault reaches the running job through testbed.faults.returns.restart_hooks,
and the job manager starts the rank again only once the job has dropped the old one (fenced, not a member)."""
from types import SimpleNamespace

from hosts.collectives.store import FileStore
from hosts.spec import CollectiveRankSpec, Member, Peer, Rejoin
from hosts.recovery.membership import Membership
from testbed.fabric.topo import build
from testbed.faults import outcomes
from testbed.faults.returns import restart_hooks
from testbed.runtime import recovery


def manager(tmp_path):
    fabric = build("rail-optimized", 2, 2)
    members = [recovery.member(h, h.rank) for h in fabric.gpus()]
    spec = CollectiveRankSpec(rank=0, peers=tuple(Peer(**m, rank=i) for i, m in enumerate(members)), store="",
                              op="allreduce", algo="ring", bytes=4096, recovery="shrink", admit=True, timeout_s=5)
    job = recovery.JobManager(SimpleNamespace(fabric=fabric), spec, str(tmp_path), members, budget=30)
    started = []
    job._start_rank = lambda host, path, spec: started.append((host, spec))
    return job, started


def test_a_restart_waits_until_the_job_has_dropped_the_old_rank(tmp_path):
    job, started = manager(tmp_path)
    assert job.rejoin("s9g9") == 0                      # not this job's GPU
    assert job.rejoin("s1g1") == 1
    job._restart_dropped()
    assert started == []                                # still a member: its old rank may yet be alive
    job.fenced.add("s1g1")
    job.members = [m for m in job.members if m["name"] != "s1g1"]
    job._restart_dropped()
    job._restart_dropped()                              # once
    (host, spec), = started
    assert host == "s1g1" and spec.rejoin == Rejoin(me=Member(**job.entries["s1g1"])) and spec.rank == 3
    assert job.restarts[0]["launched_at"] is not None


def test_the_hook_reaches_the_running_jobs_and_an_ended_job_refuses_who_still_waits(tmp_path):
    job, _ = manager(tmp_path)
    job.start()
    try:
        assert job.rejoin in restart_hooks
        assert sum(hook("s0g1") for hook in restart_hooks) == 1
        Membership(FileStore(str(tmp_path))).request_join("s0g1", job.entries["s0g1"])
    finally:
        job.stop()
    assert job.rejoin not in restart_hooks
    assert Membership(FileStore(str(tmp_path))).joined("s0g1", timeout=0.1) == {"error": "the job had ended"}


def test_a_gpu_restart_is_reported_with_the_growth_that_took_it_back():
    t0 = 1000.0
    fault = {"kind": "gpu-restart", "target": "s1g1", "at_s": 9.0}
    recoveries = [{"policy": "shrink", "failed": ["s1g1"], "detected_at": 1005.0, "decided_at": 1005.2},
                  {"policy": "rejoin", "failed": [], "joined": ["s1g1"], "decided_at": 1010.0, "reformed_at": 1010.4,
                   "first_success_at": 1011.0, "lost_steps": 0}]
    outcomes.fill([fault], [{"recoveries": recoveries}], t0, build("rail-optimized", 2, 2))
    assert (fault["detected_s"], fault["recovered_s"], fault["first_success_s"], fault["recovery"]) == \
        (10.0, 10.4, 11.0, "rejoin")
    assert "admitted at 10.0 s (+1.00 s), in the grown communicator at 10.4 s" in \
        outcomes.describe(fault)
    nobody = {"kind": "nic-up", "target": "s1g1", "at_s": 9.0, "processes": 0}
    assert outcomes.checks([nobody])[0]["detail"].startswith("no running job")


def test_the_job_runs_on_in_the_ranks_the_manager_started(tmp_path):
    """A churn run waits on running(): once every first rank has failed, the job lives in restarted ranks, and
    the fault schedule must not stop with the first ranks' processes."""
    import threading
    job, _ = manager(tmp_path)
    assert not job.running()
    job.rejoin("s1g1")
    assert job.running()                                 # back, not yet started: the job still counts it
    job.restarts[0]["launched_at"] = 1.0
    assert not job.running()
    done = threading.Event()
    t = threading.Thread(target=done.wait)
    t.start()
    job._threads.append(t)
    assert job.running()                                 # a restarted rank still runs
    done.set()
    t.join()
    assert not job.running()
