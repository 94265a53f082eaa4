"""The TensorFlow layer with mxRec's API (issue 5; spec/tf.md)."""
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import CapacityError

import tf_model



@pytest.fixture(autouse=True)
def _graph(request):
    """Graph mode for each test unless marked eager (eager stays on for the rest of the suite)."""
    if request.node.get_closest_marker("eager"):
        yield
    else:
        with tf.Graph().as_default():
            yield
    tf_model.fresh_graph()


def test_tf_1_training_pattern_reduces_loss(backend):
    handles = tf_model.build(backend)
    losses, session = tf_model.train(handles, 24)
    assert np.mean(losses[-8:]) < np.mean(losses[:8])
    assert handles["tables"]["user"].size() > 0 and handles["tables"]["item"].size() > 0
    assert type(session.run(handles["grads"][0])).__name__ == "IndexedSlicesValue"


def test_tf_2_backends_give_the_same_losses(fast_backend):
    """Ref and fast: identical sparse state, so losses agree to the last bit."""
    runs = {}
    for backend in ("ref", "fast"):
        handles = tf_model.build(backend, access_threshold=2, optimizer="lazy_adam")
        losses, session = tf_model.train(handles, 16)
        runs[backend] = (losses, {n: t.store.export() for n, t in handles["tables"].items()})
        session.close()
    assert runs["ref"][0] == runs["fast"][0]
    for name in ("user", "item"):
        assert runs["ref"][1][name].differences(runs["fast"][1][name]) == []


def test_tf_3_multi_lookup_sums_gradients(backend):
    """Two lookups of one table: one store call, gradients of both applied."""
    single = tf_model.build(backend, multi_lookup=False)
    tf_model.train(single, 1)
    once = single["tables"]["item"].store.stats()
    double = tf_model.build(backend, multi_lookup=True)
    tf_model.train(double, 1)
    twice = double["tables"]["item"].store.stats()
    assert once["train_lookups"] == twice["train_lookups"] == 1
    assert twice["key_positions"] == 2 * once["key_positions"]
    assert twice["grad_rows_applied"] >= once["grad_rows_applied"]


def test_tf_4_dynamic_shape_any_batch(backend):
    tf_model.fresh_graph()
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 3, "t", tf.compat.v1.zeros_initializer(), device_vocabulary_size=100)
    ids = tf.compat.v1.placeholder(tf.int64, [None, None])
    emb = mx.sparse_lookup(table, ids, modify_graph=True)
    assert emb.shape.as_list() == [None, None, 3]
    with tf.compat.v1.Session() as session:
        for shape in [(1, 1), (4, 7), (0, 3)]:
            out = session.run(emb, {ids: np.arange(np.prod(shape)).reshape(shape)})
            assert out.shape == shape + (3,)


def test_tf_4_static_shape_pads_to_send_count(backend):
    handles = tf_model.build(backend, static=True, send_count=96)
    assert handles["embs"][0].shape.as_list() == [tf_model.BATCH, 2, 4]
    losses, _ = tf_model.train(handles, 2)
    assert np.isfinite(losses).all()
    small = tf_model.build(backend, static=True, send_count=3)
    with pytest.raises(tf.errors.OpError, match="send_count"):
        tf_model.train(small, 1)
    assert small["tables"]["user"].size() == 0            # nothing changed


def test_tf_5_admission_and_eviction_visible_in_size(backend):
    handles = tf_model.build(backend, access_threshold=3, eviction_threshold=30)
    session = tf.compat.v1.Session(graph=handles["graph"])
    session.run(handles["init"])
    hook = mx.EvictHook(evict_enable=True, evict_step_interval=2)
    user = handles["tables"]["user"]
    sizes, pending = [], []
    for _ in range(6):
        session.run(handles["train"])
        sizes.append(user.size())
        pending.append(user.store.stats()["pending"])
    assert pending[0] > 0 and sizes[0] < user.store.stats()["key_positions"]
    before = user.size() + user.store.stats()["pending"]
    hook.evict_now()
    assert user.store.stats()["evicted"] + user.store.stats()["evicted_pending"] > 0
    assert user.size() + user.store.stats()["pending"] < before


