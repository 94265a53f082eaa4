"""Automatic graph modification (spec/graph.md)."""
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf.optimizers import adagrad, lazy_adam

import tf_model


@pytest.fixture(autouse=True)
def _clean():
    yield
    tf_model.fresh_graph()


def _modify_mode(backend, *, access_threshold=None, optimizer="adagrad", multi_lookup=True, iterator="one_shot",
                 modify=True, hook=False, send_count=None):
    """tf_model's model written the graph-modification way: raw id tensors,
    no FeatureSpec, no insert function; the graph is rewritten afterwards."""
    tf_model.fresh_graph()
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend=backend, use_dynamic=send_count is None)
        init = tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1)
        user = mx.create_table(tf.int64, 4, "user", init, device_vocabulary_size=500)
        item = mx.create_table(tf.int64, 4, "item", init, device_vocabulary_size=500)
        config = None if access_threshold is None else {"access_threshold": access_threshold}
        sparse_optimizer = (adagrad.create_hash_optimizer(learning_rate=0.2) if optimizer == "adagrad"
                            else lazy_adam.create_hash_optimizer(learning_rate=0.05))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        ds = tf.data.Dataset.from_tensor_slices(tf_model.features(0)).batch(tf_model.BATCH, drop_remainder=True)
        ds = ds.map(lambda b: {**b, "timestamp": tf.reduce_max(b["timestamp"])}).repeat()
        it = (tf.compat.v1.data.make_one_shot_iterator(ds) if iterator == "one_shot"
              else tf.compat.v1.data.make_initializable_iterator(ds))
        batch = it.get_next()
        tf.compat.v1.add_to_collection(mx.constants.ASCEND_TIMESTAMP, batch["timestamp"])
        lookups = [(user, batch["user"]), (item, batch["item"])] + ([(item, batch["item"])] if multi_lookup else [])
        embs = [mx.sparse_lookup(t, ids, modify_graph=True, access_and_evict_config=config, send_count=send_count)
                for t, ids in lookups]
        loss, train, _, _ = tf_model.head(embs, batch["label"], sparse_optimizer, global_step)
        moved = mx.modify_graph_and_start_emb_cache() if modify and not hook else None
        init_op = tf.compat.v1.global_variables_initializer()
    return dict(graph=graph, loss=loss, train=train, init=init_op, tables={"user": user, "item": item},
                moved=moved, iterator=it)


def _train(handles, steps):
    with tf.compat.v1.Session(graph=handles["graph"]) as session:
        session.run(handles["init"])
        initializer = mx.ConfigInitializer.get_instance().train_params_config.get_initializer(True)
        if initializer is not None:
            session.run(initializer)
        losses = [session.run([handles["loss"], handles["train"]])[0] for _ in range(steps)]
    return losses, {n: t.store.export() for n, t in handles["tables"].items()}


