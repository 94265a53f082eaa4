"""The key pipeline over the storage tiers (spec/pipeline.md, PIPE-10): a pipelined DDR or SSD store equals
the serial one bit for bit.

The comparison machine is tests/test_pipeline.py's, over tiered tables small enough that rows move between
the device, host memory and disk at every step: a store driven through ``KeyPipeline`` (batches resolved ahead,
SSD rows read ahead into a staging buffer) and a serial twin driven through plain ``lookup`` /
``apply_gradients``, with saves, loads, warm starts, evictions, ``set_threshold`` and evaluation lookups
between any resolve ahead and its gather, compared after every call: the rows each step gets, the errors,
the exported state, the statistics (tier and disk counters included), each key's tier and the checkpoint
files.  The directed tests pin what the machine may miss: a row read ahead from disk that changed before
its gather, and that a current staged read is really used."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from mxrec_ref import Adagrad, MxrecError, TableConfig, open_store
from mxrec_ref.errors import DiskCorruptionError
from mxrec_ref.conformance.checks import (assert_same_result, assert_same_stores, call_capturing, folder_bytes,
                                          save_and_reload)
from mxrec_ref.conformance.strategies import gradients, initializers, optimizers
from mxrec_ref.pipeline import KeyPipeline
from mxrec_ref.tiers.store import TieredPrepared

DIM = 3
KEY_SPACE = 20          # keys 0..19 (and padding): they come back often, after going down the tiers


@st.composite
def tiered_configs(draw, ssd: bool):
    admission = draw(st.sampled_from([None, 0, 1, 2]))
    eviction = draw(st.sampled_from([None, 0, 1, 3])) if admission is not None else None
    return dict(
        name="t", dim=DIM, device_vocabulary_size=draw(st.integers(4, 6)), host_vocabulary_size=draw(st.integers(1, 3)),
        ssd_vocabulary_size=64 if ssd else 0, access_threshold=admission, eviction_threshold=eviction,
        faae_coefficient=draw(st.integers(1, 2)), initializer=draw(initializers))


# At most 5 positions: most batches fit the device tier (TIER-3), and each pushes rows down the tiers.
batches = st.lists(st.one_of(st.integers(0, KEY_SPACE - 1), st.just(-1)), max_size=5).map(
    lambda ks: np.array(ks, dtype=np.int64))


class TieredPipelineComparison(RuleBasedStateMachine):
    """A pipelined tiered store (``self.piped`` behind ``self.pipeline``) and a serial twin (``self.serial``)."""

    def __init__(self, backend: str, ssd: bool, worker: bool, depth: int):
        super().__init__()
        self.backend, self.ssd, self.worker, self.depth = backend, ssd, worker, depth
        self.directory = tempfile.mkdtemp(prefix="mxrec-pipeline-tiers-")
        self.saves = 0
        self.step = 0
        self.waiting = deque()      # the batches pushed and not popped: (keys, pad_to)
        self.pipeline = None

    def teardown(self):
        if self.pipeline is not None:
            self.pipeline.close()
        for store in (getattr(self, "piped", None), getattr(self, "serial", None)):
            if store is not None and store.engine.disk is not None:
                store.engine.disk.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _open(self, name: str):
        ssd = {"ssd_data_path": [os.path.join(self.directory, f"ssd-{name}")]} if self.ssd else {}
        return open_store(TableConfig(**self.config, **ssd), self.optimizer, backend=self.backend)

    @initialize(config=st.data(), optimizer=optimizers)
    def open(self, config, optimizer):
        self.config, self.optimizer = config.draw(tiered_configs(self.ssd)), optimizer
        self.piped, self.serial = self._open("piped"), self._open("serial")
        self.pipeline = KeyPipeline([self.piped], depth=self.depth, worker=self.worker, enabled=True)

    # ------------------------------------------------------------------ training
    @precondition(lambda self: len(self.waiting) <= self.depth)
    @rule(keys=batches, extra=st.sampled_from([None, 0, 3]))
    def push(self, keys, extra):
        """A coming batch, resolved ahead now (PIPE-1, PIPE-10): nothing to compare but that nothing changed."""
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
        except MxrecError as raised:     # the device tier too small for the batch (TIER-3): the serial error too
            piped, error = None, (type(raised), str(raised))
        serial, serial_error = call_capturing(self.serial, "lookup", keys, step=self.step, pad_to=pad_to)
        assert error == serial_error
        if serial is not None:
            assert_same_result(piped, serial)
            grads = gradients(len(serial.unique_keys), DIM, seed)
            assert self.piped.apply_gradients(piped, grads, step=self.step) == \
                self.serial.apply_gradients(serial, grads, step=self.step)

    @rule(keys=batches, seed=st.integers(0, 2**16))
    def serial_step(self, keys, seed):
        """A plain training lookup and apply on both, batches waiting or not (rows move under them)."""
        results = [call_capturing(store, "lookup", keys, step=self.step) for store in (self.piped, self.serial)]
        assert results[0][1] == results[1][1]
        if results[1][0] is not None:
            assert_same_result(results[0][0], results[1][0])
            grads = gradients(len(results[1][0].unique_keys), DIM, seed)
            for store, (result, _) in zip((self.piped, self.serial), results):
                store.apply_gradients(result, grads, step=self.step)

    # ------------------------------------------------- calls between steps: no boundary (PIPE-4)
    @rule(threshold=st.integers(0, 3))
    def set_threshold(self, threshold):
        self.piped.set_threshold(threshold)
        self.serial.set_threshold(threshold)

    @precondition(lambda self: self.config["eviction_threshold"] is not None)
    @rule(later=st.integers(0, 3))
    def evict(self, later):
        now = self.step + later
        assert self.piped.evict(now=now).tolist() == self.serial.evict(now=now).tolist()

    @rule(keys=batches)
    def evaluate(self, keys):
        """An evaluation lookup brings rows back from disk (TIER-6): it changes the disk under a staged read."""
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
        """After every call, batches waiting or not: the same everything, each key in the same tier."""
        if self.pipeline is None:
            return
        assert_same_stores(self.piped, self.serial)
        keys = np.arange(-1, KEY_SPACE, dtype=np.int64)
        assert self.piped.tier_of(keys).tolist() == self.serial.tier_of(keys).tolist()
        assert self.piped.row_handles(keys).tolist() == self.serial.row_handles(keys).tolist()


@pytest.mark.parametrize("ssd", [False, True], ids=["ddr", "ssd"])
@pytest.mark.parametrize("worker, depth", [(False, 1), (True, 2)], ids=["in_push", "worker_depth2"])
def test_pipe_10_a_pipelined_tiered_store_equals_the_serial_one_after_every_call(backend, ssd, worker, depth):
    """PIPE-10 with PIPE-1..PIPE-5: the comparison machine over DDR and SSD tables, both backends."""
    run_state_machine_as_test(lambda: TieredPipelineComparison(backend, ssd, worker, depth),
                              settings=settings(max_examples=6, stateful_step_count=25, deadline=None,
                                                suppress_health_check=list(HealthCheck)))


# ------------------------------------------------------------------ directed
def _ssd_pair(backend, tmp_path, **config):
    config = {"name": "t", "dim": DIM, "device_vocabulary_size": 2, "host_vocabulary_size": 1,
              "ssd_vocabulary_size": 16, **config}
    return [open_store(TableConfig(**config, ssd_data_path=[str(tmp_path / name)]), Adagrad(0.5), backend=backend)
            for name in ("store", "twin")]


def _train(store, keys, step, value=1.0):
    result = store.lookup(np.array(keys), step=step)
    store.apply_gradients(result, np.full((len(result.unique_keys), DIM), value, np.float32), step=step)


def test_pipe_10_a_row_read_ahead_from_disk_that_changed_is_read_again(backend, tmp_path):
    """Key 1's row is on disk when its batch is resolved ahead: its record is read into the staging buffer.
    Before the gather it comes back, is trained (its values change) and goes to disk again: the staged copy
    is stale, and the gather must return the row as it is now -- the serial lookup's row."""
    store, twin = _ssd_pair(backend, tmp_path)
    for one in (store, twin):
        _train(one, [1, 2], step=0)
        _train(one, [3, 4], step=1)         # 1 and 2 leave the device; host keeps one row: one goes to disk
        _train(one, [5, 6], step=2)
    assert store.tier_of(np.array([1]))[0] == "disk"
    ahead = store.resolve_ahead(np.array([1, 7]))
    staged = ahead.prepared.staged
    assert isinstance(ahead.prepared, TieredPrepared) and staged.taken.tolist() == [1]
    assert store.stats() == twin.stats()        # the read ahead counted no disk read (PIPE-1)
    for one in (store, twin):
        _train(one, [1, 8], step=3, value=5.0)   # 1 comes back, changes, leaves the device
        for step in range(4, 10):                # keys seen more often keep host memory: 1 goes to disk (TIER-5)
            _train(one, [9, 10] if step % 2 else [11, 12], step=step)
    assert store.tier_of(np.array([1]))[0] == "disk"
    got = store.gather(ahead, step=10)
    assert_same_result(got, twin.lookup(np.array([1, 7]), step=10))
    assert not np.array_equal(staged.rows[0][0], got.rows[0])      # the staged row was stale
    assert store.export().differences(twin.export()) == [] and store.stats() == twin.stats()
    assert store.tier_of(np.arange(13)).tolist() == twin.tier_of(np.arange(13)).tolist()


