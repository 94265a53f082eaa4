"""Keras 3 and TF2 (spec/keras.md, KERAS-1..KERAS-11; TF-17): the layer, fit that cannot skip a table,
checkpoints, the serving export and the callbacks.  One small trained model is shared (module fixture);
two subprocesses in all (the export loaded without mxrec_ref, and the example)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref
import mxrec_ref.keras
import mxrec_ref.tf as mx
from mxrec_ref import ConfigError, Initializer, UsageError
from mxrec_ref.demo import synthetic_click_log
from mxrec_ref.keras import (Embedding, EvictCallback, Model, StatsLogger, TableGradientTape, TableTraining,
                             export_saved_model, string_keys)
from mxrec_ref.metrics import auc
from mxrec_ref.tf import lookup_limit
from mxrec_ref.tf.optimizers import adagrad, gradient_descent

REPO = Path(__file__).resolve().parent.parent
UNIFORM = Initializer(kind="uniform", minval=-0.5, maxval=0.5, seed=7)


def click_model(name="features", backend=None, model_class=Model, **fields):
    """ids [batch, 12] -> Embedding(8) -> Dense(1, sigmoid)."""
    keras.utils.set_random_seed(0)
    ids = keras.Input((12,), dtype="int64", name="ids")
    table = Embedding(8, name=name, optimizer=mxrec_ref.Adagrad(0.3), backend=backend, initializer=UNIFORM, **fields)
    out = keras.layers.Dense(1, activation="sigmoid", name="head")(keras.layers.Flatten()(table(ids)))
    model = model_class(ids, out)
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy")
    return model, table


@pytest.fixture(scope="module")
def trained():
    log = synthetic_click_log(24_000, seed=0)
    model, table = click_model()
    x_test, y_test = log.keys[20_000:], log.labels[20_000:]
    untrained_auc = auc(y_test, model.predict(x_test, batch_size=2048, verbose=0).ravel())
    history = model.fit(log.keys[:20_000], log.labels[:20_000], batch_size=256, epochs=2, verbose=0)
    return dict(model=model, table=table, x=x_test, y=y_test, untrained_auc=untrained_auc, history=history,
                auc=auc(y_test, model.predict(x_test, batch_size=2048, verbose=0).ravel()))


def train_once(layer, ids, step=None):
    with TableGradientTape(step=step) as tape:
        loss = tf.reduce_sum(layer(ids, training=True))
    return int(tape.gradient_and_apply(loss, [])[1])


# ---------------------------------------------------------------- KERAS-1
def test_keras_1_eager_function_and_evaluation_lookups_match_the_store(backend):
    layer = Embedding(4, name="k1", backend=backend, initializer=UNIFORM, optimizer=mxrec_ref.SGD(0.5))
    ids = tf.constant([[1, 2, 2], [3, 1, 9]], tf.int64)
    assert np.all(layer(ids).numpy() == 0)                 # nothing admitted yet: the default row
    assert layer.store.size() == 0                          # an evaluation lookup changes nothing (LKP-2)
    assert train_once(layer, ids) == 4                      # eagerly: 4 unique keys updated
    expected = layer.store.lookup(ids.numpy(), train=False).embeddings()
    before = layer.store.export()
    assert np.array_equal(layer(ids).numpy(), expected)
    assert np.array_equal(tf.function(lambda x: layer(x))(ids).numpy(), expected)
    assert layer.store.export().equals(before)
    # inside tf.function: one training step, gradient 1 per position summed per key, SGD(0.5)
    step = tf.function(lambda x: _train_step(layer, x))
    assert int(step(ids)) == 4
    after = layer.store.lookup(np.array([1, 3]), train=False).rows
    assert np.array_equal(after, expected[[0, 1], [0, 0]] - np.float32(0.5) * np.array([[2], [1]], np.float32))
    frozen = Embedding(4, name="k1_frozen", backend=backend, trainable=False)
    with TableGradientTape():
        frozen(ids, training=True)                          # a frozen layer looks up for evaluation
    assert frozen.store.size() == 0 and frozen.store.stats()["train_lookups"] == 0


def _train_step(layer, ids):
    with TableGradientTape() as tape:
        loss = tf.reduce_sum(layer(ids, training=True))
    return tape.gradient_and_apply(loss, [])[1]


@pytest.mark.parametrize("kwargs,parameter", [
    (dict(dim=0), "dim"), (dict(dim=4, access_threshold="x"), "access_threshold"),
    (dict(dim=4, optimizer=keras.optimizers.Adam()), "optimizer"), (dict(dim=4, colour=1), "colour"),
    (dict(dim=4, serving_default_value=[1.0, 2.0]), "serving_default_value")])
def test_keras_1_bad_arguments_name_the_table_and_parameter(kwargs, parameter):
    with pytest.raises(ConfigError, match=rf"table 'bad': {parameter}"):
        Embedding(name="bad", **kwargs)


def test_keras_1_a_ddr_table_layer_answers_as_an_hbm_one(backend, tmp_path):
    """Tiers through the layer (TableConfig fields): a 4-row device budget over a host tier trains like HBM."""
    ddr = Embedding(2, name="k1d", backend=backend, initializer=UNIFORM, device_vocabulary_size=4,
                    host_vocabulary_size=64, access_threshold=1, eviction_threshold=3)
    hbm = Embedding(2, name="k1d", backend=backend, initializer=UNIFORM, access_threshold=1, eviction_threshold=3)
    batches = [tf.constant(b, tf.int64) for b in ([1, 2, 3], [3, 4, 5, 1], [6, 7, 1, 2], [2, 3, 9, 8], [1, 5])]
    for layer in (ddr, hbm):
        for batch in batches:
            train_once(layer, batch)
    assert ddr.store.tiered and ddr.store.stats()["host_rows"] > 0
    assert ddr.store.export().differences(hbm.store.export()) == []
    assert len(ddr.store.evict()) == len(hbm.store.evict()) > 0
    assert ddr.store.export().differences(hbm.store.export()) == []
    assert np.array_equal(ddr(batches[2]).numpy(), hbm(batches[2]).numpy())
    path = tf.train.Checkpoint(layer=ddr).save(str(tmp_path / "ddr"))
    copy = Embedding(2, name="k1d", backend=backend, device_vocabulary_size=4, host_vocabulary_size=64,
                     access_threshold=1, eviction_threshold=3)
    tf.train.Checkpoint(layer=copy).restore(path)
    assert copy.store.export().differences(ddr.store.export()) == []


# ---------------------------------------------------------------- KERAS-2
def test_keras_2_a_model_that_would_not_train_its_table_refuses_to_run():
    log = synthetic_click_log(512, seed=1)
    model, table = click_model("plain", model_class=keras.Model)
    with pytest.raises(UsageError, match=r"table 'plain': training: .*outside a TableGradientTape"):
        model.fit(log.keys, log.labels, batch_size=128, epochs=1, verbose=0)
    assert table.store.size() == 0 and table.store.stats()["train_lookups"] == 0   # nothing ran
    with pytest.raises(UsageError, match="table 'plain'"):
        with tf.GradientTape():
            model(log.keys[:4], training=True)
    assert model.predict(log.keys[:4], verbose=0).shape == (4, 1)     # evaluation and prediction are fine
    with pytest.raises(mxrec_ref.MxrecError, match="jit_compile=True"):
        click_model("jit")[0].compile("adam", "mse", jit_compile=True)


def test_keras_2_fit_trains_the_tables(trained):
    stats = trained["table"].store.stats()
    batches = 2 * (20_000 // 256 + 1)
    assert stats["grad_applies"] == batches and stats["grad_rows_applied"] > 0
    assert trained["untrained_auc"] == 0.5                 # every key unknown before training: one prediction
    assert trained["auc"] > trained["untrained_auc"] + 0.12
    assert trained["history"].history["loss"][1] < trained["history"].history["loss"][0]
    assert trained["model"].evaluate(trained["x"], trained["y"], batch_size=2048, verbose=0) < 0.69


def test_keras_2_a_layer_called_twice_in_a_step_applies_once(backend):
    """A table shared by two towers: one apply per step, duplicate keys summed (OPT-1), as one merged lookup."""
    first, second = tf.constant([1, 2, 2], tf.int64), tf.constant([2, 5], tf.int64)
    shared, merged = (Embedding(2, name="k2s", backend=backend, optimizer=mxrec_ref.Adagrad(0.1), initializer=UNIFORM)
                      for _ in range(2))
    with TableGradientTape(step=0) as tape:
        loss = tf.reduce_sum(shared(first, training=True)) + tf.reduce_sum(shared(second, training=True))
    assert int(tape.gradient_and_apply(loss, [])[1]) == 3
    with TableGradientTape(step=0) as tape:
        loss = tf.reduce_sum(merged(tf.concat([first, second], 0), training=True))
    tape.gradient_and_apply(loss, [])
    assert shared.store.stats()["grad_applies"] == 1
    assert shared.store.export().differences(merged.store.export()) == []


class SubclassedClickModel(TableTraining, keras.Model):
    """The mixin on a subclassed model (KERAS-2)."""

    def __init__(self):
        super().__init__()
        self.table = Embedding(4, name="k2m", combiner="sum", optimizer=mxrec_ref.SGD(0.1))
        self.head = keras.layers.Dense(1, activation="sigmoid")

    def call(self, ids):
        return self.head(self.table(ids))


def _twin_layers(backend, prefix):
    return [Embedding(3, name=f"{prefix}{i}", backend=backend, optimizer=mxrec_ref.Adagrad(0.1), initializer=UNIFORM)
            for i in range(3)]


def _three_layer_step(layers, ids):
    once, other, twice = layers
    with TableGradientTape() as tape:
        loss = (tf.reduce_sum(once(ids, training=True) ** 2) + tf.reduce_sum(other(ids[:2], training=True))
                + tf.reduce_sum(twice(ids, training=True) * 3.0) + tf.reduce_sum(twice(ids[1:], training=True)))
    return tape.gradient_and_apply(loss, [])[1]


def test_keras_12_one_apply_op_for_every_layer_reusing_its_lookup_result(backend, monkeypatch):
    """Every layer's apply runs in one op; a layer looked up once applies with that lookup's result (no
    second dedup), a layer looked up twice by key; the state is what applies by key give, bit for bit."""
    ids = tf.constant([4, 1, 4, 9, 1, 2], tf.int64)
    graph = tf.function(_three_layer_step).get_concrete_function(_twin_layers(backend, "k12g"), ids).graph
    applies = [op for op in graph.get_operations() if op.type in ("PyFunc", "EagerPyFunc") and "sparse_apply" in op.name]
    assert len(applies) == 1
    reused, by_key = _twin_layers(backend, "k12r"), _twin_layers(backend, "k12k")
    seen = {}
    for layer in reused:
        original = layer.store.apply_gradients
        monkeypatch.setattr(layer.store, "apply_gradients", lambda result, *a, _o=original, _n=layer.name, **k:
                            seen.setdefault(_n, []).append(type(result).__name__) or _o(result, *a, **k))
    for layer in by_key:
        monkeypatch.setattr(layer.kept_results, "take_for", lambda token, keys: None)
    step = tf.function(_three_layer_step)
    for _ in range(2):
        assert int(step(reused, ids)) == int(step(by_key, ids)) == 4 + 2 + 4
    assert seen == {"k12r0": ["LookupResult"] * 2, "k12r1": ["LookupResult"] * 2, "k12r2": ["ndarray"] * 2}
    for mine, theirs in zip(reused, by_key):
        assert mine.store.export().differences(theirs.store.export()) == []
        assert mine.store.stats() == theirs.store.stats()


def test_keras_2_sequential_and_the_mixin_train_their_tables():
    log = synthetic_click_log(512, seed=5)
    sequential = mxrec_ref.keras.Sequential([keras.Input((12,), dtype="int64"),
                                             Embedding(4, name="k2q", combiner="mean"), keras.layers.Dense(1)])
    subclassed = SubclassedClickModel()
    for model, table in ((sequential, sequential.layers[0]), (subclassed, subclassed.table)):
        model.compile("sgd", "mse")
        model.fit(log.keys, log.labels, batch_size=128, epochs=1, verbose=0)
        assert table.store.stats()["grad_applies"] == 4 and table.store.size() > 0


# ---------------------------------------------------------------- KERAS-3
def test_keras_3_the_step_is_the_optimizer_step_or_the_tables_lookup_count(trained, backend):
    iterations = int(trained["model"].optimizer.iterations.numpy())
    assert trained["table"].store.export().clock == iterations - 1
    layer = Embedding(2, name="k3", backend=backend, access_threshold=1, eviction_threshold=1)
    for _ in range(3):
        train_once(layer, tf.constant([5, 6], tf.int64))
    assert layer.train_lookups_run == 3 and layer.store.export().clock == 2
    train_once(layer, tf.constant([5], tf.int64), step=10)
    assert layer.store.export().clock == 10


def test_keras_3_a_data_timestamp_is_the_clock_of_training_lookups():
    log = synthetic_click_log(512, seed=7)
    stamps = (1_000 + np.arange(512) // 8).astype(np.int64).reshape(-1, 1)     # 8 events per "second"
    ids, when = keras.Input((12,), dtype="int64", name="ids"), keras.Input((1,), dtype="int64", name="when")
    table = Embedding(4, name="k3t", combiner="sum", access_threshold=1, eviction_threshold=20)
    model = Model({"ids": ids, "when": when}, keras.layers.Dense(1)(table(ids, timestamp=when)))
    model.compile("sgd", "mse")
    evict = EvictCallback(every_n_batches=4)
    model.fit({"ids": log.keys, "when": stamps}, log.labels, batch_size=64, epochs=1, verbose=0, shuffle=False,
              callbacks=[evict])
    state = table.store.export()
    assert (state.clock_source, state.clock) == ("timestamp", int(stamps.max()))
    assert evict.evicted["k3t"] > 0 and np.all(state.clock - state.last_seen < 20 + 4 * 64 // 8)
    before = table.store.export()
    model.predict({"ids": log.keys[:64], "when": stamps[:64] + 10**6}, verbose=0)     # evaluation: no clock
    assert table.store.export().differences(before) == []


# ---------------------------------------------------------------- KERAS-4
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_keras_4_sparse_and_ragged_ids_combine_as_embedding_lookup_sparse(backend, combiner):
    layer = Embedding(3, name="k4", backend=backend, combiner=combiner, initializer=UNIFORM)
    ragged = tf.ragged.constant([[1, 2, 2], [], [7], [3, 1]], dtype=tf.int64)
    sparse = ragged.to_sparse()
    train_once(layer, sparse)
    params = layer.store.lookup(np.arange(8), train=False).embeddings()
    expected = tf.nn.embedding_lookup_sparse(tf.constant(params), sparse, None, combiner=combiner).numpy()
    assert np.array_equal(layer(sparse).numpy(), expected)
    assert np.array_equal(layer(ragged).numpy(), expected)
    assert np.all(expected[1] == 0)                          # a row without ids is zeros
    dense = tf.constant([[1, 2], [7, 3]], tf.int64)
    assert np.array_equal(layer(dense).numpy(),
                          tf.nn.embedding_lookup_sparse(params, tf.sparse.from_dense(dense), None,
                                                        combiner=combiner).numpy())


def test_keras_4_ragged_without_combiner_and_bad_ids(backend):
    layer = Embedding(3, name="k4b", backend=backend, initializer=UNIFORM)
    ragged = tf.ragged.constant([[1, 2], [], [7]], dtype=tf.int64)
    assert train_once(layer, ragged) == 3
    out = layer(ragged)
    assert isinstance(out, tf.RaggedTensor) and out.shape.as_list() == [3, None, 3]
    assert np.array_equal(out.flat_values.numpy(), layer.store.lookup(np.array([1, 2, 7]), train=False).embeddings())
    with pytest.raises(UsageError, match="table 'k4b': combiner"):
        layer(ragged.to_sparse())
    with pytest.raises(UsageError, match="table 'k4b': ids"):
        layer(tf.constant([1.5]))
    with pytest.raises(UsageError, match="table 'k4b': combiner"):
        Embedding(3, name="k4b", combiner="max")


def test_keras_4_a_model_with_sparse_and_ragged_inputs_fits_predicts_and_exports(tmp_path):
    """KERAS-4 in a model; KERAS-9's export of sparse and ragged inputs (fed as their component tensors)."""
    sparse_ids = keras.Input((5,), dtype="int64", sparse=True, name="sp")
    ragged_ids = keras.Input((None,), dtype="int64", ragged=True, name="rg")
    sparse_table = Embedding(4, name="k4s", combiner="mean", optimizer=mxrec_ref.SGD(0.1))
    ragged_table = Embedding(4, name="k4r", combiner="sqrtn", optimizer=mxrec_ref.SGD(0.1))
    joined = keras.layers.Concatenate()([sparse_table(sparse_ids), ragged_table(ragged_ids)])
    model = Model({"sp": sparse_ids, "rg": ragged_ids}, keras.layers.Dense(1)(joined))
    model.compile("sgd", "mse")
    dense = np.random.default_rng(0).integers(1, 50, (256, 5))
    dense[:, 3:] = 0                                           # three ids per row
    sparse = tf.sparse.from_dense(tf.constant(dense))
    ragged = tf.RaggedTensor.from_row_lengths(dense[:, :3].ravel(), tf.fill([256], 3)).with_row_splits_dtype(tf.int64)
    data = tf.data.Dataset.from_tensor_slices(({"sp": sparse, "rg": ragged}, np.ones(256, np.float32))).batch(64)
    model.fit(data, epochs=1, verbose=0)
    for table in (sparse_table, ragged_table):
        assert table.store.stats()["grad_applies"] == 4 and table.store.stats()["key_positions"] == 256 * 3
    predictions = model.predict(data, verbose=0)
    export_saved_model(model, tmp_path / "sparse")
    serve = tf.saved_model.load(str(tmp_path / "sparse")).signatures["serving_default"]
    served = serve(sp_indices=sparse.indices, sp_values=sparse.values, sp_dense_shape=sparse.dense_shape,
                   rg_values=ragged.flat_values, rg_row_lengths=ragged.row_lengths())
    assert np.array_equal(served["output_0"].numpy(), predictions)


