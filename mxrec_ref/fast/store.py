"""The fast store: the reference's rules over the Cython core in cext/_fast.pyx.

``FastEngine`` (behind the ``FastStore`` facade) must agree bit for bit with
``mxrec_ref.ref.RefEngine`` after every call (the comparison machines of mxrec_ref/conformance/machines.py, run
by mxrec_ref/conformance/test_backends.py).  It is written as the
reference's store is: one call per rule, in spec order, to the module of the
rule's family -- ``fast/lookup.py``, ``admission``, ``eviction``, ``optimizers``,
``hot``, ``tiers``, ``checkpoint``, ``initializers`` -- named as the
reference's (``mxrec_ref/ref/``).  The split:

* in Python: everything that raises, the calls of the rules both backends
  share (mxrec_ref/engine.py: the capacity and growth rule, the table clock,
  the statistics counters, the hot schedule), the initializer call and the
  optimizer's scalar hyper-parameters;
* in ``mxrec_ref._fast.FastCore``: the key history (hash map), row placement,
  row storage, batch dedup, gathers and the optimizer loops, each without the
  GIL; and the hot block (spec/hot.md).

A training lookup is planned (nothing changes), checked, then committed, so
an error leaves the store as it was (CON-4).  Every message comes from the
contract and mxrec_ref/engine.py, so both backends fail identically.
"""
from __future__ import annotations

import numpy as np

from .._fast import FastCore, HostHeap, prefault_rows
from ..config import TableConfig
from ..contract import Store, checked_table
from ..engine import (InMemoryEngine, Prepared, Resolved, TierMoves, check_send_count, eviction_cutoff,
                      initial_rows_of, overflow_error)
from ..optimizers import SparseOptimizer
from ..state import LookupResult, TableState
from . import admission, checkpoint, eviction, hot, initializers, lookup, optimizers, tiers
from .disk import FastDiskKernels
from .placement import FastDevicePlacement


