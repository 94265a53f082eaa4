"""Checkpoint format, save and load (spec/checkpoint.md)."""
import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mxrec_ref import (Adagrad, CapacityError, CheckpointError, Ftrl, LazyAdam, TableConfig, open_store)

from .helpers import assert_unchanged, keys, make_store, snapshot
from .strategies import gradients, key_batches, optimizers, table_configs


def _trained(backend, optimizer=None, **extra):
    extra.setdefault("device_vocabulary_size", 32)
    store = make_store(backend, optimizer or LazyAdam(learning_rate=0.1), access_threshold=2,
                       eviction_threshold=10, **extra)
    for step in range(3):
        result = store.lookup(keys(1, 1, 2, 3, 3, 40 + step, 2**62), step=step)
        store.apply_gradients(result, np.full((len(result.unique_keys), 4), 0.1 * (step + 1)), step=step)
    return store


def test_ckpt_1_layout_matches_mxrec(backend, tmp_path):
    store = _trained(backend)
    path = store.save(tmp_path)
    state = store.export()
    n = len(state.keys)
    assert np.array_equal(np.fromfile(f"{path}/key/slice.data", "<i8"), state.keys)
    assert np.fromfile(f"{path}/key/slice.attribute", "<i8").tolist() == [n, 8]
    assert np.fromfile(f"{path}/embedding/slice.attribute", "<i8").tolist() == [n, 4, 4]
    values = np.fromfile(f"{path}/embedding/slice.data", "<f4").reshape(n, 4)
    assert np.array_equal(values, state.values)
    momentum = np.fromfile(f"{path}/LazyAdam_momentum/slice.data", "<f4").reshape(n, 4)
    assert np.array_equal(momentum, state.slots["momentum"])
    feat = np.fromfile(f"{path}/feat_info/slice.data", "<i8").reshape(-1, 3)
    assert feat[:n, 0].tolist() == state.keys.tolist() and feat[n:, 0].tolist() == state.pending_keys.tolist()
    meta = json.loads(open(f"{path}/meta.json").read())
    assert meta["clock"] == 2 and meta["optimizer"]["kind"] == "LazyAdam"


@pytest.mark.parametrize("optimizer", [None, Adagrad(), Ftrl(l1_regularization_strength=0.01)])
def test_ckpt_2_round_trip_both_ways(backend, tmp_path, optimizer):
    store = _trained(backend, optimizer)
    store.save(tmp_path)
    for target in ("ref", "fast") if backend == "fast" else ("ref",):
        other = make_store(target, optimizer or LazyAdam(learning_rate=0.1), access_threshold=2,
                           eviction_threshold=10, device_vocabulary_size=32)
        other.load(tmp_path)
        assert other.export().differences(store.export()) == []


def test_ckpt_3_store_save_ignores_is_save(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=4, is_save=False)
    store.lookup(keys(1), step=0)
    store.save(tmp_path)
    assert (tmp_path / "t" / "meta.json").is_file()


def test_ckpt_4_save_replaces_whole_table(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=8)
    store.lookup(keys(1, 2, 3), step=0)
    store.save(tmp_path)
    store2 = make_store(backend, device_vocabulary_size=8)
    store2.lookup(keys(9), step=0)
    store2.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    fresh = make_store(backend, device_vocabulary_size=8)
    fresh.load(tmp_path)
    assert fresh.export().keys.tolist() == [9]


def test_ckpt_5_bad_checkpoints_change_nothing(backend, tmp_path):
    _trained(backend).save(tmp_path / "good")
    store = _trained(backend)
    store.lookup(keys(77, 77), step=5)
    before = snapshot(store)
    with pytest.raises(CheckpointError, match=r"no table 'other'.*tables present: \['t'\]"):
        make_store(backend, name="other").load(tmp_path / "good")
    with pytest.raises(CheckpointError, match="dim: the checkpoint has dim 4"):
        make_store(backend, dim=8).load(tmp_path / "good")
    with pytest.raises(CheckpointError, match="optimizer"):
        make_store(backend, Adagrad()).load(tmp_path / "good")
    with pytest.raises(CapacityError, match="device_vocabulary_size"):
        small = open_store(TableConfig("t", dim=4, device_vocabulary_size=2, access_threshold=2,
                                       eviction_threshold=10), LazyAdam(learning_rate=0.1), backend=backend)
        small.load(tmp_path / "good")
    int32 = open_store(TableConfig("t", dim=4, key_dtype="int32", device_vocabulary_size=32, access_threshold=2,
                                   eviction_threshold=10), LazyAdam(learning_rate=0.1), backend=backend)
    with pytest.raises(CheckpointError, match="key_dtype"):
        int32.load(tmp_path / "good")
    data = tmp_path / "good" / "t" / "embedding" / "slice.data"
    intact = data.read_bytes()
    data.write_bytes(intact[:-4])
    with pytest.raises(CheckpointError, match=r"embedding/slice.data.*bytes"):
        store.load(tmp_path / "good")
    data.write_bytes(intact)
    (tmp_path / "good" / "t" / "LazyAdam_velocity" / "slice.attribute").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        store.load(tmp_path / "good")
    assert_unchanged(store, before)


