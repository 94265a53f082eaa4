"""The one store call of the TF layer and the Keras layer, and the numpy_function that runs it.

Every lookup -- a FeatureSpec lookup (alone or in its batch's fused call, TF-20), a
graph-modification lookup (its segment of the table's merged call, GRAPH-1), an eager
lookup and a Keras ``Embedding`` lookup -- gets its six outputs from ``lookup_outputs``
(or, for a segment of a call already made, from ``outputs_of``): unique keys, rows,
inverse index, admitted flags, the step the lookup used and its result token (TF-18).
The owner of the store (a ``SparseTable`` or a Keras ``Embedding``) supplies
``lookup_batch`` (the store lookup, the step a training lookup takes), ``keep_result`` and
``take_result_for``; ``apply_gradient`` is the apply's store call, reusing the kept result.
"""
from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from .distributed import each_table
from .table import NO_RESULT

OUTPUTS = (tf.int64, tf.float32, tf.int64, tf.bool, tf.int64, tf.int64)   # keys, rows, inverse, admitted, step, token


def call_store(owner, ids, *, is_train: bool, step, timestamp=None, pad_to=None):
    """The store lookup of ``ids``: ``(LookupResult, the step it used)``."""
    return owner.lookup_batch(ids, is_train=is_train, step=step, timestamp=timestamp, pad_to=pad_to)


def outputs_of(result, step_used, token, segment: slice = slice(None)) -> tuple:
    """The six lookup outputs of ``result`` (its inverse index restricted to ``segment``)."""
    return (result.unique_keys, result.rows, result.inverse.reshape(-1)[segment], result.admitted,
            np.int64(step_used), np.int64(token))


def lookup_outputs(owner, ids, *, is_train: bool, step, timestamp=None, pad_to=None) -> tuple:
    """One store call and its six outputs; a training lookup keeps its result for its apply (TF-18)."""
    result, step_used = call_store(owner, ids, is_train=is_train, step=step, timestamp=timestamp, pad_to=pad_to)
    return outputs_of(result, step_used, owner.keep_result(result) if is_train else NO_RESULT)


def apply_gradient(owner, keys, grads, step, token, **options) -> int:
    """The store's apply of ``grads`` for ``keys``: with the lookup's kept result when ``token`` names
    the lookup whose unique keys these are (TF-18, KERAS-12: no second dedup, its row handles), else by
    key; the same state bit for bit either way (OPT-9).  ``options``: the store apply's (learning_rate)."""
    result = owner.take_result_for(int(token), keys)
    return owner.store.apply_gradients(keys if result is None else result, grads, step=int(step), **options)


class MergedShare:
    """Set by the graph modifier: this lookup reads segment ``segment`` of the
    table's merged store call (``source.current``) instead of calling the store."""

    def __init__(self):
        self.source = None
        self.segment = 0


class Member:
    """One table's part of a store call: its inputs, the outputs the graph reads and, for a
    graph-modification lookup, the share of its table's merged call it reads."""

    def __init__(self, table, merged, step, stamp, has_timestamp, pad_to):
        self.table, self.merged, self.step, self.stamp = table, merged, step, stamp
        self.has_timestamp, self.pad_to = has_timestamp, pad_to
        self.share = MergedShare()
        self.outputs: list = []

    def run(self, is_train: bool, ids, step_value, stamp_value) -> tuple:
        share = self.share
        if share.source is not None:      # merged by the graph modifier: read this lookup's segment
            result, offsets, step_used = share.source.current
            # one segment of several: the gradients of the segments are concatenated and sent as keys
            alone = is_train and len(share.source.records) == 1
            return outputs_of(result, step_used, self.table.keep_result(result) if alone else NO_RESULT,
                              slice(offsets[share.segment], offsets[share.segment + 1]))
        return lookup_outputs(self.table, ids, is_train=is_train, step=step_value,
                              timestamp=stamp_value if self.has_timestamp else None, pad_to=self.pad_to)


def build_call(members: list[Member], is_train: bool, on_run=None):
    """The numpy_function running the store calls of ``members`` (in the given order) as one op:
    side by side on one rank, one after the other on several (``distributed.each_table``).
    Returns its outputs, six per member; ``on_run`` is called whenever it runs."""
    inputs = [tensor for m in members for tensor in (m.merged, m.step, m.stamp)]

    def run(*values):
        if on_run is not None:
            on_run()
        parts = each_table([functools.partial(m.run, is_train, *values[3 * i:3 * i + 3])
                            for i, m in enumerate(members)])
        return [tensor for part in parts for tensor in part]

    return tf.numpy_function(run, inputs, list(OUTPUTS) * len(members), stateful=True, name="store_lookup")
