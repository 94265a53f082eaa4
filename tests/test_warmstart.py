"""Custom Warm Start (spec/warmstart.md)."""
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import CheckpointError
from mxrec_ref.tf.optimizers import adagrad

import tf_model

TABLES = ("table_a", "table_b", "table_c")


def _model(backend, seed, dims=None):
    """Three tables and two dense variables; trains a few steps on seed-dependent ids."""
    tf_model.fresh_graph()
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend=backend)
        tables = {n: mx.create_table(tf.int64, (dims or {}).get(n, 2), n, tf.compat.v1.zeros_initializer(),
                                     device_vocabulary_size=64) for n in TABLES}
        optimizer = adagrad.create_hash_optimizer(learning_rate=0.5)
        rng = np.random.default_rng(seed)
        ids = tf.constant(rng.integers(0, 20, size=(8, 3)), tf.int64)
        embs = [mx.sparse_lookup(tables[n], ids[:, i], modify_graph=True)[:, :2] for i, n in enumerate(TABLES)]
        w = tf.compat.v1.get_variable("dense_w", [2], initializer=tf.compat.v1.constant_initializer(seed + 1.0))
        v = tf.compat.v1.get_variable("dense_v", [2], initializer=tf.compat.v1.constant_initializer(-seed - 1.0))
        loss = sum(tf.reduce_sum(e * w + v) for e in embs)
        dense_vars, sparse_vars = mx.get_dense_and_sparse_variable()
        train = tf.group(optimizer.apply_gradients(zip(tf.gradients(loss, sparse_vars), sparse_vars)),
                         tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=dense_vars))
        init = tf.compat.v1.global_variables_initializer()
    return graph, tables, train, init, (w, v)


def _checkpoint(backend, seed, directory, steps=2):
    graph, tables, train, init, dense = _model(backend, seed)
    with graph.as_default(), tf.compat.v1.Session() as session:
        session.run(init)
        for _ in range(steps):
            session.run(train)
        path = tf.compat.v1.train.Saver().save(session, str(directory / "model.ckpt"), global_step=seed)
        exports = {n: t.store.export() for n, t in tables.items()}
        values = [session.run(x) for x in dense]
    return path, exports, values


@pytest.fixture
def three_checkpoints(backend, tmp_path_factory):
    return [_checkpoint(backend, seed, tmp_path_factory.mktemp(f"ckpt{seed}")) for seed in (1, 2, 3)]


def test_ws_5_document_example_two(backend, three_checkpoints):
    """Everything from path 1, two tables from path 2, one dense variable from path 3."""
    (p1, e1, d1), (p2, e2, d2), (p3, e3, d3) = three_checkpoints
    graph, tables, train, init, (w, v) = _model(backend, seed=9)
    with graph.as_default():
        # the document's shapes: a regex, a list of tables, a regex naming one dense variable
        settings = mx.WarmStartSettings([p1, p2, p3], vars_to_warm_start=[".*", ["table_a", "table_b"], "dense_w"],
                                        var_name_to_prev_var_name=[{}, {}, {}])
        mx.warm_start(settings)
        init = tf.compat.v1.global_variables_initializer()   # built after warm_start: it runs the new initializers
        with tf.compat.v1.Session() as session:
            session.run(init)
            assert session.run(w).tolist() == d3[0].tolist()
            assert session.run(v).tolist() == d1[1].tolist()
    # WS-3, WS-5: a later path overrides the keys it holds; keys only the earlier path had stay
    for name, layers in (("table_a", (e1, e2)), ("table_b", (e1, e2)), ("table_c", (e1,))):
        state = tables[name].store.export()
        expected = {}
        for export in layers:
            for key, row, acc in zip(export[name].keys.tolist(), export[name].values, export[name].slots["accumulator"]):
                expected[key] = (row, acc)
        assert state.keys.tolist() == sorted(expected)
        for key, row, acc in zip(state.keys.tolist(), state.values, state.slots["accumulator"]):
            assert np.array_equal(row, expected[key][0]) and np.array_equal(acc, expected[key][1])


def test_ws_2_document_example_one(backend, three_checkpoints):
    """Example 1: the sparse table named by the regex, from a checkpoint folder; nothing else."""
    (p1, e1, d1), _, _ = three_checkpoints
    graph, tables, _, _, (w, _) = _model(backend, seed=9)
    with graph.as_default():
        report = mx.warm_start(mx.WarmStartSettings(str(Path(p1).parent), vars_to_warm_start="table_a",
                                                    var_name_to_prev_var_name=None))
        init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session() as session:
            session.run(init)
            assert session.run(w).tolist() == [10.0, 10.0]          # dense untouched (seed 9 + 1)
    assert list(report[p1]["tables"]) == ["table_a"] and report[p1]["dense"] == []
    assert tables["table_a"].store.export().keys.tolist() == e1["table_a"].keys.tolist()
    assert tables["table_b"].size() == 0 and tables["table_c"].size() == 0


