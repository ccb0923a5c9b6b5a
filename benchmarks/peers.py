"""Benchmark: our ring AllReduce (RoCEv2 in user space) side by side with the libraries a user would pick instead,
on one fabric, the same sizes and links: Open MPI (mpi4py, TCP; as installed and tuned), gloo (torch.distributed, TCP) and TensorFlow's
ring (MultiWorkerMirroredStrategy, gRPC), each run by the `program` workload. Prints busbw and busbw / line rate
per size, nccl-tests' busbw (algbw x 2(n-1)/n) for all four (printed, not asserted).

    sudo .venv/bin/python benchmarks/peers.py [--sizes 64KiB,256KiB,1MiB] [--nic-mbps 50] [--iters 3] [--out DIR]

The fabric is rail-optimized with one GPU per server, so every byte of every library crosses a NIC (none takes
the HB domain). Our rows are the mean over iterations of the slowest rank; MPI's and gloo's too; TensorFlow's are
back-to-back calls (each waits for the slowest worker). A peer whose package is missing (torch) is left out.
"""
import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile

from hosts.rdma.mtu import roce_mtu
from hosts.rdma.qp import PACKET_OVERHEAD
from testbed import runner
from testbed.fabric.links import NIC_MTU

ETH, IP, TCP_TS = 14, 20, 32        # bytes a shaper counts per frame; TCP's header with timestamps

MPI_TUNED = {"btl_tcp_eager_limit": "4194304", "btl_tcp_rndv_eager_limit": "4194304",
             "btl_tcp_max_send_size": "4194304", "coll_tuned_use_dynamic_rules": "1",
             "coll_tuned_allreduce_algorithm": "4"}
PEERS = {   # name -> (column, program workload, the package it needs)
    "mpi": ("Open MPI, TCP", {"launcher": "mpirun", "command": "{python} hosts/programs/mpi_sweep.py --ops allreduce"
                                                                " --sizes {sizes} --iters {iters}"}, "mpi4py"),
    # as a user who read docs/programs.md would run it: the TCP eager limits at 4 MiB and the ring algorithm
    "mpi-tuned": ("Open MPI tuned, TCP", {"launcher": "mpirun", "command": "{python} hosts/programs/mpi_sweep.py "
                                          "--ops allreduce --sizes {sizes} --iters {iters}",
                                          "mpirun_args": [w for k, v in MPI_TUNED.items() for w in ("--mca", k, v)]},
                  "mpi4py"),
    "gloo": ("gloo, TCP", {"command": "{python} hosts/programs/torch_gloo.py --sizes {sizes} --iters {iters} "
                                      "--steps 0"}, "torch"),
    "tf": ("TF ring, gRPC", {"command": "{python} hosts/programs/tf_allreduce.py --sizes {sizes} --iters {iters}"},
           "tensorflow"),
}


def scenario(sizes: str, iters: int, nic_mbps: float, nic_mtu: int, peers: list[str]) -> dict:
    workloads = [{"type": "collective", "name": "ours", "op": "allreduce", "algo": "ring",
                  "sizes": sizes.split(","), "iterations": iters}]
    for name in peers:
        spec = dict(PEERS[name][1])
        spec["command"] = spec["command"].format(python="{python}", sizes=sizes, iters=iters)
        workloads.append({"type": "program", "name": name, "timeout_s": 300, **spec})
    return {"name": "peers", "fabric": {"kind": "rail-optimized", "servers": 4, "gpus_per_server": 1, "spines": 1,
                                        "nic_mbps": nic_mbps, "nic_mtu": nic_mtu}, "workloads": workloads}


def program_rows(out: str, w: dict) -> dict[int, float]:
    """bytes -> busbw (MB/s) from the JSON line rank 0 of a program printed last."""
    with open(os.path.join(out, w["logs"], "rank0.stdout")) as f:
        lines = [line for line in f if line.startswith("{")]
    return {r["bytes"]: r["busbw_MBps"] for r in json.loads(lines[-1])["rows"]} if lines else {}


def available() -> tuple[list[str], list[str]]:
    """The peers that can run here, and a line for each left out."""
    peers = [n for n, (_, _, pkg) in PEERS.items() if importlib.util.find_spec(pkg) is not None]
    notes = [f"{PEERS[n][0]} left out: the Python package {PEERS[n][2]} is not installed" for n in PEERS if n not in peers]
    if "mpi" in peers and shutil.which("mpirun") is None:
        peers = [n for n in peers if not n.startswith("mpi")]
        notes.append("Open MPI left out: no mpirun (apt openmpi-bin)")
    return peers, notes


def payload_caps(nic_mtu: int) -> dict[str, float]:
    """The most of the line rate a transport's payload can take on full frames (the shaper counts every byte
    from the Ethernet header on): a busbw / line rate above this rode the shapers' token buckets."""
    mtu = roce_mtu(nic_mtu)
    return {"RoCEv2 SEND": mtu / (mtu + PACKET_OVERHEAD),     # Ethernet, IPv4, UDP, BTH, ICRC
            "TCP": (nic_mtu - IP - TCP_TS) / (nic_mtu + ETH)}


def run(sizes: str, iters: int, nic_mbps: float, nic_mtu: int, peers: list[str], out: str) -> tuple[dict, dict]:
    """One fabric, ours and every peer in turn: (name -> bytes -> busbw MB/s, the run's results)."""
    r = runner.run(scenario(sizes, iters, nic_mbps, nic_mtu, peers), out, echo=lambda *x: None)
    by = {w["name"]: w for w in r["workloads"]}
    cols = {"ours": {row["bytes"]: row["busbw_MBps"] for row in by["ours"].get("rows", [])}}
    cols.update({n: program_rows(out, by[n]) for n in peers if n in by})
    return cols, r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64KiB,256KiB,1MiB")
    p.add_argument("--nic-mbps", type=float, default=50)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    p.add_argument("--out")
    a = p.parse_args()
    peers, notes = available()
    for line in notes:
        print(f"# {line}")
    out = a.out or tempfile.mkdtemp(prefix="tb-peers-")
    cols, r = run(a.sizes, a.iters, a.nic_mbps, a.nic_mtu, peers, out)
    by = {w["name"]: w for w in r["workloads"]}
    line = a.nic_mbps * 1e6 / 8 / 1e6
    names = {"ours": "ours: ring, RoCEv2", **{n: PEERS[n][0] for n in peers}}
    print(f"#  AllReduce, 4 GPUs on one rail switch (one NIC each), NIC {a.nic_mbps:g} Mbit/s = line rate "
          f"{line:.3f} MB/s; busbw MB/s (busbw / line rate)")
    print(f"# {'size':>10} " + " ".join(f"{names[n]:>22}" for n in cols))
    for size in sorted({s for c in cols.values() for s in c}):
        cells = [f"{c[size]:>9.3f} ({c[size] / line:4.2f})" if size in c else "-" for c in cols.values()]
        print(f"  {size:>10} " + " ".join(f"{cell:>22}" for cell in cells))
    print("# the most of the line rate a payload can take on full frames: " +
          ", ".join(f"{k} {v:.3f}" for k, v in payload_caps(a.nic_mtu).items()) + " (above: the shapers' bursts)")
    print("# CPU idle % during each: " + ", ".join(f"{n} {by[n]['cpu_idle_mean_pct']}" for n in cols if n in by))
    print(f"# checks: {'all passed' if r['ok'] else [c for c in r['checks'] if not c['ok']]}; results in {out}")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
