"""The TF layer on several ranks (spec/sharding.md, SHARD-12..SHARD-14): the collective chains of a graph,
the rank queries and dense reductions, and an mxRec-style job under a real ``mpirun`` against one process
on the same global batches (SHARD-9's tolerance for training through the layer)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.compat.mx_rec.util.communication import hccl_ops
from mxrec_ref.config import TableConfig
from mxrec_ref.distributed import ReplicatedStore, ShardedStore, VirtualWorld, set_world
from mxrec_ref.errors import ConfigError
from mxrec_ref.tf import distributed as tf_distributed
from mxrec_ref.tf.optimizers import adagrad
from test_sharding_mpi import HERE, mpirun


@pytest.fixture
def two_ranks():
    """The graph is built as on rank 0 of 2 (it is never run: no collective happens)."""
    set_world(VirtualWorld(2).communicators()[0])
    yield
    set_world(None)
    if mx.is_initialized():
        mx.terminate_config_initializer()


def collective_ops(graph):
    names = ("store_lookup", "sparse_apply", "mxrec_dense_allreduce", "mxrec_allreduce")
    return [op for op in graph.get_operations() if op.type in ("PyFunc", "PyFuncStateless", "EagerPyFunc")
            and any(n in op.name for n in names)]


def test_shard_12_every_collective_op_waits_for_the_one_built_before_it_in_its_chain(two_ranks):
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend="ref", use_dynamic=True)
        init = tf.compat.v1.zeros_initializer()
        a = mx.create_table(tf.int64, 2, "a", init, device_vocabulary_size=10)
        b = mx.create_table(tf.int64, 2, "b", init, device_vocabulary_size=10)
        optimizer = adagrad.create_hash_optimizer(learning_rate=0.1)
        ids = tf.constant([[1, 2]], tf.int64)
        ea = mx.sparse_lookup(a, ids, modify_graph=True, name="la")
        eb = mx.sparse_lookup(b, ids, modify_graph=True, name="lb")
        evaluation = mx.sparse_lookup(a, ids, is_train=False, modify_graph=True, name="ea")
        w = tf.compat.v1.get_variable("w", [2, 1])
        loss = tf.reduce_sum(tf.matmul(tf.reshape(ea + eb, [-1, 2]), w))
        dense = mx.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        pairs = dense.compute_gradients(loss, var_list=[w])
        sparse = mx.get_dense_and_sparse_variable()[1]
        train = optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
        assert train is not None and pairs[0][0] is not None and evaluation is not None
    ops = collective_ops(graph)
    train_chain = [op for op in ops if "ea/" not in op.name]
    eval_ops = [op for op in ops if "ea/" in op.name]
    assert len(train_chain) == 4 and len(eval_ops) == 1    # 2 lookups, the dense reduction, 1 apply (TF-19)
    for previous, op in zip(train_chain, train_chain[1:]):
        assert previous in op.control_inputs, (previous.name, op.name)
    assert not set(eval_ops[0].control_inputs) & set(train_chain)    # evaluation never runs training


def test_tf_19_one_apply_op_for_every_table_in_table_name_order(two_ranks):
    """TF-19: the tables of one apply_gradients call share one store op, which applies them in
    table-name order whatever the order of the pairs (the same on every rank: SHARD-12)."""
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend="ref", use_dynamic=True)
        init = tf.compat.v1.zeros_initializer()
        tables = [mx.create_table(tf.int64, 2, name, init, device_vocabulary_size=10) for name in ("zeta", "alpha")]
        optimizer = adagrad.create_hash_optimizer(learning_rate=0.1)
        ids = tf.constant([[1, 2]], tf.int64)
        loss = sum(tf.reduce_sum(mx.sparse_lookup(t, ids, modify_graph=True)) for t in tables)
        sparse = [t.variable for t in tables]
        optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
    applies = [op for op in collective_ops(graph) if "sparse_apply" in op.name]
    assert len(applies) == 1
    keys = [applies[0].inputs[i] for i in (0, 4)]        # keys, rows, step, result token per table
    assert [k.op.name.split("/")[0] for k in keys] == ["alpha", "zeta"]


def test_tf_20_a_fused_lookup_takes_its_place_in_the_collective_chain(two_ranks):
    """TF-20 on two ranks: zeta and alpha (FeatureSpec lookups of one batch) share one op, which runs
    alpha first and replaces the op made for zeta alone in the chain; table mid, built after another
    collective, gets its own op.  Every live collective waits for the one before it; no op waits for a
    replaced lookup (it would run it)."""
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend="ref", use_dynamic=True)
        names = ("zeta", "alpha", "mid")
        tables = {n: mx.create_table(tf.int64, 2, n, tf.compat.v1.zeros_initializer(), device_vocabulary_size=10)
                  for n in names}
        specs = {n: mx.FeatureSpec(f"f{n}", table_name=n) for n in names}
        ds = tf.data.Dataset.from_tensor_slices({f"f{n}": [[1, 2]] for n in names}).batch(1)
        batch = tf.compat.v1.data.make_one_shot_iterator(
            ds.map(mx.get_asc_insert_func(tgt_key_specs=list(specs.values())))).get_next()
        hccl_ops.allreduce(tf.constant([1.0]))
        for name in ("zeta", "alpha"):
            mx.sparse_lookup(tables[name], specs[name], batch=batch)
        hccl_ops.allreduce(tf.constant([2.0]))
        mx.sparse_lookup(tables["mid"], specs["mid"], batch=batch)
    ops = collective_ops(graph)
    live = [op for op in ops if "store_lookup" not in op.name or any(t.consumers() for t in op.outputs)]
    replaced = [op for op in ops if op not in live]
    assert [len(op.outputs) for op in live] == [1, 12, 1, 6]
    assert [len(op.outputs) for op in replaced] == [6, 18]     # zeta alone; all three, refused for mid
    assert live[1].outputs[0].consumers()[0].name.startswith("alpha/")        # table-name order inside the op
    for previous, op in zip(live, live[1:]):
        assert previous in op.control_inputs, (previous.name, op.name)
    assert not any(set(replaced) & set(op.control_inputs) for op in graph.get_operations())


def test_tf_19_one_rank_runs_the_tables_side_by_side_several_in_order():
    """TF-19/TF-20: on one rank a fused op's tables run side by side (each call below waits for the other
    at a barrier: one after the other would time out); every call finishes and the first failure in
    table order is raised.  On two ranks they run one after the other, in the order given."""
    import threading

    set_world(None)
    barrier, finished = threading.Barrier(2, timeout=10), []

    def call(name, fail=False):
        def run():
            barrier.wait()
            finished.append(name)
            if fail:
                raise ValueError(f"table {name!r}")
            return name
        return run

    assert tf_distributed.each_table([call("a"), call("b")]) == ["a", "b"]
    with pytest.raises(ValueError, match="table 'b'"):
        tf_distributed.each_table([call("a"), call("b", fail=True)])
    with pytest.raises(ValueError, match="table 'a'"):
        tf_distributed.each_table([call("a", fail=True), call("b", fail=True)])
    assert sorted(finished) == ["a", "a", "a", "b", "b", "b"]
    set_world(VirtualWorld(2).communicators()[0])
    try:
        order = []
        assert tf_distributed.each_table([lambda: order.append("b") or 2, lambda: order.append("a") or 1]) == [2, 1]
        assert order == ["b", "a"]
    finally:
        set_world(None)


def test_shard_12_one_rank_adds_no_dependency():
    set_world(None)
    graph = tf.Graph()
    with graph.as_default():
        first = tf.numpy_function(lambda: np.int64(0), [], tf.int64)
        second = tf.numpy_function(lambda: np.int64(0), [], tf.int64)
        tf_distributed.ordered(first, "train")
        tf_distributed.ordered(second, "train")
    assert second.op.control_inputs == []


def test_shard_13_dense_reduce_variable_is_checked(monkeypatch):
    monkeypatch.setenv("MXREC_REF_DENSE_REDUCE", "fastest")
    with pytest.raises(ConfigError, match="MXREC_REF_DENSE_REDUCE: must be one of"):
        tf_distributed.dense_reduction()
    monkeypatch.setenv("MXREC_REF_DENSE_REDUCE", "allreduce")
    assert tf_distributed.dense_reduction() == "allreduce"


def test_shard_13_collectives_are_the_identity_on_one_rank():
    set_world(None)
    x = tf.constant([[1.0, 2.0]])
    for out in (hccl_ops.allreduce(x, "sum"), hccl_ops.allgather(x), hccl_ops.broadcast(x, 0)):
        assert np.array_equal(out.numpy(), x.numpy())


def test_shard_14_an_ssd_tables_files_go_to_a_folder_per_rank(tmp_path):
    config = TableConfig("t", dim=2, device_vocabulary_size=4, host_vocabulary_size=4, ssd_vocabulary_size=64,
                         ssd_data_path=(str(tmp_path / "a"), str(tmp_path / "b")))
    set_world(VirtualWorld(2).communicators()[1])
    try:
        assert tf_distributed.rank_config(config).ssd_data_path == (str(tmp_path / "a" / "rank1"),
                                                                   str(tmp_path / "b" / "rank1"))
        hbm = TableConfig("t", dim=2, device_vocabulary_size=4)
        assert tf_distributed.rank_config(hbm) is hbm
    finally:
        set_world(None)
    assert tf_distributed.rank_config(config) is config


def test_shard_14_rank_queries_without_a_launcher():
    set_world(None)
    assert (hccl_ops.get_rank_id(), hccl_ops.get_rank_size(), hccl_ops.get_local_rank_size(),
            hccl_ops.get_device_id()) == (0, 1, 1, 0)


def test_shard_14_an_mxrec_job_on_two_ranks_equals_one_process_on_the_global_batches(forked_python, tmp_path):
    """Both backends and the `mxrec-ref train` job in one launch each way.  Key sets, counts, last-seen,
    pending keys and size() are bit-identical; rows, slots, dense weights and losses agree within
    rtol 1e-5 / atol 1e-7 (SHARD-9); the dense checkpoint is rank 0's, the sparse one merged.  The "user"
    table is data-parallel (SHARD-16): replicas under mpirun, the same table as one process's (that one
    forked from a process that imported TensorFlow, tests/forked_cli.py: no launcher, no MPI)."""
    launcher = mpirun()
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), TF_CPP_MIN_LOG_LEVEL="3", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    child = str(HERE / "sharding_tf_child.py")
    for run in (lambda: subprocess.run([launcher, "--oversubscribe", "-np", "2", sys.executable, child, str(tmp_path),
                                        "ref,fast"], env=env, capture_output=True, text=True, timeout=240),
                lambda: forked_python([child, tmp_path, "ref,fast", "2"], env=env, timeout=240)):
        done = run()
        assert done.returncode == 0, f"{' '.join(done.args)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for backend in ("ref", "fast"):
        with np.load(tmp_path / f"{backend}-mpi.npz") as a, np.load(tmp_path / f"{backend}-one.npz") as b:
            real, one = dict(a), dict(b)
        assert sorted(real) == sorted(one)
        for key in real:
            if real[key].dtype.kind == "f":
                np.testing.assert_allclose(real[key], one[key], rtol=1e-5, atol=1e-7, err_msg=key)
            else:
                assert np.array_equal(real[key], one[key]), key
        assert real["user_keys"].size > 0 and real["losses"][-1] < real["losses"][0]
        saved = sorted(os.listdir(tmp_path / f"{backend}-mpi"))
        assert "model-12.index" in saved and "sparse-model-12" in saved
    for rank in (0, 1):
        assert np.load(tmp_path / f"threads-{rank}.npy").tolist() == [max(1, (os.cpu_count() or 1) // 2), 2]
    # mxrec-ref train's Wide&Deep job (train.run) on 2 ranks of 64 examples vs one process of 128
    with np.load(tmp_path / "train-mpi.npz") as a, np.load(tmp_path / "train-one.npz") as b:
        real, one = dict(a), dict(b)
    assert int(real["ranks"]) == 2 and np.array_equal(real["size"], one["size"])
    np.testing.assert_allclose(real["test_auc"], one["test_auc"], rtol=1e-4)
    np.testing.assert_allclose(real["test_loss"], one["test_loss"], rtol=1e-4)


def test_shard_16_an_is_dp_table_on_several_ranks_is_a_replica(two_ranks):
    with tf.Graph().as_default():
        mx.init(backend="ref", use_dynamic=True)
        init = tf.compat.v1.zeros_initializer()
        dp = mx.create_table(tf.int64, 2, "dp", init, device_vocabulary_size=10, is_dp=True,
                             all2all_gradients_op="sum_gradients_and_div_by_ranksize")
        shard = mx.create_table(tf.int64, 2, "shard", init, device_vocabulary_size=10)
        assert type(dp.store) is ReplicatedStore and dp.store.divide_gradients
        assert type(shard.store) is ShardedStore
        assert dp.store.capacity() == 10 and shard.store.capacity() == 20



def _upstream(op) -> set:
    """Every op ``op`` waits for (data and control inputs, transitively)."""
    seen, frontier = set(), [op]
    while frontier:
        current = frontier.pop()
        for source in [t.op for t in current.inputs] + list(current.control_inputs):
            if source not in seen:
                seen.add(source)
                frontier.append(source)
    return seen


def test_shard_12_graph_modification_runs_the_merged_store_calls_in_the_lookups_order(two_ranks):
    """The rewrite's merged store call of each table and mode runs the table's collectives: it takes the chain
    place of the table's first lookup, so the collective ops of each chain run in one order (before the fix two
    tables' merged calls had none: TF ran them in its own order on each rank, issue 30)."""
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend="ref", use_dynamic=True)
        init = tf.compat.v1.zeros_initializer()
        tables = {n: mx.create_table(tf.int64, 2, n, init, device_vocabulary_size=10) for n in ("b", "a")}
        ds = tf.data.Dataset.from_tensor_slices({"x": [[1, 2]], "y": [[3, 4]]}).repeat()
        batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
        loss = tf.reduce_sum(mx.sparse_lookup(tables["b"], batch["x"], modify_graph=True, name="tb") +
                             mx.sparse_lookup(tables["a"], batch["y"], modify_graph=True, name="ta") +
                             mx.sparse_lookup(tables["b"], batch["y"], modify_graph=True, name="tb2"))
        for name in ("a", "b"):
            mx.sparse_lookup(tables[name], batch["x"], is_train=False, modify_graph=True, name=f"e{name}")
        sparse = mx.get_dense_and_sparse_variable()[1]
        adagrad.create_hash_optimizer(learning_rate=0.1).apply_gradients(zip(tf.gradients(loss, sparse), sparse))
        mx.modify_graph_and_start_emb_cache()
    merged = [op for op in graph.get_operations() if "_merged_store_lookup" in op.name]
    lookups = [op for op in collective_ops(graph) if op.name.endswith("/store_lookup")]
    assert len(merged) == 4 and len(lookups) == 5
    for mode in ("t", "e"):
        chain = [op for op in lookups if op.name.split("/")[1].startswith(mode)]
        chain += [op for op in merged if any(op in lookup.control_inputs for lookup in chain)]
        chain += [op for op in collective_ops(graph) if mode == "t" and "sparse_apply" in op.name]
        assert len(chain) == {"t": 6, "e": 4}[mode]
        for first in chain:            # every two collective ops of a chain run in one order
            for second in chain:
                assert first is second or first in _upstream(second) or second in _upstream(first), \
                    (first.name, second.name)
