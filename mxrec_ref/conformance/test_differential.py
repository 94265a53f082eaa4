"""The fast path against the reference, step by step (spec/backends.md, BE-1).

A hypothesis state machine drives one reference store and one fast store
through the same random calls -- training and evaluation lookups of dynamic
size with duplicates, padding and extreme keys, gradient applies with every
optimizer, evictions, growth past several rehashes, fixed-capacity overflow,
save, load and cross-load -- and after every step asserts that the two agree
bit for bit: results, exported state, statistics, row placement and errors.
"""
import dataclasses
import itertools
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mxrec_ref import Adagrad, TableConfig, open_store

from .helpers import assert_same_result, call_capturing
from .strategies import gradients, key_batches, optimizers, table_configs


class RefVersusFast(RuleBasedStateMachine):
    other = "fast"            # the backend compared with the reference (set by the test)

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="mxrec-diff-")
        self.step = 0
        self.last = None       # (ref result, fast result) of the latest training lookup
        self.saved = False

    def teardown(self):
        shutil.rmtree(self.directory, ignore_errors=True)

    @initialize(config=table_configs(), optimizer=optimizers, storage=st.sampled_from(["hbm", "hbm", "ddr", "ssd"]),
                device_rows=st.integers(6, 40), host_rows=st.integers(1, 8), hot_rows=st.sampled_from([None, 0, 3]))
    def open(self, config, optimizer, storage, device_rows, host_rows, hot_rows):
        """HBM tables as drawn; DDR and SSD tables (TIER-11) with a small
        device budget and host tier, so rows move at almost every step."""
        if storage != "hbm":
            ssd = dict(ssd_vocabulary_size=16) if storage == "ssd" else {}
            config = dataclasses.replace(config, dynamic_expansion=False, device_vocabulary_size=device_rows,
                                         host_vocabulary_size=host_rows, **ssd)
        self.config, self.optimizer, self.hot_rows = config, optimizer, hot_rows
        self.folders = itertools.count()
        self.ref, self.fast = self._open("ref"), self._open(self.other)

    def _open(self, backend):
        """A new store; an SSD table gets a folder of its own (files must not pre-exist, TIER-9)."""
        config = self.config
        if config.ssd_vocabulary_size:
            config = dataclasses.replace(config, ssd_data_path=(f"{self.directory}/ssd-{next(self.folders)}",))
        return open_store(config, self.optimizer, backend=backend, hot_rows=self.hot_rows)

    def _both(self, method, *args, **kwargs):
        a, error_a = call_capturing(self.ref, method, *args, **kwargs)
        b, error_b = call_capturing(self.fast, method, *args, **kwargs)
        assert error_a == error_b, f"{method}: ref raised {error_a}, fast raised {error_b}"
        return a, b

    def _keys(self, batch):
        c = self.config
        return batch[(batch >= c.key_min) & (batch <= c.key_max)]

    @rule(batch=key_batches(max_size=40), advance=st.integers(0, 2), use_timestamp=st.booleans(),
          pad=st.sampled_from([None, None, 4, 40]), weighted=st.booleans())
    def train_lookup(self, batch, advance, use_timestamp, pad, weighted):
        batch = self._keys(batch)
        self.step += advance
        counts = (np.arange(batch.size) % 3 + 1) if weighted else None
        a, b = self._both("lookup", batch, step=self.step, timestamp=self.step * 10 if use_timestamp else None,
                          pad_to=pad, counts=counts)
        if a is not None:
            assert_same_result(a, b)
            self.last = (a, b)

    @rule(batch=key_batches(max_size=40))
    def eval_lookup(self, batch):
        a, b = self._both("lookup", self._keys(batch), train=False)
        if a is not None:
            assert_same_result(a, b)

    @rule(seed=st.integers(0, 2**16), bad=st.sampled_from([None, None, None, "nan", "shape"]))
    @precondition(lambda self: self.last is not None)
    def apply_result(self, seed, bad):
        ra, rb = self.last
        grads = gradients(len(ra.unique_keys), self.config.dim, seed)
        if bad == "nan" and grads.size:
            grads[-1, 0] = np.nan
        if bad == "shape":
            grads = grads[:, :0]
        a, error_a = call_capturing(self.ref, "apply_gradients", ra, grads, step=self.step)
        b, error_b = call_capturing(self.fast, "apply_gradients", rb, grads, step=self.step)
        assert error_a == error_b
        assert a == b

    @rule(batch=key_batches(max_size=30), seed=st.integers(0, 2**16))
    def apply_raw_keys(self, batch, seed):
        batch = self._keys(batch)
        a, b = self._both("apply_gradients", batch, gradients(batch.size, self.config.dim, seed), step=self.step)
        assert a == b

    @rule(offset=st.sampled_from([None, 0, 1, 3, 10]))
    @precondition(lambda self: self.config.eviction_enabled)
    def evict(self, offset):
        now = None if offset is None else self.step + offset
        a, b = self._both("evict", now)
        assert a.tolist() == b.tolist()

    @rule(threshold=st.sampled_from([0, 1, 2, 3]))
    def set_threshold(self, threshold):
        self._both("set_threshold", threshold)

    @rule(growth=st.integers(20, 400))
    def many_new_keys(self, growth):
        """Bursts of fresh keys: rehashes in the fast map, growth or overflow."""
        batch = np.arange(10**6 + self.step * 1000, 10**6 + self.step * 1000 + growth, dtype=np.int64)
        batch = np.repeat(batch, 3)   # repeated so admission thresholds up to 3 admit them
        self.step += 1
        a, b = self._both("lookup", batch, step=self.step)
        if a is not None:
            assert_same_result(a, b)
            self.last = (a, b)

    @rule(cross=st.booleans())
    def save_and_reload(self, cross):
        """Save each store, then load each from its own or (cross) the other's checkpoint."""
        self.ref.save(f"{self.directory}/ref")
        self.fast.save(f"{self.directory}/fast")
        ref_source, fast_source = ("fast", "ref") if cross else ("ref", "fast")
        self.ref, self.fast = self._open("ref"), self._open(self.other)
        # One load each: a load counts its tier moves (TIER-10), so loading twice would differ.
        _, error_a = call_capturing(self.ref, "load", f"{self.directory}/{ref_source}")
        _, error_b = call_capturing(self.fast, "load", f"{self.directory}/{fast_source}")
        assert error_a == error_b
        self.last = None
        self.saved = True

    @rule(now=st.sampled_from([None, 0, 7]), source=st.sampled_from(["ref", "fast"]))
    @precondition(lambda self: self.saved)
    def warm_start(self, now, source):
        """WS-3 in both backends from the same checkpoint (either backend's)."""
        a, b = self._both("warm_start", f"{self.directory}/{source}", now=now)
        assert a == b

    @invariant()
    def agree(self):
        if not hasattr(self, "ref"):
            return
        ref_state = self.ref.export()      # once each: reading SSD rows counts as disk reads
        diffs = ref_state.differences(self.fast.export())
        assert diffs == [], f"exports differ in {diffs}"
        assert self.ref.stats() == self.fast.stats()
        keys = np.concatenate([ref_state.keys, np.array([-1, 3, 2**62], np.int64)])
        keys = self._keys(keys)
        assert self.ref.row_handles(keys).tolist() == self.fast.row_handles(keys).tolist()
        if self.ref.tiered:
            assert self.ref.tier_of(keys).tolist() == self.fast.tier_of(keys).tolist()


