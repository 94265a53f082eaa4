"""Hot Embedding in the fast path (spec/hot.md): the block changes nothing
observable but the hot_* statistics (HOT-3), refreshes when HOT-2 says, counts
hits as HOT-4 defines them -- as the reference does -- and the core keeps the
block consistent through every kernel and every way a row goes away."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import initialize, rule, run_state_machine_as_test

from mxrec_ref import SGD, Adagrad, ConfigError, Ftrl, LazyAdam, TableConfig, hot, open_store
from mxrec_ref.conformance.checks import call_capturing
from mxrec_ref.conformance.machines import StoreComparison
from mxrec_ref.conformance.strategies import gradients, initializers, table_configs
from mxrec_ref.fast.hot import hot_candidates as _hot_candidates

pytest.importorskip("mxrec_ref._fast")
from mxrec_ref import _fast  # noqa: E402
from mxrec_ref._fast import FastCore  # noqa: E402

HOT_STATS = ("hot_rows", "hot_refreshes", "hot_hit_positions")
# one of each kernel: sgd, adagrad, lazy_adam, ftrl_sqrt, ftrl_power
KERNELS = st.sampled_from([SGD(0.5, weight_decay=1e-3), Adagrad(0.3), LazyAdam(0.1, beta1=0.5, epsilon=1e-3),
                           Ftrl(0.5, l1_regularization_strength=0.01),
                           Ftrl(0.5, learning_rate_power=-0.7, l2_shrinkage_regularization_strength=0.05)])


@st.composite
def hot_configs(draw):
    """Tables whose keys are mostly admitted, so rows get hot, updated and evicted."""
    admission = draw(st.sampled_from([None, None, 1, 2]))
    return TableConfig(
        name="t", dim=draw(st.integers(1, 5)), key_dtype=draw(st.sampled_from(["int64", "int32"])),
        device_vocabulary_size=draw(st.integers(4, 40)), dynamic_expansion=draw(st.booleans()),
        access_threshold=admission,
        eviction_threshold=draw(st.sampled_from([None, 1, 3])) if admission is not None else None,
        faae_coefficient=draw(st.integers(1, 2)), initializer=draw(initializers),
        serving_default_value=draw(st.sampled_from([None, 0.5])))


def _open(config, optimizer, backend, hot_rows, step):
    with pytest.MonkeyPatch.context() as mp:    # HOT_EMB_UPDATE_STEP is read when the store opens
        mp.setenv(hot.UPDATE_STEP_VARIABLE, str(step))
        return open_store(config, optimizer, backend=backend, hot_rows=hot_rows)


def _without_hot(stats):
    return {k: v for k, v in stats.items() if k not in HOT_STATS}


def _check_block(store):
    """The core's hot block: live keys hold a row, the right one, and the block
    holds bit-for-bit the row's current values."""
    core = store.engine.core
    keys, values, rows = _fast._py_hot_block(core)
    assert core.hot_size == len(keys) == store.stats()["hot_rows"] <= store.engine.hot_capacity
    assert len(set(keys.tolist())) == len(keys)
    if len(keys):
        assert store.row_handles(keys).tolist() == rows.tolist()
        assert np.array_equal(_fast.copy_rows(core, rows, -1).view(np.uint32), values.view(np.uint32))
        assert _fast._py_hot_index_of(core, keys).tolist() == [_fast._py_hot_index_of(core, keys[i:i + 1])[0] for i in range(len(keys))]
        assert (_fast._py_hot_index_of(core, keys) >= 0).all()