def test_ckpt_6_loaded_rows_are_dense_in_key_order(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=1, eviction_threshold=1)
    store.lookup(keys(30, 10, 20), step=0)
    store.lookup(keys(20), step=1)
    store.evict()
    store.save(tmp_path)
    fixed = make_store(backend, device_vocabulary_size=8, access_threshold=1, eviction_threshold=1)
    fixed.load(tmp_path)
    assert fixed.row_handles(keys(20)).tolist() == [0] and fixed.capacity() == 8
    fixed.lookup(keys(5), step=2)
    assert fixed.row_handles(keys(5)).tolist() == [1]      # free list empty after load
    grown = make_store(backend, device_vocabulary_size=1, dynamic_expansion=True)
    grown.lookup(np.arange(5), step=0)
    grown.save(tmp_path / "g")
    again = make_store(backend, device_vocabulary_size=1, dynamic_expansion=True)
    again.load(tmp_path / "g")
    assert again.capacity() == 5


def test_ckpt_7_new_rows_after_load_start_from_initializer(backend, tmp_path):
    from mxrec_ref import initializers

    store = make_store(backend, device_vocabulary_size=8)
    store.lookup(keys(1), step=0)
    store.save(tmp_path)
    loaded = make_store(backend, device_vocabulary_size=8)
    loaded.load(tmp_path)
    row = loaded.lookup(keys(2), step=1).rows
    assert np.array_equal(row, initializers.initial_rows(loaded.config, keys(2)))


@given(config=table_configs(), optimizer=optimizers, plan=st.lists(st.tuples(
    key_batches(max_size=30), st.integers(0, 2**16), st.booleans(), st.sampled_from([None, "full", "delta"])),
    min_size=1, max_size=12))
def test_ckpt_9_base_plus_deltas_restores_what_a_full_save_holds(backend, tmp_path_factory, config, optimizer, plan):
    """CKPT-9: after any sequence of lookups, applies and evictions with full and
    incremental saves in between, loading a save's folder (its whole chain)
    gives exactly the state the store had when it saved."""
    root = tmp_path_factory.mktemp("chain")
    store = open_store(config, optimizer, backend=backend)
    saved = []
    for step, (batch, seed, evict, save) in enumerate(plan):
        batch = batch[(batch >= config.key_min) & (batch <= config.key_max)]
        try:
            result = store.lookup(batch, step=step)
            store.apply_gradients(result, gradients(len(result.unique_keys), config.dim, seed), step=step)
        except CapacityError:
            pass
        if evict and config.eviction_enabled:
            store.evict()
        if save is not None:
            folder = root / f"step-{step}"
            store.save(folder, incremental=save == "delta")
            saved.append((folder, store.export()))
    for folder, state in saved:
        for target in {backend, "ref"}:
            fresh = open_store(config, optimizer, backend=target)
            fresh.load(folder)
            assert fresh.export().differences(state) == []


def test_ckpt_9_delta_holds_only_changed_keys(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=64)
    store.lookup(np.arange(40), step=0)
    store.save(tmp_path / "base")
    store.lookup(keys(3, 100), step=1)                 # 3 changes (last-seen), 100 is new
    path = store.save(tmp_path / "delta", incremental=True)
    assert np.fromfile(f"{path}/key/slice.data", "<i8").tolist() == [3, 100]
    meta = json.loads(open(f"{path}/meta.json").read())
    assert meta["kind"] == "delta" and meta["previous"] == "../base"
    fresh = make_store(backend, device_vocabulary_size=64)
    fresh.load(tmp_path / "delta")
    assert fresh.export().differences(store.export()) == []
