"""Storage tiers, rule by rule (spec/tiers.md)."""
import errno
import gc
import os
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref import (Adagrad, CapacityError, ConfigError, DiskCorruptionError, DiskFullError, MxrecError,
                       TableConfig, UsageError, open_store)
from mxrec_ref.tiers import FastDevicePlacement, RefDevicePlacement
from mxrec_ref.tiers.placement import HostOrder, PyHostHeap

from .checks import assert_unchanged, keys, snapshot


def ddr(backend, device=3, host=4, **extra):
    config = TableConfig("t", dim=2, device_vocabulary_size=device, host_vocabulary_size=host,
                         access_threshold=0, **extra)
    return open_store(config, Adagrad(0.1), backend=backend)


def ssd(backend, folder, device=3, host=2, options=None, **extra):
    config = TableConfig("t", dim=2, device_vocabulary_size=device, host_vocabulary_size=host,
                         ssd_vocabulary_size=100, ssd_data_path=[str(folder)], access_threshold=0, **extra)
    return open_store(config, Adagrad(0.1), backend=backend, **(options or {}))


def flat(backend, **extra):
    config = TableConfig("t", dim=2, device_vocabulary_size=1, dynamic_expansion=True, access_threshold=0, **extra)
    return open_store(config, Adagrad(0.1), backend=backend)


def test_tier_1_modes_follow_the_configuration(backend, tmp_path):
    hbm = open_store(TableConfig("t", dim=2, device_vocabulary_size=4), backend=backend)
    assert not hbm.tiered
    hbm.lookup(keys(1, 2), step=0)
    assert (hbm.stats()["device_rows"], hbm.stats()["host_rows"], hbm.stats()["disk_rows"]) == (2, 0, 0)
    assert ddr(backend).tiered and ssd(backend, tmp_path).tiered
    with pytest.raises(ConfigError, match="ssd_vocabulary_size"):
        TableConfig("t", dim=2, ssd_vocabulary_size=4)
    with pytest.raises(ConfigError, match="host_vocabulary_size"):
        TableConfig("t", dim=2, host_vocabulary_size=4, dynamic_expansion=True)
    with pytest.raises(MxrecError, match="ssd_folder_limit_bytes"):
        ddr(backend) and open_store(TableConfig("t", dim=2, host_vocabulary_size=4), backend=backend,
                                    ssd_folder_limit_bytes=10)


def test_tier_2_a_ddr_table_grows_past_its_sizes(backend):
    store = ddr(backend, device=3, host=2)
    for step in range(10):
        store.lookup(keys(3 * step, 3 * step + 1, 3 * step + 2), step=step)
    assert store.size() == 30 and store.capacity() == 30
    assert store.stats()["host_rows"] == 27


def test_tier_3_a_batch_larger_than_the_device_fails_cleanly(backend):
    store = ddr(backend, device=3)
    store.lookup(keys(1, 2), step=0)
    before = snapshot(store)
    with pytest.raises(CapacityError, match=r"'t': device_vocabulary_size: .*4 distinct keys.* at least 4"):
        store.lookup(keys(1, 2, 3, 4, 4, -1), step=1)
    assert_unchanged(store, before)
    store.lookup(keys(1, 2, 3, -1, -1), step=1)   # padding does not count
    device_before = store.tier_of(keys(1, 2, 3)).tolist()
    store.lookup(keys(1, 5, 6, 7, 8), train=False)    # evaluation takes no device rows (TIER-4)
    assert store.tier_of(keys(1, 2, 3)).tolist() == device_before == ["device"] * 3


def test_tier_4_least_recently_used_rows_leave_the_device_ties_by_key(backend):
    store = ddr(backend, device=3)
    store.lookup(keys(30, 10, 20), step=0)          # one lookup: all last used together
    store.lookup(keys(40), step=1)                  # one must go: the tie goes to the smaller key
    assert store.tier_of(keys(10, 20, 30, 40)).tolist() == ["host", "device", "device", "device"]
    store.lookup(keys(20), step=2)
    store.lookup(keys(10), step=3)                  # back from host; 30 (step 0) is now the oldest
    assert store.tier_of(keys(10, 20, 30, 40)).tolist() == ["device", "device", "host", "device"]
    stats = store.stats()
    assert (stats["host_to_device_rows"], stats["device_to_host_rows"]) == (1, 2)
    assert stats["host_device_bytes"] == 3 * 4 * 2 * 2    # rows x float32 x dim x (value + accumulator)


