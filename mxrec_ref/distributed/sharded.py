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
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging

import numpy as np

from .. import hot
from ..contract import Store, sum_duplicates
from ..errors import MxrecError, UsageError
from ..state import PADDING_KEY, STAT_NAMES, LookupResult, TableState
from . import checkpoint as sharded_checkpoint
from .comm import Communicator, gather_rows, world
from .hot_replica import HotReplica

try:
    # the O(n) kernels (cext/_route.pyx); the numpy versions below are their oracle.  Imported by its full
    # name: the extension is no source module, and ``from .. import _route`` reads as importing the package
    # (tests/test_import_graph.py), which imports backends, which builds sharded stores (open_store(comm=)).
    import mxrec_ref._route as _route
except ImportError:            # extension not built: numpy (sort-based) gives the same results
    _route = None

logger = logging.getLogger("mxrec_ref.distributed")

# Statistics that count calls of the table: every owner sees every call, so any owner's value is the
# table's; the others are summed over owners, except the positions, counted by the wrapper (SHARD-6).
_PER_CALL = ("train_lookups", "eval_lookups", "grad_applies", "hot_refreshes")
_POSITIONS = ("key_positions", "padding_positions", "default_positions")
_WRAPPER_COUNTERS = _POSITIONS + ("grad_rows_dropped", "hot_hit_positions")  # counted where the batch is, summed


def owner_of(keys: np.ndarray, rank_size: int) -> np.ndarray:
    """SHARD-2: the rank that holds each key: ``key mod rank_size``, floor modulo (never negative)."""
    return np.mod(np.asarray(keys, dtype=np.int64), rank_size)


def route(keys: np.ndarray, rank_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, counts): ``keys[order]`` grouped by owner, rank 0's first, first-occurrence order kept
    inside each group; ``counts[d]`` keys for rank d.  A counting sort (cext/_route.pyx)."""
    if _route is not None:
        return _route.route(np.ascontiguousarray(keys, dtype=np.int64), rank_size)
    return route_numpy(keys, rank_size)


def route_numpy(keys: np.ndarray, rank_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``route`` in numpy: its stable sort of 16-bit integers is a radix sort, O(n) too."""
    owners = owner_of(keys, rank_size)
    narrow = owners.astype(np.uint16) if rank_size <= 2**16 else owners
    order = np.argsort(narrow, kind="stable")
    return order, np.bincount(owners, minlength=rank_size).astype(np.int64)


