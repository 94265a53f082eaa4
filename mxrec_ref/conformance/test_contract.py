"""The store contract (spec/contract.md): inputs, errors, failed calls, the clock, export and results."""
import numpy as np
import pytest

from mxrec_ref import (SGD, Initializer, KeyInputError, TableConfig, UsageError, available_backends, open_store)

from .checks import assert_unchanged, keys, make_store, snapshot


def test_con_1_new_store_is_empty(backend):
    store = make_store(backend, device_vocabulary_size=7)
    assert store.size() == 0 and store.capacity() == 7
    state = store.export()
    assert state.keys.size == 0 and state.pending_keys.size == 0 and state.clock is None
    assert isinstance(store.optimizer, SGD)
    assert backend in available_backends()


def test_con_1_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        open_store(TableConfig("t", dim=2), backend="gpu")


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), ["a", "b"], np.array([True]), object()])
def test_con_2_non_integer_keys_rejected(backend, bad):
    store = make_store(backend, device_vocabulary_size=8)
    with pytest.raises(KeyInputError, match=r"table 't': keys: must be integers"):
        store.lookup(bad, step=0)


def test_con_2_keys_outside_int32_rejected(backend):
    store = make_store(backend, key_dtype="int32", device_vocabulary_size=8)
    with pytest.raises(KeyInputError, match="key 2147483648 is outside"):
        store.lookup(np.array([1, 2**31]), step=0)
    store.lookup(np.array([-2**31, 2**31 - 1], dtype=np.int64), step=0)
    assert store.size() == 2


def test_con_2_accepts_lists_uint_and_eager_tensors(backend):
    import tensorflow as tf

    store = make_store(backend, device_vocabulary_size=8)
    a = store.lookup([[3, 4], [4, 5]], step=0)
    b = store.lookup(np.array([3, 4], dtype=np.uint16), train=False)
    c = store.lookup(tf.constant([5, 3], dtype=tf.int64), train=False)
    assert a.inverse.shape == (2, 2)
    assert np.array_equal(b.rows, a.rows[:2]) and np.array_equal(c.rows, a.rows[[2, 0]])


def test_con_2_store_does_not_alias_caller_memory(backend):
    store = make_store(backend, device_vocabulary_size=8)
    batch = keys(1, 2, 3)
    result = store.lookup(batch, step=0)
    batch[:] = 99
    assert result.unique_keys.tolist() == [1, 2, 3]
    assert store.export().keys.tolist() == [1, 2, 3]


def test_con_2_uncopied_inputs_are_neither_kept_nor_frozen(backend):
    """Contiguous int64 keys and float32 gradients are read in place (no copy): the result shares no
    memory with them, they stay writeable (CON-9's read-only marking stops at the store's own arrays),
    and changing them after the call changes nothing in the store."""
    store = make_store(backend, SGD(learning_rate=1.0), device_vocabulary_size=8, dim=2,
                       initializer=Initializer(kind="constant", value=0.5))
    batch = keys(1, 2, 3, 2)
    result = store.lookup(batch, step=0)
    for name in ("unique_keys", "rows", "inverse", "admitted"):
        assert not np.shares_memory(getattr(result, name), batch), name
    assert batch.flags.writeable
    grads = np.ones((3, 2), dtype=np.float32)
    store.apply_gradients(batch[:3], grads, step=0)
    before = store.export()
    batch[:] = 7
    grads[:] = 100.0
    assert store.export().differences(before) == []
    assert before.values.tolist() == [[-0.5, -0.5]] * 3


def test_con_3_errors_name_table_and_parameter(backend):
    store = make_store(backend, name="clicks", device_vocabulary_size=2)
    with pytest.raises(UsageError, match=r"^table 'clicks': step: "):
        store.lookup(keys(1), step=None)
    with pytest.raises(UsageError, match=r"^table 'clicks': step: must be an integer"):
        store.lookup(keys(1), step=1.5)
    with pytest.raises(UsageError, match=r"^table 'clicks': train: "):
        store.lookup(keys(1), train="yes", step=0)