def test_tier_5_least_frequently_used_host_rows_go_to_disk(backend, tmp_path):
    store = ssd(backend, tmp_path, device=2, host=2)
    store.lookup(keys(1, 1, 1, 2, 2), step=0)       # counts 1:3, 2:2
    store.lookup(keys(3, 4), step=1)                # 1, 2 to host
    store.lookup(keys(5, 6), step=2)                # 3, 4 to host: host holds 4 > 2
    # counts: 1:3 2:2 3:1 4:1 -> 3 and 4 (count 1, same last-seen, key order) go to disk
    assert store.tier_of(keys(1, 2, 3, 4, 5, 6)).tolist() == ["host", "host", "disk", "disk", "device", "device"]
    store.lookup(keys(7), step=3)   # 5 leaves the device (LRU tie by key); host 1,2,5: count 1 seen at 2
    assert store.tier_of(keys(5)).tolist() == ["disk"]
    stats = store.stats()
    assert stats["host_to_disk_rows"] == 3 and stats["disk_rows"] == 3 and stats["disk_writes"] == 3


def test_tier_5_rows_carry_their_state_to_disk_and_back(backend, tmp_path):
    tiered, reference = ssd(backend, tmp_path, device=2, host=1), flat(backend)
    for step, batch in enumerate([keys(1, 2), keys(3, 4), keys(5, 6), keys(1, 6), keys(2, 3)]):
        for store in (tiered, reference):
            result = store.lookup(batch, step=step)
            store.apply_gradients(result, np.full((2, 2), 0.5, np.float32), step=step)
    assert tiered.stats()["disk_to_host_rows"] >= 2
    assert tiered.export().differences(reference.export()) == []


def test_tier_6_a_corrupt_record_is_reported_with_its_path(backend, tmp_path):
    store = ssd(backend, tmp_path, device=2, host=1)
    for step, batch in enumerate([keys(1, 2), keys(3, 4), keys(5, 6)]):
        store.lookup(batch, step=step)
    on_disk = [k for k in range(1, 7) if store.tier_of(keys(k))[0] == "disk"]
    assert on_disk
    path = next(Path(tmp_path).glob("t.*.ssd"))
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF                               # inside the first record
    path.write_bytes(bytes(data))
    before = tier_snapshot(store)
    with pytest.raises(DiskCorruptionError, match=str(path)):
        store.lookup(keys(on_disk[0]), step=3)
    assert tier_snapshot(store) == before


def test_tier_6_a_truncated_file_is_reported_with_its_path(backend, tmp_path):
    store = ssd(backend, tmp_path, device=2, host=1)
    for step, batch in enumerate([keys(1, 2), keys(3, 4), keys(5, 6)]):
        store.lookup(batch, step=step)
    path = next(Path(tmp_path).glob("t.*.ssd"))
    os.truncate(path, path.stat().st_size - 3)
    with pytest.raises(DiskCorruptionError, match=str(path)):
        store.export()


def tier_snapshot(store):
    return store.tier_of(np.arange(10)).tolist(), store.stats()


def test_stat_2_a_read_failing_on_a_corrupt_record_counts_no_disk_reads(backend, tmp_path):
    """The good records a failed call read first are not counted either (CON-4)."""
    store = ssd(backend, tmp_path, device=2, host=1, options={"ssd_folder_limit_bytes": 10**6})
    for step, batch in enumerate([keys(1, 2), keys(3, 4), keys(5, 6), keys(7, 8)]):
        store.lookup(batch, step=step)
    on_disk = [k for k in range(1, 9) if store.tier_of(keys(k))[0] == "disk"]
    assert len(on_disk) >= 2
    path = next(Path(tmp_path).glob("t.*.ssd"))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF                               # inside the last record: the others read fine first
    path.write_bytes(bytes(data))
    before = store.stats()
    with pytest.raises(DiskCorruptionError):
        store.lookup(np.array(on_disk), train=False)
    assert store.stats() == before


