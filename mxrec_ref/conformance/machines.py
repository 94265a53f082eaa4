"""One comparison machine for every twin of the store (hypothesis'
``DatabaseComparison`` shape): a list of stores, the first of them the
oracle, driven through the same random calls -- training and evaluation
lookups of dynamic size with duplicates, padding and extreme keys, gradient
applies with every optimizer, evictions, growth past several rehashes,
thresholds set at run time, save, load, cross-load and warm start -- with one
agreement check after every step: the same results and errors bit for bit,
the same exported state, and (where a subclass says they must agree) the same
statistics and row placement.

The comparisons are small subclasses that differ only in how their stores are
opened and what they leave out of the comparison; tests run them through
``run_state_machine_as_test`` with a factory, so the backend under test is a
constructor argument, never a class attribute set from outside.
"""
from __future__ import annotations

import dataclasses
import itertools
import shutil
import tempfile

import numpy as np
from hypothesis import currently_in_test_context, reject, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mxrec_ref import open_store

from mxrec_ref.errors import NotSupported

from .checks import assert_same_result, call_capturing
from .strategies import gradients, key_batches, optimizers, table_configs

ALL_STATS = None           # excluded_stats(): leave every statistic out of the comparison


class StoreComparison(RuleBasedStateMachine):
    """The skeleton: subclasses set ``self.config``, ``self.optimizer`` and
    ``self.stores`` in their ``@initialize`` rule and define ``open_stores``."""

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="mxrec-compare-")
        self.folders = itertools.count()
        self.step = 0
        self.last = None       # every store's result of the latest training lookup
        self.saved = False
        self.stores = []

    def teardown(self):
        shutil.rmtree(self.directory, ignore_errors=True)

    # -------------------------------------------------------- what a subclass says
    def open_stores(self) -> list:
        """Fresh stores for ``self.config`` (also after a save, to load into)."""
        raise NotImplementedError

    def call_order(self) -> list[int]:
        """The order in which one call reaches the stores."""
        return list(range(len(self.stores)))

    def tolerated(self, index: int, method: str, args, kwargs, error) -> bool:
        """An error store ``index`` may raise alone; the call (which changed
        nothing, CON-4) is then not made on the stores after it."""
        return False

    def excluded_stats(self, index: int):
        """Statistics left out when store ``index`` is compared with the oracle
        (a set of names, or ALL_STATS)."""
        return set()

    def placement_compared(self, index: int) -> bool:
        """Whether store ``index`` must place rows as the oracle does (row handles, tiers)."""
        return True

    def check_each_step(self, exports, stats) -> None:
        """A subclass's own invariants, after the agreement check."""

    # -------------------------------------------------------- helpers
    def ssd_folder(self) -> str:
        """A folder of its own for one SSD table (files must not pre-exist, TIER-9)."""
        return f"{self.directory}/ssd-{next(self.folders)}"

    def _keys(self, batch):
        c = self.config
        return batch[(batch >= c.key_min) & (batch <= c.key_max)]

    def _all(self, method, *args, **kwargs):
        """Every store's result of one call; they must raise the same error or none.  A call a store
        cannot express (CON-11) discards the example: the search goes on with the others."""
        outcomes = [None] * len(self.stores)
        for i in self.call_order():
            try:
                outcomes[i] = call_capturing(self.stores[i], method, *args, **kwargs)
            except NotSupported:
                _reject_example()
            error = outcomes[i][1]
            if error is not None and self.tolerated(i, method, args, kwargs, error):
                return [None] * len(self.stores)
        errors = [error for _, error in outcomes]
        assert all(e == errors[0] for e in errors), f"{method}: errors differ: {errors}"
        return [value for value, _ in outcomes]

    # -------------------------------------------------------- rules
    def _train_lookup(self, batch, advance, use_timestamp, pad, weighted):
        batch = self._keys(batch)
        self.step += advance
        counts = (np.arange(batch.size) % 3 + 1) if weighted else None
        results = self._all("lookup", batch, step=self.step, timestamp=self.step * 10 if use_timestamp else None,
                            pad_to=pad, counts=counts)
        if results[0] is not None:
            for result in results[1:]:
                assert_same_result(results[0], result)
            self.last = results

    @rule(batch=key_batches(max_size=40), advance=st.integers(0, 2), use_timestamp=st.booleans(),
          pad=st.sampled_from([None, None, 4, 40]), weighted=st.booleans())
    def train_lookup(self, batch, advance, use_timestamp, pad, weighted):
        self._train_lookup(batch, advance, use_timestamp, pad, weighted)

    def _eval_lookup(self, batch, weighted):
        batch = self._keys(batch)
        counts = (np.arange(batch.size) % 2 + 1) if weighted else None
        results = self._all("lookup", batch, train=False, counts=counts)
        if results[0] is not None:
            for result in results[1:]:
                assert_same_result(results[0], result)

    @rule(batch=key_batches(max_size=40), weighted=st.booleans())
    def eval_lookup(self, batch, weighted):
        self._eval_lookup(batch, weighted)

    @rule(seed=st.integers(0, 2**16), bad=st.sampled_from([None, None, None, "nan", "shape"]))
    @precondition(lambda self: self.last is not None)
    def apply_result(self, seed, bad):
        """Each store applies gradients to its own latest lookup result."""
        grads = gradients(len(self.last[0].unique_keys), self.config.dim, seed)
        if bad == "nan" and grads.size:
            grads[-1, 0] = np.nan
        if bad == "shape":
            grads = grads[:, :0]
        outcomes = [call_capturing(store, "apply_gradients", result, grads, step=self.step)
                    for store, result in zip(self.stores, self.last)]
        assert all(outcome == outcomes[0] for outcome in outcomes), f"apply_gradients: {outcomes}"

    def _train_step(self, batch, seed):
        self.step += 1
        self.last = None
        self._train_lookup(batch, 0, False, None, False)
        if self.last is not None:
            self.apply_result(seed, None)

    @rule(batch=key_batches(max_size=40), seed=st.integers(0, 2**16))
    def train_step(self, batch, seed):
        """A training step as a job runs it: a lookup, then its gradients (OPT-*)."""
        self._train_step(batch, seed)

    def _apply_raw_keys(self, batch, seed):
        batch = self._keys(batch)
        applied = self._all("apply_gradients", batch, gradients(batch.size, self.config.dim, seed), step=self.step)
        assert all(a == applied[0] for a in applied)

    @rule(batch=key_batches(max_size=30), seed=st.integers(0, 2**16))
    def apply_raw_keys(self, batch, seed):
        self._apply_raw_keys(batch, seed)

    @rule(offset=st.sampled_from([None, 0, 1, 3, 10]))
    @precondition(lambda self: self.config.eviction_enabled)
    def evict(self, offset):
        evicted = self._all("evict", None if offset is None else self.step + offset)
        assert all(e.tolist() == evicted[0].tolist() for e in evicted)

    @rule(threshold=st.sampled_from([0, 1, 2, 3]))
    def set_threshold(self, threshold):
        self._all("set_threshold", threshold)

    @rule(growth=st.integers(20, 400))
    def many_new_keys(self, growth):
        """Bursts of fresh keys: rehashes in the fast map, growth or overflow."""
        base = 10**6 + self.step * 1000
        batch = np.repeat(np.arange(base, base + growth, dtype=np.int64), 3)   # admitted by thresholds up to 3
        self.step += 1
        results = self._all("lookup", batch, step=self.step)
        if results[0] is not None:
            for result in results[1:]:
                assert_same_result(results[0], result)
            self.last = results

    @rule(cross=st.booleans())
    def save_and_reload(self, cross):
        """Each store saves; fresh stores load their own checkpoint or (cross) the next store's."""
        for i, store in enumerate(self.stores):
            store.save(f"{self.directory}/{i}")
        self.stores = self.open_stores()
        n = len(self.stores)
        # One load each: a load counts its tier moves (TIER-10), so loading twice would differ.
        errors = [call_capturing(store, "load", f"{self.directory}/{(i + cross) % n}")[1]
                  for i, store in enumerate(self.stores)]
        assert all(e == errors[0] for e in errors), f"load: errors differ: {errors}"
        self.last = None
        self.saved = True

    @rule(now=st.sampled_from([None, 0, 7]), source=st.integers(0, 7))
    @precondition(lambda self: self.saved)
    def warm_start(self, now, source):
        """WS-3 in every store from the same checkpoint (any store's)."""
        started = self._all("warm_start", f"{self.directory}/{source % len(self.stores)}", now=now)
        assert all(s == started[0] for s in started)

    # -------------------------------------------------------- the one agreement check
    @invariant()
    def agree(self):
        if not self.stores:
            return
        exports = [store.export() for store in self.stores]   # once each: reading SSD rows counts as disk reads
        stats = [store.stats() for store in self.stores]
        oracle = self.stores[0]
        keys = self._keys(np.concatenate([exports[0].keys, np.array([-1, 3, 2**62], np.int64)]))
        for i in range(1, len(self.stores)):
            diffs = exports[0].differences(exports[i])
            assert diffs == [], f"store {i}: exports differ in {diffs}"
            excluded = self.excluded_stats(i)
            if excluded is not ALL_STATS:
                assert ({k: v for k, v in stats[i].items() if k not in excluded}
                        == {k: v for k, v in stats[0].items() if k not in excluded}), f"store {i}: stats differ"
            if self.placement_compared(i) and _expresses_row_handles(self.stores[i]):
                assert self.stores[i].row_handles(keys).tolist() == oracle.row_handles(keys).tolist()
                if oracle.tiered:
                    assert self.stores[i].tier_of(keys).tolist() == oracle.tier_of(keys).tolist()
        self.check_each_step(exports, stats)


