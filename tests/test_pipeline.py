"""The key pipeline (spec/pipeline.md): a pipelined store equals the serial one bit for bit.

The comparison machine drives a store through ``KeyPipeline`` (batch t+1 resolved ahead, in a worker
thread or in the caller's) and a twin store through plain ``lookup`` / ``apply_gradients`` in the serial
order, with the same random batches, gradients, paddings, thresholds, evictions, saves and loads, and
compares after every step: the rows each step gets, the errors, the exported state (rows, slots, counts,
last seen, clock), the statistics, the capacity, the row placement and the checkpoint files.  The serial
twin looks batch t+1 up right after apply(t), which is where the serial order puts it: so after every
step both stores have made the same calls, the pipelined one in another order (PIPE-4's reads)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from mxrec_ref import Adagrad, MxrecError, TableConfig, UsageError, open_store
from mxrec_ref.conformance.checks import assert_same_result, call_capturing, snapshot, assert_unchanged
from mxrec_ref.conformance.strategies import gradients, key_batches, optimizers, table_configs
from mxrec_ref.pipeline import SWITCH, KeyPipeline, enabled_by_default

DIM = 3


def _files(folder: str) -> dict[str, bytes]:
    root = Path(folder)
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


class PipelineComparison(RuleBasedStateMachine):
    """A pipelined store (``self.piped`` behind ``self.pipeline``) and a serial twin (``self.serial``)."""

    def __init__(self, backend: str, worker: bool):
        super().__init__()
        self.backend, self.worker = backend, worker
        self.directory = tempfile.mkdtemp(prefix="mxrec-pipeline-")
        self.saves = 0
        self.step = 0
        self.pending = False        # a batch is pushed (pipelined) and looked up (serial) for the next step
        self.serial_next = None     # the serial twin's (result, error) of that batch
        self.seen = np.zeros(0, np.int64)
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
        self.pipeline = KeyPipeline([self.piped], worker=self.worker, enabled=True)

    # ------------------------------------------------------------------ training
    @rule(first=key_batches(), ahead=key_batches(), seed=st.integers(0, 2**16), go_on=st.booleans(),
          extra=st.sampled_from([None, 0, 3]))
    def train(self, first, ahead, seed, go_on, extra):
        """One step: pop batch t (pushed the step before, or now when the pipeline is drained), push batch
        t+1 when ``go_on``, apply t's gradients; the serial twin: lookup t, apply t, lookup t+1."""
        pad = lambda batch: None if extra is None else len(batch) + extra
        if not self.pending:
            self.pipeline.push([first], step=self.step, pad_to=pad(first))
            current = call_capturing(self.serial, "lookup", first, step=self.step, pad_to=pad(first))
            self.seen = np.union1d(self.seen, first)
        else:
            current = self.serial_next
        if go_on:
            self.pipeline.push([ahead], step=self.step + 1, pad_to=pad(ahead))     # resolves now: PIPE-1
            self.seen = np.union1d(self.seen, ahead)
        try:
            piped, error = self.pipeline.pop()[0], None
        except MxrecError as raised:     # a key out of range, a table too small: the serial twin's error too
            piped, error = None, (type(raised), str(raised))
        serial, serial_error = current
        assert error == serial_error
        if serial is not None:
            assert_same_result(piped, serial)                                       # PIPE-2
            grads = gradients(len(serial.unique_keys), self.config.dim, seed)
            assert self.piped.apply_gradients(piped, grads, step=self.step) == \
                self.serial.apply_gradients(serial, grads, step=self.step)         # PIPE-3
        self.pending = go_on
        if go_on:
            self.serial_next = call_capturing(self.serial, "lookup", ahead, step=self.step + 1, pad_to=pad(ahead))
        self.step += 1

    # ---------------------------------------------------------------- boundaries
    @precondition(lambda self: not self.pending)
    @rule(threshold=st.integers(0, 3))
    def set_threshold(self, threshold):
        self.piped.set_threshold(threshold)
        self.serial.set_threshold(threshold)

    @precondition(lambda self: not self.pending and self.config.eviction_enabled)
    @rule()
    def evict(self):
        assert self.piped.evict().tolist() == self.serial.evict().tolist()

    @precondition(lambda self: not self.pending)
    @rule()
    def save_and_load(self):
        """A save at a point of the serial order: the same files; loaded back, the same store."""
        self.saves += 1
        folders = [os.path.join(self.directory, f"{name}{self.saves}") for name in ("piped", "serial")]
        self.piped.save(folders[0])
        self.serial.save(folders[1])
        assert _files(folders[0]) == _files(folders[1])
        self.piped.load(folders[0])
        self.serial.load(folders[1])

    @precondition(lambda self: self.pending and self.serial_next[1] is None)    # its resolve succeeded: it waits
    @rule(which=st.sampled_from(["save", "load", "evict", "set_threshold", "lookup", "warm_start", "import_state"]))
    def boundary_while_a_batch_waits(self, which):
        """PIPE-4: refused, naming the table and the call, and nothing changes."""
        before = snapshot(self.piped)
        folder = os.path.join(self.directory, "refused")
        calls = {"save": lambda: self.piped.save(folder), "load": lambda: self.piped.load(self._source()),
                 "evict": lambda: self.piped.evict(), "set_threshold": lambda: self.piped.set_threshold(1),
                 "lookup": lambda: self.piped.lookup(np.array([1]), train=False),
                 "warm_start": lambda: self.piped.apply_warm_start(self._plan()),
                 "import_state": lambda: self.piped.import_state(self.piped.export())}
        if which == "evict" and not self.config.eviction_enabled:
            return
        with pytest.raises(UsageError, match=r"table 't': .*1 batch\(es\) resolved ahead.*PIPE-4"):
            calls[which]()
        assert_unchanged(self.piped, before)
        assert not os.path.exists(folder)

    def _source(self) -> str:
        """A checkpoint of the serial twin (which holds no batch resolved ahead), saved once."""
        source = os.path.join(self.directory, "source")
        if not os.path.exists(source):
            self.serial.save(source)
        return source

    def _plan(self):
        return self.piped.plan_warm_start(self._source())

    # ------------------------------------------------------------------ agreement
    @invariant()
    def agree(self):
        """After every step: the same calls made, so the same everything (PIPE-1, PIPE-4's reads, at the
        point ``wait`` defines when a worker resolves)."""
        if self.pipeline is None:
            return
        self.pipeline.wait()
        assert self.piped.export().differences(self.serial.export()) == []
        assert self.piped.stats() == self.serial.stats()
        assert self.piped.capacity() == self.serial.capacity()
        assert self.piped.table_clock() == self.serial.table_clock()
        seen = self.seen[(self.seen >= self.config.key_min) & (self.seen <= self.config.key_max)]
        assert self.piped.row_handles(seen).tolist() == self.serial.row_handles(seen).tolist()


