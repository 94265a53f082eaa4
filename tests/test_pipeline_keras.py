"""The key pipeline in the Keras layer (spec/pipeline.md, PIPE-9): ``model.fit`` on a dataset mapped by
``mxrec_ref.keras.resolve_keys_ahead`` gives the same losses, dense weights, tables, statistics and
checkpoints with the pipeline on and off, bit for bit, on both backends -- with evaluations, evictions and
checkpoint writes between epochs, and on 2 MPI ranks (KERAS-17).  With it on, the training lookups must really have taken batches resolved
ahead (else the comparison would prove nothing); lookups whose keys no queued batch matches (ids changed
after the map) and batches mapped while the switch was turned off are plain lookups with serial results."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings, strategies as st

import mxrec_ref
from mxrec_ref import KeyInputError, UsageError
from mxrec_ref.demo import synthetic_click_log
from mxrec_ref.keras import Embedding, EvictCallback, Model, TableGradientTape, resolve_keys_ahead
from mxrec_ref.backends import available_backends
from mxrec_ref.conformance.checks import folder_bytes
from mxrec_ref.pipeline import SWITCH
from test_sharding_mpi import mpirun

REPO = Path(__file__).resolve().parent.parent
MPI_BACKENDS = [name for name in ("ref", "fast") if name in available_backends()]
ROWS, BATCH = 3072, 128          # 24 batches an epoch
UNIFORM = mxrec_ref.Initializer(kind="uniform", minval=-0.5, maxval=0.5, seed=7)


def two_tables(backend):
    """user ids [6] (mean, admission after 2 sightings, eviction) and item ids [6] (flattened, the
    model's optimizer's twin) -> Dense(1, sigmoid).  Keras's name counters are reset: the checkpoints'
    object graphs hold the layers' names."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    user = keras.Input((6,), dtype="int64", name="user")
    item = keras.Input((6,), dtype="int64", name="item")
    user_table = Embedding(8, name="user_t", combiner="mean", backend=backend, initializer=UNIFORM,
                           optimizer=mxrec_ref.Adagrad(0.3), access_threshold=2, eviction_threshold=4)
    item_table = Embedding(8, name="item_t", backend=backend, initializer=UNIFORM)
    features = keras.layers.Concatenate()([user_table(user), keras.layers.Flatten()(item_table(item))])
    model = Model({"user": user, "item": item}, keras.layers.Dense(1, activation="sigmoid", name="head")(features))
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy")
    return model, {"user": user_table, "item": item_table}


def click_data(seed=0, rows=ROWS) -> tf.data.Dataset:
    log = synthetic_click_log(rows, seed=seed)
    return tf.data.Dataset.from_tensor_slices(({"user": log.keys[:, :6], "item": log.keys[:, 6:]},
                                               log.labels)).batch(BATCH)


class WriteCheckpoint(keras.callbacks.Callback):
    """A tf.train.Checkpoint of the model, tables included, written after every epoch (KERAS-7)."""

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder

    def on_epoch_end(self, epoch, logs=None):
        tf.train.Checkpoint(model=self.model).write(str(self.folder / f"epoch{epoch}" / "ckpt"))


def run(backend, folder: Path, *, changed_after_map=None, callbacks=()):
    model, tables = two_tables(backend)
    train = resolve_keys_ahead(click_data(), tables)
    if changed_after_map is not None:
        train = changed_after_map(train)
    folder.mkdir(parents=True)
    history = model.fit(train, epochs=3, validation_data=click_data(seed=1, rows=512), verbose=0,
                        callbacks=[EvictCallback(every_n_batches=10), WriteCheckpoint(folder), *callbacks])
    return dict(history=history.history, dense=[w.numpy() for w in model.weights],
                state={n: t.store.export() for n, t in tables.items()},
                stats={n: t.store.stats() for n, t in tables.items()},
                files=folder_bytes(folder), taken={n: t.ahead.taken for n, t in tables.items()})


def assert_same(on, off):
    assert on["history"] == off["history"]
    assert all(np.array_equal(a, b) for a, b in zip(on["dense"], off["dense"])) and len(on["dense"]) == len(off["dense"])
    assert all(on["state"][n].differences(off["state"][n]) == [] for n in on["state"])
    assert on["stats"] == off["stats"]
    assert on["files"] == off["files"] and on["files"]


def test_pipe_9_keras_fit_is_the_same_with_the_pipeline_on_and_off(backend, monkeypatch, tmp_path):
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        runs[switch] = run(backend, tmp_path / switch)
    on, off = runs["1"], runs["0"]
    assert on["taken"] == {"user": 3 * 24, "item": 3 * 24} and off["taken"] == {"user": 0, "item": 0}
    assert len(on["history"]["val_loss"]) == 3 and on["stats"]["user"]["evicted"] > 0
    assert_same(on, off)


def add_one_to_every_other_batch(dataset):
    """User code after the map: the odd batches' item ids change, so their lookups match no queued batch."""
    def change(index, element):
        x, y = element
        return {"user": x["user"], "item": x["item"] + index % 2}, y
    return tf.data.Dataset.zip(tf.data.Dataset.range(10**6), dataset).map(change)