def test_tf_5_evict_hook_in_monitored_session(backend):
    handles = tf_model.build(backend, access_threshold=1, eviction_threshold=20)
    hook = mx.EvictHook(evict_enable=True, evict_step_interval=3)
    with handles["graph"].as_default(), tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(6):
            session.run(handles["train"])
    assert sum(hook.evicted.values()) > 0


def test_tf_5_serving_default_value(backend):
    tf_model.fresh_graph()
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
    ids = tf.constant([[1, 1, 2]], tf.int64)
    emb = mx.sparse_lookup(table, ids, modify_graph=True, serving_default_value=[7.0, 8.0],
                           access_and_evict_config={"access_threshold": 2})
    with tf.compat.v1.Session() as session:
        out = session.run(emb)
    assert out[0].tolist() == [[1, 1], [1, 1], [7, 8]]


def test_tf_6_save_restore_continue(backend, tmp_path):
    handles = tf_model.build(backend, access_threshold=2)
    with handles["graph"].as_default():
        saver = tf.compat.v1.train.Saver(max_to_keep=2)
    losses, session = tf_model.train(handles, 6)
    for step in (1, 2, 3):
        saver.save(session, str(tmp_path / "model"), global_step=step)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("sparse-")) == \
        ["sparse-model-2", "sparse-model-3"]                        # max_to_keep prunes sparse folders too
    exports = {n: t.store.export() for n, t in handles["tables"].items()}
    continued, _ = tf_model.train(handles, 4, session)
    restored = tf_model.build(backend, access_threshold=2)
    fresh = tf.compat.v1.Session(graph=restored["graph"])
    with restored["graph"].as_default():
        tf.compat.v1.train.Saver().restore(fresh, str(tmp_path / "model-3"))
    for name, table in restored["tables"].items():
        assert table.store.export().differences(exports[name]) == []
    again, _ = tf_model.train(restored, 4, fresh)
    # the one-shot iterator restarts, so compare the state, and that training goes on from it
    assert np.isfinite(again).all()
    assert restored["tables"]["item"].store.stats()["grad_applies"] == 4


def test_tf_7_local_embedding_recipe(backend):
    """mxRec's dynamic-expansion recipe: gradients w.r.t. ASCEND_SPARSE_LOOKUP_LOCAL_EMB,
    applied through ASCEND_SPARSE_LOOKUP_ID_OFFSET."""
    tf_model.fresh_graph()
    mx.init(backend=backend, use_dynamic_expansion=True)
    table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=1)
    from mxrec_ref.tf.optimizers import gradient_descent

    optimizer = gradient_descent.create_hash_optimizer(learning_rate=1.0)
    emb = mx.sparse_lookup(table, tf.constant([5, 6, 5], tf.int64), modify_graph=True)
    loss = tf.reduce_sum(emb)
    local = tf.compat.v1.get_collection(mx.constants.ASCEND_SPARSE_LOOKUP_LOCAL_EMB)
    offsets = tf.compat.v1.get_collection(mx.constants.ASCEND_SPARSE_LOOKUP_ID_OFFSET)
    grads = tf.gradients(loss, local)
    train = optimizer.apply_gradients(zip(grads, offsets))
    with tf.compat.v1.Session() as session:
        session.run(train)
    state = table.store.export()
    assert state.keys.tolist() == [5, 6]
    assert state.values.tolist() == [[-1.0, -1.0], [0.0, 0.0]]     # 5 appears twice: gradient 2
    assert table.capacity() >= 2


@pytest.mark.eager
def test_tf_8_eager_tf_function(backend):
    """Eagerly, inside tf.function, with gradients through a GradientTape."""
    tf_model.fresh_graph()
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
    from mxrec_ref.tf.optimizers import gradient_descent

    optimizer = gradient_descent.create_hash_optimizer(learning_rate=0.5)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            tape.watch(table.variable.handle)
            loss = tf.reduce_sum(mx.sparse_lookup(table, ids, modify_graph=True))
        grad = tape.gradient(loss, table.variable.handle)
        optimizer.apply_gradients([(grad, table.variable)])
        return loss

    assert tf.executing_eagerly()
    assert float(step(tf.constant([3, 4], tf.int64))) == 4.0
    assert table.size() == 2
    assert table.store.export().values.tolist() == [[0.5, 0.5], [0.5, 0.5]]