def test_pipe_10_a_current_staged_read_is_taken_as_it_is(backend, tmp_path):
    """Nothing on disk changed between the resolve ahead and the gather: the gather reads no record (the
    staged ones are taken), yet counts the reads the serial lookup counts and returns its rows."""
    store, twin = _ssd_pair(backend, tmp_path)
    for one in (store, twin):
        for step, keys in enumerate([[1, 2], [3, 4], [5, 6]]):
            _train(one, keys, step=step)
    on_disk = [k for k in range(1, 7) if store.tier_of(np.array([k]))[0] == "disk"]
    assert len(on_disk) >= 2
    ahead = store.resolve_ahead(np.array(on_disk[:2]))
    disk = store.engine.disk

    def no_read(*args, **kwargs):
        raise AssertionError("the gather read the disk again")
    disk._read_entries = no_read            # instance attribute: this store's disk only
    try:
        got = store.gather(ahead, step=3)
    finally:
        del disk._read_entries
    assert_same_result(got, twin.lookup(np.array(on_disk[:2]), step=3))
    assert store.stats() == twin.stats() and store.stats()["disk_to_host_rows"] >= 2
    assert store.export().differences(twin.export()) == []


def test_pipe_10_a_corrupt_record_read_ahead_raises_at_the_gather(backend, tmp_path):
    """A record that fails its checks when the batch is resolved ahead stages nothing and raises nothing
    there (PIPE-1: the resolve ahead shows nothing); the gather's own read raises it, as the serial lookup
    does, and changes nothing (TIER-6)."""
    store, _ = _ssd_pair(backend, tmp_path)
    for step, keys in enumerate([[1, 2], [3, 4], [5, 6]]):
        _train(store, keys, step=step)
    on_disk = [k for k in range(1, 7) if store.tier_of(np.array([k]))[0] == "disk"][:2]
    size = store.engine.disk._format.size
    for path in (tmp_path / "store").rglob("*.ssd"):     # a payload byte of every record flipped
        data = bytearray(path.read_bytes())
        for start in range(0, len(data) - size + 1, size):
            data[start + 37] ^= 0x10
        path.write_bytes(bytes(data))
    stats = store.stats()
    ahead = store.resolve_ahead(np.array(on_disk))
    assert ahead.prepared.staged is None and store.stats() == stats
    with pytest.raises(DiskCorruptionError, match=r"table 't'"):
        store.gather(ahead, step=3)
    assert store.stats() == stats and store.tier_of(np.array(on_disk)).tolist() == ["disk"] * len(on_disk)