# ---------------------------------------------------------------- KERAS-5
def test_keras_5_string_ids_hash_to_stable_keys_on_both_backends(backend):
    words = tf.constant([["apple", "pear"], ["pear", ""]])
    keys = string_keys(words).numpy()
    # FarmHash Fingerprint64 mod 2**63 - 1: pinned, so a change of hash cannot pass unnoticed
    assert keys.tolist() == [[PINNED["apple"], PINNED["pear"]], [PINNED["pear"], PINNED[""]]]
    fingerprints = tf.fingerprint(tf.constant(["apple", "pear", ""]), method="farmhash64").numpy()
    assert [int.from_bytes(bytes(f), "little") % (2**63 - 1) for f in fingerprints] == list(PINNED.values())
    layer = Embedding(4, name="k5", backend=backend, initializer=UNIFORM)
    reference = Embedding(4, name="k5", backend="ref", initializer=UNIFORM)
    for table in (layer, reference):
        train_once(table, words)
        train_once(table, tf.ragged.constant([["apple"], ["kiwi", "pear"]]))
    assert layer.store.export().equals(reference.store.export())
    assert sorted(layer.store.export().keys.tolist()) == sorted({*keys.ravel().tolist(),
                                                                 int(string_keys("kiwi").numpy())})
    assert np.array_equal(layer(words).numpy(), layer.store.lookup(keys, train=False).embeddings())
    with pytest.raises(UsageError, match="table 'k5i': ids: string ids"):
        Embedding(4, name="k5i", key_dtype="int32")(words)


