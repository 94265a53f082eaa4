"""The key pipeline (spec/pipeline.md): a pipelined store equals the serial one bit for bit.

The comparison machine drives a store through ``KeyPipeline`` (batches resolved ahead, in a worker
thread or in the caller's, up to ``depth`` of them) and a twin store through plain ``lookup`` /
``apply_gradients``, with the same random batches, gradients, paddings, steps, thresholds, evictions,
saves, loads, warm starts and evaluation lookups -- made at any moment, batches waiting or not -- and
compares after every call: the rows each step gets, the errors, the exported state (rows, slots, counts,
last seen, clock), the statistics, the capacity, the row placement and the checkpoint files."""
from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from mxrec_ref import Adagrad, MxrecError, TableConfig, UsageError, open_store
from mxrec_ref.conformance.checks import (assert_same_result, assert_same_stores, assert_unchanged, call_capturing,
                                          folder_bytes, save_and_reload, snapshot)
from mxrec_ref.conformance.strategies import gradients, key_batches, optimizers, table_configs
from mxrec_ref.engine import Engine, Prepared
from mxrec_ref.pipeline import SWITCH, KeyPipeline, enabled_by_default

DIM = 3


class PipelineComparison(RuleBasedStateMachine):
    """A pipelined store (``self.piped`` behind ``self.pipeline``) and a serial twin (``self.serial``)."""

    def __init__(self, backend: str, worker: bool, depth: int):
        super().__init__()
        self.backend, self.worker, self.depth = backend, worker, depth
        self.directory = tempfile.mkdtemp(prefix="mxrec-pipeline-")
        self.saves = 0
        self.step = 0
        self.waiting = deque()      # the batches pushed and not popped: (keys, pad_to)
        self.pipeline = None

    def teardown(self):
        if self.pipeline is not None:
            self.pipeline.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _open(self):
        previous = os.environ.get("HOT_EMB_UPDATE_STEP")
        os.environ["HOT_EMB_UPDATE_STEP"] = "2"          # read when a store opens: refresh often
        try:
            return open_store(self.config, self.optimizer, backend=self.backend, hot_rows=self.hot_rows)
        finally:
            if previous is None:
                del os.environ["HOT_EMB_UPDATE_STEP"]
            else:
                os.environ["HOT_EMB_UPDATE_STEP"] = previous

    @initialize(config=table_configs(), optimizer=optimizers, hot_rows=st.sampled_from([None, 2]))
    def open(self, config, optimizer, hot_rows):
        self.config, self.optimizer, self.hot_rows = config, optimizer, hot_rows
        self.piped, self.serial = self._open(), self._open()
        self.pipeline = KeyPipeline([self.piped], depth=self.depth, worker=self.worker, enabled=True)

    # ------------------------------------------------------------------ training
    @precondition(lambda self: len(self.waiting) <= self.depth)
    @rule(keys=key_batches(), extra=st.sampled_from([None, 0, 3]))
    def push(self, keys, extra):
        """A coming batch, resolved ahead now (PIPE-1): nothing to compare but that nothing changed."""
        pad_to = None if extra is None else len(keys) + extra
        self.pipeline.push([keys])
        self.waiting.append((keys, pad_to))

    @precondition(lambda self: self.waiting)
    @rule(seed=st.integers(0, 2**16), advance=st.integers(0, 2))
    def train(self, seed, advance):
        """The oldest pushed batch's step: its lookup (PIPE-2) and the apply of its gradients."""
        keys, pad_to = self.waiting.popleft()
        self.step += advance
        try:
            piped, error = self.pipeline.pop(step=self.step, pad_to=pad_to)[0], None
        except MxrecError as raised:     # a key out of range, a table too small: the serial lookup's error too
            piped, error = None, (type(raised), str(raised))
        serial, serial_error = call_capturing(self.serial, "lookup", keys, step=self.step, pad_to=pad_to)
        assert error == serial_error
        if serial is not None:
            assert_same_result(piped, serial)
            grads = gradients(len(serial.unique_keys), self.config.dim, seed)
            assert self.piped.apply_gradients(piped, grads, step=self.step) == \
                self.serial.apply_gradients(serial, grads, step=self.step)

    # ------------------------------------------------- calls between steps: no boundary (PIPE-4)
    @rule(threshold=st.integers(0, 3))
    def set_threshold(self, threshold):
        self.piped.set_threshold(threshold)
        self.serial.set_threshold(threshold)

    @precondition(lambda self: self.config.eviction_enabled)
    @rule(later=st.integers(0, 3))
    def evict(self, later):
        now = self.step + later
        assert self.piped.evict(now=now).tolist() == self.serial.evict(now=now).tolist()

    @rule(keys=key_batches())
    def evaluate(self, keys):
        piped, error = call_capturing(self.piped, "lookup", keys, train=False)
        serial, serial_error = call_capturing(self.serial, "lookup", keys, train=False)
        assert error == serial_error
        if serial is not None:
            assert_same_result(piped, serial)

    @rule(warm=st.booleans())
    def save_and_load(self, warm):
        """A save while batches wait: the same files; loaded back (or merged by a warm start), the same store."""
        self.saves += 1
        folders = [os.path.join(self.directory, f"{name}{self.saves}") for name in ("piped", "serial")]
        save_and_reload(self.piped, self.serial, folders, warm=warm, now=self.step)

    # ------------------------------------------------------------------ agreement
    @invariant()
    def agree(self):
        """After every call, batches waiting or not: the same everything (PIPE-1, PIPE-4)."""
        if self.pipeline is None:
            return
        assert_same_stores(self.piped, self.serial)
        keys = self.serial.export().keys
        assert self.piped.row_handles(keys).tolist() == self.serial.row_handles(keys).tolist()


