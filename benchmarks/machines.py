"""Benchmark: the same fabric on this machine and spread over two machines (printed, not asserted).

    .venv/bin/python benchmarks/machines.py [--kind rail-optimized] [--grid 2x4] [--repeat 3] [--nic-mbps 5]
                                            [--size 4MiB] [--nic-mtu 9000]

The two machines are containers acting as machines (tools/machines.py) on this machine: they add no CPU, so
what the split costs here is the overhead of spreading (ssh control, VXLAN encapsulation, two more Open vSwitch
daemons sharing the same cores), not what real machines would gain. Per layout, `--repeat` rounds of: bring-up,
the rail-aware ring AllReduce and the hierarchical AllReduce of `--size` (2 iterations, checked against numpy),
tear-down. Printed per layout: bring-up and tear-down seconds and each collective's busbw / bound, as the median
of the rounds [min-max], with the machine's CPU idle share during the collectives.
"""
import argparse
import contextlib
import statistics
import sys
import time

from hierarchical import cpu_times, idle_pct, spread

from testbed.fabric.links import NIC_MTU
from testbed.fabric.machines import machines_from
from testbed.fabric.params import MACHINES_HB_MTU
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.scenario.schema import parse_size
from testbed import PROJECT_ROOT
from testbed.workloads import collective

sys.path.insert(0, PROJECT_ROOT)        # tools/ is the project's, not an installed package
from tools import machines as machine_containers  # noqa: E402

CASES = [{"op": "allreduce", "algo": "ring", "ring": "rail"}, {"op": "allreduce", "algo": "hierarchical"}]


def round_on(fabric, machines, args) -> dict:
    out = {}
    t0 = time.monotonic()
    net = Network(fabric, machines=machines)
    with net:
        out["bring-up s"] = net.timings["bring_up_s"]
        for case in CASES:
            cpu = cpu_times()
            res = collective.run(net, {"type": "collective", "iterations": 2, "sizes": [args.size], **case})
            if not res["rows"] or not all(r["correct"] for r in res["rows"]):
                raise SystemExit(f"{case['op']}/{case['algo']} failed: "
                                 f"{[c['detail'] for c in res['checks'] if not c['ok']]}")
            out[f"{case['op']}/{case['algo']} busbw/bound"] = res["rows"][0]["bus_ratio"]
            out[f"{case['op']}/{case['algo']} idle%"] = idle_pct(cpu, cpu_times())
    out["tear-down s"] = net.timings["tear_down_s"]
    out["round s"] = time.monotonic() - t0
    return out


@contextlib.contextmanager
def two_machines(names=("m1", "m2")):
    """Two containers acting as machines, as a Network's `machines`; removed on the way out."""
    try:
        addresses = machine_containers.start(list(names))
        key, _ = machine_containers.key_pair()
        yield machines_from([{"name": n, "address": a, "ssh_options": machine_containers.ssh_options(key)}
                             for n, a in addresses.items()])
    finally:
        machine_containers.stop(list(names))


def options(argv=None) -> argparse.Namespace:
    """The command line's settings, checked (ValueError); benchmarks/measured.py passes its own."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", default="rail-optimized")
    ap.add_argument("--grid", default="2x4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nic-mbps", type=float, default=5)
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    ap.add_argument("--size", default="4MiB")
    args = ap.parse_args(argv)
    args.servers, args.per = (int(v) for v in args.grid.split("x"))
    parse_size(args.size)
    return args


def fabric_of(args):
    return build(args.kind, args.servers, args.per, nic_mbps=args.nic_mbps, nic_mtu=args.nic_mtu,
                 hb_mtu=MACHINES_HB_MTU,      # as a scenario with machines gets by default
                 **({"spines": 2} if args.kind != "rail-only" else {}))


def main():
    try:
        args = options()
    except ValueError as exc:
        print(f"error: bad --grid or --size: {exc}", file=sys.stderr)
        sys.exit(2)
    fabric = fabric_of(args)
    with two_machines() as two:
        layouts = {"one machine": None, "two machines": two}
        rows: dict[str, list[dict]] = {name: [] for name in layouts}
        for rnd in range(args.repeat):
            for name, machines in layouts.items():
                rows[name].append(round_on(fabric, machines, args))
                print(f"  round {rnd} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in rows[name][-1].items()),
                      file=sys.stderr, flush=True)
    keys = list(rows["one machine"][0])
    print(f"{args.kind} {args.grid}, NIC {args.nic_mbps:g} Mbit/s, {args.size}, {args.repeat} rounds: "
          f"median [min-max]")
    print(f"{'':<34}" + "".join(f"{name:>22}" for name in layouts))
    for k in keys:
        print(f"{k:<34}" + "".join(f"{spread([r[k] for r in rows[name]]):>22}" for name in layouts))
    print("median ratio two/one: " + ", ".join(
        f"{k} {statistics.median(r[k] for r in rows['two machines']) / statistics.median(r[k] for r in rows['one machine']):.2f}"
        for k in keys if "busbw" in k or k.endswith(" s")))


if __name__ == "__main__":
    main()
