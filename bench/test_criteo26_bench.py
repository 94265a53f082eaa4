"""Training throughput of issue 16's 26-table model (bench/criteo26.py): mxrec-ref's TF layer
(TF1 graph, FeatureSpec, dynamic expansion, fast backend) vs the same model on static
``tf.Variable`` tables of the final sizes over pre-indexed ids, in one process; and the dynamic model
with the key pipeline (spec/pipeline.md) on -- the default -- against off (issue 32).

The three run in interleaved rounds (the order rotating) on one key stream: after WARM_STEPS steps
each, every round covers STEPS_PER_ROUND batches; the two dynamic variants are one graph whose rounds
switch ``MXREC_KEY_PIPELINE`` (read for every batch), so they go on through the stream, twice as far
as the static model's (WARM_STEPS + 2 * ROUNDS * STEPS_PER_ROUND = 124 steps; the 26 dynamic tables
grow from empty to about a million keys; ~40 s on an idle 2-core machine).

pytest-benchmark times one function per test, so the rounds are timed here, in the module's
fixture, and each variant's test hands its measured round times to pytest-benchmark through a
timer that replays them (``interleave.Replay``): the JSON then holds every variant's rounds, and
``mxrec_ref.benchmarks.ratios`` makes the ratio from them like every other (static min time over
dynamic min time = dynamic examples/s over static examples/s; above 1 means mxrec-ref is faster).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import criteo26
from mxrec_ref import data as datasets
from interleave import Replay, key_pipeline, round_ratios, rounds, timed_steps

WARM_STEPS = 4
ROUNDS = 6
STEPS_PER_ROUND = 10
GROUP = "training, 26-table model: dynamic / static examples per second"
PIPELINE_GROUP = "training, 26-table model: key pipeline on / off examples per second"
OFF_GROUP = "training, 26-table model, key pipeline off: dynamic / static examples per second"
OFF = "dynamic, pipeline off"      # the same dynamic graph with MXREC_KEY_PIPELINE=0 for its rounds


@pytest.fixture(scope="module")
def interleaved():
    import mxrec_ref.tf as mx

    assert criteo26.CARDINALITIES == datasets.CRITEO_CARDINALITIES
    # the dynamic graph runs the rounds of both pipeline settings, one stream: twice the steps
    stream = criteo26.make_stream(WARM_STEPS + 2 * ROUNDS * STEPS_PER_ROUND)
    sessions = {}
    static_graph = tf.Graph()
    with static_graph.as_default():
        op = criteo26.static_graph(tf, stream)
        sessions["static"] = (tf.compat.v1.Session(), op)
        sessions["static"][0].run(tf.compat.v1.global_variables_initializer())
    dynamic_graph = tf.Graph()
    with dynamic_graph.as_default():
        if mx.is_initialized():
            mx.terminate_config_initializer()
        mx.init(backend="fast", use_dynamic_expansion=True)
        with key_pipeline(True):      # built with the pipeline: its rounds switch it per batch (PIPE-7)
            op = criteo26.mxrec_graph(tf, mx, stream)
        sessions["dynamic"] = (tf.compat.v1.Session(), op)
        sessions["dynamic"][0].run(tf.compat.v1.global_variables_initializer())
    tables = list(mx.ConfigInitializer.get_instance().tables.values())

    def run(variant, steps):
        session, train_op = sessions["dynamic" if variant == OFF else variant]
        return timed_steps(session, train_op, steps, pipeline=variant != OFF)   # read for every batch (PIPE-7)

    for variant in sessions:                       # tracing, first admissions (tables from empty)
        run(variant, WARM_STEPS)
    times = rounds(["dynamic", OFF, "static"], run, ROUNDS, STEPS_PER_ROUND)
    keys = sum(t.store.size() for t in tables)
    for session, _ in sessions.values():
        session.close()
    mx.terminate_config_initializer()
    assert keys == int(stream["sizes"].sum())      # the dynamic tables hold exactly the stream's keys
    return times, keys


@pytest.mark.parametrize("variant", ["dynamic", "static"])
def test_criteo26_training_throughput(benchmark, interleaved, variant):
    times, keys = interleaved
    examples = STEPS_PER_ROUND * criteo26.BATCH
    per_round = np.array(times["static"]) / np.array(times["dynamic"])
    benchmark.extra_info.update(
        ratio_group=GROUP, role="candidate" if variant == "dynamic" else "tf.Variable + embedding_lookup",
        examples_per_round=examples, examples_per_second_best=examples / min(times[variant]),
        final_keys=keys, per_round_ratio_median=float(np.median(per_round)),
        per_round_ratio_range=[float(per_round.min()), float(per_round.max())])
    if variant == "static":                        # also the floor of the pipeline-off model
        benchmark.extra_info["also"] = [[OFF_GROUP, "tf.Variable + embedding_lookup"]]
    benchmark._timer = Replay(times[variant])      # pytest-benchmark's clock (bench/interleave.py)
    benchmark.pedantic(lambda: None, rounds=len(times[variant]))


@pytest.mark.parametrize("variant", ["on", "off"])
def test_criteo26_key_pipeline(benchmark, interleaved, variant):
    """The dynamic model with the key pipeline on (the default) and off, rounds interleaved with the
    static model's: on / off examples per second (issue 32)."""
    times, keys = interleaved
    mine = times["dynamic" if variant == "on" else OFF]
    per_round = np.array(times[OFF]) / np.array(times["dynamic"])
    benchmark.extra_info.update(
        ratio_group=PIPELINE_GROUP, role="candidate" if variant == "on" else "pipeline off (MXREC_KEY_PIPELINE=0)",
        examples_per_round=STEPS_PER_ROUND * criteo26.BATCH,
        examples_per_second_best=STEPS_PER_ROUND * criteo26.BATCH / min(mine), final_keys=keys,
        per_round_ratio_median=float(np.median(per_round)),
        per_round_ratio_range=[float(per_round.min()), float(per_round.max())])
    if variant == "off":
        benchmark.extra_info.update(also=[[OFF_GROUP, "candidate"]],
                                    off_over_static=round_ratios(times["static"], times[OFF]))
    benchmark._timer = Replay(mine)
    benchmark.pedantic(lambda: None, rounds=len(mine))
