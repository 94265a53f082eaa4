"""Training throughput: the Wide&Deep job on dynamic tables (the store, fast
backend) vs the same model on plain tf.Variable tables with
tf.nn.embedding_lookup and TF's sparse Adagrad (no dynamic features).
Target: dynamic >= 0.7x the static model's examples/s."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from mxrec_ref import data as datasets
from mxrec_ref import train

STEPS_PER_ROUND = 20
CONFIG = train.TrainConfig(backend="fast", storage="dynamic", steps=0, progress=False)
DATA = datasets.synthetic_criteo(60_000, seed=3)


def _static_graph():
    """The same model, tables as dense tf.Variables indexed by field offset + rank."""
    cardinalities = datasets.scaled_cardinalities(1 / 200)
    offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]]).astype(np.int64)
    mask = (1 << datasets.FIELD_SHIFT) - 1
    static = dataclasses.replace(DATA, categorical=(DATA.categorical & mask) + offsets)
    # the same generator feed as the training job's, so the ratio compares tables, not input pipelines
    batch = tf.compat.v1.data.make_one_shot_iterator(
        tf.data.Dataset.from_generator(lambda: train.batches(static, CONFIG.batch_size, repeat=True),
                                       output_signature=train.batch_signature(tf, static, CONFIG.batch_size))
        .prefetch(2)).get_next()
    total = int(sum(cardinalities))
    tables = {"wide": tf.compat.v1.get_variable("wide", [total, 1], initializer=tf.zeros_initializer()),
              "deep": tf.compat.v1.get_variable("deep", [total, CONFIG.dim],
                                                initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.05))}
    logit = train.build_model(tf, lambda table, field: tf.nn.embedding_lookup(tables[table], batch[field]),
                              DATA.field_names, CONFIG.dim, batch["dense"], DATA.dense.shape[1])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"], logits=logit))
    sparse = list(tables.values())
    dense = [v for v in tf.compat.v1.trainable_variables() if all(v is not t for t in sparse)]
    return tf.group(
        tf.compat.v1.train.AdagradOptimizer(CONFIG.sparse_learning_rate, 0.1).minimize(loss, var_list=sparse),
        tf.compat.v1.train.AdamOptimizer(CONFIG.dense_learning_rate).minimize(loss, var_list=dense))


def _dynamic_graph():
    import mxrec_ref.tf as mx

    if mx.is_initialized():
        mx.terminate_config_initializer()
    mx.init(backend="fast", use_dynamic_expansion=True)
    return train.build_training_graph(tf, mx, CONFIG, DATA).train_op


@pytest.mark.parametrize("variant", ["dynamic", "static"])
def test_training_throughput(benchmark, variant):
    graph = tf.Graph()
    with graph.as_default():
        train_op = _dynamic_graph() if variant == "dynamic" else _static_graph()
        session = tf.compat.v1.Session()
        session.run(tf.compat.v1.global_variables_initializer())
    for _ in range(10):                                   # warm up: tracing, first admissions, growth
        session.run(train_op)

    def steps():
        for _ in range(STEPS_PER_ROUND):
            session.run(train_op)

    benchmark.extra_info.update(ratio_group="training: dynamic / static examples per second",
                                role="candidate" if variant == "dynamic" else "tf.Variable + embedding_lookup",
                                examples_per_round=STEPS_PER_ROUND * CONFIG.batch_size)
    benchmark.pedantic(steps, rounds=5, warmup_rounds=1)
    session.close()