@pytest.mark.parametrize("worker", [False, True], ids=["in_push", "worker"])
def test_pipe_1_a_pipelined_store_equals_the_serial_one_after_every_step(backend, worker):
    """PIPE-1..PIPE-5: the comparison machine, both backends, resolves in the caller's thread and in the
    worker (where their interleaving with the step's gathers and applies is the threads')."""
    run_state_machine_as_test(lambda: PipelineComparison(backend, worker),
                              settings=settings(max_examples=25, stateful_step_count=20, deadline=None,
                                                suppress_health_check=list(HealthCheck)))


# ------------------------------------------------------------------ the rules one by one
def _store(backend, **config):
    config = {"name": "t", "dim": DIM, "device_vocabulary_size": 64, **config}
    return open_store(TableConfig(**config), Adagrad(0.1), backend=backend)


def test_pipe_2_rows_are_read_at_gather_and_batches_are_gathered_in_order(backend):
    """A batch resolved before an apply to its keys gathers the applied rows; a pending key that a later
    batch admitted still gets the default row; gathering out of order or twice is refused."""
    store = _store(backend, access_threshold=2)
    grads = np.ones((2, DIM), np.float32)
    first = store.resolve_ahead(np.array([1, 2, 1]), step=0)        # 1 admitted (2 accesses), 2 pending
    second = store.resolve_ahead(np.array([2, 1]), step=1)          # 2 admitted now
    with pytest.raises(UsageError, match=r"table 't': batch: batch 1 gathered before batch 0; .* \(PIPE-2\)"):
        store.gather(second)
    result = store.gather(first)
    assert result.admitted.tolist() == [True, False]
    assert np.array_equal(result.rows[1], store.config.default_row())       # 2's row is batch 1's (ADM-5)
    before = store.export().values.copy()
    store.apply_gradients(result, grads, step=0)
    later = store.gather(second)
    assert not np.array_equal(later.rows[1], before[store.export().keys.tolist().index(1)])  # 1 was applied
    with pytest.raises(UsageError, match="gathered already"):
        store.gather(second)
    other = _store(backend)
    with pytest.raises(UsageError, match="not a batch this store resolved ahead"):
        other.gather(store.resolve_ahead(np.array([3]), step=2))


def test_pipe_3_an_apply_skips_rows_a_waiting_batch_created(backend):
    """Key 2 is pending at batch 0's resolve and admitted by batch 1's, resolved ahead: batch 0's apply
    leaves 2's row alone (serially it had none), and updates it once batch 1 is gathered."""
    store = _store(backend, access_threshold=2)
    first = store.resolve_ahead(np.array([1, 1, 2]), step=0)
    second = store.resolve_ahead(np.array([2]), step=1)
    created = store.export()
    row_of_2 = created.values[created.keys.tolist().index(2)].copy()
    result = store.gather(first)
    assert store.apply_gradients(result, np.ones((2, DIM), np.float32), step=0) == 1     # only key 1
    assert np.array_equal(store.export().values[created.keys.tolist().index(2)], row_of_2)
    store.gather(second)
    assert store.apply_gradients(np.array([2]), np.ones((1, DIM), np.float32), step=1) == 1


