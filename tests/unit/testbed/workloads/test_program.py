"""The program workload without a fabric: the launchers' environment, mpirun's command line, figures read from a
program's output, what a job's end says, and scenario errors (one line each)."""
import json
import os
import signal
import subprocess
import sys

import pytest

from testbed import runner
from testbed.fabric.backends.base import MPI_AGENT, Namespaces, RemoteShell
from testbed.fabric.topo import build
from testbed.scenario import ScenarioError, validate
from testbed.workloads import program
from testbed.workloads import program_launch as launch
from tests import paths


def hosts_of(names, fabric=None):
    fabric = fabric or build("rail-optimized", 3, 3, spines=1)
    return [fabric.hosts[n] for n in names]


def test_env_of_every_rank_for_an_odd_subset_names_rank0_as_master_and_counts_local_ranks_per_server():
    hosts = hosts_of(["s0g0", "s0g2", "s1g1", "s2g0", "s2g1"])
    envs = [launch.rank_env(hosts, r, 29600) for r in range(5)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3", "4"]
    assert {e["WORLD_SIZE"] for e in envs} == {"5"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "0", "1"]
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["2", "2", "1", "2", "2"]
    assert [e["NODE_RANK"] for e in envs] == ["0", "0", "1", "2", "2"]
    assert {e["MASTER_ADDR"] for e in envs} == {hosts[0].ip} and hosts[0].ip.startswith("10.")
    assert {e["MASTER_PORT"] for e in envs} == {"29600"}
    for r, e in enumerate(envs):
        tf = json.loads(e["TF_CONFIG"])
        assert tf == {"cluster": {"worker": [f"{h.ip}:29600" for h in hosts]}, "task": {"type": "worker", "index": r}}
        assert e["GLOO_SOCKET_IFNAME"] == "eth0" and e["TB_HOST"] == hosts[r].name


def test_default_hosts_are_every_gpu_server_by_server_and_listed_hosts_keep_their_order():
    fabric = build("rail-optimized", 2, 3, spines=1)
    assert [h.name for h in program.job_hosts(fabric, {})] == ["s0g0", "s0g1", "s0g2", "s1g0", "s1g1", "s1g2"]
    assert [h.name for h in program.job_hosts(fabric, {"hosts": ["s1g2", "s0g0"]})] == ["s1g2", "s0g0"]


def test_command_words_take_the_hosts_interpreter_and_the_environment_goes_in_front():
    assert launch.argv("{python} -m hosts.x --n '2 3'", "/py") == ["/py", "-m", "hosts.x", "--n", "2 3"]
    assert launch.argv(["{python}", "a b"], "python3") == ["python3", "a b"]
    assert launch.with_env({"RANK": "1"}, ["true"]) == ["env", "RANK=1", "true"]


def test_mpirun_runs_one_rank_per_host_through_the_backends_remote_shell_over_the_nics_without_binding():
    hosts = hosts_of(["s0g0", "s1g0", "s2g0"])
    s = program.settings({"type": "program", "command": "{python} prog.py", "launcher": "mpirun",
                          "env": {"X": 1}, "mpirun_args": ["--mca", "btl_tcp_eager_limit", "65536"]})
    shell = RemoteShell(f"/py {MPI_AGENT}", {"TB_MPI_HOSTS": "/run/map.json"})
    words = launch.mpirun_argv(hosts, s, shell, "/out/mpi", "/py")
    mp = words.index("mpirun")
    env = dict(w.split("=", 1) for w in words[1:mp])
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert env["TB_MPI_HOSTS"] == "/run/map.json" and env["X"] == "1" and env["MASTER_ADDR"] == hosts[0].ip
    assert "RANK" not in env and "TF_CONFIG" not in env           # per rank: Open MPI's own
    rest = words[mp:]
    assert rest[rest.index("-np") + 1] == "3"
    assert rest[rest.index("--host") + 1] == ",".join(f"{h.ip}:1" for h in hosts)
    assert rest[rest.index("--bind-to") + 1] == "none"
    mca = {rest[i + 1]: rest[i + 2] for i, w in enumerate(rest) if w == "--mca"}
    assert mca["plm_rsh_agent"] == f"/py {MPI_AGENT}" and os.path.exists(MPI_AGENT)
    assert rest[rest.index("--output-filename") + 1] == "/out/mpi"
    assert mca["btl"] == "tcp,self" and mca["btl_tcp_if_include"] == "eth0" and mca["oob_tcp_if_include"] == "eth0"
    assert mca["btl_tcp_eager_limit"] == "65536"
    assert rest[-2:] == ["/py", "prog.py"]


def test_the_agent_runs_the_remote_command_in_the_host_it_is_given(tmp_path):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"10.11.0.2": ["env", "ENTERED=10.11.0.2"]}))
    env = {**os.environ, "TB_MPI_HOSTS": str(hosts)}
    agent = [sys.executable, MPI_AGENT]
    out = subprocess.run(agent + ["-x", "10.11.0.2", "echo", "$ENTERED", '"a;b"'], env=env, capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 0 and out.stdout == "10.11.0.2 a;b\n"       # one shell command, as ssh runs it
    out = subprocess.run(agent + ["10.11.9.9", "true"], env=env, capture_output=True, text=True, timeout=10)
    assert out.returncode == 255 and "10.11.9.9 is not a host of this job" in out.stderr


OUTPUT = """#  allreduce, 4 ranks
  4096  1024  float  495  8.275  11.033  0
busbw 3.5 MB/s
{"busbw_MBps": 4.25, "nested": {"loss": 0.5}}
not json {
busbw 3.75 MB/s
{"other": 1}
"""


@pytest.mark.parametrize("fig, value", [
    ({"regex": r"busbw (\S+) MB/s"}, 3.75),                     # the last match, its first group, a number
    ({"regex": r"busbw (?P<value>\d+)\.\d+"}, 3.0),             # the group named value
    ({"regex": r"^#  (\w+),"}, "allreduce"),                    # not a number: kept as text
    ({"regex": r"nothing here (\d+)"}, None),
    ({"json": "busbw_MBps"}, 4.25),                             # the last JSON line that has the key
    ({"json": "nested.loss"}, 0.5),
    ({"json": "missing"}, None),
])
def test_figures_from_a_regex_or_a_json_line(fig, value):
    assert program.figure(OUTPUT, fig) == value


def settings(**kw):
    return program.settings({"type": "program", "command": "x", **kw})


def env_result(exits, seconds, errors=None):
    ranks = [{"rank": r, "host": f"s0g{r}", "exit": c, "ended": program.how_ended(c), "seconds": t,
              "last_error": (errors or {}).get(r, "")} for r, (c, t) in enumerate(zip(exits, seconds))]
    return {"launcher": "env", "ranks": ranks, "world": len(ranks), "seconds": max(seconds), "figures": {}}


def test_a_job_completes_when_every_rank_exits_0_and_its_figures_are_in_bounds():
    r = env_result([0, 0], [2.0, 2.5])
    r["figures"] = {"busbw": 4.0, "loss": None}
    c = program.checks(settings(figures={"busbw": {"json": "b", "min": 5}, "loss": {"json": "l"}}), r)
    assert c[0] == {"name": "completed", "ok": True, "detail": "2 ranks exited 0 in 2.50 s"}
    assert c[1]["name"] == "figure busbw" and not c[1]["ok"] and c[1]["detail"] == "4 (expected >= 5)"
    assert c[2] == {"name": "figure loss", "ok": False, "detail": "rank 0 printed no loss"}


def test_a_crashed_peer_the_library_reports_is_a_failure_on_its_own_with_the_times():
    started = 1000.0
    r = env_result([1, -signal.SIGKILL, None], [3.2, 2.0, 60.0], {0: "RuntimeError: Connection closed by peer"})
    r.update(program.library_reaction(r, {}, started))
    assert r["first_error_at"] == 1003.2                     # the survivor's error, not the killed rank's end
    assert r["reaction"] == "rank 0 (s0g0) exited 1 at +3.20 s: RuntimeError: Connection closed by peer"
    hung = program.checks(settings(expect="failure"), r)[0]
    assert not hung["ok"] and "did not notice" in hung["detail"]           # rank 2 ran into the timeout
    r = env_result([1, -signal.SIGKILL], [3.2, 2.0], {0: "RuntimeError: boom"})
    r.update(program.library_reaction(r, {}, started))
    ok = program.checks(settings(expect="failure"), r)[0]
    assert ok["ok"] and ok["name"] == "failed on its own" and "at +3.20 s" in ok["detail"]
    assert not program.checks(settings(), r)[0]["ok"]


DASHES = "-" * 74
MPIRUN_STDERR = f"""[vm:05357] plm:rsh: Warning: setpgid(5363,5363) failed in parent with errno=Permission denied(13)
{DASHES}
ORTE was unable to reliably start one or more daemons.
This usually is caused by:

* not finding the required libraries and/or binaries on
{DASHES}
{DASHES}
An MPI communication peer process has unexpectedly disconnected.  This
usually indicates a failure in the peer process (e.g., a crash or
{DASHES}
mpirun noticed that process rank 2 with PID 0 on node 10.11.1.1 exited on signal 9 (Killed).
"""


def test_mpirun_ending_in_error_is_the_libraries_reaction_in_its_own_words(tmp_path):
    err = tmp_path / "mpirun.stderr"
    err.write_text(MPIRUN_STDERR)
    said = program.mpirun_said(str(err))
    assert said == ["ORTE was unable to reliably start one or more daemons.",      # each banner's first sentence
                    "An MPI communication peer process has unexpectedly disconnected.",
                    "mpirun noticed that process rank 2 with PID 0 on node 10.11.1.1 exited on signal 9 (Killed)."]
    r = {"launcher": "mpirun", "mpirun": {"exit": 9, "ended": "exited 9", "seconds": 4.5, "said": said}}
    out = program.library_reaction(r, {0: {"exit": 9, "ended_at": 1004.5}}, 1000.0)
    assert out["first_error_at"] == 1004.5
    assert out["reaction"] == "mpirun exited 9 at +4.50 s: ORTE was unable to reliably start one or more daemons."


def test_each_job_keeps_its_logs_in_its_own_folder_of_the_results(tmp_path):
    class Net:
        out_dir = str(tmp_path)
    first, second = program.log_dir(Net, "job"), program.log_dir(Net, "job")
    assert first == str(tmp_path / "programs" / "job") and second == str(tmp_path / "programs" / "job-2")
    assert os.path.isdir(first) and os.path.isdir(second)


def test_how_a_process_ended():
    assert program.how_ended(0) == "exited 0"
    assert program.how_ended(-9) == "killed by SIGKILL"
    assert program.how_ended(None) == "still running at the timeout (killed)"


def check(workload, hosts="netns"):
    doc = validate({"name": "p", "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2,
                                            "spines": 1}, "hosts": hosts, "workloads": [workload]})
    runner.check(doc, runner.fabric_of(doc))


