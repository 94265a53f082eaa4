"""A two-table (user, item) recommendation script written against mxRec's API.

It imports only TensorFlow, numpy and ``mx_rec``; run it on mxrec-ref with

    mxrec-ref run examples/mxrec_two_tables.py

Environment variables choose the mode (the defaults in brackets):
  MXREC_EXAMPLE_MODE          feature_spec | modify_graph   [feature_spec]
  MXREC_EXAMPLE_MULTI_LOOKUP  0 | 1: look the item table up twice        [1]
  MXREC_EXAMPLE_STORAGE       hbm | ddr | ssd                            [hbm]
  MXREC_REF_BACKEND           fast | ref                                 [fast]
It trains with admission and eviction on a timestamp feature, saves, restores
into a fresh session, evaluates, and ends with a line starting "SUCCESS".
"""
import os
import tempfile

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

from mx_rec.constants.constants import ASCEND_TIMESTAMP  # noqa: E402
from mx_rec.core.asc.feature_spec import FeatureSpec  # noqa: E402
from mx_rec.core.asc.helper import get_asc_insert_func  # noqa: E402
from mx_rec.core.embedding import create_table, sparse_lookup  # noqa: E402
from mx_rec.core.feature_process import EvictHook  # noqa: E402
from mx_rec.graph.modifier import modify_graph_and_start_emb_cache  # noqa: E402
from mx_rec.optimizers.lazy_adam import create_hash_optimizer  # noqa: E402
from mx_rec.util.initialize import ConfigInitializer, init, terminate_config_initializer  # noqa: E402
from mx_rec.util.log import logger  # noqa: E402
from mx_rec.util.variable import get_dense_and_sparse_variable  # noqa: E402

MODE = os.environ.get("MXREC_EXAMPLE_MODE", "feature_spec")
MULTI_LOOKUP = os.environ.get("MXREC_EXAMPLE_MULTI_LOOKUP", "1") == "1"
STORAGE = os.environ.get("MXREC_EXAMPLE_STORAGE", "hbm")
BATCH, DIM, STEPS = 128, 8, 80
ADMIT = {"access_threshold": 2, "eviction_threshold": 4000, "faae_coefficient": 1}


def click_log(rows, seed):
    """Zipf users and items, a hidden preference, one timestamp per row."""
    rng = np.random.default_rng(seed)
    user = rng.zipf(1.2, size=rows) % 2000
    item = rng.zipf(1.2, size=(rows, 2)) % 5000
    taste = np.random.default_rng(7).normal(size=5000)
    logit = taste[item[:, 0]] + 0.5 * np.sin(user)
    label = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return {"user": user.astype(np.int64), "item": item.astype(np.int64), "label": label,
            "timestamp": 1_700_000_000 + np.arange(rows, dtype=np.int64)}


def dataset(rows, seed, repeat):
    ds = tf.data.Dataset.from_tensor_slices(click_log(rows, seed))
    ds = (ds.repeat() if repeat else ds).batch(BATCH, drop_remainder=True)
    return ds.map(lambda b: {**b, "timestamp": tf.reduce_max(b["timestamp"])})


def storage():
    if STORAGE == "ddr":
        return {"device_vocabulary_size": 2000, "host_vocabulary_size": 20000}
    if STORAGE == "ssd":
        return {"device_vocabulary_size": 2000, "host_vocabulary_size": 4000, "ssd_vocabulary_size": 20000,
                "ssd_data_path": [tempfile.mkdtemp(prefix="mxrec-example-ssd-")]}
    return {"device_vocabulary_size": 20000}


def model(user_emb, item_embs):
    with tf.compat.v1.variable_scope("mlp", reuse=tf.compat.v1.AUTO_REUSE):
        features = tf.concat([tf.reshape(user_emb, [-1, DIM])] + [tf.reshape(e, [-1, 2 * DIM]) for e in item_embs], 1)
        hidden = _dense(features, 16, "hidden")
        return tf.reshape(_dense(hidden, 1, "out", relu=False), [-1])


