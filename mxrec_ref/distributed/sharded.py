"""A table sharded over ranks behind the one store contract (spec/sharding.md).

``ShardedStore`` wraps this rank's store -- a reference, fast or tiered store that knows nothing
of ranks, and holds the keys with ``key mod rank_size == rank`` (SHARD-2) -- and answers every
call for the whole table, as the tiers wrap a backend (CON-10).  Each public call is collective:
every rank makes the same calls in the same order (SHARD-8).

A training lookup (SHARD-3): dedup the local batch with occurrence counts -> order the keys by
owner -> one ``allgather`` of a header (mode, step, timestamp, the count of keys for each owner,
or this rank's error) so that every rank checks the same things and raises the same error ->
``alltoallv`` of keys with their occurrence counts -> the owner's lookup (its store dedups a key
arriving from several ranks and adds ``faae_coefficient x occurrences``, exactly as one process)
-> ``allgather`` of the owners' outcome and statistics -> ``alltoallv`` of rows and admitted flags
back.  Gradients go the same way to the owners, which sum them in source-rank order (SHARD-5).

The store runs each call as phases, methods of their own with a per-call record: route (this rank's
batch by owner) -> exchange (the header and the keys) -> compute (the owner's store) -> answer (rows back,
the result).  ``TableCollective`` (collective.py) keeps the calls collective.  The routing functions
here are the reference's, pure Python and numpy; a table whose shards are fast stores routes with their
twins of the same names in mxrec_ref/fast/sharding.py (cext/_route.pyx).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable, NamedTuple

import numpy as np

from .. import hot
from ..contract import Store, sum_duplicates
from ..errors import UsageError
from ..ref import lookup as reference_lookup
from ..ref.lookup import NOT_HOT, pad, position_stats
from ..state import PADDING_KEY, STAT_NAMES, LookupResult, TableState, merge_in_key_order
from . import checkpoint as sharded_checkpoint
from .collective import TableCollective, attempt, check_same_call  # noqa: F401 -- check_same_call: its old path
from .comm import Communicator, alltoallv_columns, gather_rows, world
from .hot_replica import HotReplica

logger = logging.getLogger("mxrec_ref.distributed")

# Statistics that count calls of the table: every owner sees every call, so any owner's value is the
# table's; the others are summed over owners, except the positions, counted by the wrapper (SHARD-6).
_PER_CALL = ("train_lookups", "eval_lookups", "grad_applies", "hot_refreshes")
_POSITIONS = ("key_positions", "padding_positions", "default_positions")
_WRAPPER_COUNTERS = _POSITIONS + ("grad_rows_dropped", "hot_hit_positions")  # counted where the batch is, summed


# ------------------------------------------------------------------ routing (the reference's)
def owner_of(keys: np.ndarray, rank_size: int) -> np.ndarray:
    """SHARD-2: the rank that holds each key: ``key mod rank_size``, floor modulo (never negative)."""
    return np.mod(np.asarray(keys, dtype=np.int64), rank_size)


def route(keys: np.ndarray, rank_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, counts): ``keys[order]`` grouped by owner, rank 0's first, first-occurrence order kept
    inside each group; ``counts[d]`` keys for rank d.  numpy's stable sort of 16-bit integers is a radix
    sort, O(n); the fast twin is a counting sort (mxrec_ref/fast/sharding.py)."""
    owners = owner_of(keys, rank_size)
    narrow = owners.astype(np.uint16) if rank_size <= 2**16 else owners
    order = np.argsort(narrow, kind="stable")
    return order, np.bincount(owners, minlength=rank_size).astype(np.int64)


# ``dedup`` (imported above) is LKP-2's reference: distinct keys in order of first occurrence, the inverse
# index and each key's number of accesses (ADM-2), as a store computes them.


class Routing(NamedTuple):
    """The routing functions a sharded table runs: the reference's or the fast twins (same names)."""

    route: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
    dedup: Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray, np.ndarray]]