@pytest.mark.parametrize("workload, error", [
    ({"type": "program"}, "workloads.0: 'command' is a required property"),
    ({"type": "program", "command": "x", "launcher": "srun"}, "workloads.0.launcher: 'srun' is not one of"),
    ({"type": "program", "command": "x", "hosts": ["s9g9"]}, "program host 's9g9' is not a host of this fabric"),
    ({"type": "program", "command": "x", "figures": {"b": {"regex": "("}}}, "program figure 'b': regex '('"),
    ({"type": "program", "command": "x", "figures": {"b": {"unit": "s"}}}, "figure 'b' needs one of regex or json"),
    ({"type": "program", "command": "x", "figures": {"b": {"json": "b", "rank": 4}}}, "rank 4 of a job of 4 ranks"),
    ({"type": "program", "command": "a 'b"}, "program command: No closing quotation"),
    ({"type": "program", "command": "x", "env": {"A-B": 1}}, "'A-B' is not an environment variable name"),
    ({"type": "program", "command": "x", "name": "a/b"}, "program name 'a/b'"),
])
def test_scenario_errors_are_one_line(workload, error):
    with pytest.raises(ScenarioError) as exc:
        check(workload)
    assert error in str(exc.value) and "\n" not in str(exc.value)


def test_both_launchers_are_accepted_on_both_host_backends():
    for hosts in ("netns", "docker"):
        check({"type": "program", "command": "x", "launcher": "mpirun"}, hosts=hosts)
        check({"type": "program", "command": "x"}, hosts=hosts)


