"""Child process of test_crash_safety: `train` saves every step until killed;
`resume` restores the newest checkpoint, prints its step and table digest,
and trains three more steps."""
import hashlib
import os
import sys

import numpy as np
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf.optimizers import adagrad

backend, folder, mode = sys.argv[1], sys.argv[2], sys.argv[3]
tf.compat.v1.disable_eager_execution()   # a TF1-style training script
mx.init(backend=backend)
table = mx.create_table(tf.int64, 16, "big", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                        device_vocabulary_size=400_000)
optimizer = adagrad.create_hash_optimizer(learning_rate=0.1)
global_step = tf.compat.v1.train.get_or_create_global_step()
ids = tf.compat.v1.placeholder(tf.int64, [None])
loss = tf.reduce_sum(tf.square(mx.sparse_lookup(table, ids, modify_graph=True)))
sparse = mx.get_dense_and_sparse_variable()[1]
train = optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse), global_step=global_step)
saver = tf.compat.v1.train.Saver(max_to_keep=3)


def digest():
    state = table.store.export()
    h = hashlib.sha256()
    for part in (state.keys, state.values, state.counts, state.last_seen, *state.slots.values()):
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()


def batch(step):
    return np.random.default_rng(step).integers(0, 10**6, size=10_000)


with tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    if mode == "train":
        print("ready", flush=True)
        while True:
            step = session.run(global_step)
            session.run(train, {ids: batch(step)})
            path = saver.save(session, os.path.join(folder, "model"), global_step=global_step)
            tmp = os.path.join(folder, f".digest-{step + 1}")
            with open(tmp, "w") as f:
                f.write(digest())
            os.rename(tmp, os.path.join(folder, f"digest-{step + 1}"))
    else:
        latest = tf.train.latest_checkpoint(folder)
        if latest is None:                       # killed before the first save finished
            print(0, digest(), 3)
            for step in range(3):
                session.run(train, {ids: batch(step)})
            sys.exit(0)
        saver.restore(session, latest)
        step = session.run(global_step)
        restored = digest()
        for _ in range(3):
            session.run(train, {ids: batch(session.run(global_step))})
        print(step, restored, session.run(global_step))
