"""Serving export (spec/keras.md, SERVE-1..SERVE-3): a SavedModel in which every
table is a ``tf.lookup.StaticHashTable`` of its admitted keys -> row index and a
``tf.Variable`` of those rows plus one default row, so the model serves with
TensorFlow alone -- no mxrec-ref import and no ``PyFunc`` op.

``export_saved_model(session, inputs, outputs, path)`` exports a TF1 graph built
with ``sparse_lookup``: the graph is rebuilt with each table's store call
replaced by the static lookup.  The Keras export (``mxrec_ref.keras``) uses
``serving_table`` for its layers.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..state import TableState

PYFUNC_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


def serving_arrays(state: TableState, default_row) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, row index of each key, rows): the admitted keys in key order, their
    rows, and last the default row that every other key gets (SERVE-1)."""
    keys = np.asarray(state.keys, dtype=np.int64)
    rows = np.concatenate([np.asarray(state.values, dtype=np.float32),
                           np.asarray(default_row, dtype=np.float32).reshape(1, -1)], axis=0)
    return keys, np.arange(len(keys), dtype=np.int64), rows


def serving_table(name: str, state: TableState, default_row):
    """(StaticHashTable keys -> row index, default len(keys); tf.Variable of the rows)."""
    keys, index, rows = serving_arrays(state, default_row)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.int64), tf.constant(index, tf.int64)),
        default_value=tf.constant(len(keys), tf.int64), name=f"{name}_serving_keys")
    variable = tf.Variable(rows, trainable=False, name=f"{name}_serving_rows")
    return table, variable


def check_no_pyfunc(graph_def, where: str) -> None:
    """Raise if a PyFunc op is left in ``graph_def`` or its functions (SERVE-2)."""
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    left = sorted({n.name for n in nodes if n.op in PYFUNC_OPS})
    if left:
        raise RuntimeError(f"{where}: the serving graph still holds Python ops {left[:5]}; they cannot load "
                           f"without this process")
