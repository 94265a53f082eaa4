"""The reference store: plain Python dictionaries and numpy, written to be read.

Every rule of spec/ is implemented in the most direct way; speed does not matter.  The
rules live in one module per spec family -- ``lookup``, ``admission``, ``expansion``,
``eviction``, ``optimizers``, ``hot``, ``tiers``, ``checkpoint`` -- over the ``Table`` of
``table.py``; this class calls them in spec order.  The rules both backends share are called
from mxrec_ref/contract.py.  The fast path (mxrec_ref/fast/, same module and function names)
must agree with this store after every call (the comparison machines of
mxrec_ref/conformance/machines.py, run by mxrec_ref/conformance/test_backends.py).
"""
from __future__ import annotations

import numpy as np

from ..config import TableConfig
from ..contract import InMemoryStore, TierMoves
from ..initializers import initial_rows
from ..optimizers import SparseOptimizer
from ..state import LookupResult, TableState
from ..tiers.disk import RefDiskKernels
from ..tiers.placement import PyHostHeap, RefDevicePlacement
from . import admission, checkpoint, eviction, hot, lookup, optimizers, tiers
from .table import Table


class RefStore(InMemoryStore, TierMoves):
    backend_name = "ref"
    device_placement = RefDevicePlacement       # CON-10, TIER-4
    host_heap = PyHostHeap                      # CON-10, TIER-12
    disk_kernels = RefDiskKernels               # the SSD tier's index, checksums and reads, TIER-9

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        super().__init__(config, optimizer, hot_rows, hot_update_step)
        self._reset()

    def _reset(self) -> None:
        self._table = Table(self.config.dim, tuple(self.optimizer.slot_names), self.optimizer.slot_initial_values())
        self.clock: int | None = None
        self.clock_source: str | None = None

    # -------------------------------------------------------------- lookup
    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        return self.lookup_deduped(self.dedup(keys, counts), keys, shape, train, step, timestamp, pad_to, counts)

    def dedup(self, keys, counts):
        return lookup.dedup(self._table, keys, counts)                            # LKP-2

    def lookup_deduped(self, deduped, keys, shape, train, step, timestamp, pad_to, counts):
        table, default_row = self._table, self.config.default_row()
        unique, inverse, occurrences = deduped
        n_unique = len(unique)
        self._check_send_count(n_unique, pad_to)                                  # LKP-4
        total = n_unique if pad_to is None else max(pad_to, n_unique)
        if train:
            rows, admitted, hot_index = self._train_lookup(unique, occurrences, step, timestamp, total)
        else:
            rows, admitted, hot_index = lookup.gather(table, unique, total, default_row)   # LKP-3, LKP-5, HOT-3
        padding, with_row, hot_hits = lookup.position_stats(table, keys, inverse, admitted, hot_index)
        self._count_positions(train, keys.size, padding, with_row)                # STAT-3
        self._counters["hot_hit_positions"] += hot_hits                           # HOT-4
        self._refresh_hot_if_due(train)                                           # HOT-2
        unique = lookup.pad(unique, total)
        return LookupResult(self.name, unique, rows, inverse.reshape(shape), admitted, train,
                            n_unique, id(self))

    def _train_lookup(self, unique, occurrences, step, timestamp, total):
        """Count, admit and place rows (ADM-1..ADM-4, EXP-1..EXP-4); returns the lookup's
        (rows, admitted, hot index of each unique key or None).  All checks happen before the
        first change."""
        clock, source = self._training_clock(step, timestamp)                     # CON-5
        plan = admission.plan_train(self._table, unique, occurrences, self.effective_coefficient(),
                                    self._admit_threshold())
        admit = plan.admit
        self._reserve(len(admit))                                                 # EXP-2, EXP-3
        # The shared initializer, in first-occurrence order (INIT-1).
        init = initial_rows(self.config, unique[admit]) if len(admit) else None
        self.clock, self.clock_source = clock, source
        rows, admitted, _ = admission.commit_train(self._table, plan, clock, init, self._capacity_rows, total,
                                                   self.config.default_row())
        self._counters["admitted"] += len(admit)
        self._counters["train_lookups"] += 1
        return rows, admitted, plan.hot_index

    def _admit_threshold(self) -> int:
        return self.config.admit_threshold

    def _set_optimizer(self, optimizer) -> None:
        super()._set_optimizer(optimizer)
        self._table.slot_initial_values = optimizer.slot_initial_values()   # new rows' slots follow it (INIT-5)

    def _refresh_hot(self) -> None:
        hot.refresh_hot(self._table, self._hot_capacity)

    # ----------------------------------------------------------- gradients
    def _apply(self, keys, grads, mask, step) -> int:
        table = self._table
        positions, rows = optimizers.resolve_rows(table, keys, mask)              # OPT-2
        weights = table.values[rows]
        slots = {name: array[rows] for name, array in table.slots.items()}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # checked next
            optimizers.apply_update(self.optimizer, weights, slots, grads[positions], step)
        bad = optimizers.first_nonfinite(weights, slots)
        if bad >= 0:                                                              # OPT-3: nothing written yet
            raise self._overflow_error(int(keys[positions[bad]]))
        table.values[rows] = weights
        for name, array in slots.items():
            table.slots[name][rows] = array
        hot.write_through(table, keys[positions].tolist())                        # HOT-3
        self._count_applied(len(keys), len(rows))                                 # STAT-5
        return len(rows)

    # ------------------------------------------------------------ eviction
    def _evict(self, now):
        cutoff = self._eviction_cutoff(now, self.clock)                           # EVI-1
        if cutoff is None:
            return np.zeros(0, dtype=np.int64)
        expired = eviction.expired_keys(self._table, cutoff)
        admitted, pending = eviction.remove_keys(self._table, expired)            # EVI-2, EVI-3
        self._counters["evicted"] += admitted                                     # STAT-4
        self._counters["evicted_pending"] += pending
        return expired

    # ------------------------------------------------------------- queries
    def _size(self) -> int:
        return len(self._table.row_of)

    def _stats(self):
        table = self._table
        return self._counter_stats(size=len(table.row_of), history=len(table.count), hot_rows=len(table.hot))

    def _row_handles(self, keys):
        return lookup.row_handles(self._table, keys)                             # EXP-5

    # ---------------------------------------------------------- tier moves
    def rows_of(self, keys, rows=None):
        return tiers.rows_of(self._table, keys)        # the reference finds rows by key

    def entries_of(self, keys, rows):
        return tiers.entries_of(self._table, keys)

    def drop_rows(self, keys) -> None:
        tiers.drop_rows(self._table, keys)

    def put_rows(self, keys, values, slots, counts, last_seen) -> None:
        self._hold_at_least(len(self._table.row_of) + len(keys))
        tiers.put_rows(self._table, keys, values, slots, counts, last_seen, self._capacity_rows)

    def admitted_entries(self):
        return tiers.admitted_entries(self._table)

    # ---------------------------------------------------------- checkpoint
    def _export(self) -> TableState:
        return checkpoint.export_state(self._table, self.clock, self.clock_source)

    def _import_state(self, state: TableState) -> None:
        self._reset()
        checkpoint.import_state(self._table, state, self._capacity_after_import(len(state.keys)))   # CKPT-6
        self.clock, self.clock_source = state.clock, state.clock_source
