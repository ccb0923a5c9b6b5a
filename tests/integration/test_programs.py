"""Integration (root): users' own distributed programs as the ranks of a job on the fabric: the example
scenarios (mpirun + mpi4py, torch.distributed gloo, tf.distribute MultiWorkerMirroredStrategy), the launchers'
environment on a subset of hosts, a GPU crash under MPI, torch and TensorFlow jobs, a rail-spine cut the fabric
routes around and a GPU's NIC cut it cannot (what each library does, and when)."""
import glob
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time

import pytest

from testbed import runner
from testbed.model.bounds import Cluster, bound_busbw
from testbed.scenario import load
from testbed.workloads import program
from tests.paths import ROOT, SCENARIOS

pytestmark = [pytest.mark.root, pytest.mark.slow]


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        reason = f"needs the Python package {module} (scripts/setup installs it)"
        print(f"SKIP: {reason}")
        pytest.skip(reason)


def need_mpirun() -> None:
    need("mpi4py")
    if shutil.which("mpirun") is None:
        print("SKIP: needs Open MPI's mpirun (apt openmpi-bin; scripts/setup installs it)")
        pytest.skip("needs Open MPI's mpirun (apt openmpi-bin; scripts/setup installs it)")


def run(name: str, tmp_path, extra=(), only=None, hosts=None):
    """A scenario (with more workloads, or only some of its own and their faults, on another host backend),
    its summary printed."""
    doc = load(os.path.join(SCENARIOS, f"program-{name}.yaml"), [])
    if hosts:
        doc["hosts"] = hosts
    if only:
        doc["workloads"] = [w for w in doc["workloads"] if w["name"] in only]
        doc["faults"] = [f for f in doc.get("faults", []) if f.get("workload") in only]
    doc["workloads"] += list(extra)
    out = str(tmp_path / name)
    t0 = time.monotonic()
    r = runner.run(doc, out, echo=lambda *a: None)
    print(runner.summary_table(r))
    print(f"{name}: {time.monotonic() - t0:.1f} s with bring-up")
    return r, out


# The largest size's busbw as a fraction of its ring bound (the NIC rate: every rank's NIC carries the ring), at
# least half of the median measured, so a library that halves its rate fails. Measured at 512 KiB, 5 runs each
# with other work on the machine: Open MPI Allreduce 0.33-0.50, Allgather 0.25-0.51 (its algorithms at 4 ranks
# take more steps than a ring, each paying TCP's latency); gloo's ring all_reduce 0.70-0.95.
MPI_BUSBW_FLOOR, GLOO_BUSBW_FLOOR = 0.2, 0.5


def busbw_fraction(r: dict, row: dict) -> float:
    """A sweep row's busbw over the analytical bound for its operation and size on the run's fabric."""
    f = r["fabric"]
    cluster = Cluster(x=f["gpus_per_server"], y=f["servers"], c_s=f["nic_mbps"] * 1e6 / 8,
                      c_f=f["hb_mbps"] * 1e6 / 8)
    fraction = row["busbw_MBps"] * 1e6 / bound_busbw(row.get("op", "allreduce"), "ring", row["bytes"], cluster)
    print(f"{row.get('op', 'allreduce')} {row['bytes']} B: busbw {row['busbw_MBps']:.2f} MB/s, "
          f"{fraction:.2f} of the bound")
    return fraction


def rank_logs(out: str, w: dict) -> list[str]:
    texts = []
    for r in w["ranks"]:
        for stream in ("stdout", "stderr"):
            assert os.path.exists(os.path.join(out, w["logs"], r[stream]))
        with open(os.path.join(out, w["logs"], r["stdout"])) as f:
            texts.append(f.read())
    return texts


