"""The reference's hot block (spec/hot.md): which keys are hot and the copy of their rows.

When and which keys become hot is mxrec_ref/hot.py's policy, shared by both backends; the fast
twins carry the same names in mxrec_ref/fast/hot.py and cext/_hot.pxi.
"""
from __future__ import annotations

import numpy as np

from .. import hot as policy
from .table import Table
from .tiers import admitted_entries


def refresh_hot(table: Table, capacity: int) -> None:
    """HOT-2: the ``capacity`` keys holding a row with the highest counts become the hot set."""
    keys, counts, _ = admitted_entries(table)
    set_hot(table, policy.choose_hot_keys(keys, counts, capacity))


def set_hot(table: Table, keys: np.ndarray) -> None:
    """The hot set becomes ``keys`` (the chosen ones, in that order) and the block a copy of their rows
    (HOT-2)."""
    table.hot = {key: i for i, key in enumerate(keys.tolist())}
    table.hot_block = table.values[[table.row_of[k] for k in keys.tolist()]].reshape(-1, table.dim)


def write_through(table: Table, keys) -> None:
    """The hot block follows its rows (HOT-3): after an update, copy each hot key's row again."""
    for key in keys:
        if key in table.hot:
            table.hot_block[table.hot[key]] = table.values[table.row_of[key]]
