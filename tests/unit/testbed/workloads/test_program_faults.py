"""What a fault did to the program jobs running when it struck: the job's stall, how it ended, the library's first
error and how long after the fault, and the line the summary prints (no fabric: results as the runner has them)."""
from testbed import runner
from testbed.faults import jobs
from testbed.workloads import attach_struck

T0 = 1000.0


def job(name, started_s, wall_s, exits, seconds, silences=(), reaction=None, first_error_s=None, ok=True,
        launcher="env"):
    """A program workload's result as the runner records it (times in seconds from T0)."""
    w = {"name": name, "type": "program", "launcher": launcher, "started_s": started_s, "wall_s": wall_s,
         "started_at": T0 + started_s + 0.1, "seconds": seconds, "ok": ok, "reaction": reaction,
         "first_error_at": T0 + first_error_s if first_error_s is not None else None,
         "silences": [list(s) for s in silences], "longest_silence_s": max((s[1] for s in silences), default=None)}
    if launcher == "mpirun":
        w["mpirun"], w["ranks"] = {"exit": exits[0]}, [{"rank": r} for r in range(4)]
    else:
        w["ranks"] = [{"rank": r, "exit": c} for r, c in enumerate(exits)]
    return w


def fault(kind, target, at_s):
    return {"kind": kind, "target": target, "at_s": at_s, "detected_s": None, "recovered_s": None,
            "restored_s": None, "installed_s": None}


def test_a_cut_routed_around_stalls_the_job_which_completes_with_its_checks_passed():
    # job launched at 2.1 s; the cut at 6.0 s (3.9 s into the job); its traffic silent 0.41 s from 3.92 s
    w = job("mpi-ecmp", 2.0, 12.0, [0], 11.5, silences=[(0.8, 0.6, True), (3.92, 0.41, True)], launcher="mpirun")
    f = fault("link-down", "rail0-spine0", 6.0)
    attach_struck([f], [w], T0)
    j, = f["jobs"]
    assert j["ended"] == "completed" and j["exits"] == [0] and j["error_after_s"] is None
    assert j["stall_s"] == 0.41 and j["stall_from_s"] == 6.02 and j["resumed_s"] == 6.43
    assert j["longest_silence_s"] == 0.6 and j["ended_s"] == 13.6
    assert jobs.describe(f) == ("; job mpi-ecmp: its traffic stalled 0.41 s from 6.02 s, resumed at 6.43 s, "
                              "completed at 13.6 s, every rank exited 0, its checks passed")


def test_a_cut_with_no_way_around_makes_gloo_raise_after_its_timeout_and_the_line_names_it():
    w = job("torch-nic", 20.0, 25.0, [1, 1, 1], 24.0, silences=[(9.93, 14.0, False)], ok=True, first_error_s=40.2,
            reaction="rank 1 (s0g1) exited 1 at +20.10 s: RuntimeError: Timed out waiting 10000ms for recv")
    f = fault("link-down", "s1g0/nic", 30.0)
    attach_struck([f], [w], T0)
    j, = f["jobs"]
    assert j["ended"] == "failed" and j["error_after_s"] == 10.2 and j["resumed_s"] is None
    line = jobs.describe(f)
    assert "its traffic stalled 14.00 s from 30.03 s to its end" in line
    assert "failed 10.20 s after the fault, exit codes 1, 1, 1, rank 1 (s0g1) exited 1" in line
    assert line.endswith("RuntimeError: Timed out waiting 10000ms for recv")


def test_a_job_that_waits_for_ever_is_hung_and_killed_at_its_timeout():
    w = job("mpi-hang", 50.0, 21.0, [None], 20.0, silences=[(4.0, 15.9, False)], launcher="mpirun")
    f = fault("link-down", "s0g1/nic", 54.0)
    attach_struck([f], [w], T0)
    j, = f["jobs"]
    assert j["ended"] == "hung" and j["error_after_s"] is None
    assert "hung: still running at its timeout, killed at 70.1 s (+16.10 s)" in jobs.describe(f)


def test_only_jobs_running_when_the_fault_struck_get_its_outcome_and_gpu_faults_get_one_too():
    before = job("before", 0.0, 5.0, [0, 0], 4.8)
    crashed = job("tf-crash", 5.5, 20.0, [1, -9, 1], 19.0, first_error_s=16.0,
                  reaction="rank 0 (s0g0) exited 1 at +10.40 s: UnavailableError: Socket closed")
    never = fault("link-down", "rail0-spine0", None)
    crash = fault("gpu-crash", "s1g0", 12.0)
    attach_struck([never, crash], [before, crashed], T0)
    assert "jobs" not in never and [j["workload"] for j in crash["jobs"]] == ["tf-crash"]
    j, = crash["jobs"]
    assert j["ended"] == "failed" and j["error_after_s"] == 4.0 and j["stall_s"] is None
    assert jobs.describe(crash) == ("; job tf-crash: failed 4.00 s after the fault, exit codes 1, -9, 1, "
                                  "rank 0 (s0g0) exited 1 at +10.40 s: UnavailableError: Socket closed")


def test_the_summary_line_of_a_link_fault_and_of_a_gpu_fault_carries_the_jobs_reaction():
    link, crash = fault("link-down", "rail0-spine0", 6.0), fault("gpu-crash", "s1g0", 12.0)
    link.update(detected_s=6.001, installed_s=6.01, jobs=[{
        "workload": "mpi-ecmp", "ended": "completed", "exits": [0], "ok": True, "ended_s": 13.6, "stall_s": 0.41,
        "stall_from_s": 6.02, "resumed_s": 6.43, "error_after_s": None, "reaction": None}])
    crash.update(detected_s=16.0, recovery="abort", processes=1, jobs=[{
        "workload": "tf-crash", "ended": "failed", "exits": [1, -9], "ok": True, "ended_s": 17.0, "stall_s": None,
        "error_after_s": 4.0, "reaction": "rank 0 (s0g0) exited 1 at +10.40 s: UnavailableError: Socket closed"}])
    text = runner.summary_table({"workloads": [], "faults": [link, crash], "checks": []})
    assert "restored at None s; job mpi-ecmp: its traffic stalled 0.41 s" in text
    assert "job aborted; job tf-crash: failed 4.00 s after the fault, exit codes 1, -9" in text


def test_a_cut_that_stalled_nothing_says_so_with_the_jobs_longest_silence():
    w = job("mpi-ecmp", 2.0, 16.0, [0], 15.2, silences=[(1.0, 0.304, True)], launcher="mpirun")
    f = fault("link-down", "rail0-spine0", 7.0)
    attach_struck([f], [w], T0)
    assert f["jobs"][0]["stall_s"] is None
    assert jobs.describe(f).startswith("; job mpi-ecmp: no stall in its traffic (its longest silence 0.30 s), "
                                     "completed at 17.3 s")
