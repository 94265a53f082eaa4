"""An mxRec-style training job on N ranks, or in one process on the same global batches (SHARD-9, SHARD-12..14).

    mpirun -np 2 python tests/sharding_tf_child.py OUT ref,fast    # 2 ranks, each BATCH examples per step
    python tests/sharding_tf_child.py OUT ref,fast 2                # one process, 2 x BATCH examples per step

The ranks read ``dataset.batch(BATCH).shard(rank_size, rank)``, so step s's global batch is the ranks'
batches concatenated in rank order: what the one process reads with ``batch(rank_size x BATCH)``.  Sparse
gradients use ``sum_gradients_and_div_by_ranksize`` and the dense ones ``DistributedOptimizer`` (average),
so both equal the one process's gradient of the global mean loss.  Rank 0 writes ``OUT/<BACKEND>-<mode>.npz``.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import train
from mxrec_ref.compat.mx_rec.util.communication import hccl_ops
from mxrec_ref.tf.optimizers import adagrad

BATCH, STEPS, DIM = 16, 12, 4


def data(n: int = 1024) -> dict:
    rng = np.random.default_rng(3)
    user = (rng.zipf(1.4, size=(n, 2)) % 60).astype(np.int64)
    item = (rng.zipf(1.3, size=(n, 3)) % 90 + 1000).astype(np.int64)
    label = ((user[:, 0] + item[:, 0]) % 3 == 0).astype(np.float32)
    return {"user": user, "item": item, "label": label}


def main(out: str, backends: str, emulate: int | None) -> None:
    tf.compat.v1.disable_eager_execution()
    for backend in backends.split(","):      # one launch for every backend: TF's import is the slow part
        with tf.Graph().as_default():
            job(out, backend, emulate)
        mx.terminate_config_initializer()
    # `mxrec-ref train`'s job, 64 examples per rank and step (one process: the global 64 x ranks)
    ranks = emulate or hccl_ops.get_rank_size()
    result = train.run(train.TrainConfig(steps=12, rows=4000, batch_size=64 * (emulate or 1), eval_every=6,
                                         progress=False), echo=lambda *args, **kwargs: None)
    if hccl_ops.get_rank_id() == 0:
        np.savez(os.path.join(out, f"train-{'one' if emulate else 'mpi'}.npz"), ranks=ranks,
                 test_auc=[h["test_auc"] for h in result["history"]],
                 test_loss=[h["test_loss"] for h in result["history"]],
                 size=[result["stats"][name]["size"] for name in ("wide", "deep")])


def job(out: str, backend: str, emulate: int | None) -> None:
    ranks, rank = (emulate, 0) if emulate else (hccl_ops.get_rank_size(), hccl_ops.get_rank_id())
    mx.init(backend=backend, use_dynamic=True)
    init = tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1)
    # "user" is data-parallel: a replica on every rank under mpirun (SHARD-16), one table in one process
    tables = {name: mx.create_table(tf.int64, DIM, name, init, device_vocabulary_size=400, is_dp=name == "user",
                                    all2all_gradients_op="sum_gradients_and_div_by_ranksize")
              for name in ("item", "user")}
    specs = [mx.FeatureSpec("user", table_name="user", access_threshold=2, eviction_threshold=50),
             mx.FeatureSpec("item", table_name="item", access_threshold=1, eviction_threshold=50)]
    sparse_optimizer = adagrad.create_hash_optimizer(learning_rate=0.2)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    ds = tf.data.Dataset.from_tensor_slices(data())
    ds = ds.batch(BATCH * ranks, drop_remainder=True) if emulate else \
        ds.batch(BATCH, drop_remainder=True).shard(ranks, rank)
    ds = ds.map(mx.get_asc_insert_func(tgt_key_specs=specs)).repeat()
    batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
    embs = [mx.sparse_lookup(tables[s.table_name], s, batch=batch) for s in specs]
    # rank r's dense weights start from seed r: global_variables_initializer makes them rank 0's (SHARD-14)
    w = tf.compat.v1.get_variable("w", [DIM, 1], initializer=tf.compat.v1.random_normal_initializer(seed=rank))
    logits = sum(tf.reduce_sum(tf.reshape(tf.matmul(tf.reshape(e, [-1, DIM]), w), [tf.shape(e)[0], -1]), axis=1)
                 for e in embs)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"], logits=logits))
    dense_vars, sparse_vars = mx.get_dense_and_sparse_variable()
    grads = tf.gradients(loss, sparse_vars)
    dense = mx.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
    train = tf.group(sparse_optimizer.apply_gradients(zip(grads, sparse_vars)),
                     dense.apply_gradients(dense.compute_gradients(loss, var_list=[w]), global_step=global_step))
    global_loss = hccl_ops.allreduce(loss, "sum") / ranks if not emulate else loss
    # evaluation lookups have their own chain: running them never runs a training step (SHARD-12)
    probe = tf.constant(np.arange(1000, 1012, dtype=np.int64))
    evaluated = mx.sparse_lookup(tables["item"], probe, is_train=False, modify_graph=True, name="probe")
    saver = tf.compat.v1.train.Saver()
    losses, probes = [], []
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for step in range(STEPS):
            losses.append(session.run([train, global_loss])[1])
            if step % 4 == 3:
                probes.append(session.run(evaluated))
        assert session.run(global_step) == STEPS
        saver.save(session, os.path.join(out, f"{backend}-{'one' if emulate else 'mpi'}", "model"), global_step=STEPS)
        states = {name: table.store.export() for name, table in sorted(tables.items())}
        result = {"losses": np.array(losses), "w": session.run(w), "probes": np.stack(probes),
                  "size_user": tables["user"].size()}
    if not emulate:        # ranks sharing this host split its cores (SHARD-14); kept out of the comparison
        np.save(os.path.join(out, f"threads-{rank}.npy"), [tf.config.threading.get_intra_op_parallelism_threads(),
                                                           tf.config.threading.get_inter_op_parallelism_threads()])
    for name, state in states.items():
        for field in ("keys", "values", "counts", "last_seen", "pending_keys", "pending_counts"):
            result[f"{name}_{field}"] = getattr(state, field)
        result[f"{name}_accumulator"] = state.slots["accumulator"]
    if rank == 0:
        np.savez(os.path.join(out, f"{backend}-{'one' if emulate else 'mpi'}.npz"), **result)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
