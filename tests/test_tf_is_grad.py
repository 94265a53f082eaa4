"""TF-30: a training lookup built with ``is_grad=False`` (mxRec's launchers use it for the extra
lookups of one table) counts and admits its keys and has no gradient, in graph-modification
mode, FeatureSpec mode and eagerly."""
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf.optimizers import adagrad

GRAD_IDS = np.array([[1, 2], [1, 3]], np.int64)        # keys 1, 2, 3: trained
FROZEN_IDS = np.array([[3, 7], [8, 8]], np.int64)      # keys 7, 8 only here: looked up, never trained


@pytest.fixture(autouse=True)
def _fresh():
    if mx.is_initialized():
        mx.terminate_config_initializer()
    yield
    if mx.is_initialized():
        mx.terminate_config_initializer()


def _table(backend):
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=50)
    return table, adagrad.create_hash_optimizer(learning_rate=0.5)


def _graph_lookups(mode, table, with_grad):
    """(the lookup with a gradient or None, the is_grad=False lookup), built from a dataset."""
    data = {"a": GRAD_IDS, "b": FROZEN_IDS}
    dataset = tf.data.Dataset.from_tensor_slices(data).batch(2).repeat()
    if mode == "modify":
        batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        grad = mx.sparse_lookup(table, batch["a"], modify_graph=True) if with_grad else None
        return grad, mx.sparse_lookup(table, batch["b"], modify_graph=True, is_grad=False)
    specs = [mx.FeatureSpec("a", table_name="t"), mx.FeatureSpec("b", table_name="t")]
    dataset = dataset.map(mx.get_asc_insert_func(tgt_key_specs=specs if with_grad else specs[1:]))
    batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    grad = mx.sparse_lookup(table, specs[0], batch=batch) if with_grad else None
    return grad, mx.sparse_lookup(table, specs[1], batch=batch, is_grad=False)


def _train_graph(backend, mode, with_grad=True, steps=2):
    with tf.Graph().as_default():
        table, optimizer = _table(backend)
        grad, frozen = _graph_lookups(mode, table, with_grad)
        loss = tf.reduce_sum(frozen) + (tf.reduce_sum(grad * grad) if grad is not None else 0.0)
        _, sparse = mx.get_dense_and_sparse_variable()
        train = optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
        if mode == "modify":
            mx.modify_graph_and_start_emb_cache()
        with tf.compat.v1.Session() as session:
            for _ in range(steps):
                session.run([loss, train])
        return table


def _rows(table):
    state = table.store.export()
    return dict(zip(state.keys.tolist(), state.values.tolist()))


@pytest.mark.parametrize("mode", ["modify", "feature_spec"])
def test_tf_30_no_gradient_lookup_counts_and_does_not_train(backend, mode):
    table = _train_graph(backend, mode)
    rows, stats = _rows(table), table.store.stats()
    assert sorted(rows) == [1, 2, 3, 7, 8]                        # every key admitted, the frozen ones too
    assert stats["key_positions"] == 2 * (GRAD_IDS.size + FROZEN_IDS.size)   # both lookups counted, 2 steps
    assert stats["train_lookups"] == 2                            # one merged store call per step (TF-3)
    assert rows[7] == rows[8] == [1.0, 1.0]                       # no gradient: the initial rows
    assert all(rows[k] != [1.0, 1.0] for k in (1, 2, 3))          # 3 trains through the other lookup


@pytest.mark.parametrize("mode", ["modify", "feature_spec"])
def test_tf_30_a_table_with_only_no_gradient_lookups(backend, mode):
    table = _train_graph(backend, mode, with_grad=False)
    assert sorted(_rows(table)) == [3, 7, 8] and table.store.stats()["grad_applies"] == 0
    assert set(map(tuple, _rows(table).values())) == {(1.0, 1.0)}


def test_tf_30_a_gradient_lookup_without_gradients_still_raises(backend):
    """GRAPH-2 stands for lookups with is_grad=True: their gradients must exist before the rewrite."""
    with tf.Graph().as_default():
        table, _ = _table(backend)
        dataset = tf.data.Dataset.from_tensor_slices({"a": GRAD_IDS, "b": FROZEN_IDS}).repeat()
        batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        mx.sparse_lookup(table, batch["b"], modify_graph=True, is_grad=False)
        mx.sparse_lookup(table, batch["a"], modify_graph=True)
        with pytest.raises(RuntimeError, match="build the training gradients"):
            mx.modify_graph_and_start_emb_cache()


@pytest.mark.eager
def test_tf_30_eager_no_gradient_lookup(backend):
    assert tf.executing_eagerly()
    table, optimizer = _table(backend)
    with tf.GradientTape() as tape:
        tape.watch(table.variable.handle)
        grad = mx.sparse_lookup(table, tf.constant(GRAD_IDS), modify_graph=True)
        frozen = mx.sparse_lookup(table, tf.constant(FROZEN_IDS), modify_graph=True, is_grad=False)
        loss = tf.reduce_sum(grad * grad) + tf.reduce_sum(frozen)
    optimizer.apply_gradients([(tape.gradient(loss, table.variable.handle), table.variable)])
    rows = _rows(table)
    assert sorted(rows) == [1, 2, 3, 7, 8] and rows[7] == rows[8] == [1.0, 1.0]
    assert all(rows[k] != [1.0, 1.0] for k in (1, 2, 3))