def test_tier_7_a_full_disk_raises_cleanly_and_loses_nothing(backend, tmp_path):
    full = {"on": False}

    def fault_hook(path, n_bytes):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    tiered = ssd(backend, tmp_path, device=2, host=1, options={"ssd_fault_hook": fault_hook})
    reference = flat(backend)
    batches = [keys(2 * s, 2 * s + 1) for s in range(8)]
    for step, batch in enumerate(batches[:3]):
        tiered.lookup(batch, step=step), reference.lookup(batch, step=step)
    full["on"] = True
    tiered.lookup(batches[3], step=3), reference.lookup(batches[3], step=3)   # spill fails: rows stay in memory
    assert tiered.stats()["host_rows"] > 1
    assert tiered.export().differences(reference.export()) == []
    before = tiered.export()
    with pytest.raises(DiskFullError, match=r"'t'.*" + str(tmp_path)):
        tiered.lookup(batches[4], step=4)          # the retry fails before anything changes
    assert tiered.export().differences(before) == []
    full["on"] = False                              # space again: the table carries on
    for step, batch in enumerate(batches[4:], start=4):
        tiered.lookup(batch, step=step), reference.lookup(batch, step=step)
    assert tiered.export().differences(reference.export()) == []
    assert tiered.stats()["host_rows"] <= 1