def _reject_example() -> None:
    """CON-11 in a comparison: under hypothesis the drawn example is discarded and the search goes on;
    a fixed sequence run directly (no search) lets the NotSupported through, so its rules are n/a."""
    if currently_in_test_context():
        reject()
    raise


def _expresses_row_handles(store) -> bool:
    """False for a store whose rows have no index (a hash table's, CON-11): placement is not compared."""
    try:
        store.row_handles(np.zeros(0, dtype=np.int64))
    except NotSupported:
        return False
    return True


# ------------------------------------------------------------------ the comparisons
class RefVersusFast(StoreComparison):
    """BE-1: the reference and another backend (the fast path, or a third-party
    store) on the same table -- HBM as drawn, or DDR and SSD with a small device
    budget and host tier so rows move at almost every step -- agree on
    everything: results, errors, state, statistics, row handles and tiers."""

    def __init__(self, other: str = "fast"):
        super().__init__()
        self.other = other

    @initialize(config=table_configs(), optimizer=optimizers, storage=st.sampled_from(["hbm", "hbm", "ddr", "ssd"]),
                device_rows=st.integers(6, 40), host_rows=st.integers(1, 8), hot_rows=st.sampled_from([None, 0, 3]))
    def open(self, config, optimizer, storage, device_rows, host_rows, hot_rows):
        if storage != "hbm":
            ssd = dict(ssd_vocabulary_size=16) if storage == "ssd" else {}
            config = dataclasses.replace(config, dynamic_expansion=False, device_vocabulary_size=device_rows,
                                         host_vocabulary_size=host_rows, **ssd)
        self.config, self.optimizer, self.hot_rows = config, optimizer, hot_rows
        try:
            self.stores = self.open_stores()
        except NotSupported:           # a table the store under test cannot express: draw another (CON-11)
            _reject_example()

    def _open(self, backend):
        config = self.config
        if config.ssd_vocabulary_size:
            config = dataclasses.replace(config, ssd_data_path=(self.ssd_folder(),))
        return open_store(config, self.optimizer, backend=backend, hot_rows=self.hot_rows)

    def open_stores(self):
        return [self._open("ref"), self._open(self.other)]


