"""DDR and SSD tables: an in-memory store behind a fixed device budget, with
an optional disk tier (spec/tiers.md).

``TieredEngine`` wraps a backend's engine (the reference or the fast path) that
holds every row in host memory -- the device and host tiers -- and grows as
keys arrive; ``TieredStore`` is the ``Store`` facade over it.  The tier engine
adds what mxRec's DDR and SSD modes add:

* the device tier, a fixed budget of ``device_vocabulary_size`` rows that
  every training lookup's rows must fit into (TIER-3), least recently used
  rows going back to the host (TIER-4);
* in SSD mode the disk tier: host memory keeps at most
  ``host_vocabulary_size`` rows off the device; the least frequently used go
  to files under ``ssd_data_path`` (TIER-5) and come back when a call needs
  them (TIER-6);
* the statistics of every row that crosses a tier boundary (TIER-10).

Placement never changes a result: the wrapped engine does all the semantics
(admission, counting, optimizers, eviction of in-memory keys), and a row
carries its values, optimizer slots, count and last-seen time with it, so a
DDR or SSD table returns exactly what an HBM table with dynamic expansion
returns (TIER-2).
"""
from __future__ import annotations

import dataclasses
import logging
import weakref

import numpy as np

from ..config import TableConfig
from ..contract import Store, checked_table, tier_moves_error
from ..engine import Engine, Prepared, Resolved, TierMoves, check_clock_source, check_send_count, eviction_cutoff
from ..errors import CapacityError, DiskFullError, MxrecError, UsageError
from ..optimizers import SparseOptimizer
from ..state import PADDING_KEY, LookupResult, TableState
from .disk import DiskTier, StagedTake
from .placement import HostOrder

# The tier counters a tiered store adds to stats() (spec/tiers.md, TIER-10).
TIER_COUNTERS = ("host_to_device_rows", "device_to_host_rows", "host_to_disk_rows", "disk_to_host_rows")
logger = logging.getLogger(__name__)


class TieredStore(Store):
    """A DDR table (``host_vocabulary_size > 0``) or an SSD table (``ssd_vocabulary_size > 0``
    too): the ``Store`` facade over a ``TieredEngine``, which sits over the engine of the store
    ``inner_factory`` makes -- a ``TierMoves`` (CON-10) that brings its own device placement."""

    tiered = True

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None, inner_factory, *,
                 backend: str = "?", ssd_folder_limit_bytes: int | None = None, ssd_fault_hook=None):
        config, optimizer = checked_table(config, optimizer)
        if config.ssd_vocabulary_size == 0 and (ssd_folder_limit_bytes is not None or ssd_fault_hook is not None):
            raise UsageError(f"table {config.name!r}: ssd_folder_limit_bytes: SSD options need an SSD tier "
                             f"(ssd_vocabulary_size > 0)")
        inner = inner_factory(in_memory_config(config), optimizer)
        if not isinstance(getattr(inner, "engine", None), TierMoves):   # CON-10, before any disk file exists
            raise tier_moves_error(config, backend, inner)
        self.backend_name = inner.backend_name
        super().__init__(config, optimizer, engine=TieredEngine(
            config, optimizer, inner.engine, ssd_folder_limit_bytes=ssd_folder_limit_bytes,
            ssd_fault_hook=ssd_fault_hook))

    def tier_of(self, keys) -> np.ndarray:
        """Per key: "device", "host", "disk" or "" (no row) -- for tests and reports."""
        flat, shape = self._check_keys(keys)
        with self._lock:
            return self.engine.tier_of(flat).reshape(shape)


@dataclasses.dataclass(frozen=True)
class TieredPrepared(Prepared):
    """A tiered training batch's work done ahead (PIPE-10): the engine behind's ``prepare`` (the
    batch's one dedup, its probe, initial rows) and, in SSD mode, the search and checked reads of
    the batch's rows on disk then (``staged``), which its commit takes if nothing on disk changed
    since; nothing that depends on the tiers' placement, which the commit works out."""

    inner: Prepared | None = None
    staged: StagedTake | None = None