@pytest.mark.parametrize("worker, depth", [(False, 1), (True, 1), (True, 2)], ids=["in_push", "worker", "depth2"])
def test_pipe_1_a_pipelined_store_equals_the_serial_one_after_every_call(backend, worker, depth):
    """PIPE-1..PIPE-5: the comparison machine, both backends; resolves in the caller's thread and in the
    worker (where they interleave with the caller's calls as the threads' timing has it)."""
    run_state_machine_as_test(lambda: PipelineComparison(backend, worker, depth),
                              settings=settings(max_examples=15, stateful_step_count=20, deadline=None,
                                                suppress_health_check=list(HealthCheck)))


# ------------------------------------------------------------------ the rules one by one
def _store(backend, **config):
    config = {"name": "t", "dim": DIM, "device_vocabulary_size": 64, **config}
    return open_store(TableConfig(**config), Adagrad(0.1), backend=backend)


def test_pipe_1_a_resolve_ahead_changes_nothing_and_checks_the_keys_first(backend, tmp_path):
    store = _store(backend, access_threshold=2)
    store.apply_gradients(store.lookup(np.array([1, 1, 2]), step=0), np.ones((2, DIM), np.float32), step=0)
    store.save(tmp_path / "before")
    before = snapshot(store)
    batch = store.resolve_ahead(np.array([[1, 2, 3], [3, 4, -1]]), counts=np.ones((2, 3), np.int64))
    assert_unchanged(store, before)
    store.save(tmp_path / "after")
    assert folder_bytes(tmp_path / "before") == folder_bytes(tmp_path / "after")
    assert isinstance(batch.prepared, Prepared) and batch.table == "t"
    with pytest.raises(MxrecError, match=r"table 't': keys: "):
        store.resolve_ahead(np.array([1.5]))
    with pytest.raises(MxrecError, match=r"table 't': counts: "):
        store.resolve_ahead(np.array([1]), counts=np.array([-1]))
    assert_unchanged(store, before)


