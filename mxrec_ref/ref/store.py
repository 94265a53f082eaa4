"""The reference store: plain Python dictionaries and numpy, written to be read.

Every rule of spec/ is implemented here in the most direct way; speed does not
matter.  The fast path must agree with this module after every call
(the comparison machines of mxrec_ref/conformance/machines.py, run by
mxrec_ref/conformance/test_differential.py).  Rule ids in comments point to
spec/; the rules both backends share are called from mxrec_ref/contract.py.
"""
from __future__ import annotations

import numpy as np

from .. import hot
from ..config import TableConfig
from ..contract import InMemoryStore, TierMoves
from ..initializers import initial_rows
from ..optimizers import SparseOptimizer
from ..state import PADDING_KEY, LookupResult, TableState
from ..tiers.placement import RefDevicePlacement
from .optimizer_math import apply_update

COUNT_MAX = 2**63 - 1  # counts saturate here (ADM-7)


class RefStore(InMemoryStore, TierMoves):
    backend_name = "ref"
    device_placement = RefDevicePlacement       # CON-10, TIER-4

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        super().__init__(config, optimizer, hot_rows, hot_update_step)
        self._reset()

    def _reset(self) -> None:
        dim = self.config.dim
        self._row_of: dict[int, int] = {}       # admitted key -> row index
        self._count: dict[int, int] = {}        # every key in the history (admitted and pending)
        self._last_seen: dict[int, int] = {}
        self._free_rows: list[int] = []         # LIFO stack of rows freed by eviction (EXP-4)
        self._next_row = 0                      # rows [0, _next_row) have been handed out once
        self._capacity_rows = self.config.table_capacity
        self._values = np.zeros((0, dim), dtype=np.float32)
        self._slots = {name: np.zeros((0, dim), dtype=np.float32) for name in self.optimizer.slot_names}
        self.clock: int | None = None
        self.clock_source: str | None = None
        self._hot: dict[int, int] = {}          # hot key -> its row in the hot block (HOT-2)
        self._hot_block = np.zeros((0, dim), dtype=np.float32)

    # -------------------------------------------------------------- lookup
    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        unique, inverse, occurrences = _unique_first_occurrence(keys, counts)
        self._check_send_count(len(unique), pad_to)
        if train:
            admitted = self._train_lookup(unique, occurrences, step, timestamp)
        else:
            admitted = np.array([k in self._row_of for k in unique.tolist()], dtype=bool)
        rows = np.empty((len(unique), self.config.dim), dtype=np.float32)
        rows[:] = self.config.default_row()
        is_hot = np.zeros(len(unique), dtype=bool)
        for i, key in enumerate(unique.tolist()):
            if key in self._hot:                # the hot block is consulted first (HOT-3)
                rows[i] = self._hot_block[self._hot[key]]
                is_hot[i] = True
            elif admitted[i]:
                rows[i] = self._values[self._row_of[key]]
        padding = int(np.count_nonzero(keys == PADDING_KEY))
        with_row = int(np.count_nonzero(admitted[inverse])) if keys.size else 0
        self._count_positions(train, keys.size, padding, with_row)
        self._counters["hot_hit_positions"] += int(np.count_nonzero(is_hot[inverse])) if keys.size else 0
        self._refresh_hot_if_due(train)
        n_unique = len(unique)
        if pad_to is not None and pad_to > n_unique:
            extra = pad_to - n_unique
            unique = np.concatenate([unique, np.full(extra, PADDING_KEY, dtype=np.int64)])
            rows = np.concatenate([rows, np.tile(self.config.default_row(), (extra, 1))])
            admitted = np.concatenate([admitted, np.zeros(extra, dtype=bool)])
        return LookupResult(self.name, unique, rows, inverse.reshape(shape), admitted, train,
                            n_unique, id(self))

    def _train_lookup(self, unique, occurrences, step, timestamp) -> np.ndarray:
        """Count, admit and place rows (ADM-1..ADM-4, EXP-1..EXP-4).  All checks
        happen before the first change."""
        clock, source = self._training_clock(step, timestamp)
        coefficient = self.effective_coefficient()
        threshold = self._admit_threshold()
        new_counts = {}
        to_admit = []
        for key, n in zip(unique.tolist(), occurrences.tolist()):
            if key == PADDING_KEY:
                continue
            count = min(self._count.get(key, 0) + coefficient * n, COUNT_MAX)
            new_counts[key] = count
            if key not in self._row_of and count >= threshold:
                to_admit.append(key)
        self._reserve(len(to_admit))

        self.clock, self.clock_source = clock, source
        for key, count in new_counts.items():
            self._count[key] = count
            self._last_seen[key] = clock
        self._place(to_admit)
        self._counters["train_lookups"] += 1
        return np.array([k in self._row_of for k in unique.tolist()], dtype=bool)

    def _refresh_hot(self) -> None:
        """HOT-2: the most frequently accessed keys holding a row, and a copy of their rows."""
        keys, counts, _ = self._admitted_entries()
        chosen = hot.choose_hot_keys(keys, counts, self._hot_capacity)
        self._hot = {key: i for i, key in enumerate(chosen.tolist())}
        self._hot_block = self._values[[self._row_of[k] for k in chosen.tolist()]].reshape(-1, self.config.dim)

    def _admit_threshold(self) -> int:
        return self.config.admit_threshold

    def _place(self, keys: list[int]) -> None:
        """Give each new key a row: freed rows first (last freed first), then
        never-used rows in ascending order (EXP-4); fill it from the
        initializer and the optimizer's initial slot values (INIT-1, EVI-4)."""
        if not keys:
            return
        rows = []
        for key in keys:
            row = self._row_of[key] = self._take_row()
            rows.append(row)
        self._ensure_allocated(self._next_row)
        rows = np.array(rows, dtype=np.int64)
        self._values[rows] = initial_rows(self.config, np.array(keys, dtype=np.int64))
        for name, value in self.optimizer.slot_initial_values().items():
            self._slots[name][rows] = np.float32(value)
        self._counters["admitted"] += len(keys)

    def _take_row(self) -> int:
        """The next row to hand out (EXP-4): the last freed, else the next never-used one."""
        if self._free_rows:
            return self._free_rows.pop()
        self._next_row += 1
        return self._next_row - 1

    def _ensure_allocated(self, n_rows: int) -> None:
        """Physical rows are allocated as they are first used, doubling, so a
        table declared with 10^9 rows costs nothing until keys arrive."""
        have = self._values.shape[0]
        if n_rows <= have:
            return
        new = min(max(n_rows, 2 * have, 1024), max(self._capacity_rows, n_rows))
        self._values = _grown(self._values, new)
        self._slots = {name: _grown(array, new) for name, array in self._slots.items()}

    # ----------------------------------------------------------- gradients
    def _apply(self, keys, grads, mask, step) -> int:
        positions, rows = [], []
        for i, key in enumerate(keys.tolist()):
            if mask[i] and key in self._row_of:   # re-resolved by key: evicted keys drop (OPT-2)
                positions.append(i)
                rows.append(self._row_of[key])
        rows = np.array(rows, dtype=np.int64)
        weights = self._values[rows]
        slots = {name: array[rows] for name, array in self._slots.items()}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # checked next
            apply_update(self.optimizer, weights, slots, grads[positions], step)
        finite = np.isfinite(weights).all(axis=1)
        for array in slots.values():
            finite &= np.isfinite(array).all(axis=1)
        if not finite.all():                     # OPT-3: nothing written yet
            raise self._overflow_error(int(keys[positions[int(np.argmin(finite))]]))
        self._values[rows] = weights
        for name, array in slots.items():
            self._slots[name][rows] = array
        for i in positions:                      # the hot block follows its rows (HOT-3)
            key = int(keys[i])
            if key in self._hot:
                self._hot_block[self._hot[key]] = self._values[self._row_of[key]]
        self._count_applied(len(keys), len(rows))
        return len(rows)

    # ------------------------------------------------------------ eviction
    def _evict(self, now):
        cutoff = self._eviction_cutoff(now, self.clock)
        if cutoff is None:
            return np.zeros(0, dtype=np.int64)
        expired = sorted(k for k, seen in self._last_seen.items() if seen <= cutoff)   # EVI-1
        for key in expired:                      # ascending key order (EVI-3)
            del self._count[key]
            del self._last_seen[key]
            self._hot.pop(key, None)
            row = self._row_of.pop(key, None)
            if row is None:
                self._counters["evicted_pending"] += 1
            else:
                self._free_rows.append(row)
                self._counters["evicted"] += 1
        return np.array(expired, dtype=np.int64)

    # ------------------------------------------------------------- queries
    def _size(self) -> int:
        return len(self._row_of)

    def _stats(self):
        return self._counter_stats(size=len(self._row_of), history=len(self._count), hot_rows=len(self._hot))

    def _row_handles(self, keys):
        return np.array([self._row_of.get(k, -1) for k in keys.tolist()], dtype=np.int64)

    # ---------------------------------------------------------- tier moves
    def _rows_of(self, keys):
        """Copies of what ``keys`` (all holding a row) carry to another tier:
        (values, {slot: values}, counts, last_seen)."""
        rows = np.array([self._row_of[k] for k in keys.tolist()], dtype=np.int64)
        return (self._values[rows].copy(), {name: array[rows].copy() for name, array in self._slots.items()},
                np.array([self._count[k] for k in keys.tolist()], dtype=np.int64),
                np.array([self._last_seen[k] for k in keys.tolist()], dtype=np.int64))

    def _distinct(self, keys):
        """The distinct keys of a batch in order of first occurrence (LKP-2)."""
        return _unique_first_occurrence(keys, None)[0]

    def _drop_rows(self, keys) -> None:
        """Forget ``keys`` (their rows moved to another tier): rows go on the
        free stack in the given order, as eviction frees them; no counter moves."""
        for key in keys.tolist():
            self._hot.pop(key, None)
            self._free_rows.append(self._row_of.pop(key))
            del self._count[key]
            del self._last_seen[key]

    def _put_rows(self, keys, values, slots, counts, last_seen) -> None:
        """Take back ``keys`` (not in the history) with the state they carry;
        rows are handed out as for new keys (EXP-4); no counter moves."""
        self._hold_at_least(len(self._row_of) + len(keys))
        rows = []
        for key, count, seen in zip(keys.tolist(), counts.tolist(), last_seen.tolist()):
            row = self._row_of[key] = self._take_row()
            self._count[key] = count
            self._last_seen[key] = seen
            rows.append(row)
        self._ensure_allocated(self._next_row)
        rows = np.array(rows, dtype=np.int64)
        self._values[rows] = values
        for name in self._slots:
            self._slots[name][rows] = slots[name]

    def _admitted_entries(self):
        """(keys ascending, counts, last_seen) of every key holding a row."""
        keys = sorted(self._row_of)
        return (np.array(keys, dtype=np.int64), np.array([self._count[k] for k in keys], dtype=np.int64),
                np.array([self._last_seen[k] for k in keys], dtype=np.int64))

    def _export(self) -> TableState:
        keys = np.array(sorted(self._row_of), dtype=np.int64)
        rows = np.array([self._row_of[k] for k in keys.tolist()], dtype=np.int64)
        pending = np.array(sorted(k for k in self._count if k not in self._row_of), dtype=np.int64)
        return TableState(
            keys=keys,
            values=self._values[rows].copy(),
            slots={name: array[rows].copy() for name, array in self._slots.items()},
            counts=np.array([self._count[k] for k in keys.tolist()], dtype=np.int64),
            last_seen=np.array([self._last_seen[k] for k in keys.tolist()], dtype=np.int64),
            pending_keys=pending,
            pending_counts=np.array([self._count[k] for k in pending.tolist()], dtype=np.int64),
            pending_last_seen=np.array([self._last_seen[k] for k in pending.tolist()], dtype=np.int64),
            clock=self.clock,
            clock_source=self.clock_source,
        )

    def _import_state(self, state: TableState) -> None:
        """Loaded keys take rows 0..n-1 in ascending key order (CKPT-6)."""
        self._reset()
        n = len(state.keys)
        self._capacity_after_import(n)
        self._ensure_allocated(n)
        self._next_row = n
        self._values[:n] = state.values
        for name in self._slots:
            self._slots[name][:n] = state.slots[name]
        for row, key in enumerate(state.keys.tolist()):
            self._row_of[key] = row
        for keys, counts, seen in ((state.keys, state.counts, state.last_seen),
                                   (state.pending_keys, state.pending_counts, state.pending_last_seen)):
            for key, count, last in zip(keys.tolist(), counts.tolist(), seen.tolist()):
                self._count[key] = count
                self._last_seen[key] = last
        self.clock, self.clock_source = state.clock, state.clock_source


def _unique_first_occurrence(keys: np.ndarray, counts: np.ndarray | None):
    """Distinct keys in order of first occurrence, the inverse index and the
    number of accesses of each (LKP-2, ADM-2) -- a dictionary walk, no sorting."""
    weights = [1] * keys.size if counts is None else counts.tolist()
    index: dict[int, int] = {}
    inverse = np.empty(keys.size, dtype=np.int64)
    occurrences: list[int] = []
    for position, key in enumerate(keys.tolist()):
        slot = index.get(key)
        if slot is None:
            slot = index[key] = len(occurrences)
            occurrences.append(0)
        occurrences[slot] += weights[position]
        inverse[position] = slot
    unique = np.fromiter(index.keys(), dtype=np.int64, count=len(index))
    return unique, inverse, np.array(occurrences, dtype=np.int64)


def _grown(array: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros((rows, array.shape[1]), dtype=array.dtype)
    out[: array.shape[0]] = array
    return out
