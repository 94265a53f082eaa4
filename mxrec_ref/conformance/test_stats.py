"""Statistics (spec/stats.md)."""
import numpy as np

from mxrec_ref import STAT_NAMES, CapacityError

from .checks import keys, make_store


def test_stat_1_names_and_order(backend):
    stats = make_store(backend, device_vocabulary_size=4).stats()
    assert tuple(stats) == STAT_NAMES
    assert all(isinstance(v, int) for v in stats.values())


def test_stat_2_failed_calls_do_not_count_and_load_keeps_counters(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=2)
    store.lookup(keys(1), step=0)
    try:
        store.lookup(keys(2, 3), step=1)
    except CapacityError:
        pass
    assert store.stats()["train_lookups"] == 1
    store.save(tmp_path)
    store.lookup(keys(2), step=2)
    store.load(tmp_path)
    stats = store.stats()
    assert stats["train_lookups"] == 2 and stats["size"] == 1


def test_stat_3_position_counters(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2)
    store.lookup(keys(1, 1, 2, -1, -1), step=0)
    store.lookup(keys(1, 5, -1), train=False)
    stats = store.stats()
    assert (stats["key_positions"], stats["padding_positions"], stats["default_positions"]) == (5, 3, 2)
    assert (stats["train_lookups"], stats["eval_lookups"]) == (1, 1)


def test_stat_3_position_counters_without_admission(backend):
    """Without a threshold only an evaluation lookup of an unknown key is answered with the default."""
    store = make_store(backend, device_vocabulary_size=8)
    store.lookup(keys(1, 1, 2, -1, -1), step=0)
    store.lookup(keys(1, 5, -1), train=False)
    stats = store.stats()
    assert (stats["key_positions"], stats["padding_positions"], stats["default_positions"]) == (5, 3, 1)
    assert (stats["train_lookups"], stats["eval_lookups"]) == (1, 1)


def test_stat_4_admitted_evicted_size(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=1, eviction_threshold=1)
    store.lookup(keys(1, 2, 3), step=0)
    store.lookup(keys(3), step=1)
    store.evict()
    stats = store.stats()
    assert (stats["admitted"], stats["evicted"], stats["size"]) == (3, 2, 1)
    assert stats["size"] == stats["admitted"] - stats["evicted"]


def test_stat_5_gradient_counters(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2)
    result = store.lookup(keys(1, 1, 2), step=0)
    store.apply_gradients(result, np.zeros((2, 4)), step=0)
    store.apply_gradients(keys(1, 1, 7), np.zeros((3, 4)), step=0)
    stats = store.stats()
    assert (stats["grad_applies"], stats["grad_rows_applied"], stats["grad_rows_dropped"]) == (2, 2, 2)


def test_stat_5_gradient_counters_without_admission(backend):
    """Without a threshold only a key that never had a row drops its gradient row."""
    store = make_store(backend, device_vocabulary_size=8)
    result = store.lookup(keys(1, 1, 2), step=0)
    store.apply_gradients(result, np.zeros((2, 4)), step=0)
    store.apply_gradients(keys(1, 1, 7), np.zeros((3, 4)), step=0)
    stats = store.stats()
    assert (stats["grad_applies"], stats["grad_rows_applied"], stats["grad_rows_dropped"]) == (2, 3, 1)