def test_pipe_2_gather_is_the_lookup_at_that_point(backend):
    """Resolved ahead of two applies and of another batch's admissions, a batch's gather equals a lookup
    made at gather time on a twin store; an error (the table is full) is the lookup's, nothing changed."""
    store, twin = _store(backend, access_threshold=2, device_vocabulary_size=3), \
        _store(backend, access_threshold=2, device_vocabulary_size=3)
    ahead = store.resolve_ahead(np.array([2, 1, 5, 2]))
    for one in (store, twin):
        result = one.lookup(np.array([1, 1, 2]), step=0)            # 1 admitted; 2 pending
        one.apply_gradients(result, np.ones((2, DIM), np.float32), step=0)
    assert_same_result(store.gather(ahead, step=1, pad_to=6), twin.lookup(np.array([2, 1, 5, 2]), step=1, pad_to=6))
    assert store.export().differences(twin.export()) == [] and store.stats() == twin.stats()
    full = store.resolve_ahead(np.array([7, 7, 8, 8]))
    before = snapshot(store)
    with pytest.raises(MxrecError, match=r"table 't': device_vocabulary_size: "):
        store.gather(full, step=2)
    assert_unchanged(store, before)
    with pytest.raises(UsageError, match=r"table 't': batch: not a batch this store resolved ahead"):
        twin.gather(ahead, step=2)


def test_pipe_3_commit_works_admission_out_again_and_makes_missing_initial_rows(backend):
    """Key 9 is new when its batch is resolved (threshold 2, one access: no initial row made ahead);
    another lookup counts it before the gather, so the gather admits it and makes its initial row then --
    the row a serial lookup gives it.  An eviction between resolve and gather counts too."""
    config = dict(access_threshold=2, eviction_threshold=1)
    store, twin = _store(backend, **config), _store(backend, **config)
    ahead = store.resolve_ahead(np.array([9, 4, 4]))
    assert ahead.prepared.init_at.tolist() == [1]          # only key 4 (two accesses) would be admitted now
    for one in (store, twin):
        one.lookup(np.array([9]), step=0)
        one.lookup(np.array([4, 4]), step=0)
        assert one.evict(now=1).tolist() == [4, 9]
        one.lookup(np.array([9]), step=1)
    got = store.gather(ahead, step=1)
    assert_same_result(got, twin.lookup(np.array([9, 4, 4]), step=1))
    assert got.admitted.tolist() == [True, True]
    assert store.export().differences(twin.export()) == []


def test_pipe_4_every_call_is_allowed_while_batches_wait(backend, tmp_path):
    """Save, load, warm start, evict, set_threshold, set_optimizer and plain lookups between a batch's
    resolve and its gather: each sees the serial state, and the gather is still the serial lookup."""
    config = dict(access_threshold=1, eviction_threshold=1)
    store, twin = _store(backend, **config), _store(backend, **config)
    ahead = [store.resolve_ahead(np.array([5, 6, 7])), store.resolve_ahead(np.array([6, 8]))]
    for i, one in enumerate((store, twin)):
        one.lookup(np.array([5, 6]), step=0)
        one.save(tmp_path / str(i))
        one.lookup(np.array([1, 2]), step=1)
        one.evict(now=2)
        one.load(tmp_path / str(i))
        one.warm_start(tmp_path / str(i), now=2)
        one.set_threshold(2)
        one.set_optimizer(Adagrad(0.5, initial_accumulator_value=0.3))
        assert one.lookup(np.array([5]), train=False).admitted.tolist() == [True]
    assert folder_bytes(tmp_path / "0") == folder_bytes(tmp_path / "1")
    assert_same_result(store.gather(ahead[1], step=3), twin.lookup(np.array([6, 8]), step=3))
    assert_same_result(store.gather(ahead[0], step=3), twin.lookup(np.array([5, 6, 7]), step=3))
    assert store.export().differences(twin.export()) == [] and store.stats() == twin.stats()


