"""A small Estimator model for tests/test_estimator.py and its child process (tests/estimator_child.py):
the table 'user_table' (dim 4), a dense layer 'mlp_layer_w', LazyAdam on the table, in FeatureSpec
or graph-modification mode."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf import estimator
from mxrec_ref.tf.optimizers import lazy_adam

DIM = 4
BATCH = 16


def data(seed=0, rows=128):
    rng = np.random.default_rng(seed)
    user = (rng.zipf(1.4, size=(rows, 2)) % 40).astype(np.int64)
    label = (user[:, 0] % 3 == 0).astype(np.float32)
    return {"user_ids": user}, label


_SPECS: dict = {}


def feature_spec():
    """The FeatureSpec of 'user_ids', made once per configuration as mxRec scripts make their spec list:
    the input function and the model function share it."""
    instance = mx.ConfigInitializer.get_instance()
    if _SPECS.get("instance") is not instance:
        _SPECS.update(instance=instance, spec=mx.FeatureSpec("user_ids", table_name="user_table"))
    return _SPECS["spec"]


def input_fn_for(mode_name: str, seed=0, rows=128, epochs=1):
    """An input_fn: a batched dataset of ({'user_ids'}, label); FeatureSpec mode maps the insert function."""
    def input_fn(mode):
        features, label = data(seed, rows)
        dataset = tf.data.Dataset.from_tensor_slices((features, label)).repeat(epochs).batch(BATCH)
        if mode_name == "feature_spec":
            insert = mx.get_asc_insert_func(tgt_key_specs=[feature_spec()],
                                            is_training=mode == estimator.ModeKeys.TRAIN)
            dataset = dataset.map(lambda f, y: (insert(f), y))
        return dataset
    return input_fn


def model_fn(features, labels, mode, params):
    table = mx.create_table(tf.int64, DIM, "user_table", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                            device_vocabulary_size=params.get("device_vocabulary_size", 200),
                            host_vocabulary_size=params.get("host_vocabulary_size", 0))
    is_train = mode == estimator.ModeKeys.TRAIN
    if params.get("mode", "feature_spec") == "feature_spec":
        emb = mx.sparse_lookup(table, feature_spec(), batch=features, is_train=is_train)
    else:
        emb = mx.sparse_lookup(table, features["user_ids"], modify_graph=True, is_train=is_train)
    flat = tf.reshape(emb, [-1, 2 * DIM])
    w = tf.compat.v1.get_variable("mlp_layer_w", [2 * DIM, 1],
                                  initializer=tf.compat.v1.constant_initializer(params.get("w0", 0.1)))
    logit = tf.reshape(tf.matmul(flat, w), [-1])
    if mode == estimator.ModeKeys.PREDICT:
        return estimator.EstimatorSpec(mode, predictions={"probability": tf.sigmoid(logit), "logit": logit})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
    if mode == estimator.ModeKeys.EVAL:
        accuracy = tf.compat.v1.metrics.accuracy(labels, tf.cast(logit > 0, tf.float32))
        return estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
    sparse_optimizer = lazy_adam.create_hash_optimizer(learning_rate=0.05)
    dense_optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.5)
    dense_vars, sparse_vars = mx.get_dense_and_sparse_variable()
    train_op = tf.group(
        dense_optimizer.minimize(loss, var_list=dense_vars, global_step=tf.compat.v1.train.get_global_step()),
        sparse_optimizer.apply_gradients(zip(tf.gradients(loss, sparse_vars), sparse_vars)))
    return estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