def test_pipe_9_lookups_matching_no_resolved_batch_give_serial_results(backend, monkeypatch, tmp_path):
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        runs[switch] = run(backend, tmp_path / switch, changed_after_map=add_one_to_every_other_batch)
    on, off = runs["1"], runs["0"]
    assert on["taken"] == {"user": 3 * 24, "item": 3 * 12}    # the item table's even batches only
    assert_same(on, off)


class SwitchOffAfterEpoch(keras.callbacks.Callback):
    def __init__(self, monkeypatch):
        super().__init__()
        self.monkeypatch = monkeypatch

    def on_epoch_end(self, epoch, logs=None):
        self.monkeypatch.setenv(SWITCH, "0")


def test_pipe_9_the_switch_is_read_for_every_batch(backend, monkeypatch, tmp_path):
    """Mapped with the pipeline on, turned off after the first epoch: later batches are plain lookups."""
    monkeypatch.setenv(SWITCH, "1")
    on = run(backend, tmp_path / "on", callbacks=[SwitchOffAfterEpoch(monkeypatch)])
    monkeypatch.setenv(SWITCH, "0")
    off = run(backend, tmp_path / "off")
    assert 24 <= on["taken"]["user"] <= 25 and on["taken"]["item"] == on["taken"]["user"]  # 25: one prefetched
    assert_same(on, off)


def test_pipe_9_evaluating_and_predicting_a_mapped_dataset_drops_its_batches(backend, monkeypatch):
    """A dataset mapped for training and also evaluated: evaluation lookups take nothing (no clock, no
    counts) but drop the batch of their keys, so the map never waits for a training lookup (PIPE-8's turn)."""
    monkeypatch.setenv(SWITCH, "1")
    model, tables = two_tables(backend)
    data = click_data(rows=512)
    mapped = resolve_keys_ahead(data, tables)
    model.fit(mapped, epochs=1, verbose=0)
    before = {n: (t.ahead.taken, t.store.export()) for n, t in tables.items()}
    assert model.evaluate(mapped, verbose=0) == model.evaluate(data, verbose=0)
    assert np.array_equal(model.predict(mapped, verbose=0), model.predict(data, verbose=0))
    assert all(t.ahead.taken == before[n][0] and t.store.export().differences(before[n][1]) == []
               for n, t in tables.items())
    assert all(len(t.ahead) == 0 for t in tables.values())


def test_pipe_9_with_the_pipeline_off_the_dataset_is_returned_as_it_is(monkeypatch):
    monkeypatch.setenv(SWITCH, "0")
    _, tables = two_tables("ref")
    dataset = click_data(rows=256)
    assert resolve_keys_ahead(dataset, tables) is dataset


def test_pipe_9_one_tensor_tuple_and_ragged_inputs(backend, monkeypatch):
    """x as one tensor (feature None) and as a tuple (feature = position), ragged ids with a combiner: the map
    flattens the ids as the layer does, so every training lookup takes its batch; elements come out unchanged."""
    monkeypatch.setenv(SWITCH, "1")
    ids = synthetic_click_log(512, seed=3).keys[:, :4]
    labels = (ids[:, 0] % 2).astype("float32")
    keras.utils.set_random_seed(0)
    table = Embedding(4, name="one", backend=backend, combiner="sum")
    one = keras.Input((4,), dtype="int64")
    model = Model(one, keras.layers.Dense(1, activation="sigmoid")(table(one)))
    model.compile("adam", "binary_crossentropy")
    dataset = tf.data.Dataset.from_tensor_slices((ids, labels)).batch(64)
    mapped = resolve_keys_ahead(dataset, {None: table})
    assert mapped.element_spec == dataset.element_spec
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(mapped.as_numpy_iterator(), dataset.as_numpy_iterator()))
    table.ahead.clear()     # the comparison's resolves: taken by no lookup
    model.fit(mapped, epochs=1, verbose=0)
    assert table.ahead.taken == 8

    ragged = tf.ragged.constant([[1, 2, 3], [4], [5, 6]] * 32, dtype=tf.int64)
    bag = Embedding(4, name="bag", backend=backend, combiner="mean")
    first, second = keras.Input((None,), dtype="int64", ragged=True), keras.Input((1,), dtype="int64")
    model = Model((first, second), keras.layers.Dense(1)(keras.layers.Concatenate()([bag(first), bag(second)])))
    model.compile("sgd", "mse")
    dataset = tf.data.Dataset.from_tensor_slices(((ragged, np.arange(96)[:, None]), np.zeros(96, "float32"))).batch(32)
    model.fit(resolve_keys_ahead(dataset, {0: bag, 1: bag}), epochs=1, verbose=0)
    assert bag.ahead.taken == 2 * 3


