"""The reference store: plain Python dictionaries and numpy, written to be read.

Every rule of spec/ is implemented in the most direct way; speed does not matter.  The
rules live in one module per spec family -- ``lookup``, ``admission``, ``expansion``,
``eviction``, ``optimizers``, ``hot``, ``tiers``, ``checkpoint`` -- over the ``Table`` of
``table.py``; ``RefEngine`` calls them in spec order.  The rules both backends share are called
from mxrec_ref/engine.py; ``RefStore`` is the ``Store`` facade over a ``RefEngine``.  The fast path (mxrec_ref/fast/, same module and function names)
must agree with this store after every call (the comparison machines of
mxrec_ref/conformance/machines.py, run by mxrec_ref/conformance/test_backends.py).
"""
from __future__ import annotations

import numpy as np

from ..config import TableConfig
from ..contract import Store, checked_table
from ..engine import (InMemoryEngine, Prepared, Resolved, TierMoves, check_send_count, eviction_cutoff,
                      initial_rows_of, overflow_error)
from ..initializers import initial_rows
from ..optimizers import SparseOptimizer
from ..state import LookupResult, TableState
from ..tiers.disk import RefDiskKernels
from ..tiers.placement import PyHostHeap, RefDevicePlacement
from . import admission, checkpoint, eviction, hot, lookup, optimizers, tiers
from .table import Table


