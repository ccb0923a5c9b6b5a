"""Benchmark: FastFlow vs TF-NO / TF-DSR / TF-DSLR and a fixed-ratio sweep, both pipelines, two NIC rates.

    sudo .venv/bin/python benchmarks/offload.py [NIC_MBPS ...]      (default 100 10)

100 Mbit/s leaves the network plentiful; at 10 Mbit/s the trainer's NIC is the bottleneck and remote-only
offloading (TF-DSR) loses. Prints one table per NIC rate; takes ~4-5 min per rate on a 2-core machine.
"""
import json
import sys

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import offload

SPEC = {"pipelines": ["compute", "data"], "gpu_steps_per_s": 25, "local_cores": 0.3, "worker_cores": 0.3,
        "seconds": 6, "ratios": [0, 0.25, 0.5, 0.75, 1]}


def main(rates: list[float]) -> None:
    for nic in rates:
        print(f"\n== NIC {nic:g} Mbit/s ==", flush=True)
        fabric = build("rail-optimized", 1, 2, spines=1, nic_mbps=nic, cpu_hosts=2)
        with Network(fabric) as net:
            result = offload.run(net, SPEC)
        for c in result["checks"]:
            print(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}")
        for r in result["rows"]:
            if r["policy"] == "fastflow":
                m = r["metrics"]
                print(f"  {r['pipeline']}: profile {json.dumps(m['profile'])}\n    decision: {m['decision']['branch']}"
                      f" (P' {m['decision']['pipeline']}, Upper {m['decision']['upper']}, Lower {m['decision']['lower']})")


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [100.0, 10.0])