class HotOnVersusOff(StoreComparison):
    """Three stores driven alike: the reference with a small hot block
    refreshed every 1..3 training lookups (the oracle), fast with the same
    block, and fast without one.  After every step: everything including hot_*
    equal between the reference and fast-with-block (HOT-4, BE-1), everything
    but hot_* equal for fast-without-block (HOT-3), and the fast block
    consistent.  ``used`` collects the largest hot_* counters seen, so the
    test can show the block was exercised."""

    def __init__(self, used: dict):
        super().__init__()
        self.used = used

    def teardown(self):
        if self.stores:
            for name in self.used:
                self.used[name] = max(self.used[name], self.stores[1].stats()[name])
        super().teardown()

    @initialize(config=st.one_of(hot_configs(), hot_configs(), table_configs()), optimizer=KERNELS,
                hot_rows=st.integers(1, 6), update_step=st.integers(1, 3))
    def open(self, config, optimizer, hot_rows, update_step):
        self.config, self.optimizer, self.hot_rows, self.update_step = config, optimizer, hot_rows, update_step
        self.stores = self.open_stores()

    def open_stores(self):
        return [_open(self.config, self.optimizer, "ref", self.hot_rows, self.update_step),
                _open(self.config, self.optimizer, "fast", self.hot_rows, self.update_step),
                _open(self.config, self.optimizer, "fast", 0, self.update_step)]

    def excluded_stats(self, index):
        return set(HOT_STATS) if index == 2 else set()

    def check_each_step(self, exports, stats):
        assert stats[2]["hot_rows"] == stats[2]["hot_hit_positions"] == 0
        _check_block(self.stores[1])

    @rule(pick=st.integers(0, 2**16), fraction=st.sampled_from([0.3, 1.0]))
    def tier_move(self, pick, fraction):
        """Rows leave for another tier and come back (drop_rows, put_rows):
        hot keys among them leave the hot set."""
        keys = self.stores[0].export().keys
        if not len(keys):
            return
        chosen = np.random.default_rng(pick).permutation(keys)[:max(1, int(len(keys) * fraction))]
        carried = [store.engine.rows_of(chosen) for store in self.stores]
        for store in self.stores:
            store.engine.drop_rows(chosen)
        self.agree()
        for store, (values, slots, counts, last_seen) in zip(self.stores, carried):
            store.engine.put_rows(chosen, values, slots, counts, last_seen)
        self.last = None


def test_hot_3_the_block_changes_nothing_but_hot_stats():
    """HOT-3 on the fast backend, and HOT-4 against the reference."""
    used = {"hot_hit_positions": 0, "hot_refreshes": 0, "hot_rows": 0}
    run_state_machine_as_test(lambda: HotOnVersusOff(used),
                              settings=settings(max_examples=50, stateful_step_count=25, deadline=None,
                                                derandomize=True))
    assert used["hot_refreshes"] > 0 and used["hot_rows"] > 0 and used["hot_hit_positions"] > 0, used


# ------------------------------------------------------------ by hand
def _store(backend="fast", hot_rows=2, step=3, optimizer=None, **config):
    config.setdefault("device_vocabulary_size", 64)
    return _open(TableConfig("t", dim=4, **config), optimizer or SGD(0.5), backend, hot_rows, step)


@pytest.mark.parametrize("which", ["fast", "ref"])
def test_hot_2_refresh_every_n_training_lookups_and_exact_hits(which):
    store = _store(which)
    train = np.array([1, 1, 1, 2, 2, 3, -1], dtype=np.int64)
    for i in range(1, 10):
        store.lookup(train, step=i)
        store.lookup(train, train=False)                      # evaluation lookups never refresh
        call_capturing(store, "lookup", train, step=i, pad_to=1)      # nor failed ones (send_count)
        stats = store.stats()
        assert stats["train_lookups"] == i and stats["hot_refreshes"] == i // 3
    stats = store.stats()
    # hot set {1, 2} from the 3rd training lookup on; each lookup has 5 positions of 1 or 2
    # (padding excluded): training lookups 4..9 and evaluation lookups 3..9
    assert stats["hot_rows"] == 2
    assert stats["hot_hit_positions"] == 5 * (6 + 7)
    before = stats["hot_hit_positions"]
    store.lookup(np.array([3, 3, 1, -1, 2, 7], dtype=np.int64), train=False)
    assert store.stats()["hot_hit_positions"] == before + 2
    store.lookup(np.array([3] * 40, dtype=np.int64), step=10)   # 3 overtakes 1 and 2 (no refresh yet)
    assert store.stats()["hot_hit_positions"] == before + 2
    store.lookup(np.array([3, 2], dtype=np.int64), step=11)
    store.lookup(np.array([3, 2], dtype=np.int64), step=12)     # 12th: refresh, counted with the old set
    assert store.stats()["hot_hit_positions"] == before + 4 and store.stats()["hot_refreshes"] == 4
    if which == "fast":
        assert _fast._py_hot_keys(store.engine.core).tolist() == [3, 1]      # counts: 3: 9+40+2, 1: 27, 2: 18+2