def _dense(x, units, name, relu=True):
    w = tf.compat.v1.get_variable(f"{name}_w", [x.shape[-1], units],
                                  initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
    b = tf.compat.v1.get_variable(f"{name}_b", [units], initializer=tf.zeros_initializer())
    y = tf.matmul(x, w) + b
    return tf.nn.relu(y) if relu else y


def lookups(tables, batch, specs, is_train):
    item_lookups = 2 if MULTI_LOOKUP else 1
    if MODE == "feature_spec":
        user = sparse_lookup(tables["user"], specs["user"], batch=batch, is_train=is_train)
        items = [sparse_lookup(tables["item"], specs[f"item_{i}"], batch=batch, is_train=is_train)
                 for i in range(item_lookups)]
    else:
        user = sparse_lookup(tables["user"], batch["user"], is_train=is_train, modify_graph=True,
                             access_and_evict_config=ADMIT)
        items = [sparse_lookup(tables["item"], batch["item"], is_train=is_train, modify_graph=True,
                               access_and_evict_config=ADMIT) for _ in range(item_lookups)]
    return user, items


def main():
    init(use_dynamic=True)
    tables = {"user": create_table(tf.int64, DIM, "user", tf.compat.v1.truncated_normal_initializer(stddev=0.05),
                                   **storage()),
              "item": create_table(tf.int64, DIM, "item", tf.compat.v1.truncated_normal_initializer(stddev=0.05),
                                   **storage())}
    sparse_optimizer = create_hash_optimizer(learning_rate=0.01)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    specs = {"user": FeatureSpec("user", table_name="user", **ADMIT)}
    for i in range(2 if MULTI_LOOKUP else 1):
        specs[f"item_{i}"] = FeatureSpec(f"item_{i}", table_name="item", index_key="item", **ADMIT)
    stamp = FeatureSpec("timestamp", is_timestamp=True)
    train_ds, eval_ds = dataset(20_000, 0, True), dataset(4_096, 1, False)
    if MODE == "feature_spec":
        train_ds = train_ds.map(get_asc_insert_func(tgt_key_specs=list(specs.values()) + [stamp]))
        eval_ds = eval_ds.map(get_asc_insert_func(tgt_key_specs=list(specs.values()) + [stamp], is_training=False))
    train_batch = tf.compat.v1.data.make_one_shot_iterator(train_ds).get_next()
    eval_iterator = tf.compat.v1.data.make_initializable_iterator(eval_ds)
    eval_batch = eval_iterator.get_next()
    if MODE == "modify_graph":
        tf.compat.v1.add_to_collection(ASCEND_TIMESTAMP, train_batch["timestamp"])
    user, items = lookups(tables, train_batch, specs, True)
    logit = model(user, items)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=train_batch["label"], logits=logit))
    dense_vars, sparse_vars = get_dense_and_sparse_variable()
    sparse_grads = tf.gradients(loss, sparse_vars)
    train_op = tf.group(sparse_optimizer.apply_gradients(zip(sparse_grads, sparse_vars)),
                        tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step,
                                                                        var_list=dense_vars))
    eval_user, eval_items = lookups(tables, eval_batch, specs, False)
    eval_prob = tf.sigmoid(model(eval_user, eval_items))
    eval_label = tf.identity(eval_batch["label"])   # a consumer, so the rewrite moves it to the new iterator
    eval_initializer = eval_iterator.initializer
    if MODE == "modify_graph":
        modify_graph_and_start_emb_cache()
        # as in mxRec: after the rewrite, the pipelines' initializers come from the config
        eval_initializer = ConfigInitializer.get_instance().train_params_config.get_initializer(False)
    saver = tf.compat.v1.train.Saver()
    folder = tempfile.mkdtemp(prefix="mxrec-example-")
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        hook = EvictHook(evict_enable=True, evict_step_interval=20)
        hook.begin()
        losses = []
        for _ in range(STEPS):
            losses.append(session.run([loss, train_op])[0])
            hook.after_run(None, None)
        path = saver.save(session, os.path.join(folder, "model"), global_step=STEPS)
        sizes = {name: t.size() for name, t in tables.items()}
    logger.info("trained %d steps: loss %.4f -> %.4f; table sizes %s; evicted %s", STEPS, np.mean(losses[:10]),
                np.mean(losses[-10:]), sizes, hook.evicted)
    with tf.compat.v1.Session() as session:          # a fresh session: everything comes from the checkpoint
        saver.restore(session, path)
        restored = {name: t.size() for name, t in tables.items()}
        session.run(eval_initializer)
        scores, labels = [], []
        while True:
            try:
                p, y = session.run([eval_prob, eval_label])
            except tf.errors.OutOfRangeError:
                break
            scores.append(p)
            labels.append(y)
    scores, labels = np.concatenate(scores), np.concatenate(labels)
    accuracy = float(np.mean((scores > 0.5) == (labels > 0.5)))
    assert restored == sizes, (restored, sizes)
    assert np.mean(losses[-10:]) < np.mean(losses[:10]), "the loss did not fall"
    terminate_config_initializer()
    print(f"SUCCESS mode={MODE} multi_lookup={int(MULTI_LOOKUP)} storage={STORAGE} "
          f"eval_accuracy={accuracy:.3f} restored_sizes={restored}")


if __name__ == "__main__":
    main()
