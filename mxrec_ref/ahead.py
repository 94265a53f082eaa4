"""A store's training batches resolved ahead of the serial order (spec/pipeline.md).

The key pipeline resolves batch t+1 while step t still has to gather and apply (PIPE-1).  A store
keeps, for every batch it resolved ahead and has not gathered yet, the keys that resolve gave a
row: an apply made meanwhile belongs, in the serial order, before those resolves, so it must not
update those rows (PIPE-3); and a call that must happen at a point of the serial order (a save, an
eviction, ...) is refused while any such batch waits (PIPE-4).  This module is that bookkeeping,
nothing else; ``Store`` (contract.py) calls it under its lock.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .engine import Resolved
from .errors import UsageError


@dataclass(frozen=True, eq=False)
class AheadBatch:
    """One training batch resolved ahead: what ``Store.gather`` takes.  ``sequence`` numbers the
    store's ahead batches in resolve order, which is the order they must be gathered in (PIPE-2)."""

    store_id: int
    table: str
    sequence: int
    resolved: Resolved


class AheadBatches:
    """The batches a store resolved ahead and has not gathered, oldest first."""

    def __init__(self):
        self._sequence = itertools.count()
        self._waiting: dict[int, np.ndarray] = {}     # sequence -> the keys its resolve gave a row
        self._announced = 0      # batches a driver handed to its worker whose resolve has not run yet

    def __len__(self) -> int:
        """Batches resolved ahead and not gathered, plus those announced and not resolved yet."""
        return len(self._waiting) + self._announced

    def announce(self) -> None:
        """A driver will resolve a batch ahead in another thread: until it has (``settle``), the store
        counts it as waiting, so a boundary call is refused whatever the threads' timing (PIPE-5)."""
        self._announced += 1

    def settle(self) -> None:
        """The resolve of an announced batch ran (it was added, or it failed and changed nothing)."""
        if self._announced <= 0:
            raise AssertionError("settle without announce")
        self._announced -= 1

    def add(self, store_id: int, table: str, resolved: Resolved) -> AheadBatch:
        batch = AheadBatch(store_id, table, next(self._sequence), resolved)
        created = resolved.created
        self._waiting[batch.sequence] = np.zeros(0, np.int64) if created is None else created
        return batch

    def check_next(self, batch: AheadBatch, store_id: int, table: str) -> None:
        """PIPE-2: ``batch`` is this store's and the oldest one waiting; UsageError naming the table if not."""
        if not isinstance(batch, AheadBatch) or batch.store_id != store_id or batch.table != table:
            raise UsageError(f"table {table!r}: batch: not a batch this store resolved ahead "
                             f"(got {type(batch).__name__})")
        if batch.sequence not in self._waiting:
            raise UsageError(f"table {table!r}: batch: batch {batch.sequence} was gathered already; "
                             f"a batch resolved ahead is gathered once")
        oldest = next(iter(self._waiting))
        if batch.sequence != oldest:
            raise UsageError(f"table {table!r}: batch: batch {batch.sequence} gathered before batch {oldest}; "
                             f"batches resolved ahead are gathered in the order they were resolved (PIPE-2)")

    def gathered(self, batch: AheadBatch) -> None:
        del self._waiting[batch.sequence]

    def apply_mask(self, keys: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """PIPE-3: ``mask`` without the keys that a waiting batch's resolve gave a row: in the serial
        order this apply comes before that resolve, when those keys held none."""
        created = [keys for keys in self._waiting.values() if len(keys)]
        if not created:
            return mask
        return mask & ~np.isin(keys, np.concatenate(created))

    def check_boundary(self, table: str, call: str) -> None:
        """PIPE-4: ``call`` happens at a point of the serial order, which batches resolved ahead have
        run past: UsageError naming the table, the call and how many wait, before anything changes."""
        if len(self):
            raise UsageError(f"table {table!r}: {call}: {len(self)} batch(es) resolved ahead by the "
                             f"key pipeline are not gathered yet; {call} must come at a point of the serial order "
                             f"(PIPE-4): gather and apply them first, or resolve the next batch after the {call}")
