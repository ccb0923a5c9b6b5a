"""The two synthetic input pipelines, built in-graph so a tf.data.service worker can run them as they are.

compute: JPEG decode, random crop, flip, colour augmentation and resize of random images (CPU per byte is high);
data:    large random elements with one cheap op (bytes per CPU second are high).
The raw data is a small pool of random samples embedded in the graph and repeated: no files, no downloads,
and the same source whether the pipeline runs locally or on a remote worker.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
DEFAULTS = {
    "compute": {"batch": 16, "image": 320, "crop": 288, "out": 64, "pool": 16},
    "data": {"batch": 4, "element_kib": 128, "pool": 8},
}


def source(kind: str, cfg: dict, seed: int = 0) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    if kind == "compute":
        side = cfg["image"]
        jpegs = [tf.io.encode_jpeg(rng.integers(0, 256, (side, side, 3), dtype=np.uint8), quality=90).numpy()
                 for _ in range(cfg["pool"])]
        return tf.data.Dataset.from_tensor_slices(jpegs).repeat()
    if kind == "data":
        n = cfg["element_kib"] * 1024
        pool = rng.integers(0, 256, (cfg["pool"], n), dtype=np.uint8)
        return tf.data.Dataset.from_tensor_slices(pool).repeat()
    raise ValueError(f"unknown pipeline {kind!r}; choose compute or data")


def element_fn(kind: str, cfg: dict):
    """The element-wise preprocessing of a pipeline."""
    if kind == "compute":
        crop = cfg["crop"]

        def prep(jpeg):
            img = tf.io.decode_jpeg(jpeg, channels=3)
            img = tf.image.random_crop(img, [crop, crop, 3])
            img = tf.image.random_flip_left_right(img)
            img = tf.image.convert_image_dtype(img, tf.float32)
            img = tf.image.random_brightness(img, 0.2)
            img = tf.image.random_contrast(img, 0.8, 1.2)
            img = tf.image.random_saturation(img, 0.8, 1.2)
            img = tf.image.random_hue(img, 0.05)
            img = tf.image.resize(img, [cfg["out"], cfg["out"]], antialias=True)   # small result: cheap to ship
            return tf.image.convert_image_dtype(tf.clip_by_value(img, 0.0, 1.0), tf.uint8)
        return prep

    def touch(x):                       # little compute: flip the bytes with a random mask
        return tf.bitwise.bitwise_xor(x, tf.cast(tf.random.uniform([], 0, 255, tf.int32), tf.uint8))
    return touch


def config(kind: str, overrides: dict | None = None) -> dict:
    return {**DEFAULTS[kind], **(overrides or {})}


def elements(kind: str, cfg: dict, seed: int = 0) -> tf.data.Dataset:
    return source(kind, cfg, seed).map(element_fn(kind, cfg), num_parallel_calls=AUTOTUNE)


def batches(kind: str, cfg: dict, seed: int = 0) -> tf.data.Dataset:
    return elements(kind, cfg, seed).batch(cfg["batch"], drop_remainder=True)


def local(kind: str, cfg: dict) -> tf.data.Dataset:
    """P: the whole pipeline on the trainer's own CPU budget."""
    return batches(kind, cfg).prefetch(2)


def remote(kind: str, cfg: dict, candidate: str, service: str) -> tf.data.Dataset:
    """An offloaded pipeline P' through tf.data.service.

    p'2 element-wise: the service returns preprocessed elements, the trainer batches them;
    p'3 batch-wise:   the service returns whole batches.
    p'1 (remote fetch and preprocess) differs from p'3 only in where the raw data is read; with in-graph
    synthetic data the worker always makes its own raw data, so p'1 and p'3 are the same pipeline here.
    """
    svc = tf.data.experimental.service
    if candidate == "p'2":
        ds = elements(kind, cfg).apply(svc.distribute("parallel_epochs", service, compression=None))
        return ds.batch(cfg["batch"], drop_remainder=True).prefetch(2)
    if candidate in ("p'1", "p'3"):
        ds = batches(kind, cfg).apply(svc.distribute("parallel_epochs", service, compression=None))
        return ds.prefetch(2)
    raise ValueError(f"unknown candidate pipeline {candidate!r}")
