"""The reference's tier moves (spec/tiers.md, CON-10): what the storage tiers take out of an
in-memory table and put back.  The fast twins carry the same names in mxrec_ref/fast/tiers.py
and cext/_tiers.pxi.  The fast path's placement kernels there (``DeviceLRU``, TIER-4, and
``HostHeap``, TIER-5, both kept incrementally as TIER-12 says) have their reference twins in
mxrec_ref/tiers/placement.py (``RefDevicePlacement``, ``PyHostHeap``), which the wrapper shares.
"""
from __future__ import annotations

import numpy as np

from .eviction import remove_keys
from .expansion import ensure_rows, take_row
from .table import Table


def rows_of(table: Table, keys: np.ndarray):
    """Copies of what ``keys`` (all holding a row) carry to another tier:
    (values, {slot: values}, counts, last_seen)."""
    rows = np.array([table.row_of[k] for k in keys.tolist()], dtype=np.int64)
    return (table.values[rows].copy(), {name: array[rows].copy() for name, array in table.slots.items()},
            *entries_of(table, keys))


def entries_of(table: Table, keys: np.ndarray):
    """(counts, last_seen) of ``keys`` (all holding a row)."""
    return (np.array([table.count[k] for k in keys.tolist()], dtype=np.int64),
            np.array([table.last_seen[k] for k in keys.tolist()], dtype=np.int64))


def drop_rows(table: Table, keys: np.ndarray) -> None:
    """Forget ``keys`` (all holding a row; their rows moved to another tier): rows go on the
    free stack in the given order, as eviction frees them (EXP-4); hot ones leave the hot set (HOT-2)."""
    remove_keys(table, keys)


def put_rows(table: Table, keys, values, slots, counts, last_seen, capacity: int) -> None:
    """Take back ``keys`` (not in the history) with the state they carry; rows are handed out
    as for new keys (EXP-4)."""
    rows = []
    for key, count, seen in zip(keys.tolist(), counts.tolist(), last_seen.tolist()):
        row = table.row_of[key] = take_row(table)
        table.count[key] = count
        table.last_seen[key] = seen
        rows.append(row)
    ensure_rows(table, table.next_row, capacity)
    rows = np.array(rows, dtype=np.int64)
    table.values[rows] = values
    for name in table.slots:
        table.slots[name][rows] = slots[name]


def admitted_entries(table: Table):
    """(keys ascending, counts, last_seen) of every key holding a row."""
    keys = sorted(table.row_of)
    return (np.array(keys, dtype=np.int64), np.array([table.count[k] for k in keys], dtype=np.int64),
            np.array([table.last_seen[k] for k in keys], dtype=np.int64))
