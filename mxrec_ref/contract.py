"""The store contract: one shard of one sparse table (spec/contract.md).

``Store`` is the interface every backend implements: the reference model
(``mxrec_ref.ref``, the oracle), the Cython fast path (``mxrec_ref.fast``) and
the storage tiers around either.  This module holds what is *not* model logic
and must be identical in every backend: argument validation (so a bad call
fails the same way, before any state changes), the per-store lock, checkpoint
I/O (through ``export`` and ``_import_state``, so one on-disk format serves
every backend), and the small rules every backend calls rather than restates
(send_count, the clock source, capacity growth, the eviction cut-off), so each
rule and its error message exist once.

``InMemoryStore`` adds what the two in-memory backends share: the statistics
counters, the table clock, the capacity rows and the hot schedule.

Backends implement the ``_``-prefixed hooks; they receive validated arguments
only.  The registry (``mxrec_ref.backends``) sits above this module; nothing
here imports it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from abc import ABC, abstractmethod

import numpy as np

from . import checkpoint, hot
from .config import TableConfig
from .errors import CapacityError, ConfigError, GradientError, KeyInputError, NotSupported, UsageError
from .optimizers import SGD, SparseOptimizer
from .state import PADDING_KEY, STAT_NAMES, LookupResult, TableState, merge_warm_start

PAD_TO_MAX = 2**31 - 1        # send_count's range (CFG-8)
PAD_FLOATS_MAX = 2**30        # pad_to x dim: at most 4 GiB of padded rows, checked before any change (LKP-4)
# The change log (SERVE-3): the calls that change rows, which a class must not override for its log to be
# complete, and the entry a load or warm start leaves (every key may have changed).
LOGGED_CALLS = ("lookup", "apply_gradients", "evict", "load", "apply_warm_start")
ALL_KEYS = object()
# A log longer than this many keys and 4x the table's rows gives up (ALL_KEYS: the next delta is full), so a log
# nobody takes holds O(1) memory, not every key of every step.
CHANGE_LOG_MIN_KEYS = 1 << 20
# Events of a table's life (spec/observability.md, OBS-2).  The logger keeps the name it had when
# this module was mxrec_ref.store: OBS-2 names it, and users filter on it.
logger = logging.getLogger("mxrec_ref.store")


@dataclasses.dataclass(frozen=True, eq=False)
class WarmStartPlan:
    """A warm start of one store, read and checked, not applied yet (``Store.plan_warm_start``,
    WS-7): the checkpoint's state, the warm-start time, and for a table that cannot grow the
    keys it will hold once this plan and the ones before it are applied."""

    store_id: int
    table: str
    directory: str                  # the checkpoint folder, absolute
    loaded: TableState
    now: int | None
    keys_after: np.ndarray | None   # None: the table grows, any checkpoint fits


class Store(ABC):
    """One table's sparse state.  Public methods validate, take the store's
    lock, and call the backend hook; see spec/contract.md for the rules."""

    backend_name = "abstract"
    tiered = False     # True for DDR and SSD tables (spec/tiers.md)
    _change_log = None  # the change log (SERVE-3); a class default, so a subclass that skips __init__ logs nothing
    _change_log_keys = 0
    # A backend that cannot express storage tiers at all says why: open_store then raises NotSupported
    # with this reason for a DDR or SSD table (CON-11) instead of CON-10's UsageError.
    tiers_not_expressible: str | None = None

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
        self._change_log = None        # key arrays whose rows may have changed, ALL_KEYS, or None: no log (SERVE-3)
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
            result = _read_only(self._lookup(flat, shape, train, step, timestamp, pad_to, counts))
            if train:
                self._log_changes(result.unique_keys)      # admitted keys get rows (SERVE-3)
            return result

    def apply_gradients(self, result, grad_rows, *, step: int, learning_rate=None) -> int:
        """Apply one gradient row per unique key with the store's optimizer.

        ``result`` is a training ``LookupResult`` of this store (``grad_rows``
        aligned with its ``unique_keys``), or an integer key array (any order,
        duplicates summed in order of occurrence; OPT-1).  Rows of keys that
        hold no row are dropped.  ``learning_rate``, when given, replaces the
        optimizer's for this call only (OPT-10: a schedule's value of the step).
        Returns the number of rows updated.
        """
        step = self._check_time("step", step, required=True)
        optimizer = self._optimizer_for(learning_rate)
        if isinstance(result, LookupResult):
            if result.store_id != id(self) or result.table != self.name:
                raise UsageError(f"table {self.name!r}: result: this lookup result belongs to "
                                 f"table {result.table!r} or to another store")
            if not result.train:
                raise UsageError(f"table {self.name!r}: result: an evaluation lookup has no gradient to apply")
            keys, _ = self._check_result_arrays(result)
            # OPT-9: every key but padding is resolved now, as by keys; ``admitted`` is lookup-time
            # state, and another training lookup since may have given a pending key its row.
            mask = keys != PADDING_KEY
        else:
            keys, _ = self._check_keys(result, parameter="keys")
            mask = keys != PADDING_KEY
        grads = self._check_grads(grad_rows, len(keys))
        if not isinstance(result, LookupResult):
            keys, grads, mask = sum_duplicates(keys, grads, mask)
            self._check_finite(grads, keys, "the sum of its duplicate rows overflows to Inf")
        with self._lock, self._applying_with(optimizer):
            self._log_changes(keys)
            if isinstance(result, LookupResult):
                return self._apply_result(keys, grads, mask, step, result.row_handles)
            return self._apply(keys, grads, mask, step)

    def _optimizer_for(self, learning_rate) -> SparseOptimizer:
        """OPT-10: the optimizer of one apply -- the store's, or a copy with this call's learning
        rate, validated as the optimizer's own (ConfigError naming the table) before anything changes."""
        if learning_rate is None:
            return self.optimizer
        number = isinstance(learning_rate, (int, float, np.integer, np.floating)) and not isinstance(learning_rate, bool)
        if number and float(learning_rate) == float(self.optimizer.learning_rate):
            return self.optimizer
        try:
            return dataclasses.replace(self.optimizer, learning_rate=float(learning_rate) if number else learning_rate)
        except ConfigError as error:
            raise ConfigError(f"table {self.name!r}: learning_rate: {error}") from None

    @contextlib.contextmanager
    def _applying_with(self, optimizer: SparseOptimizer):
        """The update reads ``self.optimizer`` (and the stores behind this one theirs): for one
        apply under the lock, they read ``optimizer``."""
        if optimizer is self.optimizer:         # the common case: nothing to set
            yield
            return
        stores = [self, *self._stores_behind()]
        kept = [store.optimizer for store in stores]
        for store in stores:
            store.optimizer = optimizer
        try:
            yield
        finally:
            for store, original in zip(stores, kept):
                store.optimizer = original

    def _stores_behind(self) -> tuple:
        """Stores whose private ``_apply`` this one calls directly (a tiered store's in-memory
        store), so they update with this call's optimizer too (OPT-10)."""
        return ()

    def evict(self, now: int | None = None) -> np.ndarray:
        """Remove every key with ``now - last_seen >= eviction_threshold``;
        ``now`` defaults to the table clock.  Returns the removed keys, sorted."""
        if not self.config.eviction_enabled:
            raise UsageError(f"table {self.name!r}: eviction_threshold: eviction is not configured "
                             f"(eviction_threshold={self.config.eviction_threshold})")
        now = self._check_time("now", now, required=False, minimum=-(2**62))
        with self._lock:
            evicted = self._evict(now)
            self._log_changes(evicted)
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

    def set_optimizer(self, optimizer: SparseOptimizer) -> None:
        """Apply with ``optimizer`` from now on: the same kind (the same slots), other hyper-parameters
        -- a Keras optimizer's learning-rate schedule step by step, a recompiled model (KERAS-13)."""
        if not isinstance(optimizer, SparseOptimizer) or optimizer.kind != self.optimizer.kind:
            raise UsageError(f"table {self.name!r}: optimizer: set_optimizer keeps the kind "
                             f"{self.optimizer.kind!r} (its slots), got {getattr(optimizer, 'kind', optimizer)!r}")
        with self._lock:
            self._set_optimizer(optimizer)

    def _set_optimizer(self, optimizer: SparseOptimizer) -> None:
        self.optimizer = optimizer

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
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        state = checkpoint.read_table(directory, self.config, self.optimizer)
        with self._lock:
            self.check_fits(len(state.keys))
            self._import_state(state)
            self._last_checkpoint = (directory, state)
            self._log_changes(ALL_KEYS)
        logger.info("table %r: loaded %d keys from %s", self.name, len(state.keys), directory)

    def warm_start(self, directory, *, source_table: str | None = None, now: int | None = None) -> int:
        """Merge a checkpoint's rows into this store (spec/warmstart.md): the
        checkpoint's keys take its rows and slots and count as admitted, with
        last-seen ``now``; every other key stays as it is.  Validated in full
        before anything changes.  Returns the number of keys loaded.
        ``plan_warm_start`` then ``apply_warm_start``, in one call."""
        return self.apply_warm_start(self.plan_warm_start(directory, source_table=source_table, now=now))

    def plan_warm_start(self, directory, *, source_table: str | None = None, now: int | None = None,
                        after: "WarmStartPlan | None" = None) -> "WarmStartPlan":
        """Read and check a warm start from ``directory`` without changing anything (WS-7): the
        checkpoint (read once, in full), ``now``, and that the merged table fits (CKPT-6).
        ``after``: a plan of this store that will be applied before this one (a later path of the
        same warm start, WS-5), so the capacity check counts the keys both bring.  Several tables
        and paths are planned first and applied only when every plan succeeded."""
        now = self._check_time("now", now, required=False)
        if after is not None:
            self._check_plan(after)
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        loaded = checkpoint.read_table(directory, self.config, self.optimizer, source_table=source_table,
                                       slots_required=False)
        keys_after = None
        if self._key_limit() is not None:        # only a table that cannot grow needs the keys it will hold
            with self._lock:
                before = after.keys_after if after is not None else self._export().keys
            keys_after = np.union1d(before, loaded.keys)
            self.check_fits(len(keys_after))
        return WarmStartPlan(store_id=id(self), table=self.name, directory=directory, loaded=loaded, now=now,
                             keys_after=keys_after)

    def apply_warm_start(self, plan: "WarmStartPlan") -> int:
        """Merge a planned warm start into this store (WS-3); its input was checked by
        ``plan_warm_start``, so this fails only if the plan belongs to another store, or the store
        gained keys since it was planned and a table that cannot grow no longer holds them (nothing
        changes then either).  Returns the number of keys loaded."""
        self._check_plan(plan)
        with self._lock:
            merged = merge_warm_start(self._export(), plan.loaded, self.config.admit_threshold, plan.now)
            self.check_fits(len(merged.keys))
            self._import_state(merged)
            self._log_changes(ALL_KEYS)
        logger.info("table %r: warm start merged %d keys from %s", self.name, len(plan.loaded.keys), plan.directory)
        return len(plan.loaded.keys)

    def import_state(self, state: TableState) -> None:
        """Replace this store's rows and history with ``state`` (a whole ``TableState``, checked by the
        caller: ``check_fits`` and the checkpoint's CKPT-5), under the store's lock; no checkpoint
        bookkeeping and no change log.  What a wrapper (sharding, replicas, the sharded checkpoint) uses
        to install the state it read or merged (CON-10)."""
        with self._lock:
            self._import_state(state)

    def table_clock(self) -> tuple[int | None, str | None]:
        """(the table's clock, its source): the largest step or timestamp a training lookup has
        given it, and which of the two it is (CON-5); (None, None) before the first.  After a
        ``load`` it is the checkpoint's (the TF layer continues its step count from it, TF-5)."""
        with self._lock:
            state = self._export()
        return state.clock, state.clock_source

    def row_handles(self, keys) -> np.ndarray:
        """Row index of each key, -1 where it holds none (for tests and the TF
        layer; placement is specified in EXP-4 so backends agree)."""
        flat, _ = self._check_keys(keys)
        with self._lock:
            return self._row_handles(flat)

    # ------------------------------------------------ change log (spec/serving.md, SERVE-3)
    def keep_change_log(self) -> None:
        """Start (or restart) the log of the keys whose row may change: those a training lookup,
        ``apply_gradients`` or ``evict`` touches; a ``load`` or warm start marks every key.  Recording
        costs a copy of the call's keys; a log that outgrows ``CHANGE_LOG_MIN_KEYS`` and 4x the table's rows
        gives up until it is taken (None then: the next delta is full), so one nobody takes stays small."""
        with self._lock:
            self._change_log, self._change_log_keys = [], 0

    def take_change_log(self) -> np.ndarray | None:
        """The keys (ascending, unique, padding excluded) whose rows may have changed since the log
        started or was last taken, and restart it; None when the log cannot say: none is kept, a load or
        warm start replaced rows wholesale, or this class changes rows outside the logged calls (the
        sharded and replicated stores override them).  A superset: a key may be listed unchanged."""
        with self._lock:
            log, self._change_log = self._change_log, ([] if self._change_log is not None else None)
            self._change_log_keys = 0
        if log is None or any(part is ALL_KEYS for part in log) or not self._logs_every_change():
            return None
        keys = np.unique(np.concatenate([np.zeros(0, np.int64), *log]).astype(np.int64, copy=False))
        return keys[keys != PADDING_KEY]

    def rows_now(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask: the key holds a row, the rows of those keys) for ``keys`` (ascending int64), read
        without changing anything -- no statistic either, unlike an evaluation lookup.  Backends with a
        row copy (``rows_of``) read only those rows; a tiered table reads its export."""
        keys = np.asarray(keys, dtype=np.int64)
        with self._lock:
            if self.tiered or not hasattr(self, "rows_of"):
                state = self._export()
                at = np.minimum(np.searchsorted(state.keys, keys), max(len(state.keys) - 1, 0))
                held = (state.keys[at] == keys) if len(state.keys) else np.zeros(len(keys), bool)
                return held, np.asarray(state.values, np.float32)[at[held]]
            handles = np.asarray(self._row_handles(keys), dtype=np.int64)
            held = handles >= 0
            if not held.any():
                return held, np.zeros((0, self.config.dim), np.float32)
            return held, np.asarray(self.rows_of(keys[held], handles[held])[0], np.float32)

    def _log_changes(self, keys) -> None:
        log = self._change_log
        if log is None or (log and log[0] is ALL_KEYS):
            return
        if keys is ALL_KEYS:
            self._change_log = [ALL_KEYS]
            return
        log.append(np.array(keys, dtype=np.int64))     # a copy: the caller may change its array afterwards
        self._change_log_keys += len(keys)
        if self._change_log_keys > max(CHANGE_LOG_MIN_KEYS, 4 * self._size()):
            self._change_log = [ALL_KEYS]        # as long as the table: a full delta costs no more

    def _logs_every_change(self) -> bool:
        return all(getattr(type(self), name) is getattr(Store, name) for name in LOGGED_CALLS)

    # ------------------------------------------------------ backend hooks
    @abstractmethod
    def _lookup(self, keys: np.ndarray, shape: tuple, train: bool, step: int | None,
                timestamp: int | None, pad_to: int | None, counts: np.ndarray | None) -> LookupResult: ...

    @abstractmethod
    def _apply(self, keys: np.ndarray, grads: np.ndarray, mask: np.ndarray, step: int) -> int: ...

    def _apply_result(self, keys: np.ndarray, grads: np.ndarray, mask: np.ndarray, step: int,
                      handles: np.ndarray | None) -> int:
        """_apply for a LookupResult of this store: ``keys`` are unique by construction (no OPT-1 merge)
        and ``handles`` the rows the lookup resolved, which a backend may reuse once it has checked
        they still hold their keys (OPT-9).  The default resolves by key."""
        return self._apply(keys, grads, mask, step)

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
    def _key_limit(self) -> int | None:
        """The most keys a loaded or warm-started table may hold (CKPT-6); None for one that grows."""
        return None if self.config.dynamic_expansion else self.config.table_capacity

    def check_fits(self, n_keys: int) -> None:
        limit = self._key_limit()
        if limit is not None and n_keys > limit:
            parameter = self.config.capacity_parameter
            raise CapacityError(
                f"table {self.name!r}: {parameter}: the checkpoint holds {n_keys} keys "
                f"but the table has {limit} rows; raise {parameter}")

    def _check_plan(self, plan) -> None:
        if not isinstance(plan, WarmStartPlan) or plan.store_id != id(self):
            raise UsageError(f"table {self.name!r}: plan: not a warm-start plan of this store; pass what this "
                             f"store's plan_warm_start returned")

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
        """Integer keys of any shape -> (flat int64 array, shape) (CON-2).  No copy when the keys
        are already contiguous int64: every backend reads them during the call and keeps only
        arrays of its own (dedup's unique keys and inverse index), so no caller memory is kept."""
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
        return np.ascontiguousarray(array.reshape(-1), dtype=np.int64), array.shape

    def _check_counts(self, counts, shape: tuple) -> np.ndarray:
        array = _as_array(counts)
        if array is None or array.dtype.kind not in "iu" or array.shape != shape:
            got = "not an array" if array is None else f"{array.dtype.name} {array.shape}"
            raise KeyInputError(f"table {self.name!r}: counts: must be integers shaped like keys {shape}, got {got}")
        if array.size and (int(array.min()) < 1 or int(array.max()) > 2**31 - 1):
            raise KeyInputError(f"table {self.name!r}: counts: each must be in [1, 2**31-1]")
        return np.ascontiguousarray(array.reshape(-1), dtype=np.int64)   # read during the call, never kept

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

    def _eviction_cutoff(self, now: int | None, clock: int | None) -> int | None:
        """EVI-1: an eviction at ``now`` (default: the table clock ``clock``) removes every key with
        ``now - last_seen >= eviction_threshold``, i.e. ``last_seen <= `` the cut-off returned;
        None when there is no time yet (nothing expires).  Every backend and tier tests this one way."""
        if now is None:
            now = clock
        return None if now is None else now - self.config.eviction_threshold

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
        # No copy of contiguous float32 rows: the update reads them and keeps none of them (CON-2).
        grads = np.ascontiguousarray(array, dtype=np.float32)
        if not np.isfinite(grads).all():
            bad = int(np.flatnonzero(~np.all(np.isfinite(grads), axis=1))[0])
            raise GradientError(f"table {self.name!r}: grad_rows: row {bad} holds NaN or Inf "
                                f"(nothing was applied)")
        return grads


class TierMoves(ABC):
    """What a store offers so that the storage tiers (``mxrec_ref.tiers.TieredStore``) can sit in
    front of it: a DDR or SSD table is the backend's in-memory store behind them (CON-10).

    The tier wrapper uses the store through the members declared here and its public ``Store``
    API (``size``, ``stats``, ``export``, ``row_handles``, ``set_threshold``), nothing else; the
    four ``Store`` hooks it drives are listed in ``STORE_HOOKS``.
    None of the moves changes a statistic: the wrapper counts what crosses a tier (TIER-10).
    ``open_store`` refuses to tier a store that is not a ``TierMoves``."""

    # The Store hooks the wrapper calls with arguments it has validated, once the rows the call needs
    # are back in memory (Store declares them abstract; named here, not redeclared, so a mixin order
    # cannot shadow a base class's implementation).  ``_row_handles``: the wrapper's keys are its own
    # (already checked), so it skips ``row_handles``' argument check.
    STORE_HOOKS = ("_apply", "_apply_result", "_evict", "_import_state", "_row_handles")
    device_placement: type     # the backend's device-tier bookkeeping (mxrec_ref.tiers.placement), TIER-4
    host_heap: type            # the backend's heap of TIER-5's order (mxrec_ref.tiers.placement.HostOrder), TIER-12
    clock: int | None          # the table clock (CON-5): the wrapper evicts from disk by it (EVI-1)
    clock_source: str | None   # and checks a lookup's clock source before any row moves (CON-4)
    optimizer: SparseOptimizer  # the update's optimizer: the wrapper sets its own for one apply (OPT-10)

    @abstractmethod
    def dedup(self, keys: np.ndarray, counts: np.ndarray | None) -> tuple:
        """The batch's dedup (LKP-2): a tuple whose first item is the distinct keys in order of
        first occurrence, padding included; the rest is the backend's own, for lookup_deduped."""

    @abstractmethod
    def lookup_deduped(self, deduped: tuple, keys: np.ndarray, shape: tuple, train: bool, step: int | None,
                        timestamp: int | None, pad_to: int | None, counts: np.ndarray | None) -> LookupResult:
        """``_lookup`` given the batch's ``dedup``, so that a tiered lookup dedups once (TIER-12)."""

    @abstractmethod
    def rows_of(self, keys: np.ndarray, rows: np.ndarray | None = None
                 ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Copies of what ``keys`` (all holding a row) carry to another tier:
        (values, {slot: values}, counts, last_seen).  ``rows``: the keys' ``_row_handles`` when the
        caller has them, so a backend that locates rows by handle need not probe again."""

    @abstractmethod
    def entries_of(self, keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(counts, last_seen) of ``keys`` (all holding a row; ``rows``: their ``_row_handles``):
        what the host order of TIER-5 needs, without copying the rows' values."""

    @abstractmethod
    def drop_rows(self, keys: np.ndarray) -> None:
        """Forget ``keys`` (their rows moved to another tier): rows go on the free stack in the
        given order, as eviction frees them (EXP-4); hot ones leave the hot set (HOT-2)."""

    @abstractmethod
    def put_rows(self, keys: np.ndarray, values: np.ndarray, slots: dict[str, np.ndarray], counts: np.ndarray,
                  last_seen: np.ndarray) -> None:
        """Take back ``keys`` (not in the history) with the state they carry; rows are handed out
        as for new keys (EXP-4) and always fit."""

    @abstractmethod
    def admitted_entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys ascending, counts, last_seen) of every key holding a row."""


def tier_moves_error(config: TableConfig, backend: str, store: Store) -> Exception:
    """CON-10: the error of a DDR or SSD table asked of a backend whose store cannot sit behind the tiers;
    NotSupported where the backend says it cannot express tiers at all (CON-11)."""
    if store.tiers_not_expressible:
        return NotSupported(store.tiers_not_expressible)
    return UsageError(f"table {config.name!r}: host_vocabulary_size: backend {backend!r} "
                      f"({type(store).__name__}) cannot hold a DDR or SSD table: its store does not implement "
                      f"mxrec_ref.contract.TierMoves (spec/contract.md, CON-10); use host_vocabulary_size=0")


class InMemoryStore(Store):
    """What the reference and the fast backend share, written once: the statistics counters
    (STAT-*), the table clock (CON-5), the capacity rows and their growth (EXP-2, EXP-3, CKPT-6)
    and the hot schedule (HOT-1, HOT-2).  A subclass keeps its rows; it calls these rules."""

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        super().__init__(config, optimizer)
        # HOT-1: open_store reads HOT_EMB_UPDATE_STEP once and passes it; a store built directly reads it here.
        self._hot_step = hot.update_step(config.name) if hot_update_step is None else hot_update_step
        self._hot_capacity = hot.hot_rows(config.name, config.dim, hot_rows)
        self._counters = {name: 0 for name in STAT_NAMES}
        self._capacity_rows = config.table_capacity
        self.clock: int | None = None          # the table's time: max step or timestamp seen (CON-5)
        self.clock_source: str | None = None

    def _capacity(self) -> int:
        return self._capacity_rows

    def table_clock(self) -> tuple[int | None, str | None]:
        with self._lock:                       # the clock as kept, without exporting the table
            return self.clock, self.clock_source

    def _training_clock(self, step: int, timestamp: int | None) -> tuple[int, str]:
        """(the clock after this training lookup, its source); checks the source (CON-5) and
        changes nothing: the caller sets both once its other checks passed."""
        source = self._check_clock_source(self.clock_source, timestamp)
        time = timestamp if source == "timestamp" else step
        return (time if self.clock is None else max(self.clock, time)), source

    def _reserve(self, n_new: int) -> None:
        """Make room for ``n_new`` more rows or raise before anything changed (EXP-2, EXP-3)."""
        capacity = self._grown_capacity(self._size() + n_new, self._capacity_rows)
        if capacity != self._capacity_rows:
            self._capacity_rows = capacity
            self._counters["growths"] += 1

    def _hold_at_least(self, n_rows: int) -> None:
        """Rows coming back from another tier always fit: capacity follows, no growth counted."""
        self._capacity_rows = max(self._capacity_rows, n_rows)

    def _capacity_after_import(self, n_keys: int) -> int:
        """CKPT-6: a loaded table has its configured capacity, or its key count if that is
        larger and the table grows (a fixed table was checked by check_fits)."""
        self._capacity_rows = self.config.table_capacity
        if self.config.dynamic_expansion:
            self._capacity_rows = max(self.config.table_capacity, n_keys)
        return self._capacity_rows

    def _refresh_hot_if_due(self, train: bool) -> None:
        """HOT-2: the hot set is chosen again after every HOT_EMB_UPDATE_STEP-th training lookup."""
        if train and hot.is_refresh_due(self._counters["train_lookups"], self._hot_step):
            self._refresh_hot()
            self._counters["hot_refreshes"] += 1

    def _refresh_hot(self) -> None:
        """Choose the hot keys (hot.choose_hot_keys) and copy their rows into the hot block."""
        raise NotImplementedError

    def _count_applied(self, n_keys: int, n_rows: int) -> None:
        """STAT-5 for one apply_gradients: ``n_rows`` of the ``n_keys`` gradient rows updated a row."""
        self._counters["grad_applies"] += 1
        self._counters["grad_rows_applied"] += n_rows
        self._counters["grad_rows_dropped"] += n_keys - n_rows

    def _counter_stats(self, *, size: int, history: int, hot_rows: int) -> dict[str, int]:
        """STAT-1's in-memory values: the counters, and the sizes of now (``history``: keys
        admitted or pending)."""
        stats = dict(self._counters)
        stats["size"] = size
        stats["capacity"] = self._capacity_rows
        stats["pending"] = history - size
        stats["hot_rows"] = hot_rows
        return stats


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
    for name in ("unique_keys", "rows", "inverse", "admitted", "row_handles"):
        array = base = getattr(result, name)
        if array is None:
            continue
        while isinstance(base, np.ndarray):    # fresh arrays of this lookup: no store memory is shared
            base.flags.writeable = False
            base = base.base
        view = array.view()
        view.flags.writeable = False
        views[name] = view
    return dataclasses.replace(result, **views)


def sum_duplicates(keys: np.ndarray, grads: np.ndarray, mask: np.ndarray):
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