TIER_DEVICE_ROWS = 8
tier_batches = st.lists(st.one_of(st.integers(0, 30), st.just(-1)), max_size=TIER_DEVICE_ROWS + 4).map(
    lambda ks: np.array(ks, dtype=np.int64))


class TieredVersusFlat(StoreComparison):
    """TIER-2: a DDR or SSD table of ``backend`` returns exactly what a flat
    reference HBM table with dynamic expansion returns, while its rows move
    between a device budget of TIER_DEVICE_ROWS rows, host memory and disk;
    tier sizes stay within their budgets.  Statistics and row placement are
    the tiers' own and are not compared."""

    def __init__(self, backend: str = "ref"):
        super().__init__()
        self.backend = backend

    @initialize(config=table_configs(), optimizer=optimizers, mode=st.sampled_from(["ddr", "ssd"]),
                host_rows=st.integers(1, 6))
    def open(self, config, optimizer, mode, host_rows):
        self.config = dataclasses.replace(config, dynamic_expansion=True)
        self.optimizer, self.mode, self.host_rows = optimizer, mode, host_rows
        self.stores = self.open_stores()

    def open_stores(self):
        ssd = dict(ssd_vocabulary_size=16, ssd_data_path=(self.ssd_folder(),)) if self.mode == "ssd" else {}
        tiered = dataclasses.replace(self.config, dynamic_expansion=False, device_vocabulary_size=TIER_DEVICE_ROWS,
                                     host_vocabulary_size=self.host_rows, **ssd)
        return [open_store(self.config, self.optimizer, backend="ref"),
                open_store(tiered, self.optimizer, backend=self.backend)]

    def call_order(self):
        return [1, 0]      # the tiered table first: only it can raise TIER-3, and then the flat one is not called

    def tolerated(self, index, method, args, kwargs, error):
        """TIER-3, the one error a tiered table raises alone: a training batch
        with more distinct keys than the device budget."""
        if index != 1 or method != "lookup" or not kwargs.get("train", True):
            return False
        if "device_vocabulary_size" not in error[1]:
            return False
        keys = args[0]
        assert len(np.unique(keys[keys != -1])) > TIER_DEVICE_ROWS, error
        return True

    def excluded_stats(self, index):
        return ALL_STATS

    def placement_compared(self, index):
        return False

    def check_each_step(self, exports, stats):
        tier = stats[1]
        assert tier["device_rows"] + tier["host_rows"] + tier["disk_rows"] == tier["size"] == self.stores[0].size()
        assert tier["device_rows"] <= TIER_DEVICE_ROWS
        if self.mode == "ssd":
            assert tier["host_rows"] <= self.host_rows
        else:
            assert tier["disk_rows"] == 0

    # Batches mostly within the device budget, so that most lookups reach both tables.
    @rule(batch=tier_batches, advance=st.integers(0, 2), use_timestamp=st.booleans(),
          pad=st.sampled_from([None, None, 12]), weighted=st.booleans())
    def train_lookup(self, batch, advance, use_timestamp, pad, weighted):
        self._train_lookup(batch, advance, use_timestamp, pad, weighted)

    @rule(batch=tier_batches, weighted=st.booleans())
    def eval_lookup(self, batch, weighted):
        self._eval_lookup(batch, weighted)

    @rule(batch=tier_batches, seed=st.integers(0, 2**16))
    def train_step(self, batch, seed):
        self._train_step(batch, seed)

    @rule(batch=tier_batches, seed=st.integers(0, 2**16))
    def apply_raw_keys(self, batch, seed):
        self._apply_raw_keys(batch, seed)
