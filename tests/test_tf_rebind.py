"""Tables, sparse optimizers and insert functions across graphs (spec/tf.md TF-21..TF-25): what an
Estimator needs, since it builds the model again in a new graph for every call."""
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf.optimizers import adagrad, lazy_adam

import tf_model

INIT = tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=3)


@pytest.fixture(autouse=True)
def _fresh():
    tf_model.fresh_graph()
    yield
    tf_model.fresh_graph()


def _train_graph(steps, ids, optimizer="adagrad", **table_kwargs):
    """One graph: the table 'user', its optimizer, ``steps`` training steps on ``ids``; returns the table."""
    with tf.Graph().as_default():
        table = mx.create_table(tf.int64, 2, "user", INIT, device_vocabulary_size=64, **table_kwargs)
        opt = adagrad.create_hash_optimizer(learning_rate=0.3) if optimizer == "adagrad" else \
            lazy_adam.create_hash_optimizer(learning_rate=0.01)
        emb = mx.sparse_lookup(table, tf.constant(ids, tf.int64), modify_graph=True)
        loss = tf.reduce_sum(emb * emb)
        variables = mx.get_dense_and_sparse_variable()[1]
        train = opt.apply_gradients(zip(tf.gradients(loss, variables), variables))
        with tf.compat.v1.Session() as session:
            for _ in range(steps):
                session.run(train)
    return table


def test_tf_21_a_table_created_again_in_a_new_graph_binds_to_its_store(backend):
    """Two graphs of 2 steps each train the one table exactly as one graph of 4 steps does."""
    mx.init(backend=backend)
    first = _train_graph(2, [1, 2, 3])
    second = _train_graph(2, [1, 2, 3])
    assert second is first and len(mx.ConfigInitializer.get_instance().tables) == 1
    together = second.store.export()
    tf_model.fresh_graph()
    mx.init(backend=backend)
    once = _train_graph(4, [1, 2, 3]).store.export()
    assert np.array_equal(together.keys, once.keys) and np.array_equal(together.values, once.values)


def test_tf_21_each_graph_reads_its_own_proxy_and_one_graph_refuses_a_second_table(backend):
    mx.init(backend=backend)
    graphs = [tf.Graph(), tf.Graph()]
    proxies = []
    for graph in graphs:
        with graph.as_default():
            table = mx.create_table(tf.int64, 2, "user", INIT, device_vocabulary_size=64)
            proxies.append(table.variable)
            assert table.variable.graph is graph
            with pytest.raises(ValueError, match="'user': name: a table with this name already exists in this graph"):
                mx.create_table(tf.int64, 2, "user", INIT, device_vocabulary_size=64)
    with graphs[0].as_default():
        assert table.variable is proxies[0]


@pytest.mark.parametrize("parameter,changed", [("dim", dict(dim=3)), ("device_vocabulary_size",
                                                                        dict(device_vocabulary_size=65)),
                                                ("initializer", dict(emb_initializer=tf.compat.v1.zeros_initializer())),
                                                ("is_save", dict(is_save=False))])
def test_tf_22_another_configuration_under_the_same_name_is_refused(backend, parameter, changed):
    mx.init(backend=backend)
    table = _train_graph(1, [5, 6])
    before = table.store.export()
    arguments = dict(key_dtype=tf.int64, dim=2, name="user", emb_initializer=INIT, device_vocabulary_size=64)
    arguments.update(changed)
    with tf.Graph().as_default() as graph:
        with pytest.raises(ValueError, match=f"table 'user': {parameter}: the table exists with"):
            mx.create_table(**arguments)
        assert not graph.get_collection(mx.constants.ASCEND_GLOBAL_HASHTABLE_COLLECTION)   # nothing changed
    after = table.store.export()
    assert np.array_equal(before.values, after.values)


def test_tf_23_the_same_sparse_optimizer_binds_and_another_is_refused(backend):
    mx.init(backend=backend)
    _train_graph(1, [1, 2])
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"learning_rate: the tables \['user'\] already run with 0.3"):
            adagrad.create_hash_optimizer(learning_rate=0.5)
        with pytest.raises(ValueError, match=r"optimizer: the tables \['user'\] already run with Adagrad"):
            lazy_adam.create_hash_optimizer(learning_rate=0.01)
        adagrad.create_hash_optimizer(learning_rate=0.3)        # the same one binds


def test_tf_24_an_insert_function_built_before_its_tables_resolves_them_at_create_table(backend):
    """FeatureSpec mode with input_fn before model_fn (the Estimator's order): same losses and state as
    the tables-first order, admission thresholds included."""
    results = []
    for tables_first in (True, False):
        tf_model.fresh_graph()
        mx.init(backend=backend)
        with tf.Graph().as_default():
            if tables_first:
                table = mx.create_table(tf.int64, 2, "user_table", INIT, device_vocabulary_size=64)
            spec = mx.FeatureSpec("user_ids", table_name="user_table", access_threshold=2)
            data = {"user_ids": np.array([[1, 2], [2, 3], [1, 2], [4, 2]], np.int64)}
            dataset = tf.data.Dataset.from_tensor_slices(data).batch(2).map(
                mx.get_asc_insert_func(tgt_key_specs=[spec]))
            batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
            if not tables_first:
                table = mx.create_table(tf.int64, 2, "user_table", INIT, device_vocabulary_size=64)
            opt = adagrad.create_hash_optimizer(learning_rate=0.3)
            emb = mx.sparse_lookup(table, spec, batch=batch)
            loss = tf.reduce_sum(emb * emb)
            variables = mx.get_dense_and_sparse_variable()[1]
            train = opt.apply_gradients(zip(tf.gradients(loss, variables), variables))
            with tf.compat.v1.Session() as session:
                losses = [session.run([train, loss])[1] for _ in range(2)]
        state = table.store.export()
        results.append((losses, state.keys.tolist(), state.values.tolist(), table.store.config.access_threshold))
    assert results[0] == results[1] and results[0][3] == 2


def test_tf_25_a_table_that_never_appears_keeps_its_clear_error(backend):
    mx.init(backend=backend)
    with tf.Graph().as_default():
        mx.create_table(tf.int64, 2, "item_table", INIT, device_vocabulary_size=64)
        spec = mx.FeatureSpec("user_ids", table_name="user_table")
        mx.get_asc_insert_func(tgt_key_specs=[spec])
        with pytest.raises(ValueError, match=r"FeatureSpec 'user_ids': table_name: no table 'user_table' "
                                             r"\(tables: \['item_table'\]\)"):
            mx.start_asc_pipeline()
        assert not mx.ConfigInitializer.get_instance().frozen


def test_tf_25_the_estimator_raises_it_once_model_fn_has_run(tmp_path):
    from mxrec_ref.tf import estimator

    mx.init()
    spec = mx.FeatureSpec("user_ids", table_name="user_table")

    def input_fn():
        data = {"user_ids": np.array([[1], [2]], np.int64)}
        return tf.data.Dataset.from_tensor_slices(data).batch(2).map(mx.get_asc_insert_func(tgt_key_specs=[spec]))

    def model_fn(features, mode):       # creates another table, never 'user_table'
        table = mx.create_table(tf.int64, 2, "item_table", INIT, device_vocabulary_size=64)
        return estimator.EstimatorSpec(mode, predictions=tf.reduce_sum(table.variable))

    est = estimator.Estimator(model_fn, model_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"FeatureSpec 'user_ids': table_name: no table 'user_table' "
                                         r"\(tables: \['item_table'\]\)"):
        next(est.predict(input_fn))
    assert mx.ConfigInitializer.get_instance().tables["item_table"].size() == 0
