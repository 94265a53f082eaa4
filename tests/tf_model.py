"""A small mxRec-style graph model shared by the TF layer tests."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf.optimizers import adagrad, lazy_adam

N_ROWS = 256
BATCH = 32


def features(seed: int = 0, n: int = N_ROWS) -> dict:
    rng = np.random.default_rng(seed)
    user = rng.zipf(1.4, size=(n, 2)) % 50
    item = rng.zipf(1.3, size=(n, 3)) % 80 + 1000
    label = ((user[:, 0] + item[:, 0]) % 3 == 0).astype(np.float32)
    return {"user": user.astype(np.int64), "item": item.astype(np.int64), "label": label,
            "timestamp": np.arange(n, dtype=np.int64) * 10}


def fresh_graph():
    """Forget the previous model's tables (each build gets its own graph)."""
    if mx.is_initialized():
        mx.terminate_config_initializer()


def build(backend: str, *, static: bool = False, access_threshold=None, eviction_threshold=None,
          optimizer="adagrad", send_count=None, dynamic_expansion=False, seed=0, multi_lookup=True,
          device_vocabulary_size=500):
    """Tables 'user' (dim 4) and 'item' (dim 4); item is looked up twice
    (multi-lookup) when ``multi_lookup``.  Returns a dict of graph handles."""
    fresh_graph()
    graph = tf.Graph()
    with graph.as_default():
        return _build(graph, backend, static, access_threshold, eviction_threshold, optimizer, send_count,
                      dynamic_expansion, seed, multi_lookup, device_vocabulary_size)


def _build(graph, backend, static, access_threshold, eviction_threshold, optimizer, send_count, dynamic_expansion,
           seed, multi_lookup, device_vocabulary_size):
    mx.init(backend=backend, use_dynamic=not static, use_dynamic_expansion=dynamic_expansion)
    init = tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1)
    user = mx.create_table(tf.int64, 4, "user", init, device_vocabulary_size=device_vocabulary_size)
    item = mx.create_table(tf.int64, 4, "item", init, device_vocabulary_size=device_vocabulary_size)
    thresholds = {}
    if access_threshold is not None:
        thresholds = dict(access_threshold=access_threshold, eviction_threshold=eviction_threshold)
    specs = [mx.FeatureSpec("user", table_name="user", **thresholds),
             mx.FeatureSpec("item", table_name="item", **thresholds)]
    if multi_lookup:
        specs.append(mx.FeatureSpec("item_again", table_name="item", index_key="item", **thresholds))
    stamp = mx.FeatureSpec("timestamp", is_timestamp=True)
    sparse_optimizer = (adagrad.create_hash_optimizer(learning_rate=0.2) if optimizer == "adagrad"
                        else lazy_adam.create_hash_optimizer(learning_rate=0.05))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    data = features(seed)
    ds = tf.data.Dataset.from_tensor_slices(data).batch(BATCH, drop_remainder=True)
    ds = ds.map(lambda b: {**b, "timestamp": tf.reduce_max(b["timestamp"])})
    ds = ds.map(mx.get_asc_insert_func(tgt_key_specs=specs + [stamp])).repeat()
    batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
    counts = {"user": send_count, "item": send_count}
    embs = [mx.sparse_lookup(user if s.table_name == "user" else item, s, batch=batch,
                             send_count=counts[s.table_name]) for s in specs]
    loss, train, grads, sparse_vars = head(embs, batch["label"], sparse_optimizer, global_step)
    return dict(loss=loss, train=train, embs=embs, tables={"user": user, "item": item}, batch=batch,
                global_step=global_step, sparse_vars=sparse_vars, grads=grads, graph=graph,
                init=tf.compat.v1.global_variables_initializer())


def head(embs, labels, sparse_optimizer, global_step):
    """The model above the lookups, its loss, and mxRec's training pattern
    (tf.gradients on the tables, a hash optimizer, a TF optimizer for the rest)."""
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(0.3))
    logits = sum(tf.reduce_sum(tf.reshape(tf.matmul(tf.reshape(e, [-1, 4]), w), [BATCH, -1]), axis=1) for e in embs)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    dense_vars, sparse_vars = mx.get_dense_and_sparse_variable()
    grads = tf.gradients(loss, sparse_vars)
    train_op = tf.group(sparse_optimizer.apply_gradients(zip(grads, sparse_vars)),
                        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step,
                                                                                  var_list=dense_vars))
    return loss, train_op, grads, sparse_vars


def train(handles, steps: int, session=None):
    own = session is None
    session = session or tf.compat.v1.Session(graph=handles["graph"])
    if own:
        session.run(handles["init"])
    losses = [session.run([handles["loss"], handles["train"]])[0] for _ in range(steps)]
    return losses, session