def test_ws_1_list_lengths_must_match():
    with pytest.raises(ValueError, match="one entry per path"):
        mx.WarmStartSettings(["a", "b"], vars_to_warm_start=[".*", ".*", ".*"])
    single = mx.WarmStartSettings("a", vars_to_warm_start=["x", "y"])
    assert single.vars_to_warm_start == [["x", "y"]]


def test_ws_2_regex_is_a_prefix_match_and_variables_are_accepted(backend, three_checkpoints):
    (p1, e1, _), _, _ = three_checkpoints
    graph, tables, _, _, (w, _) = _model(backend, seed=9)
    with graph.as_default():
        report = mx.warm_start(mx.WarmStartSettings(p1, vars_to_warm_start="table_[ab]"))
        assert sorted(report[p1]["tables"]) == ["table_a", "table_b"] and report[p1]["dense"] == []
        report = mx.warm_start(mx.WarmStartSettings(p1, vars_to_warm_start=[tables["table_c"].variable, w]))
        assert list(report[p1]["tables"]) == ["table_c"] and report[p1]["dense"] == ["dense_w"]


def test_ws_3_merge_semantics(backend, tmp_path):
    from mxrec_ref import TableConfig, open_store

    config = TableConfig("t", dim=2, device_vocabulary_size=16, access_threshold=3, eviction_threshold=100)
    source = open_store(config, backend=backend)
    for step in range(3):
        source.lookup(np.array([1, 2]), step=step)
    source.lookup(np.array([9]), step=3)                  # pending in the source: not loaded
    source.save(tmp_path)
    target = open_store(config, backend=backend)
    for step in range(3):
        target.lookup(np.array([2, 5]), step=10 + step)
    target.lookup(np.array([1]), step=13)                 # pending here, admitted by the warm start
    kept = target.export()
    assert target.warm_start(tmp_path, now=50) == 2
    state = target.export()
    assert state.keys.tolist() == [1, 2, 5]
    assert state.last_seen.tolist() == [50, 50, kept.last_seen[kept.keys.tolist().index(5)]]
    assert np.array_equal(state.values[:2], source.export().values)
    assert state.values[2].tolist() == kept.values[kept.keys.tolist().index(5)].tolist()
    assert state.counts.tolist()[0] >= 3 and state.pending_keys.tolist() == []


def test_ws_4_other_optimizer_loads_rows_only(backend, tmp_path):
    from mxrec_ref import Adagrad, LazyAdam, TableConfig, open_store

    config = TableConfig("t", dim=2, device_vocabulary_size=8)
    source = open_store(config, LazyAdam(), backend=backend)
    result = source.lookup(np.array([4]), step=0)
    source.apply_gradients(result, np.ones((1, 2)), step=0)
    source.save(tmp_path)
    target = open_store(config, Adagrad(initial_accumulator_value=0.3), backend=backend)
    target.warm_start(tmp_path)
    state = target.export()
    assert np.array_equal(state.values, source.export().values)
    assert state.slots["accumulator"].tolist() == [[np.float32(0.3)] * 2]


def test_ws_6_renaming_tables(backend, three_checkpoints):
    (p1, e1, _), _, _ = three_checkpoints
    graph, tables, *_ = _model(backend, seed=9)
    with graph.as_default():
        mx.warm_start(mx.WarmStartSettings(p1, vars_to_warm_start=["table_a"],
                                           var_name_to_prev_var_name={"table_a": "table_c"}))
    assert tables["table_a"].store.export().keys.tolist() == e1["table_c"].keys.tolist()


def test_ws_7_errors_before_any_change(backend, three_checkpoints, tmp_path):
    (p1, _, _), _, _ = three_checkpoints
    graph, tables, *_ = _model(backend, seed=9, dims={"table_b": 3})
    with graph.as_default():
        before = {n: t.store.export() for n, t in tables.items()}
        with pytest.raises(CheckpointError, match="dim"):
            mx.warm_start(mx.WarmStartSettings(p1))               # table_a would load, table_b cannot
        with pytest.raises(FileNotFoundError, match="no checkpoint"):
            mx.warm_start(mx.WarmStartSettings(str(tmp_path / "missing")))
        with pytest.raises(CheckpointError, match="no table 'nope'"):
            mx.warm_start(mx.WarmStartSettings(p1, vars_to_warm_start=["table_a"],
                                               var_name_to_prev_var_name={"table_a": "nope"}))
        with pytest.raises(ValueError, match="not in checkpoint"):
            mx.warm_start(mx.WarmStartSettings(p1, vars_to_warm_start=["dense_w"],
                                               var_name_to_prev_var_name={"dense_w": "gone"}))
    for name, table in tables.items():
        assert table.store.export().differences(before[name]) == []