def test_pipe_9_a_resolve_of_keys_that_fail_their_check_queues_nothing(backend, monkeypatch):
    """Keys outside the table's key_dtype (CON-2): the map passes the batch on without a queued batch, and the
    training lookup raises the store's KeyInputError, as the serial one does, changing nothing (CON-4)."""
    monkeypatch.setenv(SWITCH, "1")
    layer = Embedding(4, name="narrow", backend=backend, key_dtype="int32")
    ids = np.array([[3, 2**40]], np.int64)
    mapped = resolve_keys_ahead(tf.data.Dataset.from_tensors(ids), {None: layer})
    assert np.array_equal(next(iter(mapped)).numpy(), ids) and len(layer.ahead) == 0
    with pytest.raises(KeyInputError, match="table 'narrow'"):
        _train_once(layer, tf.constant(ids), 0)
    assert layer.store.size() == 0 and layer.store.stats()["train_lookups"] == 0


def test_pipe_9_wrong_arguments_name_the_table_and_the_parameter(monkeypatch):
    monkeypatch.setenv(SWITCH, "1")
    _, tables = two_tables("ref")
    with pytest.raises(UsageError, match=r"table 'user_t': resolve_keys_ahead: layers: .*no feature 'users'"):
        resolve_keys_ahead(click_data(rows=256), {"users": tables["user"]})
    with pytest.raises(UsageError, match="resolve_keys_ahead: layers: feature 'user' maps to Dense"):
        resolve_keys_ahead(click_data(rows=256), {"user": keras.layers.Dense(1)})
    with pytest.raises(UsageError, match="resolve_keys_ahead: dataset: must be a tf.data.Dataset"):
        resolve_keys_ahead(np.zeros(3), tables)
    with pytest.raises(UsageError, match="resolve_keys_ahead: layers: must be a non-empty dict"):
        resolve_keys_ahead(click_data(rows=256), {})


def _train_once(layer, ids, step):
    with TableGradientTape(step=step) as tape:
        loss = tf.reduce_sum(tf.square(layer(ids, training=True)))
    tape.gradient_and_apply(loss, [])


BATCH_KEYS = st.lists(st.integers(0, 40), min_size=1, max_size=12).map(lambda keys: np.asarray(keys, np.int64))
# what the input pipeline queued before the step's lookup: nothing, the step's own keys, other keys, or the
# step's keys behind a batch no lookup will take
QUEUED = st.sampled_from(["nothing", "own", "other", "own_after_other"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(BATCH_KEYS, QUEUED, BATCH_KEYS), min_size=1, max_size=8), backend=st.sampled_from(["ref", "fast"]))
def test_pipe_9_whatever_is_queued_a_lookup_gives_the_serial_result(steps, backend):
    """Eager training lookups of a layer with any batches queued (its own keys, other keys, stale ones)
    against a serial twin: after every step the same rows, slots, counts and statistics."""
    fields = dict(backend=backend, initializer=UNIFORM, optimizer=mxrec_ref.Adagrad(0.3), access_threshold=2,
                  eviction_threshold=3)
    piped, serial = Embedding(4, name="piped", **fields), Embedding(4, name="serial", **fields)
    taken = 0
    for step, (keys, queued, other) in enumerate(steps):
        if queued in ("other", "own_after_other"):
            piped.ahead.put(piped.store.resolve_ahead(other))
        if queued in ("own", "own_after_other"):
            piped.ahead.put(piped.store.resolve_ahead(keys))
            taken += 1
        for layer in (piped, serial):
            _train_once(layer, tf.constant(keys), step)
            if step % 3 == 2:
                layer.store.evict()
        assert piped.store.export().differences(serial.store.export()) == []
        assert piped.store.stats() == serial.store.stats()
    assert piped.ahead.taken >= taken       # more: a batch of other keys left queued that a later step's keys match


def test_pipe_9_two_ranks_fit_the_same_with_the_pipeline_on_and_off(tmp_path):
    """KERAS-17 under a real ``mpirun -np 2``: each rank fits its share of every batch from a mapped dataset;
    the sharded store does no work ahead yet (PIPE-6), so its batches must come out exact through the path."""
    launcher = mpirun()
    for switch in ("1", "0"):
        environment = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3", OMPI_ALLOW_RUN_AS_ROOT="1",
                           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", MXREC_REF_COLLECTIVE_TIMEOUT="60",
                           **{SWITCH: switch})
        done = subprocess.run([launcher, "--oversubscribe", "-np", "2", sys.executable,
                               str(REPO / "tests" / "keras_pipeline_mpi_child.py"), str(tmp_path), *MPI_BACKENDS],
                              env=environment, capture_output=True, text=True, timeout=240, cwd="/")
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-4000:]}"
    for backend in MPI_BACKENDS:
        for rank in (0, 1):
            on, off = (dict(np.load(tmp_path / f"{backend}-{switch}-{rank}.npz")) for switch in ("1", "0"))
            assert int(on.pop("taken")[0]) == 2 * 3 and int(off.pop("taken")[0]) == 0
            assert on.keys() == off.keys() and len(on["losses"]) == 6 and len(on["keys"]) > 2
            assert all(np.array_equal(on[name], off[name]) for name in on), backend
