"""The store contract: one shard of one sparse table (spec/contract.md).

``Store`` is the public facade of every table: the reference model (``mxrec_ref.ref``, the
oracle), the Cython fast path (``mxrec_ref.fast``) and the storage tiers around either.  It holds
what is *not* model logic and must be identical in every backend: argument validation (so a bad
call fails the same way, before any state changes), the per-store lock, the statistics' device
rule, the change log, and checkpoint I/O (through the engine's ``export`` and ``import_state``, so
one on-disk format serves every backend).  Everything else it hands to its ``engine``
(``mxrec_ref.engine``: the protocol, with public names), which receives validated arguments only.

A third party either supplies an ``Engine`` (``Store(config, optimizer, engine=...)``; one that is
also a ``TierMoves`` gets the storage tiers from ``open_store``) or subclasses ``Store`` and
implements the ``_``-prefixed hooks (``_lookup``, ``_apply``, ...): ``HooksEngine`` adapts those.
The registry (``mxrec_ref.backends``) sits above this module; nothing here imports it.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Callable

import numpy as np

from . import checkpoint
from .config import TableConfig
# TierMoves is imported from here too (CON-10 names mxrec_ref.contract.TierMoves).
from .engine import Engine, InMemoryBookkeeping, Prepared, Resolved, TierMoves, check_send_count, default_key_limit
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
class AheadBatch:
    """A training batch resolved ahead (``Store.resolve_ahead``), for ``Store.gather``: the store's
    engine's ``Prepared`` work, and the store it belongs to."""

    store_id: int
    table: str
    prepared: Prepared


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


def checked_table(config, optimizer):
    """(config, optimizer) of a new store, checked: an ``mxrec_ref.TableConfig`` and a sparse
    optimizer (SGD(0.01) when None)."""
    if not isinstance(config, TableConfig):
        raise TypeError(f"config must be an mxrec_ref.TableConfig, got {type(config).__name__}")
    optimizer = SGD(learning_rate=0.01) if optimizer is None else optimizer
    if not isinstance(optimizer, SparseOptimizer):
        raise TypeError(f"table {config.name!r}: optimizer: must be an mxrec_ref sparse optimizer, "
                        f"got {type(optimizer).__name__}")
    return config, optimizer