PINNED = {"apple": 6447335267136888601, "pear": 5663425431403431111, "": 1936946117179621456}


# ---------------------------------------------------------- KERAS-6, TF-17
def test_keras_6_lookups_are_counted_per_trace_not_per_process():
    layer = Embedding(2, name="k6")
    ids = tf.constant([1, 2], tf.int64)
    for _ in range(200):                                    # 200 traces, one lookup each
        tf.function(lambda x: layer(x), autograph=False).get_concrete_function(ids)
    for _ in range(130):
        layer(ids)                                          # eager calls are not counted
    assert tf.function(lambda x: layer(x))(ids).shape == (2, 2)

    @tf.function
    def too_many(x):
        return tf.add_n([layer(x) for _ in range(129)])

    with pytest.raises(ValueError, match=r"table 'k6': Embedding: more than 128 lookups"):
        too_many(ids)


def test_tf_17_sparse_lookup_counts_per_graph(monkeypatch):
    """The count is per graph; the limit lowered to 4 so the test builds 10 traces, not 200."""
    monkeypatch.setattr(lookup_limit, "MULTI_LOOKUP_TIMES", 4)
    if mx.is_initialized():
        mx.terminate_config_initializer()
    graph = tf.Graph()
    try:
        with graph.as_default():
            mx.init(backend="ref")
            table = mx.create_table(tf.int64, 2, "t17", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
            ids = tf.constant([3, 4], tf.int64)
            for _ in range(10):                             # each trace is its own graph: no accumulation
                trace = tf.function(lambda x: mx.sparse_lookup(table, x, modify_graph=True), autograph=False)
                trace.get_concrete_function(ids)
            assert table.multi_lookup_times == {True: 0, False: 0}
            for _ in range(4):
                mx.sparse_lookup(table, ids, modify_graph=True, is_train=False)
            assert table.multi_lookup_times == {True: 0, False: 4}
            with pytest.raises(ValueError, match=r"table 't17': sparse_lookup: more than 4 lookups"):
                mx.sparse_lookup(table, ids, modify_graph=True, is_train=False)
    finally:
        mx.terminate_config_initializer()


def test_tf_8_eager_sparse_lookup_and_apply():
    """TF-8: an eager sparse_lookup runs (it used to fail on Tensor.op) and its gradient applies."""
    if mx.is_initialized():
        mx.terminate_config_initializer()
    mx.init(backend="ref")
    try:
        table = mx.create_table(tf.int64, 2, "t8", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
        optimizer = gradient_descent.create_hash_optimizer(learning_rate=0.5)
        assert mx.sparse_lookup(table, tf.constant([1, 2], tf.int64), modify_graph=True).numpy().tolist() == \
            [[1.0, 1.0], [1.0, 1.0]]
        with tf.GradientTape() as tape:
            tape.watch(table.variable.handle)
            loss = tf.reduce_sum(mx.sparse_lookup(table, tf.constant([3, 3], tf.int64), modify_graph=True))
        optimizer.apply_gradients([(tape.gradient(loss, table.variable.handle), table.variable)])
        state = table.store.export()
        assert state.keys.tolist() == [1, 2, 3] and state.values.tolist() == [[1, 1], [1, 1], [0, 0]]
    finally:
        mx.terminate_config_initializer()


# ---------------------------------------------------------------- KERAS-7
def test_keras_7_tf_checkpoint_round_trips_tables_bit_identically(backend, tmp_path):
    log = synthetic_click_log(1024, seed=2)
    fields = dict(backend=backend, access_threshold=2, eviction_threshold=50)
    model, table = click_model("k7", **fields)
    model.fit(log.keys[:512], log.labels[:512], batch_size=128, epochs=1, verbose=0)
    checkpoint = tf.train.Checkpoint(model=model)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    saved, lookups = table.store.export(), table.train_lookups_run
    assert len(saved.pending_keys) and len(saved.slots["accumulator"])      # admission state and slots to keep
    files = dict(tf.train.list_variables(path))
    assert any(name.endswith("table_checkpoint/.ATTRIBUTES/table_files") for name in files)
    model.fit(log.keys[512:], log.labels[512:], batch_size=128, epochs=1, verbose=0)
    assert table.store.export().differences(saved)
    checkpoint.restore(path)
    assert table.store.export().differences(saved) == [] and table.train_lookups_run == lookups
    fresh, fresh_table = click_model("k7", **fields)                     # a new process's model
    tf.train.Checkpoint(model=fresh).restore(path).assert_existing_objects_matched().expect_partial()
    assert fresh_table.store.export().differences(saved) == []
    assert np.array_equal(fresh.predict(log.keys[:64], verbose=0), model.predict(log.keys[:64], verbose=0))


# ---------------------------------------------------------------- KERAS-8
def test_keras_8_keras_files_round_trip_config_and_tables(trained, tmp_path):
    model, table = trained["model"], trained["table"]
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded) is Model
    loaded_table = loaded.get_layer("features")
    assert loaded_table.get_config() == table.get_config()
    assert loaded_table.store.export().differences(table.store.export()) == []
    assert np.array_equal(loaded.predict(trained["x"][:256], verbose=0), model.predict(trained["x"][:256], verbose=0))

    log = synthetic_click_log(512, seed=3)
    small, small_table = click_model("k8", access_threshold=2)
    small.fit(log.keys, log.labels, batch_size=128, epochs=1, verbose=0,
              callbacks=[keras.callbacks.ModelCheckpoint(tmp_path / "w.weights.h5", save_weights_only=True)])
    other, other_table = click_model("k8", access_threshold=2)
    other.load_weights(tmp_path / "w.weights.h5")
    assert other_table.store.export().differences(small_table.store.export()) == []
    assert other_table.train_lookups_run == small_table.train_lookups_run


@pytest.mark.parametrize("tamper", ["value", "checksum", "drop checksum", "negative"])
def test_keras_8_a_weights_files_lookup_count_is_checked_before_the_table_changes(tmp_path, tamper):
    """The count of training lookups becomes the table's step: in a Keras weights file (which has no
    checksums of its own) it carries a CRC-32 bound to the table's manifest; a changed count, a
    changed or missing checksum, or a negative count is a CheckpointError naming the table and the
    entry (Keras passes on its message), and neither the table nor its count changes."""
    import h5py
    log = synthetic_click_log(256, seed=4)
    model, table = click_model("k8t", access_threshold=2)
    model.fit(log.keys, log.labels, batch_size=128, epochs=1, verbose=0)
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    with h5py.File(path, "r+") as file:
        entries = []
        file.visititems(lambda name, item: entries.append(name) if isinstance(item, h5py.Dataset) else None)
        count = next(n for n in entries if n.endswith("train_lookups_run"))
        crc = next((n for n in entries if n.endswith("train_lookups_run_crc32")), None)
        if tamper == "value":
            file[count][0] = 2**62
        elif tamper == "checksum":
            file[crc][0] = file[crc][0] ^ 1
        elif tamper == "drop checksum":
            del file[crc]
        else:
            file[count][0] = -5
    other, other_table = click_model("k8t", access_threshold=2)
    other_table.store.lookup(np.array([7, 7, 8]), step=0)
    before, lookups = other_table.store.export(), other_table.train_lookups_run
    with pytest.raises(ValueError, match=r"table 'k8t': checkpoint: Keras weights entry 'train_lookups_run'"):
        other.load_weights(path)         # Keras re-raises the layer's CheckpointError as a ValueError
    assert other_table.store.export().differences(before) == [] and other_table.train_lookups_run == lookups


# ----------------------------------------------------------- KERAS-9, KERAS-10
def tf1_model(tmp_path):
    """A TF1 graph with one table (train lookup + evaluation lookup with serving_default_value), trained 3 steps."""
    if mx.is_initialized():
        mx.terminate_config_initializer()
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend="fast")
        table = mx.create_table(tf.int64, 4, "user", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                                device_vocabulary_size=500)
        optimizer = adagrad.create_hash_optimizer(learning_rate=0.2)
        ids = tf.compat.v1.placeholder(tf.int64, [None, 2], name="ids")
        head = tf.keras.layers.Dense(1)
        logits = tf.reduce_sum(head(tf.reshape(mx.sparse_lookup(table, ids, modify_graph=True), [-1, 8])), axis=1)
        evaluation = mx.sparse_lookup(table, ids, modify_graph=True, is_train=False, serving_default_value=0.25)
        eval_logits = tf.reduce_sum(head(tf.reshape(evaluation, [-1, 8])), axis=1)
        loss = tf.reduce_mean(tf.square(logits - 1.0))
        _, sparse = mx.get_dense_and_sparse_variable()
        dense = tf.compat.v1.trainable_variables()
        train = [optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse)),
                 tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=dense)]
        session = tf.compat.v1.Session()
        session.run(tf.compat.v1.global_variables_initializer())
    x = np.random.default_rng(0).integers(0, 50, (32, 2))
    for _ in range(3):
        session.run(train, {ids: x})
    query = np.concatenate([x, [[999, 1]]])
    expected = session.run({"emb": evaluation, "logit": eval_logits}, {ids: query})
    export_path = mx.export_saved_model(session, {"ids": ids}, {"emb": evaluation, "logit": eval_logits},
                                        tmp_path / "tf1")
    session.close()
    mx.terminate_config_initializer()
    return query, expected, export_path