class TieredEngine(Engine):
    """The storage tiers over ``inner``, an engine that is a ``TierMoves`` (CON-10).  It drives
    ``inner`` through the ``Engine`` protocol and what ``TierMoves`` declares, nothing else
    (tests/test_tier_moves.py checks it)."""

    tiered = True

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer, inner: Engine, *,
                 ssd_folder_limit_bytes: int | None = None, ssd_fault_hook=None):
        super().__init__(config, optimizer)
        self.inner = inner
        self.backend_name = inner.backend_name
        self.device = inner.device_placement(config.device_vocabulary_size, inner.row_handles)
        self.disk = None
        self.host_order = None
        if config.ssd_vocabulary_size > 0:
            self.host_order = HostOrder(inner.host_heap())    # TIER-5's order, kept incrementally (TIER-12)
            self.disk = DiskTier(config.name, config.ssd_data_path, config.dim, len(optimizer.slot_names),
                                 folder_limit_bytes=ssd_folder_limit_bytes, fault_hook=ssd_fault_hook,
                                 kernels=getattr(inner, "disk_kernels", None))    # the backend's (TIER-9)
            # The disk tier is working storage, not a checkpoint: its files go with the engine.
            weakref.finalize(self, self.disk.clear)
        self.tier_counters = {name: 0 for name in TIER_COUNTERS}
        self.disk_evicted = 0
        self.row_bytes = 4 * config.dim * (1 + len(optimizer.slot_names))

    # -------------------------------------------------------------- lookup
    def resolve(self, keys, shape, *, train, step, timestamp, pad_to, counts) -> Resolved:
        # The batch's one dedup: its distinct keys serve the checks below and the lookup itself (TIER-12).
        return self._resolve(self.inner.dedup(keys, counts), keys, shape, train=train, step=step,
                             timestamp=timestamp, pad_to=pad_to, counts=counts)

    def prepare(self, keys, shape, *, counts) -> Prepared:
        """PIPE-10: the engine behind's prepare (dedup, probe, initial rows), and in SSD mode the
        batch's rows on disk now searched and read into a staging buffer; changes nothing, not even
        the disk statistics.  A record that fails its checks stages nothing: the commit's own read
        raises it, where the serial lookup does."""
        inner = self.inner.prepare(keys, shape, counts=counts)
        if not inner.done_ahead:
            return Prepared(keys, shape, counts)
        staged = None
        if self.disk is not None and len(self.disk):
            distinct = inner.deduped[0]
            absent = distinct[self.inner.row_handles(distinct) < 0]      # a key in memory is not on disk
            if len(absent):
                try:
                    staged = self.disk.stage(absent)
                except MxrecError:
                    staged = None
        return TieredPrepared(keys, shape, counts, inner.deduped, inner=inner, staged=staged)

    def commit(self, prepared: Prepared, *, step, timestamp, pad_to) -> Resolved:
        """PIPE-10: ``resolve`` now, from the batch's dedup, the inner prepare (checked by the engine
        behind) and the staged disk reads if nothing on disk changed since they were made."""
        if not isinstance(prepared, TieredPrepared):
            return super().commit(prepared, step=step, timestamp=timestamp, pad_to=pad_to)
        return self._resolve(prepared.deduped, prepared.keys, prepared.shape, train=True, step=step,
                             timestamp=timestamp, pad_to=pad_to, counts=prepared.counts, prepared=prepared)

    def _resolve(self, deduped, keys, shape, *, train, step, timestamp, pad_to, counts,
                 prepared: TieredPrepared | None = None) -> Resolved:
        distinct = deduped[0]
        n_keys = len(distinct) - int(np.count_nonzero(distinct == PADDING_KEY))
        if train and n_keys > self.config.device_vocabulary_size:
            raise CapacityError(
                f"table {self.name!r}: device_vocabulary_size: the batch has {n_keys} distinct keys but the "
                f"device tier holds {self.config.device_vocabulary_size} rows; raise device_vocabulary_size "
                f"to at least {n_keys} (nothing was changed)")
        # The inner lookup's own checks, made before any row moves between tiers (CON-4).
        check_send_count(self.config, len(distinct), pad_to)
        if train:
            check_clock_source(self.config, self.inner.clock_source, timestamp)
        self._make_room_on_host()
        # SSD: one probe of the batch's keys finds the ones to read (or the reads staged ahead, still current)
        self._bring_back(distinct, staged=None if prepared is None else prepared.staged)
        rows_before = self.inner.size()
        resolved = self.inner.resolve_deduped(deduped, keys, shape, train=train, step=step, timestamp=timestamp,
                                              pad_to=pad_to, counts=counts,
                                              prepared=None if prepared is None else prepared.inner)
        if train:       # evaluation reads rows where they are and takes no device rows (TIER-4)
            self._put_on_device(resolved, self.inner.size() - rows_before)
        elif self._host_excess() > 0:
            # An evaluation's rows are not on the device: the spill below may move some of them out of
            # the engine behind, so they are read first and gather packs what was read here.  A training
            # lookup's rows are all on the device now, which the spill never touches (TIER-5): its gather
            # reads them by handle, as the engine behind's does.
            resolved = dataclasses.replace(resolved, rows=self.inner.gather(resolved).rows)
        self._spill_to_disk()
        return resolved

    def gather(self, resolved: Resolved) -> LookupResult:
        return self.inner.gather(resolved)

    def _put_on_device(self, resolved: Resolved, created: int) -> None:
        """TIER-4 after a training lookup: its rows are on the device, used
        now; rows that were in memory before it and off the device moved up.
        ``created``: the rows the lookup created (on the device, not moved up).
        The lookup's own row handles locate the rows: no second probe."""
        n_unique = resolved.n_unique
        held = resolved.admitted[:n_unique]
        unique = resolved.unique[:n_unique]
        handles = resolved.handles
        rows = None if handles is None else handles[:n_unique][held]
        sent_back, was_on_device = self.device.touch(unique[held], rows)
        moved_up = len(was_on_device) - int(np.count_nonzero(was_on_device)) - created
        self.tier_counters["host_to_device_rows"] += moved_up
        self.tier_counters["device_to_host_rows"] += len(sent_back)
        self._note_host(sent_back)

    # ----------------------------------------------------------- gradients
    def apply(self, keys, grads, mask, step, *, optimizer, handles=None) -> int:
        """An apply between the tier moves: rows on disk come back first, the host order notes
        the rows it touched, host memory spills after.  ``handles``: the rows of a lookup result
        of this engine, passed on to the engine behind, which checks they still hold their keys
        (OPT-9: a row that went to disk and came back since is found again by key); they also
        spare the disk check a probe of the keys still on the device."""
        self._make_room_on_host()
        self._bring_back(keys[mask], None if handles is None else handles[mask])
        applied = self.inner.apply(keys, grads, mask, step, optimizer=optimizer, handles=handles)
        self._spill_to_disk()
        return applied

    # ------------------------------------------------------------ eviction
    def evict(self, now):
        cutoff = eviction_cutoff(self.config, now, self.inner.clock)   # the inner engine's clock, before it evicts
        expired = None
        if self.disk is not None and cutoff is not None and len(self.disk):
            expired = self.disk.expired(cutoff)          # EVI-1, as in memory; may read (and raise) first
        evicted = self.inner.evict(now)
        self.device.forget(evicted)
        if expired is None:
            return evicted
        self.disk.remove(expired)
        self.disk_evicted += len(expired)
        return np.sort(np.concatenate([evicted, expired]))

    def set_threshold(self, threshold: int) -> None:
        super().set_threshold(threshold)
        self.inner.set_threshold(threshold)

    # ------------------------------------------------------- tier moves
    def _bring_back(self, keys: np.ndarray, rows: np.ndarray | None = None, staged: StagedTake | None = None) -> None:
        """Rows of ``keys`` (distinct; padding allowed) that are on disk come back to host memory,
        in key order (TIER-6); a corrupt record raises before anything changed.  One probe of
        the key map and one search of the disk index.  ``rows``: row handles of ``keys`` from
        a lookup result (-1: none): a key the device holds at its handle is in memory, so
        only the others are probed.  ``staged``: the disk's search and reads of ``keys``' absent
        keys made ahead (PIPE-10); while nothing on disk changed since, the keys of ``keys`` on disk
        are exactly those it found (a key is never both in memory and on disk), so it is taken
        as it is, without a probe, a search or a read."""
        if self.disk is None or len(self.disk) == 0 or len(keys) == 0:
            return
        if staged is not None and self.disk.is_current(staged):
            on_disk, values, slots, counts, last_seen = self.disk.take(None, staged)
        else:
            if rows is not None:
                keys = keys[~self.device.contains(keys, rows)]
            absent = keys[self.inner.row_handles(keys) < 0]       # a key in memory is not on disk
            if len(absent) == 0:
                return
            on_disk, values, slots, counts, last_seen = self.disk.take(absent)
        if len(on_disk) == 0:
            return
        slot_map = dict(zip(self.optimizer.slot_names, slots))
        self.inner.put_rows(on_disk, values, slot_map, counts, last_seen)
        self.tier_counters["disk_to_host_rows"] += len(on_disk)
        self._note_host(on_disk)

    def host_keys(self):
        """(keys, counts, last_seen) of the rows in host memory and not on the device:
        a pass over every row, for rebuilding the host order only (load, stale heap)."""
        keys, counts, last_seen = self.inner.admitted_entries()
        host = ~self.device.contains(keys)
        return keys[host], counts[host], last_seen[host]

    def _note_host(self, keys: np.ndarray) -> None:
        """SSD mode: ``keys`` (repeats and keys without a row allowed) reached host memory: note
        them for the host order (TIER-12).  Only a training lookup changes a row's count or
        last-seen time, and it puts the row on the device, so a row needs a fresh entry only
        when it reaches host memory.  Only noted here (an array append); ``_update_host_order`` gives them
        their entries when a spill needs the order, so a step that spills nothing pays
        nothing for it."""
        if self.host_order is not None and len(keys):
            self.host_order.note(np.array(keys, dtype=np.int64))

    def _update_host_order(self) -> None:
        """Push an entry with the current count and last-seen time for every noted key that is
        a host row now: O(noted keys).  Rebuild the order from the store (one pass) instead once
        the noted and stale entries outnumber the host rows, which bounds its memory."""
        order = self.host_order
        host_rows = self.inner.size() - len(self.device)
        if len(order) + order.noted > 2 * host_rows + 4096:
            order.reset(*self.host_keys())
            return
        keys = order.take_noted()
        rows = self.inner.row_handles(keys)
        host = rows >= 0
        host[host] = ~self.device.contains(keys[host], rows[host])
        keys, rows = keys[host], rows[host]
        if len(keys):
            order.push(keys, *self.inner.entries_of(keys, rows))

    def spill_victims(self, excess: int):
        """The ``excess`` host rows TIER-5 sends to disk, in order, with what they carry:
        entries popped from the host order, stale ones dropped (TIER-12).  O(excess +
        stale entries) -- never a pass over the host rows.  Pops an eighth more than is still
        needed (measured: most popped entries are current, so popping twice as many only pushed
        half of them back) and pushes back the current entries it did not take."""
        chosen_keys, chosen_rows, taken, last_key = [], [], 0, None
        while taken < excess:
            need = excess - taken
            counts, last_seen, keys = self.host_order.pop(need + need // 8 + 64)
            if len(keys) == 0:
                raise AssertionError(f"table {self.name!r}: host order lost rows")   # an invariant, not input
            # Two current entries of one key are equal, so they pop one after the other: keep the first.
            fresh = np.ones(len(keys), dtype=bool)
            fresh[1:] = keys[1:] != keys[:-1]
            fresh[0] = keys[0] != last_key
            rows = self.inner.row_handles(keys)
            fresh &= rows >= 0
            fresh[fresh] = ~self.device.contains(keys[fresh], rows[fresh])
            at = np.flatnonzero(fresh)
            if len(at) == 0:
                last_key = keys[-1]
                continue
            now_counts, now_seen = self.inner.entries_of(keys[at], rows[at])
            current = (now_counts == counts[at]) & (now_seen == last_seen[at])
            keep = np.flatnonzero(current)[:need]
            if len(keep) == need and keep[-1] + 1 < len(at):       # current entries past the last one taken
                rest = at[keep[-1] + 1:][current[keep[-1] + 1:]]
                self.host_order.push(keys[rest], counts[rest], last_seen[rest])
                last_key = keys[at[keep[-1]]]
            else:
                last_key = keys[-1]
            at = at[keep]
            taken += len(at)
            chosen_keys.append(keys[at])
            chosen_rows.append(rows[at])
        keys = np.concatenate(chosen_keys)       # excess > 0: the loop took rows
        # What the victims carry, fetched once for the rows chosen (their entries were just checked).
        return (keys, *self.inner.rows_of(keys, np.concatenate(chosen_rows)))

    def _spill_to_disk(self) -> Exception | None:
        """SSD mode: move the least frequently used host rows (ties: least
        recently seen, then smallest key) to disk until host memory holds
        ``host_vocabulary_size`` rows off the device (TIER-5).  A full disk
        leaves them in memory (TIER-7) and is returned, not raised: the call
        that got here has already changed the table."""
        excess = self._host_excess()
        if excess <= 0:
            return None
        self._update_host_order()
        victims, values, slots, counts, last_seen = self.spill_victims(excess)
        try:
            self.disk.write(victims, values, [slots[name] for name in self.optimizer.slot_names], counts, last_seen)
        except DiskFullError as error:
            logger.warning("table %r: disk full: %d rows stay in host memory: %s", self.name, len(victims), error)
            self.host_order.push(victims, counts, last_seen)      # they stay host rows
            return error
        self.inner.drop_rows(victims)
        self.tier_counters["host_to_disk_rows"] += len(victims)
        return None

    def _host_excess(self) -> int:
        """SSD mode: the rows host memory holds off the device beyond ``host_vocabulary_size``; 0 without a disk tier."""
        if self.disk is None:
            return 0
        return self.inner.size() - len(self.device) - self.config.host_vocabulary_size

    def _make_room_on_host(self) -> None:
        """Before a call changes anything: host memory left over its budget by
        a full disk must spill now, or the call fails cleanly (TIER-7)."""
        error = self._spill_to_disk()
        if error is not None:
            raise error

    # ------------------------------------------------------------- queries
    def size(self) -> int:
        return self.inner.size() + (len(self.disk) if self.disk is not None else 0)

    def capacity(self) -> int:
        return max(self.config.table_capacity, self.size())

    def stats(self):
        stats = self.inner.stats()
        disk_rows = len(self.disk) if self.disk is not None else 0
        stats["size"] = self.size()
        stats["capacity"] = self.capacity()
        stats["evicted"] += self.disk_evicted
        stats.update(self.tier_counters)
        stats["device_rows"] = len(self.device)
        stats["host_rows"] = self.inner.size() - len(self.device)
        stats["disk_rows"] = disk_rows
        stats["host_device_bytes"] = self.row_bytes * (self.tier_counters["host_to_device_rows"]
                                                       + self.tier_counters["device_to_host_rows"])
        stats["host_disk_bytes"] = self.row_bytes * (self.tier_counters["host_to_disk_rows"]
                                                     + self.tier_counters["disk_to_host_rows"])
        if self.disk is not None:
            disk = self.disk.stats
            for name in ("disk_reads", "disk_writes", "disk_bytes_read", "disk_bytes_written", "compactions"):
                stats[name] = disk[name]
        return stats

    def row_handles(self, keys):
        """The host-memory row of each key; -1 for keys without a row and for
        rows on disk (they have no row in memory)."""
        return self.inner.row_handles(keys)

    def tier_of(self, keys: np.ndarray) -> np.ndarray:
        """Per key (flat): "device", "host", "disk" or "" (no row)."""
        tiers = np.full(len(keys), "", dtype=object)
        tiers[self.inner.row_handles(keys) >= 0] = "host"
        tiers[self.device.contains(keys)] = "device"
        if self.disk is not None:
            tiers[self.disk.contains(keys)] = "disk"
        return tiers

    def export(self) -> TableState:
        state = self.inner.export()
        if self.disk is None or len(self.disk) == 0:
            return state
        keys = self.disk.keys()
        values, slots, counts, last_seen = self.disk.read(keys)
        return state.with_rows(keys, values, dict(zip(self.optimizer.slot_names, slots)), counts, last_seen)

    def import_state(self, state: TableState) -> None:
        """Every loaded row starts in host memory, off the device; SSD mode
        then spills the coldest to disk (TIER-8)."""
        if self.disk is not None:
            self.disk.clear()
        self.device.clear()
        self.inner.import_state(state)
        if self.host_order is not None:
            self.host_order.reset(*self.host_keys())
        self._spill_to_disk()

    def key_limit(self) -> None:
        """Host memory and disk grow: any checkpoint fits (TIER-2)."""
        return None

    def set_optimizer(self, optimizer: SparseOptimizer) -> None:
        self.optimizer = optimizer
        self.inner.set_optimizer(optimizer)       # the in-memory tiers apply (KERAS-13)

    def table_clock(self):
        return self.inner.clock, self.inner.clock_source


def in_memory_config(config: TableConfig) -> TableConfig:
    """The configuration of the store behind the tiers: every row in memory,
    growing (the host tier grows in DDR mode, the disk tier in SSD mode)."""
    rows = min(config.device_vocabulary_size + config.host_vocabulary_size, 10**9)
    return dataclasses.replace(config, device_vocabulary_size=rows, host_vocabulary_size=0, ssd_vocabulary_size=0,
                               dynamic_expansion=True)
