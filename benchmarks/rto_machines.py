"""Benchmark: a cable cut between machines under an RDMA flow, with the fixed and the adaptive retransmission
timeout (printed).

    .venv/bin/python benchmarks/rto_machines.py [--repeat 3] [--nic-mbps 5]

The set-up of tests/integration/test_machines_fabric.py: rail-optimized 2x4 with two spines, NIC 5 Mbit/s, single-path
routing with fast failover, spread over two machines (containers acting as machines, tools/machines.py) so that the
rail3-spine0 link is a VXLAN tunnel with a shaped queue. A rank-order ring AllReduce of 2 MiB crosses it; 2 s in, the
cable is cut for 8 s. The packets queued in the tunnel are lost; fast failover moves the flow at once, and when the
cut took the tail of a window only the sender's timer recovers it. Per round and timer: the ring's time with the cut,
against the same ring without a cut (its excess is what the cut cost), the RC timeouts and retransmitted packets.
"""
import argparse
import copy
import statistics
import sys
import tempfile
import time

from testbed import PROJECT_ROOT, runner
from testbed.scenario import validate

sys.path.insert(0, PROJECT_ROOT)        # tools/ is the project's, not an installed package
from tools import machines as machine_containers  # noqa: E402

NAMES = ["rto-m1", "rto-m2"]


def scenario(nic_mbps: float, rto: str, cut: bool, machines) -> dict:
    ring = {"type": "collective", "name": "ring", "op": "allreduce", "algo": "ring", "ring": "rank",
            "sizes": ["2MiB"], "iterations": 1, "retransmit_timeout": rto}
    return {"name": f"rto-cut-{rto}",
            "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 4, "spines": 2,
                       "nic_mbps": nic_mbps},
            "routing": {"mode": "single", "failover": True},
            "workloads": [ring],
            "faults": [{"workload": "ring", "at": 2.0, "kind": "link-down", "target": "path:s0g3>s1g0",
                        "duration": 8.0}] if cut else [],
            "machines": copy.deepcopy(machines)}


def one(nic_mbps, rto, cut, machines, out) -> dict:
    res = runner.run(validate(scenario(nic_mbps, rto, cut, machines)), out, echo=lambda *a: None)
    w = res["workloads"][0]
    if not w["rows"] or not all(r["correct"] for r in w["rows"]):
        raise SystemExit(f"{rto} cut={cut}: {[c['detail'] for c in w.get('checks', []) if not c['ok']]}")
    row = w["rows"][0]
    return {"seconds": row["seconds"], "timeouts": row["transport"].get("timeouts", 0),
            "retransmits": row["retransmits"], "duplicates": row["transport"].get("duplicates", 0)}


def spread(xs):
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nic-mbps", type=float, default=5)
    args = ap.parse_args()
    addresses = machine_containers.start(NAMES)
    key, _ = machine_containers.key_pair()
    machines = [{"name": n, "address": a, "ssh_options": machine_containers.ssh_options(key)}
                for n, a in addresses.items()]
    rows = {(rto, cut): [] for rto in ("fixed", "adaptive") for cut in (False, True)}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rnd in range(args.repeat):
                for (rto, cut), got in rows.items():
                    t = time.monotonic()
                    got.append(one(args.nic_mbps, rto, cut, machines, f"{tmp}/{rnd}-{rto}-{cut}"))
                    print(f"  round {rnd} {rto} {'cut' if cut else 'no cut'}: {got[-1]} ({time.monotonic() - t:.0f} s)",
                          file=sys.stderr, flush=True)
    finally:
        machine_containers.stop(NAMES)
    print(f"# rank-order ring AllReduce 2 MiB, rail-optimized 2x4 over two machines, NIC {args.nic_mbps:g} Mbit/s; "
          f"rail3-spine0 (VXLAN) cut 2 s in for 8 s; {args.repeat} rounds, median [min-max]")
    print(f"# {'timer':<9} {'no cut s':>18} {'cut s':>18} {'cost of the cut s':>18} {'timeouts':>8} {'retx':>6} "
          f"{'dups':>6}")
    for rto in ("fixed", "adaptive"):
        base, cut = rows[(rto, False)], rows[(rto, True)]
        base_s = statistics.median(r["seconds"] for r in base)
        print(f"  {rto:<9} {spread([r['seconds'] for r in base]):>18} {spread([r['seconds'] for r in cut]):>18} "
              f"{spread([r['seconds'] - base_s for r in cut]):>18} {sum(r['timeouts'] for r in cut):>8} "
              f"{sum(r['retransmits'] for r in cut):>6} {sum(r['duplicates'] for r in cut):>6}")
        print(f"  {'':<9} no cut: {sum(r['timeouts'] for r in base)} timeouts, {sum(r['retransmits'] for r in base)} "
              f"retransmits, {sum(r['duplicates'] for r in base)} duplicates (spurious)")


if __name__ == "__main__":
    main()