def dedup(keys: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct keys in order of first occurrence, the inverse index and each key's number of
    accesses (LKP-2, ADM-2), as a store computes them: a hash table, O(n) (cext/_route.pyx)."""
    if _route is not None:
        return _route.first_occurrence(np.ascontiguousarray(keys, dtype=np.int64), counts)
    return dedup_numpy(keys, counts)


def dedup_numpy(keys: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``dedup`` by sorting (np.unique), O(n log n)."""
    if keys.size == 0:
        return keys.copy(), np.zeros(0, np.int64), np.zeros(0, np.int64)
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    inverse = rank[inverse.reshape(-1)]
    occurrences = np.zeros(order.size, dtype=np.int64)
    np.add.at(occurrences, inverse, 1 if counts is None else counts)
    return unique[order], inverse.astype(np.int64), occurrences


class ShardedStore(Store):
    """One rank's handle on a table sharded over ``comm``'s ranks (spec/sharding.md)."""

    backend_name = "sharded"

    def __init__(self, local: Store, comm: Communicator | None = None, *, divide_gradients: bool = False,
                 hot_rows: int = 0, hot_update_step: int | None = None):
        super().__init__(local.config, local.optimizer)
        self.local = local
        self.comm = world() if comm is None else comm
        self.rank, self.rank_size = self.comm.rank, self.comm.size
        self.tiered = local.tiered
        self.divide_gradients = bool(divide_gradients)   # all2all_gradients_op="sum_gradients_and_div_by_ranksize"
        self._calls = 0                                  # collective calls begun (SHARD-22's call counter)
        self._call_name: str | None = None               # the collective call running now (SHARD-22)
        self._config_agreed = False                      # the ranks compared the table's config (SHARD-22)
        self._started = False                            # the current call has reached its first collective
        self._positions = {name: 0 for name in _WRAPPER_COUNTERS}
        self._owner_stats = [local.stats()] * self.rank_size
        self._sync_positions = {name: 0 for name in _WRAPPER_COUNTERS}
        # SHARD-20: the hottest rows on every rank (not for tiered owners: their rows move between tiers)
        rows = hot.hot_rows(local.name, local.config.dim, hot_rows)
        self._hot = None if rows == 0 or local.tiered else HotReplica(
            local, self.comm, rows, hot.update_step(local.name) if hot_update_step is None else hot_update_step)

    # ------------------------------------------------------------- helpers
    @contextlib.contextmanager
    def _call(self, name: str):
        """One collective call of the table (SHARD-22): it is counted, and every header it exchanges names
        it.  A call made inside another (a replica's load imports a state) is part of the outer one."""
        if self._call_name is not None:
            yield
            return
        self._calls += 1
        self._call_name = name
        try:
            yield
        finally:
            self._call_name = None

    def _open(self, check=None):
        """The opening exchange of a call whose first step would change something (SHARD-22): the ranks
        agree on the call before it.  ``check()`` (the call's argument checks) runs first; its error fails
        every rank (SHARD-8).  Returns what ``check`` returns."""
        error, value = None, None
        try:
            value = check() if check is not None else None
        except MxrecError as failed:
            error = failed
        self._agree(error, self._call_name or "call")
        return value

    def _config_fields(self) -> dict:
        """What every rank must configure alike for a table (SHARD-22), in the order it is compared."""
        config = self.config
        return {"name": config.name, "dim": config.dim, "key_dtype": config.key_dtype,
                "optimizer": self.optimizer.describe(), "access_threshold": config.access_threshold,
                "eviction_threshold": config.eviction_threshold, "faae_coefficient": config.faae_coefficient,
                "device_vocabulary_size": config.device_vocabulary_size,
                "host_vocabulary_size": config.host_vocabulary_size, "ssd_vocabulary_size": config.ssd_vocabulary_size,
                "dynamic_expansion": config.dynamic_expansion, "layout": type(self).__name__}

    def _agree(self, error: Exception | None, what: str, **fields) -> list[dict]:
        """Every rank's header for this call; raises on every rank if the ranks make different calls or
        configure the table differently (SHARD-22), or if any rank failed (SHARD-8): the failed rank
        re-raises its own error, the others a UsageError naming it."""
        header = dict(fields, error=error, table=self.name, call=self._call_name or what, counter=self._calls)
        if not self._config_agreed:
            header["config"] = self._config_fields()
        headers = self.comm.allgather(header)
        check_same_call(headers)
        self._config_agreed = True
        for source, header in enumerate(headers):
            if header["error"] is not None:
                if source == self.rank:
                    raise header["error"]
                raise UsageError(f"table {self.name!r}: {what}: rank {source} of {self.rank_size} failed this "
                                 f"call ({header['error']}); every rank raised") from None
        return headers

    def _share_stats(self, error: Exception | None, what: str, **fields) -> list[dict]:
        """After the owners' work: every owner's outcome and statistics (size() and capacity() are then
        known on every rank without another collective, SHARD-6)."""
        headers = self._agree(error, what, stats=None if error else self.local.stats(),
                              positions=dict(self._positions), **fields)
        self._owner_stats = [h["stats"] for h in headers]
        self._sync_positions = {name: sum(h["positions"][name] for h in headers) for name in _WRAPPER_COUNTERS}
        return headers

    # -------------------------------------------------------------- lookup
    def lookup(self, keys, *, train: bool = True, step: int | None = None, timestamp: int | None = None,
               pad_to: int | None = None, counts=None) -> LookupResult:
        self._started = False
        try:
            with self._call("training lookup" if train is True else "evaluation lookup"):
                try:
                    return super().lookup(keys, train=train, step=step, timestamp=timestamp, pad_to=pad_to,
                                          counts=counts)
                except MxrecError as error:
                    self._tell_others(error, "lookup")
                    raise
        finally:
            self.comm.context = Communicator.context      # later collectives are not this call's

    def _tell_others(self, error: Exception, what: str) -> None:
        """The contract rejected this rank's arguments before any collective: the other ranks are
        waiting in the first one, so join it with the error; every rank raises (SHARD-8)."""
        if not self._started:
            self._started = True
            self.comm.context = f"table {self.name!r}'s {what}"
            self._agree(error, what)

    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        self._started = True
        self.comm.context = f"table {self.name!r}'s {'training' if train else 'evaluation'} lookup at step {step}"
        unique, inverse, occurrences = dedup(keys, counts)
        real = np.flatnonzero(unique != PADDING_KEY)          # padding never leaves the rank (SHARD-2)
        hot_replica = self._hot
        is_hot = hot_replica.is_hot(unique) if hot_replica is not None else np.zeros(len(unique), dtype=bool)
        # SHARD-20: hot keys get no row back; in evaluation they are not even sent (the owner counts nothing)
        travel = real if train else real[~is_hot[real]]
        order, send_counts = route(unique[travel], self.rank_size)
        outgoing = travel[order]
        cold = outgoing[~is_hot[outgoing]]
        back_counts = np.bincount(owner_of(unique[cold], self.rank_size), minlength=self.rank_size)
        headers = self._agree(None, "lookup", train=train, step=step, timestamp=timestamp,
                              n_unique=len(unique), pad_to=pad_to, counts=send_counts, back=back_counts)
        step, timestamp = self._check_headers(headers, train, pad_to)
        matrix = np.stack([h["counts"] for h in headers])    # [source, owner]
        back_matrix = np.stack([h["back"] for h in headers])

        send = np.stack([unique[outgoing], occurrences[outgoing]], axis=1)
        received, _ = self.comm.alltoallv(send, send_counts, matrix[:, self.rank])
        error = None
        try:
            answer = self.local.lookup(received[:, 0], train=train, step=step, timestamp=timestamp,
                                       counts=received[:, 1] if len(received) else None)
            back = answer.inverse if hot_replica is None else answer.inverse[~hot_replica.is_hot(received[:, 0])]
            back_rows = np.take(answer.rows, back, axis=0)
            back_admitted = np.asarray(answer.admitted)[back].astype(np.uint8)
        except MxrecError as failed:     # e.g. a fixed-size shard is full: every rank raises (SHARD-8)
            error = failed
        self._agree(error, "lookup")
        rows_in, _ = self.comm.alltoallv(back_rows, back_matrix[:, self.rank], back_counts)
        admitted_in, _ = self.comm.alltoallv(back_admitted, back_matrix[:, self.rank], back_counts)

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
            self._positions["hot_hit_positions"] += int(np.count_nonzero(is_hot[inverse]))
        self._count_lookup_positions(keys, inverse, admitted)
        self._share_stats(None, "lookup")
        if hot_replica is not None and train:
            hot_replica.after_train_lookup(self.rank_size)
        return self._result(unique, rows, inverse.reshape(shape), admitted, train, pad_to)

    def _result(self, unique, rows, inverse, admitted, train: bool, pad_to) -> LookupResult:
        """The lookup's result, its unique keys padded to ``pad_to`` with PADDING_KEY and default rows
        (LKP-4)."""
        n_unique = len(unique)
        if pad_to is not None and pad_to > n_unique:
            extra = pad_to - n_unique
            unique = np.concatenate([unique, np.full(extra, PADDING_KEY, dtype=np.int64)])
            rows = np.concatenate([rows, np.tile(self.config.default_row(), (extra, 1))])
            admitted = np.concatenate([admitted, np.zeros(extra, dtype=bool)])
        return LookupResult(self.name, unique, rows, inverse, admitted, train, n_unique, id(self))

    def _check_headers(self, headers: list[dict], train: bool, pad_to) -> tuple[int | None, int | None]:
        """Every rank runs the same call (SHARD-8) and fits send_count (SHARD-4); the batch
        timestamp is the largest of the ranks' (SHARD-3).  The same check, the same error, everywhere."""
        modes = {(h["train"], h["step"], h["timestamp"] is None) for h in headers}
        if len(modes) > 1:
            seen = ", ".join(f"rank {r}: train={h['train']} step={h['step']} timestamp={h['timestamp']}"
                             for r, h in enumerate(headers))
            raise UsageError(f"table {self.name!r}: step: the ranks disagree on this lookup ({seen}); every rank "
                             f"must run the same steps in the same order")
        for source, header in enumerate(headers):
            if header["pad_to"] is not None and header["n_unique"] > header["pad_to"]:
                raise UsageError(f"table {self.name!r}: send_count: rank {source} of {self.rank_size} has "
                                 f"{header['n_unique']} unique keys at step {header['step']}, more than "
                                 f"send_count={header['pad_to']}; raise send_count")
        stamps = [h["timestamp"] for h in headers if h["timestamp"] is not None]
        return headers[0]["step"], (max(stamps) if stamps and train else None)

    def _count_lookup_positions(self, keys, inverse, admitted) -> None:
        """STAT-3 over this rank's batch (the owners see deduplicated keys)."""
        padding = int(np.count_nonzero(keys == PADDING_KEY))
        real = keys.size - padding
        with_row = int(np.count_nonzero(admitted[inverse])) if keys.size else 0
        self._positions["key_positions"] += real
        self._positions["padding_positions"] += padding
        self._positions["default_positions"] += real - with_row

    # ----------------------------------------------------------- gradients
    def apply_gradients(self, result, grad_rows, *, step: int, learning_rate=None) -> int:
        self._started = False
        try:
            with self._call("apply_gradients"):
                try:
                    return super().apply_gradients(result, grad_rows, step=step, learning_rate=learning_rate)
                except MxrecError as error:
                    self._tell_others(error, "apply_gradients")
                    raise
        finally:
            self.comm.context = Communicator.context

    def _apply(self, keys, grads, mask, step):
        self._started = True
        self.comm.context = f"table {self.name!r}'s gradient exchange at step {step}"
        keep = np.flatnonzero(mask & (keys != PADDING_KEY))
        order, send_counts = route(keys[keep], self.rank_size)
        headers = self._agree(None, "apply_gradients", step=step, counts=send_counts)
        self._positions["grad_rows_dropped"] += len(keys) - len(keep)
        if len({h["step"] for h in headers}) > 1:
            raise UsageError(f"table {self.name!r}: step: the ranks apply gradients of different steps "
                             f"({[h['step'] for h in headers]}); every rank must run the same steps")
        matrix = np.stack([h["counts"] for h in headers])
        outgoing = keep[order]
        rows = grads[outgoing]
        if self.divide_gradients:         # SHARD-5: sum_gradients_and_div_by_ranksize
            rows = rows * np.float32(1.0 / self.rank_size)
        recv_keys, _ = self.comm.alltoallv(keys[outgoing], send_counts, matrix[:, self.rank])
        recv_rows, _ = self.comm.alltoallv(rows, send_counts, matrix[:, self.rank])
        error, applied = None, 0
        recv_rows = recv_rows.reshape(-1, self.config.dim)
        hot_keys, hot_sums = recv_keys[:0], recv_rows[:0]
        try:
            if self._hot is not None and len(recv_keys):
                # SHARD-20: sum the duplicates here, as the store would (OPT-1, the same function), so the
                # sums this owner applies are known and go to every replica; the store gets distinct keys
                recv_keys, recv_rows, _ = sum_duplicates(recv_keys, recv_rows, recv_keys != PADDING_KEY)
                chosen = self._hot.is_hot(recv_keys)
                hot_keys, hot_sums = recv_keys[chosen], recv_rows[chosen]
            # duplicates (one per source rank) are summed in order of occurrence: source-rank order (OPT-1)
            # OPT-10: this apply's optimizer (its learning rate) on the owner's store too
            applied = self.local.apply_gradients(recv_keys, recv_rows, step=step,
                                                 learning_rate=self.optimizer.learning_rate)
        except MxrecError as failed:
            error = failed
        headers = self._share_stats(error, "apply_gradients", applied=applied, n_hot=len(hot_keys))
        if self._hot is not None:          # every replica applies what the owners applied to hot keys
            sizes = [h["n_hot"] for h in headers]
            self._hot.apply(gather_rows(self.comm, hot_keys, sizes),
                            gather_rows(self.comm, hot_sums, sizes).reshape(-1, self.config.dim), step,
                            self.optimizer.learning_rate)
        return sum(h["applied"] for h in headers)

    # ------------------------------------------------------- eviction, size
    def evict(self, now: int | None = None) -> np.ndarray:
        self._started = False
        try:
            with self._call("evict"):
                try:
                    return super().evict(now)
                except MxrecError as error:
                    self._tell_others(error, "evict")
                    raise
        finally:
            self.comm.context = Communicator.context

    def _evict(self, now):
        self._started = True
        self.comm.context = f"table {self.name!r}'s eviction"
        self._agree(None, "evict")          # every rank makes this call before any shard evicts (SHARD-22)
        error, evicted = None, np.zeros(0, np.int64)
        try:
            evicted = self.local.evict(now)
        except MxrecError as failed:
            error = failed
        headers = self._share_stats(error, "evict", evicted=evicted)
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

    def stats(self) -> dict[str, int]:
        with self._lock:
            stats = self._stats()
        return {name: int(stats.get(name, 0)) for name in STAT_NAMES}

    def set_threshold(self, threshold: int) -> None:
        super().set_threshold(threshold)
        self.local.set_threshold(threshold)

    def _row_handles(self, keys):
        """Rows of the keys this rank owns in its own store; -1 for the others' (not collective)."""
        handles = np.full(keys.shape, -1, dtype=np.int64)
        mine = owner_of(keys, self.rank_size) == self.rank
        if mine.any():
            handles[mine] = self.local.row_handles(keys[mine])
        return handles

    # ------------------------------------------------ state and checkpoints
    def export(self) -> TableState:
        with self._call("export"):
            return super().export()

    def _export(self) -> TableState:
        """SHARD-10: the whole table, merged from every owner in key order (collective)."""
        return merge_states([h["state"] for h in self._agree(None, "export", state=self.local.export())])

    def _import_state(self, state: TableState) -> None:
        """Keep this rank's keys of a whole-table state (SHARD-11); collective."""
        mine = slice_state(state, self.rank, self.rank_size)
        error = None
        try:
            self.local.check_fits(len(mine.keys))
        except MxrecError as failed:
            error = failed
        headers = self._agree(error, "load", n_keys=len(mine.keys), n_pending=len(mine.pending_keys))
        if sum(h["n_keys"] for h in headers) != len(state.keys) or \
                sum(h["n_pending"] for h in headers) != len(state.pending_keys):
            raise UsageError(f"table {self.name!r}: load: the ranks loaded {sum(h['n_keys'] for h in headers)} of "
                             f"{len(state.keys)} keys; every key must be loaded by exactly one rank (SHARD-11)")
        self.local.import_state(mine)        # the tiers import the same way (CON-10)
        self._share_stats(None, "load")

    def _owns(self, keys: np.ndarray) -> np.ndarray:
        """Which of ``keys`` this rank owns (SHARD-2): the filter of every load (SHARD-11)."""
        return owner_of(keys, self.rank_size) == self.rank

    def save(self, directory, *, incremental: bool = False) -> str:
        """SHARD-10: each rank writes its slice, rank 0 merges them into the one-process layout and
        switches it in atomically (CKPT-*); every rank returns the path or raises (distributed/checkpoint.py)."""
        with self._call("save"):
            incremental = self._open(lambda: self._check_bool("incremental", incremental))
            with self._lock:
                return sharded_checkpoint.save(self, directory, incremental)

    def load(self, directory) -> None:
        """SHARD-11: every rank streams the merged checkpoint and keeps ``key mod rank_size == rank``."""
        with self._call("load"):
            self._open()
            if self._hot is not None:
                self._hot.clear()          # rows change: the hot set is empty until its next refresh (SHARD-20)
            with self._lock:
                sharded_checkpoint.load(self, directory)

    def plan_warm_start(self, directory, *, source_table: str | None = None, now: int | None = None, after=None):
        """WS-7 on this rank's keys of the checkpoint (SHARD-11's filter); collective."""
        with self._call("plan_warm_start"):
            return sharded_checkpoint.plan_warm_start(self, directory, source_table, now, after)

    def apply_warm_start(self, plan) -> int:
        """WS-3 on each owner's slice; collective.  Returns the keys loaded over every owner."""
        with self._call("apply_warm_start"):
            self._open()
            if self._hot is not None:
                self._hot.clear()          # rows change: the hot set is empty until its next refresh (SHARD-20)
            with self._lock:
                return sharded_checkpoint.apply_warm_start(self, plan)

    def table_clock(self) -> tuple[int | None, str | None]:
        """The latest owner's clock (as ``export()`` has it), without gathering the table; collective."""
        with self._call("table_clock"), self._lock:
            clocks = [h["clock"] for h in self._agree(None, "table_clock", clock=self.local.table_clock())]
        known = [clock for clock in clocks if clock[0] is not None]
        return max(known) if known else (None, None)


def check_same_call(headers: list[dict]) -> None:
    """SHARD-22 on the headers of one exchange (the same list on every rank, so every rank raises the same
    error, before the call changes anything): the ranks configure the table alike -- compared at its first
    call -- and make the same call of the same table, counted alike."""
    configs = [h.get("config") for h in headers]
    if all(c is not None for c in configs):
        for field in configs[0]:
            values = [c.get(field) for c in configs]
            if any(v != values[0] for v in values[1:]):
                seen = ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
                raise UsageError(f"table {headers[0]['table']!r}: {field}: the ranks configure this table differently "
                                 f"({seen}); every rank must create a sharded table with the same name, dim, key "
                                 f"dtype, optimizer, thresholds and storage (SHARD-22)")
    calls = [(h["table"], h["call"], h["counter"]) for h in headers]
    if any(call != calls[0] for call in calls[1:]):
        seen = "; ".join(f"rank {r}: {call} of table {table!r} (its call {counter})"
                         for r, (table, call, counter) in enumerate(calls))
        raise UsageError(f"table {headers[0]['table']!r}: the ranks make different collective calls ({seen}); every "
                         f"rank must make the same calls of every sharded table in the same order (SHARD-8, SHARD-22); "
                         f"nothing was changed")


def merge_states(states: list[TableState]) -> TableState:
    """One table from disjoint shards: keys merged ascending, the clock the latest (SHARD-10)."""
    first = states[0]
    order = np.argsort(np.concatenate([s.keys for s in states]), kind="stable")
    pending_order = np.argsort(np.concatenate([s.pending_keys for s in states]), kind="stable")
    join = lambda name: np.concatenate([getattr(s, name) for s in states])[order]  # noqa: E731
    join_pending = lambda name: np.concatenate([getattr(s, name) for s in states])[pending_order]  # noqa: E731
    clocks = [s.clock for s in states if s.clock is not None]
    sources = {s.clock_source for s in states if s.clock_source is not None}
    return TableState(
        keys=join("keys"), values=join("values"),
        slots={name: np.concatenate([s.slots[name] for s in states])[order] for name in first.slots},
        counts=join("counts"), last_seen=join("last_seen"),
        pending_keys=join_pending("pending_keys"), pending_counts=join_pending("pending_counts"),
        pending_last_seen=join_pending("pending_last_seen"),
        clock=max(clocks) if clocks else None, clock_source=sources.pop() if sources else None)


def slice_state(state: TableState, rank: int, rank_size: int) -> TableState:
    """The keys of ``state`` that ``rank`` owns (SHARD-2, SHARD-11); the clock is the table's."""
    mine = owner_of(state.keys, rank_size) == rank
    pending = owner_of(state.pending_keys, rank_size) == rank
    return dataclasses.replace(
        state, keys=state.keys[mine], values=state.values[mine],
        slots={name: values[mine] for name, values in state.slots.items()},
        counts=state.counts[mine], last_seen=state.last_seen[mine], pending_keys=state.pending_keys[pending],
        pending_counts=state.pending_counts[pending], pending_last_seen=state.pending_last_seen[pending])