def test_keras_9_export_serves_without_mxrec_ref_keras_and_tf1(trained, tmp_path):
    """KERAS-9 (the Keras export) and KERAS-10 (a TF1 graph), loaded in one process that never imports mxrec_ref."""
    model, table = trained["model"], trained["table"]
    ids = keras.Input((12,), dtype="int64", name="ids")
    probe = keras.Model(ids, [model(ids), table(ids)])       # prediction and embeddings, one export
    export_saved_model(probe, tmp_path / "keras")
    query = np.concatenate([trained["x"][:200], np.full((1, 12), 10**12)])   # unknown keys: default row
    np.save(tmp_path / "keras_x.npy", query)
    np.save(tmp_path / "keras_pred.npy", model.predict(query, verbose=0))
    np.save(tmp_path / "keras_emb.npy", table.store.lookup(query, train=False).embeddings())
    tf1_query, tf1_expected, _ = tf1_model(tmp_path)
    np.save(tmp_path / "tf1_x.npy", tf1_query)
    for name, value in tf1_expected.items():
        np.save(tmp_path / f"tf1_{name}.npy", value)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import tensorflow as tf
        folder = {str(tmp_path)!r}
        load = lambda name: np.load(f"{{folder}}/{{name}}.npy")
        keras_serve = tf.saved_model.load(f"{{folder}}/keras").signatures["serving_default"]
        out = keras_serve(ids=tf.constant(load("keras_x")))
        assert np.array_equal(out["output_0"].numpy(), load("keras_pred")), "keras prediction"
        assert np.array_equal(out["output_1"].numpy(), load("keras_emb")), "keras embeddings"
        tf1_serve = tf.saved_model.load(f"{{folder}}/tf1").signatures["serving_default"]
        out = tf1_serve(ids=tf.constant(load("tf1_x")))
        assert np.array_equal(out["emb"].numpy(), load("tf1_emb")), "tf1 embeddings"
        assert np.array_equal(out["logit"].numpy(), load("tf1_logit")), "tf1 logits"
        for serve in (keras_serve, tf1_serve):
            graph = serve.graph.as_graph_def()
            ops = {{n.op for n in graph.node}} | {{n.op for f in graph.library.function for n in f.node_def}}
            assert not ops & {{"PyFunc", "EagerPyFunc", "PyFuncStateless"}}, ops
            assert "HashTableV2" in ops or "LookupTableFindV2" in ops, ops
        assert not [m for m in sys.modules if m.startswith("mxrec_ref")], "mxrec_ref was imported"
        print("SERVED")
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0 and "SERVED" in result.stdout, result.stderr[-3000:]
    assert np.all(tf1_expected["emb"][-1, 0] == np.float32(0.25))   # the unknown key got serving_default_value


