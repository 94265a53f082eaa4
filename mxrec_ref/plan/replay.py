"""The replay (PLAN-1): a sample's steps through real stores, one per owner rank, and what they did.

Two passes per table.  ``count_keys`` needs no store: the distinct keys of each rank's batch
(what ``send_count`` must hold, LKP-4 / SHARD-4) and of each owner's share of a step (what the
device tier must hold, TIER-3) depend on the data alone.  ``replay_stores`` opens one store per
owner rank (``key mod N``, SHARD-2) with the table's config and optimizer and makes the training
lookups and evictions a job makes, recording sizes, tier placement and traffic after every step.
"""
from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass

import numpy as np

from ..backends import open_store, rank_config
from ..config import TableConfig
from ..distributed import VirtualWorld, owner_of
from ..errors import UsageError
from .sources import Sample
from .tables import PlannedTable

TRAFFIC = ("host_to_device_rows", "device_to_host_rows", "host_to_disk_rows", "disk_to_host_rows",
           "host_device_bytes", "host_disk_bytes")
PLACEMENT = ("device_rows", "host_rows", "disk_rows")


@dataclass(frozen=True)
class Schedule:
    """Step t's batch on rank r is rows ``(t*ranks + r)*batch_size`` onward, ``batch_size`` of them
    (train.batches' split, SHARD-9); eviction runs after every ``evict_every``-th step (EvictHook)."""
    batch_size: int
    ranks: int
    steps: int
    evict_every: int

    def rows(self, step: int, rank: int) -> slice:
        start = (step * self.ranks + rank) * self.batch_size
        return slice(start, start + self.batch_size)

    def evicts_after(self, step: int) -> bool:
        return (step + 1) % self.evict_every == 0


def schedule(sample: Sample, *, batch_size: int, ranks: int = 1, steps: int | None = None,
             evict_every: int = 1) -> Schedule:
    available = sample.rows // (batch_size * ranks)
    if available == 0:
        raise UsageError(f"plan: --batch: {sample.rows} rows of {sample.name!r} make no step of {ranks} x "
                         f"{batch_size} rows")
    return Schedule(batch_size, ranks, min(available, steps) if steps else available, evict_every)


def batch_keys(sample: Sample, columns, sched: Schedule, step: int) -> list[np.ndarray]:
    """Each rank's keys of ``step``: the table's columns at its rows, flattened and joined (one store
    lookup per table and batch, as the TF layer merges a table's FeatureSpecs, TF-20)."""
    return [np.concatenate([np.asarray(sample.columns[c][sched.rows(step, r)], np.int64).reshape(-1)
                            for c in columns]) for r in range(sched.ranks)]


def batch_timestamp(sample: Sample, sched: Schedule, step: int) -> int | None:
    """The step's data timestamp: the largest of its rows on every rank (SHARD-3), or None."""
    if sample.timestamps is None:
        return None
    rows = slice(step * sched.ranks * sched.batch_size, (step + 1) * sched.ranks * sched.batch_size)
    return int(sample.timestamps[rows].max())


def owner_shares(keys: list[np.ndarray], ranks: int) -> list[np.ndarray]:
    """What each owner receives: the ranks' keys it owns, rank 0's first (SHARD-3)."""
    joined = np.concatenate(keys)
    owners = owner_of(joined, ranks)
    return [joined[owners == o] for o in range(ranks)]


@dataclass(frozen=True)
class KeyCounts:
    seen: np.ndarray             # [steps] distinct keys seen so far, over all ranks
    batch_distinct: np.ndarray   # [steps, ranks] distinct keys in rank r's batch (send_count)
    owner_distinct: np.ndarray   # [steps, ranks] distinct non-padding keys owner o receives (device tier)


def count_keys(sample: Sample, table: PlannedTable, sched: Schedule) -> KeyCounts:
    seen_keys = np.zeros(0, np.int64)
    seen, batch, owner = [], [], []
    for step in range(sched.steps):
        keys = batch_keys(sample, table.columns, sched, step)
        batch.append([len(np.unique(k)) for k in keys])                           # LKP-2: -1 included
        owner.append([len(np.unique(share[share != -1])) for share in owner_shares(keys, sched.ranks)])
        seen_keys = np.union1d(seen_keys, np.concatenate(keys))
        seen.append(int(np.count_nonzero(seen_keys != -1)))
    return KeyCounts(np.array(seen, np.int64), np.array(batch, np.int64), np.array(owner, np.int64))


@dataclass(frozen=True)
class StoreTrace:
    owner_peak: np.ndarray        # [steps, ranks] each owner's size after the step's lookup
    size: np.ndarray              # [steps] the table's size after the step (eviction done)
    placement: dict               # name -> [steps, ranks] rows per tier after the step
    traffic: dict                 # name -> [steps] rows / bytes moved during the step, over all owners
    totals: dict                  # every statistic at the end, summed over owners

    @property
    def peak_size(self) -> np.ndarray:
        return self.owner_peak.sum(axis=1)


def replay_stores(sample: Sample, table: PlannedTable, config: TableConfig, sched: Schedule, *,
                  backend: str = "fast") -> StoreTrace:
    """Replay ``sched`` through one ``config`` store per owner; an SSD config's files go to a
    temporary folder per owner, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="mxrec-plan-") as folder:
        if config.ssd_vocabulary_size:
            config = dataclasses.replace(config, ssd_data_path=(folder,))
        # Each owner's store as a job's rank would open it (its own rank<r> SSD folder, SHARD-14),
        # driven here without collectives: the replay hands each owner its share itself.
        stores = [open_store(rank_config(config, owner), table.optimizer, backend=backend)
                  for owner in VirtualWorld(sched.ranks).communicators()]
        try:
            return _replay(sample, table, sched, stores, config.eviction_enabled)
        finally:
            for store in stores:
                getattr(store, "close", lambda: None)()
            del stores


def _replay(sample, table, sched, stores, evicting) -> StoreTrace:
    peak, size = [], []
    placement = {name: [] for name in PLACEMENT}
    traffic = {name: [] for name in TRAFFIC}
    before = _summed(stores, TRAFFIC)
    for step in range(sched.steps):
        keys = batch_keys(sample, table.columns, sched, step)
        stamp = batch_timestamp(sample, sched, step)
        for store, share in zip(stores, owner_shares(keys, sched.ranks)):
            store.lookup(share, train=True, step=step, timestamp=stamp)   # an empty share too, as an owner does
        peak.append([store.size() for store in stores])
        if evicting and sched.evicts_after(step):
            for store in stores:
                store.evict()
        stats = [store.stats() for store in stores]
        size.append(sum(s["size"] for s in stats))
        for name in PLACEMENT:
            placement[name].append([s[name] for s in stats])
        after = _summed(stores, TRAFFIC, stats)
        for name in TRAFFIC:
            traffic[name].append(after[name] - before[name])
        before = after
    totals = _summed(stores, None)
    return StoreTrace(np.array(peak, np.int64), np.array(size, np.int64),
                      {k: np.array(v, np.int64) for k, v in placement.items()},
                      {k: np.array(v, np.int64) for k, v in traffic.items()}, totals)


def _summed(stores, names, stats=None) -> dict:
    stats = stats or [store.stats() for store in stores]
    names = names or [k for k, v in stats[0].items() if isinstance(v, (int, np.integer))]
    return {name: int(sum(s[name] for s in stats)) for name in names}