def test_tier_7_a_folder_limit_spills_to_the_next_folder(backend, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    config = TableConfig("t", dim=2, device_vocabulary_size=2, host_vocabulary_size=1, ssd_vocabulary_size=10,
                         ssd_data_path=[str(first), str(second)], access_threshold=0)
    store = open_store(config, Adagrad(0.1), backend=backend, ssd_folder_limit_bytes=200)
    with pytest.raises(DiskFullError, match="ssd_data_path|folder"):
        for step in range(40):
            store.lookup(keys(2 * step, 2 * step + 1), step=step)
    assert list(first.glob("t.*.ssd")) and list(second.glob("t.*.ssd"))
    assert store.export().keys.tolist() == list(range(2 * step))   # the failed call changed nothing


def test_tier_8_checkpoints_move_between_modes(backend, tmp_path):
    tiered = ssd(backend, tmp_path / "ssd", device=2, host=1)
    for step, batch in enumerate([keys(1, 2), keys(3, 4), keys(5, 6)]):
        tiered.apply_gradients(tiered.lookup(batch, step=step), np.ones((2, 2), np.float32), step=step)
    assert tiered.stats()["disk_rows"] == 3
    tiered.save(tmp_path / "ckpt")
    hbm = flat(backend)
    hbm.load(tmp_path / "ckpt")
    assert hbm.export().differences(tiered.export()) == []
    again = ssd(backend, tmp_path / "ssd2", device=2, host=1)
    again.load(tmp_path / "ckpt")
    stats = again.stats()
    assert (stats["device_rows"], stats["host_rows"], stats["disk_rows"]) == (0, 1, 5)
    assert again.export().differences(tiered.export()) == []


def test_tier_9_files_must_not_preexist_and_go_with_the_store(backend, tmp_path):
    store = ssd(backend, tmp_path, device=2, host=1)
    for step, batch in enumerate([keys(1, 2), keys(3, 4)]):
        store.lookup(batch, step=step)
    assert list(tmp_path.glob("t.*.ssd"))
    with pytest.raises(MxrecError, match="ssd_data_path"):
        ssd(backend, tmp_path)
    del store
    gc.collect()
    assert not list(tmp_path.glob("t.*.ssd"))
    ssd(backend, tmp_path)                          # the folder is free again


@pytest.mark.parametrize("folder", ["/proc/mxrec-ssd", "read-only"])
def test_tier_9_an_unusable_ssd_folder_is_a_config_error_at_open(backend, tmp_path, folder):
    if folder == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        folder = tmp_path / "ro"
        folder.mkdir(mode=0o500)
    with pytest.raises(ConfigError, match=rf"table 't': ssd_data_path: cannot use folder '{folder}'"):
        ssd(backend, folder)


def test_tier_9_unknown_store_options_name_themselves(backend, tmp_path):
    with pytest.raises(UsageError, match="table 't': ssd_folder_limit: not an option of open_store"):
        ssd(backend, tmp_path, options={"ssd_folder_limit": 10})


def test_tier_10_statistics_add_up(backend, tmp_path):
    store = ssd(backend, tmp_path, device=2, host=2)
    rng = np.random.default_rng(1)
    for step in range(30):
        batch = rng.integers(0, 12, size=2)
        store.apply_gradients(store.lookup(batch, step=step), np.ones((len(np.unique(batch)), 2), np.float32),
                              step=step)
        stats = store.stats()
        assert stats["device_rows"] + stats["host_rows"] + stats["disk_rows"] == stats["size"]
        assert stats["device_rows"] <= 2 and stats["host_rows"] <= 2
    row_bytes = 4 * 2 * 2
    assert stats["host_disk_bytes"] == row_bytes * (stats["host_to_disk_rows"] + stats["disk_to_host_rows"])
    assert stats["disk_writes"] >= stats["host_to_disk_rows"]
    assert stats["disk_reads"] >= stats["disk_to_host_rows"] > 0


def test_tier_6_a_lookup_that_fails_its_checks_moves_no_row(backend, tmp_path):
    """CON-4 in the tiers: a lookup refused for its send_count (LKP-4) or for
    switching the clock source (CON-5) brings no row back from disk and makes
    no room on the host -- the checks run before any tier move."""
    store = ssd(backend, tmp_path, device=3, host=1)
    for step in range(4):                                   # rows of keys 0..7 spread over the three tiers
        store.lookup(keys(2 * step, 2 * step + 1), step=step)
    assert store.stats()["disk_rows"] > 0
    on_disk = [k for k in range(8) if store.tier_of(keys(k))[0] == "disk"]
    stats, tiers = store.stats(), store.tier_of(keys(*range(8))).tolist()   # before export(), which reads the disk
    with pytest.raises(UsageError, match="send_count"):
        store.lookup(keys(*on_disk[:2], 9), step=5, pad_to=1)
    with pytest.raises(UsageError, match="CON-5"):
        store.lookup(keys(on_disk[0]), step=5, timestamp=100)
    assert store.stats() == stats
    assert store.tier_of(keys(*range(8))).tolist() == tiers


# --------------------------------------------------------------- TIER-12
def _lru_oracle(last_use: dict, device_rows: int) -> list:
    """TIER-4 by a full sort: least recently used first, ties by the smaller key."""
    excess = len(last_use) - device_rows
    return sorted(last_use, key=lambda key: (last_use[key], key))[:max(excess, 0)]


@pytest.mark.parametrize("placement", ["ref", "fast"])
def test_tier_12_tick_buckets_choose_what_a_full_sort_chooses(placement):
    device_rows = 40
    row_of = {key: 3 * key + 1 for key in range(200)}   # a stand-in store: every key holds a fixed row
    handles = lambda keys: np.array([row_of[k] for k in np.asarray(keys).tolist()], dtype=np.int64)  # noqa: E731
    tier = (RefDevicePlacement if placement == "ref" else FastDevicePlacement)(device_rows, handles)
    rng = np.random.default_rng(12)
    last_use, tick = {}, 0
    for _ in range(400):      # enough touches to rebuild the buckets from stale entries several times
        if rng.random() < 0.15:
            gone = rng.choice(200, size=int(rng.integers(0, 10)), replace=False).astype(np.int64)
            tier.forget(gone)
            for key in gone.tolist():
                last_use.pop(key, None)
        else:
            batch = rng.choice(200, size=int(rng.integers(1, device_rows + 1)), replace=False).astype(np.int64)
            tick += 1
            for key in batch.tolist():
                last_use[key] = tick
            expected = _lru_oracle(last_use, device_rows)
            for key in expected:
                del last_use[key]
            was = [key in tier.keys().tolist() for key in batch.tolist()]
            victims, was_on_device = tier.touch(batch)
            assert sorted(victims.tolist()) == sorted(expected) and was_on_device.tolist() == was
        assert tier.keys().tolist() == sorted(last_use)
        assert tier.queued <= 2 * device_rows + 1024 + device_rows   # stale entries stay bounded


def test_tier_12_the_host_heap_spills_in_tier_5_order(backend, tmp_path):
    """Every spill of a random SSD sequence (training and evaluation lookups, applies, eviction of
    in-memory keys) takes exactly the rows a full lexsort of the host rows takes."""
    store = ssd(backend, tmp_path, device=6, host=5)
    spilled = []
    choose = store.engine.spill_victims

    def checked(excess):
        keys_, counts, last_seen = store.engine.host_keys()
        expected = keys_[np.lexsort((keys_, last_seen, counts))[:excess]].tolist()
        chosen = choose(excess)
        assert chosen[0].tolist() == expected
        spilled.append(len(expected))
        return chosen

    store.engine.spill_victims = checked
    rng = np.random.default_rng(5)
    for step in range(60):
        batch = rng.integers(0, 30, size=6).astype(np.int64)
        if step % 7 == 3:
            store.lookup(batch, train=False)
            continue
        result = store.lookup(batch, step=step)
        store.apply_gradients(result, np.full(result.rows.shape, 0.1, np.float32), step=step)
    assert sum(spilled) > 20 and store.stats()["disk_to_host_rows"] > 0


@pytest.mark.parametrize("heap", ["ref", "fast"])
def test_tier_12_host_heap_entries_order_as_count_last_seen_key(heap):
    if heap == "fast":
        fast = pytest.importorskip("mxrec_ref._fast")
    rng = np.random.default_rng(3)
    keys_ = rng.integers(-2**63, 2**63 - 1, size=300, dtype=np.int64)
    counts = rng.integers(0, 4, size=300).astype(np.int64)
    last_seen = rng.integers(-3, 3, size=300).astype(np.int64)
    order = HostOrder(fast.HostHeap() if heap == "fast" else PyHostHeap())
    order.push(keys_[:200], counts[:200], last_seen[:200])   # heapify, then pushes one by one
    order.push(keys_[200:], counts[200:], last_seen[200:])
    popped = order.pop(1000)
    expected = sorted(zip(counts.tolist(), last_seen.tolist(), keys_.tolist()))
    assert list(zip(*(column.tolist() for column in popped))) == expected and len(order) == 0


class _Counting:
    """Forwards to the engine behind the tiers, counting the calls of the named members (and keeping
    the ``handles`` each apply got)."""

    def __init__(self, inner, names):
        object.__setattr__(self, "target", inner)
        object.__setattr__(self, "calls", dict.fromkeys(names, 0))
        object.__setattr__(self, "apply_handles", [])

    def __getattr__(self, name):
        value = getattr(self.target, name)
        if name not in self.calls:
            return value

        def counted(*args, **kwargs):
            self.calls[name] += 1
            if name == "apply":
                self.apply_handles.append(kwargs.get("handles"))
            return value(*args, **kwargs)
        return counted


@pytest.mark.parametrize("mode", ["ddr", "ssd"])
def test_tier_12_a_tiered_lookup_dedups_once_and_probes_once(backend, mode, tmp_path):
    """One dedup per tiered lookup (its distinct keys serve the device-budget check and the lookup);
    in DDR mode no key-map probe besides the lookup's own (the placement reads the lookup's row
    handles); the apply of the result passes its row handles on (OPT-9)."""
    store = ddr(backend, device=4, host=100) if mode == "ddr" else ssd(backend, tmp_path, device=4, host=2)
    names = ("dedup", "lookup", "resolve", "resolve_deduped", "row_handles", "apply")
    counting = _Counting(store.engine.inner, names)
    store.engine.inner = counting
    for step in range(6):
        result = store.lookup(keys(step, step + 1, step + 2, step, 7), step=step)
        store.apply_gradients(result, np.ones((len(result.unique_keys), 2), np.float32), step=step)
    calls = dict(counting.calls)
    if mode == "ssd":       # the disk check and the spill's bookkeeping probe the map besides
        assert calls.pop("row_handles") > 0 and store.stats()["disk_rows"] > 0
    assert calls == {"dedup": 6, "lookup": 0, "resolve": 0, "resolve_deduped": 6, "apply": 6,
                     **({"row_handles": 0} if mode == "ddr" else {})}
    # OPT-9: each apply got its lookup's row handles (the reference has none)
    assert all((handles is None) == (backend == "ref") for handles in counting.apply_handles)
    assert store.stats()["device_to_host_rows"] > 0     # the placement did move rows