class FastEngine(InMemoryEngine, TierMoves):
    backend_name = "fast"
    device_placement = FastDevicePlacement       # CON-10, TIER-4
    host_heap = HostHeap                         # CON-10, TIER-12
    disk_kernels = FastDiskKernels               # the SSD tier's index, checksums and reads, TIER-9

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        super().__init__(config, optimizer, hot_rows, hot_update_step)
        self.default_row = np.ascontiguousarray(config.default_row(), dtype=np.float32)
        initial = self.optimizer.slot_initial_values()
        # A slot without an initial value keeps what its row held, as in the
        # reference's place_rows (only possible for a custom optimizer).
        self.core = FastCore(config.dim, [initial.get(name) for name in self.optimizer.slot_names])
        self.slot_index = {name: i for i, name in enumerate(self.optimizer.slot_names)}

    # -------------------------------------------------------------- lookup
    def resolve(self, keys, shape, *, train, step, timestamp, pad_to, counts) -> Resolved:
        return self.resolve_deduped(self.dedup(keys, counts), keys, shape, train=train, step=step,
                                    timestamp=timestamp, pad_to=pad_to, counts=counts)

    def prepare(self, keys, shape, *, counts) -> Prepared:
        """PIPE-1: the dedup and the initial rows of the keys a lookup now would admit; reads the
        history (a probe), changes nothing.  ``commit`` works out counts and admission again."""
        deduped = self.dedup(keys, counts)
        unique, _, occurrences = deduped
        plan = admission.plan_train(self.core, unique, occurrences, self.effective_coefficient(),
                                    self.config.admit_threshold)
        admit = plan.admit
        prefault_rows(self.core, len(admit))       # memory only: the rows' pages, faulted in ahead
        return Prepared(keys, shape, counts, deduped, admit,
                        initializers.initial_rows(self.config, unique[admit]) if len(admit) else None,
                        hints=plan)     # commit takes it while nothing it read changed (plan_train_again)

    def dedup(self, keys, counts):
        return lookup.dedup(self.core, keys, counts)                              # LKP-2

    def resolve_deduped(self, deduped, keys, shape, *, train, step, timestamp, pad_to, counts,
                        prepared=None) -> Resolved:
        """Each unique key's row handle, padded to send_count, from the pass that resolves the
        keys; no row is read: gather reads them by handle (one C pass over the handles)."""
        core = self.core
        unique, inverse, occurrences = deduped
        n_unique = len(unique)
        check_send_count(self.config, n_unique, pad_to)                           # LKP-4
        total = n_unique if pad_to is None else max(pad_to, n_unique)
        # hot_index: each unique key's index in the hot block, probed on the
        # way, as the set is before this lookup's refresh (None: no hot set)
        if train:
            admitted, handles, hot_index = self.train_lookup(unique, occurrences, step, timestamp, total, prepared)
        else:
            handles, admitted, hot_index = lookup.locate(core, unique, total)     # LKP-5, HOT-3
        padding, with_row, hot_hits = lookup.position_stats(core, keys, inverse, admitted, hot_index)
        self.count_positions(train, keys.size, padding, with_row)                 # STAT-3
        self.counters["hot_hit_positions"] += hot_hits                            # HOT-4
        self.refresh_hot_if_due(train)                                            # HOT-2
        return Resolved(keys=keys, shape=shape, train=train, step=step, pad_to=pad_to, unique=unique,
                        inverse=inverse, n_unique=n_unique, admitted=admitted, handles=handles,
                        hot_index=hot_index, padded=True)

    def gather(self, resolved: Resolved) -> LookupResult:
        rows = resolved.rows
        if rows is None:        # read now, by handle: every apply since resolve shows (LKP-3, ADM-5, LKP-4)
            rows = lookup.gather_rows(self.core, resolved.handles, len(resolved.handles), self.default_row)
        unique = lookup.pad(resolved.unique, len(rows))                           # LKP-4
        # a training result carries its handles for apply (OPT-9); an evaluation result none, as before
        return LookupResult(self.name, unique, rows, resolved.inverse.reshape(resolved.shape), resolved.admitted,
                            resolved.train, resolved.n_unique, 0, resolved.handles if resolved.train else None)

    def train_lookup(self, unique, occurrences, step, timestamp, total, prepared=None):
        """Count, admit and place rows (ADM-1..ADM-4, EXP-1..EXP-4); returns the lookup's
        (admitted, row handles, hot index of each unique key or None).  All checks happen before
        the commit."""
        clock, source = self.training_clock(step, timestamp)                      # CON-5
        core = self.core
        coefficient, threshold = self.effective_coefficient(), self.config.admit_threshold
        if prepared is not None and prepared.hints is not None:    # the keys were planned ahead: PIPE-3
            plan = admission.plan_train_again(core, prepared.hints, unique, occurrences, coefficient, threshold)
        else:
            plan = admission.plan_train(core, unique, occurrences, coefficient, threshold)
        admit = plan.admit
        self.reserve(len(admit))                                                  # EXP-2, EXP-3
        # The shared initializer, in first-occurrence order (INIT-1).
        init = initial_rows_of(self.config, unique, admit, prepared, initializers.initial_rows)
        admitted, handles = admission.commit_train(core, plan, clock, init, self.capacity_rows, total)
        self.clock, self.clock_source = clock, source
        self.counters["admitted"] += len(admit)
        self.counters["train_lookups"] += 1
        return admitted, handles, plan.hot_index

    def refresh_hot(self) -> None:
        hot.refresh_hot(self.core, self.hot_capacity)

    def set_optimizer(self, optimizer: SparseOptimizer) -> None:
        super().set_optimizer(optimizer)
        initial = optimizer.slot_initial_values()       # rows created from now on start from these (INIT-5)
        self.core.set_slot_initial_values([initial.get(name) for name in optimizer.slot_names])

    # ----------------------------------------------------------- gradients
    def apply(self, keys, grads, mask, step, *, optimizer, handles=None) -> int:
        core = self.core
        positions, rows = optimizers.resolve_rows(core, keys, mask, handles)      # OPT-2, OPT-9
        # The whole update is checked before any of it is written (OPT-3).
        bad = optimizers.first_nonfinite(optimizer, core, self.slot_index, rows, positions, grads, step)
        if bad >= 0:
            raise overflow_error(self.config, optimizer, int(keys[positions[bad]]))
        optimizers.apply_update(optimizer, core, self.slot_index, rows, positions, grads, step)
        self.count_applied(len(keys), len(rows))                                  # STAT-5
        return len(rows)

    # ------------------------------------------------------------ eviction
    def evict(self, now):
        cutoff = eviction_cutoff(self.config, now, self.clock)                    # EVI-1
        if cutoff is None:
            return np.zeros(0, dtype=np.int64)
        expired = eviction.expired_keys(self.core, cutoff)
        admitted, pending = eviction.remove_keys(self.core, expired)              # EVI-2, EVI-3
        self.counters["evicted"] += admitted                                      # STAT-4
        self.counters["evicted_pending"] += pending
        return expired

    # ------------------------------------------------------------- queries
    def size(self) -> int:
        return self.core.size

    def stats(self):
        core = self.core
        return self.counter_stats(size=core.size, history=core.history_size, hot_rows=core.hot_size)

    def row_handles(self, keys):
        return lookup.row_handles(self.core, keys)                               # EXP-5

    def bytes_per_key(self) -> float:
        size = self.core.size
        return sum(self.core.memory_bytes().values()) / size if size else float("nan")

    def memory_breakdown(self, allocated: bool = False) -> dict[str, int]:
        return self.core.memory_bytes(allocated)

    # ---------------------------------------------------------- tier moves
    def rows_of(self, keys, rows=None):
        return tiers.rows_of(self.core, self.slot_index, keys, rows)

    def entries_of(self, keys, rows):
        return tiers.entries_of(self.core, keys, rows)

    def drop_rows(self, keys) -> None:
        tiers.drop_rows(self.core, keys)

    def put_rows(self, keys, values, slots, counts, last_seen) -> None:
        self.hold_at_least(self.core.size + len(keys))
        tiers.put_rows(self.core, self.slot_index, keys, values, slots, counts, last_seen, self.capacity_rows)

    def admitted_entries(self):
        return tiers.admitted_entries(self.core)

    # ---------------------------------------------------------- checkpoint
    def export(self) -> TableState:
        return checkpoint.export_state(self.core, self.slot_index, self.clock, self.clock_source)

    def import_state(self, state: TableState) -> None:
        """Counters are kept; the hot set is emptied (clear)."""
        slot_arrays = [state.slots[name] for name in self.slot_index]
        self.core.clear()
        self.clock = self.clock_source = None
        checkpoint.import_state(self.core, state, slot_arrays,
                                self.capacity_after_import(len(state.keys)))     # CKPT-6
        self.clock, self.clock_source = state.clock, state.clock_source


class FastStore(Store):
    """The fast backend: a ``Store`` over a ``FastEngine``."""

    backend_name = "fast"

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None,
                 hot_rows: int | None = None, hot_update_step: int | None = None):
        config, optimizer = checked_table(config, optimizer)
        super().__init__(config, optimizer, engine=FastEngine(config, optimizer, hot_rows, hot_update_step))

    def bytes_per_key(self) -> float:
        """Bytes of the hash map, key entries (key, count, last seen), free
        list and row values -- optimizer slots excluded -- per key holding a
        row; nan for an empty table.  Counts memory written so far (what is
        resident); ``memory_breakdown(allocated=True)`` gives reserved bytes."""
        with self._lock:
            return self.engine.bytes_per_key()

    def memory_breakdown(self, allocated: bool = False) -> dict[str, int]:
        """The bytes behind ``bytes_per_key``, by structure."""
        with self._lock:
            return self.engine.memory_breakdown(allocated)