class Store:
    """One table's sparse state.  Public methods validate, take the store's lock, and call the
    engine (``self.engine``); see spec/contract.md for the rules."""

    backend_name = "abstract"
    tiered = False     # True for DDR and SSD tables (spec/tiers.md)
    _change_log = None  # the change log (SERVE-3); a class default, so a subclass that skips __init__ logs nothing
    _change_log_keys = 0
    # A backend that cannot express storage tiers at all says why: open_store then raises NotSupported
    # with this reason for a DDR or SSD table (CON-11) instead of CON-10's UsageError.
    tiers_not_expressible: str | None = None

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None, *,
                 engine: Engine | None = None):
        """``engine``: the table's engine (built for this config and optimizer); without one, this
        class must implement the underscore hooks (``HooksEngine`` drives them)."""
        config, optimizer = checked_table(config, optimizer)
        self.last_checkpoint = None   # (folder, state) of the last save or load: the base of a delta
        self._change_log = None        # key arrays whose rows may have changed, ALL_KEYS, or None: no log (SERVE-3)
        self._lock = threading.RLock()
        if engine is None:
            engine = HooksEngine(self._own_hooks(), config, optimizer)
        elif not isinstance(engine, Engine):
            raise TypeError(f"table {config.name!r}: engine: must be an mxrec_ref.engine.Engine, "
                            f"got {type(engine).__name__}")
        elif self.backend_name == Store.backend_name:
            self.backend_name = engine.backend_name     # a plain facade names its engine's backend
        self.engine = engine

    # The table's configuration, optimizer and counting switch are the engine's (one copy).
    @property
    def config(self) -> TableConfig:
        return self.engine.config

    @config.setter
    def config(self, config: TableConfig) -> None:
        self.engine.config = config

    @property
    def optimizer(self) -> SparseOptimizer:
        return self.engine.optimizer

    @optimizer.setter
    def optimizer(self, optimizer: SparseOptimizer) -> None:
        self.engine.optimizer = optimizer

    @property
    def counting(self) -> bool:
        """False after set_threshold(0): counts frozen (ADM-9)."""
        return self.engine.counting

    @counting.setter
    def counting(self, counting: bool) -> None:
        self.engine.counting = counting

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
            step = self.check_time("step", step, required=True)
            timestamp = self.check_time("timestamp", timestamp, required=False)
        else:
            step = self.check_time("step", step, required=False)
            timestamp = self.check_time("timestamp", timestamp, required=False)
        pad_to = self._check_pad_to(pad_to)
        with self._lock:
            result = _read_only(self.engine.lookup(flat, shape, train=train, step=step, timestamp=timestamp,
                                                   pad_to=pad_to, counts=counts), id(self))
            if train:
                self._log_changes(result.unique_keys)      # admitted keys get rows (SERVE-3)
            return result

    # ------------------------------------------------ the key pipeline (spec/pipeline.md)
    def resolve_ahead(self, keys, *, counts=None) -> AheadBatch:
        """A training batch's work that depends on its keys alone, done now, ahead of its lookup
        (PIPE-1): checked as ``lookup`` checks keys and ``counts``; changes nothing the store shows,
        so it may run at any time, in any thread.  ``gather`` looks the batch up."""
        flat, shape = self._check_keys(keys)
        if counts is not None:
            counts = self._check_counts(counts, shape)
        with self._lock:
            return AheadBatch(id(self), self.name, self.engine.prepare(flat, shape, counts=counts))

    def gather(self, batch: AheadBatch, *, step: int, timestamp: int | None = None,
               pad_to: int | None = None) -> LookupResult:
        """The training ``lookup`` of a batch resolved ahead, now: the same result and the same
        effects as ``lookup(keys, train=True, step=step, timestamp=timestamp, pad_to=pad_to)`` at this
        point, bit for bit (PIPE-2), with the batch's work done ahead taken from it."""
        if not isinstance(batch, AheadBatch) or batch.store_id != id(self) or batch.table != self.name:
            raise UsageError(f"table {self.name!r}: batch: not a batch this store resolved ahead "
                             f"(got {type(batch).__name__})")
        prepared = batch.prepared
        if not prepared.done_ahead:       # nothing was done ahead (PIPE-6): this store's own lookup
            return self.lookup(prepared.keys.reshape(prepared.shape), train=True, step=step, timestamp=timestamp,
                               pad_to=pad_to, counts=prepared.counts)
        step = self.check_time("step", step, required=True)
        timestamp = self.check_time("timestamp", timestamp, required=False)
        pad_to = self._check_pad_to(pad_to)
        with self._lock:
            resolved = self.engine.commit(prepared, step=step, timestamp=timestamp, pad_to=pad_to)
            result = _read_only(self.engine.gather(resolved), id(self))
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
        step = self.check_time("step", step, required=True)
        optimizer = self._optimizer_for(learning_rate)
        handles = None
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
            handles = result.row_handles
        else:
            keys, _ = self._check_keys(result, parameter="keys")
            mask = keys != PADDING_KEY
        grads = self._check_grads(grad_rows, len(keys))
        if not isinstance(result, LookupResult):
            keys, grads, mask = sum_duplicates(keys, grads, mask)
            self._check_finite(grads, keys, "the sum of its duplicate rows overflows to Inf")
        with self._lock:
            self._log_changes(keys)
            return self.engine.apply(keys, grads, mask, step, optimizer=optimizer, handles=handles)

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

    def evict(self, now: int | None = None) -> np.ndarray:
        """Remove every key with ``now - last_seen >= eviction_threshold``;
        ``now`` defaults to the table clock.  Returns the removed keys, sorted."""
        if not self.config.eviction_enabled:
            raise UsageError(f"table {self.name!r}: eviction_threshold: eviction is not configured "
                             f"(eviction_threshold={self.config.eviction_threshold})")
        now = self.check_time("now", now, required=False, minimum=-(2**62))
        with self._lock:
            evicted = self.engine.evict(now)
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
            self.engine.set_threshold(int(threshold))

    def effective_coefficient(self) -> int:
        """What a training access adds to a count now: faae_coefficient, or 0 while counting is off."""
        return self.engine.effective_coefficient()

    def set_optimizer(self, optimizer: SparseOptimizer) -> None:
        """Apply with ``optimizer`` from now on: the same kind (the same slots), other hyper-parameters
        -- a Keras optimizer's learning-rate schedule step by step, a recompiled model (KERAS-13)."""
        if not isinstance(optimizer, SparseOptimizer) or optimizer.kind != self.optimizer.kind:
            raise UsageError(f"table {self.name!r}: optimizer: set_optimizer keeps the kind "
                             f"{self.optimizer.kind!r} (its slots), got {getattr(optimizer, 'kind', optimizer)!r}")
        with self._lock:
            self.engine.set_optimizer(optimizer)

    def size(self) -> int:
        with self._lock:
            return self.engine.size()

    def capacity(self) -> int:
        with self._lock:
            return self.engine.capacity()

    def stats(self) -> dict[str, int]:
        with self._lock:
            stats = self.engine.stats()
        if not self.tiered:
            stats["device_rows"] = stats["size"]     # HBM: every row is on the device (TIER-10)
        return {name: int(stats.get(name, 0)) for name in STAT_NAMES}

    def export(self) -> TableState:
        with self._lock:
            return self.engine.export()

    def save(self, directory, *, incremental: bool = False) -> str:
        """Write the table under ``directory/<table name>/`` (CKPT-*); returns that path.

        ``incremental=True`` writes only what changed since this store's last
        save or load, pointing at that checkpoint (CKPT-9); without one it
        writes a full checkpoint.  An incremental save into its base's chain
        raises CheckpointError before writing anything."""
        incremental = self._check_bool("incremental", incremental)
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        with self._lock:
            state = self.engine.export()
            if incremental and self.last_checkpoint is not None:
                previous_dir, previous_state = self.last_checkpoint
                checkpoint.check_delta_target(directory, previous_dir, self.name)
                delta, removed = checkpoint.delta_between(previous_state, state)
                path = checkpoint.write_table(directory, self.config, self.optimizer, delta,
                                              previous=previous_dir, removed=removed)
            else:
                path = checkpoint.write_table(directory, self.config, self.optimizer, state)
            logger.info("table %r: saved %d keys to %s (%s)", self.name, len(state.keys), path,
                        "incremental" if incremental and self.last_checkpoint is not None else "full")
            self.last_checkpoint = (directory, state)   # absolute: a later chdir changes nothing (CKPT-9)
            return path

    def load(self, directory) -> None:
        """Replace this store's state with the checkpoint's; validated in full
        before anything changes (CKPT-5)."""
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        state = checkpoint.read_table(directory, self.config, self.optimizer)
        with self._lock:
            self.check_fits(len(state.keys))
            self.engine.import_state(state)
            self.last_checkpoint = (directory, state)
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
        now = self.check_time("now", now, required=False)
        if after is not None:
            self.check_plan(after)
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        loaded = checkpoint.read_table(directory, self.config, self.optimizer, source_table=source_table,
                                       slots_required=False)
        keys_after = None
        if self.engine.key_limit() is not None:        # only a table that cannot grow needs the keys it will hold
            with self._lock:
                before = after.keys_after if after is not None else self.engine.export().keys
            keys_after = np.union1d(before, loaded.keys)
            self.check_fits(len(keys_after))
        return WarmStartPlan(store_id=id(self), table=self.name, directory=directory, loaded=loaded, now=now,
                             keys_after=keys_after)

    def apply_warm_start(self, plan: "WarmStartPlan") -> int:
        """Merge a planned warm start into this store (WS-3); its input was checked by
        ``plan_warm_start``, so this fails only if the plan belongs to another store, or the store
        gained keys since it was planned and a table that cannot grow no longer holds them (nothing
        changes then either).  Returns the number of keys loaded."""
        self.check_plan(plan)
        with self._lock:
            merged = merge_warm_start(self.engine.export(), plan.loaded, self.config.admit_threshold, plan.now)
            self.check_fits(len(merged.keys))
            self.engine.import_state(merged)
            self._log_changes(ALL_KEYS)
        logger.info("table %r: warm start merged %d keys from %s", self.name, len(plan.loaded.keys), plan.directory)
        return len(plan.loaded.keys)

    def import_state(self, state: TableState) -> None:
        """Replace this store's rows and history with ``state`` (a whole ``TableState``, checked by the
        caller: ``check_fits`` and the checkpoint's CKPT-5), under the store's lock; no checkpoint
        bookkeeping and no change log.  What a wrapper (sharding, replicas, the sharded checkpoint) uses
        to install the state it read or merged (CON-10)."""
        with self._lock:
            self.engine.import_state(state)

    def table_clock(self) -> tuple[int | None, str | None]:
        """(the table's clock, its source): the largest step or timestamp a training lookup has
        given it, and which of the two it is (CON-5); (None, None) before the first.  After a
        ``load`` it is the checkpoint's (the TF layer continues its step count from it, TF-5)."""
        with self._lock:
            return self.engine.table_clock()

    def row_handles(self, keys) -> np.ndarray:
        """Row index of each key, -1 where it holds none (for tests and the TF
        layer; placement is specified in EXP-4 so backends agree)."""
        flat, _ = self._check_keys(keys)
        with self._lock:
            return self.engine.row_handles(flat)

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
            engine = self.engine
            if self.tiered or not isinstance(engine, TierMoves):
                state = self.engine.export()
                at = np.minimum(np.searchsorted(state.keys, keys), max(len(state.keys) - 1, 0))
                held = (state.keys[at] == keys) if len(state.keys) else np.zeros(len(keys), bool)
                return held, np.asarray(state.values, np.float32)[at[held]]
            handles = np.asarray(engine.row_handles(keys), dtype=np.int64)
            held = handles >= 0
            if not held.any():
                return held, np.zeros((0, self.config.dim), np.float32)
            return held, np.asarray(engine.rows_of(keys[held], handles[held])[0], np.float32)

    def _log_changes(self, keys) -> None:
        log = self._change_log
        if log is None or (log and log[0] is ALL_KEYS):
            return
        if keys is ALL_KEYS:
            self._change_log = [ALL_KEYS]
            return
        log.append(np.array(keys, dtype=np.int64))     # a copy: the caller may change its array afterwards
        self._change_log_keys += len(keys)
        if self._change_log_keys > max(CHANGE_LOG_MIN_KEYS, 4 * self.engine.size()):
            self._change_log = [ALL_KEYS]        # as long as the table: a full delta costs no more

    def _logs_every_change(self) -> bool:
        return all(getattr(type(self), name) is getattr(Store, name) for name in LOGGED_CALLS)

    # ------------------------------------------- hooks of a Store subclass without an engine
    # A subclass that passes no engine implements the HOOKS; HooksEngine (below) calls them with
    # validated arguments.  On a facade with an engine each hook is that engine's call (what a
    # subclass written against the hooks may delegate to), so the two kinds compose.
    HOOKS = ("_lookup", "_apply", "_evict", "_size", "_capacity", "_stats", "_export", "_import_state",
             "_row_handles")

    def _own_hooks(self) -> StoreHooks:
        """This subclass's hooks for its HooksEngine; a TypeError names the ones it lacks."""
        missing = [name for name in self.HOOKS if getattr(type(self), name) is getattr(Store, name)]
        if missing:      # what an abstract base class said before the facade had engines
            raise TypeError(f"Can't instantiate abstract class {type(self).__name__} without an engine: it "
                            f"implements neither an Engine nor the hooks {', '.join(missing)}")
        return StoreHooks(lookup=self._lookup, apply=self._apply, apply_result=self._apply_result,
                          evict=self._evict, size=self._size, capacity=self._capacity, stats=self._stats,
                          export=self._export, import_state=self._import_state, row_handles=self._row_handles,
                          key_limit=self._key_limit, set_optimizer=self._set_optimizer,
                          table_clock=self._table_clock)

    def _lookup(self, keys: np.ndarray, shape: tuple, train: bool, step: int | None,
                timestamp: int | None, pad_to: int | None, counts: np.ndarray | None) -> LookupResult:
        result = self.engine.lookup(keys, shape, train=train, step=step, timestamp=timestamp, pad_to=pad_to,
                                    counts=counts)
        return dataclasses.replace(result, store_id=id(self))

    def _apply(self, keys: np.ndarray, grads: np.ndarray, mask: np.ndarray, step: int) -> int:
        return self.engine.apply(keys, grads, mask, step, optimizer=self.optimizer)

    def _apply_result(self, keys: np.ndarray, grads: np.ndarray, mask: np.ndarray, step: int,
                      handles: np.ndarray | None) -> int:
        """_apply for a LookupResult of this store: ``keys`` are unique by construction (no OPT-1 merge)
        and ``handles`` the rows the lookup resolved, which a backend may reuse once it has checked
        they still hold their keys (OPT-9).  The default resolves by key."""
        if isinstance(self.engine, HooksEngine):
            return self._apply(keys, grads, mask, step)
        return self.engine.apply(keys, grads, mask, step, optimizer=self.optimizer, handles=handles)

    def _evict(self, now: int | None) -> np.ndarray:
        return self.engine.evict(now)

    def _size(self) -> int:
        return self.engine.size()

    def _capacity(self) -> int:
        return self.engine.capacity()

    def _stats(self) -> dict[str, int]:
        return self.engine.stats()

    def _export(self) -> TableState:
        return self.engine.export()

    def _import_state(self, state: TableState) -> None:
        self.engine.import_state(state)

    def _row_handles(self, keys: np.ndarray) -> np.ndarray:
        return self.engine.row_handles(keys)

    def _set_optimizer(self, optimizer: SparseOptimizer) -> None:
        if isinstance(self.engine, HooksEngine):
            self.optimizer = optimizer
        else:
            self.engine.set_optimizer(optimizer)

    def _table_clock(self) -> tuple[int | None, str | None]:
        if isinstance(self.engine, HooksEngine):
            state = self._export()
            return state.clock, state.clock_source
        return self.engine.table_clock()

    def _key_limit(self) -> int | None:
        """The most keys a loaded or warm-started table may hold (CKPT-6); None for one that grows."""
        if isinstance(self.engine, HooksEngine):
            return default_key_limit(self.config)
        return self.engine.key_limit()

    # ------------------------------------------------- shared validation
    def key_limit(self) -> int | None:
        """The most keys a loaded or warm-started table may hold (CKPT-6); None for one that grows."""
        return self.engine.key_limit()

    def check_fits(self, n_keys: int) -> None:
        limit = self.engine.key_limit()
        if limit is not None and n_keys > limit:
            parameter = self.config.capacity_parameter
            raise CapacityError(
                f"table {self.name!r}: {parameter}: the checkpoint holds {n_keys} keys "
                f"but the table has {limit} rows; raise {parameter}")

    def check_plan(self, plan) -> None:
        if not isinstance(plan, WarmStartPlan) or plan.store_id != id(self):
            raise UsageError(f"table {self.name!r}: plan: not a warm-start plan of this store; pass what this "
                             f"store's plan_warm_start returned")

    def _check_bool(self, parameter: str, value) -> bool:
        if not isinstance(value, (bool, np.bool_)):
            raise UsageError(f"table {self.name!r}: {parameter}: must be True or False, got {value!r}")
        return bool(value)

    def check_time(self, parameter: str, value, *, required: bool, minimum: int = 0) -> int | None:
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
        pad_to = self.check_time("pad_to", pad_to, required=False, minimum=1)
        if pad_to is not None and (pad_to > PAD_TO_MAX or pad_to * self.config.dim > PAD_FLOATS_MAX):
            raise UsageError(f"table {self.name!r}: pad_to: must be in [1, 2**31-1] with pad_to x dim <= 2**30 "
                             f"(4 GiB of padded rows), got {pad_to} x {self.config.dim}")
        return pad_to

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


