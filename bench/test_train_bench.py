"""Training throughput: the Wide&Deep job on dynamic tables (the store, fast backend) vs the same model
on plain tf.Variable tables with tf.nn.embedding_lookup and TF's sparse Adagrad (no dynamic features);
and the dynamic job with the key pipeline (spec/pipeline.md) on against off (issue 32; target: dynamic
>= 0.95x the static model's examples/s).

As bench/test_criteo26_bench.py: the dynamic job is one graph, built with the pipeline on, whose rounds
switch ``MXREC_KEY_PIPELINE`` (read for every batch, PIPE-7); its on and off rounds interleave with the
static model's (bench/interleave.py), WARM_STEPS steps each first, ROUNDS rounds of STEPS_PER_ROUND steps.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from interleave import Replay, key_pipeline, round_ratios, rounds, timed_steps
from mxrec_ref import data as datasets
from mxrec_ref import train

WARM_STEPS = 10                  # tracing, first admissions, growth
ROUNDS = 6
STEPS_PER_ROUND = 20
GROUP = "training: dynamic / static examples per second"
PIPELINE_GROUP = "training, Wide&Deep: key pipeline on / off examples per second"
OFF_GROUP = "training, Wide&Deep, key pipeline off: dynamic / static examples per second"
STATIC = "tf.Variable + embedding_lookup"
OFF = "pipeline off (MXREC_KEY_PIPELINE=0)"      # the dynamic graph with the pipeline off for its rounds
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


@pytest.fixture(scope="module")
def interleaved():
    sessions = {}
    for variant in ("dynamic", "static"):
        with tf.Graph().as_default():
            with key_pipeline(True):      # built with the pipeline: its rounds switch it per batch (PIPE-7)
                train_op = _dynamic_graph() if variant == "dynamic" else _static_graph()
            session = tf.compat.v1.Session()
            session.run(tf.compat.v1.global_variables_initializer())
            sessions[variant] = (session, train_op)

    def run(variant, steps):
        session, train_op = sessions["dynamic" if variant == OFF else variant]
        return timed_steps(session, train_op, steps, pipeline=variant != OFF)

    for variant in sessions:
        run(variant, WARM_STEPS)
    times = rounds(["dynamic", OFF, "static"], run, ROUNDS, STEPS_PER_ROUND)
    for session, _ in sessions.values():
        session.close()
    import mxrec_ref.tf as mx

    mx.terminate_config_initializer()
    return times


def _report(benchmark, times, variant, group, role, ratio, also=()):
    """Hand ``variant``'s round times to pytest-benchmark (bench/interleave.py) in ``group`` as ``role``;
    ``ratio``: (other, candidate), the variants whose per-round ratio extra_info keeps."""
    examples = STEPS_PER_ROUND * CONFIG.batch_size
    benchmark.extra_info.update(ratio_group=group, role=role, examples_per_round=examples,
                                examples_per_second_best=examples / min(times[variant]),
                                **round_ratios(times[ratio[0]], times[ratio[1]]))
    if also:
        benchmark.extra_info["also"] = [list(pair) for pair in also]
    benchmark._timer = Replay(times[variant])
    benchmark.pedantic(lambda: None, rounds=len(times[variant]))


@pytest.mark.parametrize("variant", ["dynamic", "static"])
def test_training_throughput(benchmark, interleaved, variant):
    """Dynamic (pipeline on) / static."""
    _report(benchmark, interleaved, variant, GROUP, "candidate" if variant == "dynamic" else STATIC,
            ("static", "dynamic"),
            also=[(OFF_GROUP, STATIC)] if variant == "static" else ())


@pytest.mark.parametrize("variant", ["on", "off"])
def test_training_key_pipeline(benchmark, interleaved, variant):
    """The dynamic job with the key pipeline on / off; off is also the candidate of off / static."""
    _report(benchmark, interleaved, "dynamic" if variant == "on" else OFF, PIPELINE_GROUP,
            "candidate" if variant == "on" else OFF, (OFF, "dynamic"), also=[(OFF_GROUP, "candidate")] if variant == "off" else ())