def test_keras_9_model_export_writes_the_serving_model_and_saved_model_save_refuses(tmp_path):
    """model.export of mxrec_ref.keras.Model is export_saved_model (an empty table too: every key gets the
    default row); tf.saved_model.save of a model with a table raises instead of writing a PyFunc model."""
    model, table = click_model("k9e", serving_default_value=0.125)
    x = synthetic_click_log(64, seed=6).keys
    model.export(str(tmp_path / "empty"))
    served = tf.saved_model.load(str(tmp_path / "empty")).signatures["serving_default"](ids=tf.constant(x))
    assert np.array_equal(served["output_0"].numpy(), model.predict(x, verbose=0))
    ids = keras.Input((12,), dtype="int64", name="ids")
    export_saved_model(keras.Model(ids, table(ids)), tmp_path / "rows")
    rows = tf.saved_model.load(str(tmp_path / "rows")).signatures["serving_default"](ids=tf.constant(x))["output_0"]
    assert np.all(rows.numpy() == np.float32(0.125))
    with pytest.raises(Exception, match="table 'k9e': tf.saved_model.save: .*export_saved_model"):
        tf.saved_model.save(model, str(tmp_path / "refused"))


# --------------------------------------------------------------- KERAS-11
def test_keras_11_evict_callback_and_stats_logger(tmp_path):
    log = synthetic_click_log(1024, seed=4)
    model, table = click_model("k11", access_threshold=1, eviction_threshold=2)
    evict = EvictCallback(every_n_batches=2)
    model.fit(log.keys, log.labels, batch_size=128, epochs=1, verbose=0,
              callbacks=[evict, StatsLogger(tmp_path / "logs", every_n_batches=4)])
    assert evict.batches == 8 and evict.evicted["k11"] == table.store.stats()["evicted"] > 0
    now = table.store.export()
    assert np.all(now.clock - now.last_seen < 2 + 1)        # what was 2 steps old at the last eviction is gone
    tags = set()
    for event_file in (tmp_path / "logs").iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            tags |= {value.tag for value in event.summary.value}
    assert {"mxrec/k11/size", "mxrec/k11/evicted", "mxrec/k11/grad_applies"} <= tags
    with pytest.raises(ValueError, match="every_n_batches"):
        EvictCallback(every_n_batches=0)


# ------------------------------------------------------------- the example
def test_keras_9_two_tower_example_trains_checkpoints_and_serves(tmp_path, capsys):
    """examples/keras_two_tower.py: model.fit on the embedded data, checkpoint, export, reload in a subprocess
    (run in this process, so the only new interpreter is the example's own serving check)."""
    spec = importlib.util.spec_from_file_location("keras_two_tower", REPO / "examples" / "keras_two_tower.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(str(tmp_path), rows=12_000)
    out = capsys.readouterr().out
    assert "restored model predicts the same: True" in out
    assert "served without mxrec_ref: predictions equal" in out
    test_auc = float(out.split("test AUC ")[1].split()[0])
    assert test_auc > 0.6
