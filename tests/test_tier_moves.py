"""CON-10: the store behind the storage tiers is a TierMoves; open_store refuses any other."""
from __future__ import annotations

import numpy as np
import pytest

from mxrec_ref import Adagrad, Store, TableConfig, UsageError, backends, open_store
from mxrec_ref.contract import TierMoves
from mxrec_ref.ref import RefStore
from mxrec_ref.tiers import FastDevicePlacement, RefDevicePlacement


class HbmOnlyStore(Store):
    """A third-party store that keeps the Store contract (every hook, by delegation to the
    reference) but offers none of the tier moves: it can hold HBM tables only."""

    backend_name = "hbm-only"

    def __init__(self, config, optimizer=None):
        super().__init__(config, optimizer)
        self._ref = RefStore(config, self.optimizer)

    def _lookup(self, *args):
        return self._ref._lookup(*args)

    def _apply(self, *args):
        return self._ref._apply(*args)

    def _evict(self, now):
        return self._ref._evict(now)

    def _size(self):
        return self._ref._size()

    def _capacity(self):
        return self._ref._capacity()

    def _stats(self):
        return self._ref._stats()

    def _export(self):
        return self._ref._export()

    def _import_state(self, state):
        self._ref._import_state(state)

    def _row_handles(self, keys):
        return self._ref._row_handles(keys)


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
    assert isinstance(tiered._inner, TierMoves)
    assert type(tiered._device) is placement
    tiered.lookup(np.array([1, 2]), step=0)
    tiered.lookup(np.array([3, 4]), step=1)
    assert tiered.stats()["device_rows"] == 2 and tiered.stats()["host_rows"] == 2


class _Recording:
    """Forwards every attribute to the store behind the tiers and records which were used."""

    def __init__(self, inner):
        object.__setattr__(self, "target", inner)
        object.__setattr__(self, "used", set())

    def __getattr__(self, name):
        self.used.add(name)
        return getattr(self.target, name)


def _declared() -> set[str]:
    """What CON-10 lets the tiers use: the TierMoves members and the public Store API."""
    tier_moves = set(TierMoves.__abstractmethods__) | set(TierMoves.__annotations__) | set(TierMoves.STORE_HOOKS)
    public = {name for name in dir(Store) if not name.startswith("_")}
    return tier_moves | public


def test_con_10_the_tiers_use_only_what_tier_moves_declares(backend, tmp_path):
    """Every call of a DDR/SSD table reaches its in-memory store through TierMoves and the public
    Store API; the wrapper reached for _size, _stats, _export and _row_handles besides."""
    config = TableConfig("t", dim=2, device_vocabulary_size=4, host_vocabulary_size=2, ssd_vocabulary_size=50,
                         ssd_data_path=[str(tmp_path / "ssd")], access_threshold=2, eviction_threshold=5)
    tiered = open_store(config, Adagrad(0.1), backend=backend)
    recording = _Recording(tiered._inner)
    tiered._inner = recording
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
    assert {"dedup", "lookup_deduped", "rows_of", "drop_rows", "admitted_entries", "_apply",
            "_apply_result"} <= recording.used
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

    assert (RefStore.device_placement, RefStore.host_heap, RefStore.disk_kernels) == (
        RefDevicePlacement, PyHostHeap, RefDiskKernels)
    modules = [importlib.import_module(f"mxrec_ref.tiers.{info.name}") for info in pkgutil.iter_modules(tiers.__path__)]
    assert {"disk", "disk_index", "disk_reads", "disk_records", "placement", "store"} <= {
        module.__name__.rsplit(".", 1)[1] for module in modules}
    from_extension = {f"{module.__name__}.{name}" for module in modules for name, value in vars(module).items()
                      if getattr(value, "__module__", None) == "mxrec_ref._fast"}
    assert from_extension == set()
    if "fast" in backends.available_backends():
        from mxrec_ref.fast.store import FastStore

        assert [kind.__module__ for kind in (FastStore.device_placement, FastStore.disk_kernels)] == [
            "mxrec_ref.fast.placement", "mxrec_ref.fast.disk"]
