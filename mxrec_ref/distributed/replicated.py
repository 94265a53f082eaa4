"""A data-parallel table (mxRec's ``is_dp=True``): a full replica on every rank (spec/sharding.md, SHARD-16..18).

Every rank holds the whole table in its own store.  The replicas stay identical because every rank
feeds its store the same calls with the same arguments: a training lookup gathers every rank's
deduplicated keys with their occurrence counts (rank 0's first) and every replica looks them all up;
``apply_gradients`` gathers every rank's gradient rows in rank order and every replica applies them
all (OPT-1 sums a key's rows in order of occurrence: rank order, as SHARD-7 wants).  Rows never
travel: each rank reads its own batch's rows from its replica.  Because the concatenation of the
ranks' first-occurrence lists keeps the global first-occurrence order, a replica is bit for bit the
store of one process that ran the ranks' batches concatenated in rank order (SHARD-9), row
placement included.  The checkpoint is written once, by rank 0, and every rank loads all of it.

A replica is no sharded table: it holds what it needs -- its local store and the table's
``TableCollective`` (collective.py), which keeps the calls collective -- and shares the lookup checks,
the position counting and the result with ``ShardedStore`` as functions (sharded.py).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from .. import checkpoint
from ..contract import Store
from ..state import PADDING_KEY, STAT_NAMES, LookupResult, TableState
from .collective import attempt
from .comm import Communicator, gather_rows
from .sharded import (BatchLookup, StoreOverRanks, agreed_clock, check_apply_steps, check_lookup_headers,
                      local_result, rows_to_send)

# statistics a replica counts over every rank's batch (SHARD-17)
_TABLE_POSITIONS = ("key_positions", "padding_positions", "default_positions", "grad_rows_dropped")


@dataclasses.dataclass
class ReplicatedLookup(BatchLookup):
    """One replicated lookup on its way through route -> exchange -> compute -> answer."""

    real: np.ndarray              # indexes into unique of the keys that travel (no padding, SHARD-2)
    mine: np.ndarray              # [key, occurrences, positions] of those keys
    sizes: np.ndarray | None = None   # every rank's number of travelling keys (exchange)
    padding: int = 0                  # padding positions over every rank's batch (exchange)


class ReplicatedStore(StoreOverRanks):
    """One rank's replica of a data-parallel table (SHARD-16).  Like every table on several ranks its
    public calls are collective (SHARD-8), and a call that fails on one rank fails on every rank."""

    backend_name = "replicated"

    def __init__(self, local: Store, comm: Communicator | None = None, *, divide_gradients: bool = False):
        super().__init__(local, comm, divide_gradients)
        self._positions = {name: 0 for name in _TABLE_POSITIONS}    # the whole batch's, every rank (SHARD-17)

    # -------------------------------------------------------------- lookup
    def lookup(self, keys, *, train: bool = True, step: int | None = None, timestamp: int | None = None,
               pad_to: int | None = None, counts=None) -> LookupResult:
        with self.collective.guarded("training lookup" if train is True else "evaluation lookup", "lookup"):
            return super().lookup(keys, train=train, step=step, timestamp=timestamp, pad_to=pad_to, counts=counts)

    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        self.collective.begin(f"table {self.name!r}'s {'training' if train else 'evaluation'} lookup at step {step}")
        call = self.route_lookup(keys, shape, train, step, timestamp, pad_to, counts)
        every = self.exchange_keys(call)
        answer = self.compute_lookup(call, every)
        return self.answer_lookup(call, every, answer)

    def route_lookup(self, keys, shape, train, step, timestamp, pad_to, counts) -> ReplicatedLookup:
        """Route: this rank's distinct keys, each with its occurrence count (admission weight) and its
        number of positions (statistics); every replica gets them all."""
        unique, inverse, occurrences = self.routing.dedup(keys, counts)
        real = np.flatnonzero(unique != PADDING_KEY)            # padding never leaves the rank (SHARD-2)
        positions = np.bincount(inverse.reshape(-1), minlength=len(unique)).astype(np.int64)
        mine = np.stack([unique[real], occurrences[real], positions[real]], axis=1)
        return ReplicatedLookup(keys, shape, train, step, timestamp, pad_to, counts, unique, inverse, real, mine)

    def exchange_keys(self, call: ReplicatedLookup) -> np.ndarray:
        """Exchange: every rank's header (the same checks everywhere, SHARD-4, SHARD-8), then every rank's
        [key, occurrences, positions], rank 0's first, on every rank."""
        headers = self.collective.agree(None, "lookup", train=call.train, step=call.step, timestamp=call.timestamp,
                                        n_unique=len(call.unique), pad_to=call.pad_to, n_real=len(call.real),
                                        padding=int(np.count_nonzero(call.keys == PADDING_KEY)))
        call.step, call.timestamp = check_lookup_headers(headers, self.name, call.train)
        call.sizes = np.array([h["n_real"] for h in headers], np.int64)
        call.padding = sum(h["padding"] for h in headers)
        return gather_rows(self.comm, call.mine, call.sizes)

    def compute_lookup(self, call: ReplicatedLookup, every: np.ndarray) -> LookupResult:
        """Compute: the same call on every replica, so every replica raises the same error if it fails
        (same state, same input)."""
        return self.local.lookup(every[:, 0], train=call.train, step=call.step, timestamp=call.timestamp,
                                 counts=every[:, 1] if len(every) else None)

    def answer_lookup(self, call: ReplicatedLookup, every: np.ndarray, answer: LookupResult) -> LookupResult:
        """Answer: this rank's rows from the replica's answer; positions counted over every rank's batch."""
        start = int(call.sizes[:self.rank].sum())
        my_slots = answer.inverse[start:start + len(call.real)]
        unique, real = call.unique, call.real
        dim = self.config.dim
        rows = np.empty((len(unique), dim), dtype=np.float32)
        rows[:] = self.config.default_row()
        admitted = np.zeros(len(unique), dtype=bool)
        rows[real] = np.take(answer.rows, my_slots, axis=0)
        admitted[real] = np.asarray(answer.admitted)[my_slots]
        # SHARD-17: STAT-3 over the whole batch, from the positions each key carried (no further exchange)
        admitted_every = np.asarray(answer.admitted)[answer.inverse]
        table = self._positions
        n_positions = int(every[:, 2].sum()) if len(every) else 0
        table["key_positions"] += n_positions
        table["padding_positions"] += call.padding
        table["default_positions"] += n_positions - (int(every[admitted_every, 2].sum()) if len(every) else 0)
        return local_result(self, unique, rows, call.inverse.reshape(call.shape), admitted, call.train, call.pad_to)

    # ----------------------------------------------------------- gradients
    def apply_gradients(self, result, grad_rows, *, step: int, learning_rate=None) -> int:
        with self.collective.guarded("apply_gradients", "apply_gradients"):
            return super().apply_gradients(result, grad_rows, step=step, learning_rate=learning_rate)

    def _apply(self, keys, grads, mask, step):
        self.collective.begin(f"table {self.name!r}'s gradient exchange at step {step}")
        keep = np.flatnonzero(mask & (keys != PADDING_KEY))
        headers = self.collective.agree(None, "apply_gradients", step=step, n=len(keep), dropped=len(keys) - len(keep))
        check_apply_steps(headers, self.name)
        rows = rows_to_send(grads[keep], self.divide_gradients, self.rank_size)
        sizes = np.array([h["n"] for h in headers], np.int64)
        every_keys = gather_rows(self.comm, keys[keep], sizes)
        every_rows = gather_rows(self.comm, rows, sizes).reshape(-1, self.config.dim)
        self._positions["grad_rows_dropped"] += sum(h["dropped"] for h in headers)
        # duplicates (one per rank) are summed in order of occurrence: rank order (OPT-1, SHARD-7)
        return self.local.apply_gradients(every_keys, every_rows, step=step,
                                          learning_rate=self.optimizer.learning_rate)     # OPT-10

    # ------------------------------------------------------- eviction, size
    def evict(self, now: int | None = None) -> np.ndarray:
        with self.collective.guarded("evict", "evict"):
            return super().evict(now)

    def _evict(self, now):
        """Every replica evicts the same keys (same state, same clock); the header only checks that
        every rank makes the call (SHARD-8)."""
        self.collective.begin(f"table {self.name!r}'s eviction")
        self.collective.agree(None, "evict")
        return self.local.evict(now)

    def _set_optimizer(self, optimizer) -> None:
        self.optimizer = optimizer
        self.local.set_optimizer(optimizer)       # the rank's replica applies (KERAS-13)

    def _size(self) -> int:
        return self.local.size()

    def _capacity(self) -> int:
        return self.local.capacity()

    def _stats(self) -> dict[str, int]:
        """SHARD-17: the replica's statistics are the table's; the positions count every rank's batch."""
        stats = dict(self.local.stats())
        for name in STAT_NAMES:
            stats.setdefault(name, 0)
        for name in _TABLE_POSITIONS:
            if name == "grad_rows_dropped":
                stats[name] += self._positions[name]
            else:
                stats[name] = self._positions[name]
        return stats

    def _row_handles(self, keys):
        return self.local.row_handles(keys)

    def table_clock(self) -> tuple[int | None, str | None]:
        """The replicas' clock, agreed like a sharded table's (SHARD-8); collective."""
        with self.collective.call("table_clock"), self._lock:
            return agreed_clock(self.collective, self.local)

    # ------------------------------------------------ state and checkpoints
    def export(self) -> TableState:
        """This replica, which is the table (collective: the ranks agree on the call first, SHARD-22)."""
        with self.collective.call("export"):
            with self._lock:
                return self._export()

    def _export(self) -> TableState:
        self.collective.agree(None, "export")   # collective like a shard's (SHARD-8): the ranks agree on the call
        return self.local.export()

    def _import_state(self, state: TableState) -> None:
        _, error = attempt(lambda: self.local.check_fits(len(state.keys)))
        self.collective.agree(error, "load")
        self.local.import_state(state)

    def save(self, directory, *, incremental: bool = False) -> str:
        """SHARD-18: rank 0 writes its replica in the one-process layout (CKPT-*); every rank returns the
        path or raises rank 0's error."""
        with self.collective.call("save"):
            incremental = self.collective.open(lambda: self._check_bool("incremental", incremental))
            return self._save(directory, incremental)

    def _save(self, directory, incremental: bool) -> str:
        with self._lock:
            state = self.local.export()
            path, error = None, None
            if self.rank == 0:
                path, error = attempt(lambda: self._write(directory, state, incremental))
            path, error = self.comm.bcast((path, error), root=0)
            if error is not None:
                raise error
            self.last_checkpoint = (os.path.dirname(path), state)
        return path

    def _write(self, directory, state: TableState, incremental: bool) -> str:
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        if incremental and self.last_checkpoint is not None:
            previous_dir, previous_state = self.last_checkpoint
            checkpoint.check_delta_target(directory, previous_dir, self.name)
            delta, removed = checkpoint.delta_between(previous_state, state)
            return checkpoint.write_table(directory, self.config, self.optimizer, delta, previous=previous_dir,
                                          removed=removed)
        return checkpoint.write_table(directory, self.config, self.optimizer, state)

    def load(self, directory) -> None:
        """SHARD-18: every rank reads the whole checkpoint into its replica."""
        with self.collective.call("load"):
            self._load(directory)

    def _load(self, directory) -> None:
        def read():
            folder = os.path.abspath(checkpoint.checked_directory(directory, self.name))
            return folder, checkpoint.read_table(folder, self.config, self.optimizer)

        (folder, state), error = attempt(read, default=(None, None))
        self.collective.agree(error, "load")
        with self._lock:
            self._import_state(state)
            self.last_checkpoint = (folder, state)

    def plan_warm_start(self, directory, *, source_table: str | None = None, now: int | None = None, after=None):
        """WS-7 with the whole checkpoint on every replica (SHARD-18); collective: if one rank's plan fails,
        every rank raises.  The plan is the replica's own store's, so ``after`` takes this method's plans."""
        with self.collective.call("plan_warm_start"):
            return self._plan_warm_start(directory, source_table, now, after)

    def _plan_warm_start(self, directory, source_table, now, after):
        plan, error = attempt(lambda: self.local.plan_warm_start(directory, source_table=source_table, now=now,
                                                                 after=after))
        self.collective.agree(error, "warm_start")
        return plan

    def apply_warm_start(self, plan) -> int:
        """WS-3 on every replica; the replicas are identical, so the apply succeeds or fails everywhere."""
        with self.collective.call("apply_warm_start"):
            self.collective.open()
            return self._apply_warm_start(plan)

    def _apply_warm_start(self, plan) -> int:
        with self._lock:
            loaded, error = attempt(lambda: self.local.apply_warm_start(plan), default=0)
            self.collective.agree(error, "warm_start")
        return loaded
