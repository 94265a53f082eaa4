"""The key pipeline in the TF layer (spec/pipeline.md, PIPE-8): the key work of a training batch is
done in the input pipeline, where mxRec's insert function puts it, and the step's lookup only commits it.

``in_input_pipeline(table_name, merged)`` wraps a table's merged training ids inside a ``dataset.map``
function (the FeatureSpec insert function, and the graph modifier's key processing): when the map
runs -- ahead of the step, in tf.data's prefetch thread -- the table's store resolves the batch ahead
(``Store.resolve_ahead``) and the table queues it (``AheadQueue``).  The step's lookup of those same
ids takes it from the queue by content and gathers it (``Store.gather``); ids with no batch queued
(another iterator, a batch the pipeline missed) are looked up as before.  Since a resolve ahead changes
nothing a store shows, whether and when it ran never changes a result (PIPE-1, PIPE-2).

The owner of a queue is a ``SparseTable`` (named: an Estimator's input_fn runs before its model_fn
creates the table) or a Keras ``Embedding`` (PIPE-9): anything with ``ahead`` (its ``AheadQueue``) and
``opened_store`` (its store, or None while none is open), both read for every batch.
"""
from __future__ import annotations

import collections
import threading

import numpy as np
import tensorflow as tf

from ..errors import MxrecError, UsageError
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
        self._lookups = 0    # training lookups that looked for a batch, matched or not
        self._put_at = 0     # ... when the newest batch was queued
        self.taken = 0       # batches lookups took: how often the pipeline did a step's key work ahead

    def __len__(self) -> int:
        """Batches queued now."""
        with self._lock:
            return len(self._batches)

    def wait_turn(self, timeout: float = TURN_WAIT_S) -> None:
        """Until the step took every batch queued before and gathered it (or ``timeout`` passed: a batch
        no lookup takes must not stall the input pipeline): tf.data runs the map of batch t+1 as soon as
        batch t leaves it, while step t's lookups still commit; resolving then would only make the two
        take turns at the store's lock and the GIL, and a plan made before step t's commit is stale at
        batch t+1's (the fast engine plans again).  Timing only: no result depends on it (PIPE-1)."""
        with self._lock:        # a lookup since the last put that matched nothing will not take it
            self._lock.wait_for(lambda: (not self._batches or self._lookups > self._put_at) and not self._gathering,
                                timeout)

    def put(self, batch) -> None:
        with self._lock:
            self._batches.append(batch)
            self._put_at = self._lookups
            while len(self._batches) > self._limit:     # never taken (an iterator that was dropped)
                self._batches.popleft()

    def take(self, ids: np.ndarray):
        """The queued batch of exactly ``ids`` (same shape, same keys), removed with the older ones,
        which no lookup will take; the caller calls ``gathered`` once its gather ended.  None when none
        matches (ids changed after the map, a batch never resolved ahead): the queue stays, and the next
        batch's resolve need not wait for it any longer (``wait_turn``)."""
        with self._lock:
            batch = self._remove(ids)
            if batch is not None:
                self.taken += 1
                self._gathering += 1
            self._lookups += 1
            self._lock.notify_all()
            return batch

    def discard(self, ids: np.ndarray) -> None:
        """An evaluation or prediction lookup of ``ids``: a queued batch of exactly these keys (a dataset
        mapped for training that is also evaluated) is dropped, with the older ones, so that the map's
        ``wait_turn`` does not wait for a training lookup that will never come."""
        with self._lock:
            if self._remove(ids) is not None:
                self._lock.notify_all()

    def _remove(self, ids: np.ndarray):
        """(Under the lock.) The queued batch of exactly ``ids`` and the older ones out; the batch or None."""
        for index, batch in enumerate(self._batches):
            prepared = batch.prepared
            if prepared.shape == ids.shape and np.array_equal(prepared.keys, ids.reshape(-1)):
                for _ in range(index + 1):
                    self._batches.popleft()
                return batch
        return None

    def gathered(self) -> None:
        """The gather of a batch ``take`` gave ended (or failed): the next batch's turn."""
        with self._lock:
            self._gathering -= 1
            self._lock.notify_all()

    def clear(self) -> None:
        """Drop every queued batch (its store was replaced: no lookup may gather it)."""
        with self._lock:
            self._batches.clear()
            self._lock.notify_all()