@pytest.mark.parametrize("case", ["key_dtype", "unknown_table", "send_count_missing", "tensor_without_modify",
                                  "spec_other_table", "duplicate_table", "capacity"])
def test_tf_9_bad_input_raises_before_changes(backend, case):
    tf_model.fresh_graph()
    mx.init(backend=backend, use_dynamic=case != "send_count_missing")
    init = tf.compat.v1.zeros_initializer()
    table = mx.create_table(tf.int64, 2, "t", init, device_vocabulary_size=2)
    if case == "key_dtype":
        with pytest.raises(TypeError, match="key_dtype"):
            mx.create_table(tf.float32, 2, "u", init)
    elif case == "unknown_table":
        spec = mx.FeatureSpec("f", table_name="nope")
        mx.get_asc_insert_func(tgt_key_specs=[spec])       # resolved lazily (TF-24); the pipeline start refuses
        with pytest.raises(ValueError, match="no table 'nope'"):
            mx.start_asc_pipeline()
    elif case == "send_count_missing":
        with pytest.raises(ValueError, match="send_count"):
            mx.sparse_lookup(table, tf.constant([1], tf.int64), modify_graph=True)
    elif case == "tensor_without_modify":
        with pytest.raises(ValueError, match="modify_graph"):
            mx.sparse_lookup(table, tf.constant([1], tf.int64))
    elif case == "spec_other_table":
        with pytest.raises(ValueError, match="belongs to table"):
            mx.sparse_lookup(table, mx.FeatureSpec("g", table_name="other"), batch={})
    elif case == "duplicate_table":
        with pytest.raises(ValueError, match="already exists"):
            mx.create_table(tf.int64, 2, "t", init)
    elif case == "capacity":
        emb = mx.sparse_lookup(table, tf.constant([1, 2, 3], tf.int64), modify_graph=True)
        with tf.compat.v1.Session() as session, pytest.raises(tf.errors.OpError, match="device_vocabulary_size"):
            session.run(emb)
        assert CapacityError.__name__ and table.size() == 0
    assert table.size() == 0


def test_tf_10_initializers_map_to_the_counter_based_generator(backend):
    from mxrec_ref import initializers
    from mxrec_ref.tf.table import initializer_from_tf

    tf_model.fresh_graph()
    mx.init(backend=backend)
    uniform = initializer_from_tf(tf.compat.v1.random_uniform_initializer(-0.2, 0.3, seed=4), "t")
    assert (uniform.kind, uniform.minval, uniform.maxval, uniform.seed) == ("uniform", -0.2, 0.3, 4)
    normal = initializer_from_tf(tf.keras.initializers.TruncatedNormal(stddev=0.02, seed=9), "t")
    assert (normal.kind, normal.stddev, normal.seed) == ("truncated_normal", 0.02, 9)
    assert initializer_from_tf(tf.compat.v1.constant_initializer(0.5), "t").value == 0.5
    with pytest.raises(TypeError, match="emb_initializer"):
        initializer_from_tf(tf.keras.initializers.RandomNormal(), "t")
    table = mx.create_table(tf.int64, 3, "t", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=2),
                            device_vocabulary_size=8, init_param=0.5)
    emb = mx.sparse_lookup(table, tf.constant([11], tf.int64), modify_graph=True)
    with tf.compat.v1.Session() as session:
        out = session.run(emb)
    assert np.array_equal(out, initializers.initial_rows(table.config, np.array([11])))


