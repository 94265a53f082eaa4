"""Property tests of the store's invariants on random call sequences, each
backend on its own (the backends are compared by machines.py, run in test_backends.py)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from mxrec_ref import MxrecError, open_store

from .checks import assert_unchanged, snapshot
from .strategies import gradients, key_batches, optimizers, table_configs

operations = st.lists(
    st.one_of(
        st.tuples(st.just("train"), key_batches()),
        st.tuples(st.just("eval"), key_batches()),
        st.tuples(st.just("apply"), st.integers(0, 2**16)),
        st.tuples(st.just("evict"), st.integers(0, 4)),
        st.tuples(st.just("save_load"), st.none()),
    ),
    max_size=14,
)


def _fit_keys(config, batch):
    return batch[(batch >= config.key_min) & (batch <= config.key_max)]


@given(config=table_configs(), optimizer=optimizers, ops=operations)
def test_invariants_hold_after_every_call(backend, tmp_path_factory, config, optimizer, ops):
    """LKP-1, LKP-2, LKP-3, EXP-1, STAT-4 and CKPT-2 on random call sequences
    (empty batches, duplicates, extreme keys, padding, evictions, save/load)."""
    store = open_store(config, optimizer, backend=backend)
    last = None
    step = 0
    loaded = False
    for op, arg in ops:
        if op in ("train", "eval"):
            batch = _fit_keys(config, arg)
            try:
                result = store.lookup(batch, train=op == "train", step=step)
            except MxrecError:
                continue
            emb = result.embeddings()
            assert emb.shape == batch.shape + (config.dim,)
            assert np.array_equal(result.unique_keys[result.inverse], batch)
            assert len(set(result.unique_keys.tolist())) == result.n_unique
            for key, admitted, row in zip(result.unique_keys, result.admitted, result.rows):
                if not admitted:
                    assert np.array_equal(row, config.default_row())
            if op == "train":
                last = result
                step += 1
        elif op == "apply" and last is not None:
            store.apply_gradients(last, gradients(len(last.unique_keys), config.dim, arg), step=step)
        elif op == "evict" and config.eviction_enabled:
            evicted = store.evict(now=step + arg)
            assert np.all(evicted[1:] > evicted[:-1])   # ascending (np.diff overflows on extreme keys)
            assert not np.isin(evicted, store.export().keys).any()
        elif op == "save_load":
            before = store.export()
            directory = tmp_path_factory.mktemp("ckpt")
            store.save(directory)
            store = open_store(config, optimizer, backend=backend)
            store.load(directory)
            assert store.export().differences(before) == []
            last, loaded = None, True
        handles = store.row_handles(store.export().keys)
        assert len(set(handles.tolist())) == store.size() and (handles >= 0).all()
        assert store.size() <= store.capacity()
        stats = store.stats()
        if not loaded:
            assert stats["size"] == stats["admitted"] - stats["evicted"]


@given(config=table_configs(), first=key_batches(), bad=st.sampled_from(
    ["float_keys", "grad_shape", "grad_nan", "pad_overflow", "negative_step", "int32_overflow"]))
def test_bad_input_leaves_store_unchanged(backend, config, first, bad):
    """CON-4: every rejected call leaves export(), stats() and capacity() as they were."""
    store = open_store(config, backend=backend)
    try:
        result = store.lookup(_fit_keys(config, first), step=0)
    except MxrecError:
        result = store.lookup(np.zeros(0, np.int64), step=0)
    before = snapshot(store)
    calls = {
        "float_keys": lambda: store.lookup(first.astype(np.float64), step=1),
        "grad_shape": lambda: store.apply_gradients(result, np.ones((len(result.unique_keys) + 1, config.dim)),
                                                    step=1),
        "grad_nan": lambda: store.apply_gradients(np.concatenate([result.unique_keys, [1]]),
                                                  np.full((len(result.unique_keys) + 1, config.dim), np.nan), step=1),
        "pad_overflow": lambda: store.lookup(np.arange(5), step=1, pad_to=4),
        "negative_step": lambda: store.lookup(np.arange(3), step=-1),
        "int32_overflow": lambda: store.lookup(np.array([2**40, 1]), step=1) if config.key_dtype == "int32"
        else store.lookup(np.array([1.5]), step=1),
    }
    with pytest.raises(MxrecError):
        calls[bad]()
    assert_unchanged(store, before)
