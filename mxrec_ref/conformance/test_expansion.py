"""Key -> row mapping, capacity and dynamic expansion (spec/expansion.md)."""
import numpy as np
import pytest

from mxrec_ref import CapacityError

from .checks import assert_unchanged, keys, make_store, snapshot


def test_exp_1_one_row_per_key(backend):
    store = make_store(backend, device_vocabulary_size=32)
    store.lookup(np.arange(20) * 7, step=0)
    handles = store.row_handles(np.arange(20) * 7)
    assert sorted(handles.tolist()) == list(range(20))
    assert store.size() == 20


def test_exp_2_fixed_capacity_overflow_names_size_and_changes_nothing(backend):
    store = make_store(backend, name="item", device_vocabulary_size=3)
    store.lookup(keys(1, 2), step=0)
    before = snapshot(store)
    with pytest.raises(CapacityError, match=r"table 'item': device_vocabulary_size: .*at least 4"):
        store.lookup(keys(3, 4, 1), step=1)
    assert_unchanged(store, before)
    store.lookup(keys(3, 1), step=1)
    assert store.size() == 3 and store.capacity() == 3


def test_exp_3_growth_policy_and_rows_unchanged(backend):
    store = make_store(backend, device_vocabulary_size=2, dynamic_expansion=True)
    first = store.lookup(keys(1, 2), step=0).rows.copy()
    assert store.capacity() == 2
    store.lookup(keys(3), step=1)
    assert store.capacity() == 4                       # doubled
    store.lookup(np.arange(100, 111), step=2)
    assert store.capacity() == 14                      # max(2*4, 3 + 11)
    assert store.stats()["growths"] == 2
    again = store.lookup(keys(1, 2), train=False).rows
    assert np.array_equal(first, again)


def test_exp_3_growth_past_many_doublings(backend):
    store = make_store(backend, device_vocabulary_size=1, dynamic_expansion=True, dim=2)
    for step in range(12):
        store.lookup(np.arange(step * 300, (step + 1) * 300), step=step)
    assert store.size() == 3600 and store.capacity() >= 3600
    assert np.array_equal(store.row_handles(np.arange(3600)), np.arange(3600))


def test_exp_4_placement_reuses_freed_rows_lifo(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=1, eviction_threshold=1)
    store.lookup(keys(10, 20, 30), step=0)            # rows 0, 1, 2
    store.lookup(keys(20), step=1)
    assert store.evict().tolist() == [10, 30]          # frees row 0, then row 2
    store.lookup(keys(40, 50, 60), step=2)
    assert store.row_handles(keys(40, 50, 60, 20)).tolist() == [2, 0, 3, 1]


def test_exp_5_row_handles_minus_one_for_unknown(backend):
    store = make_store(backend, device_vocabulary_size=8)
    store.lookup(keys(5), step=0)
    assert store.row_handles([5, 6, -1]).tolist() == [0, -1, -1]
