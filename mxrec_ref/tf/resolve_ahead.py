"""``resolve_keys_ahead`` for the TF layer's eager lookups (spec/pipeline.md, PIPE-9).

``sparse_lookup(table, ids, modify_graph=True)`` run eagerly or inside a ``tf.function`` (TF-8) has no insert
function and no graph modification to put the key work in; ``resolve_keys_ahead(dataset, {feature: table})``
maps the training dataset so each batch's keys for each table -- cast and flattened as that lookup does --
are resolved ahead in tf.data and queued at the table, whose lookup takes them by content (key_pipeline.py,
the same path as the insert function's and the Keras layer's).  FeatureSpec lookups need nothing more: the
insert function resolves their batches ahead, eagerly too (PIPE-8).
"""
from __future__ import annotations

import tensorflow as tf

from ..errors import UsageError
from .key_pipeline import map_resolving_ahead
from .keys import int64_keys
from .table import SparseTable


def _table_keys(table, ids) -> tf.Tensor:
    """The keys a ``sparse_lookup(table, ids, modify_graph=True)`` run eagerly or in a tf.function passes its
    store (lookup.py): the ids cast (LKP-7) and flattened."""
    return tf.reshape(int64_keys(table.table_name, tf.convert_to_tensor(ids)), [-1])


def resolve_keys_ahead(dataset: tf.data.Dataset, tables: dict) -> tf.data.Dataset:
    """``dataset`` mapped so that each batch's ids for the given tables are resolved ahead while the previous
    step trains, for ``sparse_lookup(table, ids, modify_graph=True)`` run eagerly or in a ``tf.function``
    (TF-8), which has no insert function and no graph modification (PIPE-9).  ``tables``: ``{feature: table}``
    (or a list of tables), ``feature`` the key of ``x``'s dict, a position in its tuple, or None when ``x``
    is one tensor; list several lookups of one table in their order.  Map only the training data."""
    if not isinstance(tables, dict) or not tables:
        raise UsageError("resolve_keys_ahead: tables: must be a non-empty dict {feature: table from create_table}")
    owners = []
    for feature, value in tables.items():
        for table in (list(value) if isinstance(value, (list, tuple)) else [value]):
            if not isinstance(table, SparseTable):
                raise UsageError(f"resolve_keys_ahead: tables: feature {feature!r} maps to {type(table).__name__}; "
                                 f"expected tables from create_table")
            owners.append((feature, table))
    return map_resolving_ahead(dataset, owners, _table_keys, "resolve_keys_ahead: tables")
