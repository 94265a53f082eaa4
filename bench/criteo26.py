"""The 26-table model of issue 16 (its workload, and the two TF models that share it).

26 categorical fields with one id each, one table per field, dim 16; MLP 429 -> 256 -> 128 -> 1
(429 = 26 * 16 embeddings + 13 dense features); batch 4096; Adagrad on the tables and on the MLP.
Each field's ids are Zipf(1.05) ranks over that field's Criteo Kaggle cardinality (10^1..10^7),
scrambled into the int64 range, so the 26 tables grow from empty: ~150k keys after 10 steps,
~580k after 64 (mostly in the four 10^6-10^7 fields), ~9k new keys a step near the end.

Two users, two environments: bench/test_criteo26_bench.py (the mxrec_ref venv: TF 2.21, numpy 2)
and bench/peers/ (its workers also run in .venv-peers: TF 2.16, numpy 1.26). So this module imports
numpy only, never mxrec_ref or TensorFlow: the TF model builders take ``tf`` (and ``mx``) as arguments.
"""
from __future__ import annotations

import numpy as np

# Criteo Kaggle C1..C26 cardinalities: published statistics (facebookresearch/dlrm, as listed in
# shared/data/criteo_kaggle_sample/field_stats.json), the same as mxrec_ref.data.CRITEO_CARDINALITIES;
# repeated here because the TFRA environment cannot import mxrec_ref.
CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
FIELDS = tuple(f"C{i + 1}" for i in range(len(CARDINALITIES)))
N_DENSE = 13
DIM = 16
HIDDEN = (256, 128)
BATCH = 4096
ZIPF_EXPONENT = 1.05
STDDEV = 0.05                 # truncated-normal initial rows, both models
SPARSE_LR = 0.05
DENSE_LR = 0.01
INITIAL_ACCUMULATOR = 0.1


def scramble(ranks: np.ndarray, field: int) -> np.ndarray:
    """A bijection of (field, rank) onto non-negative int64 keys (SplitMix64 finaliser)."""
    x = ranks.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15 * (field + 1) % 2**64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(1)).view(np.int64)


def make_stream(steps: int, seed: int = 26) -> dict:
    """``steps`` batches, concatenated: ``keys`` int64 [steps * BATCH, 26] (scrambled, as a
    dynamic table sees them), ``ids`` int32 of the same shape (each key's row in a static table
    holding exactly the keys of the stream, in order of first appearance per field), ``dense``
    float32 [n, 13], ``label`` float32 [n]; ``sizes``: each field's distinct keys (the static
    tables' rows, and the dynamic tables' final sizes)."""
    rng = np.random.default_rng(seed)
    n = steps * BATCH
    keys = np.empty((n, len(CARDINALITIES)), np.int64)
    ids = np.empty((n, len(CARDINALITIES)), np.int32)
    sizes = []
    for field, cardinality in enumerate(CARDINALITIES):
        weights = np.arange(1, cardinality + 1, dtype=np.float64) ** -ZIPF_EXPONENT
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), cardinality - 1)
        del weights, cdf
        keys[:, field] = scramble(ranks, field)
        distinct, first, inverse = np.unique(ranks, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")      # rows numbered by first appearance, as a table fills
        row_of = np.empty(len(distinct), np.int32)
        row_of[order] = np.arange(len(distinct), dtype=np.int32)
        ids[:, field] = row_of[inverse.reshape(-1)]
        sizes.append(len(distinct))
    dense = np.log1p(rng.lognormal(1.0, 1.0, size=(n, N_DENSE))).astype(np.float32)
    label = (rng.random(n) < 0.25).astype(np.float32)
    return {"keys": keys, "ids": ids, "dense": dense, "label": label, "sizes": np.array(sizes, np.int64)}


def batch(stream: dict, step: int, column: str) -> dict:
    """Step ``step``'s batch (wrapping around): one array per field, dense, label."""
    steps = len(stream["label"]) // BATCH
    rows = slice((step % steps) * BATCH, (step % steps + 1) * BATCH)
    out = {name: np.ascontiguousarray(stream[column][rows, i]) for i, name in enumerate(FIELDS)}
    out.update(dense=stream["dense"][rows], label=stream["label"][rows])
    return out


def signature(tf, id_dtype) -> dict:
    return {**{name: tf.TensorSpec([BATCH], id_dtype) for name in FIELDS},
            "dense": tf.TensorSpec([BATCH, N_DENSE], tf.float32), "label": tf.TensorSpec([BATCH], tf.float32)}


def dataset(tf, stream: dict, column: str, id_dtype):
    """The generator feed both TF1 models read (prefetch 2), so a ratio compares tables, not inputs."""
    def batches():
        step = 0
        while True:
            yield batch(stream, step, column)
            step += 1
    return tf.data.Dataset.from_generator(batches, output_signature=signature(tf, id_dtype))


def mlp_logit(tf, embeddings: list, dense):
    """429 -> 256 -> 128 -> 1 (TF1 variables, in the default graph)."""
    x = tf.concat([*embeddings, dense], axis=1)
    for i, units in enumerate((*HIDDEN, 1)):
        w = tf.compat.v1.get_variable(f"mlp/w{i}", [x.shape[-1], units],
                                      initializer=tf.compat.v1.glorot_uniform_initializer(seed=i))
        b = tf.compat.v1.get_variable(f"mlp/b{i}", [units], initializer=tf.zeros_initializer())
        x = tf.matmul(x, w) + b
        if units != 1:
            x = tf.nn.relu(x)
    return tf.reshape(x, [-1])


def static_graph(tf, stream: dict):
    """The TF1 train op of the model on plain tf.Variable tables of the final sizes, looked up with
    ``tf.nn.embedding_lookup`` over the pre-indexed ids; TF's Adagrad (sparse updates on the tables)."""
    batch_ = tf.compat.v1.data.make_one_shot_iterator(dataset(tf, stream, "ids", tf.int32).prefetch(2)).get_next()
    tables = [tf.compat.v1.get_variable(f"static/{name}", [int(size), DIM],
                                        initializer=tf.compat.v1.truncated_normal_initializer(stddev=STDDEV, seed=i))
              for i, (name, size) in enumerate(zip(FIELDS, stream["sizes"]))]
    embeddings = [tf.nn.embedding_lookup(table, batch_[name]) for table, name in zip(tables, FIELDS)]
    logit = mlp_logit(tf, embeddings, batch_["dense"])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch_["label"], logits=logit))
    dense_vars = [v for v in tf.compat.v1.trainable_variables() if all(v is not t for t in tables)]
    return tf.group(
        tf.compat.v1.train.AdagradOptimizer(SPARSE_LR, INITIAL_ACCUMULATOR).minimize(loss, var_list=tables),
        tf.compat.v1.train.AdagradOptimizer(DENSE_LR, INITIAL_ACCUMULATOR).minimize(loss, var_list=dense_vars))


