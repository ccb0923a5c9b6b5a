"""Integration (root): tf.data.service across emulated hosts, FastFlow's decision and its effect when the
trainer's local CPU is scarce. Needs tensorflow-cpu in the venv."""
import glob
import os

import pytest

from hosts.tfdata import budget
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import offload

pytestmark = [pytest.mark.root, pytest.mark.alone]   # FastFlow's gain: the CPU budgets must be the only scarcity


@pytest.mark.slow
def test_fastflow_offloads_and_beats_local_only_when_local_cpu_is_scarce():
    # the tf extra `make test` installs: missing is an error, not a skip (imported here, not when collected:
    # collecting is done by every pytest worker, and TensorFlow takes 3.4 s to import)
    import tensorflow  # noqa: F401
    fabric = build("rail-optimized", 1, 2, spines=1, nic_mbps=100, cpu_hosts=2)
    spec = {"pipelines": ["compute"], "gpu_steps_per_s": 25, "local_cores": 0.3, "worker_cores": 0.3,
            "seconds": 4, "profile_s": 2.5, "ratios": [0, 1], "candidates": ["p'3"], "repeats": 1}
    with Network(fabric) as net:
        result = offload.run(net, spec)
    rows = {r["policy"]: r for r in result["rows"]}
    ff, no, dsr = rows["fastflow"], rows["ratio=0"], rows["ratio=1 p'3"]
    m = ff["metrics"]
    print({k: (r["off_ratio"], r["steps_per_s"], r["metrics"]["cpu_idle_mean_pct"]) for k, r in rows.items()})
    print("profile", m["profile"], "decision", m["decision"]["branch"])
    # profiling returned sane numbers: GPU at its configured rate, local input the bottleneck
    assert m["profile"]["Gthp"] == pytest.approx(25, rel=0.05)
    assert 0 < m["profile"]["Lthp"] < 25 and m["profile"]["Pcycle"] > 0
    assert all(c["Rthp"] > 0 and c["Ocycle"] >= 0 for c in m["profile"]["candidates"].values())
    # the service worked across hosts (worker_address set): remote batches arrived over the NIC
    assert dsr["metrics"]["trainer_rx_bytes"] > 1e6 and dsr["metrics"]["worker_cpu_s"] > 0.5
    # the decision, and offloading raised throughput
    assert m["decision"]["offload"] and 0 < ff["off_ratio"] <= 1
    assert ff["steps_per_s"] > 1.3 * no["steps_per_s"], (ff["steps_per_s"], no["steps_per_s"])
    # FastFlow's epoch time carries its profiling; the budget and ratio checks passed
    assert ff["profile_s"] > 2 * 2.5 and ff["epoch_s_with_profiling"] > ff["profile_s"] + 1000 / 25
    checks = {c["name"]: c["ok"] for c in result["checks"]}
    assert checks["compute: local CPU budget held"] and checks["compute: off-ratios applied"], result["checks"]
    # the local CPU budget held (CFS quota; 10% for the sampling window)
    assert no["metrics"]["local_cpu_cores"] <= 0.3 * 1.1 and no["metrics"]["local_throttled_s"] > 0
    # servers were restarted per run and cleaned up: no cgroups of ours left
    assert glob.glob(budget.group_path(f"{os.getpid()}-*")) == []