def last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def test_mpi_sweep_under_mpirun_checks_every_result_and_reports_busbw_per_rank_logs_and_link_bytes(tmp_path):
    need_mpirun()
    r, out = run("mpi", tmp_path)
    assert r["ok"], r["checks"]
    w = r["workloads"][0]
    assert w["launcher"] == "mpirun" and w["mpirun"]["exit"] == 0 and w["world"] == 4
    texts = rank_logs(out, w)
    assert "busbw MB/s" in texts[0] and "Open MPI" in texts[0]         # the nccl-tests-style table, rank 0's
    res = last_json(texts[0])
    assert res["correct"] and res["ranks"] == 4 and len(res["rows"]) == 6
    assert all(row["wrong"] == 0 for row in res["rows"])
    assert w["figures"]["busbw"] == pytest.approx(max(row["busbw_MBps"] for row in res["rows"]))
    # the largest size: near the bound, and not above it (smaller ones may fit in the shapers' bursts)
    assert all(MPI_BUSBW_FLOOR <= busbw_fraction(r, row) <= 1.1 for row in res["rows"] if row["bytes"] >= 500 << 10)
    # 4 ranks x (3/2 x Allreduce + 3/4 x Allgather) x 580 KiB x 4 runs: the NICs carried at least that
    assert w["nic_bytes"] >= 4 * (1.5 + 0.75) * (4 + 64 + 512) * 1024 * 4
    assert any(port.startswith("spine") for port in w["link_bytes"])   # s0 <-> s1 crossed the spine


def test_torch_gloo_sweep_and_ddp_steps_and_the_env_launcher_on_a_subset(tmp_path):
    need("torch")
    probe = {"type": "program", "name": "env-probe", "hosts": ["s1g1", "s0g0", "s1g0"],
             "command": ["{python}", "-c", "import json, os; print(json.dumps({k: os.environ[k] for k in "
                                           "('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', "
                                           "'TF_CONFIG', 'TB_HOST', 'TMPDIR')}))"],
             "figures": {"world": {"json": "WORLD_SIZE", "rank": 2}}}
    r, out = run("torch", tmp_path, [probe])
    assert r["ok"], r["checks"]
    w, p = r["workloads"]
    assert [x["exit"] for x in w["ranks"]] == [0, 0, 0, 0]
    res = last_json(rank_logs(out, w)[0])
    assert res["correct"] and res["weight_spread"] == 0 and res["losses"][-1] < 0.9 * res["losses"][0]
    assert w["figures"]["weight_spread"] == 0
    assert w["figures"]["busbw"] == pytest.approx(max(x["busbw_MBps"] for x in res["rows"]))
    assert res["rows"][-1]["bytes"] == 512 << 10
    assert GLOO_BUSBW_FLOOR <= busbw_fraction(r, res["rows"][-1]) <= 1.1    # near the bound, and not above it
    envs = [last_json(t) for t in rank_logs(out, p)]
    assert [e["TB_HOST"] for e in envs] == ["s1g1", "s0g0", "s1g0"]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"] and p["figures"]["world"] == 3
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0", "1"]
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["2", "1", "2"]
    assert {e["MASTER_ADDR"] for e in envs} == {"10.11.1.2"}                  # s1g1's NIC: rank 0's
    assert json.loads(envs[2]["TF_CONFIG"])["task"] == {"type": "worker", "index": 2}
    assert [e["TMPDIR"].rsplit("/", 2)[1:] for e in envs] == [["tmp", h] for h in ("s1g1", "s0g0", "s1g0")]


def tf_generated_code() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "__autograph_generated_file*")))


def test_tf_multi_worker_mirrored_strategy_trains_with_identical_weights_on_every_worker(tmp_path):
    need("tensorflow")
    before = tf_generated_code()
    r, out = run("tf", tmp_path)
    assert r["ok"], r["checks"]
    assert tf_generated_code() == before        # TensorFlow wrote its code in the hosts' folders, gone with them
    w = r["workloads"][0]
    results = [last_json(t) for t in rank_logs(out, w)]
    assert [x["worker"] for x in results] == [0, 1, 2, 3] and {x["workers"] for x in results} == {4}
    assert all(x["weight_spread"] == 0 for x in results)
    assert all(x["losses"][-1] < 0.5 * x["losses"][0] for x in results)
    assert len({tuple(x["losses"]) for x in results}) == 1       # the global loss, the same on every worker
    assert w["nic_bytes"] > 0