def test_pipe_5_depth_push_and_pop(backend):
    """Depth 2: a third batch pushed beyond the next pop is refused; a key check that failed in the
    resolve is raised by its pop at its table, after the tables before it were looked up."""
    stores = [_store(backend), _store(backend, name="small", key_dtype="int32")]
    with pytest.raises(UsageError, match=r"tables 't', 'small': depth: .* >= 1, got 0"):
        KeyPipeline(stores, depth=0)
    with KeyPipeline(stores, depth=2) as pipeline:
        pipeline.push([np.array([1]), np.array([1])])
        pipeline.push([np.array([2**40]), np.array([2**40])])     # too large for 'small' (int32 keys)
        pipeline.push([np.array([3]), np.array([3])])
        with pytest.raises(UsageError, match=r"push: 3 batches are pushed and not popped; the pipeline's depth is 2"):
            pipeline.push([np.array([9]), np.array([9])])
        assert [r.unique_keys.tolist() for r in pipeline.pop(step=0)] == [[1], [1]]
        with pytest.raises(MxrecError, match=r"table 'small': keys: key 1099511627776 is outside the range"):
            pipeline.pop(step=1)
        assert stores[0].stats()["train_lookups"] == 2 and stores[1].stats()["train_lookups"] == 1
        assert [r.unique_keys.tolist() for r in pipeline.pop(step=2)] == [[3], [3]]
        with pytest.raises(UsageError, match="pop: no batch was pushed"):
            pipeline.pop(step=3)


def test_pipe_6_an_engine_that_prepares_nothing_runs_serially_in_a_pipeline(backend, monkeypatch):
    """An engine that does nothing ahead (the default prepare; here a DDR table's engine given it, as the
    tiers were before PIPE-10): in a KeyPipeline its batches are resolved at pop, with the results of plain
    lookups."""
    config = TableConfig("ddr", dim=DIM, device_vocabulary_size=8, host_vocabulary_size=64)
    tiered, twin = (open_store(config, Adagrad(0.1), backend=backend) for _ in range(2))
    monkeypatch.setattr(tiered.engine, "prepare", functools.partial(Engine.prepare, tiered.engine))
    assert tiered.resolve_ahead(np.array([1, 2])).prepared.deduped is None
    with KeyPipeline([tiered]) as pipeline:
        batches = [np.arange(step, step + 6) for step in range(5)]
        pipeline.push([batches[0]])
        for step in range(5):
            if step + 1 < 5:
                pipeline.push([batches[step + 1]])
            (result,) = pipeline.pop(step=step)
            expected = twin.lookup(batches[step], step=step)
            assert_same_result(result, expected)
            tiered.apply_gradients(result, np.ones((6, DIM), np.float32), step=step)
            twin.apply_gradients(expected, np.ones((6, DIM), np.float32), step=step)
    assert tiered.export().differences(twin.export()) == [] and tiered.stats() == twin.stats()


@pytest.mark.parametrize("value, cores, expected", [(None, 1, False), (None, 2, True), ("", 16, True), ("1", 1, True),
                                                    ("0", 16, False), ("off", 16, False), ("False", 4, False),
                                                    ("no", 4, False)])
def test_pipe_7_the_switch(monkeypatch, backend, value, cores, expected):
    """MXREC_KEY_PIPELINE turns the pipeline on or off; unset, it is on when the process may run on 2 cores
    or more (pinned to one, off); off, pop is the plain lookup, with the same results."""
    if value is None:
        monkeypatch.delenv(SWITCH, raising=False)
    else:
        monkeypatch.setenv(SWITCH, value)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert enabled_by_default() is expected
    store, twin = _store(backend), _store(backend)
    with KeyPipeline([store], worker=False) as pipeline:
        assert pipeline.enabled is expected
        pipeline.push([np.array([1, 2, 1])])
        assert_same_result(pipeline.pop(step=0)[0], twin.lookup(np.array([1, 2, 1]), step=0))