def test_ws_8_hook_in_monitored_session_and_across_backends(backend, three_checkpoints, fast_backend):
    (p1, e1, d1), _, _ = three_checkpoints
    other = "ref" if backend == "fast" else "fast"
    graph, tables, train, _, (w, _) = _model(other, seed=9)
    with graph.as_default():
        hook = mx.WarmStartHook(mx.WarmStartSettings(p1))
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
            assert session.run(w).tolist() == d1[0].tolist()
    state = tables["table_b"].store.export()
    assert state.keys.tolist() == e1["table_b"].keys.tolist()
    assert np.array_equal(state.values, e1["table_b"].values)


def test_ws_8_into_another_storage_mode_and_back(backend, three_checkpoints, tmp_path):
    """An HBM checkpoint warm-starts a DDR/SSD-configured table (one format for every mode)."""
    from mxrec_ref import TableConfig, open_store

    (p1, e1, _), _, _ = three_checkpoints
    sparse = Path(p1).parent / f"sparse-{Path(p1).name}"
    tiered = open_store(TableConfig("table_a", dim=2, device_vocabulary_size=64, host_vocabulary_size=64,
                                    ssd_vocabulary_size=64, ssd_data_path=[str(tmp_path)]),
                        adagrad_store_optimizer(), backend=backend)
    tiered.warm_start(sparse)
    state = tiered.export()
    assert state.keys.tolist() == e1["table_a"].keys.tolist()
    assert np.array_equal(state.values, e1["table_a"].values)
    assert np.array_equal(state.slots["accumulator"], e1["table_a"].slots["accumulator"])
    tiered.save(tmp_path / "back")
    flat = open_store(TableConfig("table_a", dim=2, device_vocabulary_size=64), adagrad_store_optimizer(),
                      backend=backend)
    flat.warm_start(tmp_path / "back")
    assert np.array_equal(flat.export().values, e1["table_a"].values)


def adagrad_store_optimizer():
    from mxrec_ref import Adagrad

    return Adagrad(learning_rate=0.5)


@pytest.mark.eager
def test_ws_8_eager_warm_start(backend, three_checkpoints):
    (p1, e1, d1), _, _ = three_checkpoints
    tf_model.fresh_graph()
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 2, "table_a", tf.compat.v1.zeros_initializer(), device_vocabulary_size=64)
    adagrad.create_hash_optimizer(learning_rate=0.5)
    w = tf.Variable(np.zeros(2, np.float32), name="dense_w")
    assert tf.executing_eagerly()
    mx.warm_start(mx.WarmStartSettings(p1, vars_to_warm_start=["table_a", w]))
    assert w.numpy().tolist() == d1[0].tolist()
    assert table.store.export().keys.tolist() == e1["table_a"].keys.tolist()


def test_ws_8_scaffold_init_fn(backend, three_checkpoints):
    (p1, e1, _), _, _ = three_checkpoints
    graph, tables, train, _, _ = _model(backend, seed=9)
    with graph.as_default():
        scaffold = tf.compat.v1.train.Scaffold(init_fn=mx.scaffold_init_fn(mx.WarmStartSettings(p1, "table_b")))
        with tf.compat.v1.train.MonitoredTrainingSession(scaffold=scaffold) as session:
            pass
    assert tables["table_b"].store.export().keys.tolist() == e1["table_b"].keys.tolist()
    assert tables["table_a"].size() == 0


# ------------------------------------------------------------ WS-7: plan every table, then apply (one read each)
def _count_reads(monkeypatch) -> list:
    """Every version of a checkpoint table read from disk, as (folder, table name)."""
    from mxrec_ref import checkpoint

    reads, read_version = [], checkpoint.reader.read_version

    def counting(root, saved_name, *args, **kwargs):
        reads.append((str(root), saved_name))
        return read_version(root, saved_name, *args, **kwargs)

    monkeypatch.setattr(checkpoint.reader, "read_version", counting)
    return reads


def test_ws_7_each_checkpoint_table_is_read_once(backend, three_checkpoints, monkeypatch):
    """The TF warm start checked every table by reading it, then read it again to merge it."""
    (p1, e1, _), (p2, e2, _), _ = three_checkpoints
    graph, tables, *_ = _model(backend, seed=9)
    reads = _count_reads(monkeypatch)
    with graph.as_default():
        mx.warm_start(mx.WarmStartSettings([p1, p2], vars_to_warm_start=[".*", ["table_a"]]))
    assert sorted(reads) == sorted([(f"{Path(p1).parent}/sparse-{Path(p1).name}", n) for n in TABLES]
                                   + [(f"{Path(p2).parent}/sparse-{Path(p2).name}", "table_a")])
    expected = {**dict(zip(e1["table_a"].keys.tolist(), e1["table_a"].values.tolist())),
                **dict(zip(e2["table_a"].keys.tolist(), e2["table_a"].values.tolist()))}
    state = tables["table_a"].store.export()
    assert dict(zip(state.keys.tolist(), state.values.tolist())) == expected


