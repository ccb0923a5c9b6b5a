"""Benchmark: GPU-failure detection and recovery times per fault kind and recovery policy (printed).

    .venv/bin/python benchmarks/recovery.py [--kinds gpu-crash gpu-hang gpu-stall nic-down partition server-down]
                                            [--policies abort shrink spare migrate] [--at 4] [--size 1MiB]
                                            [--retransmit-timeout adaptive|fixed]

One rail-optimized fabric, 2 servers x 4 GPUs with a spare GPU per server and a spare server, NIC 5 Mbit/s.
Per case, a ring AllReduce of 1 MiB (1 warm-up + 3 iterations) runs on the 8 GPUs and the fault hits s1g1
(server-down, partition: server 1) `--at` seconds after the job starts. Printed, in seconds after the failure:
detected (the first peer noticed it) and by what (heartbeats over the network, the progress watchdog,
a declaration, the transport), re-formed (every member of the new communicator had joined it),
first success (the first AllReduce after that completed on every member); then the steps lost, who
took over, and whether the job finished with numpy's result. A last case turns the heartbeats off, so
that only the transport's timeouts can notice a crash (the communicator's no-progress timeout is 5 s).
A stall (gpu-stall) shows only when the step in progress is over (its rank blocks at its next kernel) and
the watchdog's bound (2 s) has passed, so its detection time includes the rest of that step.
Goal: a GPU crash detected and the communicator re-formed in <= 2 s.
"""
import argparse
import time

from testbed.fabric.links import NIC_MTU
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.faults import outcomes
from testbed.faults.schedule import Schedule
from testbed.workloads import collective

TARGET = {"gpu-crash": "s1g1", "gpu-hang": "s1g1", "gpu-stall": "s1g1", "nic-down": "s1g1", "partition": "s1",
          "server-down": "s1"}


def case(net, kind: str, policy: str, at: float, size: str, heartbeat=None, rto: str = "adaptive") -> dict:
    spec = {"op": "allreduce", "algo": "ring", "sizes": [size], "iterations": 3, "timeout_s": 5,
            "recovery": policy, "retransmit_timeout": rto}
    if heartbeat is not None:
        spec["heartbeat"] = heartbeat
    fault = {"at": at, "kind": kind, "target": TARGET[kind], "duration": 10}     # a hang or cut ends after 10 s
    schedule = Schedule(net, [fault])
    schedule.start()
    try:
        result = collective.run(net, spec)
    finally:
        schedule.stop()
    record, = schedule.results([])
    outcomes.fill([record], [result], schedule.t0, net.fabric)
    return {"result": result, "fault": record}


def since(fault: dict, key: str) -> str:
    t = fault.get(key)
    return f"{t - fault['at_s']:.2f}" if t is not None and fault["at_s"] is not None else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", nargs="+", default=list(TARGET))
    ap.add_argument("--policies", nargs="+", default=["abort", "shrink", "spare", "migrate"])
    ap.add_argument("--at", type=float, default=4.0)
    ap.add_argument("--size", default="1MiB")
    ap.add_argument("--retransmit-timeout", choices=["adaptive", "fixed"], default="adaptive",
                    help="the RC queue pairs' timer: adaptive (RFC 6298, the default) or fixed (sized for full queues)")
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    args = ap.parse_args()
    fabric = build("rail-optimized", 2, 4, spines=2, nic_mbps=5, spares_per_server=1, spare_servers=1,
                   nic_mtu=args.nic_mtu)
    cases = [(k, p, None) for k in args.kinds for p in args.policies] + [("gpu-crash", "shrink", False)]
    print(f"# ring AllReduce {args.size} on rail-optimized 2x4 (+1 spare GPU per server, +1 spare server), NIC 5 Mbit/s, "
          f"MTU {args.nic_mtu};")
    print("# heartbeats over the NIC / HB domain every 0.15 s, failed after 1 s of silence; watchdog bound 2 s;")
    print(f"# RC retransmission timeout {args.retransmit_timeout}; timeouts/retransmits: the transport's counters "
          "summed over the ranks")
    print("# seconds after the failure")
    print(f"# {'fault':<12} {'policy':<8} {'heartbeats':<10} {'detected':>8} {'by':<10} {'re-formed':>9} "
          f"{'1st success':>11} {'lost':>4} {'ranks':>5} {'correct':>7} {'timeouts':>8} {'retx':>5}  replaced / error")
    with Network(fabric) as net:
        for kind, policy, heartbeat in cases:
            t0 = time.monotonic()
            out = case(net, kind, policy, args.at, args.size, heartbeat, args.retransmit_timeout)
            r, f = out["result"], out["fault"]
            row = r["rows"][0] if r["rows"] else {}
            what = ", ".join(f"{a}->{b}" for a, b in (f.get("replaced_by") or {}).items())
            if not r["ok"]:
                what = next((c["detail"] for c in r["checks"] if not c["ok"]), "")[:110]
            lost = f.get("lost_steps")
            print(f"  {kind:<12} {policy:<8} {'off' if heartbeat is False else 'on':<10} {since(f, 'detected_s'):>8} "
                  f"{f.get('detected_by') or '-':<10} {since(f, 'recovered_s'):>9} {since(f, 'first_success_s'):>11} "
                  f"{'-' if lost is None else lost:>4} {row.get('ranks', '-'):>5} {str(row.get('correct', '-')):>7} "
                  f"{row.get('transport', {}).get('timeouts', 0):>8} {row.get('retransmits', '-'):>5}  "
                  f"{what}  ({time.monotonic() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
