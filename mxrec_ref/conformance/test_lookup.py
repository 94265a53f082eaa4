"""Lookup results (spec/lookup.md)."""
import numpy as np
import pytest

from mxrec_ref import KeyInputError, UsageError

from .checks import assert_unchanged, keys, make_store, snapshot


def test_lkp_1_any_batch_shape_including_empty(backend):
    store = make_store(backend, device_vocabulary_size=64)
    for shape in [(0,), (5,), (2, 3), (2, 0, 4), (1, 1, 1)]:
        batch = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        result = store.lookup(batch, step=0)
        assert result.embeddings().shape == shape + (4,)
        assert result.rows.dtype == np.float32


def test_lkp_2_unique_first_occurrence_with_padding_key(backend):
    store = make_store(backend, device_vocabulary_size=8)
    batch = np.array([[5, -1, 3], [5, 2**63 - 1, -1]])
    result = store.lookup(batch, step=0)
    assert result.unique_keys.tolist() == [5, -1, 3, 2**63 - 1]
    assert result.inverse.tolist() == [[0, 1, 2], [0, 3, 1]]
    assert result.n_unique == 4
    assert np.array_equal(result.embeddings()[0, 0], result.embeddings()[1, 0])


def test_lkp_3_admitted_rows_are_stored_values(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2)
    result = store.lookup(keys(1, 1, 2), step=0)
    assert result.admitted.tolist() == [True, False]
    assert np.array_equal(result.rows[0], store.export().values[0])
    assert not result.rows[1].any()


def test_lkp_4_pad_to_send_count(backend):
    store = make_store(backend, device_vocabulary_size=8, serving_default_value=0.25)
    result = store.lookup(keys(3, 1, 3), step=0, pad_to=5)
    assert result.unique_keys.tolist() == [3, 1, -1, -1, -1]
    assert result.admitted.tolist() == [True, True, False, False, False]
    assert np.all(result.rows[2:] == np.float32(0.25)) and result.n_unique == 2
    with pytest.raises(UsageError, match="send_count"):
        store.lookup(keys(1, 2, 3), step=0, pad_to=2)


def test_lkp_5_eval_lookup_changes_nothing(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2)
    store.lookup(keys(1, 1, 2), step=0)
    before = store.export()
    result = store.lookup(keys(1, 2, 3, 3, 3), train=False, step=9)
    assert store.export().differences(before) == []
    assert result.admitted.tolist() == [True, False, False]
    assert np.array_equal(result.rows[0], before.values[0]) and not result.rows[1:].any()


def test_lkp_5_eval_lookup_of_unknown_keys_changes_nothing(backend):
    store = make_store(backend, device_vocabulary_size=8)
    store.lookup(keys(1, 2), step=0)
    before, stats = store.export(), store.stats()
    result = store.lookup(keys(1, 2, 3, 3), train=False, step=9)
    assert store.export().differences(before) == []
    assert {k: v for k, v in store.stats().items() if not k.endswith(("_lookups", "_positions"))} == \
        {k: v for k, v in stats.items() if not k.endswith(("_lookups", "_positions"))}
    assert result.admitted.tolist() == [True, True, False]
    assert np.array_equal(result.rows[:2], before.values) and not result.rows[2:].any()


def test_lkp_6_counts_weight_accesses(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=5)
    result = store.lookup(keys(1, 2, 1), counts=[2, 4, 3], step=0)
    assert result.admitted.tolist() == [True, False]
    assert store.export().pending_counts.tolist() == [4]
    with pytest.raises(KeyInputError, match="counts"):
        store.lookup(keys(1, 2), counts=[1], step=0)
    with pytest.raises(KeyInputError, match="counts"):
        store.lookup(keys(1, 2), counts=[1, 0], step=0)


@pytest.mark.parametrize("pad_to", [2**31, 2**40, 2**62, 2**28 + 1])
def test_lkp_4_a_pad_to_too_large_to_allocate_fails_first_alike(backend, pad_to):
    """pad_to is bounded (<= 2**31-1, pad_to x dim <= 2**30 floats) and checked
    before anything changes, with one message for every backend."""
    store = make_store(backend, device_vocabulary_size=4, dynamic_expansion=True)
    store.lookup(keys(1), step=0)
    before = snapshot(store)
    with pytest.raises(UsageError, match=rf"table 't': pad_to: must be in \[1, 2\*\*31-1\] .*got {pad_to} x 4") as info:
        store.lookup(keys(1, 2, 3, 4, 5), step=1, pad_to=pad_to)
    assert_unchanged(store, before)
    reference = make_store("ref", device_vocabulary_size=4, dynamic_expansion=True)
    with pytest.raises(UsageError) as ref_info:
        reference.lookup(keys(1, 2, 3, 4, 5), step=1, pad_to=pad_to)
    assert str(info.value) == str(ref_info.value)
    assert store.lookup(keys(1), step=1, pad_to=8).unique_keys.shape == (8,)