def test_ws_7_a_table_that_cannot_hold_its_paths_together_changes_nothing(backend, three_checkpoints, tmp_path):
    """Each path fits the fixed-size table alone, both together do not: the old code merged the
    first path, then failed on the second."""
    from mxrec_ref import CapacityError, TableConfig, open_store

    (p1, e1, _), (p2, e2, _), _ = three_checkpoints
    union = np.union1d(e1["table_a"].keys, e2["table_a"].keys)
    rows = max(len(e1["table_a"].keys), len(e2["table_a"].keys))
    assert len(union) > rows
    store = open_store(TableConfig("table_a", dim=2, device_vocabulary_size=rows), adagrad_store_optimizer(),
                       backend=backend)
    folders = [Path(p).parent / f"sparse-{Path(p).name}" for p in (p1, p2)]
    first = store.plan_warm_start(folders[0], now=7)
    with pytest.raises(CapacityError, match="device_vocabulary_size"):
        store.plan_warm_start(folders[1], after=first)
    assert store.size() == 0                                  # planning changes nothing
    assert store.apply_warm_start(first) == len(e1["table_a"].keys)
    assert store.export().last_seen.tolist() == [7] * len(e1["table_a"].keys)
    with pytest.raises(mx_usage_error(), match="plan"):
        open_store(TableConfig("table_a", dim=2, device_vocabulary_size=rows), backend=backend).apply_warm_start(first)

    graph, tables, *_ = _model(backend, seed=9)
    with graph.as_default():
        small = mx.create_table(tf.int64, 2, "small", tf.compat.v1.zeros_initializer(), device_vocabulary_size=rows)
        before = {n: t.store.export() for n, t in {**tables, "small": small}.items()}
        with pytest.raises(CapacityError, match="small"):
            mx.warm_start(mx.WarmStartSettings([p1, p2], vars_to_warm_start=[["table_b", "small"]] * 2,
                                               var_name_to_prev_var_name={"small": "table_a"}))
    for name, table in {**tables, "small": small}.items():
        assert table.store.export().differences(before[name]) == [], name


def mx_usage_error():
    from mxrec_ref import UsageError

    return UsageError


def test_ws_7_plan_and_apply_on_a_tiered_table(backend, three_checkpoints, tmp_path):
    """DDR/SSD tables plan and apply like any store; planning moves no row and reads no disk record."""
    from mxrec_ref import TableConfig, open_store

    (p1, e1, _), _, _ = three_checkpoints
    tiered = open_store(TableConfig("table_a", dim=2, device_vocabulary_size=2, host_vocabulary_size=2,
                                    ssd_vocabulary_size=64, ssd_data_path=[str(tmp_path)]),
                        adagrad_store_optimizer(), backend=backend)
    for step in range(3):
        tiered.lookup(np.arange(100 + 2 * step, 102 + 2 * step), step=step)
    assert tiered.stats()["disk_rows"] > 0
    before = tiered.export()
    stats = tiered.stats()
    plan = tiered.plan_warm_start(Path(p1).parent / f"sparse-{Path(p1).name}")
    assert tiered.stats() == stats
    assert tiered.export().differences(before) == []
    tiered.apply_warm_start(plan)
    assert np.array_equal(tiered.export().keys, np.union1d(before.keys, e1["table_a"].keys))


def test_tf_5_table_clock_is_public(backend, tmp_path):
    """SparseTable.continue_clock reads the store's clock through Store.table_clock (it read a private
    field); ref, fast, tiered and a store that only implements the contract agree."""
    from mxrec_ref import TableConfig, open_store
    from mxrec_ref.contract import Store

    config = TableConfig("t", dim=2, device_vocabulary_size=8, host_vocabulary_size=8)
    for store in (open_store(TableConfig("t", dim=2, device_vocabulary_size=8), backend=backend),
                  open_store(config, backend=backend)):
        assert store.table_clock() == (None, None)
        store.lookup(np.array([1, 2]), step=4)
        store.lookup(np.array([1]), step=2)
        assert store.table_clock() == (4, "step")
        store.save(tmp_path / store.backend_name)
        other = open_store(store.config, backend=backend)
        other.load(tmp_path / store.backend_name)
        assert other.table_clock() == (4, "step")
        assert Store.table_clock(other) == (4, "step")            # the contract's default, from export()