@dataclasses.dataclass(frozen=True)
class StoreHooks:
    """The hooks of a ``Store`` subclass written against them, as the store hands them to its
    ``HooksEngine`` (bound methods: the store's own calls, given away by the store itself)."""

    lookup: Callable
    apply: Callable
    apply_result: Callable
    evict: Callable
    size: Callable
    capacity: Callable
    stats: Callable
    export: Callable
    import_state: Callable
    row_handles: Callable
    key_limit: Callable
    set_optimizer: Callable
    table_clock: Callable


class HooksEngine(Engine):
    """The engine of a ``Store`` subclass that implements the underscore hooks instead of supplying an
    engine (the conformance plugin's and third parties' stores, the sharded stores): each protocol call
    goes to the subclass's hook.  This adapter is the only caller of those hooks; the store hands them
    over (``Store.__init__``: ``StoreHooks``), so no object reaches into another's underscore names."""

    def __init__(self, hooks: StoreHooks, config: TableConfig, optimizer: SparseOptimizer):
        super().__init__(config, optimizer)
        self.hooks = hooks

    def resolve(self, keys, shape, *, train, step, timestamp, pad_to, counts) -> Resolved:
        result = self.hooks.lookup(keys, shape, train, step, timestamp, pad_to, counts)
        return Resolved(keys=keys, shape=shape, train=train, step=step, pad_to=pad_to, unique=result.unique_keys,
                        inverse=result.inverse, n_unique=result.n_unique, admitted=result.admitted, rows=result.rows,
                        handles=result.row_handles, padded=True)

    def gather(self, resolved: Resolved) -> LookupResult:
        return LookupResult(self.name, resolved.unique, resolved.rows, resolved.inverse.reshape(resolved.shape),
                            resolved.admitted, resolved.train, resolved.n_unique, 0, resolved.handles)

    def lookup(self, keys, shape, *, train, step, timestamp, pad_to, counts) -> LookupResult:
        # The hook's result as it is: a hooks store has no phases (resolve and gather split it after the fact).
        return self.hooks.lookup(keys, shape, train, step, timestamp, pad_to, counts)

    def apply(self, keys, grads, mask, step, *, optimizer, handles=None) -> int:
        # The hooks read the store's optimizer (this engine's): for this call (OPT-10) it is ``optimizer``.
        kept = self.optimizer
        self.optimizer = optimizer
        try:
            if handles is not None:
                return self.hooks.apply_result(keys, grads, mask, step, handles)
            return self.hooks.apply(keys, grads, mask, step)
        finally:
            self.optimizer = kept

    def evict(self, now):
        return self.hooks.evict(now)

    def size(self) -> int:
        return self.hooks.size()

    def capacity(self) -> int:
        return self.hooks.capacity()

    def stats(self) -> dict[str, int]:
        return self.hooks.stats()

    def export(self) -> TableState:
        return self.hooks.export()

    def import_state(self, state: TableState) -> None:
        self.hooks.import_state(state)

    def row_handles(self, keys):
        return self.hooks.row_handles(keys)

    def key_limit(self) -> int | None:
        return self.hooks.key_limit()

    def set_optimizer(self, optimizer: SparseOptimizer) -> None:
        self.hooks.set_optimizer(optimizer)

    def table_clock(self):
        return self.hooks.table_clock()