def test_pipe_3_a_row_reused_since_the_resolve_is_not_the_keys(backend):
    """Key 1 holds a row when its batch is resolved ahead; it is evicted and key 2 takes the freed row
    before the gather: the probe made ahead names a row that is key 2's now, and commit must not count
    key 1 there (the fast engine checks each hint: a live row still holding its key)."""
    config = dict(access_threshold=1, eviction_threshold=1, device_vocabulary_size=4)
    store, twin = _store(backend, **config), _store(backend, **config)
    for one in (store, twin):
        one.lookup(np.array([1, 3]), step=0)
    ahead = store.resolve_ahead(np.array([1, 3, 1]))
    for one in (store, twin):
        one.lookup(np.array([3]), step=5)
        assert one.evict().tolist() == [1]
        one.lookup(np.array([2]), step=5)                  # takes key 1's freed row
    if ahead.prepared.hints is not None:                   # the fast engine's probe ahead: key 1's row then
        assert ahead.prepared.hints.tags[0] == store.row_handles(np.array([2]))[0] >= 0
    assert_same_result(store.gather(ahead, step=6), twin.lookup(np.array([1, 3, 1]), step=6))
    assert store.export().differences(twin.export()) == [] and store.stats() == twin.stats()


def test_pipe_3_a_hot_set_chosen_again_since_the_resolve(backend, monkeypatch):
    """Keys 1 and 2 are hot when the batch is resolved ahead; before its gather, batches of 3 and 4 make
    those the hot set (a refresh after every training lookup): the hot indexes probed ahead name other
    keys now, and commit must not take them (the fast engine keeps them only while the hot map is the
    one they were probed in)."""
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "1")
    store, twin = (open_store(TableConfig(name="t", dim=DIM, device_vocabulary_size=64), Adagrad(0.1),
                              backend=backend, hot_rows=2) for _ in range(2))
    for one in (store, twin):
        one.lookup(np.array([1, 1, 1, 2, 2, 3, 4]), step=0)
    assert store.stats()["hot_rows"] == 2
    ahead = store.resolve_ahead(np.array([1, 2, 3, 4, 5]))
    for one in (store, twin):
        for step in (1, 2):
            one.lookup(np.array([3, 3, 3, 4, 4, 4]), step=step)
    assert_same_result(store.gather(ahead, step=3), twin.lookup(np.array([1, 2, 3, 4, 5]), step=3))
    assert store.export().differences(twin.export()) == [] and store.stats() == twin.stats()


@pytest.mark.parametrize("between", ["evict", "load", "warm_start"])
def test_pipe_3_the_history_changed_by_a_call_that_is_no_lookup(backend, between, tmp_path):
    """The batch [1, 3, 5] is planned ahead while keys 1 and 3 hold rows; then, with no lookup in between,
    an eviction drops key 1, or a load or warm start brings back a table where only key 5 holds a row:
    the plan made ahead is stale, and the gather must equal the twin's serial lookup (the fast engine
    keeps a plan only while the table's history is unchanged)."""
    config = dict(access_threshold=1, eviction_threshold=2, device_vocabulary_size=16)
    store, twin = _store(backend, **config), _store(backend, **config)
    other = _store(backend, **config)
    other.lookup(np.array([5]), step=0)
    other.save(str(tmp_path / "other"))
    for one in (store, twin):
        one.lookup(np.array([1]), step=0)
        one.lookup(np.array([3]), step=3)
    ahead = store.resolve_ahead(np.array([1, 3, 5]))
    for one in (store, twin):
        if between == "evict":
            assert one.evict(now=4).tolist() == [1]
        elif between == "load":
            one.load(str(tmp_path / "other"))
        else:
            one.warm_start(str(tmp_path / "other"))
    assert_same_result(store.gather(ahead, step=5), twin.lookup(np.array([1, 3, 5]), step=5))
    assert store.export().differences(twin.export()) == [] and store.stats() == twin.stats()
