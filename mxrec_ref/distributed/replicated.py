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
"""
from __future__ import annotations

import os

import numpy as np

from .. import checkpoint
from ..errors import MxrecError, UsageError
from ..state import PADDING_KEY, STAT_NAMES, TableState
from .comm import Communicator, gather_rows
from .sharded import ShardedStore, dedup

# statistics a replica counts over every rank's batch (SHARD-17)
_TABLE_POSITIONS = ("key_positions", "padding_positions", "default_positions", "grad_rows_dropped")


class ReplicatedStore(ShardedStore):
    """One rank's replica of a data-parallel table (SHARD-16).  Like every table on several ranks its
    public calls are collective (SHARD-8), and a call that fails on one rank fails on every rank."""

    backend_name = "replicated"

    def __init__(self, local, comm: Communicator | None = None, *, divide_gradients: bool = False):
        super().__init__(local, comm, divide_gradients=divide_gradients)
        self._table_positions = {name: 0 for name in _TABLE_POSITIONS}    # the whole batch's, every rank

    # -------------------------------------------------------------- lookup
    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        self._started = True
        self.comm.context = f"table {self.name!r}'s {'training' if train else 'evaluation'} lookup at step {step}"
        unique, inverse, occurrences = dedup(keys, counts)
        real = np.flatnonzero(unique != PADDING_KEY)            # padding never leaves the rank (SHARD-2)
        positions = np.bincount(inverse.reshape(-1), minlength=len(unique)).astype(np.int64)
        headers = self._agree(None, "lookup", train=train, step=step, timestamp=timestamp, n_unique=len(unique),
                              pad_to=pad_to, n_real=len(real), padding=int(np.count_nonzero(keys == PADDING_KEY)))
        step, timestamp = self._check_headers(headers, train, pad_to)
        sizes = np.array([h["n_real"] for h in headers], np.int64)
        # key, its occurrence count (admission weight) and its number of positions (statistics)
        mine = np.stack([unique[real], occurrences[real], positions[real]], axis=1)
        every = gather_rows(self.comm, mine, sizes)
        # the same call on every replica: every replica raises the same error if it fails (same state, same input)
        answer = self.local.lookup(every[:, 0], train=train, step=step, timestamp=timestamp,
                                   counts=every[:, 1] if len(every) else None)
        admitted_every = np.asarray(answer.admitted)[answer.inverse]
        start = int(sizes[:self.rank].sum())
        my_slots = answer.inverse[start:start + len(real)]

        dim = self.config.dim
        rows = np.empty((len(unique), dim), dtype=np.float32)
        rows[:] = self.config.default_row()
        admitted = np.zeros(len(unique), dtype=bool)
        rows[real] = np.take(answer.rows, my_slots, axis=0)
        admitted[real] = np.asarray(answer.admitted)[my_slots]
        self._count_lookup_positions(keys, inverse, admitted)
        table = self._table_positions           # SHARD-6 over the whole batch, known on every rank
        n_positions = int(every[:, 2].sum()) if len(every) else 0
        table["key_positions"] += n_positions
        table["padding_positions"] += sum(h["padding"] for h in headers)
        table["default_positions"] += n_positions - (int(every[admitted_every, 2].sum()) if len(every) else 0)
        return self._result(unique, rows, inverse.reshape(shape), admitted, train, pad_to)

    # ----------------------------------------------------------- gradients
    def _apply(self, keys, grads, mask, step):
        self._started = True
        self.comm.context = f"table {self.name!r}'s gradient exchange at step {step}"
        keep = np.flatnonzero(mask & (keys != PADDING_KEY))
        headers = self._agree(None, "apply_gradients", step=step, n=len(keep), dropped=len(keys) - len(keep))
        if len({h["step"] for h in headers}) > 1:
            raise UsageError(f"table {self.name!r}: step: the ranks apply gradients of different steps "
                             f"({[h['step'] for h in headers]}); every rank must run the same steps")
        rows = grads[keep]
        if self.divide_gradients:         # SHARD-5: sum_gradients_and_div_by_ranksize
            rows = rows * np.float32(1.0 / self.rank_size)
        sizes = np.array([h["n"] for h in headers], np.int64)
        every_keys = gather_rows(self.comm, keys[keep], sizes)
        every_rows = gather_rows(self.comm, rows, sizes).reshape(-1, self.config.dim)
        self._table_positions["grad_rows_dropped"] += sum(h["dropped"] for h in headers)
        # duplicates (one per rank) are summed in order of occurrence: rank order (OPT-1, SHARD-7)
        return self.local.apply_gradients(every_keys, every_rows, step=step,
                                          learning_rate=self.optimizer.learning_rate)     # OPT-10

    # ------------------------------------------------------- eviction, size
    def _evict(self, now):
        """Every replica evicts the same keys (same state, same clock); the header only checks that
        every rank makes the call (SHARD-8)."""
        self._started = True
        self.comm.context = f"table {self.name!r}'s eviction"
        self._agree(None, "evict")
        return self.local.evict(now)

    def _size(self) -> int:
        return self.local.size()

    def _capacity(self) -> int:
        return self.local.capacity()

    def _stats(self) -> dict[str, int]:
        """SHARD-17: the replica's statistics are the table's; the positions count every rank's batch."""
        stats = dict(self.local.stats())
        for name in STAT_NAMES:
            stats.setdefault(name, 0)
        for name in self._table_positions:
            if name == "grad_rows_dropped":
                stats[name] += self._table_positions[name]
            else:
                stats[name] = self._table_positions[name]
        return stats

    def _row_handles(self, keys):
        return self.local.row_handles(keys)

    # ------------------------------------------------ state and checkpoints
    def export(self) -> TableState:
        """This replica, which is the table (collective: the ranks agree on the call first, SHARD-22)."""
        with self._call("export"):
            with self._lock:
                return self._export()

    def _export(self) -> TableState:
        self._agree(None, "export")        # collective like a shard's (SHARD-8): the ranks agree on the call
        return self.local.export()

    def _import_state(self, state: TableState) -> None:
        error = None
        try:
            self.local.check_fits(len(state.keys))
        except MxrecError as failed:
            error = failed
        self._agree(error, "load")
        self.local.import_state(state)

    def save(self, directory, *, incremental: bool = False) -> str:
        """SHARD-18: rank 0 writes its replica in the one-process layout (CKPT-*); every rank returns the
        path or raises rank 0's error."""
        with self._call("save"):
            incremental = self._open(lambda: self._check_bool("incremental", incremental))
            return self._save(directory, incremental)

    def _save(self, directory, incremental: bool) -> str:
        with self._lock:
            state = self.local.export()
            path, error = None, None
            if self.rank == 0:
                try:
                    path = self._write(directory, state, incremental)
                except MxrecError as failed:
                    error = failed
            path, error = self.comm.bcast((path, error), root=0)
            if error is not None:
                raise error
            self._last_checkpoint = (os.path.dirname(path), state)
        return path

    def _write(self, directory, state: TableState, incremental: bool) -> str:
        directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
        if incremental and self._last_checkpoint is not None:
            previous_dir, previous_state = self._last_checkpoint
            checkpoint.check_delta_target(directory, previous_dir, self.name)
            delta, removed = checkpoint.delta_between(previous_state, state)
            return checkpoint.write_table(directory, self.config, self.optimizer, delta, previous=previous_dir,
                                          removed=removed)
        return checkpoint.write_table(directory, self.config, self.optimizer, state)

    def load(self, directory) -> None:
        """SHARD-18: every rank reads the whole checkpoint into its replica."""
        with self._call("load"):
            self._load(directory)

    def _load(self, directory) -> None:
        error, state = None, None
        try:
            directory = os.path.abspath(checkpoint.checked_directory(directory, self.name))
            state = checkpoint.read_table(directory, self.config, self.optimizer)
        except MxrecError as failed:
            error = failed
        self._agree(error, "load")
        with self._lock:
            self._import_state(state)
            self._last_checkpoint = (directory, state)

    def plan_warm_start(self, directory, *, source_table: str | None = None, now: int | None = None, after=None):
        """WS-7 with the whole checkpoint on every replica (SHARD-18); collective: if one rank's plan fails,
        every rank raises.  The plan is the replica's own store's, so ``after`` takes this method's plans."""
        with self._call("plan_warm_start"):
            return self._plan_warm_start(directory, source_table, now, after)

    def _plan_warm_start(self, directory, source_table, now, after):
        error, plan = None, None
        try:
            plan = self.local.plan_warm_start(directory, source_table=source_table, now=now, after=after)
        except MxrecError as failed:
            error = failed
        self._agree(error, "warm_start")
        return plan

    def apply_warm_start(self, plan) -> int:
        """WS-3 on every replica; the replicas are identical, so the apply succeeds or fails everywhere."""
        with self._call("apply_warm_start"):
            self._open()
            return self._apply_warm_start(plan)

    def _apply_warm_start(self, plan) -> int:
        error, loaded = None, 0
        with self._lock:
            try:
                loaded = self.local.apply_warm_start(plan)
            except MxrecError as failed:
                error = failed
            self._agree(error, "warm_start")
        return loaded

