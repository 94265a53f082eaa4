"""CON-10: the engine behind the storage tiers is a TierMoves; open_store refuses any other."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mxrec_ref import Adagrad, Store, TableConfig, UsageError, backends, open_store
from mxrec_ref.contract import TierMoves, checked_table
from mxrec_ref.engine import Engine
from mxrec_ref.ref import RefEngine
from mxrec_ref.tiers import FastDevicePlacement, RefDevicePlacement
from mxrec_ref.tiers.placement import PyHostHeap

try:
    from mxrec_ref.fast import FastEngine
except ImportError:       # the fast path is not built: the reference's engine is checked alone
    FastEngine = None


class HbmOnlyStore(Store):
    """A third-party store written against the hooks (every hook, by delegation to a reference
    engine's public protocol) that offers none of the tier moves: it can hold HBM tables only."""

    backend_name = "hbm-only"

    def __init__(self, config, optimizer=None):
        super().__init__(config, optimizer)
        self.rows = RefEngine(config, self.optimizer)

    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        return self.rows.lookup(keys, shape, train=train, step=step, timestamp=timestamp, pad_to=pad_to,
                                counts=counts)

    def _apply(self, keys, grads, mask, step):
        return self.rows.apply(keys, grads, mask, step, optimizer=self.optimizer)

    def _evict(self, now):
        return self.rows.evict(now)

    def _size(self):
        return self.rows.size()

    def _capacity(self):
        return self.rows.capacity()

    def _stats(self):
        return self.rows.stats()

    def _export(self):
        return self.rows.export()

    def _import_state(self, state):
        self.rows.import_state(state)

    def _row_handles(self, keys):
        return self.rows.row_handles(keys)


@pytest.fixture
def hbm_only(monkeypatch):
    monkeypatch.setitem(backends._BACKENDS, "hbm-only", HbmOnlyStore)
    return "hbm-only"


def ddr_config(**extra):
    return TableConfig("t", dim=2, device_vocabulary_size=2, host_vocabulary_size=4, access_threshold=0, **extra)


def test_con_10_a_store_without_tier_moves_is_refused_a_host_tier(hbm_only, tmp_path):
    with pytest.raises(UsageError, match=r"table 't': host_vocabulary_size: backend 'hbm-only' \(HbmOnlyStore\)"):
        open_store(ddr_config(), Adagrad(0.1), backend=hbm_only)
    ssd = ddr_config(ssd_vocabulary_size=10, ssd_data_path=[str(tmp_path)])
    with pytest.raises(UsageError, match="host_vocabulary_size.*TierMoves"):
        open_store(ssd, Adagrad(0.1), backend=hbm_only)
    assert list(tmp_path.iterdir()) == []          # refused before the disk tier made anything


def test_con_10_the_same_store_still_holds_hbm_tables(hbm_only):
    store = open_store(TableConfig("t", dim=2, device_vocabulary_size=4, access_threshold=0), backend=hbm_only)
    result = store.lookup(np.array([3, 1, 3]), step=0)
    assert result.admitted.tolist() == [True, True] and store.size() == 2


def test_con_10_each_builtin_backend_brings_its_own_placement(backend):
    placement = {"ref": RefDevicePlacement, "fast": FastDevicePlacement}[backend]
    tiered = open_store(ddr_config(), Adagrad(0.1), backend=backend)
    assert isinstance(tiered.engine.inner, TierMoves)
    assert type(tiered.engine.device) is placement
    tiered.lookup(np.array([1, 2]), step=0)
    tiered.lookup(np.array([3, 4]), step=1)
    assert tiered.stats()["device_rows"] == 2 and tiered.stats()["host_rows"] == 2


class _Recording:
    """Forwards every attribute to the engine behind the tiers and records which were used."""

    def __init__(self, inner):
        object.__setattr__(self, "target", inner)
        object.__setattr__(self, "used", set())

    def __getattr__(self, name):
        self.used.add(name)
        return getattr(self.target, name)


def _declared() -> set[str]:
    """What CON-10 lets the tiers use: the TierMoves members and the public Engine protocol."""
    tier_moves = set(TierMoves.__abstractmethods__) | set(TierMoves.__annotations__)
    public = {name for name in dir(Engine) if not name.startswith("_")}
    return tier_moves | public


def test_con_10_the_tiers_use_only_what_tier_moves_declares(backend, tmp_path):
    """Every call of a DDR/SSD table reaches its in-memory engine through TierMoves and the public
    Engine protocol; no underscore name of the engine behind it."""
    config = TableConfig("t", dim=2, device_vocabulary_size=4, host_vocabulary_size=2, ssd_vocabulary_size=50,
                         ssd_data_path=[str(tmp_path / "ssd")], access_threshold=2, eviction_threshold=5)
    tiered = open_store(config, Adagrad(0.1), backend=backend)
    recording = _Recording(tiered.engine.inner)
    tiered.engine.inner = recording
    for step in range(6):
        keys = np.array([step, step + 1, step + 2, 7])
        result = tiered.lookup(keys, step=step, pad_to=8)
        tiered.apply_gradients(result, np.ones((8, 2), np.float32), step=step)
        tiered.lookup(keys, train=False)
    tiered.apply_gradients(np.array([1, 2, 7]), np.ones((3, 2), np.float32), step=6)
    tiered.set_threshold(1)
    assert tiered.stats()["disk_rows"] > 0
    tiered.tier_of(np.arange(9))
    tiered.row_handles(np.arange(9))
    tiered.size(), tiered.capacity(), tiered.table_clock()
    tiered.save(tmp_path / "ckpt")
    tiered.evict()
    tiered.load(tmp_path / "ckpt")
    tiered.warm_start(tmp_path / "ckpt", now=9)
    tiered.export()
    assert {"dedup", "resolve_deduped", "rows_of", "drop_rows", "admitted_entries", "apply", "evict",
            "import_state", "export"} <= recording.used
    assert recording.used - _declared() == set()


def test_tier_11_each_backend_brings_its_tier_code_and_the_reference_tiers_use_no_c_kernel():
    """TIER-11: the reference store's tiers run the reference's placement, heap and disk kernels, and
    no module of the shared tier code holds a kernel of the extension, built or not (they once
    picked it at import time, so the comparison machines compared the fast kernels with themselves)."""
    import importlib
    import pkgutil

    from mxrec_ref import tiers
    from mxrec_ref.tiers.disk import RefDiskKernels
    from mxrec_ref.tiers.placement import PyHostHeap

    assert (RefEngine.device_placement, RefEngine.host_heap, RefEngine.disk_kernels) == (
        RefDevicePlacement, PyHostHeap, RefDiskKernels)
    modules = [importlib.import_module(f"mxrec_ref.tiers.{info.name}") for info in pkgutil.iter_modules(tiers.__path__)]
    assert {"disk", "disk_index", "disk_reads", "disk_records", "placement", "store"} <= {
        module.__name__.rsplit(".", 1)[1] for module in modules}
    from_extension = {f"{module.__name__}.{name}" for module in modules for name, value in vars(module).items()
                      if getattr(value, "__module__", None) == "mxrec_ref._fast"}
    assert from_extension == set()
    if "fast" in backends.available_backends():
        from mxrec_ref.fast.store import FastEngine

        assert [kind.__module__ for kind in (FastEngine.device_placement, FastEngine.disk_kernels)] == [
            "mxrec_ref.fast.placement", "mxrec_ref.fast.disk"]


class ThirdPartyEngine(Engine, TierMoves):
    """A third party's engine written against the public protocol only: every call goes, by public
    name, to a reference engine it owns (a stand-in for storage of its own)."""

    backend_name = "third-party"
    device_placement = RefDevicePlacement
    host_heap = PyHostHeap

    def __init__(self, config, optimizer):
        super().__init__(config, optimizer)
        self.rows = RefEngine(config, optimizer)

    clock = property(lambda self: self.rows.clock)
    clock_source = property(lambda self: self.rows.clock_source)

    def resolve(self, keys, shape, **call):
        return self.rows.resolve(keys, shape, **call)

    def gather(self, resolved):
        return self.rows.gather(resolved)

    def apply(self, keys, grads, mask, step, *, optimizer, handles=None):
        return self.rows.apply(keys, grads, mask, step, optimizer=optimizer, handles=handles)

    def set_threshold(self, threshold):
        super().set_threshold(threshold)
        self.rows.set_threshold(threshold)

    def set_optimizer(self, optimizer):
        super().set_optimizer(optimizer)
        self.rows.set_optimizer(optimizer)

    def evict(self, now):
        return self.rows.evict(now)

    def size(self):
        return self.rows.size()

    def capacity(self):
        return self.rows.capacity()

    def stats(self):
        return self.rows.stats()

    def export(self):
        return self.rows.export()

    def import_state(self, state):
        self.rows.import_state(state)

    def row_handles(self, keys):
        return self.rows.row_handles(keys)

    def dedup(self, keys, counts):
        return self.rows.dedup(keys, counts)

    def resolve_deduped(self, deduped, keys, shape, **call):
        return self.rows.resolve_deduped(deduped, keys, shape, **call)

    def rows_of(self, keys, rows=None):
        return self.rows.rows_of(keys, rows)

    def entries_of(self, keys, rows):
        return self.rows.entries_of(keys, rows)

    def drop_rows(self, keys):
        self.rows.drop_rows(keys)

    def put_rows(self, keys, values, slots, counts, last_seen):
        self.rows.put_rows(keys, values, slots, counts, last_seen)

    def admitted_entries(self):
        return self.rows.admitted_entries()


def open_third_party(config, optimizer=None):
    config, optimizer = checked_table(config, optimizer)
    return Store(config, optimizer, engine=ThirdPartyEngine(config, optimizer))


@pytest.mark.parametrize("ssd", [False, True])
def test_con_10_a_third_party_engine_gets_the_tiers_from_open_store(monkeypatch, tmp_path, ssd):
    """A store over any Engine that is a TierMoves holds DDR and SSD tables: open_store puts the
    tiers over it, and it trains as the reference's tiered table does, bit for bit."""
    monkeypatch.setitem(backends._BACKENDS, "third-party", open_third_party)
    extra = dict(ssd_vocabulary_size=40, ssd_data_path=[str(tmp_path / "ssd")]) if ssd else {}
    config = TableConfig("t", dim=2, device_vocabulary_size=4, host_vocabulary_size=3, access_threshold=2,
                         eviction_threshold=4, **extra)
    theirs = open_store(config, Adagrad(0.1), backend="third-party")
    ours = open_store(dataclasses.replace(config, ssd_data_path=[str(tmp_path / "ref")]) if ssd else config,
                      Adagrad(0.1), backend="ref")
    assert type(theirs).__name__ == "TieredStore" and theirs.backend_name == "third-party"
    for step in range(8):
        keys = np.array([step, step + 1, step % 3, 9])
        for store in (theirs, ours):
            result = store.lookup(keys, step=step, pad_to=6)
            store.apply_gradients(result, np.full((6, 2), 0.5, np.float32), step=step)
    for store in (theirs, ours):
        store.evict()
    assert theirs.stats() == ours.stats() and theirs.stats()["host_to_device_rows"] > 0
    mine, reference = theirs.export(), ours.export()
    assert np.array_equal(mine.keys, reference.keys) and np.array_equal(mine.values, reference.values)


def test_con_10_a_store_needs_an_engine_or_the_hooks():
    """A Store subclass that supplies no engine must implement the hooks; one that implements neither
    fails when it is built, naming what it lacks (as the abstract base class did)."""
    class Nothing(Store):
        backend_name = "nothing"

    with pytest.raises(TypeError, match="Nothing without an engine.*_lookup, _apply"):
        Nothing(TableConfig("t", dim=2, device_vocabulary_size=4))
    engine = RefEngine(TableConfig("t", dim=2, device_vocabulary_size=4, access_threshold=0), Adagrad(0.1))
    store = Nothing(engine.config, engine.optimizer, engine=engine)
    assert store.lookup(np.array([5, 5, 6]), step=0).n_unique == 2 and engine.size() == 2


def test_con_10_the_engine_protocol_is_public_names_only():
    """What a wrapper engine may call (the Engine protocol and TierMoves) carries no underscore name,
    and the built-in engines implement all of it."""
    declared = set(Engine.__abstractmethods__) | set(TierMoves.__abstractmethods__) | set(TierMoves.__annotations__)
    assert declared and not [name for name in declared if name.startswith("_")]
    assert {"resolve", "gather", "apply", "evict", "import_state", "export", "row_handles"} <= declared
    for engine in (RefEngine(ddr_config(), Adagrad(0.1)),) + ((FastEngine(ddr_config(), Adagrad(0.1)),)
                                                               if FastEngine is not None else ()):
        assert isinstance(engine, Engine) and isinstance(engine, TierMoves)
        assert all(hasattr(engine, name) for name in declared)
