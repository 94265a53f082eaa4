"""Child process of tests/test_checkpoint_faults.py, the Saver path (CKPT-8).

``saver_fault_child.py BACKEND FOLDER KILL_AT`` restores the newest listed
checkpoint and checks that both tables and the dense variable are exactly
what the saving process recorded for that step (``expect-<step>``, written
before its save began); prints ``restored <step>``.  Without a checkpoint it
trains and saves one step completely first, printing the names of that save's
steps (``step <name>``).  Then it trains one step and saves it through
``tf.compat.v1.train.Saver``, SIGKILLed when step KILL_AT of that save
completes: an index, or the name of a step (its first occurrence), e.g.
``saver:_table_'a'_written``; ``none`` saves completely.
"""
import hashlib
import json
import os
import signal
import sys

import numpy as np
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import checkpoint
from mxrec_ref.tf.optimizers import adagrad

backend, folder, kill_at = sys.argv[1], sys.argv[2], sys.argv[3]
tf.compat.v1.disable_eager_execution()
mx.init(backend=backend)
tables = [mx.create_table(tf.int64, 4, name, tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                          device_vocabulary_size=2000) for name in ("a", "b")]
optimizer = adagrad.create_hash_optimizer(learning_rate=0.1)
global_step = tf.compat.v1.train.get_or_create_global_step()
dense = tf.compat.v1.get_variable("dense", initializer=np.ones(4, np.float32))
ids = tf.compat.v1.placeholder(tf.int64, [None])
loss = sum(tf.reduce_sum(tf.square(mx.sparse_lookup(t, ids, modify_graph=True) * dense)) for t in tables)
sparse = mx.get_dense_and_sparse_variable()[1]
train = tf.group(optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse), global_step=global_step),
                 dense.assign_add(tf.fill([4], 0.25)))
saver = tf.compat.v1.train.Saver(max_to_keep=2)


def observed(session) -> dict:
    out = {"dense": session.run(dense).tolist()}
    for table in tables:
        state = table.store.export()
        h = hashlib.sha256()
        for part in (state.keys, state.values, state.counts, state.last_seen, *state.slots.values()):
            h.update(np.ascontiguousarray(part).tobytes())
        out[table.table_name] = h.hexdigest()
    return out


with tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    latest = tf.train.latest_checkpoint(folder)
    if latest is not None:
        saver.restore(session, latest)
        step = session.run(global_step)
        expected = json.loads(open(os.path.join(folder, f"expect-{step}")).read())
        if observed(session) != expected:
            print("MIXED", step, flush=True)
            sys.exit(1)
        print("restored", step, flush=True)

    def train_and_save(kill_at):
        step = session.run(global_step)
        session.run(train, {ids: np.random.default_rng(step).integers(0, 500, size=300)})
        with open(os.path.join(folder, f"expect-{step + 1}"), "w") as f:
            f.write(json.dumps(observed(session)))
        steps = []

        def hook(name):
            name = name.replace(" ", "_")
            if str(len(steps)) == kill_at or name == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            steps.append(name)

        checkpoint.fault_hook = hook
        saver.save(session, os.path.join(folder, "model"), global_step=global_step)
        checkpoint.fault_hook = None
        return steps

    if latest is None:
        print(*(f"step {name}" for name in train_and_save("none")), sep="\n", flush=True)
    train_and_save(kill_at)