def mxrec_graph(tf, mx, stream: dict):
    """The TF1 train op of the same model through mxRec's API (mxrec_ref.tf as ``mx``, already
    ``mx.init(use_dynamic_expansion=True)``): one create_table and one FeatureSpec per field, the
    insert function on the dataset, sparse_lookup, tf.gradients on the tables' variables, Adagrad by
    address on the tables and TF's Adagrad on the MLP (mxRec's script structure)."""
    tables = [mx.create_table(tf.int64, DIM, name, tf.compat.v1.truncated_normal_initializer(stddev=STDDEV, seed=i),
                              device_vocabulary_size=max(1, int(size) // 16))
              for i, (name, size) in enumerate(zip(FIELDS, stream["sizes"]))]
    specs = [mx.FeatureSpec(name, table_name=name, index_key=name) for name in FIELDS]
    insert = mx.get_asc_insert_func(tgt_key_specs=specs)
    batch_ = tf.compat.v1.data.make_one_shot_iterator(
        dataset(tf, stream, "keys", tf.int64).map(insert).prefetch(2)).get_next()
    embeddings = [tf.reshape(mx.sparse_lookup(table, spec, batch=batch_, is_train=True), [-1, DIM])
                  for table, spec in zip(tables, specs)]
    logit = mlp_logit(tf, embeddings, batch_["dense"])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch_["label"], logits=logit))
    dense_vars, sparse_vars = mx.get_dense_and_sparse_variable()
    sparse_optimizer = mx.optimizers.adagrad_by_addr.create_hash_optimizer_by_address(
        learning_rate=SPARSE_LR, initial_accumulator_value=INITIAL_ACCUMULATOR)
    return tf.group(
        sparse_optimizer.apply_gradients(zip(tf.gradients(loss, sparse_vars), sparse_vars)),
        tf.compat.v1.train.AdagradOptimizer(DENSE_LR, INITIAL_ACCUMULATOR).minimize(loss, var_list=dense_vars))


# ------------------------------------------------------------ bench/peers/ (one model per process)
WARM_STEPS = 4                # the pytest-benchmark and the peers' workers both: 4 + 60 = 64 steps
TIMED_STEPS = 60


def save_stream(stream: dict, path) -> None:
    """For the peers' workers: one stream, made once by run.py, read by every process."""
    np.savez(path, **stream)


def load_stream(path) -> dict:
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


def time_steps(step, warm: int = WARM_STEPS, timed: int = TIMED_STEPS) -> dict:
    """``warm`` untimed calls of ``step`` (tracing, first admissions), then ``timed`` timed ones:
    the seconds of each, and examples/s over all of them (the tables keep growing throughout)."""
    import time

    for _ in range(warm):
        step()
    seconds = []
    for _ in range(timed):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return {"step_s": seconds, "examples_per_s": timed * BATCH / sum(seconds)}