RefVersusFast.TestCase.settings = settings(settings.default, stateful_step_count=30)


def test_be_1_agrees_with_the_reference_step_by_step(other_backend, monkeypatch):
    """BE-1, OPT-7, TIER-11, HOT-4: bit-identical behaviour, the same tier
    placement and the same hot sets on random call sequences (the fast path, or the third-party store under
    test, against the reference)."""
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "2")   # hot refreshes every other training lookup (HOT-4)
    RefVersusFast.other = other_backend
    RefVersusFast.TestCase("runTest").runTest()


def test_be_1_agrees_on_a_fixed_admission_and_eviction_sequence(other_backend):
    """BE-1 on one fixed call sequence, so that a store breaking admission or
    eviction is caught whatever the random search draws: thresholds above 1,
    repeated and weighted keys, applies, eviction, save, cross-load and warm
    start, with the machine's agreement check after every call."""
    RefVersusFast.other = other_backend
    machine = RefVersusFast()
    try:
        config = TableConfig(name="t", dim=3, device_vocabulary_size=8, dynamic_expansion=True,
                             access_threshold=3, eviction_threshold=2, faae_coefficient=2)
        machine.open(config=config, optimizer=Adagrad(learning_rate=0.5), storage="hbm", device_rows=8,
                     host_rows=1, hot_rows=0)
        calls = [
            ("train_lookup", dict(batch=np.array([1, 1, 2, 7]), advance=1, use_timestamp=False, pad=None,
                                  weighted=False)),
            ("train_lookup", dict(batch=np.array([1, 2, 2, 3]), advance=1, use_timestamp=False, pad=None,
                                  weighted=True)),
            ("apply_result", dict(seed=1, bad=None)),
            ("train_lookup", dict(batch=np.array([2, 3, 3, 7, -1]), advance=1, use_timestamp=False, pad=8,
                                  weighted=False)),
            ("apply_result", dict(seed=2, bad=None)),
            ("eval_lookup", dict(batch=np.array([1, 2, 3, 7, 9]))),
            ("set_threshold", dict(threshold=2)),
            ("train_lookup", dict(batch=np.array([9, 9, 4]), advance=2, use_timestamp=False, pad=None,
                                  weighted=False)),
            ("evict", dict(offset=1)),
            ("save_and_reload", dict(cross=True)),
            ("train_lookup", dict(batch=np.array([1, 4, 4, 5]), advance=1, use_timestamp=False, pad=None,
                                  weighted=False)),
            ("warm_start", dict(now=None, source="ref")),
            ("eval_lookup", dict(batch=np.array([1, 2, 3, 4, 5, 7, 9]))),
        ]
        machine.agree()
        for name, arguments in calls:
            getattr(machine, name)(**arguments)
            machine.agree()
    finally:
        machine.teardown()