def test_pipe_10_a_ddr_batch_prepares_through_the_engine_behind(backend):
    """DDR: the engine behind's dedup and initial rows are made ahead (PIPE-3), and the gather is the
    serial lookup with the device tier's placement worked out at commit."""
    config = TableConfig("ddr", dim=DIM, device_vocabulary_size=4, host_vocabulary_size=8)
    store, twin = (open_store(config, Adagrad(0.1), backend=backend) for _ in range(2))
    ahead = store.resolve_ahead(np.array([1, 2, 1, 3]))
    assert ahead.prepared.done_ahead and ahead.prepared.staged is None
    assert ahead.prepared.inner.init_at.tolist() == [0, 1, 2]        # the engine behind's initial rows
    for one in (store, twin):
        _train(one, [3, 4, 5, 6], step=0)       # 3 admitted in between; the device full
    assert_same_result(store.gather(ahead, step=1), twin.lookup(np.array([1, 2, 1, 3]), step=1))
    assert store.export().differences(twin.export()) == [] and store.stats() == twin.stats()
    assert store.tier_of(np.arange(7)).tolist() == twin.tier_of(np.arange(7)).tolist()


# ------------------------------------------------------------------ the TF layer
TF_OWN = ("checkpoint", "graph.pbtxt", "events.out.tfevents")     # TF's own timestamps, as test_pipeline_tf.py


@pytest.mark.parametrize("storage", ["ddr", "ssd"])
def test_pipe_10_the_wide_and_deep_job_on_tiers_is_the_same_with_the_pipeline_on_and_off(backend, monkeypatch,
                                                                                          tmp_path, storage):
    """PIPE-8 with PIPE-10: `mxrec-ref train` with DDR or SSD tables whose device tier is small enough that rows
    move every step; evaluations, the EvictHook and checkpoints meet batches the input pipeline resolved (and,
    SSD, read from disk) ahead: the same history, statistics and checkpoint files."""
    from mxrec_ref import train
    from mxrec_ref.pipeline import SWITCH

    results = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        config = train.TrainConfig(backend=backend, rows=4_000, steps=30, batch_size=256, eval_every=15,
                                   storage=storage, device_vocabulary_size=3_000, eviction_threshold=30,
                                   evict_step_interval=10, save_checkpoint_steps=12,
                                   ssd_data_path=str(tmp_path / f"ssd{switch}") if storage == "ssd" else None,
                                   checkpoint_dir=str(tmp_path / switch), progress=False)
        results[switch] = train.run(config, echo=lambda *args: None)
    on, off = results["1"], results["0"]
    strip = lambda history: [{k: v for k, v in h.items() if k != "examples_per_second"} for h in history]  # noqa: E731
    assert strip(on["history"]) == strip(off["history"]) and len(on["history"]) == 2
    assert on["stats"] == off["stats"]
    deep = on["stats"]["deep"]
    assert deep["device_to_host_rows"] > 0 and (storage == "ddr" or deep["disk_to_host_rows"] > 0)
    files = [{name: data for name, data in folder_bytes(tmp_path / switch).items() if not name.split("/")[-1].startswith(TF_OWN)
              and not name.endswith(".meta")} for switch in ("1", "0")]
    assert files[0] == files[1] and any("sparse" in name for name in files[0])
