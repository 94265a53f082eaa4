"""The store contract: one shard of one sparse table (spec/contract.md).

``Store`` is the interface every backend implements: the reference model
(``mxrec_ref.ref``, the oracle) and the Cython fast path (``mxrec_ref.fast``).
This module holds what is *not* model logic and must be identical in every
backend: argument validation (so a bad call fails the same way, before any
state changes), the result and state records, the per-store lock, and
checkpoint I/O, which goes through ``export`` and ``_import_state`` so one
on-disk format serves every backend.

Backends implement the ``_``-prefixed hooks; they receive validated arguments
only.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .config import TableConfig
from .errors import GradientError, KeyInputError, UsageError
from .optimizers import SGD, SparseOptimizer

PADDING_KEY = -1
PAD_TO_MAX = 2**31 - 1        # send_count's range (CFG-8)
PAD_FLOATS_MAX = 2**30        # pad_to x dim: at most 4 GiB of padded rows, checked before any change (LKP-4)
logger = logging.getLogger(__name__)   # events of a table's life (spec/observability.md, OBS-2)

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


class Store(ABC):
    """One table's sparse state.  Public methods validate, take the store's
    lock, and call the backend hook; see spec/contract.md for the rules."""

    backend_name = "abstract"
    tiered = False     # True for DDR and SSD tables (spec/tiers.md)

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None):
        if not isinstance(config, TableConfig):
            raise TypeError(f"config must be an mxrec_ref.TableConfig, got {type(config).__name__}")
        optimizer = SGD(learning_rate=0.01) if optimizer is None else optimizer
        if not isinstance(optimizer, SparseOptimizer):
            raise TypeError(f"table {config.name!r}: optimizer: must be an mxrec_ref sparse optimizer, "
                            f"got {type(optimizer).__name__}")
        self.config = config
        self.optimizer = optimizer
        self.counting = True      # False after set_threshold(0): counts frozen (ADM-9)
        self._last_checkpoint = None   # (folder, state) of the last save or load: the base of a delta
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- API
    @property
    def name(self) -> str:
        return self.config.name

    def lookup(self, keys, *, train: bool = True, step: int | None = None,
               timestamp: int | None = None, pad_to: int | None = None, counts=None) -> LookupResult:
        """Unique rows and the inverse index for ``keys`` (any shape).

        A training lookup counts accesses, admits keys and creates rows; an
        evaluation lookup changes nothing (LKP-*, ADM-*).  ``counts`` (same
        shape as ``keys``) gives each position an access weight instead of 1,
        as mxRec's pre-aggregated batches do (ADM-2).
        """
        flat, shape = self._check_keys(keys)
        if counts is not None:
            counts = self._check_counts(counts, shape)
        train = self._check_bool("train", train)
        if train:
            step = self._check_time("step", step, required=True)
            timestamp = self._check_time("timestamp", timestamp, required=False)
        else:
            step = self._check_time("step", step, required=False)
            timestamp = self._check_time("timestamp", timestamp, required=False)
        pad_to = self._check_pad_to(pad_to)
        with self._lock:
            return _read_only(self._lookup(flat, shape, train, step, timestamp, pad_to, counts))

    def apply_gradients(self, result, grad_rows, *, step: int) -> int:
        """Apply one gradient row per unique key with the store's optimizer.

        ``result`` is a training ``LookupResult`` of this store (``grad_rows``
        aligned with its ``unique_keys``), or an integer key array (any order,
        duplicates summed in order of occurrence; OPT-1).  Rows of keys that
        hold no row are dropped.  Returns the number of rows updated.
        """
        step = self._check_time("step", step, required=True)
        if isinstance(result, LookupResult):
            if result.store_id != id(self) or result.table != self.name:
                raise UsageError(f"table {self.name!r}: result: this lookup result belongs to "
                                 f"table {result.table!r} or to another store")
            if not result.train:
                raise UsageError(f"table {self.name!r}: result: an evaluation lookup has no gradient to apply")
            keys, mask = self._check_result_arrays(result)
        else:
            keys, _ = self._check_keys(result, parameter="keys")
            mask = keys != PADDING_KEY
        grads = self._check_grads(grad_rows, len(keys))
        if not isinstance(result, LookupResult):
            keys, grads, mask = _sum_duplicates(keys, grads, mask)
            self._check_finite(grads, keys, "the sum of its duplicate rows overflows to Inf")
        with self._lock:
            return self._apply(keys, grads, mask, step)

    def evict(self, now: int | None = None) -> np.ndarray:
        """Remove every key with ``now - last_seen >= eviction_threshold``;
        ``now`` defaults to the table clock.  Returns the removed keys, sorted."""
        if not self.config.eviction_enabled:
            raise UsageError(f"table {self.name!r}: eviction_threshold: eviction is not configured "
                             f"(eviction_threshold={self.config.eviction_threshold})")
        now = self._check_time("now", now, required=False, minimum=-(2**62))
        with self._lock:
            evicted = self._evict(now)
        logger.log(logging.INFO if len(evicted) else logging.DEBUG, "table %r: evicted %d keys (now=%s)",
                   self.name, len(evicted), now)
        return evicted

    def set_threshold(self, threshold: int) -> None:
        """mxRec's run-time ``set_threshold`` (ADM-9): ``threshold > 0`` becomes the
        new access_threshold for later lookups; ``0`` stops counting (counts are
        frozen, the threshold is kept); counting resumes with the next positive
        threshold.  Keys already admitted stay admitted."""
        if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, np.integer)) \
                or not 0 <= int(threshold) <= 2**31 - 1:
            raise UsageError(f"table {self.name!r}: threshold: must be an integer in [0, 2**31-1], got {threshold!r}")
        with self._lock:
            if int(threshold) == 0:
                self.counting = False
                return
            self.config = dataclasses.replace(self.config, access_threshold=int(threshold))
            self.counting = True

    def effective_coefficient(self) -> int:
        """What a training access adds to a count now: faae_coefficient, or 0 while counting is off."""
        return self.config.faae_coefficient if self.counting else 0

    def size(self) -> int:
        with self._lock:
            return self._size()

    def capacity(self) -> int:
        with self._lock:
            return self._capacity()

    def stats(self) -> dict[str, int]:
        with self._lock:
            stats = self._stats()
        if not self.tiered:
            stats["device_rows"] = stats["size"]     # HBM: every row is on the device (TIER-10)
        return {name: int(stats.get(name, 0)) for name in STAT_NAMES}

    def export(self) -> TableState:
        with self._lock:
            return self._export()

    def save(self, directory, *, incremental: bool = False) -> str:
        """Write the table under ``directory/<table name>/`` (CKPT-*); returns that path.

        ``incremental=True`` writes only what changed since this store's last
        save or load, pointing at that checkpoint (CKPT-9); without one it
        writes a full checkpoint.  An incremental save into its base's chain
        raises CheckpointError before writing anything."""
        from . import checkpoint  # local: checkpoint imports this module

        incremental = self._check_bool("incremental", incremental)
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        with self._lock:
            state = self._export()
            if incremental and self._last_checkpoint is not None:
                previous_dir, previous_state = self._last_checkpoint
                checkpoint.check_delta_target(directory, previous_dir, self.name)
                delta, removed = checkpoint.delta_between(previous_state, state)
                path = checkpoint.write_table(directory, self.config, self.optimizer, delta,
                                              previous=previous_dir, removed=removed)
            else:
                path = checkpoint.write_table(directory, self.config, self.optimizer, state)
            logger.info("table %r: saved %d keys to %s (%s)", self.name, len(state.keys), path,
                        "incremental" if incremental and self._last_checkpoint is not None else "full")
            self._last_checkpoint = (directory, state)   # absolute: a later chdir changes nothing (CKPT-9)
            return path

    def load(self, directory) -> None:
        """Replace this store's state with the checkpoint's; validated in full
        before anything changes (CKPT-5)."""
        from . import checkpoint

        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        state = checkpoint.read_table(directory, self.config, self.optimizer)
        with self._lock:
            self._check_fits(state)
            self._import_state(state)
            self._last_checkpoint = (directory, state)
        logger.info("table %r: loaded %d keys from %s", self.name, len(state.keys), directory)

    def warm_start(self, directory, *, source_table: str | None = None, now: int | None = None) -> int:
        """Merge a checkpoint's rows into this store (spec/warmstart.md): the
        checkpoint's keys take its rows and slots and count as admitted, with
        last-seen ``now``; every other key stays as it is.  Validated in full
        before anything changes.  Returns the number of keys loaded."""
        from . import checkpoint

        now = self._check_time("now", now, required=False)
        loaded = checkpoint.read_table(directory, self.config, self.optimizer, source_table=source_table,
                                       slots_required=False)
        with self._lock:
            merged = _merge_warm_start(self._export(), loaded, self.config.admit_threshold, now)
            self._check_fits(merged)
            self._import_state(merged)
        logger.info("table %r: warm start merged %d keys from %s", self.name, len(loaded.keys), directory)
        return len(loaded.keys)

    def row_handles(self, keys) -> np.ndarray:
        """Row index of each key, -1 where it holds none (for tests and the TF
        layer; placement is specified in EXP-4 so backends agree)."""
        flat, _ = self._check_keys(keys)
        with self._lock:
            return self._row_handles(flat)

    # ------------------------------------------------------ backend hooks
    @abstractmethod
    def _lookup(self, keys: np.ndarray, shape: tuple, train: bool, step: int | None,
                timestamp: int | None, pad_to: int | None, counts: np.ndarray | None) -> LookupResult: ...

    @abstractmethod
    def _apply(self, keys: np.ndarray, grads: np.ndarray, mask: np.ndarray, step: int) -> int: ...

    @abstractmethod
    def _evict(self, now: int | None) -> np.ndarray: ...

    @abstractmethod
    def _size(self) -> int: ...

    @abstractmethod
    def _capacity(self) -> int: ...

    @abstractmethod
    def _stats(self) -> dict[str, int]: ...

    @abstractmethod
    def _export(self) -> TableState: ...

    @abstractmethod
    def _import_state(self, state: TableState) -> None: ...

    @abstractmethod
    def _row_handles(self, keys: np.ndarray) -> np.ndarray: ...

    # ------------------------------------------------- shared validation
    def _check_fits(self, state: TableState) -> None:
        from .errors import CapacityError

        if not self.config.dynamic_expansion and len(state.keys) > self.config.table_capacity:
            parameter = self.config.capacity_parameter
            raise CapacityError(
                f"table {self.name!r}: {parameter}: the checkpoint holds {len(state.keys)} keys "
                f"but the table has {self.config.table_capacity} rows; raise {parameter}")

    def _count_positions(self, train: bool, positions: int, padding: int, with_row: int) -> None:
        """STAT-3 for one lookup: ``positions`` looked up, ``padding`` of them -1,
        ``with_row`` of them answered from a stored row.  Backends keep ``_counters``."""
        counters = self._counters
        real = positions - padding
        if not train:
            counters["eval_lookups"] += 1
        counters["padding_positions"] += padding
        counters["key_positions"] += real
        counters["default_positions"] += real - with_row

    def _grown_capacity(self, needed: int, capacity: int) -> int:
        """The capacity a lookup needing ``needed`` rows leaves: unchanged if it
        fits, doubled (at least ``needed``) with dynamic expansion (EXP-3), else
        a CapacityError before anything changed (EXP-2)."""
        if needed <= capacity:
            return capacity
        if not self.config.dynamic_expansion:
            raise self._capacity_error(needed, capacity)
        logger.info("table %r: capacity grows from %d to %d rows", self.name, capacity, max(2 * capacity, needed))
        return max(2 * capacity, needed)

    def _capacity_error(self, needed: int, capacity: int) -> Exception:
        """The error of a training lookup that would overflow a fixed-size table (EXP-2)."""
        from .errors import CapacityError

        parameter = self.config.capacity_parameter
        return CapacityError(
            f"table {self.name!r}: {parameter}: the batch needs {needed} rows but the table holds {capacity}; "
            f"raise {parameter} to at least {needed} or turn on dynamic expansion (nothing was changed)")

    def _check_bool(self, parameter: str, value) -> bool:
        if not isinstance(value, (bool, np.bool_)):
            raise UsageError(f"table {self.name!r}: {parameter}: must be True or False, got {value!r}")
        return bool(value)

    def _check_time(self, parameter: str, value, *, required: bool, minimum: int = 0) -> int | None:
        if value is None:
            if required:
                raise UsageError(f"table {self.name!r}: {parameter}: is required for a training call")
            return None
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise UsageError(f"table {self.name!r}: {parameter}: must be an integer, got {value!r}")
        value = int(value)
        if not minimum <= value <= 2**62:
            raise UsageError(f"table {self.name!r}: {parameter}: must be in [{minimum}, 2**62], got {value}")
        return value

    def _check_keys(self, keys, parameter: str = "keys") -> tuple[np.ndarray, tuple]:
        """Integer keys of any shape -> (flat int64 copy, shape) (CON-2)."""
        array = keys if isinstance(keys, np.ndarray) else _as_array(keys)
        if array is None or array.dtype.kind not in "iu":
            dtype = "not an array" if array is None else array.dtype.name
            raise KeyInputError(f"table {self.name!r}: {parameter}: must be integers "
                                f"(the table's key_dtype is {self.config.key_dtype}), got {dtype}")
        if array.size:
            low, high = int(array.min()), int(array.max())
            if array.dtype.kind == "u" and high > 2**63 - 1:
                raise KeyInputError(f"table {self.name!r}: {parameter}: key {high} does not fit int64")
            if low < self.config.key_min or high > self.config.key_max:
                bad = low if low < self.config.key_min else high
                raise KeyInputError(f"table {self.name!r}: {parameter}: key {bad} is outside the "
                                    f"range of key_dtype {self.config.key_dtype}")
        flat = np.ascontiguousarray(array.reshape(-1), dtype=np.int64)
        if flat is array or (isinstance(keys, np.ndarray) and np.shares_memory(flat, keys)):
            flat = flat.copy()  # the store never keeps a reference to caller memory
        return flat, array.shape

    def _check_counts(self, counts, shape: tuple) -> np.ndarray:
        array = _as_array(counts)
        if array is None or array.dtype.kind not in "iu" or array.shape != shape:
            got = "not an array" if array is None else f"{array.dtype.name} {array.shape}"
            raise KeyInputError(f"table {self.name!r}: counts: must be integers shaped like keys {shape}, got {got}")
        if array.size and (int(array.min()) < 1 or int(array.max()) > 2**31 - 1):
            raise KeyInputError(f"table {self.name!r}: counts: each must be in [1, 2**31-1]")
        return np.array(array.reshape(-1), dtype=np.int64)

    def _check_pad_to(self, pad_to) -> int | None:
        """LKP-4: pad_to in [1, 2**31-1] and its padded rows within PAD_FLOATS_MAX,
        so a huge value fails here, alike in every backend, not in an allocation."""
        pad_to = self._check_time("pad_to", pad_to, required=False, minimum=1)
        if pad_to is not None and (pad_to > PAD_TO_MAX or pad_to * self.config.dim > PAD_FLOATS_MAX):
            raise UsageError(f"table {self.name!r}: pad_to: must be in [1, 2**31-1] with pad_to x dim <= 2**30 "
                             f"(4 GiB of padded rows), got {pad_to} x {self.config.dim}")
        return pad_to

    def _check_send_count(self, n_unique: int, pad_to: int | None) -> None:
        """LKP-4: a static-shape batch may not have more unique keys than it is padded to.
        Every backend and the tiers call this before the lookup changes anything."""
        if pad_to is not None and n_unique > pad_to:
            raise UsageError(f"table {self.name!r}: send_count: the batch has {n_unique} unique keys, "
                             f"more than send_count={pad_to}; raise send_count")

    def _check_clock_source(self, clock_source: str | None, timestamp: int | None) -> str:
        """CON-5: a table's clock is the step or the data timestamp, fixed by its first training
        lookup; returns the source this training lookup uses."""
        source = "timestamp" if timestamp is not None else "step"
        if clock_source is not None and source != clock_source:
            raise UsageError(f"table {self.name!r}: timestamp: this table's clock is the {clock_source}; "
                             f"a training lookup must not switch it to the {source} (CON-5)")
        return source

    def _check_result_arrays(self, result: "LookupResult") -> tuple[np.ndarray, np.ndarray]:
        """(unique_keys, admitted) of a LookupResult, checked once here for every backend (CON-9)."""
        keys, admitted = result.unique_keys, result.admitted
        if not (isinstance(keys, np.ndarray) and keys.dtype == np.int64 and keys.ndim == 1
                and isinstance(admitted, np.ndarray) and admitted.dtype == np.bool_ and admitted.shape == keys.shape):
            raise UsageError(f"table {self.name!r}: result: unique_keys must be int64 [u] and admitted bool [u], "
                             f"got {getattr(keys, 'dtype', type(keys).__name__)} / "
                             f"{getattr(admitted, 'dtype', type(admitted).__name__)}; pass the LookupResult "
                             f"lookup returned")
        return np.ascontiguousarray(keys), np.ascontiguousarray(admitted)

    def _check_finite(self, grads: np.ndarray, keys: np.ndarray, problem: str) -> None:
        """OPT-3 after duplicates are summed."""
        finite = np.isfinite(grads).all(axis=1)
        if not finite.all():
            key = int(keys[np.flatnonzero(~finite)[0]])
            raise GradientError(f"table {self.name!r}: grad_rows: key {key}: {problem} (nothing was applied)")

    def _overflow_error(self, key: int) -> GradientError:
        """OPT-3: the error of an update that would leave NaN or Inf in a row or slot; the backend
        raises it before committing the update."""
        return GradientError(f"table {self.name!r}: grad_rows: key {key}: the {self.optimizer.kind} update "
                             f"overflows to NaN or Inf (nothing was applied)")

    def _check_grads(self, grad_rows, n: int) -> np.ndarray:
        array = _as_array(grad_rows)
        if array is None or array.dtype.kind not in "fiu":
            raise GradientError(f"table {self.name!r}: grad_rows: must be a float array, got "
                                f"{'not an array' if array is None else array.dtype.name}")
        if array.shape != (n, self.config.dim):
            raise GradientError(f"table {self.name!r}: grad_rows: shape must be ({n}, {self.config.dim}) "
                                f"(one row per key, dim {self.config.dim}), got {array.shape}")
        grads = np.array(array, dtype=np.float32, order="C", copy=True)
        if not np.all(np.isfinite(grads)):
            bad = int(np.flatnonzero(~np.all(np.isfinite(grads), axis=1))[0])
            raise GradientError(f"table {self.name!r}: grad_rows: row {bad} holds NaN or Inf "
                                f"(nothing was applied)")
        return grads


def _as_array(value) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy") and callable(value.numpy):  # eager tf.Tensor
        return np.asarray(value.numpy())
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return None
    if array.dtype == object:
        return None
    if array.size == 0 and array.dtype.kind == "f" and not isinstance(value, np.ndarray):
        return array.astype(np.int64)  # [] from a Python list: an empty key batch
    return array


def _read_only(result: LookupResult) -> LookupResult:
    """A result's arrays as read-only views: a caller cannot rewrite which keys
    its gradients go to (CON-9)."""
    views = {}
    for name in ("unique_keys", "rows", "inverse", "admitted"):
        array = base = getattr(result, name)
        while isinstance(base, np.ndarray):    # fresh arrays of this lookup: no store memory is shared
            base.flags.writeable = False
            base = base.base
        view = array.view()
        view.flags.writeable = False
        views[name] = view
    return dataclasses.replace(result, **views)


def _sum_duplicates(keys: np.ndarray, grads: np.ndarray, mask: np.ndarray):
    """Merge repeated keys, summing their rows in order of occurrence (OPT-1)."""
    if keys.size == 0:
        return keys, grads, mask
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if unique.size == keys.size:                       # nothing to merge: keep the caller's order
        return keys, grads, mask
    order = np.argsort(first, kind="stable")          # unique keys by first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    slot = rank[inverse]
    summed = np.zeros((order.size, grads.shape[1]), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported by _check_finite
        np.add.at(summed, slot, grads)                 # sequential in position order
    return unique[order], summed, unique[order] != PADDING_KEY


def _merge_warm_start(current: TableState, loaded: TableState, admit_threshold: int, now: int | None) -> TableState:
    """WS-3: loaded keys overwrite rows and slots, are admitted (count at
    least the threshold) and were last seen at the warm-start time; other
    keys keep everything."""
    if now is None:
        now = current.clock if current.clock is not None else (loaded.clock or 0)
    keep = ~np.isin(current.keys, loaded.keys)
    keys = np.concatenate([current.keys[keep], loaded.keys])
    order = np.argsort(keys, kind="stable")
    pick = lambda old, new: np.concatenate([old[keep], new])[order]  # noqa: E731
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
        keys=keys[order],
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


# ------------------------------------------------------------- backends
_BACKENDS: dict[str, Callable[..., Store]] = {}


def register_backend(name: str, factory: Callable[..., Store]) -> None:
    _BACKENDS[name] = factory


TIER_OPTIONS = ("ssd_folder_limit_bytes", "ssd_fault_hook")


def open_store(config: TableConfig, optimizer: SparseOptimizer | None = None, *, backend: str = "ref",
               hot_rows: int | None = None, **tier_options) -> Store:
    """A new, empty store for ``config`` on the named backend ("ref" or "fast").

    ``hot_rows`` overrides the size of the hot block (spec/hot.md; 0 turns
    it off); only passed on when given, so a third-party factory need not
    know it.

    A table with ``host_vocabulary_size > 0`` is a DDR or SSD table: the
    backend's store behind the storage tiers (spec/tiers.md).  ``tier_options``
    go to it: ``ssd_folder_limit_bytes`` (bytes of SSD files per
    ``ssd_data_path`` folder) and ``ssd_fault_hook`` (called before every
    disk write; raising OSError simulates a full disk)."""
    if backend not in _BACKENDS:
        _load_builtin_backends()
    if backend not in _BACKENDS:
        raise ValueError(f"table {getattr(config, 'name', '?')!r}: backend: {unknown_backend_reason(backend)}")
    factory = _BACKENDS[backend]
    if hot_rows is not None:
        factory = functools.partial(factory, hot_rows=hot_rows)
    unknown = sorted(set(tier_options) - set(TIER_OPTIONS))
    if unknown:
        raise UsageError(f"table {getattr(config, 'name', '?')!r}: {unknown[0]}: not an option of open_store "
                         f"(options: hot_rows, {', '.join(TIER_OPTIONS)})")
    if isinstance(config, TableConfig) and config.host_vocabulary_size > 0:
        from .tiers import TieredStore, placement_for

        return TieredStore(config, optimizer, factory, placement_for(backend), **tier_options)
    if tier_options:
        raise UsageError(f"table {getattr(config, 'name', '?')!r}: {sorted(tier_options)[0]}: storage tier "
                         f"options need a host tier (host_vocabulary_size > 0)")
    return factory(config, optimizer)


def available_backends() -> list[str]:
    _load_builtin_backends()
    return sorted(_BACKENDS)


def unknown_backend_reason(backend: str) -> str:
    """Why ``backend`` cannot be opened, in one line (a missing fast path says why it is missing)."""
    if backend == "fast" and _FAST_IMPORT_ERROR is not None:
        return (f"the fast backend is unavailable: the C extension was not built: {_FAST_IMPORT_ERROR} "
                f"(build it with `python setup.py build_ext --inplace`, or install from the sdist or a wheel)")
    return f"unknown backend {backend!r} (available: {sorted(_BACKENDS)})"


_FAST_IMPORT_ERROR: ImportError | None = None


def _load_builtin_backends() -> None:
    global _FAST_IMPORT_ERROR
    from .ref import RefStore

    register_backend("ref", RefStore)
    try:
        from .fast import FastStore
    except ImportError as error:  # extension not built: only the reference is available
        _FAST_IMPORT_ERROR = error
        return
    _FAST_IMPORT_ERROR = None
    register_backend("fast", FastStore)
