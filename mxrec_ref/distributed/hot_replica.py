"""Hot Embedding in a sharded table: the hottest rows replicated on every rank (spec/sharding.md, SHARD-20).

Every ``HOT_EMB_UPDATE_STEP``-th training lookup of the table, each owner proposes its hottest keys
(hot.choose_hot_keys over its keys holding a row), the proposals are gathered and the same rule picks
the table's ``hot_rows`` hottest keys, and every owner sends the rows and optimizer slots of the chosen
keys it owns to every rank.  Each rank keeps them in a small store of the same backend (the replica).

A lookup answers hot keys from the replica: no row comes back for them (in evaluation they are not
even sent; in training they still travel with their occurrence counts, so each owner counts and
timestamps them exactly as without the replica).  The owners sum a hot key's gradient rows in
source-rank order as for any key and send the sum they apply to every rank, and every replica applies
that same sum: replicas and owners stay bit-identical, so the replica has no semantic effect (HOT-3).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import hot
from ..state import TableState
from .comm import Communicator


class HotReplica:
    """This rank's copy of a sharded table's hot rows (SHARD-20)."""

    def __init__(self, local, comm: Communicator, rows: int, update_step: int):
        self.local, self.comm = local, comm
        self.capacity = rows
        self.update_step = update_step
        self.keys = np.zeros(0, dtype=np.int64)       # ascending
        self.replica = None                           # a store of the local store's backend
        self.refreshes = 0
        self._train_lookups = 0

    def is_hot(self, keys: np.ndarray) -> np.ndarray:
        """Which ``keys`` hold a row in the replica: one hash probe a key in the replica's store (a binary
        search over the hot keys costs several times more on a batch)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if len(self.keys) == 0 or keys.size == 0:
            return np.zeros(keys.shape, dtype=bool)
        return self.replica.row_handles(keys) >= 0

    def rows(self, keys: np.ndarray) -> np.ndarray:
        """The replica's rows of hot ``keys`` (distinct): an evaluation lookup changes nothing that matters."""
        result = self.replica.lookup(keys, train=False)
        return np.take(result.rows, result.inverse, axis=0)

    def after_train_lookup(self, rank_size: int) -> None:
        """HOT-2's schedule over the table's training lookups (the same count on every rank)."""
        self._train_lookups += 1
        if hot.is_refresh_due(self._train_lookups, self.update_step):
            self.refresh(rank_size)

    def refresh(self, rank_size: int) -> None:
        """Collective: choose the table's hottest keys and copy their rows and slots to every rank."""
        keys, counts, _ = self.local.engine.admitted_entries()
        top = hot.choose_hot_keys(keys, counts, self.capacity)
        proposals = self.comm.allgather((top, counts[np.searchsorted(keys, top)] if len(top) else top))
        chosen = hot.choose_hot_keys(np.concatenate([p[0] for p in proposals]),
                                     np.concatenate([p[1] for p in proposals]), self.capacity)
        mine = np.sort(chosen[np.mod(chosen, rank_size) == self.comm.rank])
        parts = self.comm.allgather((mine,) + tuple(self.local.engine.rows_of(mine)))
        order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
        join = lambda i: np.concatenate([p[i] for p in parts])[order]            # noqa: E731
        slots = {name: np.concatenate([p[2][name] for p in parts])[order] for name in parts[0][2]}
        empty = np.zeros(0, dtype=np.int64)
        state = TableState(keys=join(0), values=join(1), slots=slots, counts=join(3), last_seen=join(4),
                           pending_keys=empty, pending_counts=empty, pending_last_seen=empty, clock=None,
                           clock_source=None)
        self.replica = self._new_replica(len(state.keys))
        self.replica.import_state(state)
        self.keys = state.keys
        self.refreshes += 1

    def _new_replica(self, n_rows: int):
        config = dataclasses.replace(self.local.config, device_vocabulary_size=max(1, n_rows), dynamic_expansion=True)
        return type(self.local)(config, self.local.optimizer, hot_rows=0, hot_update_step=1)

    def apply(self, keys: np.ndarray, sums: np.ndarray, step: int, learning_rate=None) -> None:
        """The sums the owners applied, applied to the replica (``keys`` distinct: nothing is summed again)
        with the owners' learning rate of the step (OPT-10)."""
        if len(keys):
            self.replica.apply_gradients(keys, sums, step=step, learning_rate=learning_rate)

    def drop(self, evicted: np.ndarray) -> None:
        """Evicted keys leave the hot set (HOT-2)."""
        gone = self.keys[np.isin(self.keys, evicted)]
        if len(gone):
            self.replica.engine.drop_rows(gone)
            self.keys = self.keys[~np.isin(self.keys, gone)]

    def clear(self) -> None:
        """A load or warm start replaces rows: the hot set is empty until the next refresh (HOT-2)."""
        self.keys = np.zeros(0, dtype=np.int64)
        self.replica = None
