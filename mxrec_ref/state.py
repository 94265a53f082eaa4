"""The records every layer shares (the bottom of the house, DESIGN.md section 8).

The padding key, the statistic names, what a lookup returns and what a store
holds (``TableState``), with the merges of states in key order.  Nothing here
knows a backend, the contract or the registry: this module imports only numpy.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

PADDING_KEY = -1

# The statistics every backend reports, in this order (spec/stats.md, STAT-1).
STAT_NAMES = (
    "size",                # keys holding a row now
    "capacity",            # rows the table can hold now
    "pending",             # keys seen in training but not admitted yet
    "train_lookups",
    "eval_lookups",
    "key_positions",       # positions looked up, padding excluded
    "padding_positions",   # positions holding the padding key -1
    "default_positions",   # non-padding positions answered with the default value
    "admitted",            # keys admitted (rows created) since the store opened
    "evicted",             # admitted keys evicted
    "evicted_pending",     # non-admitted keys dropped from the history by eviction
    "growths",             # capacity expansions
    "grad_applies",
    "grad_rows_applied",
    "grad_rows_dropped",   # gradient rows of keys without a row (not admitted, padding, evicted)
    # storage tiers (spec/tiers.md, TIER-10); an HBM table has every row on the device
    "device_rows",
    "host_rows",
    "disk_rows",
    "host_to_device_rows",
    "device_to_host_rows",
    "host_to_disk_rows",
    "disk_to_host_rows",
    "host_device_bytes",   # bytes of rows (values and optimizer slots) moved either way
    "host_disk_bytes",
    "disk_reads",          # records read from SSD files
    "disk_writes",         # records written
    "disk_bytes_read",
    "disk_bytes_written",
    "compactions",
    # hot embedding (spec/hot.md, HOT-4)
    "hot_rows",            # keys in the hot block now
    "hot_refreshes",
    "hot_hit_positions",   # non-padding positions answered from the hot block
)


@dataclass(frozen=True)
class LookupResult:
    """What ``lookup`` returns (LKP-1..LKP-5).

    ``rows[inverse]`` is the per-position embedding, shape ``keys.shape + (dim,)``.
    ``unique_keys`` are in order of first occurrence; with ``pad_to`` they are
    padded with -1 (and ``rows`` with the default value) to that length.
    """

    table: str
    unique_keys: np.ndarray  # int64 [u]
    rows: np.ndarray         # float32 [u, dim]
    inverse: np.ndarray      # int64, shape of the keys
    admitted: np.ndarray     # bool [u]: the key holds a row
    train: bool
    n_unique: int            # distinct keys before padding
    store_id: int = field(default=0, repr=False)
    # int64 [u]: the fast core's row of each unique key at lookup time (-1: none), or None.  A hint
    # apply_gradients checks before use (OPT-9); it never decides which key a gradient updates.
    row_handles: np.ndarray | None = field(default=None, repr=False, compare=False)

    def embeddings(self) -> np.ndarray:
        return np.take(self.rows, self.inverse, axis=0)  # take: ~3x faster than fancy indexing


@dataclass(frozen=True)
class TableState:
    """Everything a store holds, independent of backend and row placement
    (CON-6): admitted keys (sorted) with values, optimizer slots, counts and
    last-seen times; the pending history of non-admitted keys (sorted); the
    table clock.  ``export()`` returns it; checkpoints store exactly it."""

    keys: np.ndarray                 # int64 [n], ascending
    values: np.ndarray               # float32 [n, dim]
    slots: dict[str, np.ndarray]     # slot name -> float32 [n, dim]
    counts: np.ndarray               # int64 [n]
    last_seen: np.ndarray            # int64 [n]
    pending_keys: np.ndarray         # int64 [m], ascending
    pending_counts: np.ndarray       # int64 [m]
    pending_last_seen: np.ndarray    # int64 [m]
    clock: int | None                # the table's time: max step or timestamp seen
    clock_source: str | None         # "step", "timestamp" or None before the first training lookup

    def with_rows(self, keys: np.ndarray, values: np.ndarray, slots: dict[str, np.ndarray], counts: np.ndarray,
                  last_seen: np.ndarray) -> "TableState":
        """This state with more admitted keys (none of them in it) and what they carry, merged
        into key order: how the tiers export the rows kept on disk next to the in-memory ones."""
        merged_keys, pick = merge_in_key_order(self.keys, np.ones(len(self.keys), dtype=bool), keys)
        return dataclasses.replace(
            self, keys=merged_keys, values=pick(self.values, values),
            slots={name: pick(self.slots[name], slots[name]) for name in self.slots},
            counts=pick(self.counts, counts), last_seen=pick(self.last_seen, last_seen))

    def with_delta(self, delta: "TableState", removed: np.ndarray) -> "TableState":
        """This state (a checkpoint's base) with an incremental checkpoint applied (CKPT-9): the
        delta's keys replace whatever the base had for them (admitted or pending), ``removed``
        keys disappear, and the clock is the delta's."""
        gone = np.union1d(np.union1d(removed, delta.keys), delta.pending_keys)
        keys, pick = merge_in_key_order(self.keys, ~np.isin(self.keys, gone), delta.keys)
        pending_keys, pick_pending = merge_in_key_order(self.pending_keys, ~np.isin(self.pending_keys, gone),
                                                         delta.pending_keys)
        return TableState(
            keys=keys, values=pick(self.values, delta.values),
            slots={name: pick(self.slots[name], delta.slots[name]) for name in self.slots},
            counts=pick(self.counts, delta.counts), last_seen=pick(self.last_seen, delta.last_seen),
            pending_keys=pending_keys, pending_counts=pick_pending(self.pending_counts, delta.pending_counts),
            pending_last_seen=pick_pending(self.pending_last_seen, delta.pending_last_seen),
            clock=delta.clock, clock_source=delta.clock_source)

    def equals(self, other: "TableState") -> bool:
        """Bit-for-bit equality of every field (float compared by bit pattern)."""
        return not self.differences(other)

    def differences(self, other: "TableState") -> list[str]:
        diffs = []
        for name in ("keys", "counts", "last_seen", "pending_keys", "pending_counts", "pending_last_seen"):
            if not np.array_equal(getattr(self, name), getattr(other, name)):
                diffs.append(name)
        if self.values.shape != other.values.shape or not np.array_equal(
                self.values.view(np.uint32), other.values.view(np.uint32)):
            diffs.append("values")
        if sorted(self.slots) != sorted(other.slots):
            diffs.append("slot names")
        else:
            for slot in self.slots:
                a, b = self.slots[slot], other.slots[slot]
                if a.shape != b.shape or not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
                    diffs.append(f"slot {slot}")
        if (self.clock, self.clock_source) != (other.clock, other.clock_source):
            diffs.append("clock")
        return diffs


def merge_warm_start(current: TableState, loaded: TableState, admit_threshold: int, now: int | None) -> TableState:
    """WS-3: loaded keys overwrite rows and slots, are admitted (count at
    least the threshold) and were last seen at the warm-start time; other
    keys keep everything."""
    if now is None:
        now = current.clock if current.clock is not None else (loaded.clock or 0)
    keys, pick = merge_in_key_order(current.keys, ~np.isin(current.keys, loaded.keys), loaded.keys)
    old_counts = dict(zip(np.concatenate([current.keys, current.pending_keys]).tolist(),
                          np.concatenate([current.counts, current.pending_counts]).tolist()))
    counts = np.array([max(old_counts.get(k, 0), int(c), admit_threshold)
                       for k, c in zip(loaded.keys.tolist(), loaded.counts.tolist())], dtype=np.int64)
    pending = ~np.isin(current.pending_keys, loaded.keys)
    clock, source = current.clock, current.clock_source
    if clock is None:
        clock, source = (loaded.clock, loaded.clock_source) if loaded.clock is not None else (None, None)
    if clock is not None:
        clock = max(clock, now)
    return TableState(
        keys=keys,
        values=pick(current.values, loaded.values),
        slots={name: pick(current.slots[name], loaded.slots[name]) for name in current.slots},
        counts=pick(current.counts, counts),
        last_seen=pick(current.last_seen, np.full(len(loaded.keys), now, dtype=np.int64)),
        pending_keys=current.pending_keys[pending],
        pending_counts=current.pending_counts[pending],
        pending_last_seen=current.pending_last_seen[pending],
        clock=clock,
        clock_source=source,
    )


def merge_in_key_order(old_keys: np.ndarray, keep: np.ndarray, new_keys: np.ndarray):
    """The one key-order merge every state merge uses: the kept ``old_keys`` (ascending) and
    ``new_keys`` (ascending, none of them kept) as one ascending array, and ``pick(old, new)``,
    which merges a column of each the same way (a stable sort: ties cannot occur)."""
    order = np.argsort(np.concatenate([old_keys[keep], new_keys]), kind="stable")

    def pick(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        return np.concatenate([old[keep], new])[order]

    return pick(old_keys, new_keys), pick
