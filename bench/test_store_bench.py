"""Fast path vs the reference, vs TensorFlow's hash tables, vs numpy.take.

Each benchmark sets ``extra_info["ratio_group"]`` and ``["role"]``; bench/ratios.py
divides every member of a group by the group's ``candidate`` (the fast store),
using the minimum time of each (the least noisy statistic on a shared machine).
"""
from __future__ import annotations

import numpy as np
import pytest

from mxrec_ref import SGD, Adagrad, Initializer, TableConfig, open_store

from workloads import BATCH, DIM, UNIVERSE, all_keys, zipf_batches

ROUNDS = 8


def _config(**extra):
    extra.setdefault("device_vocabulary_size", 2 * UNIVERSE)
    return TableConfig("bench", dim=DIM, initializer=Initializer(kind="uniform", minval=-0.1, maxval=0.1), **extra)


def _tag(benchmark, group, role, **info):
    benchmark.extra_info.update(ratio_group=group, role=role, **info)


# ---------------------------------------------------------- fast vs ref
INSERT_BATCHES = zipf_batches(3, seed=1)


@pytest.mark.parametrize("store_backend", ["fast", "ref"])
def test_lookup_with_insert_stream(benchmark, store_backend):
    """Three 64k-position Zipf batches into an empty growing table: every
    batch inserts thousands of new keys (ratio target: ref/fast >= 50)."""
    def setup():
        store = open_store(_config(device_vocabulary_size=1024, dynamic_expansion=True), SGD(0.01), backend=store_backend)
        return (store,), {}

    def run(store):
        for step, batch in enumerate(INSERT_BATCHES):
            store.lookup(batch, step=step)

    _tag(benchmark, "insert: ref / fast", "candidate" if store_backend == "fast" else "reference")
    benchmark.pedantic(run, setup=setup, rounds=ROUNDS if store_backend == "fast" else 3)


# ------------------------------------------------ fast vs TF hash tables
PREFILL = all_keys()[: UNIVERSE // 2]          # the 500k most frequent ranks
LOOKUP_BATCHES = zipf_batches(ROUNDS + 1, seed=2)


@pytest.fixture(scope="module")
def prefilled_fast():
    store = open_store(_config(), SGD(0.01), backend="fast")
    for start in range(0, len(PREFILL), BATCH):
        store.lookup(PREFILL[start:start + BATCH], step=0)
    return store


def _rounds(benchmark, run):
    batches = iter(LOOKUP_BATCHES * 4)
    benchmark.pedantic(lambda: run(next(batches)), rounds=ROUNDS, warmup_rounds=1)


def test_fast_lookup_with_insert(benchmark, prefilled_fast):
    _tag(benchmark, "lookup-with-insert: TF / fast", "candidate")
    _rounds(benchmark, lambda batch: prefilled_fast.lookup(batch, step=1))


def _tf_table(kind: str):
    import tensorflow as tf

    if kind == "DenseHashTable":
        table = tf.lookup.experimental.DenseHashTable(tf.int64, tf.int64, default_value=-1,
                                                      empty_key=2**63 - 1, deleted_key=2**63 - 2)
    else:
        table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=-1)
    values = tf.Variable(tf.random.uniform((2 * UNIVERSE, DIM), -0.1, 0.1, seed=1))
    next_row = tf.Variable(0, dtype=tf.int64)

    @tf.function(jit_compile=False)
    def lookup_with_insert(keys):
        unique, inverse = tf.unique(keys)
        rows = table.lookup(unique)
        missing = tf.where(rows < 0)[:, 0]
        new_rows = next_row + tf.range(tf.size(missing, out_type=tf.int64), dtype=tf.int64)
        table.insert(tf.gather(unique, missing), new_rows)
        next_row.assign_add(tf.size(missing, out_type=tf.int64))
        rows = tf.tensor_scatter_nd_update(rows, missing[:, None], new_rows)
        return unique, tf.gather(values, rows), inverse

    for start in range(0, len(PREFILL), BATCH):
        lookup_with_insert(tf.constant(PREFILL[start:start + BATCH]))
    return lookup_with_insert


@pytest.mark.parametrize("kind", ["DenseHashTable", "MutableHashTable"])
def test_tf_lookup_with_insert(benchmark, kind):
    import tensorflow as tf

    lookup_with_insert = _tf_table(kind)
    _tag(benchmark, "lookup-with-insert: TF / fast", kind)
    _rounds(benchmark, lambda batch: [t.numpy() for t in lookup_with_insert(tf.constant(batch))])


# -------------------------------------------- fast vs the memory floor
@pytest.fixture(scope="module")
def full_fast():
    store = open_store(_config(), SGD(0.01), backend="fast")
    keys = all_keys()
    for start in range(0, len(keys), BATCH):
        store.lookup(keys[start:start + BATCH], step=0)
    return store


def test_fast_lookup_and_gather(benchmark, full_fast):
    """Keys -> per-position embeddings [batch, dim] on a 1M-key table."""
    _tag(benchmark, "lookup+gather: fast / numpy.take", "candidate",
         bytes_per_key=full_fast.bytes_per_key(), size=full_fast.size())
    _rounds(benchmark, lambda batch: full_fast.lookup(batch, train=False).embeddings())


def test_numpy_take_floor(benchmark, full_fast):
    """The same embeddings from precomputed row indices: the memory floor."""
    values = _rows_in_handle_order(full_fast)
    rows = {id(b): full_fast.row_handles(b) for b in LOOKUP_BATCHES}
    assert all((r >= 0).all() for r in rows.values())
    _tag(benchmark, "lookup+gather: fast / numpy.take", "numpy.take")
    _rounds(benchmark, lambda batch: np.take(values, rows[id(batch)], axis=0))


def _rows_in_handle_order(store) -> np.ndarray:
    """The store's rows laid out by row handle, as the fast path holds them."""
    state = store.export()
    handles = store.row_handles(state.keys)
    out = np.empty((handles.max() + 1, state.values.shape[1]), dtype=np.float32)
    out[handles] = state.values
    return out


# ------------------------------- training step with truncated-normal init
# Untagged (no ratio_group): timings for A/B runs between commits (bench/README.md, "Training step,
# store side"); they join the tracked ratios once bench/baseline.json is regenerated with them.
STEP_BATCHES = zipf_batches(24, seed=3, batch=8192)


@pytest.mark.parametrize("apply_by", ["result", "keys"])
def test_fast_train_step_truncated_normal(benchmark, apply_by):
    """lookup + apply_gradients over 8,192-key Zipf steps into an empty table (Adagrad, truncated-normal
    initial values): the store's part of a training step.  ``result`` passes the LookupResult (OPT-9:
    no merge, the lookup's row handles reused); ``keys`` passes its unique keys (merge and probe again)."""
    def setup():
        config = TableConfig("bench", dim=DIM, device_vocabulary_size=2 * UNIVERSE,
                             initializer=Initializer(stddev=0.05, seed=1))
        return (open_store(config, Adagrad(0.01), backend="fast"),), {}

    grads = {}

    def run(store):
        for step, batch in enumerate(STEP_BATCHES):
            result = store.lookup(batch, step=step)
            n = len(result.unique_keys)
            rows = grads.setdefault(n, np.full((n, DIM), 0.01, np.float32))
            store.apply_gradients(result if apply_by == "result" else np.array(result.unique_keys), rows, step=step)

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS)