def test_tf_11_set_threshold_op(backend):
    """ADM-9 through mxRec's set_threshold op."""
    tf_model.fresh_graph()
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    emb = mx.sparse_lookup(table, ids, modify_graph=True, access_and_evict_config={"access_threshold": 5})
    lower = mx.set_threshold(2, emb_name="t")
    with tf.compat.v1.Session() as session:
        session.run(emb, {ids: [3]})
        assert table.size() == 0
        session.run(lower)
        session.run(emb, {ids: [3]})
    assert table.size() == 1 and table.store.config.access_threshold == 2
    with pytest.raises(ValueError, match="no table 'nope'"):
        mx.set_threshold(2, emb_name="nope")


def test_tf_6_incremental_saves_through_the_saver(backend, tmp_path):
    """CKPT-9 via Saver.save(save_delta=True): restoring the newest delta gives the state at that step,
    and max_to_keep keeps the bases kept deltas need."""
    handles = tf_model.build(backend, access_threshold=2)
    with handles["graph"].as_default():
        saver = tf.compat.v1.train.Saver(max_to_keep=2)
    _, session = tf_model.train(handles, 2)
    saver.save(session, str(tmp_path / "model"), global_step=1)
    for step in (2, 3, 4):
        tf_model.train(handles, 1, session)
        saver.save(session, str(tmp_path / "model"), global_step=step, save_delta=True)
    exports = {n: t.store.export() for n, t in handles["tables"].items()}
    folders = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("sparse-"))
    assert folders == ["sparse-model-1", "sparse-model-2", "sparse-model-3", "sparse-model-4"]
    assert (tmp_path / "sparse-model-4" / "user" / "removed").is_dir()
    restored = tf_model.build(backend, access_threshold=2)
    fresh = tf.compat.v1.Session(graph=restored["graph"])
    with restored["graph"].as_default():
        tf.compat.v1.train.Saver().restore(fresh, str(tmp_path / "model-4"))
    for name, table in restored["tables"].items():
        assert table.store.export().differences(exports[name]) == []


def test_tf_6_a_damaged_checkpoint_does_not_fail_the_next_save(backend, tmp_path):
    """Pruning follows delta chains through mxrec_ref.checkpoint; a kept
    checkpoint whose table meta.json is damaged names no base, and the next
    save still succeeds (the saver's own JSON parse raised JSONDecodeError)."""
    handles = tf_model.build(backend)
    with handles["graph"].as_default():
        saver = tf.compat.v1.train.Saver(max_to_keep=3)
    _, session = tf_model.train(handles, 1)
    saver.save(session, str(tmp_path / "model"), global_step=1)
    (tmp_path / "sparse-model-1" / "user" / "meta.json").write_text("{not json")
    tf_model.train(handles, 1, session)
    assert saver.save(session, str(tmp_path / "model"), global_step=2) == str(tmp_path / "model-2")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("sparse-")) == [
        "sparse-model-1", "sparse-model-2"]


def test_tf_5_evict_hook_time_interval_with_an_injected_clock(backend):
    """The time-interval trigger reads the hook's clock (injectable, so tests and
    reproducible runs need no wall clock); eviction itself uses the table clock."""
    handles = tf_model.build(backend, access_threshold=1, eviction_threshold=20)
    now = [0.0]
    hook = mx.EvictHook(evict_enable=True, evict_time_interval=100, clock=lambda: now[0])
    with handles["graph"].as_default(), tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(3):
            session.run(handles["train"])
        assert sum(hook.evicted.values()) == 0            # 0 s passed on the hook's clock
        now[0] = 101.0
        session.run(handles["train"])
    assert sum(hook.evicted.values()) > 0


