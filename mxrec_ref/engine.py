"""The engine protocol: what a table's storage does, with arguments already checked (spec/contract.md).

A ``Store`` (``mxrec_ref.contract``) is the public facade of one table: it validates every
argument once, holds the one lock, keeps the change log and the checkpoint calls, and hands
everything else to its ``engine``.  An ``Engine`` is declared here with public names only:

* the training path in three phases -- ``resolve`` (every check, then dedup, admission counts,
  row reservation and initial rows, position statistics, the hot schedule: all of a lookup's
  changes; each key's row handle), ``gather`` (the ``LookupResult`` of a resolved batch: its rows
  read by handle, padding, no change) and
  ``apply`` (one update with the optimizer the call passes);
* the queries and state calls (``evict``, ``size``, ``capacity``, ``stats``, ``export``,
  ``import_state``, ``row_handles``, ``key_limit``, ``set_threshold``, ``set_optimizer``,
  ``table_clock``);
* for an engine that can sit behind the storage tiers, the tier moves of ``TierMoves`` (CON-10).

The reference (``mxrec_ref.ref``) and fast (``mxrec_ref.fast``) engines are ``InMemoryEngine``s:
the bookkeeping both share (statistics counters, the table clock, capacity rows, the hot
schedule) is written once below.  Engines over engines (the tiers) call only this protocol.

The rules every engine calls rather than restates -- send_count (LKP-4), the clock source
(CON-5), capacity growth (EXP-2, EXP-3), the overflow error (OPT-3), the eviction cut-off
(EVI-1), position counts (STAT-3) -- are module functions here, one rule, one name.
"""
from __future__ import annotations

import dataclasses
import logging
from abc import ABC, abstractmethod

import numpy as np

from . import hot
from .config import TableConfig
from .errors import CapacityError, GradientError, UsageError
from .optimizers import SparseOptimizer
from .state import STAT_NAMES, LookupResult, TableState

# The logger of a table's life (OBS-2): the same one as mxrec_ref.contract's.
logger = logging.getLogger("mxrec_ref.store")


# ------------------------------------------------------------ shared rules
def check_send_count(config: TableConfig, n_unique: int, pad_to: int | None) -> None:
    """LKP-4: a static-shape batch may not have more unique keys than it is padded to.
    Every engine and the tiers call this before the lookup changes anything."""
    if pad_to is not None and n_unique > pad_to:
        raise UsageError(f"table {config.name!r}: send_count: the batch has {n_unique} unique keys, "
                         f"more than send_count={pad_to}; raise send_count")


def check_clock_source(config: TableConfig, clock_source: str | None, timestamp: int | None) -> str:
    """CON-5: a table's clock is the step or the data timestamp, fixed by its first training
    lookup; returns the source this training lookup uses."""
    source = "timestamp" if timestamp is not None else "step"
    if clock_source is not None and source != clock_source:
        raise UsageError(f"table {config.name!r}: timestamp: this table's clock is the {clock_source}; "
                         f"a training lookup must not switch it to the {source} (CON-5)")
    return source


def eviction_cutoff(config: TableConfig, now: int | None, clock: int | None) -> int | None:
    """EVI-1: an eviction at ``now`` (default: the table clock ``clock``) removes every key with
    ``now - last_seen >= eviction_threshold``, i.e. ``last_seen <= `` the cut-off returned;
    None when there is no time yet (nothing expires).  Every engine and tier tests this one way."""
    if now is None:
        now = clock
    return None if now is None else now - config.eviction_threshold


def capacity_error(config: TableConfig, needed: int, capacity: int) -> Exception:
    """The error of a training lookup that would overflow a fixed-size table (EXP-2)."""
    parameter = config.capacity_parameter
    return CapacityError(
        f"table {config.name!r}: {parameter}: the batch needs {needed} rows but the table holds {capacity}; "
        f"raise {parameter} to at least {needed} or turn on dynamic expansion (nothing was changed)")


def grown_capacity(config: TableConfig, needed: int, capacity: int) -> int:
    """The capacity a lookup needing ``needed`` rows leaves: unchanged if it
    fits, doubled (at least ``needed``) with dynamic expansion (EXP-3), else
    a CapacityError before anything changed (EXP-2)."""
    if needed <= capacity:
        return capacity
    if not config.dynamic_expansion:
        raise capacity_error(config, needed, capacity)
    logger.info("table %r: capacity grows from %d to %d rows", config.name, capacity, max(2 * capacity, needed))
    return max(2 * capacity, needed)