def test_pipe_4_boundaries_are_refused_while_a_batch_waits_and_allowed_after(backend, tmp_path):
    store = _store(backend, access_threshold=1, eviction_threshold=1)
    batch = store.resolve_ahead(np.array([5, 6]), step=0)
    assert store.stats()["size"] == 2              # reads include the resolve (PIPE-4)
    before = snapshot(store)
    for call, run in {"save": lambda: store.save(tmp_path), "evict": store.evict,
                      "set_threshold": lambda: store.set_threshold(2),
                      "lookup": lambda: store.lookup(np.array([5]), step=0),
                      "set_optimizer": lambda: store.set_optimizer(Adagrad(0.1, initial_accumulator_value=0.5))}.items():
        with pytest.raises(UsageError, match=rf"table 't': {call}: 1 batch\(es\) resolved ahead .*\(PIPE-4\)"):
            run()
        assert_unchanged(store, before)
    store.set_optimizer(Adagrad(0.5))              # the same initial slots: no boundary (INIT-5)
    store.gather(batch)
    store.save(tmp_path)
    assert store.evict(now=5).tolist() == [5, 6]


def test_pipe_5_depth_push_and_pop(backend):
    """Depth 2: three batches pushed ahead of the next pop is one too many; a resolve error is raised by
    its pop after the tables before the failing one were gathered (they can be used again)."""
    stores = [_store(backend), _store(backend, name="small", device_vocabulary_size=2)]
    with pytest.raises(UsageError, match=r"tables 't', 'small': depth: .* >= 1, got 0"):
        KeyPipeline(stores, depth=0)
    with KeyPipeline(stores, depth=2) as pipeline:
        for step in range(3):
            pipeline.push([np.array([step]), np.array([step])], step=step)
        with pytest.raises(UsageError, match=r"push: 3 batches are pushed and not popped; the pipeline's depth is 2"):
            pipeline.push([np.array([9]), np.array([9])], step=3)
        assert [len(r.unique_keys) for r in pipeline.pop()] == [1, 1]
        assert [len(r.unique_keys) for r in pipeline.pop()] == [1, 1]
        with pytest.raises(Exception, match=r"table 'small': device_vocabulary_size"):
            pipeline.pop()                   # the third key does not fit table 'small'
        assert pipeline.pending == 0
        stores[0].save(os.path.join(tempfile.mkdtemp(), "x"))   # nothing waits on table 't' either
        with pytest.raises(UsageError, match="pop: no batch was pushed"):
            pipeline.pop()


def test_pipe_6_engines_that_cannot_resolve_ahead_run_serially(backend, tmp_path, caplog):
    """A DDR table is not pipelined: resolve_ahead is refused, and KeyPipeline looks it up in pop with one
    warning naming the table; the results equal a plain lookup's."""
    config = TableConfig("ddr", dim=DIM, device_vocabulary_size=8, host_vocabulary_size=64)
    tiered, twin = (open_store(config, Adagrad(0.1), backend=backend) for _ in range(2))
    with pytest.raises(UsageError, match=r"table 'ddr': resolve_ahead: a TieredEngine .* \(PIPE-6\)"):
        tiered.resolve_ahead(np.array([1]), step=0)
    with caplog.at_level("WARNING"), KeyPipeline([tiered]) as pipeline:
        batches = [np.arange(step, step + 6) for step in range(4)]
        for step, keys in enumerate(batches):
            pipeline.push([keys], step=step)
            (result,) = pipeline.pop()
            assert_same_result(result, twin.lookup(keys, step=step))
    assert [r.message for r in caplog.records if "PIPE-6" in r.message] == [
        "table 'ddr': the key pipeline runs its batches serially: a TieredEngine reads rows while it resolves (PIPE-6)"]


@pytest.mark.parametrize("value, expected", [(None, True), ("1", True), ("0", False), ("off", False),
                                             ("False", False), ("no", False)])
def test_pipe_7_the_switch(monkeypatch, backend, value, expected):
    """MXREC_KEY_PIPELINE turns the pipeline off; off, pop is the plain lookup (nothing resolved ahead)."""
    if value is None:
        monkeypatch.delenv(SWITCH, raising=False)
    else:
        monkeypatch.setenv(SWITCH, value)
    assert enabled_by_default() is expected
    store = _store(backend)
    with KeyPipeline([store]) as pipeline:
        pipeline.push([np.array([1, 2])], step=0)
        assert len(store.ahead) == (1 if expected else 0)
        pipeline.pop()