@pytest.mark.parametrize("thresholds", [True, False], ids=["admission-eviction", "plain"])
def test_con_4_failed_calls_change_nothing(backend, thresholds):
    extra = dict(access_threshold=2, eviction_threshold=3) if thresholds else {}
    store = make_store(backend, device_vocabulary_size=4, **extra)
    store.lookup(keys(1, 1, 2, 3), step=0)
    before = snapshot(store)
    for call in (lambda: store.lookup(keys(10, 10, 11, 11, 12, 12, 13, 13), step=1),  # capacity
                 lambda: store.lookup(np.array([1.5]), step=1),
                 lambda: store.lookup(keys(5, 6, 7), step=1, pad_to=2),
                 lambda: store.lookup(keys(1), step=1, timestamp=5),             # clock source
                 lambda: store.apply_gradients(keys(1), np.ones((1, 3)), step=1),
                 lambda: store.apply_gradients(keys(1), np.full((1, 4), np.nan), step=1),
                 lambda: store.evict(now=-2**63)):
        with pytest.raises(Exception):
            call()
        assert_unchanged(store, before)


def test_con_5_clock_is_max_step_or_timestamp(backend):
    store = make_store(backend, device_vocabulary_size=8)
    assert store.table_clock() == (None, None)
    store.lookup(keys(1), step=5)
    store.lookup(keys(2), step=3)       # a late batch does not move the clock back
    state = store.export()
    assert (state.clock, state.clock_source) == (5, "step") == store.table_clock()
    assert state.last_seen.tolist() == [5, 5]
    store.lookup(keys(3), train=False, step=100)
    assert store.export().clock == 5
    stamped = make_store(backend, device_vocabulary_size=8)
    stamped.lookup(keys(1), step=0, timestamp=1_700_000_000)
    with pytest.raises(UsageError, match="clock is the timestamp"):
        stamped.lookup(keys(1), step=1)
    assert stamped.export().clock_source == "timestamp"
    assert stamped.table_clock() == (1_700_000_000, "timestamp")


def test_con_6_export_is_sorted_and_complete(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2)
    store.lookup(keys(9, 9, 4, 7, 7, 1), step=2)
    state = store.export()
    assert state.keys.tolist() == [7, 9]
    assert state.pending_keys.tolist() == [1, 4]
    assert state.counts.tolist() == [2, 2] and state.pending_counts.tolist() == [1, 1]
    assert state.values.dtype == np.float32 and state.values.shape == (2, 4)


def test_con_9_apply_needs_training_result_of_this_store(backend):
    a, b = make_store(backend, device_vocabulary_size=8), make_store(backend, device_vocabulary_size=8)
    result = a.lookup(keys(1), step=0)
    with pytest.raises(UsageError, match="another store"):
        b.apply_gradients(result, np.ones((1, 4)), step=0)
    with pytest.raises(UsageError, match="evaluation lookup"):
        a.apply_gradients(a.lookup(keys(1), train=False), np.ones((1, 4)), step=0)


def test_con_9_lookup_results_are_read_only(backend):
    """A caller cannot point a result's gradients at keys it never looked up."""
    store = make_store(backend, device_vocabulary_size=8)
    result = store.lookup(keys(1, 2, 1), step=0)
    for name in ("unique_keys", "rows", "inverse", "admitted"):
        array = getattr(result, name)
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0
        with pytest.raises(ValueError):
            array.flags.writeable = True
    assert store.apply_gradients(result, np.ones((2, 4)), step=0) == 2
    assert store.export().keys.tolist() == [1, 2]


@pytest.mark.parametrize("field,value", [("unique_keys", np.array([1.0, 2.0])),
                                         ("unique_keys", [1, 2]),
                                         ("admitted", np.array([1, 1]))])
def test_con_9_a_forged_result_is_rejected_alike(backend, field, value):
    import dataclasses

    messages = []
    for name in {backend, "ref"}:
        store = make_store(name, device_vocabulary_size=8)
        result = store.lookup(keys(1, 2), step=0)
        before = snapshot(store)
        forged = dataclasses.replace(result, **{field: value})
        with pytest.raises(UsageError, match=r"table 't': result: unique_keys must be int64") as info:
            store.apply_gradients(forged, np.ones((2, 4)), step=0)
        assert_unchanged(store, before)
        messages.append(str(info.value))
    assert len(set(messages)) == 1
