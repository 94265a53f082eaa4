"""The engine's phases read rows late (mxrec_ref/engine.py): ``resolve`` records each unique key's row
handle and reads no row; ``gather`` reads the rows by those handles.  So a batch resolved ahead of an
earlier batch's apply (the key pipeline, issue 32) sees that apply: LKP-3 (a key holding a row gets
its stored values) holds at gather time, LKP-4 and ADM-5 (padding and keys without a row get the
default row) as before, and HOT-3 (hot keys' rows equal their block copies) lets gather read a hot
key by its row handle.  Under the facade (``Store.lookup``: resolve, then gather at once) nothing
changes; the conformance suite compares that serial behaviour between the backends."""
from __future__ import annotations

import numpy as np
import pytest

from mxrec_ref import Adagrad, TableConfig, open_store

DIM = 3


def _open(backend, hot_rows=None):
    with pytest.MonkeyPatch.context() as mp:    # HOT_EMB_UPDATE_STEP is read when the store opens
        mp.setenv("HOT_EMB_UPDATE_STEP", "1")
        return open_store(TableConfig("ahead", dim=DIM, device_vocabulary_size=64), Adagrad(0.1), backend=backend,
                          hot_rows=hot_rows)


def _resolve(store, keys, *, train, step, pad_to=None):
    return store.engine.resolve(np.asarray(keys, dtype=np.int64), (len(keys),), train=train, step=step,
                                timestamp=None, pad_to=pad_to, counts=None)


def _apply(store, keys, grads, step):
    keys = np.asarray(keys, dtype=np.int64)
    return store.engine.apply(keys, np.asarray(grads, dtype=np.float32), np.ones(len(keys), dtype=bool), step,
                              optimizer=store.optimizer)


@pytest.mark.parametrize("hot_rows", [None, 2])
@pytest.mark.parametrize("train", [True, False])
def test_lkp_3_a_batch_resolved_ahead_gathers_the_rows_an_apply_wrote_since(backend, hot_rows, train):
    """Resolve batch t+1, apply batch t's gradients to some of its keys, then gather t+1: the rows show
    the apply (the pipeline's order), for training and evaluation lookups, with and without a hot set."""
    store = _open(backend, hot_rows)
    store.apply_gradients(store.lookup(np.array([1, 2, 3]), step=0), np.ones((3, DIM), np.float32), step=0)
    store.lookup(np.array([2, 3]), step=1)          # 2 and 3 count most: the hot set, when there is one
    batch = [1, 2, 5, 3, -1, 2]
    resolved = _resolve(store, batch, train=train, step=2, pad_to=7)
    early = store.engine.gather(resolved).rows.copy()         # gather changes nothing: read again below
    assert _apply(store, [2, 3], np.full((2, DIM), 0.5), step=2) == 2
    late = store.engine.gather(resolved)
    now = store.lookup(np.array(batch), train=False, pad_to=7)  # the rows as they are now (LKP-5)
    assert late.unique_keys.tolist() == now.unique_keys.tolist() == [1, 2, 5, 3, -1, -1, -1]
    assert np.array_equal(late.rows, now.rows)
    assert not np.array_equal(late.rows[[1, 3]], early[[1, 3]])             # 2 and 3 moved ...
    assert np.array_equal(late.rows[[0, 2, 4, 5, 6]], early[[0, 2, 4, 5, 6]])  # ... nothing else did
    default = store.config.default_row()
    assert all(np.array_equal(late.rows[i], default) for i in (4, 5, 6))    # padding (LKP-4, ADM-5)
    if hot_rows:
        assert store.stats()["hot_rows"] == 2


def test_lkp_3_the_facade_lookup_is_resolve_then_gather(backend):
    """``Store.lookup`` gathers right after its own resolve: the rows are those of the store, and the
    same on both engines' phases called by hand."""
    store, twin = _open(backend), _open(backend)
    for step, batch in enumerate([[4, 5, 6], [5, 6, 7, 7], [4, -1, 8]]):
        result = store.lookup(np.array(batch), step=step, pad_to=5)
        by_hand = twin.engine.gather(_resolve(twin, batch, train=True, step=step, pad_to=5))
        assert np.array_equal(result.rows, by_hand.rows) and result.admitted.tolist() == by_hand.admitted.tolist()
        grads = np.arange(5 * DIM, dtype=np.float32).reshape(5, DIM) / 10
        store.apply_gradients(result, grads, step=step)
        keys = by_hand.unique_keys           # as the facade's apply_gradients passes a lookup result on
        twin.engine.apply(keys, grads, keys != -1, step, optimizer=twin.optimizer, handles=by_hand.row_handles)
    assert store.stats() == twin.stats()
    assert np.array_equal(store.export().values, twin.export().values)


def test_lkp_3_a_handle_whose_row_went_away_is_refused_at_gather(backend):
    """A resolved batch names rows by handle: a row freed since (here by eviction) is not read as if it
    were the key's; the gather raises instead (the pipeline must keep a batch's rows until its apply)."""
    store = open_store(TableConfig("ahead", dim=DIM, device_vocabulary_size=8, access_threshold=1,
                                   eviction_threshold=1), Adagrad(0.1),
                       backend=backend)
    resolved = _resolve(store, [1, 2], train=True, step=0)
    store.engine.evict(5)
    with pytest.raises(ValueError, match="names no row"):
        store.engine.gather(resolved)
