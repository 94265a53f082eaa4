"""Hot Embedding, rule by rule (spec/hot.md), on every backend."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from mxrec_ref import ConfigError, MxrecError, TableConfig, open_store

from .checks import keys
from .strategies import gradients, key_batches, optimizers, table_configs


def test_hot_1_sizes_and_the_update_step_are_validated(backend, monkeypatch):
    config = TableConfig("t", dim=16)
    assert open_store(config, backend=backend).engine.hot_capacity == 2**20 // 64
    for bad in ("0", "-3", "ten", "2147483648"):
        monkeypatch.setenv("HOT_EMB_UPDATE_STEP", bad)
        with pytest.raises(ConfigError, match="'t': HOT_EMB_UPDATE_STEP"):
            open_store(config, backend=backend)
    monkeypatch.delenv("HOT_EMB_UPDATE_STEP")
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="'t': hot_rows"):
            open_store(config, backend=backend, hot_rows=bad)


def test_hot_2_the_most_frequent_keys_are_chosen_every_n_training_lookups(backend, monkeypatch):
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "3")
    store = open_store(TableConfig("t", dim=2, device_vocabulary_size=100), backend=backend, hot_rows=2)
    store.lookup(keys(5, 5, 5, 7, 7, 9, 9, 1), step=0)
    store.lookup(keys(1), train=False)                      # evaluation lookups do not count
    store.lookup(keys(3), step=1)
    assert store.stats()["hot_refreshes"] == 0
    store.lookup(keys(8), step=2)                           # the third training lookup refreshes
    assert (store.stats()["hot_refreshes"], store.stats()["hot_rows"]) == (1, 2)
    before = store.stats()["hot_hit_positions"]
    store.lookup(keys(5, 7, 9, 5, -1), train=False)         # hot: 5 (count 3), 7 (2; 9 loses the tie)
    assert store.stats()["hot_hit_positions"] - before == 3
    for step in range(3, 6):
        store.lookup(keys(9, 9), step=step)
    assert store.stats()["hot_refreshes"] == 2              # 9 (count 8) now leads
    before = store.stats()["hot_hit_positions"]
    store.lookup(keys(9, 7, 5), train=False)
    assert store.stats()["hot_hit_positions"] - before == 2


def test_hot_2_a_key_leaves_the_hot_set_with_its_row(backend, monkeypatch):
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "1")
    store = open_store(TableConfig("t", dim=2, device_vocabulary_size=100, access_threshold=0,
                                   eviction_threshold=2), backend=backend, hot_rows=4)
    store.lookup(keys(1, 2), step=0)
    store.lookup(keys(2), step=3)
    assert store.stats()["hot_rows"] == 2
    store.evict()
    assert store.stats()["hot_rows"] == 1
    result = store.lookup(keys(1), train=False)
    assert not result.admitted[0]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("train"), key_batches(max_size=30)),
        st.tuples(st.just("eval"), key_batches(max_size=30)),
        st.tuples(st.just("apply"), st.integers(0, 2**16)),
        st.tuples(st.just("evict"), st.integers(0, 3)),
        st.tuples(st.just("save_load"), st.none()),
    ),
    max_size=16,
)


@given(config=table_configs(), optimizer=optimizers, ops=operations, step_every=st.integers(1, 3),
       hot_rows=st.integers(1, 6))
def test_hot_3_results_are_the_same_with_the_hot_block_on_or_off(backend, tmp_path_factory, monkeypatch,
                                                                   config, optimizer, ops, step_every, hot_rows):
    """HOT-3, HOT-4: identical results, exports and statistics (but hot_*)."""
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", str(step_every))
    on = open_store(config, optimizer, backend=backend, hot_rows=hot_rows)
    off = open_store(config, optimizer, backend=backend, hot_rows=0)
    folder = tmp_path_factory.mktemp("hot")
    last, step = None, 0
    for op, arg in ops:
        if op in ("train", "eval"):
            batch = arg[(arg >= config.key_min) & (arg <= config.key_max)]
            outcome = []
            for store in (on, off):
                try:
                    outcome.append(store.lookup(batch, train=op == "train", step=step))
                except MxrecError as exc:
                    outcome.append(str(exc))
            a, b = outcome
            if isinstance(a, str) or isinstance(b, str):
                assert a == b
                continue
            assert np.array_equal(a.rows.view(np.uint32), b.rows.view(np.uint32))
            assert a.admitted.tolist() == b.admitted.tolist()
            if op == "train":
                last, step = (a, b), step + 1
        elif op == "apply" and last is not None:
            grads = gradients(len(last[0].unique_keys), config.dim, arg)
            assert on.apply_gradients(last[0], grads, step=step) == off.apply_gradients(last[1], grads, step=step)
        elif op == "evict" and config.eviction_enabled:
            assert on.evict(now=step + arg).tolist() == off.evict(now=step + arg).tolist()
        elif op == "save_load":
            on.save(folder / "on")
            on.load(folder / "on")
            off.load(folder / "on")
            last = None
        assert on.export().differences(off.export()) == []
        stats_on, stats_off = on.stats(), off.stats()
        assert {k: v for k, v in stats_on.items() if not k.startswith("hot_")} == \
            {k: v for k, v in stats_off.items() if not k.startswith("hot_")}
        assert stats_off["hot_rows"] == stats_off["hot_hit_positions"] == 0
        assert stats_on["hot_rows"] <= min(hot_rows, stats_on["size"])
        assert stats_on["hot_hit_positions"] <= stats_on["key_positions"]


def test_hot_4_the_hit_ratio_is_high_on_skewed_keys(backend, monkeypatch):
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "2")
    store = open_store(TableConfig("t", dim=4, device_vocabulary_size=10_000), backend=backend, hot_rows=64)
    rng = np.random.default_rng(0)
    for step in range(6):
        store.lookup(np.minimum(rng.zipf(1.3, size=2000), 5000), step=step)
    stats = store.stats()
    before = stats["hot_hit_positions"], stats["key_positions"]
    store.lookup(np.minimum(rng.zipf(1.3, size=2000), 5000), train=False)
    stats = store.stats()
    ratio = (stats["hot_hit_positions"] - before[0]) / (stats["key_positions"] - before[1])
    assert 0.5 < ratio < 1.0