def test_hot_4_fast_and_ref_report_the_same_numbers_on_hand_made_sequences():
    rng = np.random.default_rng(3)
    for optimizer in (SGD(0.1), Adagrad(0.3), LazyAdam(0.05), Ftrl(0.2, learning_rate_power=-0.7)):
        stores = [_store(b, hot_rows=4, step=2, optimizer=optimizer, eviction_threshold=4, access_threshold=2)
                  for b in ("fast", "ref")]
        for i in range(40):
            batch = (rng.zipf(1.3, size=30) % 40 - 1).astype(np.int64)
            results = [s.lookup(batch, step=i) for s in stores]
            for s, r in zip(stores, results):
                s.apply_gradients(r, gradients(len(r.unique_keys), 4, i), step=i)
            for s in stores:
                s.lookup(batch[::-1], train=False)
                if i % 9 == 8:
                    s.evict()
            assert stores[0].stats() == stores[1].stats()
            assert stores[0].export().differences(stores[1].export()) == []
            _check_block(stores[0])
        assert stores[0].stats()["hot_hit_positions"] > 0


def test_hot_3_lookups_read_the_block():
    """White box: a hot index is answered from the block row it names."""
    store = _store(hot_rows=3, step=1)
    store.lookup(np.array([5, 5, 5, 6, 6, 7], dtype=np.int64), step=0)
    core = store.engine.core
    assert _fast._py_hot_keys(core).tolist() == [5, 6, 7]
    unique = np.array([5, 6, 7, 8], dtype=np.int64)
    hot_index = _fast._py_hot_index_of(core, unique)
    assert hot_index.tolist() == [0, 1, 2, -1]
    rows, admitted = _fast._py_lookup_eval(core, unique, 4, store.engine.default_row, hot_index)
    swapped, _ = _fast._py_lookup_eval(core, unique, 4, store.engine.default_row, np.array([2, 0, 1, -1], dtype=np.int32))
    assert np.array_equal(swapped[:3], rows[[2, 0, 1]]) and admitted.tolist() == [True, True, True, False]
    rows2, admitted2, index2 = _fast.gather(core, unique, 5, store.engine.default_row)
    assert np.array_equal(rows2[:4], rows) and index2.tolist() == hot_index.tolist() and not admitted2[4]
    with pytest.raises(ValueError, match="stale"):
        _fast._py_lookup_eval(core, unique, 4, store.engine.default_row, np.array([3, 0, 1, -1], dtype=np.int32))


@pytest.mark.parametrize("optimizer", [SGD(0.1, weight_decay=1e-3), Adagrad(0.3), LazyAdam(0.05),
                                       Ftrl(0.2), Ftrl(0.2, learning_rate_power=-0.7, l2_shrinkage_regularization_strength=0.1)],
                         ids=["sgd", "adagrad", "lazy_adam", "ftrl_sqrt", "ftrl_power"])
def test_hot_3_every_kernel_writes_through(optimizer):
    store = _store(hot_rows=3, step=1, optimizer=optimizer)
    result = store.lookup(np.array([1, 1, 1, 2, 2, 3, 4, 5, -1], dtype=np.int64), step=0)
    assert _fast._py_hot_keys(store.engine.core).tolist() == [1, 2, 3]
    for i in range(3):
        store.apply_gradients(result, gradients(len(result.unique_keys), 4, i), step=i)
        store.apply_gradients(np.array([2, 5, 2], dtype=np.int64), gradients(3, 4, 10 + i), step=i)
        _check_block(store)
    again = store.lookup(np.array([1, 2, 3], dtype=np.int64), train=False)
    assert np.array_equal(again.rows, store.export().values[:3])


# ------------------------------------------------------------ the core
def _core_with(keys, dim=2):
    core = FastCore(dim, [])
    keys = np.asarray(keys, dtype=np.int64)
    values = np.arange(len(keys) * dim, dtype=np.float32).reshape(len(keys), dim)
    _fast.put_rows(core, keys, np.ones(len(keys), np.int64), np.zeros(len(keys), np.int64), values, [], len(keys))
    return core, values


