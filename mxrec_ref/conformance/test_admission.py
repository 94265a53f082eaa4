"""Feature admission (spec/admission.md)."""
import numpy as np
import pytest

from mxrec_ref import UsageError

from .checks import keys, make_store


def test_adm_8_worked_example_from_mxrec(backend):
    store = make_store(backend, device_vocabulary_size=16, access_threshold=2, faae_coefficient=1)
    a = store.lookup(keys(11, 11, 33, 44, 11, 55, 88, 55), counts=[1, 2, 1, 3, 1, 1, 4, 1], step=0)
    valid_a = np.where(a.admitted[a.inverse], a.unique_keys[a.inverse], -1)
    assert valid_a.tolist() == [11, 11, -1, 44, 11, 55, 88, 55]
    b = store.lookup(keys(11, 12, 33, 21, 11, 12), counts=[1, 2, 1, 1, 2, 3], step=1)
    valid_b = np.where(b.admitted[b.inverse], b.unique_keys[b.inverse], -1)
    assert valid_b.tolist() == [11, 12, 33, -1, 11, 12]


def test_adm_1_count_adds_coefficient_times_occurrences(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=100, faae_coefficient=3)
    store.lookup(keys(7, 7, 8), step=4)
    store.lookup(keys(7), step=6)
    state = store.export()
    assert state.pending_keys.tolist() == [7, 8]
    assert state.pending_counts.tolist() == [9, 3]
    assert state.pending_last_seen.tolist() == [6, 4]


def test_adm_2_crossing_access_gets_its_row(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=3)
    assert store.lookup(keys(5), step=0).admitted.tolist() == [False]
    assert store.lookup(keys(5), step=1).admitted.tolist() == [False]
    third = store.lookup(keys(5), step=2)
    assert third.admitted.tolist() == [True] and third.rows.any()
    assert store.size() == 1


def test_adm_3_admitted_keys_keep_counting(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2)
    store.lookup(keys(5, 5), step=0)
    store.lookup(keys(5, 5, 5), step=1)
    assert store.export().counts.tolist() == [5]


def test_adm_4_pending_key_has_no_row_and_drops_gradient(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2)
    result = store.lookup(keys(1, 2, 2), step=0)
    assert store.row_handles(keys(1, 2)).tolist() == [-1, 0]
    assert store.stats()["pending"] == 1
    assert store.apply_gradients(result, np.ones((2, 4)), step=0) == 1
    assert store.stats()["grad_rows_dropped"] == 1


def test_adm_5_default_value_for_rejected_keys(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2, serving_default_value=[1, 2, 3, 4])
    train = store.lookup(keys(1), step=0)
    evaluation = store.lookup(keys(1, 2), train=False)
    assert train.rows.tolist() == [[1, 2, 3, 4]]
    assert evaluation.rows.tolist() == [[1, 2, 3, 4]] * 2


def test_adm_6_padding_key_never_counted(backend):
    store = make_store(backend, device_vocabulary_size=8)
    result = store.lookup(keys(-1, -1, 3), step=0)
    assert result.admitted.tolist() == [False, True]
    assert not result.rows[0].any()
    state = store.export()
    assert -1 not in state.keys.tolist() and -1 not in state.pending_keys.tolist()


def test_adm_7_counts_saturate(backend):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=2**31 - 1, faae_coefficient=2**31 - 1)
    for step in range(3):
        store.lookup(keys(1), counts=[2**31 - 1], step=step)
    assert store.export().counts.tolist() == [2**63 - 1]


def test_adm_2_admission_off_admits_on_first_access(backend):
    for threshold in (None, -1, 0, 1):
        store = make_store(backend, device_vocabulary_size=8, access_threshold=threshold)
        assert store.lookup(keys(4), step=0).admitted.tolist() == [True]


def test_adm_9_set_threshold_at_run_time(backend):
    store = make_store(backend, device_vocabulary_size=16, access_threshold=3)
    store.lookup(keys(1, 1), step=0)                      # count 2: pending
    store.set_threshold(2)
    assert store.lookup(keys(1), step=1).admitted.tolist() == [True]   # 3 >= 2
    store.lookup(keys(4), step=2)
    store.set_threshold(0)                                # counting off
    store.lookup(keys(4, 4, 4, 7), step=3)
    state = store.export()
    assert state.pending_counts.tolist() == [1, 0]        # 4 frozen at 1; 7 entered with 0
    assert store.size() == 1
    store.set_threshold(1)                                # counting on, everyone admitted on access
    assert store.lookup(keys(7), step=4).admitted.tolist() == [True]
    with pytest.raises(UsageError, match="threshold"):
        store.set_threshold(-1)