def overflow_error(config: TableConfig, optimizer: SparseOptimizer, key: int) -> GradientError:
    """OPT-3: the error of an update that would leave NaN or Inf in a row or slot; the engine
    raises it before committing the update."""
    return GradientError(f"table {config.name!r}: grad_rows: key {key}: the {optimizer.kind} update "
                         f"overflows to NaN or Inf (nothing was applied)")


def count_positions(counters: dict[str, int], train: bool, positions: int, padding: int, with_row: int) -> None:
    """STAT-3 for one lookup: ``positions`` looked up, ``padding`` of them -1,
    ``with_row`` of them answered from a stored row."""
    real = positions - padding
    if not train:
        counters["eval_lookups"] += 1
    counters["padding_positions"] += padding
    counters["key_positions"] += real
    counters["default_positions"] += real - with_row


def default_key_limit(config: TableConfig) -> int | None:
    """The most keys a loaded or warm-started table may hold (CKPT-6); None for one that grows."""
    return None if config.dynamic_expansion else config.table_capacity


# ------------------------------------------------------------ the protocol
@dataclasses.dataclass(eq=False, slots=True)     # not frozen: a frozen init costs 4x on every lookup
class Resolved:
    """One batch after ``resolve``: what ``gather`` and ``apply`` need, nothing recomputed.

    ``unique`` holds the batch's distinct keys in first-occurrence order (``n_unique`` of them,
    padding key included when the batch has one); ``inverse`` each position's index into it;
    ``admitted`` which of them hold a row and ``handles`` their rows (-1: none, the default row).
    The reference and fast engines read no row in ``resolve``: their ``gather`` reads the rows by
    ``handles`` then, so it sees every apply made in between (a resolve may run ahead of an
    earlier batch's apply).  ``rows``: rows already read (None for those engines; an engine that
    reads in resolve, or must read before its own resolve ends -- the tiers spill rows after it --
    puts them here, and gather packs them).  ``hot_index`` each unique key's index in the hot
    block (None: no hot set or not kept).  ``padded``: whether ``admitted``, ``handles`` and
    ``rows`` are already padded to ``pad_to`` (the leaf engines pad).  Nobody changes a Resolved
    after ``resolve`` made it."""

    keys: np.ndarray
    shape: tuple
    train: bool
    step: int | None
    pad_to: int | None
    unique: np.ndarray
    inverse: np.ndarray
    n_unique: int
    admitted: np.ndarray
    rows: np.ndarray | None = None
    handles: np.ndarray | None = None
    hot_index: np.ndarray | None = None
    padded: bool = False


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A training batch's work done ahead of its lookup (the key pipeline, spec/pipeline.md): what
    depends on the keys alone and changes nothing a store shows (PIPE-1).  ``commit`` turns it into
    the batch's ``Resolved`` at the batch's turn.  ``deduped``: the engine's dedup of the keys (None:
    nothing done ahead: ``done_ahead`` is False); ``init_at`` the positions in the distinct keys whose initial rows
    ``init_rows`` holds, in that order (the keys a lookup then would have admitted; INIT-1 makes a
    key's initial row a function of the key, so it is the same whenever it is made)."""

    keys: np.ndarray
    shape: tuple
    counts: np.ndarray | None
    deduped: tuple | None = None
    init_at: np.ndarray | None = None
    init_rows: np.ndarray | None = None
    hints: object = None                 # the engine's probe or plan of the keys then (its own form): commit checks it

    @property
    def done_ahead(self) -> bool:
        return self.deduped is not None


def initial_rows_of(config: TableConfig, unique: np.ndarray, admit: np.ndarray, prepared: Prepared | None,
                    initial_rows) -> np.ndarray | None:
    """INIT-1's rows of the keys ``unique[admit]``: those a ``prepare`` made already taken from it
    (PIPE-3), the others made now by ``initial_rows`` (the backend's initializer)."""
    if not len(admit):
        return None
    if prepared is None or prepared.init_rows is None:
        return initial_rows(config, unique[admit])
    if prepared.init_at is admit:          # the admission worked out ahead holds (the fast engine's plan)
        return prepared.init_rows
    slot = np.full(len(unique), -1, dtype=np.int64)
    slot[prepared.init_at] = np.arange(len(prepared.init_at))
    taken = slot[admit]
    missing = taken < 0
    if not missing.any():
        return prepared.init_rows[taken]
    rows = np.empty((len(admit), config.dim), dtype=np.float32)
    rows[~missing] = prepared.init_rows[taken[~missing]]
    rows[missing] = initial_rows(config, unique[admit[missing]])
    return rows


class Engine(ABC):
    """One table's storage behind a ``Store`` facade.  Every argument arrives checked and under
    the facade's lock; a call that raises has changed nothing (CON-4).  Public names only: a
    wrapper engine drives the engine it wraps through these and nothing else."""

    backend_name = "abstract"
    tiered = False     # True for DDR and SSD tables (spec/tiers.md)
    # An engine that cannot express storage tiers at all says why (CON-11).
    tiers_not_expressible: str | None = None
    def __init__(self, config: TableConfig, optimizer: SparseOptimizer):
        self.config = config
        self.optimizer = optimizer
        self.counting = True      # False after set_threshold(0): counts frozen (ADM-9)

    @property
    def name(self) -> str:
        return self.config.name

    # ------------------------------------------------------- training path
    @abstractmethod
    def resolve(self, keys: np.ndarray, shape: tuple, *, train: bool, step: int | None, timestamp: int | None,
                pad_to: int | None, counts: np.ndarray | None) -> Resolved:
        """Every check of the lookup first, then all of its changes: dedup (LKP-2), admission
        counts and rows (ADM-*, EXP-*), position statistics (STAT-3), hot hits and the hot
        schedule (HOT-2, HOT-4); each unique key's row handle, for ``gather``."""

    @abstractmethod
    def gather(self, resolved: Resolved) -> LookupResult:
        """The lookup result of a resolved batch, padded (LKP-4); changes nothing.  The reference and
        fast engines read the rows here, by ``resolved.handles`` (one pass in C for the fast one), so
        a gather sees every apply made since its resolve: a resolve may run ahead of an earlier
        batch's apply (the pipeline).  An engine whose rows can move between tiers after resolve
        reads them before they move (``resolved.rows``)."""

    def lookup(self, keys: np.ndarray, shape: tuple, *, train: bool, step: int | None, timestamp: int | None,
               pad_to: int | None, counts: np.ndarray | None) -> LookupResult:
        return self.gather(self.resolve(keys, shape, train=train, step=step, timestamp=timestamp,
                                        pad_to=pad_to, counts=counts))

    # ----------------------------------------------- the key pipeline (spec/pipeline.md)
    def prepare(self, keys: np.ndarray, shape: tuple, *, counts: np.ndarray | None) -> Prepared:
        """A training lookup's work that depends on its keys alone, done ahead (PIPE-1): it changes
        nothing a store shows and may run any time before ``commit``.  This default does nothing
        ahead (PIPE-6): ``commit`` then resolves the whole batch."""
        return Prepared(keys, shape, counts)

    def commit(self, prepared: Prepared, *, step: int, timestamp: int | None, pad_to: int | None) -> Resolved:
        """The batch's training ``resolve`` now, from its ``prepare`` (PIPE-2): the same as
        ``resolve`` of its keys at this point, bit for bit."""
        return self.resolve(prepared.keys, prepared.shape, train=True, step=step, timestamp=timestamp,
                            pad_to=pad_to, counts=prepared.counts)

    @abstractmethod
    def apply(self, keys: np.ndarray, grads: np.ndarray, mask: np.ndarray, step: int, *,
              optimizer: SparseOptimizer, handles: np.ndarray | None = None) -> int:
        """Update the rows of ``keys[mask]`` (distinct) with ``optimizer`` (this call's, OPT-10).
        ``handles``: the rows a lookup of this engine resolved for ``keys``, which the engine may
        reuse once it has checked they still hold their keys (OPT-9)."""

    # ------------------------------------------------------------ the rest
    @abstractmethod
    def evict(self, now: int | None) -> np.ndarray: ...

    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    def capacity(self) -> int: ...

    @abstractmethod
    def stats(self) -> dict[str, int]: ...

    @abstractmethod
    def export(self) -> TableState: ...

    @abstractmethod
    def import_state(self, state: TableState) -> None: ...

    @abstractmethod
    def row_handles(self, keys: np.ndarray) -> np.ndarray: ...

    def key_limit(self) -> int | None:
        """The most keys a loaded or warm-started table may hold (CKPT-6); None for one that grows."""
        return default_key_limit(self.config)

    def set_threshold(self, threshold: int) -> None:
        """ADM-9 (checked by the facade): 0 stops counting, a positive threshold is the new one."""
        if int(threshold) == 0:
            self.counting = False
            return
        self.config = dataclasses.replace(self.config, access_threshold=int(threshold))
        self.counting = True

    def effective_coefficient(self) -> int:
        """What a training access adds to a count now: faae_coefficient, or 0 while counting is off."""
        return self.config.faae_coefficient if self.counting else 0

    def set_optimizer(self, optimizer: SparseOptimizer) -> None:
        self.optimizer = optimizer

    def table_clock(self) -> tuple[int | None, str | None]:
        state = self.export()
        return state.clock, state.clock_source


class TierMoves(ABC):
    """What an engine offers so that the storage tiers (``mxrec_ref.tiers.TieredEngine``) can sit
    in front of it: a DDR or SSD table is the backend's in-memory engine behind them (CON-10).

    The tier engine uses the engine behind it through the members declared here and the public
    ``Engine`` protocol, nothing else.  None of the moves changes a statistic: the tiers count what
    crosses a tier (TIER-10).  ``open_store`` refuses to tier an engine that is not a ``TierMoves``."""

    device_placement: type     # the backend's device-tier bookkeeping (mxrec_ref.tiers.placement), TIER-4
    host_heap: type            # the backend's heap of TIER-5's order (mxrec_ref.tiers.placement.HostOrder), TIER-12
    clock: int | None          # the table clock (CON-5): the tiers evict from disk by it (EVI-1)
    clock_source: str | None   # and check a lookup's clock source before any row moves (CON-4)

    @abstractmethod
    def dedup(self, keys: np.ndarray, counts: np.ndarray | None) -> tuple:
        """The batch's dedup (LKP-2): a tuple whose first item is the distinct keys in order of
        first occurrence, padding included; the rest is the engine's own, for resolve_deduped."""

    @abstractmethod
    def resolve_deduped(self, deduped: tuple, keys: np.ndarray, shape: tuple, *, train: bool, step: int | None,
                        timestamp: int | None, pad_to: int | None, counts: np.ndarray | None,
                        prepared: Prepared | None = None) -> Resolved:
        """``resolve`` given the batch's ``dedup``, so that a tiered lookup dedups once (TIER-12);
        ``prepared``: the batch's ``prepare``, whose initial rows a training lookup reuses (PIPE-3)."""

    @abstractmethod
    def rows_of(self, keys: np.ndarray, rows: np.ndarray | None = None
                ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Copies of what ``keys`` (all holding a row) carry to another tier:
        (values, {slot: values}, counts, last_seen).  ``rows``: the keys' ``row_handles`` when the
        caller has them, so an engine that locates rows by handle need not probe again."""

    @abstractmethod
    def entries_of(self, keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(counts, last_seen) of ``keys`` (all holding a row; ``rows``: their ``row_handles``):
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


# ------------------------------------------------ in-memory bookkeeping
class InMemoryBookkeeping:
    """What the in-memory engines share, written once: the statistics counters (STAT-*), the
    table clock (CON-5), the capacity rows and their growth (EXP-2, EXP-3, CKPT-6) and the hot
    schedule (HOT-1, HOT-2).  A class using it has ``config``, ``effective_coefficient()`` and
    ``held_rows()`` (the rows it holds now) and calls ``start_bookkeeping`` once."""

    def start_bookkeeping(self, config: TableConfig, hot_rows: int | None, hot_update_step: int | None) -> None:
        # HOT-1: open_store reads HOT_EMB_UPDATE_STEP once and passes it; an engine built directly reads it here.
        self.hot_update_step = hot.update_step(config.name) if hot_update_step is None else hot_update_step
        self.hot_capacity = hot.hot_rows(config.name, config.dim, hot_rows)
        self.counters = {name: 0 for name in STAT_NAMES}
        self.capacity_rows = config.table_capacity
        self.clock: int | None = None          # the table's time: max step or timestamp seen (CON-5)
        self.clock_source: str | None = None

    def held_rows(self) -> int:
        raise NotImplementedError

    def training_clock(self, step: int, timestamp: int | None) -> tuple[int, str]:
        """(the clock after this training lookup, its source); checks the source (CON-5) and
        changes nothing: the caller sets both once its other checks passed."""
        source = check_clock_source(self.config, self.clock_source, timestamp)
        time = timestamp if source == "timestamp" else step
        return (time if self.clock is None else max(self.clock, time)), source

    def reserve(self, n_new: int) -> None:
        """Make room for ``n_new`` more rows or raise before anything changed (EXP-2, EXP-3)."""
        capacity = grown_capacity(self.config, self.held_rows() + n_new, self.capacity_rows)
        if capacity != self.capacity_rows:
            self.capacity_rows = capacity
            self.counters["growths"] += 1

    def hold_at_least(self, n_rows: int) -> None:
        """Rows coming back from another tier always fit: capacity follows, no growth counted."""
        self.capacity_rows = max(self.capacity_rows, n_rows)

    def capacity_after_import(self, n_keys: int) -> int:
        """CKPT-6: a loaded table has its configured capacity, or its key count if that is
        larger and the table grows (a fixed table was checked by check_fits)."""
        self.capacity_rows = self.config.table_capacity
        if self.config.dynamic_expansion:
            self.capacity_rows = max(self.config.table_capacity, n_keys)
        return self.capacity_rows

    def refresh_hot_if_due(self, train: bool) -> None:
        """HOT-2: the hot set is chosen again after every HOT_EMB_UPDATE_STEP-th training lookup."""
        if train and hot.is_refresh_due(self.counters["train_lookups"], self.hot_update_step):
            self.refresh_hot()
            self.counters["hot_refreshes"] += 1

    def refresh_hot(self) -> None:
        """Choose the hot keys (hot.choose_hot_keys) and copy their rows into the hot block."""
        raise NotImplementedError

    def count_positions(self, train: bool, positions: int, padding: int, with_row: int) -> None:
        count_positions(self.counters, train, positions, padding, with_row)          # STAT-3

    def count_applied(self, n_keys: int, n_rows: int) -> None:
        """STAT-5 for one apply: ``n_rows`` of the ``n_keys`` gradient rows updated a row."""
        self.counters["grad_applies"] += 1
        self.counters["grad_rows_applied"] += n_rows
        self.counters["grad_rows_dropped"] += n_keys - n_rows

    def counter_stats(self, *, size: int, history: int, hot_rows: int) -> dict[str, int]:
        """STAT-1's in-memory values: the counters, and the sizes of now (``history``: keys
        admitted or pending)."""
        stats = dict(self.counters)
        stats["size"] = size
        stats["capacity"] = self.capacity_rows
        stats["pending"] = history - size
        stats["hot_rows"] = hot_rows
        return stats


class InMemoryEngine(InMemoryBookkeeping, Engine):
    """An engine that holds every row in host memory (the reference and the fast path)."""

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer, hot_rows: int | None = None,
                 hot_update_step: int | None = None):
        Engine.__init__(self, config, optimizer)
        self.start_bookkeeping(config, hot_rows, hot_update_step)

    def held_rows(self) -> int:
        return self.size()

    def commit(self, prepared: Prepared, *, step: int, timestamp: int | None, pad_to: int | None) -> Resolved:
        """PIPE-2: the training resolve of the prepared keys, from their dedup, reusing the initial rows
        (and the fast engine's probe) made ahead; ``resolve_deduped`` is the leaf engine's."""
        if not prepared.done_ahead:
            return super().commit(prepared, step=step, timestamp=timestamp, pad_to=pad_to)
        return self.resolve_deduped(prepared.deduped, prepared.keys, prepared.shape, train=True, step=step,
                                    timestamp=timestamp, pad_to=pad_to, counts=prepared.counts, prepared=prepared)

    def capacity(self) -> int:
        return self.capacity_rows

    def table_clock(self) -> tuple[int | None, str | None]:
        return self.clock, self.clock_source          # the clock as kept, without exporting the table
