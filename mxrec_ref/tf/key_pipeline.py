"""The key pipeline in the TF layer (spec/pipeline.md, PIPE-8): the key work of a training batch is
done in the input pipeline, where mxRec's insert function puts it, and the step's lookup only commits it.

``in_input_pipeline(table_name, merged)`` wraps a table's merged training ids inside a ``dataset.map``
function (the FeatureSpec insert function, and the graph modifier's key processing): when the map
runs -- ahead of the step, in tf.data's prefetch thread -- the table's store resolves the batch ahead
(``Store.resolve_ahead``) and the table queues it (``AheadQueue``).  The step's lookup of those same
ids takes it from the queue by content and gathers it (``Store.gather``); ids with no batch queued
(another iterator, a batch the pipeline missed) are looked up as before.  Since a resolve ahead changes
nothing a store shows, whether and when it ran never changes a result (PIPE-1, PIPE-2).
"""
from __future__ import annotations

import collections
import threading

import numpy as np
import tensorflow as tf

from ..pipeline import enabled_by_default
from .config_initializer import ConfigInitializer

QUEUED = 8     # batches resolved ahead kept per table; tf.data's prefetch buffers bound how many wait
TURN_WAIT_S = 0.5   # how long a resolve ahead waits for the step to take the table's previous batch


class AheadQueue:
    """One table's training batches resolved ahead by the input pipeline, oldest first."""

    def __init__(self, limit: int = QUEUED):
        self._batches: collections.deque = collections.deque()
        self._lock = threading.Condition()
        self._limit = limit
        self._gathering = 0  # batches taken whose gather has not ended
        self.taken = 0       # batches lookups took: how often the pipeline did a step's key work ahead

    def wait_turn(self, timeout: float = TURN_WAIT_S) -> None:
        """Until the step took every batch queued before and gathered it (or ``timeout`` passed: a batch
        no lookup takes must not stall the input pipeline): tf.data runs the map of batch t+1 as soon as
        batch t leaves it, while step t's lookups still commit; resolving then would only make the two
        take turns at the store's lock and the GIL, and a plan made before step t's commit is stale at
        batch t+1's (the fast engine plans again).  Timing only: no result depends on it (PIPE-1)."""
        with self._lock:
            self._lock.wait_for(lambda: not self._batches and not self._gathering, timeout)

    def put(self, batch) -> None:
        with self._lock:
            self._batches.append(batch)
            while len(self._batches) > self._limit:     # never taken (an iterator that was dropped)
                self._batches.popleft()

    def take(self, ids: np.ndarray):
        """The queued batch of exactly ``ids`` (same shape, same keys), removed with the older ones,
        which no lookup will take; None, with the queue left as it is, when none matches."""
        with self._lock:
            for index, batch in enumerate(self._batches):
                prepared = batch.prepared
                if prepared.shape == ids.shape and np.array_equal(prepared.keys, ids.reshape(-1)):
                    for _ in range(index + 1):
                        self._batches.popleft()
                    self.taken += 1
                    self._gathering += 1
                    return batch
        return None

    def gathered(self) -> None:
        """The gather of a batch ``take`` gave ended (or failed): the next batch's turn."""
        with self._lock:
            self._gathering -= 1
            self._lock.notify_all()


def _resolve_ahead(table_name: str):
    def run(ids):
        table = ConfigInitializer.get_instance().tables.get(table_name)
        store = table.opened_store if table is not None else None
        if store is not None and enabled_by_default():     # read per batch: the switch applies at once
            table.ahead.wait_turn()
            table.ahead.put(store.resolve_ahead(ids))          # PIPE-1: changes nothing a store shows
        return ids
    return run


def in_input_pipeline(table_name: str, merged: tf.Tensor) -> tf.Tensor:
    """``merged`` (a table's merged int64 training ids, inside a dataset.map function), resolved ahead
    on the way while the key pipeline is on (PIPE-7, PIPE-8).  A graph built with it off gets no op (its
    batches pay nothing); one built with it on reads the switch for every batch."""
    if not enabled_by_default():
        return merged
    ids = tf.numpy_function(_resolve_ahead(table_name), [merged], tf.int64, stateful=True,
                            name=f"{table_name}_resolve_ahead")
    ids.set_shape(merged.shape)
    return ids
