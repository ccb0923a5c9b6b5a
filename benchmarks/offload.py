"""Benchmark: FastFlow vs TF-NO / TF-DSR / TF-DSLR and a fixed-ratio sweep of p'2 and p'3, both pipelines, two NIC rates.

    sudo .venv/bin/python benchmarks/offload.py [NIC_MBPS ...] [--nic-mtu M]   (default 100 10; REPEATS=3)

100 Mbit/s leaves the network plentiful; at 10 Mbit/s the trainer's NIC is the bottleneck and remote-only
offloading (TF-DSR) loses. Every policy runs REPEATS times (rounds interleaved); per NIC rate and pipeline it
prints TF-NO, TF-DSLR, TF-DSR, the sweep's best and FastFlow as median [min-max], FastFlow's epoch time with its
profiling. A round is 11 trainer runs per pipeline: ~11 min a round for both pipelines on a 2-core machine
(34 min per NIC rate with REPEATS=3).
"""
import argparse
import json
import os

from testbed.fabric.links import NIC_MTU
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import offload

SPEC = {"pipelines": ["compute", "data"], "gpu_steps_per_s": 25, "local_cores": 0.3, "worker_cores": 0.3,
        "seconds": 6, "ratios": [0, 0.25, 0.5, 0.75, 1], "candidates": ["p'2", "p'3"],
        "repeats": int(os.environ.get("REPEATS", 3))}


def run(nic: float, mtu: int, spec: dict = SPEC) -> dict:
    """The offload workload's result on one server of 2 GPUs and 2 CPU hosts, NIC `nic` Mbit/s."""
    fabric = build("rail-optimized", 1, 2, spines=1, nic_mbps=nic, cpu_hosts=2, nic_mtu=mtu)
    with Network(fabric) as net:
        return offload.run(net, spec)


def main(rates: list[float], mtu: int) -> None:
    for nic in rates:
        print(f"\n== NIC {nic:g} Mbit/s ==", flush=True)
        result = run(nic, mtu)
        for table in offload.tables(result):
            print(f"\n{table}")
        for c in result["checks"]:
            print(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}")
        for r in result["rows"]:
            if r["policy"] == "fastflow":
                m = r["metrics"]
                print(f"  {r['pipeline']}: profile {json.dumps(m['profile'])}\n    decision: {m['decision']['branch']}"
                      f" (P' {m['decision']['pipeline']}, Upper {m['decision']['upper']}, Lower {m['decision']['lower']})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rates", nargs="*", type=float, default=[100.0, 10.0], metavar="NIC_MBPS")
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    args = ap.parse_args()
    main(args.rates, args.nic_mtu)
