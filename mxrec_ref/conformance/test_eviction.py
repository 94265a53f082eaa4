"""Feature eviction (spec/eviction.md)."""
import numpy as np
import pytest

from mxrec_ref import Adagrad, UsageError, initializers

from .checks import keys, make_store


def _store(backend, **extra):
    extra.setdefault("device_vocabulary_size", 16)
    return make_store(backend, access_threshold=2, eviction_threshold=5, **extra)


def test_evi_1_threshold_is_inclusive_and_covers_pending(backend):
    store = _store(backend)
    store.lookup(keys(1, 1, 2), step=0)         # 1 admitted, 2 pending
    store.lookup(keys(3, 3), step=3)
    assert store.evict(now=4).tolist() == []
    assert store.evict(now=5).tolist() == [1, 2]
    stats = store.stats()
    assert (stats["evicted"], stats["evicted_pending"], stats["size"]) == (1, 1, 1)


def test_evi_1_default_now_is_the_clock(backend):
    store = _store(backend)
    assert store.evict().tolist() == []          # no clock yet
    store.lookup(keys(1, 1), step=0)
    store.lookup(keys(2, 2), step=5)
    assert store.evict().tolist() == [1]


def test_evi_1_timestamps_as_clock(backend):
    store = _store(backend)
    store.lookup(keys(1, 1), step=0, timestamp=1000)
    store.lookup(keys(2, 2), step=1, timestamp=1004)
    assert store.evict().tolist() == []
    store.lookup(keys(2, 2), step=2, timestamp=1005)
    assert store.evict().tolist() == [1]


def test_evi_2_evicted_key_is_forgotten(backend):
    store = _store(backend)
    store.lookup(keys(1, 1), step=0)
    store.evict(now=100)
    state = store.export()
    assert state.keys.size == 0 and state.pending_keys.size == 0
    assert store.lookup(keys(1), step=101).admitted.tolist() == [False]   # counting restarts
    assert store.export().pending_counts.tolist() == [1]


def test_evi_3_returns_sorted(backend):
    store = _store(backend)
    store.lookup(keys(9, 9, 3, 3, 7, 7), step=0)
    assert store.evict(now=10).tolist() == [3, 7, 9]


def test_evi_4_reused_row_restarts_from_initializer(backend):
    store = make_store(backend, Adagrad(learning_rate=0.5), device_vocabulary_size=1,
                       access_threshold=1, eviction_threshold=1)
    result = store.lookup(keys(1), step=0)
    store.apply_gradients(result, np.ones((1, 4)), step=0)
    store.evict(now=1)
    fresh = store.lookup(keys(2), step=1)
    assert store.row_handles(keys(2)).tolist() == [0]
    expected = initializers.initial_rows(store.config, keys(2))
    assert np.array_equal(fresh.rows, expected)
    assert np.all(store.export().slots["accumulator"] == np.float32(0.9))


def test_evi_5_eviction_not_configured(backend):
    store = make_store(backend, device_vocabulary_size=4)
    with pytest.raises(UsageError, match="eviction_threshold"):
        store.evict(now=1)


def test_evi_6_eviction_with_dynamic_expansion(backend):
    store = make_store(backend, device_vocabulary_size=1, dynamic_expansion=True,
                       access_threshold=1, eviction_threshold=2)
    store.lookup(keys(1, 2, 3), step=0)
    store.lookup(keys(2), step=2)
    assert store.evict().tolist() == [1, 3]
    assert store.size() == 1 and store.capacity() == 3