def test_a_gpu_crash_aborts_the_mpi_job_and_makes_torch_raise_with_the_times(tmp_path):
    need_mpirun()
    need("torch")
    r, out = run("crash", tmp_path, only=("mpi-crash", "torch-crash"))
    assert r["ok"], r["checks"]
    mpi, torch = r["workloads"]
    assert mpi["mpirun"]["exit"] not in (0, None) and mpi["seconds"] < 30
    assert mpi["mpirun"]["said"] and mpi["reaction"].startswith("mpirun exited")      # in Open MPI's own words
    crashed = {x["rank"]: x for x in torch["ranks"]}
    assert crashed[2]["host"] == "s1g0" and crashed[2]["exit"] == -9
    survivors = [x for x in torch["ranks"] if x["host"] != "s1g0"]
    assert any(x["exit"] not in (0, None) and x["last_error"] for x in survivors)
    assert all(x["exit"] is not None for x in survivors)                  # nobody hung
    for fault, w in zip(r["faults"], (mpi, torch)):
        assert fault["processes"] > 0 and fault["recovery"] == "abort"
        assert fault["at_s"] <= fault["detected_s"] <= fault["at_s"] + 5, fault
        assert w["first_error_at"] is not None
    print(mpi["reaction"])
    print(torch["reaction"])
    assert torch["reaction"] in program.summary(torch)
    # the fault's line states each library's reaction: exit codes, its first words, the time from the crash
    for fault in r["faults"][:2]:
        job, = fault["jobs"]
        assert job["ended"] == "failed" and 0 <= job["error_after_s"] <= 5, job
    summary = runner.summary_table(r)
    for name in ("mpi-crash", "torch-crash"):
        assert re.search(rf"job {name}: .*failed [0-9.]+ s after the fault, exit codes ", summary), summary


def test_a_gpu_crash_under_a_tensorflow_multi_worker_job_makes_the_survivors_raise_with_the_times(tmp_path):
    need("tensorflow")
    r, out = run("crash", tmp_path, only=("tf-crash",))
    assert r["ok"], r["checks"]
    w, = r["workloads"]
    fault, = r["faults"]
    crashed = [x for x in w["ranks"] if x["host"] == "s1g0"]
    assert crashed and crashed[0]["exit"] == -9
    survivors = [x for x in w["ranks"] if x["host"] != "s1g0"]
    assert all(x["exit"] not in (0, None) for x in survivors)            # each raised, none hung
    assert any("Error" in x["last_error"] for x in survivors), survivors
    epochs = [line for line in rank_logs(out, w)[0].splitlines() if line.startswith("# epoch")]
    assert epochs and not any(line.startswith("{") for line in rank_logs(out, w)[0].splitlines())  # cut short
    job, = fault["jobs"]
    assert job["ended"] == "failed" and job["error_after_s"] is not None and job["error_after_s"] >= 0
    print(f"TF: first error {job['error_after_s']:.2f} s after the crash: {w['reaction']}")


def test_a_rail_spine_cut_under_mpi_and_gloo_stalls_them_and_they_complete_with_their_results_checked(tmp_path):
    need_mpirun()
    need("torch")
    r, out = run("linkcut", tmp_path)
    assert r["ok"], r["checks"]
    for w, fault in zip(r["workloads"], r["faults"]):
        assert w["figures"]["correct"] == 1 and all(c == 0 for c in program.exits(w))
        assert fault["at_s"] is not None and fault["detected_s"] is not None       # the controller saw the cut
        job, = fault["jobs"]
        assert job["workload"] == w["name"] and job["ended"] == "completed" and job["ok"]
        assert w["traffic_samples"] > 0
        # a stall, if ECMP had put a flow on the cut cable: over well before the job's timeout
        assert job["stall_s"] is None or (job["resumed_s"] is not None and job["stall_s"] < 10), job
        print(f"{w['name']}: stall {job['stall_s']} s, longest silence {job['longest_silence_s']} s, "
              f"completed in {w['seconds']:.1f} s")
    # each fault's line says what the job saw of it (a stall, or none: fast retransmit within the sampling) and
    # that it completed; a stall here was 0.15 s (gloo), and none for MPI, its longest silence 0.30 s
    lines = [line for line in runner.summary_table(r).splitlines() if line.startswith("fault link-down")]
    assert len(lines) == 2 and all("stall" in line and "completed at" in line for line in lines), lines


