"""Integration (root): an offload job (tf.data.service on CPU hosts of its own, FastFlow's policy) beside a ring
AllReduce that crosses the spines, as jobs of one `concurrent` workload. Both complete alone and together, the
ring's results equal numpy's, the offload job passes its own checks (FastFlow at least TF-NO, its ratio near the
sweep's) and offloads, both slowdowns are figures, and the fabric's bytes split by job (the ring's RoCE, the
offload job's TCP both ways) add up to the port counters within 2%. Needs tensorflow-cpu in the venv."""
import math
import os

import pytest

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import concurrent

pytestmark = [pytest.mark.root, pytest.mark.alone]   # the offload checks compare CPU-budgeted rates: CPU headroom

OFFLOAD = {"type": "offload", "name": "input", "placement": {"hosts": ["s0g0"]}, "cpu_hosts": ["cpu0", "cpu1"],
           "pipelines": ["compute"], "gpu_steps_per_s": 25, "local_cores": 0.3, "worker_cores": 0.3, "seconds": 3,
           "profile_s": 2, "warmup_s": 1, "ratios": [0], "candidates": ["p'3"], "repeats": 1}
RING = {"type": "collective", "name": "ring", "op": "allreduce", "algo": "ring", "sizes": ["1MiB"],
        "iterations": 4, "placement": {"hosts": ["s0g1", "s1g0"]}}


@pytest.mark.slow
def test_an_offload_job_runs_beside_a_ring_with_its_bytes_its_own(tmp_path):
    import tensorflow  # noqa: F401  (the tf extra `make test` installs: missing is an error, not a skip)
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=20, cpu_hosts=2)
    spec = {"type": "concurrent", "jobs": [OFFLOAD, RING]}
    concurrent.validate(fabric, spec, {})
    with Network(fabric, routing="single", route_groups=True) as net:
        net.out_dir = str(tmp_path)                    # the jobs' host logs, as the runner keeps them
        result = concurrent.run(net, spec)
    jobs = {j["job"]: j for j in result["jobs"]}
    print({n: (j["seconds_alone"], j["seconds_together"], j["slowdown"]) for n, j in jobs.items()},
          result["job_bytes_deviation"], [c for c in result["checks"] if not c["ok"]])
    assert result["ok"], [c for c in result["checks"] if not c["ok"]]
    offload, ring = jobs["input"], jobs["ring"]
    assert offload["hosts"] == ["s0g0"] and offload["cpu_hosts"] == ["cpu0", "cpu1"] and "cpu_hosts" not in ring
    for when in ("alone", "together"):
        assert ring[when]["ok"] and ring[when]["rows"] and all(r["correct"] for r in ring[when]["rows"]), when
        run = offload[when]
        assert run["ok"] and run["trainer"] == "s0g0", (when, run["checks"])
        fastflow = next(r for r in run["rows"] if r["policy"] == "fastflow")
        # the trainer's local CPU is scarce: FastFlow offloads, and its remote batches came over the NIC
        assert fastflow["metrics"]["decision"]["offload"] and 0 < fastflow["off_ratio"] <= 1, fastflow
        assert fastflow["metrics"]["trainer_rx_bytes"] > 1e6, fastflow["metrics"]
    for job in (offload, ring):
        assert job["slowdown"] is not None and math.isfinite(job["slowdown"]) and job["slowdown"] > 0, job["job"]
    # the offload job's figure is FastFlow's epoch at its measured training rate
    rate = next(p for p in offload["together"]["policies"] if p["policy"] == "fastflow")["steps_per_s"]["median"]
    assert offload["seconds_together"] == pytest.approx(1000 / rate, rel=1e-3)
    # bytes by job: within 2% of the port counters; the front-end switch carried the offload job's only, the
    # trainer's leaf both jobs'
    assert result["job_bytes_deviation"] <= 0.02, result["job_bytes_deviation"]
    by_switch = result["switch_bytes_by_job"]
    assert by_switch["fe0"].get("input", 0) > 1e6 and "ring" not in by_switch["fe0"], by_switch["fe0"]
    assert by_switch["rail0"].get("input", 0) > 1e6 and by_switch["rail0"].get("ring", 0) > 1 << 20, by_switch
    # each job's host logs in its own folder
    logs = tmp_path / "jobs"
    assert (logs / "input" / "hosts" / "s0g0" / "tfdata_trainer.stdout").exists()
    assert (logs / "input" / "hosts" / "cpu1" / "tfdata_service.stderr").exists()
    assert os.listdir(logs / "ring" / "hosts") and not (logs / "ring" / "hosts" / "s0g0").exists()