def _owner_of(owner):
    """The queue's owner now: a table name is looked up for every batch (its table may be created, or
    created again in a new graph, after the input pipeline was built)."""
    if isinstance(owner, str):
        return ConfigInitializer.get_instance().tables.get(owner)
    return owner


def _resolve_ahead(owner):
    def run(ids):
        found = _owner_of(owner)
        store = found.opened_store if found is not None else None
        if store is not None and enabled_by_default():     # read per batch: the switch applies at once
            found.ahead.wait_turn()
            try:
                batch = store.resolve_ahead(ids)            # PIPE-1: changes nothing a store shows
            except MxrecError:
                return ids      # bad keys: the step's lookup raises it, where and as the serial one does
            found.ahead.put(batch)
        return ids
    return run


def in_input_pipeline(owner, merged: tf.Tensor) -> tf.Tensor:
    """``merged`` (the int64 training keys of one store call, inside a dataset.map function), resolved
    ahead on the way while the key pipeline is on (PIPE-7, PIPE-8, PIPE-9).  ``owner``: the table's name
    (a ``SparseTable``'s) or the object holding the queue (a Keras ``Embedding``).  A graph built with
    the pipeline off gets no op (its batches pay nothing); one built with it on reads the switch for
    every batch."""
    if not enabled_by_default():
        return merged
    name = owner if isinstance(owner, str) else owner.table_name
    ids = tf.numpy_function(_resolve_ahead(owner), [merged], tf.int64, stateful=True,
                            name=f"{name}_resolve_ahead")
    ids.set_shape(merged.shape)
    return ids


def _feature(x, feature, table: str, where: str):
    """The ids of ``feature`` in a batch's inputs ``x`` (None: ``x`` is the one input tensor)."""
    if feature is None:
        return x
    try:
        return x[feature]
    except (KeyError, IndexError, TypeError):
        names = sorted(map(str, x)) if isinstance(x, dict) else (f"positions 0..{len(x) - 1}"
                                                                 if isinstance(x, (list, tuple)) else "one tensor")
        raise UsageError(f"table {table!r}: {where}: the dataset's inputs have no feature {feature!r} "
                         f"(they have {names})") from None


def map_resolving_ahead(dataset: tf.data.Dataset, owners: list, keys_of, where: str) -> tf.data.Dataset:
    """``dataset`` (elements ``x``, ``(x, y)`` or ``(x, y, sample_weight)``) mapped so that each batch's keys
    for each ``(feature, owner)`` of ``owners`` -- ``keys_of(owner, ids)``: the flat int64 keys the owner's
    training lookup passes its store -- are resolved ahead and queued at the owner (PIPE-9).  The elements
    come out unchanged.  With the pipeline off now the dataset is returned as it is (PIPE-7).  ``where``: the
    caller and its parameter of features, for errors."""
    if not isinstance(dataset, tf.data.Dataset):
        caller = where.split(":")[0]
        raise UsageError(f"{caller}: dataset: must be a tf.data.Dataset, got {type(dataset).__name__}")
    is_tuple = isinstance(dataset.element_spec, tuple)   # tf.data passes a tuple's entries as arguments
    inputs = dataset.element_spec[0] if is_tuple else dataset.element_spec
    for feature, owner in owners:      # a wrong feature is refused whatever the switch
        _feature(inputs, feature, owner.table_name, where)
    if not enabled_by_default():
        return dataset

    @tf.autograph.experimental.do_not_convert     # plain Python: a UsageError reaches the caller as it is
    def resolve(*element):
        x = element[0]         # keras.utils.unpack_x_y_sample_weight: a tuple's first entry, else the element
        done = [in_input_pipeline(owner, keys_of(owner, _feature(x, feature, owner.table_name, where)))
                for feature, owner in owners]
        with tf.control_dependencies(done):       # the resolves run before the batch leaves the map
            element = tf.nest.map_structure(tf.identity, element, expand_composites=True)
        return tuple(element) if is_tuple else element[0]

    return dataset.map(resolve).prefetch(1)       # the next batch is resolved while the current step trains

