"""The key pipeline for the TF layer's eager lookups (spec/pipeline.md, PIPE-9; TF-8): FeatureSpec lookups
on a dataset mapped by the insert function and iterated eagerly (a Python step and a tf.function step), and
``sparse_lookup(..., modify_graph=True)`` lookups in a tf.function on a dataset mapped by
``mxrec_ref.tf.resolve_keys_ahead``, train the same with the pipeline on and off on both backends (losses,
tables, statistics), admission counted and a save and an eviction between steps; with it on the lookups
took batches resolved ahead."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import UsageError
from mxrec_ref.pipeline import SWITCH
from mxrec_ref.tf.optimizers import lazy_adam

import tf_model

BATCHES = 16
THRESHOLDS = {"access_threshold": 2, "eviction_threshold": 5}


@pytest.fixture(autouse=True)
def _fresh():
    assert tf.executing_eagerly()
    tf_model.fresh_graph()
    yield
    tf_model.fresh_graph()


def ids_dataset(rows=BATCHES * 16, seed=0) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.4, size=(rows, 3)) % 300).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices(({"ids": ids}, (ids[:, 0] % 2).astype(np.float32))).batch(16)


def train(backend, style, folder):
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 4, "t", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                            device_vocabulary_size=1000)
    optimizer = lazy_adam.create_hash_optimizer(learning_rate=0.05)
    if style == "modify_graph":
        dataset = mx.resolve_keys_ahead(ids_dataset(), {"ids": table})
        lookup = lambda x: mx.sparse_lookup(table, x["ids"], modify_graph=True,      # noqa: E731
                                            access_and_evict_config=THRESHOLDS)
    else:
        spec = mx.FeatureSpec("ids", table_name="t", **THRESHOLDS)
        insert = mx.get_asc_insert_func(tgt_key_specs=[spec], is_training=True)
        dataset = ids_dataset().map(lambda x, y: (insert(x), y)).prefetch(1)
        lookup = lambda x: mx.sparse_lookup(table, spec, batch=x, is_train=True)    # noqa: E731

    def step(x, y):
        with tf.GradientTape() as tape:
            tape.watch(table.variable.handle)
            logit = tf.reduce_sum(lookup(x), axis=[1, 2])
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logit))
        optimizer.apply_gradients([(tape.gradient(loss, table.variable.handle), table.variable)])
        return loss

    run = step if style == "feature_spec_eager" else tf.function(step)
    losses = []
    for index, (x, y) in enumerate(dataset):
        losses.append(float(run(x, y)))
        if index == 6:        # between steps, while tf.data holds the next batch resolved ahead (PIPE-4)
            table.store.save(folder)
            table.store.evict()
    return losses, table.store.export(), table.store.stats(), table.ahead.taken


@pytest.mark.parametrize("style", ["feature_spec_eager", "feature_spec_function", "modify_graph"])
def test_pipe_9_eager_lookups_train_the_same_with_the_pipeline_on_and_off(backend, monkeypatch, tmp_path, style):
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        runs[switch] = train(backend, style, tmp_path / switch)
        tf_model.fresh_graph()
    (on_losses, on_state, on_stats, on_taken), (off_losses, off_state, off_stats, off_taken) = runs["1"], runs["0"]
    # the first batch is mapped before the first lookup opens the store: nothing to resolve it with
    assert on_taken >= BATCHES - 2 and off_taken == 0
    assert len(on_losses) == BATCHES and on_losses == off_losses
    assert on_state.differences(off_state) == [] and on_stats == off_stats and on_stats["evicted"] > 0


def test_pipe_9_resolve_keys_ahead_checks_its_arguments(monkeypatch):
    monkeypatch.setenv(SWITCH, "0")          # refused whatever the switch
    mx.init(backend="ref")
    table = mx.create_table(tf.int64, 4, "t", tf.compat.v1.zeros_initializer(), device_vocabulary_size=10)
    with pytest.raises(UsageError, match=r"table 't': resolve_keys_ahead: tables: .*no feature 'idz'"):
        mx.resolve_keys_ahead(ids_dataset(), {"idz": table})
    with pytest.raises(UsageError, match="resolve_keys_ahead: tables: feature 'ids' maps to str"):
        mx.resolve_keys_ahead(ids_dataset(), {"ids": "t"})
    with pytest.raises(UsageError, match="resolve_keys_ahead: dataset: must be a tf.data.Dataset"):
        mx.resolve_keys_ahead([1, 2], {"ids": table})
