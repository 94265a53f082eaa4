"""Warm start against a model computed directly from the checkpoints' files
(spec/warmstart.md, WS-3 and WS-5)."""
import numpy as np
from hypothesis import given, strategies as st

from mxrec_ref import CapacityError, open_store
from mxrec_ref.checkpoint import read_table

from .strategies import gradients, key_batches, optimizers, table_configs


def _train(store, batches, seed):
    for step, batch in enumerate(batches):
        batch = batch[(batch >= store.config.key_min) & (batch <= store.config.key_max)]
        try:
            result = store.lookup(batch, step=step)
        except CapacityError:
            continue
        store.apply_gradients(result, gradients(len(result.unique_keys), store.config.dim, seed + step), step=step)


def _as_dicts(state):
    rows = {k: (v, {s: state.slots[s][i] for s in state.slots}, c, t) for i, (k, v, c, t) in
            enumerate(zip(state.keys.tolist(), state.values, state.counts.tolist(), state.last_seen.tolist()))}
    pending = dict(zip(state.pending_keys.tolist(), zip(state.pending_counts.tolist(),
                                                         state.pending_last_seen.tolist())))
    return rows, pending


@given(config=table_configs(), optimizer=optimizers, sources=st.lists(st.lists(key_batches(), max_size=3),
                                                                       min_size=1, max_size=3),
       target=st.lists(key_batches(), max_size=3), now=st.integers(0, 50))
def test_ws_5_paths_in_order_match_a_direct_model(backend, tmp_path_factory, config, optimizer, sources, target,
                                                  now):
    """Several checkpoints warm-started in order equal: the target's own keys,
    overwritten key by key with each checkpoint's rows and slots, counted as
    admitted, last seen at ``now`` (WS-3, WS-5)."""
    root = tmp_path_factory.mktemp("ws")
    folders = []
    for i, batches in enumerate(sources):
        source = open_store(config, optimizer, backend="ref")
        _train(source, batches, seed=i)
        source.save(root / f"path{i}")
        folders.append(root / f"path{i}")
    store = open_store(config, optimizer, backend=backend)
    _train(store, target, seed=99)
    rows, pending = _as_dicts(store.export())
    threshold = config.admit_threshold
    for folder in folders:                                   # the model: straight from the files
        saved = read_table(folder, config, optimizer)
        for i, key in enumerate(saved.keys.tolist()):
            old_count = rows[key][2] if key in rows else pending.get(key, (0, 0))[0]
            rows[key] = (saved.values[i], {s: saved.slots[s][i] for s in saved.slots},
                         max(old_count, int(saved.counts[i]), threshold), now)
            pending.pop(key, None)
    expected_size = len(rows)
    try:
        for folder in folders:
            store.warm_start(folder, now=now)
    except CapacityError:
        assert not config.dynamic_expansion and expected_size > config.table_capacity
        return
    state = store.export()
    assert state.keys.tolist() == sorted(rows)
    for i, key in enumerate(state.keys.tolist()):
        value, slots, count, seen = rows[key]
        assert np.array_equal(state.values[i].view(np.uint32), np.asarray(value).view(np.uint32))
        assert all(np.array_equal(state.slots[s][i], slots[s]) for s in slots)
        assert (int(state.counts[i]), int(state.last_seen[i])) == (count, seen)
    assert state.pending_keys.tolist() == sorted(pending)
