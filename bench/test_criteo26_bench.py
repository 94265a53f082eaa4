"""Training throughput of issue 16's 26-table model (bench/criteo26.py): mxrec-ref's TF layer
(TF1 graph, FeatureSpec, dynamic expansion, fast backend) vs the same model on static
``tf.Variable`` tables of the final sizes over pre-indexed ids, in one process.

The two run in interleaved rounds on the same key stream: after WARM_STEPS steps each, round k
of both covers the same STEPS_PER_ROUND batches, the order within a round alternating, so load
drift on a shared machine hits both alike. The 26 dynamic tables grow from empty to ~580k keys
over the WARM_STEPS + ROUNDS * STEPS_PER_ROUND = 64 steps (the model's definition: both profiles
run the same stream, ~25 s on an idle 2-core machine).

pytest-benchmark times one function per test, so the rounds are timed here, in the module's
fixture, and each variant's test hands its measured round times to pytest-benchmark through a
timer that replays them (``_Replay``): the JSON then holds both variants' rounds, and
``mxrec_ref.benchmarks.ratios`` makes the ratio from them like every other (static min time over
dynamic min time = dynamic examples/s over static examples/s; above 1 means mxrec-ref is faster).
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

import criteo26
from mxrec_ref import data as datasets

WARM_STEPS = 4
ROUNDS = 6
STEPS_PER_ROUND = 10
GROUP = "training, 26-table model: dynamic / static examples per second"


class _Replay:
    """A clock for pytest-benchmark's runner that makes the k-th timed call last durations[k]."""

    __name__ = "replay of the interleaved rounds"

    def __init__(self, durations):
        self.durations, self.calls, self.now = list(durations), 0, 0.0

    def __call__(self) -> float:
        if self.calls % 2:                        # the runner reads the clock before and after a call
            self.now += self.durations[self.calls // 2]
        self.calls += 1
        return self.now


@pytest.fixture(scope="module")
def interleaved():
    import mxrec_ref.tf as mx

    assert criteo26.CARDINALITIES == datasets.CRITEO_CARDINALITIES
    stream = criteo26.make_stream(WARM_STEPS + ROUNDS * STEPS_PER_ROUND)
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
        op = criteo26.mxrec_graph(tf, mx, stream)
        sessions["dynamic"] = (tf.compat.v1.Session(), op)
        sessions["dynamic"][0].run(tf.compat.v1.global_variables_initializer())
    tables = list(mx.ConfigInitializer.get_instance().tables.values())

    def run(variant, steps):
        session, train_op = sessions[variant]
        start = time.perf_counter()
        for _ in range(steps):
            session.run(train_op)
        return time.perf_counter() - start

    for variant in sessions:                       # tracing, first admissions (tables from empty)
        run(variant, WARM_STEPS)
    times = {"dynamic": [], "static": []}
    for k in range(ROUNDS):
        for variant in ("dynamic", "static") if k % 2 == 0 else ("static", "dynamic"):
            times[variant].append(run(variant, STEPS_PER_ROUND))
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
    benchmark._timer = _Replay(times[variant])     # pytest-benchmark's clock (module docstring)
    benchmark.pedantic(lambda: None, rounds=len(times[variant]))
