"""LKP-7 (spec/lookup.md): uint64 ids beyond int64 are refused naming the table, in the Keras layer and in
TF1 ``sparse_lookup`` (tensor ids, FeatureSpec batches, graph modification), instead of wrapping in a cast:
2^64 - 1 would become the padding key -1 (dropped), 2^63 + 5 a negative key.  Refused when the graph is
built where the ids are known then, else when the step runs, before the store changes."""
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import KeyInputError
from mxrec_ref.keras import Embedding, TableGradientTape
from mxrec_ref.tf.optimizers import gradient_descent

import tf_model

BEYOND = [2**64 - 1, 2**63 + 5, 2**63]
# TF prints an Assert's message with its quotes escaped (table \'t\'): the pattern takes either
MESSAGE = r"table \\?'{}\\?': ids: uint64 ids above 9223372036854775807"


def _train(layer, ids):
    with TableGradientTape() as tape:
        loss = tf.reduce_sum(layer(ids, training=True))
    tape.gradient_and_apply(loss, [])


@pytest.mark.parametrize("big", BEYOND)
def test_lkp_7_keras_eager_ids_beyond_int64_are_refused_when_called(backend, big):
    layer = Embedding(2, name="u64", backend=backend)
    _train(layer, tf.constant([1, 2], tf.uint64))
    before = layer.store.export()
    with pytest.raises(KeyInputError, match=MESSAGE.format("u64") + r".*got " + str(big)):
        _train(layer, tf.constant([3, big], tf.uint64))
    with pytest.raises(KeyInputError, match=MESSAGE.format("u64")):
        layer(tf.constant([[big]], tf.uint64))                      # an evaluation lookup alike
    assert layer.store.export().differences(before) == []


def test_lkp_7_keras_traced_ids_beyond_int64_fail_the_step_before_the_store(backend):
    layer = Embedding(2, name="u64f", backend=backend)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.uint64)])
    def step(ids):
        with TableGradientTape() as tape:
            loss = tf.reduce_sum(layer(ids, training=True))
        tape.gradient_and_apply(loss, [])
        return loss

    step(tf.constant([1, 2**63 - 1], tf.uint64))                 # the largest int64 still fits
    before = layer.store.export()
    assert sorted(before.keys.tolist()) == [1, 2**63 - 1]
    with pytest.raises(tf.errors.InvalidArgumentError, match=MESSAGE.format("u64f")):
        step(tf.constant([7, 2**64 - 1], tf.uint64))
    assert layer.store.export().differences(before) == []


def _tf1_table(backend, name="t"):
    tf_model.fresh_graph()
    mx.init(backend=backend)
    return mx.create_table(tf.int64, 2, name, tf.compat.v1.zeros_initializer(), device_vocabulary_size=16)


def test_lkp_7_tf1_sparse_lookup_refuses_known_ids_when_built_and_fed_ids_when_run(backend):
    with tf.Graph().as_default():
        table = _tf1_table(backend)
        with pytest.raises(KeyInputError, match=MESSAGE.format("t")):
            mx.sparse_lookup(table, tf.constant(np.array([1, 2**64 - 1], np.uint64)), modify_graph=True)
        ids = tf.compat.v1.placeholder(tf.uint64, [None])
        emb = mx.sparse_lookup(table, ids, modify_graph=True)
        with tf.compat.v1.Session() as session:
            session.run(emb, {ids: np.array([1, 2], np.uint64)})
            before = table.store.export()
            with pytest.raises(tf.errors.InvalidArgumentError, match=MESSAGE.format("t")):
                session.run(emb, {ids: np.array([3, 2**63 + 5], np.uint64)})
        assert table.store.export().differences(before) == []
    tf_model.fresh_graph()


@pytest.mark.parametrize("mode", ["feature_spec", "graph_modification"])
def test_lkp_7_tf1_dataset_ids_beyond_int64_fail_the_step_before_the_store(backend, mode):
    with tf.Graph().as_default():
        table = _tf1_table(backend)
        ds = tf.data.Dataset.from_tensor_slices({"f": np.array([[1, 2], [3, 2**64 - 1]], np.uint64)}).batch(1)
        if mode == "feature_spec":
            spec = mx.FeatureSpec("f", table_name="t")
            batch = tf.compat.v1.data.make_one_shot_iterator(ds.map(mx.get_asc_insert_func(tgt_key_specs=[spec])))
            emb = mx.sparse_lookup(table, spec, batch=batch.get_next())
        else:
            batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
            emb = mx.sparse_lookup(table, batch["f"], modify_graph=True)
        if mode == "graph_modification":
            _, sparse_vars = mx.get_dense_and_sparse_variable()
            grads = tf.gradients(tf.reduce_sum(emb), sparse_vars)
            gradient_descent.create_hash_optimizer(learning_rate=0.1).apply_gradients(zip(grads, sparse_vars))
            mx.modify_graph_and_start_emb_cache(dump_graph=False)
        with tf.compat.v1.Session() as session:
            session.run(emb)
            before = table.store.export()
            assert sorted(before.keys.tolist()) == [1, 2]
            with pytest.raises(tf.errors.InvalidArgumentError, match=MESSAGE.format("t")):
                session.run(emb)
        assert table.store.export().differences(before) == []
    tf_model.fresh_graph()
