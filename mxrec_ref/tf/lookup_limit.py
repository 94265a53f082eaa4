"""The per-graph limit on lookups of one table (TF-17).

mxRec caps the lookups of one table in one step at ``MULTI_LOOKUP_TIMES``
(128): every lookup of a table in a graph becomes one segment of the table's
merged store call (TF-2, TF-3), so the cap bounds that call and the graph a
Python loop can build by mistake.  A step is one graph -- a ``tf.Graph`` or
one trace of a ``tf.function`` -- so lookups are counted per graph: retracing
builds a new graph with its own count and never accumulates.  Eager lookups
run one at a time, each its own store call, so they are not counted.
"""
from __future__ import annotations

import tensorflow as tf

from .constants import MULTI_LOOKUP_TIMES
from .graph_state import existing_state, graph_state


def lookups_in_graph(owner, graph=None) -> dict[bool, int]:
    """``{True: training lookups, False: evaluation lookups}`` of ``owner`` built in
    ``graph`` (default: the current default graph)."""
    state = existing_state(graph)
    counts = state.lookup_counts if state is not None else {}
    return {mode: counts.get((id(owner), mode), 0) for mode in (True, False)}


def count_lookup(owner, table_name: str, is_train: bool, api: str) -> int:
    """Count one lookup of ``owner`` (a table object) in the current graph; raise a
    ValueError naming the table when it is the 129th of its mode there.
    Returns the count (0 eagerly: not counted)."""
    if tf.executing_eagerly():
        return 0
    counts = graph_state().lookup_counts
    key = (id(owner), bool(is_train))
    if counts.get(key, 0) >= MULTI_LOOKUP_TIMES:
        raise ValueError(f"table {table_name!r}: {api}: more than {MULTI_LOOKUP_TIMES} lookups of one table in "
                         f"{'training' if is_train else 'evaluation'} in one graph (one tf.function trace); "
                         f"merge the ids into one lookup")
    counts[key] = counts.get(key, 0) + 1
    return counts[key]
