"""Integer id tensors as the store's int64 keys (LKP-7).

Keys are int64 (CON-2).  Every integer dtype but uint64 fits; a plain ``tf.cast`` of a
uint64 id at or above 2**63 wraps: 2**64 - 1 would become the padding key -1 (and be
dropped), 2**63 + 5 a negative key.  The store refuses such keys (CON-2), but after the
cast it never sees them, so they are refused here: when the ids are known while the graph
is built (constants, eager tensors) with ``KeyInputError``, else by an ``Assert`` op the
cast depends on, so the step fails before the store is called.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..errors import KeyInputError

INT64_MAX = 2**63 - 1


def _message(table: str) -> str:
    return (f"table {table!r}: ids: uint64 ids above {INT64_MAX} (2^63 - 1) do not fit the int64 keys; "
            f"a cast would wrap them to negative keys or the padding key -1")


def int64_keys(table: str, ids):
    """``ids`` (an integer tensor) cast to int64, uint64 ids beyond int64 refused (LKP-7)."""
    if ids.dtype != tf.uint64:
        return tf.cast(ids, tf.int64)
    known = tf.get_static_value(ids)
    if known is not None:
        known = np.asarray(known, dtype=np.uint64)
        if known.size and int(known.max()) > INT64_MAX:
            raise KeyInputError(f"{_message(table)}; got {int(known.max())}")
        return tf.cast(ids, tf.int64)
    fits = tf.reduce_all(ids <= tf.constant(INT64_MAX, tf.uint64))
    check = tf.debugging.Assert(fits, [_message(table) + "; the largest id of the batch:", tf.reduce_max(ids)],
                                summarize=1, name=f"{table}_ids_fit_int64")
    with tf.control_dependencies([check]):
        return tf.cast(ids, tf.int64)

