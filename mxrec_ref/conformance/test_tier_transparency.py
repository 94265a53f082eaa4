"""Tiers are transparent (spec/tiers.md, TIER-2): a DDR or SSD table driven
through random calls returns exactly what an HBM table with dynamic expansion
returns, after every step, on every backend -- while its rows move between
the device budget, host memory and disk files."""
import dataclasses
import itertools
import shutil
import tempfile

import numpy as np
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mxrec_ref import open_store

from .helpers import call_capturing
from .strategies import gradients, optimizers, table_configs

DEVICE_ROWS = 8


def tiered_config(config, mode: str, host_rows: int, folder: str):
    """``config`` as a DDR or SSD table with a small device budget."""
    ssd = dict(ssd_vocabulary_size=16, ssd_data_path=(folder,)) if mode == "ssd" else {}
    return dataclasses.replace(config, dynamic_expansion=False, device_vocabulary_size=DEVICE_ROWS,
                               host_vocabulary_size=host_rows, **ssd)


batches = st.lists(st.one_of(st.integers(0, 30), st.just(-1)), max_size=DEVICE_ROWS + 4).map(
    lambda ks: np.array(ks, dtype=np.int64))


class TieredVersusFlat(RuleBasedStateMachine):
    backend = "ref"

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="mxrec-tiers-")
        self.folders = itertools.count()
        self.step = 0
        self.last = None
        self.saved = False

    def teardown(self):
        shutil.rmtree(self.directory, ignore_errors=True)

    def _open_tiered(self):
        folder = f"{self.directory}/ssd-{next(self.folders)}"
        return open_store(tiered_config(self.config, self.mode, self.host_rows, folder), self.optimizer,
                          backend=self.backend)

    @initialize(config=table_configs(), optimizer=optimizers, mode=st.sampled_from(["ddr", "ssd"]),
                host_rows=st.integers(1, 6))
    def open(self, config, optimizer, mode, host_rows):
        self.config = dataclasses.replace(config, dynamic_expansion=True)
        self.optimizer, self.mode, self.host_rows = optimizer, mode, host_rows
        self.flat = open_store(self.config, optimizer, backend="ref")
        self.tiered = self._open_tiered()

    def _both(self, method, *args, **kwargs):
        b, error_b = call_capturing(self.tiered, method, *args, **kwargs)
        if error_b is not None and "device_vocabulary_size" in error_b[1] and kwargs.get("train", True):
            assert len(np.unique(args[0][args[0] != -1])) > DEVICE_ROWS   # TIER-3, the one extra error
            return None, None
        a, error_a = call_capturing(self.flat, method, *args, **kwargs)
        assert error_a == error_b, f"{method}: flat raised {error_a}, tiered raised {error_b}"
        return a, b

    def _keys(self, batch):
        return batch[(batch >= self.config.key_min) & (batch <= self.config.key_max)]

    @rule(batch=batches, advance=st.integers(0, 2), pad=st.sampled_from([None, None, 12]))
    def train_lookup(self, batch, advance, pad):
        self.step += advance
        a, b = self._both("lookup", self._keys(batch), step=self.step, pad_to=pad)
        if a is not None and b is not None:
            assert a.unique_keys.tolist() == b.unique_keys.tolist()
            assert a.admitted.tolist() == b.admitted.tolist()
            assert np.array_equal(a.rows.view(np.uint32), b.rows.view(np.uint32))
            self.last = (a, b)

    @rule(batch=batches)
    def eval_lookup(self, batch):
        a, b = self._both("lookup", self._keys(batch), train=False)
        if a is not None and b is not None:
            assert np.array_equal(a.rows.view(np.uint32), b.rows.view(np.uint32))

    @rule(seed=st.integers(0, 2**16))
    @precondition(lambda self: self.last is not None)
    def apply_result(self, seed):
        a, b = self.last
        grads = gradients(len(a.unique_keys), self.config.dim, seed)
        assert self.flat.apply_gradients(a, grads, step=self.step) == \
            self.tiered.apply_gradients(b, grads, step=self.step)

    @rule(batch=batches, seed=st.integers(0, 2**16))
    def apply_raw_keys(self, batch, seed):
        batch = self._keys(batch)
        a, b = self._both("apply_gradients", batch, gradients(batch.size, self.config.dim, seed), step=self.step)
        assert a == b

    @rule(offset=st.sampled_from([None, 0, 1, 3]))
    @precondition(lambda self: self.config.eviction_enabled)
    def evict(self, offset):
        a, b = self._both("evict", None if offset is None else self.step + offset)
        assert a.tolist() == b.tolist()

    @rule(threshold=st.sampled_from([0, 1, 2, 3]))
    def set_threshold(self, threshold):
        self._both("set_threshold", threshold)

    @rule()
    def save_and_reload(self):
        """TIER-8: the tiered table's checkpoint is the common format; reload it."""
        self.flat.save(f"{self.directory}/flat")
        self.tiered.save(f"{self.directory}/tiered")
        self.flat = open_store(self.config, self.optimizer, backend="ref")
        self.tiered = self._open_tiered()
        self.flat.load(f"{self.directory}/tiered")
        self.tiered.load(f"{self.directory}/flat")
        self.last = None
        self.saved = True

    @rule(now=st.sampled_from([None, 4]))
    @precondition(lambda self: self.saved)
    def warm_start(self, now):
        a, b = self._both("warm_start", f"{self.directory}/flat", now=now)
        assert a == b

    @invariant()
    def same_state(self):
        if not hasattr(self, "tiered"):
            return
        assert self.flat.export().differences(self.tiered.export()) == []
        stats = self.tiered.stats()
        assert stats["device_rows"] + stats["host_rows"] + stats["disk_rows"] == stats["size"] == self.flat.size()
        assert stats["device_rows"] <= DEVICE_ROWS
        if self.mode == "ssd":
            assert stats["host_rows"] <= self.host_rows
        else:
            assert stats["disk_rows"] == 0


TieredVersusFlat.TestCase.settings = settings(settings.default, stateful_step_count=25)


def test_tier_2_tiered_tables_return_what_a_flat_table_returns(backend):
    """TIER-2, TIER-4, TIER-5, TIER-6, TIER-8, TIER-10: DDR and SSD tables agree
    with an HBM table with dynamic expansion after every step of random call
    sequences; tier sizes stay within their budgets."""
    TieredVersusFlat.backend = backend
    TieredVersusFlat.TestCase("runTest").runTest()