def test_a_cut_gpu_nic_makes_gloo_raise_after_its_timeout_and_mpi_abort_or_hang(tmp_path):
    need_mpirun()
    need("torch")
    r, out = run("nic-cut", tmp_path)
    assert r["ok"], r["checks"]
    torch, mpi, hang = r["workloads"]
    jobs = {f["jobs"][0]["workload"]: f["jobs"][0] for f in r["faults"]}
    # gloo: every rank raises once an operation outlasts the process group's 10 s timeout
    assert all(x["exit"] == 1 for x in torch["ranks"]), torch["ranks"]
    assert 9 <= jobs["torch-nic"]["error_after_s"] <= 20, jobs["torch-nic"]
    assert any("RuntimeError" in x["last_error"] for x in torch["ranks"])
    assert jobs["torch-nic"]["stall_s"] and jobs["torch-nic"]["resumed_s"] is None      # silent to its end
    # Open MPI with keepalives on its daemons' connections: mpirun aborts, in its own words
    assert mpi["mpirun"]["exit"] not in (0, None) and mpi["mpirun"]["said"]
    assert 0 < jobs["mpi-nic"]["error_after_s"] <= 20, jobs["mpi-nic"]
    # Open MPI as installed: still waiting when the timeout killed it
    assert hang["mpirun"]["exit"] is None and jobs["mpi-hang"]["ended"] == "hung"
    summary = runner.summary_table(r)
    assert "job torch-nic: its traffic stalled" in summary and "hung: still running at its timeout" in summary
    for name, job in jobs.items():
        print(f"{name}: {job['ended']}, error {job['error_after_s']} s after the cut: {job['reaction']}")


def need_docker() -> None:
    from testbed.fabric.backends.dockerhost import DockerUnavailable, engine
    try:
        engine()
    except DockerUnavailable as exc:
        print(f"SKIP: no Docker engine can run here: {exc}")
        pytest.skip(f"no Docker engine can run here: {exc}")


@pytest.mark.docker
def test_the_env_launcher_runs_a_program_in_docker_hosts(tmp_path):
    need_docker()
    doc = {"name": "program-docker", "hosts": "docker",
           "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 1, "nic_mbps": 50},
           "workloads": [{"type": "program", "name": "gather", "hosts": ["s1g0", "s0g0", "s0g1"],
                          "command": "{python} hosts/programs/tcp_gather.py", "timeout_s": 60,
                          "figures": {"world": {"json": "world", "min": 3, "max": 3}}}]}
    out = str(tmp_path / "docker")
    r = runner.run(doc, out, echo=lambda *a: None)
    print(runner.summary_table(r))
    assert r["ok"], r["checks"]
    w = r["workloads"][0]
    got = last_json(rank_logs(out, w)[0])["ranks"]
    assert [g["TB_HOST"] for g in got] == ["s1g0", "s0g0", "s0g1"]
    assert [g["LOCAL_RANK"] for g in got] == ["0", "0", "1"] and {g["MASTER_ADDR"] for g in got} == {"10.11.1.1"}


@pytest.mark.docker
def test_mpirun_runs_the_mpi_sweep_in_docker_hosts_over_ssh_with_the_checks_of_namespaces(tmp_path):
    """program-mpi on Docker hosts: mpirun in s0g0's container starts an orted in every other container by ssh
    over the fabric (sshd on each host's NIC address); then a second job prints each rank's hostname, which a
    container takes from its host (namespace hosts all share the machine's)."""
    need_docker()
    names = ["s0g0", "s0g1", "s1g0", "s1g1"]
    t0 = time.monotonic()
    r, out = run("mpi", tmp_path, hosts="docker",
                 extra=[{"type": "program", "name": "where", "launcher": "mpirun", "command": "hostname",
                         "timeout_s": 60}])
    seconds = time.monotonic() - t0
    assert r["ok"], r["checks"]
    assert [c["name"] for c in r["checks"] if c["name"].startswith("mpi-sweep")] == \
        ["mpi-sweep: completed", "mpi-sweep: figure busbw"]          # the checks it has on namespaces
    w = r["workloads"][0]
    assert w["launcher"] == "mpirun" and w["mpirun"]["exit"] == 0 and w["world"] == 4    # every rank exited 0
    assert [x["host"] for x in w["ranks"]] == names
    texts = rank_logs(out, w)
    assert "busbw MB/s" in texts[0] and "Open MPI" in texts[0]
    res = last_json(texts[0])
    assert res["correct"] and res["ranks"] == 4 and len(res["rows"]) == 6
    assert all(row["wrong"] == 0 for row in res["rows"])
    assert w["figures"]["busbw"] >= 1.0
    assert all(0 < row["busbw_MBps"] <= 1.1 * 50 / 8 for row in res["rows"] if row["bytes"] >= 500 << 10)
    assert w["nic_bytes"] >= 4 * (1.5 + 0.75) * (4 + 64 + 512) * 1024 * 4
    assert any(port.startswith("spine") for port in w["link_bytes"])   # s0 <-> s1 crossed the spine
    where = r["workloads"][1]
    assert where["mpirun"]["exit"] == 0
    assert [t.strip() for t in rank_logs(out, where)] == names          # rank r ran in the r-th host's container
    print(f"program-mpi on Docker hosts: {seconds:.1f} s with bring-up; mpi-sweep {w['seconds']:.2f} s, "
          f"busbw {w['figures']['busbw']:.3f} MB/s")