def tier_moves_error(config: TableConfig, backend: str, store: Store) -> Exception:
    """CON-10: the error of a DDR or SSD table asked of a backend whose store cannot sit behind the tiers;
    NotSupported where the backend says it cannot express tiers at all (CON-11)."""
    if store.tiers_not_expressible:
        return NotSupported(store.tiers_not_expressible)
    return UsageError(f"table {config.name!r}: host_vocabulary_size: backend {backend!r} "
                      f"({type(store).__name__}) cannot hold a DDR or SSD table: its store does not implement "
                      f"mxrec_ref.contract.TierMoves (spec/contract.md, CON-10); use host_vocabulary_size=0")


class InMemoryStore(InMemoryBookkeeping, Store):
    """A ``Store`` subclass written against the hooks that keeps its rows elsewhere but its
    bookkeeping in memory (``mxrec_ref.peers.tfra.TFRAStore``): the in-memory engines' counters,
    clock, capacity rows and hot schedule (``mxrec_ref.engine.InMemoryBookkeeping``) under the
    names such a subclass calls.  The built-in backends are engines (``RefEngine``, ``FastEngine``)."""

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        Store.__init__(self, config, optimizer)
        self.start_bookkeeping(self.config, hot_rows, hot_update_step)

    def held_rows(self) -> int:
        return self._size()

    def _capacity(self) -> int:
        return self.capacity_rows

    def _table_clock(self) -> tuple[int | None, str | None]:
        return self.clock, self.clock_source       # the clock as kept, without exporting the table

    def _check_send_count(self, n_unique: int, pad_to: int | None) -> None:
        check_send_count(self.config, n_unique, pad_to)                       # LKP-4

    def _count_positions(self, train: bool, positions: int, padding: int, with_row: int) -> None:
        self.count_positions(train, positions, padding, with_row)             # STAT-3

    def _training_clock(self, step: int, timestamp: int | None) -> tuple[int, str]:
        return self.training_clock(step, timestamp)                           # CON-5

    def _reserve(self, n_new: int) -> None:
        self.reserve(n_new)                                                   # EXP-2, EXP-3

    def _capacity_after_import(self, n_keys: int) -> int:
        return self.capacity_after_import(n_keys)                             # CKPT-6

    def _count_applied(self, n_keys: int, n_rows: int) -> None:
        self.count_applied(n_keys, n_rows)                                    # STAT-5

    def _counter_stats(self, *, size: int, history: int, hot_rows: int) -> dict[str, int]:
        return self.counter_stats(size=size, history=history, hot_rows=hot_rows)

    @property
    def _counters(self) -> dict[str, int]:
        return self.counters

    def refresh_hot(self) -> None:
        self._refresh_hot()

    def _refresh_hot(self) -> None:
        raise NotImplementedError


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


def _read_only(result: LookupResult, store_id: int) -> LookupResult:
    """A result's arrays as read-only views: a caller cannot rewrite which keys
    its gradients go to (CON-9); the result names the store that made it."""
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
    return dataclasses.replace(result, store_id=store_id, **views)


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