@pytest.mark.parametrize("multi_lookup", [False, True])
def test_graph_3_same_losses_as_feature_spec_mode(backend, multi_lookup):
    """GRAPH-3: step for step the same losses and tables as FeatureSpec mode."""
    spec = tf_model.build(backend, access_threshold=2, optimizer="lazy_adam", multi_lookup=multi_lookup)
    spec_losses, _ = tf_model.train(spec, 12)
    spec_state = {n: t.store.export() for n, t in spec["tables"].items()}
    modified = _modify_mode(backend, access_threshold=2, optimizer="lazy_adam", multi_lookup=multi_lookup)
    assert modified["moved"] == (3 if multi_lookup else 2)
    losses, state = _train(modified, 12)
    if multi_lookup:   # two lookups' gradients are summed in another order: float rounding only
        np.testing.assert_allclose(losses, spec_losses, rtol=1e-5)
    else:
        assert losses == spec_losses
    for name in ("user", "item"):
        assert state[name].keys.tolist() == spec_state[name].keys.tolist()
        assert state[name].counts.tolist() == spec_state[name].counts.tolist()   # merged: counted as one call
        np.testing.assert_allclose(state[name].values, spec_state[name].values, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("multi_lookup", [False, True])
def test_graph_3_static_shape_same_as_feature_spec_mode(backend, multi_lookup):
    """GRAPH-3 with static shape (send_count): each lookup's padded segment and the
    merged store call agree on the gradient's shape (it failed with 'grad_rows:
    shape must be ...'), and the result is FeatureSpec mode's."""
    spec = tf_model.build(backend, static=True, send_count=120, access_threshold=2, optimizer="lazy_adam",
                          multi_lookup=multi_lookup)
    spec_losses, _ = tf_model.train(spec, 8)
    spec_state = {n: t.store.export() for n, t in spec["tables"].items()}
    modified = _modify_mode(backend, access_threshold=2, optimizer="lazy_adam", multi_lookup=multi_lookup,
                            send_count=120)
    losses, state = _train(modified, 8)
    if multi_lookup:
        np.testing.assert_allclose(losses, spec_losses, rtol=1e-5)
    else:
        assert losses == spec_losses
    for name in ("user", "item"):
        assert state[name].keys.tolist() == spec_state[name].keys.tolist()
        assert state[name].counts.tolist() == spec_state[name].counts.tolist()
        if multi_lookup:
            np.testing.assert_allclose(state[name].values, spec_state[name].values, rtol=1e-5, atol=1e-7)
        else:
            assert np.array_equal(state[name].values, spec_state[name].values)


def test_graph_1_one_store_call_per_table_and_key_processing_in_the_pipeline(backend):
    handles = _modify_mode(backend, multi_lookup=True)
    _train(handles, 3)
    assert handles["tables"]["item"].store.stats()["train_lookups"] == 3      # two lookups, one call per step
    records = mx.ConfigInitializer.get_instance().modify_records
    assert len(records) == 3 and all(r.done for r in records)
    for record in records:                   # each store op now reads ids computed by the new pipeline
        source = record.step.op.inputs[0].op
        assert source.type == "IteratorGetNext" and source is not record.ids.op


def test_graph_1_initializable_iterator_and_hook(backend):
    handles = _modify_mode(backend, iterator="initializable", hook=True)
    hook = mx.GraphModifierHook()
    with handles["graph"].as_default(), tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        losses = [session.run([handles["loss"], handles["train"]])[0] for _ in range(3)]
    assert np.isfinite(losses).all()
    initializer = mx.ConfigInitializer.get_instance().train_params_config.get_initializer(True)
    assert initializer is not None and initializer.type == "MakeIterator"


def test_graph_1_dump_graph(backend, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    handles = _modify_mode(backend, modify=False)
    with handles["graph"].as_default():
        mx.modify_graph_and_start_emb_cache(dump_graph=True)
    before, after = tmp_path / "graph_before_modify.pbtxt", tmp_path / "graph_after_modify.pbtxt"
    assert before.is_file() and after.is_file() and after.stat().st_size > before.stat().st_size


def test_graph_2_restrictions_are_clear_errors(backend):
    tf_model.fresh_graph()
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend=backend)
        table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.zeros_initializer(), device_vocabulary_size=10)
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        emb = mx.sparse_lookup(table, ids, modify_graph=True)
        with pytest.raises(RuntimeError, match="gradients"):
            mx.modify_graph_and_start_emb_cache()                  # before tf.gradients
        tf.gradients(tf.reduce_sum(emb), mx.get_dense_and_sparse_variable()[1])
        with pytest.raises(ValueError, match="tf.data iterator"):
            mx.modify_graph_and_start_emb_cache()                  # ids from a placeholder
    with tf.Graph().as_default(), pytest.raises(RuntimeError, match="another graph"):
        mx.modify_graph_and_start_emb_cache()
    tf_model.fresh_graph()
    with tf.Graph().as_default():
        mx.init(backend=backend)
        table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.zeros_initializer(), device_vocabulary_size=10)
        ds = tf.data.Dataset.from_tensor_slices(np.arange(8)).batch(2)
        structure = tf.compat.v1.data.Iterator.from_structure(tf.compat.v1.data.get_output_types(ds),
                                                              tf.compat.v1.data.get_output_shapes(ds))
        emb = mx.sparse_lookup(table, structure.get_next(), modify_graph=True)
        tf.gradients(tf.reduce_sum(emb), mx.get_dense_and_sparse_variable()[1])
        with pytest.raises(ValueError, match="make_one_shot_iterator or make_initializable_iterator"):
            mx.modify_graph_and_start_emb_cache()
