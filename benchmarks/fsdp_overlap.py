"""Benchmark: FSDP's layer exchange overlapped against in sequence (printed, not asserted).

    .venv/bin/python benchmarks/fsdp_overlap.py [--repeats 3] [--set KEY=VALUE ...]

Runs scenarios/fsdp_overlap.yaml (an AllGather of the parameters and a ReduceScatter of the gradients, ring, on
rail-optimized 2x4) `repeats` times. Per run and algorithm: the exchange's time, busbw / bound, and the time to
the end of each of its two operations (the AllGather is what the next layer's computation waits for). Then the
medians with their range: overlapped / sequential time, and the AllGather's time overlapped / alone.
"""
import argparse
import os
import statistics
import tempfile

from testbed import runner, scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]" if values else "-"


def once(overrides: list[str]) -> dict[str, dict]:
    """algo -> {seconds, bus_ratio, allgather, reduce_scatter} of one run."""
    doc = scenario.load(os.path.join(ROOT, "scenarios", "fsdp_overlap.yaml"), overrides)
    out = runner.run(doc, tempfile.mkdtemp(prefix="tb-bench-fsdp-"), echo=lambda *a: None)
    got = {}
    for w in out["workloads"]:
        row, = w["rows"]
        if not row["correct"]:
            raise RuntimeError(f"fsdp/{row['algo']} was not exact")
        phases = {p["name"]: p["seconds"] for p in row.get("phases", [])}
        got[row["algo"]] = {"seconds": row["seconds"], "bus_ratio": row["bus_ratio"], **phases}
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a scenario override")
    args = ap.parse_args()
    ratio, gather = [], []
    print(f"{'run':>3} {'algo':<11} {'seconds':>8} {'bus/bound':>9} {'allgather':>9} {'reduce_sc':>9}  load")
    for k in range(args.repeats):
        load = os.getloadavg()[0]
        got = once(args.set)
        for algo, r in got.items():
            print(f"{k:>3} {algo:<11} {r['seconds']:>8.3f} {r['bus_ratio']:>9.3f} {r.get('allgather', 0):>9.3f} "
                  f"{r.get('reduce_scatter', 0):>9.3f}  {load:.1f}")
        seq, ovl = got["sequential"], got["overlapped"]
        ratio.append(ovl["seconds"] / seq["seconds"])
        gather.append(ovl["allgather"] / seq["allgather"])
    print(f"overlapped / sequential time: {spread(ratio)}")
    print(f"AllGather overlapped / alone: {spread(gather)}")


if __name__ == "__main__":
    main()