def test_namespace_hosts_remote_shell_is_the_agent_with_a_map_of_addresses_to_entering_prefixes(tmp_path):
    class Node:
        def __init__(self, name, pid):
            self.name, self.pid = name, pid
    shell = Namespaces(str(tmp_path)).remote_shell({"10.11.0.1": Node("s0g0", 11), "10.11.1.1": Node("s1g0", 12)},
                                                  str(tmp_path))
    assert shell.agent == f"{sys.executable} {MPI_AGENT}"
    with open(shell.env["TB_MPI_HOSTS"]) as f:
        assert json.load(f) == {   # each daemon gets its own host's TMPDIR, not the first host's (mpirun's)
            "10.11.0.1": ["nsenter", "--target", "11", "--net", "--", "env", f"TMPDIR={tmp_path}/tmp/s0g0"],
            "10.11.1.1": ["nsenter", "--target", "12", "--net", "--", "env", f"TMPDIR={tmp_path}/tmp/s1g0"]}
    shell.close()                        # nothing started for the job: nothing to stop


def test_collected_mpi_output_becomes_per_rank_logs_and_the_jobs_folder_goes(tmp_path):
    folder, logs = tmp_path / "run" / "mpi-x", tmp_path / "logs"
    (folder / "out" / "1" / "rank.0").mkdir(parents=True)
    (folder / "out" / "1" / "rank.0" / "stdout").write_text("busbw 1\n")
    logs.mkdir()
    launch.collect_mpi_output(str(folder), str(logs), 2)
    assert (logs / "rank0.stdout").read_text() == "busbw 1\n"
    assert [(logs / f"rank{r}.{s}").exists() for r in (0, 1) for s in ("stdout", "stderr")] == [True] * 4
    assert (logs / "rank1.stdout").read_text() == "" and not folder.exists()