def _rows_after_one_step(backend, with_later_lookup: bool):
    """One LazyAdam step of lookup A (keys 1, 2) in a graph without a global
    step; optionally a second training lookup B of the same table that runs after
    A (its ids wait for A's rows) and before the apply (A's gradient waits for B)."""
    tf_model.fresh_graph()
    with tf.Graph().as_default():
        mx.init(backend=backend)
        table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
        optimizer = mx.optimizers.lazy_adam.create_hash_optimizer(learning_rate=0.1)
        first = mx.sparse_lookup(table, tf.constant([1, 2], tf.int64), modify_graph=True)
        _, sparse = mx.get_dense_and_sparse_variable()
        grad, = tf.gradients(tf.reduce_sum(first), sparse)
        waits = []
        if with_later_lookup:
            with tf.control_dependencies([first]):
                later_ids = tf.identity(tf.constant([7], tf.int64))
            waits = [mx.sparse_lookup(table, later_ids, modify_graph=True, is_grad=False)]
        with tf.control_dependencies(waits):      # the apply runs after lookup B
            grad = tf.IndexedSlices(tf.identity(grad.values), tf.identity(grad.indices), grad.dense_shape)
        train = optimizer.apply_gradients([(grad, sparse[0])])
        with tf.compat.v1.Session() as session:
            session.run(train)
        state = table.store.export()
        mx.terminate_config_initializer()
    return {int(k): v.tolist() for k, v in zip(state.keys, state.values) if k in (1, 2)}


def test_tf_14_the_apply_takes_the_step_of_the_lookup_that_fed_its_gradient(backend):
    """The apply op gets its step from the lookup op (a graph input), so a later
    training lookup of the table in the same run (step 1) does not change the step
    of lookup A's update (step 0): LazyAdam's bias correction of A's rows is the
    same as without lookup B.  (It read ``table.last_train_step``, B's step.)"""
    alone = _rows_after_one_step(backend, with_later_lookup=False)
    assert alone[1] != [1.0, 1.0]
    assert _rows_after_one_step(backend, with_later_lookup=True) == alone


def _two_lookups_one_apply(backend, monkeypatch, reuse: bool):
    """Table t (access threshold 2, Adagrad): lookup A of keys [4, 5, 5] (4 pending, 5 admitted), then
    lookup B of [4, 6] (its ids wait for A), which admits 4, before the one apply of both gradients
    (the local-embedding recipe: each gradient pairs with its lookup's unique keys).  ``reuse=False``:
    no result is kept, so every apply sends keys (the path before TF-18).  Returns the table's
    state, its statistics and the types of what the store's apply received."""
    from mxrec_ref.contract import Store
    from mxrec_ref.tf.optimizers import adagrad
    from mxrec_ref.tf.table import SparseTable

    received, apply_gradients = [], Store.apply_gradients

    def spy(store, result, grad_rows, *, step):
        received.append(type(result).__name__)
        return apply_gradients(store, result, grad_rows, step=step)

    with monkeypatch.context() as patch, tf.Graph().as_default():
        patch.setattr(Store, "apply_gradients", spy)
        if not reuse:
            patch.setattr(SparseTable, "keep_result", lambda table, result: mx.table.NO_RESULT)
        tf_model.fresh_graph()
        mx.init(backend=backend, use_dynamic_expansion=True)
        table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=2),
                                device_vocabulary_size=4)
        optimizer = adagrad.create_hash_optimizer(learning_rate=0.5)
        config = {"access_threshold": 2, "eviction_threshold": 100}
        first = mx.sparse_lookup(table, tf.constant([4, 5, 5], tf.int64), modify_graph=True,
                                 access_and_evict_config=config)
        with tf.control_dependencies([first]):
            later_ids = tf.identity(tf.constant([4, 6], tf.int64))
        second = mx.sparse_lookup(table, later_ids, modify_graph=True, access_and_evict_config=config)
        loss = tf.reduce_sum(first * first + first) + tf.reduce_sum(3.0 * second)   # 4 at A: gradient 1
        local = tf.compat.v1.get_collection(mx.constants.ASCEND_SPARSE_LOOKUP_LOCAL_EMB)
        offsets = tf.compat.v1.get_collection(mx.constants.ASCEND_SPARSE_LOOKUP_ID_OFFSET)
        train = optimizer.apply_gradients(zip(tf.gradients(loss, local), offsets))
        with tf.compat.v1.Session() as session:
            session.run(train)
        state, stats = table.store.export(), table.store.stats()
        mx.terminate_config_initializer()
    return state, stats, received