@pytest.mark.docker
def test_a_gpu_crash_aborts_the_mpi_job_on_docker_hosts_as_on_namespaces(tmp_path):
    """The crashed host's container goes with its orted, sshd and rank: mpirun loses that daemon and aborts
    the job, in its own words, within seconds; the fault's line reports it."""
    need_docker()
    r, _ = run("crash", tmp_path, only=("mpi-crash",), hosts="docker")
    assert r["ok"], r["checks"]
    mpi, = r["workloads"]
    fault, = r["faults"]
    assert mpi["mpirun"]["exit"] not in (0, None) and mpi["seconds"] < 30
    assert mpi["mpirun"]["said"] and mpi["reaction"].startswith("mpirun exited")
    assert fault["processes"] > 0 and fault["recovery"] == "abort"
    assert fault["at_s"] <= fault["detected_s"] <= fault["at_s"] + 5, fault
    job, = fault["jobs"]
    assert job["ended"] == "failed" and 0 <= job["error_after_s"] <= 5, job
    print(mpi["reaction"])


@pytest.mark.docker
@pytest.mark.slow
def test_program_torch_runs_in_docker_hosts_of_the_torch_image(tmp_path):
    """scenarios/program-torch.yaml on Docker hosts of `host_image: torch` (Debian's python3-torch 1.13, built
    FROM the host image on first use): the gloo all_reduce sweep and the DDP steps pass as on namespaces."""
    need_docker()
    doc = load(os.path.join(SCENARIOS, "program-torch.yaml"), ["hosts=docker", "host_image=torch"])
    out = str(tmp_path / "torch-docker")
    r = runner.run(doc, out, echo=lambda *a: None)
    print(runner.summary_table(r))
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    w = r["workloads"][0]
    res = last_json(rank_logs(out, w)[0])
    assert res["torch"].startswith("1.13") and res["correct"] and res["weight_spread"] == 0
    assert res["losses"][-1] < 0.9 * res["losses"][0] and w["figures"]["busbw"] > 0


@pytest.mark.docker
@pytest.mark.slow
def test_tf_multi_worker_mirrored_strategy_runs_in_docker_hosts_of_the_tf_image(tmp_path):
    """scenarios/program-tf.yaml on Docker hosts of `host_image: tf` (tensorflow-cpu from PyPI at the venv's pin,
    built FROM the host image on first use): the workers train with identical weights, as on namespaces."""
    need_docker()
    doc = load(os.path.join(SCENARIOS, "program-tf.yaml"), ["hosts=docker", "host_image=tf"])
    out = str(tmp_path / "tf-docker")
    r = runner.run(doc, out, echo=lambda *a: None)
    print(runner.summary_table(r))
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    assert r["fabric"]["host_backend"] == "docker"
    w = r["workloads"][0]
    results = [last_json(t) for t in rank_logs(out, w)]
    assert [x["worker"] for x in results] == [0, 1, 2, 3] and {x["workers"] for x in results} == {4}
    assert all(x["weight_spread"] == 0 for x in results)
    assert all(x["losses"][-1] < 0.5 * x["losses"][0] for x in results)
    assert len({tuple(x["losses"]) for x in results}) == 1
    assert w["nic_bytes"] > 0
    with open(os.path.join(ROOT, "requirements-tf.txt")) as f:          # the venv's pin, in the image too
        pin = next(line.split("==")[1].strip() for line in f if line.startswith("tensorflow"))
    assert {x["tensorflow"] for x in results} == {pin}
