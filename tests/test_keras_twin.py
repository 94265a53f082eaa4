"""KERAS-13: an ``Embedding`` without ``optimizer=`` learns with the sparse twin of the model's Keras
optimizer (Adam -> LazyAdam, Adagrad -> Adagrad, SGD -> SGD, Ftrl -> Ftrl), its learning rate followed step
by step; an optimizer with no twin is refused naming the table and the optimizer."""
from __future__ import annotations

import keras
import numpy as np
import pytest

import mxrec_ref
from mxrec_ref import ConfigError, UsageError
from mxrec_ref.distributed.comm import SingleProcess
from mxrec_ref.distributed.sharded import ShardedStore
from mxrec_ref.keras import Embedding, Model

UNIFORM = keras.initializers.RandomUniform(-0.05, 0.05, seed=1)


def f32(rate: float) -> float:
    """A learning rate as Keras holds it (a float32 variable) and the store applies it."""
    return float(np.float32(rate))


def toy_data():
    """400 ids, 4,096 rows, labels drawn from a per-id probability (the loss has a floor, not 0)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 400, size=(4096, 1))
    weight = rng.normal(size=400)
    labels = (rng.random(4096) < 1 / (1 + np.exp(-3 * weight[ids[:, 0]]))).astype("float32")
    return ids, labels


def toy_model(table, optimizer):
    keras.utils.set_random_seed(0)
    ids = keras.Input((1,), dtype="int64", name="ids")
    out = keras.layers.Dense(1, activation="sigmoid", name="head")(keras.layers.Flatten()(table(ids)))
    model = Model(ids, out)
    model.compile(optimizer, "binary_crossentropy")
    return model


def test_keras_13_the_table_learns_with_adam_as_well_as_a_static_embedding(backend):
    ids, labels = toy_data()
    static = toy_model(keras.layers.Embedding(400, 8, embeddings_initializer=UNIFORM), keras.optimizers.Adam(0.01))
    table = Embedding(8, name="t13", backend=backend, initializer=UNIFORM)
    dynamic = toy_model(table, keras.optimizers.Adam(0.01))
    assert table.optimizer == mxrec_ref.LazyAdam(learning_rate=f32(0.01), beta1=0.9, beta2=0.999, epsilon=1e-7)
    fit = dict(batch_size=128, epochs=4, verbose=0, shuffle=False)
    static_loss = static.fit(ids, labels, **fit).history["loss"]
    dynamic_loss = dynamic.fit(ids, labels, **fit).history["loss"]
    assert dynamic_loss[-1] < 0.8 * dynamic_loss[0]                     # it learns (SGD(0.01) stayed at ~0.69)
    assert abs(dynamic_loss[-1] - static_loss[-1]) <= 0.1 * static_loss[-1]
    assert table.get_config()["optimizer"] is None                     # reloaded, it follows again


@pytest.mark.parametrize("keras_optimizer, twin", [
    (keras.optimizers.Adam(0.02, beta_1=0.8, beta_2=0.99, epsilon=1e-6),
     mxrec_ref.LazyAdam(learning_rate=f32(0.02), beta1=0.8, beta2=0.99, epsilon=1e-6)),
    (keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.5), mxrec_ref.Adagrad(f32(0.1), 0.5)),
    (keras.optimizers.SGD(0.05), mxrec_ref.SGD(f32(0.05))),
    (keras.optimizers.SGD(0.05, weight_decay=1e-3), mxrec_ref.SGD(f32(0.05), weight_decay=1e-3)),
    (keras.optimizers.Ftrl(0.1, learning_rate_power=-0.5, initial_accumulator_value=0.2,
                           l1_regularization_strength=0.01, l2_regularization_strength=0.02,
                           l2_shrinkage_regularization_strength=0.03),
     mxrec_ref.Ftrl(f32(0.1), -0.5, 0.2, 0.01, 0.02, 0.03)),
])
def test_keras_13_the_mapping_keeps_the_hyperparameters(keras_optimizer, twin):
    table = Embedding(4, name="map", backend="ref")
    toy_model(table, keras_optimizer)
    assert table.optimizer == twin
    assert table.store.optimizer == twin


@pytest.mark.parametrize("keras_optimizer, named", [
    (keras.optimizers.RMSprop(0.01), "RMSprop has no sparse twin"),
    (keras.optimizers.AdamW(0.01), "AdamW has no sparse twin"),
    (keras.optimizers.SGD(0.01, momentum=0.9), "sets momentum"),
    (keras.optimizers.Adam(0.01, amsgrad=True), "sets amsgrad"),
    (keras.optimizers.Adam(0.01, clipnorm=1.0), "sets clipnorm"),
    (keras.optimizers.Adagrad(0.01, weight_decay=0.01), "sets weight_decay"),
    (keras.optimizers.Ftrl(0.01, beta=0.5), "sets beta"),
])
def test_keras_13_an_optimizer_without_a_twin_is_refused_before_compile_changes_anything(keras_optimizer, named):
    table = Embedding(4, name="refused", backend="ref")
    ids = keras.Input((1,), dtype="int64")
    model = Model(ids, keras.layers.Dense(1)(keras.layers.Flatten()(table(ids))))
    with pytest.raises(ConfigError, match=f"table 'refused': optimizer: .*{named}"):
        model.compile(keras_optimizer, "mse")
    assert not model.compiled and table.optimizer == mxrec_ref.SGD(0.01) and table.model_optimizer is None


def test_keras_13_an_own_optimizer_is_kept_and_a_trained_table_cannot_change_kind():
    own = Embedding(4, name="own", backend="ref", optimizer=mxrec_ref.Adagrad(0.3))
    toy_model(own, keras.optimizers.Adam(0.01))
    assert own.optimizer == mxrec_ref.Adagrad(0.3) and own.get_config()["optimizer"]["kind"] == "Adagrad"

    ids, labels = toy_data()
    table = Embedding(4, name="trained", backend="ref")
    model = toy_model(table, keras.optimizers.Adam(0.01))
    model.fit(ids[:256], labels[:256], batch_size=128, epochs=1, verbose=0)
    saved = table.store.export()
    with pytest.raises(UsageError, match="table 'trained': optimizer: the table has trained with LazyAdam"):
        model.compile(keras.optimizers.Adagrad(0.01), "binary_crossentropy")
    assert table.optimizer.kind == "LazyAdam" and table.store.export().differences(saved) == []
    model.compile(keras.optimizers.Adam(0.001), "binary_crossentropy")    # the same kind: the new rate
    assert table.optimizer.learning_rate == f32(0.001)


def test_keras_13_a_learning_rate_schedule_is_followed_step_by_step(backend):
    """SGD under a piecewise schedule: each step's table update uses that step's rate, as a
    custom loop applying the store by hand with the schedule's rate gives."""
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.5, 0.1, 0.02])
    ids, labels = toy_data()
    ids, labels = ids[:6 * 32], labels[:6 * 32]
    table = Embedding(4, name="sched", backend=backend, initializer=UNIFORM)
    model = toy_model(table, keras.optimizers.SGD(schedule))
    rates = []

    class Spy(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            rates.append(table.store.optimizer.learning_rate)

    model.fit(ids, labels, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[Spy()])
    expected = [f32(schedule(step)) for step in range(6)]
    assert rates == expected and expected[0] != expected[-1]


def test_keras_13_a_ddr_table_follows_the_schedule_as_an_hbm_one(backend):
    """The learning rate reaches the in-memory tiers of a DDR table (store.set_optimizer): trained alike, the
    DDR table ends with the HBM table's state."""
    ids, labels = toy_data()
    ids, labels = ids[:8 * 64], labels[:8 * 64]
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([3], [0.5, 0.05])
    states = []
    for fields in (dict(dynamic_expansion=True), dict(device_vocabulary_size=64, host_vocabulary_size=4096)):
        table = Embedding(4, name="tiers", backend=backend, initializer=UNIFORM, **fields)
        model = toy_model(table, keras.optimizers.SGD(schedule))
        model.fit(ids, labels, batch_size=64, epochs=1, verbose=0, shuffle=False)
        assert table.optimizer.learning_rate == f32(0.05)
        states.append(table.store.export())
    assert states[0].differences(states[1]) == []


def test_keras_13_set_optimizer_keeps_the_kind(backend):
    store = mxrec_ref.open_store(mxrec_ref.TableConfig("kind", dim=2, dynamic_expansion=True),
                                 mxrec_ref.LazyAdam(0.01), backend=backend)
    with pytest.raises(UsageError, match="table 'kind': optimizer: set_optimizer keeps the kind 'LazyAdam'"):
        store.set_optimizer(mxrec_ref.Adagrad(0.1))
    assert store.optimizer == mxrec_ref.LazyAdam(0.01)
    store.set_optimizer(mxrec_ref.LazyAdam(0.5, beta1=0.5))
    assert store.optimizer == mxrec_ref.LazyAdam(0.5, beta1=0.5)
    # a sharded table hands it to its rank's shard, which applies
    config = mxrec_ref.TableConfig("shard", dim=2, dynamic_expansion=True)
    sharded = ShardedStore(mxrec_ref.open_store(config, mxrec_ref.SGD(0.1), backend=backend), SingleProcess())
    sharded.set_optimizer(mxrec_ref.SGD(0.5))
    result = sharded.lookup(np.array([3]), step=0)
    before = result.embeddings().copy()
    sharded.apply_gradients(result, np.ones((1, 2), np.float32), step=0)
    assert sharded.local.optimizer == mxrec_ref.SGD(0.5)
    assert np.array_equal(sharded.lookup(np.array([3]), train=False).embeddings(),
                          before - np.float32(0.5))