def routing_for(local: Store) -> Routing:
    """The routing twins of the local store's backend: the C kernels for a fast store (a tiered one
    included: it has its backend's name), the reference's for any other."""
    if local.backend_name == "fast":
        # imported here: mxrec_ref.fast needs the built extension, which only a fast store implies
        from ..fast import sharding as fast_sharding
        return Routing(fast_sharding.route, fast_sharding.dedup)
    return Routing(route, dedup)


def dedup(keys: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LKP-2's reference dedup of a batch (no table: routing happens before any owner is asked)."""
    return reference_lookup.dedup(None, keys, counts)


# ------------------------------------------------------------------ what every table on several ranks shares
def check_lookup_headers(headers: list[dict], table: str, train: bool) -> tuple[int | None, int | None]:
    """Every rank runs the same lookup (SHARD-8) and fits send_count (SHARD-4); the batch timestamp is the
    largest of the ranks' (SHARD-3).  The same check, the same error, everywhere.  Returns (step, timestamp)."""
    modes = {(h["train"], h["step"], h["timestamp"] is None) for h in headers}
    if len(modes) > 1:
        seen = ", ".join(f"rank {r}: train={h['train']} step={h['step']} timestamp={h['timestamp']}"
                         for r, h in enumerate(headers))
        raise UsageError(f"table {table!r}: step: the ranks disagree on this lookup ({seen}); every rank "
                         f"must run the same steps in the same order")
    for source, header in enumerate(headers):
        if header["pad_to"] is not None and header["n_unique"] > header["pad_to"]:
            raise UsageError(f"table {table!r}: send_count: rank {source} of {len(headers)} has "
                             f"{header['n_unique']} unique keys at step {header['step']}, more than "
                             f"send_count={header['pad_to']}; raise send_count")
    stamps = [h["timestamp"] for h in headers if h["timestamp"] is not None]
    return headers[0]["step"], (max(stamps) if stamps and train else None)


def check_apply_steps(headers: list[dict], table: str) -> None:
    """Every rank applies the gradients of the same step (SHARD-8)."""
    if len({h["step"] for h in headers}) > 1:
        raise UsageError(f"table {table!r}: step: the ranks apply gradients of different steps "
                         f"({[h['step'] for h in headers]}); every rank must run the same steps")


def count_positions(positions: dict[str, int], keys: np.ndarray, inverse: np.ndarray, admitted: np.ndarray,
                    is_hot: np.ndarray) -> None:
    """STAT-3 and HOT-4 over this rank's batch (the owners see deduplicated keys), added to ``positions``."""
    hot_index = np.where(is_hot, 0, NOT_HOT).astype(np.int32) if is_hot.any() else None
    padding, with_row, hot_hits = position_stats(None, keys, inverse, admitted, hot_index)
    real = keys.size - padding
    positions["key_positions"] += real
    positions["padding_positions"] += padding
    positions["default_positions"] += real - with_row
    positions["hot_hit_positions"] += hot_hits


def local_result(store: Store, unique, rows, inverse, admitted, train: bool, pad_to) -> LookupResult:
    """A lookup's result on this rank, its unique keys padded to ``pad_to`` with PADDING_KEY and default
    rows (LKP-4)."""
    n_unique = len(unique)
    total = n_unique if pad_to is None else max(pad_to, n_unique)
    if total > n_unique:           # the padding positions get the default row, not admitted (LKP-4)
        rows = np.concatenate([rows, np.broadcast_to(store.config.default_row(), (total - n_unique, rows.shape[1]))])
        admitted = np.concatenate([admitted, np.zeros(total - n_unique, dtype=bool)])
    unique = pad(unique, total)
    return LookupResult(store.name, unique, rows, inverse, admitted, train, n_unique, id(store))


def rows_to_send(rows: np.ndarray, divide_gradients: bool, rank_size: int) -> np.ndarray:
    """SHARD-5: the gradient rows a rank sends, divided by the rank count with
    ``sum_gradients_and_div_by_ranksize``."""
    return rows * np.float32(1.0 / rank_size) if divide_gradients else rows


def config_fields(store: Store) -> dict:
    """What every rank must configure alike for a table (SHARD-22), in the order it is compared."""
    config = store.config
    return {"name": config.name, "dim": config.dim, "key_dtype": config.key_dtype,
            "optimizer": store.optimizer.describe(), "access_threshold": config.access_threshold,
            "eviction_threshold": config.eviction_threshold, "faae_coefficient": config.faae_coefficient,
            "device_vocabulary_size": config.device_vocabulary_size,
            "host_vocabulary_size": config.host_vocabulary_size, "ssd_vocabulary_size": config.ssd_vocabulary_size,
            "dynamic_expansion": config.dynamic_expansion, "layout": type(store).__name__}


def agreed_clock(collective: TableCollective, local: Store) -> tuple[int | None, str | None]:
    """The latest owner's clock (as ``export()`` has it), without gathering the table; collective."""
    clocks = [h["clock"] for h in collective.agree(None, "table_clock", clock=local.table_clock())]
    known = [clock for clock in clocks if clock[0] is not None]
    return max(known) if known else (None, None)


# ------------------------------------------------------------------ one call's record
@dataclasses.dataclass
class BatchLookup:
    """What every lookup on several ranks records of its batch (the sharded and the replicated one)."""

    keys: np.ndarray              # this rank's batch, flat
    shape: tuple
    train: bool
    step: int | None              # this rank's, then the agreed one (exchange)
    timestamp: int | None         # this rank's, then the largest of the ranks' (exchange)
    pad_to: int | None
    counts: np.ndarray | None
    unique: np.ndarray            # the batch's distinct keys, first occurrence first (LKP-2)
    inverse: np.ndarray


@dataclasses.dataclass
class ShardedLookup(BatchLookup):
    """One sharded lookup on its way through route -> exchange -> compute -> answer."""

    occurrences: np.ndarray
    is_hot: np.ndarray            # which distinct keys the hot replica answers (SHARD-20)
    outgoing: np.ndarray          # indexes into unique sent to the owners, grouped by owner
    send_counts: np.ndarray       # keys for each owner
    cold: np.ndarray              # indexes into unique whose rows come back, grouped by owner
    back_counts: np.ndarray       # rows coming back from each owner
    matrix: np.ndarray | None = None       # [source, owner] keys sent (exchange)
    back_matrix: np.ndarray | None = None  # [source, owner] rows sent back (exchange)


@dataclasses.dataclass
class ShardedApply:
    """One sharded apply_gradients on its way through route -> exchange -> compute -> answer."""

    keys: np.ndarray              # this rank's keys, one per gradient row
    grads: np.ndarray
    step: int
    keep: np.ndarray              # positions that travel: a key holding a row, no padding
    outgoing: np.ndarray          # positions sent to the owners, grouped by owner
    send_counts: np.ndarray


class StoreOverRanks(Store):
    """A table on several ranks over this rank's ``local`` store (the sharded and the replicated one):
    the communicator, the table's collective (SHARD-12, SHARD-22) and the routing twin of the local backend."""

    def __init__(self, local: Store, comm: Communicator | None, divide_gradients: bool):
        super().__init__(local.config, local.optimizer)
        self.local = local
        self.comm = world() if comm is None else comm
        self.rank, self.rank_size = self.comm.rank, self.comm.size
        self.tiered = local.tiered
        self.divide_gradients = bool(divide_gradients)   # all2all_gradients_op="sum_gradients_and_div_by_ranksize"
        self.collective = TableCollective(self.comm, self.name, lambda: config_fields(self))
        self.routing = routing_for(local)

    def stats(self) -> dict[str, int]:
        """The statistics ``_stats`` works out (the subclass's, SHARD-6, SHARD-17), as ``Store.stats`` gives them."""
        with self._lock:
            stats = self._stats()
        return {name: int(stats.get(name, 0)) for name in STAT_NAMES}

    def set_threshold(self, threshold: int) -> None:
        super().set_threshold(threshold)
        self.local.set_threshold(threshold)


class ShardedStore(StoreOverRanks):
    """One rank's handle on a table sharded over ``comm``'s ranks (spec/sharding.md)."""

    backend_name = "sharded"

    def __init__(self, local: Store, comm: Communicator | None = None, *, divide_gradients: bool = False,
                 hot_rows: int = 0, hot_update_step: int | None = None):
        super().__init__(local, comm, divide_gradients)
        self._positions = {name: 0 for name in _WRAPPER_COUNTERS}
        self._owner_stats = [local.stats()] * self.rank_size
        self._sync_positions = {name: 0 for name in _WRAPPER_COUNTERS}
        # SHARD-20: the hottest rows on every rank (not for tiered owners: their rows move between tiers)
        rows = hot.hot_rows(local.name, local.config.dim, hot_rows)
        self._hot = None if rows == 0 or local.tiered else HotReplica(
            local, self.comm, rows, hot.update_step(local.name) if hot_update_step is None else hot_update_step)

    # ------------------------------------------------------------- the collective side
    def agree(self, error: Exception | None, what: str, **fields) -> list[dict]:
        """Every rank's header for this call, or the same error on every rank (TableCollective.agree)."""
        return self.collective.agree(error, what, **fields)

    def share_stats(self, error: Exception | None, what: str, positions: dict | None = None, **fields) -> list[dict]:
        """After the owners' work: every owner's outcome and statistics (size() and capacity() are then
        known on every rank without another collective, SHARD-6).  ``positions``: this rank's position
        counters after the call, kept once every rank succeeded (default: as they are)."""
        positions = dict(self._positions if positions is None else positions)
        headers = self.agree(error, what, stats=None if error else self.local.stats(), positions=positions, **fields)
        self._positions = positions
        self._owner_stats = [h["stats"] for h in headers]
        self._sync_positions = {name: sum(h["positions"][name] for h in headers) for name in _WRAPPER_COUNTERS}
        return headers

    def owns(self, keys: np.ndarray) -> np.ndarray:
        """Which of ``keys`` this rank owns (SHARD-2): the filter of every load (SHARD-11)."""
        return owner_of(keys, self.rank_size) == self.rank

    # -------------------------------------------------------------- lookup
    def lookup(self, keys, *, train: bool = True, step: int | None = None, timestamp: int | None = None,
               pad_to: int | None = None, counts=None) -> LookupResult:
        with self.collective.guarded("training lookup" if train is True else "evaluation lookup", "lookup"):
            return super().lookup(keys, train=train, step=step, timestamp=timestamp, pad_to=pad_to, counts=counts)

    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        self.collective.begin(f"table {self.name!r}'s {'training' if train else 'evaluation'} lookup at step {step}")
        call = self.route_lookup(keys, shape, train, step, timestamp, pad_to, counts)
        received = self.exchange_keys(call)
        back_rows, back_admitted, error = self.compute_lookup(call, received)
        return self.answer_lookup(call, back_rows, back_admitted, error)

    def route_lookup(self, keys, shape, train, step, timestamp, pad_to, counts) -> ShardedLookup:
        """Route: this rank's distinct keys by owner, and which of them come back with a row."""
        unique, inverse, occurrences = self.routing.dedup(keys, counts)
        real = np.flatnonzero(unique != PADDING_KEY)          # padding never leaves the rank (SHARD-2)
        hot_replica = self._hot
        is_hot = hot_replica.is_hot(unique) if hot_replica is not None else np.zeros(len(unique), dtype=bool)
        # SHARD-20: hot keys get no row back; in evaluation they are not even sent (the owner counts nothing)
        travel = real if train else real[~is_hot[real]]
        order, send_counts = self.routing.route(unique[travel], self.rank_size)
        outgoing = travel[order]
        cold = outgoing[~is_hot[outgoing]]
        back_counts = np.bincount(owner_of(unique[cold], self.rank_size), minlength=self.rank_size)
        return ShardedLookup(keys, shape, train, step, timestamp, pad_to, counts, unique, inverse, occurrences,
                             is_hot, outgoing, send_counts, cold, back_counts)

    def exchange_keys(self, call: ShardedLookup) -> np.ndarray:
        """Exchange: every rank's header (the same checks everywhere, SHARD-4, SHARD-8), then the keys with
        their occurrence counts to their owners (SHARD-3).  Returns the [key, occurrences] this owner got."""
        headers = self.agree(None, "lookup", train=call.train, step=call.step, timestamp=call.timestamp,
                             n_unique=len(call.unique), pad_to=call.pad_to, counts=call.send_counts,
                             back=call.back_counts)
        call.step, call.timestamp = check_lookup_headers(headers, self.name, call.train)
        call.matrix = np.stack([h["counts"] for h in headers])    # [source, owner]
        call.back_matrix = np.stack([h["back"] for h in headers])
        send = np.stack([call.unique[call.outgoing], call.occurrences[call.outgoing]], axis=1)
        received, _ = self.comm.alltoallv(send, call.send_counts, call.matrix[:, self.rank])
        return received

    def compute_lookup(self, call: ShardedLookup, received: np.ndarray):
        """Compute: this owner's store looks up what it received (rank 0's keys first).  Returns the rows and
        admitted flags to send back (none for hot keys, SHARD-20) and this owner's error, or None: a failed
        owner (e.g. a full fixed-size shard) sends zero rows of the size the ranks expect, and every rank
        raises at the answer's agreement (SHARD-8), before anything of the call is kept on any rank."""
        hot_replica = self._hot

        def owner_lookup():
            answer = self.local.lookup(received[:, 0], train=call.train, step=call.step, timestamp=call.timestamp,
                                       counts=received[:, 1] if len(received) else None)
            back = answer.inverse if hot_replica is None else answer.inverse[~hot_replica.is_hot(received[:, 0])]
            return np.take(answer.rows, back, axis=0), np.asarray(answer.admitted)[back].astype(np.uint8)

        back, error = attempt(owner_lookup)
        if error is not None:
            n_back = int(call.back_matrix[:, self.rank].sum())
            back = np.zeros((n_back, self.config.dim), np.float32), np.zeros(n_back, np.uint8)
        return (*back, error)

    def answer_lookup(self, call: ShardedLookup, back_rows: np.ndarray, back_admitted: np.ndarray,
                      error: Exception | None = None) -> LookupResult:
        """Answer: rows and admitted flags back to the ranks that asked; this rank's result, its positions
        counted, the owners' outcome and statistics shared (SHARD-8, SHARD-6: every rank raises if one owner
        failed) and the hot replica refreshed when due (SHARD-20)."""
        rows_in, admitted_in = alltoallv_columns(self.comm, [back_rows, back_admitted],
                                                 call.back_matrix[:, self.rank], call.back_counts)
        unique, cold, is_hot, hot_replica = call.unique, call.cold, call.is_hot, self._hot
        dim = self.config.dim
        rows = np.empty((len(unique), dim), dtype=np.float32)
        rows[:] = self.config.default_row()
        admitted = np.zeros(len(unique), dtype=bool)
        rows[cold] = rows_in.reshape(-1, dim)
        admitted[cold] = admitted_in.astype(bool)
        hot_here = np.flatnonzero(is_hot)
        if len(hot_here):                  # a hot key holds a row: the replica's equals the owner's
            rows[hot_here] = hot_replica.rows(unique[hot_here])
            admitted[hot_here] = True
        positions = dict(self._positions)
        count_positions(positions, call.keys, call.inverse, admitted, is_hot)
        self.share_stats(error, "lookup", positions=positions)
        if hot_replica is not None and call.train:
            hot_replica.after_train_lookup(self.rank_size)
        return local_result(self, unique, rows, call.inverse.reshape(call.shape), admitted, call.train, call.pad_to)

    # ----------------------------------------------------------- gradients
    def apply_gradients(self, result, grad_rows, *, step: int, learning_rate=None) -> int:
        with self.collective.guarded("apply_gradients", "apply_gradients"):
            return super().apply_gradients(result, grad_rows, step=step, learning_rate=learning_rate)

    def _apply(self, keys, grads, mask, step):
        self.collective.begin(f"table {self.name!r}'s gradient exchange at step {step}")
        call = self.route_gradients(keys, grads, mask, step)
        recv_keys, recv_rows = self.exchange_gradients(call)
        headers, hot_keys, hot_sums = self.compute_apply(call, recv_keys, recv_rows)
        return self.answer_apply(call, headers, hot_keys, hot_sums)

    def route_gradients(self, keys, grads, mask, step) -> ShardedApply:
        """Route: the gradient rows of keys holding a row (no padding), by owner."""
        keep = np.flatnonzero(mask & (keys != PADDING_KEY))
        order, send_counts = self.routing.route(keys[keep], self.rank_size)
        return ShardedApply(keys, grads, step, keep, keep[order], send_counts)

    def exchange_gradients(self, call: ShardedApply) -> tuple[np.ndarray, np.ndarray]:
        """Exchange: every rank's header, then keys and rows to their owners (SHARD-5).  Returns what this
        owner received, rank 0's first."""
        headers = self.agree(None, "apply_gradients", step=call.step, counts=call.send_counts)
        self._positions["grad_rows_dropped"] += len(call.keys) - len(call.keep)
        check_apply_steps(headers, self.name)
        matrix = np.stack([h["counts"] for h in headers])
        rows = rows_to_send(call.grads[call.outgoing], self.divide_gradients, self.rank_size)
        recv_keys, recv_rows = alltoallv_columns(self.comm, [call.keys[call.outgoing], rows], call.send_counts,
                                                 matrix[:, self.rank])
        return recv_keys, recv_rows.reshape(-1, self.config.dim)

    def compute_apply(self, call: ShardedApply, recv_keys: np.ndarray, recv_rows: np.ndarray):
        """Compute: this owner applies what it received; the owners' outcome and statistics are shared.
        Returns (headers, the hot keys this owner applied, their sums)."""
        hot_keys, hot_sums = recv_keys[:0], recv_rows[:0]

        def owner_apply():
            nonlocal recv_keys, recv_rows, hot_keys, hot_sums
            if self._hot is not None and len(recv_keys):
                # SHARD-20: sum the duplicates here, as the store would (OPT-1, the same function), so the
                # sums this owner applies are known and go to every replica; the store gets distinct keys
                recv_keys, recv_rows, _ = sum_duplicates(recv_keys, recv_rows, recv_keys != PADDING_KEY)
                chosen = self._hot.is_hot(recv_keys)
                hot_keys, hot_sums = recv_keys[chosen], recv_rows[chosen]
            # duplicates (one per source rank) are summed in order of occurrence: source-rank order (OPT-1)
            # OPT-10: this apply's optimizer (its learning rate) on the owner's store too
            return self.local.apply_gradients(recv_keys, recv_rows, step=call.step,
                                              learning_rate=self.optimizer.learning_rate)

        applied, error = attempt(owner_apply, default=0)
        headers = self.share_stats(error, "apply_gradients", applied=applied, n_hot=len(hot_keys))
        return headers, hot_keys, hot_sums

    def answer_apply(self, call: ShardedApply, headers: list[dict], hot_keys, hot_sums) -> int:
        """Answer: every replica applies what the owners applied to hot keys (SHARD-20); the rows updated
        over every owner."""
        if self._hot is not None:
            sizes = [h["n_hot"] for h in headers]
            self._hot.apply(gather_rows(self.comm, hot_keys, sizes),
                            gather_rows(self.comm, hot_sums, sizes).reshape(-1, self.config.dim), call.step,
                            self.optimizer.learning_rate)
        return sum(h["applied"] for h in headers)

    # ------------------------------------------------------- eviction, size
    def evict(self, now: int | None = None) -> np.ndarray:
        with self.collective.guarded("evict", "evict"):
            return super().evict(now)

    def _evict(self, now):
        self.collective.begin(f"table {self.name!r}'s eviction")
        self.agree(None, "evict")          # every rank makes this call before any shard evicts (SHARD-22)
        evicted, error = attempt(lambda: self.local.evict(now), default=np.zeros(0, np.int64))
        headers = self.share_stats(error, "evict", evicted=evicted)
        evicted = np.sort(np.concatenate([h["evicted"] for h in headers]))
        if self._hot is not None:
            self._hot.drop(evicted)
        return evicted

    def _set_optimizer(self, optimizer) -> None:
        self.optimizer = optimizer
        self.local.set_optimizer(optimizer)       # the rank's shard applies (KERAS-13)

    def _size(self) -> int:
        return sum(s["size"] for s in self._owner_stats)

    def _capacity(self) -> int:
        return sum(s["capacity"] for s in self._owner_stats)

    def _stats(self) -> dict[str, int]:
        """SHARD-6: the table's statistics as of the last collective call."""
        stats = {name: sum(s[name] for s in self._owner_stats) for name in STAT_NAMES}
        for name in _PER_CALL:
            stats[name] = max(s[name] for s in self._owner_stats)
        for name in _POSITIONS:
            stats[name] = self._sync_positions[name]
        # rows this rank never sent (padding, keys without a row at lookup) + the owners' drops
        stats["grad_rows_dropped"] += self._sync_positions["grad_rows_dropped"]
        if self._hot is not None:          # SHARD-20: the replica's hot statistics
            stats["hot_rows"], stats["hot_refreshes"] = len(self._hot.keys), self._hot.refreshes
            stats["hot_hit_positions"] = self._sync_positions["hot_hit_positions"]
        return stats

    def _row_handles(self, keys):
        """Rows of the keys this rank owns in its own store; -1 for the others' (not collective)."""
        handles = np.full(keys.shape, -1, dtype=np.int64)
        mine = self.owns(keys)
        if mine.any():
            handles[mine] = self.local.row_handles(keys[mine])
        return handles

    # ------------------------------------------------ state and checkpoints
    def export(self) -> TableState:
        with self.collective.call("export"):
            return super().export()

    def _export(self) -> TableState:
        """SHARD-10: the whole table, merged from every owner in key order (collective)."""
        return merge_states([h["state"] for h in self.agree(None, "export", state=self.local.export())])

    def _import_state(self, state: TableState) -> None:
        """Keep this rank's keys of a whole-table state (SHARD-11); collective."""
        mine = slice_state(state, self.rank, self.rank_size)
        _, error = attempt(lambda: self.local.check_fits(len(mine.keys)))
        headers = self.agree(error, "load", n_keys=len(mine.keys), n_pending=len(mine.pending_keys))
        if sum(h["n_keys"] for h in headers) != len(state.keys) or \
                sum(h["n_pending"] for h in headers) != len(state.pending_keys):
            raise UsageError(f"table {self.name!r}: load: the ranks loaded {sum(h['n_keys'] for h in headers)} of "
                             f"{len(state.keys)} keys; every key must be loaded by exactly one rank (SHARD-11)")
        self.local.import_state(mine)        # the tiers import the same way (CON-10)
        self.share_stats(None, "load")

    def save(self, directory, *, incremental: bool = False) -> str:
        """SHARD-10: each rank writes its slice, rank 0 merges them into the one-process layout and
        switches it in atomically (CKPT-*); every rank returns the path or raises (distributed/checkpoint.py)."""
        with self.collective.call("save"):
            incremental = self.collective.open(lambda: self._check_bool("incremental", incremental))
            with self._lock:
                return sharded_checkpoint.save(self, directory, incremental)

    def load(self, directory) -> None:
        """SHARD-11: every rank streams the merged checkpoint and keeps ``key mod rank_size == rank``."""
        with self.collective.call("load"):
            self.collective.open()
            if self._hot is not None:
                self._hot.clear()          # rows change: the hot set is empty until its next refresh (SHARD-20)
            with self._lock:
                sharded_checkpoint.load(self, directory)

    def plan_warm_start(self, directory, *, source_table: str | None = None, now: int | None = None, after=None):
        """WS-7 on this rank's keys of the checkpoint (SHARD-11's filter); collective."""
        with self.collective.call("plan_warm_start"):
            return sharded_checkpoint.plan_warm_start(self, directory, source_table, now, after)

    def apply_warm_start(self, plan) -> int:
        """WS-3 on each owner's slice; collective.  Returns the keys loaded over every owner."""
        with self.collective.call("apply_warm_start"):
            self.collective.open()
            if self._hot is not None:
                self._hot.clear()          # rows change: the hot set is empty until its next refresh (SHARD-20)
            with self._lock:
                return sharded_checkpoint.apply_warm_start(self, plan)

    def table_clock(self) -> tuple[int | None, str | None]:
        """The latest owner's clock (as ``export()`` has it), without gathering the table; collective."""
        with self.collective.call("table_clock"), self._lock:
            return agreed_clock(self.collective, self.local)


def merge_states(states: list[TableState]) -> TableState:
    """One table from disjoint shards: keys merged ascending by state.py's one key-order merge, shard by
    shard (two ascending runs: a linear merge), the clock the latest (SHARD-10)."""
    merged = states[0]
    for shard in states[1:]:
        every_key, every_pending = np.ones(len(merged.keys), bool), np.ones(len(merged.pending_keys), bool)
        keys, pick = merge_in_key_order(merged.keys, every_key, shard.keys)
        pending_keys, pick_pending = merge_in_key_order(merged.pending_keys, every_pending, shard.pending_keys)
        merged = dataclasses.replace(
            merged, keys=keys, values=pick(merged.values, shard.values),
            slots={name: pick(merged.slots[name], shard.slots[name]) for name in merged.slots},
            counts=pick(merged.counts, shard.counts), last_seen=pick(merged.last_seen, shard.last_seen),
            pending_keys=pending_keys, pending_counts=pick_pending(merged.pending_counts, shard.pending_counts),
            pending_last_seen=pick_pending(merged.pending_last_seen, shard.pending_last_seen))
    clocks = [s.clock for s in states if s.clock is not None]
    sources = {s.clock_source for s in states if s.clock_source is not None}
    return dataclasses.replace(merged, clock=max(clocks) if clocks else None,
                               clock_source=sources.pop() if sources else None)


def slice_state(state: TableState, rank: int, rank_size: int) -> TableState:
    """The keys of ``state`` that ``rank`` owns (SHARD-2, SHARD-11); the clock is the table's."""
    mine = owner_of(state.keys, rank_size) == rank
    pending = owner_of(state.pending_keys, rank_size) == rank
    return dataclasses.replace(
        state, keys=state.keys[mine], values=state.values[mine],
        slots={name: values[mine] for name, values in state.slots.items()},
        counts=state.counts[mine], last_seen=state.last_seen[mine], pending_keys=state.pending_keys[pending],
        pending_counts=state.pending_counts[pending], pending_last_seen=state.pending_last_seen[pending])