def _mix64(x: int) -> int:
    m = (1 << 64) - 1
    x &= m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def test_set_hot_rules_and_every_way_out():
    core, values = _core_with(range(100, 120))
    with pytest.raises(KeyError, match="holds no row"):
        _fast.set_hot(core, np.array([100, 999], dtype=np.int64))
    with pytest.raises(ValueError, match="repeated"):
        _fast.set_hot(core, np.array([100, 101, 100], dtype=np.int64))
    assert core.hot_size == 0 and _fast._py_hot_index_of(core, np.array([100], dtype=np.int64)) is None
    _fast.set_hot(core, np.array([105, 100, 119], dtype=np.int64))
    assert core.hot_size == 3 and _fast._py_hot_keys(core).tolist() == [105, 100, 119]
    assert np.array_equal(_fast._py_hot_block(core)[1], values[[5, 0, 19]])
    assert _fast._py_hot_index_of(core, np.array([119, 1, 105, 100, -1], dtype=np.int64)).tolist() == [2, -1, 0, 1, -1]
    _fast.remove_keys(core, np.array([100, 110], dtype=np.int64))           # eviction / a move to another tier
    assert core.hot_size == 2 and _fast._py_hot_keys(core).tolist() == [105, 119]
    assert _fast._py_hot_index_of(core, np.array([100], dtype=np.int64)).tolist() == [-1]
    _fast.put_rows(core, np.array([100], dtype=np.int64), np.ones(1, np.int64), np.zeros(1, np.int64),
                  np.zeros((1, 2), np.float32), [], 20)
    assert _fast._py_hot_keys(core).tolist() == [105, 119]                     # no key joins between refreshes
    assert core.memory_bytes()["hot_block"] > 0
    _fast.load_rows(core, 20, values, [])                                    # an import empties the set
    assert core.hot_size == 0 and core.memory_bytes()["hot_block"] == 0
    core.clear()
    assert core.hot_size == 0
    core, _ = _core_with(range(10))
    _fast.set_hot(core, np.arange(10, dtype=np.int64))
    core.clear()
    assert core.hot_size == 0 and _fast._py_hot_keys(core).tolist() == []
    _fast.set_hot(core, np.zeros(0, dtype=np.int64))
    assert core.hot_size == 0


def test_set_hot_rebuilds_when_both_buckets_are_full():
    """Keys whose two buckets are the same two of 8 (the map for 9 keys):
    they cannot all fit, so set_hot grows the map until they do."""
    keys = [k for k in range(200000) if (_mix64(k) & 7) < 2 and ((_mix64(k) >> 32) & 7) < 2][:9]
    assert len(keys) == 9
    core, values = _core_with(keys)
    _fast.set_hot(core, np.array(keys, dtype=np.int64))
    assert core.hot_size == 9
    assert _fast._py_hot_index_of(core, np.array(keys + [-5, 7], dtype=np.int64)).tolist() == list(range(9)) + [-1, -1]
    assert np.array_equal(_fast._py_hot_block(core)[1], values)
    for k in keys[::2]:
        _fast.remove_keys(core, np.array([k], dtype=np.int64))
    assert _fast._py_hot_keys(core).tolist() == keys[1::2]
    assert _fast._py_hot_index_of(core, np.array(keys, dtype=np.int64)).tolist() == [-1 if i % 2 == 0 else i for i in range(9)]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(counts=st.lists(st.sampled_from([-3, 0, 1, 1, 2, 2, 5, 2**40, 2**63 - 1]), min_size=1, max_size=60),
       n=st.integers(1, 70))
def test_refresh_candidates_choose_what_choose_hot_keys_chooses(counts, n):
    keys = np.arange(len(counts), dtype=np.int64)[::-1] * 7 - 50
    counts = np.array(counts, dtype=np.int64)
    core = FastCore(1, [])
    _fast.put_rows(core, keys, counts, np.zeros(len(keys), np.int64), np.zeros((len(keys), 1), np.float32), [], len(keys))
    direct = hot.choose_hot_keys(keys, counts, n)
    assert hot.choose_hot_keys(*_hot_candidates(*_fast.hot_candidates(core, n), n), n).tolist() == direct.tolist()


def test_hot_1_configuration_errors_match_the_reference():
    config = TableConfig("t", dim=4, device_vocabulary_size=8)
    for bad in (-1, 10**9 + 1, 1.5, True, "3"):
        for backend in ("fast", "ref"):
            with pytest.raises(ConfigError, match="hot_rows"):
                open_store(config, backend=backend, hot_rows=bad)
    for bad in ("0", "x", str(2**31)):
        for backend in ("fast", "ref"):
            with pytest.raises(ConfigError, match=hot.UPDATE_STEP_VARIABLE):
                _open(config, None, backend, None, bad)
    store = _open(config, None, "fast", None, 1)
    assert store.engine.hot_capacity == 2**20 // 16
    store.lookup(np.array([1, 2], dtype=np.int64), step=0)
    assert store.stats()["hot_rows"] == 2                     # fewer keys than the block holds: all of them
    off = _open(config, None, "fast", 0, 1)
    off.lookup(np.array([1, 2], dtype=np.int64), step=0)
    assert off.stats()["hot_rows"] == 0 and off.stats()["hot_refreshes"] == 1