class RefEngine(InMemoryEngine, TierMoves):
    backend_name = "ref"
    device_placement = RefDevicePlacement       # CON-10, TIER-4
    host_heap = PyHostHeap                      # CON-10, TIER-12
    disk_kernels = RefDiskKernels               # the SSD tier's index, checksums and reads, TIER-9

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        super().__init__(config, optimizer, hot_rows, hot_update_step)
        self.reset()

    def reset(self) -> None:
        self.table = Table(self.config.dim, tuple(self.optimizer.slot_names), self.optimizer.slot_initial_values())
        self.clock: int | None = None
        self.clock_source: str | None = None

    # -------------------------------------------------------------- lookup
    def resolve(self, keys, shape, *, train, step, timestamp, pad_to, counts) -> Resolved:
        return self.resolve_deduped(self.dedup(keys, counts), keys, shape, train=train, step=step,
                                    timestamp=timestamp, pad_to=pad_to, counts=counts)

    def prepare(self, keys, shape, *, counts) -> Prepared:
        """PIPE-1: the dedup and the initial rows of the keys a lookup now would admit; reads the
        history (a probe), changes nothing.  ``commit`` works out counts and admission again."""
        deduped = self.dedup(keys, counts)
        unique, _, occurrences = deduped
        admit = admission.plan_train(self.table, unique, occurrences, self.effective_coefficient(),
                                     self.admit_threshold()).admit
        return Prepared(keys, shape, counts, deduped, admit,
                        initial_rows(self.config, unique[admit]) if len(admit) else None)

    def dedup(self, keys, counts):
        return lookup.dedup(self.table, keys, counts)                             # LKP-2

    def resolve_deduped(self, deduped, keys, shape, *, train, step, timestamp, pad_to, counts,
                        prepared=None) -> Resolved:
        """Each unique key's row handle, padded to send_count, as the fast twin's kernels do; no
        row is read: gather reads them by handle."""
        table = self.table
        unique, inverse, occurrences = deduped
        n_unique = len(unique)
        check_send_count(self.config, n_unique, pad_to)                           # LKP-4
        total = n_unique if pad_to is None else max(pad_to, n_unique)
        if train:
            admitted, handles, hot_index = self.train_lookup(unique, occurrences, step, timestamp, total, prepared)
        else:
            handles, admitted, hot_index = lookup.locate(table, unique, total)    # LKP-5, HOT-3
        padding, with_row, hot_hits = lookup.position_stats(table, keys, inverse, admitted, hot_index)
        self.count_positions(train, keys.size, padding, with_row)                 # STAT-3
        self.counters["hot_hit_positions"] += hot_hits                            # HOT-4
        self.refresh_hot_if_due(train)                                            # HOT-2
        return Resolved(keys=keys, shape=shape, train=train, step=step, pad_to=pad_to, unique=unique,
                        inverse=inverse, n_unique=n_unique, admitted=admitted, handles=handles,
                        hot_index=hot_index, padded=True)

    def gather(self, resolved: Resolved) -> LookupResult:
        rows = resolved.rows
        if rows is None:        # read now, by handle: every apply since resolve shows (LKP-3, ADM-5, LKP-4)
            rows = lookup.gather_rows(self.table, resolved.handles, len(resolved.handles), self.config.default_row())
        unique = lookup.pad(resolved.unique, len(rows))                           # LKP-4
        return LookupResult(self.name, unique, rows, resolved.inverse.reshape(resolved.shape),
                            resolved.admitted, resolved.train, resolved.n_unique)

    def train_lookup(self, unique, occurrences, step, timestamp, total, prepared=None):
        """Count, admit and place rows (ADM-1..ADM-4, EXP-1..EXP-4); returns the lookup's
        (admitted, row handles, hot index of each unique key or None).  All checks happen before
        the first change."""
        clock, source = self.training_clock(step, timestamp)                      # CON-5
        plan = admission.plan_train(self.table, unique, occurrences, self.effective_coefficient(),
                                    self.admit_threshold())
        admit = plan.admit
        self.reserve(len(admit))                                                  # EXP-2, EXP-3
        # The shared initializer, in first-occurrence order (INIT-1).
        init = initial_rows_of(self.config, unique, admit, prepared, initial_rows)
        self.clock, self.clock_source = clock, source
        admitted, handles = admission.commit_train(self.table, plan, clock, init, self.capacity_rows, total)
        self.counters["admitted"] += len(admit)
        self.counters["train_lookups"] += 1
        return admitted, handles, plan.hot_index

    def admit_threshold(self) -> int:
        return self.config.admit_threshold

    def set_optimizer(self, optimizer: SparseOptimizer) -> None:
        super().set_optimizer(optimizer)
        self.table.slot_initial_values = optimizer.slot_initial_values()    # new rows' slots follow it (INIT-5)

    def refresh_hot(self) -> None:
        hot.refresh_hot(self.table, self.hot_capacity)

    # ----------------------------------------------------------- gradients
    def apply(self, keys, grads, mask, step, *, optimizer, handles=None) -> int:
        table = self.table          # the reference finds rows by key: ``handles`` are not needed
        positions, rows = optimizers.resolve_rows(table, keys, mask)              # OPT-2
        weights = table.values[rows]
        slots = {name: array[rows] for name, array in table.slots.items()}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # checked next
            optimizers.apply_update(optimizer, weights, slots, grads[positions], step)
        bad = optimizers.first_nonfinite(weights, slots)
        if bad >= 0:                                                              # OPT-3: nothing written yet
            raise overflow_error(self.config, optimizer, int(keys[positions[bad]]))
        table.values[rows] = weights
        for name, array in slots.items():
            table.slots[name][rows] = array
        hot.write_through(table, keys[positions].tolist())                        # HOT-3
        self.count_applied(len(keys), len(rows))                                  # STAT-5
        return len(rows)

    # ------------------------------------------------------------ eviction
    def evict(self, now):
        cutoff = eviction_cutoff(self.config, now, self.clock)                    # EVI-1
        if cutoff is None:
            return np.zeros(0, dtype=np.int64)
        expired = eviction.expired_keys(self.table, cutoff)
        admitted, pending = eviction.remove_keys(self.table, expired)             # EVI-2, EVI-3
        self.counters["evicted"] += admitted                                      # STAT-4
        self.counters["evicted_pending"] += pending
        return expired

    # ------------------------------------------------------------- queries
    def size(self) -> int:
        return len(self.table.row_of)

    def stats(self):
        table = self.table
        return self.counter_stats(size=len(table.row_of), history=len(table.count), hot_rows=len(table.hot))

    def row_handles(self, keys):
        return lookup.row_handles(self.table, keys)                              # EXP-5

    # ---------------------------------------------------------- tier moves
    def rows_of(self, keys, rows=None):
        return tiers.rows_of(self.table, keys)         # the reference finds rows by key

    def entries_of(self, keys, rows):
        return tiers.entries_of(self.table, keys)

    def drop_rows(self, keys) -> None:
        tiers.drop_rows(self.table, keys)

    def put_rows(self, keys, values, slots, counts, last_seen) -> None:
        self.hold_at_least(len(self.table.row_of) + len(keys))
        tiers.put_rows(self.table, keys, values, slots, counts, last_seen, self.capacity_rows)

    def admitted_entries(self):
        return tiers.admitted_entries(self.table)

    # ---------------------------------------------------------- checkpoint
    def export(self) -> TableState:
        return checkpoint.export_state(self.table, self.clock, self.clock_source)

    def import_state(self, state: TableState) -> None:
        self.reset()
        checkpoint.import_state(self.table, state, self.capacity_after_import(len(state.keys)))    # CKPT-6
        self.clock, self.clock_source = state.clock, state.clock_source


class RefStore(Store):
    """The reference backend: a ``Store`` over a ``RefEngine``."""

    backend_name = "ref"
    engine_class = RefEngine    # the engine this facade builds (a subclass may name its own)

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        config, optimizer = checked_table(config, optimizer)
        super().__init__(config, optimizer,
                         engine=self.engine_class(config, optimizer, hot_rows, hot_update_step))
