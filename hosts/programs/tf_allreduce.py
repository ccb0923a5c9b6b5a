"""TensorFlow's own all-reduce as a benchmark: tf.distribute.MultiWorkerMirroredStrategy with ring collectives
(TF_CONFIG names the workers), a size sweep of the replica context's all_reduce, every result checked against
numpy, printed like nccl-tests (busbw = algbw x 2(n-1)/n) and, last, as one JSON line.

    python hosts/programs/tf_allreduce.py --sizes 64KiB,256KiB --iters 3
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20}


def size(text: str) -> int:
    for unit, factor in UNITS.items():
        if text.endswith(unit):
            return int(text[:-len(unit)]) * factor
    return int(text)


def data(count: int, index: int) -> np.ndarray:
    return ((np.arange(count) % 7) + index).astype(np.float32)      # exact float32 sums: checked by equality


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64KiB,256KiB")
    p.add_argument("--iters", type=int, default=3)
    a = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    ring = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=ring)
    index, n = json.loads(os.environ["TF_CONFIG"])["task"]["index"], strategy.num_replicas_in_sync
    if index == 0:
        print(f"#  all_reduce (TensorFlow {tf.__version__}, ring), {n} workers")
        print(f"# {'size':>10} {'count':>10} {'type':>8} {'time(us)':>12} {'algbw MB/s':>11} {'busbw MB/s':>11} "
              f"{'#wrong':>7}")
    rows = []
    for nbytes in (size(s) for s in a.sizes.split(",")):
        count = nbytes // 4
        x = tf.constant(data(count, index))

        @tf.function
        def reduce():
            return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, x))
        out = reduce()                                    # traced, and every worker in step, before the clock
        t0 = time.perf_counter()
        for _ in range(a.iters):
            out = reduce()
        seconds = (time.perf_counter() - t0) / a.iters    # back to back: each waits for the slowest worker
        got = strategy.experimental_local_results(out)[0].numpy()
        wrong = int(np.count_nonzero(got != sum(data(count, r) for r in range(n))))
        algbw = count * 4 / seconds / 1e6
        rows.append({"bytes": count * 4, "count": count, "seconds": seconds, "algbw_MBps": algbw,
                     "busbw_MBps": algbw * 2 * (n - 1) / n, "wrong": wrong})
        if index == 0:
            print(f"  {count * 4:>10} {count:>10} {'float':>8} {seconds * 1e6:>12.0f} {algbw:>11.3f} "
                  f"{rows[-1]['busbw_MBps']:>11.3f} {wrong:>7}", flush=True)
    if index == 0:
        print(json.dumps({"ranks": n, "rows": rows, "busbw_MBps": max(r["busbw_MBps"] for r in rows),
                          "correct": all(r["wrong"] == 0 for r in rows)}))
    return 0 if all(r["wrong"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
