"""An offload job of a `concurrent` workload without a fabric: its placement (its trainer's one GPU) and its CPU
hosts are its own, refused in one line otherwise; its figure; its CPU hosts' bytes are its own; and a Docker run
of it takes the image with TensorFlow."""
import os
import subprocess
import sys

import pytest

from testbed import PROJECT_ROOT
from testbed.fabric.topo import build
from testbed.scenario.loader import host_limits
from testbed.scenario.schema import ScenarioError
from testbed.workloads import concurrent, concurrent_bytes, offload

RING = {"type": "collective", "name": "ring", "op": "allreduce", "algo": "ring",
        "placement": {"hosts": ["s0g1", "s1g0"]}}


def offload_job(name="input", **keys) -> dict:
    return {"type": "offload", "name": name, "placement": {"hosts": ["s0g0"]}, **keys}


@pytest.fixture
def fabric(monkeypatch):
    monkeypatch.setattr(offload, "tensorflow_installed", lambda: True)      # the check here is placement's
    return build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=10, cpu_hosts=3)


def validate(fabric, *jobs) -> None:
    concurrent.validate(fabric, {"type": "concurrent", "jobs": list(jobs)}, {})


def test_an_offload_job_beside_a_ring_validates_with_its_trainer_its_placements_gpu(fabric):
    validate(fabric, offload_job(cpu_hosts=["cpu0", "cpu1"]), RING)
    validate(fabric, offload_job(placement={"count": 1}), RING)           # count 1: the first free GPU, s0g0
    assert concurrent.job_cpu_hosts(fabric, offload_job()) == ["cpu0", "cpu1", "cpu2"]     # default: all
    assert concurrent.job_cpu_hosts(fabric, RING) == []


@pytest.mark.parametrize("jobs, says", [
    ([offload_job("a"), offload_job("b", placement={"hosts": ["s1g1"]})],
     "jobs 'a' and 'b' both run tf.data.service on cpu0: a CPU host serves one offload job"),
    ([offload_job("a", cpu_hosts=["cpu0", "cpu1"]), offload_job("b", placement={"hosts": ["s1g1"]},
                                                                cpu_hosts=["cpu2", "cpu1"])],
     "both run tf.data.service on cpu1"),
    ([offload_job(placement={"hosts": ["s0g0", "s0g1"]})],
     r"jobs.0 \(input\): an offload job's placement is its trainer's one GPU, but it selects 2 \(s0g0, s0g1\)"),
    ([offload_job(placement={"rails": [0]})], "its trainer's one GPU, but it selects 2"),
    ([offload_job(trainer="s1g1")], r"jobs.0 \(input\): trainer 's1g1' is not the GPU of its placement \(s0g0\)"),
    ([offload_job(cpu_hosts=["cpu7"])], "offload cpu_hosts: 'cpu7' is not a CPU host of this fabric"),
    ([offload_job(placement={"hosts": ["s0g1"]}), RING], "s0g1 already placed for job 'input'"),
])
def test_an_offload_job_that_is_not_on_its_own_hosts_is_refused(fabric, jobs, says):
    with pytest.raises(ScenarioError, match=says):
        validate(fabric, *jobs)


def test_the_cli_refuses_two_offload_jobs_on_one_cpu_host_in_one_line_with_exit_2(tmp_path):
    path = tmp_path / "shared-cpu.yaml"
    path.write_text("name: shared-cpu\nfabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2, cpu_hosts: 2}\n"
                    "workloads:\n  - type: concurrent\n    jobs:\n"
                    "      - {name: a, type: offload, placement: {hosts: [s0g0]}, cpu_hosts: [cpu0]}\n"
                    "      - {name: b, type: offload, placement: {hosts: [s1g0]}, cpu_hosts: [cpu1, cpu0]}\n")
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(path)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PROJECT_ROOT})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "jobs 'a' and 'b' both run tf.data.service on cpu0" in done.stderr


def test_an_offload_jobs_figure_is_fastflows_epoch_at_its_training_rate():
    def policy(name, rate):
        return {"pipeline": "compute", "policy": name, "steps_per_s": {"median": rate, "min": rate, "max": rate}}
    result = {"type": "offload", "ok": True, "epoch_steps": 1000,
              "policies": [policy("fastflow", 10.0), policy("ratio=0", 4.0)]}
    assert concurrent.measured_seconds(result) == pytest.approx(100.0)
    two = {**result, "policies": result["policies"] + [{**policy("fastflow", 25.0), "pipeline": "data"}]}
    assert concurrent.measured_seconds(two) == pytest.approx(140.0)      # per pipeline, summed
    assert concurrent.measured_seconds({**result, "ok": False}) is None


def test_an_offload_jobs_tcp_bytes_are_its_own_both_ways():
    """Routes to its trainer (the CPU hosts' batches) and to its CPU hosts (the trainer's requests, the workers'
    heartbeats to the dispatcher) both count for the job, beside a ring's RoCE on the same switch."""
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=10, cpu_hosts=2)
    ip = {h: fabric.hosts[h].ip for h in fabric.hosts}
    jobs = {"input": ["s0g0", *concurrent.job_cpu_hosts(fabric, offload_job())], "ring": ["s0g1", "s1g0"]}
    flows0 = {"rail0": {}}
    flows1 = {"rail0": {f"{ip['s0g0']}>output:1": 5000, f"{ip['cpu1']}>output:9": 300,
                        f"{ip['s1g0']}>output:7": 2000}}
    ports0 = {"rail0:1": {"rx_bytes": 0, "tx_bytes": 0}}
    ports1 = {"rail0:1": {"rx_bytes": 7300, "tx_bytes": 5000}}
    got = concurrent_bytes.attribute(fabric, jobs, (flows0, flows1), (ports0, ports1))
    assert got["switches"] == {"rail0": {"input": 5300, "ring": 2000}}
    assert got["deviation"]["rail0"] == 0.0 and got["deviation"]["rail0:1"] == 0.0


def test_a_docker_run_with_an_offload_job_takes_the_image_with_tensorflow():
    doc = {"hosts": "docker", "workloads": [{"type": "concurrent", "jobs": [offload_job(), RING]}]}
    assert host_limits(doc)["image"] == "tf"
    assert "image" not in host_limits({"hosts": "docker", "workloads": [{"type": "concurrent", "jobs": [RING]}]})


def test_the_shipped_offload_scenario_validates(monkeypatch):
    from testbed.runner import check, fabric_of
    from testbed.scenario.loader import load
    monkeypatch.setattr(offload, "tensorflow_installed", lambda: True)
    doc = load(os.path.join(PROJECT_ROOT, "scenarios", "concurrent_offload.yaml"))
    check(doc, fabric_of(doc))
    jobs = doc["workloads"][0]["jobs"]
    assert [(j["type"], j["placement"]) for j in jobs] == [("offload", {"hosts": ["s0g0"]}),
                                                           ("collective", {"hosts": ["s0g1", "s1g0"]})]
