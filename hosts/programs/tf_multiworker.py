"""A TensorFlow job as a user brings one: tf.distribute.MultiWorkerMirroredStrategy (TF_CONFIG names the workers,
as a cluster manager sets it) with ring collectives, training a small Keras model (a custom loop: Keras 3's model.fit
cannot take a multi-worker strategy's data); the Keras optimizer all-reduces the gradients over gRPC between the
workers every step. The last line is JSON: the loss per epoch and how far the worker's weights are from the
others' at the end (0: identical everywhere).

    python hosts/programs/tf_multiworker.py --epochs 4 --steps 8
"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def dataset(batch: int, steps: int, index: int) -> tf.data.Dataset:
    """Each worker's own samples of one linear function (y = x . w + 0.5)."""
    rng = np.random.default_rng(100 + index)
    x = rng.normal(size=(batch * steps, 16)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, 16, dtype=np.float32) + 0.5).reshape(-1, 1)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF   # already per worker
    return ds.with_options(opts)


def spread(strategy, model) -> float:
    """The largest difference between this worker's weights and the workers' mean, summed over the workers."""
    @tf.function
    def step():
        ctx = tf.distribute.get_replica_context()
        flat = tf.concat([tf.reshape(v, [-1]) for v in model.trainable_variables], 0)     # this worker's copy
        mean = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, flat)
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_max(tf.abs(flat - mean)))
    return float(strategy.experimental_local_results(strategy.run(step))[0])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    ring = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=ring)
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        opt = tf.keras.optimizers.SGD(0.02)
    workers = strategy.num_replicas_in_sync

    @tf.function
    def train_step(x, y):
        def step(x, y):
            with tf.GradientTape() as tape:
                # mean over the global batch: the optimizer sums the workers' gradients (one ring all-reduce)
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y)) / workers
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, loss)
        return strategy.experimental_local_results(strategy.run(step, args=(x, y)))[0]

    batches = iter(dataset(a.batch, a.steps, task["index"]))
    losses = []
    for epoch in range(a.epochs):
        losses.append(sum(float(train_step(*next(batches))) for _ in range(a.steps)) / a.steps)
        print(f"# epoch {epoch + 1}/{a.epochs}: loss {losses[-1]:.4f}", flush=True)    # how far a job got
    diff = spread(strategy, model)
    print(f"# worker {task['index']} of {strategy.num_replicas_in_sync}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
          f"weights differ by at most {diff}")
    print(json.dumps({"worker": task["index"], "workers": strategy.num_replicas_in_sync, "losses": losses,
                      "loss_ratio": losses[-1] / losses[0], "weight_spread": diff,
                      "tensorflow": tf.__version__}), flush=True)
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
