"""A served table that takes fresh rows (spec/serving.md, SERVE-1): stock TensorFlow ops only, so the
SavedModel still loads without mxrec-ref.

``UpdatableTable`` is a ``tf.lookup.experimental.MutableHashTable`` from each admitted key to its row index
and a ``tf.Variable`` of rows whose first dimension may grow.  Row 0 is the default row (the table's
``serving_default_value``, zeros when unset): the hash table answers 0 for a key it does not hold, so a
lookup is ``tf.gather(rows, index.lookup(keys))`` exactly as for the static export (KERAS-9).  Rows of
evicted keys go to a free list that new keys take first; when the rows run out the variable grows to twice
its rows (or to what the delta needs, if more), so an apply never fails for capacity.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..errors import UsageError

DEFAULT_ROW = 0


def spare_rows_for(n_keys: int, spare_rows: int | None) -> int:
    """Free rows written with an export: ``spare_rows``, or by default a quarter of the keys (at least
    1,024), so the first deltas take new keys without growing the variable."""
    return max(n_keys // 4, 1024) if spare_rows is None else spare_rows


class UpdatableTable(tf.Module):
    """One table of an updatable export: ``lookup(keys)`` gives row indices into ``rows``;
    ``apply(keys, rows, evicted)`` changes them (built into the ``apply_delta`` signature)."""

    def __init__(self, table: str, keys: np.ndarray, rows: np.ndarray, default_row, spare_rows: int | None):
        super().__init__(name=f"{table}_updatable")
        self.table = table
        n, dim = len(keys), rows.shape[1]
        spare_rows = spare_rows_for(n, spare_rows)
        self.dim = dim
        initial = np.zeros((1 + n + spare_rows, dim), dtype=np.float32)
        initial[DEFAULT_ROW] = np.broadcast_to(np.asarray(default_row, np.float32), (dim,))
        initial[1:n + 1] = rows
        self.index = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=DEFAULT_ROW,
                                                             name=f"{table}_serving_keys")
        if n:
            self.index.insert(tf.constant(keys, tf.int64), tf.range(1, n + 1, dtype=tf.int64))
        self.rows = tf.Variable(initial, shape=tf.TensorShape([None, dim]), trainable=False,
                                name=f"{table}_serving_rows")
        # rows [1, used) have been handed out; `free` holds those of evicted keys, taken first
        self.used = tf.Variable(n + 1, dtype=tf.int64, trainable=False, name=f"{table}_serving_used")
        self.free = tf.Variable(tf.zeros([0], tf.int64), shape=tf.TensorShape([None]), trainable=False,
                                name=f"{table}_serving_free")

    def lookup(self, keys):
        return self.index.lookup(keys)

    def checks(self, keys, rows, evicted) -> list:
        """Assertions that run before anything changes (a failed apply changes nothing)."""
        where = f"table {self.table!r}: apply_delta"
        return [
            tf.debugging.assert_equal(tf.shape(rows, out_type=tf.int64)[0], tf.size(keys, out_type=tf.int64),
                                      message=f"{where}: rows: one row per key"),
            tf.debugging.assert_equal(tf.size(tf.unique(keys).y), tf.size(keys),
                                      message=f"{where}: keys: a key appears twice"),
            tf.debugging.assert_equal(tf.size(tf.sets.intersection(keys[None], evicted[None]).values), 0,
                                      message=f"{where}: evicted: a key is both updated and evicted"),
        ]

    def apply(self, keys, rows, evicted):
        """Evict ``evicted`` (their rows join the free list), then give each key of ``keys`` its row of
        ``rows``: a key held already keeps its row index, a new one takes a free row or the next unused
        one, growing the variable when none is left.  Returns (rows in use, capacity)."""
        old = tf.ensure_shape(self.index.lookup(evicted), [None])
        freed = tf.boolean_mask(old, old != DEFAULT_ROW)      # an evicted key the table does not hold: nothing
        self.index.remove(evicted)
        free = tf.concat([self.free.read_value(), freed], 0)

        at = tf.ensure_shape(self.index.lookup(keys), [None])
        new = tf.equal(at, DEFAULT_ROW)
        n_new = tf.reduce_sum(tf.cast(new, tf.int64))
        n_free = tf.size(free, out_type=tf.int64)
        reused = tf.minimum(n_free, n_new)
        used = self.used.read_value()
        end = used + n_new - reused
        given = tf.concat([free[n_free - reused:], tf.range(used, end)], 0)
        self.free.assign(free[:n_free - reused])
        self.used.assign(end)
        capacity = self.capacity()

        def grown():
            extra = tf.maximum(capacity, end - capacity)
            self.rows.assign(tf.concat([self.rows, tf.zeros(tf.stack([extra, self.dim]))], 0))
            return self.capacity()

        with tf.control_dependencies([tf.cond(end > capacity, grown, lambda: capacity)]):
            at = tf.tensor_scatter_nd_update(at, tf.where(new), given)
            self.index.insert(tf.boolean_mask(keys, new), given)
            self.rows.scatter_nd_update(at[:, None], rows)
        return end - 1, self.capacity() - 1

    def capacity(self):
        """The rows' first dimension, read from the variable's shape: ``tf.shape(self.rows)`` would read its
        value, and a dense read of a variable that is also scattered into copies all of it (the cost of a
        delta would then grow with the table)."""
        return tf.raw_ops.VariableShape(input=self.rows.handle, out_type=tf.int64)[0]


def check_spare_rows(spare_rows, updatable: bool) -> None:
    """``spare_rows``: None or an integer >= 0, and only for an updatable export."""
    if spare_rows is None:
        return
    if not updatable:
        raise UsageError("export_saved_model: spare_rows: only an updatable export (updatable=True) has spare rows")
    if isinstance(spare_rows, bool) or not isinstance(spare_rows, (int, np.integer)) or not 0 <= spare_rows <= 2**40:
        raise UsageError(f"export_saved_model: spare_rows: must be None or an integer in [0, 2**40], got "
                         f"{spare_rows!r}")
