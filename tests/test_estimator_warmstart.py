"""The user's two Warm Start examples (shared/seed/mxrec-features.zh.txt, 定制Warm Start), run as the
document writes them: ``tf.estimator.WarmStartSettings`` (tf.estimator installed, EST-9) passed as
``warm_start_from`` (EST-10, WS-1..WS-6).  Only ``get_model_fn``, the data and the source checkpoints
around them are this file's.  Each source checkpoint is told apart by its rows and dense values
(different ids, data and initial values), and the test checks where every table row and dense
variable of the warm-started model came from, as the session starts (before the first step)."""
import argparse

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.compat import alias
from mxrec_ref.tf import estimator
from mxrec_ref.tf.optimizers import adagrad

import tf_model

alias.enable()          # as under mxrec-ref run: tf_adapter is the NPU adapter's CPU face (TF-29)
from tf_adapter import NPUEstimator, NPURunConfig  # noqa: E402 - the document's import, after the alias
TABLES = ("user_table", "item_table")
DIM, BATCH = 2, 4


@pytest.fixture(autouse=True)
def _tf_estimator(monkeypatch, tmp_path):
    """As under ``mxrec-ref run``: tf.estimator installed; the document's relative paths under tmp_path."""
    monkeypatch.chdir(tmp_path)
    estimator.install_into_tensorflow()
    tf_model.fresh_graph()
    yield
    tf_model.fresh_graph()
    estimator.uninstall_from_tensorflow()


def create_fs_params(cfg):
    """The feature specs of the two tables (mxRec scripts build their list once and share it)."""
    return [mx.FeatureSpec("user_ids", table_name="user_table"), mx.FeatureSpec("item_ids", table_name="item_table")]


def get_model_fn(create_fs_params, cfg, access_and_evict):
    specs = create_fs_params(cfg)

    def model_fn(features, labels, mode, params):
        is_train = mode == tf.estimator.ModeKeys.TRAIN
        init = tf.compat.v1.constant_initializer(cfg["table_init"])
        tables = [mx.create_table(tf.int64, DIM, name, init, device_vocabulary_size=64) for name in TABLES]
        embs = [mx.sparse_lookup(t, s, batch=features, is_train=is_train, access_and_evict_config=access_and_evict)
                for t, s in zip(tables, specs)]
        x = tf.concat([tf.reshape(e, [-1, DIM]) for e in embs], axis=1)
        w = tf.compat.v1.get_variable("mlp_layer_w", [2 * DIM, 1],
                                      initializer=tf.compat.v1.constant_initializer(cfg["dense_init"]))
        b = tf.compat.v1.get_variable("mlp_layer_b", [1],
                                      initializer=tf.compat.v1.constant_initializer(cfg["dense_init"]))
        logit = tf.reshape(tf.matmul(x, w) + b, [-1])
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
        dense_vars, sparse_vars = mx.get_dense_and_sparse_variable()
        train_op = tf.group(
            tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(
                loss, var_list=dense_vars, global_step=tf.compat.v1.train.get_global_step()),
            adagrad.create_hash_optimizer(learning_rate=0.5).apply_gradients(
                zip(tf.gradients(loss, sparse_vars), sparse_vars)))
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    model_fn.specs = specs
    return model_fn


def input_fn_for(model_fn, first_id):
    """Ids first_id.. first_id+5 of both tables (each source checkpoint has its own range, overlapping the
    next), labels alternating."""
    def input_fn():
        ids = first_id + np.arange(8, dtype=np.int64) % 6
        data = {"user_ids": ids.reshape(-1, 1), "item_ids": (ids + 100).reshape(-1, 1)}
        labels = (np.arange(8) % 2).astype(np.float32)
        insert = mx.get_asc_insert_func(tgt_key_specs=model_fn.specs, is_training=True)
        return tf.data.Dataset.from_tensor_slices((data, labels)).batch(BATCH).map(lambda f, y: (insert(f), y))
    return input_fn


def write_source(folder, index):
    """Checkpoint ``index`` in ``./folder``: tables and dense values of its own."""
    tf_model.fresh_graph()
    mx.init()
    cfg = {"table_init": 10.0 * index, "dense_init": float(index)}
    model_fn = get_model_fn(create_fs_params, cfg, None)
    source = estimator.Estimator(model_fn, model_dir=folder, config=estimator.RunConfig(log_step_count_steps=0))
    source.train(input_fn_for(model_fn, first_id=3 * index), steps=2)
    tables = {n: _rows(mx.ConfigInitializer.get_instance().tables[n]) for n in TABLES}
    dense = {n: source.get_variable_value(n) for n in ("mlp_layer_w", "mlp_layer_b")}
    return tables, dense