def test_tf_18_the_apply_reuses_each_lookups_result_with_the_keys_paths_outcome(backend, monkeypatch):
    """TF-18: each gradient that pairs with one lookup's unique keys is applied with that lookup's
    result (no second dedup; the fast store reuses its row handles), and the table ends exactly as
    when keys are sent: key 4, pending at lookup A and admitted by lookup B before the apply, takes
    A's gradient on both paths (OPT-9)."""
    reused, reused_stats, kinds = _two_lookups_one_apply(backend, monkeypatch, reuse=True)
    by_keys, keys_stats, key_kinds = _two_lookups_one_apply(backend, monkeypatch, reuse=False)
    assert kinds == ["LookupResult", "LookupResult"] and key_kinds == ["ndarray", "ndarray"]
    assert reused.keys.tolist() == [4, 5] and reused.differences(by_keys) == []
    assert reused_stats == keys_stats and reused_stats["grad_rows_applied"] == 3


def _live_store_lookups(graph) -> list:
    """The store-lookup ops something in ``graph`` reads (a replaced fused op has no consumer)."""
    return [op for op in graph.get_operations() if op.type in ("PyFunc", "EagerPyFunc") and "store_lookup" in op.name
            and any(t.consumers() for t in op.outputs)]


def test_tf_20_the_feature_spec_lookups_of_a_batch_share_one_store_op(fast_backend, monkeypatch):
    """TF-20: tables user and item (item looked up twice), FeatureSpec lookups of one batch: one store op
    for both tables, and losses, tables and statistics bit for bit those of one op per table (the fast
    backend only: fusing is the TF layer's, and each build costs seconds)."""
    from mxrec_ref.tf import fused_lookup

    runs = {}
    for fused in (True, False):
        with monkeypatch.context() as patch:
            if not fused:
                patch.setattr(fused_lookup, "available", lambda: False)
            handles = tf_model.build("fast", access_threshold=2, eviction_threshold=100)
            ops = len(_live_store_lookups(handles["graph"]))
            losses, session = tf_model.train(handles, 4)
            session.close()
        tables = handles["tables"].items()
        runs[fused] = (ops, losses, {n: t.store.export() for n, t in tables}, {n: t.store.stats() for n, t in tables})
    assert runs[True][0] == 1 and runs[False][0] == 2
    assert runs[True][1] == runs[False][1]
    for name in ("user", "item"):
        assert runs[True][2][name].differences(runs[False][2][name]) == []
    assert runs[True][3] == runs[False][3]


def test_tf_20_a_lookup_that_cannot_join_its_batchs_op_gets_its_own(backend):
    """TF-20: table b's lookup is built under a control dependency on table a's embeddings, so joining
    a's op would make a cycle; table c's is built after a session ran b's op, whose consumers can no
    longer be rewired.  Each gets its own op, and every table looks up once per run."""
    tf_model.fresh_graph()
    mx.init(backend=backend)
    a, b, c = (mx.create_table(tf.int64, 2, n, tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
               for n in "abc")
    specs = [mx.FeatureSpec(f"f{n}", table_name=n) for n in "abc"]
    ds = tf.data.Dataset.from_tensor_slices({"fa": [[1, 2]], "fb": [[3, 3]], "fc": [[4, 5]]}).batch(1).repeat()
    batch = tf.compat.v1.data.make_one_shot_iterator(ds.map(mx.get_asc_insert_func(tgt_key_specs=specs))).get_next()
    first = mx.sparse_lookup(a, specs[0], batch=batch)
    with tf.control_dependencies([first]):
        second = mx.sparse_lookup(b, specs[1], batch=batch)
    graph = tf.compat.v1.get_default_graph()
    assert len(_live_store_lookups(graph)) == 2
    with tf.compat.v1.Session() as session:
        assert session.run(second).tolist() == [[[1.0, 1.0], [1.0, 1.0]]]
        third = mx.sparse_lookup(c, specs[2], batch=batch)
        assert len(_live_store_lookups(graph)) == 3
        session.run([second, third])
    assert [t.store.stats()["train_lookups"] for t in (a, b, c)] == [2, 2, 1]
