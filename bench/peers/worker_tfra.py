"""TFRA worker: lookup + upsert (an SGD step on the unique rows) on a dynamic
embedding variable; prints the min seconds per step as JSON."""
import json
import sys
import time

import numpy as np
import tensorflow as tf
import tensorflow_recommenders_addons as tfra

sys.path.insert(0, sys.argv[1])
from workload import BATCH, DIM, batches, prefill_keys  # noqa: E402

de = tfra.dynamic_embedding
var = de.get_variable("peer", key_dtype=tf.int64, value_dtype=tf.float32, dim=DIM,
                      initializer=tf.keras.initializers.RandomUniform(-0.1, 0.1))


@tf.function
def step(keys):
    unique, _ = tf.unique(keys)
    rows = var.lookup(unique)                          # missing keys get the initializer
    var.upsert(unique, rows - 0.01 * tf.ones_like(rows))  # the sparse update writes rows back
    return tf.size(unique)


keys = prefill_keys()
for start in range(0, len(keys), BATCH):
    step(tf.constant(keys[start:start + BATCH]))
times = []
for b in batches():
    tensor = tf.constant(b)
    t = time.perf_counter()
    step(tensor).numpy()
    times.append(time.perf_counter() - t)
print(json.dumps({"system": "tfra", "tf": tf.__version__, "min_step_s": min(times[2:]), "size": int(var.size())}))