def test_example_scenarios_load_and_name_programs_that_exist():
    from testbed.scenario import load
    found = sorted(f for f in os.listdir(paths.SCENARIOS) if f.startswith("program-"))
    assert found
    for f in found:
        doc = load(os.path.join(paths.SCENARIOS, f), [])
        runner.check(doc, runner.fabric_of(doc))
        for w in doc["workloads"]:
            script = next(word for word in launch.argv(w["command"], "py") if word.startswith("hosts/"))
            assert os.path.exists(os.path.join(paths.ROOT, script)), (f, script)


def test_supervise_times_each_end_and_stops_what_outlives_the_timeout():
    import time
    procs = {0: (subprocess.Popen(["true"]), "", ""), 1: (subprocess.Popen(["sleep", "30"]), "", ""),
             2: (subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 30"]), "", "")}
    t0 = time.time()
    ends = launch.supervise(procs, timeout=1.0)
    assert ends[0]["exit"] == 0 and ends[0]["ended_at"] - t0 < 0.5
    assert ends[1]["exit"] is None and procs[1][0].returncode == -signal.SIGTERM      # asked to stop first
    assert ends[2]["exit"] is None and procs[2][0].returncode == -signal.SIGKILL      # ... then killed
    assert time.time() - t0 < 8


TF_STDERR = """Traceback (most recent call last):
  File "hosts/programs/tf_multiworker.py", line 83, in <module>
tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: Socket closed
Additional GRPC error information from remote target /job:worker/replica:0/task:2:
 [[{{node CollectiveReduceV2}}]] [Op:__inference_train_step_512]
"""
TF_GRAPH_STDERR = """tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:

Detected at node sgd_1/CollectiveReduceV2 defined at (most recent call last):
  File "hosts/programs/tf_multiworker.py", line 84, in <module>

Collective ops is aborted by: recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:worker/replica:0/task:2 while calling RecvBuf:
\t [[{{node sgd_1/CollectiveReduceV2}}]] [Op:__inference_train_step_218]
"""


def test_a_ranks_error_is_the_exception_it_raised_not_the_last_line_of_the_message(tmp_path):
    err = tmp_path / "rank0.stderr"
    err.write_text(TF_STDERR)
    assert program.last_line(str(err)) == ("tensorflow.python.framework.errors_impl.UnavailableError: Collective "
                                           "ops is aborted by: Socket closed")
    err.write_text("[W socket.cpp:4] warning\nRuntimeError: Connection closed by peer\n[W gloo] after\n")
    assert program.last_line(str(err)) == "RuntimeError: Connection closed by peer"
    err.write_text("[rank2]: RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms\n"
                   "[rank2]:[W1125 destroy_process_group() was not called]\n")          # torch's rank prefix
    assert program.last_line(str(err)).startswith("[rank2]: RuntimeError: [gloo")
    err.write_text(TF_GRAPH_STDERR)                 # the message after the node's traceback
    assert program.last_line(str(err)) == ("tensorflow.python.framework.errors_impl.UnavailableError: Graph execution "
                                           "error: Collective ops is aborted by: recvmsg:Connection reset by peer")
    err.write_text("no exception here\nlast words\n\n")
    assert program.last_line(str(err)) == "last words"
    assert program.last_line(str(tmp_path / "missing")) == ""


def test_a_job_expected_to_hang_passes_only_if_it_was_still_running_at_its_timeout():
    hung = program.checks(settings(expect="hang", timeout_s=20), env_result([None, None], [20.0, 20.0]))[0]
    assert hung == {"name": "hung", "ok": True, "detail": "still running at the timeout (20 s): the library waited"}
    r = env_result([1, 1], [9.0, 9.5], {0: "RuntimeError: timed out"})
    r.update(program.library_reaction(r, {}, 1000.0))
    ended = program.checks(settings(expect="hang"), r)[0]
    assert not ended["ok"] and ended["detail"].startswith("rank 0 (s0g0) exited 1 at +9.00 s")
    assert not program.checks(settings(expect="hang"), env_result([0], [3.0]))[0]["ok"]


def test_a_json_true_or_false_is_a_figure_of_1_or_0_that_min_can_check():
    out = '{"correct": true, "rows": []}\n'
    assert program.figure(out, {"json": "correct"}) == 1 and type(program.figure(out, {"json": "correct"})) is int
    assert program.figure('{"correct": false}', {"json": "correct"}) == 0
