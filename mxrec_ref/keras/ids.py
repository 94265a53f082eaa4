"""What an ``Embedding`` accepts as ids, and how embeddings are combined (KERAS-4, KERAS-5).

Every form of ids becomes one flat int64 key vector (one store call per batch)
plus a ``Layout`` that turns the looked-up rows back into the output:

- a dense tensor ``[..., k]``: combiner None gives ``shape(ids) + [dim]``; a
  combiner reduces the last axis;
- a ``tf.RaggedTensor`` ``[batch, (k)]``: combiner None gives a ragged
  ``[batch, (k), dim]``; a combiner gives ``[batch, dim]``;
- a ``tf.SparseTensor`` ``[batch, k]``: needs a combiner; ``[batch, dim]``.

Combiners (KERAS-4) follow ``tf.nn.embedding_lookup_sparse`` without weights: the same
``sparse_segment_{sum,mean,sqrt_n}`` ops on the unique rows and the inverse
index, so a row with no ids is zeros and results match TF's bit for bit.

String ids (tf.string) become keys by ``string_keys``: FarmHash Fingerprint64
of the UTF-8 bytes modulo 2**63 - 1 (``tf.strings.to_hash_bucket_fast``), a
non-negative int64 that is the same on every platform, TF version and backend
(the hash is computed in the graph, before the store sees a key).
"""
from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from ..errors import UsageError
from ..readers import STRING_KEY_BUCKETS       # the project's one string key function (KERAS-5, PLAN-13)
from ..tf.keys import int64_keys

COMBINERS = (None, "sum", "mean", "sqrtn")


def string_keys(ids):
    """The int64 keys of string ids (KERAS-5): Fingerprint64(utf-8 bytes) mod (2**63 - 1)."""
    return tf.strings.to_hash_bucket_fast(ids, STRING_KEY_BUCKETS)


def check_combiner(table: str, combiner) -> None:
    if combiner not in COMBINERS:
        raise UsageError(f"table {table!r}: combiner: must be one of {COMBINERS}, got {combiner!r}")


@dataclass
class Layout:
    """How rows looked up for ``flat`` keys are put back into the output's shape."""

    kind: str                 # "dense", "ragged" or "sparse"
    ids: object               # the original ids (for shapes and ragged row partitions)
    segment_ids: object = None
    nrows: object = None


def flatten(table: str, ids, key_dtype: str, combiner):
    """(flat int64 keys, Layout).  Errors name the table and the parameter."""
    if isinstance(ids, tf.SparseTensor):
        if combiner is None:
            raise UsageError(f"table {table!r}: combiner: tf.SparseTensor ids need a combiner "
                             f"('sum', 'mean' or 'sqrtn'), as tf.nn.embedding_lookup_sparse")
        if ids.shape.rank not in (None, 2):
            raise UsageError(f"table {table!r}: ids: a tf.SparseTensor of ids must be 2-D [batch, k], "
                             f"got shape {ids.shape}")
        keys = _keys(table, ids.values, key_dtype)
        return keys, Layout("sparse", ids, segment_ids=ids.indices[:, 0], nrows=ids.dense_shape[0])
    if isinstance(ids, tf.RaggedTensor):
        if ids.ragged_rank != 1 or ids.shape.rank != 2:
            raise UsageError(f"table {table!r}: ids: a tf.RaggedTensor of ids must be [batch, (k)] (ragged rank 1), "
                             f"got shape {ids.shape} with ragged rank {ids.ragged_rank}")
        keys = _keys(table, ids.flat_values, key_dtype)
        return keys, Layout("ragged", ids, segment_ids=ids.value_rowids(), nrows=ids.nrows())
    ids = tf.convert_to_tensor(ids)
    if combiner is not None and ids.shape.rank == 0:
        raise UsageError(f"table {table!r}: combiner: a combiner reduces the last axis of the ids; got a scalar")
    return tf.reshape(_keys(table, ids, key_dtype), [-1]), Layout("dense", ids)


def _keys(table: str, values, key_dtype: str):
    if values.dtype == tf.string:
        if key_dtype != "int64":
            raise UsageError(f"table {table!r}: ids: string ids hash to int64 keys; the table's key_dtype is "
                             f"{key_dtype}")
        return string_keys(values)
    if not values.dtype.is_integer:
        raise UsageError(f"table {table!r}: ids: must be integers or strings, got {values.dtype.name}")
    return int64_keys(table, values)          # uint64 ids beyond int64 refused (LKP-7)


def assemble(layout: Layout, rows, inverse, combiner, dim: int):
    """The output from ``rows`` (one per unique key, or a whole serving table) and
    ``inverse`` (each flat id's row in ``rows``)."""
    if layout.kind == "dense":
        ids = layout.ids
        if combiner is None:
            out = tf.reshape(tf.gather(rows, inverse), tf.concat([tf.shape(ids), [dim]], axis=0))
            out.set_shape(ids.shape.concatenate([dim]))
            return out
        width = tf.shape(ids)[-1]
        n = tf.size(inverse)
        segment_ids = tf.range(n) // tf.maximum(width, 1)
        nrows = n // tf.maximum(width, 1)
        out = _combine(rows, inverse, segment_ids, nrows, combiner)
        out = tf.reshape(out, tf.concat([tf.shape(ids)[:-1], [dim]], axis=0))
        out.set_shape(ids.shape[:-1].concatenate([dim]))
        return out
    if layout.kind == "ragged" and combiner is None:
        return layout.ids.with_flat_values(tf.gather(rows, inverse))
    out = _combine(rows, inverse, layout.segment_ids, layout.nrows, combiner)
    out.set_shape([layout.ids.shape[0], dim])
    return out


def _combine(rows, inverse, segment_ids, nrows, combiner):
    """tf.nn.embedding_lookup_sparse's reduction: rows[inverse] summed per segment."""
    op = {"sum": tf.sparse.segment_sum, "mean": tf.sparse.segment_mean, "sqrtn": tf.sparse.segment_sqrt_n}[combiner]
    return op(rows, tf.cast(inverse, tf.int32), tf.cast(segment_ids, tf.int32),
              num_segments=tf.cast(nrows, tf.int32))
