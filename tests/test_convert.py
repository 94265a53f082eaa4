"""Converting a plain TF script's embedding variables (GRAPH-5)."""
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import Adagrad

import tf_model


def _plain_model():
    """A model that knows nothing of mxRec: a variable, embedding_lookup, Adagrad.minimize."""
    data = tf_model.features(0)
    ds = tf.data.Dataset.from_tensor_slices({"user": data["user"], "label": data["label"]}).batch(32).repeat()
    batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
    table = tf.compat.v1.get_variable("user_emb", [100, 4],
                                      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=3))
    emb = tf.compat.v1.nn.embedding_lookup(table, batch["user"])
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(0.5))
    logit = tf.reduce_sum(tf.reshape(tf.matmul(tf.reshape(emb, [-1, 4]), w), [-1, 2]), axis=1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"], logits=logit))
    train = tf.compat.v1.train.AdagradOptimizer(0.3).minimize(loss)
    return table, loss, train


def test_graph_5_plain_embedding_lookup_becomes_a_dynamic_table(backend):
    tf_model.fresh_graph()
    with tf.Graph().as_default():
        mx.init(backend=backend)
        variable, loss, train = _plain_model()
        tables = mx.convert_embedding_variables({"user_emb": {"table_name": "user", "access_threshold": 2}},
                                                optimizer=Adagrad(learning_rate=0.3, initial_accumulator_value=0.1))
        table = tables["user_emb"]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            before = session.run(variable)
            losses = [session.run([loss, train])[0] for _ in range(40)]
            after = session.run(variable)
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    assert np.array_equal(before, after)                    # the dense variable no longer trains
    stats = table.store.stats()
    assert table.size() > 0 and stats["grad_rows_applied"] > 0 and stats["pending"] >= 0
    assert stats["train_lookups"] == 40


def test_graph_5_bad_conversions_are_clear_errors(backend):
    tf_model.fresh_graph()
    with tf.Graph().as_default():
        mx.init(backend=backend)
        _plain_model()
        with pytest.raises(ValueError, match="no variable 'nope'"):
            mx.convert_embedding_variables({"nope": {}}, optimizer=Adagrad())
        with pytest.raises(ValueError, match="no embedding_lookup reads it"):
            mx.convert_embedding_variables({"w": {}}, optimizer=Adagrad())
        with pytest.raises(ValueError, match="unknown settings"):
            mx.convert_embedding_variables({"user_emb": {"colour": 1}}, optimizer=Adagrad())
        with pytest.raises(TypeError, match="sparse optimizer"):
            mx.convert_embedding_variables({"user_emb": {}}, optimizer="adagrad")