def _rows(table) -> dict:
    state = table.store.export()
    return {int(k): np.asarray(v).tolist() for k, v in zip(state.keys, state.values)}


class StartingState(tf.compat.v1.train.SessionRunHook):
    """The tables and dense variables as the training session starts, before the first step."""

    def after_create_session(self, session, coord):
        self.tables = {n: _rows(mx.ConfigInitializer.get_instance().tables[n]) for n in TABLES}
        self.dense = {v.op.name: session.run(v) for v in tf.compat.v1.trainable_variables()}


def _warm_started(run_config_dir, warm_settings):
    """The document's estimator lines, then one step with StartingState."""
    mx.init()
    cfg = {"table_init": -1.0, "dense_init": -1.0}
    access_and_evict = None
    params = argparse.Namespace(model_dir=run_config_dir)
    run_config = NPURunConfig(log_step_count_steps=0)
    # --- as the document writes it (its example 1 ends a line with a full-width comma and example 2 has
    # no comma after config=run_config: both would not parse; the one comma each is the only change) ---
    est = NPUEstimator(
            model_fn=get_model_fn(create_fs_params, cfg, access_and_evict),
            params=params,
            model_dir=params.model_dir,
            config=run_config,
            warm_start_from=warm_settings
    )
    # ---
    state = StartingState()
    est.train(input_fn_for(est.model_fn, first_id=0), steps=1, hooks=[state])
    return state


def test_est_10_ws_1_seed_example_1_loads_user_table_from_one_path():
    source_tables, _ = write_source("./warm_start", 1)
    tf_model.fresh_graph()
    warm_settings=tf.estimator.WarmStartSettings(ckpt_to_initialize_from="./warm_start",vars_to_warm_start ="user_table", var_name_to_prev_var_name=None)  # noqa: E225,E501 - verbatim
    state = _warm_started("./model", warm_settings)
    assert state.tables["user_table"] == source_tables["user_table"]       # every row from ./warm_start
    assert state.tables["item_table"] == {}                                # not selected: untouched (empty)
    assert np.all(state.dense["mlp_layer_w"] == -1.0) and np.all(state.dense["mlp_layer_b"] == -1.0)


def test_est_10_ws_5_seed_example_2_loads_three_paths_in_order():
    sources = {i: write_source(f"./warm_start_{i}", i) for i in (1, 2, 3)}
    tf_model.fresh_graph()
    ckpt_to_initialize_from_list = ["./warm_start_1", "./warm_start_2", "./warm_start_3"]
    vars_to_warm_start_list=[".*",  ["user_table", "item_table"], "mlp_layer_w" ]  # noqa: E225,E231,E202 - verbatim
    var_name_to_prev_var_name_list = [{}, {}, {}]
    warm_settings=tf.estimator.WarmStartSettings(  # noqa: E225 - verbatim
            ckpt_to_initialize_from=ckpt_to_initialize_from_list,
            vars_to_warm_start = vars_to_warm_start_list,  # noqa: E251 - verbatim
            var_name_to_prev_var_name=var_name_to_prev_var_name_list )  # noqa: E202 - verbatim
    state = _warm_started("./model", warm_settings)
    (tables_1, dense_1), (tables_2, dense_2), (tables_3, dense_3) = sources[1], sources[2], sources[3]
    for name in TABLES:
        # path 2's keys from path 2; path 1's other keys stay as path 1 loaded them; path 3 loads no table
        expected = {**tables_1[name], **tables_2[name]}
        assert state.tables[name] == expected
        assert set(tables_1[name]) - set(tables_2[name]) and set(tables_1[name]) & set(tables_2[name])
        assert any(tables_3[name].get(k) != v for k, v in expected.items())   # path 3's rows differ: not used
    assert np.array_equal(state.dense["mlp_layer_w"], dense_3["mlp_layer_w"])   # path 3 overrides path 1
    assert np.array_equal(state.dense["mlp_layer_b"], dense_1["mlp_layer_b"])   # only path 1 has it selected
    assert not np.array_equal(dense_1["mlp_layer_w"], dense_3["mlp_layer_w"])
    assert not np.array_equal(dense_1["mlp_layer_b"], dense_3["mlp_layer_b"])
